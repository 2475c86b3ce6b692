//! The sandbox operations an agent's tools and the world models' readers need, as a trait. It
//! lives beside [`Sandbox`] so that every stage that reads or drives a workspace (the agent, the
//! simulated environment, capture) reaches it without depending on the agent. Production code
//! passes a real [`Sandbox`]; [`LocalWorkspace`] runs the same operations directly in a host
//! directory (no isolation) for unit tests of tool logic and for benchmarks against a bare spawn.

use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::{ExecOutput, ExecRequest, Sandbox, SandboxError, WORKSPACE};

pub use dojo_rundir::BoxFuture;

/// What the agent's tools do to a workspace. Every error is an infrastructure failure.
///
/// **Execution model.** A workspace belongs to one rollout; its tools call it one operation at a
/// time, in the episode's order, but readers beside the agent (a language server's sync, the
/// simulated environment's snapshot) may call it concurrently, so implementations take `&self`
/// and keep no per-call state. Operations are async and must not block a runtime thread: a
/// [`Sandbox`] sends each to its own processes. A future dropped before it finishes (the
/// episode's time ran out) leaves the workspace usable for the diff that grades it.
pub trait Workspace: Send + Sync {
    /// Run a command (non-zero exits are not errors).
    fn exec<'a>(&'a self, req: &'a ExecRequest) -> BoxFuture<'a, Result<ExecOutput, SandboxError>>;
    /// Read a file; absolute inside the sandbox, or relative to `/testbed`.
    fn read_file<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<u8>, SandboxError>>;
    /// Write a file, creating parent directories.
    fn write_file<'a>(
        &'a self,
        path: &'a str,
        data: &'a [u8],
    ) -> BoxFuture<'a, Result<(), SandboxError>>;
    /// The workspace diff as a git patch.
    fn diff(&self) -> BoxFuture<'_, Result<String, SandboxError>>;
    /// The real sandbox behind this workspace, for tools that need more (language servers).
    fn sandbox(&self) -> Option<&Sandbox> {
        None
    }
}

impl Workspace for Sandbox {
    fn exec<'a>(&'a self, req: &'a ExecRequest) -> BoxFuture<'a, Result<ExecOutput, SandboxError>> {
        Box::pin(Sandbox::exec(self, req))
    }
    fn read_file<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<u8>, SandboxError>> {
        Box::pin(Sandbox::read_file(self, path))
    }
    fn write_file<'a>(
        &'a self,
        path: &'a str,
        data: &'a [u8],
    ) -> BoxFuture<'a, Result<(), SandboxError>> {
        Box::pin(Sandbox::write_file(self, path, data))
    }
    fn diff(&self) -> BoxFuture<'_, Result<String, SandboxError>> {
        Box::pin(Sandbox::diff(self))
    }
    fn sandbox(&self) -> Option<&Sandbox> {
        Some(self)
    }
}

/// A host directory standing in for `/testbed`: paths under `/testbed` map into it and commands
/// run with it as working directory. No isolation whatsoever; tests and benchmarks only.
pub struct LocalWorkspace {
    root: PathBuf,
}

impl LocalWorkspace {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        LocalWorkspace { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Map a sandbox path to the host, refusing anything outside the workspace.
    pub fn host_path(&self, path: &str) -> Result<PathBuf, SandboxError> {
        let rel = match path.strip_prefix(WORKSPACE) {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => rest.trim_start_matches('/'),
            Some(_) => return Err(SandboxError::PathEscape(path.to_string())),
            None if path.starts_with('/') => {
                return Err(SandboxError::PathEscape(path.to_string()));
            }
            None => path,
        };
        let mut out = self.root.clone();
        for c in Path::new(rel).components() {
            match c {
                Component::Normal(p) => out.push(p),
                Component::CurDir => {}
                _ => return Err(SandboxError::PathEscape(path.to_string())),
            }
        }
        Ok(out)
    }

    async fn run(&self, req: &ExecRequest) -> Result<ExecOutput, SandboxError> {
        let cwd = match &req.cwd {
            Some(c) => self.host_path(c)?,
            None => self.root.clone(),
        };
        let Some((prog, args)) = req.argv.split_first() else {
            return Err(SandboxError::Other("empty argv".into()));
        };
        let started = Instant::now();
        let mut cmd = tokio::process::Command::new(prog);
        cmd.args(args)
            .current_dir(&cwd)
            .envs(&req.env)
            .stdin(if req.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let io = |source| SandboxError::Io {
            path: prog.clone(),
            source,
        };
        let mut child = cmd.spawn().map_err(io)?;
        if let (Some(data), Some(mut stdin)) = (req.stdin.clone(), child.stdin.take()) {
            use tokio::io::AsyncWriteExt;
            tokio::spawn(async move {
                let _ = stdin.write_all(&data).await;
            });
        }
        let pid = child.id();
        let waited = tokio::time::timeout(req.timeout, child.wait_with_output()).await;
        let (status, stdout, stderr, timed_out) = match waited {
            Ok(out) => {
                let out = out.map_err(io)?;
                (Some(out.status), out.stdout, out.stderr, false)
            }
            Err(_) => {
                // Kill the whole process group so grandchildren holding the pipes die too.
                // (Never via the `kill` binary: procps-ng 4.0 turns `kill -KILL -<pgid>` into
                // kill(-1), which kills every process of the user.)
                if let Some(pgid) = pid
                    .and_then(|p| libc::pid_t::try_from(p).ok())
                    .filter(|&p| p > 1)
                {
                    // SAFETY: plain syscall on a process group we created (process_group(0)).
                    unsafe {
                        libc::killpg(pgid, libc::SIGKILL);
                    }
                }
                (None, Vec::new(), Vec::new(), true)
            }
        };
        let (stdout, stdout_truncated) = cap(stdout, req.output_cap.head, req.output_cap.tail);
        let (stderr, stderr_truncated) = cap(stderr, req.output_cap.head, req.output_cap.tail);
        use std::os::unix::process::ExitStatusExt;
        Ok(ExecOutput {
            exit_code: status.and_then(|s| s.code()),
            signal: status
                .and_then(|s| s.signal())
                .or(if timed_out { Some(9) } else { None }),
            stdout,
            stderr,
            stdout_truncated,
            stderr_truncated,
            timed_out,
            duration: started.elapsed(),
        })
    }
}

/// The sandbox's output cap, on the whole output: the first `head` and last `tail` bytes around
/// the one marker (`\n[… N bytes cut]\n`), as a sandboxed command's output reads (the same
/// [`crate::exec::CapBuf`]).
fn cap(bytes: Vec<u8>, head: usize, tail: usize) -> (Vec<u8>, bool) {
    let mut buf = crate::exec::CapBuf::new(crate::types::OutputCap { head, tail });
    buf.push(&bytes);
    buf.finish()
}

impl Workspace for LocalWorkspace {
    fn exec<'a>(&'a self, req: &'a ExecRequest) -> BoxFuture<'a, Result<ExecOutput, SandboxError>> {
        Box::pin(self.run(req))
    }
    fn read_file<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<u8>, SandboxError>> {
        Box::pin(async move {
            let p = self.host_path(path)?;
            tokio::fs::read(&p)
                .await
                .map_err(|source| SandboxError::Io {
                    path: path.to_string(),
                    source,
                })
        })
    }
    fn write_file<'a>(
        &'a self,
        path: &'a str,
        data: &'a [u8],
    ) -> BoxFuture<'a, Result<(), SandboxError>> {
        Box::pin(async move {
            let p = self.host_path(path)?;
            let io = |source| SandboxError::Io {
                path: path.to_string(),
                source,
            };
            if let Some(parent) = p.parent() {
                tokio::fs::create_dir_all(parent).await.map_err(io)?;
            }
            tokio::fs::write(&p, data).await.map_err(io)
        })
    }
    fn diff(&self) -> BoxFuture<'_, Result<String, SandboxError>> {
        Box::pin(async move {
            let req =
                ExecRequest::shell("git add -A >/dev/null 2>&1 && git diff --cached --binary")
                    .timeout(Duration::from_secs(60));
            let out = self.run(&req).await?;
            if !out.success() {
                return Err(SandboxError::Other(format!(
                    "git diff failed: {}",
                    out.stderr_lossy()
                )));
            }
            Ok(out.stdout_lossy())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_paths_stay_inside() {
        let ws = LocalWorkspace::new("/tmp/x");
        assert_eq!(
            ws.host_path("/testbed/a/b.py").unwrap(),
            PathBuf::from("/tmp/x/a/b.py")
        );
        assert_eq!(ws.host_path("/testbed").unwrap(), PathBuf::from("/tmp/x"));
        assert_eq!(ws.host_path("a.py").unwrap(), PathBuf::from("/tmp/x/a.py"));
        assert!(ws.host_path("/etc/passwd").is_err());
        assert!(ws.host_path("/testbed/../etc").is_err());
        assert!(ws.host_path("/testbedx").is_err());
    }

    #[test]
    fn cap_keeps_head_and_tail() {
        assert_eq!(
            cap(b"abcdef".to_vec(), 2, 2),
            ("ab\n[… 2 bytes cut]\nef".as_bytes().to_vec(), true)
        );
        assert_eq!(cap(b"abc".to_vec(), 2, 2), (b"abc".to_vec(), false));
    }
}
