//! # dojo-lsp: IDE-grade navigation tools inside each sandbox
//!
//! Pipeline position: a tool of the **agent** (task → sandbox → **agent** ⇄ policy → trajectory
//! → …), run inside the rollout's sandbox so the language server sees that rollout's files.
//!
//! SWE-Master's agents found code through a language server instead of grep and needed fewer
//! turns. This crate gives our agents the same `lsp_tool` (definition, type definition,
//! implementation, hover, references, highlights, document/workspace symbols, call hierarchy),
//! with a fast default server and no container coupling:
//!
//! - [`servers`]: pinned servers (`ty` by default, `pyrefly`, `pyright`, `basedpyright`)
//!   installed from their PyPI wheels into a shared read-only tools directory.
//! - [`backend`]: where the server runs: a host directory ([`HostBackend`]) or a sandbox
//!   ([`SandboxBackend`]), behind one [`Backend`] trait. An agent's tool only borrows its
//!   rollout's sandbox per call, so its session is built over [`Lent`] and every call lends
//!   the sandbox ([`LspTool::call_in`]); dojo-agent's `swe-master+lsp[:SERVER]` tool sets do this.
//! - [`client`]: a small Content-Length JSON-RPC client with timeouts and progress tracking.
//! - [`session`]: one server per workspace: readiness, document sync after every edit (editor
//!   or shell), restart on crash.
//! - [`tool`]: the agent-facing [`LspTool`]: `name`, `schema()`, `call(args) -> observation`.
//!
//! Failures that are the server's fault (missing binary, crash, timeout, never ready) come back
//! as an error observation *plus* an [`InfraEvent`], so the rollout goes on and the failure is
//! never scored as the agent's.

pub mod backend;
pub mod client;
pub mod framing;
pub mod servers;
pub mod session;
pub mod tool;

#[cfg(feature = "sandbox")]
pub use backend::SandboxBackend;
pub use backend::{Backend, HostBackend, Launch, Lent};
pub use servers::{ServerKind, install};
pub use session::{LspSession, SessionOptions, SessionStats};
pub use tool::{Command, InfraEvent, LspInfraKind, LspTool, Observation, Outcome};

use std::time::Duration;

/// Errors of the LSP layer. All but [`LspError::NoSuchFile`] and [`LspError::Rpc`] are
/// infrastructure failures (see [`LspError::infra_kind`]).
#[derive(Debug, thiserror::Error)]
pub enum LspError {
    #[error("language server unavailable: {0}")]
    ServerMissing(String),
    #[error("language server crashed: {0}")]
    ServerCrashed(String),
    #[error("language server did not answer {method} within {after:?}")]
    Timeout { method: String, after: Duration },
    #[error("language server never became ready: {0}")]
    NotReady(String),
    #[error("language server refused the request ({code}): {message}")]
    Rpc { code: i64, message: String },
    #[error("workspace: {0}")]
    Workspace(String),
    #[error("no such file: {0}")]
    NoSuchFile(String),
    /// Installing or starting the server failed: `what` was being done.
    #[error("language server unavailable: {what}: {source}")]
    ServerFailed {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Reaching the workspace failed: `what` was being done.
    #[error("workspace: {what}: {source}")]
    WorkspaceFailed {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An earlier failure to get the server, kept and reported again (not retried).
    #[error(transparent)]
    Kept(std::sync::Arc<LspError>),
}

impl LspError {
    pub(crate) fn server_failed(
        what: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        LspError::ServerFailed {
            what: what.into(),
            source: source.into(),
        }
    }

    pub(crate) fn workspace_failed(
        what: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        LspError::WorkspaceFailed {
            what: what.into(),
            source: source.into(),
        }
    }
}

impl LspError {
    /// The infrastructure class of this error, if it is the server's or the host's fault.
    pub fn infra_kind(&self) -> Option<LspInfraKind> {
        match self {
            LspError::ServerMissing(_) | LspError::ServerFailed { .. } => {
                Some(LspInfraKind::ServerMissing)
            }
            // Only failures to get the server are kept.
            LspError::Kept(_) => Some(LspInfraKind::ServerMissing),
            LspError::ServerCrashed(_) => Some(LspInfraKind::ServerCrashed),
            LspError::Timeout { .. } => Some(LspInfraKind::ServerTimeout),
            LspError::NotReady(_) => Some(LspInfraKind::NotReady),
            LspError::Workspace(_) | LspError::WorkspaceFailed { .. } => {
                Some(LspInfraKind::Workspace)
            }
            // A refused request (e.g. method not supported) is a plain answer to the agent.
            LspError::Rpc { .. } | LspError::NoSuchFile(_) => None,
        }
    }
}
