//! `dojo select` (dojo-select): one prediction per task from k graded candidates, with the
//! selectors × k table, the pass@k / best@k and turn-budget curves. The candidates and the
//! selectors are [`dojo_select::plan`]'s; this module parses the flags and prints the table.

use crate::exit::Exit;
use std::path::PathBuf;

use anyhow::Context;
use dojo_select::plan::PlanSettings;

#[derive(clap::Args)]
pub struct SelectArgs {
    /// `dojo rollout` run directories (repeat to pool runs over the same task file).
    #[arg(long, num_args = 1.., required_unless_present = "predictions", conflicts_with = "predictions")]
    pub rollouts: Vec<PathBuf>,
    /// SWE-bench predictions files, one per sample (file i is every task's sample i), graded
    /// here as `dojo eval` grades them (into OUT/graded/, resumable); needs --tasks.
    #[arg(long, num_args = 1.., requires = "tasks")]
    pub predictions: Vec<PathBuf>,
    /// The task file: for --predictions, and for the tests selector's sandboxes (default: the
    /// task file the first run directory's run.json names).
    #[arg(long)]
    pub tasks: Option<PathBuf>,
    /// Extra environment specs (`*.toml`), overriding the embedded `envs/`.
    #[arg(long)]
    pub envs: Option<PathBuf>,
    /// Local repositories of git-based tasks (`owner__name` or `name`).
    #[arg(long)]
    pub repos: Option<PathBuf>,
    /// Concurrent sandboxes when grading --predictions.
    #[arg(long, default_value_t = 1, value_parser = crate::args::positive::<usize>())]
    pub workers: usize,
    /// `oracle` (pass@k, reference only), `random`, `majority`, `verifier` (needs --verifier),
    /// `tests` (the agents' tests run on every candidate, in sandboxes), `hybrid` (a logistic
    /// combination of majority, tests and, with --verifier, the verifier), a comma-separated
    /// list, or `all`.
    #[arg(long, default_value = "majority")]
    pub selector: String,
    /// Weights for the hybrid selector (a `hybrid.json` of an earlier selection). Without them
    /// the weights are fitted on this selection's candidates, each task scored with weights
    /// fitted on the other tasks; the fit on all tasks is written to OUT/hybrid.json.
    #[arg(long)]
    pub hybrid_weights: Option<PathBuf>,
    /// The verifier's judge model: `openai:MODEL` (an endpoint that returns top_logprobs),
    /// `embedded[:MODEL]`, or a policy file of those kinds.
    #[arg(long)]
    pub verifier: Option<String>,
    /// SWE-World's reward model for the swr selector: `openai:MODEL` (an SWR model server),
    /// `embedded[:MODEL]`, or a policy file of those kinds.
    #[arg(long)]
    pub swr: Option<String>,
    /// SWR samples averaged per candidate (SWE-World: 3).
    #[arg(long, default_value_t = 3, value_parser = crate::args::positive::<u32>())]
    pub swr_samples: u32,
    /// Verifier (and SWR) requests in flight at once.
    #[arg(long, default_value_t = 4)]
    pub verifier_concurrency: usize,
    /// Candidates per task to select among (default: the most any task has), as `dojo rollout
    /// --samples` made them. `--k` is the old spelling, kept as an alias for a release.
    #[arg(short, long = "samples", visible_alias = "k", value_parser = crate::args::positive::<usize>())]
    pub k: Option<usize>,
    /// Seed of tie-breaks and bootstrap intervals.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Select on run directories still being written or interrupted (the output says so).
    #[arg(long)]
    pub partial: bool,
    /// Output directory: predictions.jsonl, selection.json, report.html.
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run(a: SelectArgs) -> anyhow::Result<Exit> {
    let settings = PlanSettings {
        rollouts: a.rollouts.clone(),
        predictions: a.predictions.clone(),
        tasks: a.tasks.clone(),
        envs: a.envs.clone(),
        repos: a.repos.clone(),
        workers: a.workers,
        selector: a.selector.clone(),
        hybrid_weights: a.hybrid_weights.clone(),
        verifier: a.verifier.clone(),
        swr: a.swr.clone(),
        swr_samples: a.swr_samples,
        verifier_concurrency: a.verifier_concurrency,
        k: a.k,
        seed: a.seed,
        partial: a.partial,
        out: a.out.clone(),
    };
    let plan = crate::cmd::runtime()?
        .block_on(dojo_select::plan::plan(&settings, |n| eprintln!("{n}")))?;
    let set = &plan.set;
    let out = dojo_select::select(set, &plan.options)
        .with_context(|| format!("selecting into {}", a.out.display()))?;
    for w in out.warnings() {
        eprintln!("{w}");
    }
    println!("{}", out.report(set.candidates(), &a.out));
    Ok(Exit::Success)
}
