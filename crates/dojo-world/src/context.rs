//! What the world models see and what they answer.
//!
//! The same structs serve three uses: the simulated environment builds a context and asks a
//! model; `dojo rollout` records a context with the *real* answer (training data); `dojo curate`
//! renders recorded contexts into SFT samples. Keeping one shape guarantees that a model is
//! trained on exactly the layout it is later asked with.

use serde::{Deserialize, Serialize};

/// One file as the models see it: its path relative to the repository root, its content at the
/// task's base commit (`None`: the file did not exist there), and its content now (`None`: it
/// does not exist now, e.g. the agent deleted it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileView {
    pub path: String,
    #[serde(default)]
    pub base: Option<String>,
    #[serde(default)]
    pub current: Option<String>,
}

impl FileView {
    /// Whether the agent changed this file relative to the base commit.
    pub fn is_modified(&self) -> bool {
        self.base != self.current
    }
}

/// The transition model's (SWT's) input: one command that runs Python or tests, in its task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SwtContext {
    pub task_id: String,
    pub problem_statement: String,
    /// The shell command exactly as the agent issued it.
    pub command: String,
    /// The files the command executes (scripts, test files), at most a handful.
    #[serde(default)]
    pub executed_files: Vec<FileView>,
    /// The agent's patch against the base commit at the moment of the command (may be empty).
    #[serde(default)]
    pub agent_patch: String,
    /// The reference fix; `None` for tasks that have none (the prompt says so).
    #[serde(default)]
    pub gold_patch: Option<String>,
    /// The per-task initial analysis ([`crate::analysis`]), when one was generated.
    #[serde(default)]
    pub analysis: Option<String>,
}

/// SWT's answer, and the training target built from a real run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwtTarget {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: i32,
}

impl SwtTarget {
    /// The target text of an SFT sample: `{"stdout":…,"stderr":…,"exit_code":…}` in that order.
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "stdout": self.stdout,
            "stderr": self.stderr,
            "exit_code": self.exit_code,
        })
        .to_string()
    }
}

/// The reward model's (SWR's) input: the final state of one rollout and how it is tested.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SwrContext {
    pub task_id: String,
    pub problem_statement: String,
    /// The command the grader runs (e.g. `pytest -rA tests/test_x.py`).
    pub test_command: String,
    /// The test files the command runs, with the test patch applied in `current`.
    #[serde(default)]
    pub test_files: Vec<FileView>,
    /// The agent's final patch (an empty patch is reward 0 without asking a model).
    #[serde(default)]
    pub agent_patch: String,
    #[serde(default)]
    pub gold_patch: Option<String>,
    #[serde(default)]
    pub fail_to_pass: Vec<String>,
    #[serde(default)]
    pub pass_to_pass: Vec<String>,
    #[serde(default)]
    pub analysis: Option<String>,
}

/// What the world models are told about a task, whichever stage asks: real runs' capture
/// (training records, `dojo_rollout::world_capture`), the simulated environment
/// ([`crate::sim`]) and the `swr` selector all build their [`SwtContext`] and [`SwrContext`]
/// from one of these ([`WorldTask::swt_context`], [`WorldTask::swr_context`]), so a model
/// trained on captured contexts is asked with the same fields filled the same way. Built from a
/// dataset task by `dojo_rollout::world_sim::world_task`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct WorldTask {
    pub task_id: String,
    pub problem_statement: String,
    /// The command grading runs (the model is told what it would have run).
    pub test_command: String,
    #[serde(default)]
    pub fail_to_pass: Vec<String>,
    #[serde(default)]
    pub pass_to_pass: Vec<String>,
    /// The reference fix, shown to the models as SWE-World does while training; `None` for
    /// tasks without one and where it must not be known ([`WorldTask::at_test_time`]).
    #[serde(default)]
    pub gold_patch: Option<String>,
    /// The per-task initial analysis ([`crate::analysis`]), when one was generated.
    #[serde(default)]
    pub analysis: Option<String>,
}

impl WorldTask {
    /// The task as a test-time selector may see it: without the reference fix, which a
    /// candidate chosen at test time cannot be compared with (SWE-World's TTS shows it; we do
    /// not, so a selection figure is not inflated by the answer).
    pub fn at_test_time(mut self) -> Self {
        self.gold_patch = None;
        self
    }

    /// SWT's input for one command: the files it executes and the agent's patch at that moment
    /// (read by [`crate::observe`], in capture and simulation alike).
    pub fn swt_context(
        &self,
        command: &str,
        executed_files: Vec<FileView>,
        agent_patch: &str,
    ) -> SwtContext {
        SwtContext {
            task_id: self.task_id.clone(),
            problem_statement: self.problem_statement.clone(),
            command: command.to_string(),
            executed_files,
            agent_patch: agent_patch.to_string(),
            gold_patch: self.gold_patch.clone(),
            analysis: self.analysis.clone(),
        }
    }

    /// SWR's input for one final patch, with the task's test files as grading runs them (test
    /// patch applied; [`crate::sim::test_files_after_patch`] and the capture read them alike).
    pub fn swr_context(&self, agent_patch: &str, test_files: Vec<FileView>) -> SwrContext {
        SwrContext {
            task_id: self.task_id.clone(),
            problem_statement: self.problem_statement.clone(),
            test_command: self.test_command.clone(),
            test_files,
            agent_patch: agent_patch.to_string(),
            gold_patch: self.gold_patch.clone(),
            fail_to_pass: self.fail_to_pass.clone(),
            pass_to_pass: self.pass_to_pass.clone(),
            analysis: self.analysis.clone(),
        }
    }
}

/// SWR's answer, and the training target built from a real grading: the test report section of
/// the log and the reward (1 iff every FAIL_TO_PASS and PASS_TO_PASS test passes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwrTarget {
    pub test_report: String,
    pub reward: u8,
}

impl SwrTarget {
    /// The target text of an SFT sample: `{"test_report":…,"reward":0|1}` in that order.
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "test_report": self.test_report,
            "reward": self.reward,
        })
        .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_serialize_in_swe_world_key_order() {
        let t = SwtTarget {
            stdout: "ok\n".into(),
            stderr: String::new(),
            exit_code: 0,
        };
        assert_eq!(
            t.to_json(),
            r#"{"stdout":"ok\n","stderr":"","exit_code":0}"#
        );
        let r = SwrTarget {
            test_report: "1 passed".into(),
            reward: 1,
        };
        assert_eq!(r.to_json(), r#"{"test_report":"1 passed","reward":1}"#);
    }

    #[test]
    fn modified_compares_base_and_current() {
        let same = FileView {
            path: "a.py".into(),
            base: Some("x".into()),
            current: Some("x".into()),
        };
        assert!(!same.is_modified());
        let new = FileView {
            path: "b.py".into(),
            base: None,
            current: Some("x".into()),
        };
        assert!(new.is_modified());
    }
}
