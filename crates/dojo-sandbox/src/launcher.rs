//! The in-sandbox launcher: why per-command overhead does not grow with the caller's size.
//!
//! Joining a sandbox per command means forking the *caller* (a tokio process, possibly holding
//! a model: `dojo rollout` with the embedded engine is ~550 MB resident), and a fork copies its
//! page tables: measured here, a 500 MB caller made every sandboxed `true` cost 80–150 ms. So
//! pid 1 of each sandbox, once its root is built, `exec`s the calling binary again (through an
//! fd to `/proc/self/exe` opened before the pivot) with
//! `DOJO_SANDBOX_LAUNCHER=<sock>,<life>,<prewarm>` in its environment; this module's `.init_array` hook sees it before `main` runs and serves
//! commands instead. That process is small and single-threaded, lives inside the sandbox's
//! user/mount/net/pid namespaces and cgroup, and forks each command's supervisor (its own pid
//! namespace, Landlock, seccomp, rlimits: [`crate::child::run_inside`]) on request.
//!
//! Protocol (a unix stream socketpair per sandbox; the caller keeps one end): the launcher greets
//! with one byte `R`; a request is a 4-byte little-endian length with the fds
//! `[stdin, stdout, stderr, ctl]` attached (SCM_RIGHTS), then that many bytes of JSON
//! ([`Request`]). `ctl` is one end of a per-command socketpair: the supervisor writes setup
//! errors and the command's wait status there; the caller writes `T` (SIGTERM to everything the
//! command started), `K` (SIGKILL) or closes it (SIGKILL, no report).
//!
//! Pre-warming: while idle, the launcher keeps one supervisor forked ahead of time, already pid 1
//! of its own fresh pid namespace, in its own mount namespace with that namespace's `/proc`
//! mounted and the seccomp filter installed (the same for every command; the command inherits
//! it); it waits on the socket itself. The first fork into a new pid namespace is the expensive
//! one (the kernel sets up the namespace's internal proc mount then), and with the mount
//! namespace, `/proc` and the filter it was most of the per-command setup; now it happens
//! between commands. The spare reads the next request, tells the launcher over its hand-off pipe
//! and only starts the command: stdio, argv, env, cwd, rlimits and Landlock still come from the
//! request and are applied in the command's own process, and a spare serves exactly one command,
//! so commands share nothing. The launcher arms the next spare as soon as one takes a request,
//! beside the running command, so that commands sent back to back also find a spare (waiting
//! until the command was done left those at 1.8–3.5× a bare fork/exec instead of ~1.1×).
//! Spares live in the sandbox's pid namespace and die with it. `DOJO_SANDBOX_PREWARM=0` turns
//! this off.
//!
//! When the greeting does not come, commands join the namespaces per command with `setns`, as
//! kept sandboxes re-attached from another process always do, and the launcher stays off for
//! the rest of the process, with one warning. If the exec itself failed (the sandbox uid cannot
//! run the binary), pid 1 keeps holding the namespaces. If the exec worked but the new image
//! died before `main` (the dynamic loader cannot find a shared library inside the sandbox: a
//! `--features cuda` build whose CUDA libraries live under `/tmp` or in a directory only
//! `LD_LIBRARY_PATH` names), pid 1 is gone with it and the sandbox is created again without one.
//! The caller's `LD_LIBRARY_PATH` is passed to the launcher (never to commands) so that the
//! loader looks where it looked on the host.

#![allow(unsafe_op_in_unsafe_fn)]

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

use crate::child::{CArgv, ExecPlan, Mode, cstr};

pub(crate) const ENV_PREFIX: &[u8] = b"DOJO_SANDBOX_LAUNCHER=";

/// One command, as sent to the launcher.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Request {
    pub argv: Vec<String>,
    /// `KEY=VALUE` entries.
    pub env: Vec<String>,
    pub cwd: String,
    pub exe_candidates: Vec<String>,
    pub rlimits: Vec<(u32, u64)>,
    pub landlock_abi: i32,
    pub landlock_full: Vec<String>,
    pub landlock_files: Vec<String>,
}

type InitFn = extern "C" fn();

/// Runs before `main` in every binary that links this crate. Without the launcher variable it
/// returns at once. (`getenv` rather than the loader's envp argument, which only glibc passes.)
#[used]
#[unsafe(link_section = ".init_array")]
static LAUNCHER_INIT: InitFn = launcher_init;

extern "C" fn launcher_init() {
    // SAFETY: getenv before main, single-threaded; the string is copied at once.
    let v = unsafe {
        let p = libc::getenv(c"DOJO_SANDBOX_LAUNCHER".as_ptr());
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
    // SAFETY: the fds were set up by `child::exec_launcher`; serve never returns.
    unsafe {
        if let Some(sock) = sock {
            serve(sock, life, prewarm);
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
unsafe fn serve(sock: RawFd, life: RawFd, prewarm: bool) -> ! {
    for fd in [sock, life] {
        if fd >= 0 {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
    // Supervisors and orphans are reaped automatically; nobody waits for them here.
    libc::signal(libc::SIGCHLD, libc::SIG_IGN);
    libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    let seccomp = crate::ns::seccomp_prog();
    let mut sock = sock;
    if libc::send(sock, b"R".as_ptr().cast(), 1, libc::MSG_NOSIGNAL) != 1 {
        libc::close(sock);
        sock = -1;
    }
    // The pre-warmed supervisor waiting on `sock`, as the read end of its hand-off pipe.
    let mut spare: RawFd = -1;
    // Spares that died without taking a request; past a few, serve requests directly.
    let mut spare_deaths = 0;
    loop {
        if prewarm && sock >= 0 && spare < 0 && spare_deaths < 3 {
            spare = fork_spare(sock, life, seccomp);
        }
        // While a spare is waiting it alone reads `sock`; we only wait for its hand-off.
        let fds = [spare, if spare < 0 { sock } else { -1 }, life];
        let mut p = fds.map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        if libc::poll(p.as_mut_ptr(), 3, -1) <= 0 {
            continue;
        }
        if p[2].revents != 0 {
            // The process that created this (non-kept) sandbox is gone: so is the sandbox (and,
            // with us, pid 1 of its pid namespace, every spare and command in it).
            libc::_exit(0);
        }
        if p[0].revents != 0 {
            let mut b = [0u8; 1];
            let n = libc::read(spare, b.as_mut_ptr().cast(), 1);
            if n < 0 && crate::sys::errno() == libc::EINTR {
                continue;
            }
            match (n, b[0]) {
                // It took a request: arm the next one right away, so a command sent straight
                // after this one finds a spare too (the arming runs beside the command).
                (1, HANDOFF_TOOK) => {
                    libc::close(spare);
                }
                // It read EOF or a malformed request: stop serving, as below.
                (1, _) => {
                    libc::close(spare);
                    libc::close(sock);
                    sock = -1;
                }
                _ => {
                    libc::close(spare);
                    spare_deaths += 1;
                }
            }
            spare = -1;
            continue;
        }
        if p[1].revents == 0 {
            continue;
        }
        match recv_request(sock) {
            Some((req, fds)) => {
                spawn(&req, fds, sock, life, seccomp);
                for fd in fds {
                    libc::close(fd);
                }
            }
            None => {
                // The caller closed its end (a kept sandbox whose creator detached, or a failed
                // request): stop serving, keep holding the namespaces.
                libc::close(sock);
                sock = -1;
            }
        }
    }
}

/// What a spare writes on its hand-off pipe once it has read a whole request.
const HANDOFF_TOOK: u8 = b'A';
/// ... or when it read EOF or a malformed request instead.
const HANDOFF_EOF: u8 = b'E';

/// Set our children's pid namespace to a fresh one (the previous command's is still set: point
/// back at our own first), so the next fork is pid 1 there.
unsafe fn fresh_pid_ns_for_children() -> bool {
    libc::setns(own_pid_ns(), libc::CLONE_NEWPID) == 0 && libc::unshare(libc::CLONE_NEWPID) == 0
}

/// Pre-warm the next command's supervisor: fork it now, as pid 1 of a fresh pid namespace, and
/// let it do the request-independent setup ([`crate::child::prepare_inside`]: its own mount
/// namespace and `/proc`) before any request exists; it then waits on `sock` itself, so a request
/// reaches it without a hop through us. It also installs the seccomp filter (the same for every
/// command; the command inherits it). Everything the request decides (stdio, argv, env, cwd,
/// rlimits, Landlock) is still applied after it arrives, in the command's own fork, and
/// each spare serves exactly one command: nothing carries over from one command to the next.
/// Returns the read end of its hand-off pipe (one byte once it has read a request, then EOF when
/// it exits; EOF alone if it died first), or -1 when it could not be started (requests are then
/// served directly).
unsafe fn fork_spare(sock: RawFd, life: RawFd, seccomp: &'static [libc::sock_filter]) -> RawFd {
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
        spare_main(sock, life, hand[1], seccomp);
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
) -> ! {
    if life >= 0 {
        // We die with the launcher (pid 1 of the sandbox's pid namespace), lifeline or not.
        libc::close(life);
    }
    // The seccomp filter is the same for every command: install it here, ahead of the request
    // (attaching it compiles the filter, a cost worth taking off the critical path). The command
    // inherits it across fork and exec, so it ends up under exactly the filter it would have
    // installed itself; the supervisor needs none of the calls it refuses from here on.
    let prepared = crate::child::prepare_inside().and_then(|sfd| {
        if crate::sys::seccomp_install(seccomp) {
            Ok(sfd)
        } else {
            Err((crate::sys::Step::Seccomp, crate::sys::errno()))
        }
    });
    let got = recv_request(sock);
    libc::close(sock);
    let tag = if got.is_some() {
        HANDOFF_TOOK
    } else {
        HANDOFF_EOF
    };
    // `hand` stays open (close-on-exec: not in the command) until we exit: the launcher arms the
    // next spare when it reports EOF.
    libc::write(hand, [tag].as_ptr().cast(), 1);
    let Some((req, fds)) = got else {
        libc::_exit(0)
    };
    // (Already installed above; a failure there is reported below.)
    let plan = plan_from(&req, Mode::Launched, fds[3], fds[3], Vec::new(), None);
    install_stdio(fds);
    match prepared {
        Ok(sfd) => crate::child::run_prepared(&plan, fds[3], sfd),
        Err((step, e)) => crate::child::fail_with(fds[3], step, e),
    }
}

/// Read one request; `None` on EOF or a malformed message.
unsafe fn recv_request(sock: RawFd) -> Option<(Request, [RawFd; 4])> {
    let mut hdr = [0u8; 4];
    let mut cbuf = [0u64; 16];
    let mut iov = libc::iovec {
        iov_base: hdr.as_mut_ptr().cast(),
        iov_len: 4,
    };
    let mut msg: libc::msghdr = std::mem::zeroed();
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf);
    let n = loop {
        let n = libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n < 0 && crate::sys::errno() == libc::EINTR {
            continue;
        }
        break n;
    };
    let mut fds = [-1; 4];
    let mut nfds = 0;
    let mut c = libc::CMSG_FIRSTHDR(&msg);
    while !c.is_null() {
        if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
            let data = libc::CMSG_DATA(c).cast::<RawFd>();
            let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / 4;
            for i in 0..count {
                let fd = std::ptr::read_unaligned(data.add(i));
                if nfds < 4 {
                    fds[nfds] = fd;
                    nfds += 1;
                } else {
                    libc::close(fd);
                }
            }
        }
        c = libc::CMSG_NXTHDR(&msg, c);
    }
    let fail = |fds: [RawFd; 4]| {
        for fd in fds {
            if fd >= 0 {
                libc::close(fd);
            }
        }
        None
    };
    if n <= 0 {
        return fail(fds);
    }
    let mut got = n as usize;
    while got < 4 {
        let r = libc::read(sock, hdr[got..].as_mut_ptr().cast(), 4 - got);
        if r <= 0 {
            return fail(fds);
        }
        got += r as usize;
    }
    let len = u32::from_le_bytes(hdr) as usize;
    let mut body = vec![0u8; len];
    let mut got = 0;
    while got < len {
        let r = libc::read(sock, body[got..].as_mut_ptr().cast(), len - got);
        if r < 0 && crate::sys::errno() == libc::EINTR {
            continue;
        }
        if r <= 0 {
            return fail(fds);
        }
        got += r as usize;
    }
    if nfds != 4 {
        return fail(fds);
    }
    match serde_json::from_slice(&body) {
        Ok(req) => Some((req, fds)),
        Err(_) => fail(fds),
    }
}

/// The fork-time plan of a request.
pub(crate) fn plan_from(
    req: &Request,
    mode: Mode,
    status_w: RawFd,
    lifeline_r: RawFd,
    cgroup_procs: Vec<RawFd>,
    seccomp: Option<&'static [libc::sock_filter]>,
) -> ExecPlan {
    let strs = |v: &[String]| v.iter().map(cstr).collect::<Vec<CString>>();
    ExecPlan {
        mode,
        status_w,
        lifeline_r,
        cgroup_procs,
        exe_candidates: strs(&req.exe_candidates),
        argv: CArgv::new(strs(&req.argv)),
        envp: CArgv::new(strs(&req.env)),
        cwd: cstr(&req.cwd),
        rlimits: req.rlimits.clone(),
        landlock_abi: req.landlock_abi,
        landlock_full: strs(&req.landlock_full),
        landlock_files: strs(&req.landlock_files),
        seccomp,
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
    let plan = plan_from(
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
    crate::child::run_inside(&plan, fds[3])
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

/// Pre-warming: unset (0), on (1), off (2).
static PREWARM: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Whether sandboxes created from now on keep a supervisor pre-warmed while idle (default: yes;
/// `DOJO_SANDBOX_PREWARM=0` in the environment turns it off). Turning it off costs ~0.3 ms per
/// command (benchmarks/results/sandbox.md) and saves, per idle sandbox, one process (~25 KiB
/// private memory, ~55 KiB page tables) and a pid and a mount namespace.
pub(crate) fn prewarm() -> bool {
    use std::sync::atomic::Ordering;
    match PREWARM.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let on = !std::env::var("DOJO_SANDBOX_PREWARM").is_ok_and(|v| v == "0" || v == "off");
            PREWARM.store(if on { 1 } else { 2 }, Ordering::Relaxed);
            on
        }
    }
}

/// Override [`prewarm`] for sandboxes created from now on (benchmarks compare both in one run).
pub fn set_prewarm(on: bool) {
    PREWARM.store(if on { 1 } else { 2 }, std::sync::atomic::Ordering::Relaxed);
}

/// Set once a launcher failed to start in this process: later sandboxes skip the attempt.
static DISABLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The calling binary, opened once (an `O_PATH` fd that stays valid after the pivot and even if
/// the file is replaced on disk). `DOJO_SANDBOX_LAUNCHER_EXE` names another binary to run as
/// the launcher instead; tests use it to stand in one that cannot start.
pub(crate) fn exe_fd() -> Option<RawFd> {
    static E: std::sync::OnceLock<Option<OwnedFd>> = std::sync::OnceLock::new();
    if DISABLED.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    E.get_or_init(|| {
        if std::env::var("DOJO_LAUNCHER").is_ok_and(|v| v == "off" || v == "0") || !linked() {
            return None;
        }
        let path = std::env::var_os("DOJO_SANDBOX_LAUNCHER_EXE")
            .and_then(|p| CString::new(std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str())).ok())
            .unwrap_or_else(|| c"/proc/self/exe".to_owned());
        // SAFETY: valid C string; the result is checked.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        // SAFETY: fresh descriptor.
        (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
    })
    .as_ref()
    .map(|f| f.as_raw_fd())
}

/// A launcher never greeted. The usual cause is a binary that the dynamic loader
/// cannot start inside the sandbox: one linking shared libraries from a directory the sandbox
/// does not show (a `--features cuda` build with the CUDA libraries under `/tmp`, say). Stop
/// trying for the rest of this process; commands join the sandbox per command instead (correct,
/// but each one forks the caller). Said once, as a warning.
pub(crate) fn disable() {
    if !DISABLED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            "the in-sandbox launcher did not start (this binary, re-executed inside the \
             sandbox, exited before answering; are its shared libraries visible there?); \
             sandboxed commands now fork the caller instead, which is slower for a large \
             caller. DOJO_LAUNCHER=off skips the attempt"
        );
    }
}

/// `LD_LIBRARY_PATH=…` of the caller, for the launcher's own start (never passed to commands):
/// libraries found through it on the host are found the same way inside the sandbox when
/// their directory is visible there.
pub(crate) fn loader_env() -> Option<CString> {
    let v = std::env::var_os("LD_LIBRARY_PATH")?;
    let mut b = b"LD_LIBRARY_PATH=".to_vec();
    b.extend_from_slice(std::os::unix::ffi::OsStrExt::as_bytes(v.as_os_str()));
    CString::new(b).ok()
}

/// A CLOEXEC unix stream socketpair.
pub(crate) fn socketpair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fills two descriptors on success.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh descriptors, owned by us.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The caller's end of a sandbox's launcher socket.
#[derive(Debug)]
pub(crate) struct Client {
    sock: Mutex<OwnedFd>,
}

impl Client {
    /// Wait (blocking, up to 10 s) for the launcher's greeting; `None` when it does not come.
    pub(crate) fn connect(sock: OwnedFd) -> Option<Client> {
        let mut p = libc::pollfd {
            fd: sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: valid pollfd; the read goes into a local buffer.
        unsafe {
            if libc::poll(&mut p, 1, 10_000) != 1 {
                return None;
            }
            let mut b = [0u8; 1];
            if libc::read(sock.as_raw_fd(), b.as_mut_ptr().cast(), 1) != 1 || b[0] != b'R' {
                return None;
            }
        }
        Some(Client {
            sock: Mutex::new(sock),
        })
    }

    /// Send one request with its fds `[stdin, stdout, stderr, ctl]`.
    pub(crate) fn submit(&self, req: &Request, fds: [RawFd; 4]) -> std::io::Result<()> {
        let body = serde_json::to_vec(req).map_err(std::io::Error::other)?;
        let hdr = (body.len() as u32).to_le_bytes();
        let sock = self.sock.lock().unwrap_or_else(|p| p.into_inner());
        let fd = sock.as_raw_fd();
        // SAFETY: the control buffer is sized and aligned for four fds; all pointers are valid
        // for the duration of the call.
        unsafe {
            let mut cbuf = [0u64; 8];
            let mut iov = libc::iovec {
                iov_base: hdr.as_ptr() as *mut libc::c_void,
                iov_len: 4,
            };
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(16) as usize;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(16) as usize;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast::<RawFd>(), 4);
            let n = loop {
                let n = libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL);
                if n < 0 && crate::sys::errno() == libc::EINTR {
                    continue;
                }
                break n;
            };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let mut rest: &[u8] = &hdr[n as usize..];
            let mut body_rest: &[u8] = &body;
            while !rest.is_empty() || !body_rest.is_empty() {
                let buf = if rest.is_empty() {
                    &mut body_rest
                } else {
                    &mut rest
                };
                let w = libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL);
                if w < 0 {
                    if crate::sys::errno() == libc::EINTR {
                        continue;
                    }
                    return Err(std::io::Error::last_os_error());
                }
                *buf = &buf[w as usize..];
            }
        }
        Ok(())
    }
}
