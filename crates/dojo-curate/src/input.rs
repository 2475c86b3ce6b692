//! Reading rollout outputs: directories (searched recursively for `*.jsonl`) or files.
//!
//! The lines themselves are read by `dojo-trajectory`'s tolerant [`JsonlReader`], the one reader
//! of trajectory files; this module finds the files and turns each unusable line into a
//! [`Problem`] with file, line and reason, so nothing is dropped silently and the rest of the file
//! is still read. A torn last line (a rollout killed mid-write) is reported as such, distinct
//! from corruption in the middle of a file.

use std::path::{Path, PathBuf};

use dojo_trajectory::{JsonlReader, LineProblem, ProblemKind, TrajectoryError};

use crate::view::{Origin, Traj};

/// A line (or file) that could not be used, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub file: String,
    /// 1-based; 0 when the problem concerns the whole file.
    pub line: usize,
    /// Short machine-readable kind (`truncated_last_line`, `invalid_json`, `invalid_record`,
    /// `unknown_schema_version`, `io`, `unrenderable`, `tokenizer_mismatch`), used in count tables.
    pub kind: String,
    pub reason: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: {}: {}",
            self.file, self.line, self.kind, self.reason
        )
    }
}

/// What reading the inputs produced.
#[derive(Debug, Default)]
pub struct Loaded {
    pub trajs: Vec<Traj>,
    pub problems: Vec<Problem>,
    pub files: Vec<PathBuf>,
    pub bytes: u64,
    /// Non-empty lines seen (each is a trajectory or a problem).
    pub lines: usize,
}

/// Expands directories into their `*.jsonl` files (sorted, so runs are reproducible).
pub fn expand(inputs: &[PathBuf]) -> (Vec<PathBuf>, Vec<Problem>) {
    let mut files = Vec::new();
    let mut problems = Vec::new();
    for input in inputs {
        if input.is_dir() {
            let mut found = Vec::new();
            walk(input, &mut found, &mut problems);
            if found.is_empty() {
                problems.push(Problem {
                    file: input.display().to_string(),
                    line: 0,
                    kind: "io".into(),
                    reason: "directory holds no *.jsonl trajectory files".into(),
                });
            }
            found.sort();
            files.extend(found);
        } else if input.is_file() {
            files.push(input.clone());
        } else {
            problems.push(Problem {
                file: input.display().to_string(),
                line: 0,
                kind: "io".into(),
                reason: "no such file or directory".into(),
            });
        }
    }
    (files, problems)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>, problems: &mut Vec<Problem>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            problems.push(Problem {
                file: dir.display().to_string(),
                line: 0,
                kind: "io".into(),
                reason: e.to_string(),
            });
            return;
        }
    };
    for entry in entries.flatten() {
        let p = entry.path();
        if p.is_dir() {
            walk(&p, out, problems);
        } else if p.extension().is_some_and(|e| e == "jsonl")
            && !is_predictions_file(&p)
            && !is_world_file(&p)
        {
            out.push(p);
        }
    }
}

/// `dojo rollout --export-predictions` writes SWE-bench predictions (`predictions.jsonl`,
/// `predictions.sample-<k>.jsonl`) beside the trajectories; they are not trajectories, so a
/// directory scan skips them (a file named explicitly is still read).
fn is_predictions_file(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("predictions"))
}

/// `dojo rollout` also writes world-model records (`world.jsonl`) beside the trajectories; they
/// are read by `--world`, not as trajectories (a file named explicitly is still read).
fn is_world_file(p: &Path) -> bool {
    p.file_name()
        .is_some_and(|n| n == dojo_world::record::WORLD_FILE)
}

/// Reads every trajectory of the given files/directories.
pub fn load(inputs: &[PathBuf]) -> Loaded {
    let (files, mut problems) = expand(inputs);
    let mut loaded = Loaded::default();
    for f in &files {
        read_file(f, &mut loaded, &mut problems);
    }
    loaded.problems.splice(0..0, problems);
    loaded.files = files;
    loaded
}

/// Reads one file through the trajectory crate's tolerant reader, turning its line problems into
/// curation's [`Problem`] kinds.
fn read_file(path: &Path, out: &mut Loaded, problems: &mut Vec<Problem>) {
    let name = path.display().to_string();
    let mut reader = match JsonlReader::open(path) {
        Ok(r) => r,
        Err(e) => {
            let reason = match e {
                TrajectoryError::Io { source, .. } => source.to_string(),
                other => other.to_string(),
            };
            problems.push(Problem {
                file: name,
                line: 0,
                kind: "io".into(),
                reason,
            });
            return;
        }
    };
    while let Some(item) = reader.next() {
        match item {
            Ok(t) => {
                let origin = Origin {
                    file: name.clone(),
                    line: reader.line(),
                };
                out.trajs.push(Traj::from_record(&t, origin));
            }
            Err(p) => problems.push(problem_of(&name, p)),
        }
    }
    out.bytes += reader.bytes_read();
    out.lines += reader.records_seen();
}

fn problem_of(file: &str, p: LineProblem) -> Problem {
    let (kind, reason) = match (p.kind, p.error) {
        (ProblemKind::Truncated, e) => (
            "truncated_last_line",
            format!("{e}; a rollout killed mid-write?"),
        ),
        (ProblemKind::UnsupportedSchema, e) => ("unknown_schema_version", e.to_string()),
        (ProblemKind::Io, TrajectoryError::Io { source, .. }) => ("io", source.to_string()),
        (ProblemKind::Io, e) => ("io", e.to_string()),
        (ProblemKind::Corrupt, e @ TrajectoryError::Json(_)) => ("invalid_json", e.to_string()),
        (ProblemKind::Corrupt, e) => ("invalid_record", e.to_string()),
    };
    Problem {
        file: file.to_string(),
        line: p.line,
        kind: kind.into(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dojo_trajectory::Trajectory;
    use std::io::Write;

    #[test]
    fn directory_scans_skip_rollout_predictions() {
        let dir = tempfile::tempdir().unwrap();
        let good = Trajectory::new("a", 0).to_json_line();
        std::fs::write(dir.path().join("trajectories.jsonl"), format!("{good}\n")).unwrap();
        std::fs::write(
            dir.path().join("predictions.jsonl"),
            "{\"instance_id\":\"a\",\"model_name_or_path\":\"m\",\"model_patch\":\"\"}\n",
        )
        .unwrap();
        let l = load(&[dir.path().to_path_buf()]);
        assert_eq!(l.trajs.len(), 1);
        assert!(l.problems.is_empty(), "{:?}", l.problems);
    }

    #[test]
    fn bad_lines_are_reported_and_the_rest_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.jsonl");
        let mut f = std::fs::File::create(&p).unwrap();
        let good = Trajectory::new("a", 0).to_json_line();
        writeln!(f, "{good}").unwrap();
        writeln!(f, "{{not json").unwrap();
        writeln!(f, r#"{{"schema_version":7,"task_id":"a","messages":[]}}"#).unwrap();
        writeln!(f).unwrap();
        writeln!(f, r#"{{"schema_version":1,"task_id":"a"}}"#).unwrap();
        writeln!(f, "{good}").unwrap();
        write!(f, "{}", &good[..good.len() / 2]).unwrap();
        drop(f);
        let l = load(&[dir.path().to_path_buf()]);
        assert_eq!(l.trajs.len(), 2);
        let kinds: Vec<_> = l
            .problems
            .iter()
            .map(|p| (p.line, p.kind.as_str()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (2, "invalid_json"),
                (3, "unknown_schema_version"),
                (5, "invalid_record"),
                (7, "truncated_last_line")
            ]
        );
        assert!(l.problems.iter().all(|p| p.file.ends_with("r.jsonl")));
        assert!(
            l.problems[1].reason.contains("schema_version 7"),
            "{}",
            l.problems[1].reason
        );
        assert_eq!(l.lines, 6);
        assert_eq!(l.trajs[1].origin.line, 6);
    }

    #[test]
    fn missing_input_is_a_problem_not_a_panic() {
        let l = load(&[PathBuf::from("/nonexistent/dir")]);
        assert!(l.trajs.is_empty());
        assert_eq!(l.problems[0].kind, "io");
    }
}
