//! The verifier's protocol (SWE-Gym's outcome reward model): the prompt a judge model reads
//! for one candidate, and the score read from its reply. Both stages that use a verifier build
//! it here, `dojo select --selector verifier` (asking) and `dojo curate --verifier` (training
//! data), so a verifier is asked exactly what it was trained on.
//!
//! A judge model reads a candidate's interaction
//! log and answers YES or NO; the candidate's score is p(YES) = e^{l_YES} / (e^{l_YES} + e^{l_NO})
//! from the top log-probabilities of the answer token.
//!
//! The prompt follows SWE-Gym's (a judge system prompt, the trajectory between
//! `=== INTERACTION LOG ===` and `=== END INTERACTION ===`, the answer as
//! `<judgement>YES</judgement>` or `<judgement>NO</judgement>`), with one addition: the final
//! diff is appended, because dojo's trajectories end with a `submit` whose patch is not in the
//! conversation. Tool calls are written as XML (`<function=NAME><parameter=KEY>…`), as in the
//! OpenHands logs SWE-Gym trained on. Long logs keep the first user turn (the issue) and as many
//! of the last turns as fit; each observation is capped. The same rendering is what verifier
//! training data must use, so a verifier trained on dojo's data sees at selection time exactly
//! what it was trained on.
//!
//! SWE-Gym scores with SGLang's `choices=[" YES", " NO"]`. An OpenAI-compatible endpoint has no
//! such call, so the reply is generated greedily with `top_logprobs` and the first position
//! whose alternatives contain `YES` or `NO` is read. When only one of the two is among the
//! alternatives, the other gets the lowest listed log-probability, an upper bound on its own,
//! so the score leans away from the present answer (stated in the output as `bound`).

use dojo_llm::{ChatMessage, ChatResponse, MessageContent, Role};
use dojo_rundir::clip::{self, Keep, Unit};

pub const JUDGE_SYSTEM: &str = "You are an expert judge of software-engineering agents. You \
are shown the log of an agent working on an issue in a code repository, and the final diff it \
submitted. Decide whether that diff resolves the issue: it must fix the behaviour the issue \
describes, keep existing behaviour working and contain no unrelated or broken changes. Answer \
with exactly <judgement>YES</judgement> if it resolves the issue, or \
<judgement>NO</judgement> if it does not.";

/// Caps on what the judge reads.
#[derive(Debug, Clone, Copy)]
pub struct JudgeLimits {
    /// Characters kept of each observation (tool result), counted in bytes (cut on a char
    /// boundary, marked `[… N bytes cut]`).
    pub max_observation_chars: usize,
    /// Characters of the whole log, counted in bytes (turns in the middle are dropped first).
    pub max_log_chars: usize,
}

impl Default for JudgeLimits {
    fn default() -> Self {
        JudgeLimits {
            max_observation_chars: 2_000,
            max_log_chars: 48_000,
        }
    }
}

/// The head of `text` within `max` bytes (the log's budget is in bytes), the cut marked.
fn clip(text: &str, max: usize) -> String {
    clip::clip(text, max, Unit::Bytes, Keep::Head).0
}

fn render_message(m: &ChatMessage, limits: &JudgeLimits) -> String {
    let text = m
        .content
        .as_ref()
        .map(MessageContent::text)
        .unwrap_or_default();
    match m.role {
        Role::Tool => format!(
            "OBSERVATION:\n{}\n",
            clip(&text, limits.max_observation_chars)
        ),
        Role::Assistant => {
            let mut out = format!("ASSISTANT:\n{text}\n");
            for call in m.tool_calls.iter().flatten() {
                out.push_str(&format!("<function={}>\n", call.function.name));
                match serde_json::from_str::<serde_json::Value>(&call.function.arguments) {
                    Ok(serde_json::Value::Object(args)) => {
                        for (k, v) in args {
                            let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                            out.push_str(&format!("<parameter={k}>{v}</parameter>\n"));
                        }
                    }
                    _ => out.push_str(&call.function.arguments),
                }
                out.push_str("</function>\n");
            }
            out
        }
        Role::User => format!("USER:\n{text}\n"),
        _ => String::new(),
    }
}

/// The interaction log the judge reads: the conversation without the system prompt, then the
/// final diff, within `limits`.
pub fn interaction_log(messages: &[ChatMessage], patch: &str, limits: &JudgeLimits) -> String {
    let blocks: Vec<String> = messages
        .iter()
        .map(|m| render_message(m, limits))
        .filter(|b| !b.is_empty())
        .collect();
    let diff = format!(
        "FINAL DIFF:\n{}\n",
        if patch.trim().is_empty() {
            "(empty: no change)".to_string()
        } else {
            clip(patch, limits.max_log_chars / 4)
        }
    );
    let mut budget = limits.max_log_chars.saturating_sub(diff.len());
    let mut out = String::new();
    let mut rest: &[String] = &blocks;
    if let Some((first, tail)) = blocks.split_first() {
        // The first turn states the issue: always kept (clipped if it alone is too long).
        let first = clip(first, budget);
        budget = budget.saturating_sub(first.len());
        out.push_str(&first);
        rest = tail;
    }
    let mut kept = 0;
    let mut used = 0;
    for b in rest.iter().rev() {
        if used + b.len() > budget {
            break;
        }
        used += b.len();
        kept += 1;
    }
    if kept < rest.len() {
        out.push_str(&format!("[… {} turns omitted …]\n", rest.len() - kept));
    }
    for b in &rest[rest.len() - kept..] {
        out.push_str(b);
    }
    out.push_str(&diff);
    out
}

/// The judge's messages for one candidate.
pub fn judge_messages(
    messages: &[ChatMessage],
    patch: &str,
    limits: &JudgeLimits,
) -> Vec<ChatMessage> {
    vec![
        ChatMessage::system(JUDGE_SYSTEM),
        ChatMessage::new(
            Role::User,
            format!(
                "=== INTERACTION LOG ===\n{}=== END INTERACTION ===\n\nDid the final diff resolve \
                 the issue? Answer <judgement>YES</judgement> or <judgement>NO</judgement>.",
                interaction_log(messages, patch, limits)
            ),
        ),
    ]
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VerifierError {
    /// The endpoint answers without log-probabilities: every candidate would fail the same way.
    #[error(
        "the verifier endpoint returned no log-probabilities; it must support `logprobs` with \
         `top_logprobs` ≥ {TOP_LOGPROBS} (vLLM: `--max-logprobs {TOP_LOGPROBS}` or more, the \
         default; SGLang: `--enable-return-logprob`-capable builds; dojo serve: supported)"
    )]
    NoLogprobs,
    #[error("no YES or NO among the top {TOP_LOGPROBS} tokens of the reply {0:?}")]
    NoJudgement(String),
    /// The request's error and its causes as text (`dojo_rundir::error_chain`): this error is
    /// compared and cloned as a per-candidate result.
    #[error("verifier request failed: {0}")]
    Request(String),
}

/// Alternatives requested per position.
pub const TOP_LOGPROBS: u32 = 20;

/// p(YES) of a reply, and whether one side was only bounded (see the module docs).
pub fn yes_probability(resp: &ChatResponse) -> Result<(f64, bool), VerifierError> {
    let choice = resp.choices.first().ok_or(VerifierError::NoLogprobs)?;
    let content = choice
        .logprobs
        .as_ref()
        .and_then(|l| l.content.as_ref())
        .filter(|c| !c.is_empty())
        .ok_or(VerifierError::NoLogprobs)?;
    for position in content {
        let mut alternatives: Vec<(&str, f64)> = position
            .top_logprobs
            .iter()
            .map(|t| (t.token.as_str(), t.logprob))
            .collect();
        alternatives.push((position.token.as_str(), position.logprob));
        let find = |word: &str| {
            alternatives
                .iter()
                .filter(|(t, _)| t.trim().eq_ignore_ascii_case(word))
                .map(|&(_, l)| l)
                .fold(None, |best: Option<f64>, l| {
                    Some(best.map_or(l, |b| b.max(l)))
                })
        };
        let floor = alternatives
            .iter()
            .map(|&(_, l)| l)
            .fold(f64::INFINITY, f64::min);
        match (find("YES"), find("NO")) {
            (Some(y), Some(n)) => return Ok((sigmoid(y - n), false)),
            (Some(y), None) => return Ok((sigmoid(y - floor), true)),
            (None, Some(n)) => return Ok((sigmoid(floor - n), true)),
            (None, None) => {}
        }
    }
    let text = choice
        .message
        .content
        .as_ref()
        .map(MessageContent::text)
        .unwrap_or_default();
    Err(VerifierError::NoJudgement(text))
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dojo_llm::{Choice, ChoiceLogprobs, FunctionCall, TokenLogprob, ToolCall, TopLogprob};

    /// (sampled token, its logprob, the alternatives at that position)
    type Position<'a> = (&'a str, f64, &'a [(&'a str, f64)]);

    fn reply(tokens: &[Position]) -> ChatResponse {
        let content = tokens
            .iter()
            .map(|(t, l, top)| TokenLogprob {
                token: t.to_string(),
                logprob: *l,
                bytes: None,
                top_logprobs: top
                    .iter()
                    .map(|(t, l)| TopLogprob {
                        token: t.to_string(),
                        logprob: *l,
                        bytes: None,
                    })
                    .collect(),
                extra: Default::default(),
            })
            .collect();
        let text: String = tokens.iter().map(|(t, _, _)| *t).collect();
        serde_json::from_value::<ChatResponse>(serde_json::json!({"choices": []}))
            .map(|mut r| {
                r.choices.push(Choice {
                    index: 0,
                    message: ChatMessage::new(Role::Assistant, text),
                    finish_reason: Some("stop".into()),
                    logprobs: Some(ChoiceLogprobs {
                        content: Some(content),
                        extra: Default::default(),
                    }),
                    token_ids: None,
                    extra: Default::default(),
                });
                r
            })
            .unwrap()
    }

    #[test]
    fn p_yes_is_the_softmax_of_the_two_answers() {
        let r = reply(&[
            ("<judgement>", -0.01, &[("<judgement>", -0.01), ("I", -5.0)]),
            ("YES", -0.3, &[("YES", -0.3), ("NO", -1.5), ("Maybe", -4.0)]),
        ]);
        let (p, bound) = yes_probability(&r).unwrap();
        let want = (-0.3f64).exp() / ((-0.3f64).exp() + (-1.5f64).exp());
        assert!((p - want).abs() < 1e-12 && !bound, "{p}");
    }

    #[test]
    fn a_missing_side_is_bounded_by_the_lowest_alternative() {
        let r = reply(&[(" NO", -0.1, &[(" NO", -0.1), ("x", -6.0)])]);
        let (p, bound) = yes_probability(&r).unwrap();
        assert!(bound && (p - sigmoid(-6.0 + 0.1)).abs() < 1e-12, "{p}");
    }

    #[test]
    fn replies_without_logprobs_or_answers_are_errors() {
        let mut r = reply(&[("YES", -0.1, &[])]);
        r.choices[0].logprobs = None;
        assert_eq!(yes_probability(&r), Err(VerifierError::NoLogprobs));
        assert!(
            VerifierError::NoLogprobs
                .to_string()
                .contains("--max-logprobs")
        );
        let r = reply(&[("perhaps", -0.1, &[("maybe", -1.0)])]);
        assert!(
            matches!(yes_probability(&r), Err(VerifierError::NoJudgement(t)) if t == "perhaps")
        );
    }

    fn conversation(turns: usize) -> Vec<ChatMessage> {
        let mut m = vec![
            ChatMessage::system("SYSTEM PROMPT"),
            ChatMessage::new(Role::User, "The issue: f(0) is wrong"),
        ];
        for i in 0..turns {
            let mut a = ChatMessage::new(Role::Assistant, format!("step {i}"));
            a.tool_calls = Some(vec![ToolCall {
                id: format!("c{i}"),
                kind: "function".into(),
                function: FunctionCall {
                    name: "execute_bash".into(),
                    arguments: format!(r#"{{"command":"echo {i}"}}"#),
                },
                extra: Default::default(),
            }]);
            m.push(a);
            let mut o = ChatMessage::new(Role::Tool, "x".repeat(3000));
            o.tool_call_id = Some(format!("c{i}"));
            m.push(o);
        }
        m
    }

    #[test]
    fn the_log_keeps_the_issue_and_the_last_turns_within_the_caps() {
        let limits = JudgeLimits {
            max_observation_chars: 100,
            max_log_chars: 2_000,
        };
        let log = interaction_log(
            &conversation(30),
            "diff --git a/m.py b/m.py\n+fix\n",
            &limits,
        );
        assert!(!log.contains("SYSTEM PROMPT"));
        assert!(log.starts_with("USER:\nThe issue: f(0) is wrong"));
        assert!(log.contains("turns omitted"));
        assert!(log.contains("<function=execute_bash>\n<parameter=command>echo 29</parameter>"));
        assert!(!log.contains("echo 0<"));
        assert!(log.contains("[… 2900 bytes cut]"));
        assert!(log.ends_with("FINAL DIFF:\ndiff --git a/m.py b/m.py\n+fix\n\n"));
        assert!(log.len() <= 2_000 + 200, "{}", log.len());
        let short = interaction_log(&conversation(1), "", &JudgeLimits::default());
        assert!(!short.contains("omitted") && short.contains("(empty: no change)"));
    }

    #[test]
    fn judge_prompt_snapshot() {
        let m = judge_messages(
            &conversation(1),
            "diff --git a/m.py b/m.py\n-x = 0\n+x = 1\n",
            &JudgeLimits {
                max_observation_chars: 40,
                max_log_chars: 10_000,
            },
        );
        let text: Vec<String> = m
            .iter()
            .map(|m| {
                format!(
                    "[{:?}]\n{}",
                    m.role,
                    m.content
                        .as_ref()
                        .map(MessageContent::text)
                        .unwrap_or_default()
                )
            })
            .collect();
        insta::assert_snapshot!(text.join("\n"));
    }
}
