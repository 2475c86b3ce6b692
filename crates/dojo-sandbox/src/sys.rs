//! Raw, async-signal-safe system-call helpers for code that runs between `fork` and `exec`.
//!
//! Everything here is called in a forked child of a (possibly multi-threaded) process, where only
//! async-signal-safe operations are allowed: no allocation, no locks, no `std` I/O. Every buffer
//! is prepared by the parent before the fork; these functions only issue system calls.

#![allow(unsafe_op_in_unsafe_fn)]

use std::ffi::CStr;

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

// ---------------------------------------------------------------------------------------------
// Landlock (raw system calls: the ruleset is built in the child, after it joined the sandbox's
// mount namespace, because the paths only exist there).

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

const LL_WRITE_FILE: u64 = 1 << 1;
const LL_REMOVE_DIR: u64 = 1 << 4;
const LL_REMOVE_FILE: u64 = 1 << 5;
const LL_MAKE_CHAR: u64 = 1 << 6;
const LL_MAKE_DIR: u64 = 1 << 7;
const LL_MAKE_REG: u64 = 1 << 8;
const LL_MAKE_SOCK: u64 = 1 << 9;
const LL_MAKE_FIFO: u64 = 1 << 10;
const LL_MAKE_BLOCK: u64 = 1 << 11;
const LL_MAKE_SYM: u64 = 1 << 12;
const LL_REFER: u64 = 1 << 13;
const LL_TRUNCATE: u64 = 1 << 14;

/// The Landlock ABI version of the running kernel (0 when unavailable).
pub fn landlock_abi() -> i32 {
    // SAFETY: LANDLOCK_CREATE_RULESET_VERSION with a null attr only queries the version.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            1u32,
        )
    };
    if v < 0 { 0 } else { v as i32 }
}

/// Write-type accesses handled (i.e. denied unless a rule allows them) for an ABI version.
pub(crate) fn landlock_write_mask(abi: i32) -> u64 {
    let mut m = LL_WRITE_FILE
        | LL_REMOVE_DIR
        | LL_REMOVE_FILE
        | LL_MAKE_CHAR
        | LL_MAKE_DIR
        | LL_MAKE_REG
        | LL_MAKE_SOCK
        | LL_MAKE_FIFO
        | LL_MAKE_BLOCK
        | LL_MAKE_SYM;
    if abi >= 2 {
        m |= LL_REFER;
    }
    if abi >= 3 {
        m |= LL_TRUNCATE;
    }
    m
}

/// Restrict the current process: writes only beneath `full` paths (all write accesses) and
/// `files_only` paths (write/truncate existing files: device nodes). Reads and exec stay allowed.
/// Requires no_new_privs. Returns false on failure.
pub(crate) unsafe fn landlock_restrict(abi: i32, full: &[&CStr], files_only: &[&CStr]) -> bool {
    let handled = landlock_write_mask(abi);
    let attr = RulesetAttr {
        handled_access_fs: handled,
        handled_access_net: 0,
        scoped: 0,
    };
    let size = if abi >= 6 {
        std::mem::size_of::<RulesetAttr>()
    } else if abi >= 4 {
        16
    } else {
        8
    };
    let rs = libc::syscall(
        libc::SYS_landlock_create_ruleset,
        &attr as *const RulesetAttr,
        size,
        0u32,
    ) as Fd;
    if rs < 0 {
        return false;
    }
    let add = |path: &CStr, access: u64| -> bool {
        let fd = libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
        if fd < 0 {
            // A missing path simply gets no rule (stays read-only).
            return true;
        }
        let rule = PathBeneathAttr {
            allowed_access: access,
            parent_fd: fd,
        };
        let r = libc::syscall(
            libc::SYS_landlock_add_rule,
            rs,
            1u32, /* LANDLOCK_RULE_PATH_BENEATH */
            &rule as *const PathBeneathAttr,
            0u32,
        );
        libc::close(fd);
        r == 0
    };
    for p in full {
        if !add(p, handled) {
            libc::close(rs);
            return false;
        }
    }
    for p in files_only {
        if !add(p, handled & (LL_WRITE_FILE | LL_TRUNCATE)) {
            libc::close(rs);
            return false;
        }
    }
    let r = libc::syscall(libc::SYS_landlock_restrict_self, rs, 0u32);
    libc::close(rs);
    r == 0
}

// ---------------------------------------------------------------------------------------------
// seccomp: a hand-written BPF deny list (the program is built before fork).

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ_K: u16 = 0x15;
const BPF_JGE_K: u16 = 0x35;
const BPF_JSET_K: u16 = 0x45;
const BPF_RET_K: u16 = 0x06;

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}
fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// System calls refused with EPERM inside a sandbox (after setup): debugging other processes,
/// mounts and namespaces, the kernel keyring, bpf, modules, kexec, reboot, swap, time, perf...
pub(crate) fn denied_syscalls() -> Vec<libc::c_long> {
    let mut v = vec![
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_bpf,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_acct,
        libc::SYS_perf_event_open,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_userfaultfd,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_mount_setattr,
        libc::SYS_syslog,
        libc::SYS_quotactl,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        libc::SYS_adjtimex,
        libc::SYS_sethostname,
        libc::SYS_setdomainname,
        libc::SYS_vhangup,
        libc::SYS_pidfd_getfd,
        libc::SYS_kcmp,
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([libc::SYS_iopl, libc::SYS_ioperm, libc::SYS_lookup_dcookie]);
    v
}

const CLONE_NS_MASK: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWCGROUP) as u32;

/// The BPF program: wrong architecture or x32 → EPERM; denied calls → EPERM; `clone` creating
/// namespaces → EPERM; `clone3` → ENOSYS (its flags live in memory BPF cannot read, and libc
/// falls back to `clone`); the rest is allowed.
pub(crate) fn seccomp_program() -> Vec<libc::sock_filter> {
    let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    let allow = libc::SECCOMP_RET_ALLOW;
    let mut p = vec![
        stmt(BPF_LD_W_ABS, 4), // arch
        jump(BPF_JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(BPF_RET_K, eperm),
        stmt(BPF_LD_W_ABS, 0), // nr
    ];
    #[cfg(target_arch = "x86_64")]
    {
        p.push(jump(BPF_JGE_K, 0x4000_0000, 0, 1));
        p.push(stmt(BPF_RET_K, eperm));
    }
    for nr in denied_syscalls() {
        p.push(jump(BPF_JEQ_K, nr as u32, 0, 1));
        p.push(stmt(BPF_RET_K, eperm));
    }
    p.push(jump(BPF_JEQ_K, libc::SYS_clone3 as u32, 0, 1));
    p.push(stmt(BPF_RET_K, enosys));
    // clone: flags are args[0]; its low 32 bits are at offset 16 on little-endian.
    p.push(jump(BPF_JEQ_K, libc::SYS_clone as u32, 0, 3));
    p.push(stmt(BPF_LD_W_ABS, 16));
    p.push(jump(BPF_JSET_K, CLONE_NS_MASK, 0, 1));
    p.push(stmt(BPF_RET_K, eperm));
    p.push(stmt(BPF_RET_K, allow));
    p
}

/// Install a prepared filter on the current thread (no_new_privs must be set).
pub(crate) unsafe fn seccomp_install(prog: &[libc::sock_filter]) -> bool {
    let fprog = libc::sock_fprog {
        len: prog.len() as libc::c_ushort,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    libc::syscall(
        libc::SYS_seccomp,
        libc::SECCOMP_SET_MODE_FILTER,
        0u32,
        &fprog as *const libc::sock_fprog,
    ) == 0
}

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

    #[test]
    fn seccomp_program_is_well_formed() {
        let p = seccomp_program();
        assert!(p.len() < 4096);
        // Every jump lands inside the program.
        for (i, ins) in p.iter().enumerate() {
            if ins.code & 0x07 == 0x05 {
                assert!(i + 1 + (ins.jt.max(ins.jf) as usize) < p.len());
            }
        }
        assert_eq!(p.last().unwrap().k, libc::SECCOMP_RET_ALLOW);
    }
}
