//! # dojo-synth: validated SWE tasks from any Python project with tests
//!
//! Pipeline position: **task** (synthesized) → sandbox → agent ⇄ policy → trajectory → grade →
//! curate → train. `dojo synth` turns a project (a PyPI sdist `name==version` or a directory)
//! into tasks in dojo's own format, the same shape as the bundled benchmark's: the sdist plus a
//! `bug_patch` as the pristine tree, the reverse as the gold `patch`, an empty `test_patch` (the
//! project's own tests catch the bug, as in SWE-smith), FAIL_TO_PASS / PASS_TO_PASS, and a
//! problem statement written from the symptom. The output feeds `dojo validate`,
//! `dojo rollout` and `dojo curate` unchanged.
//!
//! Stages, and the crate that owns each concept (nothing here re-implements them):
//! - [`project`]: the sdist (PyPI's index → `dojo_cache` download, or a directory packed into a
//!   reproducible tarball); preparation of trees and venvs is `dojo_task::Preparer`.
//! - [`operators`] (+ [`python`], tree-sitter): the mutations, byte spans with the formatting
//!   kept, every mutant re-parsed; [`diff`]: the one-hunk bug and gold patches.
//! - [`llm`] (optional): a model rewrites a function with a subtle bug, through any
//!   `dojo_llm::ChatBackend`; the mutant is validated like the procedural ones.
//! - [`sample`]: the seeded, balanced try order.
//! - [`run`]: baseline (whole suite twice in sandboxes, failing/flaky tests excluded), then per
//!   mutant the module's tests, the whole suite, a rerun of FAIL_TO_PASS, the drop rules, and a
//!   final `dojo validate` of the finished task. Tests run through
//!   `dojo_grade::grade_in_sandbox` (patch application, log parsing) and lists come from
//!   `dojo_grade::derive_lists`.
//! - [`statement`]: the problem statement from the failing behaviour.
//! - [`state`]: the append-only progress record that makes a run resumable.
//! - [`summary`]: counts per operator and the table printed at the end.

mod clean;
pub mod diff;
pub mod llm;
pub mod operators;
mod options;
pub mod project;
pub mod python;
pub mod run;
mod runner;
pub mod sample;
pub mod state;
pub mod statement;
pub mod summary;

pub use operators::{Mutation, Operator, mutations_in, mutations_seeded};
pub use options::{LlmSource, SynthOptions};
pub use project::{Input, Project};
pub use run::synthesize;
pub use summary::Summary;

/// What [`SynthError::InputFrom`] says about `what` when `source` failed.
pub(crate) fn input_from(
    what: impl Into<String>,
    source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> SynthError {
    SynthError::InputFrom {
        what: what.into(),
        source: source.into(),
    }
}

/// Errors that stop a run. Per-mutant problems never do: they are counted and the run goes on.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("{0}")]
    Input(String),
    /// The input could not be read or fetched: `what` names it (the project, `--source DIR`, a
    /// line of the progress file).
    #[error("{what}: {source}")]
    InputFrom {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("environment of {project}: {source}")]
    Environment {
        project: String,
        // Boxed: a `TaskError` beside the name would make every `Result` of this crate large.
        #[source]
        source: Box<dojo_task::TaskError>,
    },
    #[error("baseline of {project}: {reason}\n--- last lines of the test log ---\n{log_tail}")]
    Baseline {
        project: String,
        reason: String,
        log_tail: String,
    },
    /// The baseline's sandbox could not be created.
    #[error("baseline of {project}: creating a sandbox: {source}")]
    BaselineSandbox {
        project: String,
        #[source]
        source: dojo_sandbox::SandboxError,
    },
    #[error(transparent)]
    Task(#[from] dojo_task::TaskError),
    #[error(transparent)]
    RunDir(#[from] dojo_rundir::RunDirError),
    #[error("creating a sandbox: {0}")]
    Sandbox(#[source] dojo_sandbox::SandboxError),
    /// The finished task failed `dojo validate`: its problems.
    #[error("{}", .0.join("; "))]
    Invalid(Vec<String>),
}
