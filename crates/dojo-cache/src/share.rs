//! Identical files of cache entries stored once, as hard links into `$DOJO_HOME/objects`.
//!
//! Environments of one SWE-bench version differ in the project they install, not in the
//! hundreds of MB of packages beside it (numpy, scipy, pandas, matplotlib: 284 MB in each
//! scikit-learn environment), yet each instance has its own environment because its project is
//! installed into it; pristine trees of one repository differ in a few files of thousands.
//! [`share_files`] gives the identical files of an entry being built one inode with those of
//! the entries before it.
//!
//! Why it is safe: a cache entry is never written after it is published (sandboxes mount it
//! read-only, or as the lower layer of a private overlay, whose writes copy up; the fallback
//! backend's Landlock rules allow writes only in its own workspace and /tmp).
//! A hard link shares metadata as well as content, so the key is the content's sha256 *and* the
//! file's mode, owner and modification time: linking never changes what a file looks like, only
//! where its blocks are. (dojo-sandbox's builders, of venvs and of pristine trees, give their
//! files one timestamp so that this key matches across entries.)
//!
//! Crash semantics: a file is replaced by `rename` of a fresh link over it, so at every instant
//! it has either its old inode or the object's, both with the same bytes. An object is created
//! by `link`, which either publishes the whole file or fails; an interrupted run leaves at most
//! a `*.dojo-share` temporary beside one file, which the next run of the same entry removes.
//! Removing an entry leaves its objects behind with one link; `find <objects> -type f -links 1
//! -delete` reclaims them.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::{CacheError, Result, io_err};

/// What [`share_files`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ShareStats {
    /// Regular, non-empty files looked at.
    pub files: u64,
    /// Files that now point at an object another entry already stored, and their bytes.
    pub shared_files: u64,
    pub shared_bytes: u64,
    /// Files this entry added to the store, and their bytes.
    pub stored_files: u64,
    pub stored_bytes: u64,
}

/// Suffix of the temporary link renamed over a file.
const TMP_SUFFIX: &str = ".dojo-share";

/// Give each regular, non-empty file under `dir` the inode of the object in `store` with the
/// same content, mode, owner and modification time, storing it there first when none has.
/// Symbolic links and empty files are left alone; a file whose object cannot take another link
/// (`EMLINK`) keeps its own inode.
pub fn share_files(dir: &Path, store: &Path) -> Result<ShareStats> {
    let mut stats = ShareStats::default();
    // Listed first: a rename over a name while the directory is being read may list it again.
    let mut files = Vec::new();
    for entry in walkdir::WalkDir::new(dir) {
        let entry = entry.map_err(|e| {
            let path = e.path().unwrap_or(dir).to_path_buf();
            CacheError::Io {
                path,
                source: e.into(),
            }
        })?;
        if entry.file_type().is_file() {
            files.push(entry.into_path());
        }
    }
    for path in &files {
        let path = path.as_path();
        if path.to_str().is_some_and(|s| s.ends_with(TMP_SUFFIX)) {
            // Left by an interrupted run over this same entry.
            fs::remove_file(path).map_err(io_err(path))?;
            continue;
        }
        let meta = fs::symlink_metadata(path).map_err(io_err(path))?;
        if meta.len() == 0 {
            continue;
        }
        stats.files += 1;
        let object = object_path(store, path, &meta)?;
        share_one(path, &object, &meta, &mut stats)?;
    }
    Ok(stats)
}

/// `<store>/<first two hex digits>/<sha256>-<mode>-<uid>-<gid>-<mtime s>.<mtime ns>`.
fn object_path(store: &Path, path: &Path, meta: &fs::Metadata) -> Result<PathBuf> {
    let sha = crate::sha256_file(path)?;
    let name = format!(
        "{sha}-{:o}-{}-{}-{}.{:09}",
        meta.mode(),
        meta.uid(),
        meta.gid(),
        meta.mtime(),
        meta.mtime_nsec()
    );
    Ok(store.join(&sha[..2]).join(name))
}

fn share_one(
    path: &Path,
    object: &Path,
    meta: &fs::Metadata,
    stats: &mut ShareStats,
) -> Result<()> {
    let parent = object.parent().unwrap_or(object);
    fs::create_dir_all(parent).map_err(io_err(parent))?;
    match fs::hard_link(path, object) {
        Ok(()) => {
            stats.stored_files += 1;
            stats.stored_bytes += meta.len();
            return Ok(());
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) if is_too_many_links(&e) => return Ok(()),
        Err(e) => return Err(io_err(object)(e)),
    }
    let existing = fs::metadata(object).map_err(io_err(object))?;
    if existing.ino() == meta.ino() && existing.dev() == meta.dev() {
        return Ok(()); // already this object
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(TMP_SUFFIX);
    let tmp = PathBuf::from(tmp);
    match fs::hard_link(object, &tmp) {
        Ok(()) => {}
        // Pruned meanwhile, or full of links: the file keeps its own inode.
        Err(e) if e.kind() == io::ErrorKind::NotFound || is_too_many_links(&e) => return Ok(()),
        Err(e) => return Err(io_err(&tmp)(e)),
    }
    fs::rename(&tmp, path).map_err(io_err(path))?;
    stats.shared_files += 1;
    stats.shared_bytes += meta.len();
    Ok(())
}

fn is_too_many_links(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EMLINK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::time::{Duration, SystemTime};

    fn file(dir: &Path, name: &str, body: &str, mtime_s: u64) -> PathBuf {
        let p = dir.join(name);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, body).unwrap();
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(mtime_s);
        File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(t)
            .unwrap();
        p
    }

    fn ino(p: &Path) -> u64 {
        fs::symlink_metadata(p).unwrap().ino()
    }

    #[test]
    fn identical_files_of_two_entries_share_one_inode_and_look_unchanged() {
        let root = tempfile::tempdir().unwrap();
        let (a, b, store) = (
            root.path().join("a"),
            root.path().join("b"),
            root.path().join("objects"),
        );
        let a1 = file(&a, "lib/numpy.py", "x = 1\n", 1000);
        let b1 = file(&b, "lib/numpy.py", "x = 1\n", 1000);
        let b2 = file(&b, "lib/other.py", "x = 1\n", 2000); // same bytes, another mtime
        let b3 = file(&b, "lib/own.py", "y = 2\n", 1000);
        file(&a, "empty.py", "", 1000);
        file(&b, "empty.py", "", 1000);
        std::os::unix::fs::symlink("numpy.py", b.join("lib/link.py")).unwrap();
        let before = fs::metadata(&b1).unwrap();

        let sa = share_files(&a, &store).unwrap();
        assert_eq!((sa.files, sa.stored_files, sa.shared_files), (1, 1, 0));
        let sb = share_files(&b, &store).unwrap();
        assert_eq!(
            (sb.files, sb.stored_files, sb.shared_files, sb.shared_bytes),
            (3, 2, 1, 6)
        );

        assert_eq!(ino(&a1), ino(&b1));
        assert_ne!(ino(&b1), ino(&b2), "another mtime is another object");
        assert_ne!(ino(&a.join("empty.py")), ino(&b.join("empty.py")));
        assert!(
            fs::symlink_metadata(b.join("lib/link.py"))
                .unwrap()
                .is_symlink()
        );
        let after = fs::metadata(&b1).unwrap();
        assert_eq!(
            (after.mode(), after.mtime(), after.len()),
            (before.mode(), before.mtime(), before.len())
        );
        assert_eq!(fs::read_to_string(&b3).unwrap(), "y = 2\n");

        // Idempotent, and a leftover temporary of an interrupted run is removed.
        fs::write(b.join("lib/own.py.dojo-share"), "stale").unwrap();
        let again = share_files(&b, &store).unwrap();
        assert_eq!((again.stored_files, again.shared_files), (0, 0));
        assert!(!b.join("lib/own.py.dojo-share").exists());
    }

    #[test]
    fn another_mode_is_another_object() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let store = root.path().join("objects");
        let a = file(&root.path().join("a"), "bin/tool", "#!/bin/sh\n", 5);
        let b = file(&root.path().join("b"), "bin/tool", "#!/bin/sh\n", 5);
        fs::set_permissions(&b, fs::Permissions::from_mode(0o755)).unwrap();
        share_files(&root.path().join("a"), &store).unwrap();
        share_files(&root.path().join("b"), &store).unwrap();
        assert_ne!(ino(&a), ino(&b));
        assert_eq!(fs::metadata(&b).unwrap().mode() & 0o777, 0o755);
    }
}
