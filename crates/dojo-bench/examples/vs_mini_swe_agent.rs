//! The same scripted 30-step trajectory run by mini-swe-agent and by dojo.
//!
//! ```text
//! bash scripts/bench-vs-mini-swe-agent.sh        # installs mini-swe-agent, then runs this
//! ```
//!
//! Both agents get the same 29 bash commands on the real toolz 1.2.0 sdist (explore, reproduce,
//! edit with `sed`, rerun, inspect tests) followed by their own submit action, from an instant
//! in-process scripted model: mini-swe-agent's `DeterministicToolcallModel`, and for dojo a
//! `ChatBackend` answering with native tool calls. So the comparison is the agent runtime and its
//! command execution, not a model. mini-swe-agent runs its `LocalEnvironment` (plain
//! `subprocess` in a host directory, no isolation); dojo runs once in a host directory
//! (`LocalWorkspace`, the like-for-like row) and once in its real sandbox (namespaces, overlay,
//! Landlock, seccomp), where sandbox creation and teardown are timed separately.
//!
//! "CPU" is the agent process's own user+system time (commands run in children and are excluded).

use dojo_bench::{cpu_time, host_line};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dojo_agent::action::{Call, render};
use dojo_agent::{
    ActionFormat, Agent, AgentConfig, LocalWorkspace, TaskInput, ToolRegistry, Workspace,
};
use dojo_llm::{BoxFuture, ChatBackend, ChatMessage, ChatRequest, ChatResponse, Choice, LlmError};
use dojo_sandbox::{PristineStore, Sandbox, SandboxOptions, Source};
use serde_json::{Map, Value, json};

const REPEATS: usize = 5;

/// The trajectory: 29 commands; the 30th step is each agent's own submit action.
const COMMANDS: &[&str] = &[
    "ls",
    "ls toolz",
    "grep -rn 'def get_in' toolz",
    "sed -n 300,345p toolz/dicttoolz.py",
    "grep -rn 'get_in' toolz --include=*.py | head -20",
    "wc -l toolz/*.py",
    "cat toolz/__init__.py",
    "python3.11 -c 'import toolz; print(toolz.__version__)'",
    // Put the task's bug in place, so the rest of the run reproduces and fixes it.
    "sed -i 's/except (KeyError, IndexError, TypeError):/except (KeyError, TypeError):/' toolz/dicttoolz.py",
    "printf 'from toolz import get_in\\nprint(get_in([0, 5], [[1]], \"dflt\"))\\n' > repro.py",
    "python3.11 repro.py; echo exit=$?",
    "grep -n 'except' toolz/dicttoolz.py",
    "sed -n 325,340p toolz/dicttoolz.py",
    "sed -i 's/except (KeyError, TypeError):/except (KeyError, IndexError, TypeError):/' toolz/dicttoolz.py",
    "python3.11 repro.py",
    "python3.11 -m py_compile toolz/dicttoolz.py && echo compiled",
    "ls toolz/tests",
    "grep -n 'def test_get_in' -A 20 toolz/tests/test_dicttoolz.py",
    "python3.11 -c \"from toolz import get_in; print(get_in(['a', 'b'], {'a': {}}, 'd'))\"",
    "python3.11 -c \"from toolz import get_in; print(get_in([0], [], 'd'))\"",
    "find . -name '*.py' | wc -l",
    "grep -rn 'IndexError' toolz | head",
    "head -50 toolz/itertoolz.py",
    "head -20 setup.cfg; true",
    "python3.11 -c 'import toolz.curried; print(len(dir(toolz.curried)))'",
    "sed -n 1,40p toolz/tests/test_dicttoolz.py",
    "rm repro.py",
    "ls",
    "echo done",
];

/// Answers instantly with the next scripted command, then `submit`.
struct Scripted {
    next: AtomicUsize,
}

fn call(name: &str, args: Value, i: usize) -> ChatMessage {
    render(
        ActionFormat::Native,
        "I will run a command.",
        &Call {
            name: name.into(),
            arguments: args.as_object().cloned().unwrap_or_default(),
            id: Some(format!("call_{i}")),
        },
    )
}

impl ChatBackend for Scripted {
    fn complete(&self, _req: ChatRequest) -> BoxFuture<'_, Result<ChatResponse, LlmError>> {
        Box::pin(async move {
            let i = self.next.fetch_add(1, Ordering::SeqCst);
            let message = match COMMANDS.get(i) {
                Some(cmd) => call("execute_bash", json!({ "cmd": cmd }), i),
                // R2E-Gym's submit action.
                None => call("finish", json!({"command": "submit"}), i),
            };
            Ok(ChatResponse {
                choices: vec![Choice {
                    index: 0,
                    message,
                    finish_reason: Some("tool_calls".into()),
                    logprobs: None,
                    token_ids: None,
                    extra: Map::new(),
                }],
                ..Default::default()
            })
        })
    }
}

fn agent() -> Agent {
    Agent::new(
        AgentConfig {
            tool_set: "r2e".into(),
            action_format: ActionFormat::Native,
            max_steps: COMMANDS.len() as u32 + 1,
            ..Default::default()
        },
        ToolRegistry::named("r2e").expect("r2e tool set"),
        Arc::new(Scripted {
            next: AtomicUsize::new(0),
        }),
    )
    .expect("agent")
}

fn task() -> TaskInput {
    let mut vars = Map::new();
    vars.insert(
        "problem_statement".into(),
        json!("Fix get_in so that a missing index returns the default."),
    );
    TaskInput {
        task_id: "toolz-get_in".into(),
        vars,
        ..Default::default()
    }
}

/// The run did the real work: the repro failed before the fix and printed the default after it.
fn check(t: &dojo_trajectory::Trajectory, label: &str) {
    assert_eq!(
        t.stop_reason.as_str(),
        "submitted",
        "{label}: {:?}",
        t.stop_detail
    );
    let obs = |step: usize| -> String {
        t.steps[step]
            .observation_messages
            .iter()
            .map(|&i| t.messages[i].text())
            .collect()
    };
    if std::env::var_os("BENCH_SHOW").is_some() {
        for i in 0..t.steps.len() {
            println!("--- {label} step {}\n{}", i + 1, obs(i));
        }
    }
    assert!(
        obs(10).contains("IndexError"),
        "{label}: step 11 {}",
        obs(10)
    );
    assert!(obs(14).contains("dflt"), "{label}: step 15 {}", obs(14));
}

#[derive(Default)]
struct Row {
    wall: Vec<Duration>,
    cpu: Vec<Duration>,
    setup: Vec<Duration>,
    steps: usize,
}

fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e3)
}

/// Unpack the sdist into `dir` (top directory stripped) and precompile its bytecode, as dojo's
/// pristine trees are, so neither side pays for compiling toolz on its first import.
fn unpack(sdist: &Path, dir: &Path) {
    std::fs::create_dir_all(dir).expect("mkdir");
    let ok = Command::new("tar")
        .arg("xzf")
        .arg(sdist)
        .arg("--strip-components=1")
        .arg("-C")
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "tar failed on {}", sdist.display());
    Command::new("python3.11")
        .args(["-m", "compileall", "-q"])
        .arg(dir)
        .status()
        .ok();
    // dojo extracts the submission with `git diff`, so the tree is a one-commit repository, as a
    // pristine tree is (mini-swe-agent gets the same tree).
    let git = |args: &[&str]| {
        Command::new("git")
            .args(["-c", "user.name=bench", "-c", "user.email=bench@localhost"])
            .args(args)
            .current_dir(dir)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    assert!(
        git(&["init", "-q"]) && git(&["add", "-A"]) && git(&["commit", "-qm", "base"]),
        "git init failed in {}",
        dir.display()
    );
}

/// One scripted run of dojo's agent on `ws`, timed (wall and this process's CPU) into `row`.
async fn timed_run(ws: &dyn Workspace, label: &str, row: &mut Row) {
    let a = agent();
    let (c0, w0) = (cpu_time(), Instant::now());
    let t = a.run(ws, &task()).await;
    row.wall.push(w0.elapsed());
    row.cpu.push(cpu_time() - c0);
    check(&t, label);
    row.steps = t.steps.len();
}

async fn run_local(sdist: &Path, row: &mut Row) {
    let dir = tempfile::tempdir().expect("tempdir");
    unpack(sdist, dir.path());
    timed_run(&LocalWorkspace::new(dir.path()), "dojo local", row).await;
}

/// Like [`run_local`] in a fresh sandbox; its create + teardown time goes to `row.setup`.
async fn run_sandbox(pristine: &dojo_sandbox::Pristine, row: &mut Row) {
    let s0 = Instant::now();
    let sb = Sandbox::create(pristine, None, &SandboxOptions::default())
        .await
        .expect("sandbox");
    let created = s0.elapsed();
    timed_run(&sb, "dojo sandbox", row).await;
    let s1 = Instant::now();
    sb.teardown().await.ok();
    row.setup.push(created + s1.elapsed());
}

/// One mini-swe-agent run in its own Python process. Adds the run to `row`; returns the
/// module import time and the whole process's wall time.
fn run_mini(python: &Path, sdist: &Path, row: &mut Row) -> Option<(f64, Duration)> {
    let script = dojo_bench::fixture("agent/mini_swe_agent_30.py");
    let tmp = tempfile::tempdir().ok()?;
    let commands = tmp.path().join("commands.json");
    std::fs::write(&commands, serde_json::to_string(COMMANDS).ok()?).ok()?;
    let dir = tmp.path().join("toolz");
    unpack(sdist, &dir);
    let p0 = Instant::now();
    let out = Command::new(python)
        .arg(&script)
        .arg(&dir)
        .arg(&commands)
        .arg("1")
        .env("MSWEA_SILENT_STARTUP", "1")
        .output()
        .ok()?;
    let process = p0.elapsed();
    if !out.status.success() {
        eprintln!(
            "mini-swe-agent failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(stdout.lines().last()?).ok()?;
    for r in v["runs"].as_array()? {
        row.wall
            .push(Duration::from_secs_f64(r["wall_s"].as_f64().unwrap_or(0.0)));
        row.cpu
            .push(Duration::from_secs_f64(r["cpu_s"].as_f64().unwrap_or(0.0)));
        row.steps = r["steps"].as_u64().unwrap_or(0) as usize;
    }
    Some((v["import_s"].as_f64()?, process))
}

fn sdist() -> PathBuf {
    // The toolz task of the bundled benchmark names the sdist, its URL and sha256.
    let tasks = dojo_bench::mini_tasks();
    let text = std::fs::read_to_string(&tasks).expect("tasksets/mini/tasks.jsonl");
    let source = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|t| t["repo"].as_str() == Some("pytoolz/toolz"))
        .map(|t| t["source"].clone())
        .expect("a toolz task in tasksets/mini/tasks.jsonl");
    let s = |k: &str| source[k].as_str().unwrap_or_default().to_string();
    dojo_cache::Cache::open()
        .expect("cache")
        .fetch(&s("url"), &s("sha256"), &s("filename"))
        .expect("toolz sdist")
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    // Commands on the host resolve `python3.11` through PATH; on a machine with pyenv that is a
    // shell shim costing ~100 ms a call, which the sandbox (its own PATH) would not pay. Give the
    // host rows the same plain PATH so all rows run the same binaries.
    // SAFETY: set before any task or thread of ours reads the environment.
    unsafe { std::env::set_var("PATH", "/usr/local/bin:/usr/bin:/bin") };
    let sdist = sdist();
    let python = std::env::var_os("MSA_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| dojo_bench::repo_root().join("target/msa-venv/bin/python"));
    println!("{}; {REPEATS} runs each, medians\n", host_line());
    println!(
        "| agent (scripted model, same {} commands + submit) | steps | wall | agent CPU | agent CPU per step | sandbox create + teardown |",
        COMMANDS.len()
    );
    println!("|---|---|---|---|---|---|");
    let print = |label: &str, r: &Row| {
        let cpu = median(&r.cpu);
        println!(
            "| {label} | {} | {} ms | {} ms | {:.2} ms | {} |",
            r.steps,
            ms(median(&r.wall)),
            ms(cpu),
            cpu.as_secs_f64() * 1e3 / r.steps.max(1) as f64,
            if r.setup.is_empty() {
                "–".to_string()
            } else {
                format!("{} ms", ms(median(&r.setup)))
            }
        );
    };
    let pristine = PristineStore::open()
        .expect("pristine store")
        .build(&Source::Archive {
            path: sdist.clone(),
        })
        .expect("pristine");
    let sandbox_ok = dojo_sandbox::doctor::namespaces_usable();
    let mini_ok = python.exists();
    let (mut mini, mut local, mut sandbox) = (Row::default(), Row::default(), Row::default());
    let (mut imports, mut processes) = (Vec::new(), Vec::new());
    // Interleaved, so load changes on this shared machine hit every row alike.
    for _ in 0..REPEATS {
        if mini_ok {
            match run_mini(&python, &sdist, &mut mini) {
                Some((i, p)) => {
                    imports.push(Duration::from_secs_f64(i));
                    processes.push(p);
                }
                None => panic!("mini-swe-agent run failed"),
            }
        }
        run_local(&sdist, &mut local).await;
        if sandbox_ok {
            run_sandbox(&pristine, &mut sandbox).await;
        }
    }
    if mini_ok {
        print("mini-swe-agent 2.4.6, `LocalEnvironment` (host dir)", &mini);
    } else {
        println!(
            "SKIPPED mini-swe-agent: {} missing (run scripts/bench-vs-mini-swe-agent.sh)",
            python.display()
        );
    }
    print("dojo, `LocalWorkspace` (host dir)", &local);
    if sandbox_ok {
        print(
            "dojo, namespace sandbox (overlay, Landlock, seccomp)",
            &sandbox,
        );
    } else {
        println!("SKIPPED dojo sandbox row: namespaces unavailable");
    }
    if mini_ok {
        println!(
            "\nmini-swe-agent process, per run: {} ms to import its modules, {} ms for the whole process \
             (Python start, imports, the run).",
            ms(median(&imports)),
            ms(median(&processes))
        );
    }
}
