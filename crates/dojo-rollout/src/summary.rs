//! Run summaries (table + `summary.json`) and SWE-bench predictions export.
//!
//! Counting rules, stated once: an infrastructure failure is neither resolved nor unresolved; the
//! resolve rate divides by the trajectories that were *not* infrastructure failures, and the
//! infrastructure count is always shown next to it so a broken environment cannot hide.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Schema of `summary.json`.
pub const SUMMARY_SCHEMA_VERSION: u32 = 1;

/// The summary-relevant view of one trajectory record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleOutcome {
    pub task_id: String,
    pub sample_index: u32,
    pub resolved: bool,
    /// Infrastructure failure (sandbox, environment, LLM endpoint, grader): not the model's.
    pub infra_error: bool,
    pub stop_reason: String,
    /// The submission was forced by a limit (SWE-Master's forced submission).
    pub forced: bool,
    pub steps: u32,
    pub tokens: u64,
    pub wall_secs: f64,
    pub patch: String,
}

/// Per-task line of a summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRow {
    pub task_id: String,
    pub samples: usize,
    pub resolved: usize,
    pub infra_errors: usize,
    pub stop_reasons: BTreeMap<String, usize>,
    pub mean_steps: f64,
    pub tokens: u64,
}

/// One policy's run over a task set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub schema_version: u32,
    pub policy: String,
    pub tasks: usize,
    pub trajectories: usize,
    pub resolved: usize,
    pub unresolved: usize,
    pub infra_errors: usize,
    pub forced: usize,
    pub empty_patches: usize,
    /// resolved / (trajectories − infra errors); 0 when nothing graded.
    pub resolve_rate: f64,
    /// Fraction of tasks with at least one resolved sample.
    pub pass_at_k: f64,
    pub stop_reasons: BTreeMap<String, usize>,
    pub mean_steps: f64,
    pub total_tokens: u64,
    pub mean_wall_secs: f64,
    pub per_task: Vec<TaskRow>,
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

impl Summary {
    pub fn new(policy: &str, outcomes: &[SampleOutcome]) -> Summary {
        let mut per: BTreeMap<&str, Vec<&SampleOutcome>> = BTreeMap::new();
        for o in outcomes {
            per.entry(&o.task_id).or_default().push(o);
        }
        let mut stop_reasons = BTreeMap::new();
        for o in outcomes {
            *stop_reasons.entry(o.stop_reason.clone()).or_insert(0) += 1;
        }
        let resolved = outcomes.iter().filter(|o| o.resolved).count();
        let infra = outcomes.iter().filter(|o| o.infra_error).count();
        let per_task: Vec<TaskRow> = per
            .iter()
            .map(|(t, os)| {
                let mut sr = BTreeMap::new();
                for o in os {
                    *sr.entry(o.stop_reason.clone()).or_insert(0) += 1;
                }
                TaskRow {
                    task_id: t.to_string(),
                    samples: os.len(),
                    resolved: os.iter().filter(|o| o.resolved).count(),
                    infra_errors: os.iter().filter(|o| o.infra_error).count(),
                    stop_reasons: sr,
                    mean_steps: os.iter().map(|o| o.steps as f64).sum::<f64>() / os.len() as f64,
                    tokens: os.iter().map(|o| o.tokens).sum(),
                }
            })
            .collect();
        let n = outcomes.len();
        Summary {
            schema_version: SUMMARY_SCHEMA_VERSION,
            policy: policy.to_string(),
            tasks: per.len(),
            trajectories: n,
            resolved,
            unresolved: n - resolved - infra,
            infra_errors: infra,
            forced: outcomes.iter().filter(|o| o.forced).count(),
            empty_patches: outcomes
                .iter()
                .filter(|o| !o.infra_error && o.patch.trim().is_empty())
                .count(),
            resolve_rate: ratio(resolved, n - infra),
            pass_at_k: ratio(
                per_task.iter().filter(|t| t.resolved > 0).count(),
                per.len(),
            ),
            stop_reasons,
            mean_steps: if n == 0 {
                0.0
            } else {
                outcomes.iter().map(|o| o.steps as f64).sum::<f64>() / n as f64
            },
            total_tokens: outcomes.iter().map(|o| o.tokens).sum(),
            mean_wall_secs: if n == 0 {
                0.0
            } else {
                outcomes.iter().map(|o| o.wall_secs).sum::<f64>() / n as f64
            },
            per_task,
        }
    }

    pub fn stop_reasons_text(&self) -> String {
        self.stop_reasons
            .iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    pub fn write_json(&self, path: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        dojo_rundir::write_atomic(path, text.as_bytes())
    }
}

/// The columns of a summary row, shared by the end-of-run table and the HTML report.
pub const COLUMNS: [&str; 11] = [
    "policy",
    "trajectories",
    "resolved",
    "resolve rate",
    "pass@k",
    "infra errors",
    "forced",
    "mean steps",
    "tokens",
    "mean wall s",
    "stop reasons",
];

impl Summary {
    /// This summary's row, in [`COLUMNS`] order.
    pub fn cells(&self) -> [String; 11] {
        [
            self.policy.clone(),
            self.trajectories.to_string(),
            self.resolved.to_string(),
            format!("{:.1}%", 100.0 * self.resolve_rate),
            format!("{:.1}%", 100.0 * self.pass_at_k),
            self.infra_errors.to_string(),
            self.forced.to_string(),
            format!("{:.1}", self.mean_steps),
            self.total_tokens.to_string(),
            format!("{:.1}", self.mean_wall_secs),
            self.stop_reasons_text(),
        ]
    }
}

/// The end-of-run table, one row per policy.
pub fn render_table(summaries: &[Summary]) -> String {
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::UTF8_FULL_CONDENSED);
    t.set_header(COLUMNS.to_vec());
    for s in summaries {
        t.add_row(s.cells().to_vec());
    }
    t.to_string()
}

/// One line of a SWE-bench predictions file (what `dojo eval` and the official harness read).
pub use dojo_grade::Prediction;

/// Predictions for one sample index. Infrastructure failures are left out: they carry no model
/// output, and grading an empty patch for them would score the infrastructure as the model's.
pub fn predictions(model: &str, outcomes: &[SampleOutcome], sample_index: u32) -> Vec<Prediction> {
    let mut v: Vec<Prediction> = outcomes
        .iter()
        .filter(|o| o.sample_index == sample_index && !o.infra_error)
        .map(|o| Prediction::new(&o.task_id, model, &o.patch))
        .collect();
    v.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
    v
}

/// Write predictions as JSONL: `predictions.jsonl` for K = 1, else one
/// `predictions.sample-<k>.jsonl` per sample (SWE-bench wants unique instance ids per file).
/// Returns the files written.
pub fn export_predictions(
    dir: &Path,
    model: &str,
    outcomes: &[SampleOutcome],
    samples: u32,
) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut written = Vec::new();
    for k in 0..samples {
        let name = if samples == 1 {
            "predictions.jsonl".to_string()
        } else {
            format!("predictions.sample-{k}.jsonl")
        };
        let path = dir.join(name);
        dojo_grade::write_predictions(&path, &predictions(model, outcomes, k))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn o(t: &str, k: u32, resolved: bool, infra: bool, stop: &str) -> SampleOutcome {
        SampleOutcome {
            task_id: t.into(),
            sample_index: k,
            resolved,
            infra_error: infra,
            stop_reason: stop.into(),
            forced: stop == "max_steps",
            steps: 4 + k,
            tokens: 100,
            wall_secs: 1.5,
            patch: if infra {
                String::new()
            } else {
                format!("diff --git a/{t}.py b/{t}.py\n")
            },
        }
    }

    fn sample() -> Vec<SampleOutcome> {
        vec![
            o("a", 0, true, false, "submitted"),
            o("a", 1, false, false, "max_steps"),
            o("b", 0, false, true, "env_error"),
            o("b", 1, false, false, "submitted"),
            o("c", 0, false, false, "format_errors"),
            o("c", 1, true, false, "submitted"),
        ]
    }

    #[test]
    fn summary_counts_infra_apart() {
        let s = Summary::new("gold-replay", &sample());
        assert_eq!((s.resolved, s.unresolved, s.infra_errors), (2, 3, 1));
        assert!((s.resolve_rate - 0.4).abs() < 1e-9);
        assert!((s.pass_at_k - 2.0 / 3.0).abs() < 1e-9);
        insta::assert_json_snapshot!("summary", s);
    }

    #[test]
    fn table_snapshot() {
        let a = Summary::new("gold-replay", &sample());
        let b = Summary::new("embedded:smollm2-135m", &sample()[..2]);
        insta::assert_snapshot!("table", render_table(&[a, b]));
    }

    #[test]
    fn predictions_snapshot_and_export() {
        let outs = sample();
        insta::assert_json_snapshot!("predictions_sample0", predictions("m", &outs, 0));
        let dir = tempfile::tempdir().unwrap();
        let files = export_predictions(dir.path(), "m", &outs, 2).unwrap();
        assert_eq!(files.len(), 2);
        let text = std::fs::read_to_string(&files[1]).unwrap();
        assert_eq!(text.lines().count(), 3);
        let p: Prediction = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(p.instance_id, "a");
        let files = export_predictions(dir.path(), "m", &outs, 1).unwrap();
        assert!(files[0].ends_with("predictions.jsonl"));
    }
}
