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
//! - [`pyenv`]: builds one shared, read-only Python virtual environment per [`pyenv::PythonEnvSpec`] with `uv`.
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
//! host uid `testing::sandbox_uid` mapped to root inside) builds a new root: a minimal read-only
//! view of the host ([`visible`]: the system directories, a few `/etc` entries, the venv's
//! interpreter and the language-server tools; no home, `/var`, `/run`, checkout or task file,
//! so no host unix socket either), overlayfs (`userxattr`) at `/testbed` whose upper dir shares one size-capped tmpfs
//! with the private `/tmp` ([`Limits::workspace_bytes`]: a disk fill ends in `ENOSPC` inside the
//! sandbox, never on the host), the venv read-only at `/venv`, `$DOJO_HOME` hidden, `lo` up.
//! Then pid 1 re-executes the calling binary as the in-sandbox *launcher* (module `launcher`): a small
//! single-threaded process that forks each command on request (stdio passed over a unix socket)
//! into a fresh pid namespace of its own (so everything it started, `setsid` escapees included,
//! dies with it: at exit, timeout or teardown), with rlimits, Landlock (writes only in /testbed,
//! /tmp, /dev/shm) and a seccomp filter. While idle the launcher keeps two supervisors
//! pre-warmed (each already pid 1 of a fresh pid + mount namespace with its own `/proc`, the
//! filter installed, the Landlock ruleset built, and the command's own process started, waiting
//! for the request), which takes the namespace setup and the fork off the command's critical
//! path; each spare serves one command only. Reset starts a fresh holder over a new upper dir
//! (new /tmp too) and kills the old one (its tmpfs goes with it).
//!
//! Why a launcher inside the sandbox rather than joining the namespaces per command: joining
//! means forking the caller, whose page tables grow with its memory: with a 512 MB caller (a
//! rollout holding a model) each command cost ~150–280 ms instead of ~2–4 ms through the
//! launcher (benchmarks/results/sandbox.md). Why no separate helper executable: other crates'
//! test binaries must be able to create sandboxes, and a binary built for another package cannot
//! be located reliably from them; every binary linking this crate carries the launcher (an
//! `.init_array` hook). The per-command `setns` path remains for kept sandboxes re-attached by
//! id, for [`Sandbox::spawn`] (a tokio child the caller owns) and when the launcher cannot start.
//!
//! ## What crosses back to the host
//!
//! Nothing a sandbox makes reaches the host's memory unbounded: command output is capped per
//! request ([`ExecRequest::output_cap`]), and [`Sandbox::diff`] and [`Sandbox::read_file`] by
//! [`TransferCaps`] (10 MiB of patch, 32 MiB of file by default), read through bounded buffers;
//! over a cap they fail with [`SandboxError::TooLarge`], the one error that is the agent's
//! doing. The diff base is the commit id the host read from the pristine tree, not a ref the
//! agent can move, and git reads it (objects, index, excludes) from the pristine tree's `.git`
//! bound read-only at `/.dojo-base`, never from the workspace's `.git`: a forged object, a
//! replace ref or an alternates file there changes nothing ([`patch`]'s diff script). Crashed
//! processes' sandbox directories and cgroups are swept by the next one ([`leftovers`]).
//!
//! ## Escape suite
//!
//! Every behaviour below is a test against the real kernel features: **34 behaviours tried, 0
//! succeed**. `tests/isolation.rs`: 15 (writes anywhere outside /testbed and /tmp, another
//! rollout's workspace, the pristine tree and venv, host loopback, fork/memory/disk bombs, the
//! workspace cap, setsid daemons, SIGTERM-ignoring loops, symlinks out of the repository,
//! signalling host processes, ptrace, uid changes, mount and namespace calls).
//! `tests/escape.rs`: 12 (a host unix socket, host homes/services/checkout/task files, /sys
//! interfaces and cgroups, io_uring, /tmp's mode through both command paths, a moved base tag,
//! a forged base object, a replace ref and an alternates file under the base, pid 1's command
//! line and environment, a patch and a file over the caps). `tests/home_hidden.rs`: 2
//! (`$DOJO_HOME` written through `..` and through a symlink). `tests/sweep.rs`: 1 (leftovers of
//! processes killed with SIGKILL). `tests/pyenv.rs`: 3 (an environment build's code reading host
//! trees and task files, writing to the host, reading the caller's environment). Outside this
//! crate, `dojo-grade/tests/hostile_conftest.rs`: 1 (a model patch's `conftest.py` connecting to
//! a host unix socket during grading). An adversarial review had tried 56 escape and abuse
//! behaviours and 13 grading attacks; the 6 that got through are among these, each test failing
//! before its fix.

//! Environment: `DOJO_HOME` (cache root), `DOJO_SANDBOX_UID` (sandbox uid when running as root,
//! default 1600000), `DOJO_SANDBOX_BACKEND` (`namespace` | `fallback`, overrides `Auto`),
//! `DOJO_CGROUP=off`, `DOJO_LANDLOCK=off`, `DOJO_SANDBOX_PREWARM=0` (no pre-warmed supervisor:
//! ~0.3 ms more per command, ~100 KiB and two namespaces less per idle sandbox), `DOJO_UV` / `DOJO_PYTOOLS` (where `uv` is; without
//! either, nor `uv` on PATH, the pinned uv wheel is fetched from PyPI once: [`uv`]),
//! `DOJO_TOOLS` / `DOJO_NODE` (language-server tools and Node.js, shown inside: [`visible`]),
//! `DOJO_PATCH_CAP` / `DOJO_READ_CAP` (bytes: the default [`TransferCaps`]).
//!
//! Semantics worth knowing: background processes a command leaves behind are killed when the
//! command's main process exits (use [`Sandbox::spawn`] for long-running servers); `$HOME` is
//! `/tmp`; the user inside is root (uid 0), which is the host's sandbox uid outside.

mod beneath;
pub mod cgroup;
mod child;
mod cmdenv;
mod confine;
pub mod doctor;
mod error;
mod exec;
mod fallback;
mod ids;
mod launcher;
pub mod leftovers;
mod ns;
pub mod passthrough;
pub mod patch;
pub mod pristine;
pub mod pyenv;
pub mod registry;
mod sys;
pub mod trash;
mod types;
pub mod usernet;
pub mod uv;
pub mod visible;
pub mod workspace;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use cmdenv::VENV_PATH;
pub use doctor::auto_backend;
pub use error::{BuildError, Result, SandboxError};
#[doc(hidden)]
pub use launcher::client::set_prewarm;
pub use passthrough::PassThrough;
pub use pristine::{Pristine, PristineStore, Source};
pub use pyenv::{PythonEnv, PythonEnvSpec};
pub use registry::sandboxes_dir;
pub use types::{
    ApplyMethod, ApplyOutcome, BackendKind, EnvRuntime, ExecOutput, ExecRequest, Limits, OutputCap,
    SYSTEM_PATH, SandboxOptions, TransferCaps, UnknownBackend, WORKSPACE,
};
pub use workspace::{LocalWorkspace, Workspace};

use error::io_err;

/// What the crate's integration tests need from its private modules. Not an API.
#[doc(hidden)]
pub mod testing {
    pub use crate::confine::kernel_landlock_abi as landlock_abi;
    pub use crate::ids::{is_root, sandbox_uid};
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
    caps: TransferCaps,
    /// The pristine tree's base commit (object id), read on the host at creation: diffs are
    /// taken against it, never against a ref the agent can move.
    base: Option<String>,
    /// The Python environment's directory on the host, if the sandbox has one.
    venv: Option<PathBuf>,
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

impl Sandbox {
    /// Create a sandbox over `pristine`, optionally with a shared Python environment.
    pub async fn create(
        pristine: &Pristine,
        env: Option<&PythonEnv>,
        opts: &SandboxOptions,
    ) -> Result<Sandbox> {
        let id = new_id();
        let base = sandboxes_dir();
        std::fs::create_dir_all(&base).map_err(io_err(&base))?;
        trash::sweep(&base);
        leftovers::sweep_once();
        let root = base.join(&id);
        std::fs::create_dir_all(&root).map_err(io_err(&root))?;
        if let Err(e) = leftovers::record_owner(&root) {
            trash::discard(&root);
            return Err(e);
        }
        let backend = match opts.backend {
            BackendKind::Auto => auto_backend(),
            b => b,
        };
        let venv = env.map(|e| e.path.as_path());
        let runtime = env.map(|e| e.runtime.clone()).unwrap_or_default();
        let inner = match backend {
            BackendKind::Fallback => fallback::create(
                &root,
                &pristine.path,
                venv,
                runtime.tree.as_deref(),
                &opts.limits,
                &opts.env,
            )
            .map(Inner::Fallback),
            _ => ns::create(ns::CreateArgs {
                id: &id,
                dir: &root,
                lower: &pristine.path,
                venv,
                runtime: &runtime,
                venv_writable: opts.writable_venv,
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
            caps: opts.caps,
            base: patch::base_commit(&pristine.path),
            venv: env.map(|e| e.path.clone()),
        };
        if opts.keep {
            sb.save_state(pristine, env, opts)?;
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

    /// The host directory of the sandbox's Python environment (shown read-only at `/venv`,
    /// or under a private copy-on-write layer), if it has one.
    pub fn venv_path(&self) -> Option<&Path> {
        self.venv.as_deref()
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
            .map_err(|e| crate::error::setup_failed(format!("spawning {:?}", req.argv), e))?;
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
            Inner::Fallback(_) => beneath::open_path(Path::new(area)),
        }
    }

    /// Read a file; `path` is absolute inside the sandbox or relative to [`WORKSPACE`].
    ///
    /// Files under /testbed and /tmp are read directly from the host (no process), refusing
    /// symlinks that leave the area; anything else is read by `cat` inside the sandbox, with the
    /// sandbox's own permissions.
    pub async fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        let abs = Self::abs(path);
        let limit = self.caps.read_bytes;
        let too_large = || SandboxError::TooLarge {
            what: "file",
            limit,
        };
        if let Some((area, rel)) = Self::area(&abs) {
            match self.area_fd(area).and_then(|d| {
                beneath::read_beneath(&d, &rel, limit).map_err(io_err(Path::new(&abs)))
            }) {
                Ok(v) => return Ok(v),
                Err(SandboxError::Io { source, .. })
                    if source.raw_os_error() == Some(libc::EFBIG) =>
                {
                    return Err(too_large());
                }
                Err(SandboxError::Io { source, .. })
                    if matches!(
                        source.raw_os_error(),
                        Some(libc::ENOENT) | Some(libc::EISDIR) | Some(libc::ENOTDIR)
                    ) =>
                {
                    return Err(SandboxError::Io { path: abs, source });
                }
                Err(e @ (SandboxError::Gone(_) | SandboxError::GoneFrom { .. })) => return Err(e),
                Err(_) => {}
            }
        }
        let cap = (limit + 1).to_string();
        let out = self
            .exec(&ExecRequest::new(["head", "-c", &cap, "--", &abs]).output_cap(limit + 1, 0))
            .await?;
        if !out.success() {
            return Err(SandboxError::Io {
                path: abs,
                source: std::io::Error::other(out.stderr_lossy().trim().to_string()),
            });
        }
        if out.stdout.len() > limit {
            return Err(too_large());
        }
        Ok(out.stdout)
    }

    /// Who owns files the host writes into the workspace: the sandbox uid (namespace backend,
    /// as root), else whoever we are.
    fn file_owner(&self) -> Option<(u32, u32)> {
        match self.inner {
            Inner::Ns(_) => ids::owner(),
            Inner::Fallback(_) => None,
        }
    }

    /// Write a file as the sandbox user (creating parents).
    pub async fn write_file(&self, path: &str, contents: &[u8]) -> Result<()> {
        let abs = Self::abs(path);
        if let Some((area, rel)) = Self::area(&abs)
            && !rel.is_empty()
            && let Ok(d) = self.area_fd(area)
            && beneath::write_beneath(&d, &rel, contents, self.file_owner()).is_ok()
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

    /// The workspace diff against the pristine tree as a binary-safe git patch (no caches),
    /// against the base commit recorded on the host when the sandbox was created. A patch over
    /// [`TransferCaps::patch_bytes`] fails with [`SandboxError::TooLarge`] ("patch too large",
    /// the agent's doing) having held at most the cap in memory.
    pub async fn diff(&self) -> Result<String> {
        let limit = self.caps.patch_bytes;
        let out = self
            .exec(
                &self
                    .diff_request(limit + 1)
                    .output_cap(limit + 1, 0)
                    .timeout(Duration::from_secs(600)),
            )
            .await?;
        // Over the cap whatever git made of the broken pipe.
        if out.stdout.len() > limit {
            return Err(SandboxError::TooLarge {
                what: "patch",
                limit,
            });
        }
        if !out.success() {
            return Err(self.diff_failed(out.exit_code, &out.stderr_lossy()));
        }
        String::from_utf8(out.stdout)
            .map_err(|e| error::failed(format!("diff of sandbox {} is not UTF-8", self.id), e))
    }

    /// The same diff as [`Sandbox::diff`], streamed into `out` whatever its size, holding a
    /// pipe buffer's worth at a time (`dojo sandbox diff` of a workspace the agent filled with
    /// gigabytes). Returns the bytes written. No time limit: the caller decides when to stop
    /// (dropping the future kills the diff).
    pub async fn diff_to<W>(&self, out: &mut W) -> Result<u64>
    where
        W: tokio::io::AsyncWrite + Unpin,
    {
        use tokio::io::AsyncReadExt;
        let mut p = self.spawn(&self.diff_request(i64::MAX as usize)).await?;
        drop(p.child.stdin.take());
        let (Some(mut stdout), Some(stderr)) = (p.child.stdout.take(), p.child.stderr.take())
        else {
            return Err(SandboxError::Other("diff process without pipes".into()));
        };
        // git's stderr is a few lines; keep at most 64 KiB of it.
        let err = tokio::spawn(async move {
            let mut e = Vec::new();
            let _ = stderr.take(64 << 10).read_to_end(&mut e).await;
            e
        });
        // 1 MiB reads: fewer wakeups than `copy`'s 8 KiB for a diff of gigabytes.
        let mut stdout = tokio::io::BufReader::with_capacity(1 << 20, &mut stdout);
        let n = tokio::io::copy_buf(&mut stdout, out)
            .await
            .map_err(|e| error::failed(format!("streaming the diff of {}", self.id), e))?;
        let status = p
            .child
            .wait()
            .await
            .map_err(|e| error::failed(format!("waiting for the diff of {}", self.id), e))?;
        if !status.success() {
            let e = err.await.unwrap_or_default();
            return Err(self.diff_failed(status.code(), &String::from_utf8_lossy(&e)));
        }
        Ok(n)
    }

    /// The diff script with its arguments, stopping after `cap` bytes.
    fn diff_request(&self, cap: usize) -> ExecRequest {
        let base = self.base.as_deref().unwrap_or(pristine::BASE_TAG);
        let base_git = match &self.inner {
            Inner::Ns(_) => patch::BASE_GIT_DIR.to_string(),
            Inner::Fallback(f) => f.lower.join(".git").display().to_string(),
        };
        ExecRequest::new([
            "bash",
            "-c",
            patch::DIFF_SCRIPT,
            "diff",
            &cap.to_string(),
            base,
            &base_git,
        ])
    }

    fn diff_failed(&self, code: Option<i32>, stderr: &str) -> SandboxError {
        SandboxError::Other(format!(
            "git diff in sandbox {} failed ({code:?}): {}",
            self.id,
            stderr.trim()
        ))
    }

    /// Apply a patch with the harness's fallback chain; refuses paths that leave the repository.
    pub async fn apply_patch(&self, patch_text: &str) -> Result<ApplyOutcome> {
        dojo_patch::Patch::parse(patch_text)
            .check_paths()
            .map_err(SandboxError::PatchRefused)?;
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

    /// Record a kept sandbox in the registry (see [`registry`]).
    fn save_state(
        &self,
        pristine: &Pristine,
        env: Option<&PythonEnv>,
        opts: &SandboxOptions,
    ) -> Result<()> {
        let (pid, generation) = match &self.inner {
            Inner::Ns(n) => (Some(n.holder_pid), n.generation),
            Inner::Fallback(_) => (None, 0),
        };
        let st = registry::State {
            schema_version: 1,
            id: self.id.clone(),
            backend: self.backend(),
            holder_pid: pid,
            holder_start: pid.and_then(registry::start_time),
            lower: pristine.path.clone(),
            venv: env.map(|e| e.path.clone()),
            env: opts.env.clone(),
            limits: opts.limits.clone(),
            generation,
            caps: self.caps,
            base: self.base.clone(),
            runtime: env.map(|e| e.runtime.clone()).unwrap_or_default(),
            venv_writable: opts.writable_venv,
        };
        registry::write_state(&self.root, &st)
    }

    /// Re-open a kept sandbox by id (see [`registry`]): its namespaces from `/proc/<holder>`.
    pub async fn attach(id: &str) -> Result<Sandbox> {
        if id.is_empty() || id.contains('/') || id.starts_with('.') {
            return Err(SandboxError::Gone(id.to_string()));
        }
        let dir = sandboxes_dir().join(id);
        let st = registry::load_dir(&dir)?;
        let inner = match st.backend {
            BackendKind::Fallback => Inner::Fallback(fallback::FbSandbox {
                ws: dir.join("ws"),
                lower: st.lower.clone(),
                live: Default::default(),
                env: cmdenv::base_env(st.venv.as_ref().map(|v| v.to_str().unwrap_or("")), &st.env),
                limits: st.limits.clone(),
            }),
            _ => Inner::Ns(ns::NsSandbox::attach(id, &dir, &st)?),
        };
        Ok(Sandbox {
            id: id.to_string(),
            root: dir,
            inner,
            keep: true,
            done: false,
            caps: st.caps,
            base: st.base.clone(),
            venv: st.venv.clone(),
        })
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
