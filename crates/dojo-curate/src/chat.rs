//! The target model for rendering: `dojo-chat`'s [`ChatFormat`] (template + tokenizer, the very
//! code the embedded engine builds prompts with) behind [`ChatModel`].

use std::path::Path;

use dojo_chat::{ChatFormat, RenderOptions};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::render::{ChatModel, Sample, Span};

/// A [`ChatFormat`] with its fingerprints computed once.
pub struct FormatModel {
    pub format: ChatFormat,
    name: String,
    tokenizer_sha: String,
    template_sha: String,
}

impl FormatModel {
    pub fn new(format: ChatFormat, name: &str) -> FormatModel {
        // The serialised tokenizer covers vocabulary, merges, added tokens and the pipeline.
        let serialised = format.tokenizer.hf().to_string(false).unwrap_or_default();
        let tokenizer_sha = hex::encode(Sha256::digest(serialised.as_bytes()));
        let template_sha = hex::encode(Sha256::digest(format.template.source().as_bytes()));
        FormatModel {
            format,
            name: name.to_string(),
            tokenizer_sha,
            template_sha,
        }
    }
}

fn tools_opt(tools: &[Value]) -> Option<&[Value]> {
    (!tools.is_empty()).then_some(tools)
}

impl ChatModel for FormatModel {
    fn sample(&self, messages: &[Value], tools: &[Value]) -> Result<Sample, String> {
        let s = self
            .format
            .training_sample(messages, tools_opt(tools), &RenderOptions::default())
            .map_err(|e| e.to_string())?;
        Ok(Sample {
            input_ids: s.input_ids,
            assistant_masks: s.assistant_mask,
            spans: s
                .spans
                .iter()
                .map(|sp| Span {
                    message_index: sp.message_index,
                    token_start: sp.token_start,
                    token_end: sp.token_end,
                })
                .collect(),
        })
    }

    fn count(&self, messages: &[Value], tools: &[Value]) -> Result<usize, String> {
        let text = self
            .format
            .render(messages, tools_opt(tools), &RenderOptions::default())
            .map_err(|e| e.to_string())?;
        let enc = self
            .format
            .tokenizer
            .hf()
            .encode_fast(text.as_str(), false)
            .map_err(|e| format!("tokenizer: {e}"))?;
        Ok(enc.len())
    }

    fn prompt_ids(&self, messages: &[Value], tools: &[Value]) -> Result<Vec<u32>, String> {
        self.format
            .prompt(messages, tools_opt(tools), &RenderOptions::default())
            .map(|p| p.ids)
            .map_err(|e| e.to_string())
    }

    fn tokenizer_fingerprint(&self) -> String {
        self.tokenizer_sha.clone()
    }

    fn template_fingerprint(&self) -> String {
        self.template_sha.clone()
    }

    fn name(&self) -> String {
        self.name.clone()
    }
}

/// Loads the target model: `default` (the bundled SmolLM2, fetched on first use), a GGUF file,
/// or a Hugging Face model directory (`tokenizer.json` + `tokenizer_config.json`).
pub fn load(spec: &str) -> Result<Box<dyn ChatModel>, String> {
    let (format, name) = if spec == "default" {
        let f = ChatFormat::default_model().map_err(|e| e.to_string())?;
        (f, dojo_chat::default_model::MODEL_ID.to_string())
    } else {
        let p = Path::new(spec);
        let f = if p.is_dir() {
            ChatFormat::from_hf_dir(p)
        } else {
            ChatFormat::from_gguf(p)
        }
        .map_err(|e| e.to_string())?;
        let name = p
            .file_name()
            .map_or_else(|| spec.to_string(), |n| n.to_string_lossy().into_owned());
        (f, name)
    };
    Ok(Box::new(FormatModel::new(format, &name)))
}
