//! Resumable runs: the task file and an append-only progress record beside it
//! (`<out>.progress.jsonl`).
//!
//! - The progress record starts with a header (schema version, project, sdist pin, seed and the
//!   options that change results); a resumed run must match it. Then the baseline, then one
//!   line per mutant tried: accepted, or dropped with the reason.
//! - Both files are the run-directory kit's append-only logs ([`dojo_rundir::log`]): a task
//!   line is appended (one `write`, then `fdatasync`) before its progress line; each line is
//!   complete or absent. On open, a torn last line (a kill mid-write) is cut off both files, so
//!   no partial task is ever seen. A task in the task file without its progress line (killed
//!   between the two writes) counts as accepted: the task file is the truth for accepted tasks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use dojo_rundir::JsonlLog;

use serde_json::Value;

use crate::SynthError;
use crate::operators::{Mutation, Operator};

/// Version of the progress record's format.
pub const PROGRESS_SCHEMA_VERSION: u32 = 1;

/// The header: what a resumed run must agree with.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Header {
    pub schema_version: u32,
    pub kind: String,
    pub project: String,
    pub version: String,
    pub repo: String,
    pub sdist_sha256: String,
    pub seed: u64,
    /// The options that change which tasks come out (operators, files, thresholds).
    pub config: Value,
}

/// The baseline as recorded.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BaselineRecord {
    /// Tests that passed in every baseline run (the only ones F2P/P2P are drawn from).
    pub passing: Vec<String>,
    /// Tests excluded: failing, erroring, skipped or flaky at baseline.
    pub excluded: Vec<String>,
    /// Wall-clock seconds of the slowest baseline run.
    pub duration_s: f64,
}

/// One mutant's outcome.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MutantRecord {
    pub id: String,
    pub operator: Operator,
    pub file: String,
    /// `accepted`, or the reason it was dropped (`not_caught`, `duplicate`, `timeout`, ...).
    pub outcome: String,
    /// It broke at least one baseline-passing test (got past the test runs).
    pub survived: bool,
    #[serde(default)]
    pub detail: String,
}

/// One function the model was asked to rewrite: the mutant, or why there is none. Recorded so
/// a resumed run neither asks again nor gets a different answer.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LlmRecord {
    /// [`crate::llm::FunctionSite::key`].
    pub site: String,
    /// `ok`, or the `llm_*` reason it was dropped.
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutation: Option<Mutation>,
}

/// The open state of a run.
pub struct State {
    progress: JsonlLog,
    task_file: JsonlLog,
    pub baseline: Option<BaselineRecord>,
    pub mutants: BTreeMap<String, MutantRecord>,
    /// Model rewrites by site.
    pub llm: BTreeMap<String, LlmRecord>,
    /// Instance ids and rows of the tasks already in the task file.
    pub tasks: Vec<serde_json::Map<String, Value>>,
}

/// `<out>.progress.jsonl`.
pub fn progress_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(".progress.jsonl");
    out.with_file_name(name)
}

impl State {
    /// Open (or start) the run writing to `out`, checking a resumed run against `header`.
    pub fn open(out: &Path, header: &Header) -> Result<State, SynthError> {
        let progress_path = progress_path(out);
        // Checked before anything is opened (opening repairs a torn tail): a file that is not
        // ours is left as it is.
        let has_progress = std::fs::metadata(&progress_path).is_ok_and(|m| m.len() > 0);
        let has_tasks =
            std::fs::read(out).is_ok_and(|b| b.iter().any(|c| !c.is_ascii_whitespace()));
        if !has_progress && has_tasks {
            return Err(SynthError::Input(format!(
                "{} already holds tasks but has no progress record ({}): choose another --out or remove it",
                out.display(),
                progress_path.display()
            )));
        }
        let tasks = JsonlLog::open::<serde_json::Map<String, Value>>(out)?;
        let progress = JsonlLog::open::<Value>(&progress_path)?;
        let lines = progress.records;
        let mut st = State {
            progress: progress.log,
            task_file: tasks.log,
            baseline: None,
            mutants: BTreeMap::new(),
            llm: BTreeMap::new(),
            tasks: tasks.records.into_iter().map(|(_, row)| row).collect(),
        };
        let Some((_, first)) = lines.first() else {
            st.progress.append(header)?;
            return Ok(st);
        };
        let shown = progress_path.display().to_string();
        let bad = |n: usize, why: String| SynthError::Input(format!("{shown} line {n}: {why}"));
        let bad_json =
            |n: usize, e: serde_json::Error| crate::input_from(format!("{shown} line {n}"), e);
        let first: Header = serde_json::from_value(first.clone()).map_err(|e| bad_json(1, e))?;
        if first.schema_version != PROGRESS_SCHEMA_VERSION {
            return Err(bad(
                1,
                format!(
                    "schema_version {} (this dojo writes {PROGRESS_SCHEMA_VERSION})",
                    first.schema_version
                ),
            ));
        }
        if &first != header {
            return Err(SynthError::Input(format!(
                "{} belongs to another run (project {}=={}, seed {}, sdist {}, options {}); resume with the same options or choose another --out",
                shown, first.project, first.version, first.seed, first.sdist_sha256, first.config
            )));
        }
        for (n, v) in lines.into_iter().skip(1) {
            match v.get("kind").and_then(Value::as_str) {
                Some("baseline") => {
                    st.baseline = Some(serde_json::from_value(v).map_err(|e| bad_json(n, e))?)
                }
                Some("mutant") => {
                    let m: MutantRecord = serde_json::from_value(v).map_err(|e| bad_json(n, e))?;
                    st.mutants.insert(m.id.clone(), m);
                }
                Some("llm") => {
                    let r: LlmRecord = serde_json::from_value(v).map_err(|e| bad_json(n, e))?;
                    st.llm.insert(r.site.clone(), r);
                }
                other => return Err(bad(n, format!("unknown record kind {other:?}"))),
            }
        }
        Ok(st)
    }

    pub fn record_baseline(&mut self, b: &BaselineRecord) -> Result<(), SynthError> {
        let mut v = serde_json::to_value(b)
            .map_err(|e| crate::input_from("serialising a progress record", e))?;
        if let Value::Object(m) = &mut v {
            m.insert("kind".into(), "baseline".into());
        }
        self.progress.append(&v)?;
        self.baseline = Some(b.clone());
        Ok(())
    }

    pub fn record_mutant(&mut self, m: &MutantRecord) -> Result<(), SynthError> {
        let mut v = serde_json::to_value(m)
            .map_err(|e| crate::input_from("serialising a progress record", e))?;
        if let Value::Object(o) = &mut v {
            o.insert("kind".into(), "mutant".into());
        }
        self.progress.append(&v)?;
        self.mutants.insert(m.id.clone(), m.clone());
        Ok(())
    }

    pub fn record_llm(&mut self, r: &LlmRecord) -> Result<(), SynthError> {
        let mut v = serde_json::to_value(r)
            .map_err(|e| crate::input_from("serialising a progress record", e))?;
        if let Value::Object(o) = &mut v {
            o.insert("kind".into(), "llm".into());
        }
        self.progress.append(&v)?;
        self.llm.insert(r.site.clone(), r.clone());
        Ok(())
    }

    /// Append a task line (complete, synced) to the task file.
    pub fn write_task(&mut self, row: serde_json::Map<String, Value>) -> Result<(), SynthError> {
        self.task_file.append(&row)?;
        self.tasks.push(row);
        Ok(())
    }

    /// Mutant ids already settled (recorded, or present as a task).
    pub fn done_ids(&self) -> BTreeSet<String> {
        let mut s: BTreeSet<String> = self.mutants.keys().cloned().collect();
        for t in &self.tasks {
            if let Some(id) = t
                .get("synth")
                .and_then(|s| s.get("mutation_id"))
                .and_then(Value::as_str)
            {
                s.insert(id.to_string());
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(seed: u64) -> Header {
        Header {
            schema_version: PROGRESS_SCHEMA_VERSION,
            kind: "run".into(),
            project: "p".into(),
            version: "1".into(),
            repo: "pypi/p".into(),
            sdist_sha256: "ab".into(),
            seed,
            config: serde_json::json!({"max_break_share": 0.5}),
        }
    }

    #[test]
    fn resume_cuts_torn_lines_and_keeps_complete_ones() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("tasks.jsonl");
        let mut st = State::open(&out, &header(1)).unwrap();
        st.record_baseline(&BaselineRecord {
            passing: vec!["t::a".into()],
            ..Default::default()
        })
        .unwrap();
        let mut row = serde_json::Map::new();
        row.insert("instance_id".into(), "x".into());
        row.insert("synth".into(), serde_json::json!({"mutation_id": "m1"}));
        st.write_task(row).unwrap();
        st.record_mutant(&MutantRecord {
            id: "m2".into(),
            operator: Operator::BoolFlip,
            file: "a.py".into(),
            outcome: "not_caught".into(),
            survived: false,
            detail: String::new(),
        })
        .unwrap();
        // A kill mid-write: half a task line and half a progress line.
        let text = std::fs::read_to_string(&out).unwrap();
        std::fs::write(&out, format!("{text}{{\"instance_id\": \"half")).unwrap();
        let p = progress_path(&out);
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::write(&p, format!("{text}{{\"kind\": \"mut")).unwrap();

        let st = State::open(&out, &header(1)).unwrap();
        assert_eq!(st.tasks.len(), 1);
        assert_eq!(st.baseline.as_ref().unwrap().passing, ["t::a"]);
        assert_eq!(st.done_ids().into_iter().collect::<Vec<_>>(), ["m1", "m2"]);
        assert!(std::fs::read_to_string(&out).unwrap().ends_with("}\n"));
        assert!(std::fs::read_to_string(&p).unwrap().ends_with("}\n"));

        let e = State::open(&out, &header(2)).err().unwrap().to_string();
        assert!(e.contains("another run") && e.contains("seed 1"), "{e}");
    }

    #[test]
    fn a_task_file_without_progress_is_not_overwritten() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("tasks.jsonl");
        std::fs::write(&out, "{\"instance_id\": \"mine\"}\n").unwrap();
        let e = State::open(&out, &header(1)).err().unwrap().to_string();
        assert!(e.contains("no progress record"), "{e}");
    }
}
