//! How far a simulated environment is from the real one, measured where both answered: in
//! `shadow` mode every command that runs Python is executed for real and also predicted by the
//! transition model, and every graded rollout is also judged by the reward model.
//!
//! Per command ([`TransitionDrift`]): exit-code agreement, agreement of the test statuses that
//! dojo-grade's own log parsers read from both outputs (no second parser to drift on its own),
//! and a normalised edit similarity of the rest of the text. Per rollout: the reward model's
//! verdict against the real one, accumulated in a [`Confusion`] matrix (resolved = positive).
//! [`DriftSummary`] adds these up for a run report; model failures are counted apart, never
//! folded into disagreement.

use dojo_grade::parsers::{Parser, StatusMap};
use dojo_rundir::clip::{self, Unit};
use serde::{Deserialize, Serialize};

/// Version of the serialized [`DriftSummary`] and [`TransitionDrift`] layout.
pub const DRIFT_SCHEMA_VERSION: u32 = 1;

/// Characters of each side compared by the text distance: edit distance is quadratic, and the
/// head of an output carries most of its meaning (tracebacks' tails are caught by the status
/// and exit-code measures).
pub const TEXT_CAP_CHARS: usize = 4096;

/// One command's output, real or predicted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observed {
    pub stdout: String,
    pub stderr: String,
    /// `None`: killed by a signal or timed out (never equal to a predicted code).
    pub exit_code: Option<i32>,
}

/// Agreement of parsed test statuses between two outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StatusAgreement {
    /// Tests that either output reports (the union of both status maps).
    pub compared: u64,
    /// Tests reported by both with the same status.
    pub agreeing: u64,
}

impl StatusAgreement {
    /// Compare two status maps over the union of their test ids; a test missing on one side
    /// disagrees.
    pub fn between(real: &StatusMap, sim: &StatusMap) -> StatusAgreement {
        let mut compared = 0;
        let mut agreeing = 0;
        for (id, status) in real.iter() {
            compared += 1;
            if sim.get(id) == Some(status) {
                agreeing += 1;
            }
        }
        compared += sim.iter().filter(|(id, _)| !real.contains(id)).count() as u64;
        StatusAgreement { compared, agreeing }
    }

    pub fn rate(&self) -> Option<f64> {
        ratio(self.agreeing, self.compared)
    }
}

/// The drift of one simulated command against its real execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransitionDrift {
    pub real_exit_code: Option<i32>,
    pub sim_exit_code: Option<i32>,
    pub exit_code_agrees: bool,
    /// `None` when neither output has a line the parser reads as a test status.
    pub tests: Option<StatusAgreement>,
    /// Normalised Levenshtein similarity of `stdout + stderr`, each side cut to
    /// [`TEXT_CAP_CHARS`]: 1.0 identical, 0.0 nothing in common.
    pub text_similarity: f64,
}

/// Measure one prediction against reality, reading test statuses with `parser` (the task's
/// grading parser).
pub fn compare_transition(real: &Observed, sim: &Observed, parser: Parser) -> TransitionDrift {
    let real_text = format!("{}{}", real.stdout, real.stderr);
    let sim_text = format!("{}{}", sim.stdout, sim.stderr);
    let real_map = parser.parse(&real_text);
    let sim_map = parser.parse(&sim_text);
    let tests = if real_map.is_empty() && sim_map.is_empty() {
        None
    } else {
        Some(StatusAgreement::between(&real_map, &sim_map))
    };
    TransitionDrift {
        real_exit_code: real.exit_code,
        sim_exit_code: sim.exit_code,
        exit_code_agrees: real.exit_code.is_some() && real.exit_code == sim.exit_code,
        tests,
        text_similarity: text_similarity(&real_text, &sim_text),
    }
}

/// Normalised Levenshtein similarity of the first [`TEXT_CAP_CHARS`] characters of each side.
pub fn text_similarity(a: &str, b: &str) -> f64 {
    let a = clip::head(a, TEXT_CAP_CHARS, Unit::Chars);
    let b = clip::head(b, TEXT_CAP_CHARS, Unit::Chars);
    strsim::normalized_levenshtein(a, b)
}

/// Reward-model verdicts against real grading; "resolved" is the positive class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Confusion {
    /// Predicted resolved, really resolved.
    pub true_positive: u64,
    /// Predicted resolved, really not.
    pub false_positive: u64,
    /// Predicted unresolved, really unresolved.
    pub true_negative: u64,
    /// Predicted unresolved, really resolved.
    pub false_negative: u64,
}

impl Confusion {
    pub fn record(&mut self, predicted: bool, real: bool) {
        match (predicted, real) {
            (true, true) => self.true_positive += 1,
            (true, false) => self.false_positive += 1,
            (false, false) => self.true_negative += 1,
            (false, true) => self.false_negative += 1,
        }
    }
    pub fn total(&self) -> u64 {
        self.true_positive + self.false_positive + self.true_negative + self.false_negative
    }
    pub fn accuracy(&self) -> Option<f64> {
        ratio(self.true_positive + self.true_negative, self.total())
    }
    pub fn precision(&self) -> Option<f64> {
        ratio(self.true_positive, self.true_positive + self.false_positive)
    }
    pub fn recall(&self) -> Option<f64> {
        ratio(self.true_positive, self.true_positive + self.false_negative)
    }
    /// Harmonic mean of precision and recall; `None` when either is undefined, 0 when both are 0.
    pub fn f1(&self) -> Option<f64> {
        let (p, r) = (self.precision()?, self.recall()?);
        Some(if p + r == 0.0 {
            0.0
        } else {
            2.0 * p * r / (p + r)
        })
    }
    pub fn merge(&mut self, o: &Confusion) {
        self.true_positive += o.true_positive;
        self.false_positive += o.false_positive;
        self.true_negative += o.true_negative;
        self.false_negative += o.false_negative;
    }
}

fn ratio(n: u64, d: u64) -> Option<f64> {
    (d > 0).then(|| n as f64 / d as f64)
}

/// Drift figures of a run, summed over its rollouts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriftSummary {
    pub schema_version: u32,
    /// Commands both executed and predicted.
    pub transitions: u64,
    pub exit_code_agreeing: u64,
    /// Test statuses summed over the commands whose outputs had any.
    pub tests: StatusAgreement,
    /// Commands with test statuses on either side.
    pub transitions_with_tests: u64,
    /// Sum of text similarities (mean = sum / transitions).
    pub text_similarity_sum: f64,
    /// Predictions that failed (model error, timeout, unparseable reply): infrastructure,
    /// counted here and left out of every agreement figure.
    pub transition_failures: u64,
    pub reward: Confusion,
    /// Reward predictions that failed (infrastructure), left out of the confusion matrix.
    pub reward_failures: u64,
}

impl Default for DriftSummary {
    fn default() -> Self {
        DriftSummary {
            schema_version: DRIFT_SCHEMA_VERSION,
            transitions: 0,
            exit_code_agreeing: 0,
            tests: StatusAgreement::default(),
            transitions_with_tests: 0,
            text_similarity_sum: 0.0,
            transition_failures: 0,
            reward: Confusion::default(),
            reward_failures: 0,
        }
    }
}

impl DriftSummary {
    pub fn add_transition(&mut self, d: &TransitionDrift) {
        self.transitions += 1;
        self.exit_code_agreeing += u64::from(d.exit_code_agrees);
        if let Some(t) = d.tests {
            self.transitions_with_tests += 1;
            self.tests.compared += t.compared;
            self.tests.agreeing += t.agreeing;
        }
        self.text_similarity_sum += d.text_similarity;
    }
    pub fn merge(&mut self, o: &DriftSummary) {
        self.transitions += o.transitions;
        self.exit_code_agreeing += o.exit_code_agreeing;
        self.tests.compared += o.tests.compared;
        self.tests.agreeing += o.tests.agreeing;
        self.transitions_with_tests += o.transitions_with_tests;
        self.text_similarity_sum += o.text_similarity_sum;
        self.transition_failures += o.transition_failures;
        self.reward.merge(&o.reward);
        self.reward_failures += o.reward_failures;
    }
    pub fn exit_code_agreement(&self) -> Option<f64> {
        ratio(self.exit_code_agreeing, self.transitions)
    }
    pub fn mean_text_similarity(&self) -> Option<f64> {
        (self.transitions > 0).then(|| self.text_similarity_sum / self.transitions as f64)
    }
    pub fn is_empty(&self) -> bool {
        self.transitions == 0
            && self.transition_failures == 0
            && self.reward.total() == 0
            && self.reward_failures == 0
    }

    /// A Markdown section for run reports: every figure with its counts.
    pub fn to_markdown(&self) -> String {
        let f = |x: Option<f64>| x.map_or("n/a".to_string(), |v| format!("{v:.3}"));
        let c = &self.reward;
        let mut s = String::from(
            "## Simulation drift (world model vs real runs)\n\n| measure | value | counts |\n|---|---|---|\n",
        );
        s += &format!(
            "| SWT exit-code agreement | {} | {}/{} |\n",
            f(self.exit_code_agreement()),
            self.exit_code_agreeing,
            self.transitions
        );
        s += &format!(
            "| SWT test-status agreement | {} | {}/{} tests in {} commands |\n",
            f(self.tests.rate()),
            self.tests.agreeing,
            self.tests.compared,
            self.transitions_with_tests
        );
        s += &format!(
            "| SWT text similarity (mean) | {} | {} commands |\n",
            f(self.mean_text_similarity()),
            self.transitions
        );
        s += &format!(
            "| SWT failures (infrastructure) | {} | |\n",
            self.transition_failures
        );
        s += &format!(
            "| SWR accuracy | {} | {}/{} |\n",
            f(c.accuracy()),
            c.true_positive + c.true_negative,
            c.total()
        );
        s += &format!(
            "| SWR precision | {} | {}/{} |\n",
            f(c.precision()),
            c.true_positive,
            c.true_positive + c.false_positive
        );
        s += &format!(
            "| SWR recall | {} | {}/{} |\n",
            f(c.recall()),
            c.true_positive,
            c.true_positive + c.false_negative
        );
        s += &format!("| SWR F1 | {} | |\n", f(c.f1()));
        s += &format!(
            "| SWR confusion (TP/FP/TN/FN) | {}/{}/{}/{} | |\n",
            c.true_positive, c.false_positive, c.true_negative, c.false_negative
        );
        s += &format!(
            "| SWR failures (infrastructure) | {} | |\n",
            self.reward_failures
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(stdout: &str, stderr: &str, code: Option<i32>) -> Observed {
        Observed {
            stdout: stdout.into(),
            stderr: stderr.into(),
            exit_code: code,
        }
    }

    #[test]
    fn confusion_by_hand() {
        // 3 TP, 1 FP, 4 TN, 2 FN.
        let mut c = Confusion::default();
        for (p, r, n) in [
            (true, true, 3),
            (true, false, 1),
            (false, false, 4),
            (false, true, 2),
        ] {
            for _ in 0..n {
                c.record(p, r);
            }
        }
        assert_eq!(c.total(), 10);
        assert_eq!(c.accuracy(), Some(0.7));
        assert_eq!(c.precision(), Some(0.75));
        assert_eq!(c.recall(), Some(0.6));
        // 2·0.75·0.6 / 1.35 = 0.9 / 1.35 = 2/3.
        assert!((c.f1().unwrap() - 2.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn confusion_edge_cases() {
        let empty = Confusion::default();
        assert_eq!(empty.accuracy(), None);
        assert_eq!(empty.precision(), None);
        assert_eq!(empty.f1(), None);
        // Never predicts resolved: precision undefined, recall 0.
        let c = Confusion {
            false_negative: 2,
            true_negative: 1,
            ..Default::default()
        };
        assert_eq!(c.precision(), None);
        assert_eq!(c.recall(), Some(0.0));
        assert_eq!(c.f1(), None);
        let c = Confusion {
            false_positive: 1,
            false_negative: 1,
            ..Default::default()
        };
        assert_eq!(c.f1(), Some(0.0));
    }

    #[test]
    fn statuses_over_the_union() {
        let real = "PASSED t.py::a\nFAILED t.py::b - boom\nPASSED t.py::c\n";
        let sim = "PASSED t.py::a\nPASSED t.py::b\nPASSED t.py::d\n";
        let d = compare_transition(
            &obs(real, "", Some(1)),
            &obs(sim, "", Some(0)),
            Parser::Pytest,
        );
        // Union {a, b, c, d}; only a agrees.
        assert_eq!(
            d.tests,
            Some(StatusAgreement {
                compared: 4,
                agreeing: 1
            })
        );
        assert!(!d.exit_code_agrees);
        assert_eq!(d.tests.unwrap().rate(), Some(0.25));
    }

    #[test]
    fn identical_outputs_agree_fully() {
        let o = obs("hello\n", "warn\n", Some(0));
        let d = compare_transition(&o, &o, Parser::Pytest);
        assert!(d.exit_code_agrees);
        assert_eq!(d.tests, None);
        assert_eq!(d.text_similarity, 1.0);
    }

    #[test]
    fn a_killed_command_never_agrees() {
        let d = compare_transition(&obs("", "", None), &obs("", "", None), Parser::Pytest);
        assert!(!d.exit_code_agrees);
    }

    #[test]
    fn text_similarity_by_hand() {
        // kitten → sitting: distance 3, longer side 7.
        assert!((text_similarity("kitten", "sitting") - (1.0 - 3.0 / 7.0)).abs() < 1e-12);
        assert_eq!(text_similarity("", ""), 1.0);
        assert_eq!(text_similarity("abc", ""), 0.0);
        // Only the first TEXT_CAP_CHARS characters count.
        let a = "x".repeat(TEXT_CAP_CHARS) + "tail one";
        let b = "x".repeat(TEXT_CAP_CHARS) + "another";
        assert_eq!(text_similarity(&a, &b), 1.0);
    }

    #[test]
    fn summary_adds_and_renders() {
        let mut s = DriftSummary::default();
        s.add_transition(&TransitionDrift {
            real_exit_code: Some(0),
            sim_exit_code: Some(0),
            exit_code_agrees: true,
            tests: Some(StatusAgreement {
                compared: 4,
                agreeing: 3,
            }),
            text_similarity: 0.5,
        });
        s.add_transition(&TransitionDrift {
            real_exit_code: Some(1),
            sim_exit_code: Some(0),
            exit_code_agrees: false,
            tests: None,
            text_similarity: 0.25,
        });
        s.transition_failures += 1;
        s.reward.record(true, true);
        s.reward.record(true, false);
        let mut total = DriftSummary::default();
        total.merge(&s);
        assert_eq!(total, s);
        assert_eq!(s.exit_code_agreement(), Some(0.5));
        assert_eq!(s.mean_text_similarity(), Some(0.375));
        assert_eq!(s.tests.rate(), Some(0.75));
        let md = s.to_markdown();
        assert!(
            md.contains("| SWT exit-code agreement | 0.500 | 1/2 |"),
            "{md}"
        );
        assert!(md.contains("| SWT test-status agreement | 0.750 | 3/4 tests in 1 commands |"));
        assert!(md.contains("| SWR precision | 0.500 | 1/2 |"));
        assert!(md.contains("| SWR recall | 1.000 | 1/1 |"));
        assert!(md.contains("| SWT failures (infrastructure) | 1 |"));
        let back: DriftSummary = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }
}
