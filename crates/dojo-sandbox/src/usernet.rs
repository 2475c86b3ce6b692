//! User-mode networking for sandboxes whose environment says `network = true`.
//!
//! Every namespace sandbox has a network namespace of its own. With `network = true`, dojo
//! attaches [slirp4netns] to it: a host process that owns a tap device inside the namespace
//! (`tap0`, 10.0.2.100/24, default route via 10.0.2.2, DNS forwarder at 10.0.2.3) and turns
//! its packets into ordinary sockets of the host. So the sandbox reaches what the host reaches
//! through its routes, and nothing of the host's own namespace:
//! - the host's loopback is refused (`--disable-host-loopback`: 10.0.2.2 does not forward to
//!   127.0.0.1), unless the operator sets `DOJO_SANDBOX_HOST_LOOPBACK=1` for a package mirror
//!   on the host's loopback ([`crate::EnvRuntime::host_loopback`]);
//! - abstract unix sockets belong to a network namespace, so the host's are out of reach in
//!   every mode (path sockets are Landlock's and the minimal root's concern);
//! - services the host binds on its other addresses are reachable, as from any other machine
//!   on its network.
//!
//! Lifetime: slirp4netns gets a pidfd of the sandbox's holder as its `--exit-fd`; a pidfd turns
//! readable when that process exits, so slirp4netns ends with the holder (reset starts a new
//! holder, and with it a new slirp4netns) whether dojo is still running or not (kept
//! sandboxes). A thread of ours reaps it when dojo outlives it. slirp4netns runs with its own
//! sandbox (`--enable-sandbox`: its own mount namespace and no capability but
//! `CAP_NET_BIND_SERVICE`) and seccomp filter.
//!
//! [slirp4netns]: https://github.com/rootless-containers/slirp4netns

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::error::{Result, setup_err, setup_failed};

/// The MTU slirp4netns recommends for throughput (its default 1500 is several times slower).
const MTU: &str = "65520";

/// How long slirp4netns may take to configure the interface.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// The environment variable that lets `network = true` sandboxes reach the host's loopback.
pub const HOST_LOOPBACK_VAR: &str = "DOJO_SANDBOX_HOST_LOOPBACK";

/// Whether the operator asked for the host's loopback to be reachable (`1` or `true`).
pub(crate) fn host_loopback_from_env() -> bool {
    matches!(
        std::env::var(HOST_LOOPBACK_VAR).as_deref(),
        Ok("1") | Ok("true")
    )
}

/// The slirp4netns binary: `DOJO_SLIRP4NETNS`, else the first on `PATH`.
pub fn slirp4netns() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("DOJO_SLIRP4NETNS") {
        return Some(PathBuf::from(p));
    }
    crate::cmdenv::on_host_path("slirp4netns")
}

fn missing() -> crate::SandboxError {
    setup_err(
        "this environment has `network = true`, which needs slirp4netns for the sandbox's own \
         network namespace (never the host's): install it (Debian/Ubuntu: `apt-get install \
         slirp4netns`) or point DOJO_SLIRP4NETNS at it",
    )
}

/// Give the network namespace of `holder` (a process inside it, in its user namespace) a
/// user-mode route to the outside; returns once the interface is configured.
pub(crate) fn attach(holder: i32, host_loopback: bool) -> Result<()> {
    let exe = slirp4netns().ok_or_else(missing)?;
    // SAFETY: plain system calls on integers; each returned fd is owned at once.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, holder, 0) } as i32;
    if pidfd < 0 {
        return Err(setup_err(format!(
            "pidfd_open of the sandbox holder {holder}: {}",
            std::io::Error::last_os_error()
        )));
    }
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    let mut fds = [0; 2];
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(setup_err(format!(
            "pipe for slirp4netns: {}",
            std::io::Error::last_os_error()
        )));
    }
    let (ready_r, ready_w) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let (exit_fd, ready_fd) = (pidfd.as_raw_fd(), ready_w.as_raw_fd());
    let mut cmd = Command::new(&exe);
    cmd.arg("--configure")
        .arg(format!("--mtu={MTU}"))
        .arg("--enable-sandbox")
        .arg("--enable-seccomp")
        .arg(format!("--exit-fd={exit_fd}"))
        .arg(format!("--ready-fd={ready_fd}"));
    if !host_loopback {
        cmd.arg("--disable-host-loopback");
    }
    if !crate::ids::is_root() {
        // Unprivileged: join the sandbox's user namespace first, which owns its network one.
        cmd.arg(format!("--userns-path=/proc/{holder}/ns/user"));
    }
    cmd.arg(holder.to_string())
        .arg("tap0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        // Its own process group: a terminal's ^C or hangup meant for dojo does not cut a kept
        // sandbox off the network.
        .process_group(0);
    // SAFETY: fcntl is async-signal-safe; it only clears close-on-exec on the two fds passed.
    unsafe {
        cmd.pre_exec(move || {
            for fd in [exit_fd, ready_fd] {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| setup_failed(format!("starting {}", exe.display()), e))?;
    drop(ready_w);
    drop(pidfd);
    let ready = wait_ready(&ready_r);
    if ready {
        // Its stderr is not read again: closing our end would kill it with SIGPIPE on its
        // next warning, so a thread keeps it and reaps the process when it ends.
        std::thread::spawn(move || {
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::copy(&mut e, &mut std::io::sink());
            }
            let _ = child.wait();
        });
        return Ok(());
    }
    let _ = child.kill();
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let _ = child.wait();
    Err(setup_err(format!(
        "slirp4netns did not configure the sandbox's network within {}s: {}",
        READY_WITHIN.as_secs(),
        err.trim()
    )))
}

/// Whether slirp4netns wrote its ready byte before the deadline (EOF: it exited first).
fn wait_ready(r: &OwnedFd) -> bool {
    let mut p = libc::pollfd {
        fd: r.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = READY_WITHIN.as_millis() as libc::c_int;
    // SAFETY: one pollfd on an fd we own; a one-byte read into a local.
    unsafe {
        if libc::poll(&mut p, 1, ms) != 1 {
            return false;
        }
        let mut b = 0u8;
        libc::read(r.as_raw_fd(), (&mut b as *mut u8).cast(), 1) == 1 && b == b'1'
    }
}
