//! The language-server side of one `lsp_tool` call: resolve the agent's position (file, symbol,
//! line) to an LSP position, send the command's requests through the session, and write the
//! answers up as the observation's body with [`super::render`]'s helpers.

use std::collections::BTreeMap;

use dojo_rundir::clip::{Keep, Unit, clip};
use lsp_types::{
    CallHierarchyIncomingCall, CallHierarchyItem, CallHierarchyOutgoingCall, DocumentHighlight,
    DocumentSymbolResponse, GotoDefinitionResponse, Hover, Location, OneOf, Position, Range,
    SymbolKind, Url, WorkspaceSymbolResponse,
};
use serde_json::{Value, json};

use super::position::{clean_symbol, contains, find_symbol, flatten_symbols};
use super::render::{
    MAX_DEF_LOCATIONS, MAX_HOVER_CHARS, MAX_REFERENCES, MAX_SOURCE_LINES, MAX_SYMBOL_LINES,
    MAX_WORKSPACE_FILES, MAX_WORKSPACE_SYMBOLS, call_line, calls_section, hover_text, kind_name,
    numbered, outline, plural,
};
use super::{Args, Command, Fail, LspInfraKind, Res, bad};
use crate::LspError;
use crate::backend::Backend;
use crate::session::LspSession;

/// One call: the session and the backend it runs through.
pub(super) struct Call<'a> {
    pub(super) session: &'a LspSession,
    pub(super) be: &'a dyn Backend,
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

    pub(super) async fn dispatch(&self, args: &Value) -> Res<String> {
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
            clip(text.trim(), MAX_HOVER_CHARS, Unit::Chars, Keep::Head).0
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
        // The server's own item, read a moment ago: writing it back failing is the server's
        // answer's fault (infrastructure), never the agent's.
        let item_json = serde_json::to_value(&item).map_err(|e| Fail {
            message: format!("The language server sent an item we cannot send back: {e}"),
            infra: Some(LspInfraKind::ServerCrashed),
        })?;
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
    serde_json::from_value(v).map_err(|e| Fail {
        message: format!("The language server sent an answer we cannot read: {e}"),
        infra: Some(LspInfraKind::ServerCrashed),
    })
}

fn parse_line(v: &Value) -> Option<usize> {
    match v {
        Value::Number(n) => n.as_u64().map(|n| n as usize),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}
