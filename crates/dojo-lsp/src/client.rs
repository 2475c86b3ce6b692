//! A minimal LSP client over a child's stdio: requests with timeouts, notifications, answers to
//! the server's own requests, and `$/progress` tracking for readiness.
//!
//! Hand-rolled on purpose (about 250 lines) instead of async-lsp: the session needs exact
//! control over crash detection (EOF fails every pending request at once), per-request timeouts
//! with `$/cancelRequest`, and progress bookkeeping; async-lsp would add tower and a compat layer
//! and still need wrapping for all three.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dojo_rundir::clip::{self, Keep, Unit};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot, watch};

use crate::LspError;
use crate::framing::{FrameError, encode, read_frame};

type Pending = Arc<Mutex<HashMap<i64, oneshot::Sender<Result<Value, LspError>>>>>;

/// What the server has told us about its background work.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    /// Tokens with a `begin` but no `end` yet.
    pub active: usize,
    /// How many progress sequences ended so far.
    pub ended: usize,
    /// How many `workspace/configuration` requests of the server we answered. pyrefly starts
    /// indexing only once its configuration is known; a query that overtakes that answer gets
    /// open-file-only references.
    pub configured: usize,
    /// The pyright family logged that it enumerated the workspace ("Found N source files" or
    /// "No source files found"). It reports no progress for that step, and a `references` query
    /// before it searches the open files only.
    pub files_found: bool,
}

/// A running server connection. Dropping it kills the process.
pub struct Client {
    out: mpsc::UnboundedSender<Vec<u8>>,
    pending: Pending,
    next_id: AtomicI64,
    alive: watch::Receiver<bool>,
    progress: watch::Receiver<Progress>,
    stderr_tail: Arc<Mutex<String>>,
    pid: Option<u32>,
    child: Mutex<Option<tokio::process::Child>>,
}

const STDERR_TAIL: usize = 4000;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding these small locks cannot leave them inconsistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The task that owns the server's stdin, writing each frame whole.
fn spawn_writer(stdin: tokio::process::ChildStdin, mut out_rx: mpsc::UnboundedReceiver<Vec<u8>>) {
    tokio::spawn(async move {
        let mut stdin = stdin;
        while let Some(frame) = out_rx.recv().await {
            if stdin.write_all(&frame).await.is_err() || stdin.flush().await.is_err() {
                break;
            }
        }
    });
}

/// The task that drains the server's stderr into `tail` (its last [`STDERR_TAIL`] bytes or so).
/// The returned receiver fires when stderr closes (at once when there is none).
fn spawn_stderr(
    stderr: Option<tokio::process::ChildStderr>,
    tail: Arc<Mutex<String>>,
) -> oneshot::Receiver<()> {
    let (stderr_done_tx, stderr_done) = oneshot::channel::<()>();
    if let Some(mut err) = stderr {
        tokio::spawn(async move {
            let _done = stderr_done_tx;
            let mut buf = vec![0u8; 8192];
            while let Ok(n) = err.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let mut t = lock(&tail);
                t.push_str(&String::from_utf8_lossy(&buf[..n]));
                if t.len() > STDERR_TAIL * 2 {
                    let kept = clip::cut(&t, STDERR_TAIL, Unit::Bytes, Keep::Tail)
                        .tail
                        .len();
                    let start = t.len() - kept;
                    t.replace_range(..start, "");
                }
            }
        });
    }
    stderr_done
}

/// The reader task's state: routes responses to their requests, answers the server's own
/// requests, and tracks its progress.
struct Reader {
    pending: Pending,
    reply: mpsc::UnboundedSender<Vec<u8>>,
    progress: watch::Sender<Progress>,
    /// `$/progress` tokens begun and not yet ended.
    tokens: HashSet<String>,
    state: Progress,
}

impl Reader {
    /// Read frames until the server's stdout ends, then mark the client dead and fail every
    /// pending request with the crash's detail (`tail`: the server's last stderr).
    async fn run(
        mut self,
        stdout: tokio::process::ChildStdout,
        alive_tx: watch::Sender<bool>,
        tail: Arc<Mutex<String>>,
        stderr_done: oneshot::Receiver<()>,
    ) {
        let mut r = BufReader::new(stdout);
        let why = loop {
            let msg = match read_frame(&mut r).await {
                Ok(m) => m,
                Err(FrameError::Eof) => break "server exited".to_string(),
                Err(e) => break format!("unreadable server output: {e}"),
            };
            self.handle(&msg);
        };
        // A dying server's last words arrive on stderr; give them a moment to land.
        let _ = tokio::time::timeout(Duration::from_secs(1), stderr_done).await;
        let _ = alive_tx.send(false);
        let detail = crash_detail(&why, &lock(&tail));
        for (_, tx) in lock(&self.pending).drain() {
            let _ = tx.send(Err(LspError::ServerCrashed(detail.clone())));
        }
    }

    /// One message from the server.
    fn handle(&mut self, msg: &Value) {
        let method = msg.get("method").and_then(Value::as_str);
        let id = msg.get("id").cloned();
        match (method, id) {
            (Some(m), Some(id)) => {
                let result = answer_server_request(m, msg.get("params"));
                let _ = self.reply.send(encode(
                    &json!({"jsonrpc": "2.0", "id": id, "result": result}),
                ));
                if m == "workspace/configuration" {
                    self.state.configured += 1;
                    let _ = self.progress.send(self.state.clone());
                }
            }
            (Some("window/logMessage"), None) => {
                let text = msg
                    .pointer("/params/message")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if !self.state.files_found && reports_files_found(text) {
                    self.state.files_found = true;
                    let _ = self.progress.send(self.state.clone());
                }
            }
            (Some("$/progress"), None) => self.on_progress(msg),
            (Some(_), None) => {} // diagnostics, log messages: not needed for navigation
            (None, Some(id)) => self.on_response(msg, &id),
            (None, None) => {}
        }
    }

    /// A `$/progress` notification: a token begun or ended.
    fn on_progress(&mut self, msg: &Value) {
        let params = msg.get("params");
        let token = params
            .and_then(|p| p.get("token"))
            .map(|t| t.to_string())
            .unwrap_or_default();
        match params
            .and_then(|p| p.pointer("/value/kind"))
            .and_then(Value::as_str)
        {
            Some("begin") => {
                self.tokens.insert(token);
            }
            Some("end") if self.tokens.remove(&token) => self.state.ended += 1,
            _ => {}
        }
        self.state.active = self.tokens.len();
        let _ = self.progress.send(self.state.clone());
    }

    /// The response to one of our requests, to whoever waits for it (if anyone still does).
    fn on_response(&self, msg: &Value, id: &Value) {
        let Some(id) = id.as_i64() else { return };
        let Some(tx) = lock(&self.pending).remove(&id) else {
            return;
        };
        let res = match msg.get("error") {
            Some(e) => Err(LspError::Rpc {
                code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
                message: e
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            }),
            None => Ok(msg.get("result").cloned().unwrap_or(Value::Null)),
        };
        let _ = tx.send(res);
    }
}

impl Client {
    /// Take over a spawned child with piped stdio and start the I/O tasks.
    pub fn start(mut child: tokio::process::Child) -> Result<Client, LspError> {
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| LspError::ServerCrashed("server stdin not piped".into()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| LspError::ServerCrashed("server stdout not piped".into()))?;
        let stderr = child.stderr.take();
        let pid = child.id();
        let pending: Pending = Arc::default();
        let (out_tx, out_rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let (alive_tx, alive) = watch::channel(true);
        let (progress_tx, progress) = watch::channel(Progress::default());
        let stderr_tail = Arc::new(Mutex::new(String::new()));

        // Writer: one task owns stdin so frames never interleave.
        spawn_writer(stdin, out_rx);
        // Stderr: keep the tail for crash messages; never let the pipe fill up.
        let stderr_done = spawn_stderr(stderr, stderr_tail.clone());
        // Reader: route responses, answer server requests, track progress.
        let reader = Reader {
            pending: pending.clone(),
            reply: out_tx.clone(),
            progress: progress_tx,
            tokens: HashSet::new(),
            state: Progress::default(),
        };
        tokio::spawn(reader.run(stdout, alive_tx, stderr_tail.clone(), stderr_done));

        Ok(Client {
            out: out_tx,
            pending,
            next_id: AtomicI64::new(1),
            alive,
            progress,
            stderr_tail,
            pid,
            child: Mutex::new(Some(child)),
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    pub fn is_alive(&self) -> bool {
        *self.alive.borrow()
    }

    pub fn progress(&self) -> watch::Receiver<Progress> {
        self.progress.clone()
    }

    /// Why the server died, with the tail of its stderr.
    pub fn crash_detail(&self) -> String {
        crash_detail("server exited", &lock(&self.stderr_tail))
    }

    pub fn notify(&self, method: &str, params: Value) -> Result<(), LspError> {
        if !self.is_alive() {
            return Err(LspError::ServerCrashed(self.crash_detail()));
        }
        self.out
            .send(encode(
                &json!({"jsonrpc": "2.0", "method": method, "params": params}),
            ))
            .map_err(|_| LspError::ServerCrashed(self.crash_detail()))
    }

    /// Send a request and wait for its answer at most `timeout`; on timeout the request is
    /// cancelled so the server does not keep working on it.
    pub async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, LspError> {
        if !self.is_alive() {
            return Err(LspError::ServerCrashed(self.crash_detail()));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        // The reader marks the server dead *before* failing the pending requests, so checking
        // after inserting cannot miss a crash that raced with this request.
        if !self.is_alive() {
            lock(&self.pending).remove(&id);
            return Err(LspError::ServerCrashed(self.crash_detail()));
        }
        let frame =
            encode(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        if self.out.send(frame).is_err() {
            lock(&self.pending).remove(&id);
            return Err(LspError::ServerCrashed(self.crash_detail()));
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(res)) => res,
            Ok(Err(_)) => Err(LspError::ServerCrashed(self.crash_detail())),
            Err(_) => {
                lock(&self.pending).remove(&id);
                let _ = self.notify("$/cancelRequest", json!({"id": id}));
                Err(LspError::Timeout {
                    method: method.to_string(),
                    after: timeout,
                })
            }
        }
    }

    /// Polite shutdown (bounded), then kill.
    pub async fn shutdown(&self) {
        if self.is_alive() {
            let _ = self
                .request("shutdown", Value::Null, Duration::from_secs(2))
                .await;
            let _ = self.notify("exit", Value::Null);
        }
        let child = lock(&self.child).take();
        if let Some(mut child) = child
            && tokio::time::timeout(Duration::from_secs(1), child.wait())
                .await
                .is_err()
        {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Some(child) = lock(&self.child).as_mut() {
            let _ = child.start_kill();
        }
    }
}

fn crash_detail(why: &str, stderr: &str) -> String {
    let tail: String = stderr
        .trim()
        .lines()
        .rev()
        .take(8)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n");
    if tail.is_empty() {
        why.to_string()
    } else {
        format!("{why}; stderr tail:\n{tail}")
    }
}

/// The pyright family's log line once its program knows every source file.
fn reports_files_found(text: &str) -> bool {
    let t = text.trim();
    t.starts_with("No source files found")
        || t.strip_prefix("Found ").is_some_and(|rest| {
            rest.split_once(' ').is_some_and(|(n, tail)| {
                n.parse::<u64>().is_ok() && tail.starts_with("source file")
            })
        })
}

/// Answers for the requests servers send to clients. Configuration items get `null` (server
/// defaults); progress creation and capability registration are acknowledged.
fn answer_server_request(method: &str, params: Option<&Value>) -> Value {
    match method {
        "workspace/configuration" => {
            let n = params
                .and_then(|p| p.get("items"))
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            Value::Array(vec![Value::Null; n])
        }
        "workspace/workspaceFolders" => Value::Null,
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_gets_one_null_per_item() {
        let v = answer_server_request("workspace/configuration", Some(&json!({"items": [{}, {}]})));
        assert_eq!(v, json!([null, null]));
        assert_eq!(
            answer_server_request("window/workDoneProgress/create", None),
            Value::Null
        );
    }

    #[test]
    fn files_found_log_lines() {
        assert!(reports_files_found("Found 1490 source files"));
        assert!(reports_files_found("Found 1 source file"));
        assert!(reports_files_found("No source files found."));
        assert!(!reports_files_found("Found no config"));
        assert!(!reports_files_found("Loading pyproject.toml file at /x"));
    }

    #[test]
    fn crash_detail_keeps_the_tail() {
        let err: String = (0..20).map(|i| format!("line {i}\n")).collect();
        let d = crash_detail("server exited", &err);
        assert!(d.contains("line 19") && !d.contains("line 11"), "{d}");
    }
}
