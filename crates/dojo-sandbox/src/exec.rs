//! Running one supervised command from tokio: continuous draining of stdout/stderr with head+tail
//! caps, stdin feeding, timeout with TERM → grace → KILL, and the setup status pipe.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use dojo_rundir::clip::{self, Unit};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::child::Request;
use crate::error::{Result, SandboxError};
use crate::launcher::{self, Client};
use crate::sys;
use crate::types::{ExecOutput, ExecRequest, OutputCap};

/// Keeps the first `head` and the last `tail` bytes of a stream; memory is bounded by head+tail.
/// Raw bytes (a cut may split a UTF-8 char; lossy decoding shows it as U+FFFD), marked with the
/// workspace's one marker, `[… N bytes cut]` ([`dojo_rundir::clip::marker`]).
#[derive(Debug)]
pub(crate) struct CapBuf {
    cap: OutputCap,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    /// Bytes dropped between the head and the tail.
    cut: usize,
}

impl CapBuf {
    pub(crate) fn new(cap: OutputCap) -> CapBuf {
        CapBuf {
            cap,
            head: Vec::new(),
            tail: VecDeque::new(),
            cut: 0,
        }
    }
    pub(crate) fn push(&mut self, mut data: &[u8]) {
        if self.head.len() < self.cap.head {
            let n = (self.cap.head - self.head.len()).min(data.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        if data.is_empty() {
            return;
        }
        if self.cap.tail == 0 {
            self.cut += data.len();
            return;
        }
        if data.len() >= self.cap.tail {
            self.cut += self.tail.len() + data.len() - self.cap.tail;
            self.tail.clear();
            self.tail.extend(&data[data.len() - self.cap.tail..]);
            return;
        }
        let overflow = (self.tail.len() + data.len()).saturating_sub(self.cap.tail);
        if overflow > 0 {
            self.cut += overflow;
            self.tail.drain(..overflow);
        }
        self.tail.extend(data);
    }
    pub(crate) fn finish(self) -> (Vec<u8>, bool) {
        let mut v = self.head;
        let truncated = self.cut > 0;
        if truncated {
            v.push(b'\n');
            v.extend_from_slice(clip::marker(self.cut, Unit::Bytes).as_bytes());
            v.push(b'\n');
        }
        v.extend(self.tail);
        (v, truncated)
    }
}

async fn drain(mut r: impl AsyncRead + Unpin, cap: OutputCap) -> CapBuf {
    let mut buf = CapBuf::new(cap);
    // Read into spare capacity (`read_buf`): nothing is zeroed or touched for a command that
    // prints nothing.
    let mut chunk = Vec::with_capacity(64 * 1024);
    loop {
        chunk.clear();
        match r.read_buf(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(_) => buf.push(&chunk),
        }
    }
    buf
}

/// Live supervisor pids of a sandbox, so reset/teardown can kill commands still running.
pub(crate) type LiveSet = Arc<Mutex<std::collections::HashSet<i32>>>;

/// A CLOEXEC pipe (read, write).
pub(crate) fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two valid descriptors on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: freshly created, owned by us.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The process-wide lifeline: every helper process polls the read end and exits when it reports
/// EOF, i.e. when this process died (the write end is only ever held here).
pub(crate) fn lifeline_r() -> i32 {
    static LIFELINE: std::sync::OnceLock<(OwnedFd, OwnedFd)> = std::sync::OnceLock::new();
    LIFELINE
        .get_or_init(|| pipe().expect("creating the lifeline pipe"))
        .0
        .as_raw_fd()
}

/// Read setup messages from a status pipe until EOF (blocking; run in spawn_blocking).
pub(crate) fn read_status(fd: OwnedFd) -> Vec<(u32, i32, i32)> {
    let mut out = Vec::new();
    let mut f = std::fs::File::from(fd);
    let mut m = [0u8; 12];
    use std::io::Read;
    while f.read_exact(&mut m).is_ok() {
        out.push(sys::decode(&m));
    }
    out
}

pub(crate) fn status_error(what: &str, msgs: &[(u32, i32, i32)]) -> Option<SandboxError> {
    msgs.iter()
        .find(|m| m.0 == sys::TAG_ERR)
        .map(|&(_, step, e)| {
            crate::error::setup_failed(
                format!("{what}: {} failed", sys::step_name(step)),
                std::io::Error::from_raw_os_error(e),
            )
        })
}

/// The result of a command: (exit code, signal) and its drained output streams.
fn finish(
    (exit_code, signal): (Option<i32>, Option<i32>),
    (out, err): (CapBuf, CapBuf),
    timed_out: bool,
    start: Instant,
) -> ExecOutput {
    let (stdout, stdout_truncated) = out.finish();
    let (stderr, stderr_truncated) = err.finish();
    ExecOutput {
        exit_code,
        signal,
        stdout,
        stderr,
        stdout_truncated,
        stderr_truncated,
        timed_out,
        duration: start.elapsed(),
    }
}

/// Spawn a prepared supervisor command and run it to completion.
pub(crate) async fn run(
    mut cmd: tokio::process::Command,
    status_r: OwnedFd,
    status_w: OwnedFd,
    req: &ExecRequest,
    live: &LiveSet,
) -> Result<ExecOutput> {
    let start = Instant::now();
    cmd.stdin(if req.stdin.is_some() {
        std::process::Stdio::piped()
    } else {
        std::process::Stdio::null()
    })
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .map_err(|e| crate::error::setup_failed("spawning the command supervisor", e))?;
    drop(status_w);
    // A just-spawned child always has a pid; never let 0/-1 reach kill(2).
    let pid = child
        .id()
        .map(|p| p as i32)
        .ok_or_else(|| SandboxError::Setup("the command supervisor has no pid".into()))?;
    live.lock().unwrap_or_else(|p| p.into_inner()).insert(pid);
    let status_task = tokio::task::spawn_blocking(move || read_status(status_r));
    let stdin = child.stdin.take();
    let input = req.stdin.clone();
    let feed = async move {
        if let (Some(mut w), Some(data)) = (stdin, input) {
            let _ = w.write_all(&data).await;
            let _ = w.shutdown().await;
        }
    };
    let out = child.stdout.take();
    let err = child.stderr.take();
    let cap = req.output_cap;
    let out_task = tokio::spawn(async move {
        match out {
            Some(o) => drain(o, cap).await,
            None => CapBuf::new(cap),
        }
    });
    let err_task = tokio::spawn(async move {
        match err {
            Some(e) => drain(e, cap).await,
            None => CapBuf::new(cap),
        }
    });
    tokio::spawn(feed);
    let mut timed_out = false;
    let status = match tokio::time::timeout(req.timeout, child.wait()).await {
        Ok(s) => s,
        Err(_) => {
            timed_out = true;
            crate::sys::kill_pid(pid, libc::SIGTERM);
            match tokio::time::timeout(req.grace, child.wait()).await {
                Ok(s) => s,
                Err(_) => {
                    let _ = child.start_kill();
                    child.wait().await
                }
            }
        }
    };
    live.lock().unwrap_or_else(|p| p.into_inner()).remove(&pid);
    let status = status.map_err(|e| crate::error::setup_failed("waiting for the command", e))?;
    let msgs = status_task.await.unwrap_or_default();
    if let Some(e) = status_error("running the command", &msgs) {
        return Err(e);
    }
    let collect =
        async |t: tokio::task::JoinHandle<CapBuf>| t.await.unwrap_or_else(|_| CapBuf::new(cap));
    let drained = (collect(out_task).await, collect(err_task).await);
    Ok(finish(
        (status.code(), status.signal()),
        drained,
        timed_out,
        start,
    ))
}

/// Run one command through the sandbox's launcher (see the `launcher` module): the same draining,
/// caps, stdin feeding and TERM → grace → KILL as [`run`], with the control socket in place of a
/// child process.
pub(crate) async fn run_launched(
    client: &Client,
    request: &Request,
    req: &ExecRequest,
) -> Result<ExecOutput> {
    let start = Instant::now();
    let setup = |what: &str, e: std::io::Error| crate::error::setup_failed(what, e);
    let (out_r, out_w) = pipe().map_err(|e| setup("pipe", e))?;
    let (err_r, err_w) = pipe().map_err(|e| setup("pipe", e))?;
    // Without stdin the command reads `/dev/null`, opened inside the sandbox for this command
    // alone (a shared open file would carry one command's locks and flags to the next).
    let (in_r, in_w) = match req.stdin {
        Some(_) => {
            let (r, w) = pipe().map_err(|e| setup("pipe", e))?;
            (Some(r), Some(w))
        }
        None => (None, None),
    };
    let (ctl, ctl_remote) = launcher::socketpair().map_err(|e| setup("socketpair", e))?;
    // Everything is registered with the runtime before the request goes out, and the output
    // and the control socket are driven by this task alone (no spawned tasks): after
    // the request, this thread only closes the remote ends and sleeps, and one wake-up can
    // find the command's output and its status together. (Setting up after the request, with
    // a task per stream, kept the caller busy on the CPU the command was starting on.)
    let recv = |fd: OwnedFd| {
        tokio::net::unix::pipe::Receiver::from_owned_fd(fd).map_err(|e| setup("pipe", e))
    };
    let (out, err) = (recv(out_r)?, recv(err_r)?);
    let stdin = match in_w {
        Some(w) => {
            Some(tokio::net::unix::pipe::Sender::from_owned_fd(w).map_err(|e| setup("pipe", e))?)
        }
        None => None,
    };
    let ctl = std::os::unix::net::UnixStream::from(ctl);
    ctl.set_nonblocking(true).map_err(|e| setup("socket", e))?;
    let mut ctl = tokio::net::UnixStream::from_std(ctl).map_err(|e| setup("socket", e))?;
    let remote = [out_w.as_raw_fd(), err_w.as_raw_fd(), ctl_remote.as_raw_fd()];
    let with_stdin;
    let fds: &[RawFd] = match &in_r {
        Some(r) => {
            with_stdin = [r.as_raw_fd(), remote[0], remote[1], remote[2]];
            &with_stdin
        }
        None => &remote,
    };
    // A launcher that does not take the request within the command's own timeout is stalled:
    // the sandbox's failure, not the command's.
    match tokio::time::timeout(req.timeout, client.send(request, fds)).await {
        Ok(sent) => sent.map_err(|e| SandboxError::GoneFrom {
            what: "the sandbox launcher".into(),
            source: e.into(),
        })?,
        Err(_) => {
            return Err(SandboxError::Gone(format!(
                "the sandbox launcher took no request for {:?} (its socket stayed full)",
                req.timeout
            )));
        }
    }
    drop((in_r, out_w, err_w, ctl_remote));
    if let (Some(mut w), Some(data)) = (stdin, req.stdin.clone()) {
        // Detached, as the result does not wait for it: it ends when written, or with EPIPE
        // once every reader is gone (a reader passed to a process outside this command could
        // otherwise hold the result past its timeout).
        tokio::spawn(async move {
            let _ = w.write_all(&data).await;
        });
    }
    let mut reader = CtlReader::default();
    let wait = async {
        match tokio::time::timeout(req.timeout, reader.exit(&mut ctl)).await {
            Ok(s) => (s, false),
            Err(_) => {
                let _ = ctl.write_all(b"T").await;
                let s = match tokio::time::timeout(req.grace, reader.exit(&mut ctl)).await {
                    Ok(s) => s,
                    Err(_) => {
                        let _ = ctl.write_all(b"K").await;
                        reader.exit(&mut ctl).await
                    }
                };
                (s, true)
            }
        }
    };
    let cap = req.output_cap;
    let (out, err, (status, timed_out)) = tokio::join!(drain(out, cap), drain(err, cap), wait);
    if let Some(e) = status_error("running the command", &reader.msgs) {
        return Err(e);
    }
    // No status: the sandbox was reset or torn down under the command (killed).
    let status = status.unwrap_or(libc::SIGKILL);
    let how = (
        libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
    );
    Ok(finish(how, (out, err), timed_out, start))
}

/// Status messages from a command's control socket, read in a cancel-safe way (the state lives
/// here, so a timed-out wait loses nothing).
#[derive(Default)]
struct CtlReader {
    pending: Vec<u8>,
    msgs: Vec<(u32, i32, i32)>,
    eof: bool,
}

impl CtlReader {
    /// The command's wait status, or `None` at EOF without one.
    async fn exit(&mut self, ctl: &mut tokio::net::UnixStream) -> Option<i32> {
        let mut chunk = [0u8; 256];
        loop {
            while self.pending.len() >= 12 {
                let mut m = [0u8; 12];
                m.copy_from_slice(&self.pending[..12]);
                self.pending.drain(..12);
                self.msgs.push(sys::decode(&m));
            }
            if let Some(m) = self.msgs.iter().find(|m| m.0 == sys::TAG_EXIT) {
                return Some(m.1);
            }
            if self.eof {
                return None;
            }
            match ctl.read(&mut chunk).await {
                Ok(0) | Err(_) => self.eof = true,
                Ok(n) => self.pending.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capbuf_keeps_head_and_tail() {
        let mut b = CapBuf::new(OutputCap { head: 4, tail: 4 });
        for chunk in [b"abc".as_ref(), b"defgh", b"ijkl", b"mn"] {
            b.push(chunk);
        }
        let (v, t) = b.finish();
        assert!(t);
        let s = String::from_utf8(v).unwrap();
        assert_eq!(s, "abcd\n[… 6 bytes cut]\nklmn");
    }

    #[test]
    fn capbuf_small_output_untouched() {
        let mut b = CapBuf::new(OutputCap { head: 4, tail: 4 });
        b.push(b"abcdef");
        let (v, t) = b.finish();
        assert!(!t);
        assert_eq!(v, b"abcdef");
    }
}
