//! The data a command's processes are given: [`Request`] (one command as the caller prepared
//! it, serialisable so it can cross the launcher's socket) and [`ExecPlan`], the same as C
//! strings and pointers ready for the code that runs between `fork` and `exec`.

use std::ffi::CString;

use crate::sys::{CArgv, Fd, cstr};

/// One command, as sent to the in-sandbox launcher (or turned into a plan by the caller).
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

/// Which isolation the command child sets up.
pub(crate) enum Mode {
    /// Join the sandbox's user/mount/net namespaces (fds), then fresh pid + mount ns.
    Namespaces {
        userns: Fd,
        mntns: Fd,
        /// Every sandbox has its own (`network = true` is routed by slirp4netns, outside).
        netns: Fd,
        /// Host root: drop supplementary groups before joining.
        host_root: bool,
        /// The sandbox's CPU affinity mask (the holder's descendants inherit it; a command
        /// joining from outside sets it).
        cpus: Option<libc::cpu_set_t>,
    },
    /// No namespaces: process group + subreaper; kill descendants by walking /proc.
    Fallback,
    /// Forked by the in-sandbox launcher: already inside (`command::run_inside`).
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
    /// A ruleset of exactly these paths built ahead of the request (the launcher's spare),
    /// enforced instead of building one; -1: none.
    pub landlock_ruleset: Fd,
    pub seccomp: Option<&'static [libc::sock_filter]>,
    /// The caller's command-line and environment areas to scrub first (forked from the caller:
    /// see `sys::scrub_cmdline`); `None` when forked from the launcher, which has none to hide.
    pub scrub: Option<[(usize, usize); 2]>,
}

impl ExecPlan {
    /// The fork-time plan of a request.
    pub(crate) fn from_request(
        req: &Request,
        mode: Mode,
        status_w: Fd,
        lifeline_r: Fd,
        cgroup_procs: Vec<Fd>,
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
            landlock_ruleset: -1,
            seccomp,
            scrub: None,
        }
    }
}
