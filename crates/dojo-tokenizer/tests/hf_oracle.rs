//! Rendering agrees with Hugging Face's renderer: `fixtures/hf_rendered.json` was produced by
//! transformers' `render_jinja_template` from `fixtures/cases.json` (see `fixtures/hf_oracle.py`).

use dojo_tokenizer::{ChatTemplate, normalize_messages};
use serde_json::Value;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

fn read(name: &str) -> String {
    std::fs::read_to_string(format!("{FIXTURES}/{name}")).unwrap()
}

/// OpenAI wire form: tool-call arguments as JSON strings.
fn as_openai(messages: &[Value]) -> Vec<Value> {
    let mut out = messages.to_vec();
    for m in &mut out {
        if let Some(calls) = m.get_mut("tool_calls").and_then(Value::as_array_mut) {
            for c in calls {
                let args = c["function"]["arguments"].to_string();
                c["function"]["arguments"] = Value::String(args);
            }
        }
    }
    out
}

#[test]
fn renders_exactly_like_transformers() {
    let cases: Vec<Value> = serde_json::from_str(&read("cases.json")).unwrap();
    let oracle: Value = serde_json::from_str(&read("hf_rendered.json")).unwrap();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let source = read(case["template"].as_str().unwrap());
        let t = ChatTemplate::new(&source, "", "<|im_end|>").unwrap();
        let messages = case["messages"].as_array().unwrap();
        let tools = case
            .get("tools")
            .and_then(Value::as_array)
            .map(|v| v.as_slice());
        let gen_prompt = case["add_generation_prompt"].as_bool().unwrap();
        let expected = oracle["rendered"][name].as_str().unwrap();
        assert_eq!(
            t.render(messages, tools, gen_prompt, None).unwrap(),
            expected,
            "{name}"
        );
        // The same conversation in OpenAI wire form (string arguments) renders identically.
        let norm = normalize_messages(&as_openai(messages), tools, t.supports_tools()).unwrap();
        let again = t
            .render(&norm.messages, norm.tools.as_deref(), gen_prompt, None)
            .unwrap();
        assert_eq!(again, expected, "{name} (normalised)");
    }
}
