//! Parquet task files (SWE-bench publishes its splits as Parquet): every row becomes the same
//! JSON object a JSONL line would be, so one decoder validates both.

use std::fs::File;
use std::path::Path;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{
    DataType, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type,
    UInt16Type, UInt32Type, UInt64Type,
};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::{Map, Number, Value};

use crate::TaskError;
use crate::model::Location;

type Row = (Location, Result<Map<String, Value>, TaskError>);

pub(crate) fn read_parquet_rows(path: &Path) -> Result<Vec<Row>, TaskError> {
    let file = path.display().to_string();
    let perr = |e: Box<dyn std::error::Error + Send + Sync>| TaskError::Parquet {
        location: file.clone(),
        source: e,
    };
    let f = File::open(path).map_err(|e| TaskError::Io {
        path: file.clone(),
        source: e,
    })?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(f)
        .map_err(|e| perr(e.into()))?
        .build()
        .map_err(|e| perr(e.into()))?;
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| perr(e.into()))?;
        let schema = batch.schema();
        for r in 0..batch.num_rows() {
            let loc = Location {
                file: file.clone(),
                unit: "row",
                index: out.len() + 1,
            };
            let mut row = Map::new();
            let mut bad = None;
            for (c, field) in schema.fields().iter().enumerate() {
                match cell(batch.column(c), r) {
                    Ok(v) => {
                        row.insert(field.name().clone(), v);
                    }
                    Err(e) => {
                        bad = Some(TaskError::InvalidField {
                            location: loc.to_string(),
                            instance_id: row
                                .get("instance_id")
                                .and_then(Value::as_str)
                                .unwrap_or("?")
                                .to_string(),
                            field: field.name().clone(),
                            source: e.into(),
                        });
                        break;
                    }
                }
            }
            out.push((loc, bad.map_or(Ok(row), Err)));
        }
    }
    Ok(out)
}

fn num<T: Into<f64>>(x: T) -> Value {
    Number::from_f64(x.into()).map_or(Value::Null, Value::Number)
}

/// A column arrow cannot render as text (the caller names the row and field).
#[derive(Debug, thiserror::Error)]
#[error("unsupported column type {data_type}: {source}")]
struct UnsupportedColumn {
    data_type: DataType,
    #[source]
    source: arrow::error::ArrowError,
}

/// One cell as JSON. Nested lists and structs recurse; other types are rendered as text.
fn cell(col: &ArrayRef, r: usize) -> Result<Value, UnsupportedColumn> {
    if col.is_null(r) {
        return Ok(Value::Null);
    }
    Ok(match col.data_type() {
        DataType::Null => Value::Null,
        DataType::Utf8 => Value::String(col.as_string::<i32>().value(r).to_string()),
        DataType::LargeUtf8 => Value::String(col.as_string::<i64>().value(r).to_string()),
        DataType::Utf8View => Value::String(col.as_string_view().value(r).to_string()),
        DataType::Boolean => Value::Bool(col.as_boolean().value(r)),
        DataType::Int8 => Value::from(col.as_primitive::<Int8Type>().value(r)),
        DataType::Int16 => Value::from(col.as_primitive::<Int16Type>().value(r)),
        DataType::Int32 => Value::from(col.as_primitive::<Int32Type>().value(r)),
        DataType::Int64 => Value::from(col.as_primitive::<Int64Type>().value(r)),
        DataType::UInt8 => Value::from(col.as_primitive::<UInt8Type>().value(r)),
        DataType::UInt16 => Value::from(col.as_primitive::<UInt16Type>().value(r)),
        DataType::UInt32 => Value::from(col.as_primitive::<UInt32Type>().value(r)),
        DataType::UInt64 => Value::from(col.as_primitive::<UInt64Type>().value(r)),
        DataType::Float32 => num(col.as_primitive::<Float32Type>().value(r)),
        DataType::Float64 => num(col.as_primitive::<Float64Type>().value(r)),
        DataType::List(_) => list(&col.as_list::<i32>().value(r))?,
        DataType::LargeList(_) => list(&col.as_list::<i64>().value(r))?,
        DataType::Struct(fields) => {
            let s = col.as_struct();
            let mut m = Map::new();
            for (i, f) in fields.iter().enumerate() {
                m.insert(f.name().clone(), cell(s.column(i), r)?);
            }
            Value::Object(m)
        }
        _ => {
            let fmt =
                arrow::util::display::ArrayFormatter::try_new(col.as_ref(), &Default::default())
                    .map_err(|source| UnsupportedColumn {
                        data_type: col.data_type().clone(),
                        source,
                    })?;
            Value::String(fmt.value(r).to_string())
        }
    })
}

fn list(items: &ArrayRef) -> Result<Value, UnsupportedColumn> {
    (0..items.len())
        .map(|i| cell(items, i))
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}
