//! An environment's requirements file, taken from the repository the way the SWE-bench harness
//! takes it (`get_requirements_by_commit`): the file at the task's `environment_setup_commit`
//! (the base commit when it has none; the sdist tree for sdist tasks), `-r other.txt` lines
//! followed relative to the file, editable self-installs (`-e .`, `.[test]`) and comments
//! dropped. The spec's pinned `requirements` are installed after the file's in the harness, so
//! here a pinned package replaces the file's line for the same distribution.

use std::path::Path;
use std::process::Command;

use crate::TaskError;

/// How deep `-r` includes are followed (the harness follows one level; real files nest two).
const MAX_DEPTH: usize = 4;

/// PEP 503 normalised distribution name of a requirement line (`Foo_Bar[x]>=1` → `foo-bar`).
pub fn requirement_name(line: &str) -> String {
    let end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        .unwrap_or(line.len());
    let mut out = String::new();
    for c in line[..end].chars() {
        let c = c.to_ascii_lowercase();
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The requirement lines of `text` (the file at `path`), with `-r` includes read through
/// `read(path)` (paths relative to the including file's directory).
pub fn parse_requirements(
    path: &str,
    text: &str,
    read: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<String>, TaskError> {
    let mut out = Vec::new();
    collect(path, text, read, 0, &mut out)?;
    Ok(out)
}

fn collect(
    path: &str,
    text: &str,
    read: &dyn Fn(&str) -> Option<String>,
    depth: usize,
    out: &mut Vec<String>,
) -> Result<(), TaskError> {
    let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
    for raw in text.lines() {
        // An inline comment starts at ` #` (pip's rule).
        let line = raw.split(" #").next().unwrap_or("").trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let include = line
            .strip_prefix("--requirement")
            .or_else(|| line.strip_prefix("-r"))
            .map(|s| s.trim_start_matches('=').trim());
        if let Some(file) = include {
            if depth >= MAX_DEPTH {
                return Err(TaskError::Parse {
                    location: path.to_string(),
                    reason: format!("-r includes nested deeper than {MAX_DEPTH}"),
                });
            }
            let inc = join_relative(dir, file);
            let body = read(&inc).ok_or_else(|| TaskError::Parse {
                location: path.to_string(),
                reason: format!("included file {inc} not found"),
            })?;
            collect(&inc, &body, read, depth + 1, out)?;
            continue;
        }
        // The project itself (installed by the spec's editable install) and pip options,
        // which are not requirements.
        if line.starts_with("-e") || line.starts_with(".[") || line == "." || line.starts_with('-')
        {
            continue;
        }
        out.push(line.to_string());
    }
    Ok(())
}

/// `file` relative to the directory `dir` of the repository, with `.` and `..` resolved, since
/// `git show` takes only normal paths (matplotlib 3.4's `-r ../doc/doc-requirements.txt`). A
/// `..` above the repository root is dropped: the lookup then fails and names the path.
fn join_relative(dir: &str, file: &str) -> String {
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for part in file.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

/// The file's requirements without those a pinned requirement names, then the pinned ones.
pub fn merge_pinned(from_file: Vec<String>, pinned: &[String]) -> Vec<String> {
    let names: std::collections::BTreeSet<String> =
        pinned.iter().map(|p| requirement_name(p)).collect();
    from_file
        .into_iter()
        .filter(|r| !names.contains(&requirement_name(r)))
        .chain(pinned.iter().cloned())
        .collect()
}

/// A file of a git repository at `commit` (`git show commit:path`); `None` when absent.
pub fn git_file(repo: &Path, commit: &str, path: &str) -> Result<Option<String>, TaskError> {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["show", &format!("{commit}:{path}")])
        .output()
        .map_err(|source| TaskError::Spawn {
            what: format!("git show in {}", repo.display()),
            source,
        })?;
    if out.status.success() {
        return Ok(Some(String::from_utf8_lossy(&out.stdout).into_owned()));
    }
    // A missing path is an answer; a missing commit is an error.
    let exists = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["cat-file", "-e", &format!("{commit}^{{commit}}")])
        .status()
        .map_err(|source| TaskError::Spawn {
            what: format!("git cat-file in {}", repo.display()),
            source,
        })?;
    if exists.success() {
        Ok(None)
    } else {
        Err(TaskError::NoCommit {
            commit: commit.to_string(),
            repo: repo.to_path_buf(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_normalised() {
        assert_eq!(
            requirement_name("Foo_Bar.baz[x]>=1; python_version<'3'"),
            "foo-bar-baz"
        );
        assert_eq!(requirement_name("numpy"), "numpy");
        assert_eq!(requirement_name("pytest==7.4"), "pytest");
    }

    #[test]
    fn includes_exclusions_and_pins() {
        let files = |p: &str| match p {
            "requirements/base.txt" => Some("numpy>=1.20  # arrays\n".to_string()),
            _ => None,
        };
        let text = "# dev\n-r base.txt\n-e .\n.[test]\n--index-url https://x\npytest>=6\nappdirs\n";
        let reqs = parse_requirements("requirements/dev.txt", text, &files).unwrap();
        assert_eq!(reqs, ["numpy>=1.20", "pytest>=6", "appdirs"]);
        assert_eq!(
            merge_pinned(reqs, &["PyTest==7.4.0".into()]),
            ["numpy>=1.20", "appdirs", "PyTest==7.4.0"]
        );
        let e = parse_requirements("r.txt", "-r missing.txt\n", &files)
            .unwrap_err()
            .to_string();
        assert!(e.contains("r.txt") && e.contains("missing.txt"), "{e}");
        let looped = |_: &str| Some("-r r.txt\n".to_string());
        assert!(parse_requirements("r.txt", "-r r.txt\n", &looped).is_err());
    }

    #[test]
    fn includes_resolve_parent_directories() {
        // matplotlib 3.4: requirements/dev/dev-requirements.txt has `-r ../doc/doc-requirements.txt`.
        let files = |p: &str| match p {
            "requirements/doc/doc-requirements.txt" => Some("sphinx>=3\n".to_string()),
            "top.txt" => Some("six\n".to_string()),
            _ => None,
        };
        let text = "-r ../doc/doc-requirements.txt\n-r ./../../top.txt\n";
        let reqs = parse_requirements("requirements/dev/dev-requirements.txt", text, &files);
        assert_eq!(reqs.unwrap(), ["sphinx>=3", "six"]);
        assert_eq!(join_relative("", "../x.txt"), "x.txt");
    }

    #[test]
    fn files_at_a_commit_of_a_real_repository() {
        let d = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            let ok = Command::new("git")
                .arg("-C")
                .arg(d.path())
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(args)
                .status()
                .unwrap()
                .success();
            assert!(ok, "{args:?}");
        };
        git(&["init", "-q"]);
        std::fs::write(d.path().join("requirements.txt"), "six\n").unwrap();
        git(&["add", "."]);
        git(&["commit", "-qm", "setup"]);
        let out = Command::new("git")
            .arg("-C")
            .arg(d.path())
            .args(["rev-parse", "HEAD"])
            .output()
            .unwrap();
        let setup = String::from_utf8(out.stdout).unwrap().trim().to_string();
        std::fs::write(d.path().join("requirements.txt"), "six\nattrs\n").unwrap();
        git(&["commit", "-qam", "later"]);
        assert_eq!(
            git_file(d.path(), &setup, "requirements.txt")
                .unwrap()
                .as_deref(),
            Some("six\n")
        );
        assert_eq!(git_file(d.path(), &setup, "nope.txt").unwrap(), None);
        assert!(git_file(d.path(), "0000000000000000000000000000000000000000", "x").is_err());
    }
}
