//! The launcher's caller-side half: whether to start one (the calling binary, pre-warming, the
//! process-wide switch-off after a failed start), and [`Client`], the caller's end of a
//! sandbox's launcher socket.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

use super::{BODY_IN_FD, GREETING, INLINE_MAX};
use crate::child::Request;

/// Pre-warming: unset (0), on (1), off (2).
static PREWARM: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Whether sandboxes created from now on keep a supervisor pre-warmed while idle (default: yes;
/// `DOJO_SANDBOX_PREWARM=0` in the environment turns it off). Turning it off costs ~0.3 ms per
/// command (benchmarks/results/sandbox.md) and saves, per idle sandbox, two spares, each a
/// process with the command process it started ahead in its memory (~60 KiB private memory,
/// ~60 KiB page tables) and a pid and a mount namespace (~0.5–0.7 MiB charged to the sandbox's
/// cgroup for both, page cache included).
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
        if std::env::var("DOJO_LAUNCHER").is_ok_and(|v| v == "off" || v == "0")
            || !super::server::linked()
        {
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
    /// A client on a socket with no launcher greeting behind it (tests of the protocol).
    #[cfg(test)]
    pub(crate) fn from_socket(sock: OwnedFd) -> Client {
        Client {
            sock: Mutex::new(sock),
        }
    }

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
            if libc::read(sock.as_raw_fd(), b.as_mut_ptr().cast(), 1) != 1 || b[0] != GREETING {
                return None;
            }
        }
        // Room for a whole request in one buffer of the kernel's: a stream socket cuts what is
        // sent into pieces of at most half its send buffer, and a request must stay one piece
        // (see `INLINE_MAX`). The default is ~208 KiB; a host configured lower gets 128 KiB.
        // SAFETY: valid fd and option buffers.
        unsafe {
            let mut cur: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            let fd = sock.as_raw_fd();
            if libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                (&mut cur as *mut libc::c_int).cast(),
                &mut len,
            ) == 0
                && cur < 128 << 10
            {
                let want: libc::c_int = 64 << 10;
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_SNDBUF,
                    (&want as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
        Some(Client {
            sock: Mutex::new(sock),
        })
    }

    /// Send one request with its fds: `[stdin, stdout, stderr, ctl]`, or `[stdout, stderr,
    /// ctl]` for a command whose stdin is `/dev/null` (opened inside, per command). One message,
    /// all or nothing (see [`INLINE_MAX`]); `WouldBlock` when the socket has no room for it,
    /// nothing sent (retry later: [`Client::send`] does, without blocking its thread).
    pub(crate) fn submit(&self, req: &Request, fds: &[RawFd]) -> std::io::Result<()> {
        debug_assert!(fds.len() == 3 || fds.len() == 4);
        let body = serde_json::to_vec(req).map_err(std::io::Error::other)?;
        let len = u32::try_from(body.len())
            .ok()
            .filter(|&l| l < BODY_IN_FD)
            .ok_or_else(|| std::io::Error::other("request too large"))?;
        // A large body goes in a memfd, attached last.
        let memfd = if body.len() > INLINE_MAX {
            Some(body_memfd(&body)?)
        } else {
            None
        };
        let hdr = if memfd.is_some() {
            len | BODY_IN_FD
        } else {
            len
        }
        .to_le_bytes();
        let inline: &[u8] = if memfd.is_some() { &[] } else { &body };
        let mut all = [-1 as RawFd; 5];
        all[..fds.len()].copy_from_slice(fds);
        let mut nfds = fds.len();
        if let Some(m) = &memfd {
            all[nfds] = m.as_raw_fd();
            nfds += 1;
        }
        let fd_bytes = (nfds * std::mem::size_of::<RawFd>()) as u32;
        let sock = self.sock.lock().unwrap_or_else(|p| p.into_inner());
        let fd = sock.as_raw_fd();
        // SAFETY: the control buffer is sized and aligned for five fds; all pointers are valid
        // for the duration of the calls.
        unsafe {
            let mut cbuf = [0u64; 8];
            let mut iov = [
                libc::iovec {
                    iov_base: hdr.as_ptr() as *mut libc::c_void,
                    iov_len: 4,
                },
                libc::iovec {
                    iov_base: inline.as_ptr() as *mut libc::c_void,
                    iov_len: inline.len(),
                },
            ];
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = iov.as_mut_ptr();
            msg.msg_iovlen = 2;
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(fd_bytes) as usize;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(fd_bytes) as usize;
            std::ptr::copy_nonoverlapping(all.as_ptr(), libc::CMSG_DATA(c).cast::<RawFd>(), nfds);
            // Non-blocking: a message this small is one buffer in the kernel, queued whole or
            // not at all. A blocking send could be cut short by a signal, leaving a partial
            // request. When the socket is full (a stalled launcher) this returns `WouldBlock`
            // at once, the lock released, and the caller waits without holding its thread.
            loop {
                let n = libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT);
                if n >= 0 {
                    if n as usize != 4 + inline.len() {
                        // Never expected (see `connect`): the rest could reach another reader,
                        // so end the stream; the launcher stops serving, commands then fail.
                        libc::shutdown(fd, libc::SHUT_RDWR);
                        return Err(std::io::Error::other("request sent in part"));
                    }
                    return Ok(());
                }
                match crate::sys::errno() {
                    libc::EINTR => continue,
                    _ => return Err(std::io::Error::last_os_error()),
                }
            }
        }
    }
}

impl Client {
    /// [`Client::submit`], waiting (asynchronously, the lock not held) while the launcher's
    /// socket is full: a stalled launcher delays its own sandbox's commands, never the
    /// caller's runtime thread or the other sandboxes'.
    pub(crate) async fn send(&self, req: &Request, fds: &[RawFd]) -> std::io::Result<()> {
        let mut wait = std::time::Duration::from_micros(100);
        loop {
            match self.submit(req, fds) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(std::time::Duration::from_millis(20));
                }
                done => return done,
            }
        }
    }
}

/// A sealed memfd holding `body` (a request too large to send inline).
fn body_memfd(body: &[u8]) -> std::io::Result<OwnedFd> {
    // SAFETY: valid C string; the result is checked and owned.
    let fd = unsafe {
        libc::memfd_create(
            c"dojo-request".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh descriptor, owned from here on.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut f = std::fs::File::from(fd);
    std::io::Write::write_all(&mut f, body)?;
    let fd = OwnedFd::from(f);
    // SAFETY: a valid fd; sealing only restricts later writers.
    unsafe {
        libc::fcntl(
            fd.as_raw_fd(),
            libc::F_ADD_SEALS,
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE | libc::F_SEAL_SEAL,
        );
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Request {
        Request {
            argv: vec!["true".into()],
            env: Vec::new(),
            cwd: "/".into(),
            exe_candidates: Vec::new(),
            rlimits: Vec::new(),
            landlock_abi: 0,
            landlock_full: Vec::new(),
            landlock_files: Vec::new(),
        }
    }

    /// A launcher that stops reading: `submit` says `WouldBlock` at once instead of blocking
    /// its thread with the lock held, and `send` waits without holding the runtime's only
    /// thread, then goes through once the launcher reads again.
    #[tokio::test(flavor = "current_thread")]
    async fn a_full_launcher_socket_blocks_neither_the_thread_nor_the_lock() {
        let (ours, theirs) = socketpair().unwrap();
        let client = Client::from_socket(ours);
        let null = std::fs::File::open("/dev/null").unwrap();
        let fds = [null.as_raw_fd(); 3];
        let mut sent = 0;
        let full = loop {
            match client.submit(&request(), &fds) {
                Ok(()) => sent += 1,
                Err(e) => break e,
            }
            assert!(sent < 100_000, "the socket never filled");
        };
        assert_eq!(full.kind(), std::io::ErrorKind::WouldBlock, "{full}");
        assert!(client.sock.try_lock().is_ok(), "the lock is not held");
        // The runtime's one thread keeps running other work while `send` waits.
        let waited = tokio::time::timeout(
            std::time::Duration::from_millis(30),
            client.send(&request(), &fds),
        )
        .await;
        assert!(waited.is_err(), "sent into a full socket");
        // The launcher reads everything queued (closing the fds it receives); `send` then
        // goes through.
        let drain = std::thread::spawn(move || {
            for _ in 0..=sent {
                let mut ended = false;
                // SAFETY: a socket we own; the received fds are closed here.
                let got = unsafe {
                    super::super::server::recv_request(theirs.as_raw_fd(), -1, &mut ended)
                };
                let (req, fds) = got.unwrap_or_else(|| panic!("no request (ended: {ended})"));
                assert_eq!(req.argv, ["true"]);
                for fd in fds {
                    // SAFETY: ours to close.
                    unsafe { libc::close(fd) };
                }
            }
        });
        client.send(&request(), &fds).await.unwrap();
        drain.join().unwrap();
    }
}
