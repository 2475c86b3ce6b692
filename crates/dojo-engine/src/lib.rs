//! # dojo-engine: the embedded model
//!
//! Pipeline position: the **policy** that always works offline
//! (task → sandbox → agent ⇄ **policy** → trajectory → grade → curate → train → select).
//! Real deployments point dojo at vLLM or SGLang; this engine is the default that needs
//! nothing but the CPU, the server our own tests talk to, and model code the in-process trainer
//! can reuse.
//!
//! - [`block`]: the transformer block, one definition for the engine's prefill, its decode
//!   step and dojo-train's differentiable pass, which differ only in how a projection reads
//!   its weight and where attention finds earlier positions (a KV cache or the batch itself).
//! - [`model`]: one transformer for Llama (SmolLM2) and Qwen2/2.5/3 with an external
//!   preallocated [`KvCache`] ([`kv_cache`]: copy-on-write forks, f32 or f16); [`loader`]:
//!   GGUF (quantized), safetensors, random tiny models. [`WeightMode`] picks how GGUF
//!   weights are multiplied (the file's kernels, dojo-kernels' Q4_1/Q8_0 decode kernels with a
//!   dense prefill from 96-token chunks, or dense f32), by what is fast in this build. A decode
//!   step is one forward pass for every sequence in it (one token alone is a batch of one),
//!   its attention one kernel over all their caches (`dojo_kernels::decode_attention`).
//! - [`Engine`]: a worker thread running requests with continuous batching (every active
//!   sequence advances in one batched decode step; requests sharing a prompt prefill it once)
//!   or round-robin, with sampling ([`SamplingParams`]), stop handling, token ids + logprobs,
//!   and prefix KV reuse across the turns of a conversation. It implements
//!   [`dojo_llm::ChatBackend`] for in-process rollouts.
//! - [`completions`]: OpenAI chat and text completions over the [`Engine`], shared by the
//!   in-process backend and [`server`]: `dojo serve`, the OpenAI-compatible HTTP API.
//!
//! Tokenization and chat templates come from `dojo-tokenizer`, shared with curate/train so the
//! training data is token-exact.

pub mod block;
pub mod completions;
pub mod config;
pub mod engine;
pub mod kv_cache;
pub mod loader;
pub mod model;
pub mod sampling;
pub mod server;

use std::path::PathBuf;

pub use config::{Arch, Config};
pub use dojo_kernels::q4_1;
pub use engine::{Engine, EngineOptions, FinishReason, GenerateRequest, Generation, Stats};
pub use kv_cache::{KvCache, KvCacheType};
pub use loader::WeightMode;
pub use model::Model;
pub use sampling::SamplingParams;

/// Engine failures. `Request` and `ContextLength` are the caller's (HTTP 400); the rest are
/// infrastructure.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("loading model {path}: {reason}")]
    Load { path: PathBuf, reason: String },
    /// Loading failed on an underlying error (I/O, JSON, candle), kept as the cause.
    #[error("loading model {path}: {what}: {source}")]
    LoadFrom {
        path: PathBuf,
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// candle could not read the GGUF file: `message` is the first line of its error (candle
    /// appends a backtrace when RUST_BACKTRACE is set).
    #[error("loading model {path}: not a readable GGUF file: {message}")]
    GgufRead {
        path: PathBuf,
        message: String,
        // Boxed: a candle error inline would make every `Result` of this crate large.
        #[source]
        source: Box<candle_core::Error>,
    },
    #[error("model: {0}")]
    Model(String),
    #[error("prompt of {tokens} tokens exceeds the maximum context length of {limit} tokens")]
    ContextLength { tokens: usize, limit: usize },
    #[error("invalid request: {0}")]
    Request(String),
    /// A part of the request (`what`: messages, tools) could not be turned into JSON.
    #[error("invalid request: {what}: {source}")]
    RequestJson {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// The request's messages or forced text could not be rendered or tokenized.
    #[error("invalid request: {0}")]
    RequestChat(#[source] dojo_tokenizer::ChatError),
    #[error("model: {0}")]
    Candle(#[from] candle_core::Error),
    #[error(transparent)]
    Chat(#[from] dojo_tokenizer::ChatError),
    #[error("engine: {0}")]
    Internal(String),
    /// The device asked for (`--device`) is unknown or unavailable in this build or machine.
    #[error("--device {spec}: {reason}")]
    Device { spec: String, reason: String },
    /// The CUDA device asked for exists in this build but could not be opened.
    #[error("--device {spec}: opening CUDA device {ordinal}: {source}")]
    DeviceOpen {
        spec: String,
        ordinal: usize,
        // Boxed: a candle error inline would make every `Result` of this crate large.
        #[source]
        source: Box<candle_core::Error>,
    },
}

/// The device named on the command line: `cpu` (the default) or `cuda` / `cuda:N`. CUDA is an
/// opt-in build (`--features cuda`, needs nvcc); in any other build it is a clear error rather
/// than a silent fall back to the CPU.
pub fn device(spec: &str) -> Result<candle_core::Device, EngineError> {
    let ordinal = match spec {
        "cpu" => return Ok(candle_core::Device::Cpu),
        "cuda" => Some(0),
        s => s
            .strip_prefix("cuda:")
            .and_then(|n| n.parse::<usize>().ok()),
    };
    let fail = |reason: String| EngineError::Device {
        spec: spec.to_string(),
        reason,
    };
    let Some(ordinal) = ordinal else {
        return Err(fail("unknown device: expected cpu, cuda or cuda:N".into()));
    };
    if !cfg!(feature = "cuda") {
        return Err(fail(
            "this dojo was built without CUDA; rebuild with `--features cuda` (needs the CUDA \
             toolkit's nvcc)"
                .into(),
        ));
    }
    candle_core::Device::new_cuda(ordinal).map_err(|source| EngineError::DeviceOpen {
        spec: spec.to_string(),
        ordinal,
        source: Box::new(source),
    })
}

#[cfg(test)]
mod device_tests {
    use super::*;

    #[test]
    fn cpu_is_always_there_and_bad_names_are_clear() {
        assert!(matches!(device("cpu"), Ok(candle_core::Device::Cpu)));
        let e = device("tpu").unwrap_err().to_string();
        assert!(e.contains("expected cpu, cuda or cuda:N"), "{e}");
        let e = device("cuda:x").unwrap_err().to_string();
        assert!(e.contains("unknown device"), "{e}");
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_the_feature_says_how_to_get_it() {
        let e = device("cuda:1").unwrap_err().to_string();
        assert!(e.contains("--features cuda"), "{e}");
    }
}
