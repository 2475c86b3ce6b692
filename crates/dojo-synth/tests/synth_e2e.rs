//! A whole synthesis run for real: a tiny project written to a temporary directory, its suite
//! run in namespace sandboxes with a uv-built venv and real pytest, mutants injected, tested,
//! validated (final `dojo validate` included) and written; the same seed gives the same file
//! byte for byte; a run stopped early and resumed gives the same file as one uninterrupted run.
//!
//! Needs the sandbox's kernel features, uv and PyPI access (for pytest); otherwise SKIPPED
//! (under `CI=true` a missing feature fails instead).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dojo_llm::{ClientConfig, EndpointConfig, OpenAiClient};
use dojo_synth::{Input, LlmSource, Operator, SynthOptions, synthesize};

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

fn skip(reason: &str) {
    assert!(!ci(), "CI=true: {reason}");
    println!("SKIPPED: {reason}");
}

/// The pinned tools are found and the sandbox can run; else the test is skipped (fails in CI).
fn ready() -> bool {
    setup_home();
    if !dojo_sandbox::doctor::namespaces_usable() {
        skip("namespaces/overlayfs unavailable");
        return false;
    }
    true
}

/// Run `o`; `None` (skipped, with the reason) when the environment cannot be built here.
async fn synth_or_skip(o: &SynthOptions) -> Option<dojo_synth::Summary> {
    match synthesize(o).await {
        Ok(s) => Some(s),
        Err(e) if e.to_string().contains("environment") => {
            skip(&format!("cannot build the environment: {e}"));
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// Write `files` (path, contents) under `root`.
fn write_tree(root: &Path, files: &[(&str, &str)]) {
    for (p, c) in files {
        let f = root.join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, c).unwrap();
    }
}

fn setup_home() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("DOJO_PYTOOLS").is_none() {
            let tools = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/pytools"));
            // SAFETY: set once before any thread of this test binary reads the environment.
            unsafe { std::env::set_var("DOJO_PYTOOLS", tools) };
        }
    });
}

const CORE: &str = r#"def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def total(items, start=0):
    s = start
    for i in range(len(items)):
        s += items[i]
    return s


def is_even(n):
    return n % 2 == 0
"#;

const UTIL: &str = r#"def shout(word, times=1):
    return (word.upper() + "!") * times
"#;

const TEST_CORE: &str = r#"from calc.core import clamp, is_even, total


def test_clamp_low():
    assert clamp(-5, 0, 10) == 0


def test_clamp_high():
    assert clamp(50, 0, 10) == 10


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5
    assert clamp(10, 0, 10) == 10


def test_total():
    assert total([1, 2, 3]) == 6


def test_total_start():
    assert total([1], start=4) == 5


def test_even():
    assert is_even(4)
    assert not is_even(3)
"#;

const TEST_UTIL: &str = r#"from calc.util import shout


def test_shout():
    assert shout("hi") == "HI!"


def test_shout_twice():
    assert shout("a", 2) == "A!A!"
"#;

/// The project and an env spec for it (no editable install: the tree is on PYTHONPATH, so every
/// task shares one venv and the test stays fast).
pub fn project(root: &Path) -> (PathBuf, PathBuf) {
    let src = root.join("calc-src");
    write_tree(
        &src,
        &[
            ("calc/__init__.py", ""),
            ("calc/core.py", CORE),
            ("calc/util.py", UTIL),
            ("tests/__init__.py", ""),
            ("tests/test_core.py", TEST_CORE),
            ("tests/test_util.py", TEST_UTIL),
        ],
    );
    let envs = root.join("envs");
    std::fs::create_dir_all(&envs).unwrap();
    std::fs::write(
        envs.join("calc.toml"),
        r#"repo = "local/calc"

[default]
python = "3.11"
requirements = ["pytest==8.3.3"]
editable = false
test_cmd = "python -m pytest -rA -p no:cacheprovider"
timeout_s = 120
env = { PYTHONPATH = "/testbed" }
"#,
    )
    .unwrap();
    (src, envs)
}

fn options(src: &Path, envs: &Path, out: PathBuf, max: usize) -> SynthOptions {
    let mut o = SynthOptions::new(
        Input::Dir {
            path: src.to_path_buf(),
            name: "calc".into(),
            version: "1.0".into(),
        },
        out,
    );
    o.envs_dir = Some(envs.to_path_buf());
    o.max_tasks = max;
    o.seed = 7;
    o.workers = 2;
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synthesize_validate_determinism_and_resume() {
    if !ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (src, envs) = project(tmp.path());
    let out1 = tmp.path().join("a/tasks.jsonl");
    let Some(summary) = synth_or_skip(&options(&src, &envs, out1.clone(), 3)).await else {
        return;
    };
    println!("{}", summary.table());
    assert_eq!(summary.tasks, 3, "{summary:?}");
    assert_eq!(summary.baseline_passing, 8);
    let t = summary.totals();
    assert!(t.candidates >= t.parsed && t.parsed >= t.tried && t.tried >= t.validated);

    // Tasks in dojo's format, each with its provenance, a symptom-only statement and a gold
    // patch that reverses the bug.
    let tasks = dojo_task::load_tasks(&out1).unwrap();
    assert_eq!(tasks.len(), 3);
    for task in &tasks {
        assert!(!task.f2p().is_empty(), "{}", task.instance_id);
        assert!(task.p2p().len() + task.f2p().len() <= 8);
        let s = task.sdist().unwrap();
        assert!(
            s.bug_patch.starts_with("diff --git a/calc/"),
            "{}",
            s.bug_patch
        );
        assert!(task.test_patch.is_empty());
        let st = &task.problem_statement;
        assert!(
            !st.contains("test_core") && !st.contains("test_util"),
            "{st}"
        );
        let syn = &task.raw["synth"];
        assert!(Operator::by_name(syn["operator"].as_str().unwrap()).is_some());
        assert_eq!(syn["seed"], 7);
        assert!(syn["features"]["lines_changed"].as_u64().unwrap() >= 1);
        // The bug line is not quoted in the statement.
        let added: Vec<&str> = s
            .bug_patch
            .lines()
            .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
            .map(|l| l[1..].trim())
            .filter(|l| l.len() > 8)
            .collect();
        for a in added {
            assert!(
                !st.contains(a),
                "statement quotes the bug line {a:?}:\n{st}"
            );
        }
    }

    // Same seed, same file.
    let out2 = tmp.path().join("b/tasks.jsonl");
    synthesize(&options(&src, &envs, out2.clone(), 3))
        .await
        .unwrap();
    assert_eq!(std::fs::read(&out1).unwrap(), std::fs::read(&out2).unwrap());

    // Stopped after one task, resumed to three: the same file as the uninterrupted run.
    let out3 = tmp.path().join("c/tasks.jsonl");
    let s1 = synthesize(&options(&src, &envs, out3.clone(), 1))
        .await
        .unwrap();
    assert_eq!(s1.tasks, 1);
    let s3 = synthesize(&options(&src, &envs, out3.clone(), 3))
        .await
        .unwrap();
    assert_eq!(s3.tasks, 3);
    assert_eq!(std::fs::read(&out1).unwrap(), std::fs::read(&out3).unwrap());
    // Resuming a finished run does nothing.
    let s4 = synthesize(&options(&src, &envs, out3.clone(), 3))
        .await
        .unwrap();
    assert_eq!(s4.tried_this_session, 0);

    // Another seed is another run: the progress record refuses it.
    let mut other = options(&src, &envs, out3, 3);
    other.seed = 8;
    let e = synthesize(&other).await.unwrap_err().to_string();
    assert!(e.contains("another run"), "{e}");
}

/// A scripted OpenAI-compatible server on loopback: the function named in the prompt decides
/// the answer (a rewrite of `clamp` with a bug the tests catch; HTTP 500 for anything else), and
/// every request is counted.
async fn scripted_llm() -> (String, Arc<AtomicUsize>) {
    use axum::Json;
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |Json(req): Json<serde_json::Value>| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                let prompt = req["messages"][1]["content"].as_str().unwrap_or("").to_string();
                if !prompt.contains("function `clamp`") {
                    return (StatusCode::INTERNAL_SERVER_ERROR, "overloaded").into_response();
                }
                let code = "def clamp(x, lo, hi):\n    if x < lo:\n        return lo\n    if x > hi:\n        return lo\n    return x";
                let body = serde_json::json!({
                    "id": "c1", "object": "chat.completion", "created": 0, "model": req["model"],
                    "choices": [{"index": 0, "finish_reason": "stop", "message": {
                        "role": "assistant",
                        "content": format!("Here it is:\n```python\n{code}\n```\n"),
                    }}],
                });
                Json(body).into_response()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _: Result<(), _> = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/v1"), seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llm_rewrites_are_validated_like_mutants_and_model_errors_are_dropped() {
    if !ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (src, envs) = project(tmp.path());
    let (url, seen) = scripted_llm().await;
    let mut cfg = ClientConfig::new(vec![EndpointConfig::new(url)]);
    cfg.max_retries = 0;
    let llm = LlmSource {
        backend: Arc::new(OpenAiClient::new(cfg).unwrap()),
        model: "scripted".into(),
        label: "openai:scripted".into(),
        rewrites: 5,
        temperature: None,
        max_tokens: None,
        seed: None,
    };
    let out = tmp.path().join("llm/tasks.jsonl");
    let mut o = options(&src, &envs, out.clone(), 1);
    o.operators = Vec::new(); // the model's bugs only
    o.llm = Some(llm);
    let Some(s) = synth_or_skip(&o).await else {
        return;
    };
    println!("{}", s.table());
    // Two functions are big enough to ask about (`clamp`, `total`); the other answer is a 500.
    assert_eq!(seen.load(Ordering::SeqCst), 2);
    assert_eq!(s.tasks, 1, "{s:?}");
    assert_eq!(s.dropped.get("llm_model_error"), Some(&1), "{s:?}");
    let c = &s.per_operator[&Operator::LlmRewrite];
    assert_eq!((c.candidates, c.parsed, c.validated), (2, 1, 1));
    let tasks = dojo_task::load_tasks(&out).unwrap();
    let syn = &tasks[0].raw["synth"];
    assert_eq!(syn["operator"], "llm_rewrite");
    assert_eq!(syn["model"], "openai:scripted");
    assert_eq!(syn["function"], "clamp");
    assert_eq!(tasks[0].f2p(), ["tests/test_core.py::test_clamp_high"]);
    let bug = &tasks[0].sdist().unwrap().bug_patch;
    assert!(
        bug.contains("-        return hi\n+        return lo\n"),
        "{bug}"
    );

    // Resumed: the recorded answers are reused, the model is not asked again.
    let s2 = synthesize(&o).await.unwrap();
    assert_eq!(s2.tasks, 1);
    assert_eq!(seen.load(Ordering::SeqCst), 2);
    assert_eq!(s2.dropped.get("llm_model_error"), Some(&1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curriculum_knobs_one_function_and_few_failing_tests() {
    if !ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (src, envs) = project(tmp.path());
    let mut o = options(&src, &envs, tmp.path().join("k/tasks.jsonl"), 5);
    o.functions = vec!["is_even".into()];
    // Every mutant of `is_even` breaks its one test: with no failing test allowed, none is kept.
    o.max_fail_to_pass = Some(0);
    o.max_tries = Some(2);
    let Some(s) = synth_or_skip(&o).await else {
        return;
    };
    println!("{}", s.table());
    let in_is_even = dojo_synth::mutations_seeded("calc/core.py", CORE, Operator::ALL, 7)
        .unwrap()
        .mutations
        .iter()
        .filter(|m| m.function == "is_even")
        .count();
    assert_eq!(s.totals().candidates, in_is_even, "{s:?}");
    assert_eq!(s.tasks, 0);
    assert_eq!(s.dropped.get("too_many_fail_to_pass"), Some(&2), "{s:?}");
}

const SPOOL: &str = r#"LIMIT = 1000


def repeat(unit, times):
    if times > LIMIT:
        return unit
    return unit * times
"#;

const TEST_SPOOL: &str = r#"from spool.core import repeat


def test_short():
    assert repeat("ab", 3) == "ab" * 3


def test_capped(tmp_path):
    data = repeat(b"x", 64 * 1024 * 1024)
    (tmp_path / "out.bin").write_bytes(data)
    assert data == b"x"
"#;

/// A disk-full sandbox: mutants of `repeat` that lift its cap make a test write 64 MiB into a
/// sandbox whose writable space is 16 MiB. The write fails with `ENOSPC` inside the sandbox;
/// those mutants are counted as `disk_full` (not tasks: the full disk failed the test, not the
/// bug), the host's disk is untouched, the run goes on, and every task it writes is complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_full_mutants_are_counted_and_the_run_goes_on() {
    if !ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (_, envs) = project(tmp.path());
    let src = tmp.path().join("spool-src");
    write_tree(
        &src,
        &[
            ("spool/__init__.py", ""),
            ("spool/core.py", SPOOL),
            ("tests/__init__.py", ""),
            ("tests/test_core.py", TEST_SPOOL),
        ],
    );
    let spec = std::fs::read_to_string(envs.join("calc.toml"))
        .unwrap()
        .replace("local/calc", "local/spool");
    std::fs::write(envs.join("spool.toml"), spec).unwrap();
    let out = tmp.path().join("d/tasks.jsonl");
    let mut o = SynthOptions::new(
        Input::Dir {
            path: src.clone(),
            name: "spool".into(),
            version: "1.0".into(),
        },
        out.clone(),
    );
    o.envs_dir = Some(envs);
    o.max_tasks = 20;
    o.seed = 3;
    o.workers = 2;
    o.sandbox.limits.workspace_bytes = Some(16 << 20);
    let Some(s) = synth_or_skip(&o).await else {
        return;
    };
    println!("{}", s.table());
    assert_eq!(s.baseline_passing, 2, "{s:?}");
    let full = s.dropped.get("disk_full").copied().unwrap_or(0);
    assert!(full >= 1, "no mutant filled the disk: {s:?}");
    // Every mutant was accounted for: a task or a counted drop, none lost to the full disk.
    let t = s.totals();
    assert_eq!(
        t.tried,
        t.validated + s.dropped.values().sum::<usize>(),
        "{s:?}"
    );
    // What was written are whole tasks (each passed the final `dojo validate`), as many as
    // the summary says.
    if s.tasks > 0 {
        let tasks = dojo_task::load_tasks(&out).unwrap();
        assert_eq!(tasks.len(), s.tasks);
        assert!(tasks.iter().all(|t| !t.f2p().is_empty()));
    }
}
