//! The run directory's files and what they hold: `rl_run.json` ([`RlRunManifest`]), one
//! `metrics.jsonl` line per step ([`StepMetrics`]), a checkpoint's `rl_state.json`
//! ([`RunState`]). The loop ([`crate::run`]) writes them, the report ([`crate::report`]) reads
//! them.

use dojo_reward::group::BatchStats;
use dojo_trajectory::Trajectory;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use crate::config::RlConfig;
use crate::update::UpdateReport;

pub const RUN_FILE: &str = "rl_run.json";
pub const METRICS_FILE: &str = "metrics.jsonl";
pub const EVAL_FILE: &str = "eval.jsonl";
pub const STATE_FILE: &str = "rl_state.json";

/// `rl_run.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RlRunManifest {
    pub schema_version: u32,
    pub config_hash: String,
    pub config: RlConfig,
    /// Where the base model came from (`default`, a directory).
    pub model: String,
    pub model_fingerprint: Json,
    pub tasks: Vec<String>,
    /// [`crate::run::EpisodeSource::settings`]; absent (null) in run directories written before it
    /// existed.
    #[serde(default, skip_serializing_if = "Json::is_null")]
    pub environment: Json,
}

/// `rl_state.json` of a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    pub schema_version: u32,
    /// Steps done.
    pub step: u64,
    pub optimizer_steps: u64,
}

/// One line of `metrics.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepMetrics {
    pub schema_version: u32,
    pub step: u64,
    pub tasks: Vec<String>,
    #[serde(flatten)]
    pub batch: BatchStats,
    /// One report per mini-batch update (empty when nothing was trainable).
    pub updates: Vec<UpdateReport>,
    pub generation_s: f64,
    pub shaping_s: f64,
    pub training_s: f64,
    /// Where the episodes' time went, summed over episodes (they run concurrently, so the
    /// sums can exceed `generation_s`); absent in lines written before it existed.
    #[serde(default)]
    pub rollout_time: RolloutTime,
    /// [`crate::run::EpisodeSource::rollout_report`] for this step.
    #[serde(default, skip_serializing_if = "Json::is_null")]
    pub rollout_report: Json,
}

/// Episode time of one step, split by what the episode was waiting on, in seconds summed over
/// the step's episodes. `grading_tests_s` is the test command of the graders only; sandbox
/// setup, patch extraction and the rest of grading are the remainder of `episodes_s`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RolloutTime {
    pub episodes_s: f64,
    pub llm_s: f64,
    pub tools_s: f64,
    pub grading_tests_s: f64,
}

impl RolloutTime {
    pub fn of<'a>(trajectories: impl IntoIterator<Item = &'a Trajectory>) -> RolloutTime {
        let mut t = RolloutTime::default();
        for x in trajectories {
            t.episodes_s += x.wall_ms as f64 / 1e3;
            for s in &x.steps {
                t.llm_s += s.llm_ms as f64 / 1e3;
                t.tools_s += s.tool_ms as f64 / 1e3;
            }
            // The grading report is keyed by instance id (the harness's shape).
            let tests = x
                .grading
                .as_ref()
                .and_then(|g| g.get(&x.task_id).unwrap_or(g).get("test_duration_s"))
                .and_then(Json::as_f64);
            t.grading_tests_s += tests.unwrap_or(0.0);
        }
        t
    }
}
