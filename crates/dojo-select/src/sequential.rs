//! Sequential scaling: the resolved rate by turn budget, the other axis of test-time scaling
//! (more turns per rollout rather than more rollouts).
//!
//! Trajectories do not record the workspace after each step, only the final diff, so a rollout
//! cannot be re-graded at every step. What is recorded is every action: the workspace holds its
//! final patch from the last step that could have changed it (an edit, or a shell command that
//! names a file the patch changes; reads, searches and the submission cannot). A resolved
//! rollout is counted as resolved under any budget of at least that step. It may have resolved
//! earlier (a later edit that did not matter), so the curve is a lower bound of the true one,
//! exact at the full budget; an unresolved rollout counts at no budget. Candidates without
//! recorded steps (from a predictions file) are left out and counted.

use serde::Serialize;

use crate::candidates::{Candidate, TaskCandidates};
use crate::passk::{Estimate, bootstrap_mean};

/// Tools that never change the workspace.
const READ_ONLY_TOOLS: [&str; 5] = ["search", "submit", "finish", "lsp_tool", "lsp"];

/// The step (1-based) from which a resolved candidate's workspace held its final patch; `None`
/// when it did not resolve or has no recorded steps.
pub fn resolved_at(c: &Candidate) -> Option<usize> {
    if !c.resolved || c.record.steps.is_empty() {
        return None;
    }
    let patch = dojo_patch::Patch::parse(&c.patch);
    let files: Vec<&str> = patch
        .paths()
        .into_iter()
        .map(|p| p.rsplit('/').next().unwrap_or(p))
        .collect();
    let last = c.record.steps.iter().enumerate().rev().find(|(_, s)| {
        let Some(a) = &s.action else {
            return false;
        };
        let arg = |k: &str| a.arguments.get(k).and_then(|v| v.as_str()).unwrap_or("");
        match a.tool.as_str() {
            t if READ_ONLY_TOOLS.contains(&t) => false,
            "str_replace_editor" | "file_editor" => arg("command") != "view",
            "execute_bash" => {
                let cmd = format!("{} {}", arg("command"), arg("cmd"));
                files.iter().any(|f| cmd.contains(f))
            }
            // An unknown tool might have changed anything.
            _ => true,
        }
    });
    Some(last.map_or(1, |(i, _)| i + 1))
}

#[derive(Debug, Clone, Serialize)]
pub struct BudgetPoint {
    /// Agent steps allowed.
    pub budget: usize,
    /// pass@1 under this budget, with its bootstrap interval over tasks.
    #[serde(flatten)]
    pub pass_at_1: Estimate,
    /// Share of tasks some candidate resolves under this budget (pass@K).
    pub pass_at_k: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct SequentialCurve {
    pub points: Vec<BudgetPoint>,
    /// Candidates without recorded steps, left out.
    pub without_steps: usize,
}

/// The curve over budgets 1 … the most steps any candidate took.
pub fn curve(tasks: &[TaskCandidates], seed: u64) -> SequentialCurve {
    let mut without_steps = 0;
    let per_task: Vec<(usize, Vec<Option<usize>>)> = tasks
        .iter()
        .map(|t| {
            let with: Vec<&Candidate> = t
                .candidates
                .iter()
                .filter(|c| !c.record.steps.is_empty())
                .collect();
            without_steps += t.candidates.len() - with.len();
            (with.len(), with.iter().map(|c| resolved_at(c)).collect())
        })
        .filter(|(n, _)| *n > 0)
        .collect();
    let max = tasks
        .iter()
        .flat_map(|t| t.candidates.iter().map(|c| c.record.steps.len()))
        .max()
        .unwrap_or(0);
    let points = (1..=max)
        .map(|b| {
            let rates: Vec<f64> = per_task
                .iter()
                .map(|(n, at)| {
                    at.iter().filter(|a| a.is_some_and(|a| a <= b)).count() as f64 / *n as f64
                })
                .collect();
            let any = rates.iter().filter(|r| **r > 0.0).count() as f64 / rates.len().max(1) as f64;
            BudgetPoint {
                budget: b,
                pass_at_1: bootstrap_mean(&rates, seed),
                pass_at_k: any,
            }
        })
        .collect();
    SequentialCurve {
        points,
        without_steps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::candidates::tests::cand;
    use dojo_trajectory::{ActionRecord, Step, Trajectory};
    use serde_json::json;
    use std::sync::Arc;

    const FIX: &str = "diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1 +1 @@\n-x = 0\n+x = 1\n";

    fn with_steps(sample: u32, resolved: bool, actions: &[(&str, serde_json::Value)]) -> Candidate {
        let mut c = cand(sample, FIX, resolved);
        let mut t = Trajectory::new("t", sample);
        for (i, (tool, args)) in actions.iter().enumerate() {
            let mut s: Step = serde_json::from_value(json!({
                "index": i + 1, "started_ms": 0, "llm_ms": 0, "tool_ms": 0,
                "assistant_message": 0, "observation_messages": [], "usage": {}
            }))
            .unwrap();
            s.action = Some(ActionRecord {
                tool: tool.to_string(),
                arguments: args.clone(),
                call_id: String::new(),
            });
            t.steps.push(s);
        }
        c.record = Arc::new(t);
        c
    }

    #[test]
    fn resolved_from_the_last_step_that_could_change_the_workspace() {
        let edit = (
            "str_replace_editor",
            json!({"command": "str_replace", "path": "pkg/m.py"}),
        );
        let view = (
            "str_replace_editor",
            json!({"command": "view", "path": "pkg/m.py"}),
        );
        let test = ("execute_bash", json!({"command": "python -m pytest tests"}));
        let sed = ("execute_bash", json!({"command": "sed -i s/0/1/ pkg/m.py"}));
        let submit = ("submit", json!({}));
        let a = with_steps(
            0,
            true,
            &[view.clone(), edit.clone(), test.clone(), submit.clone()],
        );
        assert_eq!(resolved_at(&a), Some(2));
        let b = with_steps(
            1,
            true,
            &[edit.clone(), sed, test.clone(), view, submit.clone()],
        );
        assert_eq!(resolved_at(&b), Some(2));
        let c = with_steps(2, false, &[edit, submit]);
        assert_eq!(resolved_at(&c), None);

        // Task 1: a (at 2), c (never); task 2: b' (at 2 of 5) and one without steps.
        let tasks = vec![
            TaskCandidates {
                task_id: "1".into(),
                candidates: vec![a, c],
            },
            TaskCandidates {
                task_id: "2".into(),
                candidates: vec![b, cand(3, FIX, true)],
            },
        ];
        let curve = curve(&tasks, 0);
        assert_eq!(curve.without_steps, 1);
        assert_eq!(curve.points.len(), 5);
        assert_eq!(curve.points[0].pass_at_1.mean, 0.0);
        // From budget 2: task 1 at 1/2, task 2 at 1/1.
        assert!((curve.points[1].pass_at_1.mean - 0.75).abs() < 1e-12);
        assert_eq!(curve.points[1].pass_at_k, 1.0);
        assert!((curve.points[4].pass_at_1.mean - 0.75).abs() < 1e-12);
    }
}
