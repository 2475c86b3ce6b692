//! The agent-facing `lsp_tool`: SWE-Master's commands and output format on top of a session.
//!
//! A call names a `command`, and a position as `file_path` + `symbol` + 1-based `line` (the
//! column is found from the symbol on that line, so the model never counts characters), or a
//! `query` for workspace symbols. Observations start with `[status_code]: success|error` and
//! `[Result]:` like SWE-Master's, so trajectories from either scaffold read the same.

use std::collections::BTreeMap;
use std::sync::Arc;

use lsp_types::{
    CallHierarchyIncomingCall, CallHierarchyItem, CallHierarchyOutgoingCall, DocumentHighlight,
    DocumentSymbol, DocumentSymbolResponse, GotoDefinitionResponse, Hover, HoverContents, Location,
    MarkedString, OneOf, Position, Range, SymbolKind, Url, WorkspaceSymbolResponse,
};
use serde_json::{Value, json};

use crate::LspError;
use crate::backend::{Backend, HostBackend};
use crate::servers::{ServerKind, install};
use crate::session::{LspSession, SessionOptions};

/// Output caps: observations go into the model's context.
const MAX_DEF_LOCATIONS: usize = 5;
const MAX_SOURCE_LINES: usize = 80;
const MAX_REFERENCES: usize = 200;
const MAX_SYMBOL_LINES: usize = 300;
const MAX_WORKSPACE_FILES: usize = 100;
const MAX_WORKSPACE_SYMBOLS: usize = 300;
const MAX_CALLS: usize = 100;
const MAX_HOVER_CHARS: usize = 4000;

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

/// Why an observation is not the agent's fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InfraKind {
    ServerMissing,
    ServerCrashed,
    ServerTimeout,
    NotReady,
    Workspace,
}

/// An infrastructure event to record in the trajectory (never scored as the agent's failure).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InfraEvent {
    pub kind: InfraKind,
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

impl Observation {
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

    fn failed(server: ServerKind, Fail(msg, infra): Fail) -> Self {
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
struct Args {
    command: Option<String>,
    file_path: Option<String>,
    symbol: Option<String>,
    line: Option<Value>,
    query: Option<String>,
}

/// The `lsp_tool` an agent registers: `name()`, `schema()`, `call(args)`.
pub struct LspTool {
    session: Arc<LspSession>,
}

/// An error message for the agent, possibly with an infrastructure event.
struct Fail(String, Option<InfraKind>);

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
        Fail(msg, kind)
    }
}

type Res<T> = Result<T, Fail>;

fn bad(msg: impl Into<String>) -> Fail {
    Fail(msg.into(), None)
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
            .map_err(|e| LspError::ServerMissing(format!("install task: {e}")))??;
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
        .map_err(|e| LspError::ServerMissing(format!("install task: {e}")))??;
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

/// One call: the session and the backend it runs through.
struct Call<'a> {
    session: &'a LspSession,
    be: &'a dyn Backend,
}

impl Call<'_> {
    /// `followup`: a later request of the same call, which no edit can have preceded, so the
    /// workspace is not re-scanned.
    async fn ask(
        &self,
        file: Option<&str>,
        method: &str,
        params: Value,
        followup: bool,
    ) -> Result<Value, LspError> {
        self.session
            .query_on(self.be, file, method, params, followup)
            .await
    }

    async fn dispatch(&self, args: &Value) -> Res<String> {
        let args: Args = serde_json::from_value(args.clone())
            .map_err(|e| bad(format!("Invalid arguments: {e}")))?;
        let cmd_name = args
            .command
            .as_deref()
            .ok_or_else(|| bad("Missing `command`."))?;
        let cmd = Command::parse(cmd_name).ok_or_else(|| {
            bad(format!(
                "Unknown command `{cmd_name}`. Use one of: {}.",
                Command::ALL
                    .iter()
                    .map(|c| c.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        match cmd {
            Command::GetWorkspaceSymbols => {
                let q = args
                    .query
                    .as_deref()
                    .or(args.symbol.as_deref())
                    .filter(|q| !q.trim().is_empty());
                let q = q.ok_or_else(|| bad("get_workspace_symbols needs `query`."))?;
                self.workspace_symbols(q.trim()).await
            }
            Command::GetDocumentSymbols => {
                let file = args
                    .file_path
                    .as_deref()
                    .ok_or_else(|| bad("get_document_symbols needs `file_path`."))?;
                let file = self.normalize(file);
                self.document_symbols(&file).await
            }
            _ => {
                debug_assert!(cmd.needs_position());
                let (Some(file), Some(symbol), Some(line)) = (
                    args.file_path.as_deref(),
                    args.symbol.as_deref(),
                    args.line.as_ref(),
                ) else {
                    return Err(bad(format!(
                        "{} needs `file_path`, `symbol` and `line`.",
                        cmd.name()
                    )));
                };
                let line = parse_line(line).ok_or_else(|| {
                    bad(format!("`line` must be a positive integer, got {line}."))
                })?;
                let file = self.normalize(file);
                let at = self.locate(&file, symbol, line).await?;
                match cmd {
                    Command::GetDefinition => {
                        self.definition(&at, "textDocument/definition", "Definition")
                            .await
                    }
                    Command::GetTypeDefinition => {
                        self.definition(&at, "textDocument/typeDefinition", "Type definition")
                            .await
                    }
                    Command::GetImplementation => {
                        self.definition(&at, "textDocument/implementation", "Implementation")
                            .await
                    }
                    Command::GetHover => self.hover(&at).await,
                    Command::GetReferences => self.references(&at).await,
                    Command::GetDocumentHighlights => self.highlights(&at).await,
                    _ => self.call_hierarchy(&at).await,
                }
            }
        }
    }

    /// Workspace-relative form of a path the agent gave (`/testbed/x.py`, `./x.py`, `x.py`).
    fn normalize(&self, file: &str) -> String {
        let root = self.session.root();
        let p = std::path::Path::new(file.trim());
        match p.strip_prefix(root) {
            Ok(rel) => crate::session::clean_relative(&rel.to_string_lossy()),
            // Absolute paths outside the workspace (installed libraries) stay as they are.
            Err(_) if p.is_absolute() => p.to_string_lossy().into_owned(),
            Err(_) => crate::session::clean_relative(&p.to_string_lossy()),
        }
    }

    async fn read_text(&self, file: &str) -> Res<Option<String>> {
        Ok(self
            .be
            .read_file(file)
            .await?
            .map(|b| String::from_utf8_lossy(&b).into_owned()))
    }

    /// Find the symbol on the line; errors say what is there instead.
    async fn locate(&self, file: &str, symbol: &str, line: usize) -> Res<At> {
        let text = self
            .read_text(file)
            .await?
            .ok_or_else(|| bad(format!("File `{file}` does not exist in the workspace.")))?;
        let lines: Vec<&str> = text.lines().collect();
        if line == 0 || line > lines.len() {
            return Err(bad(format!(
                "Line {line} is out of range: `{file}` has {} lines.",
                lines.len()
            )));
        }
        let wanted = clean_symbol(symbol);
        if wanted.is_empty() {
            return Err(bad("`symbol` is empty."));
        }
        let line_text = lines[line - 1];
        let Some(byte_col) = find_symbol(line_text, &wanted) else {
            let near: Vec<String> = lines
                .iter()
                .enumerate()
                .filter(|(i, l)| i.abs_diff(line - 1) <= 20 && find_symbol(l, &wanted).is_some())
                .map(|(i, _)| (i + 1).to_string())
                .collect();
            let hint = if near.is_empty() {
                String::new()
            } else {
                format!("\n`{wanted}` appears on nearby lines: {}.", near.join(", "))
            };
            return Err(bad(format!(
                "Symbol `{wanted}` is not on line {line} of `{file}`. That line is:\n{line:>6} | {}{hint}",
                line_text.trim_end()
            )));
        };
        let character = line_text[..byte_col].encode_utf16().count() as u32;
        let uri = self.session.uri(file)?;
        Ok(At {
            file: file.to_string(),
            uri,
            symbol: wanted,
            pos: Position {
                line: (line - 1) as u32,
                character,
            },
        })
    }

    async fn position_query(&self, at: &At, method: &str, extra: Value) -> Res<Value> {
        let mut params = json!({"textDocument": {"uri": at.uri}, "position": at.pos});
        if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
            p.extend(e.clone());
        }
        Ok(self.ask(Some(&at.file), method, params, false).await?)
    }

    async fn definition(&self, at: &At, method: &str, what: &str) -> Res<String> {
        let v = self.position_query(at, method, json!({})).await?;
        let mut locs: Vec<(Url, Range)> = match parse::<Option<GotoDefinitionResponse>>(v)? {
            None => vec![],
            Some(GotoDefinitionResponse::Scalar(l)) => vec![(l.uri, l.range)],
            Some(GotoDefinitionResponse::Array(ls)) => {
                ls.into_iter().map(|l| (l.uri, l.range)).collect()
            }
            Some(GotoDefinitionResponse::Link(ls)) => ls
                .into_iter()
                .map(|l| (l.target_uri, l.target_selection_range))
                .collect(),
        };
        // Servers answer several locations in no fixed order: the project's own code first,
        // then stubs and installed packages, each by path and position, so the agent (and our
        // snapshots) see the same observation every time.
        locs.sort_by_key(|(uri, r)| {
            let u = uri.as_str();
            let external = u.contains("typeshed") || u.contains("site-packages");
            (external, u.to_string(), r.start.line, r.start.character)
        });
        if locs.is_empty() {
            return Err(bad(format!(
                "No {} found for `{}` at {}:{}:{} (the language server has no answer; it may be a builtin, dynamic attribute or unresolved import).",
                what.to_lowercase(),
                at.symbol,
                at.file,
                at.pos.line + 1,
                at.pos.character + 1
            )));
        }
        let mut out = format!(
            "{what} of `{}` ({} location{}):\n",
            at.symbol,
            locs.len(),
            plural(locs.len())
        );
        for (i, (uri, range)) in locs.iter().enumerate() {
            if i == MAX_DEF_LOCATIONS {
                out.push_str(&format!(
                    "\n[... {} more locations not shown]\n",
                    locs.len() - MAX_DEF_LOCATIONS
                ));
                break;
            }
            out.push('\n');
            out.push_str(&self.show_definition(uri, range).await?);
        }
        Ok(out)
    }

    /// `path:L:C`, then the source of the innermost symbol enclosing the location.
    async fn show_definition(&self, uri: &Url, range: &Range) -> Res<String> {
        let path = self.session.display_path(uri);
        let head = format!(
            "{path}:{}:{}",
            range.start.line + 1,
            range.start.character + 1
        );
        let Ok(fs_path) = uri.to_file_path() else {
            return Ok(format!("{head}\n"));
        };
        let fs_path = fs_path.to_string_lossy().into_owned();
        let Some(text) = self.read_text(&fs_path).await? else {
            return Ok(format!("{head}\n"));
        };
        let lines: Vec<&str> = text.lines().collect();
        // The enclosing symbol from the server's outline of that file; stubs and files outside the
        // workspace may have none, then a few lines of context.
        let symbols = match self
            .ask(
                Some(&fs_path),
                "textDocument/documentSymbol",
                json!({"textDocument": {"uri": uri}}),
                true,
            )
            .await
        {
            Ok(v) => flatten_symbols(parse::<Option<DocumentSymbolResponse>>(v).ok().flatten()),
            Err(e) if e.infra_kind().is_some() => return Err(e.into()),
            Err(_) => vec![],
        };
        let enclosing = symbols
            .iter()
            .filter(|s| contains(&s.range, &range.start))
            .min_by_key(|s| s.range.end.line - s.range.start.line);
        let (label, mut first, mut last) = match enclosing {
            Some(s) => (
                format!(" ({} `{}`)", kind_name(s.kind).to_lowercase(), s.name),
                s.range.start.line as usize,
                s.range.end.line as usize,
            ),
            None => (
                String::new(),
                range.start.line as usize,
                range.start.line as usize,
            ),
        };
        if last - first < 2 {
            first = first.saturating_sub(2);
            last += 2;
        }
        last = last.min(lines.len().saturating_sub(1));
        let mut out = format!("{head}{label}\n--- SOURCE CODE START ---\n");
        out.push_str(&numbered(
            &lines,
            first,
            last.min(first + MAX_SOURCE_LINES - 1),
        ));
        if last >= first + MAX_SOURCE_LINES {
            out.push_str(&format!(
                "[... {} more lines not shown: view {path} lines {}-{}]\n",
                last + 1 - (first + MAX_SOURCE_LINES),
                first + MAX_SOURCE_LINES + 1,
                last + 1
            ));
        }
        out.push_str("--- SOURCE CODE END ---\n");
        Ok(out)
    }

    async fn hover(&self, at: &At) -> Res<String> {
        let v = self
            .position_query(at, "textDocument/hover", json!({}))
            .await?;
        let text = parse::<Option<Hover>>(v)?
            .map(|h| hover_text(h.contents))
            .unwrap_or_default();
        if text.trim().is_empty() {
            return Err(bad(format!(
                "No hover information for `{}` at {}:{}.",
                at.symbol,
                at.file,
                at.pos.line + 1
            )));
        }
        Ok(format!(
            "Hover for `{}` at {}:{}:\n{}",
            at.symbol,
            at.file,
            at.pos.line + 1,
            cap_chars(text.trim(), MAX_HOVER_CHARS)
        ))
    }

    async fn references(&self, at: &At) -> Res<String> {
        let v = self
            .position_query(
                at,
                "textDocument/references",
                json!({"context": {"includeDeclaration": true}}),
            )
            .await?;
        let locs = parse::<Option<Vec<Location>>>(v)?.unwrap_or_default();
        if locs.is_empty() {
            return Err(bad(format!(
                "No references found for `{}` at {}:{}.",
                at.symbol,
                at.file,
                at.pos.line + 1
            )));
        }
        let mut by_file: BTreeMap<String, Vec<Position>> = BTreeMap::new();
        for l in &locs {
            by_file
                .entry(self.session.display_path(&l.uri))
                .or_default()
                .push(l.range.start);
        }
        let mut out = format!(
            "References to `{}`: {} in {} file{}\n",
            at.symbol,
            locs.len(),
            by_file.len(),
            plural(by_file.len())
        );
        let mut shown = 0;
        for (file, mut ps) in by_file {
            if shown >= MAX_REFERENCES {
                break;
            }
            ps.sort_by_key(|p| (p.line, p.character));
            out.push_str(&format!("{file} ({}):\n", ps.len()));
            for p in ps.iter().take(MAX_REFERENCES - shown) {
                out.push_str(&format!("  - {}:{}\n", p.line + 1, p.character + 1));
                shown += 1;
            }
        }
        if shown < locs.len() {
            out.push_str(&format!(
                "[... {} more references not shown]\n",
                locs.len() - shown
            ));
        }
        Ok(out)
    }

    async fn highlights(&self, at: &At) -> Res<String> {
        let v = self
            .position_query(at, "textDocument/documentHighlight", json!({}))
            .await?;
        let mut hs = parse::<Option<Vec<DocumentHighlight>>>(v)?.unwrap_or_default();
        if hs.is_empty() {
            return Err(bad(format!(
                "No highlights for `{}` at {}:{}.",
                at.symbol,
                at.file,
                at.pos.line + 1
            )));
        }
        hs.sort_by_key(|h| (h.range.start.line, h.range.start.character));
        let mut out = format!(
            "Occurrences of `{}` in {}: {}\n",
            at.symbol,
            at.file,
            hs.len()
        );
        for h in hs.iter().take(MAX_REFERENCES) {
            let kind = match h.kind.map(|k| serde_json::to_value(k).ok()) {
                Some(Some(Value::Number(n))) if n.as_u64() == Some(2) => " (read)",
                Some(Some(Value::Number(n))) if n.as_u64() == Some(3) => " (write)",
                _ => "",
            };
            out.push_str(&format!(
                "  - {}:{}{kind}\n",
                h.range.start.line + 1,
                h.range.start.character + 1
            ));
        }
        if hs.len() > MAX_REFERENCES {
            out.push_str(&format!(
                "[... {} more not shown]\n",
                hs.len() - MAX_REFERENCES
            ));
        }
        Ok(out)
    }

    async fn document_symbols(&self, file: &str) -> Res<String> {
        if self.read_text(file).await?.is_none() {
            return Err(bad(format!(
                "File `{file}` does not exist in the workspace."
            )));
        }
        let uri = self.session.uri(file)?;
        let v = self
            .ask(
                Some(file),
                "textDocument/documentSymbol",
                json!({"textDocument": {"uri": uri}}),
                false,
            )
            .await?;
        let mut lines = Vec::new();
        match parse::<Option<DocumentSymbolResponse>>(v)? {
            None => {}
            Some(DocumentSymbolResponse::Nested(syms)) => outline(&syms, 0, &mut lines),
            Some(DocumentSymbolResponse::Flat(syms)) => {
                for s in syms {
                    let c = s
                        .container_name
                        .map(|c| format!(" in {c}"))
                        .unwrap_or_default();
                    lines.push(format!(
                        "{}: {} ({}){c}",
                        s.location.range.start.line + 1,
                        s.name,
                        kind_name(s.kind)
                    ));
                }
            }
        }
        if lines.is_empty() {
            return Ok(format!("No symbols in {file}."));
        }
        let total = lines.len();
        let mut out = format!("Symbols in {file} ({total}):\n");
        for l in lines.iter().take(MAX_SYMBOL_LINES) {
            out.push_str(l);
            out.push('\n');
        }
        if total > MAX_SYMBOL_LINES {
            out.push_str(&format!(
                "[... {} more symbols not shown]\n",
                total - MAX_SYMBOL_LINES
            ));
        }
        Ok(out)
    }

    async fn workspace_symbols(&self, query: &str) -> Res<String> {
        let v = self
            .ask(None, "workspace/symbol", json!({"query": query}), false)
            .await?;
        let mut found: Vec<(String, u32, String, SymbolKind)> = Vec::new();
        match parse::<Option<WorkspaceSymbolResponse>>(v)? {
            None => {}
            Some(WorkspaceSymbolResponse::Flat(syms)) => {
                for s in syms {
                    found.push((
                        self.session.display_path(&s.location.uri),
                        s.location.range.start.line,
                        s.name,
                        s.kind,
                    ));
                }
            }
            Some(WorkspaceSymbolResponse::Nested(syms)) => {
                for s in syms {
                    let (uri, line) = match s.location {
                        OneOf::Left(l) => (l.uri, l.range.start.line),
                        OneOf::Right(w) => (w.uri, 0),
                    };
                    found.push((self.session.display_path(&uri), line, s.name, s.kind));
                }
            }
        }
        if found.is_empty() {
            return Err(bad(format!("No workspace symbols match `{query}`.")));
        }
        // Exact names first, then workspace files before library files, then by path.
        found.sort_by(|a, b| {
            (a.2 != query, a.0.starts_with('/'), &a.0, a.1).cmp(&(
                b.2 != query,
                b.0.starts_with('/'),
                &b.0,
                b.1,
            ))
        });
        let mut by_file: Vec<(String, Vec<String>)> = Vec::new();
        for (path, line, name, kind) in &found {
            let entry = format!("  - {}: {name} ({})", line + 1, kind_name(*kind));
            match by_file.iter_mut().find(|(p, _)| p == path) {
                Some((_, v)) => v.push(entry),
                None => by_file.push((path.clone(), vec![entry])),
            }
        }
        let mut out = format!(
            "Workspace symbols matching `{query}`: {} in {} file{}\n",
            found.len(),
            by_file.len(),
            plural(by_file.len())
        );
        let mut shown = 0;
        for (path, entries) in by_file.iter().take(MAX_WORKSPACE_FILES) {
            if shown >= MAX_WORKSPACE_SYMBOLS {
                break;
            }
            out.push_str(&format!("{path}:\n"));
            for e in entries.iter().take(MAX_WORKSPACE_SYMBOLS - shown) {
                out.push_str(e);
                out.push('\n');
                shown += 1;
            }
        }
        if shown < found.len() {
            out.push_str(&format!(
                "[... {} more symbols not shown; refine the query]\n",
                found.len() - shown
            ));
        }
        Ok(out)
    }

    async fn call_hierarchy(&self, at: &At) -> Res<String> {
        let v = self
            .position_query(at, "textDocument/prepareCallHierarchy", json!({}))
            .await?;
        let items = parse::<Option<Vec<CallHierarchyItem>>>(v)?.unwrap_or_default();
        let Some(item) = items.into_iter().next() else {
            return Err(bad(format!(
                "No call hierarchy for `{}` at {}:{} (it must name a function, method or class).",
                at.symbol,
                at.file,
                at.pos.line + 1
            )));
        };
        let item_json = serde_json::to_value(&item).map_err(|e| bad(e.to_string()))?;
        let incoming = self
            .ask(
                None,
                "callHierarchy/incomingCalls",
                json!({"item": item_json}),
                true,
            )
            .await?;
        let incoming =
            parse::<Option<Vec<CallHierarchyIncomingCall>>>(incoming)?.unwrap_or_default();
        let outgoing = self
            .ask(
                None,
                "callHierarchy/outgoingCalls",
                json!({"item": item_json}),
                true,
            )
            .await?;
        let outgoing =
            parse::<Option<Vec<CallHierarchyOutgoingCall>>>(outgoing)?.unwrap_or_default();
        let mut out = format!(
            "Call hierarchy of {} `{}` ({}:{}):\n",
            kind_name(item.kind).to_lowercase(),
            item.name,
            self.session.display_path(&item.uri),
            item.selection_range.start.line + 1
        );
        let inc: Vec<(String, String)> = incoming
            .iter()
            .map(|c| {
                (
                    self.session.display_path(&c.from.uri),
                    call_line(&c.from, &c.from_ranges),
                )
            })
            .collect();
        calls_section(&mut out, "Incoming calls", "callers", inc);
        let outs: Vec<(String, String)> = outgoing
            .iter()
            .map(|c| {
                (
                    self.session.display_path(&c.to.uri),
                    call_line(&c.to, &c.from_ranges),
                )
            })
            .collect();
        calls_section(&mut out, "Outgoing calls", "callees", outs);
        Ok(out)
    }
}

/// A resolved position.
struct At {
    file: String,
    uri: Url,
    symbol: String,
    pos: Position,
}

fn parse<T: serde::de::DeserializeOwned>(v: Value) -> Res<T> {
    serde_json::from_value(v).map_err(|e| {
        Fail(
            format!("The language server sent an answer we cannot read: {e}"),
            Some(InfraKind::ServerCrashed),
        )
    })
}

fn parse_line(v: &Value) -> Option<usize> {
    match v {
        Value::Number(n) => n.as_u64().map(|n| n as usize),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Strip what models add around identifiers: backticks, call parentheses, whitespace.
pub(crate) fn clean_symbol(s: &str) -> String {
    let s = s.trim().trim_matches('`').trim();
    let s = s.strip_suffix("()").unwrap_or(s);
    s.to_string()
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Byte column of `symbol` on `line`: the first whole-word occurrence, else the first substring
/// occurrence. For dotted names (`self.parse`) the column of the last part, which is what the
/// agent is asking about.
pub(crate) fn find_symbol(line: &str, symbol: &str) -> Option<usize> {
    let whole = line.match_indices(symbol).map(|(i, _)| i).find(|&i| {
        let before = line[..i].chars().next_back();
        let after = line[i + symbol.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    });
    let start = whole.or_else(|| line.find(symbol))?;
    // Point at the last dotted part that names something (`self.parse` → `parse`); a symbol
    // with no name in it at all (`.`, `..`) points nowhere.
    let mut offset = 0;
    let mut last = None;
    for part in symbol.split('.') {
        if !part.is_empty() {
            last = Some(offset);
        }
        offset += part.len() + 1;
    }
    Some(start + last?)
}

fn contains(r: &Range, p: &Position) -> bool {
    (r.start.line, r.start.character) <= (p.line, p.character)
        && (p.line, p.character) <= (r.end.line, r.end.character)
}

/// Lines `first..=last` (0-based) with 1-based numbers.
fn numbered(lines: &[&str], first: usize, last: usize) -> String {
    let width = (last + 1).to_string().len().max(4);
    let mut out = String::new();
    for (i, l) in lines.iter().enumerate().take(last + 1).skip(first) {
        out.push_str(&format!("{:>width$} | {}\n", i + 1, l.trim_end()));
    }
    out
}

struct Sym {
    name: String,
    kind: SymbolKind,
    range: Range,
}

fn flatten_symbols(resp: Option<DocumentSymbolResponse>) -> Vec<Sym> {
    fn walk(syms: Vec<DocumentSymbol>, out: &mut Vec<Sym>) {
        for s in syms {
            out.push(Sym {
                name: s.name,
                kind: s.kind,
                range: s.range,
            });
            walk(s.children.unwrap_or_default(), out);
        }
    }
    let mut out = Vec::new();
    match resp {
        None => {}
        Some(DocumentSymbolResponse::Nested(syms)) => walk(syms, &mut out),
        Some(DocumentSymbolResponse::Flat(syms)) => out.extend(syms.into_iter().map(|s| Sym {
            name: s.name,
            kind: s.kind,
            range: s.location.range,
        })),
    }
    out
}

fn outline(syms: &[DocumentSymbol], depth: usize, out: &mut Vec<String>) {
    let mut sorted: Vec<&DocumentSymbol> = syms.iter().collect();
    sorted.sort_by_key(|s| {
        (
            s.selection_range.start.line,
            s.selection_range.start.character,
        )
    });
    for s in sorted {
        out.push(format!(
            "{}{}: {} ({})",
            "  ".repeat(depth),
            s.selection_range.start.line + 1,
            s.name,
            kind_name(s.kind)
        ));
        if let Some(children) = &s.children {
            outline(children, depth + 1, out);
        }
    }
}

/// One side of a call hierarchy, sorted and capped.
fn calls_section(out: &mut String, title: &str, noun: &str, mut calls: Vec<(String, String)>) {
    calls.sort();
    out.push_str(&format!("{title} ({}):\n", calls.len()));
    if calls.is_empty() {
        out.push_str("  (none found)\n");
    }
    for (path, l) in calls.iter().take(MAX_CALLS) {
        out.push_str(&format!("  - {path}: {l}\n"));
    }
    if calls.len() > MAX_CALLS {
        out.push_str(&format!(
            "  [... {} more {noun} not shown]\n",
            calls.len() - MAX_CALLS
        ));
    }
}

fn call_line(item: &CallHierarchyItem, ranges: &[Range]) -> String {
    let mut lines: Vec<String> = ranges
        .iter()
        .map(|r| format!("{}:{}", r.start.line + 1, r.start.character + 1))
        .collect();
    lines.dedup();
    format!(
        "{} `{}` (line {}), call sites at {}",
        kind_name(item.kind).to_lowercase(),
        item.name,
        item.selection_range.start.line + 1,
        if lines.is_empty() {
            "-".to_string()
        } else {
            lines.join(", ")
        }
    )
}

fn hover_text(c: HoverContents) -> String {
    fn marked(m: MarkedString) -> String {
        match m {
            MarkedString::String(s) => s,
            MarkedString::LanguageString(ls) => format!("```{}\n{}\n```", ls.language, ls.value),
        }
    }
    match c {
        HoverContents::Scalar(m) => marked(m),
        HoverContents::Array(ms) => ms.into_iter().map(marked).collect::<Vec<_>>().join("\n\n"),
        HoverContents::Markup(m) => m.value,
    }
}

fn cap_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let head: String = s.chars().take(max).collect();
    format!(
        "{head}\n[... {} more characters not shown]",
        s.chars().count() - max
    )
}

/// Readable names of LSP symbol kinds.
pub fn kind_name(k: SymbolKind) -> &'static str {
    const NAMES: [&str; 26] = [
        "File",
        "Module",
        "Namespace",
        "Package",
        "Class",
        "Method",
        "Property",
        "Field",
        "Constructor",
        "Enum",
        "Interface",
        "Function",
        "Variable",
        "Constant",
        "String",
        "Number",
        "Boolean",
        "Array",
        "Object",
        "Key",
        "Null",
        "EnumMember",
        "Struct",
        "Event",
        "Operator",
        "TypeParameter",
    ];
    let n = serde_json::to_value(k)
        .ok()
        .and_then(|v| v.as_u64())
        .unwrap_or(0) as usize;
    NAMES.get(n.wrapping_sub(1)).copied().unwrap_or("Symbol")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn finds_whole_words_first() {
        assert_eq!(
            find_symbol("    x = _sympify(a_sympify)", "_sympify"),
            Some(8)
        );
        assert_eq!(find_symbol("sympify(_sympify)", "sympify"), Some(0));
        assert_eq!(find_symbol("ab = b", "b"), Some(5));
        assert_eq!(find_symbol("ab", "b"), Some(1), "substring fallback");
        assert_eq!(find_symbol("x = 1", "y"), None);
    }

    #[test]
    fn dotted_symbols_point_at_the_last_part() {
        assert_eq!(
            find_symbol("        return self.parse(x)", "self.parse"),
            Some(20)
        );
        assert_eq!(clean_symbol(" `foo()` "), "foo");
        // Found by proptest: a symbol without a name must not point past the line.
        assert_eq!(find_symbol(".", "."), None);
        assert_eq!(find_symbol("x = a.", "a."), Some(4));
    }

    proptest! {
        #[test]
        fn found_column_is_a_char_boundary(line in ".{0,40}", sym in "[a-zé_.]{1,5}") {
            if let Some(c) = find_symbol(&line, &sym) {
                prop_assert!(line.is_char_boundary(c));
                prop_assert!(c < line.len());
            }
        }
    }

    #[test]
    fn kind_names() {
        assert_eq!(kind_name(SymbolKind::FUNCTION), "Function");
        assert_eq!(kind_name(SymbolKind::TYPE_PARAMETER), "TypeParameter");
        assert_eq!(kind_name(SymbolKind::FILE), "File");
    }

    #[test]
    fn numbered_lines_are_one_based() {
        let lines = ["a", "b", "c"];
        assert_eq!(numbered(&lines, 1, 2), "   2 | b\n   3 | c\n");
    }

    #[test]
    fn caps_long_hover() {
        let s = "x".repeat(10);
        assert_eq!(cap_chars(&s, 4), "xxxx\n[... 6 more characters not shown]");
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
