//! `tokens.parquet`: pre-tokenized samples (`input_ids`, `labels`, `assistant_masks`, token
//! counts) with the target tokenizer's and template's fingerprints, bit-exact with what the
//! target model would be given.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int8Array, Int32Array, StringArray};
use arrow::datatypes::{DataType, Field};

use super::parquet_io::{finish, kv_metadata, list_of, meta_columns, named};
use super::{ExportError, Fingerprints, RowMeta, TokenRow};

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
