//! The tolerant reader of JSONL files, for stages that read what others wrote (curation, SFT
//! export, world-model data): every line comes back with its number and whether it was torn,
//! and the caller parses it and reports a bad one instead of stopping. (The writer's own
//! resume path is strict instead: [`crate::log`].)

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use crate::{Result, RunDirError};

/// One non-blank line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// 1-based.
    pub number: usize,
    /// The line without surrounding whitespace (and without its newline: inside a torn JSON
    /// string a newline would read as a control character, not as the end of the input).
    pub text: String,
    /// The last line of the file, without its newline: a write that did not finish.
    pub torn: bool,
}

/// Streams the non-blank lines of a file. After an I/O error it yields that error once and
/// stops: the rest of the file cannot be trusted to be read.
pub struct JsonlLines {
    file: PathBuf,
    reader: BufReader<File>,
    buf: Vec<u8>,
    line: usize,
    bytes: u64,
    records: usize,
    done: bool,
}

impl JsonlLines {
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let f = File::open(&path).map_err(RunDirError::io(&path))?;
        Ok(JsonlLines {
            file: path,
            // Trajectory lines run to megabytes: a large buffer keeps reads few.
            reader: BufReader::with_capacity(1 << 20, f),
            buf: Vec::new(),
            line: 0,
            bytes: 0,
            records: 0,
            done: false,
        })
    }

    /// The file being read.
    pub fn path(&self) -> &Path {
        &self.file
    }

    /// The 1-based number of the line last returned (0 before the first).
    pub fn line(&self) -> usize {
        self.line
    }

    /// Bytes read so far, newlines and blank lines included.
    pub fn bytes_read(&self) -> u64 {
        self.bytes
    }

    /// Non-blank lines returned so far.
    pub fn records_seen(&self) -> usize {
        self.records
    }
}

impl Iterator for JsonlLines {
    type Item = Result<Line>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            self.buf.clear();
            let n = match self.reader.read_until(b'\n', &mut self.buf) {
                Ok(n) => n,
                Err(e) => {
                    self.done = true;
                    self.line += 1;
                    return Some(Err(RunDirError::io(&self.file)(e)));
                }
            };
            if n == 0 {
                self.done = true;
                break;
            }
            self.line += 1;
            self.bytes += n as u64;
            let torn = self.buf.last() != Some(&b'\n');
            let text = String::from_utf8_lossy(&self.buf);
            let text = text.trim();
            if text.is_empty() {
                continue;
            }
            self.records += 1;
            return Some(Ok(Line {
                number: self.line,
                text: text.to_string(),
                torn,
            }));
        }
        None
    }
}

/// A line a reader could not use: its number and why, torn tails named as such.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine {
    /// 1-based; 0 for an I/O error before any line.
    pub number: usize,
    /// The last line of the file, without its newline (an interrupted write).
    pub torn: bool,
    pub reason: String,
}

impl std::fmt::Display for BadLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.torn {
            write!(f, "line {}: torn last line ({})", self.number, self.reason)
        } else {
            write!(f, "line {}: {}", self.number, self.reason)
        }
    }
}

/// `N lines of FILE not shown: line …; line …`, for a reader that shows what it read (`None`
/// when every line was read).
pub fn bad_lines_note(file: &str, bad: &[BadLine]) -> Option<String> {
    if bad.is_empty() {
        return None;
    }
    let lines: Vec<String> = bad.iter().map(BadLine::to_string).collect();
    Some(format!(
        "{} line{} of {file} not shown: {}",
        bad.len(),
        if bad.len() == 1 { "" } else { "s" },
        lines.join("; ")
    ))
}

/// The records of a JSONL file that parse as `T`, and every line that did not.
#[derive(Debug, Clone)]
pub struct Records<T> {
    pub records: Vec<T>,
    pub bad: Vec<BadLine>,
}

impl<T> Default for Records<T> {
    fn default() -> Self {
        Records {
            records: Vec::new(),
            bad: Vec::new(),
        }
    }
}

/// Reads every line of `path` as a `T` through [`JsonlLines`]; a line that does not parse is
/// kept in [`Records::bad`] (the caller shows it) and reading goes on. `None` when the file does
/// not exist (a run that has not written it yet); an I/O error while reading is returned.
pub fn read_records<T: serde::de::DeserializeOwned>(
    path: impl AsRef<Path>,
) -> Result<Option<Records<T>>> {
    let lines = match JsonlLines::open(path) {
        Ok(l) => l,
        Err(RunDirError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let mut out = Records::default();
    for line in lines {
        let line = line?;
        match serde_json::from_str(&line.text) {
            Ok(r) => out.records.push(r),
            Err(e) => out.bad.push(BadLine {
                number: line.number,
                torn: line.torn,
                reason: e.to_string(),
            }),
        }
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_lines_skips_blanks_and_marks_a_torn_tail() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.jsonl");
        std::fs::write(&p, "{\"a\":1}\n\n  \n{\"b\":2}\n{\"c\"").unwrap();
        let mut r = JsonlLines::open(&p).unwrap();
        let got: Vec<Line> = r.by_ref().map(|l| l.unwrap()).collect();
        let summary: Vec<_> = got
            .iter()
            .map(|l| (l.number, l.text.as_str(), l.torn))
            .collect();
        assert_eq!(
            summary,
            vec![
                (1, "{\"a\":1}", false),
                (4, "{\"b\":2}", false),
                (5, "{\"c\"", true)
            ]
        );
        assert_eq!(r.records_seen(), 3);
        assert_eq!(r.bytes_read(), 24);
    }

    #[test]
    fn read_records_keeps_bad_lines_and_reads_a_missing_file_as_none() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.jsonl");
        assert!(read_records::<u32>(&p).unwrap().is_none());
        std::fs::write(&p, "1\n\"a\"\n\n3\n{\"c\"").unwrap();
        let r = read_records::<u32>(&p).unwrap().unwrap();
        assert_eq!(r.records, vec![1, 3]);
        let bad: Vec<_> = r.bad.iter().map(|b| (b.number, b.torn)).collect();
        assert_eq!(bad, vec![(2, false), (5, true)]);
        assert!(r.bad[1].to_string().starts_with("line 5: torn last line ("));
        let note = bad_lines_note("x.jsonl", &r.bad).unwrap();
        assert!(
            note.starts_with("2 lines of x.jsonl not shown: line 2: "),
            "{note}"
        );
        assert_eq!(bad_lines_note("x.jsonl", &[]), None);
    }

    #[test]
    fn a_missing_file_names_its_path() {
        let e = JsonlLines::open("/nonexistent/x.jsonl").err().unwrap();
        assert!(e.to_string().contains("/nonexistent/x.jsonl"), "{e}");
    }
}
