//! Layers: the host directories a sandbox root is made of (pristine tree, upper and work dirs,
//! venv, the `/etc` snapshot, and for environment builds the uv cache) are first *staged* as
//! bind mounts on a tmpfs at /tmp/{lower,tree,layer,venv,cache,etc} inside the
//! mount namespace that will mount the overlay: overlayfs (and bind mounts) only accept paths
//! whose mounts belong to the caller's own mount namespace, and the unprivileged sandbox uid
//! could not even traverse `$DOJO_HOME` under a 0700 home. Staging happens while the process
//! still can.

#![allow(unsafe_op_in_unsafe_fn)]

use std::ffi::CString;

use crate::sys::{self, Fd, Step, fmt_u32};

/// Real host paths of the layers.
pub(crate) struct Layers {
    pub lower: Option<CString>,
    /// Files an environment build wrote into the project tree, stacked over `lower`.
    pub tree: Option<CString>,
    /// A directory holding `upper/` and `work/` (overlayfs wants both on one mount).
    pub layer: CString,
    pub venv: Option<CString>,
    /// The uv cache an environment build writes to (read-write; `None` for sandboxes).
    pub cache: Option<CString>,
    /// The `/etc` snapshot (`visible::etc_snapshot`), bound read-only at the new root's `/etc`.
    pub etc: Option<CString>,
    /// Shown host directories the sandbox uid could not reach by path (a pyenv interpreter
    /// under `/root`, mode 0700): `(host path, staging point)`, the staging point one of
    /// [`EXTRA_SLOTS`]; the root entry binds from the staging point (`ns::root_entries`).
    pub extra: Vec<(CString, &'static std::ffi::CStr)>,
}

/// Staging points of [`Layers::extra`]: a fixed set, so staging needs no allocation after fork.
pub(crate) const EXTRA_SLOTS: [&std::ffi::CStr; 4] =
    [c"/tmp/x0", c"/tmp/x1", c"/tmp/x2", c"/tmp/x3"];

/// Open the layers by path, cover /tmp with a tmpfs, bind each to /tmp/{lower,layer,venv,cache,etc} (through
/// /proc/self/fd, since /tmp is covered by then) and create /tmp/root for the new root.
pub(crate) unsafe fn stage_layers(l: &Layers) -> Result<(), Step> {
    let null = std::ptr::null::<libc::c_char>();
    let open = |p: &CString| {
        libc::open(
            p.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    let mut fds: [(Fd, &std::ffi::CStr); 6 + EXTRA_SLOTS.len()] = [
        (-1, c"/tmp/lower"),
        (-1, c"/tmp/tree"),
        (-1, c"/tmp/layer"),
        (-1, c"/tmp/venv"),
        (-1, c"/tmp/cache"),
        (-1, c"/tmp/etc"),
        (-1, EXTRA_SLOTS[0]),
        (-1, EXTRA_SLOTS[1]),
        (-1, EXTRA_SLOTS[2]),
        (-1, EXTRA_SLOTS[3]),
    ];
    for (i, (src, slot)) in l.extra.iter().take(EXTRA_SLOTS.len()).enumerate() {
        fds[6 + i] = (open(src), slot);
        if fds[6 + i].0 < 0 {
            return Err(Step::Bind);
        }
    }
    for (i, p) in [
        l.lower.as_ref(),
        l.tree.as_ref(),
        Some(&l.layer),
        l.venv.as_ref(),
        l.cache.as_ref(),
        l.etc.as_ref(),
    ]
    .into_iter()
    .enumerate()
    {
        if let Some(p) = p {
            fds[i].0 = open(p);
            if fds[i].0 < 0 {
                return Err(Step::Bind);
            }
        }
    }
    if !sys::mount(
        null,
        c"/".as_ptr(),
        null,
        libc::MS_REC | libc::MS_PRIVATE,
        null,
    ) {
        return Err(Step::MakePrivate);
    }
    if !sys::mount(
        c"tmpfs".as_ptr(),
        c"/tmp".as_ptr(),
        c"tmpfs".as_ptr(),
        libc::MS_NOSUID | libc::MS_NODEV,
        c"mode=0755,size=1m".as_ptr(),
    ) {
        return Err(Step::RootTmpfs);
    }
    if libc::mkdir(c"/tmp/root".as_ptr(), 0o755) != 0 {
        return Err(Step::Mkdir);
    }
    for (fd, dst) in fds {
        if fd < 0 {
            continue;
        }
        let mut src = [0u8; 32];
        let mut n = 0;
        for &b in b"/proc/self/fd/" {
            src[n] = b;
            n += 1;
        }
        n += fmt_u32(fd as u32, &mut src[n..]);
        src[n] = 0;
        if libc::mkdir(dst.as_ptr(), 0o755) != 0 {
            return Err(Step::Mkdir);
        }
        if !sys::mount(
            src.as_ptr().cast(),
            dst.as_ptr(),
            null,
            libc::MS_BIND | libc::MS_REC,
            null,
        ) {
            return Err(Step::Bind);
        }
        libc::close(fd);
    }
    Ok(())
}

/// One entry of the new root (destinations under `/tmp/root`, the root being built).
pub(crate) enum RootEntry {
    /// A read-only bind of a host directory.
    Bind { src: CString, dst: CString },
    /// A read-only bind of a host file.
    File { src: CString, dst: CString },
    /// A copied symlink.
    Symlink { target: CString, dst: CString },
    /// An empty directory (a parent of deeper entries).
    Dir { dst: CString },
}

/// Populate `/tmp/root/dev` (the root being built): a small tmpfs with the harmless device nodes
/// bound in (null, zero, full, random, urandom, tty), the `/dev/fd` and stdio links, a private
/// `/dev/shm` (tmpfs with `shm_opts`) and, when the kernel allows, a private `devpts`.
pub(crate) unsafe fn mount_dev(shm_opts: &std::ffi::CStr) -> Result<(), Step> {
    let null = std::ptr::null::<libc::c_char>();
    if libc::mkdir(c"/tmp/root/dev".as_ptr(), 0o755) != 0
        || !sys::mount(
            c"tmpfs".as_ptr(),
            c"/tmp/root/dev".as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            c"mode=0755,size=64k".as_ptr(),
        )
    {
        return Err(Step::Dev);
    }
    for (src, dst) in [
        (c"/dev/null", c"/tmp/root/dev/null"),
        (c"/dev/zero", c"/tmp/root/dev/zero"),
        (c"/dev/full", c"/tmp/root/dev/full"),
        (c"/dev/random", c"/tmp/root/dev/random"),
        (c"/dev/urandom", c"/tmp/root/dev/urandom"),
        (c"/dev/tty", c"/tmp/root/dev/tty"),
    ] {
        let fd = libc::open(
            dst.as_ptr(),
            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
            0o644,
        );
        if fd < 0 {
            return Err(Step::Dev);
        }
        libc::close(fd);
        if !sys::mount(src.as_ptr(), dst.as_ptr(), null, libc::MS_BIND, null) && src != c"/dev/tty"
        {
            return Err(Step::Dev);
        }
    }
    for (target, dst) in [
        (c"/proc/self/fd", c"/tmp/root/dev/fd"),
        (c"/proc/self/fd/0", c"/tmp/root/dev/stdin"),
        (c"/proc/self/fd/1", c"/tmp/root/dev/stdout"),
        (c"/proc/self/fd/2", c"/tmp/root/dev/stderr"),
        (c"pts/ptmx", c"/tmp/root/dev/ptmx"),
    ] {
        libc::symlink(target.as_ptr(), dst.as_ptr());
    }
    if libc::mkdir(c"/tmp/root/dev/shm".as_ptr(), 0o1777) != 0
        || !sys::mount(
            c"tmpfs".as_ptr(),
            c"/tmp/root/dev/shm".as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            shm_opts.as_ptr(),
        )
    {
        return Err(Step::Dev);
    }
    if libc::mkdir(c"/tmp/root/dev/pts".as_ptr(), 0o755) == 0 {
        // Pseudo-terminals for tools that need one; optional.
        sys::mount(
            c"devpts".as_ptr(),
            c"/tmp/root/dev/pts".as_ptr(),
            c"devpts".as_ptr(),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            c"newinstance,ptmxmode=0666,mode=0620".as_ptr(),
        );
    }
    Ok(())
}
