//! The per-command supervisor (see the process diagrams in the module above): its setup between
//! `fork` and `exec`, the command's own last steps before `execve` (rlimits, Landlock, seccomp),
//! and the supervision loop that kills everything the command left behind.

#![allow(unsafe_op_in_unsafe_fn)]

use super::plan::{ExecPlan, Mode};
use crate::confine;
use crate::sys::{self, Fd, Step, fmt_u32};

/// Body of the pre_exec closure for a command. Never returns on success paths: the supervisor
/// `_exit`s with the command's status; the command `execve`s.
pub(crate) unsafe fn run_command(plan: &ExecPlan) -> std::io::Error {
    if let Some(areas) = plan.scrub {
        sys::scrub_cmdline(areas, sys::HELPER_NAME);
    }
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
        Mode::Namespaces {
            host_root, cpus, ..
        } => {
            if host_root && libc::setgroups(0, std::ptr::null()) != 0 {
                sys::fail(status, Step::Setgroups);
            }
            if let Some(set) = &cpus
                && libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) != 0
            {
                sys::fail(status, Step::Affinity);
            }
            for (i, t) in [
                (i_user, libc::CLONE_NEWUSER),
                (i_mnt, libc::CLONE_NEWNS),
                (i_net, libc::CLONE_NEWNET),
            ] {
                if i == usize::MAX {
                    continue;
                }
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

/// Launcher side (see the `launcher` module): the supervisor of one command, forked by the
/// in-sandbox launcher as pid 1 of a fresh pid namespace (so no separate init process is
/// needed), already in the sandbox's user/mount/net namespaces and cgroup, as the sandbox's root.
/// Stdio arrived as fds 0–2; `ctl` is the caller's control socket: setup errors and the
/// command's wait status go there, `T` read from it sends SIGTERM to everything in the
/// namespace, `K` or EOF SIGKILL. When the command exits, everything it left behind is killed.
pub(crate) unsafe fn run_inside(plan: &ExecPlan, ctl: Fd) -> ! {
    match prepare_inside() {
        Ok(sfd) => run_prepared(plan, ctl, sfd),
        Err(StepFailed { step, errno }) => fail_with(ctl, step, errno),
    }
}

/// A setup step of the supervisor that failed, and its errno (reported on the control socket
/// by [`fail_with`]). Plain data: it is made after `fork`, where nothing may allocate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StepFailed {
    pub(crate) step: Step,
    pub(crate) errno: i32,
}

impl StepFailed {
    /// `step` failed with the current errno.
    pub(crate) fn now(step: Step) -> Self {
        StepFailed {
            step,
            errno: sys::errno(),
        }
    }
}

/// The request-independent half of [`run_inside`]: our own mount namespace with a `/proc` of
/// this pid namespace (so pids, `/proc/self` and `ps` agree inside the command), SIGCHLD on a
/// signalfd. A pre-warmed supervisor (the `launcher` module) runs it before any request exists;
/// it returns the signalfd, or the failed step and its errno (reported once a request brings a
/// control socket to report on).
pub(crate) unsafe fn prepare_inside() -> Result<Fd, StepFailed> {
    // The launcher auto-reaps (SIGCHLD ignored); the supervisor must wait for its children.
    libc::signal(libc::SIGCHLD, libc::SIG_DFL);
    if libc::getpid() != 1 || libc::unshare(libc::CLONE_NEWNS) != 0 {
        return Err(StepFailed::now(Step::Unshare));
    }
    if !mount_own_proc() {
        return Err(StepFailed::now(Step::Proc));
    }
    let sfd = sys::block_and_signalfd(&[libc::SIGCHLD]);
    if sfd < 0 {
        return Err(StepFailed::now(Step::Signals));
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
    supervise_started(sfd, ctl, l_pid)
}

/// Supervise the command `l_pid`, started with the stdio at our fds 0–2, as pid 1 of its pid
/// namespace: see [`run_inside`]. Our copies of its stdout and stderr stay open until its
/// status is sent (see `supervise`).
pub(crate) unsafe fn supervise_started(sfd: Fd, ctl: Fd, l_pid: libc::pid_t) -> ! {
    libc::close(0);
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
    let arg = Arg { plan, ctl, sfd };
    libc::clone(
        entry,
        command_stack(),
        libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
        (&arg as *const Arg).cast_mut().cast(),
    )
}

/// The top of the stack a command's process runs on until its `execve`, when it is started in
/// our memory (`CLONE_VM`: here, and the launcher's spare starting one ahead of its request).
/// Static: a heap stack this size is an mmap, and its munmap ran while the command waited to
/// finish its exec on the same CPU. A process starts at most one command, and sleeps until
/// that command has exec'd.
pub(crate) fn command_stack() -> *mut libc::c_void {
    const STACK: usize = 256 * 1024;
    static mut STACK_MEM: [u128; STACK / 16] = [0; STACK / 16];
    // SAFETY: one past the end of the static, the top of a downward-growing stack; nothing
    // here reads or writes it.
    unsafe {
        std::ptr::addr_of_mut!(STACK_MEM)
            .cast::<u128>()
            .add(STACK / 16)
            .cast()
    }
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

/// The command's own steps before `execve` (signals, `/proc` when asked, cwd, rlimits, session,
/// Landlock, seccomp), then `execve` of the first candidate that exists; a failed step is
/// reported on `status` and ends the process.
pub(crate) unsafe fn exec_command(plan: &ExecPlan, status: Fd, mount_proc: bool) -> ! {
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
    if !confine::apply_rlimits(&plan.rlimits) {
        sys::fail(status, Step::Rlimit);
    }
    // A session of its own: no controlling terminal, and a scheduler autogroup of its own.
    // (Measured: with only a process group, in the launcher's session, the exec-time balancing
    // moved ~40% of commands to the other CPU mid-`execve`, ~50 µs each; with a session, ~1%.)
    if libc::setsid() < 0 {
        sys::fail(status, Step::Signals);
    }
    if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
        sys::fail(status, Step::Landlock);
    }
    if plan.landlock_abi > 0 {
        // The ruleset built ahead (a pre-warmed supervisor's), or this command's own.
        let rs = if plan.landlock_ruleset >= 0 {
            plan.landlock_ruleset
        } else {
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
            confine::landlock_ruleset(plan.landlock_abi, &full[..nf], &files[..nd])
        };
        if !confine::landlock_enforce(rs) {
            sys::fail(status, Step::Landlock);
        }
    }
    if let Some(prog) = plan.seccomp
        && !confine::seccomp_install(prog)
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
                    // As the namespace's init with no child left, nothing else of the command
                    // runs (its orphans would be our children): nothing to kill.
                    if !(k_pid == SELF_INIT && nothing_left()) {
                        kill_all(k_pid, l_pid, ns, libc::SIGKILL);
                    }
                    if ctl {
                        // Our copies of the command's stdout and stderr (launched mode) go
                        // with the status, so the caller finds both at once.
                        libc::close(1);
                        libc::close(2);
                        sys::send(life, sys::TAG_EXIT, st, 0);
                        // Then step aside (see `linger`). As SCHED_BATCH, our wake-up when the
                        // caller closes the socket does not take the CPU from it either; and
                        // unlike a lower priority (nice 19), it still gets its fair share on a
                        // loaded machine, so our namespaces do not stay up long after.
                        let p = libc::sched_param { sched_priority: 0 };
                        libc::sched_setscheduler(0, libc::SCHED_BATCH, &p);
                        linger(life);
                    }
                    sys::exit_like(st);
                }
            }
        } else if sig > 0 {
            kill_all(k_pid, l_pid, ns, libc::SIGTERM);
        }
    }
}

/// Exit once the caller has closed the control socket (it does so as soon as it has the status).
/// Our exit takes this pid namespace and mount namespace down (~0.1 ms of kernel work, an RCU
/// grace period among it); done right after the status, on the CPU the caller had just been
/// woken on, it ran before the caller did (the kernel does not preempt it).
unsafe fn linger(ctl: Fd) -> ! {
    let mut b = [0u8; 16];
    loop {
        let n = libc::read(ctl, b.as_mut_ptr().cast(), b.len());
        if n == 0 || (n < 0 && sys::errno() != libc::EINTR) {
            libc::_exit(0);
        }
    }
}

/// Whether we have no child at all, live or unreaped (as a pid namespace's init: whether the
/// namespace is empty but for us).
unsafe fn nothing_left() -> bool {
    libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) < 0 && sys::errno() == libc::ECHILD
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
