//! `messages.parquet` and `messages.jsonl`: OpenAI-shaped conversations (portable messages,
//! tool schemas) for trainers that render them with the model's own template.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, ListArray, StringArray, StructArray};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, FieldRef, Fields};
use serde_json::Value;

use super::parquet_io::{finish, kv_metadata, list_of, meta_columns, named};
use super::schema::Ty;
use super::{ExportError, MessagesRow, RowMeta, meta_json, write_lines};
use crate::view::{content_text, role};

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
    let (tool_calls, call_item, json_paths) = tool_calls_array(&all);
    let (f, a) = messages_column(rows, &all, tool_calls, call_item);
    fields.push(named(f, "messages"));
    cols.push(a);
    let (tools_type, tools_array, tools_json_paths) = tools_column(rows);
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

/// Every message's `tool_calls`, one list per message (null where it has none):
/// `list<struct{id, type, function: struct{name, arguments: struct{...}}}>`; with the list's
/// item field and the argument paths kept as JSON text.
fn tool_calls_array(all: &[&Value]) -> (ListArray, FieldRef, Vec<String>) {
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
    (tool_calls, call_item, json_paths)
}

/// The `messages` column: per row, the list of its message structs (role, content,
/// reasoning_content, tool_calls, tool_call_id, name).
fn messages_column(
    rows: &[MessagesRow],
    all: &[&Value],
    tool_calls: ListArray,
    call_item: FieldRef,
) -> (Field, ArrayRef) {
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
    list_of(
        DataType::Struct(msg_fields),
        rows.iter().map(|r| r.messages.len()),
        Arc::new(msg_struct),
    )
}

/// The `tools` column: list<struct> over the union of the tool schemas' keys, like the
/// arguments (verl hands it to `apply_chat_template(tools=...)`, which takes objects, not JSON
/// text); with the paths kept as JSON text.
fn tools_column(rows: &[MessagesRow]) -> (DataType, ArrayRef, Vec<String>) {
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
    (tools_type, tools_array, tools_json_paths)
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
