//! SWE-Master's context manager: once a trajectory is long, older turns are replaced, one window
//! at a time, by an LLM-written memory with four sections (Investigation Progress, Key
//! Discoveries, Current Understanding, Memory Anchors); the system and task messages and the
//! most recent turns stay verbatim. Every compression is recorded in the trajectory, which keeps
//! every message: [`prompt`] rebuilds what each request holds from the messages and the
//! compressions, and the record says so per step ([`PromptPart`]).
//!
//! The agent loop calls [`Run::maybe_compress`] before each step and sends [`prompt`]'s messages.

use std::time::Instant;

use dojo_llm::{ChatMessage, Role};
use dojo_trajectory::{Blame, CompressionEvent, PromptPart, Trajectory};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::agent::{Run, TaskInput, ms};

/// When and how much to compress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContextConfig {
    /// No compression before this many turns.
    pub trigger_step: u32,
    /// Turns folded into one summary.
    pub window: u32,
    /// Most recent turns that always stay verbatim.
    pub keep_recent: u32,
    /// Sampling temperature of the summarizer.
    pub temperature: f64,
    /// Cap on summary length in tokens.
    pub max_summary_tokens: Option<u32>,
    /// Each observation is clipped to this many characters in the summarizer's transcript.
    pub max_observation_chars: usize,
}

impl Default for ContextConfig {
    fn default() -> Self {
        ContextConfig {
            trigger_step: 15,
            window: 10,
            keep_recent: 5,
            temperature: 0.7,
            max_summary_tokens: Some(2048),
            max_observation_chars: 4000,
        }
    }
}

impl ContextConfig {
    /// With `done` turns completed and `compressed` turns already summarized, the turns
    /// (1-based, inclusive) to compress now, if any. Fires when `done ≥ trigger`,
    /// `done ≥ window + keep_recent` and `done − keep_recent ≥ compressed + window`.
    pub fn due(&self, done: u32, compressed: u32) -> Option<(u32, u32)> {
        let fire = done >= self.trigger_step
            && done >= self.window + self.keep_recent
            && done.saturating_sub(self.keep_recent) >= compressed + self.window
            && self.window > 0;
        fire.then(|| (compressed + 1, compressed + self.window))
    }
}

/// The prompt for the next request: the plain history, or, once turns were compressed, the
/// system and task messages, every summary, then the turns after the last compressed window;
/// with the parts it was built from when that differs from the history.
pub(crate) fn prompt(t: &Trajectory) -> (Vec<ChatMessage>, Option<Vec<PromptPart>>) {
    if t.compressions.is_empty() {
        return (t.messages.clone(), None);
    }
    let mut parts = vec![PromptPart::Message(0), PromptPart::Message(1)];
    parts.extend((0..t.compressions.len()).map(PromptPart::Summary));
    let first_kept = t.compressions.last().map(|c| c.messages.1).unwrap_or(2);
    parts.extend((first_kept..t.messages.len()).map(PromptPart::Message));
    let msgs = parts
        .iter()
        .map(|p| match *p {
            PromptPart::Message(i) => t.messages[i].clone(),
            PromptPart::Summary(i) => t.compressions[i].summary.clone(),
        })
        .collect();
    (msgs, Some(parts))
}

/// What the summarizer reads: each turn of the window (`turns`, message ranges, the first being
/// turn `first`) as labelled agent text with its calls and clipped observations.
fn transcript(
    messages: &[ChatMessage],
    turns: &[(usize, usize)],
    first: u32,
    max_observation_chars: usize,
) -> String {
    let mut transcript = String::new();
    for (k, &(a, b)) in turns.iter().enumerate() {
        transcript.push_str(&format!("[Turn {}]\n", first as usize + k));
        for m in &messages[a..b] {
            let mut text = m.text();
            if let Some(calls) = &m.tool_calls {
                for c in calls {
                    text.push_str(&format!(
                        "\n<call {}>{}</call>",
                        c.function.name, c.function.arguments
                    ));
                }
            }
            let label = if m.role == Role::Assistant {
                "AGENT"
            } else {
                "OBSERVATION"
            };
            let clipped = crate::tools::clip_chars(&text, max_observation_chars);
            transcript.push_str(&format!("{label}:\n{clipped}\n"));
        }
        transcript.push('\n');
    }
    transcript
}

/// The message that stands for turns `first..=last` in later prompts.
fn summary_message(first: u32, last: u32, summary: &str) -> ChatMessage {
    ChatMessage::user(format!(
        "[COMPRESSED HISTORY - Turns {first}-{last}]\n<Memory>\n{}\n</Memory>",
        summary.trim()
    ))
}

impl Run<'_> {
    /// Compresses the next window of turns if [`ContextConfig::due`] says so: the summarizer
    /// (the policy itself, with the `summary` prompt) reads the window's transcript and its answer
    /// replaces those turns in later prompts. A failed compression is recorded as an
    /// infrastructure event and the rollout goes on uncompressed.
    pub(crate) async fn maybe_compress(&mut self, step: u32, task: &TaskInput) {
        let Some(cc) = self.agent.cfg.context.clone() else {
            return;
        };
        let done = self.turns.len() as u32;
        let Some((first, last)) = cc.due(done, self.compressed_turns) else {
            return;
        };
        let (msg_start, msg_end) = (
            self.turns[first as usize - 1].0,
            self.turns[last as usize - 1].1,
        );
        let transcript = transcript(
            &self.t.messages,
            &self.turns[first as usize - 1..last as usize],
            first,
            cc.max_observation_chars,
        );
        let vars = json!({
            "first": first, "last": last, "transcript": transcript,
            "problem_statement": task.vars.get("problem_statement").cloned().unwrap_or(json!("")),
        });
        let prompt = match self.agent.prompts.render("summary", &vars) {
            Ok(p) => p,
            Err(e) => {
                self.event(
                    step,
                    "compression_failed",
                    Blame::Infrastructure,
                    e.to_string(),
                );
                return;
            }
        };
        // Its own seed stream, apart from the turns' (steps are numbered from 1, below 2^32).
        let mut req = self
            .agent
            .request(vec![ChatMessage::user(prompt)], (1 << 32) | u64::from(step));
        req.tools = None;
        req.temperature = Some(cc.temperature);
        req.max_tokens = cc.max_summary_tokens;
        let started = Instant::now();
        let resp =
            tokio::time::timeout(self.remaining_wall(), self.agent.backend.complete(req)).await;
        let llm_ms = ms(started.elapsed());
        match resp {
            Ok(Ok(resp)) => {
                self.t.llm_calls += 1;
                let usage = resp.usage.unwrap_or_default();
                self.t.usage.add(&usage);
                let summary = resp
                    .choices
                    .first()
                    .map(|c| c.message.text())
                    .unwrap_or_default();
                self.t.compressions.push(CompressionEvent {
                    at_step: step,
                    turns: (first, last),
                    messages: (msg_start, msg_end),
                    summary: summary_message(first, last, &summary),
                    usage,
                    llm_ms,
                });
                self.compressed_turns = last;
            }
            Ok(Err(e)) => {
                self.t.llm_calls += 1;
                self.event(
                    step,
                    "compression_failed",
                    Blame::Infrastructure,
                    e.to_string(),
                );
            }
            Err(_) => self.event(
                step,
                "compression_failed",
                Blame::Infrastructure,
                "wall-time budget ran out",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transcript_labels_turns_and_clips_observations() {
        let messages = vec![
            ChatMessage::system("s"),
            ChatMessage::user("task"),
            ChatMessage::assistant("look"),
            ChatMessage::tool("c1", "x".repeat(50)),
            ChatMessage::assistant("done"),
        ];
        let text = transcript(&messages, &[(2, 4), (4, 5)], 3, 10);
        assert!(
            text.starts_with("[Turn 3]\nAGENT:\nlook\nOBSERVATION:\n"),
            "{text}"
        );
        assert!(text.contains("[Turn 4]\nAGENT:\ndone\n"), "{text}");
        assert!(!text.contains(&"x".repeat(50)), "{text}");
        let m = summary_message(1, 10, "  memory ");
        assert_eq!(
            m.text(),
            "[COMPRESSED HISTORY - Turns 1-10]\n<Memory>\nmemory\n</Memory>"
        );
    }

    #[test]
    fn fires_on_swe_master_schedule() {
        let c = ContextConfig::default();
        let mut compressed = 0;
        let mut fired = vec![];
        for done in 0..=40 {
            if let Some((a, b)) = c.due(done, compressed) {
                fired.push((done, a, b));
                compressed = b;
            }
        }
        assert_eq!(fired, vec![(15, 1, 10), (25, 11, 20), (35, 21, 30)]);
    }
}
