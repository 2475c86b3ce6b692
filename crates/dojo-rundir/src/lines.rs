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
    fn a_missing_file_names_its_path() {
        let e = JsonlLines::open("/nonexistent/x.jsonl").err().unwrap();
        assert!(e.to_string().contains("/nonexistent/x.jsonl"), "{e}");
    }
}
