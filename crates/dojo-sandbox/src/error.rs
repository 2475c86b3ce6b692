//! Errors of the sandbox layer, and the helpers that build them.

use std::path::{Path, PathBuf};
use std::process::ExitStatus;

/// Errors of the sandbox layer. Every variant but [`SandboxError::TooLarge`] is an
/// *infrastructure* failure: callers must never score those as the agent's failure.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("sandbox setup failed: {0}")]
    Setup(String),
    /// A command that sets the sandbox up (git, cp) failed.
    #[error("sandbox setup failed: {0}")]
    SetupCommand(#[source] BuildError),
    /// The same, with the error under it: `what` was being done.
    #[error("sandbox setup failed: {what}: {source}")]
    SetupFailed {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("building pristine tree for {source_desc} failed: {source}")]
    Pristine {
        source_desc: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("building Python environment {spec} failed: {reason}")]
    Env { spec: String, reason: String },
    /// [`SandboxError::Env`] stopped by another error (the spec's TOML, uv, the cache).
    #[error("building Python environment {spec} failed: {source}")]
    EnvFrom {
        spec: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("path {0:?} leaves the workspace")]
    PathEscape(String),
    /// A patch refused before it is applied: a path that leaves the repository, a symlink out
    /// of it, binary hunks.
    #[error("patch refused: {0}")]
    PatchRefused(#[source] dojo_patch::Refusal),
    #[error("I/O error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("sandbox {0} is gone (torn down or its holder died)")]
    Gone(String),
    /// The same, found by the error under it: `what` failed.
    #[error("sandbox {what}: {source} is gone (torn down or its holder died)")]
    GoneFrom {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// What the sandboxed code made is over a [`crate::TransferCaps`] cap: the one variant
    /// that is the agent's doing (see [`SandboxError::is_infrastructure`]).
    #[error("{what} too large: over the {limit}-byte cap")]
    TooLarge { what: &'static str, limit: usize },
    #[error("{0}")]
    Other(String),
    #[error("{0}")]
    Cache(#[source] dojo_cache::CacheError),
    /// Another failure with its cause: `what` was being done.
    #[error("{what}: {source}")]
    Failed {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// [`SandboxError::Failed`]: `source` stopped `what`.
pub(crate) fn failed(
    what: impl Into<String>,
    source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> SandboxError {
    SandboxError::Failed {
        what: what.into(),
        source: source.into(),
    }
}

/// What went wrong building what sandboxes use (a pristine tree, a Python environment, the uv
/// binary) or finding an interpreter; each names the file, command or version. Reported inside
/// [`SandboxError::Pristine`] and [`SandboxError::Env`], which name the source or spec.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A file operation, or a command that ran but could not be waited for; `what` names the
    /// path (and the step, where it helps).
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// Walking a directory tree; `what` names the step.
    #[error("{what}: {source}")]
    Walk {
        what: String,
        #[source]
        source: walkdir::Error,
    },
    /// A command that could not be started.
    #[error("{what}: cannot run: {source}")]
    Spawn {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A command that failed; `output` is its stderr (or the end of its log), trimmed.
    #[error("{what} failed ({status}): {output}")]
    Failed {
        what: String,
        status: ExitStatus,
        output: String,
    },
    /// A step of a pipeline that failed; `output` is its stderr, trimmed.
    #[error("{what} failed: {output}")]
    Step { what: String, output: String },
    #[error(transparent)]
    Archive(#[from] dojo_cache::archive::ArchiveError),
    #[error(transparent)]
    Cache(#[from] dojo_cache::CacheError),
    #[error(transparent)]
    Sandbox(#[from] Box<SandboxError>),
    #[error("{} is not a directory", .0.display())]
    NotADir(PathBuf),
    #[error("{} is not under {}", .path.display(), .root.display())]
    Outside { path: PathBuf, root: PathBuf },
    #[error("repository {} does not exist", .0.display())]
    NoRepo(PathBuf),
    #[error("commit {commit} does not exist in {}", .repo.display())]
    NoCommit { commit: String, repo: PathBuf },
    #[error("{what}: no stdout")]
    NoStdout { what: &'static str },
    #[error("{path}: the index holds a symlink digest that is not hex: {source}")]
    Digest {
        path: String,
        #[source]
        source: hex::FromHexError,
    },
    #[error(
        "{} is not executable by other users ({} has mode {mode:o}); the sandbox uid could not run it",
        .python.display(), .dir.display()
    )]
    NotRunnable {
        python: PathBuf,
        dir: PathBuf,
        mode: u32,
    },
    #[error(
        "uv not found and dojo has no pinned uv wheel for {arch}: set DOJO_UV, run scripts/setup-tools.sh (DOJO_PYTOOLS), or put uv on PATH"
    )]
    NoUvWheel { arch: &'static str },
    #[error(
        "uv not found, and installing uv {version} from PyPI failed: {source}; set DOJO_UV, run scripts/setup-tools.sh (DOJO_PYTOOLS), or put uv on PATH"
    )]
    UvInstall {
        /// The pinned version that was being installed.
        version: &'static str,
        #[source]
        source: dojo_cache::CacheError,
    },
    #[error("{} --version printed {printed:?}, expected uv {expected}", .bin.display())]
    UvVersion {
        bin: PathBuf,
        printed: String,
        expected: &'static str,
    },
    #[error(
        "Python {version} is not on the host and uv is unavailable ({source}); install python{version} on the host, or let dojo fetch a managed CPython {version} (needs the python-build-standalone downloads: network, or a mirror in DOJO_PYTHON_MIRROR / UV_PYTHON_INSTALL_MIRROR)"
    )]
    NoUv {
        version: String,
        #[source]
        source: Box<BuildError>,
    },
    #[error(
        "Python {version} is not on the host, and `uv python install {version}` into {} failed: {log_tail}; install python{version} on the host, or let dojo fetch a managed CPython {version} (needs the python-build-standalone downloads: network, or a mirror in DOJO_PYTHON_MIRROR / UV_PYTHON_INSTALL_MIRROR)",
        .dir.display()
    )]
    PythonInstall {
        version: String,
        dir: PathBuf,
        log_tail: String,
    },
    #[error(
        "uv installed Python {version} into {} but `uv python find` does not see it; install python{version} on the host, or let dojo fetch a managed CPython {version} (needs the python-build-standalone downloads: network, or a mirror in DOJO_PYTHON_MIRROR / UV_PYTHON_INSTALL_MIRROR)",
        .dir.display()
    )]
    PythonNotFound { version: String, dir: PathBuf },
}

impl BuildError {
    /// A [`BuildError::Io`] naming `what` (a path, or a step and its path).
    pub(crate) fn io(what: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> BuildError {
        let what = what.to_string();
        move |source| BuildError::Io { what, source }
    }
}

pub type Result<T, E = SandboxError> = std::result::Result<T, E>;

impl SandboxError {
    /// Whether this is an infrastructure failure (never to be scored as the agent's): every
    /// variant but [`SandboxError::TooLarge`], which the agent's own output caused.
    pub fn is_infrastructure(&self) -> bool {
        !matches!(self, SandboxError::TooLarge { .. })
    }
}

/// [`SandboxError::SetupFailed`]: `source` stopped `what`.
pub(crate) fn setup_failed(
    what: impl Into<String>,
    source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> SandboxError {
    SandboxError::SetupFailed {
        what: what.into(),
        source: source.into(),
    }
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
