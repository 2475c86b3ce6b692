//! `dojo demo`'s pieces: the bundled benchmark and the output directory it is written into,
//! the options of its two runs (gold-replay, the embedded model), the report's notes and the
//! exit code. The runs themselves are [`crate::embedded::run_policy`]'s, the report
//! [`crate::report::write_demo_report`]'s.

use std::path::{Path, PathBuf};

use dojo_task::{PrepareOptions, Task};

use crate::error::RolloutError;
use crate::policy::PolicyConfig;
use crate::run_dir::{RolloutOptions, load_tasks};
use crate::summary::Summary;

/// The bundled benchmark, embedded so `dojo demo` works from any directory.
pub const MINI_TASKS: &str = include_str!("../../../tasksets/mini/tasks.jsonl");

/// The report's note when the embedded model could not run in this build.
pub const SKIPPED_NOTE: &str =
    "The embedded model was skipped: this dojo was built without the `engine` feature.";

/// A demo: its output directory, task file and tasks, and how its runs go.
pub struct Demo {
    pub out: PathBuf,
    pub tasks_file: PathBuf,
    pub tasks: Vec<Task>,
    /// Concurrent rollouts of each run.
    pub workers: usize,
}

impl Demo {
    /// Make `out` (emptied first when `fresh`) and pick the task file: `tasks`, else the
    /// bundled benchmark written into `out`; its tasks are loaded.
    pub fn prepare(
        out: PathBuf,
        fresh: bool,
        tasks: Option<&Path>,
        workers: usize,
    ) -> Result<Demo, RolloutError> {
        let io = |path: &Path, e: std::io::Error| RolloutError::Io {
            path: path.to_path_buf(),
            source: e.into(),
        };
        if fresh && out.exists() {
            std::fs::remove_dir_all(&out).map_err(|e| io(&out, e))?;
        }
        std::fs::create_dir_all(&out).map_err(|e| io(&out, e))?;
        let tasks_file = match tasks {
            Some(t) => t.to_path_buf(),
            None => {
                let p = out.join("tasks.jsonl");
                dojo_rundir::write_atomic(&p, MINI_TASKS.as_bytes()).map_err(|e| io(&p, e))?;
                p
            }
        };
        let tasks = load_tasks(&tasks_file, &[])?;
        Ok(Demo {
            out,
            tasks_file,
            tasks,
            workers,
        })
    }

    /// One run: `policy` on `instances` (all when empty), one sample each, into `OUT/dir`,
    /// with predictions exported; its progress goes to `progress` (one handle per run).
    pub fn options(
        &self,
        policy: PolicyConfig,
        dir: &str,
        instances: Vec<String>,
        progress: dojo_progress::Progress,
    ) -> RolloutOptions {
        RolloutOptions {
            shard: None,
            tasks_file: self.tasks_file.clone(),
            instances,
            label: policy.label(),
            policy,
            samples: 1,
            out: self.out.join(dir),
            workers: self.workers,
            export_predictions: true,
            envs_dir: None,
            prepare: PrepareOptions::default(),
            progress,
        }
    }

    /// The first run: each task's gold patch through the agent's real tools, into
    /// `OUT/gold-replay`.
    pub fn gold_run(
        &self,
        progress: dojo_progress::Progress,
    ) -> Result<RolloutOptions, RolloutError> {
        let policy = PolicyConfig::parse("gold-replay").map_err(RolloutError::policy)?;
        Ok(self.options(policy, "gold-replay", vec![], progress))
    }

    /// The second run, into `OUT/embedded`: the embedded `model` (the bundled default) with
    /// `steps` agent turns of `max_tokens` tokens, on the first `tasks` tasks (all when 0).
    pub fn model_run(
        &self,
        model: &str,
        steps: u32,
        max_tokens: u32,
        tasks: usize,
        progress: dojo_progress::Progress,
    ) -> RolloutOptions {
        let policy = PolicyConfig::embedded_agent(model, "smollm2-135m", steps, max_tokens);
        let ids = match tasks {
            0 => vec![],
            n => self
                .tasks
                .iter()
                .take(n)
                .map(|t| t.instance_id.clone())
                .collect(),
        };
        self.options(policy, "embedded", ids, progress)
    }

    /// The report's note on gold-replay.
    pub fn gold_note(&self) -> String {
        format!(
            "{} tasks of the bundled benchmark ({}). gold-replay applies each task's gold patch through the agent's real tools (search, view, str_replace, run tests, submit): it checks the pipeline, and every task should resolve.",
            self.tasks.len(),
            self.tasks_file.display()
        )
    }
}

/// The report's note on the embedded model's run with its budgets.
pub fn model_note(steps: u32, max_tokens: u32) -> String {
    format!(
        "embedded:smollm2-135m is the 135M-parameter default model running in-process on CPU with a budget of {steps} steps and {max_tokens} tokens per turn; it is far too small to fix real bugs, so unresolved is the honest expectation. Its failures are counted as the model's only when the infrastructure worked."
    )
}

/// The report's closing note: which dojo `version` made it, in how many `seconds`.
pub fn generated_note(version: &str, seconds: f64) -> String {
    format!("Generated by dojo {version} in {seconds:.0} s.")
}

/// False when a rollout failed for infrastructure reasons or gold-replay (the first summary) did
/// not resolve every task: the pipeline is broken (`dojo demo` exits 3, infrastructure).
pub fn trustworthy<'a>(summaries: impl IntoIterator<Item = &'a Summary>) -> bool {
    let mut summaries = summaries.into_iter().peekable();
    let gold_ok = summaries
        .peek()
        .is_some_and(|s| s.resolved == s.trajectories);
    let infra: usize = summaries.map(|s| s.infra_errors).sum();
    infra == 0 && gold_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundled_benchmark_is_written_and_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("demo");
        let quiet = dojo_progress::Progress::quiet;
        let d = Demo::prepare(out.clone(), true, None, 2).unwrap();
        assert_eq!(d.tasks_file, out.join("tasks.jsonl"));
        assert!(!d.tasks.is_empty());
        assert_eq!(d.gold_run(quiet()).unwrap().out, out.join("gold-replay"));
        let n = d.tasks.len();
        assert!(d.gold_note().starts_with(&format!("{n} tasks of")));
        let m = d.model_run("default", 4, 160, 1, quiet());
        assert_eq!(m.policy.name.as_deref(), Some("embedded:smollm2-135m"));
        assert_eq!(m.instances, [d.tasks[0].instance_id.clone()]);
        assert!(
            d.model_run("default", 4, 160, 0, quiet())
                .instances
                .is_empty()
        );
    }

    #[test]
    fn generated_note_rounds_seconds() {
        assert_eq!(
            generated_note("0.1.0", 12.6),
            "Generated by dojo 0.1.0 in 13 s."
        );
    }

    #[test]
    fn trust_needs_gold_to_resolve_everything() {
        let mut gold = Summary::new("gold-replay", &[]);
        assert!(trustworthy([&gold]));
        gold.trajectories = 1;
        assert!(!trustworthy([&gold]));
        gold.resolved = 1;
        let mut model = Summary::new("m", &[]);
        model.infra_errors = 1;
        assert!(!trustworthy([&gold, &model]));
        assert!(trustworthy([&gold]));
    }
}
