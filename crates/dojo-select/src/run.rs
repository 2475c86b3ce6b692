//! Selection over a candidate set: choices, curves and the files `dojo select` writes.
//!
//! For each selector: the choice per task among its first K candidates (with every score, the
//! tie count and whether it resolved), and best@k for k = 1…K. best@k is the expected resolve
//! rate when the selector sees k of a task's candidates: averaged over every k-subset when there
//! are at most [`MAX_SUBSETS`], else over that many seeded random ones. pass@k uses the unbiased
//! estimator, which is what the `oracle` selector's best@k converges to. A task with fewer than
//! k candidates is left out of the points at k (the count is in the output).
//!
//! Written to the output directory: `predictions.jsonl` (SWE-bench format, one per task; with
//! several selectors `predictions.<selector>.jsonl` each), `selection.json` (everything above,
//! schema-versioned) and `report.html`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::candidates::{CandidateSet, TaskCandidates};
use crate::output::{CandidateScore, CurvePoint, SelectOutput, SelectorResult, TaskChoice};
use crate::passk::{bootstrap_mean, pass_at_k};
#[cfg(doc)]
use crate::selector::SelectorKind;
use crate::selector::{Selector, SharedSelector, choose, expected_resolved};
use crate::{SELECTION_SCHEMA_VERSION, SelectError};

/// The most k-subsets a best@k point averages over per task.
pub const MAX_SUBSETS: usize = 256;

pub struct SelectOptions {
    /// Built with [`SelectorKind::build`], or a model-scored selector such as
    /// [`crate::verifier::Precomputed`].
    pub selectors: Vec<SharedSelector>,
    /// Lines for the output about how scores were obtained (verifier failures, …).
    pub notes: Vec<String>,
    /// Seconds spent computing a selector's scores beforehand (model calls, sandboxed test
    /// runs), by selector name; a hybrid's include its components'.
    pub precompute_seconds: std::collections::HashMap<String, f64>,
    /// Candidates per task to select among (default: the most any task has).
    pub k: Option<usize>,
    pub seed: u64,
    pub out: PathBuf,
}

/// Runs every selector of `opts` over `set` and writes the output directory.
pub fn select(set: &CandidateSet, opts: &SelectOptions) -> Result<SelectOutput, SelectError> {
    let k_max = opts.k.unwrap_or_else(|| set.max_k()).max(1);
    // Each task selects among its first k_max candidates.
    let tasks: Vec<TaskCandidates> = set
        .tasks
        .iter()
        .map(|t| TaskCandidates {
            task_id: t.task_id.clone(),
            candidates: t.candidates.iter().take(k_max).cloned().collect(),
        })
        .collect();
    let tasks_short = tasks
        .iter()
        .filter(|t| t.candidates.len() < k_max)
        .map(|t| (t.task_id.clone(), t.candidates.len()))
        .collect();
    let pass_curve: Vec<CurvePoint> = (1..=k_max)
        .map(|k| {
            let values: Vec<f64> = tasks
                .iter()
                .filter(|t| t.candidates.len() >= k)
                .map(|t| pass_at_k(t.candidates.len(), t.resolved(), k))
                .collect();
            CurvePoint {
                k,
                estimate: bootstrap_mean(&values, opts.seed),
            }
        })
        .collect();
    let selectors = opts
        .selectors
        .iter()
        .map(|s| {
            let mut r = evaluate(s.as_ref(), &tasks, k_max, &pass_curve, opts.seed);
            r.precompute_seconds_per_task = opts
                .precompute_seconds
                .get(&r.name)
                .map_or(0.0, |secs| secs / tasks.len().max(1) as f64);
            r
        })
        .collect();
    let mut out = SelectOutput {
        schema_version: SELECTION_SCHEMA_VERSION,
        sources: set.sources.clone(),
        partial: set.partial,
        infra_left_out: set.infra_left_out,
        ungraded: set.ungraded,
        problems: set.problems.clone(),
        seed: opts.seed,
        k: k_max,
        tasks: tasks.len(),
        tasks_short,
        pass_at_k: pass_curve,
        selectors,
        sequential: crate::sequential::curve(&tasks, opts.seed),
        notes: opts.notes.clone(),
        files: Vec::new(),
    };
    write_outputs(&mut out, set, &opts.out)?;
    Ok(out)
}

fn evaluate(
    selector: &dyn Selector,
    tasks: &[TaskCandidates],
    k_max: usize,
    pass_curve: &[CurvePoint],
    seed: u64,
) -> SelectorResult {
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(seed);
    let choices: Vec<TaskChoice> = tasks
        .iter()
        .filter_map(|t| {
            let all: Vec<usize> = (0..t.candidates.len()).collect();
            let (chosen, scores, ties) = choose(selector, t, &all, &mut rng)?;
            Some(TaskChoice {
                task_id: t.task_id.clone(),
                k: all.len(),
                chosen: t.candidates[chosen].label(),
                resolved: t.candidates[chosen].resolved,
                ties,
                candidates: t
                    .candidates
                    .iter()
                    .zip(scores)
                    .map(|(c, score)| CandidateScore {
                        label: c.label(),
                        page: c.page(),
                        score,
                        resolved: c.resolved,
                        empty: c.is_empty(),
                        patch_key: c.key.clone(),
                    })
                    .collect(),
            })
        })
        .collect();
    let best_at_k: Vec<CurvePoint> = (1..=k_max)
        .map(|k| {
            let values: Vec<f64> = tasks
                .iter()
                .filter(|t| t.candidates.len() >= k)
                .map(|t| {
                    if selector.is_reference() {
                        // The oracle's best@k is pass@k; the estimator is exact.
                        return pass_at_k(t.candidates.len(), t.resolved(), k);
                    }
                    let subsets = subsets(t.candidates.len(), k, seed);
                    subsets
                        .iter()
                        .map(|s| expected_resolved(selector, t, s))
                        .sum::<f64>()
                        / subsets.len() as f64
                })
                .collect();
            CurvePoint {
                k,
                estimate: bootstrap_mean(&values, seed),
            }
        })
        .collect();
    let pass1 = pass_curve.first().map_or(0.0, |p| p.estimate.mean);
    let pass_k = pass_curve.last().map_or(0.0, |p| p.estimate.mean);
    let best_k = best_at_k.last().map_or(0.0, |p| p.estimate.mean);
    let gap_closed = (pass_k - pass1 > 1e-12).then(|| (best_k - pass1) / (pass_k - pass1));
    SelectorResult {
        name: selector.name().to_string(),
        reference: selector.is_reference(),
        resolved: choices.iter().filter(|c| c.resolved).count(),
        best_at_k,
        gap_closed,
        seconds_per_task: started.elapsed().as_secs_f64() / tasks.len().max(1) as f64,
        precompute_seconds_per_task: 0.0,
        choices,
    }
}

/// The k-subsets of 0..n a best@k point averages over: all of them when there are at most
/// [`MAX_SUBSETS`], else that many drawn with a seeded generator.
pub fn subsets(n: usize, k: usize, seed: u64) -> Vec<Vec<usize>> {
    if k == 0 || k > n {
        return Vec::new();
    }
    if binomial_at_most(n, k, MAX_SUBSETS) {
        let mut out = Vec::new();
        let mut combo: Vec<usize> = (0..k).collect();
        loop {
            out.push(combo.clone());
            // Advance to the next combination in lexicographic order.
            let Some(i) = (0..k).rev().find(|&i| combo[i] < n - k + i) else {
                return out;
            };
            combo[i] += 1;
            for j in i + 1..k {
                combo[j] = combo[j - 1] + 1;
            }
        }
    }
    let mut rng = StdRng::seed_from_u64(seed ^ ((n as u64) << 32) ^ k as u64);
    (0..MAX_SUBSETS)
        .map(|_| {
            let mut s = rand::seq::index::sample(&mut rng, n, k).into_vec();
            s.sort_unstable();
            s
        })
        .collect()
}

/// C(n, k) ≤ limit, without overflow.
fn binomial_at_most(n: usize, k: usize, limit: usize) -> bool {
    let k = k.min(n - k);
    let mut c: u128 = 1;
    for i in 0..k {
        c = c * (n - i) as u128 / (i + 1) as u128;
        if c > limit as u128 {
            return false;
        }
    }
    true
}

fn write_outputs(
    out: &mut SelectOutput,
    set: &CandidateSet,
    dir: &Path,
) -> Result<(), SelectError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |e: std::io::Error| SelectError::Io {
            path,
            source: e.into(),
        }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let single = out.selectors.len() == 1;
    for s in &out.selectors {
        let name = if single {
            "predictions.jsonl".to_string()
        } else {
            format!("predictions.{}.jsonl", s.name)
        };
        let predictions: Vec<dojo_grade::Prediction> = s
            .choices
            .iter()
            .map(|c| {
                let patch = set
                    .tasks
                    .iter()
                    .find(|t| t.task_id == c.task_id)
                    .and_then(|t| t.candidates.iter().find(|x| x.label() == c.chosen))
                    .map(|x| x.patch.clone());
                dojo_grade::Prediction {
                    instance_id: c.task_id.clone(),
                    model_name_or_path: format!("dojo-select:{}", s.name),
                    model_patch: patch,
                    line: 0,
                }
            })
            .collect();
        let path = dir.join(&name);
        dojo_grade::write_predictions(&path, &predictions).map_err(io(&path))?;
        out.files.push(name);
    }
    for t in &set.tasks {
        for c in &t.candidates {
            let path = dir.join(c.page());
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(io(parent))?;
            }
            let html = dojo_report::trajectory::trajectory_page(&c.record);
            std::fs::write(&path, html).map_err(io(&path))?;
        }
    }
    out.files.push("trajectories/".into());
    out.files.push("selection.json".into());
    out.files.push("report.html".into());
    let report = crate::report::render(out);
    let path = dir.join("report.html");
    dojo_rundir::write_atomic(&path, report.as_bytes()).map_err(io(&path))?;
    let path = dir.join("selection.json");
    let json = serde_json::to_vec_pretty(out).map_err(|e| SelectError::Io {
        path: path.clone(),
        source: e.into(),
    })?;
    dojo_rundir::write_atomic(&path, &json).map_err(io(&path))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::candidates::tests::cand;
    use crate::selector::Random;

    #[test]
    fn subsets_enumerate_or_sample() {
        assert_eq!(
            subsets(4, 2, 0),
            vec![
                vec![0, 1],
                vec![0, 2],
                vec![0, 3],
                vec![1, 2],
                vec![1, 3],
                vec![2, 3]
            ]
        );
        assert_eq!(subsets(8, 8, 0), vec![(0..8).collect::<Vec<_>>()]);
        let drawn = subsets(20, 10, 5);
        assert_eq!(drawn.len(), MAX_SUBSETS);
        assert!(
            drawn
                .iter()
                .all(|s| s.len() == 10 && s.windows(2).all(|w| w[0] < w[1]))
        );
        assert_eq!(drawn, subsets(20, 10, 5));
    }

    /// The oracle's best@k by enumeration equals the unbiased estimator, and random's best@k is
    /// pass@1 at every k.
    #[test]
    fn enumeration_agrees_with_the_estimator() {
        let t = TaskCandidates {
            task_id: "t".into(),
            candidates: (0..6)
                .map(|i| cand(i, &format!("+{i}"), i % 3 == 0))
                .collect(),
        };
        for k in 1..=6 {
            let subs = subsets(6, k, 0);
            let oracle = subs
                .iter()
                .map(|s| expected_resolved(&crate::selector::Oracle, &t, s))
                .sum::<f64>()
                / subs.len() as f64;
            assert!((oracle - pass_at_k(6, 2, k)).abs() < 1e-12, "k={k}");
            let random = subs
                .iter()
                .map(|s| expected_resolved(&Random, &t, s))
                .sum::<f64>()
                / subs.len() as f64;
            assert!((random - 2.0 / 6.0).abs() < 1e-12, "k={k}");
        }
    }
}
