//! The curation view of one trajectory record.
//!
//! Curation needs a dozen fields of a trajectory, not the whole record: this view holds them,
//! taken from a record `dojo-trajectory` has read and checked. What a rollout's outcome is (its
//! reward, whether it resolved its task, whether it was graded or failed for infrastructure
//! reasons) is the record's own answer ([`Trajectory::graded_reward`],
//! [`Trajectory::is_resolved`], …), so curation and the rollout summaries count alike. The
//! messages are kept verbatim (OpenAI JSON shape) because the exports must reproduce exactly what
//! the policy saw.

use dojo_trajectory::{PromptPart, StopReason, Trajectory};
use serde_json::Value;

/// Where a record came from: for error messages and the `source` column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub file: String,
    pub line: usize,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// Why a rollout ended, as curation groups it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StopKind {
    /// The agent called submit (or otherwise finished on its own).
    Submitted,
    /// A step/turn limit stopped it.
    StepLimit,
    /// A token/context limit stopped it.
    TokenLimit,
    /// A wall-clock limit stopped it.
    TimeLimit,
    /// The environment or infrastructure failed (never the agent's fault; never trained on).
    InfraError,
    /// Too many consecutive turns without a valid tool call.
    FormatErrors,
}

impl StopKind {
    fn of(r: StopReason, infra_failure: bool) -> StopKind {
        if infra_failure || r.is_infrastructure() {
            return StopKind::InfraError;
        }
        match r {
            StopReason::Submitted => StopKind::Submitted,
            StopReason::MaxSteps => StopKind::StepLimit,
            StopReason::MaxTokens => StopKind::TokenLimit,
            StopReason::Timeout => StopKind::TimeLimit,
            StopReason::FormatErrors => StopKind::FormatErrors,
            StopReason::LlmError | StopReason::EnvError => StopKind::InfraError,
        }
    }
}

/// What curation needs of one agent step: which message it generated and what it was sent.
#[derive(Debug, Clone, PartialEq)]
pub struct StepView {
    /// Index in `Traj::messages` of the assistant message this step generated.
    pub assistant_message: usize,
    /// The prompt exactly as sent, when it differed from `messages[..assistant_message]`
    /// (context compression): indices into `messages` or into `Traj::summaries`.
    pub prompt: Option<Vec<PromptPart>>,
}

/// The fields curation uses, read from one trajectory record.
#[derive(Debug, Clone)]
pub struct Traj {
    pub origin: Origin,
    pub schema_version: u64,
    pub task_id: String,
    pub sample: i64,
    /// The policy/model that produced it (`source` column).
    pub source: String,
    /// OpenAI-shaped messages, verbatim.
    pub messages: Vec<Value>,
    /// OpenAI-shaped tool definitions.
    pub tools: Vec<Value>,
    pub stop_reason: String,
    pub stop: StopKind,
    /// Ended by a forced submission (budget exhausted, then the diff was tested).
    pub forced: bool,
    pub reward: f64,
    pub resolved: bool,
    /// Format-error reminders the agent loop sent (0 when the record has no counter).
    pub format_errors: u64,
    /// Graded at all (reward or resolved recorded); ungraded rollouts carry no difficulty signal.
    pub graded: bool,
    pub steps: Vec<StepView>,
    /// Summary messages of the context manager's compressions (`PromptPart::Summary(i)`).
    pub summaries: Vec<Value>,
    /// Largest prompt + completion the policy reported for one call, used as the token count
    /// only when no tokenizer is configured.
    pub recorded_tokens: Option<u64>,
    /// The first step whose prompt token ids the policy server returned: (position in `steps`,
    /// ids). Checked against the target tokenizer to catch a tokenizer/model mismatch.
    pub recorded_prompt: Option<(usize, Vec<u32>)>,
    /// The final workspace diff (what a verifier judges).
    pub patch: Option<String>,
    /// The export rows' `traj_id` when one record yields several samples of its own (world
    /// records: `task#sample/swt3`); `None`: `task#sample`.
    pub row_id: Option<String>,
}

fn json<T: serde::Serialize>(v: &T) -> Value {
    // Plain data with string keys: serialisation cannot fail.
    serde_json::to_value(v).unwrap_or(Value::Null)
}

impl Traj {
    /// The view of one trajectory record.
    pub fn from_record(t: &Trajectory, origin: Origin) -> Traj {
        let source = match &t.policy.model {
            Some(m) if !m.is_empty() => format!("{}:{m}", t.policy.kind),
            _ => t.policy.kind.clone(),
        };
        let recorded_tokens = t
            .steps
            .iter()
            .map(|s| s.usage.prompt_tokens + s.usage.completion_tokens)
            .max();
        Traj {
            origin,
            schema_version: u64::from(t.schema_version),
            task_id: t.task_id.clone(),
            sample: i64::from(t.sample_index),
            source,
            messages: t.messages.iter().map(json).collect(),
            tools: t.tools.iter().map(json).collect(),
            stop_reason: t.stop_reason.as_str().to_string(),
            stop: StopKind::of(t.stop_reason, t.is_infrastructure_failure()),
            forced: t.forced_submission,
            reward: t.graded_reward().unwrap_or(0.0),
            resolved: t.is_resolved(),
            format_errors: u64::from(t.format_errors),
            graded: t.is_graded(),
            steps: t
                .steps
                .iter()
                .map(|s| StepView {
                    assistant_message: s.assistant_message,
                    prompt: s.prompt.clone(),
                })
                .collect(),
            summaries: t.compressions.iter().map(|c| json(&c.summary)).collect(),
            recorded_tokens,
            recorded_prompt: t
                .steps
                .iter()
                .enumerate()
                .find_map(|(k, s)| s.prompt_token_ids.clone().map(|ids| (k, ids))),
            patch: t.patch.clone(),
            row_id: None,
        }
    }

    /// Number of assistant turns (policy calls that produced a message).
    pub fn num_turns(&self) -> usize {
        self.messages
            .iter()
            .filter(|m| role(m) == "assistant")
            .count()
    }

    /// Tool calls of one message as (name, parsed arguments). Arguments recorded as a JSON
    /// string (OpenAI wire shape) are parsed; unparsable ones are kept as the raw string.
    pub fn tool_calls(m: &Value) -> Vec<(String, Value)> {
        m.get("tool_calls")
            .and_then(Value::as_array)
            .map(|calls| {
                calls
                    .iter()
                    .map(|c| {
                        let f = c.get("function").unwrap_or(c);
                        let name = f
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string();
                        (name, arguments_object(f.get("arguments")))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The role of a message ("" when absent; `from_value` rejects that).
pub fn role(m: &Value) -> &str {
    m.get("role").and_then(Value::as_str).unwrap_or_default()
}

/// The text content of a message; OpenAI content-part arrays are joined.
pub fn content_text(m: &Value) -> String {
    match m.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// Tool-call arguments as an object: the wire shape is a JSON string, trainers' templates want
/// the object (Qwen2.5's `arguments|tojson` double-encodes a string).
pub fn arguments_object(a: Option<&Value>) -> Value {
    match a {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(Value::String(s)) if s.trim().is_empty() => Value::Object(Default::default()),
        Some(Value::String(s)) => {
            serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
        }
        Some(other) => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dojo_trajectory::ChatMessage;
    use serde_json::json;

    #[test]
    fn maps_a_record() {
        let mut t = Trajectory::new("t1", 3);
        t.policy.kind = "embedded".into();
        t.policy.model = Some("SmolLM2".into());
        t.messages = vec![ChatMessage::system("s"), ChatMessage::user("u")];
        t.stop_reason = StopReason::MaxSteps;
        t.forced_submission = true;
        t.resolved = Some(true);
        let v = Traj::from_record(
            &t,
            Origin {
                file: "f".into(),
                line: 7,
            },
        );
        assert_eq!(v.source, "embedded:SmolLM2");
        assert_eq!(v.sample, 3);
        assert_eq!(v.reward, 1.0);
        assert!(v.graded && v.forced);
        assert_eq!(v.stop, StopKind::StepLimit);
        assert_eq!(v.messages[1], json!({"role": "user", "content": "u"}));
        let mut t = Trajectory::new("t1", 0);
        t.stop_reason = StopReason::Submitted;
        t.infra_failure = true;
        let v = Traj::from_record(
            &t,
            Origin {
                file: "f".into(),
                line: 1,
            },
        );
        assert_eq!(v.stop, StopKind::InfraError);
        assert!(!v.graded);
    }

    #[test]
    fn reads_wire_shaped_arguments_as_objects() {
        let m = json!({"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "submit", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}
        ]});
        let calls = Traj::tool_calls(&m);
        assert_eq!(calls[0], ("submit".to_string(), json!({})));
        assert_eq!(calls[1], ("bash".to_string(), json!({"command": "ls"})));
    }
}
