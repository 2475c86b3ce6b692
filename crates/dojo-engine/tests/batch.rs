//! Continuous batching on tiny random models: a batch must compute what the same requests
//! compute one by one (greedy tokens exactly, logprobs within float noise), seeded sampling
//! must not depend on who shares a step, shared prompts are prefilled once, and stops,
//! context-window ends and cancellation stay per sequence.

mod common;

use std::sync::atomic::Ordering;

use candle_core::{DType, Device};
use common::*;
use dojo_engine::model::Arch;
use dojo_engine::{
    Engine, EngineOptions, FinishReason, GenerateRequest, Generation, KvCache, KvCacheType,
    SamplingParams,
};

fn engine(arch: Arch, batch: bool, opts: EngineOptions) -> Engine {
    let model = dojo_engine::loader::random_model(tiny_config(arch), 42, &Device::Cpu).unwrap();
    Engine::from_parts(
        model,
        tiny_format(),
        EngineOptions {
            model_id: Some("tiny".into()),
            batch,
            ..opts
        },
    )
}

/// No prefix pool: every request starts from an empty cache unless batching shares a prefix.
fn no_pool() -> EngineOptions {
    EngineOptions {
        prefix_cache_entries: 0,
        ..Default::default()
    }
}

fn request(prompt: Vec<u32>, max_tokens: usize, sampling: SamplingParams) -> GenerateRequest {
    let mut req = GenerateRequest::new(prompt, max_tokens);
    req.stop_at_eos = false;
    req.sampling = sampling;
    req.top_logprobs = 3;
    req
}

/// Distinct prompts of different lengths (so the sequences sit at different positions).
fn prompts(count: usize) -> Vec<Vec<u32>> {
    (0..count)
        .map(|i| {
            (0..5 + 7 * i)
                .map(|j| ((i * 31 + j * 17) % 250) as u32 + 3)
                .collect()
        })
        .collect()
}

/// All requests submitted at once, so the engine runs them side by side.
async fn run_together(engine: &Engine, reqs: Vec<GenerateRequest>) -> Vec<Generation> {
    let futs = reqs.into_iter().map(|r| {
        let e = engine.clone();
        async move { e.generate(r).await.unwrap() }
    });
    futures::future::join_all(futs).await
}

fn run_alone(engine: &Engine, reqs: Vec<GenerateRequest>) -> Vec<Generation> {
    reqs.into_iter()
        .map(|r| engine.generate_blocking(r).unwrap())
        .collect()
}

fn assert_same(batched: &[Generation], alone: &[Generation], what: &str) {
    assert_eq!(batched.len(), alone.len());
    for (i, (b, a)) in batched.iter().zip(alone).enumerate() {
        assert_eq!(b.token_ids, a.token_ids, "{what}: request {i} tokens");
        for (x, y) in b.logprobs.iter().zip(&a.logprobs) {
            assert!(
                (x - y).abs() < 1e-4,
                "{what}: request {i} logprob {x} vs {y}"
            );
        }
        let top = |g: &Generation| {
            g.top_logprobs
                .iter()
                .map(|t| t.iter().map(|p| p.0).collect::<Vec<_>>())
                .collect::<Vec<_>>()
        };
        assert_eq!(top(b), top(a), "{what}: request {i} alternatives");
        assert_eq!(b.finish_reason, a.finish_reason, "{what}: request {i}");
    }
}

#[test]
fn batched_decode_step_matches_single_steps_for_every_architecture() {
    for arch in [Arch::Llama, Arch::Qwen2, Arch::Qwen3] {
        let model = dojo_engine::loader::random_model(tiny_config(arch), 7, &Device::Cpu).unwrap();
        let ps = prompts(5);
        // Each sequence prefilled alone, to a different length.
        let mut singles: Vec<KvCache> = Vec::new();
        let mut batched: Vec<KvCache> = Vec::new();
        for p in &ps {
            let mut c = KvCache::new();
            model.forward_last(p, &mut c).unwrap();
            batched.push(c.fork(c.len()).unwrap());
            singles.push(c);
        }
        for step in 0..3u32 {
            let toks: Vec<u32> = (0..ps.len() as u32).map(|i| 10 + i * 3 + step).collect();
            let want: Vec<Vec<f32>> = toks
                .iter()
                .zip(&mut singles)
                .map(|(t, c)| model.forward_last(&[*t], c).unwrap())
                .collect();
            let mut caches: Vec<&mut KvCache> = batched.iter_mut().collect();
            let got = model.forward_decode_batch(&toks, &mut caches).unwrap();
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let diff = g
                    .iter()
                    .zip(w)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f32::max);
                assert!(diff < 1e-4, "{arch:?} step {step} seq {i}: {diff}");
            }
        }
        for (s, b) in singles.iter().zip(&batched) {
            assert_eq!(s.len(), b.len());
        }
        // Nothing to run is not an error; a mismatched call is.
        assert!(model.forward_decode_batch(&[], &mut []).unwrap().is_empty());
        assert!(model.forward_decode_batch(&[1, 2], &mut []).is_err());
    }
}

/// Sequences forked from one prompt decode in one step over the prefix they share (read once
/// for all of them) and get bit for bit the logits of the same batch over caches of their own.
#[test]
fn forks_of_one_prompt_decode_exactly_as_separate_caches() {
    for (arch, kv) in [
        (Arch::Llama, DType::F32),
        (Arch::Qwen3, DType::F32),
        (Arch::Qwen3, DType::F16),
    ] {
        let mut model =
            dojo_engine::loader::random_model(tiny_config(arch), 11, &Device::Cpu).unwrap();
        model.kv_dtype = kv;
        let prompt = &prompts(1)[0];
        let mut leader = KvCache::new();
        model.forward_last(prompt, &mut leader).unwrap();
        // Four samples of the prompt (the leader among them) and one that extends it.
        let mut shared: Vec<KvCache> = (0..4).map(|_| leader.fork(prompt.len()).unwrap()).collect();
        shared.push(leader);
        let mut separate: Vec<KvCache> = (0..5)
            .map(|_| {
                let mut c = KvCache::new();
                model.forward_last(prompt, &mut c).unwrap();
                c
            })
            .collect();
        for (i, toks) in [[5u32, 6], [9, 10]].iter().enumerate() {
            for (caches, what) in [(&mut shared, "shared"), (&mut separate, "separate")] {
                model
                    .forward_last(&toks[..], &mut caches[1 + i])
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
            }
        }
        assert!(shared.iter().all(|c| c.shared_len() == prompt.len()));
        // Forks copy nothing: they hold the shared prefix once, and room of their own.
        assert_eq!(shared[0].bytes(), shared[3].bytes());
        assert!(shared[0].bytes() <= shared[0].shared_bytes());
        for step in 0..4u32 {
            let toks: Vec<u32> = (0..5u32).map(|i| 20 + i * 7 + step).collect();
            let mut a: Vec<&mut KvCache> = shared.iter_mut().collect();
            let got = model.forward_decode_batch(&toks, &mut a).unwrap();
            let mut b: Vec<&mut KvCache> = separate.iter_mut().collect();
            let want = model.forward_decode_batch(&toks, &mut b).unwrap();
            assert_eq!(got, want, "{arch:?} {kv:?} step {step}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greedy_batch_equals_the_same_requests_one_by_one() {
    for arch in [Arch::Llama, Arch::Qwen2, Arch::Qwen3] {
        let reqs = || {
            prompts(8)
                .into_iter()
                .enumerate()
                .map(|(i, p)| request(p, 6 + i, SamplingParams::greedy()))
                .collect::<Vec<_>>()
        };
        let batched_engine = engine(arch, true, no_pool());
        let batched = run_together(&batched_engine, reqs()).await;
        let alone_engine = engine(arch, false, no_pool());
        let alone = tokio::task::block_in_place(|| run_alone(&alone_engine, reqs()));
        assert_same(&batched, &alone, &format!("{arch:?}"));
        // The same with f16 caches.
        let f16 = || EngineOptions {
            kv_cache: KvCacheType::F16,
            ..no_pool()
        };
        let half_batched = run_together(&engine(arch, true, f16()), reqs()).await;
        let half_engine = engine(arch, false, f16());
        let half_alone = tokio::task::block_in_place(|| run_alone(&half_engine, reqs()));
        assert_same(&half_batched, &half_alone, &format!("{arch:?}, f16 caches"));
        let stats = batched_engine.stats();
        assert!(
            stats.max_decode_batch.load(Ordering::Relaxed) > 1,
            "the requests were decoded together"
        );
        assert_eq!(
            alone_engine.stats().decode_batches.load(Ordering::Relaxed),
            0
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_sampling_does_not_depend_on_the_batch() {
    let reqs = || {
        prompts(6)
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                let sampling = SamplingParams {
                    temperature: 0.9,
                    top_p: 0.95,
                    top_k: 40,
                    seed: Some(100 + i as u64),
                };
                request(p, 10, sampling)
            })
            .collect::<Vec<_>>()
    };
    let batched = run_together(&engine(Arch::Qwen3, true, no_pool()), reqs()).await;
    let alone_engine = engine(Arch::Qwen3, false, no_pool());
    let alone = tokio::task::block_in_place(|| run_alone(&alone_engine, reqs()));
    assert_same(&batched, &alone, "seeded");
    // Different seeds really sample differently (the comparison above is not vacuous).
    assert!(batched.iter().any(|g| g.token_ids != batched[0].token_ids));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_prompts_are_prefilled_once_and_decode_like_separate_requests() {
    let prompt: Vec<u32> = (0..60).map(|i| (i * 13 % 250) as u32 + 3).collect();
    // Four samples of one prompt, plus two requests that extend it differently.
    let reqs = || {
        let mut r: Vec<GenerateRequest> = (0..4)
            .map(|_| request(prompt.clone(), 8, SamplingParams::greedy()))
            .collect();
        for tail in [[7u32, 8, 9], [20, 21, 22]] {
            let mut p = prompt.clone();
            p.extend(tail);
            r.push(request(p, 8, SamplingParams::greedy()));
        }
        r
    };
    let batched_engine = engine(Arch::Llama, true, no_pool());
    let batched = run_together(&batched_engine, reqs()).await;
    let alone_engine = engine(Arch::Llama, false, no_pool());
    let alone = tokio::task::block_in_place(|| run_alone(&alone_engine, reqs()));
    assert_same(&batched, &alone, "shared prefix");
    for g in &batched[1..4] {
        assert_eq!(g.token_ids, batched[0].token_ids);
    }
    let stats = batched_engine.stats();
    let prompt_tokens = stats.prompt_tokens.load(Ordering::Relaxed);
    let prefilled = stats.prefilled_tokens.load(Ordering::Relaxed);
    let reused = stats.reused_tokens.load(Ordering::Relaxed);
    assert_eq!(prompt_tokens, 4 * 60 + 2 * 63);
    assert_eq!(prefilled + reused, prompt_tokens);
    // The 60 shared tokens ran once; every other request forked (at least) 59 of them.
    assert!(reused >= 5 * 59, "reused {reused}, prefilled {prefilled}");
    assert!(prefilled <= 60 + 3 + 2 * 4, "prefilled {prefilled}");
    assert!(batched.iter().skip(1).all(|g| g.cached_tokens >= 59));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_window_and_stops_end_one_sequence_not_the_batch() {
    let opts = EngineOptions {
        context_length: Some(64),
        ..no_pool()
    };
    let batched_engine = engine(Arch::Qwen2, true, opts.clone());
    let long_prompt: Vec<u32> = (0..60).map(|i| (i * 7 % 250) as u32 + 3).collect();
    let reqs = || {
        vec![
            // Hits the 64-token window after 4 tokens.
            request(long_prompt.clone(), 50, SamplingParams::greedy()),
            request(vec![40, 41, 42], 12, SamplingParams::greedy()),
            request(vec![50, 51], 1, SamplingParams::greedy()),
            request(vec![60, 61, 62, 63], 12, SamplingParams::greedy()),
        ]
    };
    let batched = run_together(&batched_engine, reqs()).await;
    assert_eq!(batched[0].token_ids.len(), 4);
    assert_eq!(batched[0].finish_reason, FinishReason::Length);
    assert_eq!(batched[1].token_ids.len(), 12);
    assert_eq!(batched[2].token_ids.len(), 1);
    let alone_engine = engine(Arch::Qwen2, false, opts);
    let alone = tokio::task::block_in_place(|| run_alone(&alone_engine, reqs()));
    assert_same(&batched, &alone, "context window");
    // A prompt that does not fit is refused up front and does not disturb the others.
    let err = batched_engine
        .generate(request(vec![9; 64], 4, SamplingParams::greedy()))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("maximum context length"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_sequence_leaves_the_batch_and_the_others_finish() {
    let engine = engine(Arch::Qwen3, true, no_pool());
    let long = {
        let e = engine.clone();
        tokio::spawn(async move {
            e.generate(request(vec![50, 51], 1900, SamplingParams::greedy()))
                .await
        })
    };
    let others = {
        let e = engine.clone();
        tokio::spawn(async move {
            run_together(
                &e,
                prompts(4)
                    .into_iter()
                    .map(|p| request(p, 10, SamplingParams::greedy()))
                    .collect(),
            )
            .await
        })
    };
    for g in others.await.unwrap() {
        assert_eq!(g.token_ids.len(), 10);
    }
    long.abort();
    let _ = long.await;
    let g = engine
        .generate(request(vec![70, 71], 4, SamplingParams::greedy()))
        .await
        .unwrap();
    assert_eq!(g.token_ids.len(), 4);
    assert_eq!(engine.stats().cancelled.load(Ordering::Relaxed), 1);
}

#[test]
fn the_environment_switch_turns_batching_off() {
    // Read, not set: tests run in parallel, so the variable is not changed here.
    let opts = EngineOptions::default();
    assert!(opts.batch);
    let off = std::env::var("DOJO_ENGINE_BATCH").is_ok_and(|v| v.trim() == "0");
    assert_eq!(opts.batch_or_env(), !off);
    assert!(
        !EngineOptions {
            batch: false,
            ..Default::default()
        }
        .batch_or_env()
    );
}
