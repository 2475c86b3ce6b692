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

pub mod pristine;
pub mod pyenv;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

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
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: Some(4 << 30),
            max_processes: Some(512),
            max_file_size_bytes: Some(1 << 30),
            max_open_files: Some(4096),
            cpu_quota_percent: None,
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
        OutputCap { head: 1 << 20, tail: 1 << 20 }
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
pub struct SandboxProcess {
    pub child: tokio::process::Child,
}

/// One rollout's isolated workspace. Cheap to create (overlay mount), cheap to reset.
pub struct Sandbox {
    id: String,
    #[allow(dead_code)]
    root: PathBuf,
}

impl Sandbox {
    /// Create a sandbox over `pristine`, optionally with a shared Python environment.
    pub async fn create(
        _pristine: &Pristine,
        _env: Option<&PythonEnv>,
        _opts: &SandboxOptions,
    ) -> Result<Sandbox> {
        Err(SandboxError::Other("not implemented yet".into()))
    }
    pub fn id(&self) -> &str {
        &self.id
    }
    /// Run a command; non-zero exits are *not* errors (see [`ExecOutput`]).
    pub async fn exec(&self, _req: &ExecRequest) -> Result<ExecOutput> {
        Err(SandboxError::Other("not implemented yet".into()))
    }
    /// Start a long-running process with piped stdin/stdout/stderr inside the sandbox.
    pub async fn spawn(&self, _req: &ExecRequest) -> Result<SandboxProcess> {
        Err(SandboxError::Other("not implemented yet".into()))
    }
    /// Read a file; `path` is absolute inside the sandbox or relative to [`WORKSPACE`].
    pub async fn read_file(&self, _path: &str) -> Result<Vec<u8>> {
        Err(SandboxError::Other("not implemented yet".into()))
    }
    /// Write a file as the sandbox user (creating parents).
    pub async fn write_file(&self, _path: &str, _contents: &[u8]) -> Result<()> {
        Err(SandboxError::Other("not implemented yet".into()))
    }
    /// The workspace diff against the pristine tree as a binary-safe git patch (no caches).
    pub async fn diff(&self) -> Result<String> {
        Err(SandboxError::Other("not implemented yet".into()))
    }
    /// Apply a patch with the harness's fallback chain; refuses paths that leave the repository.
    pub async fn apply_patch(&self, _patch: &str) -> Result<ApplyOutcome> {
        Err(SandboxError::Other("not implemented yet".into()))
    }
    /// Discard every change (tens of milliseconds).
    pub async fn reset(&mut self) -> Result<()> {
        Err(SandboxError::Other("not implemented yet".into()))
    }
    /// Kill everything and release the workspace.
    pub async fn teardown(self) -> Result<()> {
        Ok(())
    }
}
