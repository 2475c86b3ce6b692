//! Forward + backward throughput of the trainer on a real model, for
//! `benchmarks/results/train.md` (the PyTorch side is `benchmarks/train_torch.py`, run on the
//! Hugging Face directory this writes, so both train the same weights).
//!
//! `cargo run --release -p dojo-train --example train_bench -- [--model default|PATH]
//!  [--seq 1024] [--batch 1] [--iters 3] [--write-hf DIR] [--lora-rank R] [--checkpointing]
//!  [--reuse-mib N]`
//!
//! `--checkpointing` turns activation checkpointing on (`TrainModel::set_checkpointing`).
//!
//! `--reuse-mib N`: keep at most N MiB of large freed blocks for reuse (`dojo_kernels::alloc`;
//! the trainer's default is `dojo_train::memory::REUSE_BYTES`), 0 to keep none.
//!
//! `--lora-rank R` trains LoRA adapters (alpha 2R, no dropout, all seven projections, as
//! `benchmarks/train_torch.py --lora-rank R` sets up peft) on the frozen base instead.
//!
//! Prints one JSON line: tokens/s of forward + backward over the median iteration (every
//! position trained, as in packed SFT), and the peak resident memory of the process.

use std::time::Instant;

use candle_core::Device;
use dojo_train::model::DeviceBatch;
use dojo_train::trainer::{step_grads, write_model_dir};
use dojo_train::{LoraConfig, ModelSource};

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

// As in `dojo`: large freed blocks kept for reuse once a model to train is built.
#[global_allocator]
static ALLOC: dojo_kernels::alloc::ReuseLarge = dojo_kernels::alloc::ReuseLarge;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // As in `dojo`: candle's element-wise ops on the calling thread unless CANDLE_NUM_THREADS
    // is set. SAFETY: first thing in `main`, no other thread yet.
    let candle_threads = unsafe { dojo_kernels::threads::single_candle_pool() };
    let mut model = "default".to_string();
    let (mut seq, mut batch, mut iters) = (1024usize, 1usize, 3usize);
    let mut write_hf = None;
    let mut lora_rank: Option<usize> = None;
    let mut checkpointing = false;
    let mut reuse_mib: Option<usize> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut v = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--model" => model = v()?,
            "--seq" => seq = v()?.parse()?,
            "--batch" => batch = v()?.parse()?,
            "--iters" => iters = v()?.parse()?,
            "--write-hf" => write_hf = Some(std::path::PathBuf::from(v()?)),
            "--lora-rank" => lora_rank = Some(v()?.parse()?),
            "--checkpointing" => checkpointing = true,
            "--reuse-mib" => reuse_mib = Some(v()?.parse()?),
            _ => return Err(format!("unknown argument {a}").into()),
        }
    }
    let src = ModelSource::resolve(&model)?;
    let mut m = src.load(&Device::Cpu)?;
    if let Some(dir) = write_hf {
        std::fs::create_dir_all(&dir)?;
        let fmt = src.chat_format()?;
        write_model_dir(
            &dir,
            &m,
            &src,
            src.base_config()?.as_ref(),
            fmt.tokenizer.bos_id(),
            fmt.tokenizer.eos_id(),
        )?;
    }
    if let Some(r) = lora_rank {
        let all = ["q", "k", "v", "o", "gate", "up", "down"];
        m.enable_lora(LoraConfig::new(r, 2.0 * r as f64, 0.0, &all)?, 0)?;
    }
    match reuse_mib {
        Some(0) => dojo_kernels::alloc::release(),
        Some(mib) => dojo_kernels::alloc::enable_reuse(mib << 20),
        None => {}
    }
    if checkpointing {
        m.set_checkpointing(dojo_train::Checkpointing::On);
    }
    let vocab = m.config.vocab_size as u32;
    let rows: Vec<(Vec<u32>, Vec<i32>)> = (0..batch)
        .map(|b| {
            let ids: Vec<u32> = (0..seq as u32)
                .map(|i| (i.wrapping_mul(2654435761).wrapping_add(b as u32 * 97)) % vocab)
                .collect();
            let labels = ids.iter().map(|&x| x as i32).collect();
            (ids, labels)
        })
        .collect();
    let seqs: Vec<(&[u32], &[i32])> = rows
        .iter()
        .map(|(i, l)| (i.as_slice(), l.as_slice()))
        .collect();
    let mut times = Vec::new();
    for it in 0..=iters {
        let b = DeviceBatch::new(&seqs, &Device::Cpu)?;
        let n = b.n_trained;
        let t = Instant::now();
        let (loss, grads) = step_grads(&m, &[b], n)?;
        let dt = t.elapsed().as_secs_f64();
        drop(grads);
        eprintln!("iter {it}: {dt:.2}s loss {loss:.4}");
        // Iteration 0 warms up allocations; with --iters 0 it is the only one (memory runs).
        if it > 0 || iters == 0 {
            times.push(dt);
        }
    }
    times.sort_by(f64::total_cmp);
    let med = times[times.len() / 2];
    println!(
        "{}",
        serde_json::json!({
            "impl": "dojo-train (candle)",
            "candle_threads": candle_threads,
            "model": model,
            "params": m.num_params(),
            "trainable": m.num_trainable(),
            "lora_rank": lora_rank,
            "checkpointing": checkpointing,
            "seq": seq,
            "batch": batch,
            "threads": candle_core::utils::get_num_threads(),
            "median_s": med,
            "tokens_per_s": (seq * batch) as f64 / med,
            "peak_rss_mb": peak_rss_mb(),
        })
    );
    Ok(())
}
