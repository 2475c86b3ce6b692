//! `dojo tasks check` (dojo-task): load a task file the strict way and say what is wrong with
//! it, per row, and what it lacks for grading. `dojo tasks export --format verl`: the checked
//! tasks as the RL rows verl reads (written by dojo-curate, which owns the trainer exports).
//! `dojo tasks fetch NAME` and `dojo repos sync`: the public datasets and their repositories
//! (`dojo_task::fetch`).
//! `dojo tasks analyze`: the per-task initial analysis of SWE-World's world models, generated
//! once per task and model at temperature 0 and cached (`dojo_world::analysis`), where
//! `dojo rollout` (`[world] analysis_model`) and `dojo curate --world-analysis-model` read it.

use crate::exit::Exit;
use std::path::{Path, PathBuf};

use dojo_task::EnvRegistry;

#[derive(clap::Subcommand)]
pub enum TasksCmd {
    /// Summarise and check a task file (counts per repo, missing fields, duplicates).
    Check {
        file: PathBuf,
        /// Extra environment specs (`*.toml`), overriding the embedded `envs/`.
        #[arg(long)]
        envs: Option<PathBuf>,
    },
    /// Write a task file in another trainer's layout (checked first, like `check`).
    Export {
        /// Task file (SWE-bench JSON/JSONL/Parquet).
        #[arg(long)]
        tasks: PathBuf,
        /// `verl`: the Parquet rows verl's RL trainer reads (task in `extra_info`).
        #[arg(long, value_enum)]
        format: ExportFormat,
        /// Output file (`.parquet`).
        #[arg(long)]
        out: PathBuf,
        /// `data_source` column (verl groups its validation metrics by it).
        #[arg(long, default_value = "swe-dojo")]
        data_source: String,
        /// `agent_name` column: the agent loop registered on the verl side.
        #[arg(long, default_value = "dojo_swe")]
        agent_name: String,
    },
    /// Get a public task dataset by name (swe-bench-verified, swe-bench-lite, swe-bench,
    /// swe-gym, swe-rebench, swe-smith, or a Hugging Face id) as dojo's task JSONL: from the
    /// hub (`HF_ENDPOINT`), or from local files with `--from` (no network needed).
    Fetch {
        name: String,
        /// Output task file (`.jsonl`).
        #[arg(long)]
        out: PathBuf,
        /// Local Parquet / JSONL / JSON files of the dataset (repeatable) instead of the hub.
        #[arg(long = "from")]
        from: Vec<PathBuf>,
        /// Split (default: the dataset's usual one: `test`, `train` for SWE-Gym / SWE-smith).
        #[arg(long)]
        split: Option<String>,
    },
    /// Write each task's initial analysis (5-10 bullets: bug, symptoms, responsible code, the
    /// fix, what the tests check) with a model at temperature 0, cached per task and model;
    /// cached ones are not asked again.
    Analyze(AnalyzeArgs),
}

// The flags of `dojo tasks analyze` (its help is the variant's doc comment above).
#[derive(clap::Args)]
pub struct AnalyzeArgs {
    /// Task file (SWE-bench JSON/JSONL/Parquet); every task needs a gold patch.
    #[arg(long)]
    pub tasks: PathBuf,
    /// The model: `openai:MODEL` (OPENAI_BASE_URL), `embedded[:MODEL]` or a policy file.
    #[arg(long)]
    pub model: String,
    /// Only these instance ids.
    #[arg(long = "instance")]
    pub instances: Vec<String>,
    /// Cache directory (default `$DOJO_HOME/world-analysis`).
    #[arg(long)]
    pub cache: Option<PathBuf>,
    /// Tasks in flight at once.
    #[arg(long, default_value_t = 4, value_parser = crate::args::positive::<usize>())]
    pub concurrency: usize,
    /// Seconds one request may take.
    #[arg(long, default_value_t = 600, value_parser = crate::args::positive::<u64>())]
    pub timeout_s: u64,
}

#[derive(clap::Subcommand)]
pub enum ReposCmd {
    /// Make or update a bare git mirror (`DIR/owner__name`) of every repository of a task
    /// file, then check it holds each task's base and environment-setup commits; `DIR` is what
    /// `--repos` takes.
    Sync {
        #[arg(long)]
        tasks: PathBuf,
        #[arg(long)]
        mirror: PathBuf,
        /// Where to clone from: a directory of clones/mirrors (`owner__name` or `name`), or a
        /// URL base (`{base}/{owner}/{name}.git`). Default: https://github.com, where django,
        /// matplotlib and scikit-learn come from SWE-bench's smaller mirrors
        /// (`swe-bench/{owner}__{name}`, every SWE-bench commit in a fraction of the size).
        #[arg(long = "from")]
        from: Option<String>,
    },
}

pub fn run_repos(cmd: ReposCmd) -> anyhow::Result<Exit> {
    let ReposCmd::Sync {
        tasks,
        mirror,
        from,
    } = cmd;
    let loaded = dojo_task::load_tasks(&tasks)?;
    let src = dojo_task::fetch::RepoSource::parse(from.as_deref());
    let results = dojo_task::fetch::sync_repos(&loaded, &mirror, &src);
    for r in &results {
        println!("{r}");
    }
    println!("{}", dojo_task::fetch::sync_summary(&results, &mirror));
    Ok(Exit::failure_if(!results.iter().all(|r| r.ready())))
}

fn fetch(name: &str, out: &Path, from: &[PathBuf], split: Option<String>) -> anyhow::Result<Exit> {
    let (hf_id, split, rep) = dojo_task::fetch::fetch_dataset(name, out, from, split)?;
    println!("{}", rep.summary(out, &hf_id, &split));
    Ok(Exit::failure_if(rep.written == 0))
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum ExportFormat {
    Verl,
}

pub fn run_tasks(cmd: TasksCmd) -> anyhow::Result<Exit> {
    match cmd {
        TasksCmd::Check { file, envs } => check(&file, envs.as_deref()),
        TasksCmd::Fetch {
            name,
            out,
            from,
            split,
        } => fetch(&name, &out, &from, split),
        TasksCmd::Export {
            tasks,
            format: ExportFormat::Verl,
            out,
            data_source,
            agent_name,
        } => {
            // Every row must load: a trainer that meets a broken row hours into a run loses more.
            let loaded = dojo_task::load_tasks(&tasks)?;
            let rows: Vec<_> = loaded.iter().map(|t| &t.raw).collect();
            let opts = dojo_curate::export::VerlRlOptions {
                data_source,
                agent_name,
            };
            dojo_curate::export::write_verl_rl_rows(&out, &rows, &opts)?;
            println!("{}: {} verl RL rows", out.display(), rows.len());
            Ok(Exit::Success)
        }
        TasksCmd::Analyze(a) => analyze(a),
    }
}

fn analyze(a: AnalyzeArgs) -> anyhow::Result<Exit> {
    use anyhow::Context;

    let loaded = dojo_task::load_selected(&a.tasks, &a.instances)?;
    // A task without a gold patch is bad input: said before any request is made.
    let inputs = dojo_rollout::world_sim::analysis_inputs(&loaded)
        .with_context(|| a.tasks.display().to_string())?;
    let policy = dojo_rollout::policy::PolicyConfig::parse(&a.model)
        .with_context(|| format!("--model {}", a.model))?;
    let timeout = std::time::Duration::from_secs(a.timeout_s);
    let run =
        dojo_rollout::embedded::analyze_tasks(&policy, &inputs, a.cache, timeout, a.concurrency);
    let run = crate::cmd::runtime()?.block_on(run)?;
    for f in run.failures() {
        eprintln!("{f}");
    }
    println!("{}", run.summary());
    Ok(Exit::failure_if(!run.failures().is_empty()))
}

fn check(file: &Path, envs: Option<&Path>) -> anyhow::Result<Exit> {
    let load = dojo_task::read_tasks(file)?;
    let registry = EnvRegistry::with_dir(envs)?;
    let c = dojo_grade::task_check::TaskFileCheck::of(&file.display().to_string(), load, &registry);
    println!("{c}");
    Ok(Exit::failure_if(c.problems() > 0))
}
