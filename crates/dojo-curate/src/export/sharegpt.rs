//! `sharegpt.jsonl`: LLaMA-Factory's sharegpt layout (`human`/`gpt`/`function_call`/
//! `observation` turns, calls as `<tool_call>` blocks).

use std::path::Path;

use serde_json::{Value, json};

use super::{ExportError, MessagesRow, meta_json, through_last_assistant, write_lines};
use crate::view::{Traj, content_text, role};

/// A conversation LLaMA-Factory's sharegpt layout cannot hold (the caller names the row).
#[derive(Debug, thiserror::Error)]
pub enum SharegptError {
    #[error("message {index} has role {role:?}, which sharegpt cannot hold")]
    Role { index: usize, role: String },
    #[error(
        "message {index} ({from}) breaks sharegpt's human/gpt alternation at position {position}"
    )]
    Alternation {
        index: usize,
        from: &'static str,
        position: usize,
    },
    #[error("conversation does not end with an assistant turn")]
    NoFinalTurn,
}

/// Converts portable messages to LLaMA-Factory's sharegpt layout. Errors when the conversation
/// cannot alternate as LLaMA-Factory requires (human/observation at odd positions,
/// gpt/function_call at even ones).
///
/// System messages go to `system`; a turn's thought text before its calls is kept as
/// `<think>…</think>` in front of the call JSON, which LLaMA-Factory's function formatter strips
/// into the template's thought slot; trailing messages after the last assistant turn (the
/// submit's observation) are dropped: nothing after it is trained.
pub fn to_sharegpt(messages: &[Value], tools: &[Value]) -> Result<Value, SharegptError> {
    let mut system = Vec::new();
    let mut conv: Vec<Value> = Vec::new();
    for (i, m) in through_last_assistant(messages).iter().enumerate() {
        let text = content_text(m);
        let (from, value) = match role(m) {
            "system" => {
                system.push(text);
                continue;
            }
            "user" => ("human", text),
            "tool" => ("observation", text),
            "assistant" => {
                let calls = Traj::tool_calls(m);
                if calls.is_empty() {
                    ("gpt", text)
                } else {
                    let calls: Vec<Value> = calls
                        .into_iter()
                        .map(|(name, arguments)| json!({"name": name, "arguments": arguments}))
                        .collect();
                    let body = if calls.len() == 1 {
                        calls[0].to_string()
                    } else {
                        Value::Array(calls).to_string()
                    };
                    // The thought, then the call(s) in one `<tool_call>` block: what LLaMA-Factory's
                    // FunctionFormatter looks for (by the template's tool-call words) before it
                    // parses the JSON and keeps the text around it as the thought.
                    let block = format!("<tool_call>\n{body}\n</tool_call>");
                    let value = if text.trim().is_empty() {
                        block
                    } else {
                        format!("{}\n{block}", text.trim())
                    };
                    ("function_call", value)
                }
            }
            other => {
                return Err(SharegptError::Role {
                    index: i,
                    role: other.to_string(),
                });
            }
        };
        // Parallel calls produce several observations: LLaMA-Factory wants one.
        if from == "observation"
            && let Some(prev) = conv.last_mut()
            && prev["from"] == "observation"
        {
            let joined = format!("{}\n{}", prev["value"].as_str().unwrap_or_default(), value);
            prev["value"] = json!(joined);
            continue;
        }
        let even = conv.len() % 2 == 1;
        let ok = if even {
            matches!(from, "gpt" | "function_call")
        } else {
            matches!(from, "human" | "observation")
        };
        if !ok {
            return Err(SharegptError::Alternation {
                index: i,
                from,
                position: conv.len(),
            });
        }
        conv.push(json!({"from": from, "value": value}));
    }
    if conv.is_empty() || conv.len() % 2 == 1 {
        return Err(SharegptError::NoFinalTurn);
    }
    Ok(json!({
        "conversations": conv,
        "system": system.join("\n\n"),
        "tools": Value::Array(tools.to_vec()).to_string(),
    }))
}

/// Writes sharegpt JSONL; returns the rows that could not be converted (index, reason).
pub fn write_sharegpt(
    path: &Path,
    rows: &[MessagesRow],
) -> Result<Vec<(usize, String)>, ExportError> {
    let mut bad = Vec::new();
    let mut out = Vec::with_capacity(rows.len());
    for (i, r) in rows.iter().enumerate() {
        match to_sharegpt(&r.messages, &r.tools) {
            Ok(Value::Object(mut o)) => {
                o.extend(meta_json(&r.meta));
                out.push(Value::Object(o));
            }
            Ok(_) => {}
            Err(e) => bad.push((i, e.to_string())),
        }
    }
    write_lines(path, out.into_iter())?;
    Ok(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sharegpt_alternates_and_drops_the_trailing_observation() {
        let msgs: Vec<Value> = [
            json!({"role": "system", "content": "sys"}),
            json!({"role": "user", "content": "fix"}),
            json!({"role": "assistant", "content": "look", "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}},
                {"id": "b", "type": "function", "function": {"name": "bash", "arguments": {"command": "pwd"}}}]}),
            json!({"role": "tool", "tool_call_id": "a", "content": "x.py"}),
            json!({"role": "tool", "tool_call_id": "b", "content": "/testbed"}),
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "s", "type": "function", "function": {"name": "submit", "arguments": {}}}]}),
            json!({"role": "tool", "tool_call_id": "s", "content": "done"}),
        ]
        .to_vec();
        let s = to_sharegpt(&msgs, &[]).unwrap();
        assert_eq!(s["system"], "sys");
        let conv = s["conversations"].as_array().unwrap();
        let froms: Vec<&str> = conv.iter().map(|c| c["from"].as_str().unwrap()).collect();
        assert_eq!(
            froms,
            ["human", "function_call", "observation", "function_call"]
        );
        // LLaMA-Factory's FunctionFormatter finds the `<tool_call>` block and keeps the text
        // before it as the thought (checked with llamafactory 0.9.5:
        // examples/trainers/llamafactory_check.py).
        assert_eq!(
            conv[1]["value"],
            "look\n<tool_call>\n[{\"name\":\"bash\",\"arguments\":{\"command\":\"ls\"}},{\"name\":\"bash\",\"arguments\":{\"command\":\"pwd\"}}]\n</tool_call>"
        );
        assert_eq!(conv[2]["value"], "x.py\n/testbed");
        assert_eq!(
            conv[3]["value"],
            "<tool_call>\n{\"name\":\"submit\",\"arguments\":{}}\n</tool_call>"
        );
        assert_eq!(through_last_assistant(&msgs).len(), msgs.len() - 1);
    }

    #[test]
    fn sharegpt_rejects_broken_alternation() {
        let msgs = vec![
            json!({"role": "user", "content": "a"}),
            json!({"role": "user", "content": "b"}),
            json!({"role": "assistant", "content": "c"}),
        ];
        assert!(
            to_sharegpt(&msgs, &[])
                .unwrap_err()
                .to_string()
                .contains("alternation")
        );
    }
}
