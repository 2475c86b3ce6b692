//! Atomic publication of one file.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Numbers the temporary siblings of one process: its threads publish concurrently too (two
/// grading workers installing the observer into one environment).
static NEXT_TMP: AtomicU64 = AtomicU64::new(0);

/// Write `bytes` to `path` so that a reader (or a crash) sees the old file or the new one,
/// never half of one: the bytes go to a temporary sibling (named after `path`, this process and
/// a number of its own, so concurrent writers, threads of one process included, never share
/// it), are flushed to disk, and the sibling is renamed over
/// `path`; then the directory is synced so the rename itself survives a power loss. On error the
/// temporary file is removed and `path` is untouched.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    let n = NEXT_TMP.fetch_add(1, Ordering::Relaxed);
    tmp_name.push(format!(".{}-{n}.tmp", std::process::id()));
    let tmp = dir.join(tmp_name);
    let written = File::create(&tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        })
        .and_then(|()| fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(dir)
}

/// Make a directory's entries (a rename, a new file) durable: fsync the directory itself.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Flush a file's data and metadata to disk.
pub fn sync_file(path: &Path) -> io::Result<()> {
    File::open(path)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_and_leaves_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(d.path()).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "only the file itself is left");
    }

    #[test]
    fn a_failed_write_leaves_the_old_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f.json");
        write_atomic(&p, b"old").unwrap();
        // A directory in the way of the rename: the write fails, the file stays.
        let blocked = d.path().join("sub");
        fs::create_dir(&blocked).unwrap();
        fs::write(blocked.join("x"), b"").unwrap();
        assert!(write_atomic(&blocked, b"new").is_err());
        assert_eq!(fs::read(&p).unwrap(), b"old");
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 2);
    }

    #[test]
    fn threads_of_one_process_publishing_one_path_never_fail_or_tear_it() {
        // Two grading workers of one process install the observer into one environment at
        // once: with a temporary sibling named after the process alone, one thread's rename
        // took the other's half-written file (or failed with ENOENT).
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("observer.py");
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..20 {
                        write_atomic(&p, &big).unwrap();
                        assert_eq!(fs::read(&p).unwrap(), big);
                    }
                });
            }
        });
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1);
    }
}
