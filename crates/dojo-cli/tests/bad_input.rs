//! Bad input through the real `dojo` binary: every case fails with a non-zero exit and a message
//! that names the file, the line or instance, and what is wrong, before any sandbox is built.

use std::process::Output;

mod common;
use common::{BUNDLED, dojo, scratch};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A task row of the bundled benchmark with `instance_id` (and optionally more fields) replaced.
fn bundled_row(edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) -> String {
    let text = std::fs::read_to_string(BUNDLED).unwrap();
    let mut row: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(text.lines().next().unwrap()).unwrap();
    edit(&mut row);
    serde_json::to_string(&row).unwrap()
}

#[test]
fn eval_with_nothing_gradeable_fails_and_names_unknown_ids() {
    let dir = scratch("eval-nothing");
    let preds = dir.path().join("preds.jsonl");
    std::fs::write(
        &preds,
        concat!(
            r#"{"instance_id":"no-such-task-1","model_name_or_path":"m","model_patch":"x"}"#,
            "\n",
            "{not json\n",
        ),
    )
    .unwrap();
    let out = dir.path().join("out");
    let o = dojo(&[
        "eval",
        "--tasks",
        BUNDLED,
        "--predictions",
        preds.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("line 1: instance no-such-task-1 is not in the task file"),
        "{err}"
    );
    assert!(err.contains("line 2: not JSON"), "{err}");
    assert!(err.contains("nothing to grade"), "{err}");
    // The report still records what was wrong.
    let report = std::fs::read_to_string(out.join("report.json")).unwrap();
    assert!(report.contains("no-such-task-1"), "{report}");
}

#[test]
fn eval_names_a_non_utf8_prediction_line_as_an_encoding_error() {
    let dir = scratch("eval-utf8");
    let preds = dir.path().join("preds.jsonl");
    std::fs::write(
        &preds,
        b"{\"instance_id\":\"gweis__isodate-1\",\"model_name_or_path\":\"m\",\"model_patch\":\"caf\xe9\"}\n",
    )
    .unwrap();
    let out = dir.path().join("out");
    let o = dojo(&[
        "eval",
        "--tasks",
        BUNDLED,
        "--predictions",
        preds.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    let err = stderr(&o);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!("{}: line 1: encoding error", preds.display())),
        "{err}"
    );
    // Never graded, so never a patch-apply failure.
    assert!(!out.join("gweis__isodate-1").exists());
}

#[test]
fn tasks_check_refuses_an_empty_file() {
    let dir = scratch("check-empty");
    let f = dir.path().join("empty.jsonl");
    std::fs::write(&f, "").unwrap();
    let o = dojo(&["tasks", "check", f.to_str().unwrap()]);
    let err = stderr(&o);
    assert_ne!(o.status.code(), Some(0));
    assert!(!stdout(&o).contains("OK"), "{}", stdout(&o));
    assert!(
        err.contains("empty.jsonl") && err.contains("no tasks"),
        "{err}"
    );
}

#[test]
fn tasks_check_refuses_a_path_as_instance_id() {
    let dir = scratch("check-path-id");
    let f = dir.path().join("tasks.jsonl");
    std::fs::write(
        &f,
        bundled_row(|r| {
            r.insert("instance_id".into(), "../../x".into());
        }),
    )
    .unwrap();
    let o = dojo(&["tasks", "check", f.to_str().unwrap()]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("tasks.jsonl line 1") && out.contains("field instance_id"),
        "{out}"
    );
}

#[test]
fn tasks_check_names_a_misspelt_log_parser() {
    let dir = scratch("check-parser");
    let f = dir.path().join("tasks.jsonl");
    std::fs::write(
        &f,
        bundled_row(|r| {
            r.insert("log_parser".into(), "pytset".into());
        }),
    )
    .unwrap();
    let o = dojo(&["tasks", "check", f.to_str().unwrap()]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("tasks.jsonl line 1")
            && out.contains("andialbrecht__sqlparse-1")
            && out.contains("field log_parser")
            && out.contains("pytset"),
        "{out}"
    );
}
