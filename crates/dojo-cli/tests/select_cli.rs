//! End to end through the real `dojo` binary, real sandboxes and grading: `dojo rollout` twice on
//! two of the bundled benchmark's fastest tasks, 2 samples each — gold-replay (resolves) and a
//! replay of only its final `submit` (an empty patch: unresolved) — pooled by `dojo select` with
//! every selector (majority must beat random: empty patches lose), `dojo eval` grades the chosen
//! predictions as resolved, and `dojo curate --verifier` turns the pool into balanced YES/NO
//! judgement samples. Also the refusals: a run still being written, an unknown selector.
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

    // The same agents, replayed up to their first turn and then straight to `submit`.
    let submit_only = dir.path().join("submit-only.jsonl");
    let mut lines = String::new();
    for line in std::fs::read_to_string(run.join("trajectories.jsonl"))
        .unwrap()
        .lines()
    {
        let mut t: Value = serde_json::from_str(line).unwrap();
        let msgs = t["messages"].as_array().unwrap().clone();
        let submit = msgs
            .iter()
            .rfind(|m| m["role"] == "assistant")
            .unwrap()
            .clone();
        t["messages"] = Value::Array(vec![msgs[0].clone(), msgs[1].clone(), submit]);
        lines.push_str(&t.to_string());
        lines.push('\n');
    }
    std::fs::write(&submit_only, lines).unwrap();
    let empty = dir.path().join("empty");
    let policy = format!("replay:{}", p(&submit_only));
    let mut args = vec!["rollout", "--tasks", BUNDLED, "--policy", &policy];
    args.extend(["-n", "2", "--out", p(&empty)]);
    for id in TASKS {
        args.extend(["--instance", id]);
    }
    assert_eq!(dojo(&args).status.code(), Some(0));

    let out = dir.path().join("sel");
    let o = dojo(&[
        "select",
        "--rollouts",
        p(&run),
        p(&empty),
        "--selector",
        "all",
        "--out",
        p(&out),
    ]);
    assert_eq!(o.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("2 tasks, 8 candidates (k = 4"), "{stdout}");
    let sel: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("selection.json")).unwrap())
            .unwrap();
    assert_eq!(sel["schema_version"], 1);
    assert_eq!(sel["tasks"], 2);
    assert_eq!(sel["pass_at_k"][0]["mean"], 0.5);
    assert_eq!(sel["notes"][0], "verifier: not run (no --verifier given)");
    let best_at = |name: &str, k: usize| {
        let s = sel["selectors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap();
        s["best_at_k"][k - 1]["mean"].as_f64().unwrap()
    };
    assert_eq!(best_at("random", 4), 0.5);
    assert_eq!(best_at("oracle", 4), 1.0);
    // The empty patches lose to any change: majority picks a gold patch whenever it sees one.
    assert_eq!(best_at("majority", 4), 1.0);

    // Verifier data from the same pool: 2 successes and 2 failures per task, balanced.
    let cur = dir.path().join("verifier-data");
    let o = dojo(&[
        "curate",
        "--rollouts",
        p(&run),
        p(&empty),
        "--verifier",
        "--format",
        "parquet,messages",
        "--out",
        p(&cur),
    ]);
    assert_eq!(o.status.code(), Some(0));
    let rows: Vec<Value> = std::fs::read_to_string(cur.join("messages.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 8);
    let answers: Vec<&str> = rows
        .iter()
        .map(|r| {
            r["messages"].as_array().unwrap().last().unwrap()["content"]
                .as_str()
                .unwrap()
        })
        .collect();
    let yes = answers.iter().filter(|a| a.contains("YES")).count();
    assert_eq!((yes, answers.len() - yes), (4, 4));
    assert!(cur.join("tokens.parquet").exists());
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
