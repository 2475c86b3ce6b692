//! The manifest of a run directory: one JSON file saying what the directory is a run of, which
//! decides once, on open, whether this invocation starts the run ([`Opened::Fresh`]), resumes
//! it ([`Opened::Resumed`]), or is refused because a compared field differs
//! ([`RunDirError::Mismatch`], naming each differing field with its old and new value). Two
//! configurations' records must never mix in one directory.
//!
//! `schema_version` is always compared: a directory written by another layout is refused
//! rather than misread.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::clip::{Keep, Unit};
use crate::{Result, RunDirError};

/// Which fields of the manifest must be equal to resume. Fields are dotted paths into the
/// JSON object (`config.lr`, `data.sha256`).
#[derive(Debug, Clone, Copy)]
pub enum Compare<'a> {
    /// Every field except these (what may change between invocations: the dojo version, a
    /// sample count that may grow).
    AllBut(&'a [&'a str]),
    /// Only these fields.
    Only(&'a [&'a str]),
}

/// What opening found.
#[derive(Debug, Clone, PartialEq)]
pub enum Opened<M> {
    /// No manifest: this invocation starts the run (the manifest is now written).
    Fresh,
    /// The manifest on disk, which agrees with the new one on every compared field.
    Resumed(M),
}

/// A manifest file in a run directory.
#[derive(Debug, Clone, Copy)]
pub struct Manifest<'a> {
    pub dir: &'a Path,
    /// `run.json`.
    pub file: &'a str,
    pub compare: Compare<'a>,
    /// Refuse to start a run in a directory that already holds other files.
    pub require_empty: bool,
}

impl<'a> Manifest<'a> {
    /// `dir/file`, comparing the fields `compare` names, in a directory that may hold other
    /// files.
    pub fn new(dir: &'a Path, file: &'a str, compare: Compare<'a>) -> Self {
        Manifest {
            dir,
            file,
            compare,
            require_empty: false,
        }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(self.file)
    }

    /// The manifest on disk, if any.
    pub fn read<M: DeserializeOwned>(&self) -> Result<Option<M>> {
        let Some(v) = self.read_value()? else {
            return Ok(None);
        };
        self.decode(v).map(Some)
    }

    fn read_value(&self) -> Result<Option<Value>> {
        let path = self.path();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(RunDirError::io(&path)(e)),
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|source| RunDirError::Invalid { path, source })
    }

    fn decode<M: DeserializeOwned>(&self, v: Value) -> Result<M> {
        serde_json::from_value(v).map_err(|source| RunDirError::Invalid {
            path: self.path(),
            source,
        })
    }

    /// Open the run: compare with the manifest on disk, or write `new` as the manifest of a
    /// fresh run.
    pub fn open<M: Serialize + DeserializeOwned>(&self, new: &M) -> Result<Opened<M>> {
        let new_v = to_value(&self.path(), new)?;
        if let Some(old_v) = self.read_value()? {
            let differences = differences(&old_v, &new_v, self.compare);
            if !differences.is_empty() {
                return Err(RunDirError::Mismatch {
                    dir: self.dir.to_path_buf(),
                    differences,
                });
            }
            return self.decode(old_v).map(Opened::Resumed);
        }
        if self.require_empty && std::fs::read_dir(self.dir).is_ok_and(|mut d| d.next().is_some()) {
            return Err(RunDirError::NotARun {
                dir: self.dir.to_path_buf(),
                file: self.file.to_string(),
            });
        }
        self.write(new)?;
        Ok(Opened::Fresh)
    }

    /// Write `m` as the manifest, atomically (creating the directory).
    pub fn write<M: Serialize>(&self, m: &M) -> Result<()> {
        let path = self.path();
        std::fs::create_dir_all(self.dir).map_err(RunDirError::io(self.dir))?;
        let mut text =
            serde_json::to_string_pretty(m).map_err(|source| RunDirError::Serialise {
                path: path.clone(),
                source,
            })?;
        text.push('\n');
        crate::atomic::write_atomic(&path, text.as_bytes()).map_err(RunDirError::io(&path))
    }
}

fn to_value<M: Serialize>(path: &Path, m: &M) -> Result<Value> {
    serde_json::to_value(m).map_err(|source| RunDirError::Serialise {
        path: path.to_path_buf(),
        source,
    })
}

/// The compared fields where `old` and `new` differ, as `field: old -> new` (down to the
/// innermost differing field of nested objects), `schema_version` first.
pub fn differences(old: &Value, new: &Value, compare: Compare) -> Vec<String> {
    let mut out = Vec::new();
    let (a, b) = (old.get("schema_version"), new.get("schema_version"));
    if a != b {
        out.push(describe("schema_version", a, b));
    }
    match compare {
        Compare::Only(fields) => {
            for f in fields.iter().filter(|f| **f != "schema_version") {
                let (a, b) = (lookup(old, f), lookup(new, f));
                if a != b {
                    diff_into(
                        f,
                        a.unwrap_or(&Value::Null),
                        b.unwrap_or(&Value::Null),
                        &[],
                        &mut out,
                    );
                }
            }
        }
        Compare::AllBut(ignore) => {
            let mut ignore = ignore.to_vec();
            ignore.push("schema_version");
            diff_into("", old, new, &ignore, &mut out);
        }
    }
    out
}

fn lookup<'v>(v: &'v Value, dotted: &str) -> Option<&'v Value> {
    dotted.split('.').try_fold(v, |v, k| v.get(k))
}

fn diff_into(prefix: &str, a: &Value, b: &Value, ignore: &[&str], out: &mut Vec<String>) {
    if ignore.contains(&prefix) || a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys = x.keys().chain(y.keys().filter(|k| !x.contains_key(*k)));
            for k in keys {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                let (va, vb) = (
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                );
                diff_into(&p, va, vb, ignore, out);
            }
        }
        _ => out.push(describe(prefix, Some(a), Some(b))),
    }
}

fn describe(field: &str, a: Option<&Value>, b: Option<&Value>) -> String {
    format!("{field}: {} -> {}", show(a), show(b))
}

/// A value in a message: compact JSON, long ones (a task list) shortened.
fn show(v: Option<&Value>) -> String {
    const MAX: usize = 60;
    let s = v.map_or_else(|| "absent".to_string(), Value::to_string);
    let c = crate::clip::cut(&s, MAX, Unit::Chars, Keep::Head);
    if c.is_cut() {
        format!("{} ({} chars)", c.ellipsis(), MAX + c.cut)
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fresh_then_resumed_then_refused_naming_the_field() {
        let d = tempfile::tempdir().unwrap();
        let m = Manifest::new(d.path(), "run.json", Compare::AllBut(&["dojo_version"]));
        let a = json!({"schema_version": 1, "dojo_version": "0.1", "config": {"lr": 1e-5, "k": 4}});
        assert_eq!(m.open(&a).unwrap(), Opened::Fresh);
        let mut b = a.clone();
        b["dojo_version"] = json!("0.2");
        assert_eq!(m.open(&b).unwrap(), Opened::Resumed(a.clone()));
        b["config"]["k"] = json!(8);
        let e = m.open(&b).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("config.k: 4 -> 8"), "{msg}");
        assert!(!msg.contains("lr"), "{msg}");
        assert!(msg.contains(&d.path().display().to_string()), "{msg}");
    }

    #[test]
    fn schema_version_is_always_compared() {
        let d = tempfile::tempdir().unwrap();
        let m = Manifest::new(d.path(), "run.json", Compare::Only(&["policy"]));
        m.open(&json!({"schema_version": 1, "policy": "x"}))
            .unwrap();
        let e = m
            .open(&json!({"schema_version": 2, "policy": "x"}))
            .unwrap_err();
        assert!(e.to_string().contains("schema_version: 1 -> 2"), "{e}");
    }

    #[test]
    fn only_compares_the_named_fields_and_long_values_are_shortened() {
        let old = json!({"schema_version": 1, "tasks": (0..50).collect::<Vec<_>>(), "n": 1, "data": {"sha256": "a", "path": "x"}});
        let new = json!({"schema_version": 1, "tasks": (0..51).collect::<Vec<_>>(), "n": 2, "data": {"sha256": "b", "path": "y"}});
        let d = differences(&old, &new, Compare::Only(&["tasks", "data.sha256"]));
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(
            d[0].starts_with("tasks: [0,1,2") && d[0].contains("chars)"),
            "{d:?}"
        );
        assert_eq!(d[1], "data.sha256: \"a\" -> \"b\"");
    }

    #[test]
    fn a_non_empty_directory_without_a_manifest_is_refused_when_asked() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("something"), "x").unwrap();
        let m = Manifest {
            require_empty: true,
            ..Manifest::new(d.path(), "run.json", Compare::AllBut(&[]))
        };
        let e = m.open(&json!({"schema_version": 1})).unwrap_err();
        assert!(matches!(e, RunDirError::NotARun { .. }), "{e}");
        assert!(!d.path().join("run.json").exists());
    }

    #[test]
    fn an_unreadable_manifest_is_an_error_not_a_fresh_run() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("run.json"), "{").unwrap();
        let m = Manifest::new(d.path(), "run.json", Compare::AllBut(&[]));
        let e = m.open(&json!({"schema_version": 1})).unwrap_err();
        assert!(matches!(e, RunDirError::Invalid { .. }), "{e}");
    }
}
