//! What goes into a checkpoint: Hugging Face layout (`model.safetensors`, `config.json`,
//! tokenizer files), plus `optimizer.safetensors` and `trainer_state.json` for resuming. How a
//! checkpoint directory is published, listed, pruned and cleaned (atomic, with a completion
//! marker) is the run-directory kit's: [`dojo_rundir::checkpoint`].

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use candle_core::Tensor;
use serde_json::{Value as Json, json};

use crate::TrainError;
use crate::data::Cursor;

pub use dojo_rundir::checkpoint::{checkpoint_name, is_complete};

/// Open a per-step log (`metrics.jsonl`, RL's `eval.jsonl`) for appending after a resume from
/// the checkpoint of `step`: the records of later steps go, since those steps run again.
pub fn open_step_log(path: &Path, step: u64) -> Result<dojo_rundir::JsonlLog, TrainError> {
    let kept = dojo_rundir::JsonlLog::open::<Json>(path)?.retain(|v: &Json| {
        v.get("step")
            .and_then(Json::as_u64)
            .is_some_and(|s| s <= step)
    })?;
    Ok(kept.log)
}

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

pub fn read_state(dir: &Path) -> Result<TrainerState, TrainError> {
    let p = dir.join(STATE_FILE);
    let s = std::fs::read_to_string(&p).map_err(|e| TrainError::file(&p, e))?;
    let st: TrainerState = serde_json::from_str(&s).map_err(|source| TrainError::Json {
        path: p.to_path_buf(),
        source,
    })?;
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

/// `v` as pretty JSON with a final newline.
pub(crate) fn write_json(path: &Path, v: &Json) -> Result<(), TrainError> {
    let s = serde_json::to_string_pretty(v).map_err(|e| TrainError::file(path, e))?;
    std::fs::write(path, s + "\n").map_err(|e| TrainError::file(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_published_state_reads_back_and_another_schema_is_refused() {
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
        let dir = dojo_rundir::checkpoint::publish(out, &checkpoint_name(2), |d| {
            std::fs::write(d.join(WEIGHTS_FILE), b"weights").unwrap();
            let s = serde_json::to_value(&state).unwrap();
            write_json(&d.join(STATE_FILE), &s)
        })
        .unwrap();
        assert_eq!(
            dojo_rundir::checkpoint::list(out, STATE_FILE),
            vec![(2, dir.clone())]
        );
        assert_eq!(read_state(&dir).unwrap(), state);
        let mut other = serde_json::to_value(&state).unwrap();
        other["schema_version"] = serde_json::json!(99);
        std::fs::write(dir.join(STATE_FILE), other.to_string()).unwrap();
        assert!(
            read_state(&dir)
                .unwrap_err()
                .to_string()
                .contains("schema version 99")
        );
    }

    #[test]
    fn a_step_log_keeps_the_steps_up_to_the_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("m.jsonl");
        std::fs::write(&f, "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n").unwrap();
        drop(open_step_log(&f, 2).unwrap());
        assert_eq!(
            std::fs::read_to_string(&f).unwrap(),
            "{\"step\":1}\n{\"step\":2}\n"
        );
    }
}
