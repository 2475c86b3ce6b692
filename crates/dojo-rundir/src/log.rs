//! The append-only JSONL log of a run: one record a line, written durably one at a time.
//!
//! Crash semantics. A record is written as one `write_all` of `json + "\n"` under a mutex, then
//! `fdatasync`; only then does [`JsonlLog::append`] return. After `kill -9` (or a power loss)
//! the file holds every synced record intact followed by at most one torn line. [`JsonlLog::open`]
//! detects the torn tail (no final newline, or a last line that does not parse as a record),
//! truncates it away, warns (the one warning every stage's log gives) and reports how many bytes
//! went ([`Opened::truncated_bytes`]); the caller does that piece of work again. A damaged line *before* the last one cannot come
//! from a crash of this writer, so it is refused as [`RunDirError::Corrupt`] with its line
//! number instead of being dropped. Blank lines are skipped.
//!
//! One writer per file: two processes appending to one log are not coordinated here (the
//! manifests of the callers refuse the second run of another configuration; two copies of the
//! same run duplicate records, which keyed callers drop on open).

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{Result, RunDirError};

/// An open log: appends go to its end.
#[derive(Debug)]
pub struct JsonlLog {
    path: PathBuf,
    file: Mutex<File>,
}

/// What [`JsonlLog::open`] read.
#[derive(Debug)]
pub struct Opened<T> {
    pub log: JsonlLog,
    /// Every complete record, with its 1-based line number, in file order.
    pub records: Vec<(usize, T)>,
    /// Bytes of a torn last line that were cut off (0: none).
    pub truncated_bytes: u64,
}

impl JsonlLog {
    /// Open (creating it and its directory if needed) the log at `path`, read every complete
    /// record as a `T`, and cut off a torn tail on disk.
    pub fn open<T: DeserializeOwned>(path: &Path) -> Result<Opened<T>> {
        let io = RunDirError::io;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
        }
        let existed = path.exists();
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(io(path))?;
        if !existed && let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // Make the new directory entry itself durable.
            crate::atomic::sync_dir(dir).map_err(io(dir))?;
        }
        let (records, good_len) = scan(path, &file)?;
        let total = file.metadata().map_err(io(path))?.len();
        if good_len < total {
            tracing::warn!(
                "{}: cut a torn last line ({} bytes) left by an interrupted run; what it recorded runs again",
                path.display(),
                total - good_len
            );
            file.set_len(good_len).map_err(io(path))?;
            file.sync_all().map_err(io(path))?;
        }
        file.seek(SeekFrom::End(0)).map_err(io(path))?;
        Ok(Opened {
            log: JsonlLog {
                path: path.to_path_buf(),
                file: Mutex::new(file),
            },
            records,
            truncated_bytes: total - good_len,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one record durably (one write, then `fdatasync`).
    pub fn append<T: Serialize + ?Sized>(&self, rec: &T) -> Result<()> {
        let mut line = serde_json::to_vec(rec).map_err(|source| RunDirError::Serialise {
            path: self.path.clone(),
            source,
        })?;
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        file.write_all(&line).map_err(RunDirError::io(&self.path))?;
        file.sync_data().map_err(RunDirError::io(&self.path))
    }

    /// Append several records as one write and one `fdatasync`: after a crash all of them are
    /// there, or a prefix of them and a torn line that the next open cuts off. (Whole-batch
    /// semantics, e.g. a rollout's records all or none, is the caller's, on top: see
    /// `dojo_world::record::WorldWriter`.)
    pub fn append_all<'r, T: Serialize + 'r>(
        &self,
        recs: impl IntoIterator<Item = &'r T>,
    ) -> Result<()> {
        let mut batch = Vec::new();
        for rec in recs {
            serde_json::to_writer(&mut batch, rec).map_err(|source| RunDirError::Serialise {
                path: self.path.clone(),
                source,
            })?;
            batch.push(b'\n');
        }
        if batch.is_empty() {
            return Ok(());
        }
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        file.write_all(&batch)
            .map_err(RunDirError::io(&self.path))?;
        file.sync_data().map_err(RunDirError::io(&self.path))
    }
}

impl<T: Serialize> Opened<T> {
    /// Keep only the records for which `keep` holds, rewriting the file atomically when any
    /// goes (a kill during the rewrite leaves the old file whole), from the records already
    /// read. Used on resume to drop the records of work that runs again (an RL step after the
    /// last checkpoint).
    pub fn retain(self, mut keep: impl FnMut(&T) -> bool) -> Result<Opened<T>> {
        if self.records.iter().all(|(_, r)| keep(r)) {
            return Ok(self);
        }
        let kept: Vec<T> = self
            .records
            .into_iter()
            .map(|(_, r)| r)
            .filter(|r| keep(r))
            .collect();
        let path = self.log.path;
        let mut body = Vec::new();
        for r in &kept {
            serde_json::to_writer(&mut body, r).map_err(|source| RunDirError::Serialise {
                path: path.clone(),
                source,
            })?;
            body.push(b'\n');
        }
        crate::atomic::write_atomic(&path, &body).map_err(RunDirError::io(&path))?;
        // An append handle on the file now at `path` (the rewrite replaced the old one).
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(RunDirError::io(&path))?;
        Ok(Opened {
            log: JsonlLog {
                path,
                file: Mutex::new(file),
            },
            records: kept
                .into_iter()
                .enumerate()
                .map(|(i, r)| (i + 1, r))
                .collect(),
            truncated_bytes: self.truncated_bytes,
        })
    }
}

/// Every complete record of the log at `path` (none when there is no file), read-only: a torn
/// tail is skipped, not cut (that is the writer's [`JsonlLog::open`]); damage before the last
/// line is [`RunDirError::Corrupt`].
pub fn read<T: DeserializeOwned>(path: &Path) -> Result<Vec<(usize, T)>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(RunDirError::io(path)(e)),
    };
    Ok(scan(path, &file)?.0)
}

/// Every complete record and the length of the good prefix. A bad line is only forgivable as
/// the last one: it is remembered, and the scan fails if anything follows it.
fn scan<T: DeserializeOwned>(path: &Path, file: &File) -> Result<(Vec<(usize, T)>, u64)> {
    let mut reader = BufReader::new(file);
    reader
        .seek(SeekFrom::Start(0))
        .map_err(RunDirError::io(path))?;
    let mut records = Vec::new();
    let mut offset = 0u64;
    let mut line_no = 0usize;
    let mut buf = Vec::new();
    // A bad line is an error only if another line follows it (else it is a torn tail).
    let mut pending_bad: Option<Pending> = None;
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(RunDirError::io(path))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        if let Some(Pending { line, source }) = pending_bad.take() {
            return Err(RunDirError::Corrupt {
                path: path.to_path_buf(),
                line,
                source,
            });
        }
        if buf.last() != Some(&b'\n') {
            break;
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            offset += n as u64;
            continue;
        }
        match serde_json::from_slice::<T>(&buf[..n - 1]) {
            Ok(rec) => {
                records.push((line_no, rec));
                offset += n as u64;
            }
            Err(source) => {
                pending_bad = Some(Pending {
                    line: line_no,
                    source,
                })
            }
        }
    }
    Ok((records, offset))
}

/// A line that did not parse, held until the next line shows it is not the torn tail.
struct Pending {
    line: usize,
    source: serde_json::Error,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn write(p: &Path, s: &str) {
        std::fs::write(p, s).unwrap();
    }

    #[test]
    fn append_then_reopen_reads_back_in_order() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sub/log.jsonl");
        let o = JsonlLog::open::<Value>(&p).unwrap();
        assert!(o.records.is_empty());
        o.log.append(&json!({"a": 1})).unwrap();
        o.log.append(&json!({"a": 2})).unwrap();
        drop(o);
        let o = JsonlLog::open::<Value>(&p).unwrap();
        let got: Vec<_> = o
            .records
            .iter()
            .map(|(l, v)| (*l, v["a"].clone()))
            .collect();
        assert_eq!(got, vec![(1, json!(1)), (2, json!(2))]);
        assert_eq!(o.truncated_bytes, 0);
    }

    #[test]
    fn a_torn_tail_is_cut_off_on_disk() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("log.jsonl");
        // Without its newline, and (second case) complete but not a record.
        for tail in ["{\"a\": 3", "{\"a\": 3,,}\n"] {
            write(&p, &format!("{{\"a\":1}}\n\n{{\"a\":2}}\n{tail}"));
            let o = JsonlLog::open::<Value>(&p).unwrap();
            assert_eq!(o.records.len(), 2);
            assert_eq!(o.truncated_bytes, tail.len() as u64);
            o.log.append(&json!({"a": 4})).unwrap();
            assert_eq!(
                std::fs::read_to_string(&p).unwrap(),
                "{\"a\":1}\n\n{\"a\":2}\n{\"a\":4}\n"
            );
        }
    }

    #[test]
    fn damage_before_the_last_line_is_refused_with_its_line() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("log.jsonl");
        write(&p, "{\"a\":1}\nnot json\n{\"a\":2}\n");
        let e = JsonlLog::open::<Value>(&p).unwrap_err();
        assert!(matches!(e, RunDirError::Corrupt { line: 2, .. }), "{e}");
        assert!(e.to_string().contains("log.jsonl line 2"), "{e}");
        // Nothing was cut.
        assert_eq!(std::fs::read(&p).unwrap().len(), 25);
    }

    #[test]
    fn a_batch_is_one_write_and_read_leaves_a_torn_tail_alone() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("w.jsonl");
        let o = JsonlLog::open::<Value>(&p).unwrap();
        o.log.append_all(&[json!(1), json!(2)]).unwrap();
        o.log.append_all(&Vec::<Value>::new()).unwrap();
        drop(o);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .unwrap()
            .write_all(b"[3")
            .unwrap();
        let got: Vec<Value> = read(&p).unwrap().into_iter().map(|(_, v)| v).collect();
        assert_eq!(got, vec![json!(1), json!(2)]);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "1\n2\n[3");
        assert!(read::<Value>(&d.path().join("none")).unwrap().is_empty());
    }

    #[test]
    fn retain_rewrites_atomically_and_keeps_appending() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("m.jsonl");
        write(&p, "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n{\"st");
        let o = JsonlLog::open::<Value>(&p).unwrap();
        let o = o.retain(|v: &Value| v["step"].as_u64() <= Some(2)).unwrap();
        assert_eq!(o.records.len(), 2);
        o.log.append(&json!({"step": 3})).unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n"
        );
    }

    proptest::proptest! {
        /// Whatever prefix of a well-formed log a crash leaves, opening keeps exactly the
        /// records whose line was complete and cuts the rest.
        #[test]
        fn any_crash_prefix_keeps_the_complete_records(n in 1usize..8, cut in 0usize..400) {
            let d = tempfile::tempdir().unwrap();
            let p = d.path().join("log.jsonl");
            let lines: Vec<String> =
                (0..n).map(|i| format!("{{\"i\":{i},\"pad\":\"{}\"}}\n", "x".repeat(i * 7))).collect();
            let all = lines.concat();
            let cut = cut.min(all.len());
            write(&p, &all[..cut]);
            let o = JsonlLog::open::<Value>(&p).unwrap();
            let mut complete = 0;
            let mut len = 0;
            for l in &lines {
                if len + l.len() <= cut {
                    complete += 1;
                    len += l.len();
                }
            }
            proptest::prop_assert_eq!(o.records.len(), complete);
            proptest::prop_assert_eq!(std::fs::read(&p).unwrap().len(), len);
        }
    }
}
