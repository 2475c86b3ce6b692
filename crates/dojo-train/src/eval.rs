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

impl EvalSettings {
    /// Load the held-out tasks once, before training: a typo in the task file should not cost
    /// a training run.
    pub fn check_tasks(&self) -> Result<(), TrainError> {
        load_tasks(&self.tasks, &self.instances).map_err(|source| TrainError::Rollout {
            what: format!("--eval-tasks {}", self.tasks.display()),
            source: Box::new(source),
        })?;
        Ok(())
    }
}

impl std::fmt::Display for ModelEval {
    /// The `eval LABEL:` line of `dojo train sft --eval-tasks`: resolve rate with its 95%
    /// interval, valid tool calls, infrastructure errors.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "eval {}: resolved {}/{} ({:.1}%, 95% CI {:.1}–{:.1}%), valid tool calls {}/{} turns, {} infrastructure errors",
            self.label,
            self.resolved,
            self.n,
            100.0 * self.resolve_rate,
            100.0 * self.ci95_low,
            100.0 * self.ci95_high,
            self.valid_tool_calls,
            self.turns,
            self.infra_errors,
        )
    }
}

/// The evaluation after a `dojo train sft` run `s` of the model `spec` (read from `src`) into
/// `out`, when it finished: the base model against the trained one (the merged weights with
/// LoRA), then `OUT/report.html` with the table. `None` when the run did not finish.
pub async fn evaluate_run(
    out: &Path,
    spec: &str,
    src: &crate::ModelSource,
    s: &crate::SftSummary,
    e: &EvalSettings,
) -> Result<Option<SftEval>, TrainError> {
    let Some(final_dir) = &s.final_dir else {
        return Ok(None);
    };
    let trained = s.merged_dir.as_ref().unwrap_or(final_dir);
    // Weights trained in this invocation make an earlier evaluation of OUT/final stale.
    let retrained = s.steps > s.resumed_from.unwrap_or(0);
    let eval = evaluate(out, &base_model(spec, src), trained, retrained, e).await?;
    crate::report::write(out)?;
    Ok(Some(eval))
}

impl SftEval {
    /// What `dojo train sft --eval-tasks` prints after the evaluation into `out`: one line per
    /// model, then the report.
    pub fn report_lines(&self, out: &Path) -> String {
        let mut lines: Vec<String> = self.models.iter().map(ModelEval::to_string).collect();
        lines.push(format!(
            "report: {}",
            out.join(crate::report::REPORT_FILE).display()
        ));
        lines.join("\n")
    }
}

/// What the embedded engine loads as the base model of an evaluation: `default` when the
/// `--model` spec is the bundled default (so both runs share its cache), else `src`'s path.
pub fn base_model(spec: &str, src: &crate::ModelSource) -> String {
    if dojo_tokenizer::ModelSpec::resolve(spec).is_ok_and(|s| s.is_default()) {
        dojo_tokenizer::model_spec::DEFAULT.to_string()
    } else {
        src.path().display().to_string()
    }
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

impl std::fmt::Display for EvalProgress<'_> {
    /// The progress line `dojo train sft --eval-tasks` prints on stderr.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EvalProgress::Start {
                label,
                model,
                tasks,
            } => write!(f, "evaluating the {label} model ({model}) on {tasks} tasks"),
            EvalProgress::Done(o) => f.write_str(&o.progress_line()),
        }
    }
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
/// The settings' progress display gets a line when each model starts and where its rollouts
/// went ([`EvalProgress`]). Runs on the caller's runtime.
pub async fn evaluate(
    out: &Path,
    base: &str,
    trained: &Path,
    retrained: bool,
    e: &EvalSettings,
) -> Result<SftEval, TrainError> {
    let rollout = |what: String, source| TrainError::Rollout {
        what,
        source: Box::new(source),
    };
    let tasks = load_tasks(&e.tasks, &e.instances)
        .map_err(|err| rollout(format!("--eval-tasks {}", e.tasks.display()), err))?;
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
        // Through the run's progress display, so `--quiet` silences these lines too.
        let start = EvalProgress::Start {
            label,
            model: &model,
            tasks: n_tasks,
        };
        e.progress.line(&start.to_string());
        let o = dojo_rollout::embedded::run_policy(&opts)
            .await
            .map_err(|err| rollout(format!("evaluating the {label} model"), err))?;
        e.progress.line(&EvalProgress::Done(&o).to_string());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_line() {
        let p = EvalProgress::Start {
            label: "base",
            model: "default",
            tasks: 3,
        };
        assert_eq!(
            p.to_string(),
            "evaluating the base model (default) on 3 tasks"
        );
    }

    #[test]
    fn missing_eval_tasks_are_named() {
        let e = EvalSettings {
            tasks: PathBuf::from("/nonexistent/tasks.jsonl"),
            instances: vec![],
            max_steps: 1,
            max_tokens: 1,
            workers: 1,
            envs: None,
            progress: dojo_progress::Progress::quiet(),
        };
        let err = e.check_tasks().unwrap_err().to_string();
        assert!(
            err.starts_with("--eval-tasks /nonexistent/tasks.jsonl: "),
            "{err}"
        );
    }

    #[test]
    fn model_eval_line() {
        let m = ModelEval {
            label: "trained".into(),
            model: "default".into(),
            run_dir: PathBuf::from("/out/eval/trained"),
            resolved: 1,
            n: 4,
            trajectories: 5,
            infra_errors: 1,
            resolve_rate: 0.25,
            ci95_low: 0.046,
            ci95_high: 0.699,
            turns: 20,
            valid_tool_calls: 15,
            valid_tool_call_share: 0.75,
            mean_steps: 5.0,
            stop_reasons: BTreeMap::new(),
        };
        assert_eq!(
            m.to_string(),
            "eval trained: resolved 1/4 (25.0%, 95% CI 4.6–69.9%), valid tool calls 15/20 turns, 1 infrastructure errors"
        );
    }
}
