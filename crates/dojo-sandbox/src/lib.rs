//! # dojo-sandbox: the floor every stage stands on
//!
//! Pipeline position: **task → sandbox → agent ⇄ policy → trajectory → grade → curate → train**.
//! Every stage that runs code in a repository (agent tools, grading, validation, LSP servers)
//! does it through a [`Sandbox`]: a copy-on-write view of a read-only *pristine tree* mounted at
//! [`WORKSPACE`] (`/testbed`), isolated by user/mount/pid/net namespaces, Landlock and seccomp,
//! and ready in milliseconds.
//!
//! The three building blocks:
//! - [`pristine`]: builds a read-only tree once per (source, commit), content-addressed under
//!   `$DOJO_HOME` (default `~/.cache/dojo`).
//! - [`pyenv`]: builds one shared, read-only Python virtual environment per [`pyenv::EnvSpec`] with `uv`.
//! - [`Sandbox`]: one per rollout: run commands, read/write files, diff, apply patches, reset.
//!
//! This file holds the public contract other crates code against; the isolation machinery lives in
//! the submodules.
//!
//! ## Status: usable
//!
//! The namespace backend works end to end: `PristineStore::open()?.build(&source)?` →
//! `Sandbox::create(&pristine, env.as_ref(), &SandboxOptions::default()).await?` → `exec` /
//! `read_file` / `write_file` / `diff` / `apply_patch` / `reset` → `teardown`.
//!
//! ## Design
//!
//! No helper executable: setup runs in the library, in `pre_exec` closures that only issue
//! async-signal-safe system calls on data prepared before `fork` ([`child`]), so any binary (the
//! `dojo` CLI or another crate's test binary) can create sandboxes. Per sandbox a *holder* (pid 1
//! of its own pid namespace, in its own user/mount/net namespaces, running as the unprivileged
//! host uid [`ns::sandbox_uid`] mapped to root inside) builds a new root: host directories bound
//! read-only, overlayfs (`userxattr`) at `/testbed` whose upper dir shares one size-capped tmpfs
//! with the private `/tmp` ([`Limits::workspace_bytes`]: a disk fill ends in `ENOSPC` inside the
//! sandbox, never on the host), the venv read-only at `/venv`, `$DOJO_HOME` hidden, `lo` up.
//! Then pid 1 re-executes the calling binary as the in-sandbox *launcher* (module `launcher`): a small
//! single-threaded process that forks each command on request (stdio passed over a unix socket)
//! into a fresh pid namespace of its own (so everything it started, `setsid` escapees included,
//! dies with it: at exit, timeout or teardown), with rlimits, Landlock (writes only in /testbed,
//! /tmp, /dev/shm) and a seccomp filter. While idle the launcher keeps the next command's
//! supervisor pre-warmed (already pid 1 of a fresh pid + mount namespace with its own `/proc`,
//! the filter installed), which takes the namespace setup off the command's critical path; each
//! spare serves one command only. Reset starts a fresh holder over a new upper dir (new
//! /tmp too) and kills the old one (its tmpfs goes with it).
//!
//! Why a launcher inside the sandbox rather than joining the namespaces per command: joining
//! means forking the caller, whose page tables grow with its memory: with a 512 MB caller (a
//! rollout holding a model) each command cost ~150–280 ms instead of ~2–4 ms through the
//! launcher (benchmarks/results/sandbox.md). Why no separate helper executable: other crates'
//! test binaries must be able to create sandboxes, and a binary built for another package cannot
//! be located reliably from them; every binary linking this crate carries the launcher (an
//! `.init_array` hook). The per-command `setns` path remains for kept sandboxes re-attached by
//! id, for [`Sandbox::spawn`] (a tokio child the caller owns) and when the launcher cannot start.

//! Environment: `DOJO_HOME` (cache root), `DOJO_SANDBOX_UID` (sandbox uid when running as root,
//! default 1600000), `DOJO_SANDBOX_BACKEND` (`namespace` | `fallback`, overrides `Auto`),
//! `DOJO_CGROUP=off`, `DOJO_LANDLOCK=off`, `DOJO_SANDBOX_PREWARM=0` (no pre-warmed supervisor:
//! ~0.3 ms more per command, ~100 KiB and two namespaces less per idle sandbox), `DOJO_UV` / `DOJO_PYTOOLS` (where `uv` is; without
//! either, nor `uv` on PATH, the pinned uv wheel is fetched from PyPI once: [`uv`]).
//!
//! Semantics worth knowing: background processes a command leaves behind are killed when the
//! command's main process exits (use [`Sandbox::spawn`] for long-running servers); `$HOME` is
//! `/tmp`; the user inside is root (uid 0), which is the host's sandbox uid outside.

pub mod cgroup;
mod child;
pub mod doctor;
mod exec;
mod fallback;
mod launcher;
pub mod ns;
pub mod patch;
pub mod pristine;
pub mod pyenv;
pub mod registry;
pub mod sys;
pub mod trash;
pub mod uv;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[doc(hidden)]
pub use launcher::set_prewarm;
pub use ns::VENV_PATH;

pub use pristine::{Pristine, PristineStore, Source};
pub use pyenv::{EnvSpec, PythonEnv};

/// Where the workspace is mounted inside every sandbox. Editable installs point here, so each
/// rollout imports its own copy of the project.
pub const WORKSPACE: &str = "/testbed";

/// Errors of the sandbox layer. Every variant is an *infrastructure* failure: callers must never
/// score these as the agent's failure.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("sandbox setup failed: {0}")]
    Setup(String),
    #[error("building pristine tree for {source_desc} failed: {reason}")]
    Pristine { source_desc: String, reason: String },
    #[error("building Python environment {spec} failed: {reason}")]
    Env { spec: String, reason: String },
    #[error("path {0:?} leaves the workspace")]
    PathEscape(String),
    #[error("I/O error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("sandbox {0} is gone (torn down or its holder died)")]
    Gone(String),
    #[error("{0}")]
    Other(String),
}

pub type Result<T, E = SandboxError> = std::result::Result<T, E>;

/// Which isolation backend a sandbox uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum BackendKind {
    /// Pick namespaces+overlay when the host supports them, else fail loudly unless the
    /// fallback was explicitly allowed.
    #[default]
    Auto,
    /// User/mount/pid/net namespaces + overlayfs + Landlock + seccomp.
    Namespace,
    /// `git clone --shared`/copy + process-group control; weaker isolation, announced loudly.
    Fallback,
}

/// Resource limits applied to every command in a sandbox.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    pub memory_bytes: Option<u64>,
    pub max_processes: Option<u64>,
    pub max_file_size_bytes: Option<u64>,
    pub max_open_files: Option<u64>,
    pub cpu_quota_percent: Option<u32>,
    /// Total writable space of the sandbox (namespace backend): the overlay's upper dir and the
    /// private /tmp share one size-limited tmpfs mounted inside the sandbox, so filling it gives
    /// `ENOSPC` in the sandbox and never touches the host's disk. The cap is at most half of
    /// `memory_bytes`: tmpfs pages are memory, charged to the sandbox's memory cgroup (nothing is
    /// allocated until written). `None`: the upper dir lives on the host's disk under
    /// `$DOJO_HOME` (no total cap; only `max_file_size_bytes` bounds each file) and /tmp is a
    /// tmpfs of its own.
    #[serde(default)]
    pub workspace_bytes: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: Some(4 << 30),
            max_processes: Some(512),
            max_file_size_bytes: Some(1 << 30),
            max_open_files: Some(4096),
            cpu_quota_percent: None,
            workspace_bytes: Some(2 << 30),
        }
    }
}

/// How to create a sandbox.
#[derive(Debug, Clone, Default)]
pub struct SandboxOptions {
    pub backend: BackendKind,
    pub limits: Limits,
    /// Extra environment variables for every command.
    pub env: BTreeMap<String, String>,
    /// Keep the sandbox alive after this process exits (the holder detaches; it is recorded in
    /// the registry under `$DOJO_HOME/sandboxes` and removed with `dojo sandbox rm ID`).
    pub keep: bool,
}

/// One command to run inside a sandbox.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    /// argv; use [`ExecRequest::shell`] for a bash script.
    pub argv: Vec<String>,
    /// Working directory inside the sandbox (default [`WORKSPACE`]).
    pub cwd: Option<String>,
    pub env: BTreeMap<String, String>,
    pub stdin: Option<Vec<u8>>,
    /// TERM at the timeout, KILL of the whole process tree after `grace`.
    pub timeout: Duration,
    pub grace: Duration,
    /// Head and tail byte caps applied to each of stdout and stderr.
    pub output_cap: OutputCap,
}

#[derive(Debug, Clone, Copy)]
pub struct OutputCap {
    pub head: usize,
    pub tail: usize,
}

impl Default for OutputCap {
    fn default() -> Self {
        OutputCap {
            head: 1 << 20,
            tail: 1 << 20,
        }
    }
}

impl ExecRequest {
    pub fn new<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ExecRequest {
            argv: argv.into_iter().map(Into::into).collect(),
            cwd: None,
            env: BTreeMap::new(),
            stdin: None,
            timeout: Duration::from_secs(120),
            grace: Duration::from_secs(2),
            output_cap: OutputCap::default(),
        }
    }
    /// `bash -c script`.
    pub fn shell(script: impl Into<String>) -> Self {
        Self::new(["bash".to_string(), "-c".to_string(), script.into()])
    }
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }
    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }
    pub fn stdin(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(data.into());
        self
    }
    pub fn grace(mut self, g: Duration) -> Self {
        self.grace = g;
        self
    }
    pub fn output_cap(mut self, head: usize, tail: usize) -> Self {
        self.output_cap = OutputCap { head, tail };
        self
    }
}

/// What a command did.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ExecOutput {
    /// Exit code; `None` when killed by a signal (see `signal`).
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// True when bytes were dropped between head and tail.
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub timed_out: bool,
    pub duration: Duration,
}

impl ExecOutput {
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }
    pub fn stdout_lossy(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn stderr_lossy(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// Which step of the SWE-bench harness's fallback chain applied a patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApplyMethod {
    GitApply,
    GitApplyReject,
    PatchFuzz,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ApplyOutcome {
    /// `None` when every method failed.
    pub method: Option<ApplyMethod>,
    /// Combined output of the attempts, for the log.
    pub log: String,
}

impl ApplyOutcome {
    pub fn applied(&self) -> bool {
        self.method.is_some()
    }
}

/// A long-running process inside the sandbox with piped stdio (language servers).
///
/// `child` is the supervisor: killing it (or dropping it: `kill_on_drop`) kills the process and
/// everything it started.
pub struct SandboxProcess {
    pub child: tokio::process::Child,
}

impl SandboxProcess {
    /// SIGTERM to everything the process started (its supervisor forwards it to the whole pid
    /// namespace); follow with `child.start_kill()` (SIGKILL) after a grace period.
    pub fn terminate(&self) {
        if let Some(pid) = self.child.id() {
            crate::sys::kill_pid(pid as i32, libc::SIGTERM);
        }
    }
}

#[allow(clippy::large_enum_variant)] // one per sandbox; boxing buys nothing
enum Inner {
    Ns(ns::NsSandbox),
    Fallback(fallback::FbSandbox),
}

/// One rollout's isolated workspace. Cheap to create (overlay mount), cheap to reset.
pub struct Sandbox {
    id: String,
    root: PathBuf,
    inner: Inner,
    keep: bool,
    done: bool,
}

/// `$DOJO_HOME/sandboxes`.
pub fn sandboxes_dir() -> PathBuf {
    dojo_cache::dojo_home().join("sandboxes")
}

fn new_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let seed = format!(
        "{t}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    dojo_cache::sha256_hex(seed)[..16].to_string()
}

/// Which backend `Auto` resolves to on this host (probed once). `DOJO_SANDBOX_BACKEND`
/// (`namespace` | `fallback`) overrides it.
pub fn auto_backend() -> BackendKind {
    static B: std::sync::OnceLock<BackendKind> = std::sync::OnceLock::new();
    *B.get_or_init(|| match std::env::var("DOJO_SANDBOX_BACKEND").as_deref() {
        Ok("fallback") => BackendKind::Fallback,
        Ok("namespace") => BackendKind::Namespace,
        _ => {
            if doctor::namespaces_usable() {
                BackendKind::Namespace
            } else {
                let msg = "dojo-sandbox: WARNING: user/mount/pid/net namespaces or overlayfs are \
                           not usable on this host; using the FALLBACK backend (git clone --shared \
                           + process groups): no network isolation, no private /tmp, no uid \
                           change. Run `dojo sandbox doctor` for details.";
                eprintln!("{msg}");
                tracing::warn!("{msg}");
                BackendKind::Fallback
            }
        }
    })
}

impl Sandbox {
    /// Create a sandbox over `pristine`, optionally with a shared Python environment.
    pub async fn create(
        pristine: &Pristine,
        env: Option<&PythonEnv>,
        opts: &SandboxOptions,
    ) -> Result<Sandbox> {
        let id = new_id();
        let base = sandboxes_dir();
        std::fs::create_dir_all(&base).map_err(ns::io_err(&base))?;
        trash::sweep(&base);
        let root = base.join(&id);
        std::fs::create_dir_all(&root).map_err(ns::io_err(&root))?;
        let backend = match opts.backend {
            BackendKind::Auto => auto_backend(),
            b => b,
        };
        let venv = env.map(|e| e.path.as_path());
        let inner = match backend {
            BackendKind::Fallback => {
                fallback::create(&root, &pristine.path, venv, &opts.limits, &opts.env)
                    .map(Inner::Fallback)
            }
            _ => ns::create(ns::CreateArgs {
                id: &id,
                dir: &root,
                lower: &pristine.path,
                venv,
                limits: &opts.limits,
                extra_env: &opts.env,
                keep: opts.keep,
            })
            .await
            .map(Inner::Ns),
        };
        let inner = match inner {
            Ok(i) => i,
            Err(e) => {
                trash::discard(&root);
                return Err(e);
            }
        };
        let sb = Sandbox {
            id,
            root,
            inner,
            keep: opts.keep,
            done: false,
        };
        if opts.keep {
            registry::save(&sb, pristine, env, opts)?;
        }
        Ok(sb)
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Which backend this sandbox uses.
    pub fn backend(&self) -> BackendKind {
        match self.inner {
            Inner::Ns(_) => BackendKind::Namespace,
            Inner::Fallback(_) => BackendKind::Fallback,
        }
    }

    /// The sandbox's directory on the host (upper dirs, registry entry).
    pub fn host_dir(&self) -> &Path {
        &self.root
    }

    /// Pid of the holder process (namespace backend).
    pub fn holder_pid(&self) -> Option<i32> {
        match &self.inner {
            Inner::Ns(n) => Some(n.holder_pid),
            Inner::Fallback(_) => None,
        }
    }

    /// Memory charged to the sandbox's cgroup, when cgroups are in use.
    pub fn memory_usage(&self) -> Option<u64> {
        match &self.inner {
            Inner::Ns(n) => n.cgroup.as_ref().and_then(|c| c.memory_current()),
            Inner::Fallback(_) => None,
        }
    }

    /// Run a command; non-zero exits are *not* errors (see [`ExecOutput`]).
    pub async fn exec(&self, req: &ExecRequest) -> Result<ExecOutput> {
        match &self.inner {
            Inner::Ns(n) => {
                if let Some(l) = &n.launcher {
                    return exec::run_launched(l, &n.request(req)?, req).await;
                }
                let (cmd, r, w, cg) = n.command(req)?;
                let out = exec::run(cmd, r, w, req, &n.live).await;
                drop(cg);
                out
            }
            Inner::Fallback(f) => {
                let (cmd, r, w) = f.command(req)?;
                exec::run(cmd, r, w, req, &f.live).await
            }
        }
    }

    /// Start a long-running process with piped stdin/stdout/stderr inside the sandbox.
    pub async fn spawn(&self, req: &ExecRequest) -> Result<SandboxProcess> {
        let (mut cmd, r, w, cg) = match &self.inner {
            Inner::Ns(n) => n.command(req)?,
            Inner::Fallback(f) => {
                let (c, r, w) = f.command(req)?;
                (c, r, w, Vec::new())
            }
        };
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .map_err(|e| SandboxError::Setup(format!("spawning {:?}: {e}", req.argv)))?;
        drop(w);
        drop(cg);
        let msgs = tokio::task::spawn_blocking(move || exec::read_status(r))
            .await
            .unwrap_or_default();
        if let Some(e) = exec::status_error("starting the process", &msgs) {
            return Err(e);
        }
        Ok(SandboxProcess { child })
    }

    /// An absolute in-sandbox path for `path` (relative paths are relative to [`WORKSPACE`]).
    fn abs(path: &str) -> String {
        if path.starts_with('/') {
            path.to_string()
        } else {
            format!("{WORKSPACE}/{path}")
        }
    }

    /// Split an absolute path into (area, relative) when it lies in /testbed or /tmp.
    fn area(abs: &str) -> Option<(&'static str, String)> {
        for area in [WORKSPACE, "/tmp"] {
            if abs == area {
                return Some((area, String::new()));
            }
            if let Some(rest) = abs.strip_prefix(area).and_then(|r| r.strip_prefix('/')) {
                return Some((area, rest.to_string()));
            }
        }
        None
    }

    fn area_fd(&self, area: &str) -> Result<std::os::fd::OwnedFd> {
        match &self.inner {
            Inner::Ns(n) => n.area_fd(area),
            Inner::Fallback(f) if area == WORKSPACE => f.ws_fd(),
            Inner::Fallback(_) => ns::open_path(Path::new(area)),
        }
    }

    /// Read a file; `path` is absolute inside the sandbox or relative to [`WORKSPACE`].
    ///
    /// Files under /testbed and /tmp are read directly from the host (no process), refusing
    /// symlinks that leave the area; anything else is read by `cat` inside the sandbox, with the
    /// sandbox's own permissions.
    pub async fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        let abs = Self::abs(path);
        if let Some((area, rel)) = Self::area(&abs) {
            match self
                .area_fd(area)
                .and_then(|d| ns::read_beneath(&d, &rel).map_err(ns::io_err(Path::new(&abs))))
            {
                Ok(v) => return Ok(v),
                Err(SandboxError::Io { source, .. })
                    if matches!(
                        source.raw_os_error(),
                        Some(libc::ENOENT) | Some(libc::EISDIR) | Some(libc::ENOTDIR)
                    ) =>
                {
                    return Err(SandboxError::Io { path: abs, source });
                }
                Err(SandboxError::Gone(g)) => return Err(SandboxError::Gone(g)),
                Err(_) => {}
            }
        }
        let out = self
            .exec(&ExecRequest::new(["cat", "--", &abs]).output_cap(usize::MAX / 2, 0))
            .await?;
        if !out.success() {
            return Err(SandboxError::Io {
                path: abs,
                source: std::io::Error::other(out.stderr_lossy().trim().to_string()),
            });
        }
        Ok(out.stdout)
    }

    /// Who owns files the host writes into the workspace: the sandbox uid (namespace backend,
    /// as root), else whoever we are.
    fn file_owner(&self) -> Option<(u32, u32)> {
        match self.inner {
            Inner::Ns(_) => ns::owner(),
            Inner::Fallback(_) => None,
        }
    }

    /// Write a file as the sandbox user (creating parents).
    pub async fn write_file(&self, path: &str, contents: &[u8]) -> Result<()> {
        let abs = Self::abs(path);
        if let Some((area, rel)) = Self::area(&abs)
            && !rel.is_empty()
            && let Ok(d) = self.area_fd(area)
            && ns::write_beneath(&d, &rel, contents, self.file_owner()).is_ok()
        {
            return Ok(());
        }
        let out = self
            .exec(
                &ExecRequest::new([
                    "bash",
                    "-c",
                    "mkdir -p -- \"$(dirname -- \"$1\")\" && cat > \"$1\"",
                    "write_file",
                    &abs,
                ])
                .stdin(contents.to_vec()),
            )
            .await?;
        if !out.success() {
            return Err(SandboxError::Io {
                path: abs,
                source: std::io::Error::other(out.stderr_lossy().trim().to_string()),
            });
        }
        Ok(())
    }

    /// The workspace diff against the pristine tree as a binary-safe git patch (no caches).
    pub async fn diff(&self) -> Result<String> {
        let out = self
            .exec(
                &ExecRequest::new(["bash", "-c", patch::DIFF_SCRIPT])
                    .output_cap(usize::MAX / 2, 0)
                    .timeout(Duration::from_secs(600)),
            )
            .await?;
        if !out.success() {
            return Err(SandboxError::Other(format!(
                "git diff in sandbox {} failed ({:?}): {}",
                self.id,
                out.exit_code,
                out.stderr_lossy().trim()
            )));
        }
        String::from_utf8(out.stdout).map_err(|e| {
            SandboxError::Other(format!("diff of sandbox {} is not UTF-8: {e}", self.id))
        })
    }

    /// Apply a patch with the harness's fallback chain; refuses paths that leave the repository.
    pub async fn apply_patch(&self, patch_text: &str) -> Result<ApplyOutcome> {
        patch::check_patch(patch_text).map_err(|r| SandboxError::PathEscape(r.0))?;
        let name = format!("/tmp/.dojo-patch-{}.diff", new_id());
        self.write_file(&name, patch_text.as_bytes()).await?;
        let out = self
            .exec(
                &ExecRequest::new(["bash", "-c", &patch::apply_script(), "apply", &name])
                    .timeout(Duration::from_secs(300)),
            )
            .await?;
        let log = out.stdout_lossy();
        let method = log
            .lines()
            .find_map(|l| match l.strip_prefix("@@DOJO_APPLIED ") {
                Some("git_apply") => Some(ApplyMethod::GitApply),
                Some("git_apply_reject") => Some(ApplyMethod::GitApplyReject),
                Some("patch_fuzz") => Some(ApplyMethod::PatchFuzz),
                _ => None,
            });
        let _ = self.exec(&ExecRequest::new(["rm", "-f", &name])).await;
        Ok(ApplyOutcome {
            method,
            log: log
                .lines()
                .filter(|l| !l.starts_with("@@DOJO_APPLIED"))
                .collect::<Vec<_>>()
                .join("\n"),
        })
    }

    /// Discard every change (tens of milliseconds): kills running commands, swaps in a fresh
    /// upper dir and /tmp; the old upper dir is deleted in the background.
    pub async fn reset(&mut self) -> Result<()> {
        match &mut self.inner {
            Inner::Ns(n) => {
                n.reset().await?;
                if self.keep {
                    registry::update_holder(&self.root, n.generation, n.holder_pid)?;
                }
                Ok(())
            }
            Inner::Fallback(f) => {
                f.kill_live();
                let out = self
                    .exec(&ExecRequest::shell(
                        "git reset -q --hard dojo-base && git clean -fdxq",
                    ))
                    .await?;
                if !out.success() {
                    return Err(SandboxError::Setup(format!(
                        "fallback reset failed: {}",
                        out.stderr_lossy()
                    )));
                }
                Ok(())
            }
        }
    }

    /// Kill everything and release the workspace.
    pub async fn teardown(mut self) -> Result<()> {
        self.done = true;
        match &mut self.inner {
            Inner::Ns(n) => n.teardown().await,
            Inner::Fallback(f) => f.kill_live(),
        }
        trash::discard(&self.root);
        Ok(())
    }

    /// Leave a `keep` sandbox running after this handle is dropped (the CLI's `--keep`).
    pub fn detach(mut self) -> String {
        self.done = true;
        std::mem::take(&mut self.id)
    }

    /// Re-open a kept sandbox by id (see [`registry`]).
    pub async fn attach(id: &str) -> Result<Sandbox> {
        registry::attach(id)
    }
}

impl Drop for Sandbox {
    /// A sandbox dropped without `teardown` is still cleaned up (synchronously kills, deletes in
    /// the background), unless it is a kept sandbox.
    fn drop(&mut self) {
        if self.done || self.keep {
            return;
        }
        match &mut self.inner {
            Inner::Ns(n) => {
                n.kill_live();
                crate::sys::kill_pid(n.holder_pid, libc::SIGKILL);
                if let Some(cg) = n.cgroup.take() {
                    std::thread::spawn(move || {
                        cg.kill_all();
                        let _ = cg.remove();
                    });
                }
            }
            Inner::Fallback(f) => f.kill_live(),
        }
        trash::discard(&self.root);
    }
}
