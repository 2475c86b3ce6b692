//! The `hybrid` selector: a weighted combination of the other selectors' scores, the weights a
//! logistic regression fitted on a labelled run (R2E-Gym combines its execution-based and
//! execution-free verifiers the same way).
//!
//! Each candidate's features are the component selectors' [`Selector::features`] (majority as
//! its cluster's share of the subset, the tests selector as the share of the tests it passes,
//! the verifier's p(YES), SWR's mean reward); its score is σ(w·x + b), the fitted chance that it
//! resolves. An empty patch scores −1 whatever the weights: it loses, as in every selector.
//! Fitting is L2-regularised maximum likelihood by Newton's method on at most a handful of
//! features: a few dozen lines here rather than a machine-learning crate (linfa, smartcore),
//! which would bring a linear-algebra stack for a 5×5 system. The regularisation keeps the
//! weights finite when the labels are separable, which they often are on small runs.
//!
//! Weights are saved as `hybrid.json` (schema-versioned, with the feature names) and reloaded for
//! another run. Fitting and judging on the same run would be in-sample, so when no weights are
//! given each task is scored with weights fitted on every other task (leave-one-task-out); the
//! weights saved are the ones fitted on all tasks.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::SelectError;
use crate::candidates::TaskCandidates;
use crate::selector::{Selector, SharedSelector};

/// Schema of `hybrid.json`.
pub const HYBRID_SCHEMA_VERSION: u32 = 1;

/// Default L2 penalty on the weights (not the bias).
pub const DEFAULT_L2: f64 = 1.0;

/// Fitted weights: `hybrid.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HybridWeights {
    pub schema_version: u32,
    /// Component selector names, in the order of `weights`.
    pub features: Vec<String>,
    pub weights: Vec<f64>,
    pub bias: f64,
    pub l2: f64,
    /// What they were fitted on: tasks, graded candidates, resolved ones.
    pub tasks: usize,
    pub candidates: usize,
    pub positives: usize,
}

impl HybridWeights {
    /// σ(w·x + b).
    pub fn probability(&self, x: &[f64]) -> f64 {
        let z = self.bias + self.weights.iter().zip(x).map(|(w, v)| w * v).sum::<f64>();
        1.0 / (1.0 + (-z).exp())
    }

    pub fn load(path: &Path) -> Result<HybridWeights, SelectError> {
        let text = std::fs::read_to_string(path).map_err(|e| SelectError::Io {
            path: path.to_path_buf(),
            source: e.into(),
        })?;
        let w: HybridWeights = serde_json::from_str(&text).map_err(|e| SelectError::InputFrom {
            path: path.to_path_buf(),
            what: "not hybrid selector weights",
            source: e.into(),
        })?;
        if w.schema_version != HYBRID_SCHEMA_VERSION {
            return Err(SelectError::Input {
                path: path.to_path_buf(),
                reason: format!(
                    "schema_version {} (this dojo reads {HYBRID_SCHEMA_VERSION})",
                    w.schema_version
                ),
            });
        }
        if w.weights.len() != w.features.len() {
            return Err(SelectError::Input {
                path: path.to_path_buf(),
                reason: format!(
                    "{} weights for {} features",
                    w.weights.len(),
                    w.features.len()
                ),
            });
        }
        Ok(w)
    }

    pub fn save(&self, path: &Path) -> Result<(), SelectError> {
        let json = serde_json::to_vec_pretty(self).map_err(|e| SelectError::Io {
            path: path.to_path_buf(),
            source: e.into(),
        })?;
        dojo_rundir::write_atomic(path, &json).map_err(|e| SelectError::Io {
            path: path.to_path_buf(),
            source: e.into(),
        })
    }
}

/// One labelled training row per graded candidate: (task id, features, resolved), the features
/// computed over all of the task's candidates.
pub fn training_rows(
    components: &[SharedSelector],
    tasks: &[TaskCandidates],
) -> Vec<(String, Vec<f64>, bool)> {
    let mut rows = Vec::new();
    for t in tasks {
        let all: Vec<usize> = (0..t.candidates.len()).collect();
        let columns: Vec<Vec<f64>> = components.iter().map(|c| c.features(t, &all)).collect();
        for (i, c) in t.candidates.iter().enumerate() {
            if c.graded {
                let x = columns.iter().map(|col| col[i]).collect();
                rows.push((t.task_id.clone(), x, c.resolved));
            }
        }
    }
    rows
}

/// L2-regularised logistic regression by Newton's method: (weights, bias).
pub fn fit_logistic(rows: &[(Vec<f64>, bool)], dims: usize, l2: f64) -> (Vec<f64>, f64) {
    // θ = (w_1 … w_d, b); the bias gets a tiny penalty only so the Hessian stays invertible
    // when every label is the same.
    let n = dims + 1;
    let mut theta = vec![0.0; n];
    for _ in 0..100 {
        let mut grad = vec![0.0; n];
        let mut hess = vec![vec![0.0; n]; n];
        for (x, y) in rows {
            let xi: Vec<f64> = x.iter().copied().chain([1.0]).collect();
            let z: f64 = xi.iter().zip(&theta).map(|(a, b)| a * b).sum();
            let p = 1.0 / (1.0 + (-z).exp());
            let r = p - f64::from(u8::from(*y));
            let w = (p * (1.0 - p)).max(1e-12);
            for a in 0..n {
                grad[a] += r * xi[a];
                for b in 0..n {
                    hess[a][b] += w * xi[a] * xi[b];
                }
            }
        }
        for a in 0..n {
            let penalty = if a < dims { l2 } else { 1e-6 };
            grad[a] += penalty * theta[a];
            hess[a][a] += penalty;
        }
        let Some(step) = solve(hess, grad) else {
            break;
        };
        for (t, s) in theta.iter_mut().zip(&step) {
            *t -= s;
        }
        if step.iter().all(|s| s.abs() < 1e-10) {
            break;
        }
    }
    let bias = theta.pop().unwrap_or(0.0);
    (theta, bias)
}

/// Solves `a x = b` by Gaussian elimination with partial pivoting; `None` when singular.
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    for col in 0..n {
        let pivot = (col..n).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-300 {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        let (done, rest) = a.split_at_mut(col + 1);
        let pivot_row = &done[col];
        for (offset, row) in rest.iter_mut().enumerate() {
            let f = row[col] / pivot_row[col];
            for (x, p) in row.iter_mut().zip(pivot_row).skip(col) {
                *x -= f * p;
            }
            b[col + 1 + offset] -= f * b[col];
        }
    }
    let mut x = vec![0.0; n];
    for row in (0..n).rev() {
        let s: f64 = (row + 1..n).map(|k| a[row][k] * x[k]).sum();
        x[row] = (b[row] - s) / a[row][row];
    }
    Some(x)
}

/// Fits weights for `components` on the graded candidates of `tasks`.
pub fn fit(components: &[SharedSelector], tasks: &[TaskCandidates], l2: f64) -> HybridWeights {
    let rows = training_rows(components, tasks);
    fit_rows(components, &rows, tasks.len(), l2)
}

fn fit_rows(
    components: &[SharedSelector],
    rows: &[(String, Vec<f64>, bool)],
    tasks: usize,
    l2: f64,
) -> HybridWeights {
    let xy: Vec<(Vec<f64>, bool)> = rows.iter().map(|(_, x, y)| (x.clone(), *y)).collect();
    let (weights, bias) = fit_logistic(&xy, components.len(), l2);
    HybridWeights {
        schema_version: HYBRID_SCHEMA_VERSION,
        features: components.iter().map(|c| c.name().to_string()).collect(),
        weights,
        bias,
        l2,
        tasks,
        candidates: xy.len(),
        positives: xy.iter().filter(|(_, y)| *y).count(),
    }
}

/// The hybrid selector.
pub struct Hybrid {
    components: Vec<SharedSelector>,
    /// Weights for every task …
    weights: HybridWeights,
    /// … except these, scored with weights fitted without them (leave-one-task-out).
    held_out: HashMap<String, HybridWeights>,
}

impl Hybrid {
    /// With saved weights; their features must be exactly the components, in order.
    pub fn with_weights(
        components: Vec<SharedSelector>,
        weights: HybridWeights,
    ) -> Result<Hybrid, SelectError> {
        let names: Vec<String> = components.iter().map(|c| c.name().to_string()).collect();
        if names != weights.features {
            return Err(SelectError::WeightsMismatch {
                weights: weights.features.join(", "),
                selectors: names.join(", "),
            });
        }
        Ok(Hybrid {
            components,
            weights,
            held_out: HashMap::new(),
        })
    }

    /// Fitted on `tasks` themselves: each task scored by weights fitted on the others. The
    /// weights over all tasks are [`Self::weights`], the ones to save.
    pub fn cross_fitted(
        components: Vec<SharedSelector>,
        tasks: &[TaskCandidates],
        l2: f64,
    ) -> Hybrid {
        let rows = training_rows(&components, tasks);
        let weights = fit_rows(&components, &rows, tasks.len(), l2);
        let held_out = tasks
            .iter()
            .map(|t| {
                let others: Vec<_> = rows
                    .iter()
                    .filter(|(id, _, _)| *id != t.task_id)
                    .cloned()
                    .collect();
                let w = fit_rows(&components, &others, tasks.len().saturating_sub(1), l2);
                (t.task_id.clone(), w)
            })
            .collect();
        Hybrid {
            components,
            weights,
            held_out,
        }
    }

    pub fn weights(&self) -> &HybridWeights {
        &self.weights
    }

    /// Whether tasks are scored with leave-one-task-out weights.
    pub fn is_cross_fitted(&self) -> bool {
        !self.held_out.is_empty()
    }
}

impl Selector for Hybrid {
    fn name(&self) -> &'static str {
        "hybrid"
    }
    fn scores(&self, task: &TaskCandidates, subset: &[usize]) -> Vec<f64> {
        let w = self.held_out.get(&task.task_id).unwrap_or(&self.weights);
        let columns: Vec<Vec<f64>> = self
            .components
            .iter()
            .map(|c| c.features(task, subset))
            .collect();
        (0..subset.len())
            .map(|i| {
                // An empty patch loses, whatever the weights (a negative weight on a component
                // that scores it 0 must not make it win).
                if task.candidates[subset[i]].is_empty() {
                    return -1.0;
                }
                let x: Vec<f64> = columns.iter().map(|col| col[i]).collect();
                w.probability(&x)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::candidates::tests::cand;
    use crate::selector::{Majority, Random, expected_resolved};
    use std::sync::Arc;

    /// A selector that scores each candidate by a fixed number per sample index.
    struct Fixed(&'static str, Vec<f64>);
    impl Selector for Fixed {
        fn name(&self) -> &'static str {
            self.0
        }
        fn scores(&self, task: &TaskCandidates, subset: &[usize]) -> Vec<f64> {
            subset
                .iter()
                .map(|&i| self.1[task.candidates[i].sample_index as usize])
                .collect()
        }
    }

    #[test]
    fn logistic_fit_matches_a_known_solution() {
        // One feature, labels y = 1 exactly when x > 0.5, with overlap: the maximum-likelihood
        // slope is positive and the boundary sits at 0.5 by symmetry (up to the bias's tiny
        // penalty).
        let rows: Vec<(Vec<f64>, bool)> = [
            (0.0, false),
            (0.2, false),
            (0.4, true),
            (0.6, false),
            (0.8, true),
            (1.0, true),
        ]
        .iter()
        .map(|&(x, y)| (vec![x], y))
        .collect();
        let (w, b) = fit_logistic(&rows, 1, 0.0);
        assert!(w[0] > 0.0, "{w:?}");
        assert!((b + w[0] * 0.5).abs() < 1e-4, "boundary at {}", -b / w[0]);
        // The gradient vanishes at the optimum.
        let g: f64 = rows
            .iter()
            .map(|(x, y)| {
                (1.0 / (1.0 + (-(w[0] * x[0] + b)).exp()) - f64::from(u8::from(*y))) * x[0]
            })
            .sum();
        assert!(g.abs() < 1e-8, "{g}");
        // Separable labels stay finite under the penalty.
        let sep: Vec<(Vec<f64>, bool)> = vec![(vec![0.0], false), (vec![1.0], true)];
        let (w, _) = fit_logistic(&sep, 1, 1.0);
        assert!(w[0].is_finite() && w[0] > 0.0);
        // One class only: no signal, finite.
        let (w, b) = fit_logistic(&[(vec![1.0], false), (vec![0.0], false)], 1, 1.0);
        assert!(w[0].is_finite() && b < 0.0);
    }

    /// Two features: `good` ranks the resolved candidate first in every task, `bad` ranks it
    /// last. The fit weights `good` up and `bad` down, and the hybrid picks the right one, also
    /// leave-one-task-out.
    #[test]
    fn hybrid_learns_which_component_to_trust() {
        let tasks: Vec<TaskCandidates> = (0..4)
            .map(|t| TaskCandidates {
                task_id: format!("t{t}"),
                candidates: (0..3).map(|i| cand(i, &format!("+{i}"), i == 1)).collect(),
            })
            .collect();
        let good: SharedSelector = Arc::new(Fixed("good", vec![0.2, 0.9, 0.1]));
        let bad: SharedSelector = Arc::new(Fixed("bad", vec![0.5, 0.0, 0.9]));
        let comps = vec![good, bad];
        let w = fit(&comps, &tasks, DEFAULT_L2);
        assert_eq!(w.features, vec!["good", "bad"]);
        assert!(w.weights[0] > 0.0 && w.weights[1] < 0.0, "{w:?}");
        assert_eq!((w.candidates, w.positives, w.tasks), (12, 4, 4));
        let h = Hybrid::cross_fitted(comps.clone(), &tasks, DEFAULT_L2);
        assert!(h.is_cross_fitted());
        for t in &tasks {
            assert_eq!(expected_resolved(&h, t, &[0, 1, 2]), 1.0);
        }
        // Saved and reloaded: the same weights, the same choices.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hybrid.json");
        h.weights().save(&path).unwrap();
        let loaded = HybridWeights::load(&path).unwrap();
        assert_eq!(&loaded, h.weights());
        let h2 = Hybrid::with_weights(comps, loaded).unwrap();
        assert!(!h2.is_cross_fitted());
        assert_eq!(expected_resolved(&h2, &tasks[0], &[0, 1, 2]), 1.0);
        // Weights for other selectors are refused, naming both lists.
        let other: Vec<SharedSelector> = vec![Arc::new(Majority), Arc::new(Random)];
        let err = Hybrid::with_weights(other, h.weights().clone())
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("good, bad") && err.contains("majority, random"),
            "{err}"
        );
        // A negative weight never lets an empty patch win.
        let neg = HybridWeights {
            weights: vec![-5.0, 0.0],
            ..h.weights().clone()
        };
        let h3 = Hybrid::with_weights(
            vec![
                Arc::new(Fixed("good", vec![0.2, 0.9, 0.0])),
                Arc::new(Fixed("bad", vec![0.0; 3])),
            ],
            neg,
        )
        .unwrap();
        let with_empty = TaskCandidates {
            task_id: "e".into(),
            candidates: vec![
                cand(0, "+a", false),
                cand(1, "+b", true),
                cand(2, "", false),
            ],
        };
        assert_eq!(h3.scores(&with_empty, &[0, 1, 2])[2], -1.0);
        assert_eq!(expected_resolved(&h3, &with_empty, &[1, 2]), 1.0);
        std::fs::write(&path, "{\"schema_version\": 9}").unwrap();
        assert!(HybridWeights::load(&path).is_err());
    }
}
