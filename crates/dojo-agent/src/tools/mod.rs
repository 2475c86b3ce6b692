//! The agent's tools and the registry that offers them to the model.
//!
//! A tool is a trait object with a name, an OpenAI function schema and an async `call`. The
//! built-in tools follow R2E-Gym / SWE-Master semantics and observation formats
//! (`str_replace_editor`/`file_editor`, `execute_bash`, `search`, `submit`/`finish`); named
//! sets bundle them the way each scaffold offered them. Other crates add tools (e.g. the LSP
//! tool) with [`ToolRegistry::register`].

mod bash;
mod editor;
#[cfg(feature = "lsp")]
mod lsp;
mod search;
mod submit;

pub use bash::{BashConfig, BashTool};
pub use editor::{EditorConfig, EditorTool};
#[cfg(feature = "lsp")]
pub use lsp::{LspToolAdapter, ToolSetError, split_tool_set};
pub use search::SearchTool;
pub use submit::SubmitTool;

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use dojo_llm::{BoxFuture, ToolSpec};
use dojo_rundir::clip::{self, Keep, Unit};
use dojo_rundir::json::type_name;
use dojo_sandbox::SandboxError;
use serde_json::{Map, Value};

use dojo_sandbox::workspace::Workspace;

/// What a tool call produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolOutput {
    /// The observation text shown to the model (without the step counter).
    pub text: String,
    /// Exit code of the command behind the tool, if one ran to completion.
    pub exit_code: Option<i32>,
    pub truncated: bool,
    pub timed_out: bool,
    /// Refused before running (blocked command, invalid arguments).
    pub blocked: bool,
    /// The tool reported an error to the agent.
    pub error: bool,
    /// The agent asked to end the episode.
    pub submitted: bool,
    /// An infrastructure problem inside the tool that did not stop it from answering (e.g. a
    /// language server crashed and the agent was told to use other tools); recorded as an event.
    pub infra_note: Option<String>,
}

impl ToolOutput {
    pub fn ok(text: impl Into<String>) -> Self {
        ToolOutput {
            text: text.into(),
            ..Default::default()
        }
    }
    /// An agent-facing error (`ERROR: …`); not an infrastructure failure.
    pub fn error(text: impl Into<String>) -> Self {
        ToolOutput {
            text: text.into(),
            error: true,
            ..Default::default()
        }
    }
}

/// A failure that is not the agent's: the sandbox broke.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("sandbox failure in tool {tool}: {source}")]
    Env {
        tool: String,
        #[source]
        source: SandboxError,
    },
}

/// Per-rollout state the tools share: the workspace, the command timeout and a typed scratch map
/// (the editor's undo history lives there, so one registry can serve many rollouts).
pub struct ToolContext<'w> {
    pub ws: &'w dyn Workspace,
    pub command_timeout: Duration,
    state: HashMap<String, Box<dyn Any + Send + Sync>>,
}

impl<'w> ToolContext<'w> {
    pub fn new(ws: &'w dyn Workspace, command_timeout: Duration) -> Self {
        ToolContext {
            ws,
            command_timeout,
            state: HashMap::new(),
        }
    }
    /// The state stored under `key`, created with `Default` on first use.
    pub fn state<T: Any + Send + Sync + Default>(&mut self, key: &str) -> &mut T {
        let slot = self
            .state
            .entry(key.to_string())
            .or_insert_with(|| Box::new(T::default()));
        if !slot.is::<T>() {
            *slot = Box::new(T::default());
        }
        // Just ensured above.
        slot.downcast_mut::<T>()
            .unwrap_or_else(|| unreachable!("state slot type checked"))
    }
}

/// A tool the model can call.
///
/// **Execution model.** Each rollout gets its own registry, and its agent loop awaits one call
/// at a time, in the order the model made them: two calls of one episode never overlap. Many
/// rollouts run at once on one multi-threaded tokio runtime, so the future must be `Send` and
/// must not block a runtime thread (long work goes through the workspace's `exec`, which runs
/// in the sandbox). The loop drops the future when the episode's wall-time budget runs out, so a
/// call may stop at any `.await`; the episode ends there. State that lives across calls of one
/// episode (the editor's undo history) belongs in [`ToolContext::state`], not in the tool.
/// `Err` means the sandbox failed (the episode ends as an infrastructure failure); a bad call by
/// the model is an `Ok` output that tells it so.
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    /// The OpenAI function-tool JSON: `{"type": "function", "function": {name, description, parameters}}`.
    fn schema(&self) -> Value;
    /// Run the tool. Argument values may be strings even for integer parameters (text action
    /// formats carry only strings); tools coerce them.
    fn call<'a>(
        &'a self,
        ctx: &'a mut ToolContext<'_>,
        args: &'a Map<String, Value>,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>>;
}

/// The tools offered in a rollout, in offer order.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: Vec<Arc<dyn Tool>>,
}

/// The tool sets we know by name.
pub const TOOL_SETS: &[&str] = &["r2e", "swe-master", "dojo"];

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// A named tool set:
    /// - `r2e`: R2E-Gym's `search`, `file_editor` (with `concise`, `undo_edit`, .py-only view),
    ///   `execute_bash{cmd}`, `finish{command: submit}`;
    /// - `swe-master`: `str_replace_editor` (view/create/str_replace/insert; views .py, .rst,
    ///   .md, .txt), `execute_bash{command}` blocking every `git` command, `submit{}`;
    /// - `dojo`: `search`, `str_replace_editor` with all five commands on any text file,
    ///   `execute_bash{command}` blocking history-revealing git, `submit{}`.
    ///
    /// With feature `lsp`, `NAME+lsp` or `NAME+lsp:SERVER` adds the `lsp_tool` to set `NAME`
    /// (see `split_tool_set`).
    pub fn named(set: &str) -> Option<Self> {
        #[cfg(feature = "lsp")]
        if let Ok(Some((base, kind))) = lsp::split_tool_set(set) {
            let mut r = Self::named(base)?;
            r.register(Arc::new(LspToolAdapter::per_rollout(kind)));
            return Some(r);
        }
        let mut r = ToolRegistry::new();
        match set {
            "r2e" => {
                r.register(Arc::new(SearchTool));
                r.register(Arc::new(EditorTool::new(EditorConfig::r2e())));
                r.register(Arc::new(BashTool::new(BashConfig::r2e())));
                r.register(Arc::new(SubmitTool::r2e()));
            }
            "swe-master" => {
                r.register(Arc::new(EditorTool::new(EditorConfig::swe_master())));
                r.register(Arc::new(BashTool::new(BashConfig::swe_master())));
                r.register(Arc::new(SubmitTool::swe_master()));
            }
            "dojo" => {
                r.register(Arc::new(SearchTool));
                r.register(Arc::new(EditorTool::new(EditorConfig::dojo())));
                r.register(Arc::new(BashTool::new(BashConfig::dojo())));
                r.register(Arc::new(SubmitTool::swe_master()));
            }
            _ => return None,
        }
        Some(r)
    }

    /// Add a tool, replacing one of the same name in place.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        match self.tools.iter_mut().find(|t| t.name() == tool.name()) {
            Some(slot) => *slot = tool,
            None => self.tools.push(tool),
        }
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.iter().find(|t| t.name() == name)
    }

    pub fn names(&self) -> Vec<String> {
        self.tools.iter().map(|t| t.name().to_string()).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Schemas as typed OpenAI `tools` entries.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .filter_map(|t| serde_json::from_value(t.schema()).ok())
            .collect()
    }

    /// Schemas as raw JSON.
    pub fn schemas(&self) -> Vec<Value> {
        self.tools.iter().map(|t| t.schema()).collect()
    }

    /// Validate `args` against the tool's schema (unknown and missing parameters) and run it.
    /// Unknown tools and bad arguments become agent-facing errors, never panics.
    pub async fn call(
        &self,
        ctx: &mut ToolContext<'_>,
        name: &str,
        args: &Map<String, Value>,
    ) -> Result<ToolOutput, ToolError> {
        let Some(tool) = self.get(name) else {
            let mut out = ToolOutput::error(format!(
                "ERROR: Unknown function '{name}'. Available functions: {}.",
                self.names().join(", ")
            ));
            out.blocked = true;
            return Ok(out);
        };
        if let Err(msg) = check_args(&tool.schema(), args) {
            let mut out = ToolOutput::error(format!(
                "ERROR: Invalid parameters for function '{name}': {msg}"
            ));
            out.blocked = true;
            return Ok(out);
        }
        tool.call(ctx, args).await
    }
}

/// Tool-call arguments that do not fit the tool's schema, or one argument of the wrong type;
/// the text is what the model is told.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ArgError {
    #[error("unknown parameter(s) {unknown}; expected some of {expected}")]
    Unknown { unknown: String, expected: String },
    #[error("missing required parameter(s) {0}")]
    MissingRequired(String),
    #[error("parameter `{key}` is required")]
    Required { key: String },
    /// `got` is the value or its JSON type, as the model should see it.
    #[error("parameter `{key}` must be {expected}, got {got}")]
    Type {
        key: String,
        expected: &'static str,
        got: String,
    },
}

fn check_args(schema: &Value, args: &Map<String, Value>) -> Result<(), ArgError> {
    let params = &schema["function"]["parameters"];
    if let Some(props) = params.get("properties").and_then(Value::as_object) {
        let unknown: Vec<&str> = args
            .keys()
            .filter(|k| !props.contains_key(*k))
            .map(String::as_str)
            .collect();
        if !unknown.is_empty() {
            return Err(ArgError::Unknown {
                unknown: unknown.join(", "),
                expected: props.keys().cloned().collect::<Vec<_>>().join(", "),
            });
        }
    }
    if let Some(req) = params.get("required").and_then(Value::as_array) {
        let missing: Vec<&str> = req
            .iter()
            .filter_map(Value::as_str)
            .filter(|k| !args.contains_key(*k))
            .collect();
        if !missing.is_empty() {
            return Err(ArgError::MissingRequired(missing.join(", ")));
        }
    }
    Ok(())
}

/// Typed access to loosely typed arguments.
pub(crate) struct Args<'a>(pub &'a Map<String, Value>);

impl Args<'_> {
    fn bad(key: &str, expected: &'static str, got: impl std::fmt::Display) -> ArgError {
        ArgError::Type {
            key: key.to_string(),
            expected,
            got: got.to_string(),
        }
    }
    pub fn str(&self, key: &str) -> Result<Option<String>, ArgError> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(Some(v.to_string())),
            Some(other) => Err(Self::bad(key, "a string", type_name(other))),
        }
    }
    pub fn required_str(&self, key: &str) -> Result<String, ArgError> {
        self.str(key)?.ok_or_else(|| ArgError::Required {
            key: key.to_string(),
        })
    }
    pub fn int(&self, key: &str) -> Result<Option<i64>, ArgError> {
        let bad = |got: &dyn std::fmt::Display| Self::bad(key, "an integer", got);
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => n.as_i64().map(Some).ok_or_else(|| bad(n)),
            Some(Value::String(s)) => s
                .trim()
                .parse::<i64>()
                .map(Some)
                .map_err(|_| bad(&format_args!("{:?}", clip_chars(s, 80)))),
            Some(other) => Err(bad(&type_name(other))),
        }
    }
    /// A list of integers: a JSON array, or text such as `[1, 20]` or `1,20`.
    pub fn int_list(&self, key: &str) -> Result<Option<Vec<i64>>, ArgError> {
        let bad = |v: &dyn std::fmt::Display| Self::bad(key, "a list of integers", v);
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::Number(n) => n.as_i64().ok_or_else(|| bad(n)),
                    Value::String(s) => s.trim().parse().map_err(|_| bad(s)),
                    other => Err(bad(other)),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(Value::String(s)) => {
                let inner = s.trim().trim_start_matches('[').trim_end_matches(']');
                inner
                    .split(',')
                    .map(|p| p.trim().parse::<i64>().map_err(|_| bad(&clip_chars(s, 80))))
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some)
            }
            Some(other) => Err(bad(other)),
        }
    }
    pub fn bool(&self, key: &str) -> Result<Option<bool>, ArgError> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" => Ok(Some(true)),
                "false" | "0" | "no" => Ok(Some(false)),
                _ => Err(Self::bad(
                    key,
                    "true or false",
                    format_args!("{:?}", clip_chars(s, 80)),
                )),
            },
            Some(other) => Err(Self::bad(key, "a boolean", type_name(other))),
        }
    }
}

/// At most `max` characters of `s` quoted in a message, `…` where it was cut.
pub(crate) fn clip_chars(s: &str, max: usize) -> String {
    clip::cut(s, max, Unit::Chars, Keep::Head).ellipsis()
}

/// R2E's wrapper for every tool but bash: `Execution output of [name]:\n…`.
pub(crate) fn wrap(name: &str, body: &str) -> String {
    format!("Execution output of [{name}]:\n{body}")
}

pub(crate) fn env_err(tool: &str) -> impl FnOnce(SandboxError) -> ToolError + '_ {
    move |source| ToolError::Env {
        tool: tool.to_string(),
        source,
    }
}

/// A function schema with string-typed properties unless given.
pub(crate) fn function_schema(
    name: &str,
    description: &str,
    properties: Value,
    required: &[&str],
) -> Value {
    serde_json::json!({
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn args_coerce_text_values() {
        let m =
            args(json!({"a": "12", "b": "[1, -1]", "c": [3, "4"], "d": "false", "e": {"x": 1}}));
        let a = Args(&m);
        assert_eq!(a.int("a").unwrap(), Some(12));
        assert_eq!(a.int_list("b").unwrap(), Some(vec![1, -1]));
        assert_eq!(a.int_list("c").unwrap(), Some(vec![3, 4]));
        assert_eq!(a.bool("d").unwrap(), Some(false));
        assert!(a.str("e").unwrap_err().to_string().contains("an object"));
        assert!(a.int("e").is_err());
        assert_eq!(a.int("zz").unwrap(), None);
    }

    #[test]
    fn named_sets_have_expected_tools() {
        assert_eq!(
            ToolRegistry::named("r2e").unwrap().names(),
            ["search", "file_editor", "execute_bash", "finish"]
        );
        assert_eq!(
            ToolRegistry::named("swe-master").unwrap().names(),
            ["str_replace_editor", "execute_bash", "submit"]
        );
        assert_eq!(
            ToolRegistry::named("dojo").unwrap().names(),
            ["search", "str_replace_editor", "execute_bash", "submit"]
        );
        assert!(ToolRegistry::named("nope").is_none());
        for set in TOOL_SETS {
            let r = ToolRegistry::named(set).unwrap();
            assert_eq!(
                r.specs().len(),
                r.names().len(),
                "{set} schemas parse as ToolSpec"
            );
        }
    }

    #[test]
    fn check_args_reports_unknown_and_missing() {
        let schema = function_schema("t", "d", json!({"a": {"type": "string"}}), &["a"]);
        assert!(check_args(&schema, &args(json!({"a": "x"}))).is_ok());
        assert!(
            check_args(&schema, &args(json!({})))
                .unwrap_err()
                .to_string()
                .contains("missing")
        );
        assert!(
            check_args(&schema, &args(json!({"a": "x", "b": 1})))
                .unwrap_err()
                .to_string()
                .contains("unknown parameter(s) b")
        );
    }
}
