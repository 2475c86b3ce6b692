//! SWE-Master's optional `lsp_tool`, from `dojo-lsp`, as a registry tool. The language server
//! belongs to one sandbox, so the tool is built per rollout and added with
//! [`super::ToolRegistry::register`]:
//!
//! ```ignore
//! let lsp = dojo_lsp::LspTool::sandboxed(sandbox.clone(), dojo_lsp::ServerKind::Ty).await?;
//! registry.register(Arc::new(LspToolAdapter::new(lsp)));
//! ```

use dojo_llm::BoxFuture;
use serde_json::{Map, Value};

use super::{Tool, ToolContext, ToolError, ToolOutput, wrap};

pub struct LspToolAdapter {
    inner: dojo_lsp::LspTool,
}

impl LspToolAdapter {
    pub fn new(inner: dojo_lsp::LspTool) -> Self {
        LspToolAdapter { inner }
    }
}

impl Tool for LspToolAdapter {
    fn name(&self) -> &str {
        dojo_lsp::LspTool::NAME
    }
    fn schema(&self) -> Value {
        self.inner.schema()
    }
    fn call<'a>(
        &'a self,
        _ctx: &'a mut ToolContext<'_>,
        args: &'a Map<String, Value>,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let obs = self.inner.call_detailed(&Value::Object(args.clone())).await;
            Ok(ToolOutput {
                text: wrap(self.name(), &obs.text),
                error: !obs.success,
                // A language-server failure is recorded but does not end the rollout: the agent is
                // told to carry on with the other tools.
                infra_note: obs
                    .infra
                    .map(|e| format!("{:?} ({}): {}", e.kind, e.server, e.detail)),
                ..Default::default()
            })
        })
    }
}
