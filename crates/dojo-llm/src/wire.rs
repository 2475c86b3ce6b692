//! The OpenAI `/v1/chat/completions` wire shapes, used on both sides of the wire: by our client and
//! by `dojo serve`. Every optional field is skipped when `None`, and every object keeps the fields
//! it does not know in a flattened `extra` map, so vendor additions (vLLM's `token_ids`,
//! `prompt_token_ids`, `reasoning_content`, `return_token_ids`, `chat_template_kwargs`, …) survive
//! a deserialize → serialize round trip unchanged. That round trip is what lets a trajectory keep
//! every message exactly as sent and received.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    Developer,
    User,
    Assistant,
    Tool,
}

/// Message content: a plain string or an array of typed parts (`{"type":"text","text":…}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<Value>),
}

impl MessageContent {
    /// The text of the content; for parts, the `text` of every text part, concatenated.
    pub fn text(&self) -> String {
        match self {
            MessageContent::Text(s) => s.clone(),
            MessageContent::Parts(parts) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
        }
    }
}

impl From<String> for MessageContent {
    fn from(s: String) -> Self {
        MessageContent::Text(s)
    }
}

impl From<&str> for MessageContent {
    fn from(s: &str) -> Self {
        MessageContent::Text(s.to_string())
    }
}

/// One chat message, request or response side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    /// `null` for an assistant turn that only calls tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<MessageContent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// On `role: tool` messages: which call this observation answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Vendor fields, e.g. vLLM/SGLang `reasoning_content`.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ChatMessage {
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        ChatMessage {
            role,
            content: Some(MessageContent::Text(content.into())),
            name: None,
            tool_calls: None,
            tool_call_id: None,
            extra: Map::new(),
        }
    }
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(Role::Assistant, content)
    }
    /// An observation answering the tool call `tool_call_id`.
    pub fn tool(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        let mut m = Self::new(Role::Tool, content);
        m.tool_call_id = Some(tool_call_id.into());
        m
    }
    /// The content as text ("" when absent).
    pub fn text(&self) -> String {
        self.content
            .as_ref()
            .map(MessageContent::text)
            .unwrap_or_default()
    }
}

/// A tool call the model made (`message.tool_calls[i]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Some servers omit it; we keep `""` then.
    #[serde(default)]
    pub id: String,
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionCall,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn function_type() -> String {
    "function".to_string()
}

impl ToolCall {
    pub fn function(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        ToolCall {
            id: id.into(),
            kind: function_type(),
            function: FunctionCall {
                name: name.into(),
                arguments: arguments.into(),
            },
            extra: Map::new(),
        }
    }
}

/// Name and arguments of a call. `arguments` is the JSON text exactly as the model produced it
/// (it may be invalid JSON: the agent's parser decides what that means).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    #[serde(default)]
    pub arguments: String,
}

/// A tool offered to the model (`tools[i]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionDef,
}

impl ToolSpec {
    pub fn function(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
    ) -> Self {
        ToolSpec {
            kind: function_type(),
            function: FunctionDef {
                name: name.into(),
                description: Some(description.into()),
                parameters: Some(parameters),
                strict: None,
            },
        }
    }
}

/// The function half of a [`ToolSpec`]; `parameters` is a JSON Schema object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionDef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// `stop`: one string or several.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

/// A `/v1/chat/completions` request body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ChatRequest {
    #[serde(default)]
    pub model: String,
    pub messages: Vec<ChatMessage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<ToolSpec>>,
    /// `"none" | "auto" | "required" | {"type":"function","function":{"name":…}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_logprobs: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    /// We never stream; a server may reject `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Vendor fields, sent as top-level keys: vLLM `return_token_ids`, `chat_template_kwargs`,
    /// `top_k`, `min_p`, `repetition_penalty`, `skip_special_tokens`, …
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One sampled token's log-probability.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<Vec<u8>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub top_logprobs: Vec<TopLogprob>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// An alternative token at one position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<Vec<u8>>,
}

/// `choices[i].logprobs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ChoiceLogprobs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<TokenLogprob>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Standard `finish_reason` values.
pub mod finish_reason {
    pub const STOP: &str = "stop";
    pub const LENGTH: &str = "length";
    pub const TOOL_CALLS: &str = "tool_calls";
    pub const CONTENT_FILTER: &str = "content_filter";
}

/// One sampled completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    #[serde(default)]
    pub index: u32,
    pub message: ChatMessage,
    /// See [`finish_reason`]; kept as text so unknown vendor values survive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<ChoiceLogprobs>,
    /// vLLM `return_token_ids`: the sampled token ids of this choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
    /// Vendor fields (vLLM `stop_reason`, …).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Token counts of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.total_tokens += other.total_tokens;
    }
}

/// A `/v1/chat/completions` response body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ChatResponse {
    #[serde(default)]
    pub id: String,
    #[serde(default = "completion_object")]
    pub object: String,
    #[serde(default)]
    pub created: u64,
    #[serde(default)]
    pub model: String,
    pub choices: Vec<Choice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
    /// vLLM `return_token_ids`: the prompt as the server tokenized it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_token_ids: Option<Vec<u32>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn completion_object() -> String {
    "chat.completion".to_string()
}

/// An OpenAI-style error body: `{"error": {"message", "type", "code", …}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

impl ErrorBody {
    /// The body both of dojo's servers (`dojo serve`, `dojo env serve`) answer an error with,
    /// for HTTP status `status`: OpenAI's `type` for the status (`invalid_request_error` for
    /// 4xx, `rate_limit_error` for 429, `server_error` for 5xx), `code` the status unless a
    /// more specific one is given, and `param` the request field at fault, if one is.
    pub fn new(status: u16, message: impl Into<String>, param: Option<&str>) -> ErrorBody {
        let kind = match status {
            429 => "rate_limit_error",
            400..=499 => "invalid_request_error",
            _ => "server_error",
        };
        ErrorBody {
            error: ErrorDetail {
                message: message.into(),
                kind: Some(kind.into()),
                param: param.map(str::to_string),
                code: Some(Value::from(status)),
            },
        }
    }

    /// [`ErrorBody::new`] with a specific `code` (`context_length_exceeded`, `model_not_found`).
    pub fn with_code(mut self, code: impl Into<Value>) -> ErrorBody {
        self.error.code = Some(code.into());
        self
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub message: String,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<Value>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn vllm_response_round_trips_vendor_fields() {
        let raw = json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 7, "model": "m",
            "prompt_token_ids": [1, 2, 3],
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "reasoning_content": "hmm",
                    "tool_calls": [{"id": "c1", "type": "function",
                        "function": {"name": "execute_bash", "arguments": "{\"command\":\"ls\"}"}}]},
                "finish_reason": "tool_calls", "stop_reason": null,
                "token_ids": [9, 8],
                "logprobs": {"content": [{"token": "a", "logprob": -0.5, "bytes": [97],
                    "top_logprobs": [{"token": "a", "logprob": -0.5}]}]}
            }],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            "kv_transfer_params": null
        });
        let resp: ChatResponse = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(resp.prompt_token_ids.as_deref(), Some(&[1, 2, 3][..]));
        let c = &resp.choices[0];
        assert_eq!(c.token_ids.as_deref(), Some(&[9, 8][..]));
        assert_eq!(c.message.extra["reasoning_content"], "hmm");
        assert_eq!(
            c.message.tool_calls.as_ref().unwrap()[0].function.name,
            "execute_bash"
        );
        assert_eq!(serde_json::to_value(&resp).unwrap(), raw);
    }

    #[test]
    fn request_flattens_vendor_fields_and_skips_none() {
        let mut req = ChatRequest {
            model: "m".into(),
            messages: vec![ChatMessage::user("hi")],
            temperature: Some(0.7),
            ..Default::default()
        };
        req.extra.insert("return_token_ids".into(), json!(true));
        req.extra.insert(
            "chat_template_kwargs".into(),
            json!({"enable_thinking": false}),
        );
        let v = serde_json::to_value(&req).unwrap();
        assert_eq!(
            v,
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.7,
                   "return_token_ids": true, "chat_template_kwargs": {"enable_thinking": false}})
        );
        let back: ChatRequest = serde_json::from_value(v).unwrap();
        assert_eq!(back, req);
    }

    #[test]
    fn content_parts_and_stop_variants_parse() {
        let m: ChatMessage = serde_json::from_value(
            json!({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}),
        )
        .unwrap();
        assert_eq!(m.text(), "ab");
        let r: ChatRequest =
            serde_json::from_value(json!({"messages": [], "stop": ["x", "y"], "n": 2})).unwrap();
        assert_eq!(r.stop, Some(Stop::Many(vec!["x".into(), "y".into()])));
    }
}
