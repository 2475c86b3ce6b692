//! # dojo-engine: the embedded model
//!
//! Pipeline position: the **policy** that always works offline
//! (task → sandbox → agent ⇄ **policy** → trajectory → grade → curate → train → select).
//! Real deployments point dojo at vLLM or SGLang; this engine is the default that needs
//! nothing but the CPU, the server our own tests talk to, and model code the in-process trainer
//! can reuse.
//!
//! - [`model`]: one transformer for Llama (SmolLM2) and Qwen2/2.5/3 with an external
//!   preallocated [`KvCache`]; [`loader`]: GGUF (quantized), safetensors, random tiny models.
//!   [`WeightMode`] picks how GGUF weights are multiplied (the file's kernels, Q8_0 decode with
//!   dense prefill, or dense f32), by what is fast in this build.
//! - [`Engine`]: a worker thread running requests round-robin, with sampling
//!   ([`SamplingParams`]), stop handling, token ids + logprobs, and prefix KV reuse across the
//!   turns of a conversation. It implements [`dojo_llm::ChatBackend`] for in-process rollouts.
//! - [`server`]: `dojo serve`, the OpenAI-compatible HTTP API.
//!
//! Tokenization and chat templates come from `dojo-chat`, shared with curate/train so the
//! training data is token-exact.

pub mod chat;
pub mod engine;
pub mod loader;
pub mod model;
pub mod q4_1;
pub mod sampling;
pub mod server;

use std::path::PathBuf;

pub use engine::{Engine, EngineOptions, FinishReason, GenerateRequest, Generation, Stats};
pub use loader::WeightMode;
pub use model::{Arch, Config, KvCache, Model};
pub use sampling::SamplingParams;

/// Engine failures. `Request` and `ContextLength` are the caller's (HTTP 400); the rest are
/// infrastructure.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("loading model {path}: {reason}")]
    Load { path: PathBuf, reason: String },
    #[error("model: {0}")]
    Model(String),
    #[error("prompt of {tokens} tokens exceeds the maximum context length of {limit} tokens")]
    ContextLength { tokens: usize, limit: usize },
    #[error("invalid request: {0}")]
    Request(String),
    #[error(transparent)]
    Chat(#[from] dojo_chat::ChatError),
    #[error("engine: {0}")]
    Internal(String),
}

impl From<candle_core::Error> for EngineError {
    fn from(e: candle_core::Error) -> Self {
        EngineError::Model(e.to_string())
    }
}
