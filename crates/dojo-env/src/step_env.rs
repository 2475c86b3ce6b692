//! A live step-wise env ([`Env`]): the agent loop of one `dojo rollout` runner, whose policy is
//! the client's steps. [`StepBackend`] is that policy: each request of the loop waits for the
//! client's next turn; [`EnvIo`] is the client's end of the same channels. The routes that create,
//! step, evaluate and delete envs are [`crate::envs`]'s; the table of live envs ([`Envs`]) is
//! kept in the server's state.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dojo_llm::{BoxFuture, ChatBackend, ChatMessage, ChatRequest, ChatResponse, LlmError};
use dojo_rollout::agent_runner::{AgentLoop, BackendError, BackendFactory, DojoAgent};
use dojo_rollout::prepared::Prepared;
use dojo_rollout::scheduler::Job;
use dojo_sandbox::Sandbox;
use dojo_trajectory::{HostFingerprint, PolicyInfo, Trajectory};
use serde_json::json;
use tokio::sync::{mpsc, watch};

use crate::api::EpisodeRecord;

/// The policy of a step-wise env: each request's turn is the client's next step. The agent
/// loop's request (the messages so far, ending with the observation) goes to the step waiting
/// for it; a closed env answers as an unreachable policy would (infrastructure).
pub struct StepBackend {
    pub(crate) prompts: mpsc::Sender<Vec<ChatMessage>>,
    pub(crate) turns: tokio::sync::Mutex<mpsc::Receiver<ChatMessage>>,
}

impl ChatBackend for StepBackend {
    fn complete(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatResponse, LlmError>> {
        Box::pin(async move {
            let gone = || LlmError::Connection {
                endpoint: "env client".into(),
                detail: "the env was closed".into(),
                source: None,
            };
            self.prompts.send(req.messages).await.map_err(|_| gone())?;
            let turn = self.turns.lock().await.recv().await.ok_or_else(gone)?;
            let resp = json!({"id": "", "choices": [{"index": 0, "message": turn, "finish_reason": "stop"}]});
            serde_json::from_value(resp).map_err(|e| LlmError::backend_failed("env client", e))
        })
    }
    fn describe(&self) -> String {
        "env client (dojo env serve /v1/envs)".into()
    }
}

/// Hands the env's one [`StepBackend`] to the runner.
pub(crate) struct StepBackends(pub(crate) Mutex<Option<Arc<StepBackend>>>);

/// A second episode asked a step-wise env for its one policy.
#[derive(Debug, thiserror::Error)]
#[error("the env's policy was already taken")]
struct PolicyTaken;

impl BackendFactory for StepBackends {
    fn backend(&self, _: &Prepared, _: u32) -> Result<Arc<dyn ChatBackend>, BackendError> {
        self.0
            .lock()
            .ok()
            .and_then(|mut b| b.take())
            .map(|b| b as Arc<dyn ChatBackend>)
            .ok_or_else(|| BackendError::Other(Box::new(PolicyTaken)))
    }
    fn policy_info(&self) -> PolicyInfo {
        PolicyInfo {
            kind: "env-client".into(),
            endpoint: Some("dojo env serve /v1/envs".into()),
            ..Default::default()
        }
    }
}

/// dojo's agent, telling the env where its sandbox lives (so a client can see it go).
pub(crate) struct StepAgent {
    pub(crate) inner: DojoAgent,
    pub(crate) sandbox: Arc<Mutex<Option<PathBuf>>>,
}

impl AgentLoop for StepAgent {
    fn run<'a>(
        &'a self,
        sandbox: &'a Sandbox,
        prepared: &'a Prepared,
        backend: Arc<dyn ChatBackend>,
        policy: PolicyInfo,
        job: &'a Job,
        environment: HostFingerprint,
    ) -> BoxFuture<'a, Trajectory> {
        if let Ok(mut s) = self.sandbox.lock() {
            *s = Some(sandbox.host_dir().to_path_buf());
        }
        self.inner
            .run(sandbox, prepared, backend, policy, job, environment)
    }
}

/// The client's side of an env, used by one request at a time.
pub(crate) struct EnvIo {
    pub(crate) turns: mpsc::Sender<ChatMessage>,
    pub(crate) prompts: mpsc::Receiver<Vec<ChatMessage>>,
    /// The evaluated record, once the agent loop ended.
    pub(crate) done: watch::Receiver<Option<EpisodeRecord>>,
    pub(crate) tools: Vec<dojo_llm::ToolSpec>,
    pub(crate) format: dojo_agent::ActionFormat,
}

/// A live env.
pub(crate) struct Env {
    pub(crate) io: tokio::sync::Mutex<EnvIo>,
    pub(crate) touched: Mutex<Instant>,
    pub(crate) lease: Duration,
    pub(crate) run: tokio::task::AbortHandle,
}

impl Env {
    pub(crate) fn touch(&self) {
        if let Ok(mut t) = self.touched.lock() {
            *t = Instant::now();
        }
    }
    /// Idle past its lease, and no request is using it.
    pub(crate) fn expired(&self, now: Instant) -> bool {
        self.io.try_lock().is_ok()
            && self
                .touched
                .lock()
                .is_ok_and(|t| now.duration_since(*t) > self.lease)
    }
    /// Cancel its agent loop: the runner's future is dropped, and the sandbox with it (killed,
    /// its directory removed).
    pub(crate) fn cancel(&self) {
        self.run.abort();
    }
    pub(crate) fn finished(&self) -> bool {
        self.run.is_finished()
    }
}

/// What a step (or creation) saw: the messages after the last assistant turn, or the end.
pub(crate) enum Seen {
    Prompt(Vec<ChatMessage>),
    Done(Box<EpisodeRecord>),
    Cancelled,
}

impl EnvIo {
    pub(crate) async fn next(&mut self) -> Seen {
        if let Some(rec) = self.done.borrow().clone() {
            return Seen::Done(Box::new(rec));
        }
        tokio::select! {
            p = self.prompts.recv() => match p {
                Some(m) => Seen::Prompt(m),
                None => self.wait_done().await,
            },
            _ = self.done.changed() => match self.done.borrow().clone() {
                Some(rec) => Seen::Done(Box::new(rec)),
                None => Seen::Cancelled,
            },
        }
    }
    pub(crate) async fn wait_done(&mut self) -> Seen {
        loop {
            if let Some(rec) = self.done.borrow().clone() {
                return Seen::Done(Box::new(rec));
            }
            if self.done.changed().await.is_err() {
                return Seen::Cancelled;
            }
        }
    }
}

/// A short unique suffix for call and env ids: time, process and a counter.
pub(crate) fn uuidish() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    format!(
        "{t:x}-{:x}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Live envs, by id (shared with the lease sweeper and shutdown).
pub(crate) type Envs = Mutex<HashMap<String, Arc<Env>>>;
