//! OpenAI-shaped messages in, template-ready messages out; generated text back to tool calls.
//!
//! Templates differ in what they accept. To keep one rendering path for every model:
//! - `tool_calls[].function.arguments` given as a JSON *string* (the OpenAI wire form) is
//!   parsed to an object, because HF templates `tojson` it (a string would be double-encoded);
//! - `content: null` becomes `""` and content-part lists become their concatenated text;
//! - for templates with no tool support (e.g. SmolLM2's plain ChatML), tools, calls and results
//!   are written Hermes-style exactly as Qwen2.5's template writes them: a `# Tools` block in the
//!   system message, `<tool_call>` JSON in assistant content, and consecutive `tool` messages
//!   merged into one `user` message of `<tool_response>` blocks. [`parse_tool_calls`] reads the
//!   same format back from generated text.

use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};

use crate::template::py_json;
use crate::{ChatError, Result};

/// Messages ready for the template, with where each came from.
#[derive(Debug, Clone)]
pub struct Normalized {
    pub messages: Vec<Json>,
    /// `origin[i]`: index in the caller's messages of normalised message `i` (for merged tool
    /// results, the first one; for an inserted system message, 0).
    pub origin: Vec<usize>,
    /// Tools to pass to the template: `None` when they were written into the system message.
    pub tools: Option<Vec<Json>>,
}

const TOOLS_INTRO: &str = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>";
const TOOLS_OUTRO: &str = "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>";

fn py_dumps(v: &Json) -> String {
    let mut s = String::new();
    py_json(v, None, false, 0, &mut s);
    s
}

/// The Hermes/Qwen2.5 tool block for a system message.
pub fn hermes_tools_block(tools: &[Json]) -> String {
    let mut s = String::from(TOOLS_INTRO);
    for t in tools {
        s.push('\n');
        s.push_str(&py_dumps(t));
    }
    s.push_str(TOOLS_OUTRO);
    s
}

/// One call as Qwen2.5 writes it: `<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>`.
pub fn hermes_tool_call(name: &str, arguments: &Json) -> String {
    format!(
        "<tool_call>\n{{\"name\": {}, \"arguments\": {}}}\n</tool_call>",
        py_dumps(&Json::String(name.to_string())),
        py_dumps(arguments)
    )
}

fn content_text(index: usize, content: Option<&Json>) -> Result<String> {
    match content {
        None | Some(Json::Null) => Ok(String::new()),
        Some(Json::String(s)) => Ok(s.clone()),
        Some(Json::Array(parts)) => {
            let mut out = String::new();
            for p in parts {
                match p.get("text").and_then(Json::as_str) {
                    Some(t) => out.push_str(t),
                    None => {
                        return Err(ChatError::Message {
                            index,
                            reason: format!("content part without text: {p}"),
                        });
                    }
                }
            }
            Ok(out)
        }
        Some(other) => Err(ChatError::Message {
            index,
            reason: format!("content must be a string, null or a list of parts, got {other}"),
        }),
    }
}

/// `arguments` as an object: OpenAI sends a JSON string; templates want the object.
fn arguments_object(index: usize, args: Option<&Json>) -> Result<Json> {
    match args {
        None | Some(Json::Null) => Ok(json!({})),
        Some(Json::String(s)) if s.trim().is_empty() => Ok(json!({})),
        Some(Json::String(s)) => {
            serde_json::from_str(s).map_err(|source| ChatError::ToolArguments {
                index,
                arguments: s.clone(),
                source,
            })
        }
        Some(v) => Ok(v.clone()),
    }
}

/// See the module docs. `template_supports_tools`: pass tools through to the template.
pub fn normalize_messages(
    messages: &[Json],
    tools: Option<&[Json]>,
    template_supports_tools: bool,
) -> Result<Normalized> {
    let tools = tools.filter(|t| !t.is_empty());
    let mut out: Vec<Json> = Vec::with_capacity(messages.len() + 1);
    let mut origin = Vec::with_capacity(messages.len() + 1);
    for (index, m) in messages.iter().enumerate() {
        let obj = m.as_object().ok_or_else(|| ChatError::Message {
            index,
            reason: "a message must be a JSON object".into(),
        })?;
        let role = obj
            .get("role")
            .and_then(Json::as_str)
            .ok_or_else(|| ChatError::Message {
                index,
                reason: "missing string field `role`".into(),
            })?
            .to_string();
        let mut msg = obj.clone();
        let mut content = content_text(index, obj.get("content"))?;
        let mut calls_text = Vec::new();
        if let Some(calls) = obj.get("tool_calls").filter(|c| !c.is_null()) {
            let calls = calls.as_array().ok_or_else(|| ChatError::Message {
                index,
                reason: "`tool_calls` must be a list".into(),
            })?;
            let (fixed, text) = fixed_tool_calls(index, calls)?;
            calls_text = text;
            if calls.is_empty() {
                msg.remove("tool_calls");
            } else {
                msg.insert("tool_calls".into(), Json::Array(fixed));
            }
        }
        if !template_supports_tools {
            if !calls_text.is_empty() {
                if !content.is_empty() {
                    content.push('\n');
                }
                content.push_str(&calls_text.join("\n"));
                msg.remove("tool_calls");
            }
            if role == "tool" {
                push_tool_response(&mut out, &mut origin, index, &content);
                continue;
            }
        }
        msg.insert("role".into(), Json::String(role));
        msg.insert("content".into(), Json::String(content));
        out.push(Json::Object(msg));
        origin.push(index);
    }
    for m in &mut out {
        if let Some(o) = m.as_object_mut() {
            o.remove("_tool_run");
        }
    }
    let mut pass_tools = None;
    if let Some(tools) = tools {
        if template_supports_tools {
            pass_tools = Some(tools.to_vec());
        } else {
            write_tools_into_system(&mut out, &mut origin, tools);
        }
    }
    Ok(Normalized {
        messages: out,
        origin,
        tools: pass_tools,
    })
}

/// Message `index`'s tool calls with their `arguments` as objects, and each call as the
/// Hermes `<tool_call>` text a template without tool support is given instead.
fn fixed_tool_calls(index: usize, calls: &[Json]) -> Result<(Vec<Json>, Vec<String>)> {
    let mut fixed = Vec::with_capacity(calls.len());
    let mut calls_text = Vec::with_capacity(calls.len());
    for call in calls {
        let mut call = call.clone();
        let shown = call.to_string();
        let func = call
            .get_mut("function")
            .and_then(Json::as_object_mut)
            .ok_or_else(|| ChatError::Message {
                index,
                reason: format!("tool call without `function` object: {shown}"),
            })?;
        let args = arguments_object(index, func.get("arguments"))?;
        let name = func
            .get("name")
            .and_then(Json::as_str)
            .ok_or_else(|| ChatError::Message {
                index,
                reason: "tool call without function `name`".into(),
            })?
            .to_string();
        calls_text.push(hermes_tool_call(&name, &args));
        func.insert("arguments".into(), args);
        fixed.push(call);
    }
    Ok((fixed, calls_text))
}

/// A tool result for a template without tool support: a `user` message of
/// `<tool_response>` blocks, one for a run of consecutive results (marked `_tool_run` until
/// the end of normalisation).
fn push_tool_response(out: &mut Vec<Json>, origin: &mut Vec<usize>, index: usize, content: &str) {
    let block = format!("<tool_response>\n{content}\n</tool_response>");
    let prev_is_tool = out.last().and_then(|p: &Json| p.get("_tool_run")).is_some();
    if prev_is_tool && let Some(prev) = out.last_mut().and_then(Json::as_object_mut) {
        let merged = format!(
            "{}\n{block}",
            prev.get("content").and_then(Json::as_str).unwrap_or("")
        );
        prev.insert("content".into(), Json::String(merged));
        return;
    }
    out.push(json!({"role": "user", "content": block, "_tool_run": true}));
    origin.push(index);
}

/// The Hermes `# Tools` block at the end of the system message, or as a new first system
/// message when there is none.
fn write_tools_into_system(out: &mut Vec<Json>, origin: &mut Vec<usize>, tools: &[Json]) {
    let block = hermes_tools_block(tools);
    match out.first_mut().and_then(Json::as_object_mut) {
        Some(first) if first.get("role").and_then(Json::as_str) == Some("system") => {
            let sys = first.get("content").and_then(Json::as_str).unwrap_or("");
            let merged = if sys.is_empty() {
                block
            } else {
                format!("{sys}\n\n{block}")
            };
            first.insert("content".into(), Json::String(merged));
        }
        _ => {
            out.insert(0, json!({"role": "system", "content": block}));
            origin.insert(0, 0);
        }
    }
}

/// An assistant turn read back from generated text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParsedAssistant {
    /// Text outside `<tool_call>` blocks, trimmed; `None` when empty.
    pub content: Option<String>,
    /// OpenAI-shaped calls: `{"id", "type": "function", "function": {"name", "arguments"}}`
    /// with `arguments` as a JSON string.
    pub tool_calls: Vec<Json>,
}

/// Parse Hermes-style `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks.
///
/// A block whose body is not a JSON object with a string `name` stays in `content` (the agent
/// then sees what the model wrote). An unterminated last block (generation cut off) is parsed
/// if its JSON is complete. Call ids are `{id_prefix}{n}`.
pub fn parse_tool_calls(text: &str, id_prefix: &str) -> ParsedAssistant {
    const OPEN: &str = "<tool_call>";
    const CLOSE: &str = "</tool_call>";
    let mut content = String::new();
    let mut tool_calls = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(OPEN) {
        content.push_str(&rest[..at]);
        let body_start = at + OPEN.len();
        let (body, next) = match rest[body_start..].find(CLOSE) {
            Some(e) => (
                &rest[body_start..body_start + e],
                body_start + e + CLOSE.len(),
            ),
            None => (&rest[body_start..], rest.len()),
        };
        match parse_call_body(body) {
            Some((name, args)) => tool_calls.push(json!({
                "id": format!("{id_prefix}{}", tool_calls.len()),
                "type": "function",
                "function": {"name": name, "arguments": args},
            })),
            None => content.push_str(&rest[at..next]),
        }
        rest = &rest[next..];
    }
    content.push_str(rest);
    let content = content.trim();
    ParsedAssistant {
        content: (!content.is_empty()).then(|| content.to_string()),
        tool_calls,
    }
}

fn parse_call_body(body: &str) -> Option<(String, String)> {
    let v: Json = serde_json::from_str(body.trim()).ok()?;
    let name = v.get("name")?.as_str()?.to_string();
    let args = match v.get("arguments").or_else(|| v.get("parameters")) {
        None | Some(Json::Null) => "{}".to_string(),
        Some(Json::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    Some((name, args))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_calls_and_keeps_text() {
        let p = parse_tool_calls(
            "Let me look.\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>",
            "call_",
        );
        assert_eq!(p.content.as_deref(), Some("Let me look."));
        assert_eq!(
            p.tool_calls,
            vec![json!({"id": "call_0", "type": "function",
                        "function": {"name": "bash", "arguments": "{\"cmd\":\"ls\"}"}})]
        );
    }

    #[test]
    fn bad_call_bodies_stay_in_content() {
        let p = parse_tool_calls("<tool_call>{not json}</tool_call> tail", "c");
        assert!(p.tool_calls.is_empty());
        assert_eq!(
            p.content.as_deref(),
            Some("<tool_call>{not json}</tool_call> tail")
        );
        let cut = parse_tool_calls("<tool_call>\n{\"name\": \"x\", \"arguments\": {}}\n", "c");
        assert_eq!(cut.tool_calls.len(), 1);
        assert_eq!(cut.content, None);
    }

    #[test]
    fn string_arguments_become_objects_and_nulls_empty() {
        let msgs = vec![json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]})];
        let n = normalize_messages(&msgs, None, true).unwrap();
        assert_eq!(n.messages[0]["content"], json!(""));
        assert_eq!(
            n.messages[0]["tool_calls"][0]["function"]["arguments"],
            json!({"a": 1})
        );
        let bad = vec![json!({"role": "assistant", "tool_calls": [
            {"function": {"name": "f", "arguments": "{oops"}}]})];
        let err = normalize_messages(&bad, None, true)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("message 0: tool call arguments are not valid JSON"),
            "{err}"
        );
    }

    #[test]
    fn hermes_fallback_merges_tool_results() {
        let msgs = vec![
            json!({"role": "user", "content": "hi"}),
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": "a", "content": "one"}),
            json!({"role": "tool", "tool_call_id": "b", "content": "two"}),
        ];
        let tools = vec![json!({"type": "function", "function": {"name": "f"}})];
        let n = normalize_messages(&msgs, Some(&tools), false).unwrap();
        assert_eq!(n.origin, vec![0, 0, 1, 2]);
        assert_eq!(n.messages[0]["role"], "system");
        assert_eq!(
            n.messages[2]["content"],
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"
        );
        assert_eq!(
            n.messages[3],
            json!({"role": "user", "content": "<tool_response>\none\n</tool_response>\n<tool_response>\ntwo\n</tool_response>"})
        );
        assert!(n.tools.is_none());
    }

    proptest! {
        // Whatever the model writes, parsing never panics and rendering a parsed call back
        // and parsing again gives the same call.
        #[test]
        fn parse_never_panics(s in ".{0,200}") {
            let _ = parse_tool_calls(&s, "c");
        }

        #[test]
        fn render_parse_round_trip(name in "[a-z_]{1,12}", key in "[a-z]{1,8}", val in ".{0,40}") {
            let args = json!({ key: val });
            let text = hermes_tool_call(&name, &args);
            let p = parse_tool_calls(&text, "c");
            prop_assert_eq!(p.tool_calls.len(), 1);
            prop_assert_eq!(p.tool_calls[0]["function"]["name"].as_str(), Some(name.as_str()));
            let back: Json = serde_json::from_str(p.tool_calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
            prop_assert_eq!(back, args);
        }
    }
}
