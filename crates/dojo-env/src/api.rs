//! What a trainer sends (`EpisodeRequest`) and what it gets back (`EpisodeRecord`, also the
//! line stored per finished episode). Field names follow verl's `AgentLoopOutput` where they
//! mean the same thing (`prompt_ids`, `response_ids`, `response_mask`, `response_logprobs`,
//! `num_turns`), so the Python side maps them one to one.
//!
//! [`record`] makes the record of a finished episode (both routes, episodes and envs, use it).

use dojo_reward::shaping::RewardConfig;
use dojo_rollout::policy::PolicyConfig;
use dojo_rollout::store::{Key, Keyed};
use dojo_trajectory::{StopReason, Trajectory};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Version of [`EpisodeRecord`] (the answer and the stored line). Bump on any field change.
pub const EPISODE_SCHEMA_VERSION: u32 = 1;

/// A policy as a shorthand (`openai:MODEL`, `gold-replay`) or as the object of a policy file.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum PolicySpec {
    Shorthand(String),
    Config(Box<PolicyConfig>),
}

/// `POST /v1/episodes`: run one whole episode.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpisodeRequest {
    /// Unique per episode. A request repeating a finished episode's id gets the stored answer
    /// (a trainer's retry never runs an episode twice).
    pub episode_id: String,
    /// The group (GRPO's G samples of one task), echoed in the record.
    #[serde(default)]
    pub group_id: Option<String>,
    /// The task row, as in a task file (verl's `extra_info.task`, as `dojo tasks export
    /// --format verl` writes it).
    pub task: Map<String, Value>,
    /// Where the agent's tokens come from: an OpenAI-compatible server (the trainer's vLLM or
    /// SGLang fleet, or `dojo serve`) or a scripted policy.
    pub policy: PolicySpec,
    /// Agent settings over the policy's (`max_steps`, `max_tokens`, …).
    #[serde(default)]
    pub budgets: Map<String, Value>,
    /// Reward shaping; SWE-Master's defaults (forced submission × 0.5, infrastructure masked).
    #[serde(default)]
    pub shaping: RewardConfig,
    /// Seconds the episode may hold its sandbox (at most the server's `--lease-s`).
    #[serde(default)]
    pub lease_s: Option<f64>,
}

/// One context window of the episode as the policy saw it: the prompt, then the response part
/// (sampled tokens with mask 1 and their logprobs; template and observation tokens with mask 0).
/// A window starts afresh where the context manager rewrote the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenStream {
    pub prompt_ids: Vec<u32>,
    pub response_ids: Vec<u32>,
    pub response_mask: Vec<u8>,
    /// The sampling logprob of each response token (0 where the mask is 0).
    pub response_logprobs: Vec<f32>,
}

impl From<&dojo_reward::episode::EpisodeSample> for TokenStream {
    fn from(s: &dojo_reward::episode::EpisodeSample) -> Self {
        let first = s
            .loss_mask
            .iter()
            .position(|&m| m == 1)
            .unwrap_or(s.input_ids.len());
        let logprobs = s.loss_mask[first..]
            .iter()
            .zip(&s.sampling_logprobs[first..])
            .map(|(&m, &l)| if m == 1 { l } else { 0.0 })
            .collect();
        TokenStream {
            prompt_ids: s.input_ids[..first].to_vec(),
            response_ids: s.input_ids[first..].to_vec(),
            response_mask: s.loss_mask[first..].to_vec(),
            response_logprobs: logprobs,
        }
    }
}

/// A finished episode: the answer to the trainer and the stored line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeRecord {
    pub schema_version: u32,
    pub episode_id: String,
    pub group_id: Option<String>,
    pub task_id: String,
    /// The shaped reward the advantage estimator should see (0 when masked).
    pub reward: f64,
    /// The grader's verdict before shaping (absent when not graded).
    pub raw_reward: Option<f64>,
    /// An infrastructure failure: no loss on this episode, and not the agent's failure.
    pub masked: bool,
    pub stop_reason: StopReason,
    /// Submitted on the agent's behalf when a budget ran out, then graded.
    pub forced_submission: bool,
    pub num_turns: u32,
    pub patch: String,
    /// The token streams (empty with `token_error` set when the policy recorded no ids).
    pub streams: Vec<TokenStream>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_error: Option<String>,
    /// Wall-clock seconds of the episode.
    pub wall_s: f64,
    /// The whole trajectory, as `dojo rollout` records it.
    pub trajectory: Trajectory,
}

impl Keyed for EpisodeRecord {
    /// Episode ids are unique within a service's store.
    fn key(&self) -> Key {
        Key {
            task_id: self.episode_id.clone(),
            sample_index: 0,
        }
    }
}

/// A request the server refuses before running anything; the message names the field.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct BadRequest {
    pub field: String,
    /// What the client is told (the refusing error's text, when one refused the value).
    pub reason: String,
    /// The error that refused the value, when one did.
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl BadRequest {
    pub fn new(field: &str, reason: impl Into<String>) -> Self {
        BadRequest {
            field: field.into(),
            reason: reason.into(),
            source: None,
        }
    }

    /// `field` refused by `source`: its text is the reason the client reads, and it stays the
    /// cause.
    pub fn refused(field: &str, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        BadRequest {
            field: field.into(),
            reason: source.to_string(),
            source: Some(Box::new(source)),
        }
    }
}

/// The checks episodes and envs share: a positive lease, a valid shaping.
pub(crate) fn check_lease_and_shaping(
    lease_s: Option<f64>,
    shaping: &RewardConfig,
) -> Result<(), BadRequest> {
    if let Some(l) = lease_s
        && !(l.is_finite() && l > 0.0)
    {
        return Err(BadRequest::new(
            "lease_s",
            "must be a positive number of seconds",
        ));
    }
    shaping
        .validate()
        .map_err(|e| BadRequest::refused("shaping", e))
}

/// A task row sent in a request, checked as a task file's row would be.
pub(crate) fn task_of_row(row: &Map<String, Value>) -> Result<dojo_task::Task, BadRequest> {
    let loc = dojo_task::Location {
        file: "request".into(),
        unit: "task",
        index: 1,
    };
    dojo_task::Task::from_row(row.clone(), &loc).map_err(|e| BadRequest::refused("task", e))
}

impl EpisodeRequest {
    /// Parse and check a request body.
    pub fn parse(body: &[u8]) -> Result<EpisodeRequest, BadRequest> {
        let req: EpisodeRequest =
            serde_json::from_slice(body).map_err(|e| BadRequest::refused("body", e))?;
        if req.episode_id.trim().is_empty() || req.episode_id.len() > 256 {
            return Err(BadRequest::new(
                "episode_id",
                "must be a non-empty string of at most 256 characters",
            ));
        }
        check_lease_and_shaping(req.lease_s, &req.shaping)?;
        Ok(req)
    }

    /// The task, checked as a task file's row would be.
    pub fn task(&self) -> Result<dojo_task::Task, BadRequest> {
        task_of_row(&self.task)
    }

    /// The policy with the request's budgets applied. The embedded engine is not served here:
    /// a trainer brings its own fleet (or `dojo serve`) and names it as an `openai` policy.
    pub fn policy(&self) -> Result<PolicyConfig, BadRequest> {
        let mut p = match &self.policy {
            PolicySpec::Shorthand(s) => {
                PolicyConfig::parse(s).map_err(|e| BadRequest::refused("policy", e))?
            }
            PolicySpec::Config(c) => (**c).clone(),
        };
        if matches!(p.kind, dojo_rollout::policy::PolicyKind::Embedded { .. }) {
            return Err(BadRequest::new(
                "policy",
                "the embedded engine is not served by `dojo env serve`; run `dojo serve` (or vLLM/SGLang) and pass an `openai` policy with its base_url",
            ));
        }
        if matches!(p.kind, dojo_rollout::policy::PolicyKind::Replay { .. }) {
            return Err(BadRequest::new(
                "policy",
                "replay policies read files on the server; not accepted over HTTP",
            ));
        }
        for (k, v) in &self.budgets {
            p.agent.insert(k.clone(), v.clone());
        }
        Ok(p)
    }
}

/// The record of a finished episode: shaped reward, token streams, the trajectory.
pub(crate) fn record(
    id: &str,
    group_id: Option<String>,
    shaping: &dojo_reward::shaping::RewardConfig,
    traj: dojo_trajectory::Trajectory,
    wall_s: f64,
) -> EpisodeRecord {
    let shaped = dojo_reward::shape_trajectory(&traj, shaping).unwrap_or_else(|e| {
        // Not graded where it had to be: nothing to score, so no loss (never a silent 0).
        tracing::warn!("episode {id}: {e}; masked");
        dojo_reward::Shaped {
            reward: 0.0,
            raw_reward: None,
            masked: true,
        }
    });
    let (streams, token_error) = match dojo_reward::episode::samples_of(&traj) {
        Ok(samples) => (samples.iter().map(Into::into).collect(), None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    EpisodeRecord {
        schema_version: EPISODE_SCHEMA_VERSION,
        episode_id: id.to_string(),
        group_id,
        task_id: traj.task_id.clone(),
        reward: shaped.reward,
        raw_reward: shaped.raw_reward,
        masked: shaped.masked,
        stop_reason: traj.stop_reason,
        forced_submission: traj.forced_submission,
        num_turns: traj.steps.len() as u32,
        patch: traj.patch.clone().unwrap_or_default(),
        streams,
        token_error,
        wall_s,
        trajectory: traj,
    }
}
