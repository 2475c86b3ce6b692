//! Pristine trees: git export without history, archives, bad input, bytecode excluded from diffs.

mod common;

use std::process::Command;

use dojo_sandbox::{PristineStore, Sandbox, SandboxError, SandboxOptions, Source};

fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "safe.directory=*", "-C"])
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test]
async fn git_source_is_exported_without_later_history() {
    let repo = common::tree(&[("a.py", "x = 1\n")]);
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "base"]);
    let base = git(&repo, &["rev-parse", "HEAD"]);
    std::fs::write(repo.join("a.py"), "x = 2  # the fix\n").unwrap();
    git(&repo, &["commit", "-qam", "fix"]);
    let store = PristineStore::open().unwrap();
    let p = store
        .build(&Source::Git {
            repo: repo.clone(),
            commit: base.clone(),
        })
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(p.path.join("a.py")).unwrap(),
        "x = 1\n"
    );
    // A fresh one-commit repository: the fix's commit is nowhere.
    assert_eq!(git(&p.path, &["rev-list", "--all", "--count"]), "1");
    assert!(!git(&p.path, &["log", "--all", "--format=%s"]).contains("fix"));
    // No background `git gc --auto` (it raced the chown of large trees): off in the repository.
    assert_eq!(git(&p.path, &["config", "gc.auto"]), "0");
    // Built once: the same entry comes back.
    let again = store.build(&Source::Git { repo, commit: base }).unwrap();
    assert_eq!(again.path, p.path);
}

/// The source's nearest release tag is on the base commit too, so versions computed with `git
/// describe` (setuptools-scm) are the project's, not an untagged `0.1.dev1`; tags after the base
/// commit and tags without a digit are not taken.
#[tokio::test]
async fn git_source_keeps_its_nearest_release_tag() {
    let repo = common::tree(&[("a.py", "x = 1\n")]);
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "release"]);
    git(&repo, &["tag", "5.2.0"]);
    std::fs::write(repo.join("a.py"), "x = 2\n").unwrap();
    git(&repo, &["commit", "-qam", "work"]);
    git(&repo, &["tag", "nightly"]);
    let base = git(&repo, &["rev-parse", "HEAD"]);
    std::fs::write(repo.join("a.py"), "x = 3\n").unwrap();
    git(&repo, &["commit", "-qam", "later"]);
    git(&repo, &["tag", "5.3.0"]);
    let p = PristineStore::open()
        .unwrap()
        .build(&Source::Git { repo, commit: base })
        .unwrap();
    let tags = git(&p.path, &["tag", "--points-at", "HEAD"]);
    assert_eq!(tags.lines().collect::<Vec<_>>(), ["5.2.0", "dojo-base"]);
    assert_eq!(
        git(&p.path, &["describe", "--tags", "--match", "*[0-9]*"]),
        "5.2.0"
    );
}

#[tokio::test]
async fn nonexistent_commit_and_corrupt_archive_are_named_errors() {
    let repo = common::tree(&[("a.py", "x = 1\n")]);
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "base"]);
    // A store of its own: other tests of this binary build trees concurrently, and their
    // in-progress entries must not count as leftovers here.
    let scratch = tempfile::tempdir().unwrap();
    let store = PristineStore::at(scratch.path());
    let err = store
        .build(&Source::Git {
            repo: repo.clone(),
            commit: "deadbeef".into(),
        })
        .unwrap_err();
    assert!(matches!(err, SandboxError::Pristine { .. }));
    assert!(err.to_string().contains("deadbeef"), "{err}");

    let bad = common::tree(&[("broken.tar.gz", "this is not gzip")]).join("broken.tar.gz");
    let err = store
        .build(&Source::Archive { path: bad.clone() })
        .unwrap_err();
    assert!(err.to_string().contains("broken.tar.gz"), "{err}");
    // No half-built entry is visible.
    for e in std::fs::read_dir(&store.root).unwrap().flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        assert!(!n.contains(".tmp-"), "leftover {n}");
    }
}

#[tokio::test]
async fn sdist_archive_single_top_dir_is_stripped() {
    let src = common::tree(&[
        ("proj-1.0/setup.py", "print(1)\n"),
        ("proj-1.0/proj/__init__.py", ""),
    ]);
    let tgz = src.join("proj-1.0.tar.gz");
    let st = Command::new("tar")
        .arg("-czf")
        .arg(&tgz)
        .arg("-C")
        .arg(&src)
        .arg("proj-1.0")
        .status()
        .unwrap();
    assert!(st.success());
    let p = PristineStore::open()
        .unwrap()
        .build(&Source::Archive { path: tgz })
        .unwrap();
    assert!(p.path.join("setup.py").is_file());
    assert!(p.path.join(".git").is_dir());
}

#[tokio::test]
async fn bytecode_is_precompiled_and_never_in_diffs() {
    skip_unless_ns!();
    let p = common::small_pristine();
    if std::path::Path::new(dojo_sandbox::pristine::DEFAULT_PYTHON).exists() {
        assert!(
            p.path.join("pkg/__pycache__").is_dir(),
            "bytecode was not precompiled"
        );
    }
    let sb = Sandbox::create(&p, None, &SandboxOptions::default())
        .await
        .unwrap();
    let out = common::sh(
        &sb,
        "/usr/bin/python3.11 -c 'import sys; sys.path.insert(0, \".\"); import pkg.mod' && mkdir -p .pytest_cache && touch .pytest_cache/x && echo 'y = 2' >> pkg/mod.py && /usr/bin/python3.11 -m compileall -q pkg",
    )
    .await;
    assert!(out.success(), "{out:?}");
    let d = sb.diff().await.unwrap();
    assert!(d.contains("+y = 2"), "{d}");
    assert!(
        !d.contains("__pycache__") && !d.contains(".pyc") && !d.contains(".pytest_cache"),
        "{d}"
    );
    sb.teardown().await.unwrap();
}

#[tokio::test]
async fn directory_source_is_recognised_until_it_changes() {
    let src = tempfile::tempdir().unwrap();
    let root = src.path().join("proj");
    std::fs::create_dir_all(root.join("pkg")).unwrap();
    std::fs::write(root.join("pkg/mod.py"), "x = 1\n").unwrap();
    std::fs::write(root.join("setup.py"), "print(1)\n").unwrap();
    git(&root, &["init", "-q"]);
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-qm", "base"]);
    let scratch = tempfile::tempdir().unwrap();
    let store = PristineStore::at(scratch.path());
    let dir = Source::Dir { path: root.clone() };
    let first = store.build(&dir).unwrap();
    // The stat index sits beside the entries, one file per source directory.
    let index = scratch.path().join("dir-index");
    assert_eq!(std::fs::read_dir(&index).unwrap().count(), 1);
    assert_eq!(store.build(&dir).unwrap().id, first.id);

    // A same-size edit is a new tree; the old entry stays.
    std::fs::write(root.join("pkg/mod.py"), "x = 2\n").unwrap();
    let edited = store.build(&dir).unwrap();
    assert_ne!(edited.id, first.id);
    assert_eq!(
        std::fs::read_to_string(edited.path.join("pkg/mod.py")).unwrap(),
        "x = 2\n"
    );
    // An untracked file too; removing it again gives back the edited tree's entry.
    std::fs::write(root.join("notes.txt"), "n\n").unwrap();
    let untracked = store.build(&dir).unwrap();
    assert_ne!(untracked.id, edited.id);
    assert!(untracked.path.join("notes.txt").is_file());
    std::fs::remove_file(root.join("notes.txt")).unwrap();
    assert_eq!(store.build(&dir).unwrap().id, edited.id);
    // Bytecode the source's own test runs left is stripped from the tree, so it is not a change.
    std::fs::create_dir(root.join("pkg/__pycache__")).unwrap();
    std::fs::write(root.join("pkg/__pycache__/mod.cpython-311.pyc"), "b").unwrap();
    assert_eq!(store.build(&dir).unwrap().id, edited.id);
}

/// Trees of two commits of one repository store their unchanged files once (one inode, through
/// dojo-cache's `share`), while what a sandbox sees does not change: the files' content, the
/// compiled bytecode the interpreter loads, and an empty diff until something is edited.
#[tokio::test]
async fn trees_of_two_commits_store_their_unchanged_files_once() {
    skip_unless_ns!();
    use std::os::unix::fs::MetadataExt;
    let body = "def f():\n    return 1\n".repeat(50);
    let repo = common::tree(&[
        ("pkg/__init__.py", ""),
        ("pkg/same.py", &body),
        ("pkg/changed.py", "x = 1\n"),
        ("data.txt", "kept\n"),
    ]);
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "one"]);
    let one = git(&repo, &["rev-parse", "HEAD"]);
    std::fs::write(repo.join("pkg/changed.py"), "x = 2\n").unwrap();
    git(&repo, &["commit", "-qam", "two"]);
    let two = git(&repo, &["rev-parse", "HEAD"]);
    let store = PristineStore::open().unwrap();
    let build = |commit: &str| {
        store
            .build(&Source::Git {
                repo: repo.clone(),
                commit: commit.into(),
            })
            .unwrap()
    };
    let (a, b) = (build(&one), build(&two));
    let ino =
        |p: &dojo_sandbox::Pristine, f: &str| std::fs::metadata(p.path.join(f)).unwrap().ino();
    assert_eq!(ino(&a, "pkg/same.py"), ino(&b, "pkg/same.py"));
    assert_eq!(ino(&a, "data.txt"), ino(&b, "data.txt"));
    assert_ne!(ino(&a, "pkg/changed.py"), ino(&b, "pkg/changed.py"));
    if std::path::Path::new(dojo_sandbox::pristine::DEFAULT_PYTHON).exists() {
        // The bytecode of an unchanged file too: it records the sandbox's path, not the tree's.
        let pyc = "pkg/__pycache__/same.cpython-311.pyc";
        assert_eq!(ino(&a, pyc), ino(&b, pyc));
    }
    assert_eq!(
        std::fs::read_to_string(b.path.join("pkg/changed.py")).unwrap(),
        "x = 2\n"
    );

    let sb = Sandbox::create(&b, None, &SandboxOptions::default())
        .await
        .unwrap();
    assert_eq!(
        sb.diff().await.unwrap(),
        "",
        "an untouched tree has no diff"
    );
    if std::path::Path::new(dojo_sandbox::pristine::DEFAULT_PYTHON).exists() {
        let out = common::sh(
            &sb,
            "/usr/bin/python3.11 -v -c 'import sys; sys.path.insert(0, \".\"); import pkg.same' 2>&1 | grep -c \"code object from '/testbed/pkg/__pycache__/same\"",
        )
        .await;
        assert_eq!(out.stdout_lossy().trim(), "1", "{out:?}");
        // Tracebacks name the file where the sandbox has it.
        let out = common::sh(
            &sb,
            "cd /tmp && /usr/bin/python3.11 -c 'import sys; sys.path.insert(0, \"/testbed\"); import pkg.same; print(pkg.same.f.__code__.co_filename)'",
        )
        .await;
        assert_eq!(out.stdout_lossy().trim(), "/testbed/pkg/same.py", "{out:?}");
    }
    sb.teardown().await.unwrap();
}
