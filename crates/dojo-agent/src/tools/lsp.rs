//! SWE-Master's optional `lsp_tool`, from `dojo-lsp`, as a registry tool.
//!
//! Two ways to add it:
//! - **By tool-set name** (what `dojo rollout` uses): `tool_set = "swe-master+lsp"` (ty) or
//!   `"r2e+lsp:pyrefly"` in a policy's `[agent]` table; [`super::ToolRegistry::named`] adds a
//!   [`LspToolAdapter::per_rollout`] tool. The language server starts on the tool's first call,
//!   inside the rollout's sandbox (lent by the workspace each call), and lives in the rollout's
//!   tool context, so every rollout has its own server and it dies with the rollout.
//! - **With a ready tool** (tests, host directories): `LspToolAdapter::new(LspTool::host(..))`.

use std::sync::Arc;

use dojo_llm::BoxFuture;
use dojo_lsp::ServerKind;
use serde_json::{Map, Value};

use super::{Tool, ToolContext, ToolError, ToolOutput, wrap};

/// The suffix of a tool-set name that adds the `lsp_tool`.
const LSP_SUFFIX: &str = "+lsp";

/// A tool-set name whose `+lsp` part is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolSetError {
    #[error("tool set {set:?}: unknown language server {name:?}; use one of: {known}")]
    UnknownServer {
        set: String,
        name: String,
        known: String,
    },
    #[error("tool set {set:?}: expected `+lsp` or `+lsp:SERVER`")]
    Malformed { set: String },
}

/// Split `BASE+lsp` / `BASE+lsp:SERVER` into the base tool set and the server (`ty` unless
/// named). `Ok(None)` when the name asks for no LSP; `Err` for an unknown server.
pub fn split_tool_set(set: &str) -> Result<Option<(&str, ServerKind)>, ToolSetError> {
    let Some(i) = set.find(LSP_SUFFIX) else {
        return Ok(None);
    };
    let (base, rest) = (&set[..i], &set[i + LSP_SUFFIX.len()..]);
    let kind = match rest.strip_prefix(':') {
        None if rest.is_empty() => ServerKind::default(),
        Some(name) => ServerKind::parse(name).ok_or_else(|| ToolSetError::UnknownServer {
            set: set.to_string(),
            name: name.to_string(),
            known: ServerKind::ALL.map(|k| k.name()).join(", "),
        })?,
        None => {
            return Err(ToolSetError::Malformed {
                set: set.to_string(),
            });
        }
    };
    Ok(Some((base, kind)))
}

enum Inner {
    /// A tool with its own backend (host directory, or a sandbox it shares).
    Ready(dojo_lsp::LspTool),
    /// Started per rollout, in the sandbox the workspace lends to each call.
    PerRollout(ServerKind),
}

pub struct LspToolAdapter {
    inner: Inner,
}

/// The rollout's server, kept in its [`ToolContext`]; an install failure is kept too so it is
/// reported once per call, not retried (downloaded) on every call.
#[derive(Default)]
struct RolloutLsp(Option<Result<Arc<dojo_lsp::LspTool>, Arc<dojo_lsp::LspError>>>);

impl LspToolAdapter {
    pub fn new(inner: dojo_lsp::LspTool) -> Self {
        LspToolAdapter {
            inner: Inner::Ready(inner),
        }
    }

    /// A tool whose `kind` server starts on the first call inside the rollout's sandbox.
    pub fn per_rollout(kind: ServerKind) -> Self {
        LspToolAdapter {
            inner: Inner::PerRollout(kind),
        }
    }

    /// The server this tool runs.
    pub fn server(&self) -> ServerKind {
        match &self.inner {
            Inner::Ready(t) => t.session().kind(),
            Inner::PerRollout(k) => *k,
        }
    }
}

impl Tool for LspToolAdapter {
    fn name(&self) -> &str {
        dojo_lsp::LspTool::NAME
    }
    fn schema(&self) -> Value {
        dojo_lsp::LspTool::tool_schema()
    }
    fn call<'a>(
        &'a self,
        ctx: &'a mut ToolContext<'_>,
        args: &'a Map<String, Value>,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let args = Value::Object(args.clone());
            let obs = match &self.inner {
                Inner::Ready(tool) => tool.call_detailed(&args).await,
                Inner::PerRollout(kind) => {
                    let ws = ctx.ws;
                    let Some(sandbox) = ws.sandbox() else {
                        let e = dojo_lsp::LspError::Workspace(
                            "lsp_tool runs its language server inside the rollout's sandbox, and this workspace has none".into(),
                        );
                        return Ok(output(
                            self.name(),
                            dojo_lsp::Observation::from_error(*kind, e),
                        ));
                    };
                    let slot = ctx.state::<RolloutLsp>(dojo_lsp::LspTool::NAME);
                    let tool = match slot.0.clone() {
                        Some(t) => t,
                        None => {
                            let t = dojo_lsp::LspTool::for_lent_sandbox(*kind)
                                .await
                                .map(Arc::new)
                                .map_err(Arc::new);
                            slot.0 = Some(t.clone());
                            t
                        }
                    };
                    match tool {
                        Ok(t) => t.call_in(sandbox, &args).await,
                        // Kept: the install error is reported again, not retried.
                        Err(e) => {
                            dojo_lsp::Observation::from_error(*kind, dojo_lsp::LspError::Kept(e))
                        }
                    }
                }
            };
            Ok(output(self.name(), obs))
        })
    }
}

fn output(name: &str, obs: dojo_lsp::Observation) -> ToolOutput {
    ToolOutput {
        text: wrap(name, &obs.text),
        error: !obs.success,
        // A language-server failure is recorded but does not end the rollout: the agent is told
        // to carry on with the other tools.
        infra_note: obs
            .infra
            .map(|e| format!("{:?} ({}): {}", e.kind, e.server, e.detail)),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_set_names_with_lsp() {
        assert_eq!(split_tool_set("swe-master"), Ok(None));
        assert_eq!(
            split_tool_set("swe-master+lsp"),
            Ok(Some(("swe-master", ServerKind::Ty)))
        );
        assert_eq!(
            split_tool_set("r2e+lsp:pyrefly"),
            Ok(Some(("r2e", ServerKind::Pyrefly)))
        );
        assert_eq!(
            split_tool_set("r2e+lsp:BasedPyright"),
            Ok(Some(("r2e", ServerKind::Basedpyright)))
        );
        let e = split_tool_set("r2e+lsp:jedi").unwrap_err().to_string();
        assert!(e.contains("unknown language server \"jedi\""), "{e}");
        assert!(split_tool_set("r2e+lspx").is_err());
    }
}
