//! The reader agrees with git: on patches that `git diff` writes for generated changes (file
//! names with spaces, quotes, backslashes, tabs, newlines and non-ASCII; edits, creations,
//! deletions, renames, copies, mode changes, binary files, symlinks), [`Patch::parse`] finds
//! the same files, paths and line counts as `git apply --numstat -z`.
//!
//! Needs `git` on the PATH (skipped with a message otherwise).

use std::path::Path;
use std::process::Command;

use dojo_patch::{Change, Patch};
use proptest::prelude::*;

fn git(dir: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "core.autocrlf=false",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn have_git() -> bool {
    Command::new("git").arg("--version").output().is_ok()
}

/// One generated change to a base file.
#[derive(Debug, Clone)]
enum Op {
    Keep,
    Edit(Vec<String>),
    Delete,
    Rename(String, Option<Vec<String>>),
    Chmod,
    Binary,
}

/// A name component with the characters git quotes, or splits badly on.
fn component() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z]{1,5}",
        1 => "[a-z]{1,3}[ \"\\\\\t\né]{1,2}[a-z]{1,3}",
        1 => Just("b".to_string()),
        1 => Just("x b".to_string()),
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop::collection::vec(component(), 1..3).prop_map(|c| c.join("/") + ".py")
}

fn lines() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec("[a-z]{0,3}|--- [a-z]{1,2}|\\+\\+\\+ x", 0..8)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => Just(Op::Keep),
        3 => lines().prop_map(Op::Edit),
        1 => Just(Op::Delete),
        2 => (name(), prop::option::of(lines())).prop_map(|(n, l)| Op::Rename(n, l)),
        1 => Just(Op::Chmod),
        1 => Just(Op::Binary),
    ]
}

fn text(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

fn write(root: &Path, rel: &str, body: &[u8]) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
}

/// `git apply --numstat -z` as (added, removed, old path, new path); binary counts are `None`.
type Stat = (Option<usize>, Option<usize>, String);

fn numstat(dir: &Path, patch: &Path) -> Vec<Stat> {
    let out = git(dir, &["apply", "--numstat", "-z", patch.to_str().unwrap()]);
    let mut fields = out
        .split(|&b| b == 0)
        .map(|b| String::from_utf8(b.to_vec()).unwrap());
    let mut stats = Vec::new();
    while let Some(rec) = fields.next() {
        if rec.is_empty() {
            continue;
        }
        let mut it = rec.splitn(3, '\t');
        let n = |s: Option<&str>| s.and_then(|s| s.parse().ok());
        let (a, r) = (n(it.next()), n(it.next()));
        let mut path = it.next().unwrap_or("").to_string();
        if path.is_empty() {
            // A rename or copy: `\0old\0new`.
            let _old = fields.next().unwrap_or_default();
            path = fields.next().unwrap_or_default();
        }
        stats.push((a, r, path));
    }
    stats
}

fn ours(p: &Patch) -> Vec<Stat> {
    p.files
        .iter()
        .map(|f| {
            let (a, r) = f.counts();
            let (a, r) = if f.binary {
                (None, None)
            } else {
                (Some(a), Some(r))
            };
            (a, r, f.path().to_string())
        })
        .collect()
}

type Files = std::collections::BTreeMap<String, Vec<String>>;

/// Build the base, apply `ops` and the creations, diff, and compare the reader with git.
fn check(
    base: &Files,
    ops: &[Op],
    created: &Files,
    symlink: Option<String>,
    copies: bool,
) -> Result<(), TestCaseError> {
    if !have_git() {
        eprintln!("SKIPPED: git is not on the PATH");
        return Ok(());
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("repo");
    std::fs::create_dir(&root).unwrap();
    git(&root, &["init", "-q"]);
    // Names end in `.py` and directories never do, so paths clash only when equal.
    let mut all: Vec<&String> = base.keys().chain(created.keys()).collect();
    all.extend(symlink.iter());
    let distinct: std::collections::BTreeSet<_> = all.iter().collect();
    prop_assume!(distinct.len() == all.len());
    for (n, l) in base {
        write(&root, n, text(l).as_bytes());
    }
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "base"]);
    for ((n, l), op) in base.iter().zip(ops) {
        match op {
            Op::Keep => {}
            Op::Edit(new) => write(&root, n, text(new).as_bytes()),
            Op::Delete => std::fs::remove_file(root.join(n)).unwrap(),
            Op::Rename(to, edit) => {
                if all.contains(&to) {
                    continue;
                }
                std::fs::remove_file(root.join(n)).unwrap();
                write(&root, to, text(edit.as_ref().unwrap_or(l)).as_bytes());
            }
            Op::Chmod => {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(root.join(n), std::fs::Permissions::from_mode(0o755))
                    .unwrap();
            }
            Op::Binary => write(&root, n, b"\0\x01bin\xff\n"),
        }
    }
    for (n, l) in created {
        write(&root, n, text(l).as_bytes());
    }
    if let Some(s) = &symlink {
        let p = root.join(s);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink("../target", p).unwrap();
    }
    git(&root, &["add", "-A"]);
    let mut args = vec!["diff", "--cached", "-M"];
    if copies {
        args.extend(["-C", "--find-copies-harder"]);
    }
    let patch = git(&root, &args);
    let patch = String::from_utf8(patch).unwrap();
    prop_assume!(!patch.is_empty());
    let file = dir.path().join("p.diff");
    std::fs::write(&file, &patch).unwrap();
    let expected = numstat(&root, &file);
    let parsed = Patch::parse(&patch);
    prop_assert!(parsed.problems.is_empty(), "{:?}\n{patch}", parsed.problems);
    prop_assert_eq!(ours(&parsed), expected, "{}", patch);
    // A rename or copy names its source too; a symlink is mode 120000.
    for f in &parsed.files {
        if matches!(f.change, Change::Rename | Change::Copy) {
            let old = f.old_path.as_deref().unwrap_or("");
            prop_assert!(f.named.iter().any(|n| n == old), "{:?}", f);
        }
        if symlink.as_deref() == Some(f.path()) {
            prop_assert!(f.is_symlink());
        }
        // Applying the hunks to the base gives what git wrote.
        if !f.binary && !f.is_symlink() && f.old_mode != Some(0o120000) {
            let before = match &f.old_path {
                Some(old) => git(&root, &["show", &format!("HEAD:{old}")]),
                None => Vec::new(),
            };
            let after = match &f.new_path {
                Some(new) => std::fs::read(root.join(new)).unwrap(),
                None => Vec::new(),
            };
            let before = String::from_utf8(before).unwrap();
            prop_assert_eq!(
                f.apply(&before).map(String::into_bytes),
                Some(after),
                "{:?}",
                f
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn agrees_with_git_apply_numstat(
        base in prop::collection::btree_map(name(), lines(), 1..5),
        ops in prop::collection::vec(op(), 5),
        created in prop::collection::btree_map(name(), lines(), 0..3),
        symlink in prop::option::of(name()),
        copies in any::<bool>(),
    ) {
        check(&base, &ops, &created, symlink, copies)?;
    }
}

/// The names git quotes or that split badly, all in one patch, so each run covers them.
#[test]
fn hard_names_in_one_patch() {
    let l = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let base: Files = [
        ("x b/y z.py", l(&["a", "b"])),
        ("q\"t.py", l(&["a"])),
        ("tab\tname.py", l(&["a"])),
        ("\u{e9}t\u{e9}.py", l(&["a", "b", "c"])),
        ("back\\slash.py", l(&["a"])),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let ops = [
        Op::Edit(l(&["a", "c"])),
        Op::Rename("new\nline.py".into(), None),
        Op::Delete,
        Op::Rename("b/moved.py".into(), Some(l(&["a", "b", "x"]))),
        Op::Chmod,
    ];
    let created: Files = [("conf\"test\".py".to_string(), l(&["import os"]))].into();
    check(&base, &ops, &created, Some("link \\.py".into()), true).unwrap();
}
