//! `dojo synth` (dojo-synth): validated tasks from a Python project by bug injection.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use dojo_rollout::policy::{PolicyConfig, PolicyKind};
use dojo_synth::{Input, LlmSource, Operator, SynthOptions};

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
    let embedded = match &policy.kind {
        PolicyKind::Embedded { model } => dojo_rollout::embedded::embedded_backend(model)?,
        _ => None,
    };
    let model = dojo_rollout::run_dir::model_backends(&policy, embedded)
        .with_context(|| format!("--llm-policy {spec}"))?;
    let (backend, model) = (model.client.clone(), model.model.clone());
    Ok(LlmSource {
        backend,
        model,
        label: policy.label(),
        rewrites,
        temperature: policy.sampling.temperature,
        max_tokens: policy.sampling.max_tokens,
        seed: policy.sampling.seed,
    })
}

pub fn run(args: SynthArgs) -> anyhow::Result<i32> {
    // The exported tree of --commit lives until the run has packed it.
    let mut _export = None;
    let input = match (&args.project, &args.source) {
        (Some(p), None) => Input::parse_requirement(p)?,
        (None, Some(dir)) => {
            let dir = dir
                .canonicalize()
                .with_context(|| format!("--source {}", dir.display()))?;
            let name = match &args.name {
                Some(n) => n.clone(),
                None => dir
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .context("--source has no directory name; pass --name")?,
            };
            match &args.commit {
                Some(rev) => {
                    let e =
                        dojo_synth::project::commit_input(&dir, rev, &name, args.version.clone())?;
                    let input = e.input.clone();
                    _export = Some(e);
                    input
                }
                None => Input::Dir {
                    path: dir,
                    name,
                    version: args.version.clone().unwrap_or_else(|| "0.0.0".into()),
                },
            }
        }
        _ => bail!("give either --project NAME==VERSION or --source DIR"),
    };
    let mut opts = SynthOptions::new(input, args.out.clone());
    if let Some(list) = &args.operators {
        opts.operators = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                Operator::by_name(s).with_context(|| {
                    format!(
                        "--operators: unknown operator {s:?} (known: {})",
                        Operator::ALL
                            .iter()
                            .map(|o| o.name())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })
            })
            .collect::<anyhow::Result<_>>()?;
    }
    if !(0.0..=1.0).contains(&args.max_break_share) {
        bail!("--max-break-share must be between 0 and 1");
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
    if let Some(spec) = &args.llm_policy {
        opts.llm = Some(llm_source(spec, args.llm_rewrites)?);
    }
    let rt = super::runtime()?;
    let summary = rt.block_on(dojo_synth::synthesize(&opts))?;
    print!("{}", summary.table());
    for u in &summary.unparseable_files {
        println!("skipped: {u}");
    }
    let t = summary.totals();
    let mins = summary.elapsed_s / 60.0;
    println!(
        "{}: {} task(s) in {} ({} mutant(s) tried this session in {:.1} s: {:.1} candidates/min)",
        summary.project,
        summary.tasks,
        args.out.display(),
        summary.tried_this_session,
        summary.elapsed_s,
        if mins > 0.0 {
            summary.tried_this_session as f64 / mins
        } else {
            0.0
        }
    );
    if t.tried > 0 && summary.tasks == 0 {
        println!("no mutant made a valid task: see the dropped counts above");
    }
    Ok(0)
}
