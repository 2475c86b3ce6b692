//! Where the base model comes from, and the tokenizer files a checkpoint carries with it.
//!
//! `--model` is `default` (the bundled SmolLM2-135M-Instruct GGUF, fetched into the dojo cache
//! on first use), a `.gguf` file, a Hugging Face directory (`config.json`, `*.safetensors`,
//! `tokenizer.json`, `tokenizer_config.json`), or a hub name (`HuggingFaceTB/SmolLM2-135M`)
//! already in the local Hugging Face cache (`$HF_HUB_CACHE`, `$HF_HOME/hub` or
//! `~/.cache/huggingface/hub`, as `huggingface-cli download` leaves it). Nothing is downloaded
//! from the hub: runs stay offline and reproducible.

use std::path::{Path, PathBuf};

use candle_core::Device;
use dojo_tokenizer::ChatFormat;
use serde_json::{Value as Json, json};
use sha2::{Digest, Sha256};

use crate::{TrainError, TrainModel};

/// Files copied from a Hugging Face source directory into every checkpoint.
pub const TOKENIZER_FILES: &[&str] = &[
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
    "chat_template.jinja",
    "vocab.json",
    "merges.txt",
];

/// A resolved base model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    Gguf(PathBuf),
    HfDir(PathBuf),
}

fn hub_cache() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("HF_HUB_CACHE") {
        return Some(PathBuf::from(p));
    }
    if let Some(p) = std::env::var_os("HF_HOME") {
        return Some(PathBuf::from(p).join("hub"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/huggingface/hub"))
}

/// The snapshot directory of `name` (`org/model[@revision]`) in a hub cache, if present.
pub fn hub_snapshot(cache: &Path, name: &str) -> Option<PathBuf> {
    let (repo, rev) = name.split_once('@').unwrap_or((name, "main"));
    let dir = cache.join(format!("models--{}", repo.replace('/', "--")));
    let commit = std::fs::read_to_string(dir.join("refs").join(rev))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| rev.to_string());
    let snap = dir.join("snapshots").join(commit);
    snap.join("config.json").is_file().then_some(snap)
}

impl ModelSource {
    /// Resolve a `--model` value (see the module docs).
    pub fn resolve(spec: &str) -> Result<ModelSource, TrainError> {
        if spec == "default" {
            return Ok(ModelSource::Gguf(dojo_tokenizer::default_model_path()?));
        }
        let p = Path::new(spec);
        if p.is_file() {
            return Ok(ModelSource::Gguf(p.to_path_buf()));
        }
        if p.is_dir() {
            if !p.join("config.json").is_file() {
                return Err(TrainError::file(
                    p,
                    "not a Hugging Face model directory (no config.json)",
                ));
            }
            return Ok(ModelSource::HfDir(p.to_path_buf()));
        }
        if spec.contains('/') && !spec.starts_with('/') && !spec.starts_with('.') {
            let cache = hub_cache();
            if let Some(snap) = cache.as_deref().and_then(|c| hub_snapshot(c, spec)) {
                return Ok(ModelSource::HfDir(snap));
            }
            return Err(TrainError::Config(format!(
                "--model {spec}: not a file or directory, and not in the Hugging Face cache \
                 ({}); download it first (`huggingface-cli download {spec}`) or pass its \
                 directory",
                cache.map_or("no cache directory".into(), |c| c.display().to_string())
            )));
        }
        Err(TrainError::Config(format!(
            "--model {spec}: no such file or directory"
        )))
    }

    pub fn path(&self) -> &Path {
        match self {
            ModelSource::Gguf(p) | ModelSource::HfDir(p) => p,
        }
    }

    /// Load the weights as trainable f32 variables.
    pub fn load(&self, device: &Device) -> Result<TrainModel, TrainError> {
        match self {
            ModelSource::Gguf(p) => TrainModel::load_gguf(p, device),
            ModelSource::HfDir(p) => TrainModel::load_hf_dir(p, device),
        }
    }

    /// Tokenizer and chat template.
    pub fn chat_format(&self) -> Result<ChatFormat, TrainError> {
        Ok(match self {
            ModelSource::Gguf(p) => ChatFormat::from_gguf(p)?,
            ModelSource::HfDir(p) => ChatFormat::from_hf_dir(p)?,
        })
    }

    /// The source's `config.json`, when it has one (kept fields go into checkpoints).
    pub fn base_config(&self) -> Result<Option<Json>, TrainError> {
        match self {
            ModelSource::Gguf(_) => Ok(None),
            ModelSource::HfDir(d) => {
                let p = d.join("config.json");
                let s = std::fs::read_to_string(&p).map_err(|e| TrainError::file(&p, e))?;
                serde_json::from_str(&s)
                    .map(Some)
                    .map_err(|e| TrainError::file(&p, format!("invalid JSON: {e}")))
            }
        }
    }

    /// Write the tokenizer files into `dir`: copies for a Hugging Face source; for a GGUF
    /// source, the tokenizer dojo builds from the GGUF metadata (the one the engine and
    /// `dojo curate` use) as `tokenizer.json`, with its chat template and special tokens in
    /// `tokenizer_config.json`.
    pub fn write_tokenizer_files(&self, dir: &Path) -> Result<(), TrainError> {
        match self {
            ModelSource::HfDir(src) => {
                for f in TOKENIZER_FILES {
                    let from = src.join(f);
                    if from.is_file() {
                        std::fs::copy(&from, dir.join(f))
                            .map_err(|e| TrainError::file(&from, e))?;
                    }
                }
            }
            ModelSource::Gguf(_) => {
                let fmt = self.chat_format()?;
                let tok = &fmt.tokenizer;
                let tpath = dir.join("tokenizer.json");
                tok.hf()
                    .save(&tpath, false)
                    .map_err(|e| TrainError::file(&tpath, e))?;
                let name = |id: Option<u32>| id.and_then(|i| tok.id_to_token(i));
                let cfg = json!({
                    "tokenizer_class": "PreTrainedTokenizerFast",
                    "bos_token": name(tok.bos_id()),
                    "eos_token": name(tok.eos_id()),
                    "add_bos_token": tok.add_bos(),
                    "chat_template": fmt.template.source(),
                    "clean_up_tokenization_spaces": false,
                });
                write_json(&dir.join("tokenizer_config.json"), &cfg)?;
                let gen_cfg = json!({
                    "bos_token_id": tok.bos_id(),
                    "eos_token_id": tok.eos_id(),
                });
                write_json(&dir.join("generation_config.json"), &gen_cfg)?;
            }
        }
        Ok(())
    }
}

/// The tokenizer fingerprint `dojo curate` stamps on its exports (sha256 of the serialised
/// tokenizer), for the same tokenizer.
pub fn tokenizer_sha(fmt: &ChatFormat) -> String {
    let serialised = fmt.tokenizer.hf().to_string(false).unwrap_or_default();
    hex::encode(Sha256::digest(serialised.as_bytes()))
}

pub(crate) fn write_json(path: &Path, v: &Json) -> Result<(), TrainError> {
    let s = serde_json::to_string_pretty(v).map_err(|e| TrainError::file(path, e))?;
    std::fs::write(path, s + "\n").map_err(|e| TrainError::file(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_names_resolve_through_the_cache_layout() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("models--org--tiny");
        let snap = repo.join("snapshots/abc123");
        std::fs::create_dir_all(&snap).unwrap();
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs/main"), "abc123\n").unwrap();
        assert_eq!(
            hub_snapshot(tmp.path(), "org/tiny"),
            None,
            "no config.json yet"
        );
        std::fs::write(snap.join("config.json"), "{}").unwrap();
        assert_eq!(hub_snapshot(tmp.path(), "org/tiny"), Some(snap.clone()));
        assert_eq!(hub_snapshot(tmp.path(), "org/tiny@abc123"), Some(snap));
        assert_eq!(hub_snapshot(tmp.path(), "org/other"), None);
    }
}
