//! `dojo rollout --env-mode ... --world-model ...` through the real binary: a bundled task in
//! `sim` mode against a scripted OpenAI-compatible world model on loopback completes, prints the
//! drift section and writes `drift.json`; bad modes and a missing world model are clear errors.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{BUNDLED, dojo, scratch};

const TASK: &str = "pytest-dev__iniconfig-1";

/// SWT answers `1 passed`, SWR a reward of 1; every request is counted.
fn world_server() -> (String, Arc<AtomicUsize>, tokio::runtime::Runtime) {
    use axum::Json;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |Json(req): Json<serde_json::Value>| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                let system = req["messages"][0]["content"].as_str().unwrap_or("");
                let content = if system.contains("code execution simulator") {
                    r#"{"stdout": "1 passed\n", "stderr": "", "exit_code": 0}"#
                } else {
                    r#"{"test_report": "1 passed", "reward": 1}"#
                };
                Json(serde_json::json!({
                    "id": "w", "object": "chat.completion", "created": 0, "model": req["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                }))
            }
        }),
    );
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move {
        let _: Result<(), _> = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/v1"), seen, rt)
}

#[test]
fn bad_env_mode_and_missing_world_model_are_clear_errors() {
    let dir = scratch("world-bad");
    let out_dir = dir.path().join("run");
    let out = dojo(&[
        "rollout",
        "--tasks",
        BUNDLED,
        "--policy",
        "gold-replay",
        "--out",
        out_dir.to_str().unwrap(),
        "--env-mode",
        "simulated",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("real, sim, hybrid, shadow"), "{err}");
    let out = dojo(&[
        "rollout",
        "--tasks",
        BUNDLED,
        "--instance",
        TASK,
        "--policy",
        "gold-replay",
        "--out",
        out_dir.to_str().unwrap(),
        "--env-mode",
        "sim",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs a world model"), "{err}");
}

#[test]
fn sim_rollout_through_the_binary_reports_drift() {
    if !dojo_sandbox::doctor::namespaces_usable() {
        assert!(!common::ci(), "CI=true: namespaces unavailable");
        println!("SKIPPED: user/mount/pid/net namespaces unavailable");
        return;
    }
    let (url, seen, _rt) = world_server();
    let dir = scratch("world-sim");
    let run = dir.path().join("run");
    let out = dojo(&[
        "rollout",
        "--tasks",
        BUNDLED,
        "--instance",
        TASK,
        "--policy",
        "gold-replay",
        "--out",
        run.to_str().unwrap(),
        "--env-mode",
        "sim",
        "--world-model",
        "openai:world",
        "--world-base-url",
        &url,
    ]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("## Simulation drift"), "{stdout}");
    assert!(
        stdout.contains("| SWR confusion (TP/FP/TN/FN) | 0/0/0/0 |"),
        "{stdout}"
    );
    assert!(run.join("drift.json").is_file());
    // One SWT call (the replay's test run) and one SWR call.
    assert_eq!(seen.load(Ordering::SeqCst), 2);
    let manifest = std::fs::read_to_string(run.join("run.json")).unwrap();
    assert!(manifest.contains("\"mode\": \"sim\""), "{manifest}");
}
