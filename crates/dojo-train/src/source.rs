//! Where the base model comes from, and the tokenizer files a checkpoint carries with it.
//!
//! `--model` means what [`dojo_tokenizer::ModelSpec`] says (`default`, a `.gguf` file, a Hugging
//! Face directory, or a hub name already in the local Hugging Face cache; nothing is downloaded
//! from the hub).

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

impl ModelSource {
    /// The base model an adapter is merged into (`dojo train merge`): `model` when given, else
    /// the one the adapter names ([`crate::LoraConfig::base_model`]).
    pub fn for_adapter(adapter: &Path, model: Option<&str>) -> Result<ModelSource, TrainError> {
        match model {
            Some(m) => ModelSource::resolve(m),
            None => ModelSource::resolve(&crate::LoraConfig::base_model(adapter)?),
        }
    }

    /// Resolve a `--model` value ([`dojo_tokenizer::ModelSpec`], the one place that decides
    /// what `default`, a file, a directory or a hub name mean); the bundled model's file is
    /// fetched on first use.
    pub fn resolve(spec: &str) -> Result<ModelSource, TrainError> {
        use dojo_tokenizer::ModelSpec;
        match ModelSpec::resolve(spec)? {
            ModelSpec::Default => Ok(ModelSource::Gguf(dojo_tokenizer::default_model_path()?)),
            ModelSpec::Gguf(p) => Ok(ModelSource::Gguf(p)),
            ModelSpec::HfDir(p) => Ok(ModelSource::HfDir(p)),
        }
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
                    .map_err(|source| TrainError::Json {
                        path: p.to_path_buf(),
                        source,
                    })
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
                crate::checkpoint::write_json(&dir.join("tokenizer_config.json"), &cfg)?;
                let gen_cfg = json!({
                    "bos_token_id": tok.bos_id(),
                    "eos_token_id": tok.eos_id(),
                });
                crate::checkpoint::write_json(&dir.join("generation_config.json"), &gen_cfg)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_adapter_without_a_base_model_needs_one() {
        let dir = tempfile::tempdir().unwrap();
        let c = crate::LoraConfig::new(2, 4.0, 0.0, &["q"]).unwrap();
        let cfg = dir.path().join(crate::lora::ADAPTER_CONFIG_FILE);
        std::fs::write(cfg, c.adapter_config("").to_string()).unwrap();
        let e = ModelSource::for_adapter(dir.path(), None).err().unwrap();
        assert!(e.to_string().ends_with("pass --model"), "{e}");
    }
}
