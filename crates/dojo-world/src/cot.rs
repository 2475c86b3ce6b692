//! Reverse-reasoning chain-of-thought for world-model SFT samples, with a judge filter
//! (SWE-World's "reverse reasoning").
//!
//! A teacher model is shown the SWT or SWR prompt *and the real result*, and asked to write the
//! reasoning a simulator would follow to reach that result without knowing it, then to copy the
//! result as JSON. The sample becomes `<think>reasoning</think>` + the exact target JSON. Three
//! checks stand between a teacher reply and the training data, because reasoning written with
//! the answer in view easily leaks it (hindsight):
//!
//! 1. the reply must be `<think>…</think>` followed by JSON equal to the real target (a teacher
//!    that "corrects" the result is rejected: `wrong_conclusion`);
//! 2. the reasoning must not mention the given result (`hindsight_phrase`, a fixed phrase list);
//! 3. a judge model reads the prompt, the reasoning and the result and answers
//!    `{"keep": true|false, "reason": …}`; it drops reasoning that only works backwards from the
//!    answer or does not support it.
//!
//! A rejection is an outcome ([`CotOutcome::Rejected`], counted by the caller); a model that
//! fails or answers in the wrong format is a [`WorldError`] (infrastructure), never a kept
//! sample.

use std::time::Duration;

use dojo_llm::{ChatBackend, ChatMessage, ChatRequest};
use dojo_rundir::clip::{self, Unit};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::client::{Role, WorldError, ask, unparseable};
use crate::parse::{ParseError, parse_swr_reply, parse_swt_reply, strip_think};
use crate::prompt::{Caps, Rendered, swr_messages, swt_messages};
use crate::{SwrContext, SwrTarget, SwtContext, SwtTarget};

/// Phrases that give away that the reasoning saw the result (lower-case substrings).
pub const HINDSIGHT_PHRASES: &[&str] = &[
    "real result",
    "real output",
    "actual result",
    "actual output",
    "given result",
    "given output",
    "provided result",
    "provided output",
    "we are told",
    "as shown in the result",
    "the expected json",
    "ground truth",
];

/// The teacher's system message.
pub const TEACHER_SYSTEM_PROMPT: &str = "\
You write training data for an execution simulator. You see a simulation task and, separately, \
the true result of running it. Write the step-by-step reasoning that a careful simulator, who \
does NOT know the result, would follow from the code, the patches and the command to predict \
it: trace what runs, what each relevant line does, what is printed, which tests pass or fail \
and why. Never mention or hint that you were given the result. Then output the result exactly \
as given.

Format: <think>your forward reasoning</think> followed by the result JSON, copied exactly.";

/// The judge's system message.
pub const JUDGE_SYSTEM_PROMPT: &str = "\
You review reasoning written for an execution simulator's training data. The reasoning must \
predict the result from the task alone. Reject it if it shows hindsight (it refers to knowing \
the result, asserts output details without deriving them, or works backwards from the answer), \
or if it does not support the final result. Answer with one JSON object: \
{\"keep\": true or false, \"reason\": \"one sentence\"}";

/// Which model's sample is being explained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CotKind {
    Swt,
    Swr,
}

/// What came of one sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum CotOutcome {
    /// The assistant message to train on: `<think>reasoning</think>\n` + the target JSON.
    Kept { assistant: String },
    /// Dropped: `wrong_conclusion`, `hindsight_phrase`, `no_reasoning` or `judge`, with detail.
    Rejected { reason: String, detail: String },
}

/// Decoding settings (SWE-World's teacher: temperature 0.6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CotConfig {
    pub teacher_model: String,
    pub judge_model: String,
    pub teacher_temperature: f64,
    #[serde(with = "dojo_rundir::secs")]
    pub timeout: Duration,
    pub caps: Caps,
}

impl Default for CotConfig {
    fn default() -> Self {
        CotConfig {
            teacher_model: String::new(),
            judge_model: String::new(),
            teacher_temperature: 0.6,
            timeout: Duration::from_secs(1200),
            caps: Caps::default(),
        }
    }
}

/// The teacher's messages: the simulator prompt's user section, then the true result.
pub fn teacher_messages(rendered: &Rendered, target_json: &str) -> Vec<ChatMessage> {
    let task = rendered
        .messages
        .last()
        .map(|m| m.text())
        .unwrap_or_default();
    let system = rendered
        .messages
        .first()
        .map(|m| m.text())
        .unwrap_or_default();
    vec![
        ChatMessage::system(TEACHER_SYSTEM_PROMPT),
        ChatMessage::user(format!(
            "## The simulator's instructions\n{system}\n\n## The simulation task\n{task}\n\n\
             ## The true result (never refer to it in your reasoning)\n{target_json}\n"
        )),
    ]
}

/// The judge's messages.
pub fn judge_messages(rendered: &Rendered, reasoning: &str, target_json: &str) -> Vec<ChatMessage> {
    let task = rendered
        .messages
        .last()
        .map(|m| m.text())
        .unwrap_or_default();
    vec![
        ChatMessage::system(JUDGE_SYSTEM_PROMPT),
        ChatMessage::user(format!(
            "## The simulation task\n{task}\n\n## The reasoning\n{reasoning}\n\n\
             ## The final result\n{target_json}\n"
        )),
    ]
}

/// Explains one SWT sample.
pub async fn swt_cot(
    teacher: &dyn ChatBackend,
    judge: &dyn ChatBackend,
    ctx: &SwtContext,
    target: &SwtTarget,
    cfg: &CotConfig,
) -> Result<CotOutcome, WorldError> {
    let rendered = swt_messages(ctx, &cfg.caps);
    let same = |text: &str| parse_swt_reply(text).map(|t| t == *target);
    explain(teacher, judge, &rendered, &target.to_json(), same, cfg).await
}

/// Explains one SWR sample.
pub async fn swr_cot(
    teacher: &dyn ChatBackend,
    judge: &dyn ChatBackend,
    ctx: &SwrContext,
    target: &SwrTarget,
    cfg: &CotConfig,
) -> Result<CotOutcome, WorldError> {
    let rendered = swr_messages(ctx, &cfg.caps);
    let same = |text: &str| parse_swr_reply(text).map(|t| t == *target);
    explain(teacher, judge, &rendered, &target.to_json(), same, cfg).await
}

async fn explain(
    teacher: &dyn ChatBackend,
    judge: &dyn ChatBackend,
    rendered: &Rendered,
    target_json: &str,
    same_result: impl Fn(&str) -> Result<bool, ParseError>,
    cfg: &CotConfig,
) -> Result<CotOutcome, WorldError> {
    let reject = |reason: &str, detail: String| {
        Ok(CotOutcome::Rejected {
            reason: reason.into(),
            detail,
        })
    };
    let req = ChatRequest {
        model: cfg.teacher_model.clone(),
        messages: teacher_messages(rendered, target_json),
        temperature: Some(cfg.teacher_temperature),
        ..ChatRequest::default()
    };
    let (reply, _) = ask(teacher, Role::Cot, req, cfg.timeout).await?;
    let Some(reasoning) = think_block(&reply) else {
        return reject("no_reasoning", "no <think>…</think> block".into());
    };
    match same_result(&reply) {
        Ok(true) => {}
        Ok(false) => {
            return reject(
                "wrong_conclusion",
                "the copied JSON differs from the real result".into(),
            );
        }
        Err(e) => return Err(unparseable(Role::Cot, teacher, e, &reply)),
    }
    let lower = reasoning.to_lowercase();
    if let Some(p) = HINDSIGHT_PHRASES.iter().find(|p| lower.contains(*p)) {
        return reject("hindsight_phrase", format!("mentions {p:?}"));
    }
    let req = ChatRequest {
        model: cfg.judge_model.clone(),
        messages: judge_messages(rendered, reasoning, target_json),
        temperature: Some(0.0),
        ..ChatRequest::default()
    };
    let (verdict, _) = ask(judge, Role::Cot, req, cfg.timeout).await?;
    let (keep, why) =
        parse_verdict(&verdict).map_err(|e| unparseable(Role::Cot, judge, e, &verdict))?;
    if !keep {
        return reject("judge", why);
    }
    Ok(CotOutcome::Kept {
        assistant: format!("<think>{reasoning}</think>\n{target_json}"),
    })
}

/// The text inside the first `<think>…</think>`, trimmed; `None` when absent or empty.
fn think_block(reply: &str) -> Option<&str> {
    let start = reply.find("<think>")? + "<think>".len();
    let end = start + reply[start..].find("</think>")?;
    Some(reply[start..end].trim()).filter(|r| !r.is_empty())
}

/// `{"keep": bool, "reason": string}` from the judge's reply.
fn parse_verdict(text: &str) -> Result<(bool, String), ParseError> {
    let body = strip_think(text)?.trim();
    let start = body.find('{').ok_or_else(|| ParseError::NoJson {
        snippet: clip::head(body, 120, Unit::Chars).to_string(),
    })?;
    let v: Value = serde_json::Deserializer::from_str(&body[start..])
        .into_iter::<Value>()
        .next()
        .and_then(Result::ok)
        .ok_or_else(|| ParseError::NoJson {
            snippet: clip::head(body, 120, Unit::Chars).to_string(),
        })?;
    let keep = v
        .get("keep")
        .ok_or(ParseError::MissingField { field: "keep" })?
        .as_bool()
        .ok_or_else(|| ParseError::WrongType {
            field: "keep",
            expected: "a boolean",
            found: v["keep"].to_string(),
        })?;
    let reason = v
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    Ok((keep, reason))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::tests::{Scripted, swt_ctx as ctx};

    fn target() -> SwtTarget {
        SwtTarget {
            stdout: "5\n".into(),
            stderr: String::new(),
            exit_code: 0,
        }
    }

    async fn run(teacher: &str, judge: &[&str]) -> (Result<CotOutcome, WorldError>, usize) {
        let t = Scripted::text(&[teacher]);
        let j = Scripted::text(judge);
        let out = swt_cot(&*t, &*j, &ctx(), &target(), &CotConfig::default()).await;
        (out, j.calls())
    }

    #[test]
    fn teacher_and_judge_prompt_layout() {
        let rendered = swt_messages(&ctx(), &Caps::default());
        let show = |ms: Vec<ChatMessage>| {
            ms.iter()
                .map(|m| format!("=== {:?} ===\n{}", m.role, m.text()))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let json = target().to_json();
        insta::assert_snapshot!(
            "cot_teacher_prompt",
            show(teacher_messages(&rendered, &json))
        );
        insta::assert_snapshot!(
            "cot_judge_prompt",
            show(judge_messages(&rendered, "a.py prints 5.", &json))
        );
    }

    #[tokio::test]
    async fn kept_samples_are_forward_reasoning_plus_the_exact_target() {
        let reply = format!(
            "<think>a.py adds 2 and 3 and prints 5.</think>\n{}",
            target().to_json()
        );
        let (out, judged) = run(&reply, &[r#"{"keep": true, "reason": "derived"}"#]).await;
        assert_eq!(
            out.unwrap(),
            CotOutcome::Kept {
                assistant: format!(
                    "<think>a.py adds 2 and 3 and prints 5.</think>\n{}",
                    target().to_json()
                )
            }
        );
        assert_eq!(judged, 1);
    }

    #[tokio::test]
    async fn hindsight_and_wrong_conclusions_are_dropped_before_the_judge() {
        let wrong =
            "<think>It prints 6.</think>{\"stdout\":\"6\\n\",\"stderr\":\"\",\"exit_code\":0}";
        let (out, judged) = run(wrong, &[]).await;
        assert!(
            matches!(out.unwrap(), CotOutcome::Rejected { reason, .. } if reason == "wrong_conclusion")
        );
        assert_eq!(judged, 0);
        let leak = format!("<think>The real output is 5.</think>{}", target().to_json());
        let (out, _) = run(&leak, &[]).await;
        assert!(
            matches!(out.unwrap(), CotOutcome::Rejected { reason, .. } if reason == "hindsight_phrase")
        );
        let bare = target().to_json();
        let (out, _) = run(&bare, &[]).await;
        assert!(
            matches!(out.unwrap(), CotOutcome::Rejected { reason, .. } if reason == "no_reasoning")
        );
    }

    #[tokio::test]
    async fn the_judge_decides_and_its_prose_is_an_error() {
        let reply = format!("<think>Prints 5.</think>{}", target().to_json());
        let (out, _) = run(
            &reply,
            &[r#"{"keep": false, "reason": "asserted, not derived"}"#],
        )
        .await;
        assert_eq!(
            out.unwrap(),
            CotOutcome::Rejected {
                reason: "judge".into(),
                detail: "asserted, not derived".into()
            }
        );
        let (out, _) = run(&reply, &["Looks fine to me."]).await;
        assert_eq!(out.unwrap_err().kind(), "unparseable_reply");
    }
}
