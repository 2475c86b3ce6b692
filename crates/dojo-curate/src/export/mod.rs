//! Writing the training data: one module per export, the shared Parquet plumbing in
//! [`parquet_io`] and the Arrow type inference of JSON objects in [`schema`].
//!
//! * `tokens.parquet`: pre-tokenized (`input_ids`, `labels`, `assistant_masks`, metadata columns,
//!   tokenizer/template fingerprints), bit-exact with what the target tokenizer and template
//!   produce, so no trainer re-templates anything. TRL's SFTTrainer takes it as is; verl takes it
//!   through `data.custom_cls` with `python/dojo_verl.py`'s `DojoTokensDataset` (verl has no
//!   pre-tokenized SFT dataset of its own). This is the exact route into every trainer.
//! * `messages.jsonl` + `messages.parquet`: OpenAI-shaped `messages` (observations as
//!   `role: tool`, `tool_calls[].function.arguments` as objects) plus `tools` (objects), up to the
//!   last assistant turn: for verl's `MultiTurnSFTDataset`, TRL's conversational datasets,
//!   OpenRLHF's `--apply_chat_template --multiturn`. These trainers render the messages with the
//!   model's own template, so two limits apply: a template without tool support (SmolLM2's)
//!   drops the tool calls, and in Parquet, objects are structs over the union of their keys, so
//!   absent keys come back as nulls (see [`write_messages_parquet`]). Checked against each
//!   trainer by the scripts in `examples/trainers/`.
//! * RL rows for verl (`dojo tasks export --format verl`, [`write_verl_rl_rows`]): one row per
//!   task, the task itself in `extra_info`, for an agent loop that runs episodes through dojo.
//! * `sharegpt.jsonl` (with a flag): LLaMA-Factory's sharegpt layout (`function_call` as the
//!   thought and a `<tool_call>` block, `observation`).
//!
//! Every file carries [`EXPORT_SCHEMA_VERSION`]: Parquet in its key-value metadata (footer and
//! Arrow schema), all of them in `manifest.json`.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::view::{arguments_object, content_text, role};

mod messages;
mod parquet_io;
mod schema;
mod sharegpt;
mod tokens;
mod verl_rl;

pub use messages::{write_messages_jsonl, write_messages_parquet};
pub use sharegpt::{to_sharegpt, write_sharegpt};
pub use tokens::write_tokens_parquet;
pub use verl_rl::{VerlRlOptions, write_verl_rl_rows};

/// Version of every export layout this crate writes. Bump on any column/field change.
/// 2: `tool_calls[].function.arguments` in the messages Parquet is a struct (was JSON text).
/// 3: `tools` in the messages Parquet is a list of structs (was JSON text); sharegpt calls are
///    `<tool_call>` blocks; messages exports end with the last assistant turn.
pub const EXPORT_SCHEMA_VERSION: u32 = 3;

/// Errors writing exports; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: parquet: {source}")]
    Parquet {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ExportError + '_ {
    move |source| ExportError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Columns shared by every row of every export.
#[derive(Debug, Clone, PartialEq)]
pub struct RowMeta {
    pub task_id: String,
    /// `task_id#sample` (+ `/part` for split trajectories).
    pub traj_id: String,
    pub sample: i64,
    pub part: i32,
    pub source: String,
    pub reward: f64,
    pub num_turns: i32,
}

/// One pre-tokenized sample.
#[derive(Debug, Clone)]
pub struct TokenRow {
    pub meta: RowMeta,
    pub input_ids: Vec<u32>,
    pub assistant_masks: Vec<u8>,
}

/// The target model's identity, stamped on the token export.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Fingerprints {
    pub model: String,
    pub tokenizer_sha: String,
    pub template_sha: String,
}

/// A message in the portable export shape: `content` always a string, tool-call arguments as
/// objects, vendor fields dropped (`reasoning_content` kept: it is generated text).
pub fn portable_message(m: &Value) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("role".into(), json!(role(m)));
    out.insert("content".into(), json!(content_text(m)));
    if let Some(r) = m.get("reasoning_content").and_then(Value::as_str) {
        out.insert("reasoning_content".into(), json!(r));
    }
    if let Some(calls) = m.get("tool_calls").and_then(Value::as_array)
        && !calls.is_empty()
    {
        let calls: Vec<Value> = calls
            .iter()
            .map(|c| {
                let f = c.get("function").unwrap_or(c);
                let mut call = serde_json::Map::new();
                if let Some(id) = c.get("id") {
                    call.insert("id".into(), id.clone());
                }
                call.insert("type".into(), json!("function"));
                call.insert(
                    "function".into(),
                    json!({
                        "name": f.get("name").cloned().unwrap_or(json!("")),
                        "arguments": arguments_object(f.get("arguments")),
                    }),
                );
                Value::Object(call)
            })
            .collect();
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    for k in ["tool_call_id", "name"] {
        if let Some(v) = m.get(k).filter(|v| v.is_string()) {
            out.insert(k.into(), v.clone());
        }
    }
    Value::Object(out)
}

/// The conversation up to and including its last assistant turn, where every export ends. What
/// follows it (the observation of the final `submit`) trains nothing, and trainers that take the
/// last message as the response to learn (OpenRLHF's SFT dataset) would otherwise invent one
/// from it.
pub fn through_last_assistant(messages: &[Value]) -> &[Value] {
    match messages.iter().rposition(|m| role(m) == "assistant") {
        Some(last) => &messages[..=last],
        None => messages,
    }
}

/// One messages-export row.
#[derive(Debug, Clone)]
pub struct MessagesRow {
    pub meta: RowMeta,
    /// Portable messages (see [`portable_message`]).
    pub messages: Vec<Value>,
    pub tools: Vec<Value>,
}

pub(crate) fn meta_json(m: &RowMeta) -> serde_json::Map<String, Value> {
    let mut o = serde_json::Map::new();
    o.insert("task_id".into(), json!(m.task_id));
    o.insert("traj_id".into(), json!(m.traj_id));
    o.insert("sample".into(), json!(m.sample));
    o.insert("part".into(), json!(m.part));
    o.insert("source".into(), json!(m.source));
    o.insert("reward".into(), json!(m.reward));
    o.insert("num_turns".into(), json!(m.num_turns));
    o
}

pub(crate) fn write_lines(
    path: &Path,
    lines: impl Iterator<Item = Value>,
) -> Result<(), ExportError> {
    let f = std::fs::File::create(path).map_err(io_err(path))?;
    let mut w = std::io::BufWriter::new(f);
    for v in lines {
        serde_json::to_writer(&mut w, &v).map_err(|e| io_err(path)(e.into()))?;
        w.write_all(b"\n").map_err(io_err(path))?;
    }
    w.flush().map_err(io_err(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn portable_messages_have_object_arguments_and_string_content() {
        let m = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}],
            "vendor_field": 1});
        let p = portable_message(&m);
        assert_eq!(
            p,
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}}]})
        );
    }
}
