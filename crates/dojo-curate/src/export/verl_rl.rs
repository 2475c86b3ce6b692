//! `dojo tasks export --format verl`: the task file as the Parquet rows verl's RL trainer reads
//! (`RLHFDataset`), one row per task, for an agent loop that hands each episode to dojo.
//!
//! Columns, as verl's own agent-loop examples lay them out:
//! * `data_source` (string): names the task set (verl groups its validation metrics by it);
//! * `agent_name` (string): the agent loop registered on the verl side that runs the episode
//!   through dojo (`rollout.agent.agent_loop_config_path`);
//! * `prompt` (list of `{role, content}`): the problem statement as one user message. verl
//!   tokenizes it to filter over-long prompts and to log; it is **not** what the agent sees —
//!   dojo renders the agent's prompt itself (system prompt, tools, task), token-exact, so verl
//!   never re-templates dojo's messages;
//! * `ability` (string): `software-engineering`;
//! * `reward_model` (`{style, ground_truth}`): `rule` and the instance id; the reward comes from
//!   dojo's grader with dojo's shaping, never from verl's reward functions;
//! * `extra_info` (`{index, instance_id, repo, task}`): `task` is the task row exactly as read,
//!   as JSON text (rows of one file may carry different fields, which an Arrow struct cannot),
//!   so the agent loop passes it to dojo unchanged.
//!
//! The file carries `dojo.schema_version` / `dojo.kind = verl_rl` in its key-value metadata
//! like every other export.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, StringArray, StructArray};
use arrow::datatypes::{DataType, Field, Fields};
use serde_json::{Map, Value};

use super::ExportError;
use super::parquet_io::{finish, kv_metadata, list_of, named};

/// Names for the rows' constant columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerlRlOptions {
    pub data_source: String,
    pub agent_name: String,
}

impl Default for VerlRlOptions {
    fn default() -> Self {
        VerlRlOptions {
            data_source: "swe-dojo".into(),
            agent_name: "dojo_swe".into(),
        }
    }
}

fn strings<'a>(v: impl IntoIterator<Item = &'a str>) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(v))
}

fn struct_of(fields: Vec<(&str, ArrayRef)>) -> (DataType, ArrayRef) {
    let fs: Fields = fields
        .iter()
        .map(|(n, a)| Field::new(*n, a.data_type().clone(), false))
        .collect();
    let arr = StructArray::new(
        fs.clone(),
        fields.into_iter().map(|(_, a)| a).collect(),
        None,
    );
    (DataType::Struct(fs), Arc::new(arr))
}

fn field<'a>(row: &'a Map<String, Value>, key: &str) -> &'a str {
    row.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// Write task rows (as read and checked by `dojo_task`, e.g. `dojo_task::Task::raw`) to
/// `path` as verl RL rows.
pub fn write_verl_rl_rows(
    path: &Path,
    tasks: &[&Map<String, Value>],
    opts: &VerlRlOptions,
) -> Result<(), ExportError> {
    let n = tasks.len();
    let task_json: Vec<String> = tasks
        .iter()
        .map(|t| Value::Object((*t).clone()).to_string())
        .collect();
    let (msg_ty, messages) = struct_of(vec![
        ("role", strings(std::iter::repeat_n("user", n))),
        (
            "content",
            strings(tasks.iter().map(|t| field(t, "problem_statement"))),
        ),
    ]);
    let (prompt_field, prompt) = list_of(msg_ty, std::iter::repeat_n(1, n), messages);
    let (rm_ty, reward_model) = struct_of(vec![
        ("style", strings(std::iter::repeat_n("rule", n))),
        (
            "ground_truth",
            strings(tasks.iter().map(|t| field(t, "instance_id"))),
        ),
    ]);
    let (extra_ty, extra_info) = struct_of(vec![
        (
            "index",
            Arc::new(Int64Array::from_iter_values(0..n as i64)) as ArrayRef,
        ),
        (
            "instance_id",
            strings(tasks.iter().map(|t| field(t, "instance_id"))),
        ),
        ("repo", strings(tasks.iter().map(|t| field(t, "repo")))),
        ("task", strings(task_json.iter().map(String::as_str))),
    ]);
    let fields = vec![
        Field::new("data_source", DataType::Utf8, false),
        Field::new("agent_name", DataType::Utf8, false),
        named(prompt_field, "prompt"),
        Field::new("ability", DataType::Utf8, false),
        Field::new("reward_model", rm_ty, false),
        Field::new("extra_info", extra_ty, false),
    ];
    let cols: Vec<ArrayRef> = vec![
        strings(std::iter::repeat_n(opts.data_source.as_str(), n)),
        strings(std::iter::repeat_n(opts.agent_name.as_str(), n)),
        prompt,
        strings(std::iter::repeat_n("software-engineering", n)),
        reward_model,
        extra_info,
    ];
    finish(path, fields, cols, kv_metadata("verl_rl", &[]))
}
