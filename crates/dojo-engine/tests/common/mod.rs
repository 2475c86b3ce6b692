//! Shared test fixtures: a tiny byte-level tokenizer with ChatML and tiny random models.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::QMatMul;
use candle_core::{Device, Tensor};
use dojo_engine::model::{Arch, Config, Linear};
use dojo_engine::{Engine, EngineOptions};
use dojo_tokenizer::ChatFormat;
use serde_json::json;

/// GPT-2's byte → printable-char table (what ByteLevel BPE vocabularies contain).
pub fn byte_chars() -> Vec<char> {
    let mut out = vec!['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        out[b as usize] = if printable {
            char::from_u32(b).unwrap()
        } else {
            n += 1;
            char::from_u32(255 + n).unwrap()
        };
    }
    out
}

pub const SPECIALS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
/// 3 special tokens + 256 bytes.
pub const VOCAB: usize = 259;

/// Write a byte-level tokenizer (no merges) and a ChatML tokenizer_config into `dir`.
pub fn write_tiny_tokenizer(dir: &Path) {
    let mut vocab = serde_json::Map::new();
    for (i, s) in SPECIALS.iter().enumerate() {
        vocab.insert(s.to_string(), json!(i));
    }
    for (i, c) in byte_chars().into_iter().enumerate() {
        vocab.insert(c.to_string(), json!(i + 3));
    }
    let added: Vec<_> = SPECIALS
        .iter()
        .enumerate()
        .map(|(i, s)| {
            json!({"id": i, "content": s, "single_word": false, "lstrip": false,
                             "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let tok = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": false, "vocab": vocab, "merges": []}
    });
    std::fs::write(dir.join("tokenizer.json"), tok.to_string()).unwrap();
    let cfg = json!({"bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
                     "chat_template": dojo_tokenizer::CHATML_TEMPLATE});
    std::fs::write(dir.join("tokenizer_config.json"), cfg.to_string()).unwrap();
}

pub fn tiny_format() -> ChatFormat {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_tokenizer(dir.path());
    ChatFormat::from_hf_dir(dir.path()).unwrap()
}

pub fn tiny_config(arch: Arch) -> Config {
    Config {
        arch,
        vocab_size: VOCAB,
        hidden_size: 32,
        intermediate_size: 64,
        num_layers: 2,
        num_heads: 4,
        num_kv_heads: 2,
        head_dim: 8,
        rope_theta: 10_000.0,
        rms_eps: 1e-6,
        max_position: 2048,
        rope_interleaved: arch == Arch::Llama,
    }
}

pub fn tiny_engine(opts: EngineOptions) -> Engine {
    let model =
        dojo_engine::loader::random_model(tiny_config(Arch::Qwen2), 42, &candle_core::Device::Cpu)
            .unwrap();
    Engine::from_parts(
        model,
        tiny_format(),
        EngineOptions {
            model_id: Some("tiny".into()),
            ..opts
        },
    )
}

pub fn dense(l: &Linear) -> Tensor {
    match &l.w {
        QMatMul::Tensor(t) => t.clone(),
        _ => unreachable!("random models are dense"),
    }
}

/// Save a random model under Hugging Face names, with config and tokenizer.
pub fn save_hf(arch: Arch, dir: &std::path::Path) -> dojo_engine::Model {
    let cfg = tiny_config(arch);
    let model = dojo_engine::loader::random_model(cfg.clone(), 11, &Device::Cpu).unwrap();
    let mut t: HashMap<String, Tensor> = HashMap::new();
    t.insert("model.embed_tokens.weight".into(), model.embed.clone());
    t.insert("model.norm.weight".into(), model.norm.clone());
    for (i, l) in model.layers.iter().enumerate() {
        let p = format!("model.layers.{i}");
        for (n, lin) in [
            ("self_attn.q_proj", &l.q),
            ("self_attn.k_proj", &l.k),
            ("self_attn.v_proj", &l.v),
            ("self_attn.o_proj", &l.o),
            ("mlp.gate_proj", &l.gate),
            ("mlp.up_proj", &l.up),
            ("mlp.down_proj", &l.down),
        ] {
            t.insert(format!("{p}.{n}.weight"), dense(lin));
            if let Some(b) = &lin.b {
                t.insert(format!("{p}.{n}.bias"), b.clone());
            }
        }
        t.insert(format!("{p}.input_layernorm.weight"), l.attn_norm.clone());
        t.insert(
            format!("{p}.post_attention_layernorm.weight"),
            l.ffn_norm.clone(),
        );
        if let (Some(q), Some(k)) = (&l.q_norm, &l.k_norm) {
            t.insert(format!("{p}.self_attn.q_norm.weight"), q.clone());
            t.insert(format!("{p}.self_attn.k_norm.weight"), k.clone());
        }
    }
    candle_core::safetensors::save(&t, dir.join("model.safetensors")).unwrap();
    let model_type = match arch {
        Arch::Llama => "llama",
        Arch::Qwen2 => "qwen2",
        Arch::Qwen3 => "qwen3",
    };
    let config = json!({
        "model_type": model_type, "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim, "rope_theta": cfg.rope_theta, "rms_norm_eps": cfg.rms_eps,
        "max_position_embeddings": cfg.max_position, "tie_word_embeddings": true,
        "rope_scaling": null,
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    write_tiny_tokenizer(dir);
    model
}
