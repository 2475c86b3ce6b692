//! End to end, with a real bundled task, real sandboxes and dojo-agent's real tools driven by the
//! `gold-replay` policy; a scripted OpenAI-compatible server on loopback stands in for the world
//! models (SWT answers commands with a JSON transition, SWR with a JSON verdict).
//!
//! - `sim`: no Python environment is built; the gold replay's test run is answered by SWT, the
//!   reward by SWR; the rollout completes resolved and records what was simulated.
//! - `shadow`: everything real, SWT and SWR measured against it (needs `uv` for the environment).
//! - a model that answers with prose: the rollout stops on an infrastructure failure, never with
//!   a fabricated observation or a reward.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dojo_rollout::agent_runner::DojoAgent;
use dojo_rollout::policy::PolicyConfig;
use dojo_rollout::run_dir::{DRIFT_FILE, RolloutOptions, make_backends, run_rollout};
use dojo_trajectory::Trajectory;
use dojo_world::route::{ExecutionMode, WorldPolicy};
use dojo_world::sim::SimLog;

const TASK: &str = "pytest-dev__iniconfig-1";

fn repo_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// The sandbox needs user/mount/pid/net namespaces.
fn sandbox_ready() -> bool {
    if dojo_sandbox::doctor::namespaces_usable() {
        return true;
    }
    assert!(!ci(), "CI=true: user/mount/pid/net namespaces unavailable");
    println!("SKIPPED: user/mount/pid/net namespaces unavailable");
    false
}

fn have_uv() -> bool {
    let local = repo_root().join("target/pytools");
    if std::env::var_os("DOJO_PYTOOLS").is_none() && local.join("bin/uv").is_file() {
        // SAFETY: set before this test starts threads that read the environment.
        unsafe { std::env::set_var("DOJO_PYTOOLS", &local) };
    }
    std::env::var_os("DOJO_UV").is_some()
        || std::env::var_os("DOJO_PYTOOLS").is_some()
        || std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("uv").is_file()))
}

/// Sandboxes and `uv` (to build the task's Python environment) are available.
fn environments_ready() -> bool {
    if !sandbox_ready() {
        return false;
    }
    if !have_uv() {
        assert!(!ci(), "uv is required in CI (scripts/setup-tools.sh)");
        println!("SKIPPED: uv not found (run scripts/setup-tools.sh)");
        return false;
    }
    true
}

/// How the scripted world model answers.
#[derive(Clone, Copy, PartialEq)]
enum Script {
    Json,
    Prose,
}

/// The initial analysis cached for the sim-mode test, and the requests that carried it (only
/// that test caches one).
const ANALYSIS: &str = "- ANALYSIS-MARKER: iniconfig drops sections.";
static ANALYSED: AtomicUsize = AtomicUsize::new(0);

/// A scripted OpenAI-compatible world model on loopback: SWT (recognised by its system prompt)
/// answers `2 passed`, SWR a reward of 1; `Prose` answers both with prose. Counts SWT and SWR
/// requests.
async fn world_server(script: Script) -> (String, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    use axum::Json;
    let swt = Arc::new(AtomicUsize::new(0));
    let swr = Arc::new(AtomicUsize::new(0));
    let (c_swt, c_swr) = (swt.clone(), swr.clone());
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |Json(req): Json<serde_json::Value>| {
            let (c_swt, c_swr) = (c_swt.clone(), c_swr.clone());
            async move {
                if req.to_string().contains(ANALYSIS) {
                    ANALYSED.fetch_add(1, Ordering::SeqCst);
                }
                let system = req["messages"][0]["content"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                let content = if system.contains("code execution simulator") {
                    c_swt.fetch_add(1, Ordering::SeqCst);
                    serde_json::json!({
                        "stdout": "============ 2 passed in 0.01s ============\n",
                        "stderr": "",
                        "exit_code": 0,
                    })
                    .to_string()
                } else {
                    c_swr.fetch_add(1, Ordering::SeqCst);
                    "<think>The patch fixes the parser.</think>\n{\"test_report\": \"2 passed\", \"reward\": 1}".to_string()
                };
                let content = match script {
                    Script::Json => content,
                    Script::Prose => "I think the tests would probably pass.".to_string(),
                };
                Json(serde_json::json!({
                    "id": "w1", "object": "chat.completion", "created": 0, "model": req["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _: Result<(), _> = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/v1"), swt, swr)
}

fn opts(out: PathBuf, mode: ExecutionMode, base_url: String) -> RolloutOptions {
    let mut policy = PolicyConfig::parse("gold-replay").unwrap();
    policy.world = Some(WorldPolicy {
        mode,
        model: Some("openai:world".into()),
        base_url: Some(base_url),
        api_key_env: None,
        ..Default::default()
    });
    RolloutOptions {
        shard: None,
        tasks_file: repo_root().join("tasksets/mini/tasks.jsonl"),
        instances: vec![TASK.to_string()],
        label: policy.label(),
        policy,
        samples: 1,
        out,
        workers: 1,
        export_predictions: false,
        envs_dir: None,
        prepare: Default::default(),
        progress: Default::default(),
    }
}

async fn run(o: &RolloutOptions) -> (dojo_rollout::run_dir::RolloutOutput, Trajectory) {
    let out = run_rollout(
        o,
        DojoAgent::from_policy(&o.policy).unwrap(),
        make_backends(&o.policy, None).unwrap(),
    )
    .await
    .unwrap();
    let line = std::fs::read_to_string(&out.store_path).unwrap();
    let traj: Trajectory = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    (out, traj)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_mode_completes_a_rollout_without_an_environment() {
    if !sandbox_ready() {
        return;
    }
    let (url, swt, swr) = world_server(Script::Json).await;
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(dir.path().join("run"), ExecutionMode::Sim, url);
    let w = o.policy.world.as_mut().unwrap();
    // SWR's verdict is the mean of three samples (`--swr-samples 3`).
    w.swr_samples = Some(3);
    // The task's initial analysis, as `dojo tasks analyze` caches it, reaches SWT and SWR.
    let cache = dir.path().join("analysis");
    let path = dojo_world::analysis::analysis_cache_path(&cache, TASK, "analyst");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let cached = dojo_world::analysis::CachedAnalysis {
        schema_version: dojo_world::analysis::ANALYSIS_SCHEMA_VERSION,
        task_id: TASK.into(),
        model: "analyst".into(),
        prompt_sha: String::new(),
        analysis: ANALYSIS.into(),
    };
    std::fs::write(&path, serde_json::to_vec(&cached).unwrap()).unwrap();
    w.analysis_model = Some("analyst".into());
    w.analysis_cache = Some(cache);
    let (out, traj) = run(&o).await;
    assert!(
        !traj.infra_failure,
        "{:?} {:?}",
        traj.stop_reason, traj.stop_detail
    );
    assert_eq!(traj.resolved, Some(true));
    assert_eq!(out.summary.infra_errors, 0);
    // No Python environment was built or used.
    assert_eq!(traj.environment.python_env, None);
    assert_eq!(traj.grading.as_ref().unwrap()["simulated"], true);
    // The gold replay's test run went to SWT once, the verdict to SWR three times.
    assert_eq!(swt.load(Ordering::SeqCst), 1);
    assert_eq!(swr.load(Ordering::SeqCst), 3);
    assert_eq!(
        ANALYSED.load(Ordering::SeqCst),
        4,
        "every SWT/SWR request had the analysis"
    );
    let log = SimLog::from_metadata(&traj.metadata).expect("simulation log");
    assert_eq!(log.mode, ExecutionMode::Sim);
    let verdict = log.reward.as_ref().unwrap().predicted.as_ref().unwrap();
    assert_eq!((verdict.samples, verdict.tie_seed), (3, None));
    let sim: Vec<_> = log
        .commands
        .iter()
        .filter(|c| c.route == "simulate")
        .collect();
    assert_eq!(sim.len(), 1, "{:?}", log.commands);
    assert!(!sim[0].files.is_empty(), "the test files were shown to SWT");
    let obs = traj
        .messages
        .iter()
        .filter_map(|m| m.content.as_ref().map(|c| c.text()))
        .find(|t| t.contains("2 passed in 0.01s"));
    assert!(obs.is_some(), "the simulated output reached the agent");
    assert_eq!(
        log.reward
            .as_ref()
            .unwrap()
            .predicted
            .as_ref()
            .unwrap()
            .reward,
        1.0
    );
    // Nothing measured against reality in sim mode, but the drift file exists.
    let drift = out.drift.expect("drift summary");
    assert_eq!(drift.transitions, 0);
    assert!(dir.path().join("run").join(DRIFT_FILE).is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prose_reply_is_an_infrastructure_failure() {
    if !sandbox_ready() {
        return;
    }
    let (url, swt, swr) = world_server(Script::Prose).await;
    let dir = tempfile::tempdir().unwrap();
    let o = opts(dir.path().join("run"), ExecutionMode::Sim, url);
    let (out, traj) = run(&o).await;
    assert!(traj.infra_failure);
    assert!(
        traj.stop_reason.is_infrastructure(),
        "{:?}",
        traj.stop_reason
    );
    assert!(
        traj.stop_detail
            .as_deref()
            .unwrap_or("")
            .contains("unusable reply"),
        "{:?}",
        traj.stop_detail
    );
    // Never graded: neither a fabricated observation nor a reward.
    assert_eq!(traj.resolved, None);
    assert_eq!(traj.reward, None);
    assert_eq!(out.summary.infra_errors, 1);
    assert_eq!(swt.load(Ordering::SeqCst), 1);
    assert_eq!(swr.load(Ordering::SeqCst), 0);
    let log = SimLog::from_metadata(&traj.metadata).expect("simulation log");
    assert!(log.commands.iter().any(|c| c.error.is_some()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_records_drift_against_the_real_run() {
    if !environments_ready() {
        return;
    }
    let (url, swt, swr) = world_server(Script::Json).await;
    let dir = tempfile::tempdir().unwrap();
    let o = opts(dir.path().join("run"), ExecutionMode::Shadow, url);
    let (out, traj) = run(&o).await;
    assert!(!traj.infra_failure, "{:?}", traj.stop_detail);
    // Real grading decides; the gold patch resolves.
    assert_eq!(traj.resolved, Some(true));
    assert!(traj.environment.python_env.is_some());
    assert_eq!(swt.load(Ordering::SeqCst), 1);
    assert_eq!(swr.load(Ordering::SeqCst), 1);
    let drift = out.drift.expect("drift summary");
    assert_eq!(drift.transitions, 1);
    assert_eq!(drift.transition_failures, 0);
    // The real test run passed (exit 0) as SWT said.
    assert_eq!(drift.exit_code_agreeing, 1);
    // SWR said resolved, and it was: one true positive.
    assert_eq!(drift.reward.true_positive, 1);
    assert_eq!(drift.reward.total(), 1);
    let log = SimLog::from_metadata(&traj.metadata).unwrap();
    let shadow = log.commands.iter().find(|c| c.route == "shadow").unwrap();
    assert!(shadow.real_ms.is_some() && shadow.drift.is_some());
}

fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A task with only a repository, a base commit and its patches (no environment spec, no
/// sdist): the repository is a local git clone under `--repos`.
fn envless_task(root: &std::path::Path) -> PathBuf {
    let repo = root.join("repos/acme__calc");
    std::fs::create_dir_all(repo.join("tests")).unwrap();
    let calc = |op: &str| {
        format!(
            "\"\"\"A calculator.\"\"\"\n\n\ndef add(a, b):\n    \"\"\"The sum of a and b.\"\"\"\n    return a {op} b\n\n\ndef neg(a):\n    return -a\n"
        )
    };
    let tests = "from calc import add\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n";
    std::fs::write(repo.join("calc.py"), calc("-")).unwrap();
    std::fs::write(repo.join("tests/test_calc.py"), tests).unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "base"]);
    let base = git(&repo, &["rev-parse", "HEAD"]).trim().to_string();
    std::fs::write(repo.join("calc.py"), calc("+")).unwrap();
    let patch = git(&repo, &["diff"]);
    git(&repo, &["checkout", "-q", "."]);
    std::fs::write(
        repo.join("tests/test_calc.py"),
        format!("{tests}\n\ndef test_add():\n    assert add(2, 3) == 5\n"),
    )
    .unwrap();
    let test_patch = git(&repo, &["diff"]);
    git(&repo, &["checkout", "-q", "."]);
    let row = serde_json::json!({
        "instance_id": "acme__calc-1",
        "repo": "acme/calc",
        "base_commit": base,
        "patch": patch,
        "test_patch": test_patch,
        "problem_statement": "add(2, 3) returns -1 instead of 5.",
        "FAIL_TO_PASS": ["tests/test_calc.py::test_add"],
        "PASS_TO_PASS": ["tests/test_calc.py::test_zero"],
    });
    let file = root.join("tasks.jsonl");
    std::fs::write(&file, format!("{row}\n")).unwrap();
    file
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_without_an_environment_runs_in_sim_mode_only() {
    if !sandbox_ready() {
        return;
    }
    let (url, swt, swr) = world_server(Script::Json).await;
    let dir = tempfile::tempdir().unwrap();
    let tasks = envless_task(dir.path());
    let mut o = opts(dir.path().join("sim"), ExecutionMode::Sim, url.clone());
    o.tasks_file = tasks.clone();
    o.instances = Vec::new();
    o.prepare.repos_dir = Some(dir.path().join("repos"));
    let (_, traj) = run(&o).await;
    assert!(
        !traj.infra_failure,
        "{:?} {:?}",
        traj.stop_reason, traj.stop_detail
    );
    assert_eq!(traj.resolved, Some(true));
    assert!(traj.patch.as_deref().unwrap_or("").contains("return a + b"));
    assert_eq!(swt.load(Ordering::SeqCst), 1);
    assert_eq!(swr.load(Ordering::SeqCst), 1);
    // The same task in real mode: no environment spec, an infrastructure failure that says so.
    let mut o = opts(dir.path().join("real"), ExecutionMode::Real, url);
    o.tasks_file = tasks;
    o.instances = Vec::new();
    o.prepare.repos_dir = Some(dir.path().join("repos"));
    let (_, traj) = run(&o).await;
    assert!(traj.infra_failure);
    assert!(
        traj.stop_detail
            .as_deref()
            .unwrap_or("")
            .contains("acme/calc"),
        "{:?}",
        traj.stop_detail
    );
}

/// The assistant turn that runs `command` with the bash tool, shaped like `like` (a recorded
/// bash call: same tool name and argument key).
fn bash_turn(like: &serde_json::Value, id: &str, command: &str) -> serde_json::Value {
    let f = &like["tool_calls"][0]["function"];
    let args: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(f["arguments"].as_str().unwrap()).unwrap();
    let key = args.keys().next().unwrap().clone();
    serde_json::json!({"role": "assistant", "content": "", "tool_calls": [{
        "id": id, "type": "function", "function": {"name": f["name"],
        "arguments": serde_json::json!({ key: command }).to_string()}}]})
}

/// `hybrid` end to end: the task has a working environment, so a cheap command (one script, one
/// test file) runs for real and a whole test suite goes to SWT; grading is real. The run's
/// trajectory records which was which, and capture keeps SWT records of the real runs only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hybrid_runs_cheap_commands_for_real_and_simulates_the_rest() {
    if !environments_ready() {
        return;
    }
    let (url, swt, swr) = world_server(Script::Json).await;
    let dir = tempfile::tempdir().unwrap();
    // The gold replay alone: its one test command names the test file, cheap: real.
    let o = opts(dir.path().join("gold"), ExecutionMode::Hybrid, url.clone());
    let (_, gold) = run(&o).await;
    assert!(!gold.infra_failure, "{:?}", gold.stop_detail);
    assert_eq!(gold.resolved, Some(true));
    assert!(gold.environment.python_env.is_some());
    assert_eq!(swt.load(Ordering::SeqCst), 0);
    assert_eq!(
        swr.load(Ordering::SeqCst),
        0,
        "real grading, no reward model"
    );

    // The same replay with two more commands after its first turn: a cheap script and the
    // whole suite.
    let mut t = serde_json::to_value(&gold).unwrap();
    let messages = t["messages"].as_array_mut().unwrap();
    let bash = messages
        .iter()
        .find(|m| {
            m["tool_calls"][0]["function"]["name"]
                .as_str()
                .is_some_and(|n| n.contains("bash"))
        })
        .cloned()
        .expect("the gold replay runs its tests with the bash tool");
    let first = messages
        .iter()
        .position(|m| m["role"] == "assistant")
        .unwrap();
    messages.insert(
        first + 1,
        bash_turn(&bash, "cheap", "python -c 'print(40 + 2)'"),
    );
    messages.insert(first + 2, bash_turn(&bash, "suite", "python -m pytest -q"));
    let replay = dir.path().join("replay.jsonl");
    std::fs::write(&replay, format!("{t}\n")).unwrap();
    let mut o = opts(dir.path().join("hybrid"), ExecutionMode::Hybrid, url);
    let world = o.policy.world.take();
    o.policy = PolicyConfig::parse(&format!("replay:{}", replay.display())).unwrap();
    o.policy.world = world;
    o.label = o.policy.label();
    let (out, traj) = run(&o).await;
    assert!(!traj.infra_failure, "{:?}", traj.stop_detail);
    assert_eq!(traj.resolved, Some(true));
    let observation = |id: &str| {
        traj.messages
            .iter()
            .find(|m| m.tool_call_id.as_deref() == Some(id))
            .and_then(|m| m.content.as_ref().map(|c| c.text()))
            .unwrap_or_default()
    };
    assert!(
        observation("cheap").contains("42"),
        "{}",
        observation("cheap")
    );
    assert!(
        observation("suite").contains("2 passed in 0.01s"),
        "{}",
        observation("suite")
    );
    assert_eq!(
        swt.load(Ordering::SeqCst),
        1,
        "only the whole suite went to SWT"
    );
    let log = SimLog::from_metadata(&traj.metadata).expect("simulation log");
    assert_eq!(log.mode, ExecutionMode::Hybrid);
    let route = |cmd: &str| {
        log.commands
            .iter()
            .find(|c| c.command == cmd)
            .map(|c| c.route.clone())
            .unwrap_or_else(|| panic!("{cmd} not in {:?}", log.commands))
    };
    assert_eq!(route("python -c 'print(40 + 2)'"), "real");
    assert_eq!(route("python -m pytest -q"), "simulate");
    assert!(log.reward.is_none(), "graded for real");
    assert_eq!(out.summary.infra_errors, 0);
    // Capture: SWT records of the commands that ran for real, none of the simulated one.
    let records = dojo_world::record::read_world_records(
        &dir.path().join("hybrid").join(dojo_world::WORLD_FILE),
    )
    .unwrap();
    let commands: Vec<String> = records
        .iter()
        .filter_map(|r| match &r.body {
            dojo_world::record::WorldBody::Swt { context, .. } => Some(context.command.clone()),
            _ => None,
        })
        .collect();
    assert!(
        commands.iter().any(|c| c == "python -c 'print(40 + 2)'"),
        "{commands:?}"
    );
    assert!(
        !commands.iter().any(|c| c == "python -m pytest -q"),
        "{commands:?}"
    );
}
