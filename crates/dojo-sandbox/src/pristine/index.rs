//! The identity of a directory source, recognised cheaply when nothing changed.
//!
//! A pristine tree built from a directory is keyed by a content hash of that directory. Hashing
//! reads every file (about 3,400 on sympy), which made each `dojo sandbox run --source DIR` cost
//! far more than the sandbox itself. Like git's index, a small file beside the cache entries
//! remembers, per source directory, each file's `lstat` data (size, mtime, ctime, inode, device,
//! mode) with its content digest, plus the directory's git HEAD. The next scan is one
//! `readdir` + `lstat` pass: a file whose stat data is unchanged keeps its remembered digest, and
//! only new or changed files are read. The identity is always recomputed from the current walk,
//! so added and deleted files change it without special cases.
//!
//! Racy files, as git calls them: a file modified in the same timestamp tick as the scan could
//! change again later without its stat data changing. Files whose mtime is within
//! [`RACY_WINDOW_NS`] of the scan are remembered without a digest and read again next time.
//! ctime is compared too, so content restored to the same size with its mtime set back (`touch
//! -d`, `tar`, `cp -p` over an existing file) still counts as a change.
//!
//! What is hashed is what ends up in the pristine tree: the top-level `.git` and the bytecode
//! that building strips (`__pycache__/`, `*.pyc`, `*.pyo`) are left out.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::Digest;

use crate::BuildError;

/// Version of the index file format; a file with another version is ignored.
const SCHEMA_VERSION: u32 = 1;

/// Files modified this recently before a scan are read again on the next one (covers
/// filesystems with 1 s or 2 s timestamps, and the kernel's coarse clock).
pub(crate) const RACY_WINDOW_NS: i64 = 2_000_000_000;

/// The result of scanning a directory source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DirScan {
    /// Hex sha256 over every entry's path, type, exec bit and content (or symlink target).
    pub identity: String,
    /// How many files had to be read (0 when the index recognised every file).
    pub files_read: usize,
}

/// One remembered file or symlink.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct FileStat {
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
    ino: u64,
    dev: u64,
    mode: u32,
}

impl FileStat {
    fn of(md: &std::fs::Metadata) -> FileStat {
        FileStat {
            size: md.size(),
            mtime_ns: md.mtime() * 1_000_000_000 + md.mtime_nsec(),
            ctime_ns: md.ctime() * 1_000_000_000 + md.ctime_nsec(),
            ino: md.ino(),
            dev: md.dev(),
            mode: md.mode(),
        }
    }
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct IndexEntry {
    path: String,
    #[serde(flatten)]
    stat: FileStat,
    /// Hex sha256 of a file's content or a symlink's target; `None` for a racy file.
    digest: Option<String>,
}

/// The index file of one source directory.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct DirIndex {
    schema_version: u32,
    root: PathBuf,
    /// The commit of the directory's git HEAD, `None` outside a repository.
    head: Option<String>,
    files: Vec<IndexEntry>,
}

/// Where the index of `root` (canonical) lives under `index_dir`.
fn index_path(index_dir: &Path, root: &Path) -> PathBuf {
    let name = dojo_cache::sha256_hex(root.as_os_str().as_encoded_bytes());
    index_dir.join(format!("{name}.json"))
}

fn load(path: &Path, root: &Path) -> Option<DirIndex> {
    let bytes = std::fs::read(path).ok()?;
    let ix: DirIndex = serde_json::from_slice(&bytes).ok()?;
    (ix.schema_version == SCHEMA_VERSION && ix.root == root).then_some(ix)
}

/// Write the index with [`dojo_rundir::write_atomic`]; concurrent writers each publish a complete
/// file and the last one wins. Best effort: without an index the next scan reads all.
fn store(path: &Path, ix: &DirIndex) {
    let Some(dir) = path.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    if let Ok(bytes) = serde_json::to_vec(ix) {
        let _ = dojo_rundir::write_atomic(path, &bytes);
    }
}

/// The commit the directory's git HEAD points to, read from the repository's files (no `git`
/// process; loose or packed refs, worktrees). `None` when `root` is not the top of a repository.
pub(crate) fn git_head(root: &Path) -> Option<String> {
    let dotgit = root.join(".git");
    let gitdir = if dotgit.is_dir() {
        dotgit
    } else {
        // A worktree or submodule: `.git` is a file `gitdir: PATH`.
        let s = std::fs::read_to_string(&dotgit).ok()?;
        root.join(s.strip_prefix("gitdir:")?.trim())
    };
    let head = std::fs::read_to_string(gitdir.join("HEAD")).unwrap_or_default();
    let head = head.trim();
    let Some(refname) = head.strip_prefix("ref:").map(str::trim) else {
        return Some(head.to_string());
    };
    let common = std::fs::read_to_string(gitdir.join("commondir"))
        .map(|c| gitdir.join(c.trim()))
        .unwrap_or_else(|_| gitdir.clone());
    for dir in [&gitdir, &common] {
        if let Ok(sha) = std::fs::read_to_string(dir.join(refname)) {
            return Some(sha.trim().to_string());
        }
    }
    let packed = std::fs::read_to_string(common.join("packed-refs")).unwrap_or_default();
    Some(
        packed
            .lines()
            .find_map(|l| l.strip_suffix(refname)?.strip_suffix(' '))
            .map(str::to_string)
            .unwrap_or_else(|| format!("unborn {refname}")),
    )
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Whether the walk leaves `e` out: the source's own `.git` (the pristine tree gets a fresh
/// repository) and the bytecode that building strips.
fn excluded(e: &walkdir::DirEntry) -> bool {
    let name = e.file_name().as_encoded_bytes();
    (e.depth() == 1 && name == b".git")
        || (e.file_type().is_dir() && name == b"__pycache__")
        || (e.file_type().is_file() && (name.ends_with(b".pyc") || name.ends_with(b".pyo")))
}

/// The digest of a file or symlink read now: a file's sha256, a symlink's target in hex.
fn read_digest(e: &walkdir::DirEntry) -> Result<String, BuildError> {
    if e.file_type().is_symlink() {
        let t = std::fs::read_link(e.path()).map_err(BuildError::io(e.path().display()))?;
        Ok(hex::encode(t.as_os_str().as_encoded_bytes()))
    } else {
        Ok(dojo_cache::sha256_file(e.path())?)
    }
}

/// A file's part of the content hash after its path: `l` and a symlink's target, or `x` / `f`
/// (executable or not) and a file's digest; then a separator.
fn hash_content(
    h: &mut sha2::Sha256,
    e: &walkdir::DirEntry,
    md: &std::fs::Metadata,
    digest: &str,
) -> Result<(), BuildError> {
    use std::os::unix::fs::PermissionsExt;
    if e.file_type().is_symlink() {
        // The target itself, as the content hash always had it.
        h.update(b"l");
        h.update(hex::decode(digest).map_err(|source| BuildError::Digest {
            path: e.path().display().to_string(),
            source,
        })?);
    } else {
        h.update(if md.permissions().mode() & 0o111 != 0 {
            b"x"
        } else {
            b"f"
        });
        h.update(digest.as_bytes());
    }
    h.update([0]);
    Ok(())
}

/// Content identity of the directory `root`. With `index_dir`, stat data remembered from the
/// previous scan of the same directory lets unchanged files go unread, and the index is updated
/// for the next scan; without it every file is read.
pub(crate) fn scan(root: &Path, index_dir: Option<&Path>) -> Result<DirScan, BuildError> {
    if !root.is_dir() {
        return Err(BuildError::NotADir(root.to_path_buf()));
    }
    let root = std::fs::canonicalize(root).map_err(BuildError::io(root.display()))?;
    let ix_path = index_dir.map(|d| index_path(d, &root));
    let head = git_head(&root);
    let old = ix_path
        .as_deref()
        .and_then(|p| load(p, &root))
        .filter(|ix| ix.head == head);
    let known: HashMap<&str, &IndexEntry> = old
        .iter()
        .flat_map(|ix| &ix.files)
        .filter(|e| e.digest.is_some())
        .map(|e| (e.path.as_str(), e))
        .collect();
    let racy_after = now_ns() - RACY_WINDOW_NS;

    let mut h = sha2::Sha256::new();
    let mut files = Vec::new();
    let mut files_read = 0;
    // A non-UTF-8 path cannot be a key of the (JSON) index: such trees are read in full.
    let mut indexable = true;
    let walk = walkdir::WalkDir::new(&root)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| !excluded(e));
    for e in walk {
        let e = e.map_err(|source| BuildError::Walk {
            what: format!("scanning {}", root.display()),
            source,
        })?;
        let rel = e.path().strip_prefix(&root).unwrap_or(e.path());
        h.update(rel.as_os_str().as_encoded_bytes());
        h.update([0]);
        let ft = e.file_type();
        if !(ft.is_file() || ft.is_symlink()) {
            h.update(b"d");
            h.update([0]);
            continue;
        }
        let md = e.metadata().map_err(|source| BuildError::Walk {
            what: e.path().display().to_string(),
            source,
        })?;
        let stat = FileStat::of(&md);
        let rel_str = rel.to_str();
        indexable &= rel_str.is_some();
        let remembered = rel_str
            .and_then(|r| known.get(r))
            .filter(|k| k.stat == stat)
            .and_then(|k| k.digest.clone());
        let digest = match remembered {
            Some(d) => d,
            None => {
                files_read += 1;
                read_digest(&e)?
            }
        };
        hash_content(&mut h, &e, &md, &digest)?;
        if let Some(r) = rel_str {
            let racy = stat.mtime_ns > racy_after;
            files.push(IndexEntry {
                path: r.to_string(),
                stat,
                digest: (!racy).then_some(digest),
            });
        }
    }
    let changed = old.as_ref().is_none_or(|o| {
        files_read > 0 || o.files.len() != files.len() || files.iter().any(|f| f.digest.is_none())
    });
    if let Some(p) = ix_path.as_deref()
        && indexable
        && changed
    {
        store(
            p,
            &DirIndex {
                schema_version: SCHEMA_VERSION,
                root: root.clone(),
                head,
                files,
            },
        );
    }
    Ok(DirScan {
        identity: hex::encode(h.finalize()),
        files_read,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::Duration;

    /// A past mtime for every file and symlink, so that none is racy.
    fn age(path: &Path) {
        use std::os::unix::ffi::OsStrExt;
        let past = SystemTime::now() - Duration::from_secs(3600);
        let secs = past.duration_since(UNIX_EPOCH).unwrap().as_secs() as libc::time_t;
        for e in walkdir::WalkDir::new(path).into_iter().flatten() {
            if e.file_type().is_file() || e.file_type().is_symlink() {
                let c = std::ffi::CString::new(e.path().as_os_str().as_bytes()).unwrap();
                let t = [libc::timespec {
                    tv_sec: secs,
                    tv_nsec: 0,
                }; 2];
                // SAFETY: a valid C path and two timespecs; NOFOLLOW sets the link's own times.
                let rc = unsafe {
                    libc::utimensat(
                        libc::AT_FDCWD,
                        c.as_ptr(),
                        t.as_ptr(),
                        libc::AT_SYMLINK_NOFOLLOW,
                    )
                };
                assert_eq!(rc, 0, "utimensat {}", e.path().display());
            }
        }
    }

    fn tree() -> (tempfile::TempDir, PathBuf, tempfile::TempDir) {
        let src = tempfile::tempdir().unwrap();
        let root = src.path().join("proj");
        std::fs::create_dir_all(root.join("pkg/sub")).unwrap();
        std::fs::write(root.join("setup.py"), "print(1)\n").unwrap();
        std::fs::write(root.join("pkg/__init__.py"), "").unwrap();
        std::fs::write(root.join("pkg/mod.py"), "x = 1\n").unwrap();
        std::fs::write(root.join("pkg/sub/data.txt"), "abc\n").unwrap();
        std::os::unix::fs::symlink("mod.py", root.join("pkg/link.py")).unwrap();
        age(&root);
        (src, root, tempfile::tempdir().unwrap())
    }

    fn git(dir: &Path, args: &[&str]) {
        let out = Command::new("git")
            .args(["-c", "safe.directory=*", "-C"])
            .arg(dir)
            .args(args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(out.status.success(), "{:?}", out);
    }

    /// Scan with the index, and check the result against a full read without it.
    fn check(root: &Path, ix: &Path) -> DirScan {
        let s = scan(root, Some(ix)).unwrap();
        let full = scan(root, None).unwrap();
        assert_eq!(s.identity, full.identity, "index and full read disagree");
        s
    }

    #[test]
    fn unchanged_tree_is_recognised_without_reading() {
        let (_s, root, ix) = tree();
        let first = check(&root, ix.path());
        assert_eq!(first.files_read, 5);
        let again = check(&root, ix.path());
        assert_eq!(again.files_read, 0);
        assert_eq!(again.identity, first.identity);
    }

    #[test]
    fn same_size_edit_with_mtime_set_back_is_a_change() {
        let (_s, root, ix) = tree();
        let first = check(&root, ix.path());
        let f = root.join("pkg/mod.py");
        let mtime = std::fs::metadata(&f).unwrap().modified().unwrap();
        std::fs::write(&f, "x = 2\n").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&f)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        let after = check(&root, ix.path());
        assert_eq!(after.files_read, 1);
        assert_ne!(after.identity, first.identity);
    }

    #[test]
    fn touched_file_is_read_again_and_keeps_the_identity() {
        let (_s, root, ix) = tree();
        let first = check(&root, ix.path());
        let f = std::fs::File::options()
            .write(true)
            .open(root.join("setup.py"))
            .unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(60))
            .unwrap();
        let after = check(&root, ix.path());
        assert_eq!(after.files_read, 1);
        assert_eq!(after.identity, first.identity);
        assert_eq!(check(&root, ix.path()).files_read, 0);
    }

    #[test]
    fn new_and_deleted_files_change_the_identity() {
        let (_s, root, ix) = tree();
        let first = check(&root, ix.path());
        std::fs::create_dir(root.join("new")).unwrap();
        std::fs::write(root.join("new/untracked.py"), "y = 1\n").unwrap();
        // (Setting times changes ctimes: only the new file's, or every file would be read.)
        age(&root.join("new"));
        let added = check(&root, ix.path());
        assert_eq!(added.files_read, 1);
        assert_ne!(added.identity, first.identity);
        std::fs::remove_file(root.join("pkg/sub/data.txt")).unwrap();
        let deleted = check(&root, ix.path());
        assert_eq!(deleted.files_read, 0);
        assert_ne!(deleted.identity, added.identity);
        // An empty directory is part of the tree too.
        std::fs::create_dir(root.join("empty")).unwrap();
        assert_ne!(check(&root, ix.path()).identity, deleted.identity);
    }

    #[test]
    fn changed_git_head_reads_everything_again() {
        let (_s, root, ix) = tree();
        git(&root, &["init", "-q", "-b", "main"]);
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-qm", "base"]);
        let first = check(&root, ix.path());
        assert_eq!(check(&root, ix.path()).files_read, 0);
        // The working tree is untouched: only HEAD moves.
        git(&root, &["commit", "-q", "--allow-empty", "-m", "next"]);
        let after = check(&root, ix.path());
        assert_eq!(after.files_read, 5);
        assert_eq!(
            after.identity, first.identity,
            ".git is not part of the tree"
        );
        git(&root, &["checkout", "-q", "--detach"]);
        assert_eq!(check(&root, ix.path()).files_read, 0, "same commit");
        git(&root, &["checkout", "-q", "HEAD~1"]);
        assert_eq!(check(&root, ix.path()).files_read, 5);
    }

    #[test]
    fn recently_modified_files_are_read_every_time() {
        let (_s, root, ix) = tree();
        check(&root, ix.path());
        std::fs::write(root.join("pkg/mod.py"), "x = 3\n").unwrap();
        assert_eq!(check(&root, ix.path()).files_read, 1);
        // Still within the racy window: a same-tick edit would not show in its stat data.
        assert_eq!(check(&root, ix.path()).files_read, 1);
    }

    #[test]
    fn bytecode_and_top_level_git_are_not_part_of_the_identity() {
        let (_s, root, ix) = tree();
        let first = check(&root, ix.path());
        std::fs::create_dir(root.join("pkg/__pycache__")).unwrap();
        std::fs::write(root.join("pkg/__pycache__/mod.cpython-311.pyc"), "b").unwrap();
        std::fs::write(root.join("stale.pyc"), "b").unwrap();
        std::fs::create_dir(root.join(".git")).unwrap();
        std::fs::write(root.join(".git/HEAD"), "0123\n").unwrap();
        assert_eq!(check(&root, ix.path()).identity, first.identity);
        // A nested `.git` is copied into the tree, so it counts.
        std::fs::create_dir(root.join("pkg/.git")).unwrap();
        assert_ne!(check(&root, ix.path()).identity, first.identity);
    }

    #[test]
    fn git_head_reads_branches_packed_refs_and_detached_heads() {
        let (_s, root, _ix) = tree();
        assert_eq!(git_head(&root), None);
        git(&root, &["init", "-q", "-b", "main"]);
        assert_eq!(git_head(&root).as_deref(), Some("unborn refs/heads/main"));
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-qm", "base"]);
        let loose = git_head(&root).unwrap();
        assert!(
            loose.len() == 40 && loose.bytes().all(|b| b.is_ascii_hexdigit()),
            "{loose}"
        );
        git(&root, &["pack-refs", "--all"]);
        assert!(!root.join(".git/refs/heads/main").exists());
        assert_eq!(git_head(&root).unwrap(), loose);
        git(&root, &["checkout", "-q", "--detach"]);
        assert_eq!(git_head(&root).unwrap(), loose);
    }
}
