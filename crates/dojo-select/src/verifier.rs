//! SWE-Gym's verifier as a selector: every candidate's p(YES) from a judge model, read with the
//! verifier's protocol ([`dojo_reward::judge`]: prompt and score, shared with the training data
//! `dojo curate --verifier` writes).

use std::collections::HashMap;
use std::sync::Arc;

use dojo_llm::{ChatBackend, ChatMessage, ChatRequest};
use futures::stream::{self, StreamExt};

use dojo_reward::judge::{
    JudgeLimits, TOP_LOGPROBS, VerifierError, judge_messages, yes_probability,
};

use crate::candidates::{CandidateSet, TaskCandidates};
use crate::selector::Selector;

/// (task id, candidate label).
pub type CandidateKey = (String, String);

/// One candidate's verifier result.
#[derive(Debug, Clone, PartialEq)]
pub enum Judgement {
    Scored { p_yes: f64, bound: bool },
    Failed(String),
}

/// Scores every candidate of `set` with the judge behind `backend` (`concurrency` requests at
/// once). A missing-logprobs endpoint stops at the first reply; other failures are recorded per
/// candidate.
pub async fn judge_all(
    backend: Arc<dyn ChatBackend>,
    set: &CandidateSet,
    limits: JudgeLimits,
    concurrency: usize,
) -> Result<HashMap<CandidateKey, Judgement>, VerifierError> {
    let jobs: Vec<(String, String, Vec<ChatMessage>)> = set
        .tasks
        .iter()
        .flat_map(|t| {
            t.candidates.iter().map(|c| {
                (
                    t.task_id.clone(),
                    c.label(),
                    judge_messages(&c.record.messages, &c.patch, &limits),
                )
            })
        })
        .collect();
    type Scored = Result<(f64, bool), VerifierError>;
    let results: Vec<(CandidateKey, Scored)> = stream::iter(jobs)
        .map(|(task, label, messages)| {
            let backend = backend.clone();
            async move {
                let req = ChatRequest {
                    messages,
                    temperature: Some(0.0),
                    max_tokens: Some(16),
                    logprobs: Some(true),
                    top_logprobs: Some(TOP_LOGPROBS),
                    ..ChatRequest::default()
                };
                let r = match backend.complete(req).await {
                    Ok(resp) => yes_probability(&resp),
                    Err(e) => Err(VerifierError::Request(dojo_rundir::error_chain(&e))),
                };
                ((task, label), r)
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut out = HashMap::new();
    for (key, r) in results {
        match r {
            Ok((p_yes, bound)) => {
                out.insert(key, Judgement::Scored { p_yes, bound });
            }
            Err(VerifierError::NoLogprobs) => return Err(VerifierError::NoLogprobs),
            Err(e) => {
                out.insert(key, Judgement::Failed(e.to_string()));
            }
        }
    }
    Ok(out)
}

/// A selector over scores computed beforehand per candidate (the verifier's p(YES)); a
/// candidate without a score (its judgement failed) scores −1, below every real one.
pub struct Precomputed {
    pub name: &'static str,
    pub scores: HashMap<CandidateKey, f64>,
}

impl Precomputed {
    pub fn from_judgements(name: &'static str, j: &HashMap<CandidateKey, Judgement>) -> Self {
        let scores = j
            .iter()
            .filter_map(|(k, v)| match v {
                Judgement::Scored { p_yes, .. } => Some((k.clone(), *p_yes)),
                Judgement::Failed(_) => None,
            })
            .collect();
        Precomputed { name, scores }
    }
}

impl Selector for Precomputed {
    fn name(&self) -> &'static str {
        self.name
    }
    fn scores(&self, task: &TaskCandidates, subset: &[usize]) -> Vec<f64> {
        subset
            .iter()
            .map(|&i| {
                let key = (task.task_id.clone(), task.candidates[i].label());
                self.scores.get(&key).copied().unwrap_or(-1.0)
            })
            .collect()
    }
    /// A missing score is no evidence either way: 0, as a candidate no judgement favours.
    fn features(&self, task: &TaskCandidates, subset: &[usize]) -> Vec<f64> {
        self.scores(task, subset)
            .into_iter()
            .map(|s| s.max(0.0))
            .collect()
    }
}
