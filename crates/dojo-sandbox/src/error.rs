//! Errors of the sandbox layer, and the helpers that build them.

use std::path::Path;

/// Errors of the sandbox layer. Every variant but [`SandboxError::TooLarge`] is an
/// *infrastructure* failure: callers must never score those as the agent's failure.
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
    /// What the sandboxed code made is over a [`crate::TransferCaps`] cap: the one variant
    /// that is the agent's doing (see [`SandboxError::is_infrastructure`]).
    #[error("{what} too large: over the {limit}-byte cap")]
    TooLarge { what: &'static str, limit: usize },
    #[error("{0}")]
    Other(String),
}

pub type Result<T, E = SandboxError> = std::result::Result<T, E>;

impl SandboxError {
    /// Whether this is an infrastructure failure (never to be scored as the agent's): every
    /// variant but [`SandboxError::TooLarge`], which the agent's own output caused.
    pub fn is_infrastructure(&self) -> bool {
        !matches!(self, SandboxError::TooLarge { .. })
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
