//! The HTTP server over a tiny random model, driven by the agent runtime's real OpenAI client
//! and by raw HTTP for the error paths.

mod common;

use common::*;
use dojo_engine::EngineOptions;
use dojo_llm::{ChatMessage, ChatRequest, ClientConfig, EndpointConfig, OpenAiClient};
use serde_json::{Value, json};

struct Server {
    base: String,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    handle: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start() -> Server {
    start_with(None).await
}

async fn start_with(key: Option<dojo_llm::access::ApiKey>) -> Server {
    let engine = tiny_engine(EngineOptions {
        context_length: Some(256),
        ..Default::default()
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(dojo_engine::server::serve_listener(
        engine,
        listener,
        key,
        async {
            let _ = rx.await;
        },
    ));
    Server {
        base,
        shutdown: Some(tx),
        handle,
    }
}

impl Server {
    async fn stop(mut self) {
        let _ = self.shutdown.take().unwrap().send(());
        self.handle.await.unwrap().unwrap();
    }
}

async fn post(url: &str, body: &str) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

fn client(base: &str) -> OpenAiClient {
    let mut cfg = ClientConfig::new(vec![EndpointConfig::new(format!("{base}/v1"))]);
    cfg.max_retries = 0;
    OpenAiClient::new(cfg).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_client_round_trip_with_logprobs_and_token_ids() {
    let s = start().await;
    let c = client(&s.base);
    let mut req = ChatRequest {
        model: "tiny".into(),
        messages: vec![ChatMessage::system("be brief"), ChatMessage::user("hello")],
        temperature: Some(0.0),
        max_tokens: Some(6),
        logprobs: Some(true),
        top_logprobs: Some(2),
        ..Default::default()
    };
    let r = c.chat(req.clone()).await.unwrap();
    assert_eq!(r.model, "tiny");
    let choice = &r.choices[0];
    let ids = choice.token_ids.clone().unwrap();
    let lps = choice.logprobs.as_ref().unwrap().content.as_ref().unwrap();
    assert_eq!(lps.len(), ids.len());
    assert!(
        lps.iter()
            .all(|l| l.logprob <= 0.0 && l.top_logprobs.len() == 2)
    );
    let usage = r.usage.unwrap();
    assert_eq!(usage.completion_tokens as usize, ids.len());
    assert_eq!(
        usage.prompt_tokens as usize,
        r.prompt_token_ids.as_ref().unwrap().len()
    );
    // Same request again: same greedy answer.
    req.logprobs = None;
    let again = c.chat(req).await.unwrap();
    assert_eq!(again.choices[0].token_ids.as_ref(), Some(&ids));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_models_and_token_id_completions() {
    let s = start().await;
    let health: Value = reqwest::get(format!("{}/health", s.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "ok");
    assert_eq!(health["model"], "tiny");
    assert_eq!(health["stats"]["requests"], 0, "{health}");
    let models: Value = reqwest::get(format!("{}/v1/models", s.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "tiny");
    assert_eq!(models["data"][0]["max_model_len"], 256);
    let (status, body) = post(
        &format!("{}/v1/completions", s.base),
        r#"{"prompt": [10, 11, 12], "max_tokens": 5, "temperature": 0, "logprobs": 1, "ignore_eos": true}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "text_completion");
    assert_eq!(body["choices"][0]["token_ids"].as_array().unwrap().len(), 5);
    assert_eq!(
        body["choices"][0]["logprobs"]["token_logprobs"]
            .as_array()
            .unwrap()
            .len(),
        5
    );
    assert_eq!(body["prompt_token_ids"], json!([10, 11, 12]));
    assert_eq!(body["usage"]["total_tokens"], 8);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_400_with_a_message_and_the_server_keeps_serving() {
    let s = start().await;
    let chat = format!("{}/v1/chat/completions", s.base);
    let cases = [
        ("{not json", "invalid request body"),
        (r#"{"messages": []}"#, "messages must not be empty"),
        (
            r#"{"messages": [{"role": "user", "content": "x"}], "stream": true}"#,
            "streaming is not supported",
        ),
        (
            r#"{"messages": [{"role": "user", "content": "x"}], "temperature": -1}"#,
            "temperature -1",
        ),
        (
            r#"{"messages": [{"role": "wizard", "content": "x"}]}"#,
            "invalid request body",
        ),
    ];
    for (body, want) in cases {
        let (status, err) = post(&chat, body).await;
        assert_eq!(status, 400, "{body}: {err}");
        let msg = err["error"]["message"].as_str().unwrap();
        assert!(msg.contains(want), "{body}: {msg}");
    }
    let long = "word ".repeat(400);
    let (status, err) = post(
        &chat,
        &json!({"messages": [{"role": "user", "content": long}]}).to_string(),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("exceeds the maximum context length"),
        "{err}"
    );
    let (status, _) = post(
        &format!("{}/v1/completions", s.base),
        r#"{"prompt": [999999]}"#,
    )
    .await;
    assert_eq!(status, 400);
    // Still serving.
    let (status, ok) = post(
        &chat,
        r#"{"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}"#,
    )
    .await;
    assert_eq!(status, 200, "{ok}");
    s.stop().await;
}

/// As vLLM does: a model the server does not serve is a 404 with OpenAI's error body; the served
/// name, or none, is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_model_name_is_a_404_and_the_served_name_is_answered() {
    let s = start().await;
    for route in ["chat/completions", "completions"] {
        let url = format!("{}/v1/{route}", s.base);
        let body = |model: &str| {
            if route == "completions" {
                json!({"model": model, "prompt": [10, 11], "max_tokens": 2})
            } else {
                json!({"model": model, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2})
            }
            .to_string()
        };
        let (status, err) = post(&url, &body("gpt-4o")).await;
        assert_eq!(status, 404, "{route}: {err}");
        assert_eq!(err["error"]["code"], "model_not_found", "{err}");
        assert_eq!(err["error"]["param"], "model", "{err}");
        let msg = err["error"]["message"].as_str().unwrap();
        assert!(msg.contains("gpt-4o") && msg.contains("tiny"), "{msg}");
        let (status, ok) = post(&url, &body("tiny")).await;
        assert_eq!(status, 200, "{route}: {ok}");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_mid_generation_does_not_hurt_the_server() {
    let s = start().await;
    let url = format!("{}/v1/completions", s.base);
    // A generation of ~250 tokens, abandoned by a client with a short timeout.
    let abandoned = reqwest::Client::builder()
        .timeout(std::time::Duration::from_millis(50))
        .build()
        .unwrap()
        .post(&url)
        .header("content-type", "application/json")
        .body(r#"{"prompt": [10, 11], "max_tokens": 250, "ignore_eos": true}"#)
        .send()
        .await;
    assert!(abandoned.is_err());
    let (status, body) = post(
        &url,
        r#"{"prompt": [12, 13], "max_tokens": 3, "ignore_eos": true}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    s.stop().await;
}

/// With an API key, every route but `/health` answers 401 (OpenAI's error shape) without it or
/// with another, and the real client with the key (`api_key`) is served. Without a key, a
/// listener beyond loopback is refused before serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_key_guards_every_route_but_health() {
    let key = "k3y-0123456789abcdef";
    let s = start_with(dojo_llm::access::ApiKey::new(Some(key)).unwrap()).await;
    let http = reqwest::Client::new();
    let health = http.get(format!("{}/health", s.base)).send().await.unwrap();
    assert_eq!(health.status().as_u16(), 200);
    for auth in [None, Some("Bearer wrong-key-0123456789"), Some(key)] {
        let mut r = http.get(format!("{}/v1/models", s.base));
        if let Some(a) = auth {
            r = r.header("authorization", a);
        }
        let r = r.send().await.unwrap();
        assert_eq!(r.status().as_u16(), 401, "{auth:?}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid_api_key", "{body}");
    }
    let mut cfg = ClientConfig::new(vec![EndpointConfig {
        api_key: Some(key.into()),
        ..EndpointConfig::new(format!("{}/v1", s.base))
    }]);
    cfg.max_retries = 0;
    let c = OpenAiClient::new(cfg).unwrap();
    let r = c
        .chat(ChatRequest {
            model: "tiny".into(),
            messages: vec![ChatMessage::user("hi")],
            max_tokens: Some(2),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(r.model, "tiny");
    s.stop().await;

    let engine = tiny_engine(EngineOptions::default());
    let all = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let e = dojo_engine::server::serve_listener(engine, all, None, async {})
        .await
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
    assert!(e.to_string().contains("DOJO_API_KEY"), "{e}");
}
