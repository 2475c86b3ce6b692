//! The worker thread of an [`Engine`](super::Engine): the only owner of the weights, running
//! every request by the scheduling the engine's module doc describes (continuous batching or
//! round-robin, shared prefill by forking a running sequence's cache, prefix reuse from a pool
//! of finished caches).

use super::*;

struct Seq {
    /// Engine-unique, for fork references.
    id: u64,
    /// Waiting to share the first `.1` positions of sequence `.0`'s cache (shared prefill).
    fork: Option<(u64, usize)>,
    /// The logits after the whole prompt (batching only): a request with the same prompt
    /// samples its first token from them, and so gets exactly what a separate prefill gives.
    prompt_logits: Option<Arc<Vec<f32>>>,
    req: GenerateRequest,
    reply: Reply,
    cache: KvCache,
    /// Prompt + generated tokens; `cache` holds the KV of `tokens[..cache.len()]`.
    tokens: Vec<u32>,
    generated: Vec<u32>,
    sampled: Vec<Sampled>,
    sampler: Sampler,
    cached_tokens: usize,
}

pub(super) struct Worker {
    pub(super) model: Model,
    pub(super) tokenizer: dojo_tokenizer::Tokenizer,
    pub(super) stop_ids: Vec<u32>,
    pub(super) rx: mpsc::Receiver<Msg>,
    pub(super) stats: Arc<Stats>,
    /// Finished caches for prefix reuse: (tokens held, cache), most recently used last.
    pub(super) pool: Vec<(Vec<u32>, KvCache)>,
    pub(super) opts: EngineOptions,
    pub(super) context_length: usize,
    /// Continuous batching (else round-robin), see the module doc.
    pub(super) batch: bool,
    pub(super) next_id: u64,
}

impl Seq {
    /// Tokens not yet in the cache: `1` means ready to decode (or to run its last prompt
    /// token, which batches the same way).
    fn pending(&self) -> usize {
        self.tokens.len() - self.cache.len()
    }
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl Worker {
    pub(super) fn run(mut self) {
        let mut waiting: VecDeque<(GenerateRequest, Reply)> = VecDeque::new();
        let mut active: VecDeque<Seq> = VecDeque::new();
        loop {
            // Take new work; block only when idle.
            loop {
                let msg = if active.is_empty() && waiting.is_empty() {
                    match self.rx.recv() {
                        Ok(m) => m,
                        Err(_) => return,
                    }
                } else {
                    match self.rx.try_recv() {
                        Ok(m) => m,
                        Err(mpsc::TryRecvError::Empty) => break,
                        Err(mpsc::TryRecvError::Disconnected) => return,
                    }
                };
                match msg {
                    Msg::Job(req, reply) => waiting.push_back((req, reply)),
                    Msg::ClearCache => self.pool.clear(),
                    Msg::Shutdown => return,
                }
            }
            while active.len() < self.opts.max_active.max(1) {
                let Some((req, reply)) = waiting.pop_front() else {
                    break;
                };
                if reply.is_closed() {
                    self.stats.cancelled.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let seq = self.start(req, reply, &active);
                active.push_back(seq);
            }
            if self.batch {
                self.batched_step(&mut active);
            } else {
                self.round_robin_step(&mut active);
            }
        }
    }

    /// One sequence advances by one step, then goes to the back of the line.
    fn round_robin_step(&mut self, active: &mut VecDeque<Seq>) {
        let Some(seq) = active.pop_front() else {
            return;
        };
        if seq.reply.is_closed() {
            self.stats.cancelled.fetch_add(1, Ordering::Relaxed);
            self.release(seq.tokens, seq.cache);
            return;
        }
        self.step_alone(seq, active);
    }

    /// Run `seq`'s next step on its own; requeue it unless it is finished or failed.
    fn step_alone(&mut self, mut seq: Seq, active: &mut VecDeque<Seq>) {
        match self.step(&mut seq) {
            Ok(false) => active.push_back(seq),
            Ok(true) => self.finish(seq),
            Err(e) => {
                let _ = seq.reply.send(Err(e));
            }
        }
    }

    /// One prefill chunk (the first sequence still prefilling, which then goes to the back),
    /// then one decode step for every sequence ready to decode, as one forward pass.
    fn batched_step(&mut self, active: &mut VecDeque<Seq>) {
        let mut i = 0;
        while i < active.len() {
            if active[i].reply.is_closed() {
                if let Some(seq) = active.remove(i) {
                    self.stats.cancelled.fetch_add(1, Ordering::Relaxed);
                    self.release(seq.tokens, seq.cache);
                }
            } else {
                i += 1;
            }
        }
        self.resolve_forks(active);
        if let Some(i) = active
            .iter()
            .position(|s| s.fork.is_none() && s.pending() > 1)
            && let Some(seq) = active.remove(i)
        {
            self.step_alone(seq, active);
        }
        // Taken out of `active` before the forward pass: afterwards their caches hold the
        // token, so "ready to decode" no longer picks them out.
        let mut batch = drain_where(active, |s| s.fork.is_none() && s.pending() == 1);
        if batch.is_empty() {
            return;
        }
        let tokens: Vec<u32> = batch.iter().map(|s| s.tokens[s.cache.len()]).collect();
        self.stats.decode_batches.fetch_add(1, Ordering::Relaxed);
        self.stats
            .max_decode_batch
            .fetch_max(batch.len() as u64, Ordering::Relaxed);
        let mut caches: Vec<&mut KvCache> = batch.iter_mut().map(|s| &mut s.cache).collect();
        let result = self.model.forward_decode_batch(&tokens, &mut caches);
        drop(caches);
        let logits = match result {
            Ok(l) => l,
            Err(e) => {
                // Not expected (each sequence stops at the context window before this); run
                // the batch one by one so the error lands on the request that caused it. A
                // failed pass leaves the cache lengths as they were.
                tracing::warn!(error = %e, "batched decode failed; stepping sequences one by one");
                for seq in batch {
                    self.step_alone(seq, active);
                }
                return;
            }
        };
        for (mut seq, logits) in batch.into_iter().zip(logits) {
            if seq.generated.is_empty() {
                self.stats.prefilled_tokens.fetch_add(1, Ordering::Relaxed);
            }
            match self.sample(&mut seq, &logits) {
                Ok(false) => active.push_back(seq),
                Ok(true) => self.finish(seq),
                Err(e) => {
                    let _ = seq.reply.send(Err(e));
                }
            }
        }
    }

    /// Sequences waiting on another's prefill fork its cache (copy-on-write, see
    /// [`KvCache::fork`]) once it holds the shared prefix.
    /// Same prompt: the whole prompt's cache and its logits, then the first token is sampled
    /// here. Otherwise the shared part (at most all but the last prompt token); the rest runs
    /// as usual.
    fn resolve_forks(&mut self, active: &mut VecDeque<Seq>) {
        let mut i = 0;
        while i < active.len() {
            let Some((leader, shared)) = active[i].fork else {
                i += 1;
                continue;
            };
            let prompt_len = active[i].req.prompt.len();
            let source = active.iter_mut().find(|s| s.id == leader).map(|l| {
                if l.cache.len() < shared {
                    return None; // still prefilling the shared part
                }
                let logits = l
                    .prompt_logits
                    .clone()
                    .filter(|_| shared == prompt_len && l.req.prompt.len() == prompt_len);
                Some((l.cache.fork(shared), logits))
            });
            let seq = &mut active[i];
            match source {
                Some(None) => {
                    i += 1;
                    continue;
                }
                Some(Some((Err(e), _))) => {
                    // Prefill on our own (below) rather than decode from a damaged cache.
                    tracing::warn!("sharing a prompt cache failed: {e}");
                }
                Some(Some((Ok(mut cache), logits))) => {
                    let keep = if logits.is_some() {
                        shared
                    } else {
                        shared.min(prompt_len - 1)
                    };
                    if keep > seq.cache.len() && cache.truncate(keep).is_ok() {
                        self.stats
                            .reused_tokens
                            .fetch_add((keep - seq.cache.len()) as u64, Ordering::Relaxed);
                        seq.cache = cache;
                        seq.cached_tokens = keep;
                        seq.fork = None;
                        if let Some(logits) = logits {
                            let result = self.sample(seq, &logits);
                            if !matches!(result, Ok(false))
                                && let Some(seq) = active.remove(i)
                            {
                                match result {
                                    Ok(_) => self.finish(seq),
                                    Err(e) => {
                                        let _ = seq.reply.send(Err(e));
                                    }
                                }
                                continue;
                            }
                        }
                    }
                }
                // The source finished or was cancelled first: prefill on our own.
                None => {}
            }
            active[i].fork = None;
            i += 1;
        }
    }

    /// Admit a request: take the best cached prefix from the pool and, when batching, follow
    /// an active sequence that shares a longer prompt prefix (see the module doc).
    fn start(&mut self, req: GenerateRequest, reply: Reply, active: &VecDeque<Seq>) -> Seq {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        self.stats
            .prompt_tokens
            .fetch_add(req.prompt.len() as u64, Ordering::Relaxed);
        // Both sources keep at least one prompt token to run, so there are logits to sample.
        let usable = |n: usize| n.min(req.prompt.len() - 1);
        let mut fork = if self.batch {
            active
                .iter()
                .filter(|s| s.fork.is_none())
                .map(|s| (s.id, common_prefix(&s.tokens, &req.prompt)))
                .max_by_key(|&(_, n)| n)
                .filter(|&(_, n)| n >= MIN_FORK_PREFIX && usable(n) > 0)
        } else {
            None
        };
        let mut cache = KvCache::new();
        if self.opts.prefix_cache_entries > 0 {
            let best = self
                .pool
                .iter()
                .enumerate()
                .map(|(i, (toks, _))| (i, common_prefix(toks, &req.prompt)))
                .max_by_key(|&(_, n)| n);
            let from_fork = fork.map_or(0, |(_, n)| usable(n));
            if let Some((i, n)) = best.filter(|&(_, n)| usable(n) > 0 && usable(n) >= from_fork) {
                let (_, mut c) = self.pool.remove(i);
                if c.truncate(usable(n)).is_ok() {
                    cache = c;
                    fork = None;
                }
            }
        }
        let cached_tokens = cache.len();
        self.stats
            .reused_tokens
            .fetch_add(cached_tokens as u64, Ordering::Relaxed);
        self.next_id += 1;
        Seq {
            id: self.next_id,
            fork,
            prompt_logits: None,
            sampler: Sampler::new(req.sampling.clone()),
            tokens: req.prompt.clone(),
            req,
            reply,
            cache,
            generated: Vec::new(),
            sampled: Vec::new(),
            cached_tokens,
        }
    }

    /// Advance one step; `Ok(true)` when the sequence is finished.
    fn step(&mut self, seq: &mut Seq) -> Result<bool, EngineError> {
        let done = seq.cache.len();
        let pending = seq.tokens.len() - done;
        let chunk = pending.min(self.opts.prefill_chunk.max(1));
        let logits = self
            .model
            .forward_last(&seq.tokens[done..done + chunk], &mut seq.cache)?;
        if seq.generated.is_empty() {
            self.stats
                .prefilled_tokens
                .fetch_add(chunk as u64, Ordering::Relaxed);
        }
        if chunk < pending {
            return Ok(false);
        }
        self.sample(seq, &logits)
    }

    /// Sample the next token from the logits of `seq`'s last position and apply the stop
    /// rules; `Ok(true)` when the sequence is finished.
    fn sample(&mut self, seq: &mut Seq, logits: &[f32]) -> Result<bool, EngineError> {
        if self.batch && seq.generated.is_empty() {
            seq.prompt_logits = Some(Arc::new(logits.to_vec()));
        }
        let s = seq.sampler.sample(logits, seq.req.top_logprobs);
        seq.tokens.push(s.token);
        seq.generated.push(s.token);
        seq.sampled.push(s);
        self.stats.generated_tokens.fetch_add(1, Ordering::Relaxed);
        let last = *seq.generated.last().unwrap_or(&0);
        if seq.req.stop_at_eos && self.stop_ids.contains(&last) {
            return Ok(true);
        }
        if seq.generated.len() >= seq.req.max_tokens || seq.tokens.len() >= self.context_length {
            return Ok(true);
        }
        if !seq.req.stop.is_empty() {
            let text = self.tokenizer.decode(&seq.generated)?;
            if seq
                .req
                .stop
                .iter()
                .any(|s| !s.is_empty() && text.contains(s.as_str()))
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn finish(&mut self, seq: Seq) {
        let result = self.result(&seq);
        let Seq {
            reply,
            tokens,
            cache,
            ..
        } = seq;
        let _ = reply.send(result);
        self.release(tokens, cache);
    }

    fn result(&self, seq: &Seq) -> Result<Generation, EngineError> {
        let ended_by_eos = seq.req.stop_at_eos
            && seq
                .generated
                .last()
                .is_some_and(|t| self.stop_ids.contains(t));
        let text_ids = if ended_by_eos {
            &seq.generated[..seq.generated.len() - 1]
        } else {
            &seq.generated[..]
        };
        let mut text = self.tokenizer.decode(text_ids)?;
        let mut stop_string = None;
        let cut = seq
            .req
            .stop
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| text.find(s.as_str()).map(|p| (p, s)))
            .min_by_key(|(p, _)| *p);
        if let Some((p, s)) = cut {
            text.truncate(p);
            stop_string = Some(s.clone());
        }
        let finish_reason = if ended_by_eos || stop_string.is_some() {
            FinishReason::Stop
        } else {
            FinishReason::Length
        };
        Ok(Generation {
            token_ids: seq.generated.clone(),
            logprobs: seq.sampled.iter().map(|s| s.logprob).collect(),
            top_logprobs: seq.sampled.iter().map(|s| s.top.clone()).collect(),
            text,
            finish_reason,
            stop_string,
            prompt_tokens: seq.req.prompt.len(),
            cached_tokens: seq.cached_tokens,
        })
    }

    /// Return a sequence's cache to the prefix pool.
    fn release(&mut self, mut tokens: Vec<u32>, cache: KvCache) {
        if self.opts.prefix_cache_entries == 0 || cache.is_empty() {
            return;
        }
        tokens.truncate(cache.len());
        // An entry that is a prefix of the new one is now redundant.
        self.pool
            .retain(|(t, _)| !(t.len() <= tokens.len() && common_prefix(t, &tokens) == t.len()));
        self.pool.push((tokens, cache));
        while self.pool.len() > self.opts.prefix_cache_entries {
            self.pool.remove(0);
        }
    }
}

/// Remove and return the sequences matching `pred`, keeping the others in order.
fn drain_where(active: &mut VecDeque<Seq>, pred: impl Fn(&Seq) -> bool) -> Vec<Seq> {
    let mut taken = Vec::new();
    let mut kept = VecDeque::with_capacity(active.len());
    for s in active.drain(..) {
        if pred(&s) {
            taken.push(s);
        } else {
            kept.push_back(s);
        }
    }
    *active = kept;
    taken
}
