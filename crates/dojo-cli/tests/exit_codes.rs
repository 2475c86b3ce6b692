//! The README's exit-code table through the real `dojo` binary, one row per code: success (0),
//! the data's failure (1), usage (2), infrastructure (3), over `dojo tasks check`, `dojo curate`
//! and `dojo rollout`. None of these cases needs a sandbox or the network.

use std::process::Output;

mod common;
use common::{BUNDLED, dojo, scratch};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The first task of the bundled benchmark, with its repository changed to one no environment
/// spec knows: preparing it fails as infrastructure, before any sandbox is made.
fn task_without_env() -> String {
    let text = std::fs::read_to_string(BUNDLED).unwrap();
    let mut row: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    row["instance_id"] = "nobody__nothing-1".into();
    row["repo"] = "nobody/nothing".into();
    format!("{row}\n")
}

#[test]
fn tasks_check_exits_0_on_a_good_file_and_1_on_a_bad_one() {
    assert_eq!(dojo(&["tasks", "check", BUNDLED]).status.code(), Some(0));
    let dir = scratch("exit-check");
    let bad = dir.path().join("tasks.jsonl");
    std::fs::write(&bad, "{\"instance_id\": \"x\"}\n").unwrap();
    let o = dojo(&["tasks", "check", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}

#[test]
fn usage_errors_exit_2_whether_clap_or_dojo_finds_them() {
    let o = dojo(&["tasks", "check", "--no-such-flag"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let dir = scratch("exit-usage");
    let out = dir.path().join("out");
    let o = dojo(&["rollout", "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // Each flag parses; together they do not fit: dojo's own check (was exit 1).
    let o = dojo(&[
        "curate",
        "--rollouts",
        dir.path().to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--world-withhold-gold",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--world-withhold-gold applies to world-model data"),
        "{err}"
    );
}

/// `dojo curate --strict` with problems in the rollouts: the data's failure, 1 (was 3).
#[test]
fn curate_strict_exits_1_on_problems_in_the_rollouts() {
    let dir = scratch("exit-curate");
    let runs = dir.path().join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    std::fs::write(runs.join("trajectories.jsonl"), "{not json\n").unwrap();
    let out = dir.path().join("out");
    let o = dojo(&[
        "curate",
        "--rollouts",
        runs.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--model",
        "none",
        "--format",
        "messages",
        "--strict",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}

/// `dojo rollout` whose task cannot be prepared: the run finishes, incomplete, 3 (was 2).
#[test]
fn rollout_exits_3_on_infrastructure_errors() {
    let dir = scratch("exit-rollout");
    let tasks = dir.path().join("tasks.jsonl");
    std::fs::write(&tasks, task_without_env()).unwrap();
    let out = dir.path().join("out");
    let o = dojo(&[
        "rollout",
        "--tasks",
        tasks.to_str().unwrap(),
        "--policy",
        "gold-replay",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
}
