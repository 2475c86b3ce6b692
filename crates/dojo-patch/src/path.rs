//! Where a patch may write: inside the repository, never into `.git`, no symlink that points
//! out. The one check for every reader that admits a patch (the sandbox before `git apply`,
//! grading before anything runs).

use crate::parse::{LineKind, Patch};

/// Why a patch is refused before it is applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("path {path:?} {reason}")]
    Path { path: String, reason: &'static str },
    #[error("symlink {link:?} -> {target:?} leaves the repository")]
    Symlink { link: String, target: String },
    #[error("binary patch (binary hunks cannot be graded)")]
    Binary,
}

/// A repository-relative path is acceptable when it is not empty, relative, has no `..`
/// component and does not point into `.git` (any case: case-insensitive file systems).
pub fn check_path(p: &str) -> Result<(), Refusal> {
    let refuse = |reason| {
        Err(Refusal::Path {
            path: p.to_string(),
            reason,
        })
    };
    if p.is_empty() {
        return refuse("is empty");
    }
    if p.starts_with('/') {
        return refuse("is absolute");
    }
    if p.split('/').any(|c| c == "..") {
        return refuse("leaves the repository (..)");
    }
    if p.split('/').any(|c| c.eq_ignore_ascii_case(".git")) {
        return refuse("points into .git");
    }
    Ok(())
}

/// A symlink at `link` with `target` is acceptable when the target, resolved from the link's
/// directory, stays inside the repository.
pub fn check_symlink(link: &str, target: &str) -> Result<(), Refusal> {
    let refuse = || {
        Err(Refusal::Symlink {
            link: link.to_string(),
            target: target.to_string(),
        })
    };
    if target.starts_with('/') {
        return refuse();
    }
    let mut depth: i64 = link.split('/').count() as i64 - 1;
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return refuse();
                }
            }
            _ => depth += 1,
        }
    }
    Ok(())
}

impl Patch {
    /// Every path the patch names ([`Patch::named_paths`]) passes [`check_path`], and every
    /// symlink it creates passes [`check_symlink`].
    pub fn check_paths(&self) -> Result<(), Refusal> {
        for p in self.named_paths() {
            check_path(p)?;
        }
        for f in self.files.iter().filter(|f| f.is_symlink()) {
            let target = f
                .hunks
                .iter()
                .flat_map(|h| &h.lines)
                .find(|l| l.kind == LineKind::Added);
            if let Some(t) = target {
                check_symlink(f.path(), &t.text)?;
            }
        }
        Ok(())
    }

    /// [`Patch::check_paths`], and no binary change (grading cannot judge binary hunks).
    pub fn check_gradable(&self) -> Result<(), Refusal> {
        if self.is_binary() {
            return Err(Refusal::Binary);
        }
        self.check_paths()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert!(check_path("src/a.py").is_ok());
        for bad in [
            "",
            "/etc/passwd",
            "a/../../x",
            ".git/hooks/pre-commit",
            "x/.GIT/config",
        ] {
            assert!(check_path(bad).is_err(), "{bad}");
        }
        assert_eq!(
            check_path("../x").unwrap_err().to_string(),
            "path \"../x\" leaves the repository (..)"
        );
    }

    #[test]
    fn symlinks() {
        assert!(check_symlink("a/link", "../b").is_ok());
        assert!(check_symlink("a/link", "../../b").is_err());
        assert!(check_symlink("link", "/etc").is_err());
        let p = Patch::parse(
            "diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+../../etc/passwd\n\\ No newline at end of file\n",
        );
        assert!(matches!(p.check_paths(), Err(Refusal::Symlink { .. })));
    }

    #[test]
    fn quoted_escapes_are_checked_unquoted() {
        let p = Patch::parse(
            "diff --git \"a/\\056\\056/x\" \"b/\\056\\056/x\"\n--- \"a/\\056\\056/x\"\n+++ \"b/\\056\\056/x\"\n@@ -1 +1 @@\n-a\n+b\n",
        );
        assert!(p.check_paths().is_err());
        assert_eq!(
            Patch::parse("diff --git a/x.png b/x.png\nGIT binary patch\nliteral 5\n")
                .check_gradable(),
            Err(Refusal::Binary)
        );
    }

    // The cases the sandbox's own check had (moved here with it).
    #[test]
    fn admission() {
        let ok = |p: &str| Patch::parse(p).check_paths();
        assert_eq!(
            ok(
                "diff --git a/src/x.py b/src/x.py\n--- a/src/x.py\n+++ b/src/x.py\n@@ -1 +1 @@\n-a\n+b\n"
            ),
            Ok(())
        );
        for p in [
            "--- a/../etc/passwd\n+++ b/../etc/passwd\n@@ -1 +1 @@\n-a\n+b\n",
            "--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n",
            "diff --git a/x b/.git/hooks/post-checkout\nnew file mode 100755\n",
            "diff --git a/a b/b\nrename from a\nrename to ../b\n",
            "diff --git a/evil b/evil\nnew file mode 120000\n--- /dev/null\n+++ b/evil\n@@ -0,0 +1 @@\n+/etc\n\\ No newline at end of file\n",
            "diff --git a/d/l b/d/l\nnew file mode 120000\n--- /dev/null\n+++ b/d/l\n@@ -0,0 +1 @@\n+../../x\n",
        ] {
            assert!(ok(p).is_err(), "{p}");
        }
        assert_eq!(
            ok(
                "diff --git a/d/l b/d/l\nnew file mode 120000\n--- /dev/null\n+++ b/d/l\n@@ -0,0 +1 @@\n+../x\n"
            ),
            Ok(())
        );
        // A removed line starting with "-- " inside a hunk is content, not a header.
        assert_eq!(
            ok("--- a/x.sql\n+++ b/x.sql\n@@ -1,2 +1,2 @@\n--- ../comment\n+-- ok\n"),
            Ok(())
        );
    }
}
