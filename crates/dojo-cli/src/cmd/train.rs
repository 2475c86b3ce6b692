//! `dojo train` (dojo-train): fine-tune a model on `dojo curate`'s token export, merge LoRA
//! adapters, and evaluate the result.
//!
//! The evaluation hook (`--eval-tasks`, [`dojo_train::eval`]) rolls out the base model and the
//! trained one on a held-out task file through `dojo rollout`'s own path into `OUT/eval/base`
//! and `OUT/eval/trained`, then writes `OUT/eval.json` and adds the table to
//! `OUT/report.html`.
//!
//! Needs the candle stack, so it is built with the `engine` feature (the default) like
//! `dojo serve`; without it the command says how to get it.

use crate::exit::Exit;
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum TrainCmd {
    /// Supervised fine-tuning on tokens.parquet (full weights or LoRA, f32). OUT is resumed if it
    /// holds a run; the trained model is OUT/final (Hugging Face layout: `dojo serve --model
    /// OUT/final` and transformers load it).
    Sft(Box<SftArgs>),
    /// Merge a LoRA adapter (peft layout: `adapter_config.json` + `adapter_model.safetensors`,
    /// as `dojo train sft --lora-rank` writes to OUT/final) into its base model's weights: a
    /// Hugging Face directory `dojo serve --model` and transformers load.
    Merge(MergeArgs),
}

#[derive(clap::Args)]
pub struct MergeArgs {
    /// The adapter directory.
    #[arg(long)]
    pub adapter: PathBuf,
    /// The base model (as for `sft --model`); by default the adapter's
    /// `base_model_name_or_path`.
    #[arg(long)]
    pub model: Option<String>,
    /// Output directory (must not exist, or hold an earlier merge).
    #[arg(long)]
    pub out: PathBuf,
    /// `cpu`, or `cuda` / `cuda:N` in a build with the `cuda` feature.
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

#[derive(clap::Args)]
pub struct SftArgs {
    /// `tokens.parquet` from `dojo curate`, or the curate output directory holding it.
    #[arg(long)]
    pub data: PathBuf,
    /// `default` (SmolLM2-135M-Instruct, dequantized to f32), a GGUF file, a Hugging Face
    /// model directory, or a hub name already in the local Hugging Face cache.
    #[arg(long, default_value = "default")]
    pub model: String,
    /// Output directory (resumed if it holds a run of the same model, data and settings).
    #[arg(long)]
    pub out: PathBuf,
    /// Passes over the data (ignored with --max-steps).
    #[arg(long, default_value_t = 1, value_parser = crate::args::positive::<u64>())]
    pub epochs: u64,
    /// Optimizer steps to run, instead of --epochs.
    #[arg(long, value_parser = crate::args::positive::<u64>())]
    pub max_steps: Option<u64>,
    /// Longest sequence trained on; longer rows are handled by --overlong. Default: the
    /// model's context length (8,192 for `default`), so whole agent trajectories are trained on.
    #[arg(long)]
    pub max_len: Option<usize>,
    /// Rows longer than --max-len: `truncate` (keep the first max-len tokens) or `drop`.
    /// Either way they are counted in the summary.
    #[arg(long, default_value = "truncate")]
    pub overlong: String,
    /// Peak learning rate.
    #[arg(long, default_value_t = 1e-5)]
    pub lr: f64,
    /// Linear warmup steps (then cosine decay to 0).
    #[arg(long, default_value_t = 0)]
    pub warmup_steps: u64,
    /// AdamW weight decay (matrices only; biases and norm weights are not decayed).
    #[arg(long, default_value_t = 0.0)]
    pub weight_decay: f64,
    #[arg(long, default_value_t = 0.9)]
    pub beta1: f64,
    #[arg(long, default_value_t = 0.999)]
    pub beta2: f64,
    #[arg(long, default_value_t = 1e-8)]
    pub adam_eps: f64,
    /// Global gradient-norm clipping (0: off).
    #[arg(long, default_value_t = 1.0)]
    pub max_grad_norm: f64,
    /// Rows per micro-batch, at most (rows of similar length are batched together).
    #[arg(long, default_value_t = 4, value_parser = crate::args::positive::<usize>())]
    pub batch_size: usize,
    /// Padded tokens per micro-batch, at most.
    #[arg(long, default_value_t = 8192, value_parser = crate::args::positive::<usize>())]
    pub max_batch_tokens: usize,
    /// Micro-batches per optimizer step.
    #[arg(long, default_value_t = 1, value_parser = crate::args::positive::<usize>())]
    pub grad_accum: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Save a resumable checkpoint every N optimizer steps (0: only at the end).
    #[arg(long, default_value_t = 100)]
    pub save_every: u64,
    /// Resumable checkpoints kept.
    #[arg(long, default_value_t = 2)]
    pub keep_checkpoints: usize,
    /// Train even if the data's tokenizer fingerprint differs from the model's.
    #[arg(long)]
    pub no_tokenizer_check: bool,
    /// Train LoRA adapters of this rank on a frozen base instead of every weight; OUT/final
    /// is then the adapter in peft's layout.
    #[arg(long, value_parser = crate::args::positive::<usize>())]
    pub lora_rank: Option<usize>,
    /// LoRA scale numerator (the update is scaled by alpha / rank).
    #[arg(long, default_value_t = 16.0)]
    pub lora_alpha: f64,
    /// Dropout on the adapters' input during training.
    #[arg(long, default_value_t = 0.05)]
    pub lora_dropout: f64,
    /// Projections that get adapters, comma-separated: q, k, v, o, gate, up, down.
    #[arg(long, default_value = "q,k,v,o,gate,up,down", value_delimiter = ',')]
    pub lora_targets: Vec<String>,
    /// With --lora-rank: also write OUT/merged, the adapters merged into full weights.
    #[arg(long)]
    pub merge: bool,
    /// `cpu`, or `cuda` / `cuda:N` in a build with the `cuda` feature.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Memory budget (e.g. `16G`) for the memory plan, which estimates a step's peak from the
    /// model's dimensions and the largest micro-batch before training starts: it turns
    /// activation checkpointing on when activations would not fit, and refuses the run, naming
    /// the setting to lower, when even that does not fit. Default: the memory available now,
    /// less 10%.
    #[arg(long, value_name = "SIZE")]
    pub max_memory: Option<String>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// After training, roll out the base and the trained model on these held-out tasks (any
    /// task file `dojo rollout` takes) with the embedded engine, grade them and write
    /// OUT/eval.json (resolve rates with 95% Wilson intervals, share of valid tool calls)
    /// and the table in OUT/report.html. With LoRA the merged weights are evaluated.
    #[arg(long)]
    pub eval_tasks: Option<PathBuf>,
    /// Only these instance ids of --eval-tasks (repeatable).
    #[arg(long = "eval-instance")]
    pub eval_instances: Vec<String>,
    /// Agent turns per evaluation rollout (`--eval-max-steps`, the old spelling, is kept as an
    /// alias for a release).
    #[arg(long = "eval-max-turns", visible_alias = "eval-max-steps", default_value_t = 10, value_parser = crate::args::positive::<u32>())]
    pub eval_max_steps: u32,
    /// Tokens per model turn during evaluation.
    #[arg(long, default_value_t = 256)]
    pub eval_max_tokens: u32,
    /// Concurrent evaluation rollouts (sandboxes).
    #[arg(long, default_value_t = 1, value_parser = crate::args::positive::<usize>())]
    pub eval_workers: usize,
    /// Environment specs overriding the embedded `envs/` for the evaluation tasks.
    #[arg(long)]
    pub eval_envs: Option<PathBuf>,
}

#[cfg(feature = "engine")]
pub fn run(cmd: TrainCmd) -> anyhow::Result<Exit> {
    use anyhow::Context;

    let a = match cmd {
        TrainCmd::Sft(a) => *a,
        TrainCmd::Merge(m) => return merge(m),
    };
    use dojo_train::memory::parse_size;

    let overlong: dojo_train::Overlong = a.overlong.parse()?;
    let device = dojo_engine::device(&a.device)?;
    let progress = super::progress(a.quiet);
    let eval = a
        .eval_tasks
        .as_ref()
        .map(|tasks| dojo_train::eval::EvalSettings {
            tasks: tasks.clone(),
            instances: a.eval_instances.clone(),
            max_steps: a.eval_max_steps,
            max_tokens: a.eval_max_tokens,
            workers: a.eval_workers,
            envs: a.eval_envs.clone(),
            progress: progress.clone(),
        });
    if let Some(e) = &eval {
        e.check_tasks()?;
    }
    let (rank, targets) = (a.lora_rank, &a.lora_targets);
    let lora =
        dojo_train::LoraConfig::from_flags(rank, a.lora_alpha, a.lora_dropout, targets, a.merge)?;
    let cfg = dojo_train::SftConfig {
        lr: a.lr,
        adamw: dojo_train::AdamWConfig {
            beta1: a.beta1,
            beta2: a.beta2,
            eps: a.adam_eps,
            weight_decay: a.weight_decay,
        },
        warmup_steps: a.warmup_steps,
        max_grad_norm: a.max_grad_norm,
        grad_accum: a.grad_accum,
        batch_size: a.batch_size,
        max_batch_tokens: a.max_batch_tokens,
        max_len: a.max_len,
        overlong,
        seed: a.seed,
        epochs: a.epochs,
        max_steps: a.max_steps,
        save_every: a.save_every,
        keep_checkpoints: a.keep_checkpoints,
        check_tokenizer: !a.no_tokenizer_check,
        lora,
    };
    let src = dojo_train::ModelSource::resolve(&a.model)?;
    let opts = dojo_train::RunOptions {
        progress,
        stop_after: None,
        // The engine evaluates merged weights.
        merge: a.merge || (a.lora_rank.is_some() && a.eval_tasks.is_some()),
        max_memory: a.max_memory.as_deref().map(parse_size).transpose()?,
    };
    let s = dojo_train::run_sft(&src, &a.data, &a.out, &cfg, &opts, &device)
        .with_context(|| format!("dojo train sft --out {}", a.out.display()))?;
    println!("{}", s.report(cfg.lora.is_some()));
    let Some(settings) = &eval else {
        return Ok(Exit::Success);
    };
    let eval = dojo_train::eval::evaluate_run(&a.out, &a.model, &src, &s, settings);
    let Some(eval) = super::runtime()?.block_on(eval)? else {
        return Ok(Exit::Success);
    };
    println!("{}", eval.report_lines(&a.out));
    // Infrastructure failures make the evaluation incomplete: say so in the exit code.
    Ok(Exit::infrastructure_if(eval.incomplete()))
}

#[cfg(feature = "engine")]
fn merge(m: MergeArgs) -> anyhow::Result<Exit> {
    use anyhow::Context;

    let device = dojo_engine::device(&m.device)?;
    let src = dojo_train::ModelSource::for_adapter(&m.adapter, m.model.as_deref())?;
    let dir = dojo_train::trainer::merge_adapter(&src, &m.adapter, &m.out, &device)
        .with_context(|| format!("dojo train merge --out {}", m.out.display()))?;
    println!("merged model: {}", dir.display());
    Ok(Exit::Success)
}

#[cfg(not(feature = "engine"))]
pub fn run(_: TrainCmd) -> anyhow::Result<Exit> {
    super::needs_engine("dojo train")
}
