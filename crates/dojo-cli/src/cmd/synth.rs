//! `dojo synth` (dojo-synth): validated tasks from a Python project by bug injection.

use crate::exit::Exit;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use dojo_rollout::policy::PolicyConfig;
use dojo_synth::{LlmSource, Operator, SynthOptions};

#[derive(clap::Args)]
pub struct SynthArgs {
    /// A PyPI release, NAME==VERSION (the sdist, sha256-pinned from PyPI's index).
    #[arg(long, conflicts_with = "source", required_unless_present = "source")]
    pub project: Option<String>,
    /// A local project directory instead of a PyPI release.
    #[arg(long)]
    pub source: Option<PathBuf>,
    /// With --source (a git repository): synthesize from the tree of this commit (tracked
    /// files as committed); the version defaults to its short id.
    #[arg(long, requires = "source")]
    pub commit: Option<String>,
    /// With --source: the project's name (default: the directory's name).
    #[arg(long)]
    pub name: Option<String>,
    /// With --source: the version recorded in the tasks (default 0.0.0, or the commit's short id).
    #[arg(long)]
    pub version: Option<String>,
    /// The tasks' `repo` (default: an env spec's repo with the project's name, else pypi/NAME).
    #[arg(long)]
    pub repo: Option<String>,
    /// Environment specs (`*.toml`) overriding the embedded `envs/`; when the project has none,
    /// `dojo synth` writes one here (or in `envs/` beside --out) for you to edit.
    #[arg(long)]
    pub envs: Option<PathBuf>,
    /// Task file to write (JSONL; `<out>.progress.jsonl` beside it makes the run resumable).
    #[arg(long)]
    pub out: PathBuf,
    /// Tasks to produce (the run stops once the file holds this many).
    #[arg(long, default_value_t = 10)]
    pub max: usize,
    /// Mutants to try at most in this invocation.
    #[arg(long)]
    pub max_tries: Option<usize>,
    /// Seed of the (balanced) order mutants are tried in.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Concurrent sandboxes.
    #[arg(long, default_value_t = 1, value_parser = crate::args::positive::<usize>())]
    pub workers: usize,
    /// Operators, comma-separated (default: all). Known: compare_flip, bool_flip, arith_flip,
    /// const_off_by_one, bound_off_by_one, negate_cond, drop_operand, remove_if, remove_stmt,
    /// remove_return, swap_args, change_default, remove_not, wrong_variable (`llm_rewrite` alone,
    /// with --llm-policy: only the model's bugs).
    #[arg(long)]
    pub operators: Option<String>,
    /// Only mutate source files whose path contains this (repeatable).
    #[arg(long = "file")]
    pub files: Vec<String>,
    /// Only mutate functions whose qualified name (`Class.method`) contains this (repeatable).
    #[arg(long = "function")]
    pub functions: Vec<String>,
    /// Keep only tasks with at most this many FAIL_TO_PASS tests (an easier curriculum step).
    #[arg(long)]
    pub max_fail_to_pass: Option<usize>,
    /// Drop mutants that break more than this share of the suite.
    #[arg(long, default_value_t = 0.5)]
    pub max_break_share: f64,
    /// Wall-clock limit of one mutant test run in seconds (default: 3 × baseline + 10).
    #[arg(long, value_parser = crate::args::positive::<u64>())]
    pub mutant_timeout: Option<u64>,
    /// Skip the final `dojo validate` of each task (faster; validate the file yourself).
    #[arg(long)]
    pub no_final_validate: bool,
    /// Name the mutated module in `hints_text` (an easier curriculum step).
    #[arg(long)]
    pub hint_module: bool,
    /// A model that also rewrites functions with a subtle bug (operator `llm_rewrite`), given as
    /// `dojo rollout --policy` takes it: `openai:MODEL`, `embedded[:MODEL]`, or a .toml/.json
    /// policy file of those kinds (its `sampling` is used).
    #[arg(long)]
    pub llm_policy: Option<String>,
    /// With --llm-policy: functions the model is asked to rewrite (one request each).
    #[arg(long, default_value_t = 10)]
    pub llm_rewrites: usize,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// The `--llm-policy` model as a chat backend, through the same policy types and clients
/// `dojo rollout` uses.
fn llm_source(spec: &str, rewrites: usize) -> anyhow::Result<LlmSource> {
    let policy = PolicyConfig::parse(spec)?;
    let model = dojo_rollout::embedded::policy_backends_blocking(&policy)
        .with_context(|| format!("--llm-policy {spec}"))?;
    Ok(LlmSource {
        backend: model.client.clone(),
        model: model.model.clone(),
        label: policy.label(),
        rewrites,
        temperature: policy.sampling.temperature,
        max_tokens: policy.sampling.max_tokens,
        seed: policy.sampling.seed,
    })
}

pub fn run(args: SynthArgs) -> anyhow::Result<Exit> {
    let source = args.source.as_ref().map(|dir| {
        dir.canonicalize()
            .with_context(|| format!("--source {}", dir.display()))
    });
    let (name, version) = (args.name.clone(), args.version.clone());
    // The exported tree of --commit lives until the run has packed it.
    let (input, _export) = dojo_synth::project::input_from_flags(
        args.project.as_deref(),
        source.transpose()?,
        name,
        args.commit.as_deref(),
        version,
    )?;
    let mut opts = SynthOptions::new(input, args.out.clone());
    if let Some(list) = &args.operators {
        opts.operators = Operator::parse_list(list)?;
    }
    opts.repo = args.repo.clone();
    opts.envs_dir = args.envs.clone();
    opts.max_tasks = args.max;
    opts.max_tries = args.max_tries;
    opts.seed = args.seed;
    opts.workers = args.workers;
    opts.files = args.files.clone();
    opts.functions = args.functions.clone();
    opts.max_fail_to_pass = args.max_fail_to_pass;
    opts.max_break_share = args.max_break_share;
    opts.mutant_timeout = args.mutant_timeout.map(Duration::from_secs);
    opts.final_validate = !args.no_final_validate;
    opts.hint_module = args.hint_module;
    opts.progress = super::progress(args.quiet);
    opts.check()?;
    if let Some(spec) = &args.llm_policy {
        opts.llm = Some(llm_source(spec, args.llm_rewrites)?);
    }
    let rt = super::runtime()?;
    let summary = rt.block_on(dojo_synth::synthesize(&opts))?;
    print!("{}", summary.report(&args.out));
    Ok(Exit::Success)
}
