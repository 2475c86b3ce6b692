//! The agent loop against a scripted policy (an in-process `ChatBackend`) and a host directory
//! workspace: every stop reason, forced submission, format errors, native tool calls and context
//! compression. The real sandbox and the HTTP client are exercised in `sandbox_e2e.rs`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dojo_agent::action::{Call, render};
use dojo_agent::{
    ActionFormat, Agent, AgentConfig, CONTINUE_MSG, ContextConfig, LocalWorkspace, TaskInput,
    ToolRegistry, Workspace,
};
use dojo_llm::{
    BoxFuture, ChatBackend, ChatMessage, ChatRequest, ChatResponse, Choice, LlmError, Role,
    ToolCall, Usage,
};
use dojo_sandbox::{ExecOutput, ExecRequest, SandboxError};
use dojo_trajectory::{Blame, StopReason, Trajectory};
use serde_json::{Map, Value, json};

enum Turn {
    Say(ChatMessage),
    Fail(LlmError),
    Hang,
}

#[derive(Default)]
struct Scripted {
    turns: Mutex<VecDeque<Turn>>,
    seen: Mutex<Vec<ChatRequest>>,
    usage: Usage,
}

impl Scripted {
    fn new(turns: Vec<Turn>) -> Arc<Self> {
        Arc::new(Scripted {
            turns: Mutex::new(turns.into()),
            seen: Mutex::default(),
            usage: usage(100),
        })
    }
}

fn usage(prompt: u64) -> Usage {
    Usage {
        prompt_tokens: prompt,
        completion_tokens: 10,
        total_tokens: prompt + 10,
    }
}

fn respond(msg: ChatMessage, u: Usage) -> ChatResponse {
    ChatResponse {
        id: "r".into(),
        choices: vec![Choice {
            index: 0,
            message: msg,
            finish_reason: Some("stop".into()),
            logprobs: None,
            token_ids: Some(vec![1, 2, 3]),
            extra: Map::new(),
        }],
        usage: Some(u),
        ..Default::default()
    }
}

impl ChatBackend for Scripted {
    fn complete(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatResponse, LlmError>> {
        Box::pin(async move {
            let summary =
                req.messages.len() == 1 && req.messages[0].text().contains("four sections");
            self.seen.lock().unwrap().push(req);
            if summary {
                return Ok(respond(
                    ChatMessage::assistant("## Investigation Progress\nran true"),
                    usage(50),
                ));
            }
            let next = self.turns.lock().unwrap().pop_front();
            match next {
                Some(Turn::Say(m)) => Ok(respond(m, self.usage)),
                Some(Turn::Fail(e)) => Err(e),
                Some(Turn::Hang) => {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Err(LlmError::Config("unreachable".into()))
                }
                None => Err(LlmError::Config("script exhausted".into())),
            }
        })
    }
}

fn xml(name: &str, args: Value) -> Turn {
    let call = Call {
        name: name.into(),
        arguments: args.as_object().cloned().unwrap(),
        id: None,
    };
    Turn::Say(render(ActionFormat::Xml, "Thinking.", &call))
}

fn repo() -> (tempfile::TempDir, LocalWorkspace) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("calc.py"),
        "def mean(xs):\n    return sum(xs) / len(xs)\n",
    )
    .unwrap();
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .args(args)
            .current_dir(dir.path())
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(ok.status.success(), "{ok:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "base"]);
    let ws = LocalWorkspace::new(dir.path());
    (dir, ws)
}

fn task() -> TaskInput {
    let mut vars = Map::new();
    vars.insert(
        "problem_statement".into(),
        json!("mean([]) raises ZeroDivisionError; it should return 0."),
    );
    TaskInput {
        task_id: "demo__calc-1".into(),
        sample_index: 3,
        vars,
        ..Default::default()
    }
}

fn agent(cfg: AgentConfig, backend: Arc<Scripted>) -> Agent {
    let tools = ToolRegistry::named(&cfg.tool_set).unwrap();
    Agent::new(cfg, tools, backend).unwrap()
}

fn cfg() -> AgentConfig {
    AgentConfig {
        tool_set: "dojo".into(),
        ..Default::default()
    }
}

fn fix_turns() -> Vec<Turn> {
    vec![
        xml("search", json!({"search_term": "def mean"})),
        xml(
            "str_replace_editor",
            json!({"command": "view", "path": "/testbed/calc.py"}),
        ),
        xml(
            "str_replace_editor",
            json!({"command": "str_replace", "path": "/testbed/calc.py", "old_str": "    return sum(xs) / len(xs)", "new_str": "    if not xs:\n        return 0\n    return sum(xs) / len(xs)"}),
        ),
        xml(
            "execute_bash",
            json!({"command": "python3 -c 'import calc; print(calc.mean([]))'"}),
        ),
        xml("submit", json!({})),
    ]
}

#[tokio::test]
async fn a_fix_is_submitted_and_recorded() {
    let (_d, ws) = repo();
    let backend = Scripted::new(fix_turns());
    let t = agent(cfg(), backend.clone()).run(&ws, &task()).await;
    assert_eq!(t.stop_reason, StopReason::Submitted, "{:?}", t.stop_detail);
    assert!(!t.forced_submission && !t.infra_failure);
    assert_eq!(t.steps.len(), 5);
    assert_eq!((t.task_id.as_str(), t.sample_index), ("demo__calc-1", 3));
    let patch = t.patch.as_deref().unwrap();
    assert!(patch.contains("+    if not xs:"), "{patch}");
    // system, user, then (assistant, observation) per step.
    assert_eq!(t.messages.len(), 2 + 2 * 5);
    assert_eq!(t.messages[0].role, Role::System);
    assert!(
        t.messages[1]
            .text()
            .contains("mean([]) raises ZeroDivisionError")
    );
    let obs = t.messages[9].text();
    assert!(
        obs.starts_with("Exit code: 0\nExecution output of [execute_bash]:\n[STDOUT]\n\n0\n"),
        "{obs}"
    );
    assert!(
        obs.ends_with("This is step 4 of a maximum of 150. Steps Remaining: 146."),
        "{obs}"
    );
    assert_eq!(t.messages[11].text(), "<<< Finished >>>");
    assert_eq!(t.steps[3].tool.as_ref().unwrap().exit_code, Some(0));
    assert_eq!(
        t.steps[0].completion_token_ids.as_deref(),
        Some(&[1, 2, 3][..])
    );
    assert_eq!(t.usage.total_tokens, 5 * 110);
    assert!(t.events.is_empty(), "{:?}", t.events);
    // Text formats put the tools in the system prompt and send no `tools`.
    let seen = backend.seen.lock().unwrap();
    assert!(seen[0].tools.is_none());
    assert!(
        seen[0].messages[0]
            .text()
            .contains("---- BEGIN FUNCTION #1: search ----")
    );
    assert_eq!(seen[4].messages.len(), 2 + 2 * 4);
    // The record survives JSONL.
    let back = Trajectory::from_json(&t.to_json_line()).unwrap();
    assert_eq!(back, t);
    assert_eq!(back.prompt_of(5).unwrap().len(), 10);
}

#[tokio::test]
async fn step_budget_forces_submission() {
    let (_d, ws) = repo();
    let mut turns = fix_turns();
    turns.truncate(3);
    let t = agent(
        AgentConfig {
            max_steps: 3,
            ..cfg()
        },
        Scripted::new(turns),
    )
    .run(&ws, &task())
    .await;
    assert_eq!(t.stop_reason, StopReason::MaxSteps);
    assert!(t.forced_submission && !t.infra_failure);
    assert!(t.patch.unwrap().contains("if not xs"));
    assert!(
        t.messages
            .last()
            .unwrap()
            .text()
            .ends_with("Steps Remaining: 0.")
    );
}

#[tokio::test]
async fn format_errors_get_the_reminder_and_stop_the_run() {
    let (_d, ws) = repo();
    let turns = vec![
        Turn::Say(ChatMessage::assistant("I think the bug is in calc.py.")),
        xml("execute_bash", json!({"command": "true"})),
        Turn::Say(ChatMessage::assistant(
            "<tool_call>{\"name\": \"submit\"}</tool_call>",
        )),
        Turn::Say(ChatMessage::assistant("")),
        xml("submit", json!({})),
    ];
    let t = agent(
        AgentConfig {
            max_format_errors: 2,
            ..cfg()
        },
        Scripted::new(turns),
    )
    .run(&ws, &task())
    .await;
    assert_eq!(t.stop_reason, StopReason::FormatErrors);
    assert_eq!((t.format_errors, t.steps.len()), (3, 4));
    assert!(!t.forced_submission && !t.infra_failure);
    let kinds: Vec<&str> = t.events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["no_call", "wrong_format", "no_call"]);
    assert!(t.messages[3].text().starts_with(CONTINUE_MSG));
    assert!(
        t.messages[7]
            .text()
            .starts_with("ERROR: function call written in a different format")
    );
    assert!(t.messages[7].text().contains(CONTINUE_MSG));
    assert!(t.steps[0].format_error.is_some() && t.steps[1].format_error.is_none());
}

#[tokio::test]
async fn infrastructure_failures_are_marked() {
    let (_d, ws) = repo();
    let err = LlmError::Server {
        endpoint: "http://x/v1".into(),
        status: 503,
        body: "down".into(),
    };
    let turns = vec![
        xml("execute_bash", json!({"command": "echo hi > new.txt"})),
        Turn::Fail(err),
    ];
    let t = agent(cfg(), Scripted::new(turns)).run(&ws, &task()).await;
    assert_eq!(t.stop_reason, StopReason::LlmError);
    assert!(t.infra_failure && !t.forced_submission);
    assert!(t.stop_detail.as_deref().unwrap().contains("503"));
    assert_eq!(t.events[0].kind, "server_error");
    assert!(
        t.patch.unwrap().contains("new.txt"),
        "the diff is still extracted"
    );

    // A context overflow is the agent's budget, not the infrastructure.
    let err = LlmError::ContextLength {
        endpoint: "e".into(),
        body: "maximum context length".into(),
    };
    let t = agent(cfg(), Scripted::new(vec![Turn::Fail(err)]))
        .run(&ws, &task())
        .await;
    assert_eq!(t.stop_reason, StopReason::MaxTokens);
    assert!(t.forced_submission && !t.infra_failure);
}

#[tokio::test]
async fn token_and_wall_budgets() {
    let (_d, ws) = repo();
    let backend = Arc::new(Scripted {
        usage: usage(5000),
        ..Default::default()
    });
    backend.turns.lock().unwrap().extend(fix_turns());
    let t = agent(
        AgentConfig {
            max_context_tokens: Some(4096),
            ..cfg()
        },
        backend,
    )
    .run(&ws, &task())
    .await;
    assert_eq!(t.stop_reason, StopReason::MaxTokens);
    assert_eq!(t.steps.len(), 1);
    assert!(t.forced_submission);

    let backend = Scripted::new(fix_turns());
    let t = agent(
        AgentConfig {
            max_total_tokens: Some(300),
            ..cfg()
        },
        backend,
    )
    .run(&ws, &task())
    .await;
    assert_eq!((t.stop_reason, t.steps.len()), (StopReason::MaxTokens, 3));

    let turns = vec![xml("execute_bash", json!({"command": "true"})), Turn::Hang];
    let t = agent(
        AgentConfig {
            max_wall_secs: 1.0,
            ..cfg()
        },
        Scripted::new(turns),
    )
    .run(&ws, &task())
    .await;
    assert_eq!(t.stop_reason, StopReason::Timeout);
    assert!(t.forced_submission && !t.infra_failure);
}

/// A workspace whose sandbox dies after `ok` commands.
struct Dying {
    inner: LocalWorkspace,
    ok: Mutex<u32>,
}

impl Workspace for Dying {
    fn exec<'a>(&'a self, req: &'a ExecRequest) -> BoxFuture<'a, Result<ExecOutput, SandboxError>> {
        let mut ok = self.ok.lock().unwrap();
        if *ok == 0 {
            return Box::pin(async { Err(SandboxError::Gone("sbx-1".into())) });
        }
        *ok -= 1;
        self.inner.exec(req)
    }
    fn read_file<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<u8>, SandboxError>> {
        self.inner.read_file(path)
    }
    fn write_file<'a>(
        &'a self,
        path: &'a str,
        data: &'a [u8],
    ) -> BoxFuture<'a, Result<(), SandboxError>> {
        self.inner.write_file(path, data)
    }
    fn diff(&self) -> BoxFuture<'_, Result<String, SandboxError>> {
        Box::pin(async { Err(SandboxError::Gone("sbx-1".into())) })
    }
}

#[tokio::test]
async fn sandbox_failures_are_env_errors() {
    let (_d, ws) = repo();
    let ws = Dying {
        inner: ws,
        ok: Mutex::new(1),
    };
    let turns = vec![
        xml("execute_bash", json!({"command": "true"})),
        xml("execute_bash", json!({"command": "true"})),
    ];
    let t = agent(cfg(), Scripted::new(turns)).run(&ws, &task()).await;
    assert_eq!(t.stop_reason, StopReason::EnvError);
    assert!(t.infra_failure && t.patch.is_none());
    assert!(t.stop_detail.unwrap().contains("sbx-1"));
    assert_eq!(t.steps.len(), 2);
}

/// A workspace whose agent wrote more than the sandbox hands back as a patch.
struct Bloated(LocalWorkspace);

impl Workspace for Bloated {
    fn exec<'a>(&'a self, req: &'a ExecRequest) -> BoxFuture<'a, Result<ExecOutput, SandboxError>> {
        self.0.exec(req)
    }
    fn read_file<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<u8>, SandboxError>> {
        self.0.read_file(path)
    }
    fn write_file<'a>(
        &'a self,
        path: &'a str,
        data: &'a [u8],
    ) -> BoxFuture<'a, Result<(), SandboxError>> {
        self.0.write_file(path, data)
    }
    fn diff(&self) -> BoxFuture<'_, Result<String, SandboxError>> {
        Box::pin(async {
            Err(SandboxError::TooLarge {
                what: "patch",
                limit: 10 << 20,
            })
        })
    }
}

#[tokio::test]
async fn a_patch_over_the_cap_is_the_agents_outcome() {
    let (_d, ws) = repo();
    let t = agent(cfg(), Scripted::new(fix_turns()))
        .run(&Bloated(ws), &task())
        .await;
    assert_eq!(t.stop_reason, StopReason::Submitted);
    assert!(!t.infra_failure && t.patch.is_none());
    assert!(
        t.stop_detail
            .as_deref()
            .unwrap()
            .contains("patch too large")
    );
    let e = t
        .events
        .iter()
        .find(|e| e.kind == "patch_too_large")
        .unwrap();
    assert_eq!(e.blame, Blame::Agent);
}

#[tokio::test]
async fn native_tool_calls_answer_every_call_id() {
    let (_d, ws) = repo();
    let mut two = ChatMessage {
        content: None,
        ..ChatMessage::assistant("")
    };
    two.tool_calls = Some(vec![
        ToolCall::function("call_a", "execute_bash", "{\"command\": \"echo one\"}"),
        ToolCall::function("call_b", "execute_bash", "{\"command\": \"echo two\"}"),
    ]);
    let mut broken = ChatMessage {
        content: None,
        ..ChatMessage::assistant("")
    };
    broken.tool_calls = Some(vec![ToolCall::function(
        "call_c",
        "execute_bash",
        "{\"command\": \"echo",
    )]);
    let mut unknown = ChatMessage {
        content: None,
        ..ChatMessage::assistant("")
    };
    unknown.tool_calls = Some(vec![ToolCall::function("call_d", "rm_rf", "{}")]);
    let mut submit = ChatMessage::assistant("Done.");
    submit.tool_calls = Some(vec![ToolCall::function("call_e", "submit", "")]);
    let turns = vec![
        Turn::Say(two),
        Turn::Say(broken),
        Turn::Say(unknown),
        Turn::Say(submit),
    ];
    let backend = Scripted::new(turns);
    let c = AgentConfig {
        action_format: ActionFormat::Native,
        ..cfg()
    };
    let t = agent(c, backend.clone()).run(&ws, &task()).await;
    assert_eq!(t.stop_reason, StopReason::Submitted, "{:?}", t.stop_detail);
    let tool_msgs: Vec<(&str, String)> = t
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| (m.tool_call_id.as_deref().unwrap(), m.text()))
        .collect();
    let ids: Vec<&str> = tool_msgs.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, ["call_a", "call_b", "call_c", "call_d", "call_e"]);
    assert!(tool_msgs[0].1.contains("one") && !tool_msgs[0].1.contains("two"));
    assert!(tool_msgs[1].1.contains("Only one function call"));
    assert!(tool_msgs[2].1.contains("not a JSON object"));
    assert!(tool_msgs[3].1.contains("Unknown function 'rm_rf'"));
    assert_eq!(t.format_errors, 1);
    assert!(t.events.iter().any(|e| e.kind == "unknown_tool"));
    let seen = backend.seen.lock().unwrap();
    assert_eq!(seen[0].tools.as_ref().unwrap().len(), 4);
}

#[tokio::test]
async fn context_manager_compresses_old_turns() {
    let (_d, ws) = repo();
    let turns: Vec<Turn> = (0..7)
        .map(|i| xml("execute_bash", json!({"command": format!("echo turn{i}")})))
        .chain([xml("submit", json!({}))])
        .collect();
    let backend = Scripted::new(turns);
    let context = ContextConfig {
        trigger_step: 3,
        window: 2,
        keep_recent: 1,
        ..Default::default()
    };
    let t = agent(
        AgentConfig {
            context: Some(context),
            ..cfg()
        },
        backend.clone(),
    )
    .run(&ws, &task())
    .await;
    assert_eq!(t.stop_reason, StopReason::Submitted, "{:?}", t.stop_detail);
    let windows: Vec<(u32, (u32, u32))> = t
        .compressions
        .iter()
        .map(|c| (c.at_step, c.turns))
        .collect();
    assert_eq!(windows, [(4, (1, 2)), (6, (3, 4)), (8, (5, 6))]);
    let c0 = &t.compressions[0];
    assert!(
        c0.summary
            .text()
            .starts_with("[COMPRESSED HISTORY - Turns 1-2]\n<Memory>\n## Investigation Progress")
    );
    assert_eq!(c0.messages, (2, 6));
    // Step 4 saw: system, user, summary 1, turn 3.
    let p4 = t.prompt_of(4).unwrap();
    assert_eq!(p4.len(), 5);
    assert!(p4[2].text().starts_with("[COMPRESSED HISTORY - Turns 1-2]"));
    assert!(p4[3].text().contains("turn2"));
    // Exactly what was sent matches the reconstruction.
    let seen = backend.seen.lock().unwrap();
    let sent_step4 = seen.iter().filter(|r| r.messages.len() > 1).nth(3).unwrap();
    let rebuilt: Vec<ChatMessage> = p4.into_iter().cloned().collect();
    assert_eq!(sent_step4.messages, rebuilt);
    // Nothing is lost from the full record.
    assert_eq!(t.messages.len(), 2 + 2 * 8);
    assert_eq!(t.llm_calls, 8 + 3);
    assert_eq!(t.usage.total_tokens, 8 * 110 + 3 * 60);
}

#[tokio::test]
async fn a_server_answering_html_ends_the_rollout_as_an_infrastructure_failure() {
    use axum::routing::post;
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(|| async {
            (
                [("content-type", "text/html")],
                "<html><body>502 Bad Gateway</body></html>",
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let mut cc = dojo_llm::ClientConfig::new(vec![dojo_llm::EndpointConfig::new(format!(
        "http://{addr}/v1"
    ))]);
    cc.max_retries = 2;
    cc.backoff_base = Duration::from_millis(1);
    let client = Arc::new(dojo_llm::OpenAiClient::new(cc).unwrap());
    let (_d, ws) = repo();
    let agent = Agent::new(cfg(), ToolRegistry::named("dojo").unwrap(), client.clone()).unwrap();
    let t = agent.run(&ws, &task()).await;
    assert_eq!(t.stop_reason, StopReason::LlmError);
    assert!(t.infra_failure && t.steps.is_empty());
    assert_eq!(t.events[0].kind, "bad_body");
    assert!(t.stop_detail.unwrap().contains("HTML"));
    assert_eq!(client.retries(), 2);
    assert_eq!(t.patch.as_deref(), Some(""));
}

#[tokio::test]
async fn every_action_format_drives_the_same_fix() {
    let calls = [
        ("search", json!({"search_term": "def mean"})),
        (
            "str_replace_editor",
            json!({"command": "str_replace", "path": "/testbed/calc.py", "old_str": "    return sum(xs) / len(xs)",
                   "new_str": "    if not xs:\n        return 0\n    return sum(xs) / len(xs)"}),
        ),
        (
            "str_replace_editor",
            json!({"command": "view", "path": "/testbed/calc.py", "view_range": [1, 3]}),
        ),
        ("submit", json!({})),
    ];
    for format in [
        ActionFormat::Native,
        ActionFormat::Xml,
        ActionFormat::Hermes,
        ActionFormat::Qwen3Coder,
    ] {
        let (_d, ws) = repo();
        let turns = calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| {
                let call = Call {
                    name: name.to_string(),
                    arguments: args.as_object().cloned().unwrap(),
                    id: Some(format!("call_{i}")),
                };
                Turn::Say(render(format, "Next step.", &call))
            })
            .collect();
        let backend = Scripted::new(turns);
        let t = agent(
            AgentConfig {
                action_format: format,
                ..cfg()
            },
            backend.clone(),
        )
        .run(&ws, &task())
        .await;
        assert_eq!(
            t.stop_reason,
            StopReason::Submitted,
            "{format:?}: {:?}",
            t.events
        );
        assert_eq!(t.format_errors, 0, "{format:?}");
        assert!(
            t.patch.as_deref().unwrap().contains("+    if not xs:"),
            "{format:?}"
        );
        let view = t.messages[7].text();
        assert!(
            view.contains("     2\t    if not xs:"),
            "{format:?}: {view}"
        );
        assert_eq!(t.agent.action_format, format.as_str());
        let system = backend.seen.lock().unwrap()[0].messages[0].text();
        assert_eq!(
            system.contains("BEGIN FUNCTION"),
            format.is_text(),
            "{format:?}"
        );
    }
}
