//! End-to-end SFT runs on the tiny fixture models: training lowers the loss, checkpoints load
//! in the engine, an interrupted run resumes to exactly the weights of an uninterrupted one,
//! and bad input fails before the first step with an error that says what is wrong.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, ListArray, RecordBatch};
use arrow::datatypes::Int32Type;
use candle_core::{Device, Tensor};
use dojo_train::{ModelSource, Overlong, RunOptions, SftConfig, TrainModel, run_sft};
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

fn fixture(arch: &str) -> ModelSource {
    ModelSource::HfDir(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(arch),
    )
}

type Row = (Vec<i32>, Vec<i32>);

/// Rows of ids in 3..64 (the fixtures' vocabulary), the first 3 tokens untrained.
fn rows(n: usize, seed: u32) -> Vec<Row> {
    (0..n as u32)
        .map(|r| {
            let len = 8 + ((r * 7 + seed) % 23) as usize;
            let ids: Vec<i32> = (0..len as u32)
                .map(|i| 3 + ((i * 13 + r * 5 + seed) % 61) as i32)
                .collect();
            let labels = ids
                .iter()
                .enumerate()
                .map(|(i, &x)| if i < 3 { -100 } else { x })
                .collect();
            (ids, labels)
        })
        .collect()
}

fn list(values: impl Iterator<Item = Vec<i32>>) -> ArrayRef {
    Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(
        values.map(|v| Some(v.into_iter().map(Some))),
    ))
}

fn write_parquet(path: &Path, cols: Vec<(&str, ArrayRef)>, kv: Option<(&str, &str)>) {
    let batch = RecordBatch::try_from_iter(cols).unwrap();
    let props = WriterProperties::builder()
        .set_key_value_metadata(kv.map(|(k, v)| vec![KeyValue::new(k.into(), v.to_string())]))
        .build();
    let f = std::fs::File::create(path).unwrap();
    let mut w = ArrowWriter::try_new(f, batch.schema(), Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

fn write_tokens(path: &Path, rows: &[Row]) {
    write_parquet(
        path,
        vec![
            ("input_ids", list(rows.iter().map(|r| r.0.clone()))),
            ("labels", list(rows.iter().map(|r| r.1.clone()))),
        ],
        None,
    );
}

fn config(max_steps: u64) -> SftConfig {
    SftConfig {
        lr: 1e-2,
        warmup_steps: 2,
        grad_accum: 2,
        batch_size: 3,
        max_batch_tokens: 64,
        max_len: Some(24),
        max_steps: Some(max_steps),
        save_every: 2,
        ..SftConfig::default()
    }
}

fn metrics(out: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn weights(dir: &Path) -> std::collections::HashMap<String, Tensor> {
    candle_core::safetensors::load(dir.join("model.safetensors"), &Device::Cpu).unwrap()
}

#[test]
fn training_lowers_the_loss_and_the_checkpoint_loads_in_the_engine() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("tokens.parquet");
    write_tokens(&data, &rows(10, 1));
    let out = tmp.path().join("out");
    let s = run_sft(
        &fixture("llama"),
        &data,
        &out,
        &config(10),
        &RunOptions::default(),
        &Device::Cpu,
    )
    .unwrap();
    assert_eq!((s.steps, s.total_steps, s.resumed_from), (10, 10, None));
    // Rows of 8..30 tokens with --max-len 24: the longer ones are cut, and counted.
    assert!(
        s.data.truncated > 0 && s.data.truncated < 10,
        "{:?}",
        s.data
    );
    assert_eq!(s.data.used, 10);
    let m = metrics(&out);
    assert_eq!(m.len(), 10);
    assert_eq!(m[0]["schema_version"], 1);
    assert_eq!(m[0]["lr"], 0.0, "warmup starts at 0");
    let first = m[1]["loss"].as_f64().unwrap();
    let last = m[9]["loss"].as_f64().unwrap();
    assert!(last < first * 0.8, "loss {first} -> {last}");
    // Two resumable checkpoints kept, plus the final model.
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "checkpoint-00000008",
            "checkpoint-00000010",
            "final",
            "metrics.jsonl",
            "report.html",
            "run.json"
        ]
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert_eq!(
        html.matches("<svg").count(),
        4,
        "loss, lr, grad norm, tokens/s curves"
    );
    let fin = s.final_dir.unwrap();
    assert!(dojo_train::checkpoint::is_complete(&fin));
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        assert!(fin.join(f).is_file(), "{f}");
    }
    // The engine (what `dojo serve --model DIR` runs) loads it and computes the same logits.
    let engine = dojo_engine::loader::load_safetensors(&fin, &Device::Cpu).unwrap();
    let trained = TrainModel::load_hf_dir(&fin, &Device::Cpu).unwrap();
    let ids: Vec<u32> = (3..20).collect();
    let e = engine
        .forward_all(&ids, &mut dojo_engine::KvCache::new())
        .unwrap();
    let t = trained
        .logits(&Tensor::from_vec(ids.to_vec(), (1, ids.len()), &Device::Cpu).unwrap())
        .unwrap()
        .squeeze(0)
        .unwrap();
    let d = (e - t)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!(d < 1e-4, "{d}");
    dojo_tokenizer::ChatFormat::from_hf_dir(&fin).unwrap();
    // The weights moved.
    let base = weights(fixture("llama").path());
    let after = weights(&fin);
    let w = "model.layers.0.mlp.up_proj.weight";
    let moved = (&base[w] - &after[w])
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap();
    assert!(moved.to_scalar::<f32>().unwrap() > 1e-3);
}

#[test]
fn an_interrupted_run_resumes_to_the_same_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("tokens.parquet");
    write_tokens(&data, &rows(9, 2));
    let cfg = SftConfig {
        max_steps: None,
        epochs: 2,
        ..config(0)
    };
    let a = tmp.path().join("a");
    let sa = run_sft(
        &fixture("qwen3"),
        &data,
        &a,
        &cfg,
        &RunOptions::default(),
        &Device::Cpu,
    )
    .unwrap();
    assert!(sa.total_steps >= 4, "{}", sa.total_steps);

    // Killed after step 3: checkpoint 2 is on disk, step 3 is lost, and a checkpoint write
    // was cut short (a temporary directory, and a directory under a final name but without
    // the completion marker).
    let b = tmp.path().join("b");
    let stop = RunOptions {
        stop_after: Some(3),
        ..RunOptions::default()
    };
    let sb = run_sft(&fixture("qwen3"), &data, &b, &cfg, &stop, &Device::Cpu).unwrap();
    assert_eq!(sb.steps, 3);
    assert!(sb.final_dir.is_none());
    std::fs::create_dir_all(b.join(".tmp-checkpoint-00000004-999")).unwrap();
    std::fs::write(
        b.join(".tmp-checkpoint-00000004-999/model.safetensors"),
        b"partial",
    )
    .unwrap();
    std::fs::create_dir_all(b.join("checkpoint-00000004")).unwrap();
    std::fs::copy(
        b.join("checkpoint-00000002/trainer_state.json"),
        b.join("checkpoint-00000004/trainer_state.json"),
    )
    .unwrap();

    let sb = run_sft(
        &fixture("qwen3"),
        &data,
        &b,
        &cfg,
        &RunOptions::default(),
        &Device::Cpu,
    )
    .unwrap();
    assert_eq!(sb.resumed_from, Some(2));
    assert_eq!(sb.steps, sa.steps);
    assert_eq!(
        sb.tokens_seen, sa.tokens_seen,
        "no row seen twice or skipped"
    );
    let (wa, wb) = (weights(&a.join("final")), weights(&b.join("final")));
    for (name, t) in &wa {
        let d = (t - &wb[name]).unwrap().abs().unwrap().max_all().unwrap();
        assert!(d.to_scalar::<f32>().unwrap() < 1e-6, "{name}");
    }
    let (ma, mb) = (metrics(&a), metrics(&b));
    assert_eq!(ma.len(), mb.len());
    for (x, y) in ma.iter().zip(&mb) {
        assert_eq!(x["step"], y["step"]);
        assert_eq!(x["tokens"], y["tokens"]);
        let (lx, ly) = (x["loss"].as_f64().unwrap(), y["loss"].as_f64().unwrap());
        assert!((lx - ly).abs() < 1e-6, "step {}: {lx} vs {ly}", x["step"]);
    }
    assert!(!b.join(".tmp-checkpoint-00000004-999").exists());
    assert!(
        !b.join("checkpoint-00000004").exists()
            || dojo_train::checkpoint::is_complete(&b.join("checkpoint-00000004"))
    );
}

fn err(src: &ModelSource, data: &Path, out: &Path, cfg: &SftConfig) -> String {
    run_sft(src, data, out, cfg, &RunOptions::default(), &Device::Cpu)
        .expect_err("should fail")
        .to_string()
}

#[test]
fn bad_input_fails_before_training_with_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let cfg = config(1);
    let good = rows(4, 3);

    let p = tmp.path().join("no_labels.parquet");
    write_parquet(
        &p,
        vec![("input_ids", list(good.iter().map(|r| r.0.clone())))],
        None,
    );
    let e = err(&fixture("llama"), &p, &out, &cfg);
    assert!(
        e.contains("no_labels.parquet") && e.contains("no column `labels`"),
        "{e}"
    );

    let p = tmp.path().join("all_masked.parquet");
    let masked: Vec<Row> = good
        .iter()
        .map(|r| (r.0.clone(), vec![-100; r.0.len()]))
        .collect();
    write_tokens(&p, &masked);
    let e = err(&fixture("llama"), &p, &out, &cfg);
    assert!(
        e.contains("nothing to train on") && e.contains("4 without any label"),
        "{e}"
    );

    let p = tmp.path().join("vocab.parquet");
    let mut big = good.clone();
    big[2].0[5] = 64;
    write_tokens(&p, &big);
    let e = err(&fixture("llama"), &p, &out, &cfg);
    assert!(
        e.contains("row 2") && e.contains("token id 64 is outside"),
        "{e}"
    );

    let p = tmp.path().join("tok.parquet");
    write_parquet(
        &p,
        vec![
            ("input_ids", list(good.iter().map(|r| r.0.clone()))),
            ("labels", list(good.iter().map(|r| r.1.clone()))),
        ],
        Some(("dojo.tokenizer_sha", "0123456789abcdef")),
    );
    let e = err(&fixture("llama"), &p, &out, &cfg);
    assert!(e.contains("tokenized with tokenizer 0123456789ab"), "{e}");
    assert!(!out.exists(), "nothing written for rejected input");

    // An output directory of another model's run, and one that is not a run at all.
    let data = tmp.path().join("tokens.parquet");
    write_tokens(&data, &good);
    run_sft(
        &fixture("llama"),
        &data,
        &out,
        &cfg,
        &RunOptions::default(),
        &Device::Cpu,
    )
    .unwrap();
    let e = err(&fixture("qwen2"), &data, &out, &cfg);
    assert!(
        e.contains("holds a run of another configuration (model."),
        "{e}"
    );
    let e = err(
        &fixture("llama"),
        &data,
        &out,
        &SftConfig {
            lr: 5e-3,
            ..cfg.clone()
        },
    );
    assert!(e.contains("config.lr: ") && e.contains("-> 0.005"), "{e}");
    let e = err(&fixture("llama"), &data, fixture("qwen2").path(), &cfg);
    assert!(e.contains("holds no run of this kind (no run.json)"), "{e}");

    // Over-long rows: dropped and counted with `drop`.
    let long: Vec<Row> = rows(6, 0);
    write_tokens(&data, &long);
    let ds = dojo_train::data::load_tokens(&data, 12, Overlong::Drop, 64).unwrap();
    assert_eq!(ds.report.dropped_overlong, 6 - ds.samples.len());
    assert!(ds.samples.iter().all(|s| s.input_ids.len() <= 12));
    let ds = dojo_train::data::load_tokens(&data, 12, Overlong::Truncate, 64).unwrap();
    assert_eq!(ds.samples.len(), 6);
    assert!(ds.report.truncated > 0);
}

#[test]
fn a_lora_run_resumes_exactly_and_merges_into_a_model_the_engine_loads() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("tokens.parquet");
    write_tokens(&data, &rows(9, 3));
    let cfg = SftConfig {
        lr: 5e-2,
        max_steps: Some(6),
        lora: Some(
            dojo_train::LoraConfig::new(4, 8.0, 0.1, &["q", "k", "v", "o", "gate", "up", "down"])
                .unwrap(),
        ),
        ..config(0)
    };
    let merge = RunOptions {
        merge: true,
        ..RunOptions::default()
    };
    let a = tmp.path().join("a");
    let sa = run_sft(&fixture("qwen2"), &data, &a, &cfg, &merge, &Device::Cpu).unwrap();
    assert_eq!(sa.steps, 6);
    assert!(sa.trainable_params < 20_000, "{}", sa.trainable_params);
    let m = metrics(&a);
    let (first, last) = (
        m[0]["loss"].as_f64().unwrap(),
        m[5]["loss"].as_f64().unwrap(),
    );
    assert!(last < first, "loss {first} -> {last}");
    // Checkpoints hold the adapter and the optimizer state, not the base weights.
    let ck = a.join("checkpoint-00000006");
    assert!(ck.join("adapter_model.safetensors").is_file());
    assert!(ck.join("optimizer.safetensors").is_file());
    assert!(!ck.join("model.safetensors").exists());
    let fin = sa.final_dir.clone().unwrap();
    assert!(fin.join("adapter_config.json").is_file() && fin.join("tokenizer.json").is_file());

    // Killed after step 3 (checkpoint 2 on disk): the resumed run ends where `a` ended,
    // dropout masks included.
    let b = tmp.path().join("b");
    let stop = RunOptions {
        stop_after: Some(3),
        ..merge.clone()
    };
    run_sft(&fixture("qwen2"), &data, &b, &cfg, &stop, &Device::Cpu).unwrap();
    let sb = run_sft(&fixture("qwen2"), &data, &b, &cfg, &merge, &Device::Cpu).unwrap();
    assert_eq!(sb.resumed_from, Some(2));
    let adapter = |d: &Path| {
        candle_core::safetensors::load(d.join("final/adapter_model.safetensors"), &Device::Cpu)
            .unwrap()
    };
    let (wa, wb) = (adapter(&a), adapter(&b));
    assert_eq!(wa.len(), 28);
    for (name, t) in &wa {
        let d = (t - &wb[name]).unwrap().abs().unwrap().max_all().unwrap();
        assert!(d.to_scalar::<f32>().unwrap() < 1e-6, "{name}");
    }

    // The merged directory is a full model the engine loads, equal to base + adapter; and
    // `merge_adapter` (what `dojo train merge` runs) writes the same weights.
    let merged = sa.merged_dir.unwrap();
    assert!(dojo_train::checkpoint::is_complete(&merged));
    dojo_engine::loader::load_safetensors(&merged, &Device::Cpu).unwrap();
    let again = tmp.path().join("again");
    dojo_train::trainer::merge_adapter(&fixture("qwen2"), &fin, &again, &Device::Cpu).unwrap();
    let (x, y) = (weights(&merged), weights(&again));
    assert_eq!(x.len(), y.len());
    for (name, t) in &x {
        let d = (t - &y[name]).unwrap().abs().unwrap().max_all().unwrap();
        assert_eq!(d.to_scalar::<f32>().unwrap(), 0.0, "{name}");
    }
    let base = weights(fixture("qwen2").path());
    let w = "model.layers.1.mlp.down_proj.weight";
    let moved = (&base[w] - &x[w])
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap();
    assert!(moved.to_scalar::<f32>().unwrap() > 0.0);
    // An existing directory dojo did not write is never replaced.
    let e = dojo_train::trainer::merge_adapter(&fixture("qwen2"), &fin, tmp.path(), &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a model directory dojo wrote"), "{e}");
}
