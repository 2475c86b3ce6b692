//! The step-wise API, for trainers whose Python-side loop keeps its own agent (verl tools and
//! interactions, SkyRL `BaseTextEnv`, rllm `BaseEnv`):
//!
//! - `POST /v1/envs` prepares the task, starts its sandbox and answers with the env id, the
//!   first messages (system prompt and problem statement, as dojo's agent renders them) and
//!   the tool specs;
//! - `POST /v1/envs/{id}/step` takes one turn (an assistant message in the env's action format,
//!   or a `call` that the server renders in it) and answers with the observation exactly as
//!   dojo's agent shows it, and `done` once the agent submitted or a budget ran out;
//! - `POST /v1/envs/{id}/evaluate` grades the workspace through the grading path of `dojo
//!   rollout` and answers with the episode record (reward shaped by [`dojo_reward::shaping`], raw
//!   reward, stop reason, masked flag, patch); an env still running submits first (the tool
//!   set's submit call, recorded as its last step);
//! - `DELETE /v1/envs/{id}` cancels it and removes its sandbox.
//!
//! No second agent: each env runs dojo's own agent loop inside `dojo rollout`'s runner
//! ([`AgentRunner`]: preparation, sandbox, tool dispatch, budgets, diff, grading, teardown), with
//! a policy backend whose turns are the client's steps ([`StepBackend`], in [`crate::step_env`]
//! with the rest of a live env). So tool semantics,
//! observation text, step counters, format errors, budget stops and grading are those of a
//! rollout by construction, and the evaluated env is stored in `episodes.jsonl` like an
//! episode.
//!
//! An env holds a slot of the same limit as episodes from creation until it is evaluated or
//! gone. Its lease is an idle timeout: an env no client touched for `lease_s` (and with no step
//! running) is cancelled and its sandbox removed.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use dojo_agent::action::{Call, render};
use dojo_llm::{ChatMessage, Role};
use dojo_reward::shaping::RewardConfig;
use dojo_rollout::agent_runner::{AgentRunner, DojoAgent};
use dojo_rollout::gold::{Action, ToolNames};
use dojo_rollout::scheduler::{Job, Runner};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};

use crate::api::{BadRequest, check_lease_and_shaping, record, task_of_row};
use crate::state::{AppState, Shared, error};
use crate::step_env::{Env, EnvIo, Seen, StepAgent, StepBackend, StepBackends, uuidish};

/// `POST /v1/envs`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvRequest {
    /// Chosen by the server when absent; a live env's id is refused (409).
    #[serde(default)]
    pub env_id: Option<String>,
    #[serde(default)]
    pub group_id: Option<String>,
    /// The task row, inline (as `extra_info.task` of `dojo tasks export --format verl`) …
    #[serde(default)]
    pub task: Option<Map<String, Value>>,
    /// … or the id of a task of the server's `--tasks` file.
    #[serde(default)]
    pub task_id: Option<String>,
    /// Agent settings (`tool_set`, `action_format`, `max_steps`, …), as a policy's `[agent]`.
    #[serde(default)]
    pub agent: Map<String, Value>,
    /// Budgets over the agent settings (`max_steps`, `max_wall_secs`, …).
    #[serde(default)]
    pub budgets: Map<String, Value>,
    #[serde(default)]
    pub shaping: RewardConfig,
    /// Idle seconds after which the env is torn down (at most the server's `--lease-s`).
    #[serde(default)]
    pub lease_s: Option<f64>,
}

/// `POST /v1/envs/{id}/step`: exactly one of `message` and `call`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepRequest {
    /// The assistant turn as the policy wrote it, in the env's action format.
    #[serde(default)]
    pub message: Option<ChatMessage>,
    /// A tool call, rendered by the server in the env's action format.
    #[serde(default)]
    pub call: Option<StepCall>,
    /// Text before a `call`.
    #[serde(default)]
    pub thought: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepCall {
    pub name: String,
    #[serde(default)]
    pub arguments: Map<String, Value>,
}

fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, BadRequest> {
    let body: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        body
    };
    serde_json::from_slice(body).map_err(|e| BadRequest::refused("body", e))
}

impl EnvRequest {
    fn check(&self) -> Result<(), BadRequest> {
        if let Some(id) = &self.env_id
            && (id.trim().is_empty() || id.len() > 256 || id.contains('/'))
        {
            return Err(BadRequest::new(
                "env_id",
                "must be a non-empty string of at most 256 characters without '/'",
            ));
        }
        if self.task.is_some() == self.task_id.is_some() {
            return Err(BadRequest::new(
                "task",
                "give exactly one of `task` (the row) and `task_id` (a task of --tasks)",
            ));
        }
        check_lease_and_shaping(self.lease_s, &self.shaping)
    }

    fn task(&self, s: &Shared) -> Result<dojo_task::Task, BadRequest> {
        match (&self.task, &self.task_id) {
            (Some(row), _) => task_of_row(row),
            (None, Some(id)) => s.tasks.get(id).cloned().ok_or_else(|| {
                BadRequest::new(
                    "task_id",
                    match &s.opts.tasks_file {
                        Some(f) => format!("no task {id:?} in {}", f.display()),
                        None => format!(
                            "no task {id:?}: the server has no --tasks file; send the row as `task`"
                        ),
                    },
                )
            }),
            (None, None) => Err(BadRequest::new("task", "missing")),
        }
    }

    fn agent(&self) -> Result<DojoAgent, BadRequest> {
        let mut map = self.agent.clone();
        for (k, v) in &self.budgets {
            map.insert(k.clone(), v.clone());
        }
        DojoAgent::from_settings(map).map_err(|e| BadRequest::refused("agent", e))
    }
}

/// The messages after the last assistant turn: the observation(s) of the step just taken, or
/// the system and instance messages at the start.
fn after_last_turn(messages: &[ChatMessage]) -> Vec<ChatMessage> {
    let from = messages
        .iter()
        .rposition(|m| m.role == Role::Assistant)
        .map_or(0, |i| i + 1);
    messages[from..].to_vec()
}

fn observation_json(messages: &[ChatMessage]) -> Value {
    let text: Vec<String> = messages.iter().map(ChatMessage::text).collect();
    json!({"observation": text.join("\n"), "messages": messages})
}

fn not_found(id: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        Some("env_id"),
        format!("no env {id} (never created, deleted, or torn down when its lease expired)"),
    )
}

fn lookup(s: &Shared, id: &str) -> Option<Arc<Env>> {
    s.envs.lock().ok().and_then(|e| e.get(id).cloned())
}

pub(crate) async fn create(State(s): State<AppState>, body: Bytes) -> Response {
    let req: EnvRequest = match parse(&body).and_then(|r: EnvRequest| r.check().map(|_| r)) {
        Ok(r) => r,
        Err(e) => return s.bad(e),
    };
    let (task, agent) = match (req.task(&s).and_then(|t| s.admit_task(t)), req.agent()) {
        (Ok(t), Ok(a)) => (t, a),
        (Err(e), _) | (_, Err(e)) => return s.bad(e),
    };
    let id = req.env_id.clone().unwrap_or_else(|| s.new_env_id());
    if s.stored(&id).is_some() || lookup(&s, &id).is_some() {
        return error(
            StatusCode::CONFLICT,
            Some("env_id"),
            format!("env {id} exists already (live, or evaluated and stored); pick another id"),
        );
    }
    s.sweep_envs();
    let permit = match s.admit().await {
        Ok(p) => p,
        Err(r) => return r,
    };
    let lease = req.lease_s.map_or(s.opts.lease, |l| {
        Duration::from_secs_f64(l).min(s.opts.lease)
    });
    let format = agent.config.action_format;
    let (prompt_tx, prompt_rx) = mpsc::channel(1);
    let (turn_tx, turn_rx) = mpsc::channel(1);
    let backend = Arc::new(StepBackend {
        prompts: prompt_tx,
        turns: tokio::sync::Mutex::new(turn_rx),
    });
    let sandbox = Arc::new(Mutex::new(None));
    let job = Job {
        task_index: 0,
        task_id: task.instance_id.clone(),
        sample_index: 0,
    };
    let tools = dojo_agent::ToolRegistry::named(&agent.config.tool_set)
        .unwrap_or_default()
        .specs();
    let runner = AgentRunner::new(
        vec![task],
        StepAgent {
            inner: agent,
            sandbox: sandbox.clone(),
        },
        StepBackends(Mutex::new(Some(backend))),
        s.registry.clone(),
        s.preparer.clone(),
        1,
    );
    let (done_tx, done_rx) = watch::channel(None);
    let state = s.clone();
    let (rid, shaping, group) = (id.clone(), req.shaping, req.group_id.clone());
    let run = tokio::spawn(async move {
        let t0 = Instant::now();
        let traj = runner.run(job).await;
        // The sandbox is gone: its slot is free before the client hears the end.
        drop(permit);
        let rec = record(&rid, group, &shaping, traj, t0.elapsed().as_secs_f64());
        state.count_finished(&rec);
        if let Err(e) = state.store.append(&rec) {
            tracing::warn!("env {rid}: the evaluated record could not be stored: {e}");
        }
        let _ = done_tx.send(Some(rec));
    });
    let env = Arc::new(Env {
        io: tokio::sync::Mutex::new(EnvIo {
            turns: turn_tx,
            prompts: prompt_rx,
            done: done_rx,
            tools: tools.clone(),
            format,
        }),
        touched: Mutex::new(Instant::now()),
        lease,
        run: run.abort_handle(),
    });
    if let Ok(mut e) = s.envs.lock() {
        e.insert(id.clone(), env.clone());
    }
    if let Ok(mut m) = s.metrics.lock() {
        m.envs_created += 1;
    }
    let mut io = env.io.lock().await;
    let seen = io.next().await;
    drop(io);
    env.touch();
    let out = json!({
        "env_id": id,
        "tools": tools,
        "action_format": format.as_str(),
        "lease_s": lease.as_secs_f64(),
        "sandbox": sandbox.lock().ok().and_then(|p| p.clone()),
    });
    first_answer(&id, out, seen)
}

/// The answer to `POST /envs`: the env's description `out` with its first observation, or
/// with its result when it ended before the first turn.
fn first_answer(id: &str, mut out: Value, seen: Seen) -> Response {
    match seen {
        Seen::Prompt(m) => {
            out["done"] = json!(false);
            merge(&mut out, observation_json(&after_last_turn(&m)));
        }
        // Preparation or the sandbox failed before the first turn: infrastructure, masked.
        Seen::Done(rec) => {
            out["done"] = json!(true);
            out["result"] = json!(rec);
        }
        Seen::Cancelled => return not_found(id),
    }
    axum::Json(out).into_response()
}

fn merge(into: &mut Value, from: Value) {
    if let (Some(a), Value::Object(b)) = (into.as_object_mut(), from) {
        a.extend(b);
    }
}

pub(crate) async fn step(
    State(s): State<AppState>,
    UrlPath(id): UrlPath<String>,
    body: Bytes,
) -> Response {
    let req: StepRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return s.bad(e),
    };
    let Some(env) = lookup(&s, &id) else {
        return not_found(&id);
    };
    env.touch();
    let mut io = env.io.lock().await;
    let turn = match (req.message, req.call) {
        (Some(m), None) if m.role == Role::Assistant => m,
        (Some(_), None) => {
            return s.bad(BadRequest::new(
                "message",
                "must be an assistant message (role \"assistant\")",
            ));
        }
        (None, Some(c)) => render(
            io.format,
            &req.thought,
            &Call {
                name: c.name,
                arguments: c.arguments,
                id: Some(format!("call_{}", uuidish())),
            },
        ),
        _ => {
            return s.bad(BadRequest::new(
                "body",
                "give exactly one of `message` (an assistant turn) and `call` ({name, arguments})",
            ));
        }
    };
    if io.done.borrow().is_some() || env.finished() {
        return error(
            StatusCode::CONFLICT,
            Some("env_id"),
            format!("env {id} has ended; evaluate or delete it"),
        );
    }
    let seen = match io.turns.send(turn).await {
        Ok(()) => io.next().await,
        Err(_) => io.wait_done().await,
    };
    drop(io);
    env.touch();
    match seen {
        Seen::Prompt(m) => {
            let mut out = json!({"env_id": id, "done": false});
            merge(&mut out, observation_json(&after_last_turn(&m)));
            axum::Json(out).into_response()
        }
        Seen::Done(rec) => {
            let mut out = json!({"env_id": id, "done": true, "stop_reason": rec.stop_reason});
            merge(
                &mut out,
                observation_json(&after_last_turn(&rec.trajectory.messages)),
            );
            axum::Json(out).into_response()
        }
        Seen::Cancelled => not_found(&id),
    }
}

pub(crate) async fn evaluate(
    State(s): State<AppState>,
    UrlPath(id): UrlPath<String>,
    body: Bytes,
) -> Response {
    if let Err(e) = parse::<Map<String, Value>>(&body).and_then(|m| match m.keys().next() {
        Some(k) => Err(BadRequest::new("body", format!("unknown field {k:?}"))),
        None => Ok(()),
    }) {
        return s.bad(e);
    }
    let Some(env) = lookup(&s, &id) else {
        // An env evaluated before (and deleted since) still has its stored record.
        return match s.stored(&id) {
            Some(rec) => axum::Json(rec).into_response(),
            None => not_found(&id),
        };
    };
    env.touch();
    let mut io = env.io.lock().await;
    let names = ToolNames::from_specs(&io.tools);
    // Not ended yet: submit on the client's behalf (a step like any other), then grade. The
    // loop ends at the submit unless the tool set has none; a budget ends it in the worst case.
    let mut seen = Seen::Cancelled;
    for i in 0.. {
        if let Some(rec) = io.done.borrow().clone() {
            seen = Seen::Done(Box::new(rec));
            break;
        }
        let Some(submit) = names.message(i, &Action::Submit) else {
            break;
        };
        let turn = render_as(io.format, submit);
        seen = match io.turns.send(turn).await {
            Ok(()) => io.next().await,
            Err(_) => io.wait_done().await,
        };
        if !matches!(seen, Seen::Prompt(_)) {
            break;
        }
    }
    drop(io);
    env.touch();
    match seen {
        Seen::Done(rec) => axum::Json(*rec).into_response(),
        _ => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            None,
            format!("env {id} ended without a record (cancelled while evaluating)"),
        ),
    }
}

/// A native submit message in the env's own action format.
fn render_as(format: dojo_agent::ActionFormat, native: ChatMessage) -> ChatMessage {
    let Some(tc) = native.tool_calls.as_ref().and_then(|c| c.first()) else {
        return native;
    };
    let arguments = serde_json::from_str(&tc.function.arguments).unwrap_or_default();
    render(
        format,
        &native.text(),
        &Call {
            name: tc.function.name.clone(),
            arguments,
            id: Some(tc.id.clone()),
        },
    )
}

pub(crate) async fn delete(State(s): State<AppState>, UrlPath(id): UrlPath<String>) -> Response {
    let env = s.envs.lock().ok().and_then(|mut e| e.remove(&id));
    let Some(env) = env else {
        return not_found(&id);
    };
    let was_running = !env.finished();
    env.cancel();
    if let Ok(mut m) = s.metrics.lock() {
        m.envs_deleted += 1;
    }
    axum::Json(json!({"env_id": id, "deleted": true, "cancelled": was_running})).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_req(body: Value) -> Result<EnvRequest, BadRequest> {
        parse::<EnvRequest>(body.to_string().as_bytes()).and_then(|r| r.check().map(|_| r))
    }

    /// Bad env requests are refused before anything runs, naming the field.
    #[test]
    fn bad_env_requests_name_the_field() {
        assert!(env_req(json!({"task_id": "a__b-1"})).is_ok());
        for (body, field) in [
            (json!({}), "task"),
            (json!({"task_id": "a", "task": {}}), "task"),
            (json!({"task_id": "a", "env_id": ""}), "env_id"),
            (json!({"task_id": "a", "env_id": "x/y"}), "env_id"),
            (json!({"task_id": "a", "lease_s": 0}), "lease_s"),
            (
                json!({"task_id": "a", "shaping": {"budget_alpha": 3.0}}),
                "shaping",
            ),
            (json!({"task_id": "a", "nope": 1}), "body"),
        ] {
            let e = env_req(body.clone()).unwrap_err();
            assert_eq!(e.field, field, "{body}: {e}");
        }
        let r = env_req(json!({"task_id": "a", "agent": {"tool_set": "nope"}})).unwrap();
        assert_eq!(r.agent().err().map(|e| e.field), Some("agent".into()));
        let r = env_req(json!({"task_id": "a", "budgets": {"max_steps": 3}})).unwrap();
        assert_eq!(r.agent().map(|a| a.config.max_steps).ok(), Some(3));
    }

    /// The observation of a step is what follows the last assistant turn.
    #[test]
    fn observation_is_after_the_last_turn() {
        let m = vec![
            ChatMessage::system("s"),
            ChatMessage::user("u"),
            ChatMessage::assistant("a"),
            ChatMessage::user("obs"),
        ];
        assert_eq!(after_last_turn(&m).len(), 1);
        assert_eq!(after_last_turn(&m[..2]).len(), 2);
        assert_eq!(observation_json(&m[3..])["observation"], "obs");
    }
}
