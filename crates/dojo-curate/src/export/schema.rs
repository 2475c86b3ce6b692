//! Arrow types inferred from JSON values over a whole file, as pyarrow's JSON reader infers them:
//! objects become structs over the union of their keys, integers mixed with floats become floats,
//! and what Parquet cannot hold (mixed types, empty objects) falls back to JSON text, with the
//! paths of those columns listed so a loader knows which to parse.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, ListArray, StringArray, StructArray,
};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, Fields};
use serde_json::Value;

/// The Arrow type of one JSON position (an argument key, a list item) over a whole file.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ty {
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
    pub(crate) fn of(v: &Value) -> Ty {
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

    pub(crate) fn merge(self, other: Ty) -> Ty {
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
    pub(crate) fn finish(self) -> Ty {
        match self {
            Ty::Struct(f) if f.is_empty() => Ty::Json,
            Ty::Struct(f) => Ty::Struct(f.into_iter().map(|(k, t)| (k, t.finish())).collect()),
            Ty::List(t) => Ty::List(Box::new(t.finish())),
            t => t,
        }
    }

    /// Paths stored as JSON text.
    pub(crate) fn json_paths(&self, at: &str, out: &mut Vec<String>) {
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
    pub(crate) fn build(&self, vals: &[Option<&Value>]) -> (DataType, ArrayRef) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
