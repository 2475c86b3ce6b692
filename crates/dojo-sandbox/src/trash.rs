//! Background deletion of discarded upper dirs and torn-down sandboxes: reset and teardown only
//! rename (microseconds); the `rm -rf` happens on a background thread. [`flush`] waits for it
//! (tests and the benchmark use it to check that nothing is left behind).

use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};

static PENDING: Mutex<usize> = Mutex::new(0);
static DONE: Condvar = Condvar::new();

/// The trash directory next to a sandbox dir (same filesystem, so rename is atomic and cheap).
fn trash_dir_for(path: &Path) -> PathBuf {
    let sandboxes = path
        .ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "sandboxes"))
        .map(Path::to_path_buf)
        .unwrap_or_else(|| path.parent().unwrap_or(Path::new("/tmp")).to_path_buf());
    sandboxes.join(".trash")
}

/// Move `path` to the trash and delete it in the background. Missing paths are ignored.
pub fn discard(path: &Path) {
    if let Some(d) = defer(path) {
        d.delete();
    }
}

/// A path already moved to the trash (counted by [`flush`]) whose deletion waits for something,
/// e.g. a holder that still has it mounted. Deleted on [`Deferred::delete`] or drop.
pub(crate) struct Deferred(Option<PathBuf>);

impl Deferred {
    pub(crate) fn delete(mut self) {
        if let Some(p) = self.0.take() {
            spawn_delete(p);
        }
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            spawn_delete(p);
        }
    }
}

/// Rename `path` into the trash now; delete it later.
pub(crate) fn defer(path: &Path) -> Option<Deferred> {
    if !path.exists() {
        return None;
    }
    let trash = trash_dir_for(path);
    let _ = std::fs::create_dir_all(&trash);
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!(
        "{}-{}-{n}",
        std::process::id(),
        path.file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default()
    );
    let dest = trash.join(name);
    let target = if std::fs::rename(path, &dest).is_ok() {
        dest
    } else {
        path.to_path_buf()
    };
    *PENDING.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    Some(Deferred(Some(target)))
}

fn delete_in_background(p: PathBuf) {
    *PENDING.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    spawn_delete(p);
}

/// Delete on a background thread; the caller has already counted it in PENDING.
fn spawn_delete(p: PathBuf) {
    std::thread::spawn(move || {
        remove_all(&p);
        let mut n = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        *n -= 1;
        DONE.notify_all();
    });
}

/// `rm -rf`, making directories writable first when needed (overlay work dirs are mode 000).
/// Best effort and synchronous: what cannot be removed is left.
pub fn remove_all(p: &Path) {
    if std::fs::remove_dir_all(p).is_ok() || !p.exists() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    for e in walkdir_dirs(p) {
        let _ = std::fs::set_permissions(&e, std::fs::Permissions::from_mode(0o700));
    }
    let _ = std::fs::remove_dir_all(p);
}

fn walkdir_dirs(p: &Path) -> Vec<PathBuf> {
    let mut out = vec![p.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        let d = out[i].clone();
        let _ = std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o700));
        if let Ok(rd) = std::fs::read_dir(&d) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    out.push(e.path());
                }
            }
        }
        i += 1;
    }
    out
}

/// Delete leftovers of crashed processes in a sandboxes dir's trash (best effort, background).
pub(crate) fn sweep(sandboxes: &Path) {
    let trash = sandboxes.join(".trash");
    let Ok(rd) = std::fs::read_dir(&trash) else {
        return;
    };
    let me = format!("{}-", std::process::id());
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid: Option<i32> = name.split('-').next().and_then(|p| p.parse().ok());
        // Entries of live processes are theirs to delete.
        // SAFETY: signal 0 only checks existence.
        let alive = pid.is_some_and(|p| unsafe { libc::kill(p, 0) } == 0);
        if !name.starts_with(&me) && !alive {
            delete_in_background(e.path());
        }
    }
}

/// Block until every background deletion started by this process has finished.
pub fn flush() {
    let mut n = PENDING.lock().unwrap_or_else(|e| e.into_inner());
    while *n > 0 {
        n = DONE.wait(n).unwrap_or_else(|e| e.into_inner());
    }
}
