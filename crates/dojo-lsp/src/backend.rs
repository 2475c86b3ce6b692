//! Where the language server runs and where the workspace's files are read from.
//!
//! A server must see exactly the files of *its* rollout, so in training it runs inside the
//! rollout's sandbox ([`SandboxBackend`]). `dojo lsp --source DIR` and local development run it
//! as a plain host process over a directory ([`HostBackend`]). Both hand the client a
//! `tokio::process::Child` with piped stdio; everything above this module is the same.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::UNIX_EPOCH;

use crate::LspError;

pub use dojo_rundir::BoxFuture;

/// Modification stamp of one workspace file: what the sync layer compares between queries to
/// notice edits made by shell commands, which the editor tool never sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub mtime_ns: i128,
    pub size: u64,
}

/// Workspace-relative path → stamp, for every Python file.
pub type Stamps = BTreeMap<String, Stamp>;

/// One server launch: argv plus extra environment.
#[derive(Debug, Clone)]
pub struct Launch {
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
}

/// A place to run a language server: a host directory or a sandbox.
///
/// **Execution model.** An [`crate::LspSession`] holds a backend as an `Arc` (or is lent one
/// for a query, [`crate::LspSession::query_on`]) and calls it under its state lock: `spawn` at
/// the start and at each restart after a crash, then, before every query, `scan` and the
/// `read_file`s the sync step needs, one after another. A session's queries are serialised, but
/// the workspace behind a backend is also changed by the agent's other tools meanwhile, so a
/// method must not assume the files stay as they were between calls. Futures run
/// on a tokio runtime and must not block its threads; errors are the backend's (infrastructure),
/// never an answer about the code.
pub trait Backend: Send + Sync {
    /// The workspace root as the *server* sees it (absolute).
    fn root(&self) -> &Path;
    /// Start the server with piped stdin/stdout/stderr, its cwd at [`Backend::root`].
    fn spawn<'a>(
        &'a self,
        launch: &'a Launch,
    ) -> BoxFuture<'a, Result<tokio::process::Child, LspError>>;
    /// Read a file; relative paths are under the root, absolute ones are as the server sees them.
    /// `Ok(None)` when the file does not exist.
    fn read_file<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, LspError>>;
    /// Stamps of every `.py`/`.pyi` file under the root (hidden directories skipped).
    fn scan(&self) -> BoxFuture<'_, Result<Stamps, LspError>>;
    /// Short description for messages ("host dir /x", "sandbox abc").
    fn describe(&self) -> String;
}

fn is_python(name: &str) -> bool {
    name.ends_with(".py") || name.ends_with(".pyi")
}

/// The server is a host process over a host directory.
#[derive(Debug, Clone)]
pub struct HostBackend {
    root: PathBuf,
}

impl HostBackend {
    /// `root` must exist; it is canonicalised so the URIs the server returns map back to it.
    pub fn new(root: impl AsRef<Path>) -> Result<Self, LspError> {
        let root = root.as_ref();
        let root = std::fs::canonicalize(root)
            .map_err(|e| LspError::workspace_failed(root.display().to_string(), e))?;
        Ok(HostBackend { root })
    }
}

impl Backend for HostBackend {
    fn root(&self) -> &Path {
        &self.root
    }

    fn spawn<'a>(
        &'a self,
        launch: &'a Launch,
    ) -> BoxFuture<'a, Result<tokio::process::Child, LspError>> {
        Box::pin(async move {
            let (prog, args) = launch
                .argv
                .split_first()
                .ok_or_else(|| LspError::ServerMissing("empty command".into()))?;
            tokio::process::Command::new(prog)
                .args(args)
                .envs(&launch.env)
                .current_dir(&self.root)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| LspError::server_failed(format!("cannot start {prog}"), e))
        })
    }

    fn read_file<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, LspError>> {
        Box::pin(async move {
            let p = self.root.join(path);
            match tokio::fs::read(&p).await {
                Ok(b) => Ok(Some(b)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) if e.raw_os_error() == Some(libc_eisdir()) => Ok(None),
                Err(e) => Err(LspError::workspace_failed(
                    format!("reading {}", p.display()),
                    e,
                )),
            }
        })
    }

    fn scan(&self) -> BoxFuture<'_, Result<Stamps, LspError>> {
        let root = self.root.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || scan_dir(&root))
                .await
                .map_err(|e| LspError::workspace_failed("scan task", e))?
        })
    }

    fn describe(&self) -> String {
        format!("host directory {}", self.root.display())
    }
}

/// EISDIR without a libc dependency in the library (Linux value).
/// The backend of a session whose calls each lend their own (an agent's tool borrows its
/// rollout's sandbox per call; see [`crate::LspSession::query_on`]). It only knows the root;
/// anything else means a call came without its backend.
#[derive(Debug, Clone)]
pub struct Lent {
    root: PathBuf,
}

impl Lent {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Lent { root: root.into() }
    }

    fn refuse(&self) -> LspError {
        LspError::Workspace(format!(
            "no workspace lent for this call (root {})",
            self.root.display()
        ))
    }
}

impl Backend for Lent {
    fn root(&self) -> &Path {
        &self.root
    }
    fn spawn<'a>(
        &'a self,
        _launch: &'a Launch,
    ) -> BoxFuture<'a, Result<tokio::process::Child, LspError>> {
        Box::pin(async move { Err(self.refuse()) })
    }
    fn read_file<'a>(&'a self, _path: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, LspError>> {
        Box::pin(async move { Err(self.refuse()) })
    }
    fn scan(&self) -> BoxFuture<'_, Result<Stamps, LspError>> {
        Box::pin(async move { Err(self.refuse()) })
    }
    fn describe(&self) -> String {
        format!("lent workspace {}", self.root.display())
    }
}

fn libc_eisdir() -> i32 {
    21
}

fn scan_dir(root: &Path) -> Result<Stamps, LspError> {
    let mut out = Stamps::new();
    let walker = walkdir::WalkDir::new(root)
        .into_iter()
        .filter_entry(|e| e.depth() == 0 || !e.file_name().to_string_lossy().starts_with('.'));
    for entry in walker {
        let Ok(entry) = entry else { continue };
        if !entry.file_type().is_file() || !is_python(&entry.file_name().to_string_lossy()) {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        let mtime_ns = meta
            .modified()
            .ok()
            .and_then(|m| m.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos() as i128);
        let Ok(rel) = entry.path().strip_prefix(root) else {
            continue;
        };
        out.insert(
            rel.to_string_lossy().into_owned(),
            Stamp {
                mtime_ns,
                size: meta.len(),
            },
        );
    }
    Ok(out)
}

#[cfg(feature = "sandbox")]
pub use sandboxed::SandboxBackend;

#[cfg(feature = "sandbox")]
mod sandboxed {
    use super::*;
    use std::ops::Deref;
    use std::sync::Arc;
    use std::time::Duration;

    use dojo_sandbox::Sandbox;

    /// The server runs inside a rollout's sandbox and sees its copy-on-write workspace at
    /// [`dojo_sandbox::WORKSPACE`]. The server binary must be readable inside the sandbox (the tools
    /// directory is world-readable; see [`crate::servers`]). `S` is how the sandbox is held:
    /// shared (`Arc<Sandbox>`, a tool that owns its sandbox) or borrowed for one call
    /// (`&Sandbox`, an agent tool lending its rollout's sandbox to a [`super::Lent`] session).
    #[derive(Clone)]
    pub struct SandboxBackend<S = Arc<Sandbox>> {
        sandbox: S,
        root: PathBuf,
    }

    impl<S: Deref<Target = Sandbox> + Send + Sync> SandboxBackend<S> {
        pub fn new(sandbox: S) -> Self {
            SandboxBackend {
                sandbox,
                root: PathBuf::from(dojo_sandbox::WORKSPACE),
            }
        }
    }

    fn sandbox_err(e: dojo_sandbox::SandboxError) -> LspError {
        LspError::workspace_failed("sandbox", e)
    }

    impl<S: Deref<Target = Sandbox> + Send + Sync> Backend for SandboxBackend<S> {
        fn root(&self) -> &Path {
            &self.root
        }

        fn spawn<'a>(
            &'a self,
            launch: &'a Launch,
        ) -> BoxFuture<'a, Result<tokio::process::Child, LspError>> {
            Box::pin(async move {
                let mut req = dojo_sandbox::ExecRequest::new(launch.argv.clone())
                    .cwd(dojo_sandbox::WORKSPACE);
                req.env = launch.env.clone();
                // A language server lives as long as the rollout; the session kills it on drop.
                req.timeout = Duration::from_secs(7 * 24 * 3600);
                let proc = self
                    .sandbox
                    .spawn(&req)
                    .await
                    .map_err(|e| LspError::ServerFailed {
                        what: format!(
                            "cannot start {:?} in sandbox {}",
                            launch.argv,
                            self.sandbox.id()
                        ),
                        source: e.into(),
                    })?;
                Ok(proc.child)
            })
        }

        fn read_file<'a>(
            &'a self,
            path: &'a str,
        ) -> BoxFuture<'a, Result<Option<Vec<u8>>, LspError>> {
            Box::pin(async move {
                match self.sandbox.read_file(path).await {
                    Ok(b) => Ok(Some(b)),
                    Err(dojo_sandbox::SandboxError::Io { source, .. })
                        if source.kind() == std::io::ErrorKind::NotFound
                            || source.raw_os_error() == Some(libc_eisdir()) =>
                    {
                        Ok(None)
                    }
                    Err(e) => Err(sandbox_err(e)),
                }
            })
        }

        fn scan(&self) -> BoxFuture<'_, Result<Stamps, LspError>> {
            Box::pin(async move {
                // One `find` per query: cheaper than any per-file round trip into the sandbox.
                let script = format!(
                    "find {} -name '.*' -prune -o -type f \\( -name '*.py' -o -name '*.pyi' \\) -printf '%P\\t%T@\\t%s\\n'",
                    dojo_sandbox::WORKSPACE
                );
                let out = self
                    .sandbox
                    .exec(
                        &dojo_sandbox::ExecRequest::shell(script).timeout(Duration::from_secs(60)),
                    )
                    .await
                    .map_err(sandbox_err)?;
                if !out.success() {
                    return Err(LspError::Workspace(format!(
                        "scanning workspace failed: {}",
                        out.stderr_lossy()
                    )));
                }
                Ok(parse_find_output(&out.stdout_lossy()))
            })
        }

        fn describe(&self) -> String {
            format!("sandbox {}", self.sandbox.id())
        }
    }
}

/// Parse `find -printf '%P\t%T@\t%s\n'` lines.
#[cfg_attr(not(feature = "sandbox"), allow(dead_code))]
pub(crate) fn parse_find_output(text: &str) -> Stamps {
    let mut out = Stamps::new();
    for line in text.lines() {
        let mut parts = line.rsplitn(3, '\t');
        let (Some(size), Some(mtime), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let Ok(size) = size.parse::<u64>() else {
            continue;
        };
        let (secs, frac) = mtime.split_once('.').unwrap_or((mtime, "0"));
        let Ok(secs) = secs.parse::<i128>() else {
            continue;
        };
        let frac: String = frac.chars().chain(std::iter::repeat('0')).take(9).collect();
        let nanos = frac.parse::<i128>().unwrap_or(0);
        out.insert(
            path.to_string(),
            Stamp {
                mtime_ns: secs * 1_000_000_000 + nanos,
                size,
            },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_find_lines() {
        let s = parse_find_output(
            "a/b.py\t1700000000.1234567890\t42\nweird\tname.py\t5.5\t1\nbad line\n",
        );
        assert_eq!(
            s["a/b.py"],
            Stamp {
                mtime_ns: 1_700_000_000_123_456_789,
                size: 42
            }
        );
        assert_eq!(
            s["weird\tname.py"],
            Stamp {
                mtime_ns: 5_500_000_000,
                size: 1
            }
        );
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn host_scan_sees_python_files_only() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("pkg/.hidden")).unwrap();
        std::fs::write(d.path().join("pkg/a.py"), "x = 1\n").unwrap();
        std::fs::write(d.path().join("pkg/b.txt"), "x").unwrap();
        std::fs::write(d.path().join("pkg/.hidden/c.py"), "x").unwrap();
        let b = HostBackend::new(d.path()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let s = rt.block_on(b.scan()).unwrap();
        assert_eq!(s.keys().collect::<Vec<_>>(), vec!["pkg/a.py"]);
        assert_eq!(
            rt.block_on(b.read_file("pkg/a.py")).unwrap().unwrap(),
            b"x = 1\n"
        );
        assert!(rt.block_on(b.read_file("nope.py")).unwrap().is_none());
        assert!(rt.block_on(b.read_file("pkg")).unwrap().is_none());
    }
}
