//! Writing the training data.
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
//! * `sharegpt.jsonl` (with a flag): LLaMA-Factory's sharegpt layout (`function_call` as the
//!   thought and a `<tool_call>` block, `observation`).
//!
//! Every file carries [`EXPORT_SCHEMA_VERSION`]: Parquet in its key-value metadata (footer and
//! Arrow schema), all of them in `manifest.json`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Float64Array, Int8Array, Int32Array, Int64Array, ListArray,
    RecordBatch, StringArray, StructArray,
};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, Fields, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use serde_json::{Value, json};

use crate::view::{Traj, arguments_object, content_text, role};

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
    #[error("{path}: parquet: {reason}")]
    Parquet { path: PathBuf, reason: String },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ExportError + '_ {
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

fn kv_metadata(kind: &str, extra: &[(&str, String)]) -> Vec<(String, String)> {
    let mut kv = vec![
        (
            "dojo.schema_version".to_string(),
            EXPORT_SCHEMA_VERSION.to_string(),
        ),
        ("dojo.kind".to_string(), kind.to_string()),
        (
            "dojo.writer".to_string(),
            format!("dojo-curate {}", env!("CARGO_PKG_VERSION")),
        ),
    ];
    kv.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
    kv
}

fn write_parquet(
    path: &Path,
    batch: RecordBatch,
    kv: Vec<(String, String)>,
) -> Result<(), ExportError> {
    let perr = |e: &dyn std::fmt::Display| ExportError::Parquet {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let file = std::fs::File::create(path).map_err(io_err(path))?;
    let level = ZstdLevel::try_new(3).map_err(|e| perr(&e))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(level))
        .set_key_value_metadata(Some(
            kv.iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
                .collect(),
        ))
        .build();
    let mut w = ArrowWriter::try_new(file, batch.schema(), Some(props)).map_err(|e| perr(&e))?;
    w.write(&batch).map_err(|e| perr(&e))?;
    w.close().map_err(|e| perr(&e))?;
    Ok(())
}

fn meta_columns(metas: &[&RowMeta]) -> (Vec<Field>, Vec<ArrayRef>) {
    let fields = vec![
        Field::new("task_id", DataType::Utf8, false),
        Field::new("traj_id", DataType::Utf8, false),
        Field::new("sample", DataType::Int64, false),
        Field::new("part", DataType::Int32, false),
        Field::new("source", DataType::Utf8, false),
        Field::new("reward", DataType::Float64, false),
        Field::new("num_turns", DataType::Int32, false),
    ];
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            metas.iter().map(|m| m.task_id.as_str()),
        )),
        Arc::new(StringArray::from_iter_values(
            metas.iter().map(|m| m.traj_id.as_str()),
        )),
        Arc::new(Int64Array::from_iter_values(metas.iter().map(|m| m.sample))),
        Arc::new(Int32Array::from_iter_values(metas.iter().map(|m| m.part))),
        Arc::new(StringArray::from_iter_values(
            metas.iter().map(|m| m.source.as_str()),
        )),
        Arc::new(Float64Array::from_iter_values(
            metas.iter().map(|m| m.reward),
        )),
        Arc::new(Int32Array::from_iter_values(
            metas.iter().map(|m| m.num_turns),
        )),
    ];
    (fields, cols)
}

fn list_of(
    item: DataType,
    lengths: impl IntoIterator<Item = usize>,
    values: ArrayRef,
) -> (Field, ArrayRef) {
    let item = Arc::new(Field::new("item", item, true));
    let arr = ListArray::new(
        item.clone(),
        OffsetBuffer::from_lengths(lengths),
        values,
        None,
    );
    (Field::new("x", DataType::List(item), false), Arc::new(arr))
}

fn named(f: Field, name: &str) -> Field {
    f.with_name(name)
}

/// Writes the pre-tokenized Parquet.
pub fn write_tokens_parquet(
    path: &Path,
    rows: &[TokenRow],
    fp: &Fingerprints,
) -> Result<(), ExportError> {
    let metas: Vec<&RowMeta> = rows.iter().map(|r| &r.meta).collect();
    let (mut fields, mut cols) = meta_columns(&metas);
    let lens: Vec<usize> = rows.iter().map(|r| r.input_ids.len()).collect();
    let ids = Int32Array::from_iter_values(
        rows.iter()
            .flat_map(|r| r.input_ids.iter().map(|&i| i as i32)),
    );
    let labels = Int32Array::from_iter_values(rows.iter().flat_map(|r| {
        r.input_ids
            .iter()
            .zip(&r.assistant_masks)
            .map(|(&i, &m)| if m == 1 { i as i32 } else { -100 })
    }));
    let masks = Int8Array::from_iter_values(
        rows.iter()
            .flat_map(|r| r.assistant_masks.iter().map(|&m| m as i8)),
    );
    for (name, dt, arr) in [
        ("input_ids", DataType::Int32, Arc::new(ids) as ArrayRef),
        ("labels", DataType::Int32, Arc::new(labels) as ArrayRef),
        (
            "assistant_masks",
            DataType::Int8,
            Arc::new(masks) as ArrayRef,
        ),
    ] {
        let (f, a) = list_of(dt, lens.iter().copied(), arr);
        fields.push(named(f, name));
        cols.push(a);
    }
    fields.push(Field::new("n_tokens", DataType::Int32, false));
    cols.push(Arc::new(Int32Array::from_iter_values(
        lens.iter().map(|&n| n as i32),
    )));
    fields.push(Field::new("n_trained", DataType::Int32, false));
    cols.push(Arc::new(Int32Array::from_iter_values(rows.iter().map(
        |r| r.assistant_masks.iter().filter(|&&m| m == 1).count() as i32,
    ))));
    for (name, v) in [
        ("tokenizer_sha", &fp.tokenizer_sha),
        ("template_sha", &fp.template_sha),
    ] {
        fields.push(Field::new(name, DataType::Utf8, false));
        cols.push(Arc::new(StringArray::from_iter_values(
            rows.iter().map(|_| v.as_str()),
        )));
    }
    let kv = kv_metadata(
        "tokens",
        &[
            ("dojo.model", fp.model.clone()),
            ("dojo.tokenizer_sha", fp.tokenizer_sha.clone()),
            ("dojo.template_sha", fp.template_sha.clone()),
        ],
    );
    finish(path, fields, cols, kv)
}

fn finish(
    path: &Path,
    fields: Vec<Field>,
    cols: Vec<ArrayRef>,
    kv: Vec<(String, String)>,
) -> Result<(), ExportError> {
    let meta: std::collections::BTreeMap<String, String> = kv.iter().cloned().collect();
    let schema = Schema::new_with_metadata(fields, meta);
    let batch = RecordBatch::try_new(Arc::new(schema), cols).map_err(|e| ExportError::Parquet {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    write_parquet(path, batch, kv)
}

fn opt_str(m: &Value, k: &str) -> Option<String> {
    m.get(k).and_then(Value::as_str).map(str::to_string)
}

/// Writes the messages Parquet. `messages` is a list of structs (role, content,
/// reasoning_content, tool_calls, tool_call_id, name); absent fields are null. `tools` is a list
/// of structs built the same way as the arguments below.
///
/// `tool_calls[].function.arguments` is a struct, as the trainers' loaders expect objects: its
/// fields are the union of the argument keys over the whole file (nested objects and lists
/// likewise), null where a call lacks the key — the very type pyarrow's JSON reader infers from
/// the JSONL export. Each key has one type over the file (integers mixed with floats become
/// floats); a key whose values have mixed types (say a string in one call and a number in
/// another), an argument that is not an object (one unparsable call turns the whole column), or
/// an empty object (Parquet has no empty structs) falls back to the value's JSON text. The Arrow
/// schema metadata `dojo.arguments_json_paths` lists those paths (e.g. `arguments.timeout`), so
/// a loader knows which to `json.loads`.
///
/// Loaded with `datasets`, the dicts equal the JSONL's objects once `None` values are dropped
/// (`datasets` ≥ 5 reads the JSONL's objects as they are, without the union's null keys). A
/// consumer that feeds these dicts to a chat template unchanged renders absent keys as `null`:
/// drop `None` values first.
pub fn write_messages_parquet(path: &Path, rows: &[MessagesRow]) -> Result<(), ExportError> {
    let metas: Vec<&RowMeta> = rows.iter().map(|r| &r.meta).collect();
    let (mut fields, mut cols) = meta_columns(&metas);
    let all: Vec<&Value> = rows.iter().flat_map(|r| r.messages.iter()).collect();
    // tool_calls: list<struct{id, type, function: struct{name, arguments: struct{...}}}>
    let calls: Vec<&Value> = all
        .iter()
        .flat_map(|m| {
            m.get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        })
        .collect();
    let args: Vec<Option<&Value>> = calls
        .iter()
        .map(|c| c.pointer("/function/arguments").filter(|v| !v.is_null()))
        .collect();
    let args_ty = args
        .iter()
        .flatten()
        .fold(Ty::Unknown, |t, v| t.merge(Ty::of(v)))
        .finish();
    let mut json_paths = Vec::new();
    args_ty.json_paths("arguments", &mut json_paths);
    let (args_type, args_array) = args_ty.build(&args);
    let fn_fields = Fields::from(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("arguments", args_type, true),
    ]);
    let function = StructArray::new(
        fn_fields.clone(),
        vec![
            Arc::new(StringArray::from_iter_values(calls.iter().map(|c| {
                c.pointer("/function/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            }))),
            args_array,
        ],
        None,
    );
    let call_fields = Fields::from(vec![
        Field::new("id", DataType::Utf8, true),
        Field::new("type", DataType::Utf8, false),
        Field::new("function", DataType::Struct(fn_fields), false),
    ]);
    let call_struct = StructArray::new(
        call_fields.clone(),
        vec![
            Arc::new(StringArray::from_iter(
                calls.iter().map(|c| opt_str(c, "id")),
            )),
            Arc::new(StringArray::from_iter_values(
                calls.iter().map(|_| "function"),
            )),
            Arc::new(function),
        ],
        None,
    );
    let call_item = Arc::new(Field::new("item", DataType::Struct(call_fields), true));
    let has_calls: Vec<bool> = all.iter().map(|m| m.get("tool_calls").is_some()).collect();
    let tool_calls = ListArray::new(
        call_item.clone(),
        OffsetBuffer::from_lengths(all.iter().map(|m| {
            m.get("tool_calls")
                .and_then(Value::as_array)
                .map_or(0, Vec::len)
        })),
        Arc::new(call_struct),
        Some(has_calls.into()),
    );
    let msg_fields = Fields::from(vec![
        Field::new("role", DataType::Utf8, false),
        Field::new("content", DataType::Utf8, false),
        Field::new("reasoning_content", DataType::Utf8, true),
        Field::new("tool_calls", DataType::List(call_item), true),
        Field::new("tool_call_id", DataType::Utf8, true),
        Field::new("name", DataType::Utf8, true),
    ]);
    let msg_struct = StructArray::new(
        msg_fields.clone(),
        vec![
            Arc::new(StringArray::from_iter_values(
                all.iter().map(|m| role(m).to_string()),
            )),
            Arc::new(StringArray::from_iter_values(
                all.iter().map(|m| content_text(m)),
            )),
            Arc::new(StringArray::from_iter(
                all.iter().map(|m| opt_str(m, "reasoning_content")),
            )),
            Arc::new(tool_calls),
            Arc::new(StringArray::from_iter(
                all.iter().map(|m| opt_str(m, "tool_call_id")),
            )),
            Arc::new(StringArray::from_iter(
                all.iter().map(|m| opt_str(m, "name")),
            )),
        ],
        None,
    );
    let (f, a) = list_of(
        DataType::Struct(msg_fields),
        rows.iter().map(|r| r.messages.len()),
        Arc::new(msg_struct),
    );
    fields.push(named(f, "messages"));
    cols.push(a);
    // tools: list<struct> over the union of the tool schemas' keys, like the arguments. verl
    // hands the column to `apply_chat_template(tools=...)`, which takes objects, not JSON text.
    let tools: Vec<Value> = rows.iter().map(|r| Value::Array(r.tools.clone())).collect();
    let tools_ty = tools
        .iter()
        .fold(Ty::Unknown, |t, v| t.merge(Ty::of(v)))
        .finish();
    let tools_ty = match tools_ty {
        Ty::List(_) => tools_ty,
        // No tools anywhere: still a list column.
        _ => Ty::List(Box::new(Ty::Json)),
    };
    let mut tools_json_paths = Vec::new();
    tools_ty.json_paths("tools", &mut tools_json_paths);
    let (tools_type, tools_array) = tools_ty.build(&tools.iter().map(Some).collect::<Vec<_>>());
    fields.push(Field::new("tools", tools_type, false));
    cols.push(tools_array);
    let kv = kv_metadata(
        "messages",
        &[
            ("dojo.arguments_json_paths", json_paths.join(",")),
            ("dojo.tools_json_paths", tools_json_paths.join(",")),
        ],
    );
    finish(path, fields, cols, kv)
}

/// The Arrow type of one JSON position (an argument key, a list item) over a whole file.
#[derive(Debug, Clone, PartialEq)]
enum Ty {
    /// Only nulls (or nothing) seen: stored as an all-null string column.
    Unknown,
    Bool,
    Int,
    Float,
    Str,
    List(Box<Ty>),
    /// Fields in order of first appearance, as pyarrow orders them.
    Struct(Vec<(String, Ty)>),
    /// Mixed types: each value's JSON text.
    Json,
}

impl Ty {
    fn of(v: &Value) -> Ty {
        match v {
            Value::Null => Ty::Unknown,
            Value::Bool(_) => Ty::Bool,
            Value::Number(n) if n.is_i64() => Ty::Int,
            Value::Number(_) => Ty::Float,
            Value::String(_) => Ty::Str,
            Value::Array(items) => Ty::List(Box::new(
                items.iter().fold(Ty::Unknown, |t, v| t.merge(Ty::of(v))),
            )),
            Value::Object(o) => Ty::Struct(o.iter().map(|(k, v)| (k.clone(), Ty::of(v))).collect()),
        }
    }

    fn merge(self, other: Ty) -> Ty {
        match (self, other) {
            (Ty::Unknown, t) | (t, Ty::Unknown) => t,
            (Ty::Int, Ty::Float) | (Ty::Float, Ty::Int) => Ty::Float,
            (Ty::List(a), Ty::List(b)) => Ty::List(Box::new(a.merge(*b))),
            (Ty::Struct(mut a), Ty::Struct(b)) => {
                for (k, t) in b {
                    match a.iter_mut().find(|(ak, _)| *ak == k) {
                        Some((_, at)) => *at = std::mem::replace(at, Ty::Unknown).merge(t),
                        None => a.push((k, t)),
                    }
                }
                Ty::Struct(a)
            }
            (a, b) if a == b => a,
            _ => Ty::Json,
        }
    }

    /// Replaces what Parquet cannot store: an empty struct becomes JSON text.
    fn finish(self) -> Ty {
        match self {
            Ty::Struct(f) if f.is_empty() => Ty::Json,
            Ty::Struct(f) => Ty::Struct(f.into_iter().map(|(k, t)| (k, t.finish())).collect()),
            Ty::List(t) => Ty::List(Box::new(t.finish())),
            t => t,
        }
    }

    /// Paths stored as JSON text.
    fn json_paths(&self, at: &str, out: &mut Vec<String>) {
        match self {
            Ty::Json => out.push(at.to_string()),
            Ty::List(t) => t.json_paths(&format!("{at}[]"), out),
            Ty::Struct(f) => {
                for (k, t) in f {
                    t.json_paths(&format!("{at}.{k}"), out);
                }
            }
            _ => {}
        }
    }

    /// The column for `vals` (`None` = null), which all fit this type.
    fn build(&self, vals: &[Option<&Value>]) -> (DataType, ArrayRef) {
        match self {
            Ty::Unknown => (
                DataType::Utf8,
                Arc::new(StringArray::from(vec![None::<&str>; vals.len()])),
            ),
            Ty::Bool => (
                DataType::Boolean,
                Arc::new(BooleanArray::from(
                    vals.iter()
                        .map(|v| v.and_then(Value::as_bool))
                        .collect::<Vec<_>>(),
                )),
            ),
            Ty::Int => (
                DataType::Int64,
                Arc::new(Int64Array::from_iter(
                    vals.iter().map(|v| v.and_then(Value::as_i64)),
                )),
            ),
            Ty::Float => (
                DataType::Float64,
                Arc::new(Float64Array::from_iter(
                    vals.iter().map(|v| v.and_then(Value::as_f64)),
                )),
            ),
            Ty::Str => (
                DataType::Utf8,
                Arc::new(StringArray::from_iter(
                    vals.iter().map(|v| v.and_then(Value::as_str)),
                )),
            ),
            Ty::Json => (
                DataType::Utf8,
                Arc::new(StringArray::from_iter(
                    vals.iter()
                        .map(|v| v.filter(|v| !v.is_null()).map(Value::to_string)),
                )),
            ),
            Ty::List(item) => {
                let lists: Vec<Option<&Vec<Value>>> =
                    vals.iter().map(|v| v.and_then(Value::as_array)).collect();
                let items: Vec<Option<&Value>> = lists
                    .iter()
                    .flatten()
                    .flat_map(|l| l.iter().map(|v| Some(v).filter(|v| !v.is_null())))
                    .collect();
                let (item_type, child) = item.build(&items);
                let item_field = Arc::new(Field::new("item", item_type, true));
                let arr = ListArray::new(
                    item_field.clone(),
                    OffsetBuffer::from_lengths(lists.iter().map(|l| l.map_or(0, Vec::len))),
                    child,
                    Some(lists.iter().map(Option::is_some).collect::<Vec<_>>().into()),
                );
                (DataType::List(item_field), Arc::new(arr))
            }
            Ty::Struct(fields) => {
                let objs: Vec<Option<&serde_json::Map<String, Value>>> =
                    vals.iter().map(|v| v.and_then(Value::as_object)).collect();
                let mut arrow_fields = Vec::with_capacity(fields.len());
                let mut children = Vec::with_capacity(fields.len());
                for (k, t) in fields {
                    let child_vals: Vec<Option<&Value>> = objs
                        .iter()
                        .map(|o| o.and_then(|o| o.get(k)).filter(|v| !v.is_null()))
                        .collect();
                    let (dt, child) = t.build(&child_vals);
                    arrow_fields.push(Field::new(k, dt, true));
                    children.push(child);
                }
                let arrow_fields = Fields::from(arrow_fields);
                let arr = StructArray::new(
                    arrow_fields.clone(),
                    children,
                    Some(objs.iter().map(Option::is_some).collect::<Vec<_>>().into()),
                );
                (DataType::Struct(arrow_fields), Arc::new(arr))
            }
        }
    }
}

fn meta_json(m: &RowMeta) -> serde_json::Map<String, Value> {
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

fn write_lines(path: &Path, lines: impl Iterator<Item = Value>) -> Result<(), ExportError> {
    let f = std::fs::File::create(path).map_err(io_err(path))?;
    let mut w = std::io::BufWriter::new(f);
    for v in lines {
        serde_json::to_writer(&mut w, &v).map_err(|e| io_err(path)(e.into()))?;
        w.write_all(b"\n").map_err(io_err(path))?;
    }
    w.flush().map_err(io_err(path))
}

/// Writes the messages JSONL (`messages`, `tools`, metadata columns).
pub fn write_messages_jsonl(path: &Path, rows: &[MessagesRow]) -> Result<(), ExportError> {
    write_lines(
        path,
        rows.iter().map(|r| {
            let mut o = serde_json::Map::new();
            o.insert("messages".into(), Value::Array(r.messages.clone()));
            o.insert("tools".into(), Value::Array(r.tools.clone()));
            o.extend(meta_json(&r.meta));
            Value::Object(o)
        }),
    )
}

/// Converts portable messages to LLaMA-Factory's sharegpt layout. Errors when the conversation
/// cannot alternate as LLaMA-Factory requires (human/observation at odd positions,
/// gpt/function_call at even ones).
///
/// System messages go to `system`; a turn's thought text before its calls is kept as
/// `<think>…</think>` in front of the call JSON, which LLaMA-Factory's function formatter strips
/// into the template's thought slot; trailing messages after the last assistant turn (the
/// submit's observation) are dropped: nothing after it is trained.
pub fn to_sharegpt(messages: &[Value], tools: &[Value]) -> Result<Value, String> {
    let mut system = Vec::new();
    let mut conv: Vec<Value> = Vec::new();
    for (i, m) in through_last_assistant(messages).iter().enumerate() {
        let text = content_text(m);
        let (from, value) = match role(m) {
            "system" => {
                system.push(text);
                continue;
            }
            "user" => ("human", text),
            "tool" => ("observation", text),
            "assistant" => {
                let calls = Traj::tool_calls(m);
                if calls.is_empty() {
                    ("gpt", text)
                } else {
                    let calls: Vec<Value> = calls
                        .into_iter()
                        .map(|(name, arguments)| json!({"name": name, "arguments": arguments}))
                        .collect();
                    let body = if calls.len() == 1 {
                        calls[0].to_string()
                    } else {
                        Value::Array(calls).to_string()
                    };
                    // The thought, then the call(s) in one `<tool_call>` block: what LLaMA-Factory's
                    // FunctionFormatter looks for (by the template's tool-call words) before it
                    // parses the JSON and keeps the text around it as the thought.
                    let block = format!("<tool_call>\n{body}\n</tool_call>");
                    let value = if text.trim().is_empty() {
                        block
                    } else {
                        format!("{}\n{block}", text.trim())
                    };
                    ("function_call", value)
                }
            }
            other => {
                return Err(format!(
                    "message {i} has role {other:?}, which sharegpt cannot hold"
                ));
            }
        };
        // Parallel calls produce several observations: LLaMA-Factory wants one.
        if from == "observation"
            && let Some(prev) = conv.last_mut()
            && prev["from"] == "observation"
        {
            let joined = format!("{}\n{}", prev["value"].as_str().unwrap_or_default(), value);
            prev["value"] = json!(joined);
            continue;
        }
        let even = conv.len() % 2 == 1;
        let ok = if even {
            matches!(from, "gpt" | "function_call")
        } else {
            matches!(from, "human" | "observation")
        };
        if !ok {
            return Err(format!(
                "message {i} ({from}) breaks sharegpt's human/gpt alternation at position {}",
                conv.len()
            ));
        }
        conv.push(json!({"from": from, "value": value}));
    }
    if conv.is_empty() || conv.len() % 2 == 1 {
        return Err("conversation does not end with an assistant turn".into());
    }
    Ok(json!({
        "conversations": conv,
        "system": system.join("\n\n"),
        "tools": Value::Array(tools.to_vec()).to_string(),
    }))
}

/// Writes sharegpt JSONL; returns the rows that could not be converted (index, reason).
pub fn write_sharegpt(
    path: &Path,
    rows: &[MessagesRow],
) -> Result<Vec<(usize, String)>, ExportError> {
    let mut bad = Vec::new();
    let mut out = Vec::with_capacity(rows.len());
    for (i, r) in rows.iter().enumerate() {
        match to_sharegpt(&r.messages, &r.tools) {
            Ok(Value::Object(mut o)) => {
                o.extend(meta_json(&r.meta));
                out.push(Value::Object(o));
            }
            Ok(_) => {}
            Err(e) => bad.push((i, e)),
        }
    }
    write_lines(path, out.into_iter())?;
    Ok(bad)
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

    #[test]
    fn arguments_are_a_struct_over_the_union_of_keys() {
        use arrow::array::{Array, AsArray};
        use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.parquet");
        write_messages_parquet(&path, &crate::fixtures::rows_with_varied_arguments(true)).unwrap();
        let reader =
            ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).unwrap()).unwrap();
        let meta = reader.schema().metadata().clone();
        assert_eq!(meta["dojo.arguments_json_paths"], "arguments.timeout");
        let batch = reader.build().unwrap().next().unwrap().unwrap();
        let msgs = batch.column_by_name("messages").unwrap().as_list::<i32>();
        let msg = msgs.values().as_struct();
        let calls = msg.column_by_name("tool_calls").unwrap().as_list::<i32>();
        let function = calls
            .values()
            .as_struct()
            .column_by_name("function")
            .unwrap();
        let args = function.as_struct().column_by_name("arguments").unwrap();
        let DataType::Struct(fields) = args.data_type() else {
            panic!("arguments is {:?}", args.data_type());
        };
        let names: Vec<(&str, &DataType)> = fields
            .iter()
            .map(|f| (f.name().as_str(), f.data_type()))
            .collect();
        assert_eq!(names[0], ("command", &DataType::Utf8));
        assert_eq!(names[1], ("path", &DataType::Utf8));
        assert_eq!(names[2], ("line", &DataType::Float64));
        assert_eq!(names[4], ("flag", &DataType::Boolean));
        assert_eq!(names[5], ("timeout", &DataType::Utf8));
        let DataType::Struct(opts) = names[3].1 else {
            panic!("opts is {:?}", names[3].1);
        };
        assert_eq!(opts[0].name(), "tags");
        assert!(matches!(opts[0].data_type(), DataType::List(_)));
        assert_eq!(opts[1].data_type(), &DataType::Int64);
        let args = args.as_struct();
        assert_eq!(args.len(), 7);
        let timeout = args.column_by_name("timeout").unwrap().as_string::<i32>();
        assert_eq!(timeout.value(3), "10");
        assert_eq!(timeout.value(6), "\"10s\"");
        assert!(timeout.is_null(0));
        assert_eq!(
            args.column_by_name("line")
                .unwrap()
                .as_primitive::<arrow::datatypes::Float64Type>()
                .value(2),
            3.0
        );
    }

    #[test]
    fn empty_arguments_everywhere_fall_back_to_json_text() {
        let ty = [json!({}), json!({})]
            .iter()
            .fold(Ty::Unknown, |t, v| t.merge(Ty::of(v)))
            .finish();
        assert_eq!(ty, Ty::Json);
        let mut paths = Vec::new();
        ty.json_paths("arguments", &mut paths);
        assert_eq!(paths, ["arguments"]);
    }

    #[test]
    fn sharegpt_alternates_and_drops_the_trailing_observation() {
        let msgs: Vec<Value> = [
            json!({"role": "system", "content": "sys"}),
            json!({"role": "user", "content": "fix"}),
            json!({"role": "assistant", "content": "look", "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}},
                {"id": "b", "type": "function", "function": {"name": "bash", "arguments": {"command": "pwd"}}}]}),
            json!({"role": "tool", "tool_call_id": "a", "content": "x.py"}),
            json!({"role": "tool", "tool_call_id": "b", "content": "/testbed"}),
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "s", "type": "function", "function": {"name": "submit", "arguments": {}}}]}),
            json!({"role": "tool", "tool_call_id": "s", "content": "done"}),
        ]
        .to_vec();
        let s = to_sharegpt(&msgs, &[]).unwrap();
        assert_eq!(s["system"], "sys");
        let conv = s["conversations"].as_array().unwrap();
        let froms: Vec<&str> = conv.iter().map(|c| c["from"].as_str().unwrap()).collect();
        assert_eq!(
            froms,
            ["human", "function_call", "observation", "function_call"]
        );
        // LLaMA-Factory's FunctionFormatter finds the `<tool_call>` block and keeps the text
        // before it as the thought (checked with llamafactory 0.9.5:
        // examples/trainers/llamafactory_check.py).
        assert_eq!(
            conv[1]["value"],
            "look\n<tool_call>\n[{\"name\":\"bash\",\"arguments\":{\"command\":\"ls\"}},{\"name\":\"bash\",\"arguments\":{\"command\":\"pwd\"}}]\n</tool_call>"
        );
        assert_eq!(conv[2]["value"], "x.py\n/testbed");
        assert_eq!(
            conv[3]["value"],
            "<tool_call>\n{\"name\":\"submit\",\"arguments\":{}}\n</tool_call>"
        );
        assert_eq!(through_last_assistant(&msgs).len(), msgs.len() - 1);
    }

    #[test]
    fn sharegpt_rejects_broken_alternation() {
        let msgs = vec![
            json!({"role": "user", "content": "a"}),
            json!({"role": "user", "content": "b"}),
            json!({"role": "assistant", "content": "c"}),
        ];
        assert!(to_sharegpt(&msgs, &[]).unwrap_err().contains("alternation"));
    }
}
