//! LoRA against `peft` on the tiny Llama and Qwen2 fixtures: an adapter peft saved loads here
//! and gives peft's logits and gradients; merged weights are `W + scale · B A`; LoRA training
//! leaves the base weights untouched bit for bit; an end-to-end LoRA run resumes exactly and
//! merges into a directory the engine loads. Fixtures: `make_fixtures.py lora`.

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use dojo_train::lora::{ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE};
use dojo_train::model::DeviceBatch;
use dojo_train::optim::{AdamW, AdamWConfig};
use dojo_train::trainer::step_grads;
use dojo_train::{LoraConfig, TrainModel};

fn fixture_dir(arch: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(arch)
}

fn rel_diff(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(a.dims(), b.dims());
    let a = a.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let b = b.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let scale = b.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-12);
    a.iter()
        .zip(&b)
        .fold(0f32, |m, (x, y)| m.max((x - y).abs()))
        / scale
}

/// The base fixture with peft's adapter loaded, and peft's outputs.
fn load(arch: &str) -> (TrainModel, HashMap<String, Tensor>) {
    let dir = fixture_dir(arch);
    let lora_dir = dir.join("lora");
    let mut model = TrainModel::load_hf_dir(&dir, &Device::Cpu).unwrap();
    let (cfg, _) = LoraConfig::read(&lora_dir).unwrap();
    assert_eq!((cfg.rank, cfg.alpha, cfg.targets.len()), (4, 8.0, 7));
    model.enable_lora(cfg, 0).unwrap();
    model.lora().unwrap().load_weights(&lora_dir).unwrap();
    let expected =
        candle_core::safetensors::load(lora_dir.join("expected.safetensors"), &Device::Cpu)
            .unwrap();
    (model, expected)
}

fn batch_of(expected: &HashMap<String, Tensor>) -> DeviceBatch {
    let ids = expected["input_ids"].to_vec2::<i64>().unwrap();
    let labels = expected["labels"].to_vec2::<i64>().unwrap();
    let rows: Vec<(Vec<u32>, Vec<i32>)> = ids
        .iter()
        .zip(&labels)
        .map(|(i, l)| {
            let n = i.iter().take_while(|&&x| x != 0).count();
            (
                i[..n].iter().map(|&x| x as u32).collect(),
                l[..n].iter().map(|&x| x as i32).collect(),
            )
        })
        .collect();
    let seqs: Vec<(&[u32], &[i32])> = rows
        .iter()
        .map(|(i, l)| (i.as_slice(), l.as_slice()))
        .collect();
    DeviceBatch::new(&seqs, &Device::Cpu).unwrap()
}

#[test]
fn peft_adapters_give_peft_logits_and_gradients() {
    for (arch, checkpointing) in [
        ("llama", false),
        ("qwen2", false),
        ("llama", true),
        ("qwen2", true),
    ] {
        let (mut model, expected) = load(arch);
        model.set_checkpointing(if checkpointing {
            dojo_train::Checkpointing::On
        } else {
            dojo_train::Checkpointing::Off
        });
        let arch = format!("{arch} (checkpointing {checkpointing})");
        let ids = expected["input_ids"].to_dtype(DType::U32).unwrap();
        let d = rel_diff(&model.logits(&ids).unwrap(), &expected["logits"]);
        assert!(d < 1e-5, "{arch}: logits differ by {d}");

        let b = batch_of(&expected);
        let n = b.n_trained;
        let (_, grads) = step_grads(&model, &[b], n).unwrap();
        // Only the adapters are trained: 7 modules x 2 layers x (A, B).
        assert_eq!(grads.len(), 28, "{arch}");
        assert_eq!(model.trainable().len(), 28);
        for (name, g) in &grads {
            assert!(name.contains(".lora_"), "{name}");
            let d = rel_diff(g, &expected[&format!("grad.{name}")]);
            assert!(d < 1e-4, "{arch}: gradient of {name} differs by {d}");
        }
    }
}

#[test]
fn merged_weights_are_base_plus_scaled_b_a() {
    for arch in ["llama", "qwen2"] {
        let (mut model, expected) = load(arch);
        let lora = model.lora().unwrap();
        let scale = lora.config.scale();
        let mut want = HashMap::new();
        for (m, ad) in &lora.adapters {
            let w = model.params()[&format!("{m}.weight")].as_tensor().detach();
            let delta = (ad.b.as_tensor().matmul(ad.a.as_tensor()).unwrap() * scale).unwrap();
            want.insert(format!("{m}.weight"), (w + delta).unwrap());
        }
        let ids = expected["input_ids"].to_dtype(DType::U32).unwrap();
        let before = model.logits(&ids).unwrap();
        model.merge_lora().unwrap();
        assert!(model.lora().is_none());
        let tensors = model.tensors();
        for (name, w) in &want {
            let got = tensors[name]
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            let w = w.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            assert!(got == w, "{arch}: {name} is not exactly W + scale * B A");
            // peft's merge_and_unload, to float rounding.
            let peft = &expected[&format!("merged.{name}")];
            let d = rel_diff(&tensors[name], peft);
            assert!(d < 1e-6, "{arch}: {name} differs from peft's merge by {d}");
        }
        // The merged model computes what base + adapter computed.
        let d = rel_diff(&model.logits(&ids).unwrap(), &before);
        assert!(d < 1e-5, "{arch}: merged logits differ by {d}");
        // And so does the engine on the merged weights.
        let engine = model.to_engine().unwrap();
        let row: Vec<u32> = expected["input_ids"].to_vec2::<i64>().unwrap()[0]
            .iter()
            .map(|&x| x as u32)
            .collect();
        let e = engine
            .forward_all(&row, &mut dojo_engine::KvCache::new())
            .unwrap();
        let d = rel_diff(&e, &before.get(0).unwrap());
        assert!(d < 1e-5, "{arch}: engine on merged weights differs by {d}");
    }
}

#[test]
fn lora_steps_leave_the_base_weights_bit_for_bit() {
    let dir = fixture_dir("qwen2");
    let mut model = TrainModel::load_hf_dir(&dir, &Device::Cpu).unwrap();
    let base: HashMap<String, Vec<f32>> = model
        .tensors()
        .into_iter()
        .map(|(k, t)| (k, t.flatten_all().unwrap().to_vec1::<f32>().unwrap()))
        .collect();
    let cfg = LoraConfig::new(2, 4.0, 0.1, &["q", "v", "down"]).unwrap();
    model.enable_lora(cfg, 5).unwrap();
    assert_eq!(model.trainable().len(), 2 * 3 * 2);
    assert!(model.num_trainable() < model.num_params() / 4);
    let expected =
        candle_core::safetensors::load(dir.join("lora/expected.safetensors"), &Device::Cpu)
            .unwrap();
    let ids = expected["input_ids"].to_dtype(DType::U32).unwrap();
    // B starts at zero: the adapted model is the base model.
    let base_logits = TrainModel::load_hf_dir(&dir, &Device::Cpu)
        .unwrap()
        .logits(&ids)
        .unwrap();
    assert_eq!(rel_diff(&model.logits(&ids).unwrap(), &base_logits), 0.0);

    let mut opt = AdamW::new(AdamWConfig {
        weight_decay: 0.1,
        ..AdamWConfig::default()
    });
    let mut losses = Vec::new();
    for step in 0..4 {
        model.lora().unwrap().reseed(5, step);
        let b = batch_of(&expected);
        let n = b.n_trained;
        let (loss, grads) = step_grads(&model, &[b], n).unwrap();
        assert!(grads.keys().all(|k| k.contains(".lora_")));
        opt.step(model.trainable(), &grads, 1e-2).unwrap();
        losses.push(loss);
    }
    assert!(losses[3] < losses[0], "{losses:?}");
    for (k, t) in model.tensors() {
        let now = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!(now == base[&k], "{k} changed");
    }
    // Dropout is off at evaluation: two evaluations agree exactly, and differ from the base.
    let l1 = model.logits(&ids).unwrap();
    let l2 = model.logits(&ids).unwrap();
    assert_eq!(rel_diff(&l1, &l2), 0.0);
    assert!(rel_diff(&l1, &base_logits) > 1e-4);
}

#[test]
fn saved_adapters_load_back_and_use_peft_names() {
    let (model, expected) = load("llama");
    let tmp = tempfile::tempdir().unwrap();
    // `DOJO_TRAIN_EXPORT_ADAPTER=DIR` keeps the adapter and dojo's logits for
    // `make_fixtures.py check-adapter DIR` (peft loads it: run by hand where torch is).
    let dir = std::env::var_os("DOJO_TRAIN_EXPORT_ADAPTER")
        .map(PathBuf::from)
        .unwrap_or_else(|| tmp.path().join("adapter"));
    std::fs::create_dir_all(&dir).unwrap();
    let lora = model.lora().unwrap();
    lora.save(&dir, &fixture_dir("llama").display().to_string())
        .unwrap();
    let ids = expected["input_ids"].to_dtype(DType::U32).unwrap();
    let logits = model.logits(&ids).unwrap();
    let mut out = HashMap::new();
    out.insert("input_ids".to_string(), expected["input_ids"].clone());
    out.insert("logits".to_string(), logits.clone());
    candle_core::safetensors::save(&out, dir.join("dojo_logits.safetensors")).unwrap();

    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(ADAPTER_CONFIG_FILE)).unwrap())
            .unwrap();
    assert_eq!(cfg["peft_type"], "LORA");
    assert_eq!(cfg["task_type"], "CAUSAL_LM");
    assert_eq!(cfg["r"], 4);
    assert_eq!(cfg["bias"], "none");
    let saved =
        candle_core::safetensors::load(dir.join(ADAPTER_WEIGHTS_FILE), &Device::Cpu).unwrap();
    assert!(saved.contains_key("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"));
    // The same names and values as peft's own file.
    let peft = candle_core::safetensors::load(
        fixture_dir("llama").join("lora").join(ADAPTER_WEIGHTS_FILE),
        &Device::Cpu,
    )
    .unwrap();
    let mut a: Vec<&String> = saved.keys().collect();
    let mut b: Vec<&String> = peft.keys().collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);
    for (k, t) in &saved {
        assert_eq!(rel_diff(t, &peft[k]), 0.0, "{k}");
    }

    // Saving a LoRA model as a full checkpoint would drop the adapters: refused.
    let src = dojo_train::ModelSource::HfDir(fixture_dir("llama"));
    let e = dojo_train::trainer::write_model_dir(tmp.path(), &model, &src, None, None, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("saved as its adapter, or merged first"), "{e}");

    // A fresh model with other adapter values loads it back to the same logits.
    let mut m2 = TrainModel::load_hf_dir(&fixture_dir("llama"), &Device::Cpu).unwrap();
    let (c, _) = LoraConfig::read(&dir).unwrap();
    m2.enable_lora(c, 9).unwrap();
    m2.lora().unwrap().load_weights(&dir).unwrap();
    assert_eq!(rel_diff(&m2.logits(&ids).unwrap(), &logits), 0.0);

    // A run with another rank refuses it, naming the file.
    let mut m3 = TrainModel::load_hf_dir(&fixture_dir("llama"), &Device::Cpu).unwrap();
    m3.enable_lora(LoraConfig::new(8, 8.0, 0.0, &["q"]).unwrap(), 0)
        .unwrap();
    let e = m3
        .lora()
        .unwrap()
        .load_weights(&dir)
        .unwrap_err()
        .to_string();
    assert!(e.contains(ADAPTER_CONFIG_FILE) && e.contains("r=4"), "{e}");
}

#[test]
fn checkpointing_draws_the_same_dropout_masks() {
    // With dropout on, the recomputed blocks must see the masks of the first pass, or the
    // gradients would belong to another function than the loss.
    let dir = fixture_dir("llama");
    let mut model = TrainModel::load_hf_dir(&dir, &Device::Cpu).unwrap();
    let targets = ["q", "k", "v", "o", "gate", "up", "down"];
    model
        .enable_lora(LoraConfig::new(4, 8.0, 0.3, &targets).unwrap(), 7)
        .unwrap();
    // B starts at 0, which would give A no gradient: one plain step moves it.
    let (_, expected) = load("llama");
    let b = batch_of(&expected);
    let n = b.n_trained;
    let mut opt = AdamW::new(AdamWConfig::default());
    let (_, g) = step_grads(&model, std::slice::from_ref(&b), n).unwrap();
    opt.step(model.trainable(), &g, 1e-2).unwrap();
    let mut runs = Vec::new();
    for checkpointing in [false, true] {
        model.set_checkpointing(if checkpointing {
            dojo_train::Checkpointing::On
        } else {
            dojo_train::Checkpointing::Off
        });
        model.lora().unwrap().reseed(7, 1);
        runs.push(step_grads(&model, std::slice::from_ref(&b), n).unwrap());
    }
    let ((l0, g0), (l1, g1)) = (&runs[0], &runs[1]);
    assert!((l0 - l1).abs() < 1e-6 * l0.abs(), "{l0} vs {l1}");
    assert_eq!(g0.len(), g1.len());
    for (name, g) in g0 {
        let d = rel_diff(&g1[name], g);
        assert!(d < 1e-5, "{name}: {d}");
    }
    // And the draws differ from a different seed's (dropout is really on).
    model.set_checkpointing(dojo_train::Checkpointing::Off);
    model.lora().unwrap().reseed(8, 1);
    let (l2, _) = step_grads(&model, std::slice::from_ref(&b), n).unwrap();
    assert!(
        (l0 - l2).abs() > 1e-6,
        "dropout had no effect: {l0} vs {l2}"
    );
}
