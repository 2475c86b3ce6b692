//! Shared, read-only Python environments built with `uv`, one per [`EnvSpec`].

use std::path::PathBuf;

/// How to build a Python environment. The project under test is installed editable against
/// [`crate::WORKSPACE`], never against the pristine path (that hides edits in src layouts).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EnvSpec {
    /// e.g. "3.11"
    pub python: String,
    /// Pinned requirements (`pytest==7.4.0`).
    #[serde(default)]
    pub requirements: Vec<String>,
    /// Extra shell commands run after the requirements, at the workspace root (e.g. `pip install -e .`).
    #[serde(default)]
    pub install: Vec<String>,
    /// Install the project itself editable at `/testbed` (default true).
    #[serde(default = "yes")]
    pub editable: bool,
}

fn yes() -> bool {
    true
}

/// A built environment.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PythonEnv {
    pub id: String,
    /// The venv directory on the host (its `bin/` is put first on PATH inside the sandbox).
    pub path: PathBuf,
}
