//! Engine mechanics on tiny random models (fast, no downloads).

mod common;

use std::sync::atomic::Ordering;

use candle_core::{DType, Device};
use common::*;
use dojo_engine::model::{Arch, Config};
use dojo_engine::{EngineOptions, FinishReason, GenerateRequest, KvCache, SamplingParams};

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn chunked_prefill_and_truncated_cache_match_one_shot_forward() {
    for arch in [Arch::Llama, Arch::Qwen2, Arch::Qwen3] {
        let model = dojo_engine::loader::random_model(tiny_config(arch), 7, &Device::Cpu).unwrap();
        let tokens: Vec<u32> = (0..40).map(|i| (i * 37 % 250) as u32 + 3).collect();
        let mut full = KvCache::new();
        let one_shot = model.forward_last(&tokens, &mut full).unwrap();
        assert_eq!(full.len(), 40);

        let mut c = KvCache::new();
        model.forward_last(&tokens[..17], &mut c).unwrap();
        model.forward_last(&tokens[17..30], &mut c).unwrap();
        for t in &tokens[30..39] {
            model.forward_last(&[*t], &mut c).unwrap();
        }
        let chunked = model.forward_last(&tokens[39..], &mut c).unwrap();
        assert!(max_abs_diff(&one_shot, &chunked) < 1e-4, "{arch:?} chunked");

        // Reuse a prefix of a *different* continuation: truncate, then run our suffix.
        let mut other = KvCache::new();
        let mut diverging = tokens[..25].to_vec();
        diverging.extend([5, 6, 7, 8]);
        model.forward_last(&diverging, &mut other).unwrap();
        other.truncate(25).unwrap();
        let reused = model.forward_last(&tokens[25..], &mut other).unwrap();
        assert!(max_abs_diff(&one_shot, &reused) < 1e-4, "{arch:?} reused");
    }
}

#[test]
fn kv_cache_grows_in_place_and_forks_share_without_copying() {
    // Two key/value heads, and one (where a cache's narrowed view is contiguous); f32 and f16
    // caches.
    for kv_heads in [2, 1] {
        for dtype in [DType::F32, DType::F16] {
            let cfg = Config {
                num_kv_heads: kv_heads,
                ..tiny_config(Arch::Qwen3)
            };
            let mut model = dojo_engine::loader::random_model(cfg, 9, &Device::Cpu).unwrap();
            model.kv_dtype = dtype;
            forks_share_without_copying(&model);
        }
    }
}

/// f16 caches hold half the bytes of f32 ones, and a prefill, chunks and decode steps through
/// them stay within f16's rounding of the f32 caches' logits.
#[test]
fn f16_kv_caches_halve_memory_and_stay_close_to_f32() {
    for arch in [Arch::Llama, Arch::Qwen3] {
        let mut model =
            dojo_engine::loader::random_model(tiny_config(arch), 5, &Device::Cpu).unwrap();
        let tokens: Vec<u32> = (0..300).map(|i| (i * 29 % 250) as u32 + 3).collect();
        let mut run = |dtype| {
            model.kv_dtype = dtype;
            let mut c = KvCache::new();
            let mut logits = vec![model.forward_last(&tokens[..200], &mut c).unwrap()];
            for t in &tokens[200..230] {
                logits.push(model.forward_last(&[*t], &mut c).unwrap());
            }
            logits.push(model.forward_last(&tokens[230..], &mut c).unwrap());
            (logits, c.bytes())
        };
        let (wide, wide_bytes) = run(DType::F32);
        let (half, half_bytes) = run(DType::F16);
        assert_eq!(half_bytes * 2, wide_bytes);
        let worst = wide
            .iter()
            .zip(&half)
            .map(|(a, b)| max_abs_diff(a, b))
            .fold(0.0, f32::max);
        let scale = wide.iter().flatten().fold(0f32, |m, x| m.max(x.abs()));
        assert!(worst > 0.0, "{arch:?}: f16 caches should round something");
        assert!(
            worst < 1e-2 * scale,
            "{arch:?}: {worst} against logits up to {scale}"
        );
        // A cache written as f16 is refused by a model that writes f32, by name.
        let mut c = KvCache::new();
        model.kv_dtype = DType::F16;
        model.forward_last(&tokens[..20], &mut c).unwrap();
        model.kv_dtype = DType::F32;
        let err = model.forward_last(&tokens[20..22], &mut c).unwrap_err();
        assert!(err.to_string().contains("kv cache holds F16"), "{err}");
        assert_eq!(c.len(), 20);
    }
}

fn forks_share_without_copying(model: &dojo_engine::model::Model) {
    let tokens: Vec<u32> = (0..600).map(|i| (i * 53 % 250) as u32 + 3).collect();
    let one_shot = model.forward_last(&tokens, &mut KvCache::new()).unwrap();
    // The cache, holding the first `cache.len()` tokens, goes on with the rest to the logits
    // of the whole pass.
    let goes_on = |what: &str, cache: &mut KvCache| {
        let got = model.forward_last(&tokens[cache.len()..], cache).unwrap();
        let diff = max_abs_diff(&one_shot, &got);
        assert!(
            diff < 1e-4,
            "{} kv heads, {what}: {diff}",
            model.config.num_kv_heads
        );
    };
    // Past the first allocation (256 positions) twice, by prefill chunks and single tokens.
    let mut c = KvCache::new();
    model.forward_last(&tokens[..200], &mut c).unwrap();
    for t in &tokens[200..270] {
        model.forward_last(&[*t], &mut c).unwrap();
    }
    model.forward_last(&tokens[270..599], &mut c).unwrap();
    let before = c.bytes();
    let mut snapshot = c.fork(c.len()).unwrap();
    // Nothing copied: the original's buffers became the shared prefix of both, and each goes
    // on in buffers of its own with 256 positions of room (nothing to carry over).
    let cfg = &model.config;
    let per_position =
        2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * model.kv_dtype.size_in_bytes();
    let room = 256 * per_position;
    assert_eq!((snapshot.bytes(), snapshot.shared_len()), (room, 599));
    assert_eq!(snapshot.shared_bytes(), before);
    assert_eq!(c.bytes(), room);
    goes_on("grown", &mut c);
    // Rewriting the original's positions must not touch the fork's.
    c.truncate(100).unwrap();
    model.forward_last(&[7u32; 50], &mut c).unwrap();
    goes_on("fork", &mut snapshot);
    // A fork of a shared prefix shares it too, and continues from it as the original did.
    snapshot.truncate(599).unwrap();
    let mut prefix = snapshot.fork(200).unwrap();
    assert_eq!((prefix.len(), prefix.bytes()), (200, room));
    goes_on("prefix", &mut prefix);
    assert_eq!(snapshot.fork(10_000).unwrap().len(), snapshot.len());
    // Past the shared part: the shared 200 and the own positions up to 400 are joined into
    // one new shared buffer (once); the cache's positions 400..450 move to the front of its
    // own buffers, and it goes on from them.
    prefix.truncate(450).unwrap();
    let mut joined = prefix.fork(400).unwrap();
    assert_eq!(
        (prefix.shared_len(), joined.shared_len(), joined.bytes()),
        (400, 400, room)
    );
    assert_eq!(joined.shared_bytes(), 400 * per_position);
    goes_on("joined", &mut joined);
    goes_on("after a join", &mut prefix);
    // Little shared, much after it (an agent's system prompt): the fork gets a copy of just
    // those positions, not the whole buffer; the source keeps its own.
    let mut long = KvCache::new();
    model.forward_last(&tokens[..500], &mut long).unwrap();
    let own_before = long.bytes();
    let mut short = long.fork(100).unwrap();
    assert_eq!(short.shared_bytes(), 100 * per_position);
    assert_eq!((long.bytes(), long.shared_len()), (own_before, 100));
    goes_on("short fork", &mut short);
    goes_on("long source", &mut long);
    assert_eq!(KvCache::new().fork(5).unwrap().len(), 0);
}

/// Random runs of prefills, batched decode steps, truncations, forks (of forks) and drops over
/// several caches: a cache's logits always match a fresh pass over exactly the tokens it
/// holds, so no write ever reaches positions another cache reads.
#[test]
fn random_forks_truncations_and_steps_never_mix_caches() {
    for (arch, seed, kv) in [
        (Arch::Llama, 1u64, DType::F32),
        (Arch::Qwen3, 2, DType::F32),
        (Arch::Qwen3, 3, DType::F16),
    ] {
        let cfg = Config {
            num_kv_heads: 1 + seed as usize % 2,
            ..tiny_config(arch)
        };
        let mut model = dojo_engine::loader::random_model(cfg, seed, &Device::Cpu).unwrap();
        model.kv_dtype = kv;
        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut next = |n: usize| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) as usize % n.max(1)
        };
        let check = |tokens: &[u32], got: &[f32], what: &str| {
            let want = model.forward_last(tokens, &mut KvCache::new()).unwrap();
            let diff = max_abs_diff(&want, got);
            assert!(
                diff < 1e-4,
                "{arch:?}, {what} at {} tokens: {diff}",
                tokens.len()
            );
        };
        // (tokens held, cache)
        let mut caches: Vec<(Vec<u32>, KvCache)> = vec![(Vec::new(), KvCache::new())];
        let mut forks = 0;
        for _ in 0..250 {
            let i = next(caches.len());
            match next(6) {
                0 | 1 => {
                    let most = if next(2) == 0 { 3 } else { 60 };
                    let n = 1 + next(most);
                    if caches[i].0.len() + n > 400 {
                        continue;
                    }
                    let toks: Vec<u32> = (0..n).map(|_| 3 + next(250) as u32).collect();
                    let (held, cache) = &mut caches[i];
                    let got = model.forward_last(&toks, cache).unwrap();
                    held.extend(&toks);
                    check(held, &got, "prefill");
                }
                2 => {
                    // A decode step for a random subset, as one batch.
                    let pick: Vec<bool> = caches
                        .iter()
                        .map(|(held, _)| held.len() < 400 && next(2) == 0)
                        .collect();
                    let toks: Vec<u32> = pick
                        .iter()
                        .filter(|&&p| p)
                        .map(|_| 3 + next(250) as u32)
                        .collect();
                    let mut refs: Vec<&mut KvCache> = caches
                        .iter_mut()
                        .zip(&pick)
                        .filter(|(_, p)| **p)
                        .map(|((_, c), _)| c)
                        .collect();
                    let got = model.forward_decode_batch(&toks, &mut refs).unwrap();
                    let held = caches.iter_mut().zip(&pick).filter(|(_, p)| **p);
                    for (((held, _), _), (t, logits)) in held.zip(toks.iter().zip(&got)) {
                        held.push(*t);
                        check(held, logits, "decode");
                    }
                }
                3 => {
                    let (held, cache) = &mut caches[i];
                    let len = next(held.len() + 1);
                    cache.truncate(len).unwrap();
                    held.truncate(len);
                    assert_eq!(cache.len(), len);
                }
                4 if caches.len() < 8 => {
                    let (held, cache) = &mut caches[i];
                    let len = next(held.len() + 1);
                    let fork = cache.fork(len).unwrap();
                    assert_eq!((fork.len(), cache.len()), (len, held.len()));
                    let held = held[..len].to_vec();
                    caches.push((held, fork));
                    forks += 1;
                }
                _ if caches.len() > 1 => {
                    caches.swap_remove(i);
                }
                _ => {}
            }
        }
        assert!(forks > 10, "{forks} forks");
    }
}

#[test]
fn prompt_past_the_context_window_is_a_clear_error() {
    let engine = tiny_engine(EngineOptions {
        context_length: Some(64),
        ..Default::default()
    });
    let err = engine
        .generate_blocking(GenerateRequest::new(vec![10; 64], 4))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "prompt of 64 tokens exceeds the maximum context length of 64 tokens"
    );
    let err = engine
        .generate_blocking(GenerateRequest::new(vec![10_000], 4))
        .unwrap_err();
    assert!(err.to_string().contains("outside the vocabulary"), "{err}");
    // The engine keeps working after bad requests.
    let ok = engine
        .generate_blocking(GenerateRequest::new(vec![10, 11], 3))
        .unwrap();
    assert_eq!(ok.token_ids.len(), ok.logprobs.len());
}

#[test]
fn greedy_is_deterministic_and_reuses_the_prefix() {
    let engine = tiny_engine(EngineOptions::default());
    let mut req = GenerateRequest::new((3..60).collect(), 12);
    req.sampling = SamplingParams::greedy();
    req.stop_at_eos = false;
    let a = engine.generate_blocking(req.clone()).unwrap();
    assert_eq!(a.token_ids.len(), 12);
    assert_eq!(a.finish_reason, FinishReason::Length);
    assert_eq!(a.cached_tokens, 0);
    let b = engine.generate_blocking(req.clone()).unwrap();
    assert_eq!(a.token_ids, b.token_ids);
    assert_eq!(
        b.cached_tokens, 56,
        "all but the last prompt token come from the cache"
    );
    for (x, y) in a.logprobs.iter().zip(&b.logprobs) {
        assert!((x - y).abs() < 1e-4);
    }
    // The next "turn": the previous prompt + answer + more tokens.
    let mut next = req.prompt.clone();
    next.extend(&a.token_ids);
    next.extend([40, 41, 42]);
    req.prompt = next;
    let c = engine.generate_blocking(req).unwrap();
    assert!(c.cached_tokens >= 57 + 11, "cached {}", c.cached_tokens);
    assert!(engine.stats().reused_tokens.load(Ordering::Relaxed) >= 56);
}

#[test]
fn seeded_sampling_reproduces_and_top_logprobs_are_sorted() {
    let engine = tiny_engine(EngineOptions {
        prefix_cache_entries: 0,
        ..Default::default()
    });
    let mut req = GenerateRequest::new(vec![20, 21, 22], 10);
    req.stop_at_eos = false;
    req.sampling = SamplingParams {
        temperature: 1.5,
        top_p: 0.95,
        top_k: 50,
        seed: Some(3),
    };
    req.top_logprobs = 3;
    let a = engine.generate_blocking(req.clone()).unwrap();
    let b = engine.generate_blocking(req).unwrap();
    assert_eq!(a.token_ids, b.token_ids);
    for top in &a.top_logprobs {
        assert_eq!(top.len(), 3);
        assert!(top[0].1 >= top[1].1 && top[1].1 >= top[2].1);
    }
}

#[test]
fn stop_strings_cut_the_text() {
    let engine = tiny_engine(EngineOptions::default());
    let mut req = GenerateRequest::new(vec![30, 31, 32], 40);
    req.sampling = SamplingParams::greedy();
    req.stop_at_eos = false;
    let free = engine.generate_blocking(req.clone()).unwrap();
    // Use a piece of what greedy decoding produces anyway as the stop string.
    let chars: Vec<char> = free.text.chars().collect();
    assert!(chars.len() >= 6, "{:?}", free.text);
    let stop: String = chars[3..5].iter().collect();
    req.stop = vec![stop.clone()];
    let cut = engine.generate_blocking(req).unwrap();
    assert_eq!(cut.finish_reason, FinishReason::Stop);
    assert_eq!(cut.stop_string.as_deref(), Some(stop.as_str()));
    assert!(!cut.text.contains(&stop));
    assert!(free.text.starts_with(&cut.text));
    assert!(cut.token_ids.len() < free.token_ids.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_all_finish_and_cancelled_ones_free_their_slot() {
    let engine = tiny_engine(EngineOptions {
        max_active: 2,
        ..Default::default()
    });
    // A long request that we abandon mid-generation.
    let long = {
        let e = engine.clone();
        let mut req = GenerateRequest::new(vec![50, 51], 1900);
        req.stop_at_eos = false;
        tokio::spawn(async move { e.generate(req).await })
    };
    let mut handles = Vec::new();
    for i in 0..6u32 {
        let e = engine.clone();
        let mut req = GenerateRequest::new(vec![60 + i, 61, 62], 8);
        req.stop_at_eos = false;
        req.sampling = SamplingParams::greedy();
        handles.push(tokio::spawn(async move { e.generate(req).await }));
    }
    for h in handles {
        let g = h.await.unwrap().unwrap();
        assert_eq!(g.token_ids.len(), 8);
    }
    long.abort();
    let _ = long.await;
    // After the abort the worker drops the sequence; a new request still completes.
    let mut req = GenerateRequest::new(vec![70, 71], 4);
    req.stop_at_eos = false;
    engine.generate(req).await.unwrap();
    assert_eq!(engine.stats().cancelled.load(Ordering::Relaxed), 1);
}
