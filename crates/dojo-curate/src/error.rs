//! The errors that stop a curation run ([`CurateError`]), and writing a file with its path in the
//! error. Bad input lines never stop a run: they are [`crate::input::Problem`]s.

use std::path::{Path, PathBuf};

use crate::export::ExportError;

/// Errors that stop a run (bad input lines never do: they are [`crate::input::Problem`]s).
#[derive(Debug, thiserror::Error)]
pub enum CurateError {
    #[error(transparent)]
    Export(#[from] ExportError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Config(String),
    /// The configuration could not be turned into JSON for the manifest at `path`.
    #[error("the configuration cannot be recorded in {}: {source}", .path.display())]
    RecordConfig {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A row that could not be rendered (`traj_id` names it).
    #[error("{traj_id}: {source}")]
    Render {
        traj_id: String,
        #[source]
        source: RenderError,
    },
    #[error("unknown filter {0:?} (known: dedup, difficulty, format, lsp, cap, none)")]
    UnknownFilter(String),
    #[error("unknown messages style {0:?} (auto, native, inline)")]
    UnknownMessagesStyle(String),
    #[error("unknown masking strategy {0:?} (all-assistant | last-turn)")]
    UnknownMasking(String),
    #[error("unknown --world {0:?} (swt, swr)")]
    UnknownWorld(String),
}

/// Writes `s` to `p`; a failure says which file.
pub(crate) fn write_file(p: &Path, s: &str) -> Result<(), CurateError> {
    std::fs::write(p, s).map_err(|source| CurateError::Io {
        path: p.to_path_buf(),
        source,
    })
}

/// Why a trajectory could not be cut into windows, or a conversation rendered and tokenized
/// for the target model (the pipeline records it as a problem naming the task).
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error(transparent)]
    Chat(#[from] dojo_tokenizer::ChatError),
    /// The tokenizer library's own error, as it reads.
    #[error("tokenizer: {0}")]
    Tokenizer(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("tokenizer is not deterministic on the rendered text")]
    NotDeterministic,
    #[error("no step {0}")]
    NoStep(usize),
    #[error("step {step} refers to message {index}, past the {len} messages")]
    NoMessage {
        step: usize,
        index: usize,
        len: usize,
    },
    #[error("step {step} generated message {index}, past the end")]
    PastEnd { step: usize, index: usize },
    #[error("step {step} refers to compression summary {index}, which is missing")]
    NoSummary { step: usize, index: usize },
    #[error("step {step} spans messages {start}..{end} of {len}: out of order")]
    OutOfOrder {
        step: usize,
        start: usize,
        end: usize,
        len: usize,
    },
}
