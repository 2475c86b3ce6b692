//! Qwen2 and Qwen3 with tiny random models, as safetensors directories and as GGUF files (the
//! GGUF carries qwen2/qwen3 metadata and a small byte-level tokenizer with the `qwen2`
//! pre-tokenizer, as llama.cpp's converter writes them). The same weights must give the same
//! logits and the same greedy tokens whatever the container; bad files are clear errors.

mod common;

use std::path::Path;

use candle_core::Device;
use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
use common::*;
use dojo_engine::model::Arch;
use dojo_engine::{Engine, EngineOptions, GenerateRequest, KvCache, SamplingParams, WeightMode};
use serde_json::json;

/// The tiny vocabulary: 3 specials, 256 bytes, and one merged token `ab` (so the merge list is
/// not empty).
fn tokens() -> Vec<String> {
    let mut t: Vec<String> = SPECIALS.iter().map(|s| s.to_string()).collect();
    t.extend(byte_chars().into_iter().map(|c| c.to_string()));
    t.push("ab".into());
    t
}

/// Write `model` as a GGUF file under llama.cpp's tensor names, 2-D weights in `dtype`.
fn write_gguf(model: &dojo_engine::Model, dtype: GgmlDType, path: &Path) {
    use gguf_file::Value as V;
    let cfg = &model.config;
    let arch = match cfg.arch {
        Arch::Llama => "llama",
        Arch::Qwen2 => "qwen2",
        Arch::Qwen3 => "qwen3",
    };
    let q = |t: &candle_core::Tensor| {
        let dt = if t.rank() == 2 { dtype } else { GgmlDType::F32 };
        QTensor::quantize(t, dt).unwrap()
    };
    let mut tensors: Vec<(String, QTensor)> = vec![
        ("token_embd.weight".into(), q(&model.embed)),
        ("output_norm.weight".into(), q(&model.norm)),
    ];
    for (i, l) in model.layers.iter().enumerate() {
        let p = format!("blk.{i}");
        for (n, lin) in [
            ("attn_q", &l.q),
            ("attn_k", &l.k),
            ("attn_v", &l.v),
            ("attn_output", &l.o),
            ("ffn_gate", &l.gate),
            ("ffn_up", &l.up),
            ("ffn_down", &l.down),
        ] {
            tensors.push((format!("{p}.{n}.weight"), q(&dense(lin))));
            if let Some(b) = &lin.b {
                tensors.push((format!("{p}.{n}.bias"), q(b)));
            }
        }
        tensors.push((format!("{p}.attn_norm.weight"), q(&l.attn_norm)));
        tensors.push((format!("{p}.ffn_norm.weight"), q(&l.ffn_norm)));
        if let (Some(qn), Some(kn)) = (&l.q_norm, &l.k_norm) {
            tensors.push((format!("{p}.attn_q_norm.weight"), q(qn)));
            tensors.push((format!("{p}.attn_k_norm.weight"), q(kn)));
        }
    }
    let toks = tokens();
    let types: Vec<V> = (0..toks.len())
        .map(|i| V::I32(if i < SPECIALS.len() { 3 } else { 1 }))
        .collect();
    let k = |s: &str| format!("{arch}.{s}");
    let md: Vec<(String, V)> = vec![
        ("general.architecture".into(), V::String(arch.into())),
        (k("embedding_length"), V::U32(cfg.hidden_size as u32)),
        (
            k("feed_forward_length"),
            V::U32(cfg.intermediate_size as u32),
        ),
        (k("block_count"), V::U32(cfg.num_layers as u32)),
        (k("attention.head_count"), V::U32(cfg.num_heads as u32)),
        (
            k("attention.head_count_kv"),
            V::U32(cfg.num_kv_heads as u32),
        ),
        (k("attention.key_length"), V::U32(cfg.head_dim as u32)),
        (k("rope.freq_base"), V::F32(cfg.rope_theta)),
        (
            k("attention.layer_norm_rms_epsilon"),
            V::F32(cfg.rms_eps as f32),
        ),
        (k("context_length"), V::U32(cfg.max_position as u32)),
        ("tokenizer.ggml.model".into(), V::String("gpt2".into())),
        ("tokenizer.ggml.pre".into(), V::String("qwen2".into())),
        (
            "tokenizer.ggml.tokens".into(),
            V::Array(toks.iter().map(|t| V::String(t.clone())).collect()),
        ),
        ("tokenizer.ggml.token_type".into(), V::Array(types)),
        (
            "tokenizer.ggml.merges".into(),
            V::Array(vec![V::String("a b".into())]),
        ),
        ("tokenizer.ggml.bos_token_id".into(), V::U32(1)),
        ("tokenizer.ggml.eos_token_id".into(), V::U32(2)),
        ("tokenizer.ggml.add_bos_token".into(), V::Bool(false)),
        (
            "tokenizer.chat_template".into(),
            V::String(dojo_tokenizer::CHATML_TEMPLATE.into()),
        ),
    ];
    let md_refs: Vec<(&str, &V)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut f = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut f, &md_refs, &t_refs).unwrap();
}

/// A random Qwen model with the GGUF tokenizer's vocabulary size.
fn qwen_model(arch: Arch) -> dojo_engine::Model {
    let mut cfg = tiny_config(arch);
    cfg.vocab_size = tokens().len();
    dojo_engine::loader::random_model(cfg, 7, &Device::Cpu).unwrap()
}

fn logits(m: &dojo_engine::Model, toks: &[u32]) -> Vec<f32> {
    m.forward_last(toks, &mut KvCache::new()).unwrap()
}

/// Quantization-level agreement: the largest logit difference within 5 % of the largest logit
/// (8-bit weights).
fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_close_within(got, want, 0.05, what);
}

/// The same with a tolerance: `frac` of the largest logit (4- and 5-bit weights need ~15 % on
/// these tiny random models).
fn assert_close_within(got: &[f32], want: &[f32], frac: f32, what: &str) {
    let diff = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let scale = want.iter().map(|v| v.abs()).fold(0f32, f32::max);
    assert!(
        diff <= frac * scale.max(1e-3),
        "{what}: max difference {diff} vs largest logit {scale}"
    );
}

fn greedy(engine: &Engine, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut req = GenerateRequest::new(prompt.to_vec(), n);
    req.sampling = SamplingParams::greedy();
    req.stop_at_eos = false;
    engine.generate_blocking(req).unwrap().token_ids
}

#[test]
fn gguf_qwen2_and_qwen3_load_in_every_weight_mode() {
    let toks = [1u32, 40, 200, 17, 259];
    for arch in [Arch::Qwen2, Arch::Qwen3] {
        let dir = tempfile::tempdir().unwrap();
        let model = qwen_model(arch);
        let want = logits(&model, &toks);
        // F32 in the file: bit-identical to the weights it was written from.
        let f32_path = dir.path().join("f32.gguf");
        write_gguf(&model, GgmlDType::F32, &f32_path);
        for mode in [WeightMode::Quantized, WeightMode::Dense] {
            let m = dojo_engine::loader::load_gguf_with(&f32_path, &Device::Cpu, mode).unwrap();
            assert_eq!(m.config.arch, arch);
            assert!(
                !m.config.rope_interleaved,
                "Qwen GGUFs use rotate-half RoPE"
            );
            assert_eq!(m.layers[0].q.b.is_some(), arch == Arch::Qwen2, "{arch:?}");
            assert_eq!(
                m.layers[0].q_norm.is_some(),
                arch == Arch::Qwen3,
                "{arch:?}"
            );
            assert_eq!(logits(&m, &toks), want, "{arch:?} {mode:?}");
        }
        // Q8_0: quantized kernels and dequantized weights agree closely with the original.
        let q8_path = dir.path().join("q8_0.gguf");
        write_gguf(&model, GgmlDType::Q8_0, &q8_path);
        for mode in [WeightMode::Quantized, WeightMode::Dense] {
            let m = dojo_engine::loader::load_gguf_with(&q8_path, &Device::Cpu, mode).unwrap();
            assert_close(&logits(&m, &toks), &want, &format!("{arch:?} {mode:?}"));
        }
        // Q4_1 and Q5_0 with rows of 32 values: an odd number of blocks, which candle's CPU
        // kernels cannot take (they panicked). Such weights stay dense; every mode gives what
        // the dequantized file gives, up to the quantized kernels' rounding of activations.
        for dtype in [GgmlDType::Q4_1, GgmlDType::Q5_0] {
            let path = dir.path().join(format!("{dtype:?}.gguf"));
            write_gguf(&model, dtype, &path);
            let load = |mode| dojo_engine::loader::load_gguf_with(&path, &Device::Cpu, mode);
            let dense = logits(&load(WeightMode::Dense).unwrap(), &toks);
            let what = format!("{arch:?} {dtype:?}");
            for mode in [WeightMode::Quantized, WeightMode::Mixed] {
                let m = load(mode).unwrap();
                assert_close(&logits(&m, &toks), &dense, &format!("{what} {mode:?}"));
            }
        }
    }
}

#[test]
fn mixed_mode_decodes_with_simd_kernels_and_prefills_densely() {
    use candle_core::quantized::QMatMul;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q4_1.gguf");
    // Rows of a multiple of 64 values, as every real model has, so that candle's Q4_1 kernel
    // runs (rows with an odd number of blocks are kept dense).
    let mut cfg = tiny_config(Arch::Qwen2);
    cfg.vocab_size = tokens().len();
    (cfg.hidden_size, cfg.intermediate_size, cfg.head_dim) = (64, 128, 16);
    let model = dojo_engine::loader::random_model(cfg, 5, &Device::Cpu).unwrap();
    write_gguf(&model, GgmlDType::Q4_1, &path);
    let quant =
        dojo_engine::loader::load_gguf_with(&path, &Device::Cpu, WeightMode::Quantized).unwrap();
    let mixed =
        dojo_engine::loader::load_gguf_with(&path, &Device::Cpu, WeightMode::Mixed).unwrap();
    let dtype = |m: &dojo_engine::Model| match &m.layers[0].q.w {
        QMatMul::QTensor(q) => Some(q.dtype()),
        _ => None,
    };
    assert_eq!(dtype(&quant), Some(GgmlDType::Q4_1));
    // Q4_1 stays where dojo-engine's SIMD kernel runs; elsewhere it becomes Q8_0.
    let want = if dojo_engine::q4_1::available() {
        GgmlDType::Q4_1
    } else {
        GgmlDType::Q8_0
    };
    assert_eq!(dtype(&mixed), Some(want));
    assert_eq!(quant.dense_prefill_rows, None);
    let n = mixed
        .dense_prefill_rows
        .expect("mixed weights prefill densely");
    // An n-token prefill (dense GEMM), a shorter chunk and single tokens (SIMD kernels) track
    // candle's Q4_1.
    let toks: Vec<u32> = (0..n + 9).map(|i| (i * 31 % 250) as u32 + 3).collect();
    let (mut cq, mut cm) = (KvCache::new(), KvCache::new());
    for (a, b) in [
        (0, n),
        (n, n + 5),
        (n + 5, n + 6),
        (n + 6, n + 7),
        (n + 7, n + 9),
    ] {
        let lq = quant.forward_last(&toks[a..b], &mut cq).unwrap();
        let lm = mixed.forward_last(&toks[a..b], &mut cm).unwrap();
        assert_close(&lm, &lq, &format!("tokens {a}..{b}"));
    }
}

#[test]
fn gguf_tokenizer_and_template_come_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("qwen3.gguf");
    write_gguf(&qwen_model(Arch::Qwen3), GgmlDType::F32, &path);
    let engine = Engine::load(&path, EngineOptions::default()).unwrap();
    let tok = &engine.format().tokenizer;
    assert_eq!(tok.vocab_size(), tokens().len());
    // The merge applies, specials are matched verbatim, and decoding round-trips.
    assert_eq!(tok.encode("ab").unwrap(), vec![259]);
    let ids = tok.encode("<|im_start|>user\nab c<|im_end|>").unwrap();
    assert_eq!(ids[0], 1);
    assert_eq!(*ids.last().unwrap(), 2);
    assert_eq!(
        tok.decode(&ids).unwrap(),
        "<|im_start|>user\nab c<|im_end|>"
    );
    let prompt = engine
        .format()
        .prompt(
            &[json!({"role": "user", "content": "hi"})],
            None,
            &Default::default(),
        )
        .unwrap();
    assert_eq!(
        prompt.text,
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    );
}

#[test]
fn greedy_decoding_is_deterministic_and_container_independent() {
    for arch in [Arch::Qwen2, Arch::Qwen3] {
        let dir = tempfile::tempdir().unwrap();
        // The same weights as a safetensors directory and as an F32 GGUF.
        let hf = dir.path().join("hf");
        std::fs::create_dir(&hf).unwrap();
        let model = save_hf(arch, &hf);
        let gguf = dir.path().join("m.gguf");
        write_gguf(&model, GgmlDType::F32, &gguf);
        let prompt = [1u32, 60, 61, 62, 10, 2, 1];
        let st = Engine::load(&hf, EngineOptions::default()).unwrap();
        let a = greedy(&st, &prompt, 12);
        assert_eq!(a.len(), 12);
        // Again (now from the prefix cache), and from a fresh engine: identical.
        assert_eq!(greedy(&st, &prompt, 12), a, "{arch:?} with prefix reuse");
        let st2 = Engine::load(&hf, EngineOptions::default()).unwrap();
        assert_eq!(greedy(&st2, &prompt, 12), a, "{arch:?} fresh engine");
        let gg = Engine::load(&gguf, EngineOptions::default()).unwrap();
        assert_eq!(greedy(&gg, &prompt, 12), a, "{arch:?} GGUF vs safetensors");
    }
}

/// Byte offset of the ggml type id of tensor `name` in a GGUF file written by candle (after
/// the name: u32 rank, rank x u64 dims, then the u32 type).
fn type_offset(bytes: &[u8], name: &str, rank: usize) -> usize {
    let needle = name.as_bytes();
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap();
    at + needle.len() + 4 + 8 * rank
}

#[test]
fn unsupported_quantization_and_architecture_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.gguf");
    write_gguf(&qwen_model(Arch::Qwen2), GgmlDType::Q8_0, &path);
    let mut bytes = std::fs::read(&path).unwrap();
    let off = type_offset(&bytes, "blk.0.attn_q.weight", 2);
    assert_eq!(
        bytes[off..off + 4],
        8u32.to_le_bytes(),
        "Q8_0 is ggml type 8"
    );
    // IQ2_XXS (16): a real llama.cpp quantization candle cannot run.
    bytes[off..off + 4].copy_from_slice(&16u32.to_le_bytes());
    let bad = dir.path().join("iq2.gguf");
    std::fs::write(&bad, &bytes).unwrap();
    let err = dojo_engine::loader::load_gguf(&bad, &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("iq2.gguf")
            && err.contains("unsupported quantization: ggml type 16 (IQ2_XXS)"),
        "{err}"
    );
    let err = Engine::load(&bad, EngineOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("unsupported quantization"), "{err}");

    // A safetensors directory of an architecture the engine does not implement.
    let hf = dir.path().join("hf");
    std::fs::create_dir(&hf).unwrap();
    save_hf(Arch::Qwen2, &hf);
    let cfg_path = hf.join("config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    cfg["model_type"] = json!("mixtral");
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let err = Engine::load(&hf, EngineOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("config.json") && err.contains("unsupported model_type `mixtral`"),
        "{err}"
    );
}

/// The device under test: `DOJO_TEST_DEVICE` (`cuda`, `cuda:N`) in a `--features cuda` build on
/// a GPU; unset or `cpu` everywhere else, where there is nothing to compare.
fn test_device() -> Option<Device> {
    let spec = std::env::var("DOJO_TEST_DEVICE").ok()?;
    if spec == "cpu" {
        return None;
    }
    Some(dojo_engine::device(&spec).unwrap_or_else(|e| panic!("DOJO_TEST_DEVICE={spec}: {e}")))
}

/// The same files on the GPU and on the CPU: logits agree (exactly enough for f32 weights,
/// within quantization noise for Q8_0 and Q4_1, whose GPU kernels quantize the activations too)
/// and greedy decoding through the engine (prefix cache, KV cache growth) picks the same tokens.
#[test]
fn the_test_device_matches_the_cpu() {
    let Some(dev) = test_device() else {
        println!("SKIPPED: DOJO_TEST_DEVICE names no GPU");
        return;
    };
    let toks = [1u32, 40, 200, 17, 259, 3, 99, 12];
    for arch in [Arch::Qwen2, Arch::Qwen3] {
        let dir = tempfile::tempdir().unwrap();
        // Rows of 64, so that the CPU side runs candle's quantized kernels too (it keeps rows
        // with an odd number of blocks dense).
        let mut cfg = tiny_config(arch);
        cfg.vocab_size = tokens().len();
        (cfg.hidden_size, cfg.intermediate_size, cfg.head_dim) = (64, 128, 16);
        let model = dojo_engine::loader::random_model(cfg, 7, &Device::Cpu).unwrap();
        for dtype in [GgmlDType::F32, GgmlDType::Q8_0, GgmlDType::Q4_1] {
            let path = dir.path().join(format!("{dtype:?}.gguf"));
            write_gguf(&model, dtype, &path);
            for mode in [WeightMode::Quantized, WeightMode::Dense, WeightMode::Mixed] {
                let what = format!("{arch:?} {dtype:?} {mode:?}");
                let cpu = dojo_engine::loader::load_gguf_with(&path, &Device::Cpu, mode).unwrap();
                let gpu = dojo_engine::loader::load_gguf_with(&path, &dev, mode)
                    .unwrap_or_else(|e| panic!("{what}: loading on {dev:?}: {e}"));
                let want = logits(&cpu, &toks);
                let got = logits(&gpu, &toks);
                if dtype == GgmlDType::F32 {
                    let diff = got
                        .iter()
                        .zip(&want)
                        .map(|(a, b)| (a - b).abs())
                        .fold(0f32, f32::max);
                    assert!(diff < 1e-3, "{what}: max logit difference {diff}");
                } else {
                    // The same quantized weights on both sides; only the kernels differ.
                    assert_close_within(&got, &want, 0.1, &what);
                }
            }
        }
    }
    for arch in [Arch::Llama, Arch::Qwen2, Arch::Qwen3] {
        let dir = tempfile::tempdir().unwrap();
        save_hf(arch, dir.path());
        let prompt: Vec<u32> = (0..40).map(|i| 3 + (i * 37) % 250).collect();
        let cpu = Engine::load(dir.path(), EngineOptions::default()).unwrap();
        let gpu = Engine::load(
            dir.path(),
            EngineOptions {
                device: dev.clone(),
                ..EngineOptions::default()
            },
        )
        .unwrap();
        // Past the first KV allocation (256 positions), so the cache grows on the device.
        let want = greedy(&cpu, &prompt, 300);
        assert_eq!(greedy(&gpu, &prompt, 300), want, "{arch:?}");
        assert_eq!(
            greedy(&gpu, &prompt, 300),
            want,
            "{arch:?} with prefix reuse"
        );
    }
}
