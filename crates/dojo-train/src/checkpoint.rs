//! Checkpoints: Hugging Face layout (`model.safetensors`, `config.json`, tokenizer files), plus
//! `optimizer.safetensors` and `trainer_state.json` for resuming.
//!
//! A checkpoint is written into a hidden temporary directory (`.tmp-NAME-PID`), every file is
//! synced, then [`COMPLETE_MARKER`] (listing each file with its size) is written last, and the
//! directory is renamed into place. A run killed at any point leaves either nothing under the
//! final name or a complete checkpoint; [`is_complete`] also rejects a directory whose files
//! do not match the marker, and [`clean_temp`] removes leftovers on the next start.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use candle_core::Tensor;
use serde_json::{Value as Json, json};

use crate::TrainError;
use crate::data::Cursor;

/// The completion marker's file name.
pub const COMPLETE_MARKER: &str = "dojo_checkpoint_complete.json";
pub const STATE_FILE: &str = "trainer_state.json";
pub const OPTIMIZER_FILE: &str = "optimizer.safetensors";
pub const WEIGHTS_FILE: &str = "model.safetensors";

/// Where the run stands; saved with every resumable checkpoint.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TrainerState {
    pub schema_version: u32,
    /// Optimizer steps done.
    pub step: u64,
    pub total_steps: u64,
    /// The next micro-batch to train on.
    pub cursor: Cursor,
    pub tokens_seen: u64,
    pub trained_tokens_seen: u64,
    pub elapsed_s: f64,
}

/// `checkpoint-00000042`.
pub fn checkpoint_name(step: u64) -> String {
    format!("checkpoint-{step:08}")
}

fn sync_file(path: &Path) -> Result<(), TrainError> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| TrainError::file(path, e))
}

/// Write a checkpoint: `fill` writes the files into the temporary directory it is given; then
/// the marker goes in and the directory is renamed to `out/name` (replacing an older one).
pub fn write_atomic(
    out: &Path,
    name: &str,
    fill: impl FnOnce(&Path) -> Result<(), TrainError>,
) -> Result<PathBuf, TrainError> {
    let tmp = out.join(format!(".tmp-{name}-{}", std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| TrainError::file(&tmp, e))?;
    }
    std::fs::create_dir_all(&tmp).map_err(|e| TrainError::file(&tmp, e))?;
    fill(&tmp)?;
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(&tmp).map_err(|e| TrainError::file(&tmp, e))? {
        let entry = entry.map_err(|e| TrainError::file(&tmp, e))?;
        let p = entry.path();
        let len = entry.metadata().map_err(|e| TrainError::file(&p, e))?.len();
        sync_file(&p)?;
        files.insert(entry.file_name().to_string_lossy().into_owned(), len);
    }
    let marker = tmp.join(COMPLETE_MARKER);
    crate::source::write_json(
        &marker,
        &json!({"schema_version": crate::TRAIN_SCHEMA_VERSION, "files": files}),
    )?;
    sync_file(&marker)?;
    sync_file(&tmp)?;
    let dest = out.join(name);
    if dest.exists() {
        std::fs::remove_dir_all(&dest).map_err(|e| TrainError::file(&dest, e))?;
    }
    std::fs::rename(&tmp, &dest).map_err(|e| TrainError::file(&dest, e))?;
    sync_file(out)?;
    Ok(dest)
}

/// Whether `dir` holds a complete checkpoint: the marker is there and every file it lists has
/// the recorded size.
pub fn is_complete(dir: &Path) -> bool {
    let Ok(s) = std::fs::read_to_string(dir.join(COMPLETE_MARKER)) else {
        return false;
    };
    let Ok(v) = serde_json::from_str::<Json>(&s) else {
        return false;
    };
    let Some(files) = v.get("files").and_then(Json::as_object) else {
        return false;
    };
    files.iter().all(|(name, len)| {
        std::fs::metadata(dir.join(name)).is_ok_and(|m| Some(m.len()) == len.as_u64())
    })
}

/// Complete resumable checkpoints in `out`, by step, oldest first.
pub fn list(out: &Path) -> Vec<(u64, PathBuf)> {
    list_with_state(out, STATE_FILE)
}

/// Complete `checkpoint-N` directories in `out` that also hold `state_file` (a loop's own
/// resume state: SFT's [`STATE_FILE`], RL's), by step, oldest first.
pub fn list_with_state(out: &Path, state_file: &str) -> Vec<(u64, PathBuf)> {
    let mut v: Vec<(u64, PathBuf)> = std::fs::read_dir(out)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let step = name.strip_prefix("checkpoint-")?.parse::<u64>().ok()?;
            let p = e.path();
            (is_complete(&p) && p.join(state_file).is_file()).then_some((step, p))
        })
        .collect();
    v.sort();
    v
}

/// Remove temporary directories left by an interrupted write, and checkpoint directories
/// without a valid marker.
pub fn clean_temp(out: &Path) -> Result<(), TrainError> {
    for e in std::fs::read_dir(out)
        .map_err(|e| TrainError::file(out, e))?
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        let p = e.path();
        let stale = name.starts_with(".tmp-")
            || ((name.starts_with("checkpoint-") || name == "final") && !is_complete(&p));
        if stale && p.is_dir() {
            tracing::warn!(path = %p.display(), "removing an incomplete checkpoint");
            std::fs::remove_dir_all(&p).map_err(|e| TrainError::file(&p, e))?;
        }
    }
    Ok(())
}

/// Keep the newest `keep` resumable checkpoints.
pub fn prune(out: &Path, keep: usize) -> Result<(), TrainError> {
    prune_with_state(out, STATE_FILE, keep)
}

/// [`prune`] over the checkpoints [`list_with_state`] lists for `state_file`.
pub fn prune_with_state(out: &Path, state_file: &str, keep: usize) -> Result<(), TrainError> {
    let all = list_with_state(out, state_file);
    let n = all.len().saturating_sub(keep.max(1));
    for (_, p) in all.into_iter().take(n) {
        std::fs::remove_dir_all(&p).map_err(|e| TrainError::file(&p, e))?;
    }
    Ok(())
}

pub fn read_state(dir: &Path) -> Result<TrainerState, TrainError> {
    let p = dir.join(STATE_FILE);
    let s = std::fs::read_to_string(&p).map_err(|e| TrainError::file(&p, e))?;
    let st: TrainerState =
        serde_json::from_str(&s).map_err(|e| TrainError::file(&p, format!("invalid: {e}")))?;
    if st.schema_version != crate::TRAIN_SCHEMA_VERSION {
        return Err(TrainError::file(
            &p,
            format!(
                "schema version {} (this dojo writes {})",
                st.schema_version,
                crate::TRAIN_SCHEMA_VERSION
            ),
        ));
    }
    Ok(st)
}

/// Write f32 tensors as safetensors with `meta` in the header (candle's `safetensors::save`
/// writes no metadata; transformers and peft want `format: pt`).
pub fn save_safetensors(
    tensors: &HashMap<String, Tensor>,
    path: &Path,
    meta: &HashMap<String, String>,
) -> Result<(), TrainError> {
    let mut names: Vec<&String> = tensors.keys().collect();
    names.sort();
    let mut data: Vec<(String, Vec<u8>, Vec<usize>)> = Vec::new();
    for n in names {
        let t = &tensors[n];
        let v = t.flatten_all()?.to_vec1::<f32>()?;
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        data.push((n.clone(), bytes, t.dims().to_vec()));
    }
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), json!(meta));
    let mut off = 0usize;
    for (n, b, shape) in &data {
        header.insert(
            n.clone(),
            json!({"dtype": "F32", "shape": shape, "data_offsets": [off, off + b.len()]}),
        );
        off += b.len();
    }
    let mut h = serde_json::to_vec(&Json::Object(header)).map_err(|e| TrainError::file(path, e))?;
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(path).map_err(|e| TrainError::file(path, e))?,
    );
    let io = |e: std::io::Error| TrainError::file(path, e);
    f.write_all(&(h.len() as u64).to_le_bytes()).map_err(io)?;
    f.write_all(&h).map_err(io)?;
    for (_, b, _) in &data {
        f.write_all(b).map_err(io)?;
    }
    f.flush().map_err(io)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_marked_directories_count_and_leftovers_are_cleaned() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path();
        let state = TrainerState {
            schema_version: crate::TRAIN_SCHEMA_VERSION,
            step: 2,
            total_steps: 4,
            cursor: Cursor::default(),
            tokens_seen: 0,
            trained_tokens_seen: 0,
            elapsed_s: 0.0,
        };
        let dir = write_atomic(out, &checkpoint_name(2), |d| {
            std::fs::write(d.join(WEIGHTS_FILE), b"weights").unwrap();
            let s = serde_json::to_value(&state).unwrap();
            crate::source::write_json(&d.join(STATE_FILE), &s)
        })
        .unwrap();
        assert!(is_complete(&dir));
        assert_eq!(list(out), vec![(2, dir.clone())]);
        assert_eq!(read_state(&dir).unwrap(), state);

        // A write that died before its marker: under a temp name, or (older layouts, manual
        // copies) under the final name without one.
        std::fs::create_dir_all(out.join(".tmp-checkpoint-00000003-1")).unwrap();
        let half = out.join(checkpoint_name(4));
        std::fs::create_dir_all(&half).unwrap();
        std::fs::write(half.join(STATE_FILE), "{}").unwrap();
        assert_eq!(list(out).len(), 1);
        // A file truncated after the marker was written no longer matches it.
        std::fs::write(dir.join(WEIGHTS_FILE), b"weig").unwrap();
        assert!(!is_complete(&dir));
        std::fs::write(dir.join(WEIGHTS_FILE), b"weights").unwrap();

        clean_temp(out).unwrap();
        let names: Vec<String> = std::fs::read_dir(out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![checkpoint_name(2)]);
    }
}
