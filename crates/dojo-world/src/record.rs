//! World-model training records captured from real runs: `world.jsonl` beside a run's
//! `trajectories.jsonl`.
//!
//! `dojo rollout` records, for every command that runs Python or tests
//! ([`runs_python_or_tests`]), the SWT context SWE-World's transition model would see with the
//! real stdout, stderr and exit code; and for every graded rollout the SWR context with the real
//! test report section of the grading log ([`test_report_section`]) and the real reward. `dojo
//! curate --world swt|swr` turns them into SFT datasets.
//!
//! Storage follows the trajectory store's crash semantics: a rollout's records are buffered in
//! memory while it runs and written together, as one `write_all` and one `sync_data`, when the
//! rollout has finished, before its trajectory is stored. After a crash the file holds whole
//! batches plus at most one torn line, which [`WorldWriter::open`] truncates; a rollout whose
//! batch is already on disk is not written again when the resumed run repeats it (its key is
//! known). Records are deduplicated by a content hash of context and target (gold-replay's K
//! samples run identical commands), and at most [`CaptureLimits::max_swt_per_trajectory`] SWT
//! records are kept per rollout (the first ones).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use dojo_rundir::clip::{Keep, Unit};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::context::{SwrContext, SwrTarget, SwtContext, SwtTarget};

/// The file name inside a run directory.
pub const WORLD_FILE: &str = "world.jsonl";

/// Schema version of every `world.jsonl` line.
pub const WORLD_SCHEMA_VERSION: u32 = 1;

/// One `world.jsonl` line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorldRecord {
    pub schema_version: u32,
    /// sha256 of the record's kind, context and target: equal records are stored once.
    pub hash: String,
    pub task_id: String,
    pub sample_index: u32,
    #[serde(flatten)]
    pub body: WorldBody,
}

/// What a record holds, by kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WorldBody {
    /// One command that ran Python or tests, with its real result.
    Swt {
        /// Order of the command among the rollout's captured commands (1-based).
        seq: u32,
        context: SwtContext,
        target: SwtTarget,
        /// The real output was cut (sandbox caps or [`CaptureLimits::max_output_chars`]) or the
        /// command timed out: the target is not the whole truth. Curation drops these.
        #[serde(default)]
        incomplete: bool,
    },
    /// One graded rollout, with the real test report and reward.
    Swr {
        context: SwrContext,
        target: SwrTarget,
    },
}

impl WorldRecord {
    /// A record with its content hash filled in.
    pub fn new(task_id: &str, sample_index: u32, body: WorldBody) -> WorldRecord {
        WorldRecord {
            schema_version: WORLD_SCHEMA_VERSION,
            hash: content_hash(&body),
            task_id: task_id.to_string(),
            sample_index,
            body,
        }
    }

    /// `"swt"` or `"swr"`.
    pub fn kind(&self) -> &'static str {
        match self.body {
            WorldBody::Swt { .. } => "swt",
            WorldBody::Swr { .. } => "swr",
        }
    }
}

/// sha256 over the body without the sequence number (the same command run later with the same
/// state and result is the same sample).
fn content_hash(body: &WorldBody) -> String {
    let canonical = match body {
        WorldBody::Swt {
            context, target, ..
        } => serde_json::json!(["swt", context, target]),
        WorldBody::Swr { context, target } => serde_json::json!(["swr", context, target]),
    };
    let mut h = Sha256::new();
    h.update(canonical.to_string().as_bytes());
    hex::encode(h.finalize())
}

// ---------------------------------------------------------------------------------------------
// Which commands are simulated (their files: [`crate::observe`])

/// Whether a shell command runs Python or tests: exactly the commands the simulated
/// environment hands to the transition model ([`crate::classify`]'s `Python` class), so the
/// records a model is trained on and the commands it is later asked about are chosen by one
/// rule. (SWE-World's own capture rule, "names `python*`/`pytest`, uses no `git`, installs
/// nothing", differs in two ways: `git stash && pytest` and `pip install -e . && pytest` count
/// here, since the simulator answers them as one script.) Inside a workspace, capture and
/// simulation both use [`crate::observe::classify_in`], which also recognises programs with a
/// Python shebang line; this text-only form cannot read them.
pub fn runs_python_or_tests(command: &str) -> bool {
    matches!(
        crate::classify::classify(command),
        crate::classify::CommandClass::Python(_)
    )
}

/// The test report section of a grading log, as SWE-World's SWR targets use it: the lines between
/// the harness's start and end marker lines, from pytest's "test session starts" line when there
/// is one. The rest of each marker's line is not the tests' output: the harness prints its
/// markers under `set -x` (`+ : '>>>>> End Test Output'`), so that text is the shell's trace.
/// `None` when the log has no end marker (timed out or unmarked logs are not targets).
pub fn test_report_section(log: &str, start_marker: &str, end_marker: &str) -> Option<String> {
    let after_start = log.split_once(start_marker)?.1;
    let (section, _) = after_start.split_once(end_marker)?;
    let section = section.split_once('\n').map_or("", |(_, rest)| rest);
    let section = &section[..section.rfind('\n').unwrap_or(0)];
    let section = match section.find("test session starts") {
        Some(i) => {
            let line_start = section[..i].rfind('\n').map_or(0, |n| n + 1);
            &section[line_start..]
        }
        None => section,
    };
    let section = section.trim_matches('\n');
    (!section.trim().is_empty()).then(|| section.to_string())
}

/// At most `max` characters of `text` (its head), unmarked (the record says it is incomplete),
/// and whether it was cut.
pub fn clip_chars(text: &str, max: usize) -> (String, bool) {
    let c = dojo_rundir::clip::cut(text, max, Unit::Chars, Keep::Head);
    (c.head.to_string(), c.is_cut())
}

// ---------------------------------------------------------------------------------------------
// Capture limits and the writer

/// Bounds on what is captured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CaptureLimits {
    /// SWT records per rollout at most (the first commands). Curation applies its own, lower
    /// cap (SWE-World's 6) on top.
    pub max_swt_per_trajectory: usize,
    /// Executed files per command at most (SWE-World: 20).
    pub max_files: usize,
    /// Characters kept of each file version; longer contents keep their head (prompts cut far
    /// earlier anyway).
    pub max_file_chars: usize,
    /// Characters kept of stdout and of stderr; longer output marks the record incomplete.
    pub max_output_chars: usize,
}

impl CaptureLimits {
    /// How much of the workspace a record reads (the same bounds the model is then asked
    /// with when a simulated environment shares the read).
    pub fn read_limits(&self) -> crate::observe::ReadLimits {
        crate::observe::ReadLimits {
            max_files: self.max_files,
            max_file_chars: self.max_file_chars,
        }
    }
}

impl Default for CaptureLimits {
    fn default() -> Self {
        CaptureLimits {
            max_swt_per_trajectory: 16,
            max_files: 20,
            max_file_chars: 100_000,
            max_output_chars: 64_000,
        }
    }
}

/// A `world.jsonl` problem, naming the file (and line).
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("world records {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The log itself: damage before the last line, a failed append.
    #[error("world records {0}")]
    Log(#[from] dojo_rundir::RunDirError),
}

/// What one [`WorldWriter::write_rollout`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteStats {
    pub swt: usize,
    pub swr: usize,
    /// Records already in the file (same content hash).
    pub duplicates: usize,
    /// SWT records over the per-rollout cap.
    pub capped: usize,
    /// The rollout's batch was already on disk (a resumed run repeated it).
    pub already_written: bool,
}

struct State {
    log: dojo_rundir::JsonlLog,
    hashes: HashSet<String>,
    rollouts: HashSet<(String, u32)>,
    pending: HashMap<(String, u32), Vec<WorldRecord>>,
}

/// The append-only `world.jsonl` of one run directory, shared by its concurrent rollouts.
pub struct WorldWriter {
    path: PathBuf,
    limits: CaptureLimits,
    state: Mutex<State>,
}

impl WorldWriter {
    /// Opens (or creates) `path`, truncating a torn last line left by a crash.
    pub fn open(path: &Path, limits: CaptureLimits) -> Result<WorldWriter, RecordError> {
        let opened = dojo_rundir::JsonlLog::open::<WorldRecord>(path)?;
        let mut hashes = HashSet::new();
        let mut rollouts = HashSet::new();
        for (_, r) in opened.records {
            hashes.insert(r.hash);
            rollouts.insert((r.task_id, r.sample_index));
        }
        Ok(WorldWriter {
            path: path.to_path_buf(),
            limits,
            state: Mutex::new(State {
                log: opened.log,
                hashes,
                rollouts,
                pending: HashMap::new(),
            }),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn limits(&self) -> &CaptureLimits {
        &self.limits
    }

    /// Buffers an SWT record of a running rollout (written by [`WorldWriter::write_rollout`]).
    pub fn push_pending(&self, record: WorldRecord) {
        if let Ok(mut s) = self.state.lock() {
            s.pending
                .entry((record.task_id.clone(), record.sample_index))
                .or_default()
                .push(record);
        }
    }

    /// Drops what a rollout buffered (it ended in an infrastructure failure; its commands are
    /// still real, but the rollout runs again on resume, so they would be captured twice).
    pub fn discard_pending(&self, task_id: &str, sample_index: u32) {
        if let Ok(mut s) = self.state.lock() {
            s.pending.remove(&(task_id.to_string(), sample_index));
        }
    }

    /// Writes a finished rollout's buffered SWT records plus its SWR record (if any) as one
    /// fsynced batch, after the per-rollout cap and deduplication.
    pub fn write_rollout(
        &self,
        task_id: &str,
        sample_index: u32,
        swr: Option<WorldRecord>,
    ) -> Result<WriteStats, RecordError> {
        let io = |source| RecordError::Io {
            path: self.path.clone(),
            source,
        };
        let mut stats = WriteStats::default();
        let Ok(mut s) = self.state.lock() else {
            return Err(io(std::io::Error::other("world writer lock poisoned")));
        };
        let key = (task_id.to_string(), sample_index);
        let pending = s.pending.remove(&key).unwrap_or_default();
        if s.rollouts.contains(&key) {
            stats.already_written = true;
            return Ok(stats);
        }
        let mut batch = Vec::new();
        let mut new_hashes = Vec::new();
        let mut swt_kept = 0;
        for rec in pending.into_iter().chain(swr) {
            let is_swt = matches!(rec.body, WorldBody::Swt { .. });
            if is_swt && swt_kept >= self.limits.max_swt_per_trajectory {
                stats.capped += 1;
                continue;
            }
            if s.hashes.contains(&rec.hash) || new_hashes.contains(&rec.hash) {
                stats.duplicates += 1;
                continue;
            }
            new_hashes.push(rec.hash.clone());
            if is_swt {
                swt_kept += 1;
                stats.swt += 1;
            } else {
                stats.swr += 1;
            }
            batch.push(rec);
        }
        s.log.append_all(&batch)?;
        s.hashes.extend(new_hashes);
        // A rollout with nothing new is not marked: it left no line to find on resume either.
        if stats.swt + stats.swr > 0 {
            s.rollouts.insert(key);
        }
        Ok(stats)
    }
}

/// Every record of a `world.jsonl`; a torn last line (crash) is ignored, a damaged earlier line
/// is an error naming the line.
pub fn read_world_records(path: &Path) -> Result<Vec<WorldRecord>, RecordError> {
    Ok(dojo_rundir::log::read(path)?
        .into_iter()
        .map(|(_, r)| r)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn python_and_test_commands_are_recognised() {
        for yes in [
            "python reproduce.py",
            "cd /testbed && python3 -m pytest tests/test_a.py -q",
            "pytest -rA tests",
            "python3.11 -c 'print(1)'",
            "PYTHONPATH=. py.test x",
            "timeout 60 python3 repro.py",
            "uv run pytest -q",
            "ls && /usr/bin/python3 x.py",
            "echo $(python -V)",
        ] {
            assert!(runs_python_or_tests(yes), "{yes}");
        }
        for no in [
            "ls",
            "grep -rn python src",
            "cat python_utils.py",
            "pip install pytest",
            "cat mypython3.txt",
            "echo python",
            "ls tests && cat setup.py",
        ] {
            assert!(!runs_python_or_tests(no), "{no}");
        }
    }

    proptest::proptest! {
        /// Any command line is classified without panicking.
        #[test]
        fn any_command_is_handled(cmd in proptest::prelude::any::<String>()) {
            let _ = runs_python_or_tests(&cmd);
        }
    }

    #[test]
    fn report_section_starts_at_the_session_line() {
        let log = "+ pytest -rA\n>>>>> Start Test Output\nnoise\n===== test session starts =====\ncollected 1 item\nPASSED a\n>>>>> End Test Output\n";
        assert_eq!(
            test_report_section(log, ">>>>> Start Test Output", ">>>>> End Test Output").unwrap(),
            "===== test session starts =====\ncollected 1 item\nPASSED a"
        );
        // Under `set -x` the marker lines carry the shell's trace around the marker.
        let traced = "+ : '>>>>> Start Test Output'\n1 passed\n+ : '>>>>> End Test Output'\n";
        assert_eq!(
            test_report_section(traced, ">>>>> Start Test Output", ">>>>> End Test Output")
                .unwrap(),
            "1 passed"
        );
        let timed_out = ">>>>> Start Test Output\n=== test session starts ===\n";
        assert!(
            test_report_section(
                timed_out,
                ">>>>> Start Test Output",
                ">>>>> End Test Output"
            )
            .is_none()
        );
    }

    fn swt(task: &str, sample: u32, cmd: &str) -> WorldRecord {
        WorldRecord::new(
            task,
            sample,
            WorldBody::Swt {
                seq: 1,
                context: SwtContext {
                    task_id: task.into(),
                    problem_statement: "p".into(),
                    command: cmd.into(),
                    executed_files: vec![],
                    agent_patch: String::new(),
                    gold_patch: None,
                    analysis: None,
                },
                target: SwtTarget {
                    stdout: "o".into(),
                    stderr: String::new(),
                    exit_code: 0,
                },
                incomplete: false,
            },
        )
    }

    #[test]
    fn writer_caps_dedups_and_resumes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(WORLD_FILE);
        let limits = CaptureLimits {
            max_swt_per_trajectory: 2,
            ..CaptureLimits::default()
        };
        let w = WorldWriter::open(&path, limits.clone()).unwrap();
        for cmd in ["python a.py", "python a.py", "python b.py", "python c.py"] {
            w.push_pending(swt("t", 0, cmd));
        }
        let s = w.write_rollout("t", 0, None).unwrap();
        assert_eq!((s.swt, s.duplicates, s.capped), (2, 1, 1));
        // Sample 1 ran the same commands: all duplicates.
        w.push_pending(swt("t", 1, "python a.py"));
        let s = w.write_rollout("t", 1, None).unwrap();
        assert_eq!((s.swt, s.duplicates), (0, 1));
        drop(w);
        // A torn tail is truncated on open; a rollout already on disk is not written again.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"schema_version\":1,\"ha")
            .unwrap();
        let w = WorldWriter::open(&path, limits).unwrap();
        w.push_pending(swt("t", 0, "python z.py"));
        assert!(w.write_rollout("t", 0, None).unwrap().already_written);
        let recs = read_world_records(&path).unwrap();
        assert_eq!(recs.len(), 2);
        assert!(
            recs.iter()
                .all(|r| r.kind() == "swt" && r.schema_version == 1)
        );
    }

    #[test]
    fn a_damaged_middle_line_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(WORLD_FILE);
        let good = serde_json::to_string(&swt("t", 0, "python a.py")).unwrap();
        std::fs::write(&path, format!("{good}\nnot json\n{good}\n")).unwrap();
        let e = read_world_records(&path).unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
    }
}
