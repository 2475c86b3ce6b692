//! The crash-safe trajectory store: the run-directory kit's append-only JSONL log
//! ([`dojo_rundir::log`]), keyed by (task, sample) so that a retried job never writes a
//! trajectory twice.
//!
//! Why JSONL + fsync rather than SQLite in WAL mode: the file *is* the interchange format every
//! later stage reads (curation, SFT export, `dojo-trajectory`'s reader), so there is no export
//! step that could drift; it adds no C build (rusqlite's bundled SQLite costs minutes on 2 cores);
//! and one `fdatasync` per finished rollout is negligible next to a rollout's seconds-to-minutes.
//!
//! Crash semantics are the log's: after `kill -9` (or power loss) the file holds every synced
//! record intact followed by at most one torn line, which [`Store::open`] truncates away
//! ([`Recovery::truncated_bytes`]); that sample simply runs again. Damage before the last line
//! is refused with its line number. A key found twice on disk (two writers on one directory)
//! keeps the first record and is reported in [`Recovery::duplicates`].

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use dojo_rundir::{JsonlLog, RunDirError};
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
    log: JsonlLog,
    records: Mutex<BTreeMap<Key, T>>,
    recovery: Recovery,
}

impl<T: Keyed + Clone> Store<T> {
    /// Open (creating if needed) `path`, load every complete record, drop a torn tail.
    pub fn open(path: &Path) -> Result<Self, RunDirError> {
        let opened = JsonlLog::open::<T>(path)?;
        let mut records = BTreeMap::new();
        let mut recovery = Recovery {
            truncated_bytes: opened.truncated_bytes,
            duplicates: Vec::new(),
        };
        for (_, rec) in opened.records {
            match records.entry(rec.key()) {
                std::collections::btree_map::Entry::Occupied(e) => {
                    recovery.duplicates.push(e.key().clone())
                }
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(rec);
                }
            }
        }
        Ok(Store {
            log: opened.log,
            records: Mutex::new(records),
            recovery,
        })
    }

    pub fn path(&self) -> &Path {
        self.log.path()
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
    pub fn append(&self, rec: &T) -> Result<bool, RunDirError> {
        let key = rec.key();
        // Held across the write: two appends of one key cannot both pass the check.
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        if records.contains_key(&key) {
            return Ok(false);
        }
        self.log.append(rec)?;
        records.insert(key, rec.clone());
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;
    use std::io::Write;

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
        assert!(matches!(err, RunDirError::Corrupt { line: 2, .. }), "{err}");
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
