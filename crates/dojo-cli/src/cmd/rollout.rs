//! `dojo rollout` (dojo-rollout): one policy over a task file, K samples each, into a resumable
//! run directory, through [`dojo_rollout::embedded::run_policy`]. `--shard I/N` runs
//! one deterministic part of the task set (one machine of many); `--merge DIR...` puts the
//! shards' directories back into one run, checking that nothing is missing or duplicated.

use crate::exit::{Exit, UsageError};
use std::path::PathBuf;

use dojo_rollout::policy::PolicyConfig;
use dojo_rollout::run_dir::RolloutOptions;
use dojo_task::PrepareOptions;

#[derive(clap::Args)]
pub struct RolloutArgs {
    /// Task file (SWE-bench JSON/JSONL/Parquet). With `--merge`: the task file the shards ran,
    /// where it is not at the path their run.json records.
    #[arg(long, required_unless_present = "merge")]
    tasks: Option<PathBuf>,
    /// Policy: a .toml/.json file, or `gold-replay`, `openai:MODEL`, `replay:FILE`, `embedded[:MODEL]`.
    #[arg(long, required_unless_present = "merge")]
    policy: Option<String>,
    /// Run only shard I of N (1-based, e.g. `2/8`): a deterministic split of the task set by
    /// instance id, so N machines each run one shard into their own `--out` (resumable as any
    /// run); merge them with `--merge`.
    #[arg(long, value_name = "I/N", conflicts_with = "merge")]
    shard: Option<dojo_rollout::shard::Shard>,
    /// Merge these shard directories into `--out` (nothing is run): refuses when a sample is
    /// missing or duplicated, or the shards come from different runs.
    #[arg(long, value_name = "SHARD_DIR", num_args = 1.., conflicts_with_all = ["policy", "instances", "max_steps"])]
    merge: Vec<PathBuf>,
    /// Samples per task (K).
    #[arg(short = 'n', long = "samples", default_value_t = 1, value_parser = crate::args::positive::<u32>())]
    samples: u32,
    /// Run directory (created; an existing one is resumed).
    #[arg(long)]
    out: PathBuf,
    /// Concurrent rollouts, i.e. sandboxes (LLM calls: the policy's `llm_concurrency`).
    #[arg(long, default_value_t = 2, value_parser = crate::args::positive::<usize>())]
    workers: usize,
    /// Only these instance ids (repeatable).
    #[arg(long = "instance")]
    instances: Vec<String>,
    /// Write SWE-bench predictions (`instance_id, model_name_or_path, model_patch`) for `dojo eval`.
    #[arg(long)]
    export_predictions: bool,
    /// Directory of environment specs overriding the embedded `envs/`.
    #[arg(long)]
    envs: Option<PathBuf>,
    /// Local clones of the repositories of git-based tasks (`owner__name`).
    #[arg(long)]
    repos: Option<PathBuf>,
    /// Agent turns per rollout (overrides the policy file's `[agent] max_steps`).
    /// `--max-steps` is the old spelling, kept as an alias for a release.
    #[arg(long = "max-turns", visible_alias = "max-steps", value_parser = crate::args::positive::<u32>())]
    max_steps: Option<u32>,
    #[command(flatten)]
    world: WorldArgs,
}

/// The simulated-environment flags (`dojo rollout`, `dojo rl`): the policy's `[world]` table.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct WorldArgs {
    /// How commands execute: `real`, `sim` (Python and tests answered by the world model, reward
    /// by its reward model; no Python environment needed), `hybrid` or `shadow` (real, with the
    /// world model's drift measured). Overrides the policy file's `[world] mode`.
    #[arg(long, visible_alias = "env-mode")]
    pub execution: Option<dojo_world::route::ExecutionMode>,
    /// World model for sim/hybrid/shadow: `embedded` (the bundled model), `embedded:DIR` (a
    /// checkpoint, e.g. trained on `dojo curate --world` data) or `openai:MODEL` (overrides
    /// `[world] model`).
    #[arg(long)]
    pub world_model: Option<String>,
    /// The transition model (SWT) when it is not --world-model, in the same forms (overrides
    /// `[world] swt_model`): SWE-World trains one model per role.
    #[arg(long)]
    pub swt_model: Option<String>,
    /// The reward model (SWR) when it is not --world-model (overrides `[world] swr_model`).
    #[arg(long)]
    pub swr_model: Option<String>,
    /// OpenAI-compatible endpoints of the world model, comma-separated (default: OPENAI_BASE_URL).
    #[arg(long)]
    pub world_base_url: Option<String>,
    /// SWR samples per simulated reward: their mean, resolved above 0.5, an exact tie decided
    /// by a seeded coin (recorded). Overrides `[world] swr_samples` (default 1).
    #[arg(long)]
    pub swr_samples: Option<u32>,
    /// Seed of SWR's tie-breaking coin (overrides `[world] swr_seed`, default 0).
    #[arg(long)]
    pub swr_seed: Option<u64>,
}

impl WorldArgs {
    /// The flags as the library's overrides of a policy's `[world]` table (one to one).
    pub fn overrides(&self) -> dojo_world::route::WorldOverrides {
        dojo_world::route::WorldOverrides {
            mode: self.execution,
            model: self.world_model.clone(),
            swt_model: self.swt_model.clone(),
            swr_model: self.swr_model.clone(),
            base_url: self.world_base_url.clone(),
            swr_samples: self.swr_samples,
            swr_seed: self.swr_seed,
        }
    }
}

pub fn run_rollout(args: RolloutArgs) -> anyhow::Result<Exit> {
    if !args.merge.is_empty() {
        let r = dojo_rollout::merge::merge(&args.merge, args.tasks.as_deref(), &args.out)?;
        eprintln!("{}", r.progress_line(&args.out));
        println!("{}", r.report());
        return Ok(Exit::Success);
    }
    let (Some(tasks), Some(policy)) = (args.tasks, args.policy) else {
        return Err(UsageError("--tasks and --policy are required".into()).into());
    };
    let mut policy = PolicyConfig::parse(&policy)?;
    policy.override_with(args.max_steps, &args.world.overrides())?;
    let opts = RolloutOptions {
        tasks_file: tasks,
        shard: args.shard,
        instances: args.instances,
        label: policy.label(),
        policy,
        samples: args.samples,
        out: args.out,
        workers: args.workers,
        export_predictions: args.export_predictions,
        envs_dir: args.envs,
        prepare: PrepareOptions {
            repos_dir: args.repos,
        },
        progress: super::progress(false),
    };
    let out = super::runtime()?.block_on(dojo_rollout::embedded::run_policy(&opts))?;
    eprintln!("{}", out.progress_line());
    println!("{}", out.report());
    // Infrastructure failures make the run incomplete: say so in the exit code.
    Ok(Exit::infrastructure_if(out.summary.infra_errors > 0))
}
