//! One language server for one workspace, kept correct across edits and crashes.
//!
//! - **Start and readiness**: `initialize`/`initialized`, then before the first query wait (no
//!   fixed sleep) until no `$/progress` sequence is open *and* the server's own start-up signal
//!   arrived: the pyright family logs "Found N source files" once its program knows the
//!   workspace (a `references` query before that searches the open files only and answers 1 of
//!   379 on sympy); pyrefly asks for its configuration and indexes only after our answer.
//!   Servers that answer *empty* while they are still analysing (the pyright family) are probed
//!   again whenever their progress changes or a short tick passes, until a non-empty answer
//!   arrives or the readiness deadline passes.
//! - **Stable first answers**: on servers known to answer a cold whole-workspace query
//!   (references, incoming calls, workspace symbols) from partial state (pyright, basedpyright,
//!   pyrefly), the first such query after a start is repeated until two answers agree, so the
//!   agent never sees a half-indexed answer. Later queries are sent once.
//! - **Sync**: before every query the workspace's Python files are stamped (mtime, size) and
//!   compared with what the server last saw. Open documents whose text changed get `didChange`
//!   (full text), other changed/created/deleted files a `didChangeWatchedFiles`. So edits made
//!   by a shell command are seen as surely as the editor tool's.
//! - **Crashes**: a dead server is restarted (up to a limit) and the query retried once; the
//!   restart re-opens documents lazily.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lsp_types::Url;
use serde_json::{Value, json};

use crate::LspError;
use crate::backend::{Backend, Launch, Stamps};
use crate::client::Client;
use crate::servers::ServerKind;

/// Tunables of a session.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// Limit for one request once the server is ready.
    pub request_timeout: Duration,
    /// Limit for start + indexing before the first answer.
    pub ready_timeout: Duration,
    /// Restarts allowed over the session's life before the server counts as broken.
    pub max_restarts: u32,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            request_timeout: Duration::from_secs(60),
            ready_timeout: Duration::from_secs(180),
            max_restarts: 3,
        }
    }
}

struct Doc {
    version: i32,
    text: String,
}

#[derive(Default)]
struct State {
    client: Option<Client>,
    started_at: Option<Instant>,
    /// Set once the server gave a non-empty answer, finished its progress, or the deadline passed.
    ready: bool,
    /// Set once a whole-workspace query gave the same answer twice in a row.
    settled: bool,
    docs: HashMap<String, Doc>,
    stamps: Option<Stamps>,
    restarts: u32,
    starts: u32,
}

/// Counters for tests, logs and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionStats {
    pub starts: u32,
    pub restarts: u32,
    pub open_documents: usize,
}

/// A language server over one workspace. Queries are serialised (one agent, one server).
pub struct LspSession {
    /// Where the server runs unless a call lends another backend (see [`LspSession::query_on`]).
    backend: Arc<dyn Backend>,
    /// The workspace root as the server sees it (the same for every backend lent).
    root: PathBuf,
    kind: ServerKind,
    launch: Launch,
    opts: SessionOptions,
    root_uri: Url,
    state: tokio::sync::Mutex<State>,
}

impl LspSession {
    /// A session that starts `launch` lazily on the first query.
    pub fn new(
        backend: Arc<dyn Backend>,
        kind: ServerKind,
        launch: Launch,
        opts: SessionOptions,
    ) -> Result<Self, LspError> {
        let root_uri = Url::from_directory_path(backend.root()).map_err(|_| {
            LspError::Workspace(format!(
                "workspace root {} is not absolute",
                backend.root().display()
            ))
        })?;
        Ok(LspSession {
            root: backend.root().to_path_buf(),
            backend,
            kind,
            launch,
            opts,
            root_uri,
            state: Default::default(),
        })
    }

    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    /// The session's own backend (for a session built with [`crate::backend::Lent`], one that
    /// refuses everything: the calls bring their backend).
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The workspace root as the server sees it.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The server's pid as seen by this process (tests kill it to exercise restarts).
    pub async fn server_pid(&self) -> Option<u32> {
        self.state
            .lock()
            .await
            .client
            .as_ref()
            .and_then(Client::pid)
    }

    pub async fn stats(&self) -> SessionStats {
        let st = self.state.lock().await;
        SessionStats {
            starts: st.starts,
            restarts: st.restarts,
            open_documents: st.docs.len(),
        }
    }

    /// Start the server now (otherwise the first query does it) and wait for readiness.
    pub async fn start(&self) -> Result<(), LspError> {
        let mut st = self.state.lock().await;
        self.ensure_started(&*self.backend, &mut st).await?;
        self.wait_ready(&st).await;
        Ok(())
    }

    /// Stop the server politely.
    pub async fn shutdown(&self) {
        let mut st = self.state.lock().await;
        if let Some(c) = st.client.take() {
            c.shutdown().await;
        }
    }

    /// `file:` URI of a workspace path (relative to the root, or absolute as the server sees it).
    pub fn uri(&self, path: &str) -> Result<Url, LspError> {
        let p = if Path::new(path).is_absolute() {
            PathBuf::from(path)
        } else {
            self.root.join(path)
        };
        Url::from_file_path(&p)
            .map_err(|_| LspError::Workspace(format!("cannot make a URI of {}", p.display())))
    }

    /// Display form of a URI the server returned: relative to the root when inside it.
    /// Typeshed stubs live in a server-private cache; they are shown as `<typeshed>/stdlib/...`
    /// so observations do not depend on where that cache is.
    pub fn display_path(&self, uri: &Url) -> String {
        match uri.to_file_path() {
            Ok(p) => match p.strip_prefix(&self.root) {
                Ok(rel) => rel.to_string_lossy().into_owned(),
                Err(_) => shorten_library_path(&p.to_string_lossy()),
            },
            Err(()) => uri.to_string(),
        }
    }

    /// Send `method` after syncing the workspace and opening `file` (if any). `params` carry the
    /// document URI already (see [`LspSession::uri`]).
    pub async fn query(
        &self,
        file: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, LspError> {
        self.query_with(&*self.backend, file, method, params, true)
            .await
    }

    /// [`LspSession::query`] through `be`, a backend lent for this call: an agent's tool gets
    /// its rollout's sandbox only as a borrow per call, so the server is started, restarted and
    /// synced through whatever backend the call brings. `be` must have the session's root.
    pub async fn query_on(
        &self,
        be: &dyn Backend,
        file: Option<&str>,
        method: &str,
        params: Value,
        followup: bool,
    ) -> Result<Value, LspError> {
        if be.root() != self.root {
            return Err(LspError::Workspace(format!(
                "{} has root {}, the session {}",
                be.describe(),
                be.root().display(),
                self.root.display()
            )));
        }
        self.query_with(be, file, method, params, !followup).await
    }

    /// Like [`LspSession::query`] but without re-scanning the workspace: for the follow-up
    /// requests of one tool call (outline of the definition's file, incoming/outgoing calls),
    /// which no edit can have preceded.
    pub async fn query_followup(
        &self,
        file: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, LspError> {
        self.query_with(&*self.backend, file, method, params, false)
            .await
    }

    async fn query_with(
        &self,
        be: &dyn Backend,
        file: Option<&str>,
        method: &str,
        params: Value,
        sync: bool,
    ) -> Result<Value, LspError> {
        let mut st = self.state.lock().await;
        let mut crashes = 0;
        loop {
            match self
                .query_once(be, &mut st, file, method, params.clone(), sync)
                .await
            {
                Err(LspError::ServerCrashed(detail)) => {
                    crashes += 1;
                    tracing::warn!(server = self.kind.name(), %detail, "language server died; restarting");
                    if crashes > 1 {
                        return Err(LspError::ServerCrashed(detail));
                    }
                    // The next ensure_started sees the dead client and restarts it.
                }
                Err(e @ LspError::Timeout { .. }) => {
                    // A server that sat on a request is likely wedged: replace it so the next
                    // query does not wait out the same timeout again.
                    if let Some(c) = st.client.take() {
                        st.restarts += 1;
                        c.shutdown().await;
                    }
                    return Err(e);
                }
                other => return other,
            }
        }
    }

    async fn query_once(
        &self,
        be: &dyn Backend,
        st: &mut State,
        file: Option<&str>,
        method: &str,
        params: Value,
        sync: bool,
    ) -> Result<Value, LspError> {
        // A (re)started server is brought up to date whatever the caller said.
        let fresh = !st.client.as_ref().is_some_and(Client::is_alive);
        self.ensure_started(be, st).await?;
        if sync || fresh {
            self.sync(be, st).await?;
        }
        if let Some(f) = file {
            self.open(be, st, f).await?;
        }
        if !st.ready {
            self.wait_ready(st).await;
        }
        let client = st
            .client
            .as_ref()
            .ok_or_else(|| LspError::ServerCrashed("no server".into()))?;
        let deadline = st.started_at.unwrap_or_else(Instant::now) + self.opts.ready_timeout;
        let mut progress = client.progress();
        loop {
            let timeout = if st.ready {
                self.opts.request_timeout
            } else {
                deadline
                    .saturating_duration_since(Instant::now())
                    .max(self.opts.request_timeout)
            };
            let mut answer = request_until_not_cancelled(client, method, &params, timeout).await?;
            if st.ready || !is_empty_answer(&answer) || !probes_when_empty(self.kind) {
                if !is_empty_answer(&answer) {
                    st.ready = true;
                }
                if !st.settled && is_whole_workspace(method) && settles_late(self.kind) {
                    // Re-ask until two answers agree (bounded by the readiness deadline).
                    for _ in 0..MAX_SETTLE_PROBES {
                        let again =
                            request_until_not_cancelled(client, method, &params, timeout).await?;
                        let same = canonical(&again) == canonical(&answer);
                        answer = again;
                        if same || Instant::now() >= deadline {
                            break;
                        }
                        tracing::debug!(
                            server = self.kind.name(),
                            method,
                            "first answer changed on re-asking; probing again"
                        );
                    }
                    st.settled = true;
                }
                return Ok(answer);
            }
            let p = progress.borrow().clone();
            if Instant::now() >= deadline || (p.ended > 0 && p.active == 0) {
                st.ready = true;
                return Ok(answer);
            }
            // Probe again when the server reports progress, or after a short tick.
            let _ = tokio::time::timeout(Duration::from_millis(250), progress.changed()).await;
        }
    }

    async fn ensure_started(&self, be: &dyn Backend, st: &mut State) -> Result<(), LspError> {
        if st.client.as_ref().is_some_and(Client::is_alive) {
            return Ok(());
        }
        if let Some(dead) = st.client.take() {
            st.restarts += 1;
            let detail = dead.crash_detail();
            dead.shutdown().await;
            if st.restarts > self.opts.max_restarts {
                return Err(LspError::ServerCrashed(format!(
                    "{} crashed {} times (limit {}); last: {detail}",
                    self.kind.name(),
                    st.restarts,
                    self.opts.max_restarts
                )));
            }
        }
        st.docs.clear();
        st.ready = false;
        st.settled = false;
        st.starts += 1;
        let child = be.spawn(&self.launch).await?;
        let client = Client::start(child)?;
        let root = self.root.to_string_lossy().into_owned();
        let init = json!({
            "processId": std::process::id(),
            "clientInfo": {"name": "dojo-lsp", "version": env!("CARGO_PKG_VERSION")},
            "rootPath": root,
            "rootUri": self.root_uri,
            "workspaceFolders": [{"uri": self.root_uri, "name": "workspace"}],
            "capabilities": {
                "general": {"positionEncodings": ["utf-16"]},
                "window": {"workDoneProgress": true},
                "workspace": {
                    "configuration": true,
                    "workspaceFolders": true,
                    "didChangeWatchedFiles": {"dynamicRegistration": true},
                    "symbol": {}
                },
                "textDocument": {
                    "synchronization": {"didSave": false},
                    "hover": {"contentFormat": ["markdown", "plaintext"]},
                    "definition": {"linkSupport": true},
                    "typeDefinition": {"linkSupport": true},
                    "implementation": {"linkSupport": true},
                    "references": {},
                    "documentHighlight": {},
                    "documentSymbol": {"hierarchicalDocumentSymbolSupport": true},
                    "callHierarchy": {},
                    "publishDiagnostics": {}
                }
            }
        });
        let started = Instant::now();
        client
            .request("initialize", init, self.opts.ready_timeout)
            .await
            .map_err(|e| match e {
                LspError::Timeout { after, .. } => LspError::NotReady(format!(
                    "{} did not answer initialize within {after:?}",
                    self.kind.name()
                )),
                other => other,
            })?;
        client.notify("initialized", json!({}))?;
        st.started_at = Some(started);
        st.client = Some(client);
        // The server reads the files itself at start; only later changes need announcing.
        st.stamps = Some(be.scan().await?);
        tracing::debug!(server = self.kind.name(), pid = ?st.client.as_ref().and_then(Client::pid), "language server initialised");
        Ok(())
    }

    /// Wait (bounded by the readiness deadline) until no progress is open and the server's
    /// start-up signal arrived (see the module docs).
    async fn wait_ready(&self, st: &State) {
        let Some(client) = st.client.as_ref() else {
            return;
        };
        let deadline = st.started_at.unwrap_or_else(Instant::now) + self.opts.ready_timeout;
        let mut rx = client.progress();
        loop {
            let started_up = {
                let p = rx.borrow();
                p.active == 0 && start_signal_seen(self.kind, &p)
            };
            if started_up || Instant::now() >= deadline || !client.is_alive() {
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if tokio::time::timeout(left, rx.changed()).await.is_err() {
                return;
            }
        }
    }

    /// Announce every change since the server last looked.
    async fn sync(&self, be: &dyn Backend, st: &mut State) -> Result<(), LspError> {
        let now = be.scan().await?;
        let before = st.stamps.take().unwrap_or_default();
        let mut events = Vec::new();
        for (path, stamp) in &now {
            match before.get(path) {
                None => events.push((path.clone(), 1)), // created
                Some(old) if old != stamp => events.push((path.clone(), 2)),
                Some(_) => {}
            }
        }
        for path in before.keys().filter(|p| !now.contains_key(*p)) {
            events.push((path.clone(), 3)); // deleted
        }
        st.stamps = Some(now);
        let client = st
            .client
            .as_ref()
            .ok_or_else(|| LspError::ServerCrashed("no server".into()))?;
        let mut watched = Vec::new();
        for (path, kind) in events {
            if st.docs.contains_key(&path) {
                match be.read_file(&path).await? {
                    Some(bytes) => {
                        let text = String::from_utf8_lossy(&bytes).into_owned();
                        let uri = self.uri(&path)?;
                        if let Some(doc) = st.docs.get_mut(&path)
                            && doc.text != text
                        {
                            doc.version += 1;
                            client.notify(
                                "textDocument/didChange",
                                json!({"textDocument": {"uri": uri, "version": doc.version}, "contentChanges": [{"text": text}]}),
                            )?;
                            doc.text = text;
                        }
                    }
                    None => {
                        st.docs.remove(&path);
                        client.notify(
                            "textDocument/didClose",
                            json!({"textDocument": {"uri": self.uri(&path)?}}),
                        )?;
                    }
                }
                if kind != 3 {
                    continue;
                }
            }
            watched.push(json!({"uri": self.uri(&path)?, "type": kind}));
        }
        if !watched.is_empty() {
            client.notify(
                "workspace/didChangeWatchedFiles",
                json!({"changes": watched}),
            )?;
        }
        Ok(())
    }

    /// Make sure the server has `path` open with its current text; returns the text.
    async fn open(&self, be: &dyn Backend, st: &mut State, path: &str) -> Result<String, LspError> {
        let bytes = be
            .read_file(path)
            .await?
            .ok_or_else(|| LspError::NoSuchFile(path.to_string()))?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let uri = self.uri(path)?;
        let key = self.rel_key(path);
        let client = st
            .client
            .as_ref()
            .ok_or_else(|| LspError::ServerCrashed("no server".into()))?;
        match st.docs.get_mut(&key) {
            Some(doc) if doc.text == text => {}
            Some(doc) => {
                doc.version += 1;
                client.notify(
                    "textDocument/didChange",
                    json!({"textDocument": {"uri": uri, "version": doc.version}, "contentChanges": [{"text": text}]}),
                )?;
                doc.text = text.clone();
            }
            None => {
                client.notify(
                    "textDocument/didOpen",
                    json!({"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}}),
                )?;
                st.docs.insert(
                    key,
                    Doc {
                        version: 1,
                        text: text.clone(),
                    },
                );
            }
        }
        Ok(text)
    }

    /// Documents are keyed by their root-relative path (the form `scan` produces).
    fn rel_key(&self, path: &str) -> String {
        Path::new(path)
            .strip_prefix(&self.root)
            .map_or_else(|_| path.to_string(), |r| r.to_string_lossy().into_owned())
    }
}

fn shorten_library_path(p: &str) -> String {
    if let Some(i) = p.find("typeshed") {
        for part in ["/stdlib/", "/stubs/"] {
            if let Some(j) = p[i..].find(part) {
                return format!("<typeshed>{}", &p[i + j..]);
            }
        }
    }
    p.to_string()
}

/// Lexically clean a relative path the agent typed (`./a/../b.py` → `b.py`).
pub(crate) fn clean_relative(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    parts.join("/")
}

/// The pyright family answers `null`/`[]` while its first analysis runs; ty and pyrefly
/// (`lazy-blocking`) block until they can answer, so probing would only waste time on true empties.
fn probes_when_empty(kind: ServerKind) -> bool {
    matches!(kind, ServerKind::Pyright | ServerKind::Basedpyright)
}

/// LSP error codes with which a server drops a request it started on state that changed
/// (pyrefly answers "Request N is canceled" when an edit arrives while it works): RequestCancelled,
/// ContentModified, ServerCancelled. We cancel only on timeout (a [`LspError::Timeout`]), so these
/// come from the server, and the spec says to ask again.
const SERVER_CANCELLED: [i64; 3] = [-32800, -32801, -32802];

/// How often a request the server cancelled is asked again before its error is shown.
const MAX_CANCELLED_RETRIES: usize = 5;

async fn request_until_not_cancelled(
    client: &Client,
    method: &str,
    params: &Value,
    timeout: Duration,
) -> Result<Value, LspError> {
    let mut tries = 0;
    loop {
        match client.request(method, params.clone(), timeout).await {
            Err(LspError::Rpc { code, message })
                if tries < MAX_CANCELLED_RETRIES
                    && (SERVER_CANCELLED.contains(&code) || says_cancelled(&message)) =>
            {
                tries += 1;
                tracing::debug!(method, code, %message, "server cancelled the request; asking again");
            }
            other => return other,
        }
    }
}

/// A cancellation reported under another code (the message is all there is to go on).
fn says_cancelled(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("is canceled") || m.contains("is cancelled") || m.contains("was cancelled")
}

/// The server-specific sign that a whole-workspace query will see the whole workspace.
fn start_signal_seen(kind: ServerKind, p: &crate::client::Progress) -> bool {
    match kind {
        ServerKind::Pyright | ServerKind::Basedpyright => p.files_found,
        ServerKind::Pyrefly => p.configured > 0,
        ServerKind::Ty => true,
    }
}

/// Servers whose first whole-workspace answer after a start can be partial. ty blocks until it
/// can answer completely (379 of 379 `_sympify` references cold), so it is asked once.
fn settles_late(kind: ServerKind) -> bool {
    !matches!(kind, ServerKind::Ty)
}

/// Requests whose answer depends on the whole workspace, not just the open files.
fn is_whole_workspace(method: &str) -> bool {
    matches!(
        method,
        "textDocument/references" | "callHierarchy/incomingCalls" | "workspace/symbol"
    )
}

/// How often a first whole-workspace query is re-asked at most before its answer is taken.
const MAX_SETTLE_PROBES: usize = 8;

/// An answer with its list order normalised, for comparing two answers to the same query.
fn canonical(v: &Value) -> Value {
    match v {
        Value::Array(a) => {
            let mut items: Vec<String> = a.iter().map(|x| canonical(x).to_string()).collect();
            items.sort();
            Value::Array(items.into_iter().map(Value::String).collect())
        }
        Value::Object(o) => {
            // Keys sorted explicitly: serde_json may keep insertion order.
            let mut fields: Vec<(String, Value)> =
                o.iter().map(|(k, x)| (k.clone(), canonical(x))).collect();
            fields.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(fields.into_iter().collect())
        }
        other => other.clone(),
    }
}

pub(crate) fn is_empty_answer(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_paths_are_shortened() {
        assert_eq!(
            shorten_library_path("/root/.cache/ty/vendored/typeshed/2e4d/stdlib/functools.pyi"),
            "<typeshed>/stdlib/functools.pyi"
        );
        assert_eq!(
            shorten_library_path("/t/pyright/dist/typeshed-fallback/stubs/requests/api.pyi"),
            "<typeshed>/stubs/requests/api.pyi"
        );
        assert_eq!(
            shorten_library_path("/venv/lib/site-packages/x.py"),
            "/venv/lib/site-packages/x.py"
        );
    }

    #[test]
    fn answers_compare_without_order() {
        let a = json!([{"uri": "a", "range": 1}, {"uri": "b", "range": 2}]);
        let b = json!([{"range": 2, "uri": "b"}, {"uri": "a", "range": 1}]);
        assert_eq!(canonical(&a), canonical(&b));
        assert_ne!(canonical(&a), canonical(&json!([{"uri": "a", "range": 1}])));
    }

    #[test]
    fn server_cancellations_are_recognised() {
        assert!(says_cancelled("Request 12 is canceled"));
        assert!(says_cancelled("Request was cancelled."));
        assert!(!says_cancelled(
            "Unhandled method textDocument/implementation"
        ));
    }

    #[test]
    fn start_signals_per_server() {
        let mut p = crate::client::Progress::default();
        assert!(start_signal_seen(ServerKind::Ty, &p));
        assert!(!start_signal_seen(ServerKind::Pyright, &p));
        assert!(!start_signal_seen(ServerKind::Pyrefly, &p));
        p.files_found = true;
        p.configured = 1;
        for k in ServerKind::ALL {
            assert!(start_signal_seen(k, &p), "{k:?}");
        }
    }

    #[test]
    fn relative_paths_are_cleaned() {
        assert_eq!(
            clean_relative("./src/flask/../flask/config.py"),
            "src/flask/config.py"
        );
        assert_eq!(clean_relative("a//b/./c.py"), "a/b/c.py");
    }
}
