//! The project a run synthesizes tasks from, as an sdist source the task format already knows
//! (`source.kind = "sdist"`: url, sha256, file name): every synthesized task is that sdist plus
//! its own `bug_patch`, prepared by `dojo_task::Preparer` exactly as the bundled benchmark is.
//!
//! - `name==version`: the sdist is found in PyPI's simple index (JSON form, PEP 691, the way the
//!   bundled tasks' URLs and digests were found) and downloaded through `dojo_cache`, checked
//!   against that sha256.
//! - `--source DIR`: the directory is packed into a reproducible tarball (sorted names, fixed
//!   times and owners, `.git` and caches left out) published in the download cache under its
//!   sha256, with a `file://` URL; the same tree always gives the same digest.
//! - `--source REPO --commit REV`: the tree of that commit ([`export_commit`], `git archive`:
//!   tracked files only, the work tree's state does not matter), then packed as a directory.

use std::path::{Path, PathBuf};
use std::process::Command;

use dojo_task::SdistSource;

use crate::{SynthError, input_from};

/// What to synthesize from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A PyPI release.
    Pypi { name: String, version: String },
    /// A local project directory.
    Dir {
        path: PathBuf,
        name: String,
        version: String,
    },
}

impl Input {
    /// `name==version`.
    pub fn parse_requirement(s: &str) -> Result<Input, SynthError> {
        match s.split_once("==") {
            Some((n, v)) if !n.trim().is_empty() && !v.trim().is_empty() => Ok(Input::Pypi {
                name: n.trim().to_string(),
                version: v.trim().to_string(),
            }),
            _ => Err(SynthError::Input(format!(
                "--project {s:?}: expected NAME==VERSION (e.g. tenacity==9.2.1)"
            ))),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Input::Pypi { name, .. } | Input::Dir { name, .. } => name,
        }
    }

    pub fn version(&self) -> &str {
        match self {
            Input::Pypi { version, .. } | Input::Dir { version, .. } => version,
        }
    }
}

/// A resolved project: its sdist source (with an empty bug patch) and where it was unpacked.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Project {
    pub name: String,
    pub version: String,
    pub sdist: SdistSource,
}

/// PEP 503 name normalisation.
pub fn normalize(name: &str) -> String {
    let mut out = String::new();
    let mut sep = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            sep = true;
        } else {
            if sep && !out.is_empty() {
                out.push('-');
            }
            sep = false;
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// Resolve `input` to its sdist (downloading or packing it).
pub fn resolve(input: &Input) -> Result<Project, SynthError> {
    match input {
        Input::Pypi { name, version } => {
            let url = format!("https://pypi.org/simple/{}/", normalize(name));
            let body = dojo_cache::http_get(&url, "application/vnd.pypi.simple.v1+json")
                .map_err(|e| input_from(format!("{name}=={version}"), e))?;
            let sdist = pick_sdist(&body, name, version)
                .map_err(|e| input_from(format!("{name}=={version}: {url}"), e))?;
            let cache =
                dojo_cache::Cache::open().map_err(|e| input_from("the download cache", e))?;
            cache
                .fetch(&sdist.url, &sdist.sha256, &sdist.filename)
                .map_err(|e| input_from(format!("{name}=={version}"), e))?;
            Ok(Project {
                name: name.clone(),
                version: version.clone(),
                sdist,
            })
        }
        Input::Dir {
            path,
            name,
            version,
        } => pack_dir(path, name, version),
    }
}

/// What is wrong with a PEP 691 index page (the caller names the project and the URL).
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("index is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("index has no `files` list")]
    NoFiles,
    #[error("{0} is yanked")]
    Yanked(String),
    #[error("{0}: file without url")]
    NoUrl(String),
    #[error("{0}: file without a sha256")]
    NoSha256(String),
    #[error("no sdist {0}.tar.gz (or .zip) in the index")]
    NoSdist(String),
}

/// The sdist of `name==version` in a PEP 691 index page.
pub fn pick_sdist(index_json: &[u8], name: &str, version: &str) -> Result<SdistSource, IndexError> {
    let v: serde_json::Value = serde_json::from_slice(index_json).map_err(IndexError::NotJson)?;
    let files = v
        .get("files")
        .and_then(|f| f.as_array())
        .ok_or(IndexError::NoFiles)?;
    let want = format!("{}-{}", normalize(name), version);
    for f in files {
        let Some(filename) = f.get("filename").and_then(|x| x.as_str()) else {
            continue;
        };
        let stem = filename
            .strip_suffix(".tar.gz")
            .or_else(|| filename.strip_suffix(".zip"));
        let Some(stem) = stem else { continue };
        // `python_slugify-9.2.0` / `python-slugify-9.2.0`: compare normalised names.
        let Some((n, v)) = stem.rsplit_once('-') else {
            continue;
        };
        if format!("{}-{v}", normalize(n)) != want {
            continue;
        }
        let yanked = f
            .get("yanked")
            .is_some_and(|y| y.as_bool() == Some(true) || y.is_string());
        if yanked {
            return Err(IndexError::Yanked(filename.to_string()));
        }
        let url = f
            .get("url")
            .and_then(|x| x.as_str())
            .ok_or_else(|| IndexError::NoUrl(filename.to_string()))?;
        let sha = f
            .get("hashes")
            .and_then(|h| h.get("sha256"))
            .and_then(|x| x.as_str())
            .ok_or_else(|| IndexError::NoSha256(filename.to_string()))?;
        return Ok(SdistSource {
            url: url.to_string(),
            sha256: sha.to_ascii_lowercase(),
            filename: filename.to_string(),
            bug_patch: String::new(),
        });
    }
    Err(IndexError::NoSdist(want))
}

/// Write the tree of commit `rev` of the git repository at `repo` into `dest` (an empty
/// directory) and return the full commit id. Only tracked files, as committed.
pub fn export_commit(repo: &Path, rev: &str, dest: &Path) -> Result<String, SynthError> {
    let err = |reason: String| {
        SynthError::Input(format!(
            "--source {} --commit {rev}: {reason}",
            repo.display()
        ))
    };
    let commit = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["rev-parse", "--verify", "--quiet"])
        .arg(format!("{rev}^{{commit}}"))
        .output()
        .map_err(|e| {
            input_from(
                format!("--source {} --commit {rev}: running git", repo.display()),
                e,
            )
        })?;
    if !commit.status.success() {
        return Err(err("not a commit of this repository".into()));
    }
    let commit = String::from_utf8_lossy(&commit.stdout).trim().to_string();
    let out = Command::new("bash")
        .arg("-c")
        .arg(r#"set -euo pipefail; git -C "$1" archive --format=tar "$2" | tar -x -C "$3""#)
        .arg("export")
        .arg(repo)
        .arg(&commit)
        .arg(dest)
        .output()
        .map_err(|e| {
            input_from(
                format!(
                    "--source {} --commit {rev}: running git archive",
                    repo.display()
                ),
                e,
            )
        })?;
    if !out.status.success() {
        return Err(err(format!(
            "git archive failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(commit)
}

/// The input of `dojo synth`'s flags: a PyPI release `project` (`NAME==VERSION`), or the
/// directory `source` (canonical) as [`source_input`] takes it; exactly one of them.
pub fn input_from_flags(
    project: Option<&str>,
    source: Option<PathBuf>,
    name: Option<String>,
    commit: Option<&str>,
    version: Option<String>,
) -> Result<(Input, Option<CommitExport>), SynthError> {
    match (project, source) {
        (Some(p), None) => Ok((Input::parse_requirement(p)?, None)),
        (None, Some(dir)) => source_input(dir, name, commit, version),
        _ => Err(SynthError::Input(
            "give either --project NAME==VERSION or --source DIR".into(),
        )),
    }
}

/// `--source DIR` (canonical) as an input: named `name` or after the directory, the tree of
/// `commit` when given (its export lives as long as the returned [`CommitExport`]), else the
/// directory itself at `version` (default `0.0.0`).
pub fn source_input(
    dir: PathBuf,
    name: Option<String>,
    commit: Option<&str>,
    version: Option<String>,
) -> Result<(Input, Option<CommitExport>), SynthError> {
    let name = match name {
        Some(n) => n,
        None => dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| {
                SynthError::Input("--source has no directory name; pass --name".into())
            })?,
    };
    Ok(match commit {
        Some(rev) => {
            let e = commit_input(&dir, rev, &name, version)?;
            (e.input.clone(), Some(e))
        }
        None => (
            Input::Dir {
                path: dir,
                name,
                version: version.unwrap_or_else(|| "0.0.0".into()),
            },
            None,
        ),
    })
}

/// A commit exported for a run: the input to synthesize from, and the temporary directory
/// holding its tree (removed when this is dropped, after the run has packed it).
pub struct CommitExport {
    pub input: Input,
    _dir: tempfile::TempDir,
}

/// `--source REPO --commit REV`: the commit's tree as a directory input; the version defaults
/// to the commit's short id.
pub fn commit_input(
    repo: &Path,
    rev: &str,
    name: &str,
    version: Option<String>,
) -> Result<CommitExport, SynthError> {
    let dir = tempfile::Builder::new()
        .prefix("dojo-synth-commit-")
        .tempdir()
        .map_err(|e| SynthError::Io {
            path: "a temporary directory".into(),
            source: e,
        })?;
    let id = export_commit(repo, rev, dir.path())?;
    let short = id.get(..12).unwrap_or(&id).to_string();
    Ok(CommitExport {
        input: Input::Dir {
            path: dir.path().to_path_buf(),
            name: name.to_string(),
            version: version.unwrap_or(short),
        },
        _dir: dir,
    })
}

/// Pack `dir` into a reproducible tarball in the download cache.
fn pack_dir(dir: &Path, name: &str, version: &str) -> Result<Project, SynthError> {
    let what = || format!("--source {}", dir.display());
    let err = |reason: String| SynthError::Input(format!("{}: {reason}", what()));
    if !dir.is_dir() {
        return Err(err("not a directory".into()));
    }
    let top = format!("{}-{version}", normalize(name).replace('-', "_"));
    let filename = format!("{top}.tar.gz");
    let tmp = tempfile::Builder::new()
        .prefix("dojo-synth-pack-")
        .tempdir()
        .map_err(|e| input_from(what(), e))?;
    let tarball = tmp.path().join(&filename);
    let script = r#"set -euo pipefail
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=gnu \
    --exclude=.git --exclude=__pycache__ --exclude='*.pyc' --exclude=.pytest_cache \
    --exclude='*.egg-info' --exclude=.venv --exclude=.tox \
    --transform "s,^\.,$2," -C "$1" -cf - . | gzip -n > "$3""#;
    let out = Command::new("bash")
        .arg("-c")
        .arg(script)
        .arg("pack")
        .arg(dir)
        .arg(&top)
        .arg(&tarball)
        .output()
        .map_err(|e| input_from(format!("{}: running tar", what()), e))?;
    if !out.status.success() {
        return Err(err(format!(
            "tar failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let sha = dojo_cache::sha256_file(&tarball).map_err(|e| input_from(what(), e))?;
    let cache = dojo_cache::Cache::open().map_err(|e| input_from(what(), e))?;
    let entry = cache
        .get_or_build("downloads", &sha, |d| {
            std::fs::copy(&tarball, d.join(&filename)).map(|_| ())
        })
        .map_err(|e| input_from(what(), e))?;
    let path = entry.join(&filename);
    Ok(Project {
        name: name.to_string(),
        version: version.to_string(),
        sdist: SdistSource {
            url: format!("file://{}", path.display()),
            sha256: sha,
            filename,
            bug_patch: String::new(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_normalise_like_pep_503() {
        assert_eq!(normalize("Python_Slugify"), "python-slugify");
        assert_eq!(normalize("more.itertools"), "more-itertools");
        assert_eq!(normalize("a--b__c"), "a-b-c");
    }

    #[test]
    fn sdist_is_picked_from_the_json_index() {
        let idx = serde_json::json!({"files": [
            {"filename": "python_slugify-9.2.0-py2.py3-none-any.whl", "url": "https://x/w", "hashes": {"sha256": "aa"}},
            {"filename": "python_slugify-9.1.0.tar.gz", "url": "https://x/old", "hashes": {"sha256": "bb"}},
            {"filename": "python_slugify-9.2.0.tar.gz", "url": "https://x/new", "hashes": {"sha256": "CC"}},
        ]});
        let s = pick_sdist(idx.to_string().as_bytes(), "python-slugify", "9.2.0").unwrap();
        assert_eq!((s.url.as_str(), s.sha256.as_str()), ("https://x/new", "cc"));
        let e = pick_sdist(idx.to_string().as_bytes(), "python-slugify", "1.0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("python-slugify-1.0"), "{e}");
        assert!(Input::parse_requirement("toolz").is_err());
        assert_eq!(
            Input::parse_requirement("toolz==1.2.0").unwrap(),
            Input::Pypi {
                name: "toolz".into(),
                version: "1.2.0".into()
            }
        );
    }

    #[test]
    fn a_commit_is_exported_as_committed() {
        let repo = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            let o = Command::new("git")
                .arg("-C")
                .arg(repo.path())
                .args([
                    "-c",
                    "user.name=t",
                    "-c",
                    "user.email=t@t",
                    "-c",
                    "commit.gpgsign=false",
                ])
                .args(args)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        };
        git(&["init", "-q"]);
        std::fs::write(repo.path().join("a.py"), "X = 1\n").unwrap();
        git(&["add", "a.py"]);
        git(&["commit", "-qm", "one"]);
        let first = git(&["rev-parse", "HEAD"]);
        std::fs::write(repo.path().join("a.py"), "X = 2\n").unwrap();
        git(&["commit", "-qam", "two"]);
        std::fs::write(repo.path().join("untracked.py"), "").unwrap();
        let dest = tempfile::tempdir().unwrap();
        let got = export_commit(repo.path(), &first[..8], dest.path()).unwrap();
        assert_eq!(got, first);
        assert_eq!(
            std::fs::read_to_string(dest.path().join("a.py")).unwrap(),
            "X = 1\n"
        );
        assert!(!dest.path().join("untracked.py").exists());
        let e = export_commit(repo.path(), "nope", dest.path()).unwrap_err();
        assert!(e.to_string().contains("not a commit"), "{e}");
    }

    #[test]
    fn packing_a_directory_is_reproducible() {
        let home = tempfile::tempdir().unwrap();
        // SAFETY: this test binary's other tests do not read DOJO_HOME concurrently... they do
        // not read it at all (only this test resolves a project).
        unsafe { std::env::set_var("DOJO_HOME", home.path()) };
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("pkg/__pycache__")).unwrap();
        std::fs::write(d.path().join("pkg/__init__.py"), "X = 1\n").unwrap();
        std::fs::write(d.path().join("pkg/__pycache__/x.pyc"), "junk").unwrap();
        let input = Input::Dir {
            path: d.path().to_path_buf(),
            name: "pkg".into(),
            version: "0.1".into(),
        };
        let a = resolve(&input).unwrap();
        std::fs::write(d.path().join("pkg/__pycache__/y.pyc"), "more junk").unwrap();
        let b = resolve(&input).unwrap();
        assert_eq!(a, b, "caches do not change the digest");
        std::fs::write(d.path().join("pkg/__init__.py"), "X = 2\n").unwrap();
        let c = resolve(&input).unwrap();
        assert_ne!(a.sdist.sha256, c.sdist.sha256);
        assert!(a.sdist.url.starts_with("file://"));
        let unpacked = tempfile::tempdir().unwrap();
        let path = a.sdist.url.strip_prefix("file://").unwrap();
        let top = dojo_cache::archive::unpack(Path::new(path), unpacked.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(top.join("pkg/__init__.py")).unwrap(),
            "X = 1\n"
        );
        assert!(!top.join("pkg/__pycache__").exists());
    }

    #[test]
    fn source_input_names_the_directory() {
        let (input, export) = source_input(PathBuf::from("/src/proj"), None, None, None).unwrap();
        assert!(export.is_none());
        assert_eq!(
            input,
            Input::Dir {
                path: PathBuf::from("/src/proj"),
                name: "proj".into(),
                version: "0.0.0".into()
            }
        );
        let e = source_input(PathBuf::from("/"), None, None, None)
            .err()
            .unwrap();
        assert_eq!(e.to_string(), "--source has no directory name; pass --name");
        let (pypi, _) = input_from_flags(Some("a==1"), None, None, None, None).unwrap();
        assert_eq!(pypi.name(), "a");
        let both = input_from_flags(Some("a==1"), Some("/x".into()), None, None, None);
        let e = both.err().unwrap().to_string();
        assert!(e.starts_with("give either --project"), "{e}");
    }
}
