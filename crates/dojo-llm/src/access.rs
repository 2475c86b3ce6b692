//! Who may call dojo's HTTP services (`dojo serve`, `dojo env serve`): an API key that every
//! request but the health probe presents as `Authorization: Bearer KEY`, the scheme OpenAI
//! clients (and this crate's client, with `OPENAI_API_KEY`) already send.
//!
//! Both services bind loopback by default, where the machine's own users are the only callers.
//! Beyond loopback (a trainer on other hosts: verl's rollout workers, a vLLM-style fleet) a key
//! is required: [`check_exposure`] refuses to serve a non-loopback address without one, because
//! `dojo env serve` runs sandboxes and calls policy endpoints a caller names, and `dojo serve`
//! spends the machine's compute.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The environment variable both services read their key from when no `--api-key` is given.
pub const API_KEY_VAR: &str = "DOJO_API_KEY";

/// The shortest key accepted: short keys are guessable over a network.
const MIN_KEY_LEN: usize = 16;

/// Paths answered without a key: liveness probes of load balancers and orchestrators.
const OPEN_PATHS: &[&str] = &["/health"];

/// A service's API key (never printed: `Debug` hides it).
#[derive(Clone)]
pub struct ApiKey(Arc<str>);

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(..)")
    }
}

/// Why a service will not start with the access settings it was given (the operator's fault).
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error(
        "the API key is {0} characters; use at least {MIN_KEY_LEN} (e.g. `openssl rand -hex 16`)"
    )]
    ShortKey(usize),
    #[error(
        "refusing to serve {0} without an API key: beyond loopback anyone who reaches the port \
         could use it; set --api-key or {API_KEY_VAR} (clients send `Authorization: Bearer KEY`), \
         or bind 127.0.0.1"
    )]
    Exposed(SocketAddr),
}

impl ApiKey {
    /// A key from a flag or [`API_KEY_VAR`]: `None` for unset or empty, an error for a short one.
    pub fn new(key: Option<&str>) -> Result<Option<ApiKey>, AccessError> {
        match key.map(str::trim).filter(|k| !k.is_empty()) {
            None => Ok(None),
            Some(k) if k.chars().count() < MIN_KEY_LEN => {
                Err(AccessError::ShortKey(k.chars().count()))
            }
            Some(k) => Ok(Some(ApiKey(k.into()))),
        }
    }

    /// Compare in time independent of where the first difference is.
    fn matches(&self, given: &[u8]) -> bool {
        let want = self.0.as_bytes();
        let mut diff = u8::from(want.len() != given.len());
        for (i, w) in want.iter().enumerate() {
            diff |= w ^ given.get(i).copied().unwrap_or(0);
        }
        diff == 0
    }
}

/// Refuse to serve a non-loopback `addr` without a key.
pub fn check_exposure(addr: SocketAddr, key: Option<&ApiKey>) -> Result<(), AccessError> {
    if key.is_none() && !addr.ip().is_loopback() {
        return Err(AccessError::Exposed(addr));
    }
    Ok(())
}

/// `router` with every route but [`OPEN_PATHS`] behind `key` (unchanged without a key).
pub fn protect(router: Router, key: Option<ApiKey>) -> Router {
    match key {
        None => router,
        Some(k) => router.layer(axum::middleware::from_fn_with_state(k, require_key)),
    }
}

async fn require_key(State(key): State<ApiKey>, req: Request, next: Next) -> Response {
    if OPEN_PATHS.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match given {
        Some(g) if key.matches(g.as_bytes()) => next.run(req).await,
        _ => {
            let message = if given.is_some() {
                "the API key is not this service's"
            } else {
                "this service needs an API key: send `Authorization: Bearer KEY`"
            };
            let mut r = (
                StatusCode::UNAUTHORIZED,
                axum::Json(serde_json::json!({"error": {
                    "message": message,
                    "type": "authentication_error",
                    "code": "invalid_api_key",
                }})),
            )
                .into_response();
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            r
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM: a service (`dojo serve`, `dojo env serve`) then stops
/// accepting requests and finishes the ones in flight.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn shutdown_waits_for_a_signal() {
        let wait = tokio::time::timeout(std::time::Duration::from_millis(20), shutdown_signal());
        assert!(wait.await.is_err());
    }

    #[test]
    fn keys_compare_exactly() {
        let k = ApiKey::new(Some("0123456789abcdef")).unwrap().unwrap();
        assert!(k.matches(b"0123456789abcdef"));
        for other in [
            &b"0123456789abcdeF"[..],
            b"0123456789abcde",
            b"0123456789abcdef0",
            b"",
        ] {
            assert!(!k.matches(other), "{other:?}");
        }
    }

    #[test]
    fn short_and_empty_keys() {
        assert!(ApiKey::new(None).unwrap().is_none());
        assert!(ApiKey::new(Some("  ")).unwrap().is_none());
        let e = ApiKey::new(Some("short")).unwrap_err();
        assert!(e.to_string().contains("at least 16"), "{e}");
        assert_eq!(
            format!("{:?}", ApiKey::new(Some("x".repeat(20).as_str()))),
            "Ok(Some(ApiKey(..)))"
        );
    }

    #[test]
    fn exposure_needs_a_key() {
        let k = ApiKey::new(Some("0123456789abcdef")).unwrap();
        let lo: SocketAddr = "127.0.0.1:8000".parse().unwrap();
        let lo6: SocketAddr = "[::1]:8000".parse().unwrap();
        let all: SocketAddr = "0.0.0.0:8000".parse().unwrap();
        assert!(check_exposure(lo, None).is_ok());
        assert!(check_exposure(lo6, None).is_ok());
        let e = check_exposure(all, None).unwrap_err();
        assert!(e.to_string().contains("0.0.0.0:8000") && e.to_string().contains(API_KEY_VAR));
        assert!(check_exposure(all, k.as_ref()).is_ok());
    }
}
