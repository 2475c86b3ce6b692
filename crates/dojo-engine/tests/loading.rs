//! Model files: safetensors directories, and the bad-input paths (missing, truncated,
//! unsupported architecture).

mod common;

use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
use candle_core::{Device, Tensor};
use common::*;
use dojo_engine::model::Arch;
use dojo_engine::{Engine, EngineOptions, KvCache};
use serde_json::json;

#[test]
fn safetensors_directories_load_for_every_architecture() {
    for arch in [Arch::Qwen2, Arch::Qwen3] {
        let dir = tempfile::tempdir().unwrap();
        let original = save_hf(arch, dir.path());
        let loaded = dojo_engine::loader::load_safetensors(dir.path(), &Device::Cpu).unwrap();
        assert_eq!(loaded.config.arch, arch);
        let toks = [5u32, 9, 200, 17];
        let a = original.forward_last(&toks, &mut KvCache::new()).unwrap();
        let b = loaded.forward_last(&toks, &mut KvCache::new()).unwrap();
        assert_eq!(a, b, "{arch:?}");
        // And as a full engine with the directory's tokenizer and template.
        let engine = Engine::load(dir.path(), EngineOptions::default()).unwrap();
        assert_eq!(engine.format().tokenizer.vocab_size(), VOCAB);
    }
    // HF Llama weights use rotate-half RoPE, unlike llama.cpp's permuted GGUF weights.
    let dir = tempfile::tempdir().unwrap();
    save_hf(Arch::Llama, dir.path());
    let loaded = dojo_engine::loader::load_safetensors(dir.path(), &Device::Cpu).unwrap();
    assert!(!loaded.config.rope_interleaved);
}

#[test]
fn missing_model_is_named() {
    let err = Engine::load(
        std::path::Path::new("/nonexistent/model.gguf"),
        EngineOptions::default(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "loading model /nonexistent/model.gguf: no such file or directory"
    );
}

#[test]
fn unsupported_architecture_and_truncation_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpt2.gguf");
    let w = QTensor::quantize(
        &Tensor::zeros((4, 32), candle_core::DType::F32, &Device::Cpu).unwrap(),
        GgmlDType::F32,
    )
    .unwrap();
    let arch = gguf_file::Value::String("gpt2".into());
    let mut f = std::fs::File::create(&path).unwrap();
    gguf_file::write(
        &mut f,
        &[("general.architecture", &arch)],
        &[("token_embd.weight", &w)],
    )
    .unwrap();
    drop(f);
    let err = dojo_engine::loader::load_gguf(&path, &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(err.contains("unsupported architecture `gpt2`"), "{err}");
    assert!(err.contains("gpt2.gguf"), "{err}");

    // Truncated downloads: header cut short, and tensor data cut short.
    let bytes = std::fs::read(&path).unwrap();
    for keep in [40, bytes.len() - 100] {
        let cut = dir.path().join(format!("cut{keep}.gguf"));
        std::fs::write(&cut, &bytes[..keep]).unwrap();
        let err = dojo_engine::loader::load_gguf(&cut, &Device::Cpu)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(&format!("loading model {}", cut.display())),
            "{err}"
        );
    }
}

#[test]
fn unsupported_rope_scaling_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    save_hf(Arch::Qwen2, dir.path());
    let cfg_path = dir.path().join("config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    cfg["rope_scaling"] = json!({"type": "yarn", "factor": 4.0});
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let err = dojo_engine::loader::load_safetensors(dir.path(), &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(err.contains("rope_scaling is not supported"), "{err}");
}
