//! The diff of one mutation, written as `git diff` writes it: one hunk, three lines of context,
//! git's default hunk heading (the nearest line above that starts with a letter, `_` or `$`,
//! so `def f(...):` or `class C:`), `\ No newline at end of file` where it applies.
//!
//! A mutation changes one region of one file, so the hunk is the common prefix and suffix of
//! the two texts' lines stripped: no general diff algorithm is needed, and the result is the
//! minimal diff. The same function writes the bug patch (clean → buggy) and the gold patch
//! (buggy → clean), which is its exact reverse.

use dojo_rundir::clip::{self, Unit};

/// Lines of context around the change, as git's default.
const CONTEXT: usize = 3;

/// Git truncates the hunk heading to this many bytes.
const HEADING_MAX: usize = 80;

fn lines(s: &str) -> Vec<&str> {
    s.split_inclusive('\n').collect()
}

fn range(start0: usize, count: usize) -> String {
    match count {
        0 => format!("{start0},0"),
        1 => format!("{}", start0 + 1),
        n => format!("{},{n}", start0 + 1),
    }
}

/// Git's default funcname rule: a line whose first byte is a letter, `_` or `$`.
fn heading(old: &[&str], first: usize) -> String {
    for l in old[..first].iter().rev() {
        let b = l.as_bytes().first().copied().unwrap_or(b' ');
        if b.is_ascii_alphabetic() || b == b'_' || b == b'$' {
            let t = l.trim_end();
            return format!(" {}", clip::head(t, HEADING_MAX, Unit::Bytes));
        }
    }
    String::new()
}

fn push_line(out: &mut String, tag: char, line: &str) {
    out.push(tag);
    out.push_str(line);
    if !line.ends_with('\n') {
        out.push_str("\n\\ No newline at end of file\n");
    }
}

/// The unified diff turning `old` into `new` for `path` (relative, `/`-separated); empty when
/// the texts are equal.
pub fn unified_diff(path: &str, old: &str, new: &str) -> String {
    let (a, b) = (lines(old), lines(new));
    let mut p = 0;
    while p < a.len() && p < b.len() && a[p] == b[p] {
        p += 1;
    }
    if p == a.len() && p == b.len() {
        return String::new();
    }
    let mut s = 0;
    while s < a.len() - p && s < b.len() - p && a[a.len() - 1 - s] == b[b.len() - 1 - s] {
        s += 1;
    }
    let first = p.saturating_sub(CONTEXT);
    let after = s.min(CONTEXT);
    let (a_end, b_end) = (a.len() - s + after, b.len() - s + after);
    let mut out = format!(
        "diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -{} +{} @@{}\n",
        range(first, a_end - first),
        range(first, b_end - first),
        heading(&a, first)
    );
    for l in &a[first..p] {
        push_line(&mut out, ' ', l);
    }
    for l in &a[p..a.len() - s] {
        push_line(&mut out, '-', l);
    }
    for l in &b[p..b.len() - s] {
        push_line(&mut out, '+', l);
    }
    for l in &a[a.len() - s..a_end] {
        push_line(&mut out, ' ', l);
    }
    out
}

/// Lines a diff adds plus lines it removes (a difficulty feature).
pub fn changed_lines(diff: &str) -> usize {
    dojo_patch::Patch::parse(diff).changed_lines()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Apply a one-hunk diff made by [`unified_diff`] (test oracle, independent of git).
    fn apply(old: &str, diff: &str) -> String {
        let a = lines(old);
        let mut it = diff.split_inclusive('\n').skip(3);
        let header = it.next().unwrap();
        let start: usize = header[4..]
            .split([',', ' '])
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let mut out: Vec<String> = Vec::new();
        let mut i = start.saturating_sub(1);
        if header.starts_with("@@ -0,0") || header.contains(&format!("-{start},0 ")) {
            i = start;
        }
        out.extend(a[..i].iter().map(|s| s.to_string()));
        let mut last_tag = ' ';
        for l in it {
            if l.starts_with('\\') {
                // The previous line had no newline (a removed line was never copied).
                if last_tag != '-' {
                    let last = out.last_mut().unwrap();
                    if last.ends_with('\n') {
                        last.pop();
                    }
                }
                continue;
            }
            last_tag = l.chars().next().unwrap();
            let body = l[1..].to_string();
            match &l[..1] {
                " " => {
                    out.push(body);
                    i += 1;
                }
                "-" => i += 1,
                "+" => out.push(body),
                _ => unreachable!(),
            }
        }
        out.extend(a[i..].iter().map(|s| s.to_string()));
        out.concat()
    }

    #[test]
    fn one_line_change_with_heading_and_context() {
        let old = "import os\n\n\ndef f(x):\n    a = 1\n    b = 2\n    if x < 3:\n        return a\n    return b\n";
        let new = old.replace("x < 3", "x <= 3");
        let d = unified_diff("pkg/m.py", old, &new);
        assert_eq!(
            d,
            "diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -4,6 +4,6 @@ import os\n def f(x):\n     a = 1\n     b = 2\n-    if x < 3:\n+    if x <= 3:\n         return a\n     return b\n"
        );
        assert_eq!(changed_lines(&d), 2);
        // The reverse diff is the gold patch.
        let back = unified_diff("pkg/m.py", &new, old);
        assert_eq!(apply(&new, &back), old);
        assert!(unified_diff("x.py", old, old).is_empty());
    }

    #[test]
    fn deletion_at_end_without_newline() {
        let old = "def f():\n    x = 1\n    return x";
        let new = "def f():\n    x = 1\n    return 2";
        let d = unified_diff("f.py", old, new);
        assert!(d.ends_with("-    return x\n\\ No newline at end of file\n+    return 2\n\\ No newline at end of file\n"), "{d}");
        assert_eq!(apply(old, &d), new);
        let removed = unified_diff("f.py", "a\nb\nc\nd\ne\nf\ng\nh\n", "a\nb\nc\nd\nf\ng\nh\n");
        assert!(removed.contains("@@ -2,7 +2,6 @@ a\n"), "{removed}");
    }

    /// `git apply` accepts the diffs, forwards and in reverse.
    #[test]
    fn git_applies_them() {
        let dir = tempfile::tempdir().unwrap();
        let old =
            "class C:\n    def f(self, a, b):\n        return g(a, b)\n\n\ndef h():\n    pass\n";
        let new = old.replace("g(a, b)", "g(b, a)");
        std::fs::write(dir.path().join("m.py"), old).unwrap();
        let run = |args: &[&str], input: &str| -> bool {
            use std::io::Write;
            let mut child = std::process::Command::new("git")
                .args(args)
                .current_dir(dir.path())
                .stdin(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
            child.wait().unwrap().success()
        };
        assert!(run(&["init", "-q"], ""));
        let d = unified_diff("m.py", old, &new);
        assert!(d.contains("@@ -1,6 +1,6 @@\n"), "{d}");
        assert!(run(&["apply", "-"], &d));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("m.py")).unwrap(),
            new
        );
        assert!(run(&["apply", "-"], &unified_diff("m.py", &new, old)));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("m.py")).unwrap(),
            old
        );
    }

    proptest! {
        /// Any one-region edit of any text: the diff rebuilds the new text, and its reverse
        /// the old one.
        #[test]
        fn diff_round_trips(
            base in proptest::collection::vec("[a-c ]{0,4}\n?", 0..30),
            at in 0usize..200,
            cut in 0usize..20,
            insert in "[a-c\n]{0,6}",
        ) {
            let old: String = base.concat();
            let at = at.min(old.len());
            let cut = cut.min(old.len() - at);
            let new = format!("{}{}{}", &old[..at], insert, &old[at + cut..]);
            let d = unified_diff("f.py", &old, &new);
            if old == new {
                prop_assert!(d.is_empty());
            } else {
                prop_assert_eq!(apply(&old, &d), new.clone());
                prop_assert_eq!(apply(&new, &unified_diff("f.py", &new, &old)), old);
            }
        }
    }
}
