//! What runs between `fork` and `exec`: the holder's namespace setup and the per-command
//! supervisor. Everything is prepared by the parent into plain C strings and pointers; the child
//! code below only issues system calls (async-signal-safe), so it is correct even when the
//! calling process is multi-threaded (tokio) and whatever binary it is (the `dojo` CLI or another
//! crate's test binary — no helper executable has to be found).
//!
//! Processes of one command (namespace backend):
//! ```text
//! caller (tokio) ── I: supervisor (host pid ns; joined the sandbox user/mnt/net ns, uid S)
//!                   ├── K: pid 1 of a fresh pid ns (forwards TERM to everyone, reaps orphans)
//!                   └── L: the command (pid 2 there; own mount ns with its own /proc,
//!                          setsid, rlimits, Landlock, seccomp, execve)
//! ```
//! The caller signals I only. TERM → I → K → `kill(-1, TERM)` inside the pid namespace. When L
//! exits (or I is SIGKILLed, or the caller dies: lifeline pipe EOF), K is gone and the kernel kills
//! every process left in that pid namespace, `setsid` double-forked daemons included.
//!
//! Through the in-sandbox launcher ([`crate::launcher`], what `Sandbox::exec` uses), the same
//! guarantees with one process fewer and no fork of the caller:
//! ```text
//! launcher (pid 1 of the sandbox) ── I: pid 1 of a fresh pid ns (own mount ns and /proc, the
//!                                       seccomp filter; forked ahead of the request, waits for
//!                                       it, then supervises)
//!                                    └── L: the command (pid 2; setsid, rlimits, Landlock,
//!                                           execve; inherits the filter)
//! ```
//! (With pre-warming off, I is forked when the request arrives and L installs the filter.)
//! The caller talks to I over its control socket (`T` → `kill(-1, TERM)`, `K`/EOF → KILL); when
//! L exits I kills and reaps everything left, reports L's status and exits.

#![allow(unsafe_op_in_unsafe_fn)]

use std::ffi::CString;

use crate::sys::{self, Fd, Step};

/// A NULL-terminated array of C strings that stays valid while `self` lives.
pub(crate) struct CArgv {
    _owned: Vec<CString>,
    ptrs: Vec<*const libc::c_char>,
}

// SAFETY: the pointers point into `_owned`, which is immutable and owned by the same struct.
unsafe impl Send for CArgv {}
unsafe impl Sync for CArgv {}

impl CArgv {
    pub(crate) fn new(items: Vec<CString>) -> CArgv {
        let mut ptrs: Vec<*const libc::c_char> = items.iter().map(|c| c.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        CArgv {
            _owned: items,
            ptrs,
        }
    }
    pub(crate) fn as_ptr(&self) -> *const *const libc::c_char {
        self.ptrs.as_ptr()
    }
}

pub(crate) fn cstr(s: impl AsRef<[u8]>) -> CString {
    // Interior NULs cannot come from valid paths/args; replace them rather than panic.
    let v: Vec<u8> = s
        .as_ref()
        .iter()
        .map(|&b| if b == 0 { b'?' } else { b })
        .collect();
    CString::new(v).unwrap_or_default()
}

/// Which isolation the command child sets up.
pub(crate) enum Mode {
    /// Join the sandbox's user/mount/net namespaces (fds), then fresh pid + mount ns.
    Namespaces {
        userns: Fd,
        mntns: Fd,
        netns: Fd,
        /// Host root: drop supplementary groups before joining.
        host_root: bool,
    },
    /// No namespaces: process group + subreaper; kill descendants by walking /proc.
    Fallback,
    /// Forked by the in-sandbox launcher: already inside ([`run_inside`]).
    Launched,
}

/// Everything the command child needs, prepared before fork.
pub(crate) struct ExecPlan {
    pub mode: Mode,
    /// Pipe to the caller: empty at exec (CLOEXEC), or a TAG_ERR message.
    pub status_w: Fd,
    /// Read end of the caller's lifeline pipe (EOF = the caller died).
    pub lifeline_r: Fd,
    /// `cgroup.procs` files (opened for writing) to join before anything else.
    pub cgroup_procs: Vec<Fd>,
    /// Candidate executables (argv[0] resolved against PATH by the parent, in order).
    pub exe_candidates: Vec<CString>,
    pub argv: CArgv,
    pub envp: CArgv,
    pub cwd: CString,
    pub rlimits: Vec<(libc::__rlimit_resource_t, u64)>,
    /// Landlock ABI to use (0 = skip).
    pub landlock_abi: i32,
    pub landlock_full: Vec<CString>,
    pub landlock_files: Vec<CString>,
    pub seccomp: Option<&'static [libc::sock_filter]>,
}

/// Body of the pre_exec closure for a command. Never returns on success paths: the supervisor
/// `_exit`s with the command's status; the command `execve`s.
pub(crate) unsafe fn run_command(plan: &ExecPlan) -> std::io::Error {
    // Renumber the fds we need; everything else (including std's exec-error pipe, so spawn()
    // returns now) is closed.
    let mut fds = [0 as Fd; 16];
    let mut n = 0;
    fn push(fds: &mut [Fd; 16], n: &mut usize, fd: Fd) -> usize {
        fds[*n] = fd;
        *n += 1;
        *n - 1
    }
    let i_status = push(&mut fds, &mut n, plan.status_w);
    let i_life = push(&mut fds, &mut n, plan.lifeline_r);
    let (i_user, i_mnt, i_net) = match plan.mode {
        Mode::Namespaces {
            userns,
            mntns,
            netns,
            ..
        } => (
            push(&mut fds, &mut n, userns),
            push(&mut fds, &mut n, mntns),
            push(&mut fds, &mut n, netns),
        ),
        Mode::Fallback | Mode::Launched => (usize::MAX, usize::MAX, usize::MAX),
    };
    let cg_start = n;
    for &fd in &plan.cgroup_procs {
        if n >= fds.len() {
            break;
        }
        push(&mut fds, &mut n, fd);
    }
    let cg_end = n;
    if !sys::keep_fds(&mut fds[..n]) {
        return std::io::Error::last_os_error();
    }
    let status = fds[i_status];
    let life = fds[i_life];

    for &cg in &fds[cg_start..cg_end] {
        // "0" moves the writing process; our children inherit the cgroup.
        if !sys::write_all(cg, b"0") {
            sys::fail(status, Step::Cgroup);
        }
        libc::close(cg);
    }

    let fresh_pid_ns = match plan.mode {
        Mode::Namespaces { host_root, .. } => {
            if host_root && libc::setgroups(0, std::ptr::null()) != 0 {
                sys::fail(status, Step::Setgroups);
            }
            for (i, t) in [
                (i_user, libc::CLONE_NEWUSER),
                (i_mnt, libc::CLONE_NEWNS),
                (i_net, libc::CLONE_NEWNET),
            ] {
                if libc::setns(fds[i], t) != 0 {
                    sys::fail(status, Step::Setns);
                }
                libc::close(fds[i]);
            }
            if libc::setresgid(0, 0, 0) != 0 {
                sys::fail(status, Step::Setgid);
            }
            if libc::setresuid(0, 0, 0) != 0 {
                sys::fail(status, Step::Setuid);
            }
            if libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWPID) != 0 {
                sys::fail(status, Step::Unshare);
            }
            true
        }
        Mode::Fallback | Mode::Launched => false,
    };

    fork_tree(plan, status, life, fresh_pid_ns)
}

/// Launcher side (see [`crate::launcher`]): the supervisor of one command, forked by the
/// in-sandbox launcher as pid 1 of a fresh pid namespace (so no separate init process is
/// needed), already in the sandbox's user/mount/net namespaces and cgroup, as the sandbox's root.
/// Stdio arrived as fds 0–2; `ctl` is the caller's control socket: setup errors and the
/// command's wait status go there, `T` read from it sends SIGTERM to everything in the
/// namespace, `K` or EOF SIGKILL. When the command exits, everything it left behind is killed.
pub(crate) unsafe fn run_inside(plan: &ExecPlan, ctl: Fd) -> ! {
    match prepare_inside() {
        Ok(sfd) => run_prepared(plan, ctl, sfd),
        Err((step, e)) => fail_with(ctl, step, e),
    }
}

/// The request-independent half of [`run_inside`]: our own mount namespace with a `/proc` of
/// this pid namespace (so pids, `/proc/self` and `ps` agree inside the command), SIGCHLD on a
/// signalfd. A pre-warmed supervisor ([`crate::launcher`]) runs it before any request exists;
/// it returns the signalfd, or the failed step and its errno (reported once a request brings a
/// control socket to report on).
pub(crate) unsafe fn prepare_inside() -> Result<Fd, (Step, i32)> {
    // The launcher auto-reaps (SIGCHLD ignored); the supervisor must wait for its children.
    libc::signal(libc::SIGCHLD, libc::SIG_DFL);
    if libc::getpid() != 1 || libc::unshare(libc::CLONE_NEWNS) != 0 {
        return Err((Step::Unshare, sys::errno()));
    }
    if !mount_own_proc() {
        return Err((Step::Proc, sys::errno()));
    }
    let sfd = sys::block_and_signalfd(&[libc::SIGCHLD]);
    if sfd < 0 {
        return Err((Step::Signals, sys::errno()));
    }
    Ok(sfd)
}

/// Mount a `/proc` of our pid namespace over `/proc` (in our own mount namespace), so pids,
/// `/proc/self` and `ps` agree inside the command.
unsafe fn mount_own_proc() -> bool {
    sys::mount(
        c"proc".as_ptr(),
        c"/proc".as_ptr(),
        c"proc".as_ptr(),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        std::ptr::null(),
    )
}

/// Report a setup step that failed earlier with errno `e`, and exit.
pub(crate) unsafe fn fail_with(ctl: Fd, step: Step, e: i32) -> ! {
    *libc::__errno_location() = e;
    sys::fail(ctl, step)
}

/// The request-dependent half of [`run_inside`], after [`prepare_inside`]: fork the command,
/// supervise it.
pub(crate) unsafe fn run_prepared(plan: &ExecPlan, ctl: Fd, sfd: Fd) -> ! {
    let l_pid = spawn_command(plan, ctl, sfd);
    if l_pid < 0 {
        sys::fail(ctl, Step::Fork);
    }
    libc::close(0);
    libc::close(1);
    libc::close(2);
    supervise(sfd, ctl, SELF_INIT, l_pid, true, true)
}

/// Start L like `posix_spawn` does: `CLONE_VM | CLONE_VFORK`, so no copy of our page tables is
/// made only to be thrown away by `execve`, and we sleep until L has exec'd (or exited). L runs
/// [`exec_command`] on a stack of its own; it shares our memory but not our fd table, signal
/// handlers, credentials, rlimits, cwd or session, which is all it changes before `execve`.
unsafe fn spawn_command(plan: &ExecPlan, ctl: Fd, sfd: Fd) -> libc::pid_t {
    struct Arg<'a> {
        plan: &'a ExecPlan,
        ctl: Fd,
        sfd: Fd,
    }
    extern "C" fn entry(p: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `p` points at the `Arg` below, alive while we run (the parent sleeps until
        // our execve or exit).
        unsafe {
            let a = &*(p as *const Arg);
            libc::close(a.sfd);
            // /proc was mounted by `prepare_inside`, in the mount namespace we share.
            exec_command(a.plan, a.ctl, false)
        }
    }
    const STACK: usize = 256 * 1024;
    let mut stack = vec![0u128; STACK / 16];
    let top = stack.as_mut_ptr().add(stack.len()).cast::<libc::c_void>();
    let arg = Arg { plan, ctl, sfd };
    let pid = libc::clone(
        entry,
        top,
        libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
        (&arg as *const Arg).cast_mut().cast(),
    );
    drop(stack);
    pid
}

/// `k_pid` meaning "we are pid 1 of the command's namespace ourselves" ([`run_inside`]).
const SELF_INIT: libc::pid_t = 0;

/// Fork K (pid 1 of the command's pid namespace, or the fallback subreaper) and L (the command),
/// then supervise. With `ctl`, `status` and `life` are both the caller's control socket.
unsafe fn fork_tree(plan: &ExecPlan, status: Fd, life: Fd, fresh_pid_ns: bool) -> ! {
    let sfd = sys::block_and_signalfd(&[
        libc::SIGCHLD,
        libc::SIGTERM,
        libc::SIGINT,
        libc::SIGHUP,
        libc::SIGQUIT,
    ]);
    if sfd < 0 {
        sys::fail(status, Step::Signals);
    }

    // K: pid 1 of the command's pid namespace, or (fallback) the subreaper that owns the
    // command's whole process tree. Either way it dies — killing everything — when the death
    // pipe reports that the supervisor I is gone (even by SIGKILL).
    let mut death = [-1 as Fd; 2];
    if libc::pipe2(death.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
        sys::fail(status, Step::Fork);
    }
    let k_pid = libc::fork();
    if k_pid < 0 {
        sys::fail(status, Step::Fork);
    }
    if k_pid == 0 {
        if !fresh_pid_ns {
            libc::close(sfd);
            libc::close(life);
            fallback_reaper(plan, death[0], death[1], status);
        }
        mini_init(death[0], death[1], status);
    }
    libc::close(death[0]);
    if !fresh_pid_ns {
        libc::close(0);
        libc::close(1);
        libc::close(2);
        libc::close(status);
        supervise_fallback(sfd, life, k_pid, death[1]);
    }

    // L: the command.
    let l_pid = libc::fork();
    if l_pid < 0 {
        sys::fail(status, Step::Fork);
    }
    if l_pid == 0 {
        libc::close(sfd);
        libc::close(life);
        libc::close(death[1]);
        exec_command(plan, status, true);
    }

    // Supervisor I: let the pipes reach EOF once the command's processes are gone.
    libc::close(0);
    libc::close(1);
    libc::close(2);
    libc::close(status);
    supervise(sfd, life, k_pid, l_pid, true, false)
}

/// Fallback K: subreaper and parent of the command; on the command's exit, on TERM (forwarded)
/// and when the supervisor dies, it signals every descendant — reparented `setsid` escapees
/// included, since they land on us.
unsafe fn fallback_reaper(plan: &ExecPlan, death_r: Fd, death_w: Fd, status: Fd) -> ! {
    libc::close(death_w);
    if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
        sys::fail(status, Step::Signals);
    }
    // The signal mask (TERM, CHLD... blocked) was inherited from I.
    let sfd = sys::block_and_signalfd(&[libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP]);
    if sfd < 0 {
        sys::fail(status, Step::Signals);
    }
    let l_pid = libc::fork();
    if l_pid < 0 {
        sys::fail(status, Step::Fork);
    }
    if l_pid == 0 {
        libc::close(sfd);
        libc::close(death_r);
        exec_command(plan, status, false);
    }
    libc::close(0);
    libc::close(1);
    libc::close(2);
    libc::close(status);
    // The same supervision as a command's, without a pid namespace: `kill_all` then signals the
    // command's group and every reparented descendant.
    supervise(sfd, death_r, -1, l_pid, false, false)
}

/// Fallback I: forward TERM to K; exit like K; on the caller's death just go (K notices).
unsafe fn supervise_fallback(sfd: Fd, life: Fd, k_pid: libc::pid_t, death_w: Fd) -> ! {
    loop {
        let (ready0, ready1) = wait2(sfd, life);
        if ready1 {
            libc::close(death_w);
            libc::_exit(137);
        }
        if !ready0 {
            continue;
        }
        let sig = sys::read_signal(sfd);
        if sig == libc::SIGCHLD {
            let mut st = 0;
            if libc::waitpid(k_pid, &mut st, libc::WNOHANG) == k_pid {
                sys::exit_like(st);
            }
        } else if sig > 0 && k_pid > 1 {
            libc::kill(k_pid, libc::SIGTERM);
        }
    }
}

/// poll(2) two descriptors for input/hang-up until one is ready (EINTR retried); returns which.
unsafe fn wait2(a: Fd, b: Fd) -> (bool, bool) {
    loop {
        let mut p = [
            libc::pollfd {
                fd: a,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: b,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        if libc::poll(p.as_mut_ptr(), 2, -1) > 0 {
            return (p[0].revents != 0, p[1].revents != 0);
        }
    }
}

/// K: stays pid 1 so the namespace lives while the command runs; forwards TERM to everyone.
unsafe fn mini_init(death_r: Fd, death_w: Fd, status: Fd) -> ! {
    libc::close(death_w);
    libc::close(status);
    libc::close(0);
    libc::close(1);
    libc::close(2);
    // Orphans are reparented to us: reap them automatically.
    libc::signal(libc::SIGCHLD, libc::SIG_IGN);
    let sfd = sys::block_and_signalfd(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP]);
    loop {
        let (ready0, ready1) = wait2(death_r, sfd);
        if ready0 {
            // The supervisor is gone: dying takes the whole pid namespace with us.
            libc::_exit(0);
        }
        // kill(-1) means "everyone in my pid namespace" only because we are its init; never
        // send it from anywhere else.
        if ready1 && sys::read_signal(sfd) > 0 && libc::getpid() == 1 {
            libc::kill(-1, libc::SIGTERM);
        }
    }
}

unsafe fn exec_command(plan: &ExecPlan, status: Fd, mount_proc: bool) -> ! {
    sys::unblock_all_signals();
    for s in [
        libc::SIGCHLD,
        libc::SIGTERM,
        libc::SIGINT,
        libc::SIGHUP,
        libc::SIGPIPE,
    ] {
        libc::signal(s, libc::SIG_DFL);
    }
    if mount_proc && !mount_own_proc() {
        sys::fail(status, Step::Proc);
    }
    if libc::chdir(plan.cwd.as_ptr()) != 0 {
        sys::fail(status, Step::Chdir);
    }
    for &(res, val) in &plan.rlimits {
        let lim = libc::rlimit {
            rlim_cur: val,
            rlim_max: val,
        };
        if libc::setrlimit(res, &lim) != 0 {
            sys::fail(status, Step::Rlimit);
        }
    }
    if libc::setsid() < 0 {
        sys::fail(status, Step::Signals);
    }
    if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
        sys::fail(status, Step::Landlock);
    }
    if plan.landlock_abi > 0 {
        let mut full: [&std::ffi::CStr; 8] = [c"/"; 8];
        let mut files: [&std::ffi::CStr; 8] = [c"/"; 8];
        let nf = plan.landlock_full.len().min(8);
        let nd = plan.landlock_files.len().min(8);
        for (slot, p) in full.iter_mut().zip(&plan.landlock_full) {
            *slot = p.as_c_str();
        }
        for (slot, p) in files.iter_mut().zip(&plan.landlock_files) {
            *slot = p.as_c_str();
        }
        if !sys::landlock_restrict(plan.landlock_abi, &full[..nf], &files[..nd]) {
            sys::fail(status, Step::Landlock);
        }
    }
    if let Some(prog) = plan.seccomp
        && !sys::seccomp_install(prog)
    {
        sys::fail(status, Step::Seccomp);
    }
    let mut last = libc::ENOENT;
    for exe in &plan.exe_candidates {
        libc::execve(exe.as_ptr(), plan.argv.as_ptr(), plan.envp.as_ptr());
        let e = sys::errno();
        if e != libc::ENOENT && e != libc::ENOTDIR {
            last = e;
        }
    }
    // Not an infrastructure failure: like a shell, report "command not found" as 127.
    *libc::__errno_location() = last;
    let msg: &[u8] = if last == libc::ENOENT {
        b"dojo-sandbox: command not found\n"
    } else {
        b"dojo-sandbox: cannot execute command\n"
    };
    sys::write_all(2, msg);
    libc::_exit(if last == libc::ENOENT { 127 } else { 126 })
}

/// I: wait for the command; forward TERM; kill everything when it exits or the caller dies.
/// With `ctl`, `life` is the caller's control socket: `T` forwards TERM, `K` kills everything
/// (the command's status is still reported), EOF kills everything and exits; the command's wait
/// status is sent as a [`sys::TAG_EXIT`] message instead of being mirrored by our own exit.
unsafe fn supervise(
    sfd: Fd,
    life: Fd,
    k_pid: libc::pid_t,
    l_pid: libc::pid_t,
    ns: bool,
    ctl: bool,
) -> ! {
    loop {
        let (ready0, ready1) = wait2(sfd, life);
        if ready1 {
            let mut b = [0u8; 1];
            let n = if ctl {
                libc::read(life, b.as_mut_ptr().cast(), 1)
            } else {
                0
            };
            if n == 1 && b[0] == b'T' {
                kill_all(k_pid, l_pid, ns, libc::SIGTERM);
            } else if n == 1 {
                // `K` (ctl mode only): report how the command ended, then go.
                if let Some(st) = kill_all(k_pid, l_pid, ns, libc::SIGKILL) {
                    sys::send(life, sys::TAG_EXIT, st, 0);
                }
                libc::_exit(0);
            } else if n < 0 && sys::errno() == libc::EINTR {
                continue;
            } else {
                kill_all(k_pid, l_pid, ns, libc::SIGKILL);
                libc::_exit(137);
            }
        }
        if !ready0 {
            continue;
        }
        let sig = sys::read_signal(sfd);
        if sig == libc::SIGCHLD {
            // Reap every child that exited (K, or reparented orphans in fallback mode); stop when
            // the command itself is done.
            loop {
                let mut st = 0;
                let w = libc::waitpid(-1, &mut st, libc::WNOHANG);
                if w <= 0 {
                    break;
                }
                if w == l_pid {
                    kill_all(k_pid, l_pid, ns, libc::SIGKILL);
                    if ctl {
                        sys::send(life, sys::TAG_EXIT, st, 0);
                        libc::_exit(0);
                    }
                    sys::exit_like(st);
                }
            }
        } else if sig > 0 {
            kill_all(k_pid, l_pid, ns, libc::SIGTERM);
        }
    }
}

/// Signal everything the command started. With SIGKILL in a pid namespace, also reap K and L
/// and return L's wait status when it was reaped here.
unsafe fn kill_all(
    k_pid: libc::pid_t,
    l_pid: libc::pid_t,
    ns: bool,
    sig: libc::c_int,
) -> Option<libc::c_int> {
    if ns {
        // K forwards TERM to the whole namespace; KILL of K kills the namespace. When we are
        // that namespace's init ourselves, kill(-1) reaches everyone in it but us — and only
        // then: from anywhere else it would mean every process we may signal.
        let target = if k_pid == SELF_INIT && libc::getpid() == 1 {
            -1
        } else if k_pid > 1 {
            k_pid
        } else {
            return None;
        };
        libc::kill(target, sig);
        let mut l_status = None;
        if sig == libc::SIGKILL {
            // K's exit waits in the kernel until every process of its namespace is reaped, and
            // L's parent is us: reap both (waiting for K alone would deadlock while L lives).
            // As init ourselves, this reaps L and every orphan.
            loop {
                let mut st = 0;
                let w = libc::waitpid(-1, &mut st, 0);
                if w == l_pid {
                    l_status = Some(st);
                } else if w < 0 && sys::errno() != libc::EINTR {
                    break;
                }
            }
        }
        return l_status;
    }
    // Fallback: the command's group, then every descendant (they are reparented to us, the
    // subreaper, when their parents die), until none is left.
    if l_pid > 1 {
        libc::kill(-l_pid, sig);
    }
    if sig != libc::SIGKILL {
        kill_children(sig);
        return None;
    }
    for _ in 0..10_000 {
        if kill_children(sig) == 0 {
            break;
        }
        while libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) > 0 {}
        libc::usleep(1000);
    }
    None
}

/// Send `sig` to each direct child (and its process group); returns how many were found.
unsafe fn kill_children(sig: libc::c_int) -> usize {
    let mut path = [0u8; 64];
    let mut len = 0;
    for &b in b"/proc/self/task/" {
        path[len] = b;
        len += 1;
    }
    len += fmt_u32(libc::getpid() as u32, &mut path[len..]);
    for &b in b"/children\0" {
        path[len] = b;
        len += 1;
    }
    let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return 0;
    }
    let mut buf = [0u8; 4096];
    let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
    libc::close(fd);
    if n <= 0 {
        return 0;
    }
    let mut count = 0;
    let mut cur: i64 = 0;
    let mut in_num = false;
    for &b in &buf[..n as usize] {
        if b.is_ascii_digit() {
            cur = cur * 10 + (b - b'0') as i64;
            in_num = true;
        } else if in_num {
            if cur > 1 {
                libc::kill(-(cur as libc::pid_t), sig);
                libc::kill(cur as libc::pid_t, sig);
            }
            count += 1;
            cur = 0;
            in_num = false;
        }
    }
    count
}

fn fmt_u32(mut v: u32, out: &mut [u8]) -> usize {
    let mut tmp = [0u8; 10];
    let mut i = 0;
    loop {
        tmp[i] = b'0' + (v % 10) as u8;
        i += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for j in 0..i {
        out[j] = tmp[i - 1 - j];
    }
    i
}

// ---------------------------------------------------------------------------------------------
// Layers: the host directories a sandbox root is made of (pristine tree, upper and work dirs,
// venv) are first *staged* as bind mounts on a tmpfs at /tmp/{lower,upper,work,venv} inside the
// mount namespace that will mount the overlay: overlayfs (and bind mounts) only accept paths whose
// mounts belong to the caller's own mount namespace, and the unprivileged sandbox uid could not
// even traverse `$DOJO_HOME` under a 0700 home. Staging happens while the process still can.

/// Real host paths of the layers.
pub(crate) struct Layers {
    pub lower: Option<CString>,
    /// A directory holding `upper/` and `work/` (overlayfs wants both on one mount).
    pub layer: CString,
    pub venv: Option<CString>,
}

/// Open the layers by path, cover /tmp with a tmpfs, bind each to /tmp/{lower,layer,venv} (through
/// /proc/self/fd, since /tmp is covered by then) and create /tmp/root for the new root.
unsafe fn stage_layers(l: &Layers) -> Result<(), Step> {
    let null = std::ptr::null::<libc::c_char>();
    let open = |p: &CString| {
        libc::open(
            p.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    let mut fds: [(Fd, &std::ffi::CStr); 3] =
        [(-1, c"/tmp/lower"), (-1, c"/tmp/layer"), (-1, c"/tmp/venv")];
    for (i, p) in [l.lower.as_ref(), Some(&l.layer), l.venv.as_ref()]
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

// ---------------------------------------------------------------------------------------------
// The holder.

/// One entry of the new root: a read-only bind of a host directory or a copied symlink.
pub(crate) enum RootEntry {
    Bind { src: CString, dst: CString },
    Symlink { target: CString, dst: CString },
}

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
    /// in-sandbox launcher serving commands on the socket (see [`crate::launcher`]).
    pub launcher: Option<(Fd, Fd)>,
    /// Let the launcher keep a supervisor pre-warmed (see [`crate::launcher`]).
    pub prewarm: bool,
    /// `LD_LIBRARY_PATH=…` for the launcher's own start ([`crate::launcher::loader_env`]).
    pub launcher_env: Option<CString>,
}

/// Body of the pre_exec closure that becomes the holder. P (this process) stages the layers (as
/// host root, in a private mount namespace), switches to the sandbox uid, creates the namespaces
/// and forks C (pid 1 of the new pid ns), reports C's pid and waits for it; C builds the root,
/// reports success and then waits for the lifeline to close (or forever when kept).
pub(crate) unsafe fn run_holder(plan: &HolderPlan) -> std::io::Error {
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
    let mut st = 0;
    loop {
        let w = libc::waitpid(c, &mut st, 0);
        if w == c {
            break;
        }
        if w < 0 && sys::errno() != libc::EINTR {
            libc::_exit(1);
        }
    }
    sys::exit_like(st)
}

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
            RootEntry::Bind { src, dst } => {
                if libc::mkdir(dst.as_ptr(), 0o755) != 0 {
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
        }
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
    if libc::mkdir(t(c"/tmp/root/dev"), 0o755) != 0
        || !sys::mount(
            t(c"tmpfs"),
            t(c"/tmp/root/dev"),
            t(c"tmpfs"),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            t(c"mode=0755,size=64k"),
        )
    {
        fail(Step::Dev);
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
            fail(Step::Dev);
        }
        libc::close(fd);
        if !sys::mount(src.as_ptr(), dst.as_ptr(), null, libc::MS_BIND, null) && src != c"/dev/tty"
        {
            fail(Step::Dev);
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
    if libc::mkdir(t(c"/tmp/root/dev/shm"), 0o1777) != 0
        || !sys::mount(
            t(c"tmpfs"),
            t(c"/tmp/root/dev/shm"),
            t(c"tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            plan.shm_opts.as_ptr(),
        )
    {
        fail(Step::Dev);
    }
    if libc::mkdir(t(c"/tmp/root/dev/pts"), 0o755) == 0 {
        // Pseudo-terminals for tools that need one; optional.
        sys::mount(
            t(c"devpts"),
            t(c"/tmp/root/dev/pts"),
            t(c"devpts"),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            t(c"newinstance,ptmxmode=0666,mode=0620"),
        );
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
    if !sys::mount(
        t(c"overlay"),
        t(c"/tmp/root/testbed"),
        t(c"overlay"),
        0,
        t(c"userxattr,lowerdir=/tmp/lower,upperdir=/tmp/layer/upper,workdir=/tmp/layer/work"),
    ) {
        fail(Step::Overlay);
    }
    if plan.layers.venv.is_some() {
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
        exec_launcher(exe, sock, life.unwrap_or(-1), plan.prewarm, loader);
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
/// pivot) with only `DOJO_SANDBOX_LAUNCHER=<sock>,<lifeline>,<prewarm 1|0>` (and the caller's
/// `LD_LIBRARY_PATH`, `loader`, when it has one) in its environment; the library's
/// `.init_array` hook ([`crate::launcher`]) takes over before `main`. Returns only on failure.
unsafe fn exec_launcher(exe: Fd, sock: Fd, life: Fd, prewarm: bool, loader: *const libc::c_char) {
    let mut env = [0u8; 64];
    let mut n = 0;
    for &b in crate::launcher::ENV_PREFIX {
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
    env[n] = b',';
    env[n + 1] = if prewarm { b'1' } else { b'0' };
    n += 2;
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

// ---------------------------------------------------------------------------------------------
// Environment builds: a private mount namespace where /testbed is an overlay of the pristine tree
// (throwaway upper) and /venv is the cache entry being built, so the editable install and every
// script shebang refer to the paths the sandboxes will use. The network stays (uv needs PyPI).

pub(crate) struct EnvBuildPlan {
    /// Not root: create a user namespace mapping us to root.
    pub userns: bool,
    pub uid_map: CString,
    pub gid_map: CString,
    pub status_w: Fd,
    pub layers: Layers,
    pub entries: Vec<RootEntry>,
}

pub(crate) unsafe fn run_env_build(plan: &EnvBuildPlan) -> std::io::Result<()> {
    let mut fds = [plan.status_w];
    // keep_fds closes everything else; the status pipe is close-on-exec, so it reports EOF when
    // the build script starts.
    if !sys::keep_fds(&mut fds) {
        return Err(std::io::Error::last_os_error());
    }
    let status = fds[0];
    let null = std::ptr::null::<libc::c_char>();
    macro_rules! check {
        ($cond:expr, $step:expr) => {
            if !$cond {
                let e = std::io::Error::last_os_error();
                sys::send(
                    status,
                    sys::TAG_ERR,
                    $step as i32,
                    e.raw_os_error().unwrap_or(0),
                );
                return Err(e);
            }
        };
    }
    if plan.userns {
        check!(
            libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) == 0,
            Step::Unshare
        );
        check!(
            sys::write_file(c"/proc/self/setgroups", b"deny")
                && sys::write_file(c"/proc/self/uid_map", plan.uid_map.as_bytes())
                && sys::write_file(c"/proc/self/gid_map", plan.gid_map.as_bytes()),
            Step::UidMap
        );
    } else {
        check!(libc::unshare(libc::CLONE_NEWNS) == 0, Step::Unshare);
    }
    if let Err(step) = stage_layers(&plan.layers) {
        check!(false, step);
    }
    check!(
        sys::mount(
            c"tmpfs".as_ptr(),
            c"/tmp/root".as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            c"mode=0755".as_ptr()
        ),
        Step::RootTmpfs
    );
    for e in &plan.entries {
        match e {
            RootEntry::Bind { src, dst } => {
                check!(libc::mkdir(dst.as_ptr(), 0o755) == 0, Step::Mkdir);
                check!(
                    sys::mount(
                        src.as_ptr(),
                        dst.as_ptr(),
                        null,
                        libc::MS_BIND | libc::MS_REC,
                        null
                    ),
                    Step::Bind
                );
            }
            RootEntry::Symlink { target, dst } => {
                check!(
                    libc::symlink(target.as_ptr(), dst.as_ptr()) == 0,
                    Step::Mkdir
                );
            }
        }
    }
    check!(
        libc::mkdir(c"/tmp/root/testbed".as_ptr(), 0o755) == 0,
        Step::Mkdir
    );
    if plan.layers.lower.is_some() {
        check!(
            sys::mount(
                c"overlay".as_ptr(),
                c"/tmp/root/testbed".as_ptr(),
                c"overlay".as_ptr(),
                0,
                c"userxattr,lowerdir=/tmp/lower,upperdir=/tmp/layer/upper,workdir=/tmp/layer/work"
                    .as_ptr()
            ),
            Step::Overlay
        );
    }
    check!(
        libc::mkdir(c"/tmp/root/venv".as_ptr(), 0o755) == 0,
        Step::Mkdir
    );
    check!(
        sys::mount(
            c"/tmp/venv".as_ptr(),
            c"/tmp/root/venv".as_ptr(),
            null,
            libc::MS_BIND,
            null
        ),
        Step::Bind
    );
    check!(
        libc::mkdir(c"/tmp/root/tmp".as_ptr(), 0o1777) == 0,
        Step::Mkdir
    );
    check!(
        sys::mount(
            c"tmpfs".as_ptr(),
            c"/tmp/root/tmp".as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            c"mode=1777".as_ptr()
        ),
        Step::Tmpfs
    );
    check!(
        libc::chdir(c"/tmp/root".as_ptr()) == 0
            && libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) == 0
            && libc::umount2(c".".as_ptr(), libc::MNT_DETACH) == 0
            && libc::chdir(c"/testbed".as_ptr()) == 0,
        Step::PivotRoot
    );
    Ok(())
}
