//! The HTTP client for OpenAI-compatible `/v1/chat/completions` endpoints (OpenAI, vLLM, SGLang,
//! `dojo serve`). Several endpoints are balanced by in-flight count, each behind its own
//! concurrency limit; infrastructure failures are retried with jittered exponential backoff,
//! moving to another endpoint when there is one; token usage is summed.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dojo_rundir::clip::{self, Keep, Unit};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use crate::{BoxFuture, ChatBackend, ChatRequest, ChatResponse, LlmError, Usage};

/// One server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointConfig {
    /// Base URL up to and including `/v1`, e.g. `http://127.0.0.1:8000/v1`.
    pub base_url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// Model name used when a request leaves `model` empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Requests in flight to this endpoint at most.
    #[serde(default = "default_concurrency")]
    pub max_concurrency: usize,
}

fn default_concurrency() -> usize {
    64
}

impl EndpointConfig {
    pub fn new(base_url: impl Into<String>) -> Self {
        EndpointConfig {
            base_url: base_url.into(),
            api_key: None,
            model: None,
            max_concurrency: default_concurrency(),
        }
    }

    /// One endpoint per URL of a comma-separated list (`OPENAI_BASE_URL`, a policy's
    /// `base_url`), each with `api_key` and `model`; blank entries are skipped. `what` names
    /// the list in the error when it holds no URL at all.
    pub fn list(
        what: &str,
        urls: &str,
        api_key: Option<String>,
        model: Option<String>,
    ) -> Result<Vec<EndpointConfig>, LlmError> {
        let endpoints: Vec<_> = urls
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(|u| EndpointConfig {
                api_key: api_key.clone(),
                model: model.clone(),
                ..EndpointConfig::new(u)
            })
            .collect();
        if endpoints.is_empty() {
            return Err(LlmError::Config(format!("{what} names no endpoint")));
        }
        Ok(endpoints)
    }
}

/// The API key in the environment variable `var` (`OPENAI_API_KEY` when `None`); unset and
/// empty are both no key.
pub fn api_key_from_env(var: Option<&str>) -> Option<String> {
    std::env::var(var.unwrap_or("OPENAI_API_KEY"))
        .ok()
        .filter(|k| !k.is_empty())
}

/// How the client talks to its endpoints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    pub endpoints: Vec<EndpointConfig>,
    /// Whole-request timeout (a long generation needs minutes).
    #[serde(default = "default_timeout", with = "dojo_rundir::secs")]
    pub request_timeout: Duration,
    #[serde(default = "default_connect_timeout", with = "dojo_rundir::secs")]
    pub connect_timeout: Duration,
    /// Attempts after the first, for retryable (infrastructure) failures.
    #[serde(default = "default_retries")]
    pub max_retries: u32,
    /// First backoff; doubles per attempt up to `backoff_max`, with full jitter.
    #[serde(default = "default_backoff", with = "dojo_rundir::secs")]
    pub backoff_base: Duration,
    #[serde(default = "default_backoff_max", with = "dojo_rundir::secs")]
    pub backoff_max: Duration,
}

fn default_timeout() -> Duration {
    Duration::from_secs(600)
}
fn default_connect_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_retries() -> u32 {
    6
}
fn default_backoff() -> Duration {
    Duration::from_millis(500)
}
fn default_backoff_max() -> Duration {
    Duration::from_secs(30)
}

impl ClientConfig {
    pub fn new(endpoints: Vec<EndpointConfig>) -> Self {
        ClientConfig {
            endpoints,
            request_timeout: default_timeout(),
            connect_timeout: default_connect_timeout(),
            max_retries: default_retries(),
            backoff_base: default_backoff(),
            backoff_max: default_backoff_max(),
        }
    }

    /// From `OPENAI_BASE_URL` (several URLs may be separated by commas) and `OPENAI_API_KEY`;
    /// `OPENAI_MODEL` optionally names the model; `DOJO_LLM_TIMEOUT` (seconds) replaces the
    /// 600 s request timeout, so a hung endpoint does not cost ten minutes per attempt.
    pub fn from_env() -> Result<Self, LlmError> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// [`ClientConfig::from_env`] over any variable lookup (tests, or a settings file read
    /// as variables).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Self, LlmError> {
        let base =
            get("OPENAI_BASE_URL").unwrap_or_else(|| "https://api.openai.com/v1".to_string());
        let key = get("OPENAI_API_KEY").filter(|k| !k.is_empty());
        let model = get("OPENAI_MODEL").filter(|m| !m.is_empty());
        let endpoints = EndpointConfig::list("OPENAI_BASE_URL", &base, key, model)?;
        let mut cfg = Self::new(endpoints);
        if let Some(t) = get(TIMEOUT_VAR).filter(|t| !t.trim().is_empty()) {
            let what = format!("{TIMEOUT_VAR}={t:?}");
            let secs = t
                .trim()
                .parse::<f64>()
                .map_err(|e| LlmError::config_failed(what.clone(), e))?;
            cfg.request_timeout =
                timeout_secs(secs).map_err(|e| LlmError::config_failed(what, e))?;
        }
        Ok(cfg)
    }
}

/// The environment variable holding the request timeout in seconds.
pub const TIMEOUT_VAR: &str = "DOJO_LLM_TIMEOUT";

/// A request timeout from seconds (a policy file's `request_timeout_s`, [`TIMEOUT_VAR`]): a
/// positive, finite number.
pub fn timeout_secs(secs: f64) -> Result<Duration, TimeoutError> {
    if secs.is_nan() || secs <= 0.0 {
        return Err(TimeoutError::NotPositive(secs));
    }
    Duration::try_from_secs_f64(secs).map_err(|source| TimeoutError::OutOfRange { secs, source })
}

/// A request timeout that is not a positive, finite number of seconds (the caller names the
/// setting).
#[derive(Debug, Clone, thiserror::Error)]
pub enum TimeoutError {
    #[error("a request timeout must be positive seconds, not {0}")]
    NotPositive(f64),
    #[error("{secs} s: {source}")]
    OutOfRange {
        secs: f64,
        #[source]
        source: std::time::TryFromFloatSecsError,
    },
}

/// Request counters of one endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EndpointStats {
    pub base_url: String,
    pub requests: u64,
    pub failures: u64,
    pub in_flight: usize,
}

struct Endpoint {
    cfg: EndpointConfig,
    url: String,
    permits: Semaphore,
    in_flight: AtomicUsize,
    requests: AtomicU64,
    failures: AtomicU64,
}

/// The OpenAI-compatible HTTP backend. Cheap to share behind an `Arc`.
pub struct OpenAiClient {
    http: reqwest::Client,
    cfg: ClientConfig,
    endpoints: Vec<Endpoint>,
    next: AtomicUsize,
    usage: Mutex<Usage>,
    retries: AtomicU64,
}

impl OpenAiClient {
    pub fn new(cfg: ClientConfig) -> Result<Self, LlmError> {
        if cfg.endpoints.is_empty() {
            return Err(LlmError::Config("no endpoints configured".into()));
        }
        let mut endpoints = Vec::new();
        for e in &cfg.endpoints {
            let parsed = reqwest::Url::parse(&e.base_url).map_err(|err| {
                LlmError::config_failed(format!("endpoint URL {:?}", e.base_url), err)
            })?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(LlmError::Config(format!(
                    "endpoint URL {:?}: scheme must be http or https",
                    e.base_url
                )));
            }
            if e.max_concurrency == 0 {
                return Err(LlmError::Config(format!(
                    "endpoint {:?}: max_concurrency must be at least 1",
                    e.base_url
                )));
            }
            endpoints.push(Endpoint {
                url: format!("{}/chat/completions", e.base_url.trim_end_matches('/')),
                permits: Semaphore::new(e.max_concurrency),
                cfg: e.clone(),
                in_flight: AtomicUsize::new(0),
                requests: AtomicU64::new(0),
                failures: AtomicU64::new(0),
            });
        }
        let http = reqwest::Client::builder()
            .connect_timeout(cfg.connect_timeout)
            .timeout(cfg.request_timeout)
            .pool_max_idle_per_host(256)
            .build()
            .map_err(|e| LlmError::config_failed("building HTTP client", e))?;
        Ok(OpenAiClient {
            http,
            cfg,
            endpoints,
            next: AtomicUsize::new(0),
            usage: Mutex::new(Usage::default()),
            retries: AtomicU64::new(0),
        })
    }

    /// Tokens used by every successful request so far.
    pub fn usage(&self) -> Usage {
        self.usage.lock().map(|u| *u).unwrap_or_default()
    }

    /// Retries performed so far (all endpoints).
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    pub fn stats(&self) -> Vec<EndpointStats> {
        self.endpoints
            .iter()
            .map(|e| EndpointStats {
                base_url: e.cfg.base_url.clone(),
                requests: e.requests.load(Ordering::Relaxed),
                failures: e.failures.load(Ordering::Relaxed),
                in_flight: e.in_flight.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// The endpoint with the fewest requests in flight, avoiding `avoid` when there is a choice;
    /// ties rotate so equal endpoints share the load.
    fn pick(&self, avoid: Option<usize>) -> usize {
        let n = self.endpoints.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        (0..n)
            .map(|k| (start + k) % n)
            .min_by_key(|&i| {
                (
                    Some(i) == avoid && n > 1,
                    self.endpoints[i].in_flight.load(Ordering::Relaxed),
                )
            })
            .unwrap_or(0)
    }

    async fn attempt(&self, idx: usize, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let ep = &self.endpoints[idx];
        let name = &ep.cfg.base_url;
        // The semaphore is never closed, so acquire only fails if it were.
        let _permit = ep
            .permits
            .acquire()
            .await
            .map_err(|_| LlmError::Config("endpoint limiter closed".into()))?;
        ep.in_flight.fetch_add(1, Ordering::Relaxed);
        ep.requests.fetch_add(1, Ordering::Relaxed);
        let result = self.send(ep, req).await;
        ep.in_flight.fetch_sub(1, Ordering::Relaxed);
        if result.is_err() {
            ep.failures.fetch_add(1, Ordering::Relaxed);
        }
        result.map_err(|e| {
            tracing::debug!(endpoint = %name, error = %e, "chat completion failed");
            e
        })
    }

    async fn send(&self, ep: &Endpoint, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let name = ep.cfg.base_url.as_str();
        let mut builder = self.http.post(&ep.url);
        if let Some(key) = &ep.cfg.api_key {
            builder = builder.bearer_auth(key);
        }
        let body = if req.model.is_empty() && ep.cfg.model.is_some() {
            let mut r = req.clone();
            r.model = ep.cfg.model.clone().unwrap_or_default();
            serde_json::to_vec(&r)
        } else {
            serde_json::to_vec(req)
        }
        .map_err(|e| LlmError::config_failed("serializing request", e))?;
        let resp = builder
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| transport_error(name, e, self.cfg.request_timeout))?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .and_then(|s| Duration::try_from_secs_f64(s).ok());
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| transport_error(name, e, self.cfg.request_timeout))?;
        let text = String::from_utf8_lossy(&bytes);
        if !(200..300).contains(&status) {
            return Err(LlmError::from_status(name, status, &text, retry_after));
        }
        let parsed: ChatResponse = serde_json::from_slice(&bytes).map_err(|e| {
            let trimmed = text.trim_start();
            let detail = if trimmed.starts_with('<') {
                "HTML instead of JSON (a proxy or error page?)".to_string()
            } else if e.is_eof() {
                format!("truncated JSON: {e}")
            } else {
                format!("not a chat completion: {e}")
            };
            LlmError::BadBody {
                endpoint: name.to_string(),
                status,
                detail,
                snippet: clip::cut(trimmed, 200, Unit::Bytes, Keep::Head).ellipsis(),
                source: Some(std::sync::Arc::new(e)),
            }
        })?;
        if parsed.choices.is_empty() {
            return Err(LlmError::BadBody {
                endpoint: name.to_string(),
                status,
                detail: "response has no choices".into(),
                snippet: clip::cut(&text, 200, Unit::Bytes, Keep::Head).ellipsis(),
                source: None,
            });
        }
        if let (Some(u), Ok(mut total)) = (&parsed.usage, self.usage.lock()) {
            total.add(u);
        }
        Ok(parsed)
    }

    fn backoff(&self, attempt: u32, err: &LlmError) -> Duration {
        let exp = self
            .cfg
            .backoff_base
            .saturating_mul(1u32 << attempt.min(16));
        let cap = exp.min(self.cfg.backoff_max);
        // Full jitter: uniform in [0, cap], so synchronized clients spread out.
        let jittered = cap.mul_f64(random_unit());
        match err {
            LlmError::RateLimited {
                retry_after: Some(ra),
                ..
            } => jittered.max((*ra).min(self.cfg.backoff_max)),
            _ => jittered,
        }
    }

    /// Send with retries; the public face of [`ChatBackend::complete`].
    pub async fn chat(&self, req: ChatRequest) -> Result<ChatResponse, LlmError> {
        let mut last = None;
        let mut attempt = 0u32;
        loop {
            let idx = self.pick(last);
            match self.attempt(idx, &req).await {
                Ok(r) => return Ok(r),
                Err(e) if e.is_retryable() && attempt < self.cfg.max_retries => {
                    let wait = self.backoff(attempt, &e);
                    tracing::warn!(error = %e, attempt, ?wait, "retrying chat completion");
                    self.retries.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                    last = Some(idx);
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl ChatBackend for OpenAiClient {
    fn complete(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatResponse, LlmError>> {
        Box::pin(self.chat(req))
    }
    fn describe(&self) -> String {
        self.endpoints
            .iter()
            .map(|e| e.cfg.base_url.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// A uniform float in [0, 1) from the std hasher's per-instance random keys; good enough for
/// jitter and needs no RNG dependency.
fn random_unit() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

fn transport_error(endpoint: &str, e: reqwest::Error, timeout: Duration) -> LlmError {
    let endpoint = endpoint.to_string();
    if e.is_timeout() {
        return LlmError::Timeout {
            endpoint,
            after: timeout,
        };
    }
    // Walk the source chain: "connection closed before message completed" hides there.
    let mut detail = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        detail.push_str(": ");
        detail.push_str(&s.to_string());
        src = s.source();
    }
    LlmError::Connection {
        endpoint,
        detail,
        source: Some(std::sync::Arc::new(e)),
    }
}

/// A lightweight handle: clone an `Arc<OpenAiClient>` into many agents.
pub type SharedClient = Arc<OpenAiClient>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_config_splits_endpoints() {
        let cfg = ClientConfig::from_vars(|k| match k {
            "OPENAI_BASE_URL" => Some("http://a:1/v1, http://b:2/v1".into()),
            "OPENAI_API_KEY" => Some("sk".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(cfg.endpoints.len(), 2);
        assert_eq!(cfg.endpoints[1].base_url, "http://b:2/v1");
        assert_eq!(cfg.endpoints[0].api_key.as_deref(), Some("sk"));
    }

    #[test]
    fn url_lists_skip_blank_entries_and_must_name_one() {
        let e = EndpointConfig::list("base_url", " http://a:1/v1,, ,http://b:2/v1 ", None, None)
            .unwrap();
        let urls: Vec<_> = e.iter().map(|e| e.base_url.as_str()).collect();
        assert_eq!(urls, ["http://a:1/v1", "http://b:2/v1"]);
        let err = EndpointConfig::list("policy base_url", " , ", None, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            LlmError::Config("policy base_url names no endpoint".into()).to_string()
        );
    }

    #[test]
    fn bad_urls_are_config_errors() {
        let err = OpenAiClient::new(ClientConfig::new(vec![EndpointConfig::new("ftp://x")]))
            .err()
            .unwrap();
        assert!(
            matches!(err, LlmError::Config(_) | LlmError::ConfigFailed { .. }),
            "{err}"
        );
        assert!(OpenAiClient::new(ClientConfig::new(vec![])).is_err());
    }

    #[test]
    fn jitter_stays_in_bounds() {
        for _ in 0..100 {
            let u = random_unit();
            assert!((0.0..1.0).contains(&u));
        }
    }
}
