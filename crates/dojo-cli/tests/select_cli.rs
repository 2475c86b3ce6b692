//! End to end through the real `dojo` binary: `dojo rollout` (gold-replay, 2 samples on two of
//! the bundled benchmark's fastest tasks, real sandboxes and grading) → `dojo select` with every
//! selector → `dojo eval` grades the chosen predictions as resolved. Also the refusals: a run
//! still being written, an unknown selector.
//!
//! Needs the sandbox's kernel features and the tasks' sources and environments (PyPI, cached in
//! `$DOJO_HOME`); without them it prints `SKIPPED: <reason>` (under `CI=true` a missing kernel
//! feature fails).

use std::path::Path;

use serde_json::Value;

mod common;
use common::{BUNDLED, bundled_ready, dojo, scratch};

const TASKS: [&str; 2] = ["gweis__isodate-1", "tkem__cachetools-2"];

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn rollouts_to_selected_predictions_that_eval_resolves() {
    if let Err(reason) = bundled_ready(&TASKS) {
        println!("SKIPPED: {reason}");
        return;
    }
    let dir = scratch("select");
    let run = dir.path().join("run");
    let mut args = vec!["rollout", "--tasks", BUNDLED, "--policy", "gold-replay"];
    args.extend(["-n", "2", "--out", p(&run)]);
    for id in TASKS {
        args.extend(["--instance", id]);
    }
    assert_eq!(dojo(&args).status.code(), Some(0));

    let out = dir.path().join("sel");
    let o = dojo(&[
        "select",
        "--rollouts",
        p(&run),
        "--selector",
        "all",
        "--out",
        p(&out),
    ]);
    assert_eq!(o.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("2 tasks, 4 candidates (k = 2"), "{stdout}");
    let sel: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("selection.json")).unwrap())
            .unwrap();
    assert_eq!(sel["schema_version"], 1);
    assert_eq!(sel["tasks"], 2);
    for s in sel["selectors"].as_array().unwrap() {
        // Every gold candidate resolves, so every selector's choice does.
        assert_eq!(s["resolved"], 2, "{}", s["name"]);
        let at2 = &s["best_at_k"][1];
        assert_eq!(at2["mean"], 1.0, "{}", s["name"]);
    }
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(report.contains("Choices of majority") && report.contains("gweis__isodate-1"));

    // The chosen patches are real predictions: `dojo eval` resolves both.
    let graded = dir.path().join("eval");
    let o = dojo(&[
        "eval",
        "--tasks",
        BUNDLED,
        "--predictions",
        p(&out.join("predictions.majority.jsonl")),
        "--out",
        p(&graded),
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(0));
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(graded.join("report.json")).unwrap())
            .unwrap();
    assert_eq!(report["resolved_instances"], 2, "{report}");

    // A run whose store is newer than its summary is still being written: refused by default.
    let store = run.join("trajectories.jsonl");
    let text = std::fs::read_to_string(&store).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&store, text).unwrap();
    let o = dojo(&["select", "--rollouts", p(&run), "--out", p(&out)]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("still being written") && err.contains("--partial"),
        "{err}"
    );
    let o = dojo(&[
        "select",
        "--rollouts",
        p(&run),
        "--partial",
        "--out",
        p(&out),
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stderr).contains("partial view"));

    let o = dojo(&[
        "select",
        "--rollouts",
        p(&run),
        "--selector",
        "verifer",
        "--out",
        p(&out),
    ]);
    assert_ne!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown selector `verifer`"));
}
