//! Normalized patch equivalence: when two candidates are the same fix.
//!
//! Majority voting needs to see that two agents wrote the same change even when their diffs
//! differ in ways that do not change behaviour. A patch is reduced to, per file (sorted by
//! path), the sorted list of its change blocks (each a run of removed and added lines), where
//! every line has comments dropped and whitespace collapsed. So whitespace, comments, hunk
//! order, hunk splitting and diff context do not matter; the changed code and where it goes (by
//! file) do. Python indentation is collapsed too: two patches that differ only in the
//! indentation of the same lines are treated as one fix, an accepted false merge for a voting
//! key. Pure whitespace or comment edits vanish, so a patch made only of them is equivalent to
//! the empty patch.

use dojo_patch::{LineKind, Patch};
use sha2::{Digest, Sha256};

/// The key of an empty (or behaviour-free) patch.
pub const EMPTY_KEY: &str = "empty";

/// A short stable key: equal for equivalent patches (see the module docs).
pub fn normalized_key(patch: &str) -> String {
    let canonical = canonical_form(patch);
    if canonical.is_empty() {
        return EMPTY_KEY.to_string();
    }
    let digest = Sha256::digest(canonical.as_bytes());
    hex::encode(&digest[..8])
}

/// The canonical text the key hashes: `file\n` then each change block, files and blocks sorted.
pub fn canonical_form(patch: &str) -> String {
    let mut files: Vec<(String, Vec<String>)> = Vec::new();
    for f in Patch::parse(patch).files {
        let mut blocks = Vec::new();
        if f.binary {
            blocks.push("binary\n".to_string());
        }
        let mut block = String::new();
        for h in &f.hunks {
            for l in &h.lines {
                let sign = match l.kind {
                    // Context ends a change block.
                    LineKind::Context => {
                        blocks.extend((!block.is_empty()).then(|| std::mem::take(&mut block)));
                        continue;
                    }
                    kind => kind.marker(),
                };
                let code = normalize_line(&l.text);
                if code.is_empty() {
                    continue;
                }
                block.push(sign);
                block.push_str(&code);
                block.push('\n');
            }
            blocks.extend((!block.is_empty()).then(|| std::mem::take(&mut block)));
        }
        files.push((f.path().to_string(), blocks));
    }
    // A block whose removed and added lines are equal after normalization changed nothing.
    let mut out = String::new();
    files.sort_by(|a, b| a.0.cmp(&b.0));
    for (path, mut blocks) in files {
        blocks.retain(|b| !is_noop(b));
        if blocks.is_empty() {
            continue;
        }
        blocks.sort();
        out.push_str(&path);
        out.push('\n');
        for b in blocks {
            out.push_str(&b);
            out.push_str("--\n");
        }
    }
    out
}

/// Drops a trailing `#` comment (outside quotes, by counting them) and collapses whitespace.
fn normalize_line(code: &str) -> String {
    let mut cut = code.len();
    let (mut single, mut double) = (false, false);
    for (i, c) in code.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double => {
                cut = i;
                break;
            }
            _ => {}
        }
    }
    code[..cut].split_whitespace().collect::<Vec<_>>().join(" ")
}

fn is_noop(block: &str) -> bool {
    let mut removed: Vec<&str> = Vec::new();
    let mut added: Vec<&str> = Vec::new();
    for l in block.lines() {
        match l.split_at(1) {
            ("-", rest) => removed.push(rest),
            ("+", rest) => added.push(rest),
            _ => {}
        }
    }
    removed == added
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const FIX: &str = "diff --git a/pkg/mod.py b/pkg/mod.py
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -10,3 +10,3 @@ def f(x):
     y = x
-    return y < 0
+    return y <= 0
 
@@ -40,2 +40,2 @@ def g():
-    a = 1
+    a = 2
";

    #[test]
    fn whitespace_comments_and_hunk_order_do_not_matter() {
        let variant = "diff --git a/pkg/mod.py b/pkg/mod.py
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -40,2 +40,2 @@ def g():
-    a = 1
+    a  =  2   # the fix
@@ -9,4 +9,4 @@ def f(x):
 
     y = x
-    return y < 0
+    return y <= 0
+    # a new comment line
";
        assert_eq!(normalized_key(FIX), normalized_key(variant));
    }

    #[test]
    fn a_different_change_is_a_different_key() {
        let other = FIX.replace("y <= 0", "y <= 1");
        assert_ne!(normalized_key(FIX), normalized_key(&other));
        let other_file = FIX.replace("pkg/mod.py", "pkg/other.py");
        assert_ne!(normalized_key(FIX), normalized_key(&other_file));
    }

    #[test]
    fn whitespace_only_patches_are_empty() {
        let ws = "diff --git a/m.py b/m.py
--- a/m.py
+++ b/m.py
@@ -1,1 +1,1 @@
-x = 1
+x   =   1  # same
";
        assert_eq!(normalized_key(ws), EMPTY_KEY);
        assert_eq!(normalized_key(""), EMPTY_KEY);
    }

    #[test]
    fn hash_signs_inside_strings_are_code() {
        assert_eq!(normalize_line("  s = '#x'  # note"), "s = '#x'");
        assert_eq!(normalize_line("s = \"a#b\""), "s = \"a#b\"");
    }

    proptest! {
        /// Any input, however malformed, gives a key, and the key is stable.
        #[test]
        fn never_panics_and_is_deterministic(s in "(diff --git a/x b/x\n|@@ -1 +1 @@\n|[-+ ][ -~]{0,20}\n){0,12}") {
            let k = normalized_key(&s);
            prop_assert_eq!(k, normalized_key(&s));
        }

        /// Re-indenting the added lines never changes the key.
        #[test]
        fn indentation_is_ignored(pad in " {0,8}", body in "[a-z]{1,6} = [0-9]{1,3}") {
            let a = format!("diff --git a/m.py b/m.py\n@@ -1 +1 @@\n-old = 0\n+{body}\n");
            let b = format!("diff --git a/m.py b/m.py\n@@ -1 +1 @@\n-old = 0\n+{pad}{body}\n");
            prop_assert_eq!(normalized_key(&a), normalized_key(&b));
        }
    }
}
