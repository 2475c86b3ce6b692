//! Strict loaders for task files: JSONL (one instance per line), JSON (an array or a single
//! object) and Parquet (SWE-bench's distribution format). The format is chosen by extension.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use dojo_rundir::json::type_name;
use serde_json::{Map, Value};

use crate::TaskError;
use crate::model::{Location, Task};

/// Everything read from one file: the valid tasks and, separately, every invalid row.
#[derive(Debug, Default)]
pub struct LoadReport {
    pub tasks: Vec<Task>,
    pub errors: Vec<TaskError>,
    /// instance_id → every location it appears at (only ids seen more than once).
    pub duplicates: BTreeMap<String, Vec<String>>,
    pub rows: usize,
}

/// Read every row, collecting invalid ones instead of stopping (for `dojo tasks check`).
/// A file without a single row is an error: it is a wrong path or a failed export, never a task
/// set.
pub fn read_tasks(path: &Path) -> Result<LoadReport, TaskError> {
    let rows = read_rows(path)?;
    if rows.is_empty() {
        return Err(TaskError::Empty {
            path: path.display().to_string(),
        });
    }
    let mut rep = LoadReport {
        rows: rows.len(),
        ..Default::default()
    };
    let mut seen: HashMap<String, Vec<String>> = HashMap::new();
    for (loc, row) in rows {
        match row.and_then(|r| Task::from_row(r, &loc)) {
            Ok(t) => {
                seen.entry(t.instance_id.clone())
                    .or_default()
                    .push(loc.to_string());
                rep.tasks.push(t);
            }
            Err(e) => rep.errors.push(e),
        }
    }
    rep.duplicates = seen.into_iter().filter(|(_, v)| v.len() > 1).collect();
    Ok(rep)
}

/// Read a task file strictly: the first invalid row or a duplicated instance_id is an error.
pub fn load_tasks(path: &Path) -> Result<Vec<Task>, TaskError> {
    let rep = read_tasks(path)?;
    if let Some(e) = rep.errors.into_iter().next() {
        return Err(e);
    }
    if let Some((id, locs)) = rep.duplicates.into_iter().next() {
        return Err(TaskError::Duplicate {
            instance_id: id,
            locations: locs.join(", "),
        });
    }
    Ok(rep.tasks)
}

/// The tasks of `path` strictly loaded ([`load_tasks`]), only `instances` when some are named
/// ([`select_instances`]).
pub fn load_selected(path: &Path, instances: &[String]) -> Result<Vec<Task>, TaskError> {
    select_instances(load_tasks(path)?, instances, path)
}

/// `tasks` (loaded from `path`), only `instances` in file order when some are named; an
/// instance the file lacks is an error naming it and the file.
pub fn select_instances(
    tasks: Vec<Task>,
    instances: &[String],
    path: &Path,
) -> Result<Vec<Task>, TaskError> {
    if let Some(id) = instances
        .iter()
        .find(|id| !tasks.iter().any(|t| &t.instance_id == *id))
    {
        return Err(TaskError::NoInstance {
            path: path.display().to_string(),
            instance_id: id.clone(),
        });
    }
    if instances.is_empty() {
        return Ok(tasks);
    }
    Ok(tasks
        .into_iter()
        .filter(|t| instances.contains(&t.instance_id))
        .collect())
}

/// Git-based tasks (no `source`) need their repositories under `repos` (`--repos`): checked
/// before any work, naming the option and the repositories, rather than failing every task's
/// preparation.
pub fn check_repos(tasks: &[Task], repos: Option<&Path>) -> Result<(), TaskError> {
    let git: Vec<&Task> = tasks.iter().filter(|t| t.sdist().is_none()).collect();
    let needed: std::collections::BTreeSet<&str> = git.iter().map(|t| t.repo.as_str()).collect();
    if needed.is_empty() {
        return Ok(());
    }
    let Some(dir) = repos else {
        let names: Vec<String> = needed.iter().map(|r| r.replace('/', "__")).collect();
        return Err(TaskError::Repos(format!(
            "{} selected task(s) are git-based (no `source`): pass --repos DIR holding a clone or mirror of each repository as owner__name or name ({})",
            git.len(),
            names.join(", ")
        )));
    };
    let missing: Vec<TaskError> = needed
        .iter()
        .filter_map(|r| crate::find_repo(dir, r).err())
        .collect();
    if !missing.is_empty() {
        return Err(TaskError::MissingRepos(missing));
    }
    Ok(())
}

type Row = (Location, Result<Map<String, Value>, TaskError>);

fn not_object(loc: &Location, v: &Value) -> TaskError {
    TaskError::Invalid {
        location: loc.to_string(),
        instance_id: "?".into(),
        field: "(row)".into(),
        reason: format!("expected a JSON object, found {}", type_name(v)),
    }
}

/// The raw rows of a file, each with its location; row-level parse errors are kept per row.
pub fn read_rows(path: &Path) -> Result<Vec<Row>, TaskError> {
    let file = path.display().to_string();
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let io = |e: std::io::Error| TaskError::Io {
        path: file.clone(),
        source: e,
    };
    match ext.as_str() {
        "jsonl" | "ndjson" => {
            let f = File::open(path).map_err(io)?;
            let mut out = Vec::new();
            for (i, line) in BufReader::new(f).split(b'\n').enumerate() {
                let line = line.map_err(io)?;
                let loc = Location {
                    file: file.clone(),
                    unit: "line",
                    index: i + 1,
                };
                let text = match String::from_utf8(line) {
                    Ok(t) => t,
                    Err(_) => {
                        out.push((
                            loc.clone(),
                            Err(TaskError::Parse {
                                location: loc.to_string(),
                                reason: "not UTF-8".into(),
                            }),
                        ));
                        continue;
                    }
                };
                if text.trim().is_empty() {
                    continue;
                }
                let row = match serde_json::from_str::<Value>(&text) {
                    Ok(Value::Object(m)) => Ok(m),
                    Ok(v) => Err(not_object(&loc, &v)),
                    Err(source) => Err(TaskError::Json {
                        location: loc.to_string(),
                        source,
                    }),
                };
                out.push((loc, row));
            }
            Ok(out)
        }
        "json" => {
            let text = std::fs::read_to_string(path).map_err(io)?;
            let v: Value = serde_json::from_str(&text).map_err(|source| TaskError::Json {
                location: format!("{file} line {}", source.line()),
                source,
            })?;
            let items = match v {
                Value::Array(a) => a,
                Value::Object(m) => vec![Value::Object(m)],
                _ => {
                    return Err(TaskError::Parse {
                        location: file,
                        reason: "expected an array of instances or one instance".into(),
                    });
                }
            };
            Ok(items
                .into_iter()
                .enumerate()
                .map(|(i, v)| {
                    let loc = Location {
                        file: file.clone(),
                        unit: "item",
                        index: i + 1,
                    };
                    let row = match v {
                        Value::Object(m) => Ok(m),
                        other => Err(not_object(&loc, &other)),
                    };
                    (loc, row)
                })
                .collect())
        }
        "parquet" => crate::parquet::read_parquet_rows(path),
        other => Err(TaskError::Parse {
            location: file,
            reason: format!(
                "unknown task file extension {other:?} (expected .jsonl, .json or .parquet)"
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn selected_instances_keep_file_order_and_an_unknown_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        let row = |id: &str| {
            format!(
                r#"{{"instance_id":"{id}","repo":"o/r","base_commit":"x","patch":"diff --git a/x b/x\n"}}"#
            )
        };
        std::fs::write(
            &p,
            format!("{}\n{}\n{}\n", row("o__r-1"), row("o__r-2"), row("o__r-3")),
        )
        .unwrap();
        let ids = |ts: Vec<Task>| ts.into_iter().map(|t| t.instance_id).collect::<Vec<_>>();
        let picked = load_selected(&p, &["o__r-3".into(), "o__r-1".into()]).unwrap();
        assert_eq!(ids(picked), ["o__r-1", "o__r-3"]);
        assert_eq!(load_selected(&p, &[]).unwrap().len(), 3);
        let e = load_selected(&p, &["o__r-9".into()])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--instance o__r-9") && e.contains("t.jsonl"),
            "{e}"
        );
        // Git-based tasks need --repos, and the message names the repositories.
        let tasks = load_tasks(&p).unwrap();
        let e = check_repos(&tasks, None).unwrap_err().to_string();
        assert!(e.contains("--repos") && e.contains("o__r"), "{e}");
        assert!(check_repos(&tasks, Some(dir.path())).is_err());
    }

    #[test]
    fn jsonl_collects_every_bad_line_and_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        let mut f = File::create(&p).unwrap();
        let good = r#"{"instance_id":"a-1","repo":"a/a","base_commit":"c","patch":"p","FAIL_TO_PASS":[],"PASS_TO_PASS":[]}"#;
        writeln!(f, "{good}").unwrap();
        writeln!(f, "{{not json").unwrap();
        writeln!(f).unwrap();
        writeln!(f, "[1,2]").unwrap();
        writeln!(f, "{good}").unwrap();
        f.write_all(b"{\"instance_id\":\"\xff\"}\n").unwrap();
        drop(f);
        let rep = read_tasks(&p).unwrap();
        assert_eq!(rep.tasks.len(), 2);
        let errs: Vec<String> = rep.errors.iter().map(ToString::to_string).collect();
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(errs[0].contains("t.jsonl line 2"), "{errs:?}");
        assert!(
            errs[1].contains("line 4") && errs[1].contains("array"),
            "{errs:?}"
        );
        assert!(
            errs[2].contains("line 6") && errs[2].contains("UTF-8"),
            "{errs:?}"
        );
        assert_eq!(rep.duplicates["a-1"].len(), 2);
        let e = load_tasks(&p).unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn a_file_without_tasks_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        for (name, body) in [("e.jsonl", "\n  \n"), ("e.json", "[]")] {
            let p = dir.path().join(name);
            std::fs::write(&p, body).unwrap();
            let e = read_tasks(&p).unwrap_err().to_string();
            assert!(e.contains(name) && e.contains("no tasks"), "{e}");
            assert!(load_tasks(&p).is_err());
        }
    }

    #[test]
    fn json_single_object_and_unknown_extension() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("one.json");
        std::fs::write(
            &p,
            r#"{"instance_id":"a-1","repo":"a/a","base_commit":"c","patch":"p"}"#,
        )
        .unwrap();
        assert_eq!(load_tasks(&p).unwrap().len(), 1);
        let q = dir.path().join("t.csv");
        std::fs::write(&q, "x").unwrap();
        assert!(
            load_tasks(&q)
                .unwrap_err()
                .to_string()
                .contains("extension")
        );
    }
}
