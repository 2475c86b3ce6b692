//! `dojo serve` as a real process, spoken to over real HTTP.
//!
//! The agent runtime's OpenAI client (dojo-llm) against the built `dojo` binary serving the
//! default model (SmolLM2-135M-Instruct Q4_1, fetched through dojo-cache): a tool-call round
//! trip, logprobs and token ids, stop sequences, `/v1/completions` with a token-id prompt, 4xx
//! answers with a message, a client that hangs up mid-generation, graceful shutdown on SIGTERM.
//! Then `dojo rollout` with an `openai` policy pointing at that server: the whole
//! agent loop, recorded and graded, with no infrastructure error.
//!
//! `DOJO_TEST_DEVICE` (default `cpu`) is passed to `dojo serve --device`, so the same tests
//! check a `--features cuda` build on a GPU: `DOJO_TEST_DEVICE=cuda cargo test -p dojo-cli
//! --features cuda --test serve_process`.
//!
//! Generation is kept short and greedy so the test stays fast in a debug build. Readiness is
//! awaited on `/health`, never with fixed sleeps; no assertion depends on timing.

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use dojo_llm::{
    ChatMessage, ChatRequest, ClientConfig, EndpointConfig, LlmError, OpenAiClient, Stop, ToolCall,
    ToolSpec,
};
use serde_json::{Value, json};

mod common;
use common::{Service, can_serve, ci, http, json_of, scratch};

const DOJO: &str = env!("CARGO_BIN_EXE_dojo");

fn repo_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// A running `dojo serve` (killed on drop unless it was shut down).
struct Serve(Service);

impl std::ops::Deref for Serve {
    type Target = Service;
    fn deref(&self) -> &Service {
        &self.0
    }
}

impl std::ops::DerefMut for Serve {
    fn deref_mut(&mut self) -> &mut Service {
        &mut self.0
    }
}

impl Serve {
    /// Start `dojo serve --model default --device $DOJO_TEST_DEVICE --port 0` and wait for
    /// `/health`.
    fn start(dir: &Path) -> Serve {
        Serve::start_with(dir, &[])
    }

    /// [`Serve::start`] with more arguments.
    fn start_with(dir: &Path, more: &[&str]) -> Serve {
        let device = std::env::var("DOJO_TEST_DEVICE").unwrap_or_else(|_| "cpu".into());
        let mut args = vec![
            "serve", "--model", "default", "--port", "0", "--device", &device,
        ];
        args.extend(more);
        let mut s = Service::start(&args, dir.join("serve.log"));
        s.wait_healthy("/health");
        Serve(s)
    }

    fn health(&self) -> Value {
        let (code, body) = http(&self.addr, "GET", "/health", "");
        assert_eq!(code, 200, "{body}");
        json_of(&body)
    }

    fn client(&self) -> OpenAiClient {
        let mut cfg = ClientConfig::new(vec![EndpointConfig::new(format!(
            "http://{}/v1",
            self.addr
        ))]);
        // Every failure here must surface as it is, not be retried away.
        cfg.max_retries = 0;
        OpenAiClient::new(cfg).unwrap()
    }
}

fn bash_tool() -> ToolSpec {
    ToolSpec::function(
        "bash",
        "Run a shell command.",
        json!({"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}),
    )
}

/// The agent's two legs: tools offered, a Hermes `<tool_call>` parsed into `tool_calls` with
/// token ids and logprobs, then the tool result sent back and the next turn answered.
async fn tool_call_round_trip(c: &OpenAiClient) {
    // A few-shot conversation in which the assistant always calls the tool, and a named
    // tool_choice (the server opens the call; the 135M model fills in the arguments).
    let call = |id: &str, cmd: &str| {
        let mut m = ChatMessage::assistant("");
        m.content = None;
        m.tool_calls = Some(vec![ToolCall::function(
            id,
            "bash",
            json!({"cmd": cmd}).to_string(),
        )]);
        m
    };
    let mut messages = vec![ChatMessage::system(
        "You run shell commands with the bash tool.",
    )];
    for (i, (cmd, out)) in [("ls", "a.py b.py"), ("cat a.py", "print(1)")]
        .into_iter()
        .enumerate()
    {
        let id = format!("c{i}");
        messages.push(ChatMessage::user(format!("Run: {cmd}")));
        messages.push(call(&id, cmd));
        messages.push(ChatMessage::tool(id, out));
    }
    messages.push(ChatMessage::user("Run: cat b.py"));
    let r = c
        .chat(ChatRequest {
            messages: messages.clone(),
            tools: Some(vec![bash_tool()]),
            tool_choice: Some(json!({"type": "function", "function": {"name": "bash"}})),
            temperature: Some(0.0),
            max_tokens: Some(32),
            logprobs: Some(true),
            top_logprobs: Some(2),
            ..Default::default()
        })
        .await
        .expect("first leg");
    let choice = &r.choices[0];
    let calls = choice
        .message
        .tool_calls
        .as_ref()
        .unwrap_or_else(|| panic!("no parsed tool call in {:?}", choice.message));
    assert_eq!(choice.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(calls[0].function.name, "bash");
    serde_json::from_str::<Value>(&calls[0].function.arguments)
        .unwrap_or_else(|e| panic!("arguments are not JSON ({e}): {:?}", calls[0]));
    // Token ids (ending with <|im_end|>, id 2) and one logprob per sampled token, each with
    // its top alternatives; the prompt's token ids come back too.
    let ids = choice.token_ids.as_ref().expect("token_ids");
    assert_eq!(ids.last(), Some(&2), "{ids:?}");
    let lps = choice
        .logprobs
        .as_ref()
        .and_then(|l| l.content.as_ref())
        .expect("logprobs");
    assert_eq!(lps.len(), ids.len());
    for lp in lps {
        assert!(lp.logprob <= 0.0 && lp.logprob.is_finite(), "{lp:?}");
        assert_eq!(lp.top_logprobs.len(), 2, "{lp:?}");
        // Greedy: the sampled token is the most likely one.
        assert!(lp.logprob >= lp.top_logprobs[0].logprob - 1e-4, "{lp:?}");
    }
    let first_prompt = r.prompt_token_ids.as_ref().expect("prompt_token_ids").len();
    let usage = r.usage.expect("usage");
    assert_eq!(usage.completion_tokens as usize, ids.len());

    // Second leg: the call and its result go back; the next turn is answered, and the
    // conversation's prefix comes from the server's KV cache instead of being prefilled again.
    messages.push(choice.message.clone());
    messages.push(ChatMessage::tool(calls[0].id.clone(), "print(2)"));
    let next = c
        .chat(ChatRequest {
            messages,
            tools: Some(vec![bash_tool()]),
            temperature: Some(0.0),
            max_tokens: Some(8),
            ..Default::default()
        })
        .await
        .expect("second leg");
    assert!(next.prompt_token_ids.as_ref().unwrap().len() > first_prompt);
    let reply = &next.choices[0];
    assert!(
        !reply.message.text().is_empty() || reply.message.tool_calls.is_some(),
        "{reply:?}"
    );
    assert!(
        reply.extra["cached_tokens"].as_u64().unwrap_or(0) > 0,
        "{:?}",
        reply.extra
    );
}

/// Stop strings end generation and are cut from the text; returns the prompt's token ids.
async fn stop_sequences(c: &OpenAiClient) -> Vec<u32> {
    let mut req = ChatRequest {
        messages: vec![ChatMessage::user(
            "Count from 1 to 20, separated by commas.",
        )],
        temperature: Some(0.0),
        max_tokens: Some(48),
        ..Default::default()
    };
    let free = c.chat(req.clone()).await.expect("free run");
    let text = free.choices[0].message.text();
    assert!(text.contains('5'), "{text}");
    req.stop = Some(Stop::Many(vec!["5".into()]));
    let cut = c.chat(req).await.expect("run with a stop string");
    let cut_text = cut.choices[0].message.text();
    assert_eq!(cut.choices[0].finish_reason.as_deref(), Some("stop"));
    assert_eq!(cut.choices[0].extra["stop_reason"], "5");
    assert!(!cut_text.contains('5'), "{cut_text}");
    assert!(text.starts_with(&cut_text), "{text:?} vs {cut_text:?}");
    cut.prompt_token_ids.expect("prompt_token_ids")
}

/// `/v1/completions` with a token-id prompt (what RL trainers send).
fn token_id_completion(addr: &str, prompt: &[u32]) {
    let body = json!({"prompt": prompt, "max_tokens": 3, "temperature": 0, "logprobs": 1});
    let (code, text) = http(addr, "POST", "/v1/completions", &body.to_string());
    assert_eq!(code, 200, "{text}");
    let v = json_of(&text);
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["prompt_token_ids"], json!(prompt));
    assert_eq!(v["usage"]["prompt_tokens"], prompt.len());
    let choice = &v["choices"][0];
    let ids = choice["token_ids"].as_array().expect("token_ids");
    assert!((1..=3).contains(&ids.len()), "{choice}");
    assert_eq!(
        choice["logprobs"]["token_logprobs"]
            .as_array()
            .map(Vec::len),
        Some(ids.len()),
        "{choice}"
    );
    assert_eq!(
        choice["logprobs"]["tokens"].as_array().map(Vec::len),
        Some(ids.len())
    );
}

/// Request problems are 4xx with an OpenAI error body that says what is wrong.
async fn bad_requests(addr: &str, c: &OpenAiClient) {
    let (code, body) = http(addr, "POST", "/v1/chat/completions", r#"{"messages": ["#);
    assert_eq!(code, 400, "{body}");
    let msg = json_of(&body)["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(msg.contains("invalid request body"), "{msg}");

    let (code, body) = http(addr, "POST", "/v1/chat/completions", r#"{"messages": 3}"#);
    assert_eq!(code, 400, "{body}");

    // A prompt longer than the context (SmolLM2: 8192 tokens), as token ids…
    let long = json!({"prompt": vec![28u32; 9000], "max_tokens": 1});
    let (code, body) = http(addr, "POST", "/v1/completions", &long.to_string());
    assert_eq!(code, 400, "{body}");
    let err = &json_of(&body)["error"];
    assert_eq!(err["code"], "context_length_exceeded", "{err}");
    assert!(
        err["message"]
            .as_str()
            .is_some_and(|m| m.contains("9000 tokens") && m.contains("context length")),
        "{err}"
    );
    // …and as a chat message, which the client classifies as the request's fault.
    let e = c
        .chat(ChatRequest {
            messages: vec![ChatMessage::user("hello ".repeat(9000))],
            max_tokens: Some(1),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(matches!(e, LlmError::ContextLength { .. }), "{e}");
    assert!(!e.is_infrastructure(), "{e}");

    let (code, _) = http(addr, "GET", "/v1/nothing", "");
    assert_eq!(code, 404);
}

/// Poll `/health` until `pred` holds for its `stats` (failing after a generous deadline).
fn wait_stats(s: &Serve, what: &str, pred: impl Fn(&Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let h = s.health();
        if pred(&h["stats"]) {
            return;
        }
        assert!(Instant::now() < deadline, "{what} never happened: {h}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A client that starts a long generation and hangs up mid-way: its sequence is cancelled (the
/// engine counts it) and the server keeps serving.
fn client_disconnect(s: &Serve) {
    let stat = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
    let before = s.health()["stats"].clone();
    let body =
        json!({"prompt": [1, 28, 29, 30], "max_tokens": 4000, "ignore_eos": true}).to_string();
    let mut conn = TcpStream::connect(&s.addr).unwrap();
    write!(
        conn,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    conn.flush().unwrap();
    // Mid-generation: the engine has started the request and produced tokens for it.
    wait_stats(s, "the long generation starting", |v| {
        stat(v, "requests") > stat(&before, "requests")
            && stat(v, "generated_tokens") > stat(&before, "generated_tokens") + 2
    });
    drop(conn);
    wait_stats(s, "the abandoned request's cancellation", |v| {
        stat(v, "cancelled") > stat(&before, "cancelled")
    });
    let (code, body) = http(
        &s.addr,
        "POST",
        "/v1/completions",
        r#"{"prompt": [1, 28], "max_tokens": 2, "temperature": 0}"#,
    );
    assert_eq!(code, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_client_against_a_real_dojo_serve_process() {
    if !can_serve() {
        return;
    }
    let dir = scratch("serve-process");
    let mut s = Serve::start(dir.path());
    let h = s.health();
    assert_eq!(h["status"], "ok");
    assert_eq!(h["kv_cache"], "f32");
    let (code, models) = http(&s.addr, "GET", "/v1/models", "");
    assert_eq!(code, 200);
    let models = json_of(&models);
    assert_eq!(models["data"][0]["id"], h["model"]);
    assert_eq!(models["data"][0]["max_model_len"], 8192);

    let c = s.client();
    tool_call_round_trip(&c).await;
    let prompt = stop_sequences(&c).await;
    token_id_completion(&s.addr, &prompt);
    bad_requests(&s.addr, &c).await;
    client_disconnect(&s);
    // Still serving through the client after all of the above.
    let ok = c
        .chat(ChatRequest {
            messages: vec![ChatMessage::user("Hi")],
            max_tokens: Some(2),
            temperature: Some(0.0),
            ..Default::default()
        })
        .await
        .expect("served after errors and a disconnect");
    assert_eq!(ok.choices.len(), 1);

    let status = s.terminate();
    assert_eq!(status.code(), Some(0), "log:\n{}", s.log_text());
    assert!(
        s.log_text().contains("dojo serve: shut down"),
        "{}",
        s.log_text()
    );
}

/// `--kv-cache f16`: the process says so on `/health` and answers as a model should (a greedy
/// count, a stop string, token-id completions), through caches of half the size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dojo_serve_with_f16_kv_caches() {
    if !can_serve() {
        return;
    }
    let dir = scratch("serve-f16");
    let mut s = Serve::start_with(dir.path(), &["--kv-cache", "f16"]);
    assert_eq!(s.health()["kv_cache"], "f16");
    let prompt = stop_sequences(&s.client()).await;
    token_id_completion(&s.addr, &prompt);
    let status = s.terminate();
    assert_eq!(status.code(), Some(0), "log:\n{}", s.log_text());
}

/// uv builds the task environments: from `DOJO_UV`, `DOJO_PYTOOLS`, target/pytools or PATH.
fn pytools_env() -> Option<Vec<(String, String)>> {
    if std::env::var_os("DOJO_UV").is_some() || std::env::var_os("DOJO_PYTOOLS").is_some() {
        return Some(Vec::new());
    }
    let local = repo_root().join("target/pytools");
    if local.join("bin/uv").is_file() {
        return Some(vec![(
            "DOJO_PYTOOLS".into(),
            local.to_string_lossy().into_owned(),
        )]);
    }
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("uv").is_file()))
        .then(Vec::new)
}

/// The `openai` policy end to end: `dojo rollout` drives the agent against the real
/// server for two short greedy steps; the trajectory is recorded (token ids and logprobs
/// included), graded, and no infrastructure error is reported.
#[test]
fn openai_policy_rollout_against_dojo_serve() {
    if !can_serve() {
        return;
    }
    let Some(env) = pytools_env() else {
        assert!(!ci(), "uv is required in CI (scripts/setup-tools.sh)");
        println!("SKIPPED: uv not found (run scripts/setup-tools.sh)");
        return;
    };
    let dir = scratch("openai-rollout");
    let mut s = Serve::start(dir.path());
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            r#"kind = "openai"
model = "{}"
base_url = "http://{}/v1"
name = "openai-e2e"
llm_concurrency = 1

[sampling]
temperature = 0.0
max_tokens = 24

[agent]
max_steps = 2
tool_set = "r2e"
action_format = "native"

[agent.sampling]
logprobs = true
"#,
            // The served name: `dojo serve` answers 404 for any other, as vLLM does.
            dojo_tokenizer::default_model::MODEL_ID,
            s.addr
        ),
    )
    .unwrap();
    let task = "pytest-dev__iniconfig-1";
    let out = dir.path().join("run");
    let tasks = repo_root().join("tasksets/mini/tasks.jsonl");
    let run = Command::new(DOJO)
        .arg("rollout")
        .arg("--tasks")
        .arg(&tasks)
        .args(["--instance", task, "-n", "1", "--workers", "1"])
        .arg("--policy")
        .arg(&policy)
        .arg("--out")
        .arg(&out)
        .envs(env)
        // The policy file names the endpoint; nothing may leak in from the environment.
        .env_remove("OPENAI_BASE_URL")
        .output()
        .expect("spawn dojo rollout");
    let stderr = String::from_utf8_lossy(&run.stderr);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "dojo rollout failed ({}):\n{stdout}\n{stderr}\nserver log:\n{}",
        run.status,
        s.log_text()
    );

    let text = std::fs::read_to_string(out.join("trajectories.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let raw: Value = json_of(lines[0]);
    assert!(raw["schema_version"].as_u64().is_some_and(|v| v >= 1));
    let t = dojo_trajectory::Trajectory::from_json(lines[0]).unwrap();
    assert_eq!(t.task_id, task);
    println!(
        "{task}: stop {:?}, forced {}, {} steps, {} format errors, resolved {:?}",
        t.stop_reason,
        t.forced_submission,
        t.steps.len(),
        t.format_errors,
        t.resolved
    );
    assert!(
        !t.infra_failure && !t.stop_reason.is_infrastructure(),
        "infrastructure failure: {:?} {:?} events {:?}",
        t.stop_reason,
        t.stop_detail,
        t.events
    );
    assert_eq!(t.policy.kind, "openai");
    assert!(
        t.policy
            .endpoint
            .as_deref()
            .is_some_and(|e| e.contains(&s.addr)),
        "{:?}",
        t.policy
    );
    assert!(t.llm_calls >= 1 && t.llm_calls <= 2, "{}", t.llm_calls);
    assert!(!t.steps.is_empty());
    for step in &t.steps {
        let ids = step
            .completion_token_ids
            .as_ref()
            .unwrap_or_else(|| panic!("step {} has no token ids", step.index));
        assert!(!ids.is_empty() && ids.len() <= 24, "{ids:?}");
        assert!(
            step.prompt_token_ids
                .as_ref()
                .is_some_and(|p| !p.is_empty())
        );
        let lps = step
            .logprobs
            .as_ref()
            .and_then(|l| l.content.as_ref())
            .unwrap_or_else(|| panic!("step {} has no logprobs", step.index));
        assert_eq!(lps.len(), ids.len());
    }
    // Graded at stop, whatever the stop was.
    assert!(t.grading.is_some(), "not graded: {:?}", t.stop_detail);
    assert!(t.resolved.is_some() && t.reward.is_some());

    let summary = json_of(&std::fs::read_to_string(out.join("summary.json")).unwrap());
    assert_eq!(summary["infra_errors"], 0, "{summary}");

    assert_eq!(s.terminate().code(), Some(0));
}
