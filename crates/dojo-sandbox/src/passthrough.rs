//! A command run in a sandbox with its output streamed to this process's stdout and stderr
//! (`dojo sandbox run` / `exec`), a sandbox made from a source spec (`dojo sandbox run`), and
//! removing a kept sandbox by id (`dojo sandbox rm`).

use std::time::Duration;

use tokio::io::AsyncReadExt;

use crate::{
    ExecRequest, PristineStore, PythonEnv, PythonEnvSpec, Result, Sandbox, SandboxError,
    SandboxOptions, Source,
};

/// How a passed-through command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassThrough {
    /// Its exit code (128 + signal when killed by one).
    Exited(i32),
    /// It ran past the timeout and was stopped (TERM, KILL after a 2 s grace).
    TimedOut,
}

impl PassThrough {
    /// The exit code to pass on: the command's, or 124 on timeout like `timeout(1)`.
    pub fn code(self) -> i32 {
        match self {
            PassThrough::Exited(c) => c,
            PassThrough::TimedOut => 124,
        }
    }
}

fn wait_err(source: std::io::Error) -> SandboxError {
    SandboxError::Io {
        path: "the sandboxed command".into(),
        source,
    }
}

impl Sandbox {
    /// Run `cmd` with its output streamed to ours (any size, chunk by chunk) and no stdin.
    pub async fn pass_through(&self, cmd: Vec<String>, timeout: Duration) -> Result<PassThrough> {
        let mut p = self.spawn(&ExecRequest::new(cmd)).await?;
        drop(p.child.stdin.take());
        let missing = |what: &str| SandboxError::Other(format!("no {what}"));
        let mut out = p.child.stdout.take().ok_or_else(|| missing("stdout"))?;
        let mut err = p.child.stderr.take().ok_or_else(|| missing("stderr"))?;
        let o = tokio::spawn(async move { forward(&mut out, false).await });
        let e = tokio::spawn(async move { forward(&mut err, true).await });
        let mut timed_out = false;
        let status = match tokio::time::timeout(timeout, p.child.wait()).await {
            Ok(s) => s.map_err(wait_err)?,
            Err(_) => {
                timed_out = true;
                p.terminate();
                match tokio::time::timeout(Duration::from_secs(2), p.child.wait()).await {
                    Ok(s) => s.map_err(wait_err)?,
                    Err(_) => {
                        p.child.start_kill().map_err(wait_err)?;
                        p.child.wait().await.map_err(wait_err)?
                    }
                }
            }
        };
        let _ = o.await;
        let _ = e.await;
        if timed_out {
            return Ok(PassThrough::TimedOut);
        }
        use std::os::unix::process::ExitStatusExt;
        Ok(PassThrough::Exited(
            status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
        ))
    }

    /// A fresh sandbox over `source` (a directory, `<git-repo>@<commit>` or an sdist; its
    /// pristine tree built or taken from the cache), with the Python environment of the spec
    /// file `env` when given.
    pub async fn over_source(
        source: &str,
        env: Option<&std::path::Path>,
        opts: &SandboxOptions,
    ) -> Result<Sandbox> {
        let source = Source::parse(source)?;
        let pristine = PristineStore::open()?.build_async(&source).await?;
        let env = match env {
            Some(p) => {
                let spec = PythonEnvSpec::from_toml_file(p)?;
                Some(PythonEnv::build_async(&spec, Some(&pristine)).await?)
            }
            None => None,
        };
        Sandbox::create(&pristine, env.as_ref(), opts).await
    }

    /// Tear down the kept sandbox `id`, or discard what is left of one whose holder died;
    /// waits until its files are gone.
    pub async fn remove(id: &str) -> Result<()> {
        match Sandbox::attach(id).await {
            Ok(sb) => sb.teardown().await?,
            Err(SandboxError::Gone(_) | SandboxError::GoneFrom { .. }) => {
                let dir = crate::sandboxes_dir().join(id);
                if id.is_empty() || id.contains('/') || !dir.exists() {
                    return Err(SandboxError::Other(format!("no sandbox {id}")));
                }
                crate::trash::discard(&dir);
            }
            Err(e) => return Err(e),
        }
        crate::trash::flush();
        Ok(())
    }
}

/// Copy `r` to our stdout (or stderr) with blocking writes, flushed per chunk (tokio's io-std
/// feature is not enabled workspace-wide; a CLI shares its stdio with nothing else).
async fn forward(r: &mut (impl tokio::io::AsyncRead + Unpin), to_stderr: bool) {
    use std::io::Write;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let _ = if to_stderr {
                    let mut w = std::io::stderr().lock();
                    w.write_all(&buf[..n]).and_then(|_| w.flush())
                } else {
                    let mut w = std::io::stdout().lock();
                    w.write_all(&buf[..n]).and_then(|_| w.flush())
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_exits_124() {
        assert_eq!(PassThrough::TimedOut.code(), 124);
        assert_eq!(PassThrough::Exited(3).code(), 3);
    }
}
