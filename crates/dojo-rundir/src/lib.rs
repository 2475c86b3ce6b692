//! The one run-directory kit. Every stage that writes a resumable run (rollout, rl, train,
//! synth, world records, curate) keeps it in a directory made of the same four parts:
//!
//! - a **manifest** ([`manifest`]): what the directory is a run of. Opening decides once
//!   whether the run is fresh, resumed, or refused because a compared field differs (the error
//!   names the fields and both values);
//! - an **append-only JSONL log** ([`log`]): one `write` and one `fdatasync` per record, a torn
//!   last line (a kill mid-write) cut off on open, damage before the last line refused;
//! - the **tolerant reader** ([`lines`]) of such files for the stages downstream, which report
//!   every bad line by file and line and go on;
//! - **atomic publication** ([`atomic`] for one file, [`checkpoint`] for a directory of files
//!   with a completion marker, keep-N pruning and leftover cleanup).
//!
//! It sits at the bottom of the crate graph (serde and the standard library only), so that the
//! crash semantics are stated and tested once. Being the bottom floor, it also owns the small
//! helpers every crate would otherwise write again:
//!
//! - [`clip`]: cutting text to a limit in chars or bytes (head, tail or both ends), with the one
//!   marker `[… N characters cut]` / `[… N bytes cut]`;
//! - [`BoxFuture`]: the boxed future object-safe async traits return;
//! - [`secs`]: a `Duration` as seconds in serde formats;
//! - [`json::type_name`]: how error messages name a JSON value's type;
//! - [`error_chain`]: an error and its causes on one line, for a message kept as text.

pub mod atomic;
pub mod checkpoint;
pub mod clip;
pub mod json;
pub mod lines;
pub mod log;
pub mod manifest;
pub mod secs;

use std::path::{Path, PathBuf};

/// A boxed `Send` future: what the object-safe async traits return (chat backends, sandbox
/// workspaces, language-server backends, agent tools).
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

pub use atomic::write_atomic;
pub use lines::{BadLine, JsonlLines, Line, Records, read_records};
pub use log::JsonlLog;
pub use manifest::{Compare, Manifest, Opened};

/// What went wrong with a run directory. `Io` is the host's (disk, permissions) and may succeed
/// when retried; the others are the caller's input and will not.
#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A damaged line that is not the last one: not something a crash of the writer leaves.
    #[error("{path} line {line}: corrupted record ({source}); not a torn tail, refusing to guess")]
    Corrupt {
        path: PathBuf,
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: cannot serialise a record: {source}")]
    Serialise {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A manifest or state file that exists but cannot be read as one.
    #[error("{path}: invalid: {source}")]
    Invalid {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "{dir} holds a run of another configuration ({}); resume with the same settings or use another --out",
        .differences.join("; ")
    )]
    Mismatch {
        dir: PathBuf,
        /// `field: old -> new`, first differing fields first.
        differences: Vec<String>,
    },
    #[error(
        "{dir} exists, is not empty and holds no run of this kind (no {file}): use another --out"
    )]
    NotARun { dir: PathBuf, file: String },
}

impl RunDirError {
    pub fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RunDirError + '_ {
        move |source| RunDirError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

pub type Result<T, E = RunDirError> = std::result::Result<T, E>;

/// `e` and its causes (`source()` chain) on one line, joined by `": "`: the text of an error
/// that must be kept as a value (cloned, compared, recorded) rather than as a `#[source]`.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

#[cfg(test)]
mod error_chain_tests {
    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn every_cause_is_in_the_text() {
        let e = Outer(std::io::Error::other("inner"));
        assert_eq!(super::error_chain(&e), "outer: inner");
    }
}
