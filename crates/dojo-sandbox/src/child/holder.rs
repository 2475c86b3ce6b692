//! The holder: pid 1 of a sandbox. It stages the layers, switches to the sandbox uid, creates
//! the user/mount/net/pid namespaces, builds the new root (read-only host directories, the
//! overlay at /testbed, /venv, /tmp, /dev, /proc), pivots into it and then either becomes the
//! in-sandbox launcher (the `launcher` module) or just holds the namespaces.

#![allow(unsafe_op_in_unsafe_fn)]

use std::ffi::CString;

use super::layers::{Layers, RootEntry, mount_dev, stage_layers};
use crate::sys::{self, Fd, Step, fmt_u32};

/// The environment variable that turns a re-executed binary into the in-sandbox launcher
/// (`<sock>,<lifeline>,<prewarm 1|0>,<venv writable 1|0>`; read by the launcher's hook).
pub(crate) const LAUNCHER_VAR: &std::ffi::CStr = c"DOJO_SANDBOX_LAUNCHER";

/// Everything the holder needs, prepared before fork. Paths starting with `/tmp/root/` refer to
/// the new root while it is being built (a tmpfs in the private mount namespace).
pub(crate) struct HolderPlan {
    /// Switch from host root to this uid/gid before creating the user namespace.
    pub switch_to: Option<(u32, u32)>,
    pub keep: bool,
    pub status_w: Fd,
    pub lifeline_r: Option<Fd>,
    pub layers: Layers,
    pub cgroup_procs: Vec<Fd>,
    pub uid_map: CString,
    pub gid_map: CString,
    pub entries: Vec<RootEntry>,
    /// Paths (prefixed with /tmp/root) to cover with an empty read-only tmpfs ($DOJO_HOME).
    pub hide: Vec<CString>,
    pub tmp_opts: CString,
    pub shm_opts: CString,
    /// tmpfs options: put the overlay's upper/work dirs and /tmp on one size-limited tmpfs
    /// mounted over the staged layer (the sandbox's total writable space).
    pub layer_tmpfs: Option<CString>,
    /// (executable, socket): once the root is built, pid 1 execs the calling binary as the
    /// in-sandbox launcher serving commands on the socket (see the `launcher` module).
    pub launcher: Option<(Fd, Fd)>,
    /// Let the launcher keep a supervisor pre-warmed (see the `launcher` module).
    pub prewarm: bool,
    /// The caller's command-line and environment areas (`sys::scrub_cmdline`).
    pub scrub: [(usize, usize); 2],
    /// `LD_LIBRARY_PATH=…` for the launcher's own start (`launcher::loader_env`).
    pub launcher_env: Option<CString>,
    /// /venv is an overlay with a private upper (in the layer) instead of a read-only bind.
    pub venv_writable: bool,
    /// The CPU affinity mask every process of the sandbox inherits (`cpus = N`).
    pub cpus: Option<libc::cpu_set_t>,
}

/// Body of the pre_exec closure that becomes the holder. P (this process) stages the layers (as
/// host root, in a private mount namespace), switches to the sandbox uid, creates the namespaces
/// and forks C (pid 1 of the new pid ns), reports C's pid and waits for it; C builds the root,
/// reports success and then waits for the lifeline to close (or forever when kept).
pub(crate) unsafe fn run_holder(plan: &HolderPlan) -> std::io::Error {
    sys::scrub_cmdline(plan.scrub, sys::HELPER_NAME);
    let mut fds = [0 as Fd; 16];
    let mut n = 0;
    fds[n] = plan.status_w;
    n += 1;
    let i_life = plan.lifeline_r.map(|l| {
        fds[n] = l;
        n += 1;
        n - 1
    });
    let cg_start = n;
    for &c in &plan.cgroup_procs {
        if n < fds.len() {
            fds[n] = c;
            n += 1;
        }
    }
    let cg_end = n;
    let i_launcher = plan.launcher.map(|(exe, sock)| {
        fds[n] = exe;
        fds[n + 1] = sock;
        n += 2;
        n - 2
    });
    if !sys::keep_fds(&mut fds[..n]) {
        return std::io::Error::last_os_error();
    }
    let status = fds[0];
    let life = i_life.map(|i| fds[i]);
    let launcher = i_launcher.map(|i| (fds[i], fds[i + 1]));
    for &cg in &fds[cg_start..cg_end] {
        if !sys::write_all(cg, b"0") {
            sys::fail(status, Step::Cgroup);
        }
        libc::close(cg);
    }
    if plan.keep {
        libc::setsid();
    }
    let staged = plan.switch_to.is_some();
    if let Some((uid, gid)) = plan.switch_to {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            sys::fail(status, Step::Unshare);
        }
        if let Err(step) = stage_layers(&plan.layers) {
            sys::fail(status, step);
        }
        if libc::setgroups(0, std::ptr::null()) != 0 {
            sys::fail(status, Step::Setgroups);
        }
        if libc::setresgid(gid, gid, gid) != 0 {
            sys::fail(status, Step::Setgid);
        }
        if libc::setresuid(uid, uid, uid) != 0 {
            sys::fail(status, Step::Setuid);
        }
    }
    // Changing uid cleared "dumpable", which makes /proc/self/* root-owned: restore it so we
    // can write our own uid_map.
    libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
    if let Some(set) = &plan.cpus
        && libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) != 0
    {
        sys::fail(status, Step::Affinity);
    }
    if libc::unshare(
        libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWNET | libc::CLONE_NEWPID,
    ) != 0
    {
        sys::fail(status, Step::Unshare);
    }
    if !sys::write_file(c"/proc/self/setgroups", b"deny")
        || !sys::write_file(c"/proc/self/uid_map", plan.uid_map.as_bytes())
        || !sys::write_file(c"/proc/self/gid_map", plan.gid_map.as_bytes())
    {
        sys::fail(status, Step::UidMap);
    }
    let c = libc::fork();
    if c < 0 {
        sys::fail(status, Step::Fork);
    }
    if c == 0 {
        holder_init(plan, status, life, staged, launcher);
    }
    sys::send(status, sys::TAG_PID, c, 0);
    libc::close(status);
    if let Some(l) = life {
        libc::close(l);
    }
    libc::close_range(3, libc::c_uint::MAX, 0);
    sys::wait_and_exit_like(c)
}

/// Pid 1 of the new pid namespace: stage the layers (or make the staged mounts private), build
/// the new root, pivot into it, then become the launcher or hold the namespaces.
///
/// It stays one long function on purpose: it runs in a forked child between fork and exec,
/// where only async-signal-safe calls are allowed, and its mounts must happen in exactly this
/// order; splitting it would add indirection (and risk) to code that cannot be debugged or
/// unit-tested in place, for no gain in reading, since it already reads as one sequence of
/// mounts, each failing with its own [`Step`].
unsafe fn holder_init(
    plan: &HolderPlan,
    status: Fd,
    life: Option<Fd>,
    staged: bool,
    launcher: Option<(Fd, Fd)>,
) -> ! {
    let t = |s: &std::ffi::CStr| s.as_ptr();
    let null = std::ptr::null::<libc::c_char>();
    let fail = |step| sys::fail(status, step);
    if staged {
        if !sys::mount(null, t(c"/"), null, libc::MS_REC | libc::MS_PRIVATE, null) {
            fail(Step::MakePrivate);
        }
    } else if let Err(step) = stage_layers(&plan.layers) {
        fail(step);
    }
    if !sys::mount(
        t(c"tmpfs"),
        t(c"/tmp/root"),
        t(c"tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        t(c"mode=0755,size=1m"),
    ) {
        fail(Step::RootTmpfs);
    }
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
                if !made {
                    fail(Step::Mkdir);
                }
                if !sys::mount(
                    src.as_ptr(),
                    dst.as_ptr(),
                    null,
                    libc::MS_BIND | libc::MS_REC,
                    null,
                ) {
                    fail(Step::Bind);
                }
                if !sys::mount_setattr_rec(dst, sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID) {
                    fail(Step::Readonly);
                }
            }
            RootEntry::Symlink { target, dst } => {
                if libc::symlink(target.as_ptr(), dst.as_ptr()) != 0 {
                    fail(Step::Mkdir);
                }
            }
            RootEntry::Dir { dst } => {
                if libc::mkdir(dst.as_ptr(), 0o755) != 0 {
                    fail(Step::Mkdir);
                }
            }
        }
    }
    // The pristine tree's git directory, read-only at /.dojo-base: diffs read the base commit's
    // objects and index from here, never from the workspace's `.git`, which the agent can write
    // (forged objects, replace refs, alternates: `patch::DIFF_SCRIPT`).
    if plan.layers.lower.is_some()
        && (libc::mkdir(t(c"/tmp/root/.dojo-base"), 0o755) != 0
            || !sys::mount(
                t(c"/tmp/lower/.git"),
                t(c"/tmp/root/.dojo-base"),
                null,
                libc::MS_BIND | libc::MS_REC,
                null,
            )
            || !sys::mount_setattr_rec(
                c"/tmp/root/.dojo-base",
                sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
            ))
    {
        fail(Step::Bind);
    }
    for h in &plan.hide {
        // Unreachable paths (under a 0700 home) need no hiding; ignore failures.
        sys::mount(
            t(c"tmpfs"),
            h.as_ptr(),
            t(c"tmpfs"),
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            t(c"size=4k,mode=0755"),
        );
    }
    // /dev: a small tmpfs with the harmless device nodes bound in.
    if let Err(step) = mount_dev(&plan.shm_opts) {
        fail(step);
    }
    if let Some(opts) = &plan.layer_tmpfs {
        if !sys::mount(
            t(c"tmpfs"),
            t(c"/tmp/layer"),
            t(c"tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            opts.as_ptr(),
        ) {
            fail(Step::Tmpfs);
        }
        for (d, mode) in [
            (c"/tmp/layer/upper", 0o755),
            (c"/tmp/layer/work", 0o755),
            (c"/tmp/layer/tmp", 0o1777),
            (c"/tmp/layer/vupper", 0o755),
            (c"/tmp/layer/vwork", 0o755),
        ] {
            if libc::mkdir(d.as_ptr(), mode) != 0 || libc::chmod(d.as_ptr(), mode) != 0 {
                fail(Step::Mkdir);
            }
        }
    }
    // The workspace: overlay of the pristine tree (read-only lower) and this sandbox's upper.
    if libc::mkdir(t(c"/tmp/root/testbed"), 0o755) != 0 {
        fail(Step::Mkdir);
    }
    let overlay_opts = if plan.layers.tree.is_some() {
        c"userxattr,lowerdir=/tmp/tree:/tmp/lower,upperdir=/tmp/layer/upper,workdir=/tmp/layer/work"
    } else {
        c"userxattr,lowerdir=/tmp/lower,upperdir=/tmp/layer/upper,workdir=/tmp/layer/work"
    };
    if !sys::mount(
        t(c"overlay"),
        t(c"/tmp/root/testbed"),
        t(c"overlay"),
        0,
        t(overlay_opts),
    ) {
        fail(Step::Overlay);
    }
    if plan.layers.venv.is_some() && plan.venv_writable {
        // A private, throwaway copy-on-write view of the shared venv (a grading run's
        // reinstall); the shared venv itself stays untouched.
        if libc::mkdir(t(c"/tmp/root/venv"), 0o755) != 0 {
            fail(Step::Mkdir);
        }
        if !sys::mount(
            t(c"overlay"),
            t(c"/tmp/root/venv"),
            t(c"overlay"),
            libc::MS_NOSUID | libc::MS_NODEV,
            t(c"userxattr,lowerdir=/tmp/venv,upperdir=/tmp/layer/vupper,workdir=/tmp/layer/vwork"),
        ) {
            fail(Step::Overlay);
        }
    } else if plan.layers.venv.is_some() {
        if libc::mkdir(t(c"/tmp/root/venv"), 0o755) != 0 {
            fail(Step::Mkdir);
        }
        if !sys::mount(
            t(c"/tmp/venv"),
            t(c"/tmp/root/venv"),
            null,
            libc::MS_BIND | libc::MS_REC,
            null,
        ) {
            fail(Step::Bind);
        }
        if !sys::mount_setattr_rec(
            c"/tmp/root/venv",
            sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
        ) {
            fail(Step::Readonly);
        }
    }
    // /tmp: on the workspace tmpfs (one cap for both), or a tmpfs of its own.
    let tmp_ok = libc::mkdir(t(c"/tmp/root/tmp"), 0o1777) == 0
        && if plan.layer_tmpfs.is_some() {
            sys::mount(
                t(c"/tmp/layer/tmp"),
                t(c"/tmp/root/tmp"),
                null,
                libc::MS_BIND,
                null,
            )
        } else {
            sys::mount(
                t(c"tmpfs"),
                t(c"/tmp/root/tmp"),
                t(c"tmpfs"),
                libc::MS_NOSUID | libc::MS_NODEV,
                plan.tmp_opts.as_ptr(),
            )
        };
    if !tmp_ok {
        fail(Step::Tmpfs);
    }
    if libc::mkdir(t(c"/tmp/root/proc"), 0o555) != 0
        || !sys::mount(
            t(c"proc"),
            t(c"/tmp/root/proc"),
            t(c"proc"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            null,
        )
    {
        fail(Step::Proc);
    }
    // /sys: a fresh sysfs of the sandbox's own network namespace (only `lo` under
    // /sys/class/net) without the cgroup tree mounted on the host's /sys/fs/cgroup, so neither
    // the host's interfaces nor other sandboxes' cgroups show. Optional: without it, /sys is
    // an empty directory (Python and pytest do not need it).
    if libc::mkdir(t(c"/tmp/root/sys"), 0o555) == 0 {
        sys::mount(
            t(c"sysfs"),
            t(c"/tmp/root/sys"),
            t(c"sysfs"),
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            null,
        );
    }
    if libc::chdir(t(c"/tmp/root")) != 0
        || libc::syscall(libc::SYS_pivot_root, t(c"."), t(c".")) != 0
        || libc::umount2(t(c"."), libc::MNT_DETACH) != 0
        || libc::chdir(t(c"/")) != 0
    {
        fail(Step::PivotRoot);
    }
    // The root tmpfs itself (mount points only) and /dev become read-only too.
    if !sys::mount(
        null,
        t(c"/"),
        null,
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
        null,
    ) || !sys::mount(
        null,
        t(c"/dev"),
        null,
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NOEXEC,
        null,
    ) {
        fail(Step::Readonly);
    }
    if !sys::loopback_up() {
        fail(Step::LoopbackUp);
    }
    sys::send(status, sys::TAG_OK, 0, 0);
    libc::close(status);
    if let Some((exe, sock)) = launcher {
        let loader = plan
            .launcher_env
            .as_ref()
            .map_or(std::ptr::null(), |e| e.as_ptr());
        exec_launcher(exe, sock, life.unwrap_or(-1), plan, loader);
        // The exec failed: the caller sees EOF instead of the launcher's greeting and joins the
        // namespaces per command instead; we keep holding them.
        libc::close(sock);
        libc::close(exe);
    }
    // Hold the namespaces. Commands live in their own pid namespaces, so no orphans come here,
    // but reap anything just in case.
    libc::signal(libc::SIGCHLD, libc::SIG_IGN);
    match life {
        Some(l) => {
            libc::close_range(3, (l - 1) as libc::c_uint, 0);
            libc::close_range((l + 1) as libc::c_uint, libc::c_uint::MAX, 0);
            loop {
                let mut p = libc::pollfd {
                    fd: l,
                    events: libc::POLLIN,
                    revents: 0,
                };
                let r = libc::poll(&mut p, 1, -1);
                if r > 0 && p.revents != 0 {
                    libc::_exit(0);
                }
            }
        }
        None => {
            libc::close_range(3, libc::c_uint::MAX, 0);
            loop {
                libc::pause();
            }
        }
    }
}

/// Become the in-sandbox launcher: exec the calling binary (through an fd opened before the
/// pivot) with only `DOJO_SANDBOX_LAUNCHER=<sock>,<lifeline>,<prewarm>,<venv writable>` (and the caller's
/// `LD_LIBRARY_PATH`, `loader`, when it has one) in its environment; the library's
/// `.init_array` hook (the `launcher` module) takes over before `main`. Returns only on failure.
unsafe fn exec_launcher(
    exe: Fd,
    sock: Fd,
    life: Fd,
    plan: &HolderPlan,
    loader: *const libc::c_char,
) {
    let mut env = [0u8; 64];
    let mut n = 0;
    for &b in LAUNCHER_VAR.to_bytes().iter().chain(b"=") {
        env[n] = b;
        n += 1;
    }
    n += fmt_u32(sock as u32, &mut env[n..]);
    env[n] = b',';
    n += 1;
    if life >= 0 {
        n += fmt_u32(life as u32, &mut env[n..]);
    } else {
        env[n] = b'-';
        n += 1;
    }
    for flag in [plan.prewarm, plan.venv_writable] {
        env[n] = b',';
        env[n + 1] = if flag { b'1' } else { b'0' };
        n += 2;
    }
    env[n] = 0;
    for fd in [sock, life] {
        if fd >= 0 {
            libc::fcntl(fd, libc::F_SETFD, 0);
        }
    }
    let argv = [c"dojo-sandbox-launcher".as_ptr(), std::ptr::null()];
    let envp = [
        env.as_ptr().cast::<libc::c_char>(),
        loader,
        std::ptr::null(),
    ];
    libc::syscall(
        libc::SYS_execveat,
        exe,
        c"".as_ptr(),
        argv.as_ptr(),
        envp.as_ptr(),
        libc::AT_EMPTY_PATH,
    );
    if life >= 0 {
        libc::fcntl(life, libc::F_SETFD, libc::FD_CLOEXEC);
    }
}
