//! The namespace backend, caller side: creating the holder, building per-command plans, reset by
//! remounting a fresh upper dir, direct file I/O through `/proc/<holder>/root`, teardown.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::child::{self, CArgv, HolderPlan, Layers, Mode, RootEntry, cstr};
use crate::exec::{self, LiveSet};
use crate::{ExecRequest, Limits, Result, SandboxError, WORKSPACE, cgroup, launcher, sys};

/// Where the Python environment is mounted (read-only) inside every sandbox.
pub const VENV_PATH: &str = "/venv";

/// At most half the memory limit (at least 16 MiB): tmpfs pages are charged to the sandbox's
/// memory cgroup, so a bigger tmpfs would end in the OOM killer rather than `ENOSPC`.
fn memory_capped(limits: &Limits, cap: u64) -> u64 {
    limits
        .memory_bytes
        .map_or(cap, |m| cap.min(m / 2).max(16 << 20))
}

/// Size of each sandbox's private /tmp when it is a tmpfs of its own (no workspace cap).
pub(crate) fn tmp_size(limits: &Limits) -> u64 {
    memory_capped(limits, 2 << 30)
}

/// Size of the tmpfs holding the upper dir and /tmp together (see [`Limits::workspace_bytes`]).
pub(crate) fn workspace_size(limits: &Limits) -> Option<u64> {
    limits.workspace_bytes.map(|b| memory_capped(limits, b))
}

pub(crate) fn setup_err(what: impl std::fmt::Display) -> SandboxError {
    SandboxError::Setup(what.to_string())
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SandboxError + '_ {
    move |source| SandboxError::Io {
        path: path.display().to_string(),
        source,
    }
}

pub fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The unprivileged host uid (and gid) sandboxes run as. As root: `$DOJO_SANDBOX_UID`
/// (default 1,600,000, outside any real user's range). Otherwise the caller's own uid.
pub fn sandbox_uid() -> u32 {
    if !is_root() {
        // SAFETY: no preconditions.
        return unsafe { libc::geteuid() };
    }
    std::env::var("DOJO_SANDBOX_UID")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&u| u != 0)
        .unwrap_or(1_600_000)
}

fn sandbox_gid() -> u32 {
    if !is_root() {
        // SAFETY: no preconditions.
        return unsafe { libc::getegid() };
    }
    sandbox_uid()
}

pub(crate) fn chown_to_sandbox(path: &Path) -> Result<()> {
    if is_root() {
        std::os::unix::fs::chown(path, Some(sandbox_uid()), Some(sandbox_gid()))
            .map_err(io_err(path))?;
    }
    Ok(())
}

pub(crate) fn open_path(path: &Path) -> Result<OwnedFd> {
    let c = cstr(path.as_os_str().as_encoded_bytes());
    // SAFETY: valid C string; the result is checked.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io_err(path)(std::io::Error::last_os_error()));
    }
    // SAFETY: fresh descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn open_ns(pid: i32, kind: &str) -> Result<OwnedFd> {
    let p = PathBuf::from(format!("/proc/{pid}/ns/{kind}"));
    let f = std::fs::File::open(&p).map_err(io_err(&p))?;
    Ok(OwnedFd::from(f))
}

/// The host's top-level directories, bound read-only into every sandbox root (computed once).
fn root_entries() -> &'static Vec<(String, Option<PathBuf>)> {
    static E: OnceLock<Vec<(String, Option<PathBuf>)>> = OnceLock::new();
    E.get_or_init(|| {
        let skip = ["proc", "sys", "dev", "tmp", "testbed", "venv", "lost+found"];
        let mut v = Vec::new();
        if let Ok(rd) = std::fs::read_dir("/") {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if skip.contains(&name.as_str()) {
                    continue;
                }
                let Ok(ft) = e.file_type() else { continue };
                if ft.is_symlink() {
                    if let Ok(t) = std::fs::read_link(e.path()) {
                        v.push((name, Some(t)));
                    }
                } else if ft.is_dir() {
                    v.push((name, None));
                }
            }
        }
        v.sort();
        v
    })
}

pub(crate) fn seccomp_prog() -> &'static [libc::sock_filter] {
    static P: OnceLock<Vec<libc::sock_filter>> = OnceLock::new();
    P.get_or_init(sys::seccomp_program)
}

pub(crate) fn landlock_abi() -> i32 {
    static A: OnceLock<i32> = OnceLock::new();
    *A.get_or_init(|| {
        if std::env::var("DOJO_LANDLOCK").is_ok_and(|v| v == "off" || v == "0") {
            0
        } else {
            sys::landlock_abi()
        }
    })
}

/// Base environment of every command.
/// git refuses a repository whose top directory another uid owns ("dubious ownership"), and
/// the overlay's root is not owned by the sandbox user; agents and build backends such as
/// setuptools-scm run git at /testbed. Command-scope config is protected, so git honours
/// `safe.directory` given this way.
pub(crate) const GIT_SAFE_DIRECTORY_ENV: [(&str, &str); 3] = [
    ("GIT_CONFIG_COUNT", "1"),
    ("GIT_CONFIG_KEY_0", "safe.directory"),
    ("GIT_CONFIG_VALUE_0", "*"),
];

pub(crate) fn base_env(
    venv: Option<&str>,
    extra: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let sys_path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    match venv {
        Some(v) => {
            env.insert("PATH".into(), format!("{v}/bin:{sys_path}"));
            env.insert("VIRTUAL_ENV".into(), v.to_string());
        }
        None => {
            env.insert("PATH".into(), sys_path.into());
        }
    }
    env.insert("HOME".into(), "/tmp".into());
    env.insert("USER".into(), "root".into());
    env.insert("LOGNAME".into(), "root".into());
    env.insert("SHELL".into(), "/bin/bash".into());
    env.insert("LANG".into(), "C.UTF-8".into());
    env.insert("LC_ALL".into(), "C.UTF-8".into());
    env.insert("TMPDIR".into(), "/tmp".into());
    env.insert("PIP_DISABLE_PIP_VERSION_CHECK".into(), "1".into());
    for (k, v) in GIT_SAFE_DIRECTORY_ENV {
        env.insert(k.into(), v.into());
    }
    for (k, v) in extra {
        env.insert(k.clone(), v.clone());
    }
    env
}

/// argv[0] resolved against PATH (candidates tried in order by the child).
pub(crate) fn exe_candidates(argv0: &str, env: &BTreeMap<String, String>) -> Vec<CString> {
    if argv0.contains('/') {
        return vec![cstr(argv0)];
    }
    env.get("PATH")
        .map(String::as_str)
        .unwrap_or("/usr/bin:/bin")
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| cstr(format!("{d}/{argv0}")))
        .collect()
}

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

pub(crate) fn envp(env: &BTreeMap<String, String>) -> CArgv {
    CArgv::new(env.iter().map(|(k, v)| cstr(format!("{k}={v}"))).collect())
}

/// A live namespace sandbox (caller side).
pub(crate) struct NsSandbox {
    pub dir: PathBuf,
    pub holder_pid: i32,
    pub holder: Option<tokio::process::Child>,
    pub userns: OwnedFd,
    pub mntns: OwnedFd,
    pub netns: OwnedFd,
    pub lower: PathBuf,
    pub venv: Option<PathBuf>,
    pub keep: bool,
    pub generation: u32,
    pub cgroup: Option<Box<dyn cgroup::CgroupHandle>>,
    /// The in-sandbox launcher serving [`crate::Sandbox::exec`], when it started.
    pub launcher: Option<launcher::Client>,
    pub live: LiveSet,
    pub env: BTreeMap<String, String>,
    pub limits: Limits,
}

/// `<sandbox dir>/layer-<generation>`, holding the overlay's `upper/` and `work/`.
pub(crate) fn layer_dir(dir: &Path, generation: u32) -> PathBuf {
    dir.join(format!("layer-{generation}"))
}

pub(crate) fn make_layer_dir(dir: &Path, generation: u32) -> Result<PathBuf> {
    let l = layer_dir(dir, generation);
    for d in [l.clone(), l.join("upper"), l.join("work")] {
        std::fs::create_dir_all(&d).map_err(io_err(&d))?;
        chown_to_sandbox(&d)?;
    }
    Ok(l)
}

pub(crate) struct CreateArgs<'a> {
    pub id: &'a str,
    pub dir: &'a Path,
    pub lower: &'a Path,
    pub venv: Option<&'a Path>,
    pub limits: &'a Limits,
    pub extra_env: &'a BTreeMap<String, String>,
    pub keep: bool,
}

/// Start a holder over `lower` with the given upper generation; returns (pid, child, ns fds).
struct Holder {
    pid: i32,
    child: tokio::process::Child,
    userns: OwnedFd,
    mntns: OwnedFd,
    netns: OwnedFd,
    launcher: Option<launcher::Client>,
}

fn path_c(p: &Path) -> CString {
    cstr(p.as_os_str().as_encoded_bytes())
}

async fn start_holder(
    dir: &Path,
    generation: u32,
    lower: &Path,
    venv: Option<&Path>,
    cg: Option<&dyn cgroup::CgroupHandle>,
    keep: bool,
    limits: &Limits,
) -> Result<Holder> {
    let tried_launcher = launcher::exe_fd().is_some();
    match start_holder_once(dir, generation, lower, venv, cg, keep, limits).await {
        // The launcher took pid 1 down with it (see `launcher::disable`): once more, without.
        Err(_) if tried_launcher && launcher::exe_fd().is_none() => {
            start_holder_once(dir, generation, lower, venv, cg, keep, limits).await
        }
        r => r,
    }
}

async fn start_holder_once(
    dir: &Path,
    generation: u32,
    lower: &Path,
    venv: Option<&Path>,
    cg: Option<&dyn cgroup::CgroupHandle>,
    keep: bool,
    limits: &Limits,
) -> Result<Holder> {
    let layer = make_layer_dir(dir, generation)?;
    for p in [lower, &layer].into_iter().chain(venv) {
        if !p.is_dir() {
            return Err(setup_err(format!("{} is not a directory", p.display())));
        }
    }
    let cg_fds = open_procs(cg)?;
    let (status_r, status_w) = exec::pipe().map_err(|e| setup_err(format!("pipe: {e}")))?;
    let exe = launcher::exe_fd();
    let socks = match exe {
        Some(_) => Some(launcher::socketpair().map_err(|e| setup_err(format!("socketpair: {e}")))?),
        None => None,
    };
    let uid = sandbox_uid();
    let gid = sandbox_gid();
    let mut entries = Vec::new();
    for (name, link) in root_entries() {
        let dst = cstr(format!("/tmp/root/{name}"));
        entries.push(match link {
            Some(t) => RootEntry::Symlink {
                target: path_c(t),
                dst,
            },
            None => RootEntry::Bind {
                src: cstr(format!("/{name}")),
                dst,
            },
        });
    }
    entries.push(RootEntry::Bind {
        src: cstr("/sys"),
        dst: cstr("/tmp/root/sys"),
    });
    let home = dojo_cache::dojo_home();
    let hide = if home.starts_with("/tmp") || home.starts_with("/proc") || !home.is_absolute() {
        Vec::new()
    } else {
        vec![cstr(format!("/tmp/root{}", home.display()))]
    };
    let plan = HolderPlan {
        switch_to: is_root().then_some((uid, gid)),
        keep,
        status_w: status_w.as_raw_fd(),
        lifeline_r: (!keep).then(exec::lifeline_r),
        layers: Layers {
            lower: Some(path_c(lower)),
            layer: path_c(&layer),
            venv: venv.map(path_c),
        },
        cgroup_procs: cg_fds.iter().map(|f| f.as_raw_fd()).collect(),
        uid_map: cstr(format!("0 {uid} 1\n")),
        gid_map: cstr(format!("0 {gid} 1\n")),
        entries,
        hide,
        tmp_opts: cstr(format!("mode=1777,size={}", tmp_size(limits))),
        layer_tmpfs: workspace_size(limits).map(|b| cstr(format!("mode=0755,size={b}"))),
        shm_opts: cstr("mode=1777,size=256m"),
        launcher: exe.zip(socks.as_ref().map(|s| s.1.as_raw_fd())),
        prewarm: launcher::prewarm(),
        launcher_env: exe.and_then(|_| launcher::loader_env()),
    };
    let mut cmd = tokio::process::Command::new("/bin/false");
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: run_holder only issues async-signal-safe system calls on data prepared above.
    unsafe {
        cmd.pre_exec(move || Err(child::run_holder(&plan)));
    }
    let child = cmd
        .spawn()
        .map_err(|e| setup_err(format!("starting the sandbox holder: {e}")))?;
    drop(status_w);
    drop(cg_fds);
    let ours = socks.map(|(ours, theirs)| {
        drop(theirs);
        ours
    });
    let (msgs, client) = tokio::task::spawn_blocking(move || {
        let msgs = exec::read_status(status_r);
        let ok = msgs.iter().any(|m| m.0 == sys::TAG_OK);
        (
            msgs,
            ours.filter(|_| ok).and_then(launcher::Client::connect),
        )
    })
    .await
    .unwrap_or_default();
    if exe.is_some() && client.is_none() && msgs.iter().any(|m| m.0 == sys::TAG_OK) {
        launcher::disable();
    }
    let pid = msgs.iter().find(|m| m.0 == sys::TAG_PID).map(|m| m.1);
    let kill = || {
        if let Some(p) = pid {
            crate::sys::kill_pid(p, libc::SIGKILL);
        }
    };
    if let Some(e) = exec::status_error("creating the sandbox", &msgs) {
        kill();
        return Err(e);
    }
    let (Some(pid), true) = (pid, msgs.iter().any(|m| m.0 == sys::TAG_OK)) else {
        kill();
        return Err(setup_err(
            "the sandbox holder exited before finishing its setup",
        ));
    };
    let open = |k| open_ns(pid, k).inspect_err(|_| kill());
    Ok(Holder {
        pid,
        child,
        userns: open("user")?,
        mntns: open("mnt")?,
        netns: open("net")?,
        launcher: client,
    })
}

pub(crate) async fn create(a: CreateArgs<'_>) -> Result<NsSandbox> {
    let cg = match cgroup::detect() {
        Some(d) => Some(d.create(a.id, a.limits).map_err(|e| {
            setup_err(format!(
                "creating the {} cgroup for sandbox {}: {e}",
                d.version(),
                a.id
            ))
        })?),
        None => None,
    };
    let h = match start_holder(a.dir, 0, a.lower, a.venv, cg.as_deref(), a.keep, a.limits).await {
        Ok(h) => h,
        Err(e) => {
            if let Some(c) = cg {
                c.kill_all();
                let _ = c.remove();
            }
            return Err(e);
        }
    };
    Ok(NsSandbox {
        dir: a.dir.to_path_buf(),
        holder_pid: h.pid,
        holder: Some(h.child),
        userns: h.userns,
        mntns: h.mntns,
        netns: h.netns,
        lower: a.lower.to_path_buf(),
        venv: a.venv.map(Path::to_path_buf),
        keep: a.keep,
        generation: 0,
        cgroup: cg,
        launcher: h.launcher,
        live: Default::default(),
        env: base_env(a.venv.map(|_| VENV_PATH), a.extra_env),
        limits: a.limits.clone(),
    })
}

fn open_procs(cg: Option<&dyn cgroup::CgroupHandle>) -> Result<Vec<OwnedFd>> {
    let mut v = Vec::new();
    if let Some(c) = cg {
        for p in c.procs_files() {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&p)
                .map_err(io_err(&p))?;
            v.push(OwnedFd::from(f));
        }
    }
    Ok(v)
}

impl NsSandbox {
    /// Resolve a command's working directory inside the sandbox.
    fn cwd(req: &ExecRequest) -> String {
        match &req.cwd {
            None => WORKSPACE.to_string(),
            Some(c) if c.starts_with('/') => c.clone(),
            Some(c) => format!("{WORKSPACE}/{c}"),
        }
    }

    /// What every command of this sandbox needs besides argv: environment, working directory,
    /// resolved executable, rlimits, Landlock rules.
    pub(crate) fn request(&self, req: &ExecRequest) -> Result<launcher::Request> {
        if req.argv.is_empty() {
            return Err(SandboxError::Other("empty argv".into()));
        }
        let mut env = self.env.clone();
        for (k, v) in &req.env {
            env.insert(k.clone(), v.clone());
        }
        env.insert("PWD".into(), Self::cwd(req));
        let exe_candidates = exe_candidates(&req.argv[0], &env)
            .into_iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        Ok(launcher::Request {
            argv: req.argv.clone(),
            env: env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            cwd: Self::cwd(req),
            exe_candidates,
            rlimits: rlimits(
                &self.limits,
                self.cgroup.as_ref().is_some_and(|c| c.limits_memory()),
            ),
            landlock_abi: landlock_abi(),
            landlock_full: [WORKSPACE, "/tmp", "/dev/shm"].map(String::from).into(),
            landlock_files: vec!["/dev".into()],
        })
    }

    /// Build the supervisor command for `req` (not yet spawned) and its status pipe: the
    /// per-command `setns` path (no launcher, or a long-running [`crate::Sandbox::spawn`]).
    pub(crate) fn command(
        &self,
        req: &ExecRequest,
    ) -> Result<(tokio::process::Command, OwnedFd, OwnedFd, Vec<OwnedFd>)> {
        let request = self.request(req)?;
        let cg_fds = open_procs(self.cgroup.as_deref())?;
        let (status_r, status_w) = exec::pipe().map_err(|e| setup_err(format!("pipe: {e}")))?;
        let plan = launcher::plan_from(
            &request,
            Mode::Namespaces {
                userns: self.userns.as_raw_fd(),
                mntns: self.mntns.as_raw_fd(),
                netns: self.netns.as_raw_fd(),
                host_root: is_root(),
            },
            status_w.as_raw_fd(),
            exec::lifeline_r(),
            cg_fds.iter().map(|f| f.as_raw_fd()).collect(),
            Some(seccomp_prog()),
        );
        let mut cmd = tokio::process::Command::new("/bin/false");
        // SAFETY: run_command only issues async-signal-safe system calls on the prepared plan.
        unsafe {
            cmd.pre_exec(move || Err(child::run_command(&plan)));
        }
        Ok((cmd, status_r, status_w, cg_fds))
    }

    pub(crate) fn kill_live(&self) {
        let live: Vec<i32> = self
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied()
            .collect();
        for pid in live {
            crate::sys::kill_pid(pid, libc::SIGKILL);
        }
    }

    /// Start a fresh holder over a new upper dir (new /tmp, /dev/shm too), then kill the old
    /// one; the old upper dir goes to the trash. Running commands are killed.
    pub(crate) async fn reset(&mut self) -> Result<()> {
        self.kill_live();
        let old = layer_dir(&self.dir, self.generation);
        let generation = self.generation + 1;
        let h = start_holder(
            &self.dir,
            generation,
            &self.lower,
            self.venv.as_deref(),
            self.cgroup.as_deref(),
            self.keep,
            &self.limits,
        )
        .await?;
        let old_pid = std::mem::replace(&mut self.holder_pid, h.pid);
        let old_child = self.holder.replace(h.child);
        self.userns = h.userns;
        self.mntns = h.mntns;
        self.netns = h.netns;
        self.launcher = h.launcher;
        self.generation = generation;
        crate::sys::kill_pid(old_pid, libc::SIGKILL);
        match old_child {
            Some(mut c) => {
                let _ = c.wait().await;
            }
            None => wait_gone(old_pid).await,
        }
        crate::trash::discard(&old);
        Ok(())
    }

    /// Kill everything and wait for the holder to be gone.
    pub(crate) async fn teardown(&mut self) {
        self.launcher = None;
        self.kill_live();
        // SAFETY: plain kill(2); the holder is pid 1 of the sandbox's pid namespace, so the
        // kernel kills every process left in it.
        crate::sys::kill_pid(self.holder_pid, libc::SIGKILL);
        if let Some(mut h) = self.holder.take() {
            let _ = h.wait().await;
        } else {
            wait_gone(self.holder_pid).await;
        }
        if let Some(cg) = self.cgroup.take() {
            cg.kill_all();
            let _ = tokio::task::spawn_blocking(move || cg.remove()).await;
        }
    }

    /// An O_PATH fd of `/testbed` (or `/tmp`) inside the sandbox, opened from the host.
    pub(crate) fn area_fd(&self, area: &str) -> Result<OwnedFd> {
        let root = PathBuf::from(format!("/proc/{}/root", self.holder_pid));
        let rootfd =
            open_path(&root).map_err(|_| SandboxError::Gone(self.dir.display().to_string()))?;
        openat2(
            rootfd.as_raw_fd(),
            area.trim_start_matches('/'),
            libc::O_PATH | libc::O_DIRECTORY,
            0,
            libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_SYMLINKS,
        )
        .map_err(io_err(Path::new(area)))
    }
}

/// Wait until a process (not our child) has disappeared.
pub(crate) async fn wait_gone(pid: i32) {
    for _ in 0..2000 {
        // SAFETY: signal 0 only checks existence.
        if pid <= 1 || unsafe { libc::kill(pid, 0) } != 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

pub(crate) fn openat2(
    dirfd: i32,
    path: &str,
    flags: i32,
    mode: u32,
    resolve: u64,
) -> std::io::Result<OwnedFd> {
    let c = cstr(if path.is_empty() { "." } else { path });
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: mode as u64,
        resolve,
    };
    // SAFETY: valid pointers; result checked.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dirfd,
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    } as i32;
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Resolution flags that keep a path beneath its starting directory, on its mount, without
/// magic links: symlinks planted in the workspace cannot make the host read or write elsewhere.
pub(crate) const BENEATH: u64 =
    libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS | libc::RESOLVE_NO_XDEV;

/// Read `rel` beneath `dir` (no escape).
pub(crate) fn read_beneath(dir: &OwnedFd, rel: &str) -> std::io::Result<Vec<u8>> {
    let fd = openat2(dir.as_raw_fd(), rel, libc::O_RDONLY, 0, BENEATH)?;
    let mut f = std::fs::File::from(fd);
    let mut v = Vec::new();
    std::io::Read::read_to_end(&mut f, &mut v)?;
    Ok(v)
}

/// Write `rel` beneath `dir`, creating parent directories; new entries are owned by `owner`.
pub(crate) fn write_beneath(
    dir: &OwnedFd,
    rel: &str,
    data: &[u8],
    owner: Option<(u32, u32)>,
) -> std::io::Result<()> {
    let comps: Vec<&str> = rel
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    let Some((file, parents)) = comps.split_last() else {
        return Err(std::io::Error::from_raw_os_error(libc::EISDIR));
    };
    let mut cur = openat2(
        dir.as_raw_fd(),
        ".",
        libc::O_PATH | libc::O_DIRECTORY,
        0,
        BENEATH,
    )?;
    for p in parents {
        if *p == ".." {
            return Err(std::io::Error::from_raw_os_error(libc::EXDEV));
        }
        let next = match openat2(
            cur.as_raw_fd(),
            p,
            libc::O_PATH | libc::O_DIRECTORY,
            0,
            BENEATH,
        ) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                let c = cstr(*p);
                // SAFETY: valid fd and C string.
                if unsafe { libc::mkdirat(cur.as_raw_fd(), c.as_ptr(), 0o755) } != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some((u, g)) = owner {
                    // SAFETY: valid fd and C string.
                    unsafe {
                        libc::fchownat(cur.as_raw_fd(), c.as_ptr(), u, g, libc::AT_SYMLINK_NOFOLLOW)
                    };
                }
                openat2(
                    cur.as_raw_fd(),
                    p,
                    libc::O_PATH | libc::O_DIRECTORY,
                    0,
                    BENEATH,
                )?
            }
            Err(e) => return Err(e),
        };
        cur = next;
    }
    if *file == ".." {
        return Err(std::io::Error::from_raw_os_error(libc::EXDEV));
    }
    let fd = openat2(
        cur.as_raw_fd(),
        file,
        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        0o644,
        BENEATH,
    )?;
    let mut f = std::fs::File::from(fd);
    std::io::Write::write_all(&mut f, data)?;
    if let Some((u, g)) = owner {
        let md = f.metadata()?;
        if md.uid() != u || md.gid() != g {
            std::os::unix::fs::fchown(&f, Some(u), Some(g))?;
        }
    }
    Ok(())
}

pub(crate) fn owner() -> Option<(u32, u32)> {
    is_root().then(|| (sandbox_uid(), sandbox_gid()))
}
