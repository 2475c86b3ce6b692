//! What a run did, per operator: candidates proposed, mutants that parsed, mutants tried,
//! mutants that broke at least one baseline test ("survived" the test runs as task
//! candidates), tasks validated and written, and the yield (validated / tried). Computed from
//! the progress record, so a resumed run reports the whole run, not only its last session.

use std::collections::{BTreeMap, BTreeSet};

use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};

use serde_json::Value;

use crate::operators::Operator;
use crate::state::State;

/// Counts of one operator.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct OpCounts {
    pub candidates: usize,
    pub parsed: usize,
    pub tried: usize,
    pub survived: usize,
    pub validated: usize,
}

/// The whole run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Summary {
    pub project: String,
    pub per_operator: BTreeMap<Operator, OpCounts>,
    /// Why mutants were dropped, with counts (`not_caught`, `duplicate`, `timeout`, ...).
    pub dropped: BTreeMap<String, usize>,
    pub source_files: usize,
    /// Source files that did not parse (skipped), with the reason.
    pub unparseable_files: Vec<String>,
    pub baseline_passing: usize,
    pub baseline_excluded: usize,
    /// Tasks in the output file.
    pub tasks: usize,
    /// Mutants tried in this session, and its wall-clock seconds.
    pub tried_this_session: usize,
    pub elapsed_s: f64,
}

impl Summary {
    pub fn totals(&self) -> OpCounts {
        let mut t = OpCounts::default();
        for c in self.per_operator.values() {
            t.candidates += c.candidates;
            t.parsed += c.parsed;
            t.tried += c.tried;
            t.survived += c.survived;
            t.validated += c.validated;
        }
        t
    }

    /// The table printed at the end of a run.
    pub fn table(&self) -> String {
        let mut t = Table::new();
        t.load_style(UTF8_FULL_CONDENSED);
        t.set_header([
            "operator",
            "candidates",
            "parsed",
            "tried",
            "survived",
            "validated",
            "yield",
        ]);
        let row = |name: &str, c: &OpCounts| {
            vec![
                name.to_string(),
                c.candidates.to_string(),
                c.parsed.to_string(),
                c.tried.to_string(),
                c.survived.to_string(),
                c.validated.to_string(),
                if c.tried == 0 {
                    "-".to_string()
                } else {
                    format!("{:.0}%", 100.0 * c.validated as f64 / c.tried as f64)
                },
            ]
        };
        for (op, c) in &self.per_operator {
            t.add_row(row(op.name(), c));
        }
        t.add_row(row("total", &self.totals()));
        let mut s = format!("{t}\n");
        if !self.dropped.is_empty() {
            let d: Vec<String> = self
                .dropped
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            s.push_str(&format!("dropped: {}\n", d.join(", ")));
        }
        s.push_str(&format!(
            "baseline: {} passing test(s) used, {} excluded (failing, skipped or flaky); {} source file(s){}\n",
            self.baseline_passing,
            self.baseline_excluded,
            self.source_files,
            if self.unparseable_files.is_empty() {
                String::new()
            } else {
                format!(", {} unparseable (skipped)", self.unparseable_files.len())
            }
        ));
        s
    }
}

impl Summary {
    /// What `dojo synth` prints after a run into `out` (every line ends in a newline): the
    /// table, the skipped files, the tasks and the session's pace, and a hint when no mutant
    /// made a task.
    pub fn report(&self, out: &std::path::Path) -> String {
        let mut s = self.table();
        for u in &self.unparseable_files {
            s.push_str(&format!("skipped: {u}\n"));
        }
        let mins = self.elapsed_s / 60.0;
        let per_min = if mins > 0.0 {
            self.tried_this_session as f64 / mins
        } else {
            0.0
        };
        s.push_str(&format!(
            "{}: {} task(s) in {} ({} mutant(s) tried this session in {:.1} s: {per_min:.1} candidates/min)\n",
            self.project,
            self.tasks,
            out.display(),
            self.tried_this_session,
            self.elapsed_s,
        ));
        if self.totals().tried > 0 && self.tasks == 0 {
            s.push_str("no mutant made a valid task: see the dropped counts above\n");
        }
        s
    }
}

pub(crate) fn summary_from(
    state: &State,
    fm: &BTreeMap<Operator, (usize, usize)>,
    project: &str,
) -> Summary {
    let mut s = Summary {
        project: project.to_string(),
        tasks: state.tasks.len(),
        ..Default::default()
    };
    for (op, (cands, parsed)) in fm {
        let c = s.per_operator.entry(*op).or_default();
        c.candidates = *cands;
        c.parsed = *parsed;
    }
    let mut task_ids: BTreeSet<String> = BTreeSet::new();
    for t in &state.tasks {
        let syn = t.get("synth");
        let id = syn
            .and_then(|s| s.get("mutation_id"))
            .and_then(Value::as_str);
        let op = syn
            .and_then(|s| s.get("operator"))
            .and_then(Value::as_str)
            .and_then(Operator::by_name);
        if let (Some(id), Some(op)) = (id, op) {
            task_ids.insert(id.to_string());
            let c = s.per_operator.entry(op).or_default();
            c.tried += 1;
            c.survived += 1;
            c.validated += 1;
        }
    }
    for m in state.mutants.values() {
        if task_ids.contains(&m.id) {
            continue;
        }
        let c = s.per_operator.entry(m.operator).or_default();
        c.tried += 1;
        if m.survived {
            c.survived += 1;
        }
        if m.outcome != "accepted" {
            *s.dropped.entry(m.outcome.clone()).or_default() += 1;
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_a_row_per_operator_and_a_total() {
        let mut s = Summary::default();
        s.per_operator.insert(
            Operator::CompareFlip,
            OpCounts {
                candidates: 10,
                parsed: 10,
                tried: 4,
                survived: 3,
                validated: 2,
            },
        );
        s.per_operator
            .insert(Operator::SwapArgs, OpCounts::default());
        s.dropped.insert("not_caught".into(), 2);
        let t = s.table();
        assert!(t.contains("compare_flip") && t.contains("50%"), "{t}");
        assert!(t.contains("swap_args") && t.contains("total"), "{t}");
        assert!(t.contains("dropped: not_caught 2"), "{t}");
        assert_eq!(s.totals().validated, 2);
    }

    #[test]
    fn report_ends_with_the_pace_and_a_hint() {
        let mut s = Summary {
            project: "demo".into(),
            unparseable_files: vec!["bad.py: syntax".into()],
            tried_this_session: 3,
            elapsed_s: 30.0,
            ..Default::default()
        };
        s.per_operator.insert(
            Operator::CompareFlip,
            OpCounts {
                tried: 3,
                ..Default::default()
            },
        );
        let r = s.report(std::path::Path::new("/t.jsonl"));
        let tail = r.strip_prefix(&s.table()).unwrap();
        insta::assert_snapshot!(tail, @r"
        skipped: bad.py: syntax
        demo: 0 task(s) in /t.jsonl (3 mutant(s) tried this session in 30.0 s: 6.0 candidates/min)
        no mutant made a valid task: see the dropped counts above
        ");
    }
}
