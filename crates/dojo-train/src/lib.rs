//! # dojo-train: supervised fine-tuning on the CPU (or a CUDA build), in process
//!
//! Pipeline position: **train**
//! (task → sandbox → agent ⇄ policy → trajectory → grade → curate → **train** → select).
//! `dojo curate` writes token-exact `tokens.parquet` (`input_ids`, `labels` with −100 where no
//! loss); this crate fine-tunes the models the embedded engine runs (Llama/SmolLM2, Qwen2/2.5,
//! Qwen3) on it and writes Hugging Face checkpoints that `dojo serve --model DIR` and
//! `transformers` both load. Large runs belong to verl / TRL / OpenRLHF on GPUs (the exports
//! load there as they are); this trainer makes the loop measurable on one machine.
//!
//! - [`model`]: the trainable transformer. Weights and configuration come from dojo-engine's
//!   loaders (GGUF dequantized to f32, safetensors), so both read the same files the same way,
//!   and each layer is the engine's transformer block (`dojo_engine::block`) on trainable
//!   weights, attending over the batch instead of a KV cache. A test checks both give the same
//!   logits (one prefill, a prefill through the cache, a decode step).
//! - [`backward`]: gradients of a loss at chosen positions, with the loss over the vocabulary
//!   in chunks of rows and optional activation checkpointing (the same values, less memory).
//! - [`memory`]: the memory plan: a step's peak estimated from the model's dimensions and the
//!   largest micro-batch before anything large is allocated; checkpointing on when needed, a
//!   refusal naming the setting to lower when even that does not fit.
//! - [`ops`]: the trainer's differentiable operations besides dojo-kernels' (RMSNorm, RoPE,
//!   SiLU gate, causal attention): linear layers, the frozen matmul of LoRA's base weights, the
//!   NLL.
//! - [`data`]: `tokens.parquet` reading, checks, `--max-len` policy, length-bucketed batches in
//!   a resumable order.
//! - [`lora`]: LoRA adapters on a frozen base (peft's initialisation, scale and file layout,
//!   so peft loads the adapters dojo writes and the reverse) and their merge into full weights.
//! - [`optim`]: AdamW (torch semantics), warmup + cosine schedule, global-norm clipping.
//! - [`checkpoint`]: Hugging Face layout, written to a temporary directory and renamed into
//!   place with a completion marker, plus optimizer and data-loader state for resuming.
//! - [`report`]: `OUT/report.html` from the run's files: loss, learning-rate, gradient-norm
//!   and throughput curves, the settings, and the evaluation table when there is one.
//! - [`source`]: where the base model comes from (the bundled default, a GGUF file, a Hugging
//!   Face directory or a name in the local hub cache) and its tokenizer files.
//! - [`trainer`]: the loop: masked cross-entropy averaged over the trained tokens of an
//!   optimizer step, gradient accumulation, clipping, schedule, progress bar, metrics JSONL,
//!   periodic checkpoints and resume.
//!
//! - [`eval`]: base vs trained after training (`dojo train sft --eval-tasks`): both rolled out
//!   through `dojo rollout`'s path (the embedded engine, sandboxes, grading) into `eval.json`,
//!   which [`report`] renders.
//!
//! Not implemented: bf16 training (candle's CPU bf16 matmul is slow and its reductions would
//! lose the parity with PyTorch the tests check); LoRA on the embeddings or the LM head, on
//! biases (`bias` other than `"none"`), and peft's variants (rsLoRA, DoRA, per-module ranks,
//! QLoRA); reading an adapter into a LoRA run to continue training it from another run (a run
//! resumes only its own checkpoints). LoRA parity with peft is pinned on Llama and Qwen2; Qwen3
//! uses the same projections and code but has no peft fixture.
//!
//! Correctness is pinned by `tests/parity.rs`: logits, loss, every gradient and two
//! clipped AdamW steps on tiny random Llama / Qwen2 / Qwen3 models equal PyTorch
//! `transformers` + `torch.optim.AdamW` (fixtures from `tests/fixtures/make_fixtures.py`);
//! `tests/lora.rs` pins LoRA logits, adapter gradients and merges against `peft`.

pub mod backward;
pub mod checkpoint;
pub mod data;
pub mod eval;
pub mod lora;
pub mod memory;
pub mod model;
pub mod ops;
pub mod optim;
pub mod report;
pub mod source;
pub mod trainer;

use std::path::{Path, PathBuf};

pub use data::{Cursor, DataReport, Overlong};
pub use lora::LoraConfig;
pub use model::{Checkpointing, LossRows, TrainModel};
pub use optim::{AdamW, AdamWConfig};
pub use source::ModelSource;
pub use trainer::{RunOptions, SftConfig, SftSummary, run_sft};

/// Version of the files this crate writes (`run.json`, `trainer_state.json`, the completion
/// marker, metrics lines). Bump on any field change.
pub const TRAIN_SCHEMA_VERSION: u32 = 1;

/// Training failures. Input problems name the file and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("{path}: {reason}")]
    Data { path: PathBuf, reason: String },
    /// The data file could not be opened or read: `what` says which step, `source` why.
    #[error("{path}: {what}: {source}")]
    DataFrom {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A file (checkpoint, adapter, state) that cannot be read or written, or holds something
    /// wrong: the cause, or a message where nothing failed under it.
    #[error("{path}: {source}")]
    File {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A JSON file (config, state, metrics) that does not parse.
    #[error("{path}: invalid JSON: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("model: {0}")]
    Model(String),
    #[error("{0}")]
    Config(String),
    /// The memory plan's refusal: the step would not fit in the budget.
    #[error("not enough memory: {0}")]
    Memory(String),
    #[error("training diverged: {0}")]
    NonFinite(String),
    #[error("model: {0}")]
    Candle(#[from] candle_core::Error),
    #[error(transparent)]
    ModelSpec(#[from] dojo_tokenizer::ModelSpecError),
    #[error("serialising {what}: {source}")]
    Serialise {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// The evaluation's rollouts (`what` names the step).
    #[error("{what}: {source}")]
    Rollout {
        what: String,
        // Boxed: it would make every `Result` of this crate large.
        #[source]
        source: Box<dojo_rollout::error::RolloutError>,
    },
    #[error(transparent)]
    Engine(#[from] dojo_engine::EngineError),
    #[error(transparent)]
    Chat(#[from] dojo_tokenizer::ChatError),
    #[error(transparent)]
    RunDir(#[from] dojo_rundir::RunDirError),
}

impl TrainError {
    pub fn file(
        path: &Path,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> TrainError {
        TrainError::File {
            path: path.to_path_buf(),
            source: source.into(),
        }
    }
}
