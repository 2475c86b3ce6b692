//! A test suite that prints no result at all (here: the test command asks for a pytest plugin
//! the environment lacks) is graded "no valid test output", a likely infrastructure failure: the
//! rollout records it as `infra_failure` (so curation never trains on it and never counts it as
//! the agent's failure), with the grade's error kind. Real task (the bundled benchmark's
//! iniconfig bug), real sandbox, the `gold-replay` policy, real grading.

use std::path::PathBuf;

use dojo_rollout::agent_runner::DojoAgent;
use dojo_rollout::policy::PolicyConfig;
use dojo_rollout::run_dir::{RolloutOptions, make_backends, run_rollout};

fn repo_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// uv builds the environments: from `DOJO_UV`, `DOJO_PYTOOLS` or target/pytools.
fn have_uv() -> bool {
    if std::env::var_os("DOJO_UV").is_some() || std::env::var_os("DOJO_PYTOOLS").is_some() {
        return true;
    }
    let local = repo_root().join("target/pytools");
    if local.join("bin/uv").is_file() {
        // SAFETY: set before any thread of this test process reads the environment.
        unsafe { std::env::set_var("DOJO_PYTOOLS", local) };
        return true;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suite_without_results_is_an_infrastructure_failure() {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    if !have_uv() {
        assert!(!ci, "uv is required in CI (scripts/setup-tools.sh)");
        println!("SKIPPED: uv not found (run scripts/setup-tools.sh)");
        return;
    }
    let text = std::fs::read_to_string(repo_root().join("tasksets/mini/tasks.jsonl")).unwrap();
    let mut row: serde_json::Value = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|r| r["repo"] == "pytest-dev/iniconfig")
        .unwrap();
    row["env"] = serde_json::json!({
        "test_cmd": "python -m pytest -rA -p no:cacheprovider -p dojo_missing_plugin"
    });
    let id = row["instance_id"].as_str().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("tasks.jsonl");
    std::fs::write(&tasks, format!("{row}\n")).unwrap();
    let policy = PolicyConfig::parse("gold-replay").unwrap();
    let o = RolloutOptions {
        shard: None,
        tasks_file: tasks,
        instances: vec![id.clone()],
        label: policy.label(),
        policy: policy.clone(),
        samples: 1,
        out: dir.path().join("run"),
        workers: 1,
        export_predictions: false,
        envs_dir: None,
        prepare: Default::default(),
        progress: Default::default(),
    };
    let out = run_rollout(
        &o,
        DojoAgent::from_policy(&policy).unwrap(),
        make_backends(&policy, None).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!((out.summary.infra_errors, out.summary.resolved), (1, 0));
    let line = std::fs::read_to_string(&out.store_path).unwrap();
    let t = dojo_trajectory::Trajectory::from_json(line.lines().next().unwrap()).unwrap();
    // What curation reads: an infrastructure failure, not resolved.
    assert!(
        t.is_infrastructure_failure() && !t.is_resolved(),
        "{:?}",
        t.events
    );
    let g = &t.grading.as_ref().unwrap()[&id];
    assert_eq!(
        (&g["error_kind"], &g["infra_failure"], &g["outcome"]),
        (
            &serde_json::json!("no_test_output"),
            &serde_json::json!(true),
            &serde_json::json!("error")
        ),
        "{g}"
    );
    assert!(t.events.iter().any(|e| e.kind == "grading_error"));
}
