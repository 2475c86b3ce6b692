//! End to end through the real `dojo` binary: `dojo tasks check`, `dojo validate` (and
//! `--write`), `dojo eval` (gold, empty, malformed, non-applying and escaping patches; resume and
//! `--force`) on the bundled benchmark's fastest tasks, in real sandboxes with real pytest runs.
//!
//! The sandbox tests need the kernel features the sandbox uses and the tasks' sources and
//! environments (downloaded from PyPI and cached in `$DOJO_HOME` on first use); without them they
//! print `SKIPPED: <reason>` (under `CI=true` a missing kernel feature fails instead).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::SystemTime;

use serde_json::Value;

mod common;
use common::{BUNDLED, bundled_ready, dojo};

/// The two fastest bundled suites (~0.1 s of pytest each).
const FAST: [&str; 2] = ["gweis__isodate-1", "tkem__cachetools-2"];
/// Same projects, so their trees and environments are the ones already built.
const NO_APPLY: &str = "gweis__isodate-2";
const ESCAPES: &str = "tkem__cachetools-1";
/// Gets an empty patch: never prepared, never run.
const EMPTY: &str = "pytoolz__toolz-1";

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fresh scratch directory under cargo's per-target temp dir.
fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("grade_cli-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn bundled_rows() -> Vec<serde_json::Map<String, Value>> {
    std::fs::read_to_string(BUNDLED)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn row<'a>(
    rows: &'a [serde_json::Map<String, Value>],
    id: &str,
) -> &'a serde_json::Map<String, Value> {
    rows.iter()
        .find(|r| r["instance_id"] == id)
        .unwrap_or_else(|| panic!("{id} not in {BUNDLED}"))
}

fn read_json(p: &Path) -> Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap()
}

fn mtime(p: &Path) -> SystemTime {
    std::fs::metadata(p).unwrap().modified().unwrap()
}

macro_rules! require {
    ($ids:expr) => {
        if let Err(reason) = bundled_ready($ids) {
            println!("SKIPPED: {reason}");
            return;
        }
    };
}

#[test]
fn tasks_check_summarises_the_bundled_benchmark() {
    let o = dojo(&["tasks", "check", BUNDLED]);
    assert_eq!(o.status.code(), Some(0));
    let s = stdout(&o);
    assert!(s.contains("17 rows, 17 valid, 0 invalid"), "{s}");
    assert!(s.contains("pytest-dev/iniconfig"), "{s}");
    assert!(s.trim_end().ends_with("OK"), "{s}");
}

#[test]
fn tasks_check_names_file_line_instance_and_field() {
    let dir = scratch("check");
    let rows = bundled_rows();
    let mut bad = row(&rows, FAST[1]).clone();
    bad.insert("FAIL_TO_PASS".into(), Value::String("not json".into()));
    let file = dir.join("broken.jsonl");
    std::fs::write(
        &file,
        format!(
            "{}\n{}\n",
            serde_json::to_string(row(&rows, FAST[0])).unwrap(),
            serde_json::to_string(&bad).unwrap()
        ),
    )
    .unwrap();
    let o = dojo(&["tasks", "check", file.to_str().unwrap()]);
    assert_ne!(o.status.code(), Some(0));
    let s = stdout(&o);
    assert!(s.contains("2 rows, 1 valid, 1 invalid"), "{s}");
    let line = s
        .lines()
        .find(|l| l.starts_with("invalid:"))
        .unwrap_or_else(|| panic!("no invalid line in\n{s}"));
    for want in ["broken.jsonl", "line 2", FAST[1], "FAIL_TO_PASS"] {
        assert!(line.contains(want), "{want:?} missing from {line:?}");
    }
    assert!(s.contains("PROBLEMS FOUND"), "{s}");
}

#[test]
fn validate_two_bundled_tasks_with_two_workers() {
    require!(&FAST);
    let mut args = vec!["validate", "--tasks", BUNDLED, "--workers", "2", "--quiet"];
    for id in FAST {
        args.extend(["--instance", id]);
    }
    let o = dojo(&args);
    assert_eq!(o.status.code(), Some(0));
    let s = stdout(&o);
    for id in FAST {
        let line = s.lines().find(|l| l.starts_with(id)).unwrap();
        assert_eq!(line.split_whitespace().nth(1), Some("yes"), "{line}");
    }
    assert!(s.contains("runnable: 2/2"), "{s}");
    assert!(s.contains("2 worker(s)"), "{s}");
}

/// The bundled line of `id` with both lists emptied in place (the file's lists are JSON
/// arrays, followed by the `source` field).
fn blanked_line(text: &str, id: &str) -> (String, String) {
    let line = text
        .lines()
        .find(|l| l.contains(&format!("\"instance_id\": \"{id}\"")))
        .unwrap();
    let (head, rest) = line.split_once("\"FAIL_TO_PASS\": ").unwrap();
    let (_, rest) = rest.split_once(", \"PASS_TO_PASS\": ").unwrap();
    let (_, tail) = rest.split_once(", \"source\": ").unwrap();
    let blank = format!("{head}\"FAIL_TO_PASS\": [], \"PASS_TO_PASS\": [], \"source\": {tail}");
    (line.to_string(), blank)
}

/// `--write` re-derives the frozen lists of tasks whose lists were blanked (emptied, or
/// removed), rewrites only those lines (an emptied line comes back byte for byte), and does not
/// write a task that is not runnable.
#[test]
fn validate_write_rederives_the_frozen_lists() {
    require!(&FAST);
    let dir = scratch("write");
    let rows = bundled_rows();
    let text = std::fs::read_to_string(BUNDLED).unwrap();
    let kept_line = text.lines().find(|l| l.contains(EMPTY)).unwrap();
    let (original, emptied) = blanked_line(&text, FAST[0]);
    let mut absent = row(&rows, FAST[1]).clone();
    absent.remove("FAIL_TO_PASS");
    absent.remove("PASS_TO_PASS");
    // A new task whose gold patch fixes nothing: not runnable, so not written.
    let mut useless = row(&rows, ESCAPES).clone();
    useless.insert("FAIL_TO_PASS".into(), Value::Array(vec![]));
    useless.insert(
        "patch".into(),
        "diff --git a/NOTES.txt b/NOTES.txt\nnew file mode 100644\n--- /dev/null\n+++ b/NOTES.txt\n@@ -0,0 +1 @@\n+note\n".into(),
    );
    let useless_line = serde_json::to_string(&useless).unwrap();
    let file = dir.join("new.jsonl");
    std::fs::write(
        &file,
        format!(
            "{emptied}\n{kept_line}\n{}\n{useless_line}\n",
            serde_json::to_string(&absent).unwrap(),
        ),
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let mut args = vec![
        "validate",
        "--tasks",
        f,
        "--write",
        "--workers",
        "2",
        "--quiet",
    ];
    for id in [FAST[0], FAST[1], ESCAPES] {
        args.extend(["--instance", id]);
    }
    let o = dojo(&args);
    // One task is not runnable: nonzero exit, and it is named.
    assert_ne!(o.status.code(), Some(0));
    let s = stdout(&o);
    assert!(
        s.contains("wrote FAIL_TO_PASS / PASS_TO_PASS of 2 task(s)"),
        "{s}"
    );
    assert!(
        s.contains(&format!("not written (not runnable, see above): {ESCAPES}")),
        "{s}"
    );

    let written = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = written.lines().collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(
        lines[0], original,
        "the re-derived line differs from the frozen one"
    );
    assert_eq!(lines[1], kept_line, "an untouched line changed");
    assert_eq!(lines[3], useless_line, "a non-runnable task was written");
    // The task without lists gets them appended, every other field kept with its value.
    let got: serde_json::Map<String, Value> = serde_json::from_str(lines[2]).unwrap();
    let frozen = row(&rows, FAST[1]);
    assert_eq!(got.len(), frozen.len());
    for (k, v) in frozen {
        assert_eq!(&got[k], v, "{} {k}", FAST[1]);
    }
    // Nothing else left behind (the temporary file was renamed over the task file).
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["new.jsonl"]);
}

fn prediction(id: &str, patch: Option<&str>) -> String {
    serde_json::json!({"instance_id": id, "model_name_or_path": "gold", "model_patch": patch})
        .to_string()
}

/// The first file the gold patch touches.
fn first_file(patch: &str) -> &str {
    patch
        .lines()
        .find_map(|l| l.strip_prefix("diff --git a/"))
        .and_then(|l| l.split(" b/").next())
        .unwrap()
}

#[test]
fn eval_grades_reports_resumes_and_regrades() {
    require!(&[FAST[0], FAST[1], NO_APPLY, ESCAPES]);
    let dir = scratch("eval");
    let out = dir.join("out");
    let rows = bundled_rows();
    let gold = |id: &str| row(&rows, id)["patch"].as_str().unwrap().to_string();
    let target = first_file(row(&rows, NO_APPLY)["patch"].as_str().unwrap()).to_string();
    let no_apply = format!(
        "diff --git a/{target} b/{target}\n--- a/{target}\n+++ b/{target}\n@@ -1,2 +1,2 @@\n-no such line in this file\n+replacement\n nor this one\n"
    );
    let escapes = "diff --git a/../outside.py b/../outside.py\nnew file mode 100644\n--- /dev/null\n+++ b/../outside.py\n@@ -0,0 +1 @@\n+x = 1\n";
    let preds = dir.join("preds.jsonl");
    std::fs::write(
        &preds,
        [
            prediction(FAST[0], Some(&gold(FAST[0]))),
            prediction(FAST[1], Some(&gold(FAST[1]))),
            prediction(EMPTY, Some("")),
            "{\"instance_id\": \"truncated".to_string(),
            prediction(NO_APPLY, Some(&no_apply)),
            prediction(ESCAPES, Some(escapes)),
        ]
        .join("\n")
            + "\n",
    )
    .unwrap();
    let (p, o) = (preds.to_str().unwrap(), out.to_str().unwrap());
    let eval = |extra: &[&str]| {
        let mut args = vec!["eval", "--tasks", BUNDLED, "--predictions", p, "--out", o];
        args.extend(["--workers", "2", "--quiet"]);
        args.extend(extra);
        dojo(&args)
    };

    let run = eval(&[]);
    assert_eq!(run.status.code(), Some(0));
    // The malformed line is reported with its number; the rest are graded.
    let err = stderr(&run);
    assert!(err.contains("preds.jsonl: line 4: not JSON"), "{err}");
    let s = stdout(&run);
    assert!(
        s.contains("5 submitted, 2 resolved, 0 unresolved, 1 empty patch, 2 error (0 infrastructure), 1 malformed"),
        "{s}"
    );

    // Per-instance reports with the official keys, and the test log.
    for id in FAST {
        let r = read_json(&out.join(id).join("report.json"));
        let r = &r[id];
        for key in [
            "patch_is_None",
            "patch_exists",
            "patch_successfully_applied",
            "resolved",
        ] {
            assert!(r.get(key).is_some(), "{id}: no {key}");
        }
        for list in [
            "FAIL_TO_PASS",
            "PASS_TO_PASS",
            "FAIL_TO_FAIL",
            "PASS_TO_FAIL",
        ] {
            for k in ["success", "failure"] {
                assert!(r["tests_status"][list][k].is_array(), "{id}: {list}.{k}");
            }
        }
        assert_eq!(r["resolved"], true, "{id}");
        assert_eq!(r["patch_successfully_applied"], true, "{id}");
        assert_eq!(
            r["tests_status"]["FAIL_TO_PASS"]["failure"],
            Value::Array(vec![])
        );
        assert_eq!(
            r["tests_status"]["FAIL_TO_PASS"]["success"],
            row(&rows, id)["FAIL_TO_PASS"]
        );
        let log = std::fs::read_to_string(out.join(id).join("test_output.txt")).unwrap();
        assert!(
            log.contains(">>>>> Start Test Output") && log.contains("passed"),
            "{log}"
        );
    }
    let r = read_json(&out.join(EMPTY).join("report.json"));
    assert_eq!(r[EMPTY]["outcome"], "empty_patch");
    assert_eq!(r[EMPTY]["resolved"], false);
    // A patch that does not apply is the model's failure (not infrastructure), with git's words.
    let r = &read_json(&out.join(NO_APPLY).join("report.json"))[NO_APPLY];
    assert_eq!(
        (
            &r["outcome"],
            &r["error_kind"],
            &r["infra_failure"],
            &r["resolved"]
        ),
        (
            &"error".into(),
            &"patch_apply".into(),
            &false.into(),
            &false.into()
        )
    );
    assert!(
        r["error"].as_str().unwrap().contains("does not apply"),
        "{r}"
    );
    let r = &read_json(&out.join(ESCAPES).join("report.json"))[ESCAPES];
    assert_eq!(
        (&r["error_kind"], &r["infra_failure"]),
        (&"bad_patch".into(), &false.into())
    );
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("leaves the repository"),
        "{r}"
    );

    // The run report.
    let summary = read_json(&out.join("report.json"));
    assert_eq!(summary["schema_version"], dojo_grade::SCHEMA_VERSION);
    let ids = |k: &str| {
        let mut v: Vec<String> = summary[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(ids("resolved_ids"), FAST);
    assert_eq!(ids("empty_patch_ids"), [EMPTY]);
    assert_eq!(ids("error_ids"), [NO_APPLY, ESCAPES]);
    assert!(ids("unresolved_ids").is_empty());
    assert_eq!(summary["malformed_prediction_lines"][0]["line"], 4);
    assert_eq!(summary["resolved_instances"], 2);

    // Rerun: everything already graded is kept as it is.
    let report = out.join(FAST[0]).join("report.json");
    let (before, bytes) = (mtime(&report), std::fs::read(&report).unwrap());
    let again = eval(&[]);
    assert_eq!(again.status.code(), Some(0));
    let s = stdout(&again);
    assert!(
        s.contains("resuming: 5 of 5 instance(s) already graded"),
        "{s}"
    );
    assert!(s.contains("2 resolved"), "{s}");
    assert_eq!(mtime(&report), before, "a graded instance was graded again");
    assert_eq!(std::fs::read(&report).unwrap(), bytes);

    // --force regrades (here one instance).
    let forced = eval(&["--force", "--instance", FAST[0]]);
    assert_eq!(forced.status.code(), Some(0));
    assert!(!stdout(&forced).contains("resuming"), "{}", stdout(&forced));
    assert_ne!(mtime(&report), before, "--force did not regrade");
    assert_eq!(read_json(&report)[FAST[0]]["resolved"], true);
}

/// Git-based tasks without `--repos`, or with a directory that lacks the repository: one clear
/// error naming the option and the repository, before any preparation (not an environment
/// build failure per task).
#[test]
fn missing_repositories_name_the_repos_option() {
    let dir = scratch("repos");
    let row = std::fs::read_to_string("../../../shared/data/swebench/swebench_dev.jsonl")
        .ok()
        .and_then(|t| t.lines().next().map(str::to_string));
    let Some(row) = row else {
        println!("SKIPPED: ../shared/data/swebench/swebench_dev.jsonl not present");
        return;
    };
    let file = dir.join("git.jsonl");
    std::fs::write(&file, format!("{row}\n")).unwrap();
    let f = file.to_str().unwrap();
    let o = dojo(&["validate", "--tasks", f, "--quiet"]);
    assert_ne!(o.status.code(), Some(0));
    let e = stderr(&o);
    assert!(
        e.contains("pass --repos DIR") && e.contains("sqlfluff__sqlfluff"),
        "{e}"
    );
    let empty = dir.join("repos");
    std::fs::create_dir_all(&empty).unwrap();
    let o = dojo(&[
        "eval",
        "--tasks",
        f,
        "--predictions",
        f,
        "--out",
        dir.join("out").to_str().unwrap(),
        "--repos",
        empty.to_str().unwrap(),
    ]);
    assert_ne!(o.status.code(), Some(0));
    let e = stderr(&o);
    assert!(
        e.contains("no repository for sqlfluff/sqlfluff at") && e.contains("--repos"),
        "{e}"
    );
}

/// `tasks check` warns about test ids the task's log parser cannot report (the pytest parser
/// cuts ids at the first whitespace); a warning, not a failure.
#[test]
fn tasks_check_warns_about_ids_the_parser_cannot_match() {
    let dir = scratch("ids");
    let rows = bundled_rows();
    let mut r = row(&rows, FAST[0]).clone();
    let mut p2p = r["PASS_TO_PASS"].as_array().unwrap().clone();
    p2p.push(Value::String(
        "tests/test_x.py::test_tokenize[use of colon]".into(),
    ));
    r.insert("PASS_TO_PASS".into(), Value::Array(p2p));
    let file = dir.join("spaces.jsonl");
    std::fs::write(&file, format!("{}\n", serde_json::to_string(&r).unwrap())).unwrap();
    let o = dojo(&["tasks", "check", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let s = stdout(&o);
    assert!(
        s.contains("warning: 1 test id(s) in 1 task(s) can never match"),
        "{s}"
    );
    assert!(
        s.contains(r#"is reported by pytest as "tests/test_x.py::test_tokenize[use""#),
        "{s}"
    );
}

/// A task that does not validate gets one short row naming the failing ids and where the full
/// problems and logs are.
#[test]
fn validate_rows_are_summarised_with_the_log_path() {
    require!(&FAST[..1]);
    let dir = scratch("rows");
    let rows = bundled_rows();
    let mut r = row(&rows, FAST[0]).clone();
    let mut f2p = r["FAIL_TO_PASS"].as_array().unwrap().clone();
    for i in 0..40 {
        f2p.push(Value::String(format!("tests/test_gone.py::test_{i}")));
    }
    r.insert("FAIL_TO_PASS".into(), Value::Array(f2p));
    let file = dir.join("gone.jsonl");
    std::fs::write(&file, format!("{}\n", serde_json::to_string(&r).unwrap())).unwrap();
    let out = dir.join("logs");
    let o = dojo(&[
        "validate",
        "--tasks",
        file.to_str().unwrap(),
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let s = stdout(&o);
    let line = s.lines().find(|l| l.starts_with(FAST[0])).unwrap();
    assert!(line.len() < 400, "{line}");
    assert!(
        line.contains("FAIL_TO_PASS not passing with the gold patch: 40 of 44: not run 40 (tests/test_gone.py::test_0, tests/test_gone.py::test_1"),
        "{line}"
    );
    let logs = out.join(FAST[0]);
    assert!(
        line.ends_with(&format!("[full log: {}]", logs.display())),
        "{line}"
    );
    assert!(
        std::fs::read_to_string(logs.join("problems.txt"))
            .unwrap()
            .contains("40 (")
    );
    assert!(logs.join("gold/test_output.txt").is_file());
    // The verdict and where the time went, machine-readable.
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(logs.join("validation.json")).unwrap())
            .unwrap();
    assert_eq!(v["schema_version"], 2);
    assert_eq!(v["ok"], false);
    let (total, runs) = (
        v["total_s"].as_f64().unwrap(),
        v["runs_s"].as_f64().unwrap(),
    );
    let gold = v["gold_test_s"].as_f64().unwrap();
    assert!(total >= runs && runs >= gold && gold > 0.0, "{v}");
}

/// `dojo validate --out` writes each task's files as soon as it is validated: killed (-9) after
/// the first one, the run keeps that task's verdict and logs.
#[test]
fn a_killed_validate_keeps_the_tasks_it_finished() {
    let ids = [FAST[0], FAST[1], NO_APPLY, ESCAPES];
    require!(&ids);
    let dir = scratch("killed");
    let out = dir.join("out");
    // The table is printed once every task is done: empty while tasks still run.
    let table = dir.join("stdout.txt");
    let mut args = vec!["validate", "--tasks", BUNDLED, "--quiet", "--out"];
    let out_s = out.to_str().unwrap().to_string();
    args.push(&out_s);
    for id in ids {
        args.extend(["--instance", id]);
    }
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_dojo"))
        .args(&args)
        .env("DOJO_PYTOOLS", common::pytools())
        .stdout(std::fs::File::create(&table).unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let done = |id: &str| out.join(id).join("validation.json").is_file();
    let mut printed_by_then = String::new();
    // Bounded wait for the first finished task (its sources and environment are cached).
    let mut first = None;
    for _ in 0..30_000 {
        if let Some(id) = ids.iter().find(|id| done(id)) {
            first = Some(*id);
            printed_by_then = std::fs::read_to_string(&table).unwrap();
            break;
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let still_running = child.try_wait().unwrap().is_none();
    child.kill().ok();
    child.wait().unwrap();
    let first = first.expect("no task's validation.json appeared");
    assert!(
        still_running && printed_by_then.is_empty(),
        "a task's files appeared only with the final table: {printed_by_then:?}"
    );
    let v = read_json(&out.join(first).join("validation.json"));
    assert_eq!(v["instance_id"], first);
    assert_eq!(v["ok"], true, "{v}");
    assert!(out.join(first).join("gold/report.json").is_file());
    let kept_before = ids.iter().filter(|id| done(id)).count();
    assert!(
        kept_before < ids.len(),
        "every task finished before the kill"
    );

    // Run again into the same directory: the finished tasks are kept as they are (their files
    // untouched), the others validated, and the table has every task.
    let stamp = mtime(&out.join(first).join("validation.json"));
    let o = dojo(&args);
    let s = stdout(&o);
    assert!(
        s.contains(&format!(
            "resuming: {kept_before} of {} task(s) already validated in {}",
            ids.len(),
            out.display()
        )),
        "{s}"
    );
    assert_eq!(mtime(&out.join(first).join("validation.json")), stamp);
    for id in ids {
        assert!(done(id), "{id} not validated by the resumed run");
        assert!(s.lines().any(|l| l.starts_with(id)), "no row for {id}: {s}");
    }
    // --force validates the kept ones again.
    let mut forced = args.clone();
    forced.push("--force");
    let s = stdout(&dojo(&forced));
    assert!(!s.contains("resuming"), "{s}");
    assert_ne!(mtime(&out.join(first).join("validation.json")), stamp);
}

/// The generated red team (`dojo_grade::red_team`, CI's sample, pytest runner) through
/// `dojo eval`: the calc project as a local git repository, one task per attack (the same
/// project, each its own instance id), each prediction the attack written into the project's
/// package. None resolves, none is an error: every one is graded unresolved, the one that
/// silences the test command included (the test patch alone printed results).
#[test]
fn eval_grades_generated_attacks_unresolved() {
    use dojo_grade::red_team::{self, Expect, Runner, Target};
    if !dojo_sandbox::doctor::namespaces_usable() && !common::ci() {
        println!("SKIPPED: namespaces/overlayfs unavailable");
        return;
    }
    let dir = scratch("red-team");
    let repo = dir.join("repos").join("local__calc");
    let project = red_team::project(Runner::Pytest);
    for (path, body) in &project.files {
        let f = repo.join(path);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, body).unwrap();
    }
    let git = |args: &[&str]| {
        let o = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t", "-C"])
            .arg(&repo)
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "git {args:?}: {}", stderr(&o));
        stdout(&o).trim().to_string()
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "calc"]);
    let base = git(&["rev-parse", "HEAD"]);
    let test_patch = project.test_patch();
    let attacks: Vec<_> = red_team::sample()
        .into_iter()
        .filter(|(a, _, r)| *r == Runner::Pytest && a.expect == Expect::Unresolved)
        .collect();
    let (mut tasks, mut preds) = (String::new(), String::new());
    for (i, (attack, trigger, _)) in attacks.iter().enumerate() {
        let id = format!("local__calc-{i}");
        let row = serde_json::json!({
            "instance_id": id, "repo": "local/calc", "base_commit": base, "version": "1.0",
            "patch": red_team::GOLD, "test_patch": test_patch,
            "FAIL_TO_PASS": project.fail_to_pass, "PASS_TO_PASS": project.pass_to_pass,
            "env": {"python": "3.11", "requirements": project.requirements, "editable": false,
                    "test_cmd": project.test_cmd, "test_directives": "none",
                    "log_parser": project.log_parser, "timeout_s": 120,
                    "env": {"PYTHONPATH": "/testbed"}}});
        tasks.push_str(&format!("{row}\n"));
        let code = red_team::package_code(attack, *trigger, &Target::calc(Runner::Pytest));
        preds.push_str(&format!(
            "{}\n",
            prediction(&id, Some(&red_team::init_patch(&code)))
        ));
    }
    let (t, p, o) = (
        dir.join("tasks.jsonl"),
        dir.join("preds.jsonl"),
        dir.join("out"),
    );
    std::fs::write(&t, tasks).unwrap();
    std::fs::write(&p, preds).unwrap();
    let repos = dir.join("repos");
    let run = dojo(&[
        "eval",
        "--tasks",
        t.to_str().unwrap(),
        "--repos",
        repos.to_str().unwrap(),
        "--predictions",
        p.to_str().unwrap(),
        "--out",
        o.to_str().unwrap(),
        "--workers",
        "2",
        "--quiet",
    ]);
    let s = stdout(&run);
    let n = attacks.len();
    assert!(
        s.contains(&format!(
            "{n} submitted, 0 resolved, {n} unresolved, 0 empty patch, 0 error"
        )),
        "{s}\n{}",
        stderr(&run)
    );
    for (i, (attack, trigger, _)) in attacks.iter().enumerate() {
        let id = format!("local__calc-{i}");
        let r = read_json(&o.join(&id).join("report.json"));
        assert_eq!(
            (
                r[&id]["resolved"].as_bool(),
                r[&id]["infra_failure"].as_bool()
            ),
            (Some(false), Some(false)),
            "{} ({trigger:?}): {}",
            attack.name,
            r[&id]
        );
    }
}
