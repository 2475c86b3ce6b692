//! # dojo-trajectory: one JSON object per rollout
//!
//! Pipeline position: task → sandbox → agent ⇄ policy → **trajectory** → grade → curate → train.
//!
//! A [`Trajectory`] is everything one rollout did, written as one JSON line: the conversation
//! exactly as sent and received (OpenAI message JSON, tool calls, vendor fields), the server's
//! token ids and logprobs where it returned them (so RL can train on the sampled tokens without
//! re-tokenizing), per-step timings, tool outcomes, why it stopped, the final patch, the grade and
//! whether an infrastructure failure makes the sample unusable. Curation, export and training read
//! these records; every record carries [`SCHEMA_VERSION`].
//!
//! [`read_jsonl`] reads a JSONL file of records, reports each corrupt or truncated line with file
//! and line number and keeps going, and rejects records of an unknown schema version by name.

mod read;

pub use read::{JsonlReader, LineProblem, ProblemKind, ReadReport, TrajectoryError, read_jsonl};

pub use dojo_llm::{ChatMessage, ChoiceLogprobs, ToolSpec, Usage};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The record layout version this crate writes and reads.
pub const SCHEMA_VERSION: u32 = 1;

/// Why a rollout ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The agent called `submit`.
    Submitted,
    /// The step budget ran out.
    MaxSteps,
    /// The token / context budget ran out (including a model that answered "context too long").
    MaxTokens,
    /// The wall-time budget ran out.
    Timeout,
    /// Too many consecutive turns without a valid tool call.
    FormatErrors,
    /// The policy could not be reached or kept failing (infrastructure).
    LlmError,
    /// The sandbox failed (infrastructure).
    EnvError,
}

impl StopReason {
    /// Infrastructure stops: the sample says nothing about the agent and must not be scored.
    pub fn is_infrastructure(self) -> bool {
        matches!(self, StopReason::LlmError | StopReason::EnvError)
    }
    /// Budget stops, after which the workspace is submitted on the agent's behalf.
    pub fn is_budget(self) -> bool {
        matches!(
            self,
            StopReason::MaxSteps | StopReason::MaxTokens | StopReason::Timeout
        )
    }
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Submitted => "submitted",
            StopReason::MaxSteps => "max_steps",
            StopReason::MaxTokens => "max_tokens",
            StopReason::Timeout => "timeout",
            StopReason::FormatErrors => "format_errors",
            StopReason::LlmError => "llm_error",
            StopReason::EnvError => "env_error",
        }
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which policy produced the rollout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct PolicyInfo {
    /// e.g. `openai`, `embedded`, `gold-replay`, `replay`.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Endpoint(s) or engine description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The policy's full configuration as given.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
}

/// Sampling parameters sent with every request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct SamplingConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_logprobs: Option<u32>,
    /// Vendor fields sent as-is (`return_token_ids`, `chat_template_kwargs`, `top_k`, …).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Value>,
}

/// How the agent was set up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct AgentInfo {
    /// Named tool set (`r2e`, `swe-master`, …).
    pub tool_set: String,
    /// Action format (`native`, `xml`, `hermes`, `qwen3-coder`).
    pub action_format: String,
    /// Prompt template name or path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Budgets and other agent settings as configured.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
}

/// Where the rollout ran; enough to tell whether two records are comparable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct HostFingerprint {
    /// Version of the dojo binary.
    pub dojo_version: String,
    /// Sandbox backend (`namespace`, `fallback`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_backend: Option<String>,
    /// Content address of the pristine tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pristine: Option<String>,
    /// Content address of the Python environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python_env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The parsed action of one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionRecord {
    pub tool: String,
    pub arguments: Value,
    /// `tool_calls[i].id` for native calls; synthesized for text formats.
    pub call_id: String,
}

/// What a tool call did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ToolOutcome {
    /// Exit code of the command behind the tool; `None` when there was none or it was killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Output was cut (by the sandbox's byte caps or the observation's line/char limits).
    #[serde(default)]
    pub truncated: bool,
    #[serde(default)]
    pub timed_out: bool,
    /// The command was refused (blocked command, invalid arguments) before running.
    #[serde(default)]
    pub blocked: bool,
    /// The tool reported an error to the agent (`ERROR: …`).
    #[serde(default)]
    pub error: bool,
    /// Wall time of the tool call in milliseconds.
    pub duration_ms: u64,
}

/// Where a message in a step's prompt came from, when compression made the prompt differ from
/// the plain conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptPart {
    /// `messages[i]`.
    Message(usize),
    /// `compressions[i].summary`.
    Summary(usize),
}

/// One agent step: a model turn and, if it held a valid call, the tool's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Step {
    /// 1-based.
    pub index: u32,
    /// Milliseconds from the start of the rollout to the start of this step.
    pub started_ms: u64,
    /// Time waiting for the policy (including retries).
    pub llm_ms: u64,
    /// Time in the tool.
    pub tool_ms: u64,
    /// Index in [`Trajectory::messages`] of the assistant message of this step.
    pub assistant_message: usize,
    /// Indices of the observation messages this step appended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observation_messages: Vec<usize>,
    /// Exactly what was sent, when it was not simply `messages[..assistant_message]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<Vec<PromptPart>>,
    #[serde(default)]
    pub usage: Usage,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Server response id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    /// Prompt tokens as the server tokenized them (vLLM `prompt_token_ids`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_token_ids: Option<Vec<u32>>,
    /// Sampled tokens (vLLM `token_ids`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_token_ids: Option<Vec<u32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<ChoiceLogprobs>,
    /// Retries the client needed for this turn.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub llm_retries: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<ActionRecord>,
    /// Why the turn held no valid call (the reminder was sent instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolOutcome>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One context compression (SWE-Master's context manager).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompressionEvent {
    /// The step before which compression ran.
    pub at_step: u32,
    /// First and last turn (1-based, inclusive) the summary replaces.
    pub turns: (u32, u32),
    /// Half-open range of [`Trajectory::messages`] indices the summary replaces.
    pub messages: (usize, usize),
    /// The message that replaced them in later prompts.
    pub summary: ChatMessage,
    #[serde(default)]
    pub usage: Usage,
    pub llm_ms: u64,
}

/// Who is to blame for an [`Event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Blame {
    Agent,
    Model,
    Infrastructure,
}

/// Something notable that happened: a malformed call, a retried LLM error, a sandbox failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The step it happened in (0 = before the first step).
    pub step: u32,
    /// Machine-readable kind: `format_error`, `unknown_tool`, `bad_arguments`, `llm_retry`,
    /// `llm_error`, `env_error`, `context_length`, `grading_error`, …
    pub kind: String,
    pub blame: Blame,
    pub message: String,
}

/// Everything one rollout did. One JSON object, one JSONL line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    pub schema_version: u32,
    pub task_id: String,
    /// Which of the task's K samples this is (0-based).
    pub sample_index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    pub policy: PolicyInfo,
    pub sampling: SamplingConfig,
    pub agent: AgentInfo,
    /// The tool schemas offered to the model.
    #[serde(default)]
    pub tools: Vec<ToolSpec>,
    /// The full conversation in order, exactly as sent and received. Context compression never
    /// removes messages here; see [`Step::prompt`] for what each request actually held.
    pub messages: Vec<ChatMessage>,
    pub steps: Vec<Step>,
    #[serde(default)]
    pub compressions: Vec<CompressionEvent>,
    #[serde(default)]
    pub events: Vec<Event>,
    /// Rollout start, Unix milliseconds.
    pub started_at_ms: u64,
    pub wall_ms: u64,
    /// Token usage summed over every LLM call, compression included.
    pub usage: Usage,
    pub llm_calls: u32,
    pub format_errors: u32,
    pub stop_reason: StopReason,
    /// Error text behind an `llm_error` / `env_error` stop, or other detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_detail: Option<String>,
    /// The workspace was submitted because a budget ran out, not by the agent.
    pub forced_submission: bool,
    /// The workspace diff at stop (`git diff` against the pristine tree); `None` when it could
    /// not be extracted (an `env_error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// The grading report (dojo-grade's JSON), when graded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grading: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward: Option<f64>,
    /// The sample failed for infrastructure reasons and must not be scored or trained on.
    pub infra_failure: bool,
    pub environment: HostFingerprint,
    /// Free-form additions of the caller (weight version, group id, …).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
}

impl Trajectory {
    /// An empty record for `task_id`/`sample_index`, stopped as `env_error` until filled in.
    pub fn new(task_id: impl Into<String>, sample_index: u32) -> Self {
        Trajectory {
            schema_version: SCHEMA_VERSION,
            task_id: task_id.into(),
            sample_index,
            run_id: None,
            policy: PolicyInfo::default(),
            sampling: SamplingConfig::default(),
            agent: AgentInfo::default(),
            tools: Vec::new(),
            messages: Vec::new(),
            steps: Vec::new(),
            compressions: Vec::new(),
            events: Vec::new(),
            started_at_ms: 0,
            wall_ms: 0,
            usage: Usage::default(),
            llm_calls: 0,
            format_errors: 0,
            stop_reason: StopReason::EnvError,
            stop_detail: None,
            forced_submission: false,
            patch: None,
            grading: None,
            resolved: None,
            reward: None,
            infra_failure: false,
            environment: HostFingerprint::default(),
            metadata: Map::new(),
        }
    }

    /// One JSONL line (no trailing newline).
    pub fn to_json_line(&self) -> String {
        // Serializing plain data with string keys cannot fail.
        serde_json::to_string(self)
            .unwrap_or_else(|e| format!("{{\"serialize_error\":{:?}}}", e.to_string()))
    }

    /// Parse one record, checking the schema version first so a future record gets a clear
    /// error rather than a confusing missing-field one.
    pub fn from_json(text: &str) -> Result<Trajectory, TrajectoryError> {
        read::parse_record(text)
    }

    /// The sample failed for infrastructure reasons (sandbox, environment, endpoint, grader): it
    /// says nothing about the agent and is never scored or trained on. True when the record is
    /// marked so or its stop reason is an infrastructure stop.
    pub fn is_infrastructure_failure(&self) -> bool {
        self.infra_failure || self.stop_reason.is_infrastructure()
    }

    /// Grading recorded a result (a reward or a resolved flag). Ungraded rollouts carry no
    /// success signal.
    pub fn is_graded(&self) -> bool {
        self.reward.is_some() || self.resolved.is_some()
    }

    /// The reward grading gave this rollout: the recorded `reward`, else 1.0 or 0.0 from
    /// `resolved`; `None` when it was not graded.
    pub fn graded_reward(&self) -> Option<f64> {
        self.reward
            .or(self.resolved.map(|r| if r { 1.0 } else { 0.0 }))
    }

    /// Whether this rollout resolved its task: graded as resolved (the recorded `resolved`, else
    /// a reward of at least 1.0) and not an infrastructure failure, which is never a success.
    pub fn is_resolved(&self) -> bool {
        let resolved = self
            .resolved
            .unwrap_or_else(|| self.reward.is_some_and(|r| r >= 1.0));
        resolved && !self.is_infrastructure_failure()
    }

    /// Records a grade: `resolved` and the binary reward it implies (1.0 or 0.0), the one reward
    /// SWE-bench grading gives.
    pub fn set_grade(&mut self, resolved: bool) {
        self.resolved = Some(resolved);
        self.reward = Some(if resolved { 1.0 } else { 0.0 });
    }

    /// The messages of step `index` (1-based) as they were sent to the model.
    pub fn prompt_of(&self, index: u32) -> Option<Vec<&ChatMessage>> {
        let step = self.steps.iter().find(|s| s.index == index)?;
        match &step.prompt {
            None => Some(
                self.messages
                    .get(..step.assistant_message)?
                    .iter()
                    .collect(),
            ),
            Some(parts) => parts
                .iter()
                .map(|p| match *p {
                    PromptPart::Message(i) => self.messages.get(i),
                    PromptPart::Summary(i) => self.compressions.get(i).map(|c| &c.summary),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn sample() -> Trajectory {
        let mut t = Trajectory::new("astropy__astropy-12907", 2);
        t.policy.kind = "openai".into();
        t.messages = vec![
            ChatMessage::system("sys"),
            ChatMessage::user("fix it"),
            ChatMessage::assistant("<function=submit></function>"),
        ];
        t.steps.push(Step {
            index: 1,
            assistant_message: 2,
            ..Default::default()
        });
        t.stop_reason = StopReason::Submitted;
        t.patch = Some(String::new());
        t.grading = Some(json!({"resolved": true}));
        t
    }

    #[test]
    fn round_trips_and_names_stop_reasons() {
        let t = sample();
        let line = t.to_json_line();
        assert!(line.contains("\"stop_reason\":\"submitted\""));
        assert!(line.starts_with("{\"schema_version\":1,"));
        assert_eq!(Trajectory::from_json(&line).unwrap(), t);
        assert!(StopReason::LlmError.is_infrastructure());
        assert!(StopReason::MaxTokens.is_budget());
    }

    #[test]
    fn resolved_and_reward_follow_the_grade_and_never_credit_infrastructure() {
        let mut t = sample();
        assert!(!t.is_graded() && !t.is_resolved());
        assert_eq!(t.graded_reward(), None);
        t.set_grade(true);
        assert!(t.is_graded() && t.is_resolved());
        assert_eq!(t.graded_reward(), Some(1.0));
        // Older records may carry only one of the two fields.
        t.resolved = None;
        assert!(t.is_resolved());
        t.reward = Some(0.5);
        assert!(!t.is_resolved());
        assert_eq!(t.graded_reward(), Some(0.5));
        t.reward = None;
        t.resolved = Some(false);
        assert_eq!(t.graded_reward(), Some(0.0));
        // An infrastructure failure is never resolved, whatever the grade says.
        t.set_grade(true);
        t.infra_failure = true;
        assert!(t.is_infrastructure_failure() && !t.is_resolved());
        t.infra_failure = false;
        t.stop_reason = StopReason::EnvError;
        assert!(t.is_infrastructure_failure() && !t.is_resolved());
    }

    #[test]
    fn prompt_of_follows_compression() {
        let mut t = sample();
        assert_eq!(t.prompt_of(1).unwrap().len(), 2);
        t.compressions.push(CompressionEvent {
            at_step: 1,
            turns: (1, 1),
            messages: (1, 2),
            summary: ChatMessage::user("[COMPRESSED HISTORY]"),
            usage: Usage::default(),
            llm_ms: 0,
        });
        t.steps[0].prompt = Some(vec![PromptPart::Message(0), PromptPart::Summary(0)]);
        let p = t.prompt_of(1).unwrap();
        assert_eq!(p[1].text(), "[COMPRESSED HISTORY]");
    }
}
