//! A recorded rollout as training token streams: the exact ids the policy was given and
//! sampled, turn by turn, with the sampling logprobs.
//!
//! Every step of a model-policy trajectory records the prompt ids the engine saw
//! (`prompt_token_ids`), the ids it sampled (`completion_token_ids`) and their logprobs. When
//! each turn's prompt extends the previous turn's prompt + completion (the usual case: the
//! conversation only grows), the whole rollout is one stream: the first prompt, then per turn
//! the sampled tokens (loss mask 1, with their logprobs) and the tokens the template and the
//! observation added before the next turn (mask 0). This is what the policy actually
//! conditioned on, so no re-rendering (and no chance of a tokenization mismatch) is involved.
//! When a prompt does not extend the stream (the context manager compressed the history), a
//! new stream starts at that turn; every stream of the rollout shares its advantage, as
//! curate's windows do for SFT.
//!
//! A rollout without token ids or logprobs (an OpenAI-compatible server that does not return
//! them, a replay) cannot be trained on by a policy-gradient method: that is an error naming
//! the task, the sample and the step, raised before any update.

use dojo_trajectory::Trajectory;

use serde::{Deserialize, Serialize};

use crate::RewardError;

/// One rollout's training sample.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct EpisodeSample {
    pub input_ids: Vec<u32>,
    /// 1 on tokens the policy sampled (they carry loss), 0 elsewhere; same length as the ids.
    pub loss_mask: Vec<u8>,
    /// The engine's logprob of each token where `loss_mask` is 1 (anything elsewhere).
    pub sampling_logprobs: Vec<f32>,
    pub advantage: f64,
    /// Old-policy logprobs recomputed by the trainer (same layout as `sampling_logprobs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trainer_old_logprobs: Option<Vec<f32>>,
    /// Reference-policy logprobs (same layout), when a KL penalty is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ref_logprobs: Option<Vec<f32>>,
}

impl EpisodeSample {
    /// Tokens that carry loss.
    pub fn n_response(&self) -> usize {
        // Position 0 has no preceding context, so it can never be trained.
        self.loss_mask.iter().skip(1).filter(|&&m| m == 1).count()
    }

    pub fn check(&self, index: usize) -> Result<(), RewardError> {
        let n = self.input_ids.len();
        let bad = |reason: String| RewardError::Sample { index, reason };
        if self.loss_mask.len() != n || self.sampling_logprobs.len() != n {
            return Err(bad(format!(
                "{n} ids, {} mask values, {} logprobs",
                self.loss_mask.len(),
                self.sampling_logprobs.len()
            )));
        }
        for (name, v) in [
            ("trainer_old_logprobs", &self.trainer_old_logprobs),
            ("ref_logprobs", &self.ref_logprobs),
        ] {
            if let Some(v) = v
                && v.len() != n
            {
                return Err(bad(format!("{n} ids, {} {name}", v.len())));
            }
        }
        if n < 2 && self.loss_mask.contains(&1) {
            return Err(bad(format!("{n} tokens: nothing to predict")));
        }
        if !self.advantage.is_finite() {
            return Err(bad(format!("advantage is {}", self.advantage)));
        }
        for (p, (&m, &lp)) in self
            .loss_mask
            .iter()
            .zip(&self.sampling_logprobs)
            .enumerate()
        {
            if m == 1 && !(lp.is_finite() && lp <= 0.0) {
                return Err(bad(format!(
                    "token {p} carries loss but its sampling logprob is {lp}"
                )));
            }
        }
        Ok(())
    }
}

fn missing(t: &Trajectory, step: u32, what: &str) -> RewardError {
    RewardError::Episode(format!(
        "task {} sample {} step {step}: no {what}; RL needs a policy that records the token ids and logprobs it samples (the embedded engine, or a server returning `prompt_token_ids`, `token_ids` and `logprobs`)",
        t.task_id, t.sample_index
    ))
}

/// The token streams of a rollout (empty for a rollout with no model turn).
pub fn samples_of(t: &Trajectory) -> Result<Vec<EpisodeSample>, RewardError> {
    let mut out: Vec<EpisodeSample> = Vec::new();
    let mut cur: Option<EpisodeSample> = None;
    for step in &t.steps {
        let prompt = step
            .prompt_token_ids
            .as_ref()
            .ok_or_else(|| missing(t, step.index, "prompt_token_ids"))?;
        let completion = step
            .completion_token_ids
            .as_ref()
            .ok_or_else(|| missing(t, step.index, "completion_token_ids"))?;
        let logprobs = step
            .logprobs
            .as_ref()
            .and_then(|l| l.content.as_ref())
            .ok_or_else(|| missing(t, step.index, "logprobs"))?;
        if logprobs.len() != completion.len() {
            return Err(RewardError::Episode(format!(
                "task {} sample {} step {}: {} sampled tokens but {} logprobs",
                t.task_id,
                t.sample_index,
                step.index,
                completion.len(),
                logprobs.len()
            )));
        }
        let mut s = match cur.take() {
            Some(s) if prompt.starts_with(&s.input_ids) => s,
            other => {
                out.extend(other);
                EpisodeSample::default()
            }
        };
        let added = &prompt[s.input_ids.len()..];
        s.input_ids.extend_from_slice(added);
        s.loss_mask.extend(std::iter::repeat_n(0u8, added.len()));
        s.sampling_logprobs
            .extend(std::iter::repeat_n(0f32, added.len()));
        s.input_ids.extend_from_slice(completion);
        s.loss_mask
            .extend(std::iter::repeat_n(1u8, completion.len()));
        s.sampling_logprobs
            .extend(logprobs.iter().map(|l| l.logprob as f32));
        cur = Some(s);
    }
    out.extend(cur);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dojo_llm::{ChoiceLogprobs, TokenLogprob};
    use dojo_trajectory::Step;

    fn lp(v: f64) -> TokenLogprob {
        TokenLogprob {
            token: String::new(),
            logprob: v,
            bytes: None,
            top_logprobs: Vec::new(),
            extra: Default::default(),
        }
    }

    fn step(i: u32, prompt: &[u32], completion: &[u32]) -> Step {
        Step {
            index: i,
            prompt_token_ids: Some(prompt.to_vec()),
            completion_token_ids: Some(completion.to_vec()),
            logprobs: Some(ChoiceLogprobs {
                content: Some(completion.iter().map(|&c| lp(-(c as f64) / 10.0)).collect()),
                extra: Default::default(),
            }),
            ..Step::default()
        }
    }

    #[test]
    fn growing_conversation_is_one_stream() {
        let mut t = Trajectory::new("t1", 0);
        t.steps = vec![
            step(1, &[1, 2, 3], &[4, 5]),
            // Template newline + observation tokens 6, 7, then the next turn.
            step(2, &[1, 2, 3, 4, 5, 6, 7], &[8]),
        ];
        let s = samples_of(&t).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].input_ids, vec![1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(s[0].loss_mask, vec![0, 0, 0, 1, 1, 0, 0, 1]);
        assert_eq!(
            s[0].sampling_logprobs,
            vec![0.0, 0.0, 0.0, -0.4, -0.5, 0.0, 0.0, -0.8]
        );
    }

    #[test]
    fn a_compressed_history_starts_a_new_stream() {
        let mut t = Trajectory::new("t1", 0);
        t.steps = vec![step(1, &[1, 2, 3], &[4, 5]), step(2, &[1, 9, 6], &[8])];
        let s = samples_of(&t).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[1].input_ids, vec![1, 9, 6, 8]);
        assert_eq!(s[1].loss_mask, vec![0, 0, 0, 1]);
    }

    #[test]
    fn missing_logprobs_is_a_clear_error() {
        let mut t = Trajectory::new("task-7", 3);
        let mut st = step(1, &[1, 2], &[3]);
        st.logprobs = None;
        t.steps = vec![st];
        let e = samples_of(&t).unwrap_err().to_string();
        assert!(
            e.contains("task-7") && e.contains("sample 3") && e.contains("logprobs"),
            "{e}"
        );
        let mut st = step(1, &[1, 2], &[3, 4]);
        st.logprobs
            .as_mut()
            .unwrap()
            .content
            .as_mut()
            .unwrap()
            .pop();
        t.steps = vec![st];
        assert!(
            samples_of(&t)
                .unwrap_err()
                .to_string()
                .contains("2 sampled tokens but 1")
        );
    }
}
