//! `submit` (SWE-Master) / `finish{command: submit}` (R2E-Gym): ends the episode; the workspace
//! diff at that moment is the agent's answer.

use dojo_llm::BoxFuture;
use serde_json::{Map, Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput, function_schema};

/// The observation of a submission.
pub const FINISHED: &str = "<<< Finished >>>";

pub struct SubmitTool {
    name: &'static str,
    r2e: bool,
}

impl SubmitTool {
    /// `finish{command: "submit", result}`.
    pub fn r2e() -> Self {
        SubmitTool {
            name: "finish",
            r2e: true,
        }
    }
    /// `submit{}`.
    pub fn swe_master() -> Self {
        SubmitTool {
            name: "submit",
            r2e: false,
        }
    }
}

impl Tool for SubmitTool {
    fn name(&self) -> &str {
        self.name
    }
    fn schema(&self) -> Value {
        if self.r2e {
            function_schema(
                self.name,
                "Finish the task: submit the current state of the repository as your solution. Call it once the \
                 issue is resolved and verified.",
                json!({
                    "command": {"type": "string", "enum": ["submit"], "description": "Always `submit`."},
                    "result": {"type": "string", "description": "Optional summary of the change."},
                }),
                &["command"],
            )
        } else {
            function_schema(
                self.name,
                "Finish the task: submit the current state of the repository as your solution. Call it once the \
                 issue is resolved and verified; it ends the interaction.",
                json!({}),
                &[],
            )
        }
    }
    fn call<'a>(
        &'a self,
        _ctx: &'a mut ToolContext<'_>,
        args: &'a Map<String, Value>,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let wrong = args
                .get("command")
                .and_then(Value::as_str)
                .filter(|c| *c != "submit");
            if let (true, Some(c)) = (self.r2e, wrong) {
                return Ok(ToolOutput::error(super::wrap(
                    self.name,
                    &format!("ERROR: Unknown command '{c}' for finish; use `submit`."),
                )));
            }
            Ok(ToolOutput {
                text: FINISHED.to_string(),
                submitted: true,
                ..Default::default()
            })
        })
    }
}
