//! Engine benchmarks; `scripts/bench-engine-vs-llamacpp.sh` runs them next to llama.cpp.
//!
//! `cargo run --release -p dojo-bench --example engine_bench -- speed [GGUF]`: prefill and decode
//! tokens/s of the bare model (threads from `RAYON_NUM_THREADS`), printed as JSON.
//! `... --example engine_bench -- agent [GGUF]`: wall time of a 20-turn agent conversation through
//! the engine's chat API, with and without prefix KV reuse.
//! `... --example engine_bench -- batch [GGUF]`: aggregate tokens/s of the bare model's batched
//! decode step at 1, 8 and 16 sequences (`BATCH="1 8 16"`), no server in the way.
//! `... --example engine_bench -- prefill-rows [GGUF]`: one prompt chunk's time through the
//! quantized kernels vs dequantized weights and the GEMM, by chunk length (where
//! `DENSE_PREFILL_ROWS` comes from).

use std::path::PathBuf;
use std::time::Instant;

use dojo_engine::{Engine, EngineOptions, KvCache};
use dojo_llm::{ChatMessage, ChatRequest, ToolSpec};
use serde_json::json;

/// The fixed benchmark prompt (same text for llama.cpp; see fixtures/engine/llamacpp.py).
pub const PROMPT_TEXT: &str = include_str!("../fixtures/engine/prompt.txt");
const PREFILL_TOKENS: usize = 128;
const DECODE_TOKENS: usize = 64;
const REPEATS: usize = 3;

fn model_path(arg: Option<String>) -> PathBuf {
    arg.map(PathBuf::from).unwrap_or_else(|| {
        dojo_tokenizer::default_model_path().unwrap_or_else(|e| panic!("default model: {e}"))
    })
}

fn speed(path: PathBuf) {
    let device = candle_core::Device::Cpu;
    let t_load = Instant::now();
    let model = dojo_engine::loader::load_gguf(&path, &device).expect("load");
    let load_s = t_load.elapsed().as_secs_f64();
    let format = dojo_tokenizer::ChatFormat::from_gguf(&path).expect("format");
    let ids = format.tokenizer.encode(PROMPT_TEXT).expect("encode");
    assert!(ids.len() >= PREFILL_TOKENS, "prompt.txt is too short");
    let prompt = &ids[..PREFILL_TOKENS];
    let mut best_prefill = f64::MAX;
    let mut best_decode = f64::MAX;
    let mut generated = Vec::new();
    for _ in 0..REPEATS + 1 {
        let mut cache = KvCache::new();
        let t0 = Instant::now();
        let mut logits = model.forward_last(prompt, &mut cache).expect("prefill");
        let prefill = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        generated.clear();
        for _ in 0..DECODE_TOKENS {
            let next = dojo_engine::model::argmax(&logits) as u32;
            generated.push(next);
            logits = model.forward_last(&[next], &mut cache).expect("decode");
        }
        let decode = t1.elapsed().as_secs_f64();
        best_prefill = best_prefill.min(prefill);
        best_decode = best_decode.min(decode);
    }
    let threads = candle_core::utils::get_num_threads();
    println!(
        "{}",
        json!({
            "engine": "dojo-engine (candle 0.11)",
            "weights": std::env::var("DOJO_ENGINE_WEIGHTS").unwrap_or_else(|_| "auto".into()),
            "kv_cache": format!("{:?}", model.kv_dtype),
            "threads": threads,
            "load_s": load_s,
            "prefill_tokens": PREFILL_TOKENS,
            "prefill_tok_s": PREFILL_TOKENS as f64 / best_prefill,
            "decode_tokens": DECODE_TOKENS,
            "decode_tok_s": DECODE_TOKENS as f64 / best_decode,
            "greedy_ids_head": &generated[..8],
            "greedy_ids": &generated,
        })
    );
}

fn agent(path: PathBuf) {
    let tools = vec![ToolSpec::function(
        "bash",
        "Run a shell command in the repository.",
        json!({"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}),
    )];
    let observation: String = (0..3)
        .map(|i| format!("src/module_{i}.py: def function_{i}(x): return x * {i}\n"))
        .collect();
    for reuse in [true, false] {
        let engine = Engine::load(
            &path,
            EngineOptions {
                prefix_cache_entries: if reuse { 4 } else { 0 },
                ..Default::default()
            },
        )
        .expect("load");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let mut messages = vec![
            ChatMessage::system("You are a software engineer. Use the bash tool to explore."),
            ChatMessage::user("Find the function that multiplies by 7 and explain it."),
        ];
        let t0 = Instant::now();
        let mut per_turn = Vec::new();
        for turn in 0..20 {
            let t = Instant::now();
            let req = ChatRequest {
                messages: messages.clone(),
                tools: Some(tools.clone()),
                temperature: Some(0.0),
                max_tokens: Some(16),
                ..Default::default()
            };
            let resp = rt.block_on(engine.chat(req)).expect("chat");
            per_turn.push(t.elapsed().as_secs_f64());
            let mut msg = resp.choices[0].message.clone();
            msg.extra.clear();
            messages.push(msg);
            messages.push(ChatMessage::user(format!(
                "Turn {turn} output:\n{observation}"
            )));
        }
        let total = t0.elapsed().as_secs_f64();
        let s = engine.stats();
        use std::sync::atomic::Ordering::Relaxed;
        println!(
            "{}",
            json!({
                "prefix_reuse": reuse,
                "turns": 20,
                "total_s": total,
                "last_turn_s": per_turn.last(),
                "prompt_tokens": s.prompt_tokens.load(Relaxed),
                "prefilled_tokens": s.prefilled_tokens.load(Relaxed),
                "reused_tokens": s.reused_tokens.load(Relaxed),
                "generated_tokens": s.generated_tokens.load(Relaxed),
            })
        );
    }
}

/// Batched decode of the bare model: `B` sequences (B from `BATCH`, default "1 8 16"), each
/// prefilled with its own 40-token slice of the prompt (`CONTEXT` tokens: its own run of the
/// prompt's tokens, cycled, nothing shared), then 64 (`STEPS`) steps of
/// `forward_decode_batch`; prints aggregate decode tokens/s per batch size (best of 3, the
/// caches cut back to the prompt between repeats) and the caches' bytes. `DOJO_ENGINE_KV`
/// picks the caches' dtype.
fn batch(path: PathBuf) {
    let device = candle_core::Device::Cpu;
    let model = dojo_engine::loader::load_gguf(&path, &device).expect("load");
    let format = dojo_tokenizer::ChatFormat::from_gguf(&path).expect("format");
    let ids = format.tokenizer.encode(PROMPT_TEXT).expect("encode");
    let sizes = std::env::var("BATCH").unwrap_or_else(|_| "1 8 16".into());
    let steps: usize = std::env::var("STEPS").map_or(DECODE_TOKENS, |s| s.parse().expect("STEPS"));
    let context: usize = std::env::var("CONTEXT").map_or(40, |s| s.parse().expect("CONTEXT"));
    for b in sizes
        .split_whitespace()
        .map(|s| s.parse::<usize>().expect("BATCH"))
    {
        let mut best = f64::MAX;
        let mut caches: Vec<KvCache> = (0..b).map(|_| KvCache::new()).collect();
        let mut first: Vec<u32> = Vec::with_capacity(b);
        for (i, c) in caches.iter_mut().enumerate() {
            let start = (i * 7) % (ids.len() - 40);
            let prompt: Vec<u32> = (0..context).map(|j| ids[(start + j) % ids.len()]).collect();
            for chunk in prompt.chunks(256) {
                let logits = model.forward_last(chunk, c).expect("prefill");
                if c.len() == context {
                    first.push(dojo_engine::model::argmax(&logits) as u32);
                }
            }
        }
        let mut kv_bytes = 0;
        for _ in 0..REPEATS {
            for c in &mut caches {
                c.truncate(context).expect("truncate");
            }
            let mut next = first.clone();
            let t = Instant::now();
            for _ in 0..steps {
                let mut refs: Vec<&mut KvCache> = caches.iter_mut().collect();
                let logits = model
                    .forward_decode_batch(&next, &mut refs)
                    .expect("decode");
                next = logits
                    .iter()
                    .map(|l| dojo_engine::model::argmax(l) as u32)
                    .collect();
            }
            best = best.min(t.elapsed().as_secs_f64());
            kv_bytes = caches.iter().map(KvCache::bytes).sum::<usize>();
        }
        println!(
            "{}",
            json!({"batch": b, "context": context, "kv_cache": format!("{:?}", model.kv_dtype),
                   "decode_tokens": steps * b, "decode_tok_s": (steps * b) as f64 / best,
                   "kv_mib": kv_bytes as f64 / (1 << 20) as f64})
        );
    }
}

/// Where the dense-GEMM prefill pays off: a prompt chunk of `t` tokens through the quantized
/// kernels vs dequantized weights and the GEMM (best of 3 each, ms).
fn prefill_rows(path: PathBuf) {
    let device = candle_core::Device::Cpu;
    let mut model = dojo_engine::loader::load_gguf(&path, &device).expect("load");
    let format = dojo_tokenizer::ChatFormat::from_gguf(&path).expect("format");
    let ids = format.tokenizer.encode(PROMPT_TEXT).expect("encode");
    for t in [8usize, 16, 32, 48, 64, 96, 128, 160] {
        let mut ms = Vec::new();
        for rows in [usize::MAX, 1] {
            model.dense_prefill_rows = Some(rows);
            let mut best = f64::MAX;
            for _ in 0..3 {
                let mut cache = KvCache::new();
                let t0 = Instant::now();
                model.forward_last(&ids[..t], &mut cache).expect("prefill");
                best = best.min(t0.elapsed().as_secs_f64() * 1000.0);
            }
            ms.push(best);
        }
        println!(
            "{}",
            json!({"tokens": t, "quantized_ms": ms[0], "dense_ms": ms[1]})
        );
    }
}

/// Where decode time goes: one forward step vs its matmuls alone.
fn probe(path: PathBuf) {
    use candle_core::{Module, Tensor};
    let device = candle_core::Device::Cpu;
    let model = dojo_engine::loader::load_gguf(&path, &device).expect("load");
    let time = |name: &str, f: &dyn Fn()| {
        f();
        let t = Instant::now();
        for _ in 0..20 {
            f();
        }
        println!(
            "{name}: {:.3} ms",
            t.elapsed().as_secs_f64() * 1000.0 / 20.0
        );
    };
    let x = Tensor::zeros((1, 1, 576), candle_core::DType::F32, &device).unwrap();
    let l0 = &model.layers[0];
    time("q_proj 576x576 q4_1", &|| {
        l0.q.w.forward(&x).unwrap();
    });
    time("ffn_gate 576x1536 q4_1", &|| {
        l0.gate.w.forward(&x).unwrap();
    });
    time("lm_head 576x49152 q8_0", &|| {
        model.lm_head.forward(&x).unwrap();
    });
    time("one decode step (pos 0)", &|| {
        let mut c = KvCache::new();
        model.forward_last(&[42], &mut c).unwrap();
    });
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "speed".into());
    let path = model_path(args.next());
    match mode.as_str() {
        "speed" => speed(path),
        "agent" => agent(path),
        "path" => println!("{}", path.display()),
        "probe" => probe(path),
        "batch" => batch(path),
        "prefill-rows" => prefill_rows(path),
        other => panic!("unknown mode {other}; use speed or agent"),
    }
}
