//! Training data: `tokens.parquet` as `dojo curate` writes it, checked, cut to `--max-len`, and
//! served as length-bucketed micro-batches in a resumable order.
//!
//! Columns used: `input_ids` and `labels` (lists of int32 or int64, same length per row;
//! labels −100 where no loss, the Hugging Face convention). The file's `dojo.tokenizer_sha`
//! key, when present, is returned so the trainer can compare it with the model's tokenizer.
//!
//! Over-long rows ([`Overlong`]): `truncate` keeps the first `max_len` tokens (system prompt,
//! task and the earliest turns; what Hugging Face tokenizers do by default), `drop` skips the
//! row. Either way the rows are counted in [`DataReport`]; a row left without trained tokens
//! after the cut is dropped and counted too.
//!
//! Order: each epoch shuffles the rows with a generator seeded by `(seed, epoch)`, sorts them
//! by length within windows of [`BUCKET_WINDOW`] micro-batches (so a batch holds rows of similar
//! length and little padding) and shuffles the batches. The plan of an epoch is a pure function
//! of the seed, the epoch and the row lengths, so a [`Cursor`] (epoch, batch index) is the whole
//! data-loader state: a resumed run sees every row once per epoch, none twice, none skipped.

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow::array::{Array, AsArray, ListArray};
use arrow::datatypes::{DataType, Int32Type, Int64Type};
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use rand::SeedableRng;
use rand::seq::SliceRandom;

use crate::TrainError;

/// Micro-batches per length-sorting window.
pub const BUCKET_WINDOW: usize = 32;

/// What to do with rows longer than `max_len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Overlong {
    Truncate,
    Drop,
}

impl std::str::FromStr for Overlong {
    type Err = TrainError;

    /// `truncate` or `drop`, else an error naming the flag (`--overlong`).
    fn from_str(s: &str) -> Result<Overlong, TrainError> {
        Overlong::parse(s).ok_or_else(|| {
            TrainError::Config(format!("--overlong {s:?}: expected truncate or drop"))
        })
    }
}

impl Overlong {
    pub fn parse(s: &str) -> Option<Overlong> {
        match s {
            "truncate" => Some(Overlong::Truncate),
            "drop" => Some(Overlong::Drop),
            _ => None,
        }
    }
}

/// One training row.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainRow {
    pub input_ids: Vec<u32>,
    pub labels: Vec<i32>,
}

impl TrainRow {
    /// Tokens that carry loss (a label at position 0 has no preceding token to predict it).
    pub fn n_trained(&self) -> usize {
        self.labels.iter().skip(1).filter(|&&l| l >= 0).count()
    }
}

/// What loading did to the rows.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct DataReport {
    pub path: PathBuf,
    pub rows: usize,
    pub used: usize,
    pub max_len: usize,
    pub overlong_policy: String,
    pub truncated: usize,
    pub dropped_overlong: usize,
    /// Rows without a trained token (after truncation).
    pub dropped_untrained: usize,
    pub tokens: usize,
    pub trained_tokens: usize,
}

impl std::fmt::Display for DataReport {
    /// The `data:` line of `dojo train sft`: rows used, tokens, and what the length limit and
    /// the masking dropped.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "data: {} rows, {} used ({} tokens, {} trained); longer than {}: {} truncated, {} \
             dropped; {} without trained tokens dropped",
            self.rows,
            self.used,
            self.tokens,
            self.trained_tokens,
            self.max_len,
            self.truncated,
            self.dropped_overlong,
            self.dropped_untrained
        )
    }
}

/// The loaded rows plus what the file says about itself.
pub struct Dataset {
    pub samples: Vec<TrainRow>,
    pub report: DataReport,
    /// `dojo.tokenizer_sha` from the Parquet key-value metadata.
    pub tokenizer_sha: Option<String>,
}

fn bad(path: &Path, reason: impl Into<String>) -> TrainError {
    TrainError::Data {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// The data file failed at step `what` on an underlying error, which stays the cause.
fn bad_from(
    path: &Path,
    what: &'static str,
    source: impl std::error::Error + Send + Sync + 'static,
) -> TrainError {
    TrainError::DataFrom {
        path: path.to_path_buf(),
        what,
        source: Box::new(source),
    }
}

fn list_column<'a>(
    path: &Path,
    batch: &'a arrow::array::RecordBatch,
    name: &str,
) -> Result<&'a ListArray, TrainError> {
    let col = batch
        .column_by_name(name)
        .ok_or_else(|| bad(path, format!("no column `{name}`")))?;
    col.as_list_opt::<i32>().ok_or_else(|| {
        bad(
            path,
            format!(
                "column `{name}` is {}, expected a list of integers",
                col.data_type()
            ),
        )
    })
}

fn row_values(
    path: &Path,
    col: &ListArray,
    name: &str,
    row: usize,
) -> Result<Vec<i64>, TrainError> {
    if col.is_null(row) {
        return Err(bad(path, format!("row {row}: `{name}` is null")));
    }
    let v = col.value(row);
    if v.null_count() > 0 {
        return Err(bad(path, format!("row {row}: `{name}` has null entries")));
    }
    match v.data_type() {
        DataType::Int32 => Ok(v
            .as_primitive::<Int32Type>()
            .values()
            .iter()
            .map(|&x| x as i64)
            .collect()),
        DataType::Int64 => Ok(v.as_primitive::<Int64Type>().values().to_vec()),
        dt => Err(bad(
            path,
            format!("column `{name}` holds {dt}, expected int32 or int64"),
        )),
    }
}

/// Read and check `path` (a `tokens.parquet`, or a `dojo curate` output directory holding one).
/// Every id must be below `vocab_size`; labels must be −100 or an id.
pub fn load_tokens(
    path: &Path,
    max_len: usize,
    overlong: Overlong,
    vocab_size: usize,
) -> Result<Dataset, TrainError> {
    let path = if path.is_dir() {
        path.join("tokens.parquet")
    } else {
        path.to_path_buf()
    };
    let path = path.as_path();
    if max_len < 2 {
        return Err(bad(
            path,
            format!("--max-len {max_len}: need at least 2 tokens"),
        ));
    }
    let (reader, tokenizer_sha) = open_tokens(path)?;
    let mut report = DataReport {
        path: path.to_path_buf(),
        max_len,
        overlong_policy: format!("{overlong:?}").to_lowercase(),
        ..Default::default()
    };
    let mut samples = Vec::new();
    let mut row_base = 0usize;
    for batch in reader {
        let batch = batch.map_err(|e| bad_from(path, "reading", e))?;
        let ids_col = list_column(path, &batch, "input_ids")?;
        let lab_col = list_column(path, &batch, "labels")?;
        for r in 0..batch.num_rows() {
            report.rows += 1;
            let ids = row_values(path, ids_col, "input_ids", r)?;
            let labels = row_values(path, lab_col, "labels", r)?;
            let s = checked_row(path, row_base + r, &ids, &labels, vocab_size)?;
            samples.extend(admit(&mut report, s, max_len, overlong));
        }
        row_base += batch.num_rows();
    }
    report.used = samples.len();
    if samples.is_empty() {
        return Err(bad(
            path,
            format!(
                "nothing to train on: {} rows, {} without any label other than -100, {} dropped \
                 as longer than {max_len} tokens",
                report.rows, report.dropped_untrained, report.dropped_overlong
            ),
        ));
    }
    Ok(Dataset {
        samples,
        report,
        tokenizer_sha,
    })
}

/// Open a `tokens.parquet` and check it has dojo curate's columns: its batch reader and the
/// `dojo.tokenizer_sha` it was written with.
fn open_tokens(path: &Path) -> Result<(ParquetRecordBatchReader, Option<String>), TrainError> {
    let file = File::open(path).map_err(|e| bad_from(path, "cannot open", e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| bad_from(path, "not a readable Parquet file", e))?;
    let tokenizer_sha = builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|k| k.key == "dojo.tokenizer_sha"))
        .and_then(|k| k.value.clone());
    let schema = builder.schema().clone();
    for name in ["input_ids", "labels"] {
        if schema.field_with_name(name).is_err() {
            let have: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            return Err(bad(
                path,
                format!(
                    "no column `{name}` (columns: {}); expected dojo curate's tokens.parquet",
                    have.join(", ")
                ),
            ));
        }
    }
    let reader = builder.build().map_err(|e| bad_from(path, "reading", e))?;
    Ok((reader, tokenizer_sha))
}

/// Row `row` as a [`TrainRow`], once its lengths agree, its ids are in the vocabulary and its
/// labels are −100 or ids.
fn checked_row(
    path: &Path,
    row: usize,
    ids: &[i64],
    labels: &[i64],
    vocab_size: usize,
) -> Result<TrainRow, TrainError> {
    if ids.len() != labels.len() {
        return Err(bad(
            path,
            format!(
                "row {row}: {} input_ids but {} labels",
                ids.len(),
                labels.len()
            ),
        ));
    }
    if let Some(&id) = ids.iter().find(|&&i| i < 0 || i as usize >= vocab_size) {
        return Err(bad(
            path,
            format!(
                "row {row}: token id {id} is outside the model's vocabulary (size \
                 {vocab_size}); was the data tokenized for another model?"
            ),
        ));
    }
    if let Some(&l) = labels
        .iter()
        .find(|&&l| l != -100 && (l < 0 || l as usize >= vocab_size))
    {
        return Err(bad(
            path,
            format!("row {row}: label {l} is neither -100 nor a token id below {vocab_size}"),
        ));
    }
    Ok(TrainRow {
        input_ids: ids.iter().map(|&i| i as u32).collect(),
        labels: labels.iter().map(|&l| l as i32).collect(),
    })
}

/// The row as trained (cut to `max_len` under [`Overlong::Truncate`]), or `None` when it is
/// dropped (too long under [`Overlong::Drop`], or nothing left to learn); counted in `report`.
fn admit(
    report: &mut DataReport,
    mut s: TrainRow,
    max_len: usize,
    overlong: Overlong,
) -> Option<TrainRow> {
    if s.input_ids.len() > max_len {
        match overlong {
            Overlong::Drop => {
                report.dropped_overlong += 1;
                return None;
            }
            Overlong::Truncate => {
                s.input_ids.truncate(max_len);
                s.labels.truncate(max_len);
                report.truncated += 1;
            }
        }
    }
    let trained = s.n_trained();
    if trained == 0 {
        report.dropped_untrained += 1;
        return None;
    }
    report.tokens += s.input_ids.len();
    report.trained_tokens += trained;
    Some(s)
}

/// Position in the stream of micro-batches: the next batch is `index` of epoch `epoch`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Cursor {
    pub epoch: u64,
    pub index: usize,
}

/// Plans micro-batches of at most `batch_size` rows and `max_batch_tokens` padded tokens.
#[derive(Debug, Clone)]
pub struct Batcher {
    lens: Vec<usize>,
    pub batch_size: usize,
    pub max_batch_tokens: usize,
    pub seed: u64,
}

impl Batcher {
    pub fn new(lens: Vec<usize>, batch_size: usize, max_batch_tokens: usize, seed: u64) -> Batcher {
        Batcher {
            lens,
            batch_size: batch_size.max(1),
            max_batch_tokens,
            seed,
        }
    }

    /// The micro-batches (row indices) of `epoch`, in order.
    pub fn epoch_plan(&self, epoch: u64) -> Vec<Vec<usize>> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(
            self.seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        let mut idx: Vec<usize> = (0..self.lens.len()).collect();
        idx.shuffle(&mut rng);
        let mut batches = Vec::new();
        for window in idx.chunks(self.batch_size * BUCKET_WINDOW) {
            let mut w = window.to_vec();
            w.sort_by_key(|&i| std::cmp::Reverse(self.lens[i]));
            let mut cur: Vec<usize> = Vec::new();
            for i in w {
                // Sorted longest first, so the first row sets the padded length.
                let width = cur.first().map_or(self.lens[i], |&f| self.lens[f]);
                if !cur.is_empty()
                    && (cur.len() >= self.batch_size
                        || (cur.len() + 1) * width > self.max_batch_tokens)
                {
                    batches.push(std::mem::take(&mut cur));
                }
                cur.push(i);
            }
            if !cur.is_empty() {
                batches.push(cur);
            }
        }
        batches.shuffle(&mut rng);
        batches
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_once_per_epoch_in_similar_length_batches() {
        let lens: Vec<usize> = (0..500).map(|i| 10 + (i * 37) % 300).collect();
        let b = Batcher::new(lens.clone(), 8, 1024, 7);
        for epoch in 0..3 {
            let plan = b.epoch_plan(epoch);
            let mut seen: Vec<usize> = plan.iter().flatten().copied().collect();
            seen.sort();
            assert_eq!(seen, (0..500).collect::<Vec<_>>());
            for batch in &plan {
                assert!(batch.len() <= 8);
                let w = batch.iter().map(|&i| lens[i]).max().unwrap();
                assert!(batch.len() == 1 || batch.len() * w <= 1024);
            }
        }
        assert_eq!(b.epoch_plan(1), b.epoch_plan(1));
        assert_ne!(b.epoch_plan(1), b.epoch_plan(2));
    }

    #[test]
    fn overlong_names() {
        assert_eq!("drop".parse::<Overlong>().unwrap(), Overlong::Drop);
        let e = "cut".parse::<Overlong>().unwrap_err().to_string();
        assert_eq!(e, "--overlong \"cut\": expected truncate or drop");
    }

    #[test]
    fn data_report_line() {
        let r = DataReport {
            rows: 10,
            used: 8,
            max_len: 512,
            truncated: 1,
            dropped_overlong: 1,
            dropped_untrained: 1,
            tokens: 900,
            trained_tokens: 300,
            ..Default::default()
        };
        assert_eq!(
            r.to_string(),
            "data: 10 rows, 8 used (900 tokens, 300 trained); longer than 512: 1 truncated, 1 \
             dropped; 1 without trained tokens dropped"
        );
    }
}
