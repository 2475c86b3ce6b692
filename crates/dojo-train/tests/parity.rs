//! Parity with PyTorch `transformers` on tiny random Llama / Qwen2 / Qwen3 models: logits,
//! loss, every gradient, and two AdamW steps with clipping, against the outputs
//! `tests/fixtures/make_fixtures.py` wrote (run by hand where torch is installed). Plus the
//! properties the loss must have: masked tokens get no gradient, padding changes nothing, and
//! the trainer's forward agrees with the engine's.

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use dojo_train::TrainModel;
use dojo_train::model::DeviceBatch;
use dojo_train::ops::nll_sum;
use dojo_train::optim::{AdamW, AdamWConfig, clip_grad_norm};
use dojo_train::trainer::step_grads;
use serde_json::Value;

const ARCHS: &[&str] = &["llama", "qwen2", "qwen3"];

fn fixture_dir(arch: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(arch)
}

struct Fixture {
    model: TrainModel,
    expected: HashMap<String, Tensor>,
    meta: Value,
    /// The batch rows without their padding.
    rows: Vec<(Vec<u32>, Vec<i32>)>,
}

fn load(arch: &str) -> Fixture {
    let dir = fixture_dir(arch);
    let model = TrainModel::load_hf_dir(&dir, &Device::Cpu).unwrap();
    let expected =
        candle_core::safetensors::load(dir.join("expected.safetensors"), &Device::Cpu).unwrap();
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let ids = expected["input_ids"]
        .to_dtype(DType::I64)
        .unwrap()
        .to_vec2::<i64>()
        .unwrap();
    let labels = expected["labels"].to_vec2::<i64>().unwrap();
    let rows = ids
        .iter()
        .zip(&labels)
        .map(|(i, l)| {
            // Padding is id 0; real ids are >= 3.
            let n = i.iter().take_while(|&&x| x != 0).count();
            (
                i[..n].iter().map(|&x| x as u32).collect(),
                l[..n].iter().map(|&x| x as i32).collect(),
            )
        })
        .collect();
    Fixture {
        model,
        expected,
        meta,
        rows,
    }
}

fn batch(rows: &[(Vec<u32>, Vec<i32>)]) -> DeviceBatch {
    let seqs: Vec<(&[u32], &[i32])> = rows
        .iter()
        .map(|(i, l)| (i.as_slice(), l.as_slice()))
        .collect();
    DeviceBatch::new(&seqs, &Device::Cpu).unwrap()
}

/// Largest elementwise difference, relative to the reference's largest magnitude.
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

fn num(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap()
}

fn adamw_config(meta: &Value) -> AdamWConfig {
    AdamWConfig {
        beta1: meta["betas"][0].as_f64().unwrap(),
        beta2: meta["betas"][1].as_f64().unwrap(),
        eps: num(meta, "eps"),
        weight_decay: num(meta, "weight_decay"),
    }
}

#[test]
fn logits_loss_and_gradients_equal_transformers() {
    // Activation checkpointing (the memory plan's choice for long rows) must not change a
    // value: the same tolerances, with and without.
    // Nor the loss in chunks of 3 rows (the default chunk holds every row of this batch).
    for (arch, checkpointing) in ARCHS.iter().flat_map(|a| [(a, false), (a, true)]) {
        let mut f = load(arch);
        if checkpointing {
            f.model.set_logit_chunk_rows(3);
        }
        f.model.set_checkpointing(if checkpointing {
            dojo_train::Checkpointing::On
        } else {
            dojo_train::Checkpointing::Off
        });
        let arch = format!("{arch} (checkpointing {checkpointing})");
        // The padded batch as torch saw it (pads are id 0 after each row).
        let ids = f.expected["input_ids"].to_dtype(DType::U32).unwrap();
        let logits = f.model.logits(&ids).unwrap();
        let d = rel_diff(&logits, &f.expected["logits"]);
        assert!(d < 1e-5, "{arch}: logits differ by {d}");

        let (loss, grads) =
            step_grads(&f.model, &[batch(&f.rows)], batch(&f.rows).n_trained).unwrap();
        let want = num(&f.meta, "loss");
        assert!(
            (loss - want).abs() < 1e-5 * want,
            "{arch}: loss {loss} vs {want}"
        );
        assert_eq!(
            grads.len(),
            f.model.params().len(),
            "{arch}: every parameter has a gradient"
        );
        for (name, g) in &grads {
            let d = rel_diff(g, &f.expected[&format!("grad.{name}")]);
            assert!(d < 1e-4, "{arch}: gradient of {name} differs by {d}");
        }
    }
}

#[test]
fn adamw_steps_with_clipping_equal_torch() {
    for arch in ARCHS {
        let f = load(arch);
        let cfg = adamw_config(&f.meta);
        let lr = num(&f.meta, "lr");
        let max_norm = num(&f.meta, "max_grad_norm");
        let mut opt = AdamW::new(cfg);

        // Step 1 on torch's own gradients: the optimizer alone.
        let mut grads: HashMap<String, Tensor> = f
            .model
            .params()
            .keys()
            .map(|n| (n.clone(), f.expected[&format!("grad.{n}")].clone()))
            .collect();
        let norm = clip_grad_norm(&mut grads, max_norm).unwrap();
        let want = num(&f.meta, "grad_norm1");
        assert!(
            (norm - want).abs() < 1e-5 * want,
            "{arch}: norm {norm} vs {want}"
        );
        opt.step(f.model.params(), &grads, lr).unwrap();
        for (name, var) in f.model.params() {
            let d = rel_diff(var.as_tensor(), &f.expected[&format!("step1.{name}")]);
            assert!(d < 1e-6, "{arch}: {name} after step 1 differs by {d}");
        }

        // Step 2 on our gradients: forward, backward, clip and update chained.
        let b = batch(&f.rows);
        let (loss, mut grads) = step_grads(&f.model, &[b], batch(&f.rows).n_trained).unwrap();
        let want = num(&f.meta, "loss2");
        assert!(
            (loss - want).abs() < 1e-5 * want,
            "{arch}: loss2 {loss} vs {want}"
        );
        let norm = clip_grad_norm(&mut grads, max_norm).unwrap();
        let want = num(&f.meta, "grad_norm2");
        assert!(
            (norm - want).abs() < 1e-4 * want,
            "{arch}: norm2 {norm} vs {want}"
        );
        opt.step(f.model.params(), &grads, lr).unwrap();
        for (name, var) in f.model.params() {
            let d = rel_diff(var.as_tensor(), &f.expected[&format!("step2.{name}")]);
            assert!(d < 1e-4, "{arch}: {name} after step 2 differs by {d}");
        }
    }
}

fn grads_of(model: &TrainModel, rows: &[(Vec<u32>, Vec<i32>)]) -> (f64, HashMap<String, Tensor>) {
    let b = batch(rows);
    let n = b.n_trained;
    step_grads(model, &[b], n).unwrap()
}

#[test]
fn masked_tokens_get_no_gradient() {
    let f = load("llama");
    // Trained targets at positions 4..=8; rows 3..=7 predict them and see ids 0..=7 only.
    let ids: Vec<u32> = (0..12).map(|i| 3 + (i * 7) % 60).collect();
    let labels: Vec<i32> = (0..12)
        .map(|i| {
            if (4..=8).contains(&i) {
                ids[i] as i32
            } else {
                -100
            }
        })
        .collect();
    let (loss, grads) = grads_of(&f.model, &[(ids.clone(), labels.clone())]);

    // Tokens after the last trained one, and the masked labels themselves, change nothing.
    let mut ids2 = ids.clone();
    for x in &mut ids2[8..] {
        *x = 60;
    }
    let (loss2, grads2) = grads_of(&f.model, &[(ids2, labels.clone())]);
    assert_eq!(loss, loss2);
    for (n, g) in &grads {
        assert_eq!(rel_diff(g, &grads2[n]), 0.0, "{n}");
    }
    // A token inside the trained context does change the loss (the test can fail).
    let mut ids3 = ids.clone();
    ids3[5] = 61;
    let (loss3, _) = grads_of(&f.model, &[(ids3, labels.clone())]);
    assert_ne!(loss, loss3);
    // Training one more label changes it too.
    let mut labels4 = labels.clone();
    labels4[10] = ids[10] as i32;
    let (loss4, _) = grads_of(&f.model, &[(ids.clone(), labels4)]);
    assert_ne!(loss, loss4);

    // At the logits: rows whose target is -100 are not in the loss, so their gradient is 0.
    let logits = candle_core::Var::from_tensor(
        &f.model
            .logits(&Tensor::from_vec(ids.to_vec(), (1, ids.len()), &Device::Cpu).unwrap())
            .unwrap()
            .squeeze(0)
            .unwrap(),
    )
    .unwrap();
    let b = batch(&[(ids.clone(), labels.clone())]);
    let picked = logits.as_tensor().index_select(&b.rows, 0).unwrap();
    let g = nll_sum(&picked, &b.targets).unwrap().backward().unwrap();
    let g = g.get(logits.as_tensor()).unwrap().to_vec2::<f32>().unwrap();
    for (row, gr) in g.iter().enumerate() {
        let trained = labels.get(row + 1).is_some_and(|&l| l >= 0);
        let mag: f32 = gr.iter().map(|x| x.abs()).sum();
        assert_eq!(mag > 0.0, trained, "row {row}");
    }
}

#[test]
fn padding_and_batching_do_not_change_the_loss() {
    let f = load("qwen2");
    let (l_both, g_both) = grads_of(&f.model, &f.rows);
    let b0 = batch(&f.rows[..1]);
    let b1 = batch(&f.rows[1..]);
    let n = b0.n_trained + b1.n_trained;
    // Two micro-batches accumulated = one padded batch.
    let (l_acc, g_acc) = step_grads(&f.model, &[b0, b1], n).unwrap();
    assert!((l_both - l_acc).abs() < 1e-6, "{l_both} vs {l_acc}");
    for (name, g) in &g_both {
        let d = rel_diff(&g_acc[name], g);
        assert!(d < 1e-5, "{name}: {d}");
    }
}

/// Training and inference run one transformer block (`dojo_engine::block`) and differ only
/// in where attention finds earlier positions: the trainer's pass over the batch gives the
/// logits of the engine's single prefill, of a prefill in two parts (the second attending to
/// the first through the KV cache), and of a decode step for the last token.
#[test]
fn trainer_forward_equals_the_engine_forward() {
    for arch in ARCHS {
        let f = load(arch);
        let engine = f.model.to_engine().unwrap();
        let (ids, _) = &f.rows[0];
        let n = ids.len();
        assert!(n >= 4, "{arch}: fixture row of {n} tokens");
        let t = f
            .model
            .logits(&Tensor::from_vec(ids.to_vec(), (1, n), &Device::Cpu).unwrap())
            .unwrap()
            .squeeze(0)
            .unwrap();
        let whole = engine
            .forward_all(ids, &mut dojo_engine::KvCache::new())
            .unwrap();
        let d = rel_diff(&t, &whole);
        assert!(d < 1e-5, "{arch}, one prefill: {d}");
        let mut cache = dojo_engine::KvCache::new();
        let first = engine.forward_all(&ids[..n / 2], &mut cache).unwrap();
        let second = engine.forward_all(&ids[n / 2..n - 1], &mut cache).unwrap();
        let last = engine.forward_last(&ids[n - 1..], &mut cache).unwrap();
        let last = Tensor::from_vec(last, (1, t.dim(1).unwrap()), &Device::Cpu).unwrap();
        let cached = Tensor::cat(&[first, second, last], 0).unwrap();
        let d = rel_diff(&t, &cached);
        assert!(d < 1e-5, "{arch}, cached prefill and decode: {d}");
    }
}

#[test]
fn llama_cpp_rope_permutation_is_undone() {
    // The engine runs llama.cpp-layout Llama weights with interleaved RoPE; after loading them
    // for training (un-permuted, rotate-half RoPE) the logits must be the same.
    let cfg = dojo_engine::Config {
        arch: dojo_engine::Arch::Llama,
        vocab_size: 50,
        hidden_size: 32,
        intermediate_size: 40,
        num_layers: 2,
        num_heads: 4,
        num_kv_heads: 2,
        head_dim: 8,
        rope_theta: 10_000.0,
        rms_eps: 1e-5,
        max_position: 32,
        rope_interleaved: true,
    };
    let engine = dojo_engine::loader::random_model(cfg, 3, &Device::Cpu).unwrap();
    let ids: Vec<u32> = (0..9).map(|i| (i * 11) % 50).collect();
    let e = engine
        .forward_all(&ids, &mut dojo_engine::KvCache::new())
        .unwrap();
    let m = TrainModel::from_engine(engine).unwrap();
    assert!(!m.config.rope_interleaved);
    let t = m
        .logits(&Tensor::from_vec(ids.to_vec(), (1, ids.len()), &Device::Cpu).unwrap())
        .unwrap()
        .squeeze(0)
        .unwrap();
    let d = rel_diff(&t, &e);
    assert!(d < 1e-5, "{d}");
}

#[test]
fn transformers_5_rope_parameters_are_read() {
    // transformers 5 writes `rope_parameters: {rope_theta, rope_type}` instead of `rope_theta`.
    let tmp = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture_dir("qwen3").join(f), tmp.path().join(f)).unwrap();
    }
    let cfg_path = tmp.path().join("config.json");
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    assert!(cfg.get("rope_theta").is_none());
    cfg["rope_parameters"]["rope_theta"] = 1_000_000.0.into();
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let m = TrainModel::load_hf_dir(tmp.path(), &Device::Cpu).unwrap();
    assert_eq!(m.config.rope_theta, 1_000_000.0);
    cfg["rope_parameters"]["rope_type"] = "yarn".into();
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let e = TrainModel::load_hf_dir(tmp.path(), &Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("rope_type `yarn` is not supported"), "{e}");
}
