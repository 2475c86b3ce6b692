//! # dojo-task: what a task is
//!
//! Pipeline position: **task** → sandbox → agent ⇄ policy → trajectory → grade → curate → train.
//! The SWE-bench instance schema (and SWE-Gym / SWE-smith / SWE-rebench variants), strict loaders
//! for JSON, JSONL and Parquet, and the per-repository environment specs (TOML).
//!
//! - [`Task`]: one instance; `FAIL_TO_PASS` / `PASS_TO_PASS` decoded from JSON strings or arrays;
//!   the `source` extension for tasks built from sdists ([`SdistSource`]).
//! - [`load_tasks`] (strict) and [`read_tasks`] (collects every bad row, for `dojo tasks check`):
//!   every error names the file, the line/item/row, the instance_id and the field.
//! - [`EnvRegistry`]: the `envs/**/*.toml` specs embedded at build time, overridable by a
//!   directory and per task; [`EnvRegistry::resolve`] gives a task's [`RepoEnv`] (sandbox
//!   [`dojo_sandbox::PythonEnvSpec`], test command, log parser, timeout). Schema: `envs/README.md`.
//! - [`LogParser`] and [`EvalType`]: how a task's test log is read and judged, typed where
//!   task files and specs are loaded so that a misspelt name fails `dojo tasks check`.
//! - [`Preparer`]: a task → its [`dojo_sandbox::Pristine`] tree and [`dojo_sandbox::PythonEnv`],
//!   once per task and environment, shared by concurrent callers ([`prepare`] is its blocking
//!   form); [`task_source`] gives the tree's [`dojo_sandbox::Source`] (sdists are downloaded
//!   through `dojo_cache` and get their bug patch applied before the one commit).
//! - [`requirements`]: a spec's `requirements_file`, read from the repository at the task's
//!   `environment_setup_commit` as the harness reads it, pinned requirements overriding it.
//! - [`pre_test_commands`]: what a SWE-bench `eval_script` runs before its test command
//!   (exports, test-file checkouts), as grading runs it after the model patch.
//! - [`fetch`]: the public datasets by name (hub or a local file) normalised to task JSONL,
//!   and a bare git mirror per repository a task file needs (`dojo repos sync`).
//! - [`splice_lists`]: set FAIL_TO_PASS / PASS_TO_PASS in one JSONL line, every other byte
//!   kept (`dojo validate --write`).

mod env;
mod eval_script;
pub mod fetch;
mod harness;
mod load;
mod model;
mod parquet;
mod prepare;
pub mod requirements;
mod splice;

pub use env::{
    Directives, ENV_SCHEMA_VERSION, EnvRegistry, NON_TEST_EXTS, RepoEnv, eval_script_test_cmd,
    test_directives,
};
pub use eval_script::{REINSTALL_FAILED, pre_test_commands};
pub use harness::{EvalType, LogParser};
pub use load::{
    LoadReport, check_repos, load_selected, load_tasks, read_rows, read_tasks, select_instances,
};
pub use model::{
    EnvOverride, GRADING_FIELDS, Location, REQUIRED_FIELDS, SdistSource, Task, TaskSource,
    instance_id_problem,
};
pub use prepare::{
    PrepareOptions, PreparedTask, Preparer, apply_in_dir, find_repo, prepare, resolved_spec,
    sdist_tree, task_source,
};
pub use splice::{NewLists, fill_lists, splice_lists};

/// Errors of task loading and environment resolution. Each names where the problem is.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: no tasks (the file holds no instance)")]
    Empty { path: String },
    #[error("--instance {instance_id}: no such instance in {path}")]
    NoInstance { path: String, instance_id: String },
    /// The repositories of git-based tasks are not where `--repos` says.
    #[error("{0}")]
    Repos(String),
    /// Each repository not found under `--repos`, one per line.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    MissingRepos(Vec<TaskError>),
    #[error("{location}: {reason}")]
    Parse { location: String, reason: String },
    /// A row or file that is not valid JSON.
    #[error("{location}: {source}")]
    Json {
        location: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{location}: parquet: {source}")]
    Parquet {
        location: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{location}: instance {instance_id}: field {field}: {reason}")]
    Invalid {
        location: String,
        instance_id: String,
        field: String,
        reason: String,
    },
    /// The same, for a field whose value another parser refused.
    #[error("{location}: instance {instance_id}: field {field}: {source}")]
    InvalidField {
        location: String,
        instance_id: String,
        field: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The same, saying what the value should have been (`what`).
    #[error("{location}: instance {instance_id}: field {field}: {what}: {source}")]
    InvalidValue {
        location: String,
        instance_id: String,
        field: String,
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("instance {instance_id} appears more than once ({locations})")]
    Duplicate {
        instance_id: String,
        locations: String,
    },
    #[error("environment spec {origin}: {reason}")]
    Env { origin: String, reason: String },
    /// A table of an environment spec (`table`: which) holds a value that is not allowed.
    #[error("environment spec {origin}: {table}: {source}")]
    EnvTable {
        origin: String,
        table: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("environment spec {origin}: {source}")]
    EnvToml {
        origin: String,
        #[source]
        source: toml::de::Error,
    },
    #[error(
        "instance {instance_id}: no environment spec for repo {repo} (embedded envs/ or --envs DIR), and the task has no `env`"
    )]
    NoEnv { instance_id: String, repo: String },
    /// The cause is shared (`Arc`): a [`Preparer`] hands one failure to every caller waiting
    /// on the same task.
    #[error("instance {instance_id}: preparing ({step}) failed: {source}")]
    Prepare {
        instance_id: String,
        step: String,
        #[source]
        source: std::sync::Arc<dyn std::error::Error + Send + Sync>,
    },
    /// No clone of `repo` under a repositories directory; `via` names the option when it is
    /// not `--repos` (e.g. " (--from)").
    #[error(
        "no repository for {repo} at {} or {} (--repos DIR must hold a clone or mirror of each repository){via}",
        .at.display(), .or.display()
    )]
    NoRepo {
        repo: String,
        at: std::path::PathBuf,
        or: std::path::PathBuf,
        via: &'static str,
    },
    /// A command (git, tar) that could not be started; `what` names it and where it ran.
    #[error("{what}: cannot start: {source}")]
    Spawn {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A command that ran and failed, with its output.
    #[error("{what} failed ({status}): {stdout}{stderr}")]
    Command {
        what: String,
        status: std::process::ExitStatus,
        stdout: String,
        stderr: String,
    },
    #[error("commit {commit} is not in {}", .repo.display())]
    NoCommit {
        commit: String,
        repo: std::path::PathBuf,
    },
    #[error(transparent)]
    Archive(#[from] dojo_cache::archive::ArchiveError),
    #[error("bug_patch does not apply to the sdist: {0}")]
    BugPatch(#[source] Box<TaskError>),
    #[error("unknown log parser {name:?} (known: {known}, with or without the parse_log_ prefix)")]
    UnknownLogParser { name: String, known: String },
    #[error("{0:?} is not pass_and_fail or fail_only")]
    UnknownEvalType(String),
    #[error("unknown dataset {name:?}: use one of {known} or a Hugging Face id (owner/name)")]
    UnknownDataset { name: String, known: String },
    /// The Hugging Face hub did not give the dataset's Parquet files.
    #[error(
        "cannot fetch {hf_id} ({split}) from the Hugging Face hub at {endpoint}: {source}; without the hub, download the dataset's Parquet or JSONL elsewhere and pass it with --from FILE (HF_ENDPOINT names a mirror)"
    )]
    Hub {
        hf_id: String,
        split: String,
        endpoint: String,
        /// What the hub said or did, or the message where nothing failed under it.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}
