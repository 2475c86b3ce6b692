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

/// Zeros and non-numbers where a count, budget or number is needed are refused by the argument
/// parser, naming the flag, before anything runs (they used to be clamped to 1, or run nothing).
#[test]
fn zero_counts_and_non_numbers_are_refused_naming_the_flag() {
    let dir = scratch("zero-flags");
    let out = dir.path().join("out");
    let out = out.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "rollout",
                "--tasks",
                BUNDLED,
                "--policy",
                "gold-replay",
                "--out",
                out,
                "-n",
                "0",
            ],
            "--samples",
        ),
        (
            vec![
                "rollout",
                "--tasks",
                BUNDLED,
                "--policy",
                "gold-replay",
                "--out",
                out,
                "--workers",
                "0",
            ],
            "--workers",
        ),
        (
            vec!["rl", "--tasks", BUNDLED, "--out", out, "--steps", "0"],
            "--steps",
        ),
        (
            vec![
                "train",
                "sft",
                "--data",
                out,
                "--out",
                out,
                "--max-steps",
                "0",
            ],
            "--max-steps",
        ),
        (
            vec![
                "train",
                "sft",
                "--data",
                out,
                "--out",
                out,
                "--lora-rank",
                "0",
            ],
            "--lora-rank",
        ),
        (
            vec!["validate", "--tasks", BUNDLED, "--timeout", "0"],
            "--timeout",
        ),
        (
            vec![
                "curate",
                "--rollouts",
                out,
                "--out",
                out,
                "--difficulty-low",
                "NaN",
            ],
            "--difficulty-low",
        ),
    ];
    for (args, flag) in cases {
        let o = dojo(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "dojo {}: {err}", args.join(" "));
        assert!(err.contains(flag), "dojo {}: {err}", args.join(" "));
    }
}

/// `dojo curate` on inputs that do not exist, or on a path that is not UTF-8, fails with the
/// path named (it used to export nothing and exit 0, or panic).
#[test]
fn curate_refuses_missing_and_non_utf8_paths() {
    use std::os::unix::ffi::OsStrExt;
    let dir = scratch("curate-paths");
    let out = dir.path().join("out");
    let o = dojo(&[
        "curate",
        "--rollouts",
        "/nonexistent/rollouts",
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("/nonexistent/rollouts: no such file or directory"),
        "{err}"
    );
    assert!(!out.exists());
    let bad = dir
        .path()
        .join(std::ffi::OsStr::from_bytes(b"r\xffollouts"));
    std::fs::create_dir_all(&bad).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_dojo"))
        .arg("curate")
        .arg("--rollouts")
        .arg(&bad)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("not a UTF-8 path"), "{err}");
}
