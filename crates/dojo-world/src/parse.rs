//! Strict parsers for world-model replies.
//!
//! A reply is accepted when, after dropping any reasoning up to the last `</think>`, it contains
//! a JSON object with the required keys and types: the whole reply, a fenced ```` ```json ````
//! block, or an object embedded in surrounding text (tried in that order; the first object that
//! validates wins). Anything else is a [`ParseError`]: the simulated environment reports it as an
//! infrastructure failure and never substitutes a value (no default exit code, no reward 0).

use dojo_rundir::clip::{self, Unit};
use dojo_rundir::json::describe;
use serde_json::{Map, Value};

use crate::context::{SwrTarget, SwtTarget};

/// Why a reply could not be used. Each variant names what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("empty reply")]
    Empty,
    /// `<think>` opened but never closed: the reply was cut off inside its reasoning.
    #[error("reasoning never finished (no </think> after <think>)")]
    UnclosedThink,
    #[error("no JSON object in the reply; it starts {snippet:?}")]
    NoJson { snippet: String },
    #[error("JSON reply lacks the field {field:?}")]
    MissingField { field: &'static str },
    #[error("JSON field {field:?} should be {expected}, found {found}")]
    WrongType {
        field: &'static str,
        expected: &'static str,
        found: String,
    },
}

/// Parses SWT's reply into `{stdout, stderr, exit_code}`.
pub fn parse_swt_reply(text: &str) -> Result<SwtTarget, ParseError> {
    parse_with(text, |obj| {
        Ok(SwtTarget {
            stdout: string_field(obj, "stdout")?,
            stderr: string_field(obj, "stderr")?,
            exit_code: exit_code_field(obj)?,
        })
    })
}

/// Parses SWR's reply into `{test_report, reward}`; the reward must be 0 or 1.
pub fn parse_swr_reply(text: &str) -> Result<SwrTarget, ParseError> {
    parse_with(text, |obj| {
        Ok(SwrTarget {
            test_report: string_field(obj, "test_report")?,
            reward: reward_field(obj)?,
        })
    })
}

/// The text after the reasoning: everything after the last `</think>`.
pub fn strip_think(text: &str) -> Result<&str, ParseError> {
    if let Some(i) = text.rfind("</think>") {
        return Ok(&text[i + "</think>".len()..]);
    }
    if text.trim_start().starts_with("<think>") {
        return Err(ParseError::UnclosedThink);
    }
    Ok(text)
}

fn parse_with<T>(
    text: &str,
    validate: impl Fn(&Map<String, Value>) -> Result<T, ParseError>,
) -> Result<T, ParseError> {
    let body = strip_think(text)?.trim();
    if body.is_empty() {
        return Err(ParseError::Empty);
    }
    let mut last_err = None;
    for obj in candidates(body) {
        match validate(&obj) {
            Ok(v) => return Ok(v),
            Err(e) => last_err = Some(e),
        }
    }
    Err(last_err.unwrap_or_else(|| ParseError::NoJson {
        snippet: clip::head(body, 120, Unit::Chars).to_string(),
    }))
}

/// JSON objects in the reply, most explicit first: the whole text, fenced blocks, then objects
/// starting at each `{` of the text.
fn candidates(body: &str) -> Vec<Map<String, Value>> {
    let mut out = Vec::new();
    let mut push = |s: &str| {
        if let Ok(Value::Object(m)) = serde_json::from_str::<Value>(s.trim()) {
            out.push(m);
        }
    };
    push(body);
    for block in fenced_blocks(body) {
        push(block);
    }
    for (i, _) in body.match_indices('{') {
        let mut stream = serde_json::Deserializer::from_str(&body[i..]).into_iter::<Value>();
        if let Some(Ok(Value::Object(m))) = stream.next() {
            out.push(m);
        }
    }
    out
}

/// Contents of ```` ``` ```` fences (the info string, e.g. `json`, is dropped).
fn fenced_blocks(body: &str) -> Vec<&str> {
    let mut blocks = Vec::new();
    let mut rest = body;
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        let content_start = after.find('\n').map(|n| n + 1).unwrap_or(after.len());
        let content = &after[content_start..];
        match content.find("```") {
            Some(close) => {
                blocks.push(&content[..close]);
                rest = &content[close + 3..];
            }
            None => break,
        }
    }
    blocks
}

fn field<'a>(obj: &'a Map<String, Value>, name: &'static str) -> Result<&'a Value, ParseError> {
    obj.get(name)
        .ok_or(ParseError::MissingField { field: name })
}

fn string_field(obj: &Map<String, Value>, name: &'static str) -> Result<String, ParseError> {
    match field(obj, name)? {
        Value::String(s) => Ok(s.clone()),
        other => Err(ParseError::WrongType {
            field: name,
            expected: "a string",
            found: describe(other),
        }),
    }
}

fn exit_code_field(obj: &Map<String, Value>) -> Result<i32, ParseError> {
    let v = field(obj, "exit_code")?;
    v.as_i64()
        .and_then(|n| i32::try_from(n).ok())
        .ok_or_else(|| ParseError::WrongType {
            field: "exit_code",
            expected: "an integer",
            found: describe(v),
        })
}

fn reward_field(obj: &Map<String, Value>) -> Result<u8, ParseError> {
    let v = field(obj, "reward")?;
    match v.as_u64() {
        Some(0) => Ok(0),
        Some(1) => Ok(1),
        _ => Err(ParseError::WrongType {
            field: "reward",
            expected: "0 or 1",
            found: describe(v),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plain_fenced_and_thinking_replies() {
        let t = parse_swt_reply(r#"{"stdout":"hi\n","stderr":"","exit_code":0}"#).unwrap();
        assert_eq!(t.stdout, "hi\n");
        let fenced = "```json\n{\"stdout\": \"\", \"stderr\": \"boom\", \"exit_code\": 1}\n```";
        assert_eq!(parse_swt_reply(fenced).unwrap().exit_code, 1);
        let think =
            "<think>the test {fails}</think>\n{\"test_report\": \"1 failed\", \"reward\": 0}";
        let r = parse_swr_reply(think).unwrap();
        assert_eq!((r.test_report.as_str(), r.reward), ("1 failed", 0));
        let embedded = "Here is the result: {\"test_report\": \"ok\", \"reward\": 1} as asked.";
        assert_eq!(parse_swr_reply(embedded).unwrap().reward, 1);
    }

    #[test]
    fn bad_replies_are_errors_not_defaults() {
        assert_eq!(parse_swt_reply("   "), Err(ParseError::Empty));
        assert_eq!(
            parse_swt_reply("<think>still thinking"),
            Err(ParseError::UnclosedThink)
        );
        assert!(matches!(
            parse_swt_reply("The command prints hello."),
            Err(ParseError::NoJson { .. })
        ));
        assert_eq!(
            parse_swt_reply(r#"{"stdout":"","exit_code":0}"#),
            Err(ParseError::MissingField { field: "stderr" })
        );
        assert!(matches!(
            parse_swt_reply(r#"{"stdout":"","stderr":"","exit_code":"0"}"#),
            Err(ParseError::WrongType {
                field: "exit_code",
                ..
            })
        ));
        assert!(matches!(
            parse_swr_reply(r#"{"test_report":"","reward":0.5}"#),
            Err(ParseError::WrongType {
                field: "reward",
                ..
            })
        ));
        assert!(matches!(
            parse_swr_reply(r#"{"test_report":"","reward":2}"#),
            Err(ParseError::WrongType {
                field: "reward",
                ..
            })
        ));
    }

    #[test]
    fn a_valid_object_after_an_unrelated_one_is_found() {
        let text =
            "Config is {\"a\": 1}. Answer: {\"stdout\":\"x\",\"stderr\":\"\",\"exit_code\":3}";
        assert_eq!(parse_swt_reply(text).unwrap().exit_code, 3);
    }

    proptest! {
        /// Text without a brace cannot contain JSON: always an error, never a value.
        #[test]
        fn prose_is_never_parsed(text in "[^{}]{0,400}") {
            prop_assert!(parse_swt_reply(&text).is_err());
            prop_assert!(parse_swr_reply(&text).is_err());
        }

        /// Whatever the model wraps it in, the serialized target comes back unchanged.
        #[test]
        fn targets_round_trip(
            stdout in any::<String>(),
            stderr in any::<String>(),
            exit_code in any::<i32>(),
            reasoning in "[^<]{0,80}",
            wrap in 0..4u8,
        ) {
            let t = SwtTarget { stdout, stderr, exit_code };
            let json = t.to_json();
            let text = match wrap {
                0 => json,
                1 => format!("```json\n{json}\n```"),
                2 => format!("<think>{reasoning}</think>\n{json}"),
                _ => format!("<think>{reasoning}</think>Result:\n```\n{json}\n```\n"),
            };
            prop_assert_eq!(parse_swt_reply(&text).unwrap(), t);
        }

        #[test]
        fn rewards_round_trip(report in any::<String>(), reward in 0..2u8, reasoning in "[^<]{0,80}") {
            let r = SwrTarget { test_report: report, reward };
            let text = format!("<think>{reasoning}</think>{}", r.to_json());
            prop_assert_eq!(parse_swr_reply(&text).unwrap(), r);
        }

        /// Arbitrary input never panics.
        #[test]
        fn arbitrary_text_never_panics(text in any::<String>()) {
            let _ = parse_swt_reply(&text);
            let _ = parse_swr_reply(&text);
        }
    }
}
