//! Patch I/O: the SWE-bench harness's apply fallback chain (run inside the sandbox, so even a
//! crafted patch can only touch the workspace) and the workspace diff. Which paths a patch may
//! name is `dojo_patch`'s one check ([`dojo_patch::Patch::check_paths`]).

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
# Tracked files the environment's pre_install edited are the environment's (pyenv::keep_tree):
# the diff base is the base commit with those edits.
# (The venv is /venv in namespaces, its host path in the fallback backend.)
D="${VIRTUAL_ENV:-/venv}/.dojo-tree-base.diff"
if [ -s "$D" ]; then
  GIT_INDEX_FILE="$T/base-index" git read-tree "$base"
  GIT_INDEX_FILE="$T/base-index" git apply --cached "$D"
  base="$(GIT_INDEX_FILE="$T/base-index" git write-tree)"
fi
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
