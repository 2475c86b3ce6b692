//! The agent-facing `lsp_tool`: SWE-Master's commands and output format on top of a session.
//!
//! Three layers, one file each: this file is the agent's surface (the tool's name, schema,
//! arguments, observations and the infrastructure events that come with failures);
//! [`query`] turns one call into language-server requests and their answers into an
//! observation's body, with [`position`] finding the column the agent means; [`render`] holds
//! the text helpers that body is written with (numbered source, outlines, call lists, output
//! caps).
//!
//! A call names a `command`, and a position as `file_path` + `symbol` + 1-based `line` (the
//! column is found from the symbol on that line, so the model never counts characters), or a
//! `query` for workspace symbols. Observations start with `[status_code]: success|error` and
//! `[Result]:` like SWE-Master's, so trajectories from either scaffold read the same.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::LspError;
use crate::backend::{Backend, HostBackend};
use crate::servers::{ServerKind, install};
use crate::session::{LspSession, SessionOptions};

mod position;
mod query;
mod render;

use query::Call;
pub use render::kind_name;

/// The commands of SWE-Master's `lsp_tool`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    GetDefinition,
    GetTypeDefinition,
    GetImplementation,
    GetHover,
    GetReferences,
    GetDocumentHighlights,
    GetDocumentSymbols,
    GetWorkspaceSymbols,
    GetCallHierarchy,
}

impl Command {
    pub const ALL: [Command; 9] = [
        Command::GetDefinition,
        Command::GetTypeDefinition,
        Command::GetImplementation,
        Command::GetHover,
        Command::GetReferences,
        Command::GetDocumentHighlights,
        Command::GetDocumentSymbols,
        Command::GetWorkspaceSymbols,
        Command::GetCallHierarchy,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Command::GetDefinition => "get_definition",
            Command::GetTypeDefinition => "get_type_definition",
            Command::GetImplementation => "get_implementation",
            Command::GetHover => "get_hover",
            Command::GetReferences => "get_references",
            Command::GetDocumentHighlights => "get_document_highlights",
            Command::GetDocumentSymbols => "get_document_symbols",
            Command::GetWorkspaceSymbols => "get_workspace_symbols",
            Command::GetCallHierarchy => "get_call_hierarchy",
        }
    }

    pub fn parse(s: &str) -> Option<Command> {
        Command::ALL.into_iter().find(|c| c.name() == s)
    }

    fn needs_position(self) -> bool {
        !matches!(
            self,
            Command::GetDocumentSymbols | Command::GetWorkspaceSymbols
        )
    }
}

/// A name that is none of the tool's commands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown command {0:?}; use one of: {names}", names = Command::ALL.map(Command::name).join(", "))]
pub struct UnknownCommand(pub String);

impl std::str::FromStr for Command {
    type Err = UnknownCommand;

    /// A command by its name (`get_definition`, ...).
    fn from_str(s: &str) -> Result<Command, UnknownCommand> {
        Command::parse(s).ok_or_else(|| UnknownCommand(s.to_string()))
    }
}

impl Command {
    /// The tool call's arguments as the agent would send them: the command and the fields
    /// given (`dojo lsp` builds one from its flags).
    pub fn call(
        self,
        file: Option<&str>,
        symbol: Option<&str>,
        line: Option<u64>,
        query: Option<&str>,
    ) -> serde_json::Value {
        let mut call = serde_json::Map::new();
        call.insert("command".into(), self.name().into());
        let fields = [("file_path", file), ("symbol", symbol), ("query", query)];
        for (k, v) in fields {
            if let Some(v) = v {
                call.insert(k.into(), v.into());
            }
        }
        if let Some(l) = line {
            call.insert("line".into(), l.into());
        }
        serde_json::Value::Object(call)
    }
}

/// Why an observation is not the agent's fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LspInfraKind {
    ServerMissing,
    ServerCrashed,
    ServerTimeout,
    NotReady,
    Workspace,
}

/// An infrastructure event to record in the trajectory (never scored as the agent's failure).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InfraEvent {
    pub kind: LspInfraKind,
    pub server: String,
    pub detail: String,
}

/// What one call produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// Exactly what the agent sees.
    pub text: String,
    /// False for every error message (bad arguments, no answer, infrastructure).
    pub success: bool,
    pub infra: Option<InfraEvent>,
}

/// Whose problem an answer was; `dojo lsp` maps it to its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The tool answered.
    Success,
    /// The tool answered with an error message (bad arguments, no answer): the caller's problem.
    Refused,
    /// The server could not be installed, started or kept alive.
    Infrastructure,
}

impl Observation {
    /// Whose problem the answer was.
    pub fn outcome(&self) -> Outcome {
        if self.infra.is_some() {
            Outcome::Infrastructure
        } else if self.success {
            Outcome::Success
        } else {
            Outcome::Refused
        }
    }

    fn ok(body: String) -> Self {
        Observation {
            text: format!("[status_code]: success\n[Result]:\n{}", body.trim_end()),
            success: true,
            infra: None,
        }
    }
    fn err(body: String) -> Self {
        Observation {
            text: format!("[status_code]: error\n[Result]:\n{}", body.trim_end()),
            success: false,
            infra: None,
        }
    }

    fn failed(
        server: ServerKind,
        Fail {
            message: msg,
            infra,
        }: Fail,
    ) -> Self {
        let mut o = Observation::err(msg);
        o.infra = infra.map(|kind| InfraEvent {
            kind,
            server: server.name().to_string(),
            detail: o.text.lines().skip(2).collect::<Vec<_>>().join("\n"),
        });
        o
    }

    /// What the agent sees when the tool could not even be set up (install failed, no
    /// sandbox): the same error observation, and infrastructure event, a call would give.
    pub fn from_error(server: ServerKind, e: LspError) -> Self {
        Observation::failed(server, e.into())
    }
}

/// The parsed arguments of one call.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub(crate) struct Args {
    pub(crate) command: Option<String>,
    pub(crate) file_path: Option<String>,
    pub(crate) symbol: Option<String>,
    pub(crate) line: Option<Value>,
    pub(crate) query: Option<String>,
}

/// The `lsp_tool` an agent registers: `name()`, `schema()`, `call(args)`.
pub struct LspTool {
    session: Arc<LspSession>,
}

/// An error message for the agent, possibly with an infrastructure event.
pub(crate) struct Fail {
    /// What the agent is told (data for its observation, so text).
    pub(crate) message: String,
    pub(crate) infra: Option<LspInfraKind>,
}

impl From<LspError> for Fail {
    fn from(e: LspError) -> Self {
        let kind = e.infra_kind();
        let msg = match &e {
            LspError::NoSuchFile(p) => format!("File `{p}` does not exist in the workspace."),
            LspError::Rpc { message, .. } => {
                format!("The language server refused the request: {message}")
            }
            _ => format!(
                "{e}. This is an infrastructure problem, not a problem with your input; use other tools meanwhile."
            ),
        };
        Fail {
            message: msg,
            infra: kind,
        }
    }
}

pub(crate) type Res<T> = Result<T, Fail>;

pub(crate) fn bad(msg: impl Into<String>) -> Fail {
    Fail {
        message: msg.into(),
        infra: None,
    }
}

impl LspTool {
    pub const NAME: &'static str = "lsp_tool";

    pub fn new(session: Arc<LspSession>) -> Self {
        LspTool { session }
    }

    /// Install `kind` (blocking download on first use, off the runtime threads) and build a tool
    /// whose server runs on `backend`.
    pub async fn with_backend(
        backend: Arc<dyn Backend>,
        kind: ServerKind,
        opts: SessionOptions,
    ) -> Result<Self, LspError> {
        let launch = tokio::task::spawn_blocking(move || install(kind))
            .await
            .map_err(|e| LspError::server_failed("install task", e))??;
        LspTool::from_launch(backend, kind, launch, opts)
    }

    /// A tool over a host directory (`dojo lsp --source DIR`).
    pub async fn host(
        root: impl AsRef<std::path::Path>,
        kind: ServerKind,
    ) -> Result<Self, LspError> {
        Self::with_backend(
            Arc::new(HostBackend::new(root)?),
            kind,
            SessionOptions::default(),
        )
        .await
    }

    /// A tool whose server runs inside a rollout's sandbox.
    #[cfg(feature = "sandbox")]
    pub async fn sandboxed(
        sandbox: Arc<dojo_sandbox::Sandbox>,
        kind: ServerKind,
    ) -> Result<Self, LspError> {
        let launch = install_for_sandboxes(kind).await?;
        let backend = Arc::new(crate::backend::SandboxBackend::new(sandbox));
        LspTool::from_launch(backend, kind, launch, SessionOptions::default())
    }

    /// A tool for a sandbox that each call lends ([`LspTool::call_in`]): an agent's tools get
    /// their rollout's sandbox only as a borrow per call. The server starts on the first call,
    /// inside that sandbox, over `/testbed`.
    #[cfg(feature = "sandbox")]
    pub async fn for_lent_sandbox(kind: ServerKind) -> Result<Self, LspError> {
        let launch = install_for_sandboxes(kind).await?;
        let backend = Arc::new(crate::backend::Lent::new(dojo_sandbox::WORKSPACE));
        LspTool::from_launch(backend, kind, launch, SessionOptions::default())
    }

    /// One call with the server running in `sandbox` (see [`LspTool::for_lent_sandbox`]).
    #[cfg(feature = "sandbox")]
    pub async fn call_in(&self, sandbox: &dojo_sandbox::Sandbox, args: &Value) -> Observation {
        self.call_on(&crate::backend::SandboxBackend::new(sandbox), args)
            .await
    }

    /// A tool over `backend` running an already installed (or custom) server command.
    pub fn from_launch(
        backend: Arc<dyn Backend>,
        kind: ServerKind,
        launch: crate::backend::Launch,
        opts: SessionOptions,
    ) -> Result<Self, LspError> {
        Ok(LspTool::new(Arc::new(LspSession::new(
            backend, kind, launch, opts,
        )?)))
    }

    pub fn session(&self) -> &Arc<LspSession> {
        &self.session
    }

    pub fn name(&self) -> &'static str {
        Self::NAME
    }

    /// OpenAI function-calling JSON for the tool.
    pub fn schema(&self) -> Value {
        Self::tool_schema()
    }

    /// [`LspTool::schema`] without a tool (prompts and docs are built before any server runs).
    pub fn tool_schema() -> Value {
        json!({
            "type": "function",
            "function": {
                "name": Self::NAME,
                "description": concat!(
                    "Navigate Python code with a language server (semantic, not text search).\n",
                    "* Position commands take `file_path`, `symbol` (the name as written on that line) and `line` (1-based); ",
                    "the column is found from the symbol on that line.\n",
                    "* get_definition / get_type_definition / get_implementation: where the symbol (or its type) is defined, with the source of the defining function or class.\n",
                    "* get_hover: signature and docstring.\n",
                    "* get_references: every use in the workspace, grouped by file as `line:column` (1-based).\n",
                    "* get_document_highlights: uses of the symbol within the same file.\n",
                    "* get_call_hierarchy: functions calling it (incoming) and functions it calls (outgoing).\n",
                    "* get_document_symbols: outline of `file_path` (no symbol/line needed).\n",
                    "* get_workspace_symbols: find classes/functions by name with `query`.\n",
                    "Edits you make (with any tool) are seen by the next call."
                ),
                "parameters": {
                    "type": "object",
                    "properties": {
                        "command": {
                            "type": "string",
                            "enum": Command::ALL.iter().map(|c| c.name()).collect::<Vec<_>>(),
                            "description": "The navigation to perform."
                        },
                        "file_path": {"type": "string", "description": "Path of the file, absolute or relative to the repository root."},
                        "symbol": {"type": "string", "description": "The identifier as it appears on `line`, e.g. `_sympify` or `self.parse`."},
                        "line": {"type": "integer", "description": "1-based line number where `symbol` appears."},
                        "query": {"type": "string", "description": "Name (or part of it) to look up, for get_workspace_symbols."}
                    },
                    "required": ["command"]
                }
            }
        })
    }

    /// Run one call; the returned string is the observation.
    pub async fn call(&self, args: &Value) -> String {
        self.call_detailed(args).await.text
    }

    /// Run one call, keeping the success flag and any infrastructure event.
    pub async fn call_detailed(&self, args: &Value) -> Observation {
        self.call_on(&**self.session.backend(), args).await
    }

    /// [`LspTool::call_detailed`] through a backend lent for this call (see
    /// [`LspSession::query_on`]): how an agent tool runs the server in the sandbox it borrows.
    pub async fn call_on(&self, be: &dyn Backend, args: &Value) -> Observation {
        let call = Call {
            session: &self.session,
            be,
        };
        match call.dispatch(args).await {
            Ok(body) => Observation::ok(body),
            Err(fail) => Observation::failed(self.session.kind(), fail),
        }
    }
}

/// Install `kind` (blocking download on first use, off the runtime threads) where sandboxes see
/// it: they hide $DOJO_HOME and mount a private /tmp, so a server there could not start.
#[cfg(feature = "sandbox")]
async fn install_for_sandboxes(kind: ServerKind) -> Result<crate::backend::Launch, LspError> {
    let launch = tokio::task::spawn_blocking(move || install(kind))
        .await
        .map_err(|e| LspError::server_failed("install task", e))??;
    let home = dojo_cache::dojo_home();
    if let Some(p) = launch.argv.iter().find(|a| {
        a.starts_with('/') && (std::path::Path::new(a).starts_with(&home) || a.starts_with("/tmp/"))
    }) {
        return Err(LspError::ServerMissing(format!(
            "{p} is not visible inside sandboxes (under $DOJO_HOME or /tmp); set DOJO_TOOLS to a world-readable directory elsewhere, e.g. /var/lib/dojo/tools"
        )));
    }
    Ok(launch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_say_whose_problem() {
        let ok = Observation::ok("x".into());
        assert_eq!(ok.outcome(), Outcome::Success);
        let refused = Observation {
            success: false,
            ..ok.clone()
        };
        assert_eq!(refused.outcome(), Outcome::Refused);
    }

    #[test]
    fn calls_are_built_from_the_fields_given() {
        let c: Command = "get_hover".parse().unwrap();
        assert_eq!(
            c.call(Some("a.py"), Some("f"), Some(3), None),
            serde_json::json!({"command": "get_hover", "file_path": "a.py", "symbol": "f", "line": 3})
        );
        let e = "get_x".parse::<Command>().unwrap_err().to_string();
        assert!(
            e.starts_with("unknown command \"get_x\"; use one of: get_definition, "),
            "{e}"
        );
    }

    #[test]
    fn schema_lists_every_command() {
        let cmds: Vec<&str> = Command::ALL.iter().map(|c| c.name()).collect();
        for c in &cmds {
            assert_eq!(Command::parse(c).map(Command::name), Some(*c));
        }
        insta::assert_json_snapshot!("schema", LspTool::tool_schema());
    }
}
