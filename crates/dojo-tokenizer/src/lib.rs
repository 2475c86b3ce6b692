//! # dojo-tokenizer: tokens exactly as the model sees them
//!
//! Pipeline position: between **agent ⇄ policy** and **curate → train**. The embedded engine
//! uses it to turn OpenAI-shaped messages into prompt token ids; curate and train use the very
//! same code to produce token-exact training data (ids + per-token assistant masks), so what the
//! trainer sees is what the policy saw. It deliberately does not depend on candle.
//!
//! - [`Tokenizer`]: from `tokenizer.json`, or rebuilt from GGUF metadata with a checked
//!   pre-tokenizer mapping ([`tokenizer::SUPPORTED_GGUF_PRE`]).
//! - [`ChatTemplate`]: the model's Jinja template rendered like HF `apply_chat_template`.
//! - [`ChatFormat`]: both together, plus message normalisation (tool calls for templates that
//!   have no tool support), prompts, training samples with assistant masks, and Hermes
//!   `<tool_call>` parsing of generated text.
//! - [`default_model`]: the default SmolLM2-135M-Instruct Q4_1 GGUF, fetched on first use.
//! - [`ModelSpec`]: what a `--model` value (`default`, a GGUF, an HF directory, a hub name)
//!   means, decided once for every command.

pub mod default_model;
pub mod gguf;
pub mod messages;
pub mod model_spec;
pub mod template;
pub mod tokenizer;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

pub use default_model::default_model_path;
pub use gguf::{GgufMetadata, GgufValue, read_metadata};
pub use messages::{ParsedAssistant, normalize_messages, parse_tool_calls};
pub use model_spec::{ModelSpec, ModelSpecError};
pub use template::ChatTemplate;
pub use tokenizer::Tokenizer;

/// Everything that can go wrong here names the file, message or template involved.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("GGUF file {path}: {reason}")]
    Gguf { path: PathBuf, reason: String },
    #[error("tokenizer {source_name}: {reason}")]
    Tokenizer { source_name: String, reason: String },
    /// minijinja refused the template or failed rendering it: `reason` is its message as
    /// shown (with the template line, or what the template raised).
    #[error("chat template: {reason}")]
    TemplateFailed {
        reason: String,
        #[source]
        source: minijinja::Error,
    },
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("message {index}: {reason}")]
    Message { index: usize, reason: String },
    #[error("message {index}: tool call arguments are not valid JSON ({source}): {arguments}")]
    ToolArguments {
        index: usize,
        arguments: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "chat template is not prefix-stable at message {index}: rendering the conversation up to \
         that message is not a prefix of the full rendering, so assistant spans are ambiguous"
    )]
    NotPrefixStable { index: usize },
    /// The GGUF header could not be read (`what`: cut short, a string not UTF-8).
    #[error("GGUF file {path}: {what}: {source}")]
    GgufRead {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("GGUF file {path}: cannot open: {source}")]
    GgufOpen {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The tokenizer library refused the tokenizer or the text.
    #[error("tokenizer {source_name}: {source}")]
    TokenizerLib {
        source_name: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("chat template: {0}")]
    TemplateEngine(#[source] minijinja::Error),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: invalid JSON: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{0}")]
    Archive(#[source] dojo_cache::archive::ArchiveError),
    #[error("default model: {0}")]
    DefaultModel(#[source] dojo_cache::CacheError),
}

pub type Result<T, E = ChatError> = std::result::Result<T, E>;

/// A prompt ready for generation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prompt {
    pub text: String,
    pub ids: Vec<u32>,
}

/// Where one assistant message sits in a rendered conversation.
///
/// `start..end` are byte offsets into the text: from just after the generation prompt
/// (`<|im_start|>assistant\n`) up to and including the end-of-turn token, i.e. exactly what
/// the model would have generated. What follows (the `\n` after `<|im_end|>`) belongs to the
/// environment, as in verl/TRL assistant masks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantSpan {
    /// Index into the caller's `messages`.
    pub message_index: usize,
    pub start: usize,
    pub end: usize,
    /// Token range `token_start..token_end` of this span in `input_ids`.
    pub token_start: usize,
    pub token_end: usize,
}

/// A whole conversation as training data: ids plus a 0/1 mask that is 1 on assistant tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainingSample {
    pub text: String,
    pub input_ids: Vec<u32>,
    pub assistant_mask: Vec<u8>,
    pub spans: Vec<AssistantSpan>,
}

/// Options for rendering beyond messages and tools.
#[derive(Debug, Clone, Default)]
pub struct RenderOptions {
    pub add_generation_prompt: bool,
    /// Extra template variables, e.g. `{"enable_thinking": false}` for Qwen3.
    pub extra: Option<serde_json::Map<String, Json>>,
}

/// A model's tokenizer and chat template, used together.
#[derive(Debug, Clone)]
pub struct ChatFormat {
    pub tokenizer: Tokenizer,
    pub template: ChatTemplate,
    template_id: String,
}

/// ChatML, for models that ship no template.
pub const CHATML_TEMPLATE: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

impl ChatFormat {
    pub fn new(tokenizer: Tokenizer, template: ChatTemplate) -> ChatFormat {
        let template_id = dojo_cache::sha256_hex(template.source())[..16].to_string();
        ChatFormat {
            tokenizer,
            template,
            template_id,
        }
    }

    /// Tokenizer and template from a GGUF file's metadata (`tokenizer.chat_template`; ChatML
    /// when absent).
    pub fn from_gguf(path: &Path) -> Result<ChatFormat> {
        let meta = read_metadata(path)?;
        Self::from_gguf_metadata(&meta)
    }

    pub fn from_gguf_metadata(meta: &GgufMetadata) -> Result<ChatFormat> {
        let tokenizer = Tokenizer::from_gguf(meta)?;
        let source = meta
            .get("tokenizer.chat_template")
            .and_then(|v| v.as_str())
            .unwrap_or(CHATML_TEMPLATE);
        let tok = |id: Option<u32>| {
            id.and_then(|i| tokenizer.id_to_token(i))
                .unwrap_or_default()
        };
        let template =
            ChatTemplate::new(source, &tok(tokenizer.bos_id()), &tok(tokenizer.eos_id()))?;
        Ok(ChatFormat::new(tokenizer, template))
    }

    /// A Hugging Face model directory: `tokenizer.json` + `tokenizer_config.json`
    /// (`chat_template`, `bos_token`, `eos_token`; a separate `chat_template.jinja` also works).
    pub fn from_hf_dir(dir: &Path) -> Result<ChatFormat> {
        let tok_path = dir.join("tokenizer.json");
        let cfg_path = dir.join("tokenizer_config.json");
        let cfg: Json = match std::fs::read_to_string(&cfg_path) {
            Ok(s) => serde_json::from_str(&s).map_err(|source| ChatError::Json {
                path: cfg_path.clone(),
                source,
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Json::Null,
            Err(e) => {
                return Err(ChatError::Io {
                    path: cfg_path,
                    source: e,
                });
            }
        };
        // bos/eos are either strings or AddedToken objects {"content": ...}.
        let special = |k: &str| -> Option<String> {
            match cfg.get(k)? {
                Json::String(s) => Some(s.clone()),
                Json::Object(o) => o.get("content")?.as_str().map(str::to_string),
                _ => None,
            }
        };
        let bos = special("bos_token");
        let eos = special("eos_token");
        let add_bos = cfg
            .get("add_bos_token")
            .and_then(Json::as_bool)
            .unwrap_or(false);
        let tokenizer =
            Tokenizer::from_file(&tok_path)?.with_special(bos.as_deref(), eos.as_deref(), add_bos);
        let jinja_path = dir.join("chat_template.jinja");
        let source = match cfg.get("chat_template") {
            Some(Json::String(s)) => s.clone(),
            // A list of named templates: take "default".
            Some(Json::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(Json::as_str) == Some("default"))
                .and_then(|t| t.get("template")?.as_str())
                .map(str::to_string)
                .ok_or_else(|| ChatError::File {
                    path: cfg_path.clone(),
                    reason: "chat_template list has no `default` entry".into(),
                })?,
            _ if jinja_path.exists() => {
                std::fs::read_to_string(&jinja_path).map_err(|source| ChatError::Io {
                    path: jinja_path.clone(),
                    source,
                })?
            }
            _ => CHATML_TEMPLATE.to_string(),
        };
        let template = ChatTemplate::new(
            &source,
            bos.as_deref().unwrap_or(""),
            eos.as_deref().unwrap_or(""),
        )?;
        Ok(ChatFormat::new(tokenizer, template))
    }

    /// The default model's format (downloads the model on first use).
    pub fn default_model() -> Result<ChatFormat> {
        Self::from_gguf(&default_model_path()?)
    }

    /// First 16 hex digits of the template source's sha256: the `template_id` of exports.
    pub fn template_id(&self) -> &str {
        &self.template_id
    }

    /// Render OpenAI-shaped messages (normalised, see [`normalize_messages`]) to text.
    pub fn render(
        &self,
        messages: &[Json],
        tools: Option<&[Json]>,
        opts: &RenderOptions,
    ) -> Result<String> {
        let norm = self.normalize(messages, tools)?;
        self.render_normalized(
            &norm.messages,
            norm.tools.as_deref(),
            opts.add_generation_prompt,
            opts,
        )
    }

    /// The prompt for the next assistant turn: text and ids.
    pub fn prompt(
        &self,
        messages: &[Json],
        tools: Option<&[Json]>,
        opts: &RenderOptions,
    ) -> Result<Prompt> {
        let opts = RenderOptions {
            add_generation_prompt: true,
            ..opts.clone()
        };
        let text = self.render(messages, tools, &opts)?;
        let ids = self.tokenizer.encode(&text)?;
        Ok(Prompt { text, ids })
    }

    /// A finished conversation as a training sample: ids and an assistant mask that is 1 on
    /// every token an assistant message generated (end-of-turn token included).
    ///
    /// Spans come from rendering each prefix of the conversation: an assistant message starts
    /// where the generation prompt of the conversation before it ends. Templates whose prefix
    /// renderings are not prefixes of the whole — Qwen3 drops the `<think>` block of assistant
    /// turns before the last user query, and adds an empty one to a final assistant turn — fall
    /// back to locating each assistant turn by its generation header in the full rendering (see
    /// [`ChatFormat::header_spans`]); the span then covers what the full rendering shows of the
    /// turn, as `{% generation %}` markers in the same template would. When neither works the
    /// conversation is refused with [`ChatError::NotPrefixStable`] rather than guessed at.
    pub fn training_sample(
        &self,
        messages: &[Json],
        tools: Option<&[Json]>,
        opts: &RenderOptions,
    ) -> Result<TrainingSample> {
        let norm = self.normalize(messages, tools)?;
        let tools = norm.tools.as_deref();
        let text = self.render_normalized(&norm.messages, tools, false, opts)?;
        let (input_ids, offsets) = self.tokenizer.encode_with_offsets(&text)?;
        let stop_strings: Vec<String> = self
            .tokenizer
            .stop_ids()
            .into_iter()
            .filter_map(|id| self.tokenizer.id_to_token(id))
            .collect();
        let byte_spans = match self.prefix_spans(&norm, &text, &stop_strings, opts) {
            Err(ChatError::NotPrefixStable { index }) => self
                .header_spans(&norm, &text, &stop_strings, opts)?
                .ok_or(ChatError::NotPrefixStable { index })?,
            other => other?,
        };
        let mut assistant_mask = vec![0u8; input_ids.len()];
        let mut spans = Vec::new();
        for (index, start, end) in byte_spans {
            let mut token_start = input_ids.len();
            let mut token_end = 0;
            for (t, &(s, _)) in offsets.iter().enumerate() {
                if s >= start && s < end {
                    assistant_mask[t] = 1;
                    token_start = token_start.min(t);
                    token_end = t + 1;
                }
            }
            if token_end == 0 {
                token_start = 0;
            }
            spans.push(AssistantSpan {
                message_index: index,
                start,
                end,
                token_start,
                token_end,
            });
        }
        Ok(TrainingSample {
            text,
            input_ids,
            assistant_mask,
            spans,
        })
    }

    /// Byte end of an assistant turn starting at `start`: just past the first stop token in
    /// `text[start..limit]`, or `limit`.
    fn turn_end(text: &str, start: usize, limit: usize, stop_strings: &[String]) -> usize {
        let segment = &text[start..limit];
        stop_strings
            .iter()
            .filter_map(|s| segment.find(s.as_str()).map(|p| p + s.len()))
            .min()
            .map_or(limit, |e| start + e)
    }

    /// Assistant spans `(caller's message index, start, end)` from prefix renderings.
    fn prefix_spans(
        &self,
        norm: &messages::Normalized,
        text: &str,
        stop_strings: &[String],
        opts: &RenderOptions,
    ) -> Result<Vec<(usize, usize, usize)>> {
        let tools = norm.tools.as_deref();
        let mut spans = Vec::new();
        for (j, msg) in norm.messages.iter().enumerate() {
            if msg.get("role").and_then(Json::as_str) != Some("assistant") {
                continue;
            }
            let index = norm.origin[j];
            let before = self.render_normalized(&norm.messages[..j], tools, true, opts)?;
            let after = self.render_normalized(&norm.messages[..=j], tools, false, opts)?;
            if !text.starts_with(&before) || !text.starts_with(&after) || after.len() < before.len()
            {
                return Err(ChatError::NotPrefixStable { index });
            }
            let start = before.len();
            spans.push((
                index,
                start,
                Self::turn_end(&after, start, after.len(), stop_strings),
            ));
        }
        Ok(spans)
    }

    /// Assistant spans located by the generation header (what `add_generation_prompt` appends,
    /// e.g. `<|im_start|>assistant\n`) in the full rendering: the k-th occurrence opens the k-th
    /// assistant message, which ends with the first stop token after it. `None` when that does
    /// not identify them unambiguously: no header, or not exactly one occurrence per assistant
    /// message (a header inside some content, or a template that merges turns).
    fn header_spans(
        &self,
        norm: &messages::Normalized,
        text: &str,
        stop_strings: &[String],
        opts: &RenderOptions,
    ) -> Result<Option<Vec<(usize, usize, usize)>>> {
        let tools = norm.tools.as_deref();
        let assistants: Vec<usize> = (0..norm.messages.len())
            .filter(|&j| norm.messages[j].get("role").and_then(Json::as_str) == Some("assistant"))
            .collect();
        let Some(&first) = assistants.first() else {
            return Ok(Some(Vec::new()));
        };
        let probe = &norm.messages[..first];
        let with = self.render_normalized(probe, tools, true, opts)?;
        let without = self.render_normalized(probe, tools, false, opts)?;
        let header = match with.strip_prefix(without.as_str()) {
            Some(h) if !h.is_empty() => h,
            _ => return Ok(None),
        };
        let starts: Vec<usize> = text
            .match_indices(header)
            .map(|(p, _)| p + header.len())
            .collect();
        if starts.len() != assistants.len() {
            return Ok(None);
        }
        let spans = assistants
            .iter()
            .zip(&starts)
            .enumerate()
            .map(|(k, (&j, &start))| {
                let limit = starts.get(k + 1).map_or(text.len(), |&n| n - header.len());
                (
                    norm.origin[j],
                    start,
                    Self::turn_end(text, start, limit, stop_strings),
                )
            })
            .collect();
        Ok(Some(spans))
    }

    /// Normalise messages for this template (see [`normalize_messages`]).
    pub fn normalize(
        &self,
        messages: &[Json],
        tools: Option<&[Json]>,
    ) -> Result<messages::Normalized> {
        normalize_messages(messages, tools, self.template.supports_tools())
    }

    fn render_normalized(
        &self,
        messages: &[Json],
        tools: Option<&[Json]>,
        add_generation_prompt: bool,
        opts: &RenderOptions,
    ) -> Result<String> {
        self.template
            .render(messages, tools, add_generation_prompt, opts.extra.as_ref())
    }
}
