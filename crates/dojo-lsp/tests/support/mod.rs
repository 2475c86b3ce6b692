//! Shared fixtures: real sdists from PyPI (through the sha256-checked cache) unpacked into a
//! fresh temp dir per test, and the pinned server installed into the tools directory.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dojo_lsp::{HostBackend, LspTool, ServerKind, SessionOptions};

pub struct Sdist {
    pub url: &'static str,
    pub sha256: &'static str,
    /// Directory inside the archive.
    pub top: &'static str,
}

pub const FLASK: Sdist = Sdist {
    url: "https://files.pythonhosted.org/packages/d8/09/c1a7354d3925a3c6c8cfdebf4245bae67d633ffda1ba415add06ffc839c5/flask-3.0.0.tar.gz",
    sha256: "cfadcdb638b609361d29ec22360d6070a77d7463dcb3ab08d2c2f2f168845f58",
    top: "flask-3.0.0",
};

pub const SYMPY: Sdist = Sdist {
    url: "https://files.pythonhosted.org/packages/e5/57/3485a1a3dff51bfd691962768b14310dae452431754bfc091250be50dd29/sympy-1.12.tar.gz",
    sha256: "ebf595c8dac3e0fdc4152c51878b498396ec7f30e7a914d6071e674d49420fb8",
    top: "sympy-1.12",
};

/// CI installs network access to PyPI; elsewhere a missing download skips the test.
pub fn skip(reason: &str) -> bool {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{reason} (CI=true: this must work in CI)");
    }
    println!("SKIPPED: {reason}");
    true
}

/// Unpack `sdist` into a new temp dir; returns (guard, repository root).
pub fn unpack(sdist: &Sdist) -> Option<(tempfile::TempDir, PathBuf)> {
    let name = sdist.url.rsplit('/').next().unwrap_or("sdist.tar.gz");
    let archive =
        match dojo_cache::Cache::open().and_then(|c| c.fetch(sdist.url, sdist.sha256, name)) {
            Ok(p) => p,
            Err(e) => {
                skip(&format!("cannot fetch {name}: {e}"));
                return None;
            }
        };
    let dir = tempfile::tempdir().expect("temp dir");
    let st = std::process::Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(dir.path())
        .status()
        .expect("running tar");
    assert!(st.success(), "unpacking {}", archive.display());
    let root = dir.path().join(sdist.top);
    Some((dir, root))
}

/// A tool over `root` with the pinned `kind` (None → skipped).
pub async fn tool(root: &Path, kind: ServerKind) -> Option<LspTool> {
    let launch = match tokio::task::spawn_blocking(move || dojo_lsp::install(kind))
        .await
        .expect("install task")
    {
        Ok(l) => l,
        Err(e) => {
            skip(&format!("cannot install {}: {e}", kind.name()));
            return None;
        }
    };
    let backend = Arc::new(HostBackend::new(root).expect("workspace root"));
    Some(LspTool::from_launch(backend, kind, launch, SessionOptions::default()).expect("session"))
}

/// Call the tool with JSON arguments.
pub async fn call(tool: &LspTool, args: serde_json::Value) -> dojo_lsp::Observation {
    tool.call_detailed(&args).await
}
