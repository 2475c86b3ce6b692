//! Host-side file I/O inside a sandbox's workspace without following the agent's symlinks out
//! of it: `openat2` with `RESOLVE_BENEATH` from an fd of `/testbed` or `/tmp`.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::error::{Result, io_err};
use crate::sys::cstr;

pub(crate) fn open_path(path: &Path) -> Result<OwnedFd> {
    let c = cstr(path.as_os_str().as_encoded_bytes());
    // SAFETY: valid C string; the result is checked.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io_err(path)(std::io::Error::last_os_error()));
    }
    // SAFETY: fresh descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(crate) fn openat2(
    dirfd: i32,
    path: &str,
    flags: i32,
    mode: u32,
    resolve: u64,
) -> std::io::Result<OwnedFd> {
    let c = cstr(if path.is_empty() { "." } else { path });
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: mode as u64,
        resolve,
    };
    // SAFETY: valid pointers; result checked.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dirfd,
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    } as i32;
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Resolution flags that keep a path beneath its starting directory, on its mount, without
/// magic links: symlinks planted in the workspace cannot make the host read or write elsewhere.
pub(crate) const BENEATH: u64 =
    libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS | libc::RESOLVE_NO_XDEV;

/// Read `rel` beneath `dir` (no escape), at most `limit` bytes: a larger file fails with
/// `EFBIG` after reading `limit + 1` bytes, never more.
pub(crate) fn read_beneath(dir: &OwnedFd, rel: &str, limit: usize) -> std::io::Result<Vec<u8>> {
    let fd = openat2(dir.as_raw_fd(), rel, libc::O_RDONLY, 0, BENEATH)?;
    let f = std::fs::File::from(fd);
    let mut v = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(f, limit as u64 + 1), &mut v)?;
    if v.len() > limit {
        return Err(std::io::Error::from_raw_os_error(libc::EFBIG));
    }
    Ok(v)
}

/// Write `rel` beneath `dir`, creating parent directories; new entries are owned by `owner`.
pub(crate) fn write_beneath(
    dir: &OwnedFd,
    rel: &str,
    data: &[u8],
    owner: Option<(u32, u32)>,
) -> std::io::Result<()> {
    let comps: Vec<&str> = rel
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    let Some((file, parents)) = comps.split_last() else {
        return Err(std::io::Error::from_raw_os_error(libc::EISDIR));
    };
    let mut cur = openat2(
        dir.as_raw_fd(),
        ".",
        libc::O_PATH | libc::O_DIRECTORY,
        0,
        BENEATH,
    )?;
    for p in parents {
        if *p == ".." {
            return Err(std::io::Error::from_raw_os_error(libc::EXDEV));
        }
        let next = match openat2(
            cur.as_raw_fd(),
            p,
            libc::O_PATH | libc::O_DIRECTORY,
            0,
            BENEATH,
        ) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                let c = cstr(*p);
                // SAFETY: valid fd and C string.
                if unsafe { libc::mkdirat(cur.as_raw_fd(), c.as_ptr(), 0o755) } != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some((u, g)) = owner {
                    // SAFETY: valid fd and C string.
                    unsafe {
                        libc::fchownat(cur.as_raw_fd(), c.as_ptr(), u, g, libc::AT_SYMLINK_NOFOLLOW)
                    };
                }
                openat2(
                    cur.as_raw_fd(),
                    p,
                    libc::O_PATH | libc::O_DIRECTORY,
                    0,
                    BENEATH,
                )?
            }
            Err(e) => return Err(e),
        };
        cur = next;
    }
    if *file == ".." {
        return Err(std::io::Error::from_raw_os_error(libc::EXDEV));
    }
    let fd = openat2(
        cur.as_raw_fd(),
        file,
        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        0o644,
        BENEATH,
    )?;
    let mut f = std::fs::File::from(fd);
    std::io::Write::write_all(&mut f, data)?;
    if let Some((u, g)) = owner {
        let md = f.metadata()?;
        if md.uid() != u || md.gid() != g {
            std::os::unix::fs::fchown(&f, Some(u), Some(g))?;
        }
    }
    Ok(())
}
