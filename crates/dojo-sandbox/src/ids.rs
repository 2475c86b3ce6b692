//! Who a sandbox runs as on the host: the unprivileged sandbox uid (mapped to root inside), and
//! chowning what the host prepares for it.

use std::path::Path;

use crate::error::{Result, io_err};

/// The first of `dirs` that other users may not pass through (no execute bit for others, or
/// unreadable metadata), with its permission bits: the sandbox uid cannot reach anything below
/// it by path.
pub(crate) fn closed_to_others<'a>(
    dirs: impl IntoIterator<Item = &'a Path>,
) -> Option<(&'a Path, u32)> {
    use std::os::unix::fs::PermissionsExt;
    dirs.into_iter().find_map(|d| {
        let mode = std::fs::metadata(d).map_or(0, |m| m.permissions().mode());
        (mode & 0o001 == 0).then_some((d, mode & 0o777))
    })
}

pub fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The unprivileged host uid (and gid) sandboxes run as. As root: `$DOJO_SANDBOX_UID`
/// (default 1,600,000, outside any real user's range). Otherwise the caller's own uid.
pub fn sandbox_uid() -> u32 {
    if !is_root() {
        // SAFETY: no preconditions.
        return unsafe { libc::geteuid() };
    }
    std::env::var("DOJO_SANDBOX_UID")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&u| u != 0)
        .unwrap_or(1_600_000)
}

pub(crate) fn sandbox_gid() -> u32 {
    if !is_root() {
        // SAFETY: no preconditions.
        return unsafe { libc::getegid() };
    }
    sandbox_uid()
}

pub(crate) fn chown_to_sandbox(path: &Path) -> Result<()> {
    if is_root() {
        std::os::unix::fs::chown(path, Some(sandbox_uid()), Some(sandbox_gid()))
            .map_err(io_err(path))?;
    }
    Ok(())
}

/// Owner for files the host writes into a workspace: the sandbox uid when we are root.
pub(crate) fn owner() -> Option<(u32, u32)> {
    is_root().then(|| (sandbox_uid(), sandbox_gid()))
}
