//! Verifier training data (`dojo curate --verifier`): SWE-Gym-style YES/NO judgement samples.
//!
//! Each graded, non-infrastructure rollout becomes one conversation: the judge prompt over its
//! interaction log (exactly what `dojo select --selector verifier` sends, from
//! [`dojo_reward::judge::judge_messages`], so a verifier trained on these samples sees at
//! selection time what it was trained on), answered by `<judgement>YES</judgement>` when the
//! rollout resolved its task and `<judgement>NO</judgement>` when it did not. Only the answer is
//! trained. As SWE-Gym built its data: at most `cap` successes and `cap` failures per task
//! (fewest turns first, the same order as the SFT cap), then as many failures as successes
//! overall (the larger side is subsampled by a seeded hash order, so every task keeps a fair
//! chance), then the token budget of the format settings, if any.

use std::collections::HashMap;

use dojo_llm::ChatMessage;
use dojo_reward::judge::{JudgeLimits, judge_messages};
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::filters::{Cand, StageReport, cap};

/// The answers the judge is trained to give.
pub const YES: &str = "<judgement>YES</judgement>";
pub const NO: &str = "<judgement>NO</judgement>";

/// Settings of the verifier export.
#[derive(Debug, Clone, Serialize)]
pub struct VerifierConfig {
    /// Successes kept per task, and failures kept per task.
    pub cap: usize,
    /// Characters kept of each observation in the judge's log.
    pub max_observation_chars: usize,
    /// Characters of the whole log.
    pub max_log_chars: usize,
    /// Seed of the balancing subsample.
    pub seed: u64,
}

impl Default for VerifierConfig {
    fn default() -> Self {
        let limits = JudgeLimits::default();
        VerifierConfig {
            cap: 2,
            max_observation_chars: limits.max_observation_chars,
            max_log_chars: limits.max_log_chars,
            seed: 0,
        }
    }
}

/// The judgement samples of `cands`, with what was dropped and why.
pub fn judgement_samples(cands: Vec<Cand>, cfg: &VerifierConfig) -> (Vec<Cand>, StageReport) {
    let mut rep = StageReport::new("verifier", cands.len());
    let (mut yes, mut no) = (Vec::new(), Vec::new());
    for c in cands {
        if c.traj.stop == crate::view::StopKind::InfraError {
            rep.drop("infrastructure_failure");
        } else if !c.traj.graded {
            rep.drop("ungraded");
        } else if c.traj.resolved {
            yes.push(c);
        } else {
            no.push(c);
        }
    }
    let (yes, yes_rep) = cap(yes, cfg.cap);
    let (no, no_rep) = cap(no, cfg.cap);
    for (r, label) in [(yes_rep, "success"), (no_rep, "failure")] {
        for (reason, n) in r.dropped {
            *rep.dropped.entry(format!("{reason}_{label}")).or_default() += n;
        }
    }
    let n = yes.len().min(no.len());
    let (yes, dropped_yes) = subsample(yes, n, cfg.seed);
    let (no, dropped_no) = subsample(no, n, cfg.seed);
    for _ in 0..dropped_yes + dropped_no {
        rep.drop("balance");
    }
    let limits = JudgeLimits {
        max_observation_chars: cfg.max_observation_chars,
        max_log_chars: cfg.max_log_chars,
    };
    let mut kept = Vec::new();
    for c in yes.into_iter().chain(no) {
        match judgement(c, &limits) {
            Ok(c) => kept.push(c),
            Err(_) => rep.drop("unreadable_messages"),
        }
    }
    kept.sort_by(|a, b| {
        (a.traj.task_id.as_str(), a.traj.sample).cmp(&(b.traj.task_id.as_str(), b.traj.sample))
    });
    rep.kept = kept.len();
    (kept, rep)
}

/// Keeps `n` of `cands`, chosen by a seeded hash of each one's id (stable under reordering).
fn subsample(mut cands: Vec<Cand>, n: usize, seed: u64) -> (Vec<Cand>, usize) {
    let key = |c: &Cand| {
        let mut h = Sha256::new();
        h.update(seed.to_le_bytes());
        h.update(c.traj.task_id.as_bytes());
        h.update(c.traj.sample.to_le_bytes());
        h.finalize()
    };
    cands.sort_by_cached_key(key);
    let dropped = cands.len().saturating_sub(n);
    cands.truncate(n);
    (cands, dropped)
}

/// Rewrites a rollout into its judgement conversation.
fn judgement(mut c: Cand, limits: &JudgeLimits) -> Result<Cand, serde_json::Error> {
    let messages: Vec<ChatMessage> = c
        .traj
        .messages
        .iter()
        .map(|m| serde_json::from_value(m.clone()))
        .collect::<Result<_, _>>()?;
    let patch = c.traj.patch.clone().unwrap_or_default();
    let mut judged: Vec<Value> = judge_messages(&messages, &patch, limits)
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()?;
    let answer = if c.traj.resolved { YES } else { NO };
    judged.push(json!({"role": "assistant", "content": answer}));
    let t = &mut c.traj;
    t.messages = judged;
    t.tools = Vec::new();
    t.steps = Vec::new();
    t.summaries = Vec::new();
    t.recorded_tokens = None;
    t.recorded_prompt = None;
    c.n_tokens = None;
    Ok(c)
}

/// Per-task counts of a judgement set: (successes, failures).
pub fn label_counts(cands: &[Cand]) -> HashMap<String, (usize, usize)> {
    let mut out: HashMap<String, (usize, usize)> = HashMap::new();
    for c in cands {
        let e = out.entry(c.traj.task_id.clone()).or_default();
        if c.traj.resolved {
            e.0 += 1;
        } else {
            e.1 += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::tests::{cand, traj};

    #[test]
    fn balanced_capped_judgements_train_only_the_answer() {
        // Task a: 3 successes, 1 failure; task b: 0 successes, 4 failures; task c: ungraded.
        let mut cands = vec![
            cand(traj("a", 0, 1.0, 3)),
            cand(traj("a", 1, 1.0, 1)),
            cand(traj("a", 2, 1.0, 2)),
            cand(traj("a", 3, 0.0, 2)),
        ];
        for s in 0..4 {
            cands.push(cand(traj("b", s, 0.0, 1 + s as usize)));
        }
        let mut ungraded = traj("c", 0, 0.0, 1);
        ungraded.graded = false;
        cands.push(cand(ungraded));

        let (kept, rep) = judgement_samples(cands, &VerifierConfig::default());
        // Capped: a keeps its 2 shortest successes (samples 1, 2) and its failure; b keeps 2
        // failures. Balanced: 2 successes, so 2 of the 3 failures.
        let counts = label_counts(&kept);
        let yes: usize = counts.values().map(|c| c.0).sum();
        let no: usize = counts.values().map(|c| c.1).sum();
        assert_eq!((yes, no), (2, 2));
        assert_eq!(counts["a"].0, 2);
        assert_eq!(rep.input, 9);
        assert_eq!(rep.kept, 4);
        assert_eq!(rep.dropped["ungraded"], 1);
        assert_eq!(rep.dropped["over_per_task_cap_success"], 1);
        assert_eq!(rep.dropped["over_per_task_cap_failure"], 2);
        assert_eq!(rep.dropped["balance"], 1);
        let successes: Vec<i64> = kept
            .iter()
            .filter(|c| c.traj.resolved)
            .map(|c| c.traj.sample)
            .collect();
        assert_eq!(successes, vec![1, 2]);
        for c in &kept {
            let m = &c.traj.messages;
            assert_eq!(m.len(), 3);
            assert_eq!(m[0]["role"], "system");
            assert!(
                m[1]["content"]
                    .as_str()
                    .unwrap()
                    .contains("=== INTERACTION LOG ===")
            );
            let want = if c.traj.resolved { YES } else { NO };
            assert_eq!(m[2], json!({"role": "assistant", "content": want}));
            assert!(c.traj.tools.is_empty() && c.traj.steps.is_empty());
        }
    }

    #[test]
    fn the_balancing_subsample_is_seeded() {
        let input = || {
            let mut v = vec![cand(traj("a", 0, 1.0, 1))];
            v.extend((0..6).map(|t| cand(traj(&format!("t{t}"), 0, 0.0, 1))));
            v
        };
        let ids = |seed| {
            let cfg = VerifierConfig {
                seed,
                ..VerifierConfig::default()
            };
            let (kept, _) = judgement_samples(input(), &cfg);
            kept.iter()
                .map(|c| c.traj.task_id.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(0), ids(0));
        assert_eq!(ids(0).len(), 2);
        let failures: std::collections::BTreeSet<String> =
            (0..20).map(|s| ids(s)[1].clone()).collect();
        assert!(failures.len() > 1, "every seed kept the same failure");
    }
}
