//! Agent-runtime benchmarks. Run:
//!
//! ```text
//! cargo run --release -p dojo-bench --no-default-features --example agent_bench
//! ```
//!
//! 1. Engine CPU per agent step, excluding the command: CPU time of this process (all threads,
//!    children excluded) divided by steps, for rollouts against an instant in-process policy.
//!    `view` steps spawn nothing (pure engine); `execute_bash true` steps include the in-process
//!    part of spawning in the sandbox. Run with 1 and 32 concurrent rollouts.
//! 2. Memory per idle rollout: RSS growth with 256 rollouts all waiting on the policy.
//! 3. `execute_bash true` round trip through the tool vs a bare spawn of `true` / `bash -c true`.

use dojo_bench::{cpu_time, host_line};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dojo_agent::action::{Call, render};
use dojo_agent::{ActionFormat, Agent, AgentConfig, TaskInput, ToolContext, ToolRegistry};
use dojo_llm::{
    BoxFuture, ChatBackend, ChatMessage, ChatRequest, ChatResponse, Choice, LlmError, Usage,
};
use dojo_sandbox::{ExecRequest, PristineStore, Sandbox, SandboxOptions, Source};
use serde_json::{Map, Value, json};

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// A policy that answers instantly with the same call `steps - 1` times, then `submit`.
struct InstantPolicy {
    turn: ChatMessage,
    submit: ChatMessage,
    steps: usize,
    calls: Mutex<std::collections::HashMap<String, usize>>,
    gate: Option<Arc<tokio::sync::Semaphore>>,
    waiting: AtomicUsize,
}

impl ChatBackend for InstantPolicy {
    fn complete(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatResponse, LlmError>> {
        Box::pin(async move {
            if let Some(g) = &self.gate {
                self.waiting.fetch_add(1, Ordering::SeqCst);
                let _p = g.acquire().await;
            }
            // Rollouts are told apart by their task text.
            let key = req.messages.get(1).map(|m| m.text()).unwrap_or_default();
            let n = {
                let mut c = self.calls.lock().unwrap();
                let n = c.entry(key).or_insert(0);
                *n += 1;
                *n
            };
            let msg = if n >= self.steps {
                self.submit.clone()
            } else {
                self.turn.clone()
            };
            Ok(ChatResponse {
                choices: vec![Choice {
                    index: 0,
                    message: msg,
                    finish_reason: Some("stop".into()),
                    logprobs: None,
                    token_ids: None,
                    extra: Map::new(),
                }],
                usage: Some(Usage {
                    prompt_tokens: 1000,
                    completion_tokens: 50,
                    total_tokens: 1050,
                }),
                ..Default::default()
            })
        })
    }
}

fn xml(name: &str, args: Value) -> ChatMessage {
    render(
        ActionFormat::Xml,
        "I will run a command.",
        &Call {
            name: name.into(),
            arguments: args.as_object().cloned().unwrap(),
            id: None,
        },
    )
}

fn backend(
    turn: ChatMessage,
    steps: usize,
    gate: Option<Arc<tokio::sync::Semaphore>>,
) -> Arc<InstantPolicy> {
    Arc::new(InstantPolicy {
        turn,
        submit: xml("submit", json!({})),
        steps,
        calls: Mutex::default(),
        gate,
        waiting: AtomicUsize::new(0),
    })
}

fn task(i: usize) -> TaskInput {
    let mut vars = Map::new();
    vars.insert(
        "problem_statement".into(),
        json!(format!("bench task {i}: fix mean([]).")),
    );
    TaskInput {
        task_id: format!("bench-{i}"),
        sample_index: 0,
        vars,
        ..Default::default()
    }
}

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

async fn engine_cpu(
    pristine: &dojo_sandbox::Pristine,
    label: &str,
    turn: ChatMessage,
    concurrency: usize,
    steps: usize,
) {
    let mut sandboxes = Vec::new();
    for _ in 0..concurrency {
        sandboxes.push(
            Sandbox::create(pristine, None, &SandboxOptions::default())
                .await
                .expect("sandbox"),
        );
    }
    let b = backend(turn, steps, None);
    let agent = Arc::new(
        Agent::new(
            AgentConfig {
                tool_set: "dojo".into(),
                max_steps: steps as u32 + 1,
                ..Default::default()
            },
            ToolRegistry::named("dojo").unwrap(),
            b,
        )
        .unwrap(),
    );
    let cpu0 = cpu_time();
    let wall0 = Instant::now();
    let mut handles = Vec::new();
    for (i, sb) in sandboxes.into_iter().enumerate() {
        let agent = agent.clone();
        handles.push(tokio::spawn(async move {
            let t = agent.run(&sb, &task(i)).await;
            assert_eq!(t.stop_reason.as_str(), "submitted", "{:?}", t.stop_detail);
            let n = t.steps.len();
            sb.teardown().await.ok();
            n
        }));
    }
    let mut total_steps = 0;
    for h in handles {
        total_steps += h.await.unwrap();
    }
    let cpu = cpu_time() - cpu0;
    let wall = wall0.elapsed();
    println!(
        "| {label} | {concurrency} | {total_steps} | {:.1} µs | {:.0} steps/s |",
        cpu.as_secs_f64() * 1e6 / total_steps as f64,
        total_steps as f64 / wall.as_secs_f64()
    );
}

async fn idle_memory(rollouts: usize) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.py"), "x = 1\n").unwrap();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let b = backend(xml("submit", json!({})), 1, Some(gate.clone()));
    let agent = Arc::new(
        Agent::new(
            AgentConfig {
                tool_set: "dojo".into(),
                ..Default::default()
            },
            ToolRegistry::named("dojo").unwrap(),
            b.clone(),
        )
        .unwrap(),
    );
    let ws = Arc::new(dojo_agent::LocalWorkspace::new(dir.path()));
    let rss0 = rss_bytes();
    let mut handles = Vec::new();
    for i in 0..rollouts {
        let (agent, ws) = (agent.clone(), ws.clone());
        handles.push(tokio::spawn(async move { agent.run(&*ws, &task(i)).await }));
    }
    while b.waiting.load(Ordering::SeqCst) < rollouts {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let rss1 = rss_bytes();
    gate.add_permits(rollouts);
    for h in handles {
        h.await.unwrap();
    }
    println!(
        "| {rollouts} rollouts waiting on the policy (LocalWorkspace, no sandbox) | {:.1} KiB per rollout |",
        (rss1.saturating_sub(rss0)) as f64 / 1024.0 / rollouts as f64
    );
}

async fn spawn_vs_tool(sb: &Sandbox, n: usize) {
    let mut rows: Vec<(&str, Vec<Duration>)> = Vec::new();
    let mut time = |label: &'static str, v: Vec<Duration>| rows.push((label, v));

    let mut v = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        tokio::process::Command::new("true").status().await.unwrap();
        v.push(t.elapsed());
    }
    time("bare spawn `true` (host, tokio::process)", v);
    let mut v = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        tokio::process::Command::new("bash")
            .args(["-c", "true"])
            .status()
            .await
            .unwrap();
        v.push(t.elapsed());
    }
    time("bare spawn `bash -c true` (host)", v);
    let mut v = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        sb.exec(&ExecRequest::new(["true"])).await.unwrap();
        v.push(t.elapsed());
    }
    time("Sandbox::exec `true`", v);
    let reg = ToolRegistry::named("dojo").unwrap();
    let mut ctx = ToolContext::new(sb, Duration::from_secs(30));
    let args = json!({"command": "true"}).as_object().cloned().unwrap();
    let mut v = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let out = reg.call(&mut ctx, "execute_bash", &args).await.unwrap();
        assert_eq!(out.exit_code, Some(0));
        v.push(t.elapsed());
    }
    time(
        "`execute_bash true` tool round trip (sandbox, bash -c, observation)",
        v,
    );
    println!("\n| round trip ({n} runs each) | median | p90 |\n|---|---|---|");
    for (label, mut v) in rows {
        let (m, p) = (percentile(&mut v, 0.5), percentile(&mut v, 0.9));
        println!(
            "| {label} | {:.2} ms | {:.2} ms |",
            m.as_secs_f64() * 1e3,
            p.as_secs_f64() * 1e3
        );
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let home = tempfile::tempdir().unwrap();
    // SAFETY: single-threaded at this point of startup as far as env access goes.
    unsafe { std::env::set_var("DOJO_HOME", home.path()) };
    if !dojo_sandbox::doctor::namespaces_usable() {
        println!("SKIPPED: namespaces unavailable; the sandbox benchmarks need them");
        return;
    }
    let src = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(src.path().join("calc")).unwrap();
    std::fs::write(
        src.path().join("calc/stats.py"),
        "def mean(xs):\n    return sum(xs) / len(xs)\n",
    )
    .unwrap();
    let pristine = PristineStore::open()
        .unwrap()
        .build(&Source::Dir {
            path: src.path().to_path_buf(),
        })
        .unwrap();
    println!("{}", host_line());
    // First, while the heap is fresh: freed memory of later runs would hide the growth.
    println!("\n| idle rollouts | memory |\n|---|---|");
    idle_memory(256).await;
    println!(
        "\n| step kind | concurrent rollouts | steps | engine CPU per step | throughput |\n|---|---|---|---|---|"
    );
    let view = xml(
        "str_replace_editor",
        json!({"command": "view", "path": "/testbed/calc/stats.py"}),
    );
    let bash = xml("execute_bash", json!({"command": "true"}));
    engine_cpu(&pristine, "`view` (no process)", view.clone(), 1, 100).await;
    engine_cpu(&pristine, "`view` (no process)", view, 32, 100).await;
    engine_cpu(&pristine, "`execute_bash true`", bash.clone(), 1, 100).await;
    engine_cpu(&pristine, "`execute_bash true`", bash, 32, 50).await;
    let sb = Sandbox::create(&pristine, None, &SandboxOptions::default())
        .await
        .unwrap();
    spawn_vs_tool(&sb, 200).await;
    sb.teardown().await.ok();
}
