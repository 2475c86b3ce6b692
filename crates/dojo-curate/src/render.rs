//! Rendering a conversation to tokens with a loss mask.
//!
//! The mask is 1 on the agent's own tokens (its text, its tool calls and its end-of-turn token)
//! and 0 on everything else (system prompt, tool definitions, user turns, observations, the
//! template's role headers, and the newline a ChatML template puts after `<|im_end|>`, which the
//! model never generated).
//!
//! Spans are found by the incremental-prefix method, which needs nothing from the template but
//! that it be prefix-preserving: for assistant message `i`, `render(m[..i], generation_prompt)`
//! ends where the model started generating and `render(m[..=i])` ends after its turn; the span is
//! cut back to just after the last end-of-turn token in it. A template that is not
//! prefix-preserving (Qwen3 stripping earlier `<think>` blocks, for instance) is reported as an
//! unrenderable conversation rather than trained with wrong masks. Characters map to tokens
//! through the tokenizer's offsets on the *whole* rendered text, so the ids are exactly
//! `tokenize(apply_chat_template(messages))`, as Hugging Face computes `assistant_masks`.

use serde_json::Value;

use crate::view::{Traj, role};

/// A chat template plus the tokenizer of the target model.
pub trait ChatModel: Send + Sync {
    /// Renders OpenAI-shaped messages and tools to the prompt text.
    fn render(&self, messages: &[Value], tools: &[Value], add_generation_prompt: bool) -> Result<String, String>;
    /// Token ids of `text` (no special tokens added) and each token's byte range in `text`.
    fn encode(&self, text: &str) -> Result<(Vec<u32>, Vec<(usize, usize)>), String>;
    /// Number of tokens of `text` (may be faster than `encode`).
    fn count(&self, text: &str) -> Result<usize, String> {
        self.encode(text).map(|(ids, _)| ids.len())
    }
    /// The end-of-turn token text the model generates (`<|im_end|>` for ChatML), if any.
    fn end_of_turn(&self) -> Option<String>;
    /// sha256 of the tokenizer (vocabulary, merges, special tokens).
    fn tokenizer_fingerprint(&self) -> String;
    /// sha256 of the template source.
    fn template_fingerprint(&self) -> String;
    /// Human-readable model/tokenizer name for manifests.
    fn name(&self) -> String;
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
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "all-assistant" | "all_assistant" | "all" => Ok(Masking::AllAssistant),
            "last-turn" | "last_turn" | "last" => Ok(Masking::LastTurn),
            other => Err(format!("unknown masking strategy {other:?} (all-assistant | last-turn)")),
        }
    }
}

/// One training sample: a conversation window and the indices of the assistant messages in it
/// that the policy generated *from this window* (only those are trained).
#[derive(Debug, Clone)]
pub struct Window {
    /// 0 for an uncompressed trajectory; k for the window after the k-th compression.
    pub part: usize,
    pub messages: Vec<Value>,
    /// Messages before this index were context (possibly already trained in an earlier window).
    pub first_new: usize,
}

/// Splits a trajectory at its context-manager compressions, SWE-Master style: each window is the
/// compressed history sent to the policy plus the turns generated from it, up to the next
/// compression. Without compressions there is one window, the whole conversation.
pub fn windows(t: &Traj) -> Vec<Window> {
    if t.compressions.is_empty() {
        return vec![Window {
            part: 0,
            messages: t.messages.clone(),
            first_new: 0,
        }];
    }
    let mut out = Vec::new();
    let first_end = t.compressions[0].resume_at;
    out.push(Window {
        part: 0,
        messages: t.messages[..first_end].to_vec(),
        first_new: 0,
    });
    for (k, c) in t.compressions.iter().enumerate() {
        let end = t
            .compressions
            .get(k + 1)
            .map_or(t.messages.len(), |n| n.resume_at);
        let mut messages = c.messages.clone();
        let first_new = messages.len();
        messages.extend_from_slice(&t.messages[c.resume_at..end]);
        out.push(Window {
            part: k + 1,
            messages,
            first_new,
        });
    }
    // A window that generated nothing trains nothing.
    out.retain(|w| w.messages[w.first_new..].iter().any(|m| role(m) == "assistant"));
    out
}

/// A rendered sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub text: String,
    pub input_ids: Vec<u32>,
    /// 1 on trained tokens.
    pub assistant_masks: Vec<u8>,
    /// Byte spans of `text` that carry loss.
    pub spans: Vec<(usize, usize)>,
}

impl Rendered {
    /// `input_ids` where trained, -100 elsewhere (the Hugging Face / TRL convention).
    pub fn labels(&self) -> Vec<i32> {
        self.input_ids
            .iter()
            .zip(&self.assistant_masks)
            .map(|(&id, &m)| if m == 1 { id as i32 } else { -100 })
            .collect()
    }
    pub fn n_trained(&self) -> usize {
        self.assistant_masks.iter().filter(|&&m| m == 1).count()
    }
}

/// Renders one window and computes its mask.
pub fn render_window(
    model: &dyn ChatModel,
    w: &Window,
    tools: &[Value],
    masking: Masking,
) -> Result<Rendered, String> {
    let msgs = &w.messages;
    let text = model.render(msgs, tools, false)?;
    let mut targets: Vec<usize> = (w.first_new..msgs.len())
        .filter(|&i| role(&msgs[i]) == "assistant")
        .collect();
    if masking == Masking::LastTurn {
        targets = targets.last().copied().into_iter().collect();
    }
    let eot = model.end_of_turn();
    let mut spans = Vec::with_capacity(targets.len());
    for i in targets {
        let before = model.render(&msgs[..i], tools, true)?;
        let upto = if i + 1 == msgs.len() {
            text.clone()
        } else {
            model.render(&msgs[..=i], tools, false)?
        };
        if !text.starts_with(&upto) || !upto.starts_with(&before) {
            return Err(format!(
                "the template is not prefix-preserving at message {i} (rendering the conversation up to it is not a prefix of rendering all of it), so the agent's tokens cannot be located"
            ));
        }
        let start = before.len();
        let mut end = upto.len();
        if let Some(eot) = eot.as_deref()
            && let Some(p) = text[start..end].rfind(eot)
        {
            end = start + p + eot.len();
        }
        if end > start {
            spans.push((start, end));
        }
    }
    let (input_ids, offsets) = model.encode(&text)?;
    if offsets.len() != input_ids.len() {
        return Err(format!(
            "tokenizer returned {} offsets for {} ids",
            offsets.len(),
            input_ids.len()
        ));
    }
    let assistant_masks = mask_from_spans(&offsets, &spans);
    Ok(Rendered {
        text,
        input_ids,
        assistant_masks,
        spans,
    })
}

/// 1 for tokens whose byte range overlaps a span: Hugging Face's `return_assistant_tokens_mask`
/// marks `char_to_token(start) ..= char_to_token(end - 1)`, so a token straddling a span edge is
/// trained. Offsets and spans are both sorted.
pub fn mask_from_spans(offsets: &[(usize, usize)], spans: &[(usize, usize)]) -> Vec<u8> {
    let mut mask = vec![0u8; offsets.len()];
    let mut s = 0;
    for (k, &(start, end)) in offsets.iter().enumerate() {
        while s < spans.len() && spans[s].1 <= start {
            s += 1;
        }
        if s == spans.len() {
            break;
        }
        let (a, b) = spans[s];
        if start < b && end.max(start + 1) > a {
            mask[k] = 1;
        }
    }
    mask
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::filters::tests::traj;
    use crate::view::Compression;
    use serde_json::json;

    /// A ChatML renderer with a one-token-per-char "tokenizer" — a stand-in for unit-testing the
    /// span logic only; agreement with real templates/tokenizers is tested against transformers.
    pub struct CharChatml;
    impl ChatModel for CharChatml {
        fn render(&self, messages: &[Value], _tools: &[Value], agp: bool) -> Result<String, String> {
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
            Ok(s)
        }
        fn encode(&self, text: &str) -> Result<(Vec<u32>, Vec<(usize, usize)>), String> {
            Ok(text
                .char_indices()
                .map(|(i, c)| (c as u32, (i, i + c.len_utf8())))
                .unzip())
        }
        fn end_of_turn(&self) -> Option<String> {
            Some("<|im_end|>".into())
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

    fn trained_text(r: &Rendered) -> String {
        r.input_ids
            .iter()
            .zip(&r.assistant_masks)
            .filter(|(_, m)| **m == 1)
            .map(|(&c, _)| char::from_u32(c).unwrap())
            .collect()
    }

    #[test]
    fn masks_cover_assistant_text_calls_and_end_of_turn_only() {
        let t = traj("a", 0, 1.0, 1);
        let w = &windows(&t)[0];
        let r = render_window(&CharChatml, w, &[], Masking::AllAssistant).unwrap();
        assert_eq!(
            trained_text(&r),
            "Look 0<call execute_bash {\"command\":\"ls 0\"}><|im_end|>Done.<call submit {}><|im_end|>"
        );
        let labels = r.labels();
        assert_eq!(labels.len(), r.input_ids.len());
        assert!(labels.iter().zip(&r.assistant_masks).all(|(l, m)| (*l == -100) == (*m == 0)));
        let last = render_window(&CharChatml, w, &[], Masking::LastTurn).unwrap();
        assert_eq!(trained_text(&last), "Done.<call submit {}><|im_end|>");
    }

    #[test]
    fn non_prefix_preserving_template_is_an_error() {
        struct Drops;
        impl ChatModel for Drops {
            fn render(&self, m: &[Value], t: &[Value], agp: bool) -> Result<String, String> {
                // Like Qwen3: history assistant turns lose their text once a later turn exists.
                let n = m.len();
                let trimmed: Vec<Value> = m
                    .iter()
                    .enumerate()
                    .map(|(i, x)| {
                        if role(x) == "assistant" && i + 2 < n {
                            json!({"role": "assistant", "content": ""})
                        } else {
                            x.clone()
                        }
                    })
                    .collect();
                CharChatml.render(&trimmed, t, agp)
            }
            fn encode(&self, text: &str) -> Result<(Vec<u32>, Vec<(usize, usize)>), String> {
                CharChatml.encode(text)
            }
            fn end_of_turn(&self) -> Option<String> {
                CharChatml.end_of_turn()
            }
            fn tokenizer_fingerprint(&self) -> String {
                String::new()
            }
            fn template_fingerprint(&self) -> String {
                String::new()
            }
            fn name(&self) -> String {
                String::new()
            }
        }
        let t = traj("a", 0, 1.0, 2);
        let e = render_window(&Drops, &windows(&t)[0], &[], Masking::AllAssistant).unwrap_err();
        assert!(e.contains("not prefix-preserving at message 2"), "{e}");
    }

    #[test]
    fn compressed_trajectories_split_into_windows_training_only_new_turns() {
        let mut t = traj("a", 0, 1.0, 3);
        // messages: sys, user, (a0, t0), (a1, t1), (a2, t2), submit, obs => 10 messages.
        assert_eq!(t.messages.len(), 10);
        let summary = json!({"role": "user", "content": "[COMPRESSED HISTORY - Turns 1-2]\n<Memory>ls</Memory>"});
        t.compressions = vec![Compression {
            resume_at: 6,
            messages: vec![t.messages[0].clone(), t.messages[1].clone(), summary.clone()],
        }];
        let ws = windows(&t);
        assert_eq!(ws.len(), 2);
        assert_eq!(ws[0].messages.len(), 6);
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
    fn straddling_tokens_are_trained_like_hugging_face() {
        let offsets = [(0, 2), (2, 5), (5, 6), (6, 9)];
        assert_eq!(mask_from_spans(&offsets, &[(3, 6)]), vec![0, 1, 1, 0]);
        assert_eq!(mask_from_spans(&offsets, &[(3, 4)]), vec![0, 1, 0, 0]);
        assert_eq!(mask_from_spans(&offsets, &[(0, 2), (6, 9)]), vec![1, 0, 0, 1]);
        assert_eq!(mask_from_spans(&offsets, &[]), vec![0, 0, 0, 0]);
    }
}
