//! Base vs trained on held-out tasks: `dojo train sft --eval-tasks`. Both models are rolled
//! out greedily through `dojo rollout`'s own path (the embedded engine, the agent, sandboxes,
//! grading: [`dojo_rollout::embedded::run_policy`]) into `OUT/eval/base` and `OUT/eval/trained`
//! (resumable rollout directories), and the figures go to `OUT/eval.json`, which the run's
//! report shows.
//!
//! What the figures can show: the resolve rate is the skill the benchmark measures, with its
//! 95% Wilson interval over the graded rollouts; the share of valid tool calls says whether
//! the model speaks the agent's format, not whether it solves anything. Rollouts that failed
//! for infrastructure reasons are counted apart and left out of the rate.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dojo_rollout::policy::PolicyConfig;
use dojo_rollout::run_dir::{RolloutOptions, RolloutOutput, load_tasks};
use dojo_trajectory::Trajectory;
use serde::{Deserialize, Serialize};

use crate::TrainError;

/// Version of `eval.json`.
pub const EVAL_SCHEMA_VERSION: u32 = 1;

/// What `--eval-*` asked for.
#[derive(Debug, Clone)]
pub struct EvalSettings {
    /// The held-out task file (any file `dojo rollout` takes).
    pub tasks: PathBuf,
    /// Only these instance ids of it (all when empty).
    pub instances: Vec<String>,
    /// Agent turns per rollout.
    pub max_steps: u32,
    /// Tokens per model turn.
    pub max_tokens: u32,
    /// Concurrent rollouts (sandboxes).
    pub workers: usize,
    /// Environment specs overriding the embedded `envs/`.
    pub envs: Option<PathBuf>,
    /// Where the evaluation rollouts' progress goes.
    pub progress: dojo_progress::Progress,
}

/// One model's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelEval {
    /// `base` or `trained`.
    pub label: String,
    /// What the embedded engine loaded (`default`, a directory).
    pub model: String,
    pub run_dir: PathBuf,
    pub resolved: usize,
    /// Graded rollouts (infrastructure failures left out): the rate's denominator.
    pub n: usize,
    pub trajectories: usize,
    pub infra_errors: usize,
    pub resolve_rate: f64,
    pub ci95_low: f64,
    pub ci95_high: f64,
    /// Agent turns, and those whose action parsed into a tool call.
    pub turns: usize,
    pub valid_tool_calls: usize,
    pub valid_tool_call_share: f64,
    pub mean_steps: f64,
    pub stop_reasons: BTreeMap<String, usize>,
}

/// What [`evaluate`] is doing, for a progress line.
pub enum EvalProgress<'a> {
    /// A model's rollouts start.
    Start {
        label: &'a str,
        model: &'a str,
        tasks: usize,
    },
    /// A model's rollouts are done (or were all in its store already).
    Done(&'a RolloutOutput),
}

/// `eval.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SftEval {
    pub schema_version: u32,
    pub tasks: PathBuf,
    pub instances: Vec<String>,
    pub n_tasks: usize,
    pub max_steps: u32,
    pub max_tokens: u32,
    pub models: Vec<ModelEval>,
}

impl SftEval {
    /// Whether a rollout failed for infrastructure reasons: the evaluation is incomplete.
    pub fn incomplete(&self) -> bool {
        self.models.iter().any(|m| m.infra_errors > 0)
    }
}

/// Roll out `base` and `trained` (what the embedded engine loads: `default`, a model
/// directory) on the held-out tasks and write `OUT/eval.json`. `retrained`: weights trained in
/// this invocation make an earlier rollout of the trained model stale, so it is removed first.
/// `progress` hears when each model starts and where its rollouts went. Runs on the caller's
/// runtime.
pub async fn evaluate(
    out: &Path,
    base: &str,
    trained: &Path,
    retrained: bool,
    e: &EvalSettings,
    mut progress: impl FnMut(EvalProgress<'_>),
) -> Result<SftEval, TrainError> {
    let rollout = |what: &str, err: String| TrainError::Config(format!("{what}: {err}"));
    let tasks = load_tasks(&e.tasks, &e.instances).map_err(|err| {
        rollout(
            &format!("--eval-tasks {}", e.tasks.display()),
            err.to_string(),
        )
    })?;
    let n_tasks = tasks.len();
    let mut models = Vec::new();
    for (label, model) in [
        ("base", base.to_string()),
        ("trained", trained.display().to_string()),
    ] {
        let dir = out.join("eval").join(label);
        if label == "trained" && retrained && dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|err| TrainError::file(&dir, err))?;
        }
        let policy = PolicyConfig::embedded_agent(&model, label, e.max_steps, e.max_tokens);
        let opts = RolloutOptions {
            shard: None,
            tasks_file: e.tasks.clone(),
            instances: e.instances.clone(),
            label: policy.label(),
            policy,
            samples: 1,
            out: dir.clone(),
            workers: e.workers,
            export_predictions: false,
            envs_dir: e.envs.clone(),
            prepare: dojo_task::PrepareOptions::default(),
            progress: e.progress.clone(),
        };
        progress(EvalProgress::Start {
            label,
            model: &model,
            tasks: n_tasks,
        });
        let o = dojo_rollout::embedded::run_policy(&opts)
            .await
            .map_err(|err| rollout(&format!("evaluating the {label} model"), err.to_string()))?;
        progress(EvalProgress::Done(&o));
        let store = dojo_rollout::Store::<Trajectory>::open(&o.store_path)
            .map_err(|err| TrainError::file(&o.store_path, err))?;
        models.push(model_eval(label, &model, &dir, &o, &store.records()));
    }
    let eval = SftEval {
        schema_version: EVAL_SCHEMA_VERSION,
        tasks: e.tasks.clone(),
        instances: e.instances.clone(),
        n_tasks,
        max_steps: e.max_steps,
        max_tokens: e.max_tokens,
        models,
    };
    let p = out.join(crate::report::EVAL_FILE);
    let text = serde_json::to_string_pretty(&eval).map_err(|err| TrainError::file(&p, err))?;
    dojo_rundir::write_atomic(&p, text.as_bytes()).map_err(|err| TrainError::file(&p, err))?;
    Ok(eval)
}

/// One model's figures from its run's summary and its first samples of this run's tasks.
fn model_eval(
    label: &str,
    model: &str,
    dir: &Path,
    o: &RolloutOutput,
    records: &[Trajectory],
) -> ModelEval {
    let ids: Vec<&str> = o.outcomes.iter().map(|x| x.task_id.as_str()).collect();
    let (mut turns, mut valid) = (0usize, 0usize);
    for t in records
        .iter()
        .filter(|t| t.sample_index == 0 && ids.contains(&t.task_id.as_str()))
    {
        turns += t.steps.len();
        valid += t
            .steps
            .iter()
            .filter(|s| s.action.is_some() && s.format_error.is_none())
            .count();
    }
    let sm = &o.summary;
    let graded = sm.trajectories - sm.infra_errors;
    let rate = dojo_report::stats::wilson(sm.resolved as u64, graded as u64);
    ModelEval {
        label: label.to_string(),
        model: model.to_string(),
        run_dir: dir.to_path_buf(),
        resolved: sm.resolved,
        n: graded,
        trajectories: sm.trajectories,
        infra_errors: sm.infra_errors,
        resolve_rate: sm.resolve_rate,
        ci95_low: rate.low,
        ci95_high: rate.high,
        turns,
        valid_tool_calls: valid,
        valid_tool_call_share: if turns == 0 {
            0.0
        } else {
            valid as f64 / turns as f64
        },
        mean_steps: sm.mean_steps,
        stop_reasons: sm.stop_reasons.clone(),
    }
}
