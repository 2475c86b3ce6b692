//! Action formats: how a model's turn carries its tool call, and how we turn a call back into
//! that form (for replayed and synthesized trajectories).
//!
//! - `native`: OpenAI `tool_calls` (arguments are a JSON string).
//! - `xml`: R2E-Gym / SWE-Master / OpenHands text format,
//!   `<function=NAME>\n<parameter=K>V</parameter>\n</function>`.
//! - `hermes`: `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>` (Qwen2.5, Hermes).
//! - `qwen3-coder`: `<tool_call>\n<function=NAME>\n<parameter=K>\nV\n</parameter>\n</function>\n</tool_call>`.
//!
//! One call is executed per turn (the first). Text before the call is the thought.

use std::sync::LazyLock;

use dojo_llm::{ChatMessage, MessageContent, Role, ToolCall};
use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The reminder sent after a turn without a valid call (R2E-Gym's wording, kept verbatim because
/// curation filters recognise it).
pub const CONTINUE_MSG: &str = "You forgot to use a function call in your response. \nYOU MUST USE A FUNCTION CALL IN EACH RESPONSE.\n\nIMPORTANT: YOU SHOULD NEVER ASK FOR HUMAN HELP.";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActionFormat {
    Native,
    Xml,
    Hermes,
    Qwen3Coder,
}

impl ActionFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            ActionFormat::Native => "native",
            ActionFormat::Xml => "xml",
            ActionFormat::Hermes => "hermes",
            ActionFormat::Qwen3Coder => "qwen3-coder",
        }
    }
    pub fn parse_name(s: &str) -> Option<Self> {
        match s {
            "native" => Some(ActionFormat::Native),
            "xml" => Some(ActionFormat::Xml),
            "hermes" => Some(ActionFormat::Hermes),
            "qwen3-coder" | "qwen3_coder" => Some(ActionFormat::Qwen3Coder),
            _ => None,
        }
    }
    /// Text formats describe the tools in the prompt; native sends `tools` in the request.
    pub fn is_text(self) -> bool {
        self != ActionFormat::Native
    }
}

/// One tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub name: String,
    pub arguments: Map<String, Value>,
    /// Native `tool_calls[i].id`.
    pub id: Option<String>,
}

/// A turn that held a call.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedTurn {
    pub thought: String,
    pub call: Call,
    /// Ids of further native calls in the same turn; each still needs a `tool` answer.
    pub skipped_ids: Vec<String>,
}

/// Why a turn held no usable call. A value, not a wrapper of errors: it is recorded per turn
/// (its [`FormatError::kind`]), cloned into the observation the model is shown and compared by
/// the format filter, so `BadArguments` keeps the JSON parser's message as text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("no function call found")]
    NoCall,
    #[error("function call written in a different format than the configured {expected}")]
    WrongFormat { expected: &'static str },
    #[error("function call has an empty name")]
    EmptyName,
    #[error("arguments of `{name}` are not a JSON object: {detail}")]
    BadArguments { name: String, detail: String },
}

impl FormatError {
    /// Machine-readable kind for records.
    pub fn kind(&self) -> &'static str {
        match self {
            FormatError::NoCall => "no_call",
            FormatError::WrongFormat { .. } => "wrong_format",
            FormatError::EmptyName => "empty_name",
            FormatError::BadArguments { .. } => "bad_arguments",
        }
    }
}

static PARAM: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?s)<parameter\s*=\s*([^>]+)>(.*?)</parameter>")
        .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

/// Parse the assistant message of one turn.
pub fn parse(format: ActionFormat, msg: &ChatMessage) -> Result<ParsedTurn, FormatError> {
    let text = msg
        .content
        .as_ref()
        .map(MessageContent::text)
        .unwrap_or_default();
    match format {
        ActionFormat::Native => parse_native(msg, &text),
        ActionFormat::Xml => {
            let r = parse_xml_function(&text);
            if matches!(r, Err(FormatError::NoCall))
                && (text.contains("<tool_call>") || has_native(msg))
            {
                return Err(FormatError::WrongFormat { expected: "xml" });
            }
            r
        }
        ActionFormat::Hermes => {
            let r = parse_hermes(&text);
            if matches!(r, Err(FormatError::NoCall))
                && (text.contains("<function=") || has_native(msg))
            {
                return Err(FormatError::WrongFormat { expected: "hermes" });
            }
            r
        }
        ActionFormat::Qwen3Coder => {
            let r = match tag_body(&text, "<tool_call>", "</tool_call>") {
                Some((before, body)) => parse_xml_function(body).map(|mut t| {
                    t.thought = before.trim().to_string();
                    t
                }),
                // Lenient: a bare <function=…> block is the same call without its wrapper.
                None => parse_xml_function(&text),
            };
            if matches!(r, Err(FormatError::NoCall)) && has_native(msg) {
                return Err(FormatError::WrongFormat {
                    expected: "qwen3-coder",
                });
            }
            r
        }
    }
}

fn has_native(msg: &ChatMessage) -> bool {
    msg.tool_calls.as_ref().is_some_and(|c| !c.is_empty())
}

fn parse_native(msg: &ChatMessage, text: &str) -> Result<ParsedTurn, FormatError> {
    let calls = msg.tool_calls.as_deref().unwrap_or_default();
    let Some(first) = calls.first() else {
        if text.contains("<function=") || text.contains("<tool_call>") {
            return Err(FormatError::WrongFormat { expected: "native" });
        }
        return Err(FormatError::NoCall);
    };
    let name = first.function.name.trim().to_string();
    if name.is_empty() {
        return Err(FormatError::EmptyName);
    }
    let raw = first.function.arguments.trim();
    let arguments = if raw.is_empty() {
        Map::new()
    } else {
        match serde_json::from_str::<Value>(raw) {
            Ok(Value::Object(m)) => m,
            // Some servers double-encode: a JSON string holding the object.
            Ok(Value::String(inner)) => match serde_json::from_str::<Value>(&inner) {
                Ok(Value::Object(m)) => m,
                _ => {
                    return Err(FormatError::BadArguments {
                        name,
                        detail: "a string, not an object".into(),
                    });
                }
            },
            Ok(other) => {
                return Err(FormatError::BadArguments {
                    name,
                    detail: format!("got {other}"),
                });
            }
            Err(e) => {
                return Err(FormatError::BadArguments {
                    name,
                    detail: e.to_string(),
                });
            }
        }
    };
    Ok(ParsedTurn {
        thought: text.trim().to_string(),
        call: Call {
            name,
            arguments,
            id: Some(first.id.clone()),
        },
        skipped_ids: calls[1..].iter().map(|c| c.id.clone()).collect(),
    })
}

/// The text before `open` and the body up to `close` (or to the end when the close tag is
/// missing, as when `close` was a stop sequence).
fn tag_body<'t>(text: &'t str, open: &str, close: &str) -> Option<(&'t str, &'t str)> {
    let start = text.find(open)?;
    let rest = &text[start + open.len()..];
    let body = match rest.find(close) {
        Some(end) => &rest[..end],
        None => rest,
    };
    Some((&text[..start], body))
}

fn parse_xml_function(text: &str) -> Result<ParsedTurn, FormatError> {
    let start = text.find("<function=").ok_or(FormatError::NoCall)?;
    let after = &text[start + "<function=".len()..];
    let gt = after.find('>').ok_or(FormatError::NoCall)?;
    let name = after[..gt].trim().to_string();
    if name.is_empty() || name.contains('<') {
        return Err(FormatError::EmptyName);
    }
    let rest = &after[gt + 1..];
    let body = match rest.find("</function>") {
        Some(end) => &rest[..end],
        None => rest,
    };
    let mut arguments = Map::new();
    for cap in PARAM.captures_iter(body) {
        let key = cap[1].trim().to_string();
        let mut v = &cap[2];
        v = v.strip_prefix('\n').unwrap_or(v);
        v = v.strip_suffix('\n').unwrap_or(v);
        // First occurrence wins, like a dict built left to right would keep the last; R2E keeps
        // the last, and so do we.
        arguments.insert(key, Value::String(v.to_string()));
    }
    Ok(ParsedTurn {
        thought: text[..start].trim().to_string(),
        call: Call {
            name,
            arguments,
            id: None,
        },
        skipped_ids: Vec::new(),
    })
}

fn parse_hermes(text: &str) -> Result<ParsedTurn, FormatError> {
    let (before, body) =
        tag_body(text, "<tool_call>", "</tool_call>").ok_or(FormatError::NoCall)?;
    let v: Value = serde_json::from_str(body.trim()).map_err(|e| FormatError::BadArguments {
        name: "?".into(),
        detail: format!("tool_call is not JSON: {e}"),
    })?;
    let name = v
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim()
        .to_string();
    if name.is_empty() {
        return Err(FormatError::EmptyName);
    }
    let arguments = match v.get("arguments").or_else(|| v.get("parameters")) {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(m)) => m,
            _ => {
                return Err(FormatError::BadArguments {
                    name,
                    detail: "arguments string is not a JSON object".into(),
                });
            }
        },
        Some(other) => {
            return Err(FormatError::BadArguments {
                name,
                detail: format!("got {other}"),
            });
        }
    };
    Ok(ParsedTurn {
        thought: before.trim().to_string(),
        call: Call {
            name,
            arguments,
            id: None,
        },
        skipped_ids: Vec::new(),
    })
}

/// Text of an argument value for the XML formats.
fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The XML function block: multi-line values go on their own lines.
pub fn render_xml_function(call: &Call, always_newline: bool) -> String {
    let mut s = format!("<function={}>\n", call.name);
    for (k, v) in &call.arguments {
        let text = value_text(v);
        if always_newline || text.contains('\n') {
            s.push_str(&format!("<parameter={k}>\n{text}\n</parameter>\n"));
        } else {
            s.push_str(&format!("<parameter={k}>{text}</parameter>\n"));
        }
    }
    s.push_str("</function>");
    s
}

/// The assistant message that makes `call` in `format`, with `thought` before it.
pub fn render(format: ActionFormat, thought: &str, call: &Call) -> ChatMessage {
    let with_thought = |block: String| {
        if thought.is_empty() {
            block
        } else {
            format!("{thought}\n\n{block}")
        }
    };
    match format {
        ActionFormat::Native => {
            let args = Value::Object(call.arguments.clone()).to_string();
            let id = call.id.clone().unwrap_or_else(|| "call_0".to_string());
            ChatMessage {
                role: Role::Assistant,
                content: if thought.is_empty() {
                    None
                } else {
                    Some(MessageContent::Text(thought.to_string()))
                },
                name: None,
                tool_calls: Some(vec![ToolCall::function(id, &call.name, args)]),
                tool_call_id: None,
                extra: Map::new(),
            }
        }
        ActionFormat::Xml => ChatMessage::assistant(with_thought(render_xml_function(call, false))),
        ActionFormat::Qwen3Coder => ChatMessage::assistant(with_thought(format!(
            "<tool_call>\n{}\n</tool_call>",
            render_xml_function(call, true)
        ))),
        ActionFormat::Hermes => {
            let v = serde_json::json!({"name": call.name, "arguments": Value::Object(call.arguments.clone())});
            ChatMessage::assistant(with_thought(format!("<tool_call>\n{v}\n</tool_call>")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn call(name: &str, args: Value) -> Call {
        Call {
            name: name.into(),
            arguments: args.as_object().cloned().unwrap(),
            id: None,
        }
    }

    #[test]
    fn xml_parses_r2e_style_turns() {
        let m = ChatMessage::assistant(
            "Let me look.\n\n<function=str_replace_editor>\n<parameter=command>view</parameter>\n<parameter=path>/testbed/a.py</parameter>\n</function>",
        );
        let t = parse(ActionFormat::Xml, &m).unwrap();
        assert_eq!(t.thought, "Let me look.");
        assert_eq!(
            t.call,
            call(
                "str_replace_editor",
                json!({"command": "view", "path": "/testbed/a.py"})
            )
        );
        // Cut at a `</function>` stop sequence.
        let m = ChatMessage::assistant("<function=submit>\n");
        assert_eq!(parse(ActionFormat::Xml, &m).unwrap().call.name, "submit");
        // Wrong format for the parser.
        let m = ChatMessage::assistant("<tool_call>{\"name\": \"submit\"}</tool_call>");
        assert_eq!(
            parse(ActionFormat::Xml, &m).unwrap_err().kind(),
            "wrong_format"
        );
        assert_eq!(
            parse(ActionFormat::Xml, &ChatMessage::assistant("I am done.")).unwrap_err(),
            FormatError::NoCall
        );
    }

    #[test]
    fn native_handles_bad_json_and_extra_calls() {
        let mut m = ChatMessage {
            content: None,
            ..ChatMessage::assistant("")
        };
        m.tool_calls = Some(vec![
            ToolCall::function("a", "execute_bash", "{\"command\": \"ls\"}"),
            ToolCall::function("b", "submit", "{}"),
        ]);
        let t = parse(ActionFormat::Native, &m).unwrap();
        assert_eq!(t.skipped_ids, ["b"]);
        assert_eq!(t.call.id.as_deref(), Some("a"));
        m.tool_calls = Some(vec![ToolCall::function(
            "a",
            "execute_bash",
            "{\"command\": ",
        )]);
        assert_eq!(
            parse(ActionFormat::Native, &m).unwrap_err().kind(),
            "bad_arguments"
        );
        m.tool_calls = Some(vec![ToolCall::function("a", "execute_bash", "[1]")]);
        assert_eq!(
            parse(ActionFormat::Native, &m).unwrap_err().kind(),
            "bad_arguments"
        );
        let text = ChatMessage::assistant("<function=submit></function>");
        assert_eq!(
            parse(ActionFormat::Native, &text).unwrap_err().kind(),
            "wrong_format"
        );
    }

    #[test]
    fn hermes_and_qwen3_coder_parse_published_shapes() {
        let m = ChatMessage::assistant(
            "<think>hm</think>\n<tool_call>\n{\"name\": \"execute_bash\", \"arguments\": {\"command\": \"ls -la\"}}\n</tool_call>",
        );
        let t = parse(ActionFormat::Hermes, &m).unwrap();
        assert_eq!(t.thought, "<think>hm</think>");
        assert_eq!(t.call, call("execute_bash", json!({"command": "ls -la"})));
        let m = ChatMessage::assistant(
            "ok\n<tool_call>\n<function=str_replace_editor>\n<parameter=command>\nview\n</parameter>\n<parameter=view_range>\n[1, 5]\n</parameter>\n</function>\n</tool_call>",
        );
        let t = parse(ActionFormat::Qwen3Coder, &m).unwrap();
        assert_eq!(t.thought, "ok");
        assert_eq!(
            t.call,
            call(
                "str_replace_editor",
                json!({"command": "view", "view_range": "[1, 5]"})
            )
        );
        let bad =
            ChatMessage::assistant("<tool_call>{\"name\": \"x\", \"arguments\": </tool_call>");
        assert_eq!(
            parse(ActionFormat::Hermes, &bad).unwrap_err().kind(),
            "bad_arguments"
        );
        let unnamed = ChatMessage::assistant("<tool_call>{\"arguments\": {}}</tool_call>");
        assert_eq!(
            parse(ActionFormat::Hermes, &unnamed).unwrap_err(),
            FormatError::EmptyName
        );
    }

    fn name_strategy() -> impl Strategy<Value = String> {
        "[a-z][a-z0-9_]{0,20}"
    }
    /// Values free of the tags that delimit them; anything else (newlines, quotes, unicode,
    /// angle brackets) is fair game.
    fn value_strategy() -> impl Strategy<Value = String> {
        "(?s).{0,200}".prop_filter("no delimiter tags", |s| {
            !s.contains("</parameter>")
                && !s.contains("</function>")
                && !s.contains("</tool_call>")
                && !s.contains("<parameter")
        })
    }
    fn thought_strategy() -> impl Strategy<Value = String> {
        "(?s).{0,100}".prop_filter("no call tags", |s| {
            !s.contains("<function") && !s.contains("<tool_call>")
        })
    }
    fn args_strategy() -> impl Strategy<Value = Map<String, Value>> {
        proptest::collection::btree_map(name_strategy(), value_strategy(), 0..5)
            .prop_map(|m| m.into_iter().map(|(k, v)| (k, Value::String(v))).collect())
    }

    proptest! {
        #[test]
        fn text_formats_round_trip(name in name_strategy(), args in args_strategy(), thought in thought_strategy()) {
            for format in [ActionFormat::Xml, ActionFormat::Qwen3Coder, ActionFormat::Hermes, ActionFormat::Native] {
                let c = Call { name: name.clone(), arguments: args.clone(), id: Some("call_7".into()) };
                let msg = render(format, &thought, &c);
                // The rendered message survives the wire, too.
                let wire: ChatMessage = serde_json::from_str(&serde_json::to_string(&msg).unwrap()).unwrap();
                let t = parse(format, &wire).unwrap();
                prop_assert_eq!(&t.call.name, &name);
                prop_assert_eq!(&t.call.arguments, &args);
                prop_assert_eq!(t.thought, thought.trim());
            }
        }

        #[test]
        fn hermes_round_trips_typed_json(name in name_strategy(), n in any::<i64>(), b in any::<bool>(), s in ".{0,50}") {
            let c = call(&name, json!({"n": n, "b": b, "s": s, "list": [1, 2], "obj": {"k": null}}));
            let t = parse(ActionFormat::Hermes, &render(ActionFormat::Hermes, "", &c)).unwrap();
            prop_assert_eq!(t.call.arguments, c.arguments);
        }

        #[test]
        fn hostile_text_never_panics(text in "(?s).{0,400}", fmt in 0usize..4) {
            let format = [ActionFormat::Native, ActionFormat::Xml, ActionFormat::Hermes, ActionFormat::Qwen3Coder][fmt];
            let _ = parse(format, &ChatMessage::assistant(text.clone()));
            let mut m = ChatMessage::assistant("");
            m.tool_calls = Some(vec![ToolCall::function("x", text.clone(), text)]);
            let _ = parse(format, &m);
        }

        #[test]
        fn tag_soup_never_panics(parts in proptest::collection::vec(prop_oneof![
            Just("<function="), Just(">"), Just("</function>"), Just("<parameter="), Just("</parameter>"),
            Just("<tool_call>"), Just("</tool_call>"), Just("{"), Just("}"), Just("\""), Just("\n"), Just("é"), Just("x"),
        ], 0..60)) {
            let text: String = parts.concat();
            for format in [ActionFormat::Xml, ActionFormat::Hermes, ActionFormat::Qwen3Coder] {
                let _ = parse(format, &ChatMessage::assistant(text.clone()));
            }
        }
    }

    #[test]
    fn huge_arguments_parse() {
        let big = "x".repeat(2_000_000);
        let c = call("execute_bash", json!({"command": big}));
        let t = parse(ActionFormat::Xml, &render(ActionFormat::Xml, "", &c)).unwrap();
        assert_eq!(
            t.call.arguments["command"].as_str().unwrap().len(),
            2_000_000
        );
    }
}
