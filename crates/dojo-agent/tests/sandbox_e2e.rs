//! End to end on the real stack: tools inside a real `dojo_sandbox::Sandbox`, and a whole rollout
//! driven over HTTP by the real `OpenAiClient` against an in-process scripted OpenAI-compatible
//! server (axum) that answers with native tool calls.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use dojo_agent::{ActionFormat, Agent, AgentConfig, TaskInput, ToolContext, ToolRegistry};
use dojo_llm::{ClientConfig, EndpointConfig, OpenAiClient};
use dojo_sandbox::{Pristine, PristineStore, Sandbox, SandboxOptions, Source};
use dojo_trajectory::StopReason;
use serde_json::{Map, Value, json};

fn skip_reason() -> Option<String> {
    home();
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        return None;
    }
    (!dojo_sandbox::doctor::namespaces_usable())
        .then(|| "user/mount/pid/net namespaces or overlayfs(userxattr) unavailable".to_string())
}

macro_rules! skip_unless_sandbox {
    () => {
        if let Some(r) = skip_reason() {
            eprintln!("SKIPPED: {r}");
            return;
        }
    };
}

fn home() -> &'static PathBuf {
    static H: OnceLock<PathBuf> = OnceLock::new();
    H.get_or_init(|| {
        let h = std::env::temp_dir().join(format!("dojo-agent-e2e-{}", std::process::id()));
        std::fs::create_dir_all(&h).unwrap();
        // SAFETY: set once, before any sandbox exists, by the first test to get here.
        unsafe { std::env::set_var("DOJO_HOME", &h) };
        h
    })
}

fn pristine() -> Pristine {
    static P: OnceLock<Pristine> = OnceLock::new();
    P.get_or_init(|| {
        let src = tempfile::tempdir().unwrap().keep();
        let files = [
            ("calc/__init__.py", ""),
            ("calc/stats.py", "def mean(xs):\n    return sum(xs) / len(xs)\n\n\ndef total(xs):\n    return sum(xs)\n"),
            ("calc/.hidden.py", "def mean(): pass\n"),
            ("docs/index.md", "mean of values\n"),
            ("tests/test_stats.py", "from calc.stats import mean\n\ndef test_mean():\n    assert mean([2, 4]) == 3\n"),
        ];
        for (p, c) in files {
            let f = src.join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, c).unwrap();
        }
        PristineStore::open().unwrap().build(&Source::Dir { path: src }).unwrap()
    })
    .clone()
}

async fn sandbox() -> Sandbox {
    Sandbox::create(&pristine(), None, &SandboxOptions::default())
        .await
        .expect("create sandbox")
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

#[tokio::test]
async fn tools_in_a_real_sandbox() {
    skip_unless_sandbox!();
    let sb = sandbox().await;
    let reg = ToolRegistry::named("dojo").unwrap();
    let mut ctx = ToolContext::new(&sb, Duration::from_secs(60));
    let mut call = async |name: &str, a: Value| reg.call(&mut ctx, name, &args(a)).await.unwrap();

    let out = call("search", json!({"search_term": "mean"})).await;
    insta::assert_snapshot!("search_dir", out.text);
    let out = call(
        "search",
        json!({"search_term": "sum(", "path": "calc/stats.py"}),
    )
    .await;
    insta::assert_snapshot!("search_file", out.text);
    let out = call("search", json!({"search_term": "zzz_nothing"})).await;
    assert!(
        out.text
            .contains("No matches found for \"zzz_nothing\" in /testbed"),
        "{}",
        out.text
    );
    let out = call(
        "search",
        json!({"search_term": "x", "path": "/testbed/missing"}),
    )
    .await;
    assert!(
        out.error && out.text.contains("does not exist"),
        "{}",
        out.text
    );

    let out = call(
        "str_replace_editor",
        json!({"command": "view", "path": "/testbed"}),
    )
    .await;
    insta::assert_snapshot!("view_dir", out.text);

    let r2e = ToolRegistry::named("r2e").unwrap();
    let mut r2e_ctx = ToolContext::new(&sb, Duration::from_secs(60));
    let view = json!({"command": "view", "path": "/testbed"});
    let out = r2e
        .call(&mut r2e_ctx, "file_editor", &args(view))
        .await
        .unwrap();
    assert!(
        out.text.contains("/testbed/calc/stats.py\n") && !out.text.contains("index.md"),
        "{}",
        out.text
    );

    let out = call("execute_bash", json!({"command": "pwd; ls"})).await;
    assert!(
        out.text
            .contains("[STDOUT]\n\n/testbed\ncalc\ndocs\ntests\n"),
        "{}",
        out.text
    );
    let out = call("execute_bash", json!({"command": "git log -1"})).await;
    assert!(out.blocked, "{}", out.text);

    let out = call(
        "str_replace_editor",
        json!({"command": "create", "path": "/testbed/reproduce.py", "file_text": "print('hi')\n"}),
    )
    .await;
    assert!(!out.error, "{}", out.text);
    let out = call(
        "str_replace_editor",
        json!({"command": "undo_edit", "path": "/testbed/reproduce.py"}),
    )
    .await;
    assert!(out.text.contains("removed"), "{}", out.text);
    let out = call(
        "execute_bash",
        json!({"command": "test -e reproduce.py; echo $?"}),
    )
    .await;
    assert!(out.text.contains("\n1\n"), "{}", out.text);

    let out = call(
        "str_replace_editor",
        json!({"command": "str_replace", "path": "/testbed/calc/stats.py", "old_str": "return sum(xs)\n", "new_str": "return int(sum(xs))\n"}),
    )
    .await;
    assert!(!out.error, "{}", out.text);
    let diff = dojo_agent::Workspace::diff(&sb).await.unwrap();
    assert!(diff.contains("+    return int(sum(xs))"), "{diff}");

    let mut short = ToolContext::new(&sb, Duration::from_millis(500));
    let out = reg
        .call(
            &mut short,
            "execute_bash",
            &args(json!({"command": "sleep 60"})),
        )
        .await
        .unwrap();
    assert!(
        out.timed_out && out.text.contains("took too long"),
        "{}",
        out.text
    );
    sb.teardown().await.unwrap();
}

/// Scripted OpenAI-compatible server: pops one assistant message per request and records the
/// requests it got.
#[derive(Default)]
struct Script {
    replies: VecDeque<Value>,
    seen: Vec<Value>,
}

async fn chat(State(s): State<Arc<Mutex<Script>>>, body: String) -> axum::Json<Value> {
    let mut s = s.lock().unwrap();
    s.seen
        .push(serde_json::from_str(&body).unwrap_or(Value::Null));
    let message = s
        .replies
        .pop_front()
        .unwrap_or(json!({"role": "assistant", "content": "out of script"}));
    axum::Json(json!({
        "id": format!("chatcmpl-{}", s.seen.len()), "object": "chat.completion", "created": 1, "model": "scripted",
        "prompt_token_ids": [1, 2, 3],
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls", "token_ids": [7, 8],
                     "logprobs": {"content": [{"token": "x", "logprob": -0.25, "top_logprobs": []}]}}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 20, "total_tokens": 1020}
    }))
}

fn tool_call(id: &str, name: &str, arguments: Value) -> Value {
    json!({"role": "assistant", "content": format!("Calling {name}."),
           "tool_calls": [{"id": id, "type": "function", "function": {"name": name, "arguments": arguments.to_string()}}]})
}

#[tokio::test]
async fn a_rollout_over_http_in_a_real_sandbox() {
    skip_unless_sandbox!();
    let replies = vec![
        tool_call(
            "c1",
            "search",
            json!({"search_term": "def mean", "path": "/testbed/calc"}),
        ),
        tool_call(
            "c2",
            "str_replace_editor",
            json!({"command": "view", "path": "/testbed/calc/stats.py", "view_range": [1, 2]}),
        ),
        tool_call(
            "c3",
            "str_replace_editor",
            json!({"command": "str_replace", "path": "/testbed/calc/stats.py",
                   "old_str": "    return sum(xs) / len(xs)", "new_str": "    if not xs:\n        return 0.0\n    return sum(xs) / len(xs)"}),
        ),
        tool_call(
            "c4",
            "execute_bash",
            json!({"command": "grep -n 'if not xs' calc/stats.py"}),
        ),
        tool_call("c5", "submit", json!({})),
    ];
    let script = Arc::new(Mutex::new(Script {
        replies: replies.into(),
        seen: vec![],
    }));
    let app = Router::new()
        .route("/v1/chat/completions", post(chat))
        .with_state(script.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let client = OpenAiClient::new(ClientConfig::new(vec![EndpointConfig {
        model: Some("scripted".into()),
        ..EndpointConfig::new(format!("http://{addr}/v1"))
    }]))
    .unwrap();
    let mut cfg = AgentConfig {
        tool_set: "dojo".into(),
        action_format: ActionFormat::Native,
        ..Default::default()
    };
    cfg.sampling.temperature = Some(1.0);
    cfg.sampling.logprobs = Some(true);
    cfg.sampling
        .extra
        .insert("return_token_ids".into(), json!(true));
    let agent = Agent::new(cfg, ToolRegistry::named("dojo").unwrap(), Arc::new(client)).unwrap();

    let sb = sandbox().await;
    let mut vars = Map::new();
    vars.insert(
        "problem_statement".into(),
        json!("`calc.stats.mean([])` raises ZeroDivisionError."),
    );
    let task = TaskInput {
        task_id: "calc__calc-1".into(),
        sample_index: 0,
        vars,
        ..Default::default()
    };
    let t = agent.run(&sb, &task).await;
    sb.teardown().await.unwrap();

    assert_eq!(
        t.stop_reason,
        StopReason::Submitted,
        "{:?} {:?}",
        t.stop_detail,
        t.events
    );
    assert!(!t.infra_failure && !t.forced_submission);
    let patch = t.patch.as_deref().unwrap();
    assert!(
        patch.contains("+    if not xs:") && patch.contains("calc/stats.py"),
        "{patch}"
    );
    assert_eq!(t.steps.len(), 5);
    for s in &t.steps {
        assert_eq!(s.completion_token_ids.as_deref(), Some(&[7, 8][..]));
        assert_eq!(s.prompt_token_ids.as_deref(), Some(&[1, 2, 3][..]));
        assert_eq!(
            s.logprobs.as_ref().unwrap().content.as_ref().unwrap()[0].logprob,
            -0.25
        );
    }
    assert_eq!(t.steps[3].tool.as_ref().unwrap().exit_code, Some(0));
    assert!(
        t.messages[3].text().contains("./stats.py (1 matches)"),
        "{}",
        t.messages[3].text()
    );
    assert_eq!(t.usage.total_tokens, 5 * 1020);

    let seen = &script.lock().unwrap().seen;
    assert_eq!(seen.len(), 5);
    assert_eq!(seen[0]["model"], "scripted");
    assert_eq!(seen[0]["return_token_ids"], true);
    assert_eq!(seen[0]["tools"].as_array().unwrap().len(), 4);
    // The last request carries the whole conversation, tool answers keyed by call id.
    let last = seen[4]["messages"].as_array().unwrap();
    assert_eq!(last.len(), 2 + 2 * 4);
    assert_eq!(last[3]["role"], "tool");
    assert_eq!(last[3]["tool_call_id"], "c1");
}
