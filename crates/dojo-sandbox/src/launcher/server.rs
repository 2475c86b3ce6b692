//! The launcher's in-sandbox half: the `.init_array` hook that turns a re-executed binary into
//! the launcher, its serving loop, the pre-warmed spares and the fork of each command's
//! supervisor (see the module above for the protocol).

#![allow(unsafe_op_in_unsafe_fn)]

use std::os::fd::RawFd;

use super::GREETING;
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
    // The pre-warmed supervisor waiting on `sock`, as the read end of its hand-off pipe.
    let mut spare: RawFd = -1;
    // Spares that died without taking a request; past a few, serve requests directly.
    let mut spare_deaths = 0;
    loop {
        if prewarm && sock >= 0 && spare < 0 && spare_deaths < 3 {
            spare = fork_spare(sock, life, seccomp, venv_writable);
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
/// let it do the request-independent setup ([`child::prepare_inside`]: its own mount
/// namespace and `/proc`) before any request exists; it then waits on `sock` itself, so a request
/// reaches it without a hop through us. It also installs the seccomp filter (the same for every
/// command; the command inherits it). Everything the request decides (stdio, argv, env, cwd,
/// rlimits, Landlock) is still applied after it arrives, in the command's own fork, and
/// each spare serves exactly one command: nothing carries over from one command to the next.
/// Returns the read end of its hand-off pipe (one byte once it has read a request, then EOF when
/// it exits; EOF alone if it died first), or -1 when it could not be started (requests are then
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
            Err((crate::sys::Step::Seccomp, crate::sys::errno()))
        }
    });
    // The sandbox's Landlock ruleset, built now (a request whose rules differ builds its own).
    let landlock = Prebuilt::new(venv_writable);
    let got = recv_request(sock);
    libc::close(sock);
    let tag = if got.is_some() {
        HANDOFF_TOOK
    } else {
        HANDOFF_EOF
    };
    // `hand` stays open (close-on-exec: not in the command) until we exit: the launcher arms the
    // next spare when it reports EOF.
    let report = || {
        libc::write(hand, [tag].as_ptr().cast(), 1);
    };
    let Some((req, fds)) = got else {
        report();
        libc::_exit(0)
    };
    // (Already installed above; a failure there is reported below.)
    let mut plan = ExecPlan::from_request(&req, Mode::Launched, fds[3], fds[3], Vec::new(), None);
    if landlock.matches(&req) {
        plan.landlock_ruleset = landlock.fd;
    }
    install_stdio(fds);
    match prepared {
        // The hand-off is reported once the command has started: the launcher's arming of the
        // next spare (~0.1 ms of CPU) then runs beside the command, not ahead of it (woken by
        // our report, it took this CPU before the command was even forked).
        Ok(sfd) => child::run_prepared(&plan, fds[3], sfd, &report),
        Err((step, e)) => {
            report();
            child::fail_with(fds[3], step, e)
        }
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

    fn matches(&self, req: &Request) -> bool {
        self.fd >= 0
            && req.landlock_abi == self.abi
            && req.landlock_full.iter().eq(self.full.iter())
            && req.landlock_files.iter().eq(self.files.iter())
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
