//! End to end through the real `dojo` binary, real sandboxes and grading: a task set split in
//! two with `dojo rollout --shard I/2` (gold-replay), each shard in its own directory as on two
//! machines, then `dojo rollout --merge` puts them back: every task exactly once, all resolved,
//! a summary and predictions as one run would write. The refusals are tested on the same
//! directories: a shard missing, one given twice, a shard with a lost sample, a shard resumed
//! as another shard.
//!
//! Needs the sandbox's kernel features and the tasks' sources and environments (PyPI, cached in
//! `$DOJO_HOME`); without them it prints `SKIPPED: <reason>` (under `CI=true` a missing kernel
//! feature fails).

use std::path::Path;

mod common;
use common::{BUNDLED, bundled_ready, dojo, scratch};

const TASKS: [&str; 3] = [
    "gweis__isodate-1",
    "tkem__cachetools-2",
    "andialbrecht__sqlparse-1",
];

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `dojo rollout --tasks TASKS --policy gold-replay --shard SHARD --out OUT`.
fn run_shard(tasks: &Path, shard: &str, out: &Path) -> std::process::Output {
    dojo(&[
        "rollout",
        "--tasks",
        p(tasks),
        "--policy",
        "gold-replay",
        "--shard",
        shard,
        "--out",
        p(out),
    ])
}

/// `dojo rollout --merge DIRS... --out OUT`.
fn merge(dirs: &[&Path], out: &Path) -> std::process::Output {
    let mut args = vec!["rollout", "--merge"];
    args.extend(dirs.iter().map(|d| p(d)));
    args.extend(["--out", p(out)]);
    dojo(&args)
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn shards_run_apart_and_merge_into_one_run() {
    if let Err(reason) = bundled_ready(&TASKS) {
        println!("SKIPPED: {reason}");
        return;
    }
    let dir = scratch("shard");
    // A task file of three bundled tasks (sdist tasks are self-contained rows).
    let tasks = dir.path().join("tasks.jsonl");
    let all = std::fs::read_to_string(BUNDLED).unwrap();
    let rows: Vec<&str> = all
        .lines()
        .filter(|l| TASKS.iter().any(|id| l.contains(&format!("\"{id}\""))))
        .collect();
    assert_eq!(rows.len(), TASKS.len());
    std::fs::write(&tasks, rows.join("\n") + "\n").unwrap();

    let shard_dir = |i: u32| dir.path().join(format!("shard-{i}"));
    for i in 1..=2u32 {
        let shard = format!("{i}/2");
        let out = shard_dir(i);
        assert_eq!(run_shard(&tasks, &shard, &out).status.code(), Some(0));
        let run = json(&out.join("run.json"));
        assert_eq!(run["shard"], shard.as_str());
    }
    // Each task ran in exactly one shard.
    let ids_in = |d: &Path| -> Vec<String> {
        std::fs::read_to_string(d.join("trajectories.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["task_id"].to_string())
            .collect()
    };
    let (a, b) = (ids_in(&shard_dir(1)), ids_in(&shard_dir(2)));
    assert_eq!(a.len() + b.len(), TASKS.len(), "{a:?} {b:?}");
    assert!(a.iter().all(|x| !b.contains(x)));

    let merged = dir.path().join("merged");
    let m = merge(&[&shard_dir(1), &shard_dir(2)], &merged);
    assert_eq!(m.status.code(), Some(0));
    let summary = json(&merged.join("summary.json"));
    assert_eq!(summary["trajectories"], 3, "{summary}");
    assert_eq!(summary["resolved"], 3, "{summary}");
    assert_eq!(summary["infra_errors"], 0, "{summary}");
    let preds = std::fs::read_to_string(merged.join("predictions.jsonl")).unwrap();
    assert_eq!(preds.lines().count(), 3);
    let run = json(&merged.join("run.json"));
    assert!(run.get("shard").is_none(), "{run}");
    // A merged directory is a run `dojo select` and `dojo curate` read like any other; merging
    // into it again is refused.
    let again = merge(&[&shard_dir(1), &shard_dir(2)], &merged);
    assert_ne!(again.status.code(), Some(0));
    assert!(
        stderr(&again).contains("already holds a run"),
        "{}",
        stderr(&again)
    );

    // Refusals.
    let out = dir.path().join("x");
    let e = merge(&[&shard_dir(1)], &out);
    assert!(stderr(&e).contains("missing shards: 2/2"), "{}", stderr(&e));
    let e = merge(&[&shard_dir(1), &shard_dir(1)], &out);
    assert!(stderr(&e).contains("given twice"), "{}", stderr(&e));
    // A shard that lost a sample (the bigger one loses its last line).
    let big = if a.len() >= b.len() {
        shard_dir(1)
    } else {
        shard_dir(2)
    };
    let text = std::fs::read_to_string(big.join("trajectories.jsonl")).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.pop();
    let cut = dir.path().join("cut");
    std::fs::create_dir_all(&cut).unwrap();
    for f in ["run.json", "summary.json"] {
        std::fs::copy(big.join(f), cut.join(f)).unwrap();
    }
    let body = if lines.is_empty() {
        String::new()
    } else {
        lines.join("\n") + "\n"
    };
    std::fs::write(cut.join("trajectories.jsonl"), body).unwrap();
    let other = if big == shard_dir(1) {
        shard_dir(2)
    } else {
        shard_dir(1)
    };
    let e = merge(&[&cut, &other], &out);
    assert_ne!(e.status.code(), Some(0));
    assert!(stderr(&e).contains("lacks 1 sample"), "{}", stderr(&e));
    assert!(
        !out.join("run.json").exists(),
        "nothing is written on a refused merge"
    );
    // A shard directory resumed as another shard.
    let e = run_shard(&tasks, "2/2", &shard_dir(1));
    assert_ne!(e.status.code(), Some(0));
    assert!(
        stderr(&e).contains(r#"shard: "1/2" -> "2/2""#),
        "{}",
        stderr(&e)
    );
    // Bad flag values name the flag.
    let e = run_shard(&tasks, "3/2", &out);
    assert!(stderr(&e).contains("--shard"), "{}", stderr(&e));
}
