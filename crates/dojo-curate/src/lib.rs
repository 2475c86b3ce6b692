//! # dojo-curate: from raw rollouts to training data
//!
//! Pipeline position: task → sandbox → agent ⇄ policy → trajectory → grade → **curate** → train.
//!
//! Reads the JSONL trajectory files `dojo rollout` writes, applies the filters the published
//! recipes used (SWE-Master's format and difficulty filters, SWE-Gym's per-task cap, exact
//! dedup, an optional minimum of successful LSP calls), renders what survives with the target
//! model's chat template and tokenizer, and writes training data the usual trainers read as is:
//! pre-tokenized Parquet with loss masks (token-exact with what the policy saw), OpenAI-shaped
//! messages (Parquet + JSONL) and LLaMA-Factory's sharegpt layout. With `--verifier` it writes
//! SWE-Gym-style YES/NO judgement samples instead (see [`verifier`]), and with `--world swt|swr`
//! SWE-World transition/reward model samples from the runs' `world.jsonl` (see [`world`]), in the
//! same formats. Every stage reports how many
//! trajectories it dropped and why; every unreadable line is reported with file, line and reason.

pub mod error;
pub mod export;
pub mod filters;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod input;
pub mod pipeline;
pub mod render;
pub mod report;
pub mod summary;
pub mod target_model;
pub mod verifier;
pub mod view;
pub mod world;

pub use error::CurateError;
pub use pipeline::{Config, FilterSet, Formats, run};
pub use render::{ChatModel, Masking, MessagesStyle, RenderError};
pub use summary::CurationSummary;
