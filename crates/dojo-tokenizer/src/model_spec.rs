//! What a `--model` value names, decided once for every command that takes one (`dojo serve`,
//! `embedded:MODEL` policies and world models, `dojo train`, `dojo rl`, `dojo curate`):
//!
//! - `default`: the bundled SmolLM2-135M-Instruct Q4_1 GGUF ([`crate::default_model`]),
//!   fetched into the dojo cache on first use;
//! - a `.gguf` file;
//! - a Hugging Face model directory (`config.json`, `*.safetensors`, `tokenizer.json`, ...);
//! - a hub name (`HuggingFaceTB/SmolLM2-135M[@revision]`) already in the local Hugging Face
//!   cache (`$HF_HUB_CACHE`, `$HF_HOME/hub` or `~/.cache/huggingface/hub`, as
//!   `huggingface-cli download` leaves it). Nothing is downloaded from the hub: runs stay
//!   offline and reproducible.
//!
//! It lives here, at the bottom of the model crates, because the tokenizer is the first thing
//! every one of those commands reads from the model.

use std::path::{Path, PathBuf};

use crate::{ChatError, ChatFormat};

/// The spelling of the bundled model.
pub const DEFAULT: &str = "default";

/// A resolved `--model` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSpec {
    /// The bundled model (its file is fetched by [`ModelSpec::path`]).
    Default,
    Gguf(PathBuf),
    HfDir(PathBuf),
}

/// Why a `--model` value names no model (the caller's input).
#[derive(Debug, thiserror::Error)]
pub enum ModelSpecError {
    #[error("--model {0}: no such file or directory")]
    Missing(String),
    #[error("--model {}: not a Hugging Face model directory (no config.json)", .0.display())]
    NotHfDir(PathBuf),
    #[error(
        "--model {spec}: not a file or directory, and not in the Hugging Face cache ({cache}); \
         download it first (`huggingface-cli download {spec}`) or pass its directory"
    )]
    NotCached { spec: String, cache: String },
}

impl ModelSpec {
    /// Resolve a `--model` value (see the module docs).
    pub fn resolve(spec: &str) -> Result<ModelSpec, ModelSpecError> {
        if spec == DEFAULT {
            return Ok(ModelSpec::Default);
        }
        let p = Path::new(spec);
        if p.is_file() {
            return Ok(ModelSpec::Gguf(p.to_path_buf()));
        }
        if p.is_dir() {
            if !p.join("config.json").is_file() {
                return Err(ModelSpecError::NotHfDir(p.to_path_buf()));
            }
            return Ok(ModelSpec::HfDir(p.to_path_buf()));
        }
        if spec.contains('/') && !spec.starts_with('/') && !spec.starts_with('.') {
            let cache = hub_cache();
            if let Some(snap) = cache.as_deref().and_then(|c| hub_snapshot(c, spec)) {
                return Ok(ModelSpec::HfDir(snap));
            }
            return Err(ModelSpecError::NotCached {
                spec: spec.to_string(),
                cache: cache.map_or("no cache directory".into(), |c| c.display().to_string()),
            });
        }
        Err(ModelSpecError::Missing(spec.to_string()))
    }

    pub fn is_default(&self) -> bool {
        *self == ModelSpec::Default
    }

    /// The model's file or directory; the bundled model's GGUF is fetched on first use.
    pub fn path(&self) -> Result<PathBuf, ChatError> {
        match self {
            ModelSpec::Default => crate::default_model_path(),
            ModelSpec::Gguf(p) | ModelSpec::HfDir(p) => Ok(p.clone()),
        }
    }

    /// The name records and `/v1/models` give it: the bundled model's id, else the file or
    /// directory name.
    pub fn name(&self) -> String {
        match self {
            ModelSpec::Default => crate::default_model::MODEL_ID.to_string(),
            ModelSpec::Gguf(p) | ModelSpec::HfDir(p) => p.file_name().map_or_else(
                || p.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            ),
        }
    }

    /// The model's tokenizer and chat template.
    pub fn chat_format(&self) -> Result<ChatFormat, ChatError> {
        match self {
            ModelSpec::Default => ChatFormat::default_model(),
            ModelSpec::Gguf(p) => ChatFormat::from_gguf(p),
            ModelSpec::HfDir(p) => ChatFormat::from_hf_dir(p),
        }
    }
}

/// The local Hugging Face hub cache, as the `huggingface_hub` library finds it.
pub fn hub_cache() -> Option<PathBuf> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_resolve_once() {
        assert_eq!(ModelSpec::resolve("default").unwrap(), ModelSpec::Default);
        assert_eq!(
            ModelSpec::Default.name(),
            crate::default_model::MODEL_ID.to_string()
        );
        let d = tempfile::tempdir().unwrap();
        let gguf = d.path().join("m.gguf");
        std::fs::write(&gguf, b"GGUF").unwrap();
        let spec = ModelSpec::resolve(gguf.to_str().unwrap()).unwrap();
        assert_eq!(spec, ModelSpec::Gguf(gguf.clone()));
        assert_eq!(spec.name(), "m.gguf");
        let e = ModelSpec::resolve(d.path().to_str().unwrap()).unwrap_err();
        assert!(e.to_string().contains("no config.json"), "{e}");
        std::fs::write(d.path().join("config.json"), "{}").unwrap();
        assert_eq!(
            ModelSpec::resolve(d.path().to_str().unwrap()).unwrap(),
            ModelSpec::HfDir(d.path().to_path_buf())
        );
        let e = ModelSpec::resolve("./nope.gguf").unwrap_err();
        assert!(e.to_string().contains("no such file"), "{e}");
    }

    #[test]
    fn hub_names_come_from_the_local_cache_only() {
        let cache = tempfile::tempdir().unwrap();
        let repo = cache.path().join("models--org--tiny");
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs/main"), "abc123\n").unwrap();
        assert!(hub_snapshot(cache.path(), "org/tiny").is_none());
        let snap = repo.join("snapshots/abc123");
        std::fs::create_dir_all(&snap).unwrap();
        std::fs::write(snap.join("config.json"), "{}").unwrap();
        assert_eq!(hub_snapshot(cache.path(), "org/tiny"), Some(snap));
        assert!(hub_snapshot(cache.path(), "org/tiny@other").is_none());
    }
}
