//! One decoder-only transformer for Llama (SmolLM2), Qwen2/2.5 and Qwen3.
//!
//! They differ only in details (QKV biases for Qwen2, per-head q/k RMSNorm for Qwen3, tied
//! embeddings, interleaved RoPE for llama.cpp-converted Llama weights), so one implementation
//! with flags serves all of them. The KV cache is *outside* the model ([`KvCache`]): the engine
//! keeps one per sequence, truncates it to a shared prefix, and runs several conversations on
//! one set of weights. Weights are [`QMatMul`]s, which hold either GGUF quantized tensors or
//! dense tensors (safetensors, random init), so the same forward pass serves both. Each layer
//! is [`crate::block`]'s transformer block, the one dojo-train differentiates: a prefill
//! attends through the KV cache with the trainer's causal attention, a decode step through
//! `dojo_kernels::decode_attention`.

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor};

use crate::EngineError;
use crate::block::{
    LayerWeights, Norm, Positions, Proj, block, causal_attention, decode_attention,
};
pub use crate::config::{Arch, Config};
pub use crate::kv_cache::{KvCache, KvCacheType};
use dojo_kernels::rms_norm;

/// A linear layer: `x @ W^T (+ b)`.
#[derive(Debug, Clone)]
pub struct Linear {
    pub w: QMatMul,
    pub b: Option<Tensor>,
}

impl Linear {
    /// `dense_rows`: see [`project`].
    fn forward(&self, x: &Tensor, dense_rows: Option<usize>) -> candle_core::Result<Tensor> {
        let y = project(&self.w, x, dense_rows)?;
        match &self.b {
            Some(b) => y.broadcast_add(b),
            None => Ok(y),
        }
    }
}

/// `x @ W^T` on a weight as loaded. `dense_rows` (mixed weights, see
/// [`Model::dense_prefill_rows`]): from this many input rows on, a quantized weight is
/// dequantized for the call and multiplied with the dense GEMM; below it, Q4_1 and Q8_0
/// weights take dojo-kernels' SIMD kernels (candle has none for Q4_1, and its Q8_0 product
/// reads the weight once per row). `None` (quantized weights): candle's kernels throughout.
fn project(w: &QMatMul, x: &Tensor, dense_rows: Option<usize>) -> candle_core::Result<Tensor> {
    let rows = x.dims().iter().rev().nth(1).copied().unwrap_or(1);
    type Kernel = fn(&[f32], usize, usize, &[u8], usize) -> Vec<f32>;
    let kernel = |dtype| -> Option<Kernel> {
        match dtype {
            GgmlDType::Q4_1 if dojo_kernels::q4_1::available() => Some(dojo_kernels::q4_1::matmul),
            GgmlDType::Q8_0 if dojo_kernels::q8_0::available() => Some(dojo_kernels::q8_0::matmul),
            _ => None,
        }
    };
    match (w, dense_rows) {
        (QMatMul::QTensor(q), Some(min)) if rows >= min => dense(x, &dequantize(q, x.device())?),
        (QMatMul::QTensor(q), Some(_)) if x.device().is_cpu() => match kernel(q.dtype()) {
            Some(matmul) => {
                let (n, k) = q.shape().dims2()?;
                let mut out_dims = x.dims().to_vec();
                let xs = x.flatten_all()?.to_vec1::<f32>()?;
                let out = matmul(&xs, xs.len() / k, k, &q.data()?, n);
                if let Some(last) = out_dims.last_mut() {
                    *last = n;
                }
                Tensor::from_vec(out, out_dims, x.device())
            }
            None => w.forward(x),
        },
        (w, _) => w.forward(x),
    }
}

/// A quantized weight as a dense f32 tensor: Q4_1 and Q8_0 through dojo-kernels (parallel;
/// candle's is one thread), other formats through candle.
fn dequantize(q: &QTensor, device: &Device) -> candle_core::Result<Tensor> {
    let f = match q.dtype() {
        GgmlDType::Q4_1 if device.is_cpu() => dojo_kernels::q4_1::dequantize,
        GgmlDType::Q8_0 if device.is_cpu() => dojo_kernels::q8_0::dequantize,
        _ => return q.dequantize(device),
    };
    Tensor::from_vec(f(&q.data()?), q.shape(), device)
}

/// `x @ W^T` for a dense `W` on any leading dimensions of `x`, through dojo-kernels' matmul
/// on the CPU (2.2-2.4x candle's GEMM here; the trainer uses the same).
fn dense(x: &Tensor, w: &Tensor) -> candle_core::Result<Tensor> {
    let mut dims = x.dims().to_vec();
    let k = dims.pop().unwrap_or(1);
    let y = dojo_kernels::matmul_no_grad(&x.reshape(((), k))?, &w.t()?)?;
    dims.push(w.dim(0)?);
    y.reshape(dims)
}

/// One transformer block's weights.
#[derive(Debug, Clone)]
pub struct Layer {
    pub attn_norm: Tensor,
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    /// Qwen3 only: RMSNorm over each head's dims, before RoPE.
    pub q_norm: Option<Tensor>,
    pub k_norm: Option<Tensor>,
    pub ffn_norm: Tensor,
    pub gate: Linear,
    pub up: Linear,
    pub down: Linear,
}

/// A layer as one pass reads it: `dense_rows` as in [`project`].
struct LayerPass<'a> {
    layer: &'a Layer,
    dense_rows: Option<usize>,
}

impl LayerWeights for LayerPass<'_> {
    fn project(&self, p: Proj, x: &Tensor) -> candle_core::Result<Tensor> {
        let l = self.layer;
        let lin = match p {
            Proj::Q => &l.q,
            Proj::K => &l.k,
            Proj::V => &l.v,
            Proj::O => &l.o,
            Proj::Gate => &l.gate,
            Proj::Up => &l.up,
            Proj::Down => &l.down,
        };
        lin.forward(x, self.dense_rows)
    }

    fn norm(&self, n: Norm) -> Option<&Tensor> {
        let l = self.layer;
        match n {
            Norm::Attn => Some(&l.attn_norm),
            Norm::Ffn => Some(&l.ffn_norm),
            Norm::QHead => l.q_norm.as_ref(),
            Norm::KHead => l.k_norm.as_ref(),
        }
    }
}

/// Weights plus RoPE tables.
#[derive(Debug, Clone)]
pub struct Model {
    pub config: Config,
    pub embed: Tensor,
    pub layers: Vec<Layer>,
    pub norm: Tensor,
    pub lm_head: QMatMul,
    /// Prefill through the dense GEMM: a forward pass over at least this many tokens
    /// dequantizes each quantized weight for the call. Why: candle's quantized matmul is a
    /// vec-dot per (row, column) pair, ~5x slower than its f32 GEMM on a 128-token batch, while
    /// dequantizing a weight costs about as much as one decode step reading it. Decode (few
    /// rows) stays on the quantized kernels, which read 4-8x fewer bytes; with this set, Q4_1
    /// weights use [`crate::q4_1`], Q8_0 weights [`dojo_kernels::q8_0`].
    pub dense_prefill_rows: Option<usize>,
    /// What the KV caches store: f32 (default), or f16 (half the memory, as llama.cpp's
    /// default cache; keys and values are rounded to f16 as they are written and widened back
    /// to f32 as they are read). See [`KvCacheType::F16`]. Other dtypes work, op by op.
    pub kv_dtype: DType,
    cos: Tensor,
    sin: Tensor,
    device: Device,
}

/// The cos / sin tables of default RoPE for every position up to `max_position` (f32, as
/// transformers computes them); the trainer builds its tables with this too.
pub fn rope_tables(cfg: &Config, device: &Device) -> candle_core::Result<(Tensor, Tensor)> {
    let half = cfg.head_dim / 2;
    let inv: Vec<f32> = (0..half)
        .map(|i| 1.0 / cfg.rope_theta.powf(2.0 * i as f32 / cfg.head_dim as f32))
        .collect();
    let inv = Tensor::from_vec(inv, (1, half), device)?;
    let t = Tensor::arange(0u32, cfg.max_position as u32, device)?
        .to_dtype(DType::F32)?
        .reshape((cfg.max_position, 1))?;
    let freqs = t.broadcast_mul(&inv)?;
    Ok((freqs.cos()?, freqs.sin()?))
}

impl Model {
    /// Assemble a model; checks the shapes that would otherwise fail deep inside a forward pass.
    pub fn new(
        config: Config,
        embed: Tensor,
        layers: Vec<Layer>,
        norm: Tensor,
        lm_head: QMatMul,
        device: &Device,
    ) -> Result<Model, EngineError> {
        if config.num_heads == 0
            || config.num_kv_heads == 0
            || !config.num_heads.is_multiple_of(config.num_kv_heads)
        {
            return Err(EngineError::Model(format!(
                "{} attention heads cannot be grouped over {} key/value heads",
                config.num_heads, config.num_kv_heads
            )));
        }
        if layers.len() != config.num_layers {
            return Err(EngineError::Model(format!(
                "config says {} layers, weights have {}",
                config.num_layers,
                layers.len()
            )));
        }
        let (v, h) = embed.dims2()?;
        if h != config.hidden_size {
            return Err(EngineError::Model(format!(
                "embedding width {h} != hidden size {}",
                config.hidden_size
            )));
        }
        let mut config = config;
        config.vocab_size = v;
        let (cos, sin) = rope_tables(&config, device)?;
        Ok(Model {
            config,
            embed,
            layers,
            norm,
            lm_head,
            dense_prefill_rows: None,
            kv_dtype: DType::F32,
            cos,
            sin,
            device: device.clone(),
        })
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Run `tokens` at positions `cache.len()..`, extend `cache`, and return the logits of the
    /// last position (`vocab_size` f32).
    pub fn forward_last(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
    ) -> Result<Vec<f32>, EngineError> {
        if let [token] = tokens {
            return self.decode_one(*token, cache);
        }
        let logits = self.forward(tokens, cache, false)?;
        Ok(logits.flatten_all()?.to_vec1::<f32>()?)
    }

    /// A decode step of one sequence: the batched decode step with one row, so that a
    /// sequence decodes the same alone as beside others.
    fn decode_one(&self, token: u32, cache: &mut KvCache) -> Result<Vec<f32>, EngineError> {
        self.forward_decode_batch(&[token], &mut [cache])?
            .pop()
            .ok_or_else(|| EngineError::Internal("decode step returned no logits".into()))
    }

    /// Run `tokens` and return logits for every position, `(len, vocab)` (prompt logprobs,
    /// training-style scoring).
    pub fn forward_all(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor, EngineError> {
        self.forward(tokens, cache, true)
    }

    /// One forward pass, run inside [`compute_pool`] so that the many small parallel loops of
    /// the kernels (norms, attention, the quantized matmuls) start from a pool worker: with one
    /// thread they then run inline, instead of each handing its work to the global pool's
    /// worker and waiting (two context switches per op, hundreds of ops per token).
    ///
    /// One token is a decode step ([`Model::decode_one`]).
    fn forward(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        all: bool,
    ) -> Result<Tensor, EngineError> {
        if let [token] = tokens {
            let row = self.decode_one(*token, cache)?;
            let n = row.len();
            return Ok(Tensor::from_vec(row, (1, n), &self.device)?);
        }
        match compute_pool() {
            Some(pool) => pool.install(|| self.forward_inner(tokens, cache, all)),
            None => self.forward_inner(tokens, cache, all),
        }
    }

    /// One decode step for a batch of sequences: `tokens[i]` is run at position
    /// `caches[i].len()` and appended to `caches[i]`; returns each sequence's logits.
    ///
    /// Why: on a CPU a decode step costs the read of every weight; stacking the sequences as
    /// rows of one matmul reads them once per step instead of once per sequence. Attention is
    /// per sequence (each has its own cache length). A row's result does not depend on the
    /// others: every per-row kernel computes exactly what the single-sequence step computes
    /// (quantized weights stay on the quantized kernels at any batch size).
    pub fn forward_decode_batch(
        &self,
        tokens: &[u32],
        caches: &mut [&mut KvCache],
    ) -> Result<Vec<Vec<f32>>, EngineError> {
        match compute_pool() {
            Some(pool) => pool.install(|| self.decode_batch_inner(tokens, caches)),
            None => self.decode_batch_inner(tokens, caches),
        }
    }

    fn decode_batch_inner(
        &self,
        tokens: &[u32],
        caches: &mut [&mut KvCache],
    ) -> Result<Vec<Vec<f32>>, EngineError> {
        let cfg = &self.config;
        let b = tokens.len();
        if b != caches.len() {
            return Err(EngineError::Internal(format!(
                "decode batch of {b} tokens for {} caches",
                caches.len()
            )));
        }
        if b == 0 {
            return Ok(Vec::new());
        }
        for c in caches.iter_mut() {
            if c.len() + 1 > cfg.max_position {
                return Err(EngineError::ContextLength {
                    tokens: c.len() + 1,
                    limit: cfg.max_position,
                });
            }
            c.prepare(cfg.num_layers);
        }
        if let Some(&bad) = tokens.iter().find(|&&id| id as usize >= cfg.vocab_size) {
            return Err(EngineError::Request(format!(
                "token id {bad} is outside the vocabulary (size {})",
                cfg.vocab_size
            )));
        }
        let positions: Vec<u32> = caches.iter().map(|c| c.len() as u32).collect();
        let pos_ids = Tensor::new(positions.as_slice(), &self.device)?;
        let hd = cfg.head_dim;
        // RoPE tables of each sequence's own position: (b, 1, hd / 2).
        let cos = self
            .cos
            .index_select(&pos_ids, 0)?
            .reshape((b, 1, hd / 2))?;
        let sin = self
            .sin
            .index_select(&pos_ids, 0)?
            .reshape((b, 1, hd / 2))?;
        let ids = Tensor::new(tokens, &self.device)?;
        // The sequences are the rows of one (b, hidden) activation, each at its own position.
        let mut x = self.embed.index_select(&ids, 0)?;
        let at = Positions {
            b,
            t: 1,
            cos: &cos,
            sin: &sin,
        };
        // Quantized weights keep their quantized kernel at any batch size (the dense
        // prefill threshold would dequantize every weight on every step).
        let dense_rows = self.dense_prefill_rows.map(|_| usize::MAX);
        for (li, layer) in self.layers.iter().enumerate() {
            let w = LayerPass { layer, dense_rows };
            x = block(cfg, &w, &x, &at, |q, k, v| {
                // Each sequence's new key and value into its cache, then one attention kernel
                // over all of them (each query against its own cache, grouped heads).
                for (i, cache) in caches.iter_mut().enumerate() {
                    let pos = cache.len();
                    let (k, v) = (k.narrow(0, i, 1)?, v.narrow(0, i, 1)?);
                    cache.append(li, pos, (&k, &v), self.kv_dtype, cfg.max_position)?;
                }
                let views = caches
                    .iter()
                    .map(|c| c.view(li, c.len() + 1))
                    .collect::<candle_core::Result<Vec<_>>>()?;
                decode_attention(q, &views)
            })?;
        }
        let x = rms_norm(&x, &self.norm, cfg.rms_eps)?;
        let logits = project(&self.lm_head, &x, dense_rows)?.to_dtype(DType::F32)?; // (b, vocab)
        let logits = logits.to_vec2::<f32>()?;
        // Only now: a pass that failed leaves every cache as it was.
        for c in caches.iter_mut() {
            c.commit(c.len() + 1);
        }
        Ok(logits)
    }

    fn forward_inner(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        all: bool,
    ) -> Result<Tensor, EngineError> {
        let cfg = &self.config;
        let t = tokens.len();
        let pos = cache.len();
        if t == 0 {
            return Err(EngineError::Model("forward called with no tokens".into()));
        }
        if pos + t > cfg.max_position {
            return Err(EngineError::ContextLength {
                tokens: pos + t,
                limit: cfg.max_position,
            });
        }
        if let Some(&bad) = tokens.iter().find(|&&id| id as usize >= cfg.vocab_size) {
            return Err(EngineError::Request(format!(
                "token id {bad} is outside the vocabulary (size {})",
                cfg.vocab_size
            )));
        }
        cache.prepare(cfg.num_layers);
        let ids = Tensor::new(tokens, &self.device)?;
        let mut x = self.embed.index_select(&ids, 0)?; // (t, hidden)
        let cos = self.cos.narrow(0, pos, t)?;
        let sin = self.sin.narrow(0, pos, t)?;
        let at = Positions {
            b: 1,
            t,
            cos: &cos,
            sin: &sin,
        };
        let dense_rows = self.dense_prefill_rows;
        for (li, layer) in self.layers.iter().enumerate() {
            let w = LayerPass { layer, dense_rows };
            x = block(cfg, &w, &x, &at, |q, k, v| {
                // The new keys and values into the cache; the queries attend to all of it.
                cache.append(li, pos, (k, v), self.kv_dtype, cfg.max_position)?;
                let (k, v) = cache.keys_values_f32(li, pos + t)?;
                causal_attention(q, &k, &v)
            })?;
        }
        cache.commit(pos + t);
        let x = if all { x } else { x.narrow(0, t - 1, 1)? };
        let x = rms_norm(&x, &self.norm, cfg.rms_eps)?;
        let logits = project(&self.lm_head, &x, dense_rows)?; // (t|1, vocab)
        Ok(logits.to_dtype(DType::F32)?)
    }
}

/// The thread pool forward passes run in: as many threads as candle would use
/// (`RAYON_NUM_THREADS`, else the cores); `None` if it cannot be built (then the global pool).
fn compute_pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(candle_core::utils::get_num_threads())
            .thread_name(|i| format!("dojo-engine-compute-{i}"))
            .build()
            .ok()
    })
    .as_ref()
}

/// Log-softmax of one logits row (numerically stable), as f32.
pub fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = logits.iter().map(|&l| (l - max).exp()).sum();
    let lse = max + sum.ln();
    logits.iter().map(|&l| l - lse).collect()
}

/// Index of the largest value (first on ties).
pub fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}
