//! Rendering a conversation to tokens with a loss mask.
//!
//! The mask is 1 on the agent's own tokens (its text, its tool calls and its end-of-turn token)
//! and 0 on everything else (system prompt, tool definitions, user turns, observations, the
//! template's role headers, and the newline a ChatML template puts after `<|im_end|>`, which the
//! model never generated). Rendering, tokenization and the per-message spans come from the
//! shared renderer in `dojo-tokenizer` (the same code the embedded engine builds prompts with), behind
//! the [`ChatModel`] trait; this module decides *which* assistant turns are trained: every one
//! (default), only the last, and, for trajectories the context manager compressed, only the
//! turns generated from each window's context.

use serde_json::Value;

use crate::error::CurateError;
use crate::view::{Traj, role};
use dojo_trajectory::PromptPart;

/// One assistant message's tokens in a rendered sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Index into the messages that were rendered.
    pub message_index: usize,
    pub token_start: usize,
    pub token_end: usize,
}

/// A rendered conversation with every assistant message trained.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedSample {
    pub input_ids: Vec<u32>,
    /// 1 on the tokens of every assistant message (end-of-turn token included).
    pub assistant_masks: Vec<u8>,
    pub spans: Vec<Span>,
}

// Defined with the crate's other errors, which name it (`CurateError::Render`): error.rs
// depends on no other module of the crate.
pub use crate::error::RenderError;

/// A chat template plus the tokenizer of the target model.
pub trait ChatModel: Send + Sync {
    /// Renders and tokenizes OpenAI-shaped messages (no generation prompt), with the spans of
    /// the assistant messages.
    fn sample(&self, messages: &[Value], tools: &[Value]) -> Result<RenderedSample, RenderError>;
    /// Number of tokens of the rendered conversation.
    fn count(&self, messages: &[Value], tools: &[Value]) -> Result<usize, RenderError>;
    /// Token ids of the prompt for the next assistant turn (generation prompt added), to check
    /// against the ids a policy server recorded.
    fn prompt_ids(&self, messages: &[Value], tools: &[Value]) -> Result<Vec<u32>, RenderError>;
    /// sha256 of the tokenizer (vocabulary, merges, special tokens, pipeline).
    fn tokenizer_fingerprint(&self) -> String;
    /// sha256 of the template source.
    fn template_fingerprint(&self) -> String;
    /// Human-readable model name for manifests.
    fn name(&self) -> String;
    /// Whether the template renders OpenAI `tools` and `tool_calls` itself. One that does not
    /// is given them inline ([`hermes_inline`]), and drops them when a trainer renders the
    /// OpenAI shape with it.
    fn supports_tools(&self) -> bool {
        true
    }
}

/// Tools, calls and results written into the messages' text, Hermes style (`dojo-tokenizer`'s
/// normalisation for templates without tool support, so exactly the token export's text for
/// such a template; Qwen2.5's own template renders the OpenAI shape to the same text).
pub fn hermes_inline(messages: &[Value], tools: &[Value]) -> Result<Vec<Value>, RenderError> {
    let tools = (!tools.is_empty()).then_some(tools);
    Ok(dojo_tokenizer::normalize_messages(messages, tools, false)?.messages)
}

/// How the messages exports write tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MessagesStyle {
    /// Inline when the target template has no tool support (it would drop OpenAI `tool_calls`
    /// when a trainer renders the messages), native otherwise (default).
    Auto,
    /// OpenAI shape: `tool_calls`, `role: tool`, `tools`.
    Native,
    /// What the target template is given: tools in the system message, `<tool_call>` text in
    /// assistant content, results as `user` messages; rendered by that template, exactly the
    /// token export's text. Needs a target model.
    Inline,
}

impl std::str::FromStr for MessagesStyle {
    type Err = CurateError;
    fn from_str(s: &str) -> Result<Self, CurateError> {
        match s {
            "auto" => Ok(MessagesStyle::Auto),
            "native" => Ok(MessagesStyle::Native),
            "inline" => Ok(MessagesStyle::Inline),
            other => Err(CurateError::UnknownMessagesStyle(other.to_string())),
        }
    }
}

/// Which assistant turns carry loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Masking {
    /// Every assistant turn (default; SWE-Master, OpenRLHF `--multiturn`).
    AllAssistant,
    /// Only the last assistant turn (torchtune's `train_on_last`; for ablations).
    LastTurn,
}

impl std::str::FromStr for Masking {
    type Err = CurateError;
    fn from_str(s: &str) -> Result<Self, CurateError> {
        match s {
            "all-assistant" | "all_assistant" | "all" => Ok(Masking::AllAssistant),
            "last-turn" | "last_turn" | "last" => Ok(Masking::LastTurn),
            other => Err(CurateError::UnknownMasking(other.to_string())),
        }
    }
}

/// One training sample: a conversation window and where the turns generated from it begin.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// 0 for the first window; k for the window after the k-th change of context.
    pub part: usize,
    pub messages: Vec<Value>,
    /// Messages before this index were context (possibly trained in an earlier window).
    pub first_new: usize,
}

/// The messages step `k` (0-based position in `t.steps`) was sent.
pub fn prompt_of(t: &Traj, k: usize) -> Result<Vec<Value>, RenderError> {
    let step = t.steps.get(k).ok_or(RenderError::NoStep(k + 1))?;
    let msg = |i: usize| {
        t.messages
            .get(i)
            .cloned()
            .ok_or_else(|| RenderError::NoMessage {
                step: k + 1,
                index: i,
                len: t.messages.len(),
            })
    };
    match &step.prompt {
        None => t
            .messages
            .get(..step.assistant_message)
            .map(<[Value]>::to_vec)
            .ok_or(RenderError::PastEnd {
                step: k + 1,
                index: step.assistant_message,
            }),
        Some(parts) => parts
            .iter()
            .map(|p| match *p {
                PromptPart::Message(i) => msg(i),
                PromptPart::Summary(i) => {
                    t.summaries.get(i).cloned().ok_or(RenderError::NoSummary {
                        step: k + 1,
                        index: i,
                    })
                }
            })
            .collect(),
    }
}

/// Splits a trajectory into windows, SWE-Master style: each window is the history exactly as
/// sent to the policy (compressed history after a context-manager compression) plus the turns
/// generated from it, up to the next step whose prompt is not a continuation of it. Without
/// compression that is one window, the whole conversation.
pub fn windows(t: &Traj) -> Result<Vec<Window>, RenderError> {
    if t.steps.is_empty() {
        return Ok(vec![Window {
            part: 0,
            messages: t.messages.clone(),
            first_new: 0,
        }]);
    }
    let mut out: Vec<Window> = Vec::new();
    let mut cur: Option<Window> = None;
    for (k, step) in t.steps.iter().enumerate() {
        let a = step.assistant_message;
        let end = t
            .steps
            .get(k + 1)
            .map_or(t.messages.len(), |n| n.assistant_message);
        if a >= end || end > t.messages.len() {
            return Err(RenderError::OutOfOrder {
                step: k + 1,
                start: a,
                end,
                len: t.messages.len(),
            });
        }
        let prompt = prompt_of(t, k)?;
        let turn = &t.messages[a..end];
        match cur.as_mut() {
            Some(w) if w.messages == prompt => w.messages.extend_from_slice(turn),
            _ => {
                out.extend(cur.take());
                let first_new = prompt.len();
                let mut messages = prompt;
                messages.extend_from_slice(turn);
                cur = Some(Window {
                    part: out.len(),
                    messages,
                    first_new,
                });
            }
        }
    }
    out.extend(cur);
    out.retain(trains_something);
    Ok(out)
}

/// Renders one window: ids and the mask of the turns it trains.
pub fn render_window(
    model: &dyn ChatModel,
    w: &Window,
    tools: &[Value],
    masking: Masking,
) -> Result<RenderedSample, RenderError> {
    let mut s = model.sample(&w.messages, tools)?;
    let mut trained: Vec<usize> = s
        .spans
        .iter()
        .enumerate()
        .filter(|(_, sp)| sp.message_index >= w.first_new)
        .map(|(i, _)| i)
        .collect();
    if masking == Masking::LastTurn {
        trained = trained.last().copied().into_iter().collect();
    }
    for (i, sp) in s.spans.iter().enumerate() {
        if !trained.contains(&i) {
            let end = sp.token_end.min(s.assistant_masks.len());
            for m in &mut s.assistant_masks[sp.token_start.min(end)..end] {
                *m = 0;
            }
        }
    }
    s.spans = trained.into_iter().map(|i| s.spans[i]).collect();
    Ok(s)
}

/// `input_ids` where trained, -100 elsewhere (the Hugging Face / TRL convention).
pub fn labels(s: &RenderedSample) -> Vec<i32> {
    s.input_ids
        .iter()
        .zip(&s.assistant_masks)
        .map(|(&id, &m)| if m == 1 { id as i32 } else { -100 })
        .collect()
}

/// True when the window has an assistant message of its own (after `first_new`).
pub fn trains_something(w: &Window) -> bool {
    w.messages[w.first_new..]
        .iter()
        .any(|m| role(m) == "assistant")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::filters::tests::traj;
    use crate::view::StepView;
    use serde_json::json;

    /// A ChatML renderer with a one-token-per-char "tokenizer": a stand-in for the span-selection
    /// logic only. Agreement with real templates and tokenizers is tested against transformers.
    pub struct CharChatml;

    fn chatml(messages: &[Value], agp: bool) -> String {
        let mut s = String::new();
        for m in messages {
            let mut content = crate::view::content_text(m);
            for (name, args) in Traj::tool_calls(m) {
                content.push_str(&format!("<call {name} {args}>"));
            }
            s.push_str(&format!("<|im_start|>{}\n{}<|im_end|>\n", role(m), content));
        }
        if agp {
            s.push_str("<|im_start|>assistant\n");
        }
        s
    }

    impl ChatModel for CharChatml {
        fn sample(
            &self,
            messages: &[Value],
            _tools: &[Value],
        ) -> Result<RenderedSample, RenderError> {
            let text = chatml(messages, false);
            let input_ids: Vec<u32> = text.chars().map(|c| c as u32).collect();
            let mut assistant_masks = vec![0u8; input_ids.len()];
            let mut spans = Vec::new();
            for (i, m) in messages.iter().enumerate() {
                if role(m) != "assistant" {
                    continue;
                }
                let start = chatml(&messages[..i], true).chars().count();
                let end = chatml(&messages[..=i], false).chars().count() - 1;
                assistant_masks[start..end].fill(1);
                spans.push(Span {
                    message_index: i,
                    token_start: start,
                    token_end: end,
                });
            }
            Ok(RenderedSample {
                input_ids,
                assistant_masks,
                spans,
            })
        }
        fn count(&self, messages: &[Value], _tools: &[Value]) -> Result<usize, RenderError> {
            Ok(chatml(messages, false).chars().count())
        }
        fn prompt_ids(
            &self,
            messages: &[Value],
            _tools: &[Value],
        ) -> Result<Vec<u32>, RenderError> {
            Ok(chatml(messages, true).chars().map(|c| c as u32).collect())
        }
        fn tokenizer_fingerprint(&self) -> String {
            "chars".into()
        }
        fn template_fingerprint(&self) -> String {
            "chatml".into()
        }
        fn name(&self) -> String {
            "char-chatml".into()
        }
    }

    fn trained_text(r: &RenderedSample) -> String {
        r.input_ids
            .iter()
            .zip(&r.assistant_masks)
            .filter(|(_, m)| **m == 1)
            .map(|(&c, _)| char::from_u32(c).unwrap())
            .collect()
    }

    #[test]
    fn all_assistant_and_last_turn_masks() {
        let t = traj("a", 0, 1.0, 1);
        let ws = windows(&t).unwrap();
        assert_eq!(ws.len(), 1);
        let r = render_window(&CharChatml, &ws[0], &[], Masking::AllAssistant).unwrap();
        assert_eq!(
            trained_text(&r),
            "Look 0<call execute_bash {\"command\":\"ls 0\"}><|im_end|>Done.<call submit {}><|im_end|>"
        );
        let l = labels(&r);
        assert!(
            l.iter()
                .zip(&r.assistant_masks)
                .all(|(l, m)| (*l == -100) == (*m == 0))
        );
        let last = render_window(&CharChatml, &ws[0], &[], Masking::LastTurn).unwrap();
        assert_eq!(trained_text(&last), "Done.<call submit {}><|im_end|>");
        assert_eq!(last.spans.len(), 1);
    }

    #[test]
    fn compressed_trajectories_split_into_windows_training_only_new_turns() {
        let mut t = traj("a", 0, 1.0, 3);
        // messages: sys, user, (a0, t0), (a1, t1), (a2, t2), submit, obs => 10 messages;
        // assistant messages at 2, 4, 6, 8. Compression before step 3 replaced turns 1-2.
        assert_eq!(t.messages.len(), 10);
        let summary = json!({"role": "user", "content": "[COMPRESSED HISTORY - Turns 1-2]\n<Memory>ls</Memory>"});
        t.summaries = vec![summary.clone()];
        use dojo_trajectory::PromptPart::{Message, Summary};
        t.steps[2].prompt = Some(vec![Message(0), Message(1), Summary(0)]);
        t.steps[3].prompt = Some(vec![
            Message(0),
            Message(1),
            Summary(0),
            Message(6),
            Message(7),
        ]);
        let ws = windows(&t).unwrap();
        assert_eq!(ws.len(), 2);
        assert_eq!(ws[0].messages, t.messages[..6].to_vec());
        assert_eq!(ws[1].first_new, 3);
        assert_eq!(ws[1].messages[2], summary);
        assert_eq!(ws[1].messages.len(), 3 + 4);
        let r = render_window(&CharChatml, &ws[1], &[], Masking::AllAssistant).unwrap();
        assert_eq!(
            trained_text(&r),
            "Look 2<call execute_bash {\"command\":\"ls 2\"}><|im_end|>Done.<call submit {}><|im_end|>"
        );
    }

    #[test]
    fn inconsistent_steps_are_errors() {
        let mut t = traj("a", 0, 1.0, 1);
        t.steps.push(StepView {
            assistant_message: 99,
            prompt: None,
        });
        assert!(
            windows(&t)
                .unwrap_err()
                .to_string()
                .contains("out of order")
        );
        let mut t = traj("a", 0, 1.0, 1);
        t.steps[1].prompt = Some(vec![dojo_trajectory::PromptPart::Summary(4)]);
        assert!(windows(&t).unwrap_err().to_string().contains("summary 4"));
    }
}
