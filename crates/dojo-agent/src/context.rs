//! SWE-Master's context manager: once a trajectory is long, older turns are replaced, one window
//! at a time, by an LLM-written memory with four sections (Investigation Progress, Key
//! Discoveries, Current Understanding, Memory Anchors); the system and task messages and the
//! most recent turns stay verbatim. Every compression is recorded in the trajectory, which keeps
//! every message: [`prompt`] rebuilds what each request holds from the messages and the
//! compressions, and the record says so per step ([`PromptPart`]).
//!
//! Before each step the agent loop asks [`due_window`] whether a window is due, has the policy
//! summarize it and records [`Window::event`], then sends [`prompt`]'s messages. This module
//! decides and shapes; the loop owns the rollout's state and the policy call.

use dojo_llm::{ChatMessage, Role, Usage};
use dojo_rundir::clip::{Keep, Unit, clip};
use dojo_trajectory::{CompressionEvent, PromptPart, Trajectory};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

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
            let (clipped, _) = clip(&text, max_observation_chars, Unit::Chars, Keep::Head);
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

/// One compression that is due now: the turns it folds, their messages, and what the summarizer
/// is asked.
pub(crate) struct Window {
    /// First and last turn (1-based, inclusive).
    pub(crate) first: u32,
    pub(crate) last: u32,
    /// Message index range `[start, end)` the turns cover.
    pub(crate) messages: (usize, usize),
    /// Variables of the `summary` prompt.
    pub(crate) vars: Value,
}

/// The window to compress now, if [`ContextConfig::due`] says so. `turns` are the message ranges
/// of the completed turns, `compressed` the turns already summarized, `task_vars` the task's
/// template variables (the summarizer sees its `problem_statement`).
pub(crate) fn due_window(
    cc: &ContextConfig,
    messages: &[ChatMessage],
    turns: &[(usize, usize)],
    compressed: u32,
    task_vars: &Map<String, Value>,
) -> Option<Window> {
    let (first, last) = cc.due(turns.len() as u32, compressed)?;
    let window = &turns[first as usize - 1..last as usize];
    let transcript = transcript(messages, window, first, cc.max_observation_chars);
    let vars = json!({
        "first": first, "last": last, "transcript": transcript,
        "problem_statement": task_vars.get("problem_statement").cloned().unwrap_or(json!("")),
    });
    Some(Window {
        first,
        last,
        messages: (window[0].0, window[window.len() - 1].1),
        vars,
    })
}

impl Window {
    /// The trajectory's record of this window compressed into `summary` at `step`.
    pub(crate) fn event(
        &self,
        step: u32,
        summary: &str,
        usage: Usage,
        llm_ms: u64,
    ) -> CompressionEvent {
        CompressionEvent {
            at_step: step,
            turns: (self.first, self.last),
            messages: self.messages,
            summary: summary_message(self.first, self.last, summary),
            usage,
            llm_ms,
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
