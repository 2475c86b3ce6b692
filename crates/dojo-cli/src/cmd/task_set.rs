//! What `dojo validate` and `dojo eval` share (dojo-task, dojo-grade): the task-set options,
//! loading the selected tasks with their environment specs, and the grading options.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use dojo_grade::batch::BatchOptions;
use dojo_grade::{GradeOptions, Semantics};
use dojo_task::{EnvRegistry, PrepareOptions, Task};

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

/// The selected tasks of a `validate` or `eval` run, with what grading them needs.
pub struct Loaded {
    pub tasks: Vec<Task>,
    /// Every instance id of the task file, selected by `--instance` or not.
    pub all_ids: std::collections::BTreeSet<String>,
    pub registry: EnvRegistry,
    pub opts: BatchOptions,
    pub preparer_opts: PrepareOptions,
}

/// Load the task file (strictly), select `--instance`s, and build the grading options.
pub fn load(common: &CommonArgs) -> anyhow::Result<Loaded> {
    let tasks = dojo_task::load_tasks(&common.tasks)?;
    let all_ids = tasks.iter().map(|t| t.instance_id.clone()).collect();
    let tasks = dojo_task::select_instances(tasks, &common.instances, &common.tasks)?;
    dojo_task::check_repos(&tasks, common.repos.as_deref())?;
    let registry = EnvRegistry::with_dir(common.envs.as_deref())?;
    let semantics = Semantics::by_name(&common.semantics).with_context(|| {
        format!(
            "--semantics {:?}: expected classic or swebench5",
            common.semantics
        )
    })?;
    let grade = GradeOptions {
        semantics,
        timeout: common.timeout.map(Duration::from_secs),
        observer: !common.no_observer,
        ..Default::default()
    };
    let opts = BatchOptions {
        workers: common.workers,
        grade,
        progress: super::progress(common.quiet),
        ..Default::default()
    };
    Ok(Loaded {
        tasks,
        all_ids,
        registry,
        opts,
        preparer_opts: PrepareOptions {
            repos_dir: common.repos.clone(),
        },
    })
}
