//! Real task files: the SWE-bench dev split (JSONL, and the same rows as Parquet), and the
//! bundled benchmark; every task must load strictly and resolve an environment.

use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, ListBuilder, RecordBatch, StringArray, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema};
use dojo_task::{EnvRegistry, load_tasks};
use serde_json::Value;

fn shared(p: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data")).join(p)
}

#[test]
fn swebench_dev_jsonl_loads_and_resolves() {
    let path = shared("swebench/swebench_dev.jsonl");
    let tasks = load_tasks(&path).unwrap();
    assert_eq!(tasks.len(), 219);
    let reg = EnvRegistry::embedded().unwrap();
    for t in &tasks {
        assert!(!t.f2p().is_empty(), "{}", t.instance_id);
        let env = reg.resolve(t).unwrap_or_else(|e| panic!("{e}"));
        // The eval_script's command names the test files; it starts with the spec's command.
        let cmd = env.test_command(t);
        assert!(cmd.starts_with("pytest -rA "), "{}: {cmd}", t.instance_id);
        assert_eq!(Some(env.log_parser), t.log_parser);
        // Our directives from the test patch equal the files the eval_script runs.
        let ours =
            dojo_task::test_directives(&t.test_patch, dojo_task::Directives::Files).join(" ");
        assert_eq!(format!("pytest -rA {ours}"), cmd, "{}", t.instance_id);
    }
}

#[test]
fn swebench_dev_parquet_equals_jsonl() {
    let path = shared("swebench/swebench_dev.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let rows: Vec<serde_json::Map<String, Value>> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l)
                .unwrap()
                .as_object()
                .unwrap()
                .clone()
        })
        .collect();
    let keys: Vec<String> = rows[0].keys().cloned().collect();
    // Every column as a string, except FAIL_TO_PASS stored as a list column (SWE-smith style).
    let mut fields = Vec::new();
    let mut cols: Vec<ArrayRef> = Vec::new();
    for k in &keys {
        if k == "FAIL_TO_PASS" {
            let mut b = ListBuilder::new(StringBuilder::new());
            for r in &rows {
                let list: Vec<String> = serde_json::from_str(r[k].as_str().unwrap()).unwrap();
                for x in list {
                    b.values().append_value(x);
                }
                b.append(true);
            }
            let arr = b.finish();
            fields.push(Field::new(k, arr.data_type().clone(), true));
            cols.push(Arc::new(arr));
        } else {
            fields.push(Field::new(k, DataType::Utf8, true));
            cols.push(Arc::new(StringArray::from_iter(
                rows.iter().map(|r| r[k].as_str().map(str::to_string)),
            )));
        }
    }
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), cols).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pq = dir.path().join("dev.parquet");
    let mut w =
        parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&pq).unwrap(), schema, None)
            .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();

    let a = load_tasks(&path).unwrap();
    let b = load_tasks(&pq).unwrap();
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.instance_id, y.instance_id);
        assert_eq!(x.patch, y.patch);
        assert_eq!(x.test_patch, y.test_patch);
        assert_eq!(x.fail_to_pass, y.fail_to_pass);
        assert_eq!(x.pass_to_pass, y.pass_to_pass);
        assert_eq!(x.eval_script, y.eval_script);
    }
}

#[test]
fn parquet_errors_name_row_instance_and_field() {
    let schema = Arc::new(Schema::new(vec![
        Field::new("instance_id", DataType::Utf8, true),
        Field::new("repo", DataType::Utf8, true),
        Field::new("base_commit", DataType::Utf8, true),
        Field::new("patch", DataType::Utf8, true),
        Field::new("FAIL_TO_PASS", DataType::Utf8, true),
    ]));
    let col = |v: [&str; 2]| -> ArrayRef { Arc::new(StringArray::from(v.to_vec())) };
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            col(["a-1", "a-2"]),
            col(["a/a", "a/a"]),
            col(["c", "c"]),
            col(["p", "p"]),
            col(["[]", "[oops"]),
        ],
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pq = dir.path().join("bad.parquet");
    let mut w =
        parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&pq).unwrap(), schema, None)
            .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let e = load_tasks(&pq).unwrap_err().to_string();
    assert!(
        e.contains("bad.parquet row 2") && e.contains("a-2") && e.contains("FAIL_TO_PASS"),
        "{e}"
    );
}

#[test]
fn swesmith_single_object_json_loads() {
    let t = load_tasks(&shared(
        "harness_logs/swesmith/pandas-dev__pandas.95280573.pr_53652.json",
    ))
    .unwrap();
    assert_eq!(t.len(), 1);
    assert_eq!(
        t[0].image.as_deref(),
        Some("swesmith.x86_64.pandas-dev__pandas.95280573")
    );
    assert!(!t[0].f2p().is_empty());
}

#[test]
fn bundled_benchmark_loads_and_resolves() {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tasksets/mini/tasks.jsonl"
    ));
    if !path.exists() {
        println!("SKIPPED: {} not written yet", path.display());
        return;
    }
    let tasks = load_tasks(&path).unwrap();
    let reg = EnvRegistry::embedded().unwrap();
    for t in &tasks {
        assert!(t.sdist().is_some(), "{} has no sdist source", t.instance_id);
        reg.resolve(t).unwrap_or_else(|e| panic!("{e}"));
    }
}
