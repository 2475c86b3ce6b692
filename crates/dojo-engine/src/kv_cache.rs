//! The per-sequence KV cache of the embedded engine: every layer's keys and values of the
//! positions a sequence has run, kept *outside* the model ([`crate::model`]), so that one set
//! of weights serves many sequences and the engine can keep, truncate and fork caches.
//!
//! - Preallocated: a token writes only its own keys and values into buffers that grow by
//!   doubling, instead of concatenating (a copy of the whole cache per token).
//! - Copy-on-write: [`KvCache::fork`] hands another sequence a prompt's positions without
//!   copying them; the shared prefix is frozen (never written again), so neither sequence
//!   sees the other's later positions. The engine's prefix reuse and its batched decode of
//!   requests sharing a prompt rest on this.
//! - Storage dtype ([`KvCacheType`]): f32, or f16 as llama.cpp's default cache (half the
//!   memory; keys and values are rounded as they are written and widened back as they are read).
//!
//! The model writes through the crate-internal `prepare` / `append` / `commit` and reads
//! through `view` (the decode kernel's) or `keys_values_f32` (a prefill's causal attention).

use std::sync::Arc;

use candle_core::{DType, Tensor};

use crate::EngineError;

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
///
/// [`Model::kv_dtype`]: crate::Model::kv_dtype
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvCacheType {
    /// What the `DOJO_ENGINE_KV` variable says (benchmarks compare both in one binary), else
    /// the model's own setting (f32 unless the caller set [`Model::kv_dtype`]).
    ///
    /// [`Model::kv_dtype`]: crate::Model::kv_dtype
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
    /// another [`Model::kv_dtype`](crate::Model::kv_dtype)) is refused. The positions count
    /// once every layer is written: see [`KvCache::commit`].
    pub(crate) fn append(
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
    pub(crate) fn view(
        &self,
        li: usize,
        len: usize,
    ) -> candle_core::Result<dojo_kernels::CacheView<'_>> {
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
    pub(crate) fn keys_values_f32(
        &self,
        li: usize,
        len: usize,
    ) -> candle_core::Result<(Tensor, Tensor)> {
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

    /// A pass has written positions `len() .. len` into every layer ([`KvCache::append`]):
    /// they now count. Separate from `append` so that a pass failing partway (some layers
    /// written, others not) leaves the cache's length as it was.
    pub(crate) fn commit(&mut self, len: usize) {
        self.len = len;
    }

    /// Own layers ready for a pass of `layers` layers.
    pub(crate) fn prepare(&mut self, layers: usize) {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use candle_core::{DType, Device, Tensor};

    use super::{KV_MIN_CAPACITY, KvCache, KvCacheType};

    const LAYERS: usize = 2;
    const HEADS: usize = 2;
    const DIM: usize = 3;
    /// The model's position limit: large enough not to cap a buffer unless a test says so.
    const MAX: usize = 4096;

    /// Layer `li`'s keys and values `(1, HEADS, t, DIM)` for positions `from..from + t`, as
    /// written by `writer`: each element encodes (writer, layer, position, head, dim), so a
    /// read-back shows which write every position came from. Values are the keys negated.
    /// (Multiples of 0.1: most are not f16 values, so an f16 cache has to round them.)
    fn kv(li: usize, from: usize, t: usize, writer: usize) -> (Tensor, Tensor) {
        let mut k = Vec::with_capacity(HEADS * t * DIM);
        for h in 0..HEADS {
            for p in from..from + t {
                for d in 0..DIM {
                    k.push((writer * 100_000 + li * 10_000 + p * 10 + h * DIM + d) as f32 * 0.1);
                }
            }
        }
        let k = Tensor::from_vec(k, (1, HEADS, t, DIM), &Device::Cpu).unwrap();
        let v = k.neg().unwrap();
        (k, v)
    }

    /// One pass of `t` positions as the model runs it: `prepare`, every layer's `append` at
    /// the cache's length, then `commit`.
    fn write(
        c: &mut KvCache,
        t: usize,
        writer: usize,
        dtype: DType,
        max: usize,
    ) -> candle_core::Result<()> {
        let from = c.len();
        c.prepare(LAYERS);
        for li in 0..LAYERS {
            let (k, v) = kv(li, from, t, writer);
            c.append(li, from, (&k, &v), dtype, max)?;
        }
        c.commit(from + t);
        Ok(())
    }

    fn push(c: &mut KvCache, t: usize, writer: usize) {
        write(c, t, writer, DType::F32, MAX).unwrap();
    }

    fn flat(t: &Tensor) -> Vec<f32> {
        t.to_dtype(DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap()
    }

    /// Every layer's keys of positions `0..len()`, as f32. Reads both ways the model does (a
    /// prefill's `keys_values_f32`, the decode kernel's `view`) and checks they agree, and
    /// that the values are the keys negated.
    fn read(c: &KvCache) -> Vec<Vec<f32>> {
        (0..LAYERS)
            .map(|li| {
                let (k, v) = c.keys_values_f32(li, c.len()).unwrap();
                let keys = flat(&k);
                assert_eq!(flat(&v), keys.iter().map(|x| -x).collect::<Vec<_>>());
                let view = c.view(li, c.len()).unwrap();
                assert_eq!(view.shared.map_or(0, |s| s.len), c.shared_len());
                let mut spans = Vec::new();
                spans.extend(view.shared.map(|s| s.k.narrow(2, 0, s.len).unwrap()));
                spans.push(view.own.k.narrow(2, 0, view.own.len).unwrap());
                assert_eq!(flat(&Tensor::cat(&spans, 2).unwrap()), keys);
                keys
            })
            .collect()
    }

    /// What `read` should see after writes of `(positions, writer)`, in order from position 0.
    fn expected(writes: &[(usize, usize)]) -> Vec<Vec<f32>> {
        (0..LAYERS)
            .map(|li| {
                let mut from = 0;
                let keys: Vec<Tensor> = writes
                    .iter()
                    .map(|&(t, writer)| {
                        from += t;
                        kv(li, from - t, t, writer).0
                    })
                    .collect();
                flat(&Tensor::cat(&keys, 2).unwrap())
            })
            .collect()
    }

    /// Bytes of one position's keys and values over all layers.
    fn per_position(dtype: DType) -> usize {
        LAYERS * 2 * HEADS * DIM * dtype.size_in_bytes()
    }

    #[test]
    fn appended_positions_read_back_in_order() {
        let mut c = KvCache::new();
        assert!(c.is_empty());
        push(&mut c, 3, 0); // a prefill
        push(&mut c, 1, 1); // decode steps
        push(&mut c, 1, 2);
        assert_eq!((c.len(), c.shared_len(), c.is_empty()), (5, 0, false));
        assert_eq!(read(&c), expected(&[(3, 0), (1, 1), (1, 2)]));
        // Past the first allocation: the buffers grow and keep what was written.
        push(&mut c, KV_MIN_CAPACITY, 3);
        assert_eq!(
            read(&c),
            expected(&[(3, 0), (1, 1), (1, 2), (KV_MIN_CAPACITY, 3)])
        );
    }

    #[test]
    fn a_fork_sees_the_prefix_and_neither_side_sees_the_others_later_writes() {
        let mut parent = KvCache::new();
        push(&mut parent, 5, 0);
        let mut fork = parent.fork(3).unwrap();
        assert_eq!((fork.len(), fork.shared_len()), (3, 3));
        assert_eq!((parent.len(), parent.shared_len()), (5, 3));
        assert_eq!(read(&fork), expected(&[(3, 0)]));
        assert_eq!(read(&parent), expected(&[(5, 0)]));

        push(&mut fork, 2, 1);
        push(&mut parent, 1, 2);
        assert_eq!(read(&fork), expected(&[(3, 0), (2, 1)]));
        assert_eq!(read(&parent), expected(&[(5, 0), (1, 2)]));

        // Another fork of the prefix reads the same buffers (nothing copied), and none of the
        // first fork's positions.
        let mut second = parent.fork(3).unwrap();
        let buffers = |c: &KvCache| c.shared.clone().unwrap();
        assert!(Arc::ptr_eq(&buffers(&fork), &buffers(&second)));
        assert_eq!(read(&second), expected(&[(3, 0)]));
        // The shared prefix is frozen: a write inside it is refused.
        let (k, v) = kv(0, 1, 1, 9);
        assert!(second.append(0, 1, (&k, &v), DType::F32, MAX).is_err());

        // A fork of a fork, past the shared prefix of its parent.
        let mut grandchild = fork.fork(4).unwrap();
        push(&mut grandchild, 1, 3);
        assert_eq!(read(&grandchild), expected(&[(3, 0), (1, 1), (1, 3)]));
        assert_eq!(read(&fork), expected(&[(3, 0), (2, 1)]));

        // At most the parent's length; an empty fork shares nothing.
        let whole = parent.fork(100).unwrap();
        assert_eq!((whole.len(), whole.shared_len()), (6, 6));
        assert_eq!(read(&whole), expected(&[(5, 0), (1, 2)]));
        assert_eq!(read(&parent), expected(&[(5, 0), (1, 2)]));
        assert_eq!(read(&second), expected(&[(3, 0)]));
        assert!(parent.fork(0).unwrap().is_empty());
        assert!(KvCache::new().fork(3).unwrap().is_empty());
    }

    #[test]
    fn share_up_to_freezes_the_own_buffers_or_joins_into_an_exact_buffer() {
        let per = per_position(DType::F32);

        // Freeze (nothing shared, no more positions after `upto` than before it): the own
        // buffers, room included, become the prefix; fresh ones hold the 2 positions after it.
        let mut c = KvCache::new();
        push(&mut c, 10, 0);
        let own = c.bytes();
        c.share_up_to(8).unwrap();
        assert_eq!((c.len(), c.shared_len()), (10, 8));
        assert_eq!(c.shared_bytes(), own);
        assert_eq!(c.bytes(), (2 + KV_MIN_CAPACITY) * per);
        assert_eq!(read(&c), expected(&[(10, 0)]));
        push(&mut c, 1, 1);
        assert_eq!(read(&c), expected(&[(10, 0), (1, 1)]));

        // Join (part already shared): one new shared buffer of exactly `upto` positions; the
        // own positions after it move to the front of the same own buffers.
        let frozen = c.shared.clone().unwrap();
        let own = c.bytes();
        c.share_up_to(9).unwrap();
        assert_eq!((c.len(), c.shared_len()), (11, 9));
        assert_eq!((c.shared_bytes(), c.bytes()), (9 * per, own));
        assert!(!Arc::ptr_eq(&frozen, c.shared.as_ref().unwrap()));
        assert_eq!(read(&c), expected(&[(10, 0), (1, 1)]));
        push(&mut c, 1, 2);
        assert_eq!(read(&c), expected(&[(10, 0), (1, 1), (1, 2)]));

        // Join (nothing shared, but more positions after `upto` than before it): freezing
        // would keep the whole buffer alive for a short prefix.
        let mut c = KvCache::new();
        push(&mut c, 10, 0);
        let own = c.bytes();
        c.share_up_to(2).unwrap();
        assert_eq!((c.len(), c.shared_len()), (10, 2));
        assert_eq!((c.shared_bytes(), c.bytes()), (2 * per, own));
        assert_eq!(read(&c), expected(&[(10, 0)]));
        push(&mut c, 1, 1);
        assert_eq!(read(&c), expected(&[(10, 0), (1, 1)]));
    }

    #[test]
    fn truncate_keeps_a_prefix_and_later_writes_replace_the_rest() {
        let mut c = KvCache::new();
        push(&mut c, 6, 0);
        let bytes = c.bytes();
        c.truncate(10).unwrap(); // not shorter: nothing to do
        assert_eq!(c.len(), 6);
        c.truncate(4).unwrap();
        assert_eq!((c.len(), c.bytes()), (4, bytes)); // the allocation is reused
        assert_eq!(read(&c), expected(&[(4, 0)]));
        push(&mut c, 2, 1);
        assert_eq!(read(&c), expected(&[(4, 0), (2, 1)]));

        // Shorter than the shared prefix: the cache writes its own buffers from there, and a
        // fork sharing the prefix keeps its positions.
        let fork = c.fork(6).unwrap();
        assert_eq!(c.shared_len(), 6);
        c.truncate(3).unwrap();
        assert_eq!((c.len(), c.shared_len()), (3, 3));
        push(&mut c, 2, 2);
        assert_eq!(read(&c), expected(&[(3, 0), (2, 2)]));
        assert_eq!(read(&fork), expected(&[(4, 0), (2, 1)]));

        // To nothing: an empty cache, holding no buffers.
        c.truncate(0).unwrap();
        assert!(c.is_empty());
        assert_eq!((c.shared_len(), c.bytes(), c.shared_bytes()), (0, 0, 0));
        push(&mut c, 1, 3);
        assert_eq!(read(&c), expected(&[(1, 3)]));
    }

    #[test]
    fn f16_caches_store_f16_and_read_back_the_input_to_f16_precision() {
        let mut c16 = KvCache::new();
        let mut c32 = KvCache::new();
        write(&mut c16, 5, 0, DType::F16, MAX).unwrap();
        write(&mut c32, 5, 0, DType::F32, MAX).unwrap();
        for li in 0..LAYERS {
            let (k, v) = c16.keys_values(li, 5).unwrap();
            assert_eq!((k.dtype(), v.dtype()), (DType::F16, DType::F16));
            let (k, v) = c16.keys_values_f32(li, 5).unwrap();
            assert_eq!((k.dtype(), v.dtype()), (DType::F32, DType::F32));
            let input = kv(li, 0, 5, 0).0;
            // Exactly the input rounded to f16: within half an f16 ulp (2^-11 relative).
            let rounded = input.to_dtype(DType::F16).unwrap();
            assert_eq!(flat(&k), flat(&rounded));
            for (got, want) in flat(&k).iter().zip(flat(&input)) {
                assert!((got - want).abs() <= want.abs() / 2048.0, "{got} vs {want}");
            }
        }
        // Rounded as written: most of the inputs are not f16 values.
        assert_ne!(read(&c16), read(&c32));
        assert_eq!(c16.bytes() * 2, c32.bytes());

        // A cache of f16 refuses f32 keys and values (a model with another `kv_dtype`), and
        // its length stays; its forks store f16 too.
        assert!(write(&mut c16, 1, 1, DType::F32, MAX).is_err());
        assert_eq!(c16.len(), 5);
        let mut fork = c16.fork(5).unwrap();
        assert!(write(&mut fork, 1, 1, DType::F32, MAX).is_err());
        write(&mut fork, 1, 1, DType::F16, MAX).unwrap();
        assert_eq!(fork.keys_values(0, 6).unwrap().0.dtype(), DType::F16);
    }

    #[test]
    fn bytes_count_own_capacity_and_shared_bytes_the_shared_buffers() {
        let per = per_position(DType::F32);
        let mut c = KvCache::new();
        assert_eq!((c.bytes(), c.shared_bytes()), (0, 0));
        push(&mut c, 3, 0);
        assert_eq!(c.bytes(), KV_MIN_CAPACITY * per); // the first allocation
        push(&mut c, KV_MIN_CAPACITY - 3, 0);
        assert_eq!(c.bytes(), KV_MIN_CAPACITY * per); // full, not grown
        push(&mut c, 1, 0);
        assert_eq!(c.bytes(), 2 * KV_MIN_CAPACITY * per); // doubled

        // Growth stops at the model's position limit.
        let mut capped = KvCache::new();
        write(&mut capped, 3, 0, DType::F32, 300).unwrap();
        write(&mut capped, KV_MIN_CAPACITY, 0, DType::F32, 300).unwrap();
        assert_eq!(capped.bytes(), 300 * per);

        // A fork holds room of its own and reads the parent's buffers, which both count in
        // `shared_bytes` (held once).
        let mut parent = KvCache::new();
        push(&mut parent, 10, 0);
        let own = parent.bytes();
        let mut fork = parent.fork(10).unwrap();
        assert_eq!(parent.shared_bytes(), own);
        assert_eq!(fork.shared_bytes(), own);
        assert_eq!(fork.bytes(), KV_MIN_CAPACITY * per);
        assert_eq!(parent.bytes(), KV_MIN_CAPACITY * per);
        // Truncating keeps the shared buffers (other forks read them).
        fork.truncate(4).unwrap();
        assert_eq!(fork.shared_bytes(), own);
    }

    #[test]
    fn cache_types_parse_and_resolve() {
        assert_eq!(KvCacheType::parse("auto"), Some(KvCacheType::Auto));
        assert_eq!(KvCacheType::parse("f32"), Some(KvCacheType::F32));
        assert_eq!(KvCacheType::parse("f16"), Some(KvCacheType::F16));
        assert_eq!(KvCacheType::parse("bf16"), None);
        assert_eq!(KvCacheType::F32.resolve(DType::F16), DType::F32);
        assert_eq!(KvCacheType::F16.resolve(DType::F32), DType::F16);
        // `Auto` is the model's setting unless `DOJO_ENGINE_KV` overrides it (not set here
        // unless the environment running the tests did).
        if std::env::var_os("DOJO_ENGINE_KV").is_none() {
            assert_eq!(KvCacheType::Auto.resolve(DType::F16), DType::F16);
        }
    }
}
