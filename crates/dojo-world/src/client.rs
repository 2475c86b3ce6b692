//! [`WorldClient`]: the transition model (SWT) and the reward model (SWR) behind any
//! [`ChatBackend`], one backend per role.
//!
//! A role's backend is usually an [`OpenAiClient`] over a list of endpoints (it balances them by
//! in-flight requests and retries infrastructure failures on another one), or the embedded
//! engine for offline runs. Decoding follows SWE-World: SWT at temperature 0 with a JSON response
//! format and a 650 s timeout; SWR at temperature 0.7 with a 1,200 s timeout, `k` samples
//! averaged.
//!
//! Every failure is a [`WorldError`]. Model errors, timeouts and unparseable replies are the
//! *infrastructure's* fault: the simulated environment must report them (and RL must mask the
//! sample), never turn them into an observation or a reward of 0.

use std::sync::Arc;
use std::time::Duration;

use dojo_llm::{
    ChatBackend, ChatRequest, ClientConfig, EndpointConfig, LlmError, OpenAiClient, Usage,
};
use dojo_rundir::clip::{self, Unit};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::context::{SwrContext, SwrTarget, SwtContext, SwtTarget};
use crate::parse::{ParseError, parse_swr_reply, parse_swt_reply};
use crate::prompt::{Caps, Rendered, Truncation, swr_messages, swt_messages};

/// Which world model a request was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The transition model: one command's stdout, stderr and exit code.
    Swt,
    /// The reward model: a test report and a 0/1 reward.
    Swr,
    /// The per-task initial analysis.
    Analysis,
    /// The reverse-reasoning teacher and its judge.
    Cot,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Swt => "SWT",
            Role::Swr => "SWR",
            Role::Analysis => "initial analysis",
            Role::Cot => "reverse-reasoning",
        })
    }
}

/// A world-model failure. All but [`WorldError::Context`] are infrastructure: the simulation
/// could not produce an answer, which says nothing about the agent.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WorldError {
    /// The backend failed (HTTP error, connection, context length, engine failure).
    #[error("{role} model: {source}")]
    Model {
        role: Role,
        #[source]
        source: LlmError,
    },
    #[error("{role} model {backend}: no reply within {after:?}")]
    Timeout {
        role: Role,
        backend: String,
        after: Duration,
    },
    /// The model answered, but not in the required format (prose instead of JSON, wrong types).
    #[error("{role} model {backend}: unusable reply: {error}; reply starts {snippet:?}")]
    Unparseable {
        role: Role,
        backend: String,
        error: ParseError,
        snippet: String,
    },
    /// The request cannot be made from this context (e.g. SWR for a task without tests). The
    /// caller's input is wrong; no model was asked.
    #[error("{role} context for task {task_id}: {reason}")]
    Context {
        role: Role,
        task_id: String,
        reason: String,
    },
    /// The backend or cache could not be set up (no endpoints, bad URL, unwritable cache).
    /// The cause is shared (`Arc`) so the error stays `Clone`.
    #[error("{role} setup: {source}")]
    Setup {
        role: Role,
        #[source]
        source: std::sync::Arc<dyn std::error::Error + Send + Sync>,
    },
}

impl WorldError {
    /// Whether the failure is the infrastructure's (everything except a bad context).
    pub fn is_infrastructure(&self) -> bool {
        !matches!(self, WorldError::Context { .. })
    }

    /// Short machine-readable name, for records and summaries.
    pub fn kind(&self) -> &'static str {
        match self {
            WorldError::Model { .. } => "model_error",
            WorldError::Timeout { .. } => "timeout",
            WorldError::Unparseable { .. } => "unparseable_reply",
            WorldError::Context { .. } => "bad_context",
            WorldError::Setup { .. } => "setup",
        }
    }
}

/// Decoding and prompt settings for both roles (defaults: SWE-World's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorldClientConfig {
    pub caps: Caps,
    /// Model name sent to the SWT backend (empty: the endpoint's configured model).
    pub swt_model: String,
    pub swr_model: String,
    pub swt_temperature: f64,
    pub swr_temperature: f64,
    #[serde(with = "dojo_rundir::secs")]
    pub swt_timeout: Duration,
    #[serde(with = "dojo_rundir::secs")]
    pub swr_timeout: Duration,
    pub swt_max_tokens: Option<u32>,
    pub swr_max_tokens: Option<u32>,
    /// Ask SWT's server for a JSON object (`response_format`); servers that reject the field can
    /// turn it off, the parser accepts JSON inside text either way.
    pub swt_json_mode: bool,
    /// SWR samples per rollout reward (SWE-World averages several; `dojo rollout
    /// --swr-samples`). The selector passes its own count to [`WorldClient::predict_reward`].
    pub swr_samples: u32,
    /// Seed of the coin that breaks an exact tie of the samples' mean (see
    /// [`RewardEstimate::verdict`]), mixed with the task and the patch per rollout.
    pub swr_seed: u64,
}

impl Default for WorldClientConfig {
    fn default() -> Self {
        WorldClientConfig {
            caps: Caps::default(),
            swt_model: String::new(),
            swr_model: String::new(),
            swt_temperature: 0.0,
            swr_temperature: 0.7,
            swt_timeout: Duration::from_secs(650),
            swr_timeout: Duration::from_secs(1200),
            swt_max_tokens: None,
            swr_max_tokens: None,
            swt_json_mode: true,
            swr_samples: 1,
            swr_seed: 0,
        }
    }
}

/// A parsed model answer with what it took to get it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Predicted<T> {
    pub value: T,
    /// The raw reply text (reasoning included), for records and drift analysis.
    pub reply: String,
    /// The backend that answered ([`ChatBackend::describe`]).
    pub backend: String,
    pub truncations: Vec<Truncation>,
    pub dropped_files: usize,
    #[serde(default)]
    pub usage: Option<Usage>,
}

/// SWR's verdict over `k` samples of the same context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RewardEstimate {
    /// Mean reward over the samples that parsed (0.0 for an empty patch).
    pub mean: f64,
    /// The samples that parsed, in request order.
    pub samples: Vec<SwrTarget>,
    /// Samples that failed (`kind: message`); they do not count towards `mean`.
    pub failures: Vec<String>,
    /// The agent's patch was empty: reward 0 without asking the model.
    pub empty_patch: bool,
    pub truncations: Vec<Truncation>,
}

/// A verdict drawn from a [`RewardEstimate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwrVerdict {
    pub resolved: bool,
    /// The seed of the coin that decided an exact tie (`None`: the mean decided).
    pub tie_seed: Option<u64>,
}

impl RewardEstimate {
    /// The binary verdict of the samples: resolved when their mean reward is above 0.5,
    /// unresolved below, and an exact tie (`k` even, half of them 1) decided by a coin seeded
    /// with `seed`, which the verdict records so the draw can be repeated.
    pub fn verdict(&self, seed: u64) -> SwrVerdict {
        if self.empty_patch || (self.mean - 0.5).abs() > f64::EPSILON {
            return SwrVerdict {
                resolved: !self.empty_patch && self.mean > 0.5,
                tie_seed: None,
            };
        }
        let mut h = Sha256::new();
        h.update(b"swr-tie");
        h.update(seed.to_le_bytes());
        SwrVerdict {
            resolved: h.finalize()[0] & 1 == 1,
            tie_seed: Some(seed),
        }
    }
}

/// The seed of one rollout's tie-breaking coin: the configured seed mixed with the task and
/// the patch judged, so reruns draw the same and different rollouts draw independently.
pub fn rollout_seed(base: u64, task_id: &str, patch: &str) -> u64 {
    let mut h = Sha256::new();
    h.update(base.to_le_bytes());
    h.update(task_id.as_bytes());
    h.update([0]);
    h.update(patch.as_bytes());
    let d = h.finalize();
    u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

/// SWT and SWR behind their backends.
pub struct WorldClient {
    swt: Arc<dyn ChatBackend>,
    swr: Arc<dyn ChatBackend>,
    cfg: WorldClientConfig,
}

/// The HTTP backend of one role over `endpoints`; `timeout` (the role's) bounds every attempt,
/// the client's retries handle 5xx and the like. An empty list is an error, not a silent
/// fallback.
pub fn role_backend(
    role: Role,
    endpoints: Vec<EndpointConfig>,
    timeout: Duration,
) -> Result<Arc<dyn ChatBackend>, WorldError> {
    if endpoints.is_empty() {
        return Err(WorldError::Setup {
            role,
            source: Box::<dyn std::error::Error + Send + Sync>::from("the endpoint list is empty")
                .into(),
        });
    }
    let mut cc = ClientConfig::new(endpoints);
    cc.request_timeout = timeout;
    OpenAiClient::new(cc)
        .map(|c| Arc::new(c) as Arc<dyn ChatBackend>)
        .map_err(|e| WorldError::Setup {
            role,
            source: std::sync::Arc::new(e),
        })
}

impl WorldClient {
    /// A client over given backends (an [`OpenAiClient`], the embedded engine, a test server).
    pub fn new(
        swt: Arc<dyn ChatBackend>,
        swr: Arc<dyn ChatBackend>,
        cfg: WorldClientConfig,
    ) -> WorldClient {
        WorldClient { swt, swr, cfg }
    }

    /// A client over OpenAI-compatible endpoint lists, one per role (SWE-World's `swt:` and
    /// `swr:` lists). An empty list is an error, not a silent fallback.
    pub fn from_endpoints(
        swt: Vec<EndpointConfig>,
        swr: Vec<EndpointConfig>,
        cfg: WorldClientConfig,
    ) -> Result<WorldClient, WorldError> {
        let swt = role_backend(Role::Swt, swt, cfg.swt_timeout)?;
        let swr = role_backend(Role::Swr, swr, cfg.swr_timeout)?;
        Ok(WorldClient::new(swt, swr, cfg))
    }

    pub fn config(&self) -> &WorldClientConfig {
        &self.cfg
    }

    /// Which model plays each role, for logs and records: `world client (M)` when one model
    /// plays both, `world client (SWT M1, SWR M2)` otherwise. A role's model name, else what its
    /// backend says it is (`embedded:...`).
    pub fn describe_roles(&self) -> String {
        let name = |m: &str, b: &Arc<dyn ChatBackend>| {
            if m.is_empty() {
                b.describe()
            } else {
                m.to_string()
            }
        };
        let swt = name(&self.cfg.swt_model, &self.swt);
        let swr = name(&self.cfg.swr_model, &self.swr);
        if swt == swr {
            format!("world client ({swt})")
        } else {
            format!("world client (SWT {swt}, SWR {swr})")
        }
    }

    /// SWT's prediction of one command's stdout, stderr and exit code.
    pub async fn predict_transition(
        &self,
        ctx: &SwtContext,
    ) -> Result<Predicted<SwtTarget>, WorldError> {
        let rendered = swt_messages(ctx, &self.cfg.caps);
        let mut req = request(
            &rendered,
            &self.cfg.swt_model,
            self.cfg.swt_temperature,
            self.cfg.swt_max_tokens,
        );
        if self.cfg.swt_json_mode {
            req.extra.insert(
                "response_format".into(),
                serde_json::json!({"type": "json_object"}),
            );
        }
        let (reply, usage) = ask(&*self.swt, Role::Swt, req, self.cfg.swt_timeout).await?;
        let value =
            parse_swt_reply(&reply).map_err(|e| unparseable(Role::Swt, &*self.swt, e, &reply))?;
        Ok(Predicted {
            value,
            reply,
            backend: self.swt.describe(),
            truncations: rendered.truncations,
            dropped_files: rendered.dropped_files,
            usage,
        })
    }

    /// SWR's reward over `samples` independent samples (at least 1). An empty agent patch is
    /// reward 0 without a call; a context without any FAIL_TO_PASS or PASS_TO_PASS test is a
    /// [`WorldError::Context`]. Samples that fail are listed in the estimate; when all fail, the
    /// first failure is returned.
    pub async fn predict_reward(
        &self,
        ctx: &SwrContext,
        samples: u32,
    ) -> Result<RewardEstimate, WorldError> {
        if ctx.agent_patch.trim().is_empty() {
            return Ok(RewardEstimate {
                mean: 0.0,
                samples: Vec::new(),
                failures: Vec::new(),
                empty_patch: true,
                truncations: Vec::new(),
            });
        }
        if ctx.fail_to_pass.is_empty() && ctx.pass_to_pass.is_empty() {
            return Err(WorldError::Context {
                role: Role::Swr,
                task_id: ctx.task_id.clone(),
                reason: "no FAIL_TO_PASS or PASS_TO_PASS tests to judge".into(),
            });
        }
        let rendered = swr_messages(ctx, &self.cfg.caps);
        let one = || async {
            let req = request(
                &rendered,
                &self.cfg.swr_model,
                self.cfg.swr_temperature,
                self.cfg.swr_max_tokens,
            );
            let (reply, _) = ask(&*self.swr, Role::Swr, req, self.cfg.swr_timeout).await?;
            parse_swr_reply(&reply).map_err(|e| unparseable(Role::Swr, &*self.swr, e, &reply))
        };
        let results = futures::future::join_all((0..samples.max(1)).map(|_| one())).await;
        let mut ok = Vec::new();
        let mut failed = Vec::new();
        for r in results {
            match r {
                Ok(t) => ok.push(t),
                Err(e) => failed.push(e),
            }
        }
        if ok.is_empty() {
            // `samples.max(1)` requests were made, so there is at least one failure.
            return Err(failed.swap_remove(0));
        }
        let mean = ok.iter().map(|t| f64::from(t.reward)).sum::<f64>() / ok.len() as f64;
        Ok(RewardEstimate {
            mean,
            samples: ok,
            failures: failed
                .iter()
                .map(|e| format!("{}: {e}", e.kind()))
                .collect(),
            empty_patch: false,
            truncations: rendered.truncations,
        })
    }
}

fn request(
    rendered: &Rendered,
    model: &str,
    temperature: f64,
    max_tokens: Option<u32>,
) -> ChatRequest {
    ChatRequest {
        model: model.to_string(),
        messages: rendered.messages.clone(),
        temperature: Some(temperature),
        max_tokens,
        ..ChatRequest::default()
    }
}

/// One request with a deadline; returns the first choice's text.
pub(crate) async fn ask(
    backend: &dyn ChatBackend,
    role: Role,
    req: ChatRequest,
    timeout: Duration,
) -> Result<(String, Option<Usage>), WorldError> {
    let resp = match tokio::time::timeout(timeout, backend.complete(req)).await {
        Err(_) => {
            return Err(WorldError::Timeout {
                role,
                backend: backend.describe(),
                after: timeout,
            });
        }
        Ok(r) => r.map_err(|source| WorldError::Model { role, source })?,
    };
    let text = resp
        .choices
        .first()
        .map(|c| c.message.text())
        .unwrap_or_default();
    Ok((text, resp.usage))
}

pub(crate) fn unparseable(
    role: Role,
    backend: &dyn ChatBackend,
    error: ParseError,
    reply: &str,
) -> WorldError {
    WorldError::Unparseable {
        role,
        backend: backend.describe(),
        error,
        snippet: clip::head(reply, 200, Unit::Chars).to_string(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use dojo_llm::{BoxFuture, ChatMessage, ChatResponse, Choice};
    use std::collections::VecDeque;
    use std::sync::Mutex;

    /// A scripted backend: answers each request with the next scripted reply (`Err` for a
    /// backend failure, `None` for a request that never returns) and keeps the requests.
    pub(crate) struct Scripted {
        replies: Mutex<VecDeque<Option<Result<String, LlmError>>>>,
        pub requests: Mutex<Vec<ChatRequest>>,
    }

    impl Scripted {
        pub(crate) fn new(replies: Vec<Option<Result<String, LlmError>>>) -> Arc<Scripted> {
            Arc::new(Scripted {
                replies: Mutex::new(replies.into()),
                requests: Mutex::new(Vec::new()),
            })
        }
        pub(crate) fn text(replies: &[&str]) -> Arc<Scripted> {
            Scripted::new(replies.iter().map(|r| Some(Ok(r.to_string()))).collect())
        }
        pub(crate) fn calls(&self) -> usize {
            self.requests.lock().unwrap().len()
        }
    }

    impl ChatBackend for Scripted {
        fn complete(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatResponse, LlmError>> {
            self.requests.lock().unwrap().push(req);
            let next = self.replies.lock().unwrap().pop_front();
            Box::pin(async move {
                match next {
                    Some(Some(Ok(text))) => Ok(ChatResponse {
                        id: "r".into(),
                        object: "chat.completion".into(),
                        created: 0,
                        model: "m".into(),
                        choices: vec![Choice {
                            index: 0,
                            message: ChatMessage::assistant(text),
                            finish_reason: Some("stop".into()),
                            logprobs: None,
                            token_ids: None,
                            extra: Default::default(),
                        }],
                        ..ChatResponse::default()
                    }),
                    Some(Some(Err(e))) => Err(e),
                    Some(None) => futures::future::pending().await,
                    None => Err(LlmError::Config("script exhausted".into())),
                }
            })
        }
        fn describe(&self) -> String {
            "scripted".into()
        }
    }

    pub(crate) fn swt_ctx() -> SwtContext {
        SwtContext {
            task_id: "t".into(),
            problem_statement: "p".into(),
            command: "python a.py".into(),
            executed_files: vec![],
            agent_patch: String::new(),
            gold_patch: None,
            analysis: None,
        }
    }

    fn swr_ctx(patch: &str, f2p: &[&str]) -> SwrContext {
        SwrContext {
            task_id: "t".into(),
            problem_statement: "p".into(),
            test_command: "pytest".into(),
            test_files: vec![],
            agent_patch: patch.into(),
            gold_patch: None,
            fail_to_pass: f2p.iter().map(|s| s.to_string()).collect(),
            pass_to_pass: vec![],
            analysis: None,
        }
    }

    fn client(swt: Arc<Scripted>, swr: Arc<Scripted>) -> WorldClient {
        let cfg = WorldClientConfig {
            swt_timeout: Duration::from_millis(50),
            ..WorldClientConfig::default()
        };
        WorldClient::new(swt, swr, cfg)
    }

    #[tokio::test]
    async fn transition_sends_swe_world_decoding_and_parses_the_reply() {
        let swt =
            Scripted::text(&[r#"<think>x</think>{"stdout":"1\n","stderr":"","exit_code":0}"#]);
        let c = client(swt.clone(), Scripted::text(&[]));
        let p = c.predict_transition(&swt_ctx()).await.unwrap();
        assert_eq!(p.value.stdout, "1\n");
        assert_eq!(p.backend, "scripted");
        let req = &swt.requests.lock().unwrap()[0];
        assert_eq!(req.temperature, Some(0.0));
        assert_eq!(req.extra["response_format"]["type"], "json_object");
        assert_eq!(
            req.messages,
            swt_messages(&swt_ctx(), &Caps::default()).messages
        );
    }

    #[tokio::test]
    async fn failures_are_infrastructure_never_observations() {
        let swt = Scripted::new(vec![
            Some(Ok("The script prints 1.".into())),
            Some(Err(LlmError::from_status("e", 503, "down", None))),
            None,
        ]);
        let c = client(swt, Scripted::text(&[]));
        let prose = c.predict_transition(&swt_ctx()).await.unwrap_err();
        assert!(matches!(prose, WorldError::Unparseable { .. }), "{prose}");
        let down = c.predict_transition(&swt_ctx()).await.unwrap_err();
        assert_eq!(down.kind(), "model_error");
        let hung = c.predict_transition(&swt_ctx()).await.unwrap_err();
        assert_eq!(hung.kind(), "timeout");
        for e in [prose, down, hung] {
            assert!(e.is_infrastructure(), "{e}");
        }
    }

    #[tokio::test]
    async fn reward_averages_parsed_samples_and_lists_failures() {
        let swr = Scripted::text(&[
            r#"<think>a</think>{"test_report":"ok","reward":1}"#,
            r#"<think>b</think>{"test_report":"F","reward":0}"#,
            "I think it passes.",
        ]);
        let c = client(Scripted::text(&[]), swr.clone());
        let est = c
            .predict_reward(&swr_ctx("diff", &["t::a"]), 3)
            .await
            .unwrap();
        assert_eq!(est.samples.len(), 2);
        assert_eq!(est.mean, 0.5);
        assert_eq!(est.failures.len(), 1);
        assert!(est.failures[0].starts_with("unparseable_reply"));
        let req = &swr.requests.lock().unwrap()[0];
        assert_eq!(req.temperature, Some(0.7));
        assert!(!req.extra.contains_key("response_format"));
    }

    #[test]
    fn k_sample_verdicts_and_seeded_ties() {
        let est = |rewards: &[u8]| RewardEstimate {
            mean: rewards.iter().map(|&r| f64::from(r)).sum::<f64>() / rewards.len() as f64,
            samples: rewards
                .iter()
                .map(|&reward| SwrTarget {
                    test_report: String::new(),
                    reward,
                })
                .collect(),
            failures: Vec::new(),
            empty_patch: false,
            truncations: Vec::new(),
        };
        let v = est(&[1, 1, 0]).verdict(7);
        assert_eq!((v.resolved, v.tie_seed), (true, None));
        let v = est(&[1, 0, 0]).verdict(7);
        assert_eq!((v.resolved, v.tie_seed), (false, None));
        // An exact tie: a seeded coin, recorded, the same for the same seed.
        let tie = est(&[1, 0]);
        let v = tie.verdict(7);
        assert_eq!(v.tie_seed, Some(7));
        assert_eq!(tie.verdict(7), v);
        let outcomes: std::collections::HashSet<bool> =
            (0..64).map(|s| tie.verdict(s).resolved).collect();
        assert_eq!(outcomes.len(), 2, "the coin takes both sides over seeds");
        let mut empty = est(&[1]);
        empty.empty_patch = true;
        assert!(!empty.verdict(1).resolved);
        assert_ne!(rollout_seed(0, "t", "p"), rollout_seed(0, "t", "q"));
        assert_eq!(rollout_seed(3, "t", "p"), rollout_seed(3, "t", "p"));
    }

    #[tokio::test]
    async fn reward_edge_cases() {
        let swr = Scripted::text(&["prose", "more prose"]);
        let c = client(Scripted::text(&[]), swr.clone());
        // An empty patch is 0 without a call.
        let est = c
            .predict_reward(&swr_ctx("  \n", &["t::a"]), 3)
            .await
            .unwrap();
        assert!(est.empty_patch && est.mean == 0.0 && est.samples.is_empty());
        assert_eq!(swr.calls(), 0);
        // No tests: the caller's context is wrong, not the infrastructure.
        let e = c
            .predict_reward(&swr_ctx("diff", &[]), 1)
            .await
            .unwrap_err();
        assert!(!e.is_infrastructure() && e.kind() == "bad_context", "{e}");
        // Every sample unusable: an error, not a reward.
        let e = c
            .predict_reward(&swr_ctx("diff", &["t::a"]), 2)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), "unparseable_reply");
    }

    #[test]
    fn an_empty_endpoint_list_is_a_setup_error() {
        let e = WorldClient::from_endpoints(
            vec![],
            vec![EndpointConfig::new("http://127.0.0.1:9/v1")],
            WorldClientConfig::default(),
        )
        .err()
        .unwrap();
        assert_eq!(e.kind(), "setup");
        assert!(e.to_string().contains("SWT"), "{e}");
    }
}
