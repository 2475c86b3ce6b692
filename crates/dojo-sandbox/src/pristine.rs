//! Pristine trees: read-only, content-addressed snapshots of a project at one commit.

use std::path::PathBuf;

/// Where a pristine tree comes from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    /// A directory copied as is.
    Dir { path: PathBuf },
    /// A git repository (or bare mirror) at a commit, exported with `git archive` (never cloned).
    Git { repo: PathBuf, commit: String },
    /// An sdist or tarball (`.tar.gz`, `.tgz`, `.tar.bz2`, `.zip`); a single top directory is stripped.
    Archive { path: PathBuf },
}

/// A built, read-only tree: a fresh one-commit git repository.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Pristine {
    /// Content address (hex sha256 of the source identity).
    pub id: String,
    /// The tree on the host.
    pub path: PathBuf,
}

/// The cache of pristine trees under `$DOJO_HOME/pristine`.
#[derive(Debug, Clone)]
pub struct PristineStore {
    pub root: PathBuf,
}
