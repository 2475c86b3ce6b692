//! Engine overhead with many concurrent rollouts against an instant scripted policy.
//!
//! `cargo run --release -p dojo-bench --no-default-features --example rollout_overhead -- [ROLLOUTS] [STEPS]`
//!
//! 1. Memory per idle rollout: ROLLOUTS agent loops each parked inside an LLM call (the policy
//!    blocks until released); RSS growth / ROLLOUTS.
//! 2. Engine CPU per step: ROLLOUTS rollouts × STEPS steps of `str_replace_editor view` on a small
//!    file through dojo-agent's real loop and tools (a host-directory workspace, so no sandbox and
//!    no child process: what is measured is the loop, parsing, tools, records), CPU time of this
//!    process (user + system) / steps.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dojo_agent::{Agent, AgentConfig, LocalWorkspace, TaskInput, ToolRegistry};
use dojo_llm::{BoxFuture, ChatBackend, ChatRequest, ChatResponse, LlmError};
use dojo_rollout::gold::Action;
use dojo_rollout::policy::ScriptedBackend;

fn proc_stat() -> (f64, f64) {
    // (cpu seconds of this process, RSS MiB)
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let tick = 100.0; // USER_HZ on Linux
    let cpu = (f.get(11).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0))
        / tick;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let rss_kb = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    (cpu, rss_kb / 1024.0)
}

/// A policy that parks every call until released.
struct Parked {
    parked: Arc<AtomicUsize>,
    release: Arc<tokio::sync::Notify>,
}

impl ChatBackend for Parked {
    fn complete(&self, _req: ChatRequest) -> BoxFuture<'_, Result<ChatResponse, LlmError>> {
        Box::pin(async move {
            let wait = self.release.notified();
            self.parked.fetch_add(1, Ordering::SeqCst);
            wait.await;
            Err(LlmError::Backend {
                endpoint: "parked".into(),
                detail: "released".into(),
            })
        })
    }
}

fn config(steps: u32) -> AgentConfig {
    AgentConfig {
        tool_set: "swe-master".into(),
        action_format: dojo_agent::ActionFormat::Native,
        max_steps: steps + 1,
        ..Default::default()
    }
}

async fn run_one(
    backend: Arc<dyn ChatBackend>,
    ws: Arc<LocalWorkspace>,
    i: usize,
    steps: u32,
) -> dojo_trajectory::Trajectory {
    let agent = Agent::new(
        config(steps),
        ToolRegistry::named("swe-master").unwrap_or_default(),
        backend,
    )
    .expect("agent");
    let input = TaskInput {
        task_id: format!("t{i}"),
        vars: [("problem_statement".to_string(), "Fix the bug.".into())]
            .into_iter()
            .collect(),
        ..Default::default()
    };
    agent.run(&*ws, &input).await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let n = args.first().copied().unwrap_or(256);
    let steps = args.get(1).copied().unwrap_or(30) as u32;
    let dir = tempfile::tempdir().expect("tempdir");
    let body: String = (1..=60).map(|i| format!("x_{i} = {i}\n")).collect();
    std::fs::write(dir.path().join("mod.py"), body).expect("write");
    // A git repository, so the final diff of each rollout works as in a pristine tree.
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(dir.path())
            .output()
            .expect("git")
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&[
        "-c",
        "user.name=b",
        "-c",
        "user.email=b@b",
        "commit",
        "-qm",
        "base",
    ]);
    let ws = Arc::new(LocalWorkspace::new(dir.path()));

    // 1. Idle rollouts.
    let (_, rss0) = proc_stat();
    let parked = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(tokio::sync::Notify::new());
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let backend: Arc<dyn ChatBackend> = Arc::new(Parked {
            parked: parked.clone(),
            release: release.clone(),
        });
        let ws = ws.clone();
        set.spawn(run_one(backend, ws, i, steps));
    }
    while parked.load(Ordering::SeqCst) < n {
        tokio::task::yield_now().await;
    }
    let (_, rss1) = proc_stat();
    release.notify_waiters();
    while set.join_next().await.is_some() {}
    println!(
        "idle: {n} rollouts parked in an LLM call: RSS {rss0:.1} -> {rss1:.1} MiB = {:.1} KiB per idle rollout",
        (rss1 - rss0) * 1024.0 / n as f64
    );

    // 2. Busy rollouts: STEPS view steps then submit, instant policy.
    let mut actions: Vec<Action> = (0..steps)
        .map(|k| Action::View {
            path: "/testbed/mod.py".into(),
            range: Some((1 + (k as usize % 50), 10 + (k as usize % 50))),
        })
        .collect();
    actions.push(Action::Submit);
    let (cpu0, _) = proc_stat();
    let t0 = std::time::Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let backend: Arc<dyn ChatBackend> =
            Arc::new(ScriptedBackend::gold("bench", actions.clone()));
        let ws = ws.clone();
        set.spawn(run_one(backend, ws, i, steps));
    }
    let mut total_steps = 0usize;
    let mut bad = 0usize;
    while let Some(r) = set.join_next().await {
        if let Ok(t) = r {
            total_steps += t.steps.len();
            bad += t
                .steps
                .iter()
                .filter(|s| s.tool.as_ref().is_some_and(|o| o.error))
                .count();
            if t.stop_reason != dojo_trajectory::StopReason::Submitted {
                eprintln!("unexpected stop {} ({:?})", t.stop_reason, t.stop_detail);
            }
        }
    }
    let (cpu1, rss2) = proc_stat();
    let wall = t0.elapsed().as_secs_f64();
    println!(
        "busy: {n} rollouts x {} steps = {total_steps} steps in {wall:.2} s wall; CPU {:.2} s = {:.0} us per step ({bad} tool errors); RSS {rss2:.1} MiB",
        steps + 1,
        cpu1 - cpu0,
        (cpu1 - cpu0) * 1e6 / total_steps.max(1) as f64
    );
}
