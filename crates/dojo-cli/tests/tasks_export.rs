//! `dojo tasks export --format verl` through the real binary, read back the way verl's
//! `RLHFDataset` reads its files (Hugging Face `datasets` over Parquet, from the pinned
//! `target/pytools`): one row per task, the constant columns, the problem statement as the one
//! user message, and the task row itself, unchanged, in `extra_info.task`. A broken task file
//! is refused before anything is written.

use std::process::Command;

mod common;
use common::{BUNDLED, ci, dojo, pytools, scratch};

#[test]
fn verl_rows_load_in_datasets_with_the_task_intact() {
    let dir = scratch("verl");
    let out = dir.path().join("rl.parquet");
    let o = dojo(&[
        "tasks",
        "export",
        "--tasks",
        BUNDLED,
        "--format",
        "verl",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0));
    let n = std::fs::read_to_string(BUNDLED).unwrap().lines().count();

    let python = pytools().join("bin/python");
    if !python.is_file() {
        assert!(
            !ci(),
            "CI=true: {} missing (scripts/setup-tools.sh)",
            python.display()
        );
        println!("SKIPPED: the datasets check needs scripts/setup-tools.sh");
        return;
    }
    let script = r#"
import json, sys
import datasets
ds = datasets.load_dataset("parquet", data_files=sys.argv[1])["train"]
tasks = [json.loads(l) for l in open(sys.argv[2])]
assert len(ds) == len(tasks), (len(ds), len(tasks))
for i, (row, task) in enumerate(zip(ds, tasks)):
    assert row["data_source"] == "swe-dojo" and row["agent_name"] == "dojo_swe", row
    assert row["ability"] == "software-engineering"
    assert row["prompt"] == [{"role": "user", "content": task["problem_statement"]}]
    assert row["reward_model"] == {"style": "rule", "ground_truth": task["instance_id"]}
    ex = row["extra_info"]
    assert ex["index"] == i and ex["instance_id"] == task["instance_id"], ex
    assert ex["repo"] == task["repo"]
    assert json.loads(ex["task"]) == task, task["instance_id"]
print("rows", len(ds))
"#;
    let r = Command::new(&python)
        .args([
            "-c",
            &common::py_exit_after(script),
            out.to_str().unwrap(),
            BUNDLED,
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&r.stdout).trim(),
        format!("rows {n}")
    );

    // A task file with a broken row: refused, naming the file and line, nothing written.
    let bad = dir.path().join("bad.jsonl");
    let first = std::fs::read_to_string(BUNDLED).unwrap();
    std::fs::write(
        &bad,
        format!(
            "{}{{\"repo\": 1}}\n",
            first.lines().next().unwrap().to_owned() + "\n"
        ),
    )
    .unwrap();
    let out2 = dir.path().join("bad.parquet");
    let o = dojo(&[
        "tasks",
        "export",
        "--tasks",
        bad.to_str().unwrap(),
        "--format",
        "verl",
        "--out",
        out2.to_str().unwrap(),
    ]);
    assert_ne!(o.status.code(), Some(0));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("bad.jsonl"), "{e}");
    assert!(!out2.exists());
}
