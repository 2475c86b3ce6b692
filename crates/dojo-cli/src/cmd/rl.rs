//! `dojo rl` (dojo-rl): reinforcement learning on the policy's own graded rollouts, on one
//! machine. The loop, its run directory and resume are [`dojo_rl::run::run`]'s, its
//! environment (the agent through `dojo rollout`'s path, with the trainer's weights) is
//! [`dojo_rl::agent_env`]; this module parses the flags (over `--config rl.toml`) and loads the
//! model and the world models. Every check (G ≥ 2, task file, environments of the tasks, the
//! run directory's configuration and model) runs before the first rollout.

use crate::exit::Exit;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct RlArgs {
    /// Task file (SWE-bench JSON/JSONL/Parquet) the training tasks come from.
    #[arg(long)]
    tasks: PathBuf,
    /// Base model: `default` (the bundled SmolLM2-135M), a GGUF file or a Hugging Face directory.
    #[arg(long, default_value = "default")]
    model: String,
    /// Run directory (created; an existing one is resumed).
    #[arg(long)]
    out: PathBuf,
    /// Settings file (`rl.toml`); flags override it. Without it: SWE-Master's recipe
    /// (`examples/rl/swe-master.toml`: G = 4, 32 tasks per step, 150 agent turns of 4,096 new
    /// tokens), with rollout budgets the embedded model finishes on `--device cpu`: 10 turns of
    /// 256 tokens.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Rollouts per task (the group size G), as `dojo rollout --samples`. `--group` is the old
    /// spelling, kept as an alias for a release.
    #[arg(long = "samples", visible_alias = "group")]
    group: Option<usize>,
    /// Steps to run.
    #[arg(long, value_parser = crate::args::positive::<u64>())]
    steps: Option<u64>,
    /// Tasks per step.
    #[arg(long)]
    tasks_per_step: Option<usize>,
    /// Advantage estimator: loo (SWE-Master), grpo, drgrpo.
    #[arg(long)]
    advantage: Option<String>,
    /// LoRA rank (alpha 2r, all seven projections, no dropout; full fine-tuning without it).
    #[arg(long, value_parser = crate::args::positive::<usize>())]
    lora_rank: Option<usize>,
    /// Learning rate.
    #[arg(long)]
    lr: Option<f64>,
    /// Agent turns per rollout, as `dojo rollout --max-turns` (`--max-steps`, the old spelling,
    /// is kept as an alias for a release; `dojo train --max-steps` counts optimizer steps).
    #[arg(long = "max-turns", visible_alias = "max-steps", value_parser = crate::args::positive::<u32>())]
    max_steps: Option<u32>,
    /// Tokens generated per model turn.
    #[arg(long)]
    max_new_tokens: Option<u32>,
    /// Held-out tasks evaluated every `eval_every` steps (greedy, one sample each).
    #[arg(long)]
    eval_tasks: Option<PathBuf>,
    /// Only these instance ids of --tasks (repeatable).
    #[arg(long = "instance")]
    instances: Vec<String>,
    /// Directory of environment specs overriding the embedded `envs/`.
    #[arg(long)]
    envs: Option<PathBuf>,
    /// Concurrent rollouts (sandboxes); their model calls are batched by the engine. Default:
    /// every episode of a step at once (G × tasks per step), at most 16 (the engine's batch).
    #[arg(long, value_parser = crate::args::positive::<usize>())]
    workers: Option<usize>,
    /// Device: cpu, cuda, cuda:N.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// No progress (bars per step's episodes, a line per step; only on a terminal).
    #[arg(long)]
    quiet: bool,
    /// Simulated environments (`--execution sim` needs no environments: SWT answers Python and
    /// tests, SWR gives the reward), as in `dojo rollout`.
    #[command(flatten)]
    world: super::rollout::WorldArgs,
}

#[cfg(feature = "engine")]
pub fn run(a: RlArgs) -> anyhow::Result<Exit> {
    use anyhow::Context;
    use dojo_rl::agent_env::{AgentEnv, AgentEnvOptions};
    use dojo_rl::config::{RlConfig, RlOverrides};

    let flags = RlOverrides {
        group: a.group,
        steps: a.steps,
        tasks_per_step: a.tasks_per_step,
        advantage: a.advantage.clone(),
        lora_rank: a.lora_rank,
        lr: a.lr,
        max_steps: a.max_steps,
        max_new_tokens: a.max_new_tokens,
    };
    let base = RlConfig::for_device(&a.device);
    let cfg = RlConfig::resolve(a.config.as_deref(), base, &flags)?;
    let world = a.world.overrides().rl_world()?;
    let device = dojo_engine::device(&a.device)?;
    let src = dojo_train::ModelSource::resolve(&a.model)?;
    let opts = AgentEnvOptions {
        tasks_file: a.tasks.clone(),
        instances: a.instances.clone(),
        eval_tasks: a.eval_tasks.clone(),
        envs: a.envs.clone(),
        workers: a.workers,
        out: a.out.clone(),
        world,
        progress: crate::cmd::progress(a.quiet),
    };
    // The world model and every task must be usable before the model loads.
    // The one runtime of the command; the training loop runs on this thread and blocks on it
    // for each step's rollouts.
    let rt = crate::cmd::runtime()?;
    let (mut env, ids) = AgentEnv::new(opts, &cfg, src.chat_format()?, rt.handle().clone())?;
    let s = dojo_rl::run::run_from_source(&a.out, &cfg, &src, &a.model, &device, &ids, &mut env)
        .with_context(|| format!("dojo rl --out {}", a.out.display()))?;
    if let Some(r) = s.resumed_from {
        eprintln!("resumed from step {r}");
    }
    if let Some(line) = s.last_step_line() {
        println!("{line}");
    }
    Ok(Exit::Success)
}

#[cfg(not(feature = "engine"))]
pub fn run(_: RlArgs) -> anyhow::Result<Exit> {
    super::needs_engine("dojo rl")
}
