//! `dojo tasks check`: what is wrong with a task file before anything runs, per row (invalid
//! rows, duplicate ids), what its tasks lack for grading (test patch, test lists, an
//! environment spec), and the test ids their log parser can never report. It lives beside the
//! parsers because the last check asks them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use dojo_task::{EnvRegistry, GRADING_FIELDS, LoadReport, TaskError};

use crate::Parser;

/// A test id the task's log parser can never report (the pytest parser cuts ids at the first
/// whitespace; `pytest_options` shortens path parametrizations): such a test is never found
/// passing, so validation says "not passing with the gold patch" of a test that passed. A
/// warning (the official harness cannot match them either), not a problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmatchable {
    pub task: String,
    pub id: String,
    /// The name the parser logs this test under, if it logs it at all.
    pub logged_as: Option<String>,
    pub parser: String,
}

/// The findings of a check, in file order where there is one.
#[derive(Debug)]
pub struct TaskFileCheck {
    pub file: String,
    pub load: LoadReport,
    /// Tasks and sdist-built tasks per repository.
    pub per_repo: BTreeMap<String, (usize, usize)>,
    /// Grading field → the tasks without it.
    pub missing: BTreeMap<String, Vec<String>>,
    /// Tasks no environment spec covers.
    pub no_env: Vec<String>,
    /// Environment specs that failed to resolve, with why (the error and its causes).
    pub bad_env: Vec<String>,
    pub unmatchable: Vec<Unmatchable>,
}

impl TaskFileCheck {
    /// Checks the tasks `load` read from `file` against `registry`'s environment specs.
    pub fn of(file: &str, load: LoadReport, registry: &EnvRegistry) -> TaskFileCheck {
        let mut c = TaskFileCheck {
            file: file.to_string(),
            per_repo: BTreeMap::new(),
            missing: BTreeMap::new(),
            no_env: Vec::new(),
            bad_env: Vec::new(),
            unmatchable: Vec::new(),
            load: LoadReport::default(),
        };
        for t in &load.tasks {
            let e = c.per_repo.entry(t.repo.clone()).or_default();
            e.0 += 1;
            if t.sdist().is_some() {
                e.1 += 1;
            }
            for f in GRADING_FIELDS {
                let absent = match *f {
                    "test_patch" => t.test_patch.trim().is_empty(),
                    "FAIL_TO_PASS" => t.fail_to_pass.as_ref().is_none_or(Vec::is_empty),
                    "PASS_TO_PASS" => t.pass_to_pass.is_none(),
                    _ => false,
                };
                if absent {
                    c.missing
                        .entry(f.to_string())
                        .or_default()
                        .push(t.instance_id.clone());
                }
            }
            // Log parser and eval type are typed: a misspelt one failed when the row was read.
            match registry.resolve(t) {
                Ok(env) => {
                    let parser = Parser::from(env.log_parser);
                    for id in t.f2p().iter().chain(t.p2p()) {
                        if !parser.can_produce(id) {
                            c.unmatchable.push(Unmatchable {
                                task: t.instance_id.clone(),
                                id: id.clone(),
                                logged_as: parser.logged_as(id),
                                parser: env.log_parser.name().to_string(),
                            });
                        }
                    }
                }
                Err(TaskError::NoEnv { .. }) => c.no_env.push(t.instance_id.clone()),
                Err(e) => c.bad_env.push(dojo_rundir::error_chain(&e)),
            }
        }
        c.load = load;
        c
    }

    /// Problems (not warnings): invalid rows, duplicates, tasks without or with a broken
    /// environment. `dojo tasks check` exits 1 when there is one.
    pub fn problems(&self) -> usize {
        self.load.errors.len() + self.load.duplicates.len() + self.bad_env.len() + self.no_env.len()
    }
}

/// The first five of `ids`, and how many more.
fn preview(ids: &[String]) -> String {
    let mut s = ids.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if ids.len() > 5 {
        s.push_str(&format!(", … (+{})", ids.len() - 5));
    }
    s
}

impl fmt::Display for TaskFileCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let load = &self.load;
        writeln!(
            f,
            "{}: {} rows, {} valid, {} invalid",
            self.file,
            load.rows,
            load.tasks.len(),
            load.errors.len()
        )?;
        writeln!(f, "\n{:<40} {:>6} {:>6}", "repo", "tasks", "sdist")?;
        for (repo, (n, s)) in &self.per_repo {
            writeln!(f, "{repo:<40} {n:>6} {s:>6}")?;
        }
        for e in &load.errors {
            writeln!(f, "invalid: {e}")?;
        }
        for (id, locs) in &load.duplicates {
            writeln!(f, "duplicate: {id} at {}", locs.join(", "))?;
        }
        for (field, ids) in &self.missing {
            writeln!(
                f,
                "missing {field}: {} task(s): {}",
                ids.len(),
                preview(ids)
            )?;
        }
        if !self.no_env.is_empty() {
            writeln!(
                f,
                "no environment spec: {} task(s): {}",
                self.no_env.len(),
                preview(&self.no_env)
            )?;
        }
        for b in &self.bad_env {
            writeln!(f, "environment: {b}")?;
        }
        let rows = &self.unmatchable;
        if !rows.is_empty() {
            let tasks: BTreeSet<&str> = rows.iter().map(|r| r.task.as_str()).collect();
            writeln!(
                f,
                "warning: {} test id(s) in {} task(s) can never match: their log parser reports them under another name",
                rows.len(),
                tasks.len()
            )?;
            // One line per task: how many, and the first as an example.
            for task in tasks.iter().take(5) {
                let mine: Vec<&Unmatchable> = rows.iter().filter(|r| r.task == *task).collect();
                let u = mine[0];
                let how = match &u.logged_as {
                    Some(k) => format!("reported by {} as {k:?}", u.parser),
                    None => format!("never reported by {}", u.parser),
                };
                writeln!(
                    f,
                    "  {task}: {} id(s), e.g. {:?} is {how}",
                    mine.len(),
                    u.id
                )?;
            }
            if tasks.len() > 5 {
                writeln!(f, "  … (+{} task(s))", tasks.len() - 5)?;
            }
        }
        write!(
            f,
            "\n{}",
            if self.problems() == 0 {
                "OK"
            } else {
                "PROBLEMS FOUND"
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_id_warns_and_a_missing_environment_is_a_problem() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t.jsonl");
        let row = |id: &str, repo: &str, f2p: &str| {
            serde_json::json!({
                "instance_id": id, "repo": repo, "base_commit": "abc", "version": "1.0",
                "patch": "diff --git a/x.py b/x.py\n", "test_patch": "",
                "FAIL_TO_PASS": [f2p], "PASS_TO_PASS": [],
                "env": {"python": "3.11", "test_cmd": "pytest -rA"},
            })
            .to_string()
        };
        let mut no_env: serde_json::Value =
            serde_json::from_str(&row("o__none-1", "o/none", "t.py::x")).unwrap();
        no_env.as_object_mut().unwrap().remove("env");
        std::fs::write(
            &file,
            format!(
                "{}\n{no_env}\n",
                row("o__r-1", "o/r", "tests/t.py::test_f[sin( x)]")
            ),
        )
        .unwrap();
        let load = dojo_task::read_tasks(&file).unwrap();
        let c = TaskFileCheck::of("t.jsonl", load, &EnvRegistry::default());
        assert_eq!(c.no_env, ["o__none-1"]);
        assert_eq!(c.problems(), 1);
        assert_eq!(c.unmatchable.len(), 1, "{:?}", c.unmatchable);
        assert_eq!(c.missing["test_patch"], ["o__r-1", "o__none-1"]);
        let text = c.to_string();
        assert!(
            text.starts_with("t.jsonl: 2 rows, 2 valid, 0 invalid\n"),
            "{text}"
        );
        assert!(
            text.contains("no environment spec: 1 task(s): o__none-1"),
            "{text}"
        );
        assert!(text.contains("can never match"), "{text}");
        assert!(text.ends_with("\nPROBLEMS FOUND"), "{text}");
    }
}
