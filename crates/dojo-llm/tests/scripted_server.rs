//! Protocol and fault tests of the HTTP client against an in-process scripted OpenAI-compatible
//! server: each request pops the next scripted answer, so a test states exactly what the
//! "server" does (tool calls, 429, 500, HTML, truncated JSON, stalls, dropped connections).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use dojo_llm::{
    ChatBackend, ChatMessage, ChatRequest, ClientConfig, EndpointConfig, FailureClass, LlmError,
    OpenAiClient,
};
use serde_json::{Value, json};

#[derive(Clone)]
enum Answer {
    Json(Value),
    Status(u16, String),
    Raw(u16, &'static str, String),
    Stall(Duration),
}

#[derive(Default)]
struct Script {
    answers: VecDeque<Answer>,
    seen: Vec<(Value, Option<String>)>,
}

type Shared = Arc<Mutex<Script>>;

async fn handler(State(s): State<Shared>, headers: HeaderMap, body: String) -> Response {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let answer = {
        let mut s = s.lock().unwrap();
        s.seen
            .push((serde_json::from_str(&body).unwrap_or(Value::Null), auth));
        s.answers.pop_front()
    };
    match answer {
        Some(Answer::Json(v)) => axum::Json(v).into_response(),
        Some(Answer::Status(code, body)) => {
            (StatusCode::from_u16(code).unwrap(), body).into_response()
        }
        Some(Answer::Raw(code, ctype, body)) => (
            StatusCode::from_u16(code).unwrap(),
            [("content-type", ctype)],
            body,
        )
            .into_response(),
        Some(Answer::Stall(d)) => {
            tokio::time::sleep(d).await;
            axum::Json(completion("late")).into_response()
        }
        None => (StatusCode::INTERNAL_SERVER_ERROR, "script exhausted").into_response(),
    }
}

async fn serve(answers: Vec<Answer>) -> (String, Shared) {
    let shared: Shared = Arc::new(Mutex::new(Script {
        answers: answers.into(),
        seen: vec![],
    }));
    let app = Router::new()
        .route("/v1/chat/completions", post(handler))
        .with_state(shared.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/v1"), shared)
}

fn completion(text: &str) -> Value {
    json!({
        "id": "c", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    })
}

fn client(url: &str, retries: u32, timeout: Duration) -> OpenAiClient {
    let mut cfg = ClientConfig::new(vec![EndpointConfig {
        api_key: Some("sk-test".into()),
        ..EndpointConfig::new(url)
    }]);
    cfg.max_retries = retries;
    cfg.backoff_base = Duration::from_millis(1);
    cfg.backoff_max = Duration::from_millis(5);
    cfg.request_timeout = timeout;
    OpenAiClient::new(cfg).unwrap()
}

fn request() -> ChatRequest {
    ChatRequest {
        model: "m".into(),
        messages: vec![ChatMessage::user("hi")],
        ..Default::default()
    }
}

#[tokio::test]
async fn tool_calls_vendor_fields_and_auth_round_trip() {
    let body = json!({
        "id": "c", "object": "chat.completion", "created": 1, "model": "m",
        "prompt_token_ids": [1, 2],
        "choices": [{"index": 0, "finish_reason": "tool_calls", "token_ids": [5, 6, 7],
            "logprobs": {"content": [{"token": "x", "logprob": -0.1, "top_logprobs": []}]},
            "message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "execute_bash", "arguments": "{\"command\": \"ls\"}"}}]}}],
        "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    });
    let (url, script) = serve(vec![Answer::Json(body)]).await;
    let c = client(&url, 0, Duration::from_secs(30));
    let mut req = request();
    req.n = Some(1);
    req.logprobs = Some(true);
    req.extra.insert("return_token_ids".into(), json!(true));
    req.extra.insert(
        "chat_template_kwargs".into(),
        json!({"enable_thinking": false}),
    );
    let resp = c.complete(req).await.unwrap();
    let choice = &resp.choices[0];
    assert_eq!(
        choice.message.tool_calls.as_ref().unwrap()[0].function.name,
        "execute_bash"
    );
    assert_eq!(choice.token_ids.as_deref(), Some(&[5, 6, 7][..]));
    assert_eq!(resp.prompt_token_ids.as_deref(), Some(&[1, 2][..]));
    assert_eq!(c.usage().total_tokens, 5);
    let seen = &script.lock().unwrap().seen[0];
    assert_eq!(seen.0["return_token_ids"], json!(true));
    assert_eq!(
        seen.0["chat_template_kwargs"]["enable_thinking"],
        json!(false)
    );
    assert_eq!(seen.0["n"], json!(1));
    assert_eq!(seen.1.as_deref(), Some("Bearer sk-test"));
}

#[tokio::test]
async fn retries_429_and_500_then_succeeds() {
    let (url, script) = serve(vec![
        Answer::Status(429, r#"{"error":{"message":"slow down"}}"#.into()),
        Answer::Status(500, "boom".into()),
        Answer::Status(503, "unavailable".into()),
        Answer::Json(completion("ok")),
    ])
    .await;
    let c = client(&url, 5, Duration::from_secs(30));
    let resp = c.complete(request()).await.unwrap();
    assert_eq!(resp.choices[0].message.text(), "ok");
    assert_eq!(script.lock().unwrap().seen.len(), 4);
    assert_eq!(c.retries(), 3);
    assert_eq!(c.usage().total_tokens, 12);
}

#[tokio::test]
async fn retry_budget_is_bounded_and_error_is_infrastructure() {
    let (url, script) = serve(vec![Answer::Status(500, "a".into()); 10]).await;
    let c = client(&url, 2, Duration::from_secs(30));
    let err = c.complete(request()).await.unwrap_err();
    assert!(matches!(err, LlmError::Server { status: 500, .. }), "{err}");
    assert_eq!(err.class(), FailureClass::Infrastructure);
    assert_eq!(script.lock().unwrap().seen.len(), 3);
}

#[tokio::test]
async fn bad_request_is_not_retried_and_blames_the_model() {
    let (url, script) = serve(vec![
        Answer::Status(
            400,
            r#"{"error":{"message":"This model's maximum context length is 4096 tokens"}}"#.into(),
        ),
        Answer::Status(422, "bad temperature".into()),
    ])
    .await;
    let c = client(&url, 5, Duration::from_secs(30));
    let err = c.complete(request()).await.unwrap_err();
    assert!(matches!(err, LlmError::ContextLength { .. }), "{err}");
    assert_eq!(err.class(), FailureClass::Model);
    let err = c.complete(request()).await.unwrap_err();
    assert!(
        matches!(err, LlmError::Rejected { status: 422, .. }),
        "{err}"
    );
    assert_eq!(script.lock().unwrap().seen.len(), 2);
}

#[tokio::test]
async fn html_truncated_json_and_empty_choices_are_bad_bodies() {
    let full = completion("x").to_string();
    let (url, _) = serve(vec![
        Answer::Raw(
            200,
            "text/html",
            "<html><body>502 Bad Gateway</body></html>".into(),
        ),
        Answer::Raw(200, "application/json", full[..full.len() / 2].to_string()),
        Answer::Json(json!({"id": "c", "choices": []})),
        Answer::Json(json!({"unexpected": true})),
    ])
    .await;
    let c = client(&url, 0, Duration::from_secs(30));
    for expect in [
        "HTML",
        "truncated JSON",
        "no choices",
        "not a chat completion",
    ] {
        let err = c.complete(request()).await.unwrap_err();
        assert!(matches!(err, LlmError::BadBody { .. }), "{err}");
        assert!(
            err.to_string().contains(expect),
            "{err} should mention {expect}"
        );
        assert!(err.is_infrastructure());
    }
}

#[tokio::test]
async fn garbage_then_good_is_retried() {
    let (url, _) = serve(vec![
        Answer::Raw(200, "text/html", "<html>".into()),
        Answer::Json(completion("ok")),
    ])
    .await;
    let c = client(&url, 3, Duration::from_secs(30));
    assert_eq!(
        c.complete(request()).await.unwrap().choices[0]
            .message
            .text(),
        "ok"
    );
}

#[tokio::test]
async fn a_stalled_server_times_out() {
    let (url, _) = serve(vec![Answer::Stall(Duration::from_secs(30))]).await;
    let c = client(&url, 0, Duration::from_millis(300));
    let err = c.complete(request()).await.unwrap_err();
    assert!(matches!(err, LlmError::Timeout { .. }), "{err}");
    assert!(err.is_retryable() && err.is_infrastructure());
}

/// `DOJO_LLM_TIMEOUT` replaces the 600 s default: a hung endpoint costs what the user set.
#[tokio::test]
async fn the_request_timeout_is_set_by_the_environment() {
    let (url, _) = serve(vec![Answer::Stall(Duration::from_secs(30))]).await;
    let vars = |timeout: &'static str| {
        let url = url.clone();
        move |k: &str| match k {
            "OPENAI_BASE_URL" => Some(url.clone()),
            "DOJO_LLM_TIMEOUT" => Some(timeout.to_string()),
            _ => None,
        }
    };
    let mut cfg = ClientConfig::from_vars(vars("0.3")).unwrap();
    assert_eq!(cfg.request_timeout, Duration::from_millis(300));
    cfg.max_retries = 0;
    let err = OpenAiClient::new(cfg)
        .unwrap()
        .complete(request())
        .await
        .unwrap_err();
    match err {
        LlmError::Timeout { after, .. } => assert_eq!(after, Duration::from_millis(300)),
        other => panic!("expected a timeout, got {other}"),
    }
    // Unset: the default; nonsense: a configuration error naming the variable.
    let unset = ClientConfig::from_vars(vars("")).unwrap();
    assert_eq!(unset.request_timeout, Duration::from_secs(600));
    for bad in ["0", "-1", "soon"] {
        let e = ClientConfig::from_vars(vars(bad)).unwrap_err().to_string();
        assert!(e.contains("DOJO_LLM_TIMEOUT"), "{bad}: {e}");
    }
}

#[tokio::test]
async fn closed_connections_and_refused_ports_are_connection_errors() {
    // A server that reads the request and hangs up without answering.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        while let Ok((mut sock, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = sock.read(&mut buf).await;
            drop(sock);
        }
    });
    let c = client(&format!("http://{addr}/v1"), 1, Duration::from_secs(30));
    let err = c.complete(request()).await.unwrap_err();
    assert!(matches!(err, LlmError::Connection { .. }), "{err}");
    assert!(err.is_infrastructure());

    // Nothing listening at all.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let c = client(&format!("http://{free}/v1"), 0, Duration::from_secs(30));
    let err = c.complete(request()).await.unwrap_err();
    assert!(matches!(err, LlmError::Connection { .. }), "{err}");
}

#[tokio::test]
async fn failover_to_a_healthy_endpoint_and_model_default() {
    let (bad, _) = serve(vec![Answer::Status(503, "down".into()); 10]).await;
    let (good, good_script) = serve(vec![Answer::Json(completion("ok")); 10]).await;
    let mut cfg = ClientConfig::new(vec![
        EndpointConfig::new(&bad),
        EndpointConfig {
            model: Some("served-model".into()),
            ..EndpointConfig::new(&good)
        },
    ]);
    cfg.backoff_base = Duration::from_millis(1);
    cfg.max_retries = 2;
    let c = OpenAiClient::new(cfg).unwrap();
    for _ in 0..4 {
        let mut req = request();
        req.model.clear();
        c.complete(req).await.unwrap();
    }
    let seen = good_script.lock().unwrap();
    assert_eq!(seen.seen.len(), 4);
    assert_eq!(seen.seen[0].0["model"], json!("served-model"));
    let stats = c.stats();
    assert_eq!(stats[1].requests, 4);
    assert!(stats[0].failures >= 1 && stats[0].failures == stats[0].requests);
}

#[tokio::test]
async fn concurrency_limit_per_endpoint_holds() {
    // 8 concurrent requests, limit 2: the server must never see more than 2 at once.
    use std::sync::atomic::{AtomicUsize, Ordering};
    let current = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (c2, p2) = (current.clone(), peak.clone());
    let app = Router::new().route(
        "/v1/chat/completions",
        post(move || {
            let (c, p) = (c2.clone(), p2.clone());
            async move {
                let now = c.fetch_add(1, Ordering::SeqCst) + 1;
                p.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                c.fetch_sub(1, Ordering::SeqCst);
                axum::Json(completion("ok"))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let c = Arc::new(
        OpenAiClient::new(ClientConfig::new(vec![EndpointConfig {
            max_concurrency: 2,
            ..EndpointConfig::new(format!("http://{addr}/v1"))
        }]))
        .unwrap(),
    );
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.complete(request()).await })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert!(peak.load(Ordering::SeqCst) <= 2);
    assert_eq!(c.usage().total_tokens, 8 * 12);
}
