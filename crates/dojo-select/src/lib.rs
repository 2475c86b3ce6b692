//! # dojo-select: test-time selection, one patch per task from k candidates
//!
//! Pipeline position: **select**, the last stage
//! (task → sandbox → agent ⇄ policy → trajectory → grade → curate → train → **select**).
//! A user with k graded rollouts per task wants one prediction per task, and the curves that
//! show what more samples buy: SWE-Gym reranks k rollouts with a verifier, SWE-Master and
//! SWE-World with a reward model's score. This crate owns that step:
//!
//! - [`candidates`]: the k candidates of each task, read from `dojo rollout` run directories or
//!   graded SWE-bench predictions files (infrastructure failures left out and counted, empty
//!   patches kept: they lose).
//! - [`patch`]: normalized patch equivalence (whitespace, comments, hunk and file order), the
//!   key majority voting clusters by.
//! - [`passk`]: the unbiased pass@k estimator (Chen et al. 2021) and bootstrap intervals.
//! - [`selector`]: the [`Selector`] trait and the selectors that need no model: `oracle`
//!   (pass@k, for reference), `random` and `majority`.
//! - [`verifier`]: SWE-Gym's verifier: a judge model's p(YES) over the interaction log, from
//!   any OpenAI-compatible endpoint with log-probabilities or the embedded engine.
//! - [`swr`]: SWE-World's reward model's mean reward over n samples (dojo-world's client).
//! - [`agent_tests`]: the tests the agents wrote, run on every candidate in sandboxes.
//! - [`hybrid`]: a logistic combination of the others' scores, fitted on a labelled run.
//! - [`sequential`]: the resolved rate by turn budget.
//! - [`plan`]: what `dojo select` does before selecting: the candidates loaded (or graded) and
//!   the selectors built, model- and sandbox-scored ones computed and timed.
//! - [`run`]: selection over a candidate set: the choice per task with every candidate's score,
//!   best@k for k = 1…K, `predictions.jsonl`, `selection.json` and the HTML report.
//! - [`output`]: what a selection produces ([`SelectOutput`], `selection.json`), which the run
//!   writes and the report renders.
//!
//! Ties are broken by a seeded random choice for the prediction written; the best@k curves use
//! the exact expectation over that choice (the share of resolved candidates among the tied
//! best), so the curves do not depend on the seed.

pub mod agent_tests;
pub mod candidates;
pub mod hybrid;
pub mod output;
pub mod passk;
pub mod patch;
pub mod plan;
pub mod report;
pub mod run;
pub mod selector;
pub mod sequential;
pub mod swr;
pub mod verifier;

pub use candidates::{Candidate, CandidateSet, LoadOptions, TaskCandidates};
pub use output::SelectOutput;
pub use run::{SelectOptions, select};
pub use selector::{Selector, SelectorKind};

/// Schema of `selection.json`.
pub const SELECTION_SCHEMA_VERSION: u32 = 2;

#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{path}: {reason}")]
    Input {
        path: std::path::PathBuf,
        reason: String,
    },
    /// An input file that does not read as what it should be: `what` says what was expected.
    #[error("{path}: {what}: {source}")]
    InputFrom {
        path: std::path::PathBuf,
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A run directory that cannot be read. (Boxed, as in `NotARun`: a rollout error inline
    /// would make every `Result` of this crate large.)
    #[error("{0}")]
    Run(#[source] Box<dojo_rollout::error::RolloutError>),
    #[error("{}: {source}: not a `dojo rollout` run manifest?", .path.display())]
    NotARun {
        path: std::path::PathBuf,
        #[source]
        source: Box<dojo_rollout::error::RolloutError>,
    },
    #[error(
        "unknown selector `{0}` (known: oracle, random, majority, verifier, swr, tests, hybrid, all)"
    )]
    UnknownSelector(String),
    #[error("no candidates: {0}")]
    Empty(String),
    /// A setting the caller gave (a flag of `dojo select`) is missing or does not work.
    #[error("{flag}: {reason}")]
    Settings { flag: String, reason: String },
    /// A flag whose value failed to load (`value`: what it names, when it says more than the
    /// cause does).
    #[error("{flag}: {}{source}", .value.as_ref().map(|v| format!("{v}: ")).unwrap_or_default())]
    SettingsFrom {
        flag: String,
        value: Option<String>,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Saved hybrid weights for other selectors than this run's.
    #[error(
        "the weights are for the selectors [{weights}], but this run has [{selectors}]: select with the same selectors (and --verifier if it was used) or refit"
    )]
    WeightsMismatch { weights: String, selectors: String },
    /// A task the `tests` selector cannot run: it has no real environment.
    #[error("the tests selector needs the task's real environment: {0}")]
    NeedsRealEnv(#[source] dojo_task::TaskError),
    #[error("preparing the task: {0}")]
    Prepare(#[source] dojo_task::TaskError),
    #[error("creating the sandbox: {0}")]
    Sandbox(#[source] dojo_sandbox::SandboxError),
    /// A task whose environment does not resolve (SWR needs its test command).
    #[error("environment: {0}")]
    Environment(#[source] dojo_rollout::world_sim::WorldSimError),
}
