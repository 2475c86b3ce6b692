//! What a selection produces: per selector its choice for every task with the scores behind it
//! and its best@k curve, the pass@k curve, and the run's bookkeeping ([`SelectOutput`], written
//! as `selection.json` and rendered by [`crate::report`]).

use std::path::{Path, PathBuf};

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

impl SelectOutput {
    /// The warnings `dojo select` prints on stderr: a partial view, then each problem.
    pub fn warnings(&self) -> Vec<String> {
        let partial = self.partial.then(|| {
            "warning: partial view: a run directory is still being written or was interrupted"
                .to_string()
        });
        partial
            .into_iter()
            .chain(self.problems.iter().map(|p| format!("warning: {p}")))
            .collect()
    }

    /// What `dojo select` prints on stdout: the counts (`candidates` in the set), the
    /// selectors × resolved@k table against pass@k, the turn-budget line, the files in `out`.
    pub fn report(&self, candidates: usize, out: &Path) -> String {
        let mut lines = vec![format!(
            "{} tasks, {} candidates (k = {}; {} infrastructure failures left out, {} ungraded)",
            self.tasks, candidates, self.k, self.infra_left_out, self.ungraded
        )];
        if !self.tasks_short.is_empty() {
            lines.push(format!(
                "{} task(s) have fewer than {} candidates (see selection.json: tasks_short)",
                self.tasks_short.len(),
                self.k
            ));
        }
        let at = |c: &[CurvePoint]| {
            c.last().map_or(String::new(), |p| {
                format!(
                    "{:.1}% [{:.1}, {:.1}]",
                    100.0 * p.estimate.mean,
                    100.0 * p.estimate.low,
                    100.0 * p.estimate.high
                )
            })
        };
        let row = |a: &str, b: &str, c: &str, d: &str| format!("{a:<12} {b:>24} {c:>11} {d:>14}");
        lines.push(row(
            "selector",
            &format!("resolved@{}", self.k),
            "gap closed",
            "s / task",
        ));
        lines.push(row("pass@k", &at(&self.pass_at_k), "100%", "–"));
        for s in &self.selectors {
            lines.push(row(
                &s.name,
                &at(&s.best_at_k),
                &s.gap_closed
                    .map_or("–".to_string(), |g| format!("{:.0}%", 100.0 * g)),
                &format!("{:.3}", s.precompute_seconds_per_task + s.seconds_per_task),
            ));
        }
        if let Some(last) = self.sequential.points.last() {
            lines.push(format!(
                "by turn budget: pass@1 {:.1}% at {} steps (see report.html)",
                100.0 * last.pass_at_1.mean,
                last.budget
            ));
        }
        lines.push(format!(
            "wrote {} in {}",
            self.files.join(", "),
            out.display()
        ));
        lines.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(k: usize, mean: f64) -> CurvePoint {
        CurvePoint {
            k,
            estimate: Estimate {
                mean,
                low: mean / 2.0,
                high: 1.0,
                tasks: 4,
            },
        }
    }

    #[test]
    fn report_table() {
        let out = SelectOutput {
            schema_version: 1,
            sources: vec![],
            partial: true,
            infra_left_out: 1,
            ungraded: 0,
            problems: vec!["odd line".into()],
            seed: 0,
            k: 2,
            tasks: 4,
            tasks_short: vec![("t".into(), 1)],
            pass_at_k: vec![point(1, 0.25), point(2, 0.5)],
            selectors: vec![SelectorResult {
                name: "majority".into(),
                reference: false,
                resolved: 1,
                best_at_k: vec![point(2, 0.25)],
                gap_closed: Some(0.0),
                seconds_per_task: 0.001,
                precompute_seconds_per_task: 0.0,
                choices: vec![],
            }],
            sequential: SequentialCurve::default(),
            notes: vec![],
            files: vec!["predictions.jsonl".into(), "selection.json".into()],
        };
        assert_eq!(
            out.warnings(),
            [
                "warning: partial view: a run directory is still being written or was interrupted",
                "warning: odd line"
            ]
        );
        insta::assert_snapshot!(out.report(7, Path::new("/sel")), @r"
        4 tasks, 7 candidates (k = 2; 1 infrastructure failures left out, 0 ungraded)
        1 task(s) have fewer than 2 candidates (see selection.json: tasks_short)
        selector                   resolved@2  gap closed       s / task
        pass@k            50.0% [25.0, 100.0]        100%              –
        majority          25.0% [12.5, 100.0]          0%          0.001
        wrote predictions.jsonl, selection.json in /sel
        ");
    }
}
