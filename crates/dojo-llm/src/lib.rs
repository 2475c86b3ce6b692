//! # dojo-llm: talking to policies over HTTP
//!
//! Pipeline position: task → sandbox → agent ⇄ **policy** → trajectory → grade → curate → train.
//!
//! The agent asks a policy for the next assistant turn through one trait, [`ChatBackend`]. Its
//! request and response are the OpenAI `/v1/chat/completions` shapes ([`ChatRequest`],
//! [`ChatResponse`]), used unchanged on both sides of the wire: this crate's HTTP client sends
//! them, and `dojo serve` (the embedded engine) answers them. Vendor fields (vLLM token ids,
//! `chat_template_kwargs`) pass through in `extra` maps, so token-exact records for RL survive.
//!
//! Every failure is an [`LlmError`] that says whose fault it is ([`FailureClass`]): rate limits,
//! 5xx, timeouts, dropped connections and garbage bodies are infrastructure and are retried;
//! other 4xx are the request's fault.

mod client;
mod error;
mod wire;

pub use client::{
    ClientConfig, EndpointConfig, EndpointStats, OpenAiClient, SharedClient, TIMEOUT_VAR,
    timeout_secs,
};
pub use error::{FailureClass, LlmError};
pub use wire::*;

use std::future::Future;
use std::pin::Pin;

/// A boxed, `Send` future; lets [`ChatBackend`] be used as `dyn ChatBackend`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Anything that answers chat completions: the HTTP client, the in-process engine, a scripted
/// test policy.
pub trait ChatBackend: Send + Sync {
    /// Answer one request. `n > 1` asks for several choices of the same prompt.
    fn complete(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatResponse, LlmError>>;

    /// A short description for records and logs (endpoint URL, engine name).
    fn describe(&self) -> String {
        "chat-backend".to_string()
    }
}

impl<T: ChatBackend + ?Sized> ChatBackend for std::sync::Arc<T> {
    fn complete(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatResponse, LlmError>> {
        (**self).complete(req)
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
}
