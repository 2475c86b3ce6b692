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
