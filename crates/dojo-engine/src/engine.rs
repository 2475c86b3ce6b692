//! The engine: one worker thread owns the weights and runs every request.
//!
//! Why one thread: candle's CPU kernels already use every core for one sequence, so running
//! sequences in parallel only adds contention. Sharing comes from scheduling instead, in one
//! of two ways ([`EngineOptions::batch`]):
//!
//! - **Continuous batching** (the default): each step runs at most one prefill chunk (of at most
//!   `prefill_chunk` tokens, taken in turn among the sequences still prefilling), then one
//!   decode step for *every* sequence that is ready to decode, as one batched forward pass
//!   ([`Model::forward_decode_batch`]). On a CPU a decode step costs the read of the weights, so
//!   sixteen sequences advance for little more than the price of one. New requests join
//!   between steps; cancellation, stops and errors are per sequence.
//! - **Round-robin**: each active sequence gets one step in turn (one decoded token, or one
//!   prefill chunk), one sequence per forward pass. Kept as the baseline the batching is
//!   measured against (`DOJO_ENGINE_BATCH=0`).
//!
//! Either way a long prompt cannot starve short requests, and each request samples with its
//! own RNG, so seeded outputs do not depend on what else is running.
//!
//! Shared prefill (batching only): a request whose prompt shares at least
//! [`MIN_FORK_PREFIX`] tokens with a running sequence (the `n` choices of one request, the `G`
//! samples of an RL group, agents with one system prompt) waits until that sequence's cache
//! holds the shared part, then forks it: the prefix is prefilled once and held once (a
//! copy-on-write [`KvCache::fork`]), and each decode step reads it once for all the
//! sequences sharing it (`dojo_kernels::decode_attention`). The same
//! prompt also takes the first sequence's prompt logits, so it samples exactly what a separate
//! prefill gives; a different suffix is prefilled on its own, and with quantized decode
//! kernels (`WeightMode::Mixed`) a short suffix takes them rather than the dense prefill GEMM,
//! so its logprobs can differ by quantization noise, as with prefix reuse across turns.
//!
//! Prefix reuse: finished sequences leave their KV cache in a small LRU pool keyed by the
//! tokens it holds. A new request takes the entry sharing the longest token prefix with its
//! prompt and only prefills the rest; agents resend a growing conversation each turn, so turn
//! `n` prefills just the new observation and generation prompt.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use candle_core::Device;
use dojo_tokenizer::ChatFormat;

use crate::EngineError;
use crate::loader::WeightMode;
use crate::model::{Config, KvCache, KvCacheType, Model};
use crate::sampling::{Sampled, Sampler, SamplingParams};

mod worker;
use worker::Worker;

/// How to run a loaded model.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Name reported by `/v1/models` and in responses; default: the file or directory name.
    pub model_id: Option<String>,
    /// Finished sequences kept for prefix reuse; `0` disables reuse.
    pub prefix_cache_entries: usize,
    /// Sequences in flight at once (batched together, or taking turns); further requests wait
    /// in arrival order.
    pub max_active: usize,
    /// Largest prefill step, in tokens (bounds how long one step can block the others).
    pub prefill_chunk: usize,
    /// Cap on the context window (defaults to the model's).
    pub context_length: Option<usize>,
    /// Quantized or dequantized GGUF weights (see [`WeightMode`]).
    pub weights: WeightMode,
    /// What the KV caches store (see [`KvCacheType`]).
    pub kv_cache: KvCacheType,
    pub device: Device,
    /// Batch the decode steps of all active sequences and share prompt prefixes (default);
    /// `false` runs them round-robin, one per forward pass. `DOJO_ENGINE_BATCH=0` also turns
    /// it off (benchmarks compare both in one binary).
    pub batch: bool,
}

/// Shortest shared prompt prefix worth waiting for another sequence's prefill (shorter ones
/// prefill on their own: waiting for another's prefill is not free).
pub const MIN_FORK_PREFIX: usize = 16;

impl EngineOptions {
    /// [`EngineOptions::batch`], unless `DOJO_ENGINE_BATCH=0` turns it off.
    pub fn batch_or_env(&self) -> bool {
        self.batch && std::env::var("DOJO_ENGINE_BATCH").map_or(true, |v| v.trim() != "0")
    }
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            model_id: None,
            prefix_cache_entries: 4,
            max_active: 16,
            prefill_chunk: 256,
            context_length: None,
            weights: WeightMode::Auto,
            kv_cache: KvCacheType::Auto,
            device: Device::Cpu,
            batch: true,
        }
    }
}

/// One generation request, in tokens.
#[derive(Debug, Clone)]
pub struct GenerateRequest {
    pub prompt: Vec<u32>,
    pub sampling: SamplingParams,
    /// Upper bound on generated tokens (also bounded by the context window).
    pub max_tokens: usize,
    /// Stop strings: generation ends when the decoded text contains one; the text is cut
    /// before it.
    pub stop: Vec<String>,
    /// Stop at the model's end-of-turn tokens (default true).
    pub stop_at_eos: bool,
    /// Alternatives to report per generated token.
    pub top_logprobs: usize,
}

impl GenerateRequest {
    pub fn new(prompt: Vec<u32>, max_tokens: usize) -> Self {
        GenerateRequest {
            prompt,
            sampling: SamplingParams::default(),
            max_tokens,
            stop: Vec::new(),
            stop_at_eos: true,
            top_logprobs: 0,
        }
    }
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// An end-of-turn token or a stop string.
    Stop,
    /// `max_tokens` or the context window.
    Length,
}

impl FinishReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// A finished generation.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Generation {
    /// Every sampled token, the end-of-turn token included (as RL token streams need).
    pub token_ids: Vec<u32>,
    /// Log-probability of each sampled token.
    pub logprobs: Vec<f32>,
    /// Per token, the most likely alternatives (when asked for).
    pub top_logprobs: Vec<Vec<(u32, f32)>>,
    /// Decoded text without the end-of-turn token, cut before any stop string.
    pub text: String,
    pub finish_reason: FinishReason,
    /// The stop string that ended generation, if any.
    pub stop_string: Option<String>,
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV came from the prefix cache instead of being prefilled.
    pub cached_tokens: usize,
}

/// Counters since load.
#[derive(Debug, Default)]
pub struct Stats {
    pub requests: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub reused_tokens: AtomicU64,
    pub prefilled_tokens: AtomicU64,
    pub generated_tokens: AtomicU64,
    pub cancelled: AtomicU64,
    /// Batched decode steps run, and the most sequences one of them advanced.
    pub decode_batches: AtomicU64,
    pub max_decode_batch: AtomicU64,
}

impl Stats {
    /// Every counter, read now: what `/health` serves and `dojo rl` records per step.
    pub fn to_json(&self) -> serde_json::Value {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        serde_json::json!({
            "requests": n(&self.requests),
            "cancelled": n(&self.cancelled),
            "prompt_tokens": n(&self.prompt_tokens),
            "reused_tokens": n(&self.reused_tokens),
            "prefilled_tokens": n(&self.prefilled_tokens),
            "generated_tokens": n(&self.generated_tokens),
            "decode_batches": n(&self.decode_batches),
            "max_decode_batch": n(&self.max_decode_batch),
        })
    }
}

type Reply = tokio::sync::oneshot::Sender<Result<Generation, EngineError>>;

enum Msg {
    Job(GenerateRequest, Reply),
    ClearCache,
    Shutdown,
}

struct Inner {
    tx: Mutex<mpsc::Sender<Msg>>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
    format: ChatFormat,
    config: Config,
    /// What the KV caches store (the model's [`Model::kv_dtype`]).
    kv_dtype: candle_core::DType,
    context_length: usize,
    model_id: String,
    stats: Arc<Stats>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Ok(tx) = self.tx.lock() {
            let _ = tx.send(Msg::Shutdown);
        }
        if let Some(h) = self.worker.lock().ok().and_then(|mut w| w.take()) {
            let _ = h.join();
        }
    }
}

/// A loaded model behind a request queue. Cheap to clone; all clones share the worker.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("model_id", &self.inner.model_id)
            .field("context_length", &self.inner.context_length)
            .finish()
    }
}

impl Engine {
    /// Load a model: a `.gguf` file, or a Hugging Face directory (`config.json`,
    /// `*.safetensors`, `tokenizer.json`, `tokenizer_config.json`).
    pub fn load(path: &Path, opts: EngineOptions) -> Result<Engine, EngineError> {
        let started = Instant::now();
        let (model, format) = if path.is_dir() {
            (
                crate::loader::load_safetensors(path, &opts.device)?,
                ChatFormat::from_hf_dir(path)?,
            )
        } else if path.exists() {
            (
                crate::loader::load_gguf_with(path, &opts.device, opts.weights.or_env())?,
                ChatFormat::from_gguf(path)?,
            )
        } else {
            return Err(EngineError::Load {
                path: path.to_path_buf(),
                reason: "no such file or directory".into(),
            });
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().trim_end_matches(".gguf").to_string())
            .unwrap_or_else(|| "model".into());
        let opts = EngineOptions {
            model_id: Some(opts.model_id.clone().unwrap_or(name)),
            ..opts
        };
        tracing::info!(path = %path.display(), secs = started.elapsed().as_secs_f32(), "model loaded");
        Ok(Engine::from_parts(model, format, opts))
    }

    /// The default model (SmolLM2-135M-Instruct Q4_1), downloaded on first use.
    pub fn load_default() -> Result<Engine, EngineError> {
        Engine::load_spec(
            &dojo_tokenizer::ModelSpec::Default,
            EngineOptions::default(),
        )
    }

    /// Load the model a `--model` value names ([`dojo_tokenizer::ModelSpec`]); the bundled
    /// model is fetched on first use and reported under its id unless `opts.model_id` says
    /// otherwise.
    pub fn load_spec(
        spec: &dojo_tokenizer::ModelSpec,
        opts: EngineOptions,
    ) -> Result<Engine, EngineError> {
        let opts = match spec {
            dojo_tokenizer::ModelSpec::Default => EngineOptions {
                model_id: opts.model_id.clone().or_else(|| Some(spec.name())),
                ..opts
            },
            _ => opts,
        };
        Engine::load(&spec.path()?, opts)
    }

    /// An engine over an already built model (tests use random tiny models).
    pub fn from_parts(mut model: Model, format: ChatFormat, opts: EngineOptions) -> Engine {
        model.kv_dtype = opts.kv_cache.resolve(model.kv_dtype);
        if model.kv_dtype != candle_core::DType::F32 && !model.device().is_cpu() {
            tracing::warn!(
                "{:?} KV caches off the CPU save memory but are widened to f32 for every \
                 decode step's attention (slower than f32 caches)",
                model.kv_dtype
            );
        }
        let kv_dtype = model.kv_dtype;
        let config = model.config.clone();
        let context_length = opts
            .context_length
            .map_or(config.max_position, |c| c.min(config.max_position));
        let stats = Arc::new(Stats::default());
        let (tx, rx) = mpsc::channel();
        let worker = Worker {
            model,
            stop_ids: format.tokenizer.stop_ids(),
            tokenizer: format.tokenizer.clone(),
            rx,
            stats: stats.clone(),
            pool: Vec::new(),
            batch: opts.batch_or_env(),
            opts: opts.clone(),
            context_length,
            next_id: 0,
        };
        let handle = std::thread::Builder::new()
            .name("dojo-engine".into())
            .spawn(move || worker.run())
            .ok();
        Engine {
            inner: Arc::new(Inner {
                tx: Mutex::new(tx),
                worker: Mutex::new(handle),
                format,
                config,
                kv_dtype,
                context_length,
                model_id: opts.model_id.unwrap_or_else(|| "model".into()),
                stats,
            }),
        }
    }

    pub fn model_id(&self) -> &str {
        &self.inner.model_id
    }

    /// Tokenizer and chat template.
    pub fn format(&self) -> &ChatFormat {
        &self.inner.format
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub fn context_length(&self) -> usize {
        self.inner.context_length
    }

    /// What the KV caches store: `f32` or `f16` (see [`KvCacheType`]).
    pub fn kv_cache(&self) -> &'static str {
        match self.inner.kv_dtype {
            candle_core::DType::F16 => "f16",
            _ => "f32",
        }
    }

    pub fn stats(&self) -> &Stats {
        &self.inner.stats
    }

    /// Drop every cached prefix (e.g. to benchmark without reuse).
    pub fn clear_prefix_cache(&self) {
        if let Ok(tx) = self.inner.tx.lock() {
            let _ = tx.send(Msg::ClearCache);
        }
    }

    fn submit(
        &self,
        req: GenerateRequest,
    ) -> Result<tokio::sync::oneshot::Receiver<Result<Generation, EngineError>>, EngineError> {
        if req.prompt.is_empty() {
            return Err(EngineError::Request("the prompt is empty".into()));
        }
        if req.prompt.len() >= self.inner.context_length {
            return Err(EngineError::ContextLength {
                tokens: req.prompt.len(),
                limit: self.inner.context_length,
            });
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.inner
            .tx
            .lock()
            .map_err(|_| EngineError::Internal("engine queue poisoned".into()))?
            .send(Msg::Job(req, tx))
            .map_err(|_| EngineError::Internal("engine worker has stopped".into()))?;
        Ok(rx)
    }

    /// Generate; dropping the future cancels the request (its slot is freed at the next step).
    pub async fn generate(&self, req: GenerateRequest) -> Result<Generation, EngineError> {
        let rx = self.submit(req)?;
        rx.await
            .map_err(|_| EngineError::Internal("engine worker dropped the request".into()))?
    }

    /// Generate from synchronous code (not from inside an async runtime).
    pub fn generate_blocking(&self, req: GenerateRequest) -> Result<Generation, EngineError> {
        let rx = self.submit(req)?;
        rx.blocking_recv()
            .map_err(|_| EngineError::Internal("engine worker dropped the request".into()))?
    }
}
