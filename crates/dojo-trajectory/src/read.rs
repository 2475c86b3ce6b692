//! Reading JSONL files of trajectory records, tolerant of damage: a rollout engine killed mid-write
//! leaves a truncated last line, and a disk or a hand edit can corrupt one in the middle. Each bad
//! line becomes a [`LineProblem`] naming file and line; reading goes on with the next line.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use crate::{SCHEMA_VERSION, Trajectory};

/// Why a record could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TrajectoryError {
    #[error("not valid JSON: {0}")]
    Json(#[source] serde_json::Error),
    #[error("record has no numeric `schema_version`")]
    NoSchemaVersion,
    #[error(
        "record has schema_version {found}; this build reads only version {supported} (upgrade dojo)"
    )]
    UnsupportedSchema { found: u64, supported: u32 },
    #[error("record of schema version {version} does not match its layout: {source}")]
    Layout {
        version: u32,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub(crate) fn parse_record(text: &str) -> Result<Trajectory, TrajectoryError> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(TrajectoryError::Json)?;
    let version = value
        .get("schema_version")
        .and_then(serde_json::Value::as_u64)
        .ok_or(TrajectoryError::NoSchemaVersion)?;
    if version != u64::from(SCHEMA_VERSION) {
        return Err(TrajectoryError::UnsupportedSchema {
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    serde_json::from_value(value).map_err(|source| TrajectoryError::Layout {
        version: SCHEMA_VERSION,
        source,
    })
}

/// What was wrong with a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemKind {
    /// The last line of the file, without its newline, does not parse: an interrupted write.
    Truncated,
    /// A complete line that is not a valid record.
    Corrupt,
    /// A valid record of a schema version this build does not read.
    UnsupportedSchema,
}

/// One unusable line.
#[derive(Debug)]
pub struct LineProblem {
    pub file: PathBuf,
    /// 1-based.
    pub line: usize,
    pub kind: ProblemKind,
    pub error: TrajectoryError,
}

impl std::fmt::Display for LineProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.kind {
            ProblemKind::Truncated => "truncated record (interrupted write)",
            ProblemKind::Corrupt => "corrupt record",
            ProblemKind::UnsupportedSchema => "unsupported record",
        };
        write!(
            f,
            "{}:{}: {what}: {}",
            self.file.display(),
            self.line,
            self.error
        )
    }
}

/// Streams records from a JSONL file; yields `Err(LineProblem)` for bad lines and continues.
pub struct JsonlReader {
    file: PathBuf,
    lines: std::io::Split<BufReader<File>>,
    line: usize,
}

impl JsonlReader {
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TrajectoryError> {
        let path = path.as_ref().to_path_buf();
        let f = File::open(&path).map_err(|source| TrajectoryError::Io {
            path: path.clone(),
            source,
        })?;
        Ok(JsonlReader {
            file: path,
            lines: BufReader::new(f).split(b'\n'),
            line: 0,
        })
    }
}

impl Iterator for JsonlReader {
    type Item = Result<Trajectory, LineProblem>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let raw = match self.lines.next()? {
                Ok(raw) => raw,
                Err(source) => {
                    self.line += 1;
                    let error = TrajectoryError::Io {
                        path: self.file.clone(),
                        source,
                    };
                    return Some(Err(LineProblem {
                        file: self.file.clone(),
                        line: self.line,
                        kind: ProblemKind::Corrupt,
                        error,
                    }));
                }
            };
            self.line += 1;
            // A line whose JSON ends mid-value (EOF error) is an interrupted write.
            let text = String::from_utf8_lossy(&raw);
            if text.trim().is_empty() {
                continue;
            }
            return Some(parse_record(&text).map_err(|error| {
                let kind = match &error {
                    TrajectoryError::UnsupportedSchema { .. } => ProblemKind::UnsupportedSchema,
                    TrajectoryError::Json(e) if e.is_eof() => ProblemKind::Truncated,
                    _ => ProblemKind::Corrupt,
                };
                LineProblem {
                    file: self.file.clone(),
                    line: self.line,
                    kind,
                    error,
                }
            }));
        }
    }
}

/// Everything readable from a file, plus every problem met on the way.
#[derive(Debug, Default)]
pub struct ReadReport {
    pub trajectories: Vec<Trajectory>,
    pub problems: Vec<LineProblem>,
}

/// Read a whole JSONL file. Only failing to open the file is an error; bad lines are reported in
/// [`ReadReport::problems`].
pub fn read_jsonl(path: impl AsRef<Path>) -> Result<ReadReport, TrajectoryError> {
    let mut report = ReadReport::default();
    for item in JsonlReader::open(path)? {
        match item {
            Ok(t) => report.trajectories.push(t),
            Err(p) => report.problems.push(p),
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::sample;
    use std::io::Write;

    #[test]
    fn reports_bad_lines_and_continues() {
        let dir = std::env::temp_dir().join(format!("dojo-traj-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.jsonl");
        let good = sample().to_json_line();
        let future = good.replacen("\"schema_version\":1", "\"schema_version\":99", 1);
        let mut f = File::create(&path).unwrap();
        writeln!(f, "{good}").unwrap();
        writeln!(f, "{{\"not\": a record").unwrap();
        writeln!(f).unwrap();
        writeln!(f, "{future}").unwrap();
        writeln!(f, "{{\"schema_version\":1,\"task_id\":\"x\"}}").unwrap();
        writeln!(f, "{good}").unwrap();
        write!(f, "{}", &good[..good.len() / 2]).unwrap();
        drop(f);

        let report = read_jsonl(&path).unwrap();
        assert_eq!(report.trajectories.len(), 2);
        let kinds: Vec<_> = report.problems.iter().map(|p| (p.line, p.kind)).collect();
        assert_eq!(
            kinds,
            vec![
                (2, ProblemKind::Corrupt),
                (4, ProblemKind::UnsupportedSchema),
                (5, ProblemKind::Corrupt),
                (7, ProblemKind::Truncated)
            ]
        );
        let msg = report.problems[1].to_string();
        assert!(
            msg.contains("t.jsonl:4") && msg.contains("schema_version 99"),
            "{msg}"
        );
        let msg = report.problems[2].to_string();
        assert!(msg.contains("missing field"), "{msg}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn missing_file_names_the_path() {
        let err = read_jsonl("/nonexistent/x.jsonl").unwrap_err();
        assert!(err.to_string().contains("/nonexistent/x.jsonl"));
    }
}
