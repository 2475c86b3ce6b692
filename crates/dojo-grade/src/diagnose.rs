//! Diagnostics a person can read: `dojo validate`'s table rows and the lists of test ids in
//! problem messages, summarised (counts, the first ids, where the full log is) instead of
//! printed whole. A task with hundreds of PASS_TO_PASS tests, or an environment build that
//! failed with pages of pip output, still gets one line; the full text goes to files (see
//! [`write_validation`]).

use std::path::{Path, PathBuf};

use dojo_rundir::clip::{self, Keep, Unit};

use crate::grading::Semantics;
use crate::parsers::{ERROR, FAILED, SKIPPED, StatusMap};
use crate::report::Validation;

/// How many ids a summary names before it counts the rest.
pub const FIRST_IDS: usize = 3;

/// The longest problem text a row shows, in characters.
const PROBLEM_CHARS: usize = 160;

/// `3 (a, b, c)`, or `7 (a, b, c, +4 more)` past [`FIRST_IDS`].
pub fn ids_summary(ids: &[String]) -> String {
    let mut shown: Vec<&str> = ids.iter().take(FIRST_IDS).map(String::as_str).collect();
    let more = format!("+{} more", ids.len().saturating_sub(FIRST_IDS));
    if ids.len() > FIRST_IDS {
        shown.push(&more);
    }
    format!("{} ({})", ids.len(), shown.join(", "))
}

/// Ids the gold run did not pass, grouped by what its log says of them: `failed 1 (a); skipped
/// 2 (b, c); not run 1 (d)` (a skipped or absent test is not a broken one, and the fix differs:
/// a missing optional dependency, a collection error).
pub fn ids_by_status(ids: &[String], sm: &StatusMap, sem: Semantics) -> String {
    let mut groups: Vec<(&str, Vec<String>)> = Vec::new();
    for id in ids {
        let label = match crate::grading::matched_key(id, sm, sem).and_then(|k| sm.get(k)) {
            None => "not run",
            Some(FAILED) => "failed",
            Some(ERROR) => "errored",
            Some(SKIPPED) => "skipped",
            Some(_) => "other",
        };
        match groups.iter_mut().find(|(l, _)| *l == label) {
            Some((_, v)) => v.push(id.clone()),
            None => groups.push((label, vec![id.clone()])),
        }
    }
    let parts: Vec<String> = groups
        .iter()
        .map(|(l, v)| format!("{l} {}", ids_summary(v)))
        .collect();
    parts.join("; ")
}

/// The first line of `text`, at most [`PROBLEM_CHARS`] characters; whether it was cut.
fn first_line(text: &str) -> (String, bool) {
    let line = text.lines().next().unwrap_or("").trim_end();
    let c = clip::cut(line, PROBLEM_CHARS, Unit::Chars, Keep::Head);
    (c.ellipsis(), c.is_cut() || text.trim_end().contains('\n'))
}

/// The table header matching [`validate_row`].
pub fn validate_header() -> String {
    format!(
        "{:<45} {:>6} {:>5} {:>5}  problems",
        "instance", "ok", "F2P", "P2P"
    )
}

/// One row of `dojo validate`'s table: id, runnable, derived list sizes, then each problem's
/// first line (capped) and, when the task is not runnable or a problem was cut, where the full
/// problems and logs are (`log_dir`, see [`write_validation`]).
pub fn validate_row(v: &Validation, log_dir: Option<&Path>) -> String {
    let mut cut = false;
    let problems: Vec<String> = v
        .problems
        .iter()
        .map(|p| {
            let (s, c) = first_line(p);
            cut |= c;
            s
        })
        .collect();
    let mut text = if v.ok && v.new_task {
        "new task: lists derived".to_string()
    } else {
        problems.join("; ")
    };
    if let Some(dir) = log_dir.filter(|_| !v.ok || cut) {
        text.push_str(&format!(" [full log: {}]", dir.display()));
    }
    format!(
        "{:<45} {:>6} {:>5} {:>5}  {}",
        v.instance_id,
        if v.ok { "yes" } else { "NO" },
        v.derived_fail_to_pass.len(),
        v.derived_pass_to_pass.len(),
        text
    )
    .trim_end()
    .to_string()
}

/// The schema of `validation.json`. 2 adds the problems, the derived lists and whether the
/// validation ended at the infrastructure: what a resumed `dojo validate --out` needs to print a
/// task's row and `--write` its lists without validating it again.
pub const VALIDATION_SCHEMA: u64 = 2;

/// Write what a validation learnt under `dir`: `problems.txt` (every problem in full), each
/// run's `report.json` and `test_output.txt` under `test_patch_only/` and `gold/`, and last
/// `validation.json` (the [`Validation`] itself, list sizes, timings), atomically: its presence
/// means the rest is there. Returns `dir`.
pub fn write_validation(dir: &Path, v: &Validation) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let mut problems = v.problems.join("\n\n");
    if !problems.is_empty() {
        problems.push('\n');
    }
    std::fs::write(dir.join("problems.txt"), problems)?;
    for (name, r) in [("test_patch_only", &v.before), ("gold", &v.gold)] {
        if let Some(r) = r {
            crate::report::write_instance(&dir.join(name), r, None)?;
        }
    }
    // The verdict and its timing, machine-readable (the reports above have the test runs' own
    // durations).
    let mut summary = serde_json::to_value(v).map_err(std::io::Error::other)?;
    if let Some(m) = summary.as_object_mut() {
        let extra = serde_json::json!({
            "schema_version": VALIDATION_SCHEMA,
            "infra_failure": v.infra_failure(),
            "fail_to_pass": v.derived_fail_to_pass.len(),
            "pass_to_pass": v.derived_pass_to_pass.len(),
            "test_patch_only_test_s": v.before.as_ref().and_then(|r| r.test_duration_s),
            "gold_test_s": v.gold.as_ref().and_then(|r| r.test_duration_s),
        });
        m.extend(
            extra
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, x)| (k.clone(), x.clone())),
        );
    }
    // Written last, whole or not at all: a directory with it holds every file above (a run
    // killed halfway leaves the tasks it finished complete).
    dojo_rundir::write_atomic(
        &dir.join("validation.json"),
        format!("{summary:#}\n").as_bytes(),
    )?;
    Ok(dir.to_path_buf())
}

/// The validation of `id` kept under `dir` by an earlier run, if it can stand for a new one:
/// `validation.json` of this schema, of this task, not ended at the infrastructure. Anything
/// else (no file, an older schema, another task's, unreadable) is `None`: the task is
/// validated again, never guessed. The runs' reports are not read back (`before`, `gold` are
/// `None`): rows and `--write` need only what the file holds.
pub fn read_validation(dir: &Path, id: &str) -> Option<Validation> {
    let text = std::fs::read_to_string(dir.join("validation.json")).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    let current = value["schema_version"].as_u64() == Some(VALIDATION_SCHEMA);
    let clean = value["infra_failure"].as_bool() == Some(false);
    let v: Validation = serde_json::from_value(value).ok()?;
    (current && clean && v.instance_id == id).then_some(v)
}

/// Where `dojo validate` keeps each task's problems and logs ([`write_validation`]): with
/// `out`, every task's, written as soon as it is validated (a run stopped halfway keeps every
/// task it finished); without, only those of the tasks that do not validate, under a fresh
/// temporary directory, when the table is printed.
pub struct ValidationLogs {
    out: bool,
    root: PathBuf,
    written: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl ValidationLogs {
    /// Logs under `out`, else under a fresh temporary directory.
    pub fn new(out: Option<&Path>) -> ValidationLogs {
        let root = match out {
            Some(d) => d.to_path_buf(),
            None => std::env::temp_dir().join(format!(
                "dojo-validate-{}-{}",
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
                std::process::id()
            )),
        };
        ValidationLogs {
            out: out.is_some(),
            root,
            written: Default::default(),
        }
    }

    /// The directory of `v`'s files.
    pub fn dir(&self, v: &Validation) -> PathBuf {
        self.root.join(&v.instance_id)
    }

    /// With `out`, the validation of `id` an earlier run kept there ([`read_validation`]); its
    /// files count as written (its row does not write them again).
    pub fn kept(&self, id: &str) -> Option<Validation> {
        let v = read_validation(&self.root.join(id), id).filter(|_| self.out)?;
        if let Ok(mut done) = self.written.lock() {
            done.insert(v.instance_id.clone());
        }
        Some(v)
    }

    /// As each task is validated: with `out`, write its files now (a failure is retried by
    /// [`ValidationLogs::row`]).
    pub fn write_early(&self, v: &Validation) -> std::io::Result<()> {
        if self.out {
            write_validation(&self.dir(v), v)?;
            if let Ok(mut done) = self.written.lock() {
                done.insert(v.instance_id.clone());
            }
        }
        Ok(())
    }

    /// `v`'s table row, its files written first where they are due and not written yet.
    pub fn row(&self, v: &Validation) -> std::io::Result<String> {
        let dir = self.dir(v);
        let early = self
            .written
            .lock()
            .is_ok_and(|done| done.contains(&v.instance_id));
        let written = if self.out && early {
            Some(dir)
        } else if self.out || !v.ok {
            Some(write_validation(&dir, v)?)
        } else {
            None
        };
        Ok(validate_row(v, written.as_deref()))
    }
}

/// The closing line of `dojo validate`: tasks runnable, time, pace, workers.
pub fn runnable_line(
    ok: usize,
    total: usize,
    elapsed: std::time::Duration,
    workers: usize,
) -> String {
    format!(
        "\nrunnable: {ok}/{total} ({:.1} s, {:.2} tasks/min, {workers} worker(s))",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64().max(1e-9) * 60.0,
    )
}

/// `dojo validate --write`: fill FAIL_TO_PASS / PASS_TO_PASS of the new tasks that validated
/// into the JSONL task file `file` (whose tasks are `tasks`); returns what to print (how many
/// were written, and the new tasks left out because they do not validate).
pub fn write_lists(
    file: &Path,
    tasks: &[dojo_task::Task],
    results: &[Validation],
) -> Result<String, dojo_task::TaskError> {
    let fill: dojo_task::NewLists = results
        .iter()
        .filter(|v| v.ok && v.new_task)
        .map(|v| {
            let lists = (&v.derived_fail_to_pass[..], &v.derived_pass_to_pass[..]);
            (v.instance_id.as_str(), lists)
        })
        .collect();
    let n = dojo_task::fill_lists(file, tasks, fill)?;
    let mut out = format!(
        "wrote FAIL_TO_PASS / PASS_TO_PASS of {n} task(s) into {}",
        file.display()
    );
    let skipped: Vec<&str> = results
        .iter()
        .filter(|v| v.new_task && !v.ok)
        .map(|v| v.instance_id.as_str())
        .collect();
    if !skipped.is_empty() {
        out.push_str(&format!(
            "\nnot written (not runnable, see above): {}",
            skipped.join(", ")
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(id: &str, ok: bool, new_task: bool, problems: Vec<String>) -> Validation {
        Validation {
            instance_id: id.into(),
            ok,
            new_task,
            problems,
            derived_fail_to_pass: vec!["a".into()],
            derived_pass_to_pass: vec!["b".into(), "c".into()],
            total_s: None,
            runs_s: None,
            before: None,
            gold: None,
        }
    }

    /// What `validation.json` keeps is what a resumed run reads back; an older schema, another
    /// task's file, a validation that ended at the infrastructure and a damaged file are not
    /// kept (validated again).
    #[test]
    fn a_written_validation_reads_back_only_when_it_can_stand() {
        let dir = std::env::temp_dir().join(format!("dojo-diagnose-{}", std::process::id()));
        let mut good = v("x__y-1", false, false, vec!["gold patch: a\nb".into()]);
        good.runs_s = Some(2.0);
        good.total_s = Some(3.5);
        write_validation(&dir, &good).unwrap();
        let back = read_validation(&dir, "x__y-1").unwrap();
        assert_eq!(
            serde_json::to_value(&back).unwrap(),
            serde_json::to_value(&good).unwrap()
        );
        assert!(read_validation(&dir, "x__y-2").is_none(), "another task's");

        let file = dir.join("validation.json");
        let text = std::fs::read_to_string(&file).unwrap();
        let older = text.replace("\"schema_version\": 2", "\"schema_version\": 1");
        std::fs::write(&file, older).unwrap();
        assert!(read_validation(&dir, "x__y-1").is_none(), "older schema");
        std::fs::write(&file, &text[..text.len() / 2]).unwrap();
        assert!(read_validation(&dir, "x__y-1").is_none(), "damaged");

        // The runs never happened (no sandbox, no environment): infrastructure.
        write_validation(
            &dir,
            &v("x__y-1", false, false, vec!["env_build: x".into()]),
        )
        .unwrap();
        assert!(read_validation(&dir, "x__y-1").is_none(), "infrastructure");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ids_are_counted_and_the_first_named() {
        let ids: Vec<String> = (1..=7).map(|i| format!("t.py::test_{i}")).collect();
        assert_eq!(
            ids_summary(&ids),
            "7 (t.py::test_1, t.py::test_2, t.py::test_3, +4 more)"
        );
        assert_eq!(ids_summary(&ids[..2]), "2 (t.py::test_1, t.py::test_2)");
    }

    #[test]
    fn failures_are_grouped_by_what_the_log_says() {
        let mut sm = StatusMap::new();
        sm.insert("t.py::a", FAILED);
        sm.insert("t.py::b", SKIPPED);
        sm.insert("t.py::c[x y]", SKIPPED);
        let ids: Vec<String> = ["t.py::a", "t.py::b", "t.py::c[x", "t.py::d"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            ids_by_status(&ids, &sm, Semantics::Classic),
            "failed 1 (t.py::a); skipped 2 (t.py::b, t.py::c[x); not run 1 (t.py::d)"
        );
    }

    #[test]
    fn rows() {
        let root = Path::new("/tmp/dojo-validate-1");
        let ids: Vec<String> = (1..=500)
            .map(|i| format!("tests/test_m.py::test_{i}"))
            .collect();
        let long_error = format!(
            "gold patch: environment build failed: uv pip install: {}\n{}",
            "x".repeat(300),
            "line\n".repeat(2000)
        );
        let rows = [
            validate_header(),
            validate_row(
                &v("x__y-1", true, false, vec![]),
                Some(&root.join("x__y-1")),
            ),
            validate_row(&v("x__y-new", true, true, vec![]), None),
            validate_row(
                &v(
                    "x__y-2",
                    false,
                    false,
                    vec![format!(
                        "PASS_TO_PASS broken with the gold patch: {}",
                        ids_summary(&ids)
                    )],
                ),
                Some(&root.join("x__y-2")),
            ),
            validate_row(
                &v("x__y-3", false, false, vec![long_error]),
                Some(&root.join("x__y-3")),
            ),
            validate_row(&v("x__y-4", false, false, vec!["one".into()]), None),
        ];
        for r in &rows {
            assert!(r.chars().count() < 400, "{r}");
        }
        insta::assert_snapshot!("validate_rows", rows.join("\n"));
    }

    #[test]
    fn runnable_line() {
        assert_eq!(
            super::runnable_line(2, 3, std::time::Duration::from_secs(6), 2),
            "\nrunnable: 2/3 (6.0 s, 30.00 tasks/min, 2 worker(s))"
        );
    }

    #[test]
    fn logs_are_kept_for_every_task_with_out_else_for_failures() {
        let dir = tempfile::tempdir().unwrap();
        let logs = ValidationLogs::new(Some(dir.path()));
        let good = v("good", true, false, vec![]);
        logs.write_early(&good).unwrap();
        assert!(logs.dir(&good).join("validation.json").is_file());
        assert_eq!(
            logs.row(&good).unwrap(),
            validate_row(&good, Some(&dir.path().join("good")))
        );
        let tmp = ValidationLogs::new(None);
        assert!(tmp.dir(&good).starts_with(std::env::temp_dir()));
        tmp.write_early(&good).unwrap();
        assert!(!tmp.dir(&good).exists());
        assert_eq!(tmp.row(&good).unwrap(), validate_row(&good, None));
    }
}
