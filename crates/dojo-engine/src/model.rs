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

use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor};

use crate::EngineError;
use crate::block::{
    LayerWeights, Norm, Positions, Proj, block, causal_attention, decode_attention,
};
pub use crate::config::{Arch, Config};
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

/// Per-sequence attention cache: for each layer, keys and values `(1, kv_heads, capacity,
/// head_dim)`.
///
/// Positions `0..shared_len` may lie in buffers shared with other sequences (`shared`): a
/// fork's prefix. Shared buffers are frozen: nothing writes to them again (a fork cannot
/// see another sequence's later writes, and a truncated sequence rewrites only its own
/// buffers). Positions `shared_len..len` are the cache's own (`own`, at index `position -
/// shared_len`), where every new position is written.
///
/// Why preallocated: appending by concatenation copies the whole cache for every decoded
/// token (~90 MB per token at 2,000 positions for SmolLM2-135M); here a token writes only its
/// own keys and values, and the buffers grow by doubling (amortised O(1) per token).
/// Truncating only moves `len` (and `shared_len`, when shorter than the shared prefix).
#[derive(Debug, Default)]
pub struct KvCache {
    shared: Option<Arc<[(Tensor, Tensor)]>>,
    shared_len: usize,
    own: Vec<Option<(Tensor, Tensor)>>,
    len: usize,
}

/// What the KV caches store (`dojo serve --kv-cache`, [`Model::kv_dtype`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvCacheType {
    /// What the `DOJO_ENGINE_KV` variable says (benchmarks compare both in one binary), else
    /// the model's own setting (f32 unless the caller set [`Model::kv_dtype`]).
    #[default]
    Auto,
    /// f32: a cached key or value is exactly what the forward pass computed.
    F32,
    /// f16, as llama.cpp's default cache: half the memory; keys and values are rounded to f16
    /// as they are written, so the logits move in their last digits and greedy outputs can part
    /// at near ties. On the CPU a decode step also reads half the bytes (rows are widened as
    /// they are read); on other devices the cache is converted to f32 for each step's attention,
    /// which saves the memory but costs time.
    F16,
}

impl KvCacheType {
    /// `auto`, `f32` or `f16` (the `DOJO_ENGINE_KV` variable, CLI flags).
    pub fn parse(s: &str) -> Option<KvCacheType> {
        match s {
            "auto" => Some(KvCacheType::Auto),
            "f32" => Some(KvCacheType::F32),
            "f16" => Some(KvCacheType::F16),
            _ => None,
        }
    }

    /// The dtype caches store: `F32` or `F16`; `Auto` reads `DOJO_ENGINE_KV` (a value other
    /// than `auto`, `f32` or `f16` is ignored with a warning), else `default`.
    pub fn resolve(self, default: DType) -> DType {
        let chosen = match self {
            KvCacheType::Auto => match std::env::var("DOJO_ENGINE_KV") {
                Ok(v) => KvCacheType::parse(v.trim()).unwrap_or_else(|| {
                    tracing::warn!(value = %v, "DOJO_ENGINE_KV: expected auto, f32 or f16; ignored");
                    KvCacheType::Auto
                }),
                Err(_) => KvCacheType::Auto,
            },
            other => other,
        };
        match chosen {
            KvCacheType::Auto => default,
            KvCacheType::F32 => DType::F32,
            KvCacheType::F16 => DType::F16,
        }
    }
}

/// First allocation, in positions (a short chat turn fits without growing).
const KV_MIN_CAPACITY: usize = 256;

impl KvCache {
    pub fn new() -> KvCache {
        KvCache::default()
    }

    /// Number of cached positions.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions held in buffers shared with other caches.
    pub fn shared_len(&self) -> usize {
        self.shared_len
    }

    /// A cache of the first `len` positions (at most all of them), for another sequence that
    /// shares them: copy-on-write, without copying them. The fork gets buffers of its own
    /// with room for `KV_MIN_CAPACITY` positions after them.
    ///
    /// The positions become shared in this cache too, once: usually its own buffers are
    /// frozen as the shared prefix and it goes on in fresh ones with its positions after
    /// `len` (none or a few decoded tokens); when part of them was already shared, or many
    /// positions lie after `len`, they are copied into one new shared buffer of their exact
    /// size instead (see `share_up_to`). Later forks of at most `len` positions copy
    /// nothing. A failed copy is an error and leaves this cache as it was.
    pub fn fork(&mut self, len: usize) -> candle_core::Result<KvCache> {
        let len = len.min(self.len);
        if len == 0 {
            return Ok(KvCache::default());
        }
        if len > self.shared_len {
            self.share_up_to(len)?;
        }
        // The fork's own buffers, allocated here rather than at its first write, which runs
        // on a compute pool thread: glibc hands that thread's heap chunks (freed activations)
        // back zeroed up front, where a fresh mapping is faulted in as positions are written
        // (measured: +25% peak RSS at 16 short conversations).
        let own = match &self.shared {
            Some(shared) => shared
                .iter()
                .map(|(k, v)| Ok(Some((room(k, KV_MIN_CAPACITY)?, room(v, KV_MIN_CAPACITY)?))))
                .collect::<candle_core::Result<Vec<_>>>()?,
            None => Vec::new(),
        };
        Ok(KvCache {
            shared: self.shared.clone(),
            shared_len: len,
            own,
            len,
        })
    }

    /// Make positions `0..upto` (`shared_len < upto <= len`) shared; see [`KvCache::fork`].
    /// Two ways:
    ///
    /// - Freeze (nothing shared yet, and no more positions past `upto` than before it): the
    ///   own buffers, which hold positions from 0, become the shared prefix as they are, and
    ///   this cache goes on in fresh buffers with its positions after `upto` (a copy of those).
    /// - Join (otherwise): the shared part, if any, and the own positions up to `upto` are
    ///   copied into one new buffer of exactly `upto` positions, and the own positions after
    ///   it move to the front of the own buffers. Freezing there would keep a whole buffer,
    ///   its long tail and room included, alive for as long as the forks live.
    ///
    /// No buffer is freed here: a large free raises glibc's dynamic mmap threshold, and later
    /// caches' buffers then come from its heap, zeroed up front, instead of fresh mappings
    /// faulted in as positions are written.
    fn share_up_to(&mut self, upto: usize) -> candle_core::Result<()> {
        let from = self.shared_len;
        let tail = self.len - upto;
        let freeze = from == 0 && tail <= upto;
        let mut frozen = Vec::with_capacity(self.own.len());
        let mut own = Vec::with_capacity(self.own.len());
        for li in 0..self.own.len() {
            let (k, v) = self.own_layer(li)?;
            if freeze {
                frozen.push((k.clone(), v.clone()));
                let rest = |t: &Tensor| copied(t, upto, tail, tail + KV_MIN_CAPACITY);
                own.push((rest(k)?, rest(v)?));
            } else {
                // (`keys_values` joins the shared part and the own positions into new
                // buffers; alone, the own positions are a view of the buffers kept below.)
                frozen.push(match self.shared_layer(li) {
                    Some(_) => self.keys_values(li, upto)?,
                    None => (copied(k, 0, upto, upto)?, copied(v, 0, upto, upto)?),
                });
                // Moved below, once nothing can fail.
                own.push((
                    copied(k, upto - from, tail, tail)?,
                    copied(v, upto - from, tail, tail)?,
                ));
            }
        }
        if freeze {
            self.own = own.into_iter().map(Some).collect();
        } else if tail > 0 {
            for (layer, (mk, mv)) in self.own.iter().zip(&own) {
                if let Some((k, v)) = layer {
                    k.slice_set(mk, 2, 0)?;
                    v.slice_set(mv, 2, 0)?;
                }
            }
        }
        self.shared = Some(frozen.into());
        self.shared_len = upto;
        Ok(())
    }

    /// Keep only the first `len` positions (a shared prompt prefix).
    pub fn truncate(&mut self, len: usize) -> Result<(), EngineError> {
        if len >= self.len {
            return Ok(());
        }
        if len == 0 {
            *self = KvCache::default();
            return Ok(());
        }
        // Shorter than the shared prefix: the own buffers now start at `len` (their contents
        // are dead; the allocation is reused).
        self.shared_len = self.shared_len.min(len);
        self.len = len;
        Ok(())
    }

    /// Write layer `li`'s new keys/values `(1, kv_heads, t, head_dim)` at position `pos`
    /// (the cache's length: positions are written in order) into the cache's own buffers,
    /// stored as `dtype`; a cache whose buffers hold another dtype (written by a model with
    /// another [`Model::kv_dtype`]) is refused.
    fn append(
        &mut self,
        li: usize,
        pos: usize,
        (k, v): (&Tensor, &Tensor),
        dtype: DType,
        max_positions: usize,
    ) -> candle_core::Result<()> {
        if pos < self.shared_len {
            candle_core::bail!("kv cache: write at {pos} inside the shared prefix");
        }
        let held = self
            .own
            .iter()
            .flatten()
            .next()
            .or_else(|| self.shared_layer(0));
        if let Some((hk, _)) = held.filter(|(hk, _)| hk.dtype() != dtype) {
            candle_core::bail!(
                "kv cache holds {:?} keys and values; this model writes {dtype:?}",
                hk.dtype()
            );
        }
        let (k, v) = (&k.to_dtype(dtype)?, &v.to_dtype(dtype)?);
        let at = pos - self.shared_len;
        let t = k.dim(2)?;
        let need = at + t;
        let slot = &mut self.own[li];
        let cap = slot.as_ref().map_or(0, |(ck, _)| ck.dim(2).unwrap_or(0));
        if cap < need {
            let new_cap = need
                .max(cap * 2)
                .max(KV_MIN_CAPACITY)
                .min(max_positions.saturating_sub(self.shared_len).max(need));
            *slot = Some(match slot.as_ref() {
                Some((ck, cv)) => (copied(ck, 0, at, new_cap)?, copied(cv, 0, at, new_cap)?),
                None => (room(k, new_cap)?, room(v, new_cap)?),
            });
        }
        let (ck, cv) = slot
            .as_ref()
            .ok_or_else(|| candle_core::Error::Msg("kv cache slot missing".into()))?;
        ck.slice_set(&k.contiguous()?, 2, at)?;
        cv.slice_set(&v.contiguous()?, 2, at)?;
        Ok(())
    }

    /// Layer `li`'s positions `0..len` as the decode kernel reads them: the shared prefix,
    /// then the cache's own positions.
    fn view(&self, li: usize, len: usize) -> candle_core::Result<dojo_kernels::CacheView<'_>> {
        let (k, v) = self.own_layer(li)?;
        Ok(dojo_kernels::CacheView {
            shared: self.shared_layer(li).map(|(k, v)| dojo_kernels::KvSpan {
                k,
                v,
                len: self.shared_len,
            }),
            own: dojo_kernels::KvSpan {
                k,
                v,
                len: len - self.shared_len,
            },
        })
    }

    /// Layer `li`'s keys and values of positions `0..len` as f32 tensors `(1, kv_heads, len,
    /// head_dim)` (a prefill's: its causal attention reads them contiguous, a copy either
    /// way).
    fn keys_values_f32(&self, li: usize, len: usize) -> candle_core::Result<(Tensor, Tensor)> {
        let (k, v) = self.keys_values(li, len)?;
        Ok((k.to_dtype(DType::F32)?, v.to_dtype(DType::F32)?))
    }

    /// Layer `li`'s keys and values of positions `0..len` as stored, `(1, kv_heads, len,
    /// head_dim)`.
    fn keys_values(&self, li: usize, len: usize) -> candle_core::Result<(Tensor, Tensor)> {
        let (k, v) = self.own_layer(li)?;
        let (n, own) = (self.shared_len, len - self.shared_len);
        match self.shared_layer(li) {
            Some((sk, sv)) => Ok((
                Tensor::cat(&[sk.narrow(2, 0, n)?, k.narrow(2, 0, own)?], 2)?,
                Tensor::cat(&[sv.narrow(2, 0, n)?, v.narrow(2, 0, own)?], 2)?,
            )),
            None => Ok((k.narrow(2, 0, own)?, v.narrow(2, 0, own)?)),
        }
    }

    /// Layer `li`'s own buffers (every layer has them once a pass has written to the cache).
    fn own_layer(&self, li: usize) -> candle_core::Result<&(Tensor, Tensor)> {
        self.own[li]
            .as_ref()
            .ok_or_else(|| candle_core::Error::Msg("kv cache layer missing".into()))
    }

    /// Layer `li`'s shared buffers, when positions are shared.
    fn shared_layer(&self, li: usize) -> Option<&(Tensor, Tensor)> {
        self.shared
            .as_ref()
            .filter(|_| self.shared_len > 0)
            .map(|s| &s[li])
    }

    /// Bytes of this cache's own buffers, capacity included; shared buffers are in
    /// [`KvCache::shared_bytes`].
    pub fn bytes(&self) -> usize {
        self.own.iter().flatten().map(pair_bytes).sum()
    }

    /// Bytes of the shared buffers this cache reads (held once for all the caches sharing
    /// them).
    pub fn shared_bytes(&self) -> usize {
        self.shared
            .iter()
            .flat_map(|s| s.iter())
            .map(pair_bytes)
            .sum()
    }

    /// Own layers ready for a pass of `layers` layers.
    fn prepare(&mut self, layers: usize) {
        if self.own.len() != layers {
            self.own = vec![None; layers];
        }
    }
}

/// Bytes of a layer's keys and values.
fn pair_bytes((k, v): &(Tensor, Tensor)) -> usize {
    (k.elem_count() + v.elem_count()) * k.dtype().size_in_bytes()
}

/// Zeroed buffers for `positions` positions of keys or values shaped like `t` `(1, kv_heads,
/// _, head_dim)`.
fn room(t: &Tensor, positions: usize) -> candle_core::Result<Tensor> {
    let (b, h, _, d) = t.dims4()?;
    Tensor::zeros((b, h, positions, d), t.dtype(), t.device())
}

/// Positions `start..start + n` of keys or values `t` copied into new buffers with room for
/// `capacity` positions. (Always a copy: with one key/value head the narrowed view counts as
/// contiguous, and `contiguous` would hand back the same storage.)
fn copied(t: &Tensor, start: usize, n: usize, capacity: usize) -> candle_core::Result<Tensor> {
    let out = room(t, capacity)?;
    if n > 0 {
        out.slice_set(&t.narrow(2, start, n)?.contiguous()?, 2, 0)?;
    }
    Ok(out)
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
            if c.len + 1 > cfg.max_position {
                return Err(EngineError::ContextLength {
                    tokens: c.len + 1,
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
        let positions: Vec<u32> = caches.iter().map(|c| c.len as u32).collect();
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
                    let pos = cache.len;
                    let (k, v) = (k.narrow(0, i, 1)?, v.narrow(0, i, 1)?);
                    cache.append(li, pos, (&k, &v), self.kv_dtype, cfg.max_position)?;
                }
                let views = caches
                    .iter()
                    .map(|c| c.view(li, c.len + 1))
                    .collect::<candle_core::Result<Vec<_>>>()?;
                decode_attention(q, &views)
            })?;
        }
        let x = rms_norm(&x, &self.norm, cfg.rms_eps)?;
        let logits = project(&self.lm_head, &x, dense_rows)?.to_dtype(DType::F32)?; // (b, vocab)
        let logits = logits.to_vec2::<f32>()?;
        // Only now: a pass that failed leaves every cache as it was.
        for c in caches.iter_mut() {
            c.len += 1;
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
        let pos = cache.len;
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
        cache.len = pos + t;
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
