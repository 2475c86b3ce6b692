//! What `dojo validate` and `dojo eval` share (dojo-task, dojo-grade): the task-set options,
//! loading the selected tasks with their environment specs, and the grading options.

use std::path::PathBuf;
use std::time::Duration;

use dojo_grade::batch::{BatchOptions, TaskSet};
use dojo_grade::{GradeOptions, Semantics};

/// Options shared by validate and eval.
#[derive(clap::Args, Clone)]
pub struct CommonArgs {
    /// Task file (.jsonl, .json or .parquet).
    #[arg(long)]
    pub tasks: PathBuf,
    /// Only these instances (repeatable).
    #[arg(long = "instance")]
    pub instances: Vec<String>,
    /// Concurrent sandboxes.
    #[arg(long, default_value_t = 1, value_parser = crate::args::positive::<usize>())]
    pub workers: usize,
    /// Extra environment specs (`*.toml`), overriding the embedded `envs/`.
    #[arg(long)]
    pub envs: Option<PathBuf>,
    /// Local repositories of git-based tasks (`owner__name` or `name`).
    #[arg(long)]
    pub repos: Option<PathBuf>,
    /// Grading rules: `classic` (default; SKIPPED counts as neither) or `swebench5`.
    #[arg(long, default_value = "classic")]
    pub semantics: String,
    /// Override every environment's test timeout (seconds).
    #[arg(long, value_parser = crate::args::positive::<u64>())]
    pub timeout: Option<u64>,
    /// Grade from the test log alone, without the test observer (loaded into pytest and
    /// unittest runs, it checks that each test reported passed ran its body and returned; see
    /// README, *Grading*). For comparing with the official harness's view, or a suite the
    /// observer misreads.
    #[arg(long)]
    pub no_observer: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// Load the task file (strictly), select `--instance`s, and build the grading options.
pub fn load(common: &CommonArgs) -> anyhow::Result<TaskSet> {
    let (repos, envs) = (common.repos.as_deref(), common.envs.as_deref());
    let mut set = TaskSet::load(&common.tasks, &common.instances, repos, envs)?;
    let semantics: Semantics = common.semantics.parse()?;
    let grade = GradeOptions {
        semantics,
        timeout: common.timeout.map(Duration::from_secs),
        observer: !common.no_observer,
        ..Default::default()
    };
    set.opts = BatchOptions {
        workers: common.workers,
        grade,
        progress: super::progress(common.quiet),
        ..Default::default()
    };
    Ok(set)
}
