//! End to end through the real `dojo` binary: `dojo rollout` with the `gold-replay` policy on a
//! bundled task (real sandbox, real tools, real grading) captures SWE-World training records in
//! `world.jsonl` (SWT: the test command gold-replay runs, with the files it executes and its real
//! output; SWR: the real test report and reward of the graded rollout); resuming writes nothing
//! twice; `dojo curate --world swt|swr` turns them into datasets the Python `datasets` library
//! loads, in SWE-World's prompt layout with JSON targets; and agent curation of the same run
//! directory does not mistake `world.jsonl` for trajectories.
//!
//! Needs the sandbox's kernel features, the task's sources and environment (PyPI, cached in
//! `$DOJO_HOME`) and `target/pytools` with `datasets` (`source scripts/setup-tools.sh`); without
//! them it prints `SKIPPED: <reason>`, and under `CI=true` a missing piece fails instead.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

mod common;
use common::{BUNDLED, bundled_ready, ci, dojo, pytools, scratch};

const TASK: &str = "gweis__isodate-1";

fn ok(args: &[&str]) -> String {
    let o = dojo(args);
    assert_eq!(o.status.code(), Some(0), "dojo {}", args.join(" "));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Rows and columns of a JSONL or Parquet file as `datasets` loads it.
const LOAD: &str = r#"
import json, sys, datasets
kind, path = sys.argv[1], sys.argv[2]
ds = datasets.load_dataset(kind, data_files=path, split="train")
print(json.dumps({"rows": ds.num_rows, "columns": sorted(ds.column_names)}))
"#;

fn load_with_datasets(kind: &str, path: &Path) -> Option<Value> {
    let py = pytools().join("bin/python");
    let has = Command::new(&py)
        .args(["-c", "import datasets"])
        .status()
        .is_ok_and(|s| s.success());
    if !has {
        assert!(!ci(), "CI=true: {} with `datasets` missing", py.display());
        println!(
            "SKIPPED (datasets check): no `datasets` in {}",
            py.display()
        );
        return None;
    }
    let out = Command::new(&py)
        .args(["-c", &common::py_exit_after(LOAD), kind, p(path)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

#[test]
fn gold_replay_records_world_data_that_curate_exports() {
    if let Err(reason) = bundled_ready(&[TASK]) {
        println!("SKIPPED: {reason}");
        return;
    }
    let dir = scratch("world");
    let run = dir.path().join("run");
    let rollout = [
        "rollout",
        "--tasks",
        BUNDLED,
        "--policy",
        "gold-replay",
        "--out",
        p(&run),
        "--instance",
        TASK,
        "-n",
        "2",
    ];
    ok(&rollout);
    let world = run.join("world.jsonl");
    let records = lines(&world);
    assert!(records.iter().all(|r| r["schema_version"] == 1));
    let swt: Vec<&Value> = records.iter().filter(|r| r["kind"] == "swt").collect();
    let swr: Vec<&Value> = records.iter().filter(|r| r["kind"] == "swr").collect();

    // SWT: gold-replay runs the failing tests' files with pytest after its edits.
    assert!(!swt.is_empty(), "no SWT record in {records:?}");
    let t = swt[0];
    let cmd = t["context"]["command"].as_str().unwrap();
    assert!(cmd.contains("pytest"), "{cmd}");
    let files = t["context"]["executed_files"].as_array().unwrap();
    assert!(!files.is_empty(), "no executed file for {cmd}");
    assert!(
        files
            .iter()
            .all(|f| f["current"].as_str().is_some_and(|c| !c.is_empty())),
        "{files:?}"
    );
    assert_eq!(t["target"]["exit_code"], 0, "{}", t["target"]);
    assert!(
        t["target"]["stdout"].as_str().unwrap().contains("passed"),
        "{}",
        t["target"]
    );
    assert!(
        t["context"]["agent_patch"]
            .as_str()
            .unwrap()
            .contains("diff --git"),
        "the patch at the moment of the command is recorded"
    );
    assert!(t["context"]["gold_patch"].as_str().is_some());

    // SWR: each graded rollout, resolved, with the real report section.
    assert!(
        !swr.is_empty() && swr.len() <= 2,
        "{} SWR records",
        swr.len()
    );
    for r in &swr {
        assert_eq!(r["target"]["reward"], 1);
        let report = r["target"]["test_report"].as_str().unwrap();
        assert!(report.contains("test session starts"), "{report}");
        assert!(
            !report.contains(">>>>>"),
            "markers are not part of the report"
        );
        assert!(!r["context"]["fail_to_pass"].as_array().unwrap().is_empty());
        assert!(!r["context"]["test_files"].as_array().unwrap().is_empty());
    }
    // Identical SWT contexts and results of the two samples are stored once.
    let mut hashes: Vec<&str> = records
        .iter()
        .map(|r| r["hash"].as_str().unwrap())
        .collect();
    hashes.sort();
    hashes.dedup();
    assert_eq!(hashes.len(), records.len());

    // Resuming the finished run writes nothing again.
    let before = std::fs::read(&world).unwrap();
    ok(&rollout);
    assert_eq!(std::fs::read(&world).unwrap(), before);

    // Agent curation of the same directory reads the trajectories only.
    let agent = dir.path().join("agent");
    let s = ok(&[
        "curate",
        "--rollouts",
        p(&run),
        "--out",
        p(&agent),
        "--model",
        "none",
        "--format",
        "messages",
        "--filters",
        "none",
    ]);
    assert!(s.contains("read 2 trajectories"), "{s}");
    assert!(s.contains("0 unusable lines"), "{s}");

    // With the default model, the SWR export is also written as token-exact Parquet.
    let tokens = match dojo_tokenizer::default_model_path() {
        Ok(_) => true,
        Err(e) => {
            assert!(!ci(), "CI=true: default model unavailable: {e}");
            println!("SKIPPED (tokens export): default model unavailable: {e}");
            false
        }
    };
    for kind in ["swr", "swt"] {
        let (model, format) = if kind == "swr" && tokens {
            ("default", "parquet,messages")
        } else {
            ("none", "messages")
        };
        let out = dir.path().join(format!("world-{kind}"));
        let s = ok(&[
            "curate",
            "--rollouts",
            p(&run),
            "--world",
            kind,
            "--out",
            p(&out),
            "--model",
            model,
            "--format",
            format,
        ]);
        assert!(
            s.contains(&format!("read {} world records", records.len())),
            "{s}"
        );
        let rows = lines(&out.join("messages.jsonl"));
        // Every SWR record is a sample; SWT keeps at most 6 per rollout.
        let n = rows.len();
        if kind == "swr" {
            assert_eq!(n, swr.len(), "{s}");
        } else {
            assert!(
                (1..=swt.len()).contains(&n),
                "{n} SWT samples of {}: {s}",
                swt.len()
            );
        }
        for row in &rows {
            let m = row["messages"].as_array().unwrap();
            assert_eq!(m.len(), 3);
            assert_eq!(m[0]["role"], "system");
            assert!(
                m[1]["content"]
                    .as_str()
                    .unwrap()
                    .starts_with("### 1. Initial Analysis")
            );
            let target: Value = serde_json::from_str(m[2]["content"].as_str().unwrap()).unwrap();
            let keys: Vec<&str> = target
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            let want: &[&str] = if kind == "swt" {
                &["stdout", "stderr", "exit_code"]
            } else {
                &["test_report", "reward"]
            };
            assert_eq!(keys, want);
            assert!(
                row["traj_id"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("/{kind}")),
                "{}",
                row["traj_id"]
            );
        }
        let manifest: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap())
                .unwrap();
        assert_eq!(manifest["config"]["world"]["kind"], kind, "{manifest}");
        if format.contains("parquet")
            && let Some(loaded) = load_with_datasets("parquet", &out.join("tokens.parquet"))
        {
            assert_eq!(loaded["rows"], n, "{loaded}");
            let cols = loaded["columns"].as_array().unwrap();
            for c in ["input_ids", "labels", "assistant_masks"] {
                assert!(cols.iter().any(|x| x == c), "{c} missing: {loaded}");
            }
        }
        if let Some(loaded) = load_with_datasets("parquet", &out.join("messages.parquet")) {
            assert_eq!(loaded["rows"], n, "{loaded}");
            assert!(
                loaded["columns"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|c| c == "messages"),
                "{loaded}"
            );
        }
    }

    // The prompt caps of a policy file's [world.caps] (the file the trained model is later
    // used with), with the targets' tails: every SWR sample is cut to them and says so.
    let policy = dir.path().join("caps.toml");
    std::fs::write(
        &policy,
        "kind = \"gold-replay\"\n\n[world.caps]\nproblem = 20\ntarget_output = 10\n",
    )
    .unwrap();
    let capped = dir.path().join("world-swr-capped");
    let args = [
        "curate",
        "--rollouts",
        p(&run),
        "--world",
        "swr",
        "--world-policy",
        p(&policy),
        "--out",
        p(&capped),
        "--model",
        "none",
        "--format",
        "messages",
    ];
    let s = ok(&args);
    assert!(s.contains(&format!("problem {}", swr.len())), "{s}");
    assert!(s.contains(&format!("test_report {}", swr.len())), "{s}");
    for row in lines(&capped.join("messages.jsonl")) {
        let m = row["messages"].as_array().unwrap();
        let user = m[1]["content"].as_str().unwrap();
        assert!(user.contains(" characters cut]"), "{user}");
        let target: Value = serde_json::from_str(m[2]["content"].as_str().unwrap()).unwrap();
        let report = target["test_report"].as_str().unwrap();
        assert!(report.starts_with("[… "), "{report}");
        assert_eq!(
            report.split_once("cut]\n").unwrap().1.chars().count(),
            10,
            "{report}"
        );
    }
    // A policy without the table, or the flag without --world, is refused before any work.
    std::fs::write(&policy, "kind = \"gold-replay\"\n").unwrap();
    let capped = dir.path().join("world-swr-refused");
    let mut args = args;
    args[8] = p(&capped);
    let o = dojo(&args);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("caps.toml: no [world.caps] table"), "{err}");
    let o = dojo(&[
        "curate",
        "--rollouts",
        p(&run),
        "--world-policy",
        p(&policy),
        "--out",
        p(&capped),
    ]);
    assert_ne!(o.status.code(), Some(0));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--world-policy sets the prompt caps"), "{err}");
}
