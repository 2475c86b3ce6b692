//! `dojo serve`: the engine behind an OpenAI-compatible HTTP API.
//!
//! Routes: `GET /health`, `GET /v1/models`, `POST /v1/chat/completions`,
//! `POST /v1/completions`. Request problems (bad JSON, bad parameters, a prompt longer than the
//! context, a template that raises) are 400s with an OpenAI error body; the server keeps
//! serving. A request for a model this server does not serve is a 404 with OpenAI's
//! `model_not_found` body, as vLLM and OpenAI answer it, so a client configured with the wrong
//! name learns it at once instead of getting another model's answers (no `model`, or an empty
//! one, means the served model). A client that disconnects mid-generation drops the handler
//! future, which cancels its sequence in the engine.

use std::future::Future;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use dojo_llm::{ChatRequest, ErrorBody};
use serde_json::json;

use crate::{Engine, EngineError};

/// An error response in the one body format of dojo's servers ([`ErrorBody::new`]).
fn respond(status: StatusCode, body: ErrorBody) -> Response {
    (status, axum::Json(body)).into_response()
}

fn error(status: StatusCode, message: String) -> Response {
    respond(status, ErrorBody::new(status.as_u16(), message, None))
}

fn engine_error(e: EngineError) -> Response {
    match e {
        // OpenAI's code for this case, so clients can tell it from other 400s.
        EngineError::ContextLength { .. } => respond(
            StatusCode::BAD_REQUEST,
            ErrorBody::new(400, e.to_string(), None).with_code("context_length_exceeded"),
        ),
        EngineError::Request(_)
        | EngineError::RequestJson { .. }
        | EngineError::RequestChat(_)
        | EngineError::Chat(_) => error(StatusCode::BAD_REQUEST, e.to_string()),
        other => {
            tracing::error!(error = %other, "engine failure");
            error(StatusCode::INTERNAL_SERVER_ERROR, other.to_string())
        }
    }
}

fn parse_json<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, Box<Response>> {
    serde_json::from_slice(body).map_err(|e| {
        Box::new(error(
            StatusCode::BAD_REQUEST,
            format!("invalid request body: {e}"),
        ))
    })
}

/// `Err(404 response)` when the request names a model other than the served one.
fn check_model(engine: &Engine, requested: &str) -> Result<(), Box<Response>> {
    if requested.is_empty() || requested == engine.model_id() {
        return Ok(());
    }
    let body = ErrorBody::new(
        404,
        format!(
            "The model `{requested}` does not exist. This server serves `{}` (GET /v1/models).",
            engine.model_id()
        ),
        Some("model"),
    )
    .with_code("model_not_found");
    Err(Box::new(respond(StatusCode::NOT_FOUND, body)))
}

/// Liveness plus the engine's counters (operators watch `cancelled` and prefix reuse; tests use
/// them to see that a dropped client really freed its sequence).
async fn health(State(engine): State<Engine>) -> Response {
    axum::Json(json!({
        "status": "ok",
        "model": engine.model_id(),
        "kv_cache": engine.kv_cache(),
        "stats": engine.stats().to_json(),
    }))
    .into_response()
}

async fn models(State(engine): State<Engine>) -> Response {
    axum::Json(json!({
        "object": "list",
        "data": [{
            "id": engine.model_id(),
            "object": "model",
            "owned_by": "dojo",
            "max_model_len": engine.context_length(),
        }],
    }))
    .into_response()
}

async fn chat_completions(State(engine): State<Engine>, body: Bytes) -> Response {
    let req: ChatRequest = match parse_json(&body) {
        Ok(r) => r,
        Err(resp) => return *resp,
    };
    if let Err(resp) = check_model(&engine, &req.model) {
        return *resp;
    }
    match engine.chat(req).await {
        Ok(resp) => axum::Json(resp).into_response(),
        Err(e) => engine_error(e),
    }
}

async fn completions(State(engine): State<Engine>, body: Bytes) -> Response {
    let req: serde_json::Value = match parse_json(&body) {
        Ok(r) => r,
        Err(resp) => return *resp,
    };
    let model = req.get("model").and_then(|m| m.as_str()).unwrap_or("");
    if let Err(resp) = check_model(&engine, model) {
        return *resp;
    }
    match engine.completion(req).await {
        Ok(resp) => axum::Json(resp).into_response(),
        Err(e) => engine_error(e),
    }
}

async fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "no such route; dojo serve has /health, /v1/models, /v1/chat/completions, /v1/completions"
            .into(),
    )
}

/// The HTTP routes over `engine`.
pub fn router(engine: Engine) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .fallback(not_found)
        .with_state(engine)
}

/// Serve on an already bound listener until `shutdown` resolves, then finish in-flight
/// requests and return. With `key`, every route but `/health` needs it
/// ([`dojo_llm::access`]); without one, a listener beyond loopback is refused
/// (`PermissionDenied`).
pub async fn serve_listener(
    engine: Engine,
    listener: tokio::net::TcpListener,
    key: Option<dojo_llm::access::ApiKey>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    dojo_llm::access::check_exposure(listener.local_addr()?, key.as_ref())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::PermissionDenied, e))?;
    axum::serve(listener, dojo_llm::access::protect(router(engine), key))
        .with_graceful_shutdown(shutdown)
        .await
}
