//! The namespace backend, caller side: creating the holder, building per-command plans, reset by
//! remounting a fresh upper dir, direct file I/O through `/proc/<holder>/root`, teardown.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use crate::beneath::{open_path, openat2};
use crate::child::{self, EXTRA_SLOTS, ExecPlan, HolderPlan, Layers, Mode, Request, RootEntry};
use crate::cmdenv::{VENV_PATH, base_env, exe_candidates};
use crate::error::{Result, SandboxError, io_err, setup_err, setup_failed};
use crate::exec::{self, LiveSet};
use crate::ids::{chown_to_sandbox, is_root, sandbox_gid, sandbox_uid};
use crate::sys::cstr;
use crate::types::{EnvRuntime, ExecRequest, Limits, WORKSPACE};
use crate::{cgroup, confine, launcher, sys, visible};

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

fn open_ns(pid: i32, kind: &str) -> Result<OwnedFd> {
    let p = PathBuf::from(format!("/proc/{pid}/ns/{kind}"));
    let f = std::fs::File::open(&p).map_err(io_err(&p))?;
    Ok(OwnedFd::from(f))
}

/// The new root's entries, the spots to hide and the `/etc` snapshot to stage, from
/// [`crate::visible`] (prefixed with `/tmp/root`, where the holder builds the root).
fn root_plan(venv: Option<&Path>) -> RootPlan {
    root_entries(&visible::visible(venv))
}

/// What [`root_entries`] makes of the visible paths.
pub(crate) struct RootPlan {
    pub entries: Vec<RootEntry>,
    /// Spots where `$DOJO_HOME` must be covered.
    pub hide: Vec<CString>,
    /// The `/etc` snapshot to stage at `/tmp/etc`.
    pub etc: Option<CString>,
    /// Directories to stage first ([`Layers::extra`]).
    pub extra: Vec<(CString, &'static std::ffi::CStr)>,
}

/// Whether every directory on the way to `p` lets other users through: if not, the sandbox
/// uid cannot bind it by path once it has switched to that uid.
fn others_can_reach(p: &Path) -> bool {
    crate::ids::closed_to_others(p.ancestors().skip(1)).is_none()
}

/// [`RootEntry`]s for the visible paths `shown`, the spots where `$DOJO_HOME` must be covered
/// (all prefixed with `/tmp/root`) and, when there is one, the host path of the `/etc` snapshot
/// ([`visible::etc_snapshot`]) to stage at `/tmp/etc`: it then replaces the `/etc` entries with
/// one bind. A shown directory that other users cannot reach by path is staged too (at most
/// [`EXTRA_SLOTS`] of them) and bound from its staging point. Shared with environment builds.
pub(crate) fn root_entries(shown: &[visible::Visible]) -> RootPlan {
    let at = |p: &Path| cstr(format!("/tmp/root{}", p.display()));
    let etc = visible::etc_snapshot(shown);
    let in_etc = |p: &Path| p.parent() == Some(Path::new("/etc"));
    let mut extra = Vec::new();
    let mut entries = Vec::new();
    for e in shown {
        if etc.is_some() && in_etc(&e.path) {
            continue;
        }
        entries.push(match e.kind {
            visible::Kind::Parent if etc.is_some() && e.path == Path::new("/etc") => {
                RootEntry::Bind {
                    src: cstr("/tmp/etc"),
                    dst: at(&e.path),
                }
            }
            visible::Kind::Dir
                if extra.len() < EXTRA_SLOTS.len() && !others_can_reach(&e.source) =>
            {
                let slot = EXTRA_SLOTS[extra.len()];
                extra.push((path_c(&e.source), slot));
                RootEntry::Bind {
                    src: slot.into(),
                    dst: at(&e.path),
                }
            }
            visible::Kind::Dir => RootEntry::Bind {
                src: path_c(&e.source),
                dst: at(&e.path),
            },
            visible::Kind::File => RootEntry::File {
                src: path_c(&e.source),
                dst: at(&e.path),
            },
            visible::Kind::Symlink => RootEntry::Symlink {
                target: path_c(&e.source),
                dst: at(&e.path),
            },
            visible::Kind::Parent => RootEntry::Dir { dst: at(&e.path) },
        });
    }
    let hide = visible::hidden(shown).iter().map(|p| at(p)).collect();
    RootPlan {
        entries,
        hide,
        etc: etc.as_deref().map(path_c),
        extra,
    }
}

/// A live namespace sandbox (caller side).
pub(crate) struct NsSandbox {
    pub dir: PathBuf,
    pub holder_pid: i32,
    pub holder: Option<tokio::process::Child>,
    pub userns: OwnedFd,
    pub mntns: OwnedFd,
    /// The sandbox's own network namespace (with `network = true`, slirp4netns routes it).
    pub netns: OwnedFd,
    pub lower: PathBuf,
    pub venv: Option<PathBuf>,
    pub runtime: EnvRuntime,
    /// /venv is a private copy-on-write overlay (see [`crate::SandboxOptions::writable_venv`]).
    pub venv_writable: bool,
    pub keep: bool,
    pub generation: u32,
    pub cgroup: Option<Box<dyn cgroup::CgroupHandle>>,
    /// The in-sandbox launcher serving [`crate::Sandbox::exec`], when it started.
    pub launcher: Option<launcher::Client>,
    pub live: LiveSet,
    pub env: BTreeMap<String, String>,
    pub limits: Limits,
}

/// The affinity mask of `cpus = n`: the first `n` CPUs this process may run on (all of them
/// when it may run on fewer), so `nproc` inside the sandbox says `n`.
pub(crate) fn cpu_mask(n: u32) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is plain bits; the libc macros only touch the set given.
    unsafe {
        let mut mine: libc::cpu_set_t = std::mem::zeroed();
        let ok = libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut mine) == 0;
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let mut left = n.max(1);
        for cpu in 0..libc::CPU_SETSIZE as usize {
            if left == 0 {
                break;
            }
            if !ok || libc::CPU_ISSET(cpu, &mine) {
                libc::CPU_SET(cpu, &mut set);
                left -= 1;
            }
        }
        set
    }
}

/// `<sandbox dir>/layer-<generation>`, holding the overlay's `upper/` and `work/`.
pub(crate) fn layer_dir(dir: &Path, generation: u32) -> PathBuf {
    dir.join(format!("layer-{generation}"))
}

pub(crate) fn make_layer_dir(dir: &Path, generation: u32) -> Result<PathBuf> {
    let l = layer_dir(dir, generation);
    for d in [
        l.clone(),
        l.join("upper"),
        l.join("work"),
        l.join("vupper"),
        l.join("vwork"),
    ] {
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
    pub runtime: &'a EnvRuntime,
    pub venv_writable: bool,
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

/// What a holder mounts: the pristine tree, the venv, the environment's tree layer, network
/// and CPUs, and whether /venv is a private writable overlay.
#[derive(Clone, Copy)]
struct Filesystems<'a> {
    lower: &'a Path,
    venv: Option<&'a Path>,
    rt: &'a EnvRuntime,
    venv_writable: bool,
}

fn path_c(p: &Path) -> CString {
    cstr(p.as_os_str().as_encoded_bytes())
}

async fn start_holder(
    dir: &Path,
    generation: u32,
    fs: &Filesystems<'_>,
    cg: Option<&dyn cgroup::CgroupHandle>,
    keep: bool,
    limits: &Limits,
) -> Result<Holder> {
    let tried_launcher = launcher::exe_fd().is_some();
    match start_holder_once(dir, generation, fs, cg, keep, limits).await {
        // The launcher took pid 1 down with it (see `launcher::disable`): once more, without.
        Err(_) if tried_launcher && launcher::exe_fd().is_none() => {
            start_holder_once(dir, generation, fs, cg, keep, limits).await
        }
        r => r,
    }
}

/// The descriptors the holder is handed (open until it is spawned).
struct HolderFds {
    /// The status pipe's write end.
    status_w: RawFd,
    /// The cgroup's `cgroup.procs` files, to join.
    cgroup_procs: Vec<RawFd>,
    /// The launcher's executable, when sandboxes use it.
    exe: Option<RawFd>,
    /// The holder's end of the launcher's socket pair.
    launcher_sock: Option<RawFd>,
}

/// Everything the holder does, prepared in the parent (paths, mount options, maps, the
/// descriptors in `fds`), since the child may only make async-signal-safe calls.
fn holder_plan(
    fs: &Filesystems<'_>,
    layer: &Path,
    keep: bool,
    limits: &Limits,
    fds: HolderFds,
) -> HolderPlan {
    let Filesystems {
        lower,
        venv,
        rt,
        venv_writable,
    } = *fs;
    let uid = sandbox_uid();
    let gid = sandbox_gid();
    let RootPlan {
        entries,
        hide,
        etc,
        extra,
    } = root_plan(venv);
    HolderPlan {
        switch_to: is_root().then_some((uid, gid)),
        keep,
        status_w: fds.status_w,
        lifeline_r: (!keep).then(exec::lifeline_r),
        layers: Layers {
            lower: Some(path_c(lower)),
            tree: rt.tree.as_deref().map(path_c),
            layer: path_c(layer),
            venv: venv.map(path_c),
            cache: None,
            etc,
            extra,
        },
        cgroup_procs: fds.cgroup_procs,
        uid_map: cstr(format!("0 {uid} 1\n")),
        gid_map: cstr(format!("0 {gid} 1\n")),
        entries,
        hide,
        tmp_opts: cstr(format!("mode=1777,size={}", tmp_size(limits))),
        layer_tmpfs: workspace_size(limits).map(|b| cstr(format!("mode=0755,size={b}"))),
        shm_opts: cstr("mode=1777,size=256m"),
        launcher: fds.exe.zip(fds.launcher_sock),
        prewarm: launcher::prewarm(),
        launcher_env: fds.exe.and_then(|_| launcher::loader_env()),
        scrub: sys::cmdline_areas(),
        cpus: rt.cpus.map(cpu_mask),
        venv_writable: venv_writable && venv.is_some(),
    }
}

/// What the holder reported on its status pipe until it closed it, and the launcher's client
/// when it set up and the launcher answers; a launcher that does not answer a holder that set
/// up is turned off for the sandboxes to come.
async fn holder_status(
    status_r: OwnedFd,
    ours: Option<OwnedFd>,
    with_launcher: bool,
) -> (Vec<(u32, i32, i32)>, Option<launcher::Client>) {
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
    if with_launcher && client.is_none() && msgs.iter().any(|m| m.0 == sys::TAG_OK) {
        launcher::disable();
    }
    (msgs, client)
}

async fn start_holder_once(
    dir: &Path,
    generation: u32,
    fs: &Filesystems<'_>,
    cg: Option<&dyn cgroup::CgroupHandle>,
    keep: bool,
    limits: &Limits,
) -> Result<Holder> {
    let Filesystems {
        lower, venv, rt, ..
    } = *fs;
    let layer = make_layer_dir(dir, generation)?;
    // Checked here: the holder could only report a failed mount.
    if let Some(p) = [lower, &layer]
        .into_iter()
        .chain(venv)
        .chain(rt.tree.as_deref())
        .find(|p| !p.is_dir())
    {
        return Err(setup_err(format!("{} is not a directory", p.display())));
    }
    let cg_fds = open_procs(cg)?;
    let (status_r, status_w) = exec::pipe().map_err(|e| setup_failed("pipe", e))?;
    let exe = launcher::exe_fd();
    let socks = match exe {
        Some(_) => Some(launcher::socketpair().map_err(|e| setup_failed("socketpair", e))?),
        None => None,
    };
    let plan = holder_plan(
        fs,
        &layer,
        keep,
        limits,
        HolderFds {
            status_w: status_w.as_raw_fd(),
            cgroup_procs: cg_fds.iter().map(|f| f.as_raw_fd()).collect(),
            exe,
            launcher_sock: socks.as_ref().map(|s| s.1.as_raw_fd()),
        },
    );
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
        .map_err(|e| setup_failed("starting the sandbox holder", e))?;
    drop(status_w);
    drop(cg_fds);
    let ours = socks.map(|(ours, theirs)| {
        drop(theirs);
        ours
    });
    let (msgs, client) = holder_status(status_r, ours, exe.is_some()).await;
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
    let (userns, mntns, netns) = (open("user")?, open("mnt")?, open("net")?);
    if rt.network {
        let host_loopback = rt.host_loopback || crate::usernet::host_loopback_from_env();
        tokio::task::spawn_blocking(move || crate::usernet::attach(pid, host_loopback))
            .await
            .unwrap_or_else(|e| Err(setup_failed("attaching slirp4netns", e)))
            .inspect_err(|_| kill())?;
    }
    Ok(Holder {
        pid,
        child,
        userns,
        mntns,
        netns,
        launcher: client,
    })
}

pub(crate) async fn create(a: CreateArgs<'_>) -> Result<NsSandbox> {
    let cg = match cgroup::detect() {
        Some(d) => Some(d.create(a.id, a.limits).map_err(|e| {
            setup_failed(
                format!("creating the {} cgroup for sandbox {}", d.version(), a.id),
                e,
            )
        })?),
        None => None,
    };
    let fs = Filesystems {
        lower: a.lower,
        venv: a.venv,
        rt: a.runtime,
        venv_writable: a.venv_writable,
    };
    let h = match start_holder(a.dir, 0, &fs, cg.as_deref(), a.keep, a.limits).await {
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
        runtime: a.runtime.clone(),
        // As the holder sees it (no venv: nothing to write), so that the rules a request asks
        // for are the ones the launcher's spares pre-build.
        venv_writable: a.venv_writable && a.venv.is_some(),
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
    /// Re-open a kept sandbox from its registry entry: the namespaces of its holder, when the
    /// holder recorded there is still the same process.
    pub(crate) fn attach(id: &str, dir: &Path, st: &crate::registry::State) -> Result<NsSandbox> {
        let pid = st.holder_pid.ok_or_else(|| SandboxError::Gone(id.into()))?;
        if crate::registry::start_time(pid) != st.holder_start || st.holder_start.is_none() {
            return Err(SandboxError::Gone(format!(
                "{id} (holder {pid} is not running)"
            )));
        }
        Ok(NsSandbox {
            dir: dir.to_path_buf(),
            holder_pid: pid,
            holder: None,
            userns: open_ns(pid, "user")?,
            mntns: open_ns(pid, "mnt")?,
            netns: open_ns(pid, "net")?,
            lower: st.lower.clone(),
            venv: st.venv.clone(),
            runtime: st.runtime.clone(),
            venv_writable: st.venv_writable,
            keep: true,
            generation: st.generation,
            cgroup: cgroup::detect().map(|d| d.open(id)),
            launcher: None,
            live: Default::default(),
            env: base_env(st.venv.as_ref().map(|_| VENV_PATH), &st.env),
            limits: st.limits.clone(),
        })
    }

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
    pub(crate) fn request(&self, req: &ExecRequest) -> Result<Request> {
        if req.argv.is_empty() {
            return Err(SandboxError::Other("empty argv".into()));
        }
        let mut env = self.env.clone();
        for (k, v) in &req.env {
            env.insert(k.clone(), v.clone());
        }
        env.insert("PWD".into(), Self::cwd(req));
        let landlock = confine::landlock_paths(self.venv_writable);
        let exe_candidates = exe_candidates(&req.argv[0], &env)
            .into_iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        Ok(Request {
            argv: req.argv.clone(),
            env: env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            cwd: Self::cwd(req),
            exe_candidates,
            rlimits: confine::rlimits(
                &self.limits,
                self.cgroup.as_ref().is_some_and(|c| c.limits_memory()),
            ),
            landlock_abi: confine::landlock_abi(),
            landlock_full: landlock.0.into_iter().map(String::from).collect(),
            landlock_files: landlock.1.into_iter().map(String::from).collect(),
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
        let (status_r, status_w) = exec::pipe().map_err(|e| setup_failed("pipe", e))?;
        let mut plan = ExecPlan::from_request(
            &request,
            Mode::Namespaces {
                userns: self.userns.as_raw_fd(),
                mntns: self.mntns.as_raw_fd(),
                netns: self.netns.as_raw_fd(),
                host_root: is_root(),
                cpus: self.runtime.cpus.map(cpu_mask),
            },
            status_w.as_raw_fd(),
            exec::lifeline_r(),
            cg_fds.iter().map(|f| f.as_raw_fd()).collect(),
            Some(confine::seccomp_prog()),
        );
        plan.scrub = Some(sys::cmdline_areas());
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
        let fs = Filesystems {
            lower: &self.lower,
            venv: self.venv.as_deref(),
            rt: &self.runtime,
            venv_writable: self.venv_writable,
        };
        let h = start_holder(
            &self.dir,
            generation,
            &fs,
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
