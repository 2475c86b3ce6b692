//! Selectors: score the candidates of a task; the best score wins.
//!
//! One trait, so a new selector (a verifier model, a reward model, tests written by the
//! agents) is one `scores` function. Scores are over a subset of a task's candidates because
//! some selectors (majority) depend on which others are present: best@k draws k-subsets.

use std::collections::HashMap;

use rand::Rng;

use crate::SelectError;
use crate::candidates::TaskCandidates;

/// Scores candidates; higher is better. Ties are broken by the caller.
///
/// Execution model: `scores` is pure and cheap, called many times per task (once per k-subset
/// the best@k curves draw) from one thread; whatever needs a model or a sandbox (the verifier,
/// SWR, the agents' tests) is computed before selection ([`crate::plan`]) and only looked up
/// here, so nothing is retried or cancelled at this level.
pub trait Selector {
    /// The name used on the command line and in reports.
    fn name(&self) -> &'static str;
    /// For reference only (it reads the grades it is judged by).
    fn is_reference(&self) -> bool {
        false
    }
    /// One score per index in `subset` (indices into `task.candidates`), in that order.
    fn scores(&self, task: &TaskCandidates, subset: &[usize]) -> Vec<f64>;
    /// The scores as features of the `hybrid` selector ([`crate::hybrid`]): on a scale that does
    /// not grow with the subset, missing scores as 0. Default: the scores themselves.
    fn features(&self, task: &TaskCandidates, subset: &[usize]) -> Vec<f64> {
        self.scores(task, subset)
    }
}

/// A selector shared between the run's list and the `hybrid` selector that combines it.
pub type SharedSelector = std::sync::Arc<dyn Selector + Send + Sync>;

/// pass@k as a selector: picks a resolved candidate whenever there is one. It reads the grades,
/// so it is an upper bound for reference, never a real choice.
pub struct Oracle;

impl Selector for Oracle {
    fn name(&self) -> &'static str {
        "oracle"
    }
    fn is_reference(&self) -> bool {
        true
    }
    fn scores(&self, task: &TaskCandidates, subset: &[usize]) -> Vec<f64> {
        subset
            .iter()
            .map(|&i| f64::from(u8::from(task.candidates[i].resolved)))
            .collect()
    }
}

/// Every candidate ties, so the seeded tie-break picks one uniformly: the pass@1 baseline every
/// other selector must beat.
pub struct Random;

impl Selector for Random {
    fn name(&self) -> &'static str {
        "random"
    }
    fn scores(&self, _task: &TaskCandidates, subset: &[usize]) -> Vec<f64> {
        vec![0.0; subset.len()]
    }
}

/// Majority vote over normalized patches ([`crate::patch`]): a candidate scores the size of its
/// cluster among the subset. Empty patches score 0, so they lose to any change.
pub struct Majority;

impl Selector for Majority {
    fn name(&self) -> &'static str {
        "majority"
    }
    fn scores(&self, task: &TaskCandidates, subset: &[usize]) -> Vec<f64> {
        let mut sizes: HashMap<&str, usize> = HashMap::new();
        for &i in subset {
            *sizes.entry(task.candidates[i].key.as_str()).or_default() += 1;
        }
        subset
            .iter()
            .map(|&i| {
                let c = &task.candidates[i];
                if c.key == crate::patch::EMPTY_KEY {
                    0.0
                } else {
                    sizes[c.key.as_str()] as f64
                }
            })
            .collect()
    }
    /// The cluster's share of the subset, so a weight fitted at one k applies at another.
    fn features(&self, task: &TaskCandidates, subset: &[usize]) -> Vec<f64> {
        let n = subset.len().max(1) as f64;
        self.scores(task, subset)
            .into_iter()
            .map(|s| s / n)
            .collect()
    }
}

/// The selectors by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectorKind {
    Oracle,
    Random,
    Majority,
    /// SWE-Gym's verifier: needs a judge model ([`crate::verifier`]).
    Verifier,
    /// SWE-World's reward model, mean of n samples: needs the model ([`crate::swr`]).
    Swr,
    /// The agents' own tests run against every candidate ([`crate::agent_tests`]): needs
    /// sandboxes.
    Tests,
    /// A logistic combination of the others' scores ([`crate::hybrid`]): needs them and weights.
    Hybrid,
}

impl SelectorKind {
    /// In the order `all` evaluates them: `hybrid` last, it combines the others.
    pub const ALL: [SelectorKind; 7] = [
        SelectorKind::Oracle,
        SelectorKind::Random,
        SelectorKind::Majority,
        SelectorKind::Verifier,
        SelectorKind::Swr,
        SelectorKind::Tests,
        SelectorKind::Hybrid,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SelectorKind::Oracle => "oracle",
            SelectorKind::Random => "random",
            SelectorKind::Majority => "majority",
            SelectorKind::Verifier => "verifier",
            SelectorKind::Swr => "swr",
            SelectorKind::Tests => "tests",
            SelectorKind::Hybrid => "hybrid",
        }
    }

    /// Scored from work done beforehand (a model, sandboxes, fitted weights), so built by the
    /// caller, not by [`Self::build`].
    pub fn is_precomputed(self) -> bool {
        self.build().is_none()
    }

    /// `oracle`, `random`, `majority`, `verifier`, `swr`, `tests`, `hybrid`, a comma-separated
    /// list, or `all`.
    pub fn parse_list(s: &str) -> Result<Vec<SelectorKind>, SelectError> {
        let mut out = Vec::new();
        for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "all" => out.extend(Self::ALL),
                "oracle" => out.push(SelectorKind::Oracle),
                "random" => out.push(SelectorKind::Random),
                "majority" => out.push(SelectorKind::Majority),
                "verifier" => out.push(SelectorKind::Verifier),
                "swr" => out.push(SelectorKind::Swr),
                "tests" => out.push(SelectorKind::Tests),
                "hybrid" => out.push(SelectorKind::Hybrid),
                other => return Err(SelectError::UnknownSelector(other.to_string())),
            }
        }
        let mut seen = Vec::new();
        out.retain(|k| {
            let new = !seen.contains(k);
            seen.push(*k);
            new
        });
        if out.is_empty() {
            return Err(SelectError::UnknownSelector(s.to_string()));
        }
        Ok(out)
    }

    /// The selector, for those that need nothing computed beforehand (`None` for the verifier,
    /// swr, tests and hybrid).
    pub fn build(self) -> Option<SharedSelector> {
        match self {
            SelectorKind::Oracle => Some(std::sync::Arc::new(Oracle)),
            SelectorKind::Random => Some(std::sync::Arc::new(Random)),
            SelectorKind::Majority => Some(std::sync::Arc::new(Majority)),
            SelectorKind::Verifier
            | SelectorKind::Swr
            | SelectorKind::Tests
            | SelectorKind::Hybrid => None,
        }
    }
}

/// Scores within this distance are a tie.
const TIE: f64 = 1e-9;

/// The indices (into `subset`) of the best-scored candidates.
pub fn best(scores: &[f64]) -> Vec<usize> {
    let top = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (0..scores.len())
        .filter(|&i| scores[i] >= top - TIE)
        .collect()
}

/// The chance that the selection over `subset` resolves the task: the share of resolved
/// candidates among the tied best (exact over the random tie-break).
pub fn expected_resolved(selector: &dyn Selector, task: &TaskCandidates, subset: &[usize]) -> f64 {
    if subset.is_empty() {
        return 0.0;
    }
    let ties = best(&selector.scores(task, subset));
    let resolved = ties
        .iter()
        .filter(|&&t| task.candidates[subset[t]].resolved)
        .count();
    resolved as f64 / ties.len() as f64
}

/// The candidate chosen from `subset` (an index into `task.candidates`), the seeded tie-break
/// applied, with every score.
pub fn choose(
    selector: &dyn Selector,
    task: &TaskCandidates,
    subset: &[usize],
    rng: &mut impl Rng,
) -> Option<(usize, Vec<f64>, usize)> {
    if subset.is_empty() {
        return None;
    }
    let scores = selector.scores(task, subset);
    let ties = best(&scores);
    let pick = ties[rng.random_range(0..ties.len())];
    Some((subset[pick], scores, ties.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::candidates::tests::cand;
    use rand::SeedableRng;

    fn patch(v: u32) -> String {
        format!("diff --git a/m.py b/m.py\n@@ -1 +1 @@\n-x = 0\n+x = {v}\n")
    }

    /// 5 candidates: three agree on a wrong fix (1), one right fix (2), one empty.
    fn task() -> TaskCandidates {
        TaskCandidates {
            task_id: "t".into(),
            candidates: vec![
                cand(0, &patch(1), false),
                cand(1, &patch(2), true),
                cand(2, &format!("{}   ", patch(1)), false),
                cand(3, "", false),
                cand(4, &patch(1).replace("x = 1", "x  =  1  # yes"), false),
            ],
        }
    }

    #[test]
    fn oracle_finds_the_resolved_one() {
        let t = task();
        let all: Vec<usize> = (0..5).collect();
        assert_eq!(expected_resolved(&Oracle, &t, &all), 1.0);
        assert_eq!(expected_resolved(&Oracle, &t, &[0, 2, 3]), 0.0);
    }

    #[test]
    fn random_is_the_resolved_share() {
        let t = task();
        let all: Vec<usize> = (0..5).collect();
        assert!((expected_resolved(&Random, &t, &all) - 0.2).abs() < 1e-12);
    }

    #[test]
    fn majority_picks_the_largest_cluster_and_never_the_empty_patch() {
        let t = task();
        let all: Vec<usize> = (0..5).collect();
        assert_eq!(Majority.scores(&t, &all), vec![3.0, 1.0, 3.0, 0.0, 3.0]);
        assert_eq!(expected_resolved(&Majority, &t, &all), 0.0);
        // Without the wrong cluster's majority, the right fix ties with one wrong one.
        assert_eq!(expected_resolved(&Majority, &t, &[0, 1, 3]), 0.5);
        // Against only the empty patch, any change wins.
        assert_eq!(expected_resolved(&Majority, &t, &[1, 3]), 1.0);
    }

    #[test]
    fn choice_is_seeded_and_among_the_best() {
        let t = task();
        let all: Vec<usize> = (0..5).collect();
        let mut a = rand::rngs::StdRng::seed_from_u64(3);
        let mut b = rand::rngs::StdRng::seed_from_u64(3);
        let (ca, _, ties) = choose(&Majority, &t, &all, &mut a).unwrap();
        let (cb, _, _) = choose(&Majority, &t, &all, &mut b).unwrap();
        assert_eq!(ca, cb);
        assert_eq!(ties, 3);
        assert!([0, 2, 4].contains(&ca));
    }

    #[test]
    fn selector_lists_parse() {
        assert_eq!(
            SelectorKind::parse_list("all").unwrap(),
            SelectorKind::ALL.to_vec()
        );
        assert_eq!(
            SelectorKind::parse_list("majority, random").unwrap(),
            vec![SelectorKind::Majority, SelectorKind::Random]
        );
        assert!(SelectorKind::Verifier.build().is_none());
        assert!(SelectorKind::Tests.is_precomputed() && SelectorKind::Hybrid.is_precomputed());
        assert_eq!(
            SelectorKind::parse_list("hybrid,tests").unwrap(),
            vec![SelectorKind::Hybrid, SelectorKind::Tests]
        );
        let err = SelectorKind::parse_list("verifer").unwrap_err().to_string();
        assert!(err.contains("verifer") && err.contains("majority"), "{err}");
    }
}
