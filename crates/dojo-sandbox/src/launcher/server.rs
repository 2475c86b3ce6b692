//! The launcher's in-sandbox half: the `.init_array` hook that turns a re-executed binary into
//! the launcher, its serving loop, the pre-warmed spares and the fork of each command's
//! supervisor (see the module above for the protocol).

#![allow(unsafe_op_in_unsafe_fn)]

use std::os::fd::RawFd;

use super::{BODY_IN_FD, GREETING, INLINE_MAX};
use crate::child::{self, ExecPlan, Mode, Request};
use crate::confine;

type InitFn = extern "C" fn();

/// Runs before `main` in every binary that links this crate. Without the launcher variable it
/// returns at once. (`getenv` rather than the loader's envp argument, which only glibc passes.)
#[used]
#[unsafe(link_section = ".init_array")]
static LAUNCHER_INIT: InitFn = launcher_init;

extern "C" fn launcher_init() {
    // SAFETY: getenv before main, single-threaded; the string is copied at once.
    let v = unsafe {
        let p = libc::getenv(child::LAUNCHER_VAR.as_ptr());
        if p.is_null() {
            return;
        }
        String::from_utf8_lossy(std::ffi::CStr::from_ptr(p).to_bytes()).into_owned()
    };
    let mut it = v.split(',');
    let sock = it.next().and_then(|s| s.parse::<RawFd>().ok());
    let life = it
        .next()
        .and_then(|s| s.parse::<RawFd>().ok())
        .unwrap_or(-1);
    let prewarm = it.next() != Some("0");
    let venv_writable = it.next() == Some("1");
    // SAFETY: the fds were set up by the holder (`child::holder`); serve never returns.
    unsafe {
        if let Some(sock) = sock {
            serve(sock, life, prewarm, venv_writable);
        }
        libc::_exit(125);
    }
}

/// Make sure the hook's object file is linked into every binary that creates sandboxes.
pub(crate) fn linked() -> bool {
    let f: InitFn = std::hint::black_box(LAUNCHER_INIT);
    f as usize != 0
}

/// The launcher loop (pid 1 of the sandbox). Never returns.
///
/// It stays one loop on purpose: its state (the spares' slots, when to arm them, the counts of
/// dead spares and lost requests, the socket that may be closed) is read and changed by every
/// step of an iteration, and each step is a few raw system calls already commented in place.
unsafe fn serve(sock: RawFd, life: RawFd, prewarm: bool, venv_writable: bool) -> ! {
    for fd in [sock, life] {
        if fd >= 0 {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
    // Supervisors and orphans are reaped automatically; nobody waits for them here.
    libc::signal(libc::SIGCHLD, libc::SIG_IGN);
    libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    let seccomp = confine::seccomp_prog();
    let mut sock = sock;
    if libc::send(sock, [GREETING].as_ptr().cast(), 1, libc::MSG_NOSIGNAL) != 1 {
        libc::close(sock);
        sock = -1;
    }
    // The pre-warmed supervisors waiting on `sock`, as the read ends of their hand-off pipes
    // (-1: an empty slot). Two, so that a command sent right after another finds one while the
    // first one's replacement is not armed yet (processes waiting on one socket get one
    // request each).
    let mut spares: [RawFd; SPARES] = [-1; SPARES];
    // When to arm the empty slots. A spare that took a request is replaced a little later, not
    // at once, so that forking its replacement (~0.1–0.2 ms of CPU) does not land on a short
    // command's exit or its result; with no spare left waiting, at once (a sandbox runs any
    // number of commands at a time).
    let mut arm_at: Option<i64> = None;
    // Spares that died without taking a request; past a few, serve requests directly.
    let mut spare_deaths = 0;
    // Requests in a row that we failed to read when serving directly; past a few, the failure
    // is not passing (a broken socket would otherwise poll readable forever): stop serving.
    let mut lost_in_a_row = 0;
    loop {
        let waiting = spares.iter().filter(|&&fd| fd >= 0).count();
        let arming = prewarm && sock >= 0 && spare_deaths < 3;
        let now = monotonic_ms();
        if arming && waiting < SPARES && (waiting == 0 || arm_at.is_none_or(|t| now >= t)) {
            for slot in spares.iter_mut().filter(|fd| **fd < 0) {
                *slot = fork_spare(sock, life, seccomp, venv_writable);
            }
            arm_at = None;
        }
        let waiting = spares.iter().filter(|&&fd| fd >= 0).count();
        // Wake up to arm the empty slots when that is due.
        let timeout = match arm_at {
            Some(t) if arming && waiting < SPARES => (t - now).clamp(0, 1000) as i32,
            _ => -1,
        };
        // While spares are waiting they alone read `sock`; we only wait for their hand-offs.
        let mut p = [libc::pollfd {
            fd: -1,
            events: libc::POLLIN,
            revents: 0,
        }; SPARES + 2];
        for (q, &fd) in p.iter_mut().zip(&spares) {
            q.fd = fd;
        }
        p[SPARES].fd = if waiting == 0 { sock } else { -1 };
        p[SPARES + 1].fd = life;
        if libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout) <= 0 {
            continue;
        }
        if p[SPARES + 1].revents != 0 {
            // The process that created this (non-kept) sandbox is gone: so is the sandbox (and,
            // with us, pid 1 of its pid namespace, every spare and command in it).
            libc::_exit(0);
        }
        let mut handed = false;
        for (q, slot) in p[..SPARES].iter().zip(spares.iter_mut()) {
            if q.revents == 0 || *slot < 0 {
                continue;
            }
            let mut b = [0u8; 1];
            let n = libc::read(*slot, b.as_mut_ptr().cast(), 1);
            if n < 0 && crate::sys::errno() == libc::EINTR {
                continue;
            }
            handed = true;
            libc::close(*slot);
            *slot = -1;
            match (n, b[0]) {
                // Its command took a request: replace it shortly (see `arm_at`).
                (1, HANDOFF_TOOK) => {
                    arm_at.get_or_insert(monotonic_ms() + ARM_DELAY_MS);
                }
                // It read EOF or a malformed request: stop serving, as below.
                (1, _) => {
                    if sock >= 0 {
                        libc::close(sock);
                        sock = -1;
                    }
                }
                _ => spare_deaths += 1,
            }
        }
        if handed || p[SPARES].revents == 0 {
            continue;
        }
        let mut ended = false;
        match recv_request(sock, -1, &mut ended) {
            Some((req, fds)) => {
                lost_in_a_row = 0;
                spawn(&req, fds, sock, life, seccomp);
                for fd in fds {
                    libc::close(fd);
                }
            }
            // The caller closed its end (a kept sandbox whose creator detached, or a failed
            // request), or our own failures do not pass: stop serving, keep holding the
            // namespaces.
            None if ended || lost_in_a_row >= 8 => {
                libc::close(sock);
                sock = -1;
            }
            // Our failure (out of memory or fds): that request is lost, the next is served.
            None => lost_in_a_row += 1,
        }
    }
}

/// How many pre-warmed supervisors a sandbox keeps while idle.
const SPARES: usize = 2;

/// How long after a spare's command took a request its slot is armed again, in milliseconds
/// (while the other spare still waits).
const ARM_DELAY_MS: i64 = 2;

/// CLOCK_MONOTONIC in milliseconds.
unsafe fn monotonic_ms() -> i64 {
    let mut ts: libc::timespec = std::mem::zeroed();
    libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000
}

/// What a spare writes on its hand-off pipe once its command has taken a request ...
const HANDOFF_TOOK: u8 = b'A';
/// ... or once it read EOF or a malformed request instead (the caller is gone). A spare that
/// exits without writing either died.
const HANDOFF_EOF: u8 = b'E';

/// Set our children's pid namespace to a fresh one (the previous command's is still set: point
/// back at our own first), so the next fork is pid 1 there.
unsafe fn fresh_pid_ns_for_children() -> bool {
    libc::setns(own_pid_ns(), libc::CLONE_NEWPID) == 0 && libc::unshare(libc::CLONE_NEWPID) == 0
}

/// Pre-warm the next command's supervisor: fork it now, as pid 1 of a fresh pid namespace, and
/// let it do the request-independent setup ([`child::prepare_inside`]: its own mount
/// namespace and `/proc`) before any request exists; then the command's process it starts ahead
/// waits on `sock` itself, so a request reaches it without a hop through us. It also installs
/// the seccomp filter (the same for every command; the command inherits it). Everything the
/// request decides (stdio, argv, env, cwd, rlimits, Landlock) is still applied after it
/// arrives, in the command's own process, and each spare serves exactly one command: nothing
/// carries over from one command to the next.
/// Returns the read end of its hand-off pipe (a byte once its command has taken a request, or
/// read EOF; EOF alone if it died first), or -1 when it could not be started (requests are then
/// served directly).
unsafe fn fork_spare(
    sock: RawFd,
    life: RawFd,
    seccomp: &'static [libc::sock_filter],
    venv_writable: bool,
) -> RawFd {
    let mut hand = [-1 as RawFd; 2];
    if libc::pipe2(hand.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
        return -1;
    }
    if !fresh_pid_ns_for_children() {
        libc::close(hand[0]);
        libc::close(hand[1]);
        return -1;
    }
    let pid = libc::fork();
    if pid == 0 {
        libc::close(hand[0]);
        spare_main(sock, life, hand[1], seccomp, venv_writable);
    }
    libc::close(hand[1]);
    if pid < 0 {
        libc::close(hand[0]);
        return -1;
    }
    hand[0]
}

/// A pre-warmed supervisor (pid 1 of its own pid namespace). Never returns.
unsafe fn spare_main(
    sock: RawFd,
    life: RawFd,
    hand: RawFd,
    seccomp: &'static [libc::sock_filter],
    venv_writable: bool,
) -> ! {
    let tell = |tag: u8| {
        libc::write(hand, [tag].as_ptr().cast(), 1);
    };
    if life >= 0 {
        // We die with the launcher (pid 1 of the sandbox's pid namespace), lifeline or not.
        libc::close(life);
    }
    // The seccomp filter is the same for every command: install it here, ahead of the request
    // (attaching it compiles the filter, a cost worth taking off the critical path). The command
    // inherits it across fork and exec, so it ends up under exactly the filter it would have
    // installed itself; the supervisor needs none of the calls it refuses from here on.
    let prepared = child::prepare_inside().and_then(|sfd| {
        if confine::seccomp_install(seccomp) {
            Ok(sfd)
        } else {
            Err(child::StepFailed::now(crate::sys::Step::Seccomp))
        }
    });
    // The sandbox's Landlock ruleset, built now (a request whose rules differ builds its own).
    let landlock = Prebuilt::new(venv_writable);
    // The command's stdin when the request brings none: opened for this one command.
    let devnull = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
    if let Ok(sfd) = prepared
        && let Some((l_pid, taken)) = command_ahead(sock, devnull, &landlock)
    {
        let ctl = match taken {
            // The command process took a request and exec'd (or failed and exited).
            Taken::Request(ctl) => ctl,
            Taken::Ended => {
                tell(HANDOFF_EOF);
                libc::_exit(0)
            }
            // It died before reading a request: the launcher counts a death.
            Taken::Nothing => libc::_exit(0),
        };
        tell(HANDOFF_TOOK);
        libc::close(sock);
        // (The pre-built ruleset, if the command used it, was closed by its enforcement, in
        // the fd table we shared; otherwise it stays open here until we exit.)
        child::supervise_started(sfd, ctl, l_pid);
    }
    // Without a command process forked ahead (or when the setup above failed, to be reported
    // on the request's control socket): read the request here and start the command after it.
    rehearse(&landlock);
    let mut ended = false;
    let got = recv_request(sock, devnull, &mut ended);
    libc::close(sock);
    let Some((req, fds)) = got else {
        if ended {
            tell(HANDOFF_EOF);
        }
        libc::_exit(0)
    };
    tell(HANDOFF_TOOK);
    // (The seccomp filter was installed above; a failure there is reported below.)
    let plan = landlock.plan(&req, fds[3]);
    install_stdio(fds);
    match prepared {
        Ok(sfd) => child::run_prepared(&plan, fds[3], sfd),
        Err(child::StepFailed { step, errno }) => child::fail_with(fds[3], step, errno),
    }
}

/// What the command process forked ahead of its request is given.
struct Ahead<'a> {
    sock: RawFd,
    devnull: RawFd,
    landlock: &'a Prebuilt,
    /// What it did with `sock`.
    taken: Taken,
}

/// What the command process started ahead did with the launcher's socket.
#[derive(Clone, Copy)]
enum Taken {
    /// Nothing: it died first.
    Nothing,
    /// It read a request, whose control socket this is.
    Request(RawFd),
    /// It read EOF or a malformed request (the caller is gone).
    Ended,
}

/// Start the next command's own process before its request exists, and sleep until it has
/// exec'd or exited (as a `vfork` parent does, waiting on `CLONE_CHILD_CLEARTID` instead). That
/// process reads the request itself and goes straight to its `execve`
/// ([`child::exec_command`]): neither a fork nor a hop through us lies between the request and
/// the command. Like `posix_spawn`, it runs in our memory (`CLONE_VM`, on a stack of
/// its own; we are asleep until its `execve`, which then drops nothing but a reference: a
/// process with a copy of this address space took ~0.1 ms longer to exec, tearing it down). It
/// also shares our fd table until its `execve`, which gives it a copy (and closes its
/// close-on-exec fds there) and leaves ours holding what it received: its stdio at 0–2 and the
/// control socket, whose number it leaves in `Ahead::taken`.
/// Returns its pid and what it did with `sock`, or `None` when it could not be started (the
/// request is then read here).
unsafe fn command_ahead(
    sock: RawFd,
    devnull: RawFd,
    landlock: &Prebuilt,
) -> Option<(libc::pid_t, Taken)> {
    extern "C" fn entry(p: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `p` points at the `Ahead` below; the spare sleeps until we exec or exit, so
        // nothing else touches this memory meanwhile.
        unsafe {
            let a = &mut *(p as *mut Ahead);
            rehearse(a.landlock);
            let mut ended = false;
            let Some((req, fds)) = recv_request(a.sock, a.devnull, &mut ended) else {
                if ended {
                    a.taken = Taken::Ended;
                }
                libc::_exit(0)
            };
            if fds[0] != a.devnull && a.devnull >= 0 {
                libc::close(a.devnull);
            }
            a.taken = Taken::Request(fds[3]);
            let plan = a.landlock.plan(&req, fds[3]);
            install_stdio(fds);
            child::exec_command(&plan, fds[3], false)
        }
    }
    let mut arg = Ahead {
        sock,
        devnull,
        landlock,
        taken: Taken::Nothing,
    };
    // Its pid, set by the kernel before `clone` returns here and zeroed, with a futex wake-up,
    // when it execs or exits (the moment `CLONE_VFORK` would release us: but a `vfork` parent
    // sleeps uninterruptibly, which the load average counts, +1 per idle spare).
    let mut tid: libc::pid_t = 0;
    let tid_at = std::ptr::addr_of_mut!(tid);
    // (The spare reaches its own start of a command only when this one could not be started.)
    let pid = libc::clone(
        entry,
        child::command_stack(),
        libc::CLONE_VM
            | libc::CLONE_FILES
            | libc::CLONE_PARENT_SETTID
            | libc::CLONE_CHILD_CLEARTID
            | libc::SIGCHLD,
        std::ptr::addr_of_mut!(arg).cast(),
        tid_at,
        std::ptr::null_mut::<libc::c_void>(),
        tid_at,
    );
    if pid <= 0 {
        return None;
    }
    // Sleep until then. Only this wait runs beside it in our memory: no allocation, and a
    // failing futex call (which sets the errno we share) means the value changed, i.e. it has
    // already left this memory.
    loop {
        let v = std::ptr::read_volatile(tid_at);
        if v == 0 {
            break;
        }
        libc::syscall(
            libc::SYS_futex,
            tid_at,
            libc::FUTEX_WAIT,
            v,
            std::ptr::null::<libc::timespec>(),
        );
    }
    // (Written by the other process before it left.)
    let taken = std::ptr::read_volatile(std::ptr::addr_of!(arg.taken));
    Some((pid, taken))
}

/// Walk a made-up request through what a real one goes through in this process (decoded from
/// a buffer of the size `recv_request` reads into, turned into a plan, matched against the
/// pre-built rules), before any request exists. A spare is a fresh fork of the launcher: its
/// first write to each heap, stack and libc data page is a copy-on-write fault, and its first
/// call into each code page maps it; the real request then finds them done. (Touching every
/// page instead cost ~120 µs of CPU per command and gained nothing.)
unsafe fn rehearse(landlock: &Prebuilt) {
    let made_up = Request {
        argv: vec!["true".into()],
        env: (0..16).map(|i| format!("NAME_{i}=value")).collect(),
        cwd: "/testbed".into(),
        exe_candidates: vec!["/usr/bin/true".into()],
        rlimits: vec![(0, 0); 4],
        landlock_abi: landlock.abi,
        landlock_full: landlock.full.iter().map(|s| s.to_string()).collect(),
        landlock_files: landlock.files.iter().map(|s| s.to_string()).collect(),
    };
    let Ok(json) = serde_json::to_vec(&made_up) else {
        return;
    };
    drop(made_up);
    let mut body: Vec<u8> = Vec::with_capacity(INLINE_MAX);
    body.extend_from_slice(&json);
    drop(json);
    if let Ok(req) = serde_json::from_slice::<Request>(&body) {
        std::hint::black_box(landlock.plan(&req, -1));
    }
}

/// A spare's Landlock ruleset for the sandbox's paths ([`confine::landlock_paths`]), built
/// before a request exists: creating it (a ruleset, then an `open` and a rule per path) was
/// ~40 µs of each command's start; the command now only enforces it. Used only for a request
/// that asks for exactly these rules.
struct Prebuilt {
    fd: RawFd,
    abi: i32,
    full: Vec<&'static str>,
    files: Vec<&'static str>,
}

impl Prebuilt {
    unsafe fn new(venv_writable: bool) -> Prebuilt {
        let (full, files) = confine::landlock_paths(venv_writable);
        let abi = confine::landlock_abi();
        let c = |v: &[&str]| -> Vec<std::ffi::CString> {
            v.iter()
                .filter_map(|p| std::ffi::CString::new(*p).ok())
                .collect()
        };
        let (cf, cd) = (c(&full), c(&files));
        let (rf, rd): (Vec<&std::ffi::CStr>, Vec<&std::ffi::CStr>) = (
            cf.iter().map(|s| s.as_c_str()).collect(),
            cd.iter().map(|s| s.as_c_str()).collect(),
        );
        let fd = if abi > 0 {
            confine::landlock_ruleset(abi, &rf, &rd)
        } else {
            -1
        };
        Prebuilt {
            fd,
            abi,
            full,
            files,
        }
    }

    /// The plan of a request whose command runs under a spare (`ctl`: its control socket, where
    /// setup failures go), enforcing this ruleset when the request asks for exactly its rules.
    fn plan(&self, req: &Request, ctl: RawFd) -> ExecPlan {
        let mut plan = ExecPlan::from_request(req, Mode::Launched, ctl, ctl, Vec::new(), None);
        if self.matches(req) {
            plan.landlock_ruleset = self.fd;
        }
        plan
    }

    fn matches(&self, req: &Request) -> bool {
        self.fd >= 0
            && req.landlock_abi == self.abi
            && req.landlock_full.iter().eq(self.full.iter())
            && req.landlock_files.iter().eq(self.files.iter())
    }
}

/// Read one request (one message: see [`super::INLINE_MAX`]); `None` on EOF or a malformed
/// message (then `ended` is set), or when reading failed (it is not). Its fds: `[stdin, stdout,
/// stderr, ctl]`; a request sent with three (no stdin) gets `devnull` as stdin, or `/dev/null`
/// opened now when that is -1.
///
/// It stays one function on purpose: every way out must close exactly the descriptors
/// received so far (`fail`), and one body keeps that in sight from the `recvmsg` to the
/// parsed request.
pub(super) unsafe fn recv_request(
    sock: RawFd,
    devnull: RawFd,
    ended: &mut bool,
) -> Option<(Request, [RawFd; 4])> {
    let mut hdr = [0u8; 4];
    let mut body: Vec<u8> = Vec::with_capacity(INLINE_MAX);
    let mut cbuf = [0u64; 16];
    let mut iov = [
        libc::iovec {
            iov_base: hdr.as_mut_ptr().cast(),
            iov_len: 4,
        },
        libc::iovec {
            iov_base: body.as_mut_ptr().cast(),
            iov_len: body.capacity(),
        },
    ];
    let mut msg: libc::msghdr = std::mem::zeroed();
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = 2;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf);
    let n = loop {
        let n = libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n < 0 && crate::sys::errno() == libc::EINTR {
            continue;
        }
        break n;
    };
    let mut got = [-1; 5];
    let mut nfds = 0;
    let mut c = libc::CMSG_FIRSTHDR(&msg);
    while !c.is_null() {
        if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
            let data = libc::CMSG_DATA(c).cast::<RawFd>();
            let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / 4;
            for i in 0..count {
                let fd = std::ptr::read_unaligned(data.add(i));
                if nfds < got.len() {
                    got[nfds] = fd;
                    nfds += 1;
                } else {
                    libc::close(fd);
                }
            }
        }
        c = libc::CMSG_NXTHDR(&msg, c);
    }
    let fail = |fds: &[RawFd]| {
        for &fd in fds {
            if fd >= 0 {
                libc::close(fd);
            }
        }
        None
    };
    if n < 0 {
        // (Out of memory, say: not the caller's doing.)
        return fail(&got);
    }
    if n > 0 && msg.msg_flags & libc::MSG_CTRUNC != 0 {
        // Fds cut short although the buffer holds more than a request carries: the kernel
        // could not install them here (this process at its fd limit). Not the caller's doing
        // either: the request is lost (the kernel closed the fds it could not pass, so its
        // caller sees the command fail), the stream is intact, serving goes on.
        return fail(&got);
    }
    // From here on, EOF or a message that breaks the protocol: the caller is gone or confused.
    *ended = true;
    if n < 4 || (msg.msg_flags & (libc::MSG_CTRUNC | libc::MSG_TRUNC)) != 0 {
        return fail(&got);
    }
    let word = u32::from_le_bytes(hdr);
    let len = (word & !BODY_IN_FD) as usize;
    let in_body = n as usize - 4;
    if word & BODY_IN_FD != 0 {
        // The body is in the memfd passed last.
        if in_body != 0 || nfds < 4 {
            return fail(&got);
        }
        nfds -= 1;
        let memfd = got[nfds];
        got[nfds] = -1;
        body.resize(len, 0);
        let mut off = 0;
        while off < len {
            let r = libc::pread(
                memfd,
                body[off..].as_mut_ptr().cast(),
                len - off,
                off as libc::off_t,
            );
            if r < 0 && crate::sys::errno() == libc::EINTR {
                continue;
            }
            if r <= 0 {
                libc::close(memfd);
                return fail(&got);
            }
            off += r as usize;
        }
        libc::close(memfd);
    } else {
        if in_body != len {
            return fail(&got);
        }
        // SAFETY: recvmsg wrote `in_body` bytes at the start of the body's capacity.
        body.set_len(in_body);
    }
    let fds = match nfds {
        4 => [got[0], got[1], got[2], got[3]],
        3 => {
            let stdin = if devnull >= 0 {
                devnull
            } else {
                libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC)
            };
            let fds = [stdin, got[0], got[1], got[2]];
            if stdin < 0 {
                return fail(&fds);
            }
            fds
        }
        _ => return fail(&got),
    };
    match serde_json::from_slice(&body) {
        Ok(req) => {
            *ended = false;
            Some((req, fds))
        }
        Err(_) => fail(&fds),
    }
}

/// Tell the caller which step failed (errno from the last call).
unsafe fn report(ctl: RawFd, step: crate::sys::Step) {
    crate::sys::send(ctl, crate::sys::TAG_ERR, step as i32, crate::sys::errno());
}

/// An fd of the launcher's own pid namespace (opened once).
unsafe fn own_pid_ns() -> RawFd {
    static mut FD: RawFd = -1;
    // SAFETY: the launcher is single-threaded.
    let fd = &mut *std::ptr::addr_of_mut!(FD);
    if *fd < 0 {
        *fd = libc::open(
            c"/proc/self/ns/pid".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
    }
    *fd
}

/// Fork the supervisor of one command (when no spare could be pre-warmed).
unsafe fn spawn(
    req: &Request,
    fds: [RawFd; 4],
    sock: RawFd,
    life: RawFd,
    seccomp: &'static [libc::sock_filter],
) {
    let plan = ExecPlan::from_request(
        req,
        Mode::Launched,
        fds[3],
        fds[3],
        Vec::new(),
        Some(seccomp),
    );
    // The supervisor becomes pid 1 of a fresh pid namespace.
    if !fresh_pid_ns_for_children() {
        report(fds[3], crate::sys::Step::Unshare);
        return;
    }
    let pid = libc::fork();
    if pid != 0 {
        if pid < 0 {
            report(fds[3], crate::sys::Step::Fork);
        }
        return;
    }
    if sock >= 0 {
        libc::close(sock);
    }
    if life >= 0 {
        libc::close(life);
    }
    install_stdio(fds);
    child::run_inside(&plan, fds[3])
}

/// The command's stdin/stdout/stderr become fds 0–2; the received copies are closed, so the
/// caller sees EOF as soon as the command's processes are gone.
unsafe fn install_stdio(fds: [RawFd; 4]) {
    for (i, &fd) in fds[..3].iter().enumerate() {
        libc::dup2(fd, i as RawFd);
    }
    for &fd in &fds[..3] {
        // (The launcher's own 0–2 are open, so received fds are never 0–2; guard anyway.)
        if fd > 2 {
            libc::close(fd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request whose fds the kernel cannot all install (the reader at its fd limit) is the
    /// reader's failure: not the caller's EOF, which would stop the sandbox serving. Run in a
    /// child process of this test binary, whose fd limit it lowers.
    #[test]
    fn fds_cut_short_are_our_failure_not_the_callers_end() {
        use std::os::fd::AsRawFd;
        const CHILD: &str = "DOJO_TEST_CTRUNC_CHILD";
        if std::env::var_os(CHILD).is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "launcher::server::tests::fds_cut_short_are_our_failure_not_the_callers_end",
                    "--test-threads=1",
                ])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success() && text.contains("1 passed"), "{text}");
            return;
        }
        let (ours, theirs) = super::super::client::socketpair().unwrap();
        let client = super::super::client::Client::from_socket(ours);
        let null = std::fs::File::open("/dev/null").unwrap();
        let fds = [null.as_raw_fd(); 3];
        client.submit(&request(0, &[], &[]), &fds).unwrap();
        // SAFETY: plain syscalls on this (single-threaded) child's own fds and limits.
        unsafe {
            // Room for one more fd: the lowest free one.
            let probe = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
            assert!(probe >= 0);
            libc::close(probe);
            let mut lim: libc::rlimit = std::mem::zeroed();
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
            lim.rlim_cur = probe as libc::rlim_t + 1;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
            let mut ended = false;
            assert!(recv_request(theirs.as_raw_fd(), -1, &mut ended).is_none());
            assert!(!ended, "the cut-short request counted as the caller's end");
            // The caller's real end still reads as one.
            drop(client);
            assert!(recv_request(theirs.as_raw_fd(), -1, &mut ended).is_none());
            assert!(ended);
        }
    }

    fn request(abi: i32, full: &[&str], files: &[&str]) -> Request {
        Request {
            argv: vec!["true".into()],
            env: Vec::new(),
            cwd: "/testbed".into(),
            exe_candidates: vec!["/usr/bin/true".into()],
            rlimits: Vec::new(),
            landlock_abi: abi,
            landlock_full: full.iter().map(|s| s.to_string()).collect(),
            landlock_files: files.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// The pre-built ruleset stands in only for a request asking for exactly its rules: any
    /// other ABI or path list (or no ruleset at all) makes the command build its own.
    #[test]
    fn a_prebuilt_ruleset_serves_only_requests_with_the_same_rules() {
        let (full, files) = confine::landlock_paths(false);
        let pre = Prebuilt {
            fd: 3,
            abi: 4,
            full: full.clone(),
            files: files.clone(),
        };
        assert!(pre.matches(&request(4, &full, &files)));
        assert!(!pre.matches(&request(0, &full, &files)));
        assert!(!pre.matches(&request(3, &full, &files)));
        let (with_venv, _) = confine::landlock_paths(true);
        assert!(!pre.matches(&request(4, &with_venv, &files)));
        assert!(!pre.matches(&request(4, &full[..1], &files)));
        assert!(!pre.matches(&request(4, &full, &[])));
        let none = Prebuilt { fd: -1, ..pre };
        assert!(!none.matches(&request(4, &full, &files)));
    }
}
