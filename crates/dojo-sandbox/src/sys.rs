//! Raw, async-signal-safe system-call helpers for code that runs between `fork` and `exec`.
//!
//! Everything here is called in a forked child of a (possibly multi-threaded) process, where only
//! async-signal-safe operations are allowed: no allocation, no locks, no `std` I/O. Every buffer
//! is prepared by the parent before the fork; these functions only issue system calls.

#![allow(unsafe_op_in_unsafe_fn)]

use std::ffi::{CStr, CString};

pub(crate) type Fd = libc::c_int;

pub(crate) fn errno() -> i32 {
    // SAFETY: __errno_location is thread-local and always valid.
    unsafe { *libc::__errno_location() }
}

/// Write a whole buffer, retrying on EINTR. Returns false on error.
pub(crate) unsafe fn write_all(fd: Fd, mut buf: &[u8]) -> bool {
    while !buf.is_empty() {
        let n = libc::write(fd, buf.as_ptr().cast(), buf.len());
        if n < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            return false;
        }
        buf = &buf[n as usize..];
    }
    true
}

/// `kill(2)` for the caller side, refusing pids that would address groups or everyone
/// (0, -1, negative) or init: a bookkeeping bug must never turn into `kill(-1, SIGKILL)` as root.
pub fn kill_pid(pid: i32, sig: libc::c_int) -> bool {
    if pid <= 1 {
        return false;
    }
    // SAFETY: plain kill(2) of one process.
    unsafe { libc::kill(pid, sig) == 0 }
}

/// A status message on a setup pipe: 12 bytes, written atomically (< PIPE_BUF).
pub(crate) const TAG_PID: u32 = 1;
pub(crate) const TAG_OK: u32 = 2;
pub(crate) const TAG_ERR: u32 = 3;
/// A command's wait status (launcher mode, on the control socket).
pub(crate) const TAG_EXIT: u32 = 4;

pub(crate) unsafe fn send(fd: Fd, tag: u32, a: i32, b: i32) {
    let mut m = [0u8; 12];
    m[0..4].copy_from_slice(&tag.to_ne_bytes());
    m[4..8].copy_from_slice(&a.to_ne_bytes());
    m[8..12].copy_from_slice(&b.to_ne_bytes());
    write_all(fd, &m);
}

pub(crate) fn decode(m: &[u8; 12]) -> (u32, i32, i32) {
    let g = |r: std::ops::Range<usize>| {
        let mut b = [0u8; 4];
        b.copy_from_slice(&m[r]);
        b
    };
    (
        u32::from_ne_bytes(g(0..4)),
        i32::from_ne_bytes(g(4..8)),
        i32::from_ne_bytes(g(8..12)),
    )
}

/// Report a failed setup step and exit. `step` indexes [`STEP_NAMES`].
pub(crate) unsafe fn fail(status_fd: Fd, step: Step) -> ! {
    let e = errno();
    send(status_fd, TAG_ERR, step as i32, e);
    libc::_exit(SETUP_FAILED_EXIT)
}

/// Exit code of a helper process whose setup failed (the real reason went over the status pipe).
pub(crate) const SETUP_FAILED_EXIT: i32 = 125;

macro_rules! steps {
    ($($name:ident => $desc:literal),* $(,)?) => {
        #[derive(Clone, Copy, Debug)]
        #[repr(i32)]
        pub(crate) enum Step { $($name),* }
        pub(crate) const STEP_NAMES: &[&str] = &[$($desc),*];
    };
}

steps! {
    Setgroups => "dropping supplementary groups",
    Setgid => "switching to the sandbox gid",
    Setuid => "switching to the sandbox uid",
    Cgroup => "joining the sandbox cgroup",
    Unshare => "creating namespaces (unshare)",
    UidMap => "writing uid_map/gid_map",
    Fork => "fork",
    MakePrivate => "making mounts private",
    RootTmpfs => "mounting the new root tmpfs",
    Mkdir => "creating a mount point",
    Bind => "bind-mounting a host directory",
    Readonly => "making a bind mount read-only",
    Overlay => "mounting overlayfs (userxattr) at /testbed",
    Tmpfs => "mounting a tmpfs",
    Proc => "mounting /proc",
    Dev => "populating /dev",
    PivotRoot => "pivot_root",
    LoopbackUp => "bringing up the loopback interface",
    Setns => "joining the sandbox namespaces (setns)",
    Chdir => "changing to the working directory",
    Rlimit => "setting resource limits",
    Landlock => "applying the Landlock ruleset",
    Seccomp => "installing the seccomp filter",
    Signals => "setting up signal handling",
    Affinity => "setting the CPU affinity (cpus)",
}

pub(crate) fn step_name(i: i32) -> &'static str {
    STEP_NAMES
        .get(i as usize)
        .copied()
        .unwrap_or("unknown step")
}

/// Keep exactly `fds` (renumbered to 3, 4, ... in order, close-on-exec) plus stdio; close the rest.
/// `fds` is updated with the new numbers. The descriptors must be distinct and >= 3.
pub(crate) unsafe fn keep_fds(fds: &mut [Fd]) -> bool {
    let mut base = 3;
    for &fd in fds.iter() {
        if fd + 1 > base {
            base = fd + 1;
        }
    }
    let mut tmp = [0 as Fd; 16];
    if fds.len() > tmp.len() {
        return false;
    }
    for (i, &fd) in fds.iter().enumerate() {
        let n = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, base);
        if n < 0 {
            return false;
        }
        tmp[i] = n;
    }
    // The duplicates are all >= base; free the low range, then move them down.
    libc::close_range(3, (base - 1) as libc::c_uint, 0);
    for (i, fd) in fds.iter_mut().enumerate() {
        let target = 3 + i as Fd;
        if libc::dup3(tmp[i], target, libc::O_CLOEXEC) < 0 {
            return false;
        }
        *fd = target;
    }
    libc::close_range((3 + fds.len()) as libc::c_uint, libc::c_uint::MAX, 0);
    true
}

pub(crate) unsafe fn write_file(path: &CStr, data: &[u8]) -> bool {
    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return false;
    }
    let ok = write_all(fd, data);
    libc::close(fd);
    ok
}

pub(crate) unsafe fn mount(
    src: *const libc::c_char,
    target: *const libc::c_char,
    fstype: *const libc::c_char,
    flags: libc::c_ulong,
    data: *const libc::c_char,
) -> bool {
    libc::mount(src, target, fstype, flags, data.cast()) == 0
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

pub(crate) const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub(crate) const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub(crate) const MOUNT_ATTR_NODEV: u64 = 0x4;
const AT_RECURSIVE: libc::c_uint = 0x8000;

/// `mount_setattr(path, AT_RECURSIVE, set)`: make a whole mount tree read-only etc. in one call.
pub(crate) unsafe fn mount_setattr_rec(path: &CStr, set: u64) -> bool {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    libc::syscall(
        libc::SYS_mount_setattr,
        libc::AT_FDCWD,
        path.as_ptr(),
        AT_RECURSIVE,
        &attr as *const MountAttr,
        std::mem::size_of::<MountAttr>(),
    ) == 0
}

/// Bring `lo` up in the current network namespace.
pub(crate) unsafe fn loopback_up() -> bool {
    let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
    if s < 0 {
        return false;
    }
    let mut ifr: libc::ifreq = std::mem::zeroed();
    ifr.ifr_name[0] = b'l' as libc::c_char;
    ifr.ifr_name[1] = b'o' as libc::c_char;
    ifr.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    let ok = libc::ioctl(s, libc::SIOCSIFFLAGS, &ifr) == 0;
    libc::close(s);
    ok
}

/// Signal set of the given signals.
pub(crate) unsafe fn sigset(sigs: &[libc::c_int]) -> libc::sigset_t {
    let mut set: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut set);
    for &s in sigs {
        libc::sigaddset(&mut set, s);
    }
    set
}

/// Block `sigs` and return a signalfd for them.
pub(crate) unsafe fn block_and_signalfd(sigs: &[libc::c_int]) -> Fd {
    let set = sigset(sigs);
    if libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
        return -1;
    }
    libc::signalfd(-1, &set, libc::SFD_CLOEXEC)
}

/// Read one signal number from a signalfd (or -1).
pub(crate) unsafe fn read_signal(sfd: Fd) -> libc::c_int {
    let mut info: libc::signalfd_siginfo = std::mem::zeroed();
    let n = libc::read(
        sfd,
        (&mut info as *mut libc::signalfd_siginfo).cast(),
        std::mem::size_of::<libc::signalfd_siginfo>(),
    );
    if n as usize == std::mem::size_of::<libc::signalfd_siginfo>() {
        info.ssi_signo as libc::c_int
    } else {
        -1
    }
}

pub(crate) unsafe fn unblock_all_signals() {
    let set = sigset(&[]);
    libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
}

/// Wait for `child` (through `EINTR`) and end the current process as it ended: the middle
/// process of a double fork (holder, environment build) mirrors its one child. Async-signal-safe.
pub(crate) unsafe fn wait_and_exit_like(child: libc::pid_t) -> ! {
    let mut st = 0;
    loop {
        let w = libc::waitpid(child, &mut st, 0);
        if w == child {
            break;
        }
        if w < 0 && errno() != libc::EINTR {
            libc::_exit(1);
        }
    }
    exit_like(st)
}

/// Reproduce a child's wait status on the current process: exit with its code or die by its signal.
pub(crate) unsafe fn exit_like(status: libc::c_int) -> ! {
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &no_core);
        libc::signal(sig, libc::SIG_DFL);
        unblock_all_signals();
        libc::kill(libc::getpid(), sig);
        libc::_exit(128 + sig);
    }
    libc::_exit(libc::WEXITSTATUS(status))
}

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

/// Decimal digits of `v` into `out` (no allocation); returns how many.
pub(crate) fn fmt_u32(mut v: u32, out: &mut [u8]) -> usize {
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

/// Where this process's command-line and environment strings live: `[arg_start, arg_end)` and
/// `[env_start, env_end)` from /proc/self/stat (read once, before any fork; zeros if unknown).
pub(crate) fn cmdline_areas() -> [(usize, usize); 2] {
    static A: std::sync::OnceLock<[(usize, usize); 2]> = std::sync::OnceLock::new();
    *A.get_or_init(|| {
        let parse = || -> Option<[(usize, usize); 2]> {
            let s = std::fs::read_to_string("/proc/self/stat").ok()?;
            // Fields after the command name start at field 3; arg_start is field 48.
            let f: Vec<usize> = s[s.rfind(')')? + 2..]
                .split_whitespace()
                .skip(45)
                .take(4)
                .map(|x| x.parse().ok())
                .collect::<Option<_>>()?;
            (f.len() == 4).then(|| [(f[0], f[1]), (f[2], f[3])])
        };
        parse().unwrap_or_default()
    })
}

/// In a forked child: overwrite its copy of the caller's command line with `name` and its
/// environment strings with zeros, so `/proc/<pid>/cmdline` (and `environ`) of the sandbox's
/// helper processes, which a command can read as its pid 1, show nothing of the host's command
/// (paths, task files, flags) or environment (API keys). Only this process's private copy of
/// the memory changes.
pub(crate) unsafe fn scrub_cmdline(areas: [(usize, usize); 2], name: &[u8]) {
    for (i, (start, end)) in areas.into_iter().enumerate() {
        if start == 0 || end <= start {
            continue;
        }
        libc::memset(start as *mut libc::c_void, 0, end - start);
        if i == 0 {
            let n = name.len().min(end - start - 1);
            std::ptr::copy_nonoverlapping(name.as_ptr(), start as *mut u8, n);
        }
    }
}

/// The name sandbox helper processes show as their command line.
pub(crate) const HELPER_NAME: &[u8] = b"dojo-sandbox";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_messages_round_trip() {
        let mut fds = [0; 2];
        unsafe {
            assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
            send(fds[1], TAG_ERR, Step::Overlay as i32, libc::EACCES);
            let mut m = [0u8; 12];
            assert_eq!(libc::read(fds[0], m.as_mut_ptr().cast(), 12), 12);
            let (t, a, b) = decode(&m);
            assert_eq!((t, b), (TAG_ERR, libc::EACCES));
            assert!(step_name(a).contains("overlay"));
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }
}
