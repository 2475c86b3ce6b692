//! Patch I/O: refuse patches whose paths leave the repository, and the SWE-bench harness's apply
//! fallback chain (run inside the sandbox, so even a crafted patch can only touch the workspace).

/// Why a patch was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchRefused(pub String);

fn unquote(p: &str) -> String {
    let p = p.trim();
    if p.len() >= 2 && p.starts_with('"') && p.ends_with('"') {
        p[1..p.len() - 1]
            .replace("\\\"", "\"")
            .replace("\\\\", "\\")
    } else {
        p.to_string()
    }
}

fn strip_prefix(p: &str) -> &str {
    p.strip_prefix("a/")
        .or_else(|| p.strip_prefix("b/"))
        .unwrap_or(p)
}

/// A repository-relative path is acceptable when it is relative, has no `..` component and does
/// not point into `.git`.
pub fn check_path(p: &str) -> Result<(), PatchRefused> {
    let refuse = |why: &str| Err(PatchRefused(format!("path {p:?} {why}")));
    if p.is_empty() {
        return refuse("is empty");
    }
    if p.starts_with('/') {
        return refuse("is absolute");
    }
    let comps: Vec<&str> = p.split('/').collect();
    if comps.contains(&"..") {
        return refuse("leaves the repository (..)");
    }
    if comps.first() == Some(&".git") || comps.iter().any(|c| c.eq_ignore_ascii_case(".git")) {
        return refuse("points into .git");
    }
    Ok(())
}

/// A symlink target is acceptable when, resolved from the link's directory, it stays inside.
pub fn check_symlink(link: &str, target: &str) -> Result<(), PatchRefused> {
    if target.starts_with('/') {
        return Err(PatchRefused(format!(
            "symlink {link:?} points to the absolute path {target:?}"
        )));
    }
    let mut depth: i64 = link.split('/').count() as i64 - 1;
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return Err(PatchRefused(format!(
                        "symlink {link:?} -> {target:?} leaves the repository"
                    )));
                }
            }
            _ => depth += 1,
        }
    }
    Ok(())
}

/// Parse "@@ -a,b +c,d @@" into the old and new line counts.
fn hunk_counts(line: &str) -> Option<(u64, u64)> {
    let mut it = line.split_whitespace().skip(1);
    let count = |s: &str| -> Option<u64> {
        let s = &s[1..];
        Some(match s.split_once(',') {
            Some((_, n)) => n.parse().ok()?,
            None => 1,
        })
    };
    Some((count(it.next()?)?, count(it.next()?)?))
}

/// Check every path a unified/git diff touches (headers, renames, copies, new symlinks).
/// Hunk bodies are skipped by their line counts, so content lines that look like headers
/// (`--- x` removed from a SQL file) are not mistaken for paths.
pub fn check_patch(patch: &str) -> Result<(), PatchRefused> {
    let mut cur_file: Option<String> = None;
    let mut symlink_pending = false;
    let (mut old_left, mut new_left) = (0u64, 0u64);
    for line in patch.lines() {
        if old_left > 0 || new_left > 0 {
            match line.as_bytes().first() {
                Some(b'+') => {
                    if symlink_pending {
                        check_symlink(cur_file.as_deref().unwrap_or(""), &line[1..])?;
                        symlink_pending = false;
                    }
                    new_left = new_left.saturating_sub(1);
                }
                Some(b'-') => old_left = old_left.saturating_sub(1),
                Some(b'\\') => {}
                _ => {
                    old_left = old_left.saturating_sub(1);
                    new_left = new_left.saturating_sub(1);
                }
            }
            continue;
        }
        if line.starts_with("@@") {
            if let Some((o, n)) = hunk_counts(line) {
                old_left = o;
                new_left = n;
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("diff --git ") {
            symlink_pending = false;
            // "a/x b/y" (or quoted); split at " b/" as git does for unquoted names.
            let rest = rest.trim();
            let (a, b) = if let Some(r) = rest.strip_prefix('"') {
                match r.find('"') {
                    Some(i) => (&rest[..i + 2], rest[i + 2..].trim()),
                    None => (rest, ""),
                }
            } else {
                match rest.find(" b/") {
                    Some(i) => (&rest[..i], &rest[i + 1..]),
                    None => (rest, ""),
                }
            };
            for p in [a, b] {
                if !p.is_empty() {
                    check_path(strip_prefix(&unquote(p)))?;
                }
            }
            cur_file = Some(strip_prefix(&unquote(b)).to_string());
            continue;
        }
        for key in ["--- ", "+++ "] {
            if let Some(p) = line.strip_prefix(key) {
                let p = p.split('\t').next().unwrap_or(p).trim();
                if p != "/dev/null" {
                    let p = unquote(p);
                    let p = strip_prefix(&p);
                    check_path(p)?;
                    if key == "+++ " {
                        cur_file = Some(p.to_string());
                    }
                }
            }
        }
        for key in ["rename from ", "rename to ", "copy from ", "copy to "] {
            if let Some(p) = line.strip_prefix(key) {
                check_path(&unquote(p))?;
            }
        }
        if line.starts_with("new file mode 120000") || line.starts_with("new mode 120000") {
            symlink_pending = true;
        }
    }
    Ok(())
}

/// The SWE-bench harness's apply fallback chain as a bash function, `dojo_apply PATCH_FILE`, run
/// at /testbed: `git apply --verbose`, then with `--reject`, then `patch --batch --fuzz=5 -p1`,
/// each command's output on stdout, and a marker line (`@@DOJO_APPLIED <method>`) naming the
/// one that worked. Returns 1 when none did. Public so that graders which run the whole
/// evaluation as one script (dojo-grade) embed this same chain.
pub const APPLY_FN: &str = r#"dojo_apply() {
  echo "+ git apply --verbose"
  if git apply --verbose "$1" 2>&1; then echo "@@DOJO_APPLIED git_apply"; return 0; fi
  echo "+ git apply --verbose --reject"
  if git apply --verbose --reject "$1" 2>&1; then echo "@@DOJO_APPLIED git_apply_reject"; return 0; fi
  echo "+ patch --batch --fuzz=5 -p1 -i"
  if patch --batch --fuzz=5 -p1 -i "$1" 2>&1; then echo "@@DOJO_APPLIED patch_fuzz"; return 0; fi
  return 1
}
"#;

/// [`APPLY_FN`] applied to the patch at `$1`: the script [`crate::Sandbox::apply_patch`] runs.
pub(crate) fn apply_script() -> String {
    format!("{APPLY_FN}dojo_apply \"$1\"\n")
}

/// The diff, as a bash script run at /testbed: everything added (ignored caches excluded) into
/// a throwaway index, binary-safe diff against the base commit `$2` (its object id, kept by the
/// host: the agent can move the `dojo-base` tag, not the id the host recorded), at most `$1`
/// bytes of it (`head` stops git early, so an agent that wrote gigabytes costs the host at most
/// the cap).
///
/// `$3` is the pristine tree's git directory, read-only (a bind the holder makes at
/// [`BASE_GIT_DIR`]; the pristine path itself in the fallback backend). Everything git reads to
/// compute the diff comes from there or from the work tree, nothing from the workspace's `.git`,
/// which the agent can write: git runs on a git directory of its own (no config, hooks, refs
/// or `info/` of the agent's), whose only object store beside a fresh one for the new blobs is
/// the pristine one (an alternate), starting from the pristine index; replace refs are off.
/// So a forged loose object, a replace ref, an alternates file or a planted index entry in
/// `/testbed/.git` cannot change what the diff is computed against. Without `$3` (a kept
/// sandbox from before the bind existed) the workspace's `.git` is used as it was.
pub(crate) const DIFF_SCRIPT: &str = r#"
set -e -o pipefail
T="$(mktemp -d /tmp/.dojo-diff.XXXXXX)"
trap 'rm -rf "$T"' EXIT
export GIT_NO_REPLACE_OBJECTS=1 GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
B="$3"
if [ -n "$B" ] && [ -d "$B/objects" ]; then
  base="$(git --git-dir="$B" rev-parse --verify -q "$2^{commit}")" || {
    echo "dojo diff: base commit $2 is not in the pristine repository" >&2; exit 3; }
  mkdir -p "$T/git/objects/info" "$T/git/refs" "$T/git/info"
  echo "ref: refs/heads/main" > "$T/git/HEAD"
  printf '%s
' "$B/objects" > "$T/git/objects/info/alternates"
  cp "$B/info/exclude" "$T/git/info/exclude" 2>/dev/null || true
  # Files the environment build wrote into the tree are the environment's (pyenv::keep_tree).
  cat /venv/.dojo-tree-exclude >> "$T/git/info/exclude" 2>/dev/null || true
  cp "$B/index" "$T/index" 2>/dev/null || true
  export GIT_DIR="$T/git" GIT_WORK_TREE="$PWD"
else
  base="$2"
  cp .git/index "$T/index" 2>/dev/null || true
fi
export GIT_INDEX_FILE="$T/index"
G="git -c core.checkStat=minimal -c core.trustctime=false"
$G add -A . >/dev/null
$G diff --cached --binary --no-color --no-ext-diff --no-textconv --no-renames "$base" -- | head -c "$1" || {
  rc=$?
  # 141: git stopped by SIGPIPE once head had its bytes; the caller sees the cap was reached.
  [ "$rc" -eq 141 ] || exit "$rc"
}
"#;

/// Where the holder binds the pristine tree's `.git`, read-only, inside every namespace
/// sandbox: the trusted base of [`DIFF_SCRIPT`].
pub(crate) const BASE_GIT_DIR: &str = "/.dojo-base";

/// The base commit's object id of a pristine tree (the lightweight tag [`BASE_TAG`] written
/// when the tree was built), read on the host before any sandbox exists.
///
/// [`BASE_TAG`]: crate::pristine::BASE_TAG
pub(crate) fn base_commit(tree: &std::path::Path) -> Option<String> {
    let git = tree.join(".git");
    let tag = crate::pristine::BASE_TAG;
    let loose = std::fs::read_to_string(git.join("refs/tags").join(tag)).ok();
    let oid = loose.or_else(|| {
        let packed = std::fs::read_to_string(git.join("packed-refs")).ok()?;
        packed.lines().find_map(|l| {
            let (oid, name) = l.split_once(' ')?;
            (name == format!("refs/tags/{tag}")).then(|| oid.to_string())
        })
    })?;
    let oid = oid.trim();
    (oid.len() >= 40 && oid.bytes().all(|b| b.is_ascii_hexdigit())).then(|| oid.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_patch() {
        let p = "diff --git a/src/x.py b/src/x.py\n--- a/src/x.py\n+++ b/src/x.py\n@@ -1 +1 @@\n-a\n+b\n";
        assert_eq!(check_patch(p), Ok(()));
    }

    #[test]
    fn refuses_escaping_paths() {
        for p in [
            "--- a/../etc/passwd\n+++ b/../etc/passwd\n@@ -1 +1 @@\n-a\n+b\n",
            "--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n",
            "diff --git a/x b/.git/hooks/post-checkout\nnew file mode 100755\n",
            "diff --git a/a b/b\nrename from a\nrename to ../b\n",
        ] {
            assert!(check_patch(p).is_err(), "{p}");
        }
    }

    #[test]
    fn refuses_symlink_out_of_repo() {
        let p = "diff --git a/evil b/evil\nnew file mode 120000\n--- /dev/null\n+++ b/evil\n@@ -0,0 +1 @@\n+/etc\n\\ No newline at end of file\n";
        assert!(check_patch(p).is_err());
        let p = "diff --git a/d/l b/d/l\nnew file mode 120000\n--- /dev/null\n+++ b/d/l\n@@ -0,0 +1 @@\n+../x\n";
        assert_eq!(check_patch(p), Ok(()));
        let p = "diff --git a/d/l b/d/l\nnew file mode 120000\n--- /dev/null\n+++ b/d/l\n@@ -0,0 +1 @@\n+../../x\n";
        assert!(check_patch(p).is_err());
    }

    #[test]
    fn hunk_lines_that_look_like_headers_are_content() {
        // A removed line starting with "-- " inside a hunk is not a header.
        let p = "--- a/x.sql\n+++ b/x.sql\n@@ -1,2 +1,2 @@\n--- ../comment\n+-- ok\n";
        assert_eq!(check_patch(p), Ok(()));
    }
}
