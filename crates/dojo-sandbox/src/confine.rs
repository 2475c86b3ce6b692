//! What confines a command once it runs inside a sandbox, beyond the namespaces: the Landlock
//! ruleset (writes only beneath /testbed, /tmp and /dev/shm), the seccomp filter (a deny list
//! of privileged system calls) and the resource limits (rlimits). Leaf module: plain data and
//! raw system calls, prepared by the caller before `fork` and applied by the command's own
//! process just before `execve` (see `child`).

#![allow(unsafe_op_in_unsafe_fn)]

use std::ffi::CStr;
use std::sync::OnceLock;

use crate::types::Limits;

type Fd = libc::c_int;

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
pub fn kernel_landlock_abi() -> i32 {
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

/// The paths a sandbox's commands may write beneath (every write access), and those where they
/// may only write existing files (device nodes): one list for the caller's requests
/// (`ns::Sandbox::request`) and the launcher's pre-built ruleset.
pub(crate) fn landlock_paths(venv_writable: bool) -> (Vec<&'static str>, Vec<&'static str>) {
    let mut full = vec![crate::WORKSPACE, "/tmp", "/dev/shm"];
    if venv_writable {
        full.push(crate::VENV_PATH);
    }
    (full, vec!["/dev"])
}

/// Restrict the current process: writes only beneath `full` paths (all write accesses) and
/// `files_only` paths (write/truncate existing files: device nodes). Reads and exec stay allowed.
/// Requires no_new_privs. Returns false on failure.
pub(crate) unsafe fn landlock_restrict(abi: i32, full: &[&CStr], files_only: &[&CStr]) -> bool {
    landlock_enforce(landlock_ruleset(abi, full, files_only))
}

/// Enforce a ruleset of [`landlock_ruleset`] on the current process (and everything it starts)
/// and close it; false on failure (`rs` < 0 included). Requires no_new_privs.
pub(crate) unsafe fn landlock_enforce(rs: Fd) -> bool {
    if rs < 0 {
        return false;
    }
    let r = libc::syscall(libc::SYS_landlock_restrict_self, rs, 0u32);
    libc::close(rs);
    r == 0
}

/// The ruleset of [`landlock_restrict`], not yet enforced (a close-on-exec fd; -1 on failure):
/// the launcher's spares build it before a request exists, so that a command only enforces it.
pub(crate) unsafe fn landlock_ruleset(abi: i32, full: &[&CStr], files_only: &[&CStr]) -> Fd {
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
        return -1;
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
            return -1;
        }
    }
    for p in files_only {
        if !add(p, handled & (LL_WRITE_FILE | LL_TRUNCATE)) {
            libc::close(rs);
            return -1;
        }
    }
    rs
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
/// mounts and namespaces, the kernel keyring, bpf, modules, kexec, reboot, swap, time, perf,
/// io_uring...
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
        // io_uring: a second system-call interface whose operations seccomp never sees, and a
        // steady source of kernel bugs; container runtimes refuse it by default too.
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
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

/// The seccomp program of every command, built once per process.
pub(crate) fn seccomp_prog() -> &'static [libc::sock_filter] {
    static P: OnceLock<Vec<libc::sock_filter>> = OnceLock::new();
    P.get_or_init(seccomp_program)
}

/// The Landlock ABI commands use: the kernel's ([`kernel_landlock_abi`]), or 0 (no Landlock)
/// with `DOJO_LANDLOCK=off`.
pub(crate) fn landlock_abi() -> i32 {
    static A: OnceLock<i32> = OnceLock::new();
    *A.get_or_init(|| {
        if std::env::var("DOJO_LANDLOCK").is_ok_and(|v| v == "off" || v == "0") {
            0
        } else {
            kernel_landlock_abi()
        }
    })
}

/// The rlimits of every command: no core dumps, and the limits cgroups do not enforce.
pub(crate) fn rlimits(limits: &Limits, memory_by_cgroup: bool) -> Vec<(u32, u64)> {
    let mut v = vec![(libc::RLIMIT_CORE, 0)];
    if let Some(p) = limits.max_processes {
        v.push((libc::RLIMIT_NPROC, p));
    }
    if let Some(f) = limits.max_file_size_bytes {
        v.push((libc::RLIMIT_FSIZE, f));
    }
    if let Some(n) = limits.max_open_files {
        v.push((libc::RLIMIT_NOFILE, n));
    }
    if let (Some(m), false) = (limits.memory_bytes, memory_by_cgroup) {
        v.push((libc::RLIMIT_AS, m));
    }
    v
}

/// Apply prepared rlimits to the current process (async-signal-safe). Returns false on failure.
pub(crate) unsafe fn apply_rlimits(rlimits: &[(libc::__rlimit_resource_t, u64)]) -> bool {
    for &(res, val) in rlimits {
        let lim = libc::rlimit {
            rlim_cur: val,
            rlim_max: val,
        };
        if libc::setrlimit(res, &lim) != 0 {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

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
