//! Checkpoint directories: a directory of files published all at once, kept N at a time.
//!
//! A checkpoint is written into a hidden temporary directory (`.tmp-NAME-PID`), every file is
//! synced, then [`COMPLETE_MARKER`] (listing each file with its size) is written last, and the
//! directory is renamed into place (replacing an older one of the same name). A run killed at
//! any point leaves either nothing under the final name or a complete checkpoint; [`is_complete`]
//! also rejects a directory whose files do not match the marker (a copy cut short), and
//! [`clean`] removes leftovers on the next start. What goes inside (weights, optimizer state,
//! a loop's own state file) is the caller's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::atomic::{sync_dir, sync_file};
use crate::{Result, RunDirError};

/// The completion marker's file name.
pub const COMPLETE_MARKER: &str = "dojo_checkpoint_complete.json";

/// Version of the marker's layout.
pub const MARKER_SCHEMA_VERSION: u32 = 1;

/// `checkpoint-00000042`.
pub fn checkpoint_name(step: u64) -> String {
    format!("checkpoint-{step:08}")
}

/// Publish `out/name`: `fill` writes the files into the temporary directory it is given (its
/// error type is the caller's); then the marker goes in and the directory is renamed into
/// place.
pub fn publish<E: From<RunDirError>>(
    out: &Path,
    name: &str,
    fill: impl FnOnce(&Path) -> Result<(), E>,
) -> Result<PathBuf, E> {
    let io = RunDirError::io;
    let tmp = out.join(format!(".tmp-{name}-{}", std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
    }
    std::fs::create_dir_all(&tmp).map_err(io(&tmp))?;
    fill(&tmp)?;
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(&tmp).map_err(io(&tmp))? {
        let entry = entry.map_err(io(&tmp))?;
        let p = entry.path();
        let len = entry.metadata().map_err(io(&p))?.len();
        sync_file(&p).map_err(io(&p))?;
        files.insert(entry.file_name().to_string_lossy().into_owned(), len);
    }
    let marker = tmp.join(COMPLETE_MARKER);
    let body = json!({"schema_version": MARKER_SCHEMA_VERSION, "files": files});
    std::fs::write(&marker, format!("{body:#}\n")).map_err(io(&marker))?;
    sync_file(&marker).map_err(io(&marker))?;
    sync_dir(&tmp).map_err(io(&tmp))?;
    let dest = out.join(name);
    if dest.exists() {
        std::fs::remove_dir_all(&dest).map_err(io(&dest))?;
    }
    std::fs::rename(&tmp, &dest).map_err(io(&dest))?;
    sync_dir(out).map_err(io(out))?;
    Ok(dest)
}

/// Whether `dir` holds a complete checkpoint: the marker is there and every file it lists has
/// the recorded size.
pub fn is_complete(dir: &Path) -> bool {
    let Ok(s) = std::fs::read_to_string(dir.join(COMPLETE_MARKER)) else {
        return false;
    };
    let Ok(v) = serde_json::from_str::<Value>(&s) else {
        return false;
    };
    let Some(files) = v.get("files").and_then(Value::as_object) else {
        return false;
    };
    files.iter().all(|(name, len)| {
        std::fs::metadata(dir.join(name)).is_ok_and(|m| Some(m.len()) == len.as_u64())
    })
}

/// Complete `checkpoint-N` directories in `out` that also hold `state_file` (the loop's own
/// resume state), by step, oldest first.
pub fn list(out: &Path, state_file: &str) -> Vec<(u64, PathBuf)> {
    let mut v: Vec<(u64, PathBuf)> = std::fs::read_dir(out)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let step = name.strip_prefix("checkpoint-")?.parse::<u64>().ok()?;
            let p = e.path();
            (is_complete(&p) && p.join(state_file).is_file()).then_some((step, p))
        })
        .collect();
    v.sort();
    v
}

/// Remove temporary directories left by an interrupted [`publish`], and `checkpoint-N` or
/// `named` directories without a valid marker.
pub fn clean(out: &Path, named: &[&str]) -> Result<()> {
    let io = RunDirError::io;
    for e in std::fs::read_dir(out).map_err(io(out))?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let p = e.path();
        let stale = name.starts_with(".tmp-")
            || ((name.starts_with("checkpoint-") || named.contains(&name.as_str()))
                && !is_complete(&p));
        if stale && p.is_dir() {
            tracing::warn!(path = %p.display(), "removing an incomplete checkpoint");
            std::fs::remove_dir_all(&p).map_err(io(&p))?;
        }
    }
    Ok(())
}

/// Keep the newest `keep` (at least one) of the checkpoints [`list`] lists for `state_file`.
pub fn prune(out: &Path, state_file: &str, keep: usize) -> Result<()> {
    let all = list(out, state_file);
    let n = all.len().saturating_sub(keep.max(1));
    for (_, p) in all.into_iter().take(n) {
        std::fs::remove_dir_all(&p).map_err(RunDirError::io(&p))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATE: &str = "state.json";

    fn ckpt(out: &Path, step: u64) -> PathBuf {
        publish::<RunDirError>(out, &checkpoint_name(step), |d| {
            std::fs::write(d.join("weights"), b"weights").unwrap();
            std::fs::write(d.join(STATE), b"{}").unwrap();
            Ok(())
        })
        .unwrap()
    }

    #[test]
    fn only_marked_directories_count_and_leftovers_are_cleaned() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path();
        let dir = ckpt(out, 2);
        assert!(is_complete(&dir));
        assert_eq!(list(out, STATE), vec![(2, dir.clone())]);

        // A write that died before its marker: under a temp name, or (older layouts, manual
        // copies) under the final name without one.
        std::fs::create_dir_all(out.join(".tmp-checkpoint-00000003-1")).unwrap();
        let half = out.join(checkpoint_name(4));
        std::fs::create_dir_all(&half).unwrap();
        std::fs::write(half.join(STATE), "{}").unwrap();
        std::fs::create_dir_all(out.join("final")).unwrap();
        assert_eq!(list(out, STATE).len(), 1);
        // A file truncated after the marker was written no longer matches it.
        std::fs::write(dir.join("weights"), b"weig").unwrap();
        assert!(!is_complete(&dir));
        std::fs::write(dir.join("weights"), b"weights").unwrap();

        clean(out, &["final"]).unwrap();
        let names: Vec<String> = std::fs::read_dir(out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![checkpoint_name(2)]);
    }

    #[test]
    fn prune_keeps_the_newest_and_a_failed_fill_publishes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path();
        for s in [1, 2, 3] {
            ckpt(out, s);
        }
        prune(out, STATE, 2).unwrap();
        let steps: Vec<u64> = list(out, STATE).into_iter().map(|(s, _)| s).collect();
        assert_eq!(steps, vec![2, 3]);
        let r = publish::<RunDirError>(out, &checkpoint_name(4), |_| {
            Err(RunDirError::Io {
                path: "x".into(),
                source: std::io::Error::other("fill failed"),
            })
        });
        assert!(r.is_err());
        assert!(!out.join(checkpoint_name(4)).exists());
    }
}
