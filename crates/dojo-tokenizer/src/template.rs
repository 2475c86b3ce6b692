//! Chat templates rendered the way Hugging Face `apply_chat_template` renders them.
//!
//! HF compiles templates with `trim_blocks` and `lstrip_blocks`, provides `raise_exception`, and
//! overrides `tojson` with Python's `json.dumps` (separators `", "`/`": "`, no HTML escaping).
//! minijinja's own `tojson` is compact and HTML-safe, so it is replaced here: a single differing
//! space changes token ids, and training data must match what trainers produce from the same
//! messages.

use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, Error, ErrorKind};
use serde_json::Value as Json;

use crate::ChatError;

const TEMPLATE_NAME: &str = "chat";

/// A compiled chat template plus the variables HF passes alongside messages.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .field("supports_tools", &self.supports_tools())
            .finish()
    }
}

impl Clone for ChatTemplate {
    fn clone(&self) -> Self {
        // The source was compiled once already, so this cannot fail.
        ChatTemplate::new(&self.source, &self.bos_token, &self.eos_token)
            .unwrap_or_else(|_| unreachable!("template compiled before"))
    }
}

impl ChatTemplate {
    /// Compile `source`; `bos_token`/`eos_token` are the strings templates may reference.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate, ChatError> {
        let mut env = Environment::new();
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .map_err(ChatError::TemplateEngine)?,
        );
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<Value, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        });
        env.add_filter("tojson", tojson_filter);
        env.add_template_owned(TEMPLATE_NAME, source.to_string())
            .map_err(|e| ChatError::TemplateFailed {
                reason: format!("template does not compile: {e:#}"),
                source: e,
            })?;
        Ok(ChatTemplate {
            env,
            source: source.to_string(),
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the template renders `tools` itself (otherwise [`crate::ChatFormat`] injects
    /// them Hermes-style, see [`crate::normalize_messages`]).
    pub fn supports_tools(&self) -> bool {
        self.source.contains("tools")
    }

    /// Render `messages` exactly as given (no normalisation).
    ///
    /// `tools`: OpenAI tool objects, passed as `tools` (`none` when absent, as HF does).
    /// `extra`: further variables, e.g. `{"enable_thinking": false}`.
    pub fn render(
        &self,
        messages: &[Json],
        tools: Option<&[Json]>,
        add_generation_prompt: bool,
        extra: Option<&serde_json::Map<String, Json>>,
    ) -> Result<String, ChatError> {
        let mut ctx = serde_json::Map::new();
        if let Some(extra) = extra {
            for (k, v) in extra {
                ctx.insert(k.clone(), v.clone());
            }
        }
        ctx.insert("messages".into(), Json::Array(messages.to_vec()));
        ctx.insert(
            "tools".into(),
            tools.map_or(Json::Null, |t| Json::Array(t.to_vec())),
        );
        ctx.insert(
            "add_generation_prompt".into(),
            Json::Bool(add_generation_prompt),
        );
        ctx.insert("bos_token".into(), Json::String(self.bos_token.clone()));
        ctx.insert("eos_token".into(), Json::String(self.eos_token.clone()));
        let tmpl = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(ChatError::TemplateEngine)?;
        tmpl.render(Value::from(minijinja::value::Serde(&Json::Object(ctx))))
            .map_err(|e| ChatError::TemplateFailed {
                reason: render_error(&e),
                source: e,
            })
    }
}

fn render_error(e: &Error) -> String {
    let mut msg = match e.line() {
        Some(line) => format!("line {line}: {e}"),
        None => e.to_string(),
    };
    if e.kind() == ErrorKind::InvalidOperation
        && let Some(detail) = e.detail()
    {
        msg = format!("raised by template: {detail}");
    }
    msg
}

/// `tojson` as HF defines it: `json.dumps(x, ensure_ascii=False, indent=indent,
/// separators=separators, sort_keys=sort_keys)`.
fn tojson_filter(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(&value).map_err(|e| {
        Error::new(
            ErrorKind::InvalidOperation,
            "tojson: value is not JSON-serialisable",
        )
        .with_source(e)
    })?;
    let mut out = String::new();
    py_json(&json, indent, sort_keys.unwrap_or(false), 0, &mut out);
    Ok(Value::from_safe_string(out))
}

/// Serialise like Python's `json.dumps(ensure_ascii=False)`: `", "` and `": "` separators
/// without `indent`, `","` and `": "` with it.
pub fn py_json(v: &Json, indent: Option<usize>, sort_keys: bool, level: usize, out: &mut String) {
    let newline = |out: &mut String, level: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * level));
        }
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    match v {
        Json::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, level + 1);
                py_json(item, indent, sort_keys, level + 1, out);
            }
            newline(out, level);
            out.push(']');
        }
        Json::Object(map) if !map.is_empty() => {
            let mut entries: Vec<(&String, &Json)> = map.iter().collect();
            if sort_keys {
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            out.push('{');
            for (i, (k, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, level + 1);
                out.push_str(&Json::String(k.clone()).to_string());
                out.push_str(": ");
                py_json(item, indent, sort_keys, level + 1, out);
            }
            newline(out, level);
            out.push('}');
        }
        Json::Number(n) => out.push_str(&py_number(n)),
        // Scalars, `[]` and `{}` are the same in both dialects.
        other => out.push_str(&other.to_string()),
    }
}

/// Python prints floats with `repr`: shortest round-trip digits, exponent form (`1e-05`,
/// `1.5e+16`) below 1e-4 and from 1e16 on, else positional with at least one decimal (`1.0`).
/// serde_json differs (`0.00001`, `1e16`); integers are identical.
fn py_number(n: &serde_json::Number) -> String {
    let Some(f) = n.as_f64().filter(|_| n.is_f64()) else {
        return n.to_string();
    };
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if f != 0.0 && !(-4..16).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    let s = format!("{f}");
    if s.contains('.') { s } else { format!("{s}.0") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dumps(v: Json, indent: Option<usize>) -> String {
        let mut s = String::new();
        py_json(&v, indent, false, 0, &mut s);
        s
    }

    #[test]
    fn py_json_matches_python_dumps() {
        // Expected strings are what CPython 3.11 json.dumps(ensure_ascii=False) prints.
        assert_eq!(
            dumps(
                json!({"a": 1, "b": [1, 2.5, "x"], "c": {}, "d": [], "e": null, "f": "é\n\"<"}),
                None
            ),
            r#"{"a": 1, "b": [1, 2.5, "x"], "c": {}, "d": [], "e": null, "f": "é\n\"<"}"#
        );
        assert_eq!(
            dumps(json!({"a": [1, {"b": true}]}), Some(2)),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": true\n    }\n  ]\n}"
        );
        assert_eq!(dumps(json!(1e-5), None), "1e-05");
        assert_eq!(dumps(json!(1.0), None), "1.0");
        assert_eq!(dumps(json!(1.5e16), None), "1.5e+16");
        assert_eq!(dumps(json!(0.0001), None), "0.0001");
        assert_eq!(dumps(json!(-2.25), None), "-2.25");
        assert_eq!(dumps(json!(12), None), "12");
    }

    #[test]
    fn raise_exception_is_an_error_with_the_message() {
        let t = ChatTemplate::new("{{ raise_exception('no system role') }}", "", "").unwrap();
        let err = t.render(&[], None, false, None).unwrap_err().to_string();
        assert!(err.contains("no system role"), "{err}");
    }

    #[test]
    fn trim_and_lstrip_blocks_like_hf() {
        let t = ChatTemplate::new(
            "{% for m in messages %}\n    {% if m.role == 'user' %}\n{{ m.content }}\n    {% endif %}\n{% endfor %}",
            "",
            "",
        )
        .unwrap();
        let out = t
            .render(
                &[json!({"role": "user", "content": "hi"})],
                None,
                false,
                None,
            )
            .unwrap();
        assert_eq!(out, "hi\n");
    }

    #[test]
    fn tojson_filter_is_python_style() {
        let t = ChatTemplate::new(
            "{{ tools[0] | tojson }}|{{ tools[0] | tojson(indent=2) }}",
            "",
            "",
        )
        .unwrap();
        let out = t
            .render(
                &[],
                Some(&[json!({"type": "function", "x": [1, 2]})]),
                false,
                None,
            )
            .unwrap();
        assert_eq!(
            out,
            "{\"type\": \"function\", \"x\": [1, 2]}|{\n  \"type\": \"function\",\n  \"x\": [\n    1,\n    2\n  ]\n}"
        );
    }

    #[test]
    fn pycompat_methods_work() {
        let t = ChatTemplate::new(
            "{{ messages[0].content.strip() }}|{{ messages[0].get('role') }}|{{ 'a b'.split(' ') | length }}",
            "",
            "",
        )
        .unwrap();
        let out = t
            .render(
                &[json!({"role": "user", "content": "  x  "})],
                None,
                false,
                None,
            )
            .unwrap();
        assert_eq!(out, "x|user|2");
    }
}
