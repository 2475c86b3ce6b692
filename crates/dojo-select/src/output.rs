//! What a selection produces: per selector its choice for every task with the scores behind it
//! and its best@k curve, the pass@k curve, and the run's bookkeeping ([`SelectOutput`], written
//! as `selection.json` and rendered by [`crate::report`]).

use std::path::PathBuf;

use serde::Serialize;

use crate::passk::Estimate;
use crate::sequential::SequentialCurve;

#[derive(Debug, Clone, Serialize)]
pub struct CurvePoint {
    pub k: usize,
    #[serde(flatten)]
    pub estimate: Estimate,
}

#[derive(Debug, Clone, Serialize)]
pub struct CandidateScore {
    pub label: String,
    /// Its page (conversation, diff, grading), relative to the output directory.
    pub page: String,
    pub score: f64,
    pub resolved: bool,
    pub empty: bool,
    pub patch_key: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct TaskChoice {
    pub task_id: String,
    /// Candidates the choice was among.
    pub k: usize,
    pub chosen: String,
    pub resolved: bool,
    /// Candidates tied at the best score (the seeded tie-break chose among them).
    pub ties: usize,
    pub candidates: Vec<CandidateScore>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SelectorResult {
    pub name: String,
    /// Reads the grades (oracle): a reference, not a real selector.
    pub reference: bool,
    /// Resolved share of the choices written to the predictions.
    pub resolved: usize,
    pub best_at_k: Vec<CurvePoint>,
    /// (best@K − pass@1) / (pass@K − pass@1): the share of the sampling gap this selector
    /// closes; `None` when pass@K = pass@1.
    pub gap_closed: Option<f64>,
    /// Wall time of the whole evaluation of this selector (choices and every best@k point), per
    /// task.
    pub seconds_per_task: f64,
    /// Wall time of computing its scores beforehand (model calls, sandboxed test runs), per
    /// task; 0 for selectors that need none.
    pub precompute_seconds_per_task: f64,
    pub choices: Vec<TaskChoice>,
}

/// `selection.json`.
#[derive(Debug, Clone, Serialize)]
pub struct SelectOutput {
    pub schema_version: u32,
    pub sources: Vec<PathBuf>,
    /// Some run was still being written or interrupted: a partial view.
    pub partial: bool,
    pub infra_left_out: usize,
    pub ungraded: usize,
    pub problems: Vec<String>,
    pub seed: u64,
    pub k: usize,
    pub tasks: usize,
    /// Tasks with fewer than `k` candidates, and how many they have.
    pub tasks_short: Vec<(String, usize)>,
    pub pass_at_k: Vec<CurvePoint>,
    pub selectors: Vec<SelectorResult>,
    /// Resolved rate by turn budget ([`crate::sequential`]).
    pub sequential: SequentialCurve,
    pub notes: Vec<String>,
    /// Files written, relative to the output directory.
    pub files: Vec<String>,
}
