//! Reading JSONL files of trajectory records, tolerant of damage: a rollout engine killed mid-write
//! leaves a truncated last line, and a disk or a hand edit can corrupt one in the middle. Each bad
//! line becomes a [`LineProblem`] naming file and line; reading goes on with the next line.

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
    /// A line whose JSON ends mid-value, or a last line without its newline that does not parse:
    /// an interrupted write.
    Truncated,
    /// A complete line that is not a valid record: not JSON ([`TrajectoryError::Json`]) or JSON
    /// that does not match the record layout.
    Corrupt,
    /// A valid record of a schema version this build does not read.
    UnsupportedSchema,
    /// The file could not be read further; reading stops at this line.
    Io,
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
            ProblemKind::Io => "unreadable",
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

/// Streams records from a JSONL file; yields `Err(LineProblem)` for bad lines and continues
/// (after an I/O error it stops: the rest of the file cannot be trusted to be read). The lines
/// come from the run-directory kit's tolerant reader ([`dojo_rundir::JsonlLines`]).
///
/// Blank lines are skipped. [`JsonlReader::line`] says which line the last item came from, and
/// [`JsonlReader::bytes_read`] / [`JsonlReader::records_seen`] count what was read, for callers
/// that report throughput or check that every line was accounted for.
pub struct JsonlReader {
    lines: dojo_rundir::JsonlLines,
}

impl JsonlReader {
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TrajectoryError> {
        let path = path.as_ref();
        let lines = dojo_rundir::JsonlLines::open(path).map_err(|e| io_error(path, e))?;
        Ok(JsonlReader { lines })
    }

    /// The file being read.
    pub fn path(&self) -> &Path {
        self.lines.path()
    }

    /// The 1-based line number of the item last returned (0 before the first).
    pub fn line(&self) -> usize {
        self.lines.line()
    }

    /// Bytes read so far, newlines and blank lines included.
    pub fn bytes_read(&self) -> u64 {
        self.lines.bytes_read()
    }

    /// Non-blank lines seen so far: each became a record or a problem.
    pub fn records_seen(&self) -> usize {
        self.lines.records_seen()
    }

    fn problem(&self, kind: ProblemKind, error: TrajectoryError) -> LineProblem {
        LineProblem {
            file: self.path().to_path_buf(),
            line: self.line(),
            kind,
            error,
        }
    }
}

/// The line reader fails only with I/O errors.
fn io_error(path: &Path, e: dojo_rundir::RunDirError) -> TrajectoryError {
    match e {
        dojo_rundir::RunDirError::Io { path, source } => TrajectoryError::Io { path, source },
        other => TrajectoryError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(other.to_string()),
        },
    }
}

impl Iterator for JsonlReader {
    type Item = Result<Trajectory, LineProblem>;

    fn next(&mut self) -> Option<Self::Item> {
        let line = match self.lines.next()? {
            Ok(l) => l,
            Err(e) => {
                let error = io_error(self.path(), e);
                return Some(Err(self.problem(ProblemKind::Io, error)));
            }
        };
        Some(parse_record(&line.text).map_err(|error| {
            let kind = match &error {
                TrajectoryError::UnsupportedSchema { .. } => ProblemKind::UnsupportedSchema,
                TrajectoryError::Json(e) if line.torn || e.is_eof() => ProblemKind::Truncated,
                _ => ProblemKind::Corrupt,
            };
            self.problem(kind, error)
        }))
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
    use std::fs::File;
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
