//! The plain data of the public contract: what a sandbox is created with ([`SandboxOptions`],
//! [`Limits`], [`BackendKind`]), what a command is ([`ExecRequest`]) and what it did
//! ([`ExecOutput`]), how a patch was applied ([`ApplyOutcome`]), how sandboxes over a built
//! environment run ([`EnvRuntime`]). No behaviour lives here.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Where the workspace is mounted inside every sandbox. Editable installs point here, so each
/// rollout imports its own copy of the project.
pub const WORKSPACE: &str = "/testbed";
/// The system part of every sandbox command's `PATH` (a venv's `bin` goes before it).
pub const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
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

/// A backend name that is none of `auto`, `namespace` (`ns`), `fallback`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown backend {0:?} (auto | namespace | fallback)")]
pub struct UnknownBackend(pub String);

impl std::str::FromStr for BackendKind {
    type Err = UnknownBackend;

    /// `auto`, `namespace` (or `ns`), `fallback`: what `dojo sandbox run --backend` takes.
    fn from_str(s: &str) -> std::result::Result<BackendKind, UnknownBackend> {
        match s {
            "auto" => Ok(BackendKind::Auto),
            "namespace" | "ns" => Ok(BackendKind::Namespace),
            "fallback" => Ok(BackendKind::Fallback),
            other => Err(UnknownBackend(other.to_string())),
        }
    }
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
    /// How much of what the sandboxed code made the host takes back.
    pub caps: TransferCaps,
    /// Namespace backend: `/venv` is a private copy-on-write overlay of the shared environment
    /// instead of a read-only bind, so a grading run's reinstall (`pip install -e .` of an
    /// eval script) can write to it; what it writes is gone with the sandbox (or its reset).
    /// Off by default: an agent must not be able to change the environment its patch is
    /// graded in. The fallback backend ignores it (its venv is the shared one).
    pub writable_venv: bool,
}

/// Caps on what crosses from a sandbox back to the host, where no sandbox limit applies: with
/// `--workers N`, N rollouts each holding an agent-sized patch would otherwise hold N times
/// whatever the agents wrote. Over a cap the operation fails with [`SandboxError::TooLarge`]
/// (the agent's doing, not an infrastructure failure), having held at most the cap in memory.
/// Command output is capped per request ([`ExecRequest::output_cap`]).
///
/// [`SandboxError::TooLarge`]: crate::SandboxError::TooLarge
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TransferCaps {
    /// Largest patch [`crate::Sandbox::diff`] returns (default 10 MiB; a real fix is a few KiB,
    /// SWE-bench's largest gold patches a few hundred).
    pub patch_bytes: usize,
    /// Largest file [`crate::Sandbox::read_file`] returns (default 32 MiB).
    pub read_bytes: usize,
}

impl Default for TransferCaps {
    /// 10 MiB of patch and 32 MiB of file, or `DOJO_PATCH_CAP` / `DOJO_READ_CAP` (bytes) when
    /// set: the same caps for every command of a process (`dojo rollout`, `dojo eval`...). A
    /// value that is not a positive number is ignored with a warning.
    fn default() -> Self {
        static CAPS: std::sync::OnceLock<TransferCaps> = std::sync::OnceLock::new();
        *CAPS.get_or_init(|| TransferCaps {
            patch_bytes: cap_from_env("DOJO_PATCH_CAP", 10 << 20),
            read_bytes: cap_from_env("DOJO_READ_CAP", 32 << 20),
        })
    }
}

/// A byte count from the environment variable `var`, else `default`.
fn cap_from_env(var: &str, default: usize) -> usize {
    match std::env::var(var) {
        Err(_) => default,
        Ok(v) => parse_cap(&v).unwrap_or_else(|| {
            tracing::warn!("{var}={v:?} is not a positive byte count; using {default}");
            default
        }),
    }
}

fn parse_cap(v: &str) -> Option<usize> {
    v.trim().parse::<usize>().ok().filter(|&n| n > 0)
}

#[cfg(test)]
mod cap_tests {
    #[test]
    fn caps_are_positive_byte_counts() {
        assert_eq!(super::parse_cap(" 1048576\n"), Some(1 << 20));
        assert_eq!(super::parse_cap("0"), None);
        assert_eq!(super::parse_cap("10M"), None);
        assert_eq!(super::parse_cap("-1"), None);
    }
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

/// How sandboxes over a built environment run: what the spec says of the tests' world, and the
/// files the build wrote into the project tree.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EnvRuntime {
    /// Files the build created or changed under `/testbed` (e.g. setuptools-scm's
    /// `_version.py`, `*.egg-info`), stacked over the pristine tree in every sandbox.
    #[serde(default)]
    pub tree: Option<PathBuf>,
    #[serde(default)]
    pub network: bool,
    /// With `network`: the host's loopback is reachable at 10.0.2.2 (a package mirror there).
    /// Never from a spec, which is task data: set by the embedding program, or for every
    /// sandbox by the operator's `DOJO_SANDBOX_HOST_LOOPBACK=1` ([`crate::usernet`]).
    #[serde(default)]
    pub host_loopback: bool,
    #[serde(default)]
    pub cpus: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_names() {
        assert_eq!("ns".parse(), Ok(BackendKind::Namespace));
        assert_eq!("auto".parse(), Ok(BackendKind::Auto));
        assert_eq!(
            "vm".parse::<BackendKind>().unwrap_err().to_string(),
            "unknown backend \"vm\" (auto | namespace | fallback)"
        );
    }
}
