//! The crash-safe trajectory store: one append-only JSONL file, one fsync per record.
//!
//! Why JSONL + fsync rather than SQLite in WAL mode: the file *is* the interchange format every
//! later stage reads (curation, SFT export, `dojo-trajectory`'s reader), so there is no export
//! step that could drift; it adds no C build (rusqlite's bundled SQLite costs minutes on 2 cores);
//! and one `fdatasync` per finished rollout is negligible next to a rollout's seconds-to-minutes.
//!
//! Crash semantics. A record is written as one `write_all` of `json + "\n"` under a mutex, then
//! `sync_data`; only then is the key reported done. After `kill -9` (or power loss) the file holds
//! every fsynced record intact followed by at most one torn line. [`Store::open`] detects the torn
//! tail (no final newline, or a last line that is not valid JSON), truncates it away with a warning
//! and resumes; that sample simply runs again. A damaged line *before* the last one cannot come from
//! a crash of this writer, so it is reported as corruption with its line number instead of being
//! silently dropped. A duplicated key (two writers on one directory) keeps the first record and warns.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// A trajectory's identity in a run: (task id, sample index).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
pub struct Key {
    pub task_id: String,
    pub sample_index: u32,
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}#{}", self.task_id, self.sample_index)
    }
}

/// Anything the store can hold: serialisable, and knows its key.
pub trait Keyed: Serialize + DeserializeOwned {
    fn key(&self) -> Key;
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("trajectory store {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "trajectory store {path} line {line}: corrupted record ({reason}); not a torn tail, refusing to guess"
    )]
    Corrupt {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error("trajectory store {path}: cannot serialise record {key}: {reason}")]
    Serialise {
        path: PathBuf,
        key: String,
        reason: String,
    },
}

/// What [`Store::open`] found and repaired; the caller prints it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// Bytes of a torn last line that were truncated away.
    pub truncated_bytes: u64,
    /// Keys found more than once (first kept).
    pub duplicates: Vec<Key>,
}

/// An open store: the records already on disk plus an append handle.
pub struct Store<T> {
    path: PathBuf,
    file: Mutex<File>,
    records: Mutex<BTreeMap<Key, T>>,
    recovery: Recovery,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl<T: Keyed + Clone> Store<T> {
    /// Open (creating if needed) `path`, load every complete record, drop a torn tail.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
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
        if !existed {
            // Make the new directory entry itself durable.
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                File::open(dir)
                    .and_then(|d| d.sync_all())
                    .map_err(io(dir))?;
            }
        }
        let (records, good_len, recovery) = Self::scan(path, &mut file)?;
        let total = file.metadata().map_err(io(path))?.len();
        if good_len < total {
            file.set_len(good_len).map_err(io(path))?;
            file.sync_all().map_err(io(path))?;
        }
        file.seek(SeekFrom::End(0)).map_err(io(path))?;
        Ok(Store {
            path: path.to_path_buf(),
            file: Mutex::new(file),
            records: Mutex::new(records),
            recovery,
        })
    }

    fn scan(path: &Path, file: &mut File) -> Result<(BTreeMap<Key, T>, u64, Recovery), StoreError> {
        file.seek(SeekFrom::Start(0)).map_err(io(path))?;
        let mut reader = BufReader::new(&*file);
        let mut records = BTreeMap::new();
        let mut recovery = Recovery::default();
        let mut offset = 0u64;
        let mut line_no = 0usize;
        let mut buf = Vec::new();
        // A bad line is only forgivable if it is the last one: remember it and fail if more follow.
        let mut pending_bad: Option<(usize, String)> = None;
        loop {
            buf.clear();
            let n = reader.read_until(b'\n', &mut buf).map_err(io(path))?;
            if n == 0 {
                break;
            }
            line_no += 1;
            if let Some((line, reason)) = pending_bad.take() {
                return Err(StoreError::Corrupt {
                    path: path.to_path_buf(),
                    line,
                    reason,
                });
            }
            let complete = buf.last() == Some(&b'\n');
            let body = if complete { &buf[..n - 1] } else { &buf[..] };
            if !complete {
                recovery.truncated_bytes = n as u64;
                break;
            }
            if body.iter().all(u8::is_ascii_whitespace) {
                offset += n as u64;
                continue;
            }
            match serde_json::from_slice::<T>(body) {
                Ok(rec) => {
                    let key = rec.key();
                    match records.entry(key) {
                        std::collections::btree_map::Entry::Occupied(e) => {
                            recovery.duplicates.push(e.key().clone())
                        }
                        std::collections::btree_map::Entry::Vacant(e) => {
                            e.insert(rec);
                        }
                    }
                    offset += n as u64;
                }
                Err(e) => {
                    recovery.truncated_bytes = n as u64;
                    pending_bad = Some((line_no, e.to_string()));
                }
            }
        }
        Ok((records, offset, recovery))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What opening had to repair.
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    pub fn contains(&self, key: &Key) -> bool {
        self.records.lock().is_ok_and(|r| r.contains_key(key))
    }

    /// The record stored under `key`.
    pub fn get(&self, key: &Key) -> Option<T> {
        self.records.lock().ok().and_then(|r| r.get(key).cloned())
    }

    pub fn len(&self) -> usize {
        self.records.lock().map_or(0, |r| r.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every record, in key order.
    pub fn records(&self) -> Vec<T> {
        self.records
            .lock()
            .map(|r| r.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Append one record durably. Returns `false` (and writes nothing) when the key is already
    /// stored, so a retried job can never duplicate a trajectory.
    pub fn append(&self, rec: &T) -> Result<bool, StoreError> {
        let key = rec.key();
        let mut line = serde_json::to_vec(rec).map_err(|e| StoreError::Serialise {
            path: self.path.clone(),
            key: key.to_string(),
            reason: e.to_string(),
        })?;
        line.push(b'\n');
        let mut records = self.records.lock().map_err(|_| StoreError::Io {
            path: self.path.clone(),
            source: std::io::Error::other("store mutex poisoned"),
        })?;
        if records.contains_key(&key) {
            return Ok(false);
        }
        let mut file = self.file.lock().map_err(|_| StoreError::Io {
            path: self.path.clone(),
            source: std::io::Error::other("store mutex poisoned"),
        })?;
        file.write_all(&line).map_err(io(&self.path))?;
        file.sync_data().map_err(io(&self.path))?;
        records.insert(key, rec.clone());
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
    struct R {
        task_id: String,
        sample_index: u32,
        payload: String,
    }
    impl Keyed for R {
        fn key(&self) -> Key {
            Key {
                task_id: self.task_id.clone(),
                sample_index: self.sample_index,
            }
        }
    }
    fn r(t: &str, i: u32) -> R {
        R {
            task_id: t.into(),
            sample_index: i,
            payload: "x\ny\"z".into(),
        }
    }

    #[test]
    fn append_reopen_roundtrip_and_no_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/t.jsonl");
        let s = Store::<R>::open(&p).unwrap();
        assert!(s.append(&r("a", 0)).unwrap());
        assert!(s.append(&r("a", 1)).unwrap());
        assert!(!s.append(&r("a", 0)).unwrap());
        drop(s);
        let s = Store::<R>::open(&p).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s.records()[1], r("a", 1));
        assert_eq!(s.recovery(), &Recovery::default());
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text.lines().count(), 2);
    }

    #[test]
    fn torn_tail_without_newline_is_truncated() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        let s = Store::<R>::open(&p).unwrap();
        s.append(&r("a", 0)).unwrap();
        drop(s);
        let good = std::fs::metadata(&p).unwrap().len();
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(br#"{"task_id":"b","sample_ind"#).unwrap();
        drop(f);
        let s = Store::<R>::open(&p).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s.recovery().truncated_bytes, 26);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), good);
        s.append(&r("b", 0)).unwrap();
        drop(s);
        assert_eq!(Store::<R>::open(&p).unwrap().len(), 2);
    }

    #[test]
    fn garbage_last_line_with_newline_is_truncated() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        std::fs::write(
            &p,
            format!("{}\n{{\"oops\n", serde_json::to_string(&r("a", 0)).unwrap()),
        )
        .unwrap();
        let s = Store::<R>::open(&p).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s.recovery().truncated_bytes, 7);
    }

    #[test]
    fn corruption_in_the_middle_is_an_error_naming_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        let good = serde_json::to_string(&r("a", 0)).unwrap();
        std::fs::write(&p, format!("{good}\nnot json\n{good}\n")).unwrap();
        let err = Store::<R>::open(&p).err().unwrap();
        assert!(matches!(err, StoreError::Corrupt { line: 2, .. }), "{err}");
        assert!(err.to_string().contains("line 2"));
    }

    #[test]
    fn duplicate_keys_on_disk_keep_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        let mut second = r("a", 0);
        second.payload = "second".into();
        std::fs::write(
            &p,
            format!(
                "{}\n{}\n",
                serde_json::to_string(&r("a", 0)).unwrap(),
                serde_json::to_string(&second).unwrap()
            ),
        )
        .unwrap();
        let s = Store::<R>::open(&p).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s.records()[0], r("a", 0));
        assert_eq!(s.recovery().duplicates.len(), 1);
    }
}
