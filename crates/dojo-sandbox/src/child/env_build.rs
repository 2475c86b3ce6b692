//! Environment builds: a private mount namespace where /testbed is an overlay of the pristine
//! tree (throwaway upper) and /venv is the cache entry being built, so the editable install and
//! every script shebang refer to the paths the sandboxes will use.
//!
//! A build runs project code (its build backend, `setup.py`, the spec's install commands), so it
//! is confined like a sandbox command, short of the network (uv needs the package index): its
//! own user namespace (host root and the sandbox uid mapped to themselves when dojo runs as
//! root, else the caller's uid mapped to root), mount namespace and pid namespace (the build
//! script is pid 1: whatever it leaves running dies with it), the minimal root of
//! [`crate::visible::env_build`] read-only, Landlock (writes only in /testbed, /venv, the uv
//! cache, /tmp and /dev/shm) and the sandbox seccomp filter (no mounts, namespaces, ptrace...).
//!
//! Processes: P (the pre_exec child of the caller) stages the layers while it can still reach
//! them (as host root), then clones C into new user/mount/pid namespaces, writes C's uid and
//! gid maps from outside (only a process in the parent namespace may map more than one id),
//! and waits for C, exiting like it. C builds the root and returns into `exec` of the build
//! script.

#![allow(unsafe_op_in_unsafe_fn)]

use std::ffi::CString;

use super::layers::{Layers, RootEntry, mount_dev, stage_layers};
use crate::confine;
use crate::sys::{self, Fd, Step, fmt_u32};

pub(crate) struct EnvBuildPlan {
    /// Stage the layers in P (as host root) rather than in C.
    pub stage_outside: bool,
    /// Contents of C's `uid_map` / `gid_map`, written by P.
    pub uid_map: CString,
    pub gid_map: CString,
    pub status_w: Fd,
    pub layers: Layers,
    pub entries: Vec<RootEntry>,
    /// Paths (prefixed with /tmp/root) to cover with an empty read-only tmpfs ($DOJO_HOME).
    pub hide: Vec<CString>,
    /// Landlock ABI to use (0 = none).
    pub landlock_abi: i32,
    pub seccomp: &'static [libc::sock_filter],
}

/// Where the uv cache appears inside a build (`UV_CACHE_DIR`).
pub(crate) const UV_CACHE_PATH: &str = "/uv-cache";

pub(crate) unsafe fn run_env_build(plan: &EnvBuildPlan) -> std::io::Result<()> {
    let mut fds = [plan.status_w, -1, -1];
    let mut sync = [-1 as Fd; 2];
    if libc::pipe2(sync.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
        return Err(std::io::Error::last_os_error());
    }
    fds[1] = sync[0];
    fds[2] = sync[1];
    // keep_fds closes everything else (std's exec-error pipe too); the status pipe is
    // close-on-exec, so it reports EOF when the build script starts.
    if !sys::keep_fds(&mut fds) {
        return Err(std::io::Error::last_os_error());
    }
    let [status, sync_r, sync_w] = fds;
    // From here on a failure is reported on the status pipe and ends the process (std's own
    // error pipe is closed).
    macro_rules! check {
        ($cond:expr, $step:expr) => {
            if !$cond {
                sys::fail(status, $step);
            }
        };
    }
    if plan.stage_outside {
        check!(libc::unshare(libc::CLONE_NEWNS) == 0, Step::Unshare);
        if let Err(step) = stage_layers(&plan.layers) {
            sys::fail(status, step);
        }
    }
    // A fork into new namespaces (no CLONE_VM: C gets its own copy of our memory and stack).
    let c = libc::syscall(
        libc::SYS_clone,
        (libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::SIGCHLD)
            as libc::c_ulong,
        0usize,
        0usize,
        0usize,
        0usize,
    ) as libc::pid_t;
    check!(c >= 0, Step::Unshare);
    if c > 0 {
        libc::close(sync_r);
        parent(plan, c, status, sync_w);
    }
    libc::close(sync_w);
    // Wait for P to have written our maps (EOF: it failed and reported why).
    let mut b = [0u8; 1];
    while libc::read(sync_r, b.as_mut_ptr().cast(), 1) < 0 && sys::errno() == libc::EINTR {}
    libc::close(sync_r);
    if b[0] != b'M' {
        libc::_exit(1);
    }
    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
    if let Err(step) = build_root(plan) {
        sys::fail(status, step);
    }
    check!(
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0,
        Step::Landlock
    );
    if plan.landlock_abi > 0 {
        let cache_shown = plan.layers.cache.is_some();
        let full: [&std::ffi::CStr; 5] =
            [c"/testbed", c"/venv", c"/tmp", c"/dev/shm", c"/uv-cache"];
        let n = if cache_shown { 5 } else { 4 };
        check!(
            confine::landlock_restrict(plan.landlock_abi, &full[..n], &[c"/dev"]),
            Step::Landlock
        );
    }
    check!(confine::seccomp_install(plan.seccomp), Step::Seccomp);
    Ok(())
}

/// P: map C's ids, let it go on, wait for it and exit like it.
unsafe fn parent(plan: &EnvBuildPlan, c: libc::pid_t, status: Fd, sync_w: Fd) -> ! {
    let mut path = [0u8; 40];
    let mut ok = true;
    for (file, data) in [
        (&b"/setgroups\0"[..], &b"deny"[..]),
        (&b"/uid_map\0"[..], plan.uid_map.as_bytes()),
        (&b"/gid_map\0"[..], plan.gid_map.as_bytes()),
    ] {
        let mut n = 0;
        for &b in b"/proc/" {
            path[n] = b;
            n += 1;
        }
        n += fmt_u32(c as u32, &mut path[n..]);
        for &b in file {
            path[n] = b;
            n += 1;
        }
        let p = std::ffi::CStr::from_bytes_until_nul(&path[..n]).unwrap_or(c"/");
        // `setgroups` only has to be denied for an unprivileged mapping; root may leave it.
        if !sys::write_file(p, data) && file != b"/setgroups\0" {
            ok = false;
            break;
        }
    }
    if ok {
        sys::write_all(sync_w, b"M");
    } else {
        let e = sys::errno();
        sys::send(status, sys::TAG_ERR, Step::UidMap as i32, e);
    }
    libc::close(sync_w);
    libc::close(status);
    libc::close_range(0, libc::c_uint::MAX, 0);
    sys::wait_and_exit_like(c)
}

/// C (pid 1 of the build's pid namespace): build the root at /tmp/root and pivot into it.
///
/// It stays one long function on purpose: it runs in a forked child (before exec), where only
/// async-signal-safe calls are allowed and the mounts must happen in exactly this order;
/// splitting it would add indirection (and risk) to code that cannot be debugged or
/// unit-tested in place, and it already reads as one sequence of mounts, each failing with its
/// own [`Step`].
unsafe fn build_root(plan: &EnvBuildPlan) -> Result<(), Step> {
    let null = std::ptr::null::<libc::c_char>();
    let ok = |b: bool, step: Step| if b { Ok(()) } else { Err(step) };
    if plan.stage_outside {
        ok(
            sys::mount(
                null,
                c"/".as_ptr(),
                null,
                libc::MS_REC | libc::MS_PRIVATE,
                null,
            ),
            Step::MakePrivate,
        )?;
    } else {
        stage_layers(&plan.layers)?;
    }
    ok(
        sys::mount(
            c"tmpfs".as_ptr(),
            c"/tmp/root".as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            c"mode=0755,size=1m".as_ptr(),
        ),
        Step::RootTmpfs,
    )?;
    for e in &plan.entries {
        match e {
            RootEntry::Bind { src, dst } | RootEntry::File { src, dst } => {
                let made = if matches!(e, RootEntry::File { .. }) {
                    let fd = libc::open(
                        dst.as_ptr(),
                        libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                        0o644,
                    );
                    fd >= 0 && libc::close(fd) == 0
                } else {
                    libc::mkdir(dst.as_ptr(), 0o755) == 0
                };
                ok(made, Step::Mkdir)?;
                ok(
                    sys::mount(
                        src.as_ptr(),
                        dst.as_ptr(),
                        null,
                        libc::MS_BIND | libc::MS_REC,
                        null,
                    ),
                    Step::Bind,
                )?;
                ok(
                    sys::mount_setattr_rec(dst, sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID),
                    Step::Readonly,
                )?;
            }
            RootEntry::Symlink { target, dst } => {
                ok(
                    libc::symlink(target.as_ptr(), dst.as_ptr()) == 0,
                    Step::Mkdir,
                )?;
            }
            RootEntry::Dir { dst } => {
                ok(libc::mkdir(dst.as_ptr(), 0o755) == 0, Step::Mkdir)?;
            }
        }
    }
    for h in &plan.hide {
        // Unreachable paths need no hiding; ignore failures (as the holder does).
        sys::mount(
            c"tmpfs".as_ptr(),
            h.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            c"size=4k,mode=0755".as_ptr(),
        );
    }
    ok(
        libc::mkdir(c"/tmp/root/testbed".as_ptr(), 0o755) == 0,
        Step::Mkdir,
    )?;
    if plan.layers.lower.is_some() {
        ok(
            sys::mount(
                c"overlay".as_ptr(),
                c"/tmp/root/testbed".as_ptr(),
                c"overlay".as_ptr(),
                0,
                c"userxattr,lowerdir=/tmp/lower,upperdir=/tmp/layer/upper,workdir=/tmp/layer/work"
                    .as_ptr(),
            ),
            Step::Overlay,
        )?;
    }
    for (src, dst, shown) in [
        (c"/tmp/venv", c"/tmp/root/venv", true),
        (
            c"/tmp/cache",
            c"/tmp/root/uv-cache",
            plan.layers.cache.is_some(),
        ),
    ] {
        if !shown {
            continue;
        }
        ok(libc::mkdir(dst.as_ptr(), 0o755) == 0, Step::Mkdir)?;
        ok(
            sys::mount(src.as_ptr(), dst.as_ptr(), null, libc::MS_BIND, null),
            Step::Bind,
        )?;
    }
    ok(
        libc::mkdir(c"/tmp/root/tmp".as_ptr(), 0o1777) == 0
            && sys::mount(
                c"tmpfs".as_ptr(),
                c"/tmp/root/tmp".as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                c"mode=1777".as_ptr(),
            ),
        Step::Tmpfs,
    )?;
    mount_dev(c"mode=1777,size=256m")?;
    ok(
        libc::mkdir(c"/tmp/root/proc".as_ptr(), 0o555) == 0
            && sys::mount(
                c"proc".as_ptr(),
                c"/tmp/root/proc".as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                null,
            ),
        Step::Proc,
    )?;
    ok(
        libc::chdir(c"/tmp/root".as_ptr()) == 0
            && libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) == 0
            && libc::umount2(c".".as_ptr(), libc::MNT_DETACH) == 0
            && libc::chdir(c"/testbed".as_ptr()) == 0,
        Step::PivotRoot,
    )?;
    // The root tmpfs itself (mount points only) becomes read-only.
    ok(
        sys::mount(
            null,
            c"/".as_ptr(),
            null,
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
            null,
        ),
        Step::Readonly,
    )
}
