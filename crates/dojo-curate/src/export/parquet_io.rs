//! The Parquet plumbing every Parquet export shares: the metadata columns of [`RowMeta`], list
//! columns, the `dojo.*` key-value metadata (schema version, kind, writer) stamped on both the
//! footer and the Arrow schema, and the zstd-compressed writer.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, Float64Array, Int32Array, Int64Array, ListArray, RecordBatch, StringArray,
};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

use super::{EXPORT_SCHEMA_VERSION, ExportError, RowMeta, io_err};

pub(crate) fn kv_metadata(kind: &str, extra: &[(&str, String)]) -> Vec<(String, String)> {
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
    let perr = |e: Box<dyn std::error::Error + Send + Sync>| ExportError::Parquet {
        path: path.to_path_buf(),
        source: e,
    };
    let file = std::fs::File::create(path).map_err(io_err(path))?;
    let level = ZstdLevel::try_new(3).map_err(|e| perr(e.into()))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(level))
        .set_key_value_metadata(Some(
            kv.iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
                .collect(),
        ))
        .build();
    let mut w =
        ArrowWriter::try_new(file, batch.schema(), Some(props)).map_err(|e| perr(e.into()))?;
    w.write(&batch).map_err(|e| perr(e.into()))?;
    w.close().map_err(|e| perr(e.into()))?;
    Ok(())
}

pub(crate) fn meta_columns(metas: &[&RowMeta]) -> (Vec<Field>, Vec<ArrayRef>) {
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

pub(crate) fn list_of(
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

pub(crate) fn named(f: Field, name: &str) -> Field {
    f.with_name(name)
}

/// Writes one record batch of `fields`/`cols` with `kv` in the Parquet footer and the Arrow
/// schema.
pub(crate) fn finish(
    path: &Path,
    fields: Vec<Field>,
    cols: Vec<ArrayRef>,
    kv: Vec<(String, String)>,
) -> Result<(), ExportError> {
    let meta: std::collections::BTreeMap<String, String> = kv.iter().cloned().collect();
    let schema = Schema::new_with_metadata(fields, meta);
    let batch = RecordBatch::try_new(Arc::new(schema), cols).map_err(|e| ExportError::Parquet {
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    write_parquet(path, batch, kv)
}
