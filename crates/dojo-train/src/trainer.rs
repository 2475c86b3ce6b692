//! The SFT loop.
//!
//! An optimizer step takes `grad_accum` micro-batches. Its loss is the summed next-token
//! cross-entropy of all their trained tokens divided by the number of those tokens (every
//! trained token weighs the same, however the rows fall into micro-batches; transformers does
//! the same with `num_items_in_batch`). Then: global-norm clipping, AdamW at the scheduled
//! rate, a metrics line, and every `save_every` steps a checkpoint.
//!
//! `OUT` layout: `run.json` (configuration, model and data fingerprints), `metrics.jsonl`,
//! `report.html` (loss curve and settings; rewritten at every checkpoint and at the end),
//! `checkpoint-NNNNNNNN/` (resumable), `final/` (the trained model, or with LoRA the adapter),
//! `merged/` (with LoRA and `merge`: full weights). An existing `OUT` is
//! resumed from its newest complete checkpoint, after checking that it was made from the same
//! model, data and settings.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::{Device, Tensor};
use serde_json::{Value as Json, json};

use crate::LossRows;
use crate::checkpoint::write_json;
use crate::checkpoint::{self, TrainerState};
use crate::data::{self, Batcher, Cursor, DataReport, Overlong, TrainRow};
use crate::lora::LoraConfig;
use crate::memory;
use crate::model::DeviceBatch;
use crate::ops::nll_sum;
use crate::optim::{self, AdamW, AdamWConfig};
use crate::source::{self, ModelSource};
use crate::{TRAIN_SCHEMA_VERSION, TrainError, TrainModel};

mod save;
use save::Saver;
pub use save::merge_adapter;

/// Settings of a run (saved in `run.json`; a resumed run must match them).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SftConfig {
    pub lr: f64,
    pub adamw: AdamWConfig,
    pub warmup_steps: u64,
    /// Global gradient-norm limit; 0 disables clipping.
    pub max_grad_norm: f64,
    pub grad_accum: usize,
    /// Rows per micro-batch, at most.
    pub batch_size: usize,
    /// Padded tokens per micro-batch, at most (a longer single row still forms a batch).
    pub max_batch_tokens: usize,
    /// Longest row trained on (longer ones: [`Overlong`]); `None`: the model's context length,
    /// so that a default run trains on whole agent trajectories.
    pub max_len: Option<usize>,
    pub overlong: Overlong,
    pub seed: u64,
    /// Passes over the data (used when `max_steps` is not set).
    pub epochs: u64,
    pub max_steps: Option<u64>,
    /// Checkpoint every this many optimizer steps (0: only at the end).
    pub save_every: u64,
    pub keep_checkpoints: usize,
    /// Refuse data whose `dojo.tokenizer_sha` differs from the model's tokenizer.
    pub check_tokenizer: bool,
    /// Train LoRA adapters on a frozen base instead of every weight.
    #[serde(default)]
    pub lora: Option<LoraConfig>,
}

impl Default for SftConfig {
    fn default() -> Self {
        SftConfig {
            lr: 1e-5,
            adamw: AdamWConfig::default(),
            warmup_steps: 0,
            max_grad_norm: 1.0,
            grad_accum: 1,
            batch_size: 4,
            max_batch_tokens: 8192,
            max_len: None,
            overlong: Overlong::Truncate,
            seed: 0,
            epochs: 1,
            max_steps: None,
            save_every: 0,
            keep_checkpoints: 2,
            check_tokenizer: true,
            lora: None,
        }
    }
}

/// Settings that may change when a run is resumed (to extend it or save differently).
/// What `run.json` may change on resume: where the model and data were read from (their
/// fingerprints are compared), what the data report says, and how long to run and how often to
/// save.
const RESUMABLE_CHANGES: &[&str] = &[
    "source",
    "data.path",
    "data.report",
    "config.epochs",
    "config.max_steps",
    "config.save_every",
    "config.keep_checkpoints",
];

/// How to run (not part of the run's identity).
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Where progress goes: optimizer steps with the loss, learning rate and throughput.
    pub progress: dojo_progress::Progress,
    /// Stop after this many optimizer steps of this invocation, without the final save, as
    /// if the process had been killed right after its last checkpoint (tests; time-boxed runs).
    pub stop_after: Option<u64>,
    /// With LoRA: also write `OUT/merged`, the adapters folded into full weights.
    pub merge: bool,
    /// Memory budget in bytes for the memory plan ([`crate::memory`]); by default the memory
    /// available when the run starts.
    pub max_memory: Option<u64>,
}

/// What a run did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SftSummary {
    pub out: PathBuf,
    /// `OUT/final` when the run finished (with LoRA: the adapter, in peft's layout).
    pub final_dir: Option<PathBuf>,
    /// `OUT/merged` when LoRA adapters were merged into full weights.
    pub merged_dir: Option<PathBuf>,
    /// Parameters the optimizer updated (all, or the LoRA adapters').
    pub trainable_params: usize,
    pub resumed_from: Option<u64>,
    pub steps: u64,
    pub total_steps: u64,
    pub last_loss: Option<f64>,
    pub tokens_seen: u64,
    pub elapsed_s: f64,
    pub tokens_per_s: f64,
    pub data: DataReport,
    /// What the memory plan estimated and chose.
    pub memory: memory::Plan,
}

impl SftSummary {
    /// What `dojo train sft` prints about a run, one line each: resume point, memory plan,
    /// data, steps and throughput, and where the model (an adapter when `lora`) went.
    pub fn report(&self, lora: bool) -> String {
        let mut lines = Vec::new();
        if let Some(from) = self.resumed_from {
            lines.push(format!("resumed from step {from}"));
        }
        lines.push(self.memory.to_string());
        lines.push(self.data.to_string());
        lines.push(format!(
            "steps {}/{}, {} trainable parameters, last loss {}, {:.0} tokens/s, {:.1}s",
            self.steps,
            self.total_steps,
            self.trainable_params,
            self.last_loss.map_or("-".into(), |l| format!("{l:.4}")),
            self.tokens_per_s,
            self.elapsed_s
        ));
        lines.push(match &self.final_dir {
            Some(f) if lora => format!("adapter: {}", f.display()),
            Some(f) => format!("model: {}", f.display()),
            None => "not finished; run the same command again to resume".into(),
        });
        if let Some(m) = &self.merged_dir {
            lines.push(format!("merged model: {}", m.display()));
        }
        lines.join("\n")
    }
}

/// Loss and summed gradients of one optimizer step over `batches`, normalised by
/// `n_trained` (the trained tokens of all of them).
pub fn step_grads(
    model: &TrainModel,
    batches: &[DeviceBatch],
    n_trained: usize,
) -> Result<(f64, HashMap<String, Tensor>), TrainError> {
    let mut grads: HashMap<String, Tensor> = HashMap::new();
    let mut loss = 0f64;
    let scale = 1.0 / n_trained.max(1) as f64;
    for b in batches {
        if b.n_trained == 0 {
            continue;
        }
        let l = model.loss_grads(
            &b.ids,
            &b.rows,
            true,
            LossRows::Separable,
            |logits, r| nll_sum(logits, &b.targets.narrow(0, r.start, r.len())?)? * scale,
            &mut grads,
        )?;
        loss += l.to_scalar::<f32>()? as f64;
    }
    if !loss.is_finite() {
        return Err(TrainError::NonFinite(format!("loss is {loss}")));
    }
    Ok((loss, grads))
}

/// The memory plan of a run ([`crate::memory`]): its largest micro-batch (over the epochs'
/// plans, by estimated peak) against `max_memory` or the memory available now.
fn memory_plan(
    model: &TrainModel,
    cfg: &SftConfig,
    samples: &[TrainRow],
    batcher: &Batcher,
    max_memory: Option<u64>,
) -> Result<memory::Plan, TrainError> {
    let params = model.num_params() as u64;
    let trainable = match &cfg.lora {
        Some(l) => model
            .lora_shapes(l)?
            .iter()
            .map(|(_, (out, inp))| (l.rank * (out + inp)) as u64)
            .sum(),
        None => params,
    };
    let lora = cfg.lora.is_some();
    // No /proc/meminfo: nothing to plan against.
    let budget = max_memory
        .or_else(memory::default_budget)
        .unwrap_or(u64::MAX);
    let epochs = cfg.epochs.clamp(1, 4);
    let mut worst: Option<(u64, memory::BatchShape)> = None;
    for e in 0..epochs {
        for b in batcher.epoch_plan(e) {
            let shape = memory::BatchShape {
                rows: b.len(),
                len: b
                    .iter()
                    .map(|&i| samples[i].input_ids.len())
                    .max()
                    .unwrap_or(0),
                // The loss is computed in chunks of rows.
                logit_rows: b
                    .iter()
                    .map(|&i| samples[i].n_trained())
                    .sum::<usize>()
                    .min(memory::head_chunk_rows(&model.config)),
            };
            let peak =
                memory::estimate(&model.config, params, trainable, lora, shape, false).total();
            if worst.is_none_or(|(w, _)| peak > w) {
                worst = Some((peak, shape));
            }
        }
    }
    let Some((_, shape)) = worst else {
        // No batch at all (the data loader refuses an empty file first): nothing to plan.
        let estimate = memory::estimate(
            &model.config,
            params,
            trainable,
            lora,
            Default::default(),
            false,
        );
        return Ok(memory::Plan {
            budget,
            checkpointing: false,
            estimate,
        });
    };
    memory::plan(&model.config, params, trainable, lora, shape, budget)
}

fn sha256_file(path: &Path) -> Result<String, TrainError> {
    use sha2::{Digest, Sha256};
    let mut f = std::fs::File::open(path).map_err(|e| TrainError::file(path, e))?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).map_err(|e| TrainError::file(path, e))?;
    Ok(hex::encode(h.finalize()))
}

/// A fixed stream of micro-batches over epochs.
struct Stream<'a> {
    batcher: &'a Batcher,
    cursor: Cursor,
    plan: Vec<Vec<usize>>,
    plan_epoch: Option<u64>,
}

impl<'a> Stream<'a> {
    fn new(batcher: &'a Batcher, cursor: Cursor) -> Self {
        Stream {
            batcher,
            cursor,
            plan: Vec::new(),
            plan_epoch: None,
        }
    }

    fn next(&mut self) -> Vec<usize> {
        loop {
            if self.plan_epoch != Some(self.cursor.epoch) {
                self.plan = self.batcher.epoch_plan(self.cursor.epoch);
                self.plan_epoch = Some(self.cursor.epoch);
            }
            if let Some(b) = self.plan.get(self.cursor.index) {
                self.cursor.index += 1;
                return b.clone();
            }
            self.cursor = Cursor {
                epoch: self.cursor.epoch + 1,
                index: 0,
            };
        }
    }
}

/// Write the weights with `config.json` and tokenizer files into `dir` (a Hugging Face model
/// directory; `bos`/`eos` go into a config made from scratch for a GGUF source).
pub fn write_model_dir(
    dir: &Path,
    model: &TrainModel,
    src: &ModelSource,
    base_cfg: Option<&Json>,
    bos: Option<u32>,
    eos: Option<u32>,
) -> Result<(), TrainError> {
    if model.lora().is_some() {
        // The base weights alone would silently drop the training.
        return Err(TrainError::Model(
            "a LoRA model is saved as its adapter, or merged first".into(),
        ));
    }
    let w = dir.join(checkpoint::WEIGHTS_FILE);
    let mut meta = HashMap::new();
    meta.insert("format".to_string(), "pt".to_string());
    let tensors = model.tensors();
    checkpoint::save_safetensors(&tensors, &w, &meta)?;
    write_json(
        &dir.join("config.json"),
        &model.hf_config(base_cfg, bos, eos),
    )?;
    src.write_tokenizer_files(dir)
}

/// Train `--model` on `data` into `out` (resuming it if it holds a run).
pub fn run_sft(
    src: &ModelSource,
    data_path: &Path,
    out: &Path,
    cfg: &SftConfig,
    opts: &RunOptions,
    device: &Device,
) -> Result<SftSummary, TrainError> {
    check_config(cfg)?;
    // Everything that can be wrong with the inputs is checked before the first step.
    let Setup {
        mut model,
        cfg,
        dataset,
        batcher,
        memory,
        bos,
        eos,
    } = setup(src, data_path, cfg, opts, device)?;
    let cfg = &cfg;
    open_run(out, src, &model, cfg, &dataset.report)?;
    let samples: Vec<TrainRow> = dataset.samples;
    let (total_steps, total_micro) = length(cfg, &batcher);
    let (mut state, mut opt, resumed_from) = resume(out, &model, cfg, total_steps, device)?;
    // Metrics lines past the checkpoint resumed from are written again.
    let metrics = checkpoint::open_step_log(&out.join("metrics.jsonl"), state.step)?;
    let saver = Saver::new(out, src, bos, eos)?;
    let bar = &opts.progress;
    bar.start("train", total_steps, state.step);
    let mut stream = Stream::new(&batcher, state.cursor);
    let mut micro_done = micro_index(&batcher, state.cursor);
    let mut last_loss = None;
    let mut steps_this_run = 0u64;
    let mut tokens_this_run = 0u64;
    let started = Instant::now();
    let elapsed_before = state.elapsed_s;
    while state.step < total_steps {
        if opts.stop_after.is_some_and(|n| steps_this_run >= n) {
            break;
        }
        let t0 = Instant::now();
        let mut n_micro = cfg.grad_accum;
        if let Some(total) = total_micro {
            n_micro = n_micro.min(total.saturating_sub(micro_done));
        }
        let micro = micro_batches(&mut stream, &samples, n_micro, device)?;
        micro_done += n_micro;
        let step = optimizer_step(&model, &mut opt, &micro, cfg, state.step, total_steps)?;
        let elapsed_s = elapsed_before + started.elapsed().as_secs_f64();
        record_step(&mut state, stream.cursor, &micro, elapsed_s);
        steps_this_run += 1;
        tokens_this_run += micro.tokens as u64;
        let dt = t0.elapsed().as_secs_f64();
        let tps = micro.tokens as f64 / dt.max(1e-9);
        last_loss = Some(step.loss);
        metrics.append(&metrics_line(&state, &step, &micro, tps, dt))?;
        bar.advance(
            1,
            &format!("loss {:.4} lr {:.2e} {tps:.0} tok/s", step.loss, step.lr),
        );
        let save_now = state.step == total_steps
            || (cfg.save_every > 0 && state.step.is_multiple_of(cfg.save_every));
        if save_now {
            saver.checkpoint(&model, &opt, &state, cfg.keep_checkpoints)?;
        }
    }
    bar.finish("");
    let trainable_params = model.num_trainable();
    let (final_dir, merged_dir) = if state.step >= total_steps {
        saver.finish(&mut model, opts.merge, steps_this_run > 0)?
    } else {
        (None, None)
    };
    crate::report::write(out)?;
    let run_s = started.elapsed().as_secs_f64();
    Ok(SftSummary {
        out: out.to_path_buf(),
        final_dir,
        merged_dir,
        trainable_params,
        resumed_from,
        steps: state.step,
        total_steps,
        last_loss,
        tokens_seen: state.tokens_seen,
        elapsed_s: state.elapsed_s,
        // This invocation's throughput.
        tokens_per_s: tokens_this_run as f64 / run_s.max(1e-9),
        data: dataset.report,
        memory,
    })
}

/// Settings no run can use, refused before anything is loaded.
fn check_config(cfg: &SftConfig) -> Result<(), TrainError> {
    if cfg.grad_accum == 0 || cfg.batch_size == 0 {
        return Err(TrainError::Config(
            "--grad-accum and --batch-size must be at least 1".into(),
        ));
    }
    if !(cfg.lr.is_finite() && cfg.lr >= 0.0) {
        return Err(TrainError::Config(format!(
            "--lr {} is not a valid rate",
            cfg.lr
        )));
    }
    Ok(())
}

/// What [`setup`] loaded and checked.
struct Setup {
    model: TrainModel,
    /// The configuration with the length used filled in.
    cfg: SftConfig,
    dataset: data::Dataset,
    batcher: Batcher,
    memory: memory::Plan,
    bos: Option<u32>,
    eos: Option<u32>,
}

/// Load the model and the data, check that they fit each other, plan memory and enable the
/// adapters: everything before the run directory is touched.
fn setup(
    src: &ModelSource,
    data_path: &Path,
    cfg: &SftConfig,
    opts: &RunOptions,
    device: &Device,
) -> Result<Setup, TrainError> {
    let mut model = src.load(device)?;
    if let Some(l) = &cfg.lora {
        model.lora_shapes(l)?;
    }
    let fmt = src.chat_format()?;
    let max_len = cfg.max_len.unwrap_or(model.config.max_position);
    if max_len > model.config.max_position {
        return Err(TrainError::Config(format!(
            "--max-len {max_len} exceeds the model's {} positions",
            model.config.max_position
        )));
    }
    // The manifest records the length used: a run resumed under another default is refused.
    let cfg = SftConfig {
        max_len: Some(max_len),
        ..cfg.clone()
    };
    let dataset = data::load_tokens(data_path, max_len, cfg.overlong, model.config.vocab_size)?;
    if cfg.check_tokenizer
        && let Some(data_sha) = &dataset.tokenizer_sha
    {
        let model_sha = source::tokenizer_sha(&fmt);
        if *data_sha != model_sha {
            return Err(TrainError::Data {
                path: dataset.report.path.clone(),
                reason: format!(
                    "tokenized with tokenizer {}…, but the model's is {}…: curate the rollouts \
                     with this model (`dojo curate --model ...`), or pass \
                     --no-tokenizer-check if the ids are known to match",
                    &data_sha[..data_sha.len().min(12)],
                    &model_sha[..12]
                ),
            });
        }
    }
    let batcher = Batcher::new(
        dataset.samples.iter().map(|s| s.input_ids.len()).collect(),
        cfg.batch_size,
        cfg.max_batch_tokens,
        cfg.seed,
    );
    // The memory plan, before the adapters and the optimizer state are allocated.
    let memory = memory_plan(&model, &cfg, &dataset.samples, &batcher, opts.max_memory)?;
    if memory.checkpointing {
        model.set_checkpointing(crate::Checkpointing::On);
    }
    // Said before the first step: a run that later fails for memory shows what was planned.
    opts.progress.line(&memory.to_string());
    tracing::info!(%memory, "memory plan");
    if let Some(l) = &cfg.lora {
        model.enable_lora(l.clone(), cfg.seed)?;
    }
    Ok(Setup {
        model,
        cfg,
        dataset,
        batcher,
        memory,
        bos: fmt.tokenizer.bos_id(),
        eos: fmt.tokenizer.eos_id(),
    })
}

/// Open `out` for this run: a new run, or the same run resumed (same model, same data, same
/// settings but for how long it runs and how often it saves, rewritten then: the report shows
/// the current ones). Unfinished `final` and `merged` directories are cleaned away.
fn open_run(
    out: &Path,
    src: &ModelSource,
    model: &TrainModel,
    cfg: &SftConfig,
    report: &DataReport,
) -> Result<(), TrainError> {
    let data_sha = sha256_file(&report.path)?;
    let fingerprint = model.fingerprint();
    let cfg_json = serde_json::to_value(cfg).map_err(|source| TrainError::Serialise {
        what: "the configuration",
        source,
    })?;
    let manifest = dojo_rundir::Manifest {
        require_empty: true,
        ..dojo_rundir::Manifest::new(
            out,
            "run.json",
            dojo_rundir::Compare::AllBut(RESUMABLE_CHANGES),
        )
    };
    let current = json!({
        "schema_version": TRAIN_SCHEMA_VERSION,
        "kind": "sft",
        "model": fingerprint,
        "source": src.path(),
        "data": {"path": report.path, "sha256": data_sha, "report": report},
        "config": cfg_json,
    });
    if let dojo_rundir::Opened::Resumed(_) = manifest.open(&current)? {
        manifest.write(&current)?;
    }
    dojo_rundir::checkpoint::clean(out, &["final", "merged"])?;
    Ok(())
}

/// The run's length: optimizer steps, and the micro-batches of its epochs when the epochs
/// bound it (`None` under `--max-steps`).
fn length(cfg: &SftConfig, batcher: &Batcher) -> (u64, Option<usize>) {
    let total_steps = match cfg.max_steps {
        Some(n) => n,
        None => {
            let micro: usize = (0..cfg.epochs).map(|e| batcher.epoch_plan(e).len()).sum();
            micro.div_ceil(cfg.grad_accum) as u64
        }
    };
    let total_micro = cfg.max_steps.is_none().then(|| {
        (0..cfg.epochs)
            .map(|e| batcher.epoch_plan(e).len())
            .sum::<usize>()
    });
    (total_steps, total_micro)
}

/// The trainer state and the optimizer, fresh or from the newest checkpoint in `out` (whose
/// weights are loaded into `model`), and the step resumed from.
fn resume(
    out: &Path,
    model: &TrainModel,
    cfg: &SftConfig,
    total_steps: u64,
    device: &Device,
) -> Result<(TrainerState, AdamW, Option<u64>), TrainError> {
    let state = TrainerState {
        schema_version: TRAIN_SCHEMA_VERSION,
        step: 0,
        total_steps,
        cursor: Cursor::default(),
        tokens_seen: 0,
        trained_tokens_seen: 0,
        elapsed_s: 0.0,
    };
    let Some((step, dir)) = dojo_rundir::checkpoint::list(out, checkpoint::STATE_FILE).pop() else {
        return Ok((state, AdamW::new(cfg.adamw), None));
    };
    let st = checkpoint::read_state(&dir)?;
    match model.lora() {
        Some(l) => l.load_weights(&dir)?,
        None => model.load_weights(&dir.join(checkpoint::WEIGHTS_FILE))?,
    }
    let opt = AdamW::load(
        cfg.adamw,
        st.step,
        &dir.join(checkpoint::OPTIMIZER_FILE),
        model.trainable(),
        device,
    )?;
    tracing::info!(step, dir = %dir.display(), "resuming");
    Ok((TrainerState { total_steps, ..st }, opt, Some(step)))
}

/// The micro-batches of one optimizer step, on the device, with their token counts.
struct MicroBatches {
    batches: Vec<DeviceBatch>,
    tokens: usize,
    trained: usize,
}

/// The next `n` micro-batches of `stream`.
fn micro_batches(
    stream: &mut Stream<'_>,
    samples: &[TrainRow],
    n: usize,
    device: &Device,
) -> Result<MicroBatches, TrainError> {
    let mut batches = Vec::with_capacity(n);
    let (mut tokens, mut trained) = (0usize, 0usize);
    for _ in 0..n {
        let idx = stream.next();
        let seqs: Vec<(&[u32], &[i32])> = idx
            .iter()
            .map(|&i| {
                (
                    samples[i].input_ids.as_slice(),
                    samples[i].labels.as_slice(),
                )
            })
            .collect();
        tokens += seqs.iter().map(|s| s.0.len()).sum::<usize>();
        let b = DeviceBatch::new(&seqs, device)?;
        trained += b.n_trained;
        batches.push(b);
    }
    Ok(MicroBatches {
        batches,
        tokens,
        trained,
    })
}

/// Count the step just taken over `micro` in `state`, which resumes at `cursor`.
fn record_step(state: &mut TrainerState, cursor: Cursor, micro: &MicroBatches, elapsed_s: f64) {
    state.step += 1;
    state.cursor = cursor;
    state.tokens_seen += micro.tokens as u64;
    state.trained_tokens_seen += micro.trained as u64;
    state.elapsed_s = elapsed_s;
}

/// What one optimizer step measured.
struct StepStats {
    loss: f64,
    lr: f64,
    grad_norm: f64,
}

/// One optimizer step (step `step` of `total_steps`, counted from 0) over `micro`: gradients,
/// clipping, the scheduled learning rate and the update.
fn optimizer_step(
    model: &TrainModel,
    opt: &mut AdamW,
    micro: &MicroBatches,
    cfg: &SftConfig,
    step: u64,
    total_steps: u64,
) -> Result<StepStats, TrainError> {
    if let Some(l) = model.lora() {
        l.reseed(cfg.seed, step);
    }
    let (loss, mut grads) = step_grads(model, &micro.batches, micro.trained)?;
    let grad_norm = optim::clip_grad_norm(&mut grads, cfg.max_grad_norm)?;
    let lr = optim::lr_at(step, cfg.lr, cfg.warmup_steps, total_steps);
    opt.step(model.trainable(), &grads, lr)?;
    Ok(StepStats {
        loss,
        lr,
        grad_norm,
    })
}

/// The `metrics.jsonl` line of the step just taken (`state` after it).
fn metrics_line(
    state: &TrainerState,
    step: &StepStats,
    micro: &MicroBatches,
    tokens_per_s: f64,
    step_s: f64,
) -> Json {
    json!({
        "schema_version": TRAIN_SCHEMA_VERSION,
        "step": state.step,
        "epoch": state.cursor.epoch,
        "loss": step.loss,
        "lr": step.lr,
        "grad_norm": step.grad_norm,
        "tokens": micro.tokens,
        "trained_tokens": micro.trained,
        "tokens_per_s": tokens_per_s,
        "step_s": step_s,
        "elapsed_s": state.elapsed_s,
    })
}

/// Micro-batches consumed before `cursor` (to know where an epochs-bounded run ends).
fn micro_index(batcher: &Batcher, cursor: Cursor) -> usize {
    (0..cursor.epoch)
        .map(|e| batcher.epoch_plan(e).len())
        .sum::<usize>()
        + cursor.index
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_report_lines() {
        let gib = 1u64 << 30;
        let s = SftSummary {
            out: PathBuf::from("/out"),
            final_dir: Some(PathBuf::from("/out/final")),
            merged_dir: Some(PathBuf::from("/out/merged")),
            trainable_params: 1000,
            resumed_from: Some(3),
            steps: 5,
            total_steps: 5,
            last_loss: Some(1.23456),
            tokens_seen: 100,
            elapsed_s: 2.04,
            tokens_per_s: 49.6,
            data: DataReport::default(),
            memory: memory::Plan {
                budget: 4 * gib,
                checkpointing: false,
                estimate: memory::Estimate {
                    weights: gib,
                    trainer_state: 0,
                    activations: 0,
                    attention: 0,
                    head: 0,
                    process: 0,
                },
            },
        };
        let r = s.report(true);
        let lines: Vec<&str> = r.lines().collect();
        assert_eq!(lines[0], "resumed from step 3");
        assert!(lines[1].starts_with("memory plan: "), "{}", lines[1]);
        assert!(lines[2].starts_with("data: 0 rows"), "{}", lines[2]);
        assert_eq!(
            &lines[3..],
            [
                "steps 5/5, 1000 trainable parameters, last loss 1.2346, 50 tokens/s, 2.0s",
                "adapter: /out/final",
                "merged model: /out/merged",
            ]
        );
        let unfinished = SftSummary {
            final_dir: None,
            merged_dir: None,
            last_loss: None,
            resumed_from: None,
            ..s
        };
        let r = unfinished.report(false);
        assert!(r.starts_with("memory plan: "), "{r}");
        assert!(r.contains("last loss -,"), "{r}");
        assert!(
            r.ends_with("\nnot finished; run the same command again to resume"),
            "{r}"
        );
    }
}
