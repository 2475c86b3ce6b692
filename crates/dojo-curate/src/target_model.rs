//! The target model for rendering: `dojo-tokenizer`'s [`ChatFormat`] (template + tokenizer, the very
//! code the embedded engine builds prompts with) behind [`ChatModel`].

use dojo_tokenizer::{ChatFormat, RenderOptions};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::render::{ChatModel, RenderError, RenderedSample, Span};

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
    fn supports_tools(&self) -> bool {
        self.format.template.supports_tools()
    }

    fn sample(&self, messages: &[Value], tools: &[Value]) -> Result<RenderedSample, RenderError> {
        let s =
            self.format
                .training_sample(messages, tools_opt(tools), &RenderOptions::default())?;
        // dojo-tokenizer trains a token when it *starts* inside a span; Hugging Face (and so TRL's
        // `assistant_masks`) trains every token that *overlaps* one, which differs when a token
        // straddles the span start (e.g. content beginning with "\n" merges with the header's
        // "\n"). The byte spans are dojo-tokenizer's; the token mask follows Hugging Face.
        let (ids, offsets) = self.format.tokenizer.encode_with_offsets(&s.text)?;
        if ids != s.input_ids {
            return Err(RenderError::NotDeterministic);
        }
        let byte_spans: Vec<(usize, usize)> = s.spans.iter().map(|sp| (sp.start, sp.end)).collect();
        let (assistant_masks, token_ranges) = mask_from_spans(&offsets, &byte_spans);
        Ok(RenderedSample {
            input_ids: s.input_ids,
            assistant_masks,
            spans: s
                .spans
                .iter()
                .zip(token_ranges)
                .map(|(sp, (token_start, token_end))| Span {
                    message_index: sp.message_index,
                    token_start,
                    token_end,
                })
                .collect(),
        })
    }

    fn count(&self, messages: &[Value], tools: &[Value]) -> Result<usize, RenderError> {
        let text = self
            .format
            .render(messages, tools_opt(tools), &RenderOptions::default())?;
        let enc = self
            .format
            .tokenizer
            .hf()
            .encode_fast(text.as_str(), false)
            .map_err(RenderError::Tokenizer)?;
        Ok(enc.len())
    }

    fn prompt_ids(&self, messages: &[Value], tools: &[Value]) -> Result<Vec<u32>, RenderError> {
        Ok(self
            .format
            .prompt(messages, tools_opt(tools), &RenderOptions::default())?
            .ids)
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

/// Why the target model could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Spec(#[from] dojo_tokenizer::ModelSpecError),
    #[error(transparent)]
    Chat(#[from] dojo_tokenizer::ChatError),
}

/// Loads the target model named by a `--model` value ([`dojo_tokenizer::ModelSpec`]: `default`,
/// a GGUF file, a Hugging Face directory or a hub name in the local cache).
pub fn load(spec: &str) -> Result<Box<dyn ChatModel>, LoadError> {
    let spec = dojo_tokenizer::ModelSpec::resolve(spec)?;
    let format = spec.chat_format()?;
    Ok(Box::new(FormatModel::new(format, &spec.name())))
}

/// The Hugging Face mask: 1 for every token whose byte range overlaps a span
/// (`return_assistant_tokens_mask` marks `char_to_token(start) ..= char_to_token(end - 1)`), and
/// each span's token range. Offsets and spans are sorted and spans do not overlap.
pub fn mask_from_spans(
    offsets: &[(usize, usize)],
    spans: &[(usize, usize)],
) -> (Vec<u8>, Vec<(usize, usize)>) {
    let mut mask = vec![0u8; offsets.len()];
    let mut ranges = Vec::with_capacity(spans.len());
    let mut k = 0;
    for &(a, b) in spans {
        // Skip tokens that end at or before the span start.
        while k < offsets.len() && offsets[k].1.max(offsets[k].0 + 1) <= a {
            k += 1;
        }
        let start = k;
        let mut j = k;
        while j < offsets.len() && offsets[j].0 < b {
            mask[j] = 1;
            j += 1;
        }
        ranges.push((start, j));
        // A token straddling this span's end may also overlap the next span.
        k = j.saturating_sub(1).max(start);
    }
    (mask, ranges)
}

#[cfg(test)]
mod tests {
    use super::mask_from_spans;

    #[test]
    fn straddling_tokens_are_trained_like_hugging_face() {
        let offsets = [(0, 2), (2, 5), (5, 6), (6, 9)];
        assert_eq!(mask_from_spans(&offsets, &[(3, 6)]).0, vec![0, 1, 1, 0]);
        assert_eq!(mask_from_spans(&offsets, &[(3, 6)]).1, vec![(1, 3)]);
        assert_eq!(mask_from_spans(&offsets, &[(3, 4)]).0, vec![0, 1, 0, 0]);
        assert_eq!(
            mask_from_spans(&offsets, &[(0, 2), (6, 9)]),
            (vec![1, 0, 0, 1], vec![(0, 1), (3, 4)])
        );
        assert_eq!(mask_from_spans(&offsets, &[]).0, vec![0, 0, 0, 0]);
    }
}
