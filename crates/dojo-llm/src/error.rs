//! Every way a chat completion can fail, classified as the infrastructure's fault or the
//! model's/request's fault. The classification decides whether a rollout is scored: an
//! infrastructure failure is never counted against the agent.

use std::time::Duration;

use dojo_rundir::clip::{self, Keep, Unit};

/// Whose fault a failure is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// The server, network or deployment failed (429, 5xx, timeouts, dropped connections,
    /// bodies that are not the promised JSON). Retryable; never the agent's fault.
    Infrastructure,
    /// The request itself was rejected (4xx other than 408/429), e.g. the context is too long
    /// or a parameter is invalid. Retrying the same request will not help.
    Model,
}

/// A failed chat completion. Every variant names the endpoint it came from.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LlmError {
    #[error("{endpoint}: rate limited (HTTP 429){}: {body}", retry_after.map(|d| format!(", retry after {d:?}")).unwrap_or_default())]
    RateLimited {
        endpoint: String,
        retry_after: Option<Duration>,
        body: String,
    },
    #[error("{endpoint}: server error HTTP {status}: {body}")]
    Server {
        endpoint: String,
        status: u16,
        body: String,
    },
    #[error("{endpoint}: no response within {after:?}")]
    Timeout { endpoint: String, after: Duration },
    /// `detail` is the transport error's whole chain as text (what hides under "error sending
    /// request" is what tells); the error itself, when there is one, stays the source (shared,
    /// so the error stays `Clone`).
    #[error("{endpoint}: connection failed: {detail}")]
    Connection {
        endpoint: String,
        detail: String,
        #[source]
        source: Option<std::sync::Arc<dyn std::error::Error + Send + Sync>>,
    },
    /// HTTP 2xx whose body is not a chat completion: HTML from a proxy, truncated JSON, no
    /// choices.
    #[error(
        "{endpoint}: unusable response body (HTTP {status}): {detail}; body starts {snippet:?}"
    )]
    BadBody {
        endpoint: String,
        status: u16,
        detail: String,
        snippet: String,
        /// The JSON error, when the body did not parse.
        #[source]
        source: Option<std::sync::Arc<dyn std::error::Error + Send + Sync>>,
    },
    /// The prompt does not fit the model's context window (a 400 that says so).
    #[error("{endpoint}: context length exceeded: {body}")]
    ContextLength { endpoint: String, body: String },
    /// Any other 4xx: the request is wrong (unknown model, bad parameter, auth).
    #[error("{endpoint}: request rejected HTTP {status}: {body}")]
    Rejected {
        endpoint: String,
        status: u16,
        body: String,
    },
    /// Client misconfiguration (no endpoint, bad URL); detected before any request.
    #[error("LLM client configuration: {0}")]
    Config(String),
    /// The same, with the error under it (`what` was being set up). The cause is shared
    /// (`Arc`) so the error stays `Clone`.
    #[error("LLM client configuration: {what}: {source}")]
    ConfigFailed {
        what: String,
        #[source]
        source: std::sync::Arc<dyn std::error::Error + Send + Sync>,
    },
    /// An in-process backend (the embedded engine) failed internally.
    #[error("{endpoint}: backend failure: {detail}")]
    Backend { endpoint: String, detail: String },
    /// The same, with the backend's own error (shared, so the error stays `Clone`).
    #[error("{endpoint}: backend failure: {source}")]
    BackendFailed {
        endpoint: String,
        #[source]
        source: std::sync::Arc<dyn std::error::Error + Send + Sync>,
    },
}

impl LlmError {
    /// [`LlmError::ConfigFailed`]: `source` stopped `what`.
    pub fn config_failed(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        LlmError::ConfigFailed {
            what: what.into(),
            source: std::sync::Arc::new(source),
        }
    }

    /// [`LlmError::BackendFailed`]: `source` failed the in-process backend at `endpoint`.
    pub fn backend_failed(
        endpoint: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        LlmError::BackendFailed {
            endpoint: endpoint.into(),
            source: std::sync::Arc::new(source),
        }
    }

    /// Whose fault this failure is.
    pub fn class(&self) -> FailureClass {
        match self {
            LlmError::RateLimited { .. }
            | LlmError::Server { .. }
            | LlmError::Timeout { .. }
            | LlmError::Connection { .. }
            | LlmError::BadBody { .. }
            | LlmError::Config(_)
            | LlmError::ConfigFailed { .. }
            | LlmError::Backend { .. }
            | LlmError::BackendFailed { .. } => FailureClass::Infrastructure,
            LlmError::ContextLength { .. } | LlmError::Rejected { .. } => FailureClass::Model,
        }
    }
    pub fn is_infrastructure(&self) -> bool {
        self.class() == FailureClass::Infrastructure
    }
    /// Whether the same request may succeed when sent again (to this or another endpoint).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            LlmError::RateLimited { .. }
                | LlmError::Server { .. }
                | LlmError::Timeout { .. }
                | LlmError::Connection { .. }
                | LlmError::BadBody { .. }
        )
    }
    /// Short machine-readable name, for trajectory records and summaries.
    pub fn kind(&self) -> &'static str {
        match self {
            LlmError::RateLimited { .. } => "rate_limited",
            LlmError::Server { .. } => "server_error",
            LlmError::Timeout { .. } => "timeout",
            LlmError::Connection { .. } => "connection",
            LlmError::BadBody { .. } => "bad_body",
            LlmError::ContextLength { .. } => "context_length",
            LlmError::Rejected { .. } => "rejected",
            LlmError::Config(_) | LlmError::ConfigFailed { .. } => "config",
            LlmError::Backend { .. } | LlmError::BackendFailed { .. } => "backend",
        }
    }

    /// Classify a non-2xx HTTP answer.
    pub fn from_status(
        endpoint: &str,
        status: u16,
        body: &str,
        retry_after: Option<Duration>,
    ) -> LlmError {
        let endpoint = endpoint.to_string();
        let body = clip::clip(body, 2000, Unit::Bytes, Keep::Head).0;
        match status {
            429 => LlmError::RateLimited {
                endpoint,
                retry_after,
                body,
            },
            // 408 Request Timeout and 5xx are the server's problem.
            408 | 500..=599 => LlmError::Server {
                endpoint,
                status,
                body,
            },
            400 | 413 if looks_like_context_overflow(&body) => {
                LlmError::ContextLength { endpoint, body }
            }
            400..=499 => LlmError::Rejected {
                endpoint,
                status,
                body,
            },
            // 1xx/3xx that reqwest did not follow: a broken proxy.
            _ => LlmError::Server {
                endpoint,
                status,
                body,
            },
        }
    }
}

fn looks_like_context_overflow(body: &str) -> bool {
    let b = body.to_ascii_lowercase();
    [
        "context length",
        "context_length",
        "context window",
        "maximum context",
        "too many tokens",
        "prompt is too long",
        "max_model_len",
    ]
    .iter()
    .any(|p| b.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_classified() {
        let c = |s, b: &str| LlmError::from_status("e", s, b, None);
        assert_eq!(c(429, "").class(), FailureClass::Infrastructure);
        assert!(c(429, "").is_retryable());
        assert_eq!(c(500, "").class(), FailureClass::Infrastructure);
        assert_eq!(c(503, "").class(), FailureClass::Infrastructure);
        assert_eq!(c(408, "").class(), FailureClass::Infrastructure);
        assert_eq!(c(400, "bad temperature").class(), FailureClass::Model);
        assert!(!c(400, "bad temperature").is_retryable());
        assert_eq!(c(401, "").kind(), "rejected");
        let ctx = c(400, "This model's maximum context length is 32768 tokens");
        assert_eq!(ctx.kind(), "context_length");
        assert_eq!(ctx.class(), FailureClass::Model);
        let window = c(400, "prompt of 9000 tokens does not fit the context window");
        assert_eq!(window.kind(), "context_length");
    }

    #[test]
    fn long_bodies_are_clipped_with_the_marker() {
        let e = LlmError::from_status("e", 500, &"é".repeat(1500), None);
        let LlmError::Server { body, .. } = &e else {
            panic!("{e:?}")
        };
        assert!(body.ends_with("\n[… 1000 bytes cut]"), "{body}");
        assert_eq!(body.len(), 2000 + "\n[… 1000 bytes cut]".len());
    }
}
