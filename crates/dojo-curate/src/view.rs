//! The curation view of one trajectory record.
//!
//! Curation needs a dozen fields of a trajectory, not the whole record. Reading them through this
//! view (rather than deserialising the full `dojo-trajectory` struct) keeps curation working
//! across every schema version we have written: each field is looked up at the places the
//! versions put it, and a record that lacks a required field is reported with the field's name.
//! The messages are kept verbatim (OpenAI JSON shape) because the exports must reproduce exactly
//! what the policy saw.

use serde_json::Value;

/// Schema versions of trajectory records this crate knows how to read.
pub const SUPPORTED_TRAJECTORY_VERSIONS: &[u64] = &[1];

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

/// Why a rollout ended, normalised across spellings (`max_steps`, `MAX_TURNS`, ...).
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
    /// Anything else the recorder wrote (kept as text in `Traj::stop_reason`).
    Other,
}

impl StopKind {
    /// Maps a recorded stop reason to its kind. Unknown spellings become `Other`, never an error:
    /// the format filter treats `Other` as "not a clean submit" only when asked to.
    pub fn classify(reason: &str) -> StopKind {
        let r = reason.to_ascii_lowercase().replace(['-', ' '], "_");
        match r.as_str() {
            "submitted" | "submit" | "env_done" | "done" | "finished" | "stop" => {
                StopKind::Submitted
            }
            "max_steps" | "max_turns" | "step_limit" | "turn_limit" | "steps" | "turns" => {
                StopKind::StepLimit
            }
            "max_tokens" | "token_limit" | "truncation" | "context_limit" | "length"
            | "prompt_too_long" | "tokens" | "context" => StopKind::TokenLimit,
            "timeout" | "time_limit" | "traj_timeout" | "wall_time" | "time" => StopKind::TimeLimit,
            "env_error" | "no_sandbox" | "no_container" | "infra_error" | "infra" | "error"
            | "sandbox_error" | "policy_error" => StopKind::InfraError,
            _ => {
                if r.contains("step") || r.contains("turn") {
                    StopKind::StepLimit
                } else if r.contains("token") || r.contains("context") {
                    StopKind::TokenLimit
                } else if r.contains("time") {
                    StopKind::TimeLimit
                } else {
                    StopKind::Other
                }
            }
        }
    }
}

/// One point where the context manager replaced the history with a compressed one.
///
/// `messages` is the history as sent to the policy right after compression; the turns that follow
/// (up to the next compression) were generated from it, which is what one SFT sample holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Compression {
    /// Index into `Traj::messages` of the first message generated after this compression.
    pub resume_at: usize,
    /// The compressed history sent to the policy at that point.
    pub messages: Vec<Value>,
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
    pub compressions: Vec<Compression>,
    /// Tokens as recorded by the policy's usage counters (prompt + completion of the last call),
    /// used only when no tokenizer is configured.
    pub recorded_tokens: Option<u64>,
}

/// A record that could not be read as a trajectory, with the reason.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewError {
    pub field: String,
    pub reason: String,
}

fn ptr<'a>(v: &'a Value, paths: &[&str]) -> Option<&'a Value> {
    paths.iter().find_map(|p| v.pointer(p).filter(|x| !x.is_null()))
}

fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().trim_start_matches('v').parse().ok(),
        _ => None,
    }
}

fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl Traj {
    /// Reads the view out of one JSON record. Missing optional fields take neutral defaults;
    /// missing required ones (schema version, task id, messages) are errors naming the field.
    pub fn from_value(v: &Value, origin: Origin) -> Result<Traj, ViewError> {
        let err = |field: &str, reason: &str| ViewError {
            field: field.to_string(),
            reason: reason.to_string(),
        };
        let version = ptr(v, &["/schema_version", "/version"])
            .ok_or_else(|| err("schema_version", "missing"))?;
        let schema_version =
            as_u64(version).ok_or_else(|| err("schema_version", "not an integer"))?;
        if !SUPPORTED_TRAJECTORY_VERSIONS.contains(&schema_version) {
            return Err(err(
                "schema_version",
                &format!(
                    "unknown trajectory schema version {schema_version} (this build reads {:?})",
                    SUPPORTED_TRAJECTORY_VERSIONS
                ),
            ));
        }
        let task_id = ptr(v, &["/task_id", "/instance_id", "/task/id", "/task/instance_id"])
            .and_then(Value::as_str)
            .ok_or_else(|| err("task_id", "missing or not a string"))?
            .to_string();
        let messages = ptr(v, &["/messages", "/conversation"])
            .and_then(Value::as_array)
            .ok_or_else(|| err("messages", "missing or not an array"))?
            .clone();
        for (i, m) in messages.iter().enumerate() {
            if m.get("role").and_then(Value::as_str).is_none() {
                return Err(err(&format!("messages[{i}].role"), "missing"));
            }
        }
        let tools = ptr(v, &["/tools", "/task/tools"])
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let sample = ptr(v, &["/sample", "/sample_index", "/sample_idx", "/key/sample_index"])
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let source = ptr(v, &["/source", "/policy", "/model", "/policy/model", "/policy/name"])
            .map(|p| match p {
                Value::Object(o) => o
                    .get("model")
                    .or_else(|| o.get("name"))
                    .map(as_text)
                    .unwrap_or_default(),
                other => as_text(other),
            })
            .unwrap_or_default();
        let stop_reason = ptr(
            v,
            &["/stop_reason", "/termination_reason", "/stop", "/exit_status"],
        )
        .map(|s| match s {
            Value::Object(o) => o
                .get("kind")
                .or_else(|| o.get("reason"))
                .map(as_text)
                .unwrap_or_else(|| s.to_string()),
            other => as_text(other),
        })
        .unwrap_or_default();
        let stop = StopKind::classify(&stop_reason);
        let forced = ptr(v, &["/forced", "/forced_submission", "/forced_submit"])
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let reward = ptr(v, &["/reward", "/grade/reward", "/grading/reward"])
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        let resolved = ptr(
            v,
            &[
                "/resolved",
                "/grade/resolved",
                "/grading/resolved",
                "/report/resolved",
                "/grading_report/resolved",
            ],
        )
        .and_then(Value::as_bool)
        .unwrap_or(reward >= 1.0);
        let format_errors = ptr(
            v,
            &[
                "/format_errors",
                "/counters/format_errors",
                "/metrics/format_errors",
            ],
        )
        .and_then(as_u64)
        .unwrap_or(0);
        let recorded_tokens = ptr(v, &["/usage/total_tokens", "/token_usage/total_tokens"])
            .and_then(as_u64);
        let mut compressions = Vec::new();
        if let Some(events) =
            ptr(v, &["/compressions", "/compression_events", "/context_events"]).and_then(Value::as_array)
        {
            for (i, e) in events.iter().enumerate() {
                let resume_at = ptr(e, &["/resume_at", "/message_index", "/at"])
                    .and_then(as_u64)
                    .ok_or_else(|| err(&format!("compressions[{i}].resume_at"), "missing"))?
                    as usize;
                let msgs = ptr(e, &["/messages", "/history"])
                    .and_then(Value::as_array)
                    .ok_or_else(|| err(&format!("compressions[{i}].messages"), "missing"))?
                    .clone();
                if resume_at > messages.len() {
                    return Err(err(
                        &format!("compressions[{i}].resume_at"),
                        &format!("{resume_at} is past the {} messages", messages.len()),
                    ));
                }
                compressions.push(Compression {
                    resume_at,
                    messages: msgs,
                });
            }
            compressions.sort_by_key(|c| c.resume_at);
        }
        Ok(Traj {
            origin,
            schema_version,
            task_id,
            sample,
            source,
            messages,
            tools,
            stop_reason,
            stop,
            forced,
            reward,
            resolved,
            format_errors,
            compressions,
            recorded_tokens,
        })
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
        Some(Value::String(s)) => serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone())),
        Some(other) => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn origin() -> Origin {
        Origin {
            file: "t.jsonl".into(),
            line: 1,
        }
    }

    #[test]
    fn stop_kinds() {
        assert_eq!(StopKind::classify("MAX_TURNS"), StopKind::StepLimit);
        assert_eq!(StopKind::classify("max_steps"), StopKind::StepLimit);
        assert_eq!(StopKind::classify("TRUNCATION"), StopKind::TokenLimit);
        assert_eq!(StopKind::classify("traj-timeout"), StopKind::TimeLimit);
        assert_eq!(StopKind::classify("submitted"), StopKind::Submitted);
        assert_eq!(StopKind::classify("ENV_ERROR"), StopKind::InfraError);
        assert_eq!(StopKind::classify("weird"), StopKind::Other);
    }

    #[test]
    fn unknown_version_is_an_error_naming_the_field() {
        let v = json!({"schema_version": 99, "task_id": "t", "messages": []});
        let e = Traj::from_value(&v, origin()).unwrap_err();
        assert_eq!(e.field, "schema_version");
        assert!(e.reason.contains("unknown trajectory schema version 99"));
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

    #[test]
    fn missing_messages_names_the_field() {
        let v = json!({"schema_version": 1, "task_id": "t"});
        assert_eq!(Traj::from_value(&v, origin()).unwrap_err().field, "messages");
    }
}
