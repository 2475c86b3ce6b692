//! `dojo rollout --env-mode ... --world-model ...` through the real binary: a bundled task in
//! `sim` mode against a scripted OpenAI-compatible world model on loopback completes, prints the
//! drift section and writes `drift.json`; bad modes and a missing world model are clear errors.

mod common;

use common::{BUNDLED, chat_server, dojo, scratch, world_reply};

const TASK: &str = "pytest-dev__iniconfig-1";

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
    let (url, seen, _rt) = chat_server(world_reply);
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
    assert_eq!(seen.lock().unwrap().len(), 2);
    let manifest = std::fs::read_to_string(run.join("run.json")).unwrap();
    assert!(manifest.contains("\"mode\": \"sim\""), "{manifest}");
}
