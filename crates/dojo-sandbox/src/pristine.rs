//! Pristine trees: read-only, content-addressed snapshots of a project at one commit.
//!
//! Each entry is `$DOJO_HOME/pristine/<key>/tree`: the project's files in a fresh one-commit git
//! repository (tag `dojo-base`), never a clone — history after the base commit would reveal the
//! fix. Bytecode and caches are ignored through `.git/info/exclude` (so diffs never contain them
//! and the project's own files are untouched), bytecode is precompiled with the sandbox Python,
//! and the tree is owned by the sandbox uid (files owned by an unmapped uid could not be edited
//! inside the user namespace). Builds go through [`dojo_cache::Cache::get_or_build`]: concurrent
//! builders wait on one lock and nobody ever sees a half-built entry.
//!
//! Entries are keyed by what the source holds: a git commit, an archive's sha256, or a
//! directory's content hash. A directory is recognised without reading its files again when a
//! stat pass shows nothing changed since the last build ([`index`]), so a sandbox over an
//! unchanged checkout starts in milliseconds.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{BuildError, Result, SandboxError};

mod index;

/// Where a pristine tree comes from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    /// A directory copied as is (its `.git`, if any, is dropped).
    Dir { path: PathBuf },
    /// A git repository (or bare mirror) at a commit, exported with `git archive` (never cloned).
    Git { repo: PathBuf, commit: String },
    /// An sdist or tarball (`.tar.gz`, `.tgz`, `.tar.bz2`, `.tar.xz`, `.zip`); a single top
    /// directory is stripped.
    Archive { path: PathBuf },
}

impl Source {
    /// Human-readable description for errors and logs.
    pub fn describe(&self) -> String {
        match self {
            Source::Dir { path } => format!("directory {}", path.display()),
            Source::Git { repo, commit } => format!("git {}@{commit}", repo.display()),
            Source::Archive { path } => format!("archive {}", path.display()),
        }
    }

    /// Parse the CLI form: `repo@commit` (when `repo` is a git repository), an archive file, or
    /// a directory.
    pub fn parse(s: &str) -> Result<Source> {
        let p = Path::new(s);
        if p.is_file() {
            return Ok(Source::Archive { path: p.into() });
        }
        if p.is_dir() {
            return Ok(Source::Dir { path: p.into() });
        }
        if let Some((repo, commit)) = s.rsplit_once('@')
            && Path::new(repo).is_dir()
            && !commit.is_empty()
        {
            return Ok(Source::Git {
                repo: repo.into(),
                commit: commit.into(),
            });
        }
        Err(SandboxError::Pristine {
            source_desc: s.to_string(),
            source: "not a directory, an archive file, or <git-repo>@<commit>".into(),
        })
    }
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

/// Patterns excluded from diffs (written to `.git/info/exclude` of every pristine tree).
pub const EXCLUDES: &str = "__pycache__/\n*.py[cod]\n*$py.class\n.pytest_cache/\n.mypy_cache/\n\
.ruff_cache/\n.hypothesis/\n.tox/\n.nox/\n.coverage\n.coverage.*\n*.egg-info/\n.eggs/\n\
.ipynb_checkpoints/\n";

/// Tag of the base commit in every pristine repository.
pub const BASE_TAG: &str = "dojo-base";

/// Bumped when the tree layout changes, so old entries are not reused. v3: a git source's
/// nearest release tag is on the base commit too.
const LAYOUT_VERSION: &str = "pristine-v3";

/// Under the store's root: the stat index of each directory source (see [`index`]).
const DIR_INDEX: &str = "dir-index";

/// The Python used to precompile bytecode (world-readable, so the sandbox uid can run it).
pub const DEFAULT_PYTHON: &str = "/usr/bin/python3.11";

impl PristineStore {
    /// The store at `$DOJO_HOME/pristine`.
    pub fn open() -> Result<PristineStore> {
        let cache = dojo_cache::Cache::open().map_err(SandboxError::Cache)?;
        Ok(PristineStore {
            root: cache.root().join("pristine"),
        })
    }

    /// A store rooted elsewhere (tests).
    pub fn at(root: impl Into<PathBuf>) -> PristineStore {
        PristineStore { root: root.into() }
    }

    /// Build (once) and return the pristine tree of `source`. Blocking: call it from
    /// `spawn_blocking` in async code. Precompiles bytecode with [`DEFAULT_PYTHON`] when present.
    pub fn build(&self, source: &Source) -> Result<Pristine> {
        let err = |e: Box<dyn std::error::Error + Send + Sync>| SandboxError::Pristine {
            source_desc: source.describe(),
            source: e,
        };
        let identity = match source {
            Source::Git { repo, commit } => {
                format!(
                    "git\0{}",
                    resolve_commit(repo, commit).map_err(|e| err(e.into()))?
                )
            }
            Source::Archive { path } => format!(
                "archive\0{}",
                dojo_cache::sha256_file(path).map_err(|e| err(e.into()))?
            ),
            Source::Dir { path } => format!(
                "dir\0{}",
                index::scan(path, Some(&self.root.join(DIR_INDEX)))
                    .map_err(|e| err(e.into()))?
                    .identity
            ),
        };
        let uid = crate::ids::sandbox_uid();
        let key = dojo_cache::sha256_hex(format!("{LAYOUT_VERSION}\0{uid}\0{identity}"));
        let (parent, bucket) = split_root(&self.root);
        let cache = dojo_cache::Cache::at(parent).map_err(|e| err(e.into()))?;
        let entry = cache
            .get_or_build(&bucket, &key, |tmp| {
                build_into(source, tmp)?;
                cache.share_or_keep(&tmp.join("tree"));
                Ok::<_, BuildError>(())
            })
            .map_err(|e| err(e.into()))?;
        Ok(Pristine {
            id: key,
            path: entry.join("tree"),
        })
    }

    /// Async wrapper around [`PristineStore::build`].
    pub async fn build_async(&self, source: &Source) -> Result<Pristine> {
        let (s, src) = (self.clone(), source.clone());
        tokio::task::spawn_blocking(move || s.build(&src))
            .await
            .map_err(|e| crate::error::failed("pristine build task", e))?
    }
}

fn split_root(root: &Path) -> (PathBuf, String) {
    let parent = root.parent().unwrap_or(Path::new("/")).to_path_buf();
    let bucket = root
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| "pristine".into());
    (parent, bucket)
}

/// Run a command; on failure return its stderr as the reason.
pub(crate) fn run(cmd: &mut Command, what: &str) -> std::result::Result<Vec<u8>, BuildError> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|source| BuildError::Spawn {
            what: what.to_string(),
            source,
        })?;
    if !out.status.success() {
        return Err(BuildError::Failed {
            what: what.to_string(),
            status: out.status,
            output: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out.stdout)
}

fn git() -> Command {
    let mut c = Command::new("git");
    c.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0");
    c
}

fn resolve_commit(repo: &Path, commit: &str) -> std::result::Result<String, BuildError> {
    if !repo.exists() {
        return Err(BuildError::NoRepo(repo.to_path_buf()));
    }
    let out = run(
        git()
            .arg("-C")
            .arg(repo)
            .args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("{commit}^{{commit}}")),
        &format!("resolving commit {commit}"),
    )
    .map_err(|_| BuildError::NoCommit {
        commit: commit.to_string(),
        repo: repo.to_path_buf(),
    })?;
    Ok(String::from_utf8_lossy(&out).trim().to_string())
}

fn build_into(source: &Source, tmp: &Path) -> std::result::Result<(), BuildError> {
    let tree = tmp.join("tree");
    let mut release_tag = None;
    match source {
        Source::Git { repo, commit } => {
            let sha = resolve_commit(repo, commit)?;
            release_tag = nearest_release_tag(repo, &sha);
            std::fs::create_dir_all(&tree).map_err(BuildError::io(tree.display()))?;
            let mut archive = git()
                .arg("-C")
                .arg(repo)
                .args(["archive", "--format=tar", &sha])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(BuildError::io("git archive"))?;
            let stdout = archive.stdout.take().ok_or(BuildError::NoStdout {
                what: "git archive",
            })?;
            let tar = Command::new("tar")
                .args(["-x", "--no-same-owner", "-C"])
                .arg(&tree)
                .stdin(stdout)
                .output()
                .map_err(BuildError::io("tar"))?;
            let g = archive
                .wait_with_output()
                .map_err(BuildError::io(format!("git archive {sha}")))?;
            if !g.status.success() {
                return Err(BuildError::Step {
                    what: format!("git archive {sha}"),
                    output: String::from_utf8_lossy(&g.stderr).trim().to_string(),
                });
            }
            if !tar.status.success() {
                return Err(BuildError::Step {
                    what: "extracting git archive".into(),
                    output: String::from_utf8_lossy(&tar.stderr).trim().to_string(),
                });
            }
        }
        Source::Archive { path } => {
            let x = tmp.join("x");
            let top = dojo_cache::archive::unpack(path, &x)?;
            std::fs::rename(&top, &tree).map_err(BuildError::io(format!(
                "moving {} to {}",
                top.display(),
                tree.display()
            )))?;
            let _ = std::fs::remove_dir_all(&x);
        }
        Source::Dir { path } => {
            if !path.is_dir() {
                return Err(BuildError::NotADir(path.clone()));
            }
            std::fs::create_dir_all(&tree).map_err(BuildError::io(tree.display()))?;
            let mut src = path.as_os_str().to_owned();
            src.push("/.");
            run(
                Command::new("cp").arg("-a").arg(&src).arg(&tree),
                &format!("copying {}", path.display()),
            )?;
            let _ = std::fs::remove_dir_all(tree.join(".git"));
        }
    }
    strip_bytecode(&tree);
    // Before the commit, so the index's stat data matches and git never rehashes the tree.
    let uniform = matches!(source, Source::Git { .. });
    pin_mtimes(&tree, if uniform { Pin::All } else { Pin::Sources });
    init_repo(&tree, release_tag.as_deref())?;
    if Path::new(DEFAULT_PYTHON).exists() && std::env::var_os("DOJO_NO_COMPILEALL").is_none() {
        // Best effort: Python-2-only files fail to compile and that is fine. `-d`: the code
        // objects record the path the sandbox sees (`/testbed/...`) instead of this entry's own
        // (`$DOJO_HOME/pristine/<key>/tree/...`), so identical sources give identical bytecode
        // that the cache stores once across trees. Measured on the 75 sympy trees of Verified:
        // 5.8 GB of bytecode, each tree's its own, before this.
        let _ = Command::new(DEFAULT_PYTHON)
            .args(["-m", "compileall", "-q", "-j0", "-d", crate::WORKSPACE])
            .arg(&tree)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    pin_mtimes(&tree, Pin::Derived);
    if crate::ids::is_root() {
        let uid = crate::ids::sandbox_uid();
        run(
            Command::new("chown")
                .arg("-R")
                .arg(format!("{uid}:{uid}"))
                .arg(&tree),
            "chown of the pristine tree",
        )?;
    }
    let meta = serde_json::json!({
        "schema_version": 1,
        "source": source,
        "base_tag": BASE_TAG,
    });
    let meta_path = tmp.join("meta.json");
    std::fs::write(&meta_path, meta.to_string()).map_err(BuildError::io(meta_path.display()))?;
    Ok(())
}

/// 2000-01-01, the mtime [`pin_mtimes`] gives.
const PINNED: std::time::Duration = std::time::Duration::from_secs(946_684_800);

/// Which files of a tree [`pin_mtimes`] gives the fixed past mtime.
#[derive(Clone, Copy)]
enum Pin {
    /// Python sources, before `compileall`: Python trusts a `.pyc` whose recorded source mtime
    /// (whole seconds) and size still match, so an edit made in the same second as the tree was
    /// written, keeping the size (`a - b` → `a + b`), would otherwise run the stale bytecode.
    /// With sources pinned every later edit gets a different mtime.
    Sources,
    /// Every file outside `.git`, before `compileall`: a `git archive` export gives them all
    /// one time (the commit's), so one other time keeps their order (what `make`-like checks
    /// read) and makes the files trees of one repository have in common identical in metadata
    /// too, so the cache stores them once ([`dojo_cache::Cache::share`]).
    All,
    /// After `compileall` and the commit, for sharing too: the bytecode files themselves (their
    /// headers keep the sources' time) and git's objects (git reads no object's mtime with
    /// `gc.auto=0`); never `.git/index`, whose own mtime git compares entries against.
    Derived,
}

fn pin_mtimes(tree: &Path, pin: Pin) {
    let when = std::time::UNIX_EPOCH + PINNED;
    let git_dir = tree.join(".git");
    let objects = git_dir.join("objects");
    let walk = walkdir::WalkDir::new(tree)
        .into_iter()
        .filter_entry(|e| matches!(pin, Pin::Derived) || e.path() != git_dir);
    for entry in walk.filter_map(|e| e.ok()) {
        let path = entry.path();
        let wanted = match pin {
            Pin::Sources => path.extension().is_some_and(|x| x == "py"),
            Pin::All => true,
            Pin::Derived => {
                path.extension().is_some_and(|x| x == "pyc") || path.starts_with(&objects)
            }
        };
        if entry.file_type().is_file()
            && wanted
            && let Ok(f) = std::fs::File::options().write(true).open(path)
        {
            let _ = f.set_modified(when);
        }
    }
}

fn strip_bytecode(tree: &Path) {
    let mut doomed = Vec::new();
    for e in walkdir::WalkDir::new(tree).into_iter().flatten() {
        let n = e.file_name().to_string_lossy();
        if (e.file_type().is_dir() && n == "__pycache__")
            || (e.file_type().is_file() && (n.ends_with(".pyc") || n.ends_with(".pyo")))
        {
            doomed.push(e.path().to_path_buf());
        }
    }
    for d in doomed {
        let _ = std::fs::remove_dir_all(&d).or_else(|_| std::fs::remove_file(&d));
    }
}

/// The newest tag with a digit reachable from `sha` in `repo` (`git describe --tags --abbrev=0
/// --match '*[0-9]*'`, the tags setuptools-scm reads), if any.
fn nearest_release_tag(repo: &Path, sha: &str) -> Option<String> {
    let out = git()
        .arg("-C")
        .arg(repo)
        .args([
            "describe",
            "--tags",
            "--abbrev=0",
            "--match",
            "*[0-9]*",
            sha,
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let tag = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !tag.is_empty() && tag != BASE_TAG).then_some(tag)
}

/// The pristine repository: one commit of the whole tree, tagged [`BASE_TAG`] and, for a git
/// source, with the source's nearest release tag (`release_tag`). Versions computed from git
/// (setuptools-scm, versioneer: `git describe`) then see the project's release instead of an
/// untagged `0.1.dev1`, which tools check (pytest's `tox.ini` `minversion`). The one known
/// difference from a full clone: the distance from that tag is 0 (`5.2.0`, not
/// `5.2.1.dev26+g…`).
fn init_repo(tree: &Path, release_tag: Option<&str>) -> std::result::Result<(), BuildError> {
    let g = |args: &[&str]| {
        let mut c = git();
        // No `git gc --auto` / maintenance in the background: after the commit of a large tree
        // (django: 6,700+ loose objects) it deletes object folders while `chown -R` walks them.
        c.args(["-c", "gc.auto=0", "-c", "maintenance.auto=false"]);
        c.arg("-C").arg(tree).args(args);
        c.env("GIT_AUTHOR_NAME", "dojo")
            .env("GIT_AUTHOR_EMAIL", "dojo@localhost")
            .env("GIT_COMMITTER_NAME", "dojo")
            .env("GIT_COMMITTER_EMAIL", "dojo@localhost")
            .env("GIT_AUTHOR_DATE", "2000-01-01T00:00:00Z")
            .env("GIT_COMMITTER_DATE", "2000-01-01T00:00:00Z");
        c
    };
    run(&mut g(&["init", "-q", "-b", "main"]), "git init")?;
    let info = tree.join(".git/info");
    std::fs::create_dir_all(&info).map_err(BuildError::io(info.display()))?;
    let exclude = info.join("exclude");
    std::fs::write(&exclude, EXCLUDES).map_err(BuildError::io(exclude.display()))?;
    // -f: the base commit holds every file of the source, even ones its .gitignore matches.
    run(&mut g(&["add", "-A", "-f"]), "git add")?;
    run(
        &mut g(&[
            "commit",
            "-q",
            "--no-verify",
            "--allow-empty",
            "-m",
            "dojo base",
        ]),
        "git commit",
    )?;
    run(&mut g(&["tag", BASE_TAG]), "git tag")?;
    if let Some(t) = release_tag {
        run(&mut g(&["tag", t]), "git tag")?;
    }
    // Inside a sandbox the files are seen through overlayfs (another st_dev, other owners and
    // ctimes): compare only mtime and size, or every `git status`/`git diff` would re-hash the
    // whole tree (seconds on sympy).
    // And never later either (an agent's `git commit` in a sandbox would start one).
    for (k, v) in [
        ("core.checkStat", "minimal"),
        ("core.trustctime", "false"),
        ("gc.auto", "0"),
        ("maintenance.auto", "false"),
    ] {
        run(&mut g(&["config", k, v]), "git config")?;
    }
    Ok(())
}
