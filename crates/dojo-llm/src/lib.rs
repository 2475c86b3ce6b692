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

#[cfg(feature = "server")]
pub mod access;
mod client;
mod error;
mod wire;

pub use client::{
    ClientConfig, EndpointConfig, EndpointStats, OpenAiClient, SharedClient, TIMEOUT_VAR,
    TimeoutError, api_key_from_env, timeout_secs,
};
pub use error::{FailureClass, LlmError};
pub use wire::*;

/// The seed of one stream of a seeded run: sample `i` of a task, turn `i` of a rollout, step `i`
/// of an RL run. A request's `seed` fixes that request's whole random stream (here and in vLLM),
/// so reusing one seed, or offsetting it by one, makes streams that should be independent
/// repeat: every turn of a rollout would draw the same numbers, and sample `i + 1` of step `s`
/// would be sample `i` of step `s + 1`. Both words go through SplitMix64's finalizer, which
/// spreads consecutive inputs over the whole range.
pub fn derive_seed(seed: u64, stream: u64) -> u64 {
    fn mix(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    mix(seed ^ mix(stream))
}

/// A boxed, `Send` future; lets [`ChatBackend`] be used as `dyn ChatBackend` (the workspace's
/// one alias, owned by `dojo-rundir`).
pub use dojo_rundir::BoxFuture;

/// Anything that answers chat completions: the HTTP client, the in-process engine, a scripted
/// test policy.
///
/// Execution model: `complete` takes `&self` and is called concurrently, one call per agent turn
/// of every running episode; the implementation bounds its own concurrency (the HTTP client's
/// per-endpoint limit, the engine's batch of active sequences, where extra requests wait).
/// Retrying is the implementation's: the HTTP client retries what [`LlmError::is_retryable`] says
/// is infrastructure, with backoff, before returning it; callers do not retry. Dropping the
/// future cancels the request (the engine frees its sequence at the next step; the HTTP client
/// drops the connection).
pub trait ChatBackend: Send + Sync {
    /// Answer one request. `n > 1` asks for several choices of the same prompt.
    fn complete(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatResponse, LlmError>>;

    /// A short description for records and logs (endpoint URL, engine name).
    fn describe(&self) -> String {
        "chat-backend".to_string()
    }

    /// The model's context window in tokens (prompt and reply together), where the backend
    /// knows it: the embedded engine does; a remote server does not say (`None`). Callers that
    /// build long prompts (the world models) size them to it. Wrappers forward it.
    fn context_tokens(&self) -> Option<usize> {
        None
    }
}

impl<T: ChatBackend + ?Sized> ChatBackend for std::sync::Arc<T> {
    fn complete(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatResponse, LlmError>> {
        (**self).complete(req)
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
    fn context_tokens(&self) -> Option<usize> {
        (**self).context_tokens()
    }
}

#[cfg(test)]
mod tests {
    use super::derive_seed;

    #[test]
    fn derived_seeds_do_not_collide_across_nearby_seeds_and_streams() {
        let mut seen = std::collections::HashSet::new();
        for seed in 0..64u64 {
            for stream in 0..64u64 {
                assert!(seen.insert(derive_seed(seed, stream)), "{seed} {stream}");
            }
        }
        assert_eq!(derive_seed(7, 3), derive_seed(7, 3));
    }
}
