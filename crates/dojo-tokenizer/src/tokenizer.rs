//! Tokenizers: from a Hugging Face `tokenizer.json`, or rebuilt from GGUF metadata.
//!
//! GGUF stores the vocabulary and merges but only *names* the pre-tokenizer
//! (`tokenizer.ggml.pre`). Each name needs its own, checked mapping to a Hugging Face pipeline;
//! guessing wrong silently changes token ids (candle's generic mapping encodes SmolLM2's
//! `<|im_start|>system` as `[1, 817]` instead of `[1, 9690]`). Unknown names are refused.

use std::path::Path;

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior};

use crate::ChatError;
use crate::gguf::GgufMetadata;

/// Pre-tokenizer names (`tokenizer.ggml.pre`) with a checked mapping.
pub const SUPPORTED_GGUF_PRE: &[&str] = &["smollm", "qwen2", "gpt2", "llama3", "llama-bpe"];

/// GPT-2's split regex, which `ByteLevel(use_regex=true)` applies.
const REGEX_QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const REGEX_LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Token strings that end an assistant turn in the chat formats we know.
const END_OF_TURN: &[&str] = &["<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end|>"];

/// A token's `start..end` byte range in the encoded text.
pub type ByteSpan = (usize, usize);

/// A byte-level BPE tokenizer plus the special ids generation needs.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    /// Where it came from, for error messages.
    source: String,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("source", &self.source)
            .field("vocab_size", &self.vocab_size())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .finish()
    }
}

fn tk_lib(source: &str, e: tokenizers::Error) -> ChatError {
    ChatError::TokenizerLib {
        source_name: source.to_string(),
        source: e,
    }
}

fn tk_err(source: &str, e: impl std::fmt::Display) -> ChatError {
    ChatError::Tokenizer {
        source_name: source.to_string(),
        reason: e.to_string(),
    }
}

impl Tokenizer {
    /// Load a Hugging Face `tokenizer.json`. BOS/EOS come from `tokenizer_config.json`
    /// (see [`crate::ChatFormat::from_hf_dir`]); here they are unset.
    pub fn from_file(path: &Path) -> Result<Tokenizer, ChatError> {
        let name = path.display().to_string();
        let inner = tokenizers::Tokenizer::from_file(path).map_err(|e| tk_lib(&name, e))?;
        Ok(Tokenizer {
            inner,
            bos: None,
            eos: None,
            add_bos: false,
            source: name,
        })
    }

    /// Rebuild the tokenizer from GGUF metadata (`tokenizer.ggml.model = gpt2` only).
    pub fn from_gguf(meta: &GgufMetadata) -> Result<Tokenizer, ChatError> {
        let name = meta.path.display().to_string();
        let model = meta.str("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(tk_err(
                &name,
                format!(
                    "tokenizer.ggml.model `{model}` is not supported (only byte-level BPE `gpt2`)"
                ),
            ));
        }
        let pre = meta
            .get("tokenizer.ggml.pre")
            .and_then(|v| v.as_str())
            .unwrap_or("gpt2");
        let tokens = meta.string_array("tokenizer.ggml.tokens")?;
        let merges = meta
            .string_array("tokenizer.ggml.merges")?
            .into_iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .ok_or_else(|| tk_err(&name, format!("merge `{m}` has no space")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let vocab: Vocab = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), i as u32))
            .collect();
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| tk_lib(&name, e))?;
        let mut inner = tokenizers::Tokenizer::new(bpe);

        let (normalizer, pre_tok, decoder) = pipeline_for_pre(&name, pre)?;
        if normalizer {
            inner
                .with_normalizer(Some(NFC))
                .map_err(|e| tk_lib(&name, e))?;
        }
        inner.with_pre_tokenizer(Some(pre_tok));
        inner.with_decoder(Some(decoder));

        // Control (3) and user-defined (4) tokens are matched verbatim in text, as llama.cpp
        // and the Hugging Face `added_tokens` do; control tokens are "special".
        if let Some(types) = meta
            .get("tokenizer.ggml.token_type")
            .and_then(|v| v.as_array())
        {
            let added: Vec<AddedToken> = types
                .iter()
                .zip(&tokens)
                .filter_map(|(t, tok)| match t.as_u64() {
                    Some(3) => Some(AddedToken::from(tok.to_string(), true)),
                    Some(4) => Some(AddedToken::from(tok.to_string(), false)),
                    _ => None,
                })
                .collect();
            let specials: Vec<AddedToken> = added.iter().filter(|t| t.special).cloned().collect();
            let plain: Vec<AddedToken> = added.into_iter().filter(|t| !t.special).collect();
            inner
                .add_special_tokens(specials)
                .map_err(|e| tk_lib(&name, e))?;
            inner.add_tokens(plain).map_err(|e| tk_lib(&name, e))?;
        }
        let id = |k: &str| meta.get(k).and_then(|v| v.as_u64()).map(|v| v as u32);
        Ok(Tokenizer {
            inner,
            bos: id("tokenizer.ggml.bos_token_id"),
            eos: id("tokenizer.ggml.eos_token_id"),
            add_bos: meta
                .get("tokenizer.ggml.add_bos_token")
                .and_then(|v| v.as_bool())
                .unwrap_or(false),
            source: name,
        })
    }

    /// Set BOS/EOS by token string (from `tokenizer_config.json`).
    pub fn with_special(mut self, bos: Option<&str>, eos: Option<&str>, add_bos: bool) -> Self {
        self.bos = bos.and_then(|t| self.token_to_id(t));
        self.eos = eos.and_then(|t| self.token_to_id(t));
        self.add_bos = add_bos;
        self
    }

    /// Encode text exactly as written: special-token strings in the text become their ids, and
    /// nothing (no BOS) is added. Chat templates write BOS themselves when the model wants it.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, ChatError> {
        Ok(self.encode_with_offsets(text)?.0)
    }

    /// Like [`Tokenizer::encode`], with each token's byte range in `text`.
    pub fn encode_with_offsets(&self, text: &str) -> Result<(Vec<u32>, Vec<ByteSpan>), ChatError> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| tk_lib(&self.source, e))?;
        Ok((enc.get_ids().to_vec(), enc.get_offsets().to_vec()))
    }

    /// Decode ids to text, special tokens included (so `decode(encode(s)) == s`).
    pub fn decode(&self, ids: &[u32]) -> Result<String, ChatError> {
        self.inner
            .decode(ids, false)
            .map_err(|e| tk_lib(&self.source, e))
    }

    /// The raw vocabulary string of one token (byte-level form, e.g. `Ġsystem`).
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// Whether the model expects BOS before a raw (non-chat) prompt.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Ids that end an assistant turn: EOS plus the known end-of-turn tokens this vocabulary has.
    pub fn stop_ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self.eos.into_iter().collect();
        for t in END_OF_TURN {
            if let Some(id) = self.token_to_id(t)
                && !ids.contains(&id)
            {
                ids.push(id);
            }
        }
        ids
    }

    /// The underlying Hugging Face tokenizer (for streaming decode and the like).
    pub fn hf(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

type Pipeline = (bool, PreTokenizerWrapper, ByteLevelDecoder);

/// The checked mapping from `tokenizer.ggml.pre` to the Hugging Face pipeline of the model's
/// `tokenizer.json` (normaliser NFC?, pre-tokenizer, decoder). Errors name the tokenizer
/// (`name`).
fn pipeline_for_pre(name: &str, pre: &str) -> Result<Pipeline, ChatError> {
    let split = |re: &str| -> Result<PreTokenizerWrapper, ChatError> {
        Ok(Split::new(
            SplitPattern::Regex(re.to_string()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| tk_lib(name, e))?
        .into())
    };
    let decoder = ByteLevelDecoder::new(false, true, true);
    Ok(match pre {
        // SmolLM / SmolLM2 tokenizer.json: Sequence[Digits(individual_digits), ByteLevel(
        // add_prefix_space=false, use_regex=true)].
        "smollm" => (
            false,
            Sequence::new(vec![
                Digits::new(true).into(),
                ByteLevel::new(false, true, true).into(),
            ])
            .into(),
            decoder,
        ),
        // Qwen2/2.5/3 tokenizer.json: NFC, Split(regex, isolated), ByteLevel(use_regex=false).
        "qwen2" => (
            true,
            Sequence::new(vec![
                split(REGEX_QWEN2)?,
                ByteLevel::new(false, false, false).into(),
            ])
            .into(),
            decoder,
        ),
        // Llama 3 tokenizer.json: Split(regex with digit groups of 3), ByteLevel(use_regex=false).
        "llama3" | "llama-bpe" => (
            false,
            Sequence::new(vec![
                split(REGEX_LLAMA3)?,
                ByteLevel::new(false, true, false).into(),
            ])
            .into(),
            decoder,
        ),
        // GPT-2 itself.
        "gpt2" => (false, ByteLevel::new(false, true, true).into(), decoder),
        other => {
            return Err(tk_err(
                name,
                format_args!(
                    "pre-tokenizer `{other}` has no checked mapping (supported: {})",
                    SUPPORTED_GGUF_PRE.join(", ")
                ),
            ));
        }
    })
}
