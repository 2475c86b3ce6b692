//! Crash-resume: a real child process runs the rollout scheduler, is killed with SIGKILL mid-run, and
//! the same run started again must finish with every (task, sample) stored exactly once, every line
//! valid, and the records written before the kill kept byte for byte.
//!
//! The child is this test binary itself, re-executed with `DOJO_CRASH_CHILD` set, running the
//! scheduler with a runner that sleeps instead of calling a model (the scheduler and store are what is
//! under test; the runner's insides are irrelevant to crash safety).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use dojo_rollout::{Job, Key, Keyed, RolloutRecord, Runner, SampleOutcome, SchedulerConfig, Store};
use serde::{Deserialize, Serialize};

const TASKS: usize = 8;
const SAMPLES: u32 = 3;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Rec {
    task_id: String,
    sample_index: u32,
    /// Which process wrote it.
    run: String,
    /// Bulk, so a record takes more than one page and a kill can land mid-write.
    messages: Vec<String>,
}

impl Keyed for Rec {
    fn key(&self) -> Key {
        Key {
            task_id: self.task_id.clone(),
            sample_index: self.sample_index,
        }
    }
}

impl RolloutRecord for Rec {
    fn outcome(&self) -> SampleOutcome {
        SampleOutcome {
            task_id: self.task_id.clone(),
            sample_index: self.sample_index,
            resolved: self.sample_index == 0,
            infra_error: false,
            stop_reason: "submitted".into(),
            forced: false,
            steps: 1,
            tokens: 0,
            wall_secs: 0.0,
            patch: String::new(),
        }
    }
}

struct SleepyRunner {
    run: String,
}

impl Runner for SleepyRunner {
    type Rec = Rec;
    async fn run(&self, job: Job) -> Rec {
        tokio::time::sleep(Duration::from_millis(60)).await;
        Rec {
            task_id: job.task_id,
            sample_index: job.sample_index,
            run: self.run.clone(),
            messages: (0..200)
                .map(|i| format!("message {i} {}", "x".repeat(40)))
                .collect(),
        }
    }
    fn infra_failure(&self, job: &Job, _message: String) -> Rec {
        Rec {
            task_id: job.task_id.clone(),
            sample_index: job.sample_index,
            run: "infra".into(),
            messages: vec![],
        }
    }
}

fn task_ids() -> Vec<String> {
    (0..TASKS).map(|i| format!("proj__task-{i}")).collect()
}

/// The child's body: run the whole plan into `DOJO_CRASH_CHILD`/trajectories.jsonl.
#[test]
fn crash_child_entry() {
    let Ok(dir) = std::env::var("DOJO_CRASH_CHILD") else {
        return; // Only does something when re-executed by `sigkill_mid_run_then_resume`.
    };
    let run = std::env::var("DOJO_CRASH_RUN").unwrap_or_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store =
            Arc::new(Store::<Rec>::open(&Path::new(&dir).join("trajectories.jsonl")).unwrap());
        let cfg = SchedulerConfig {
            samples: SAMPLES,
            sandboxes: 3,
            progress: Default::default(),
            label: "child".into(),
        };
        dojo_rollout::run_jobs(Arc::new(SleepyRunner { run }), &task_ids(), store, &cfg)
            .await
            .unwrap();
    });
}

fn spawn_child(dir: &Path, run: &str) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "crash_child_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("DOJO_CRASH_CHILD", dir)
        .env("DOJO_CRASH_RUN", run)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

fn lines(path: &Path) -> usize {
    std::fs::read(path)
        .map(|b| b.iter().filter(|&&c| c == b'\n').count())
        .unwrap_or(0)
}

#[test]
fn sigkill_mid_run_then_resume() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("trajectories.jsonl");
    let total = TASKS * SAMPLES as usize;

    // Run 1: kill -9 once a few records are durable.
    let mut child = spawn_child(dir.path(), "first");
    // Hang guard only (not a timing assertion): a child that never writes fails the test.
    let mut waited = 0;
    while lines(&file) < 5 {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("child exited early ({status}) before being killed");
        }
        std::thread::sleep(Duration::from_millis(10));
        waited += 1;
        assert!(waited < 30_000, "child wrote nothing in 300 s");
    }
    child.kill().unwrap(); // SIGKILL on Unix
    let status = child.wait().unwrap();
    assert!(!status.success(), "child was killed, not finished");
    let after_kill = std::fs::read(&file).unwrap();
    let complete = after_kill.iter().filter(|&&c| c == b'\n').count();
    assert!(
        complete < total,
        "kill landed after the run finished; nothing to resume"
    );

    // What a crash mid-write leaves behind, made certain rather than left to luck.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap()
        .write_all(br#"{"task_id":"proj__task-7","sample_index":2,"run":"fir"#)
        .unwrap();

    // Run 2: the same command again.
    let status = spawn_child(dir.path(), "second").wait().unwrap();
    assert!(status.success(), "resumed run failed: {status}");

    let text = std::fs::read_to_string(&file).unwrap();
    let complete_prefix = &after_kill[..after_kill
        .iter()
        .rposition(|&c| c == b'\n')
        .map_or(0, |p| p + 1)];
    assert!(
        text.as_bytes().starts_with(complete_prefix),
        "records written before the kill must be kept byte for byte"
    );
    let mut keys = std::collections::BTreeSet::new();
    let mut first_run = 0;
    for (i, line) in text.lines().enumerate() {
        let rec: Rec = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("line {} is not a valid record: {e}", i + 1));
        assert!(keys.insert(rec.key()), "duplicate record {}", rec.key());
        if rec.run == "first" {
            first_run += 1;
        }
        assert_ne!(rec.run, "infra");
    }
    assert_eq!(
        keys.len(),
        total,
        "every (task, sample) stored exactly once"
    );
    assert_eq!(
        first_run, complete,
        "nothing from the first run was redone or lost"
    );
    assert!(text.ends_with('\n'));

    // Run 3: nothing left to do, nothing appended.
    let status = spawn_child(dir.path(), "third").wait().unwrap();
    assert!(status.success());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
}
