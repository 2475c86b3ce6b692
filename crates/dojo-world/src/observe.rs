//! What the world models are shown of a workspace, read by one set of functions for both of
//! its uses: the simulated environment asking SWT/SWR ([`crate::sim`]) and `dojo rollout`
//! recording real runs as their training data (`dojo-rollout`'s `world_capture`). A model is
//! thus trained on exactly the files it is later asked about:
//!
//! - a command's class comes from [`classify_in`] (the classifier, with Python shebangs of the
//!   programs it runs looked up in the workspace);
//! - its executed files are [`executed_paths`]: the files its [`PythonRun`] names, resolved
//!   against the command's working directory, directories expanded to their `.py` files;
//! - SWR's test files are the task's test files (`dojo_grade::guard::task_test_files`) read by
//!   [`read_views`] from the tree as graded;
//! - every file is shown with its base version ([`base_version`]: the pristine tree on the host,
//!   else `git show HEAD:` in the workspace) and cut by one [`ReadLimits`].
//!
//! [`Snapshot`] is the state before a command (executed files and the agent's patch), taken
//! once per command even when both the model and capture need it.

use std::path::Path;
use std::time::Duration;

use dojo_sandbox::Workspace;
use dojo_sandbox::{ExecRequest, SandboxError, WORKSPACE};

use crate::classify::{CommandClass, PythonRun, classify_with};
use crate::context::FileView;

/// Bounds on what is read of a workspace for one question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimits {
    /// Files per command (SWE-World: 20); beyond it the first ones.
    pub max_files: usize,
    /// Characters kept of each file version (its head; prompts cut far earlier anyway).
    pub max_file_chars: usize,
}

impl Default for ReadLimits {
    fn default() -> Self {
        ReadLimits {
            max_files: 20,
            max_file_chars: 100_000,
        }
    }
}

/// The workspace before a command that runs Python or tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The files the command executes, now and at the base commit.
    pub files: Vec<FileView>,
    /// The agent's patch at that moment.
    pub agent_patch: String,
}

/// The class of `script` in `ws`: programs it runs by path (`./x`, `bin/y`) count as Python
/// when their first line is a Python shebang.
pub async fn classify_in(ws: &dyn Workspace, script: &str) -> CommandClass {
    let mut shebangs = Vec::new();
    for word in script.split_whitespace() {
        let w = word.trim_matches(|c| matches!(c, '(' | ')' | ';' | '&' | '|'));
        if !w.contains('/') || w.ends_with(".py") || w.starts_with('-') {
            continue;
        }
        if let Ok(bytes) = ws.read_file(w).await {
            let head = String::from_utf8_lossy(&bytes[..bytes.len().min(128)]).into_owned();
            if head.starts_with("#!") && head.lines().next().is_some_and(|l| l.contains("python")) {
                shebangs.push(w.to_string());
            }
        }
    }
    classify_with(script, &|p| shebangs.iter().any(|s| s == p))
}

/// The files `run` executes, as the models see them: repository-relative paths (absolute ones
/// outside the repository stay absolute), directories expanded to their `.py` files (sorted),
/// a named file that does not exist kept (shown as absent), each once, at most `max_files`.
pub async fn executed_paths(
    ws: &dyn Workspace,
    run: &PythonRun,
    cwd: &str,
    max_files: usize,
) -> Vec<String> {
    let mut paths: Vec<String> = Vec::new();
    for f in &run.files {
        if paths.len() >= max_files {
            break;
        }
        let abs = absolute(f, cwd);
        let found = match ws.read_file(&abs).await {
            Ok(_) => vec![view_path(&abs)],
            Err(_) => {
                let listed = list_py(ws, &abs, max_files).await;
                if listed.is_empty() {
                    vec![view_path(&abs)]
                } else {
                    listed
                }
            }
        };
        for p in found {
            if !p.is_empty() && !paths.contains(&p) {
                paths.push(p);
            }
        }
    }
    paths.truncate(max_files);
    paths
}

/// Each of `paths` (as [`executed_paths`] names them) now and at the base commit.
pub async fn read_views(
    ws: &dyn Workspace,
    paths: &[String],
    base: Option<&Path>,
    limits: ReadLimits,
) -> Vec<FileView> {
    let mut files = Vec::with_capacity(paths.len().min(limits.max_files));
    for path in paths.iter().take(limits.max_files) {
        let current = ws
            .read_file(&workspace_path(path))
            .await
            .ok()
            .map(|b| clip(&b, limits.max_file_chars));
        files.push(FileView {
            path: path.clone(),
            base: base_version(ws, base, path, limits.max_file_chars).await,
            current,
        });
    }
    files
}

/// The state before `run` executes in `ws` (working directory `cwd`). `Err`: the agent's patch
/// could not be read (the workspace is unusable; nothing may be asked or recorded).
pub async fn snapshot(
    ws: &dyn Workspace,
    run: &PythonRun,
    cwd: &str,
    base: Option<&Path>,
    limits: ReadLimits,
) -> Result<Snapshot, SandboxError> {
    let paths = executed_paths(ws, run, cwd, limits.max_files).await;
    let files = read_views(ws, &paths, base, limits).await;
    let agent_patch = ws.diff().await?;
    Ok(Snapshot { files, agent_patch })
}

/// The file at the task's base commit: from the pristine tree `base` on the host when given,
/// else `git show HEAD:` in the workspace (when the checkout has that history). `None`: it did
/// not exist there (or lies outside the repository).
pub async fn base_version(
    ws: &dyn Workspace,
    base: Option<&Path>,
    path: &str,
    max_chars: usize,
) -> Option<String> {
    if path.starts_with('/') || path.split('/').any(|c| c == "..") {
        return None;
    }
    if let Some(dir) = base {
        return std::fs::read(dir.join(path))
            .ok()
            .map(|b| clip(&b, max_chars));
    }
    let mut req = ExecRequest::shell("git show \"HEAD:$DOJO_P\" 2>/dev/null")
        .timeout(Duration::from_secs(30))
        .cwd(WORKSPACE);
    req.env.insert("DOJO_P".into(), path.to_string());
    let out = ws.exec(&req).await.ok()?;
    out.success().then(|| clip(&out.stdout, max_chars))
}

/// The `.py` files under directory `dir` (absolute), sorted, as view paths.
async fn list_py(ws: &dyn Workspace, dir: &str, max_files: usize) -> Vec<String> {
    let mut req = ExecRequest::shell(format!(
        "[ -d \"$DOJO_P\" ] && find \"$DOJO_P\" -type f -name '*.py' -not -path '*/.*' | LC_ALL=C sort | head -n {max_files}"
    ))
    .timeout(Duration::from_secs(30))
    .cwd(WORKSPACE);
    // Relative to the workspace, so the listing reads the same in every workspace kind.
    let p = view_path(dir);
    req.env.insert(
        "DOJO_P".into(),
        if p.is_empty() { ".".into() } else { p.clone() },
    );
    match ws.exec(&req).await {
        Ok(out) if out.success() => out
            .stdout_lossy()
            .lines()
            .map(|l| l.trim_start_matches("./"))
            .filter(|l| !l.is_empty())
            .map(|l| view_path(&absolute(l, WORKSPACE)))
            .collect(),
        _ => Vec::new(),
    }
}

/// `path` resolved against `cwd`, with `.` segments dropped.
fn absolute(path: &str, cwd: &str) -> String {
    if path.starts_with('/') {
        path.to_string()
    } else {
        let p = path.trim_start_matches("./");
        format!("{}/{p}", cwd.trim_end_matches('/'))
    }
}

/// An absolute workspace path as the models see it: relative to the repository root, or
/// absolute when it lies outside the repository.
pub fn view_path(abs: &str) -> String {
    let clean = |p: &str| {
        p.split('/')
            .filter(|s| !s.is_empty() && *s != ".")
            .collect::<Vec<_>>()
            .join("/")
    };
    match abs.strip_prefix(WORKSPACE) {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => clean(rest),
        _ if abs.starts_with('/') => format!("/{}", clean(abs)),
        _ => clean(abs),
    }
}

/// A view path as a workspace path.
fn workspace_path(view: &str) -> String {
    if view.starts_with('/') {
        view.to_string()
    } else {
        format!("{WORKSPACE}/{view}")
    }
}

/// The head of a file's text, unmarked: [`ReadLimits::max_file_chars`] says where it ends.
fn clip(bytes: &[u8], max_chars: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    dojo_rundir::clip::head(&text, max_chars, dojo_rundir::clip::Unit::Chars).to_string()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::classify::classify;
    use dojo_sandbox::LocalWorkspace;

    /// A git checkout of `files` (path, contents), committed: the base commit.
    pub(crate) fn committed(files: &[(&str, &str)]) -> (tempfile::TempDir, LocalWorkspace) {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let git = |args: &[&str]| {
            let st = std::process::Command::new("git")
                .args(args)
                .current_dir(dir.path())
                .output()
                .unwrap();
            assert!(st.status.success(), "git {args:?}");
        };
        git(&["init", "-q"]);
        git(&["add", "-A"]);
        git(&[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "base",
        ]);
        let ws = LocalWorkspace::new(dir.path());
        (dir, ws)
    }

    fn workspace() -> (tempfile::TempDir, LocalWorkspace) {
        let (dir, ws) = committed(&[
            ("repro.py", "print('base')\n"),
            ("tests/test_b.py", "b\n"),
            ("tests/sub/test_a.py", "a\n"),
            ("tests/data.txt", "x\n"),
        ]);
        std::fs::write(dir.path().join("repro.py"), "print('now')\n").unwrap();
        (dir, ws)
    }

    fn run_of(cmd: &str) -> PythonRun {
        match classify(cmd) {
            CommandClass::Python(r) => r,
            other => panic!("{cmd}: {other:?}"),
        }
    }

    #[tokio::test]
    async fn executed_files_are_named_files_and_expanded_directories() {
        let (_d, ws) = workspace();
        let run = run_of("python ./repro.py && pytest tests/ missing.py tests/test_b.py::test_x");
        let paths = executed_paths(&ws, &run, WORKSPACE, 20).await;
        assert_eq!(
            paths,
            [
                "repro.py",
                "tests/sub/test_a.py",
                "tests/test_b.py",
                "missing.py"
            ]
        );
        // From a subdirectory, names resolve against the working directory.
        let run = run_of("pytest test_b.py");
        let paths = executed_paths(&ws, &run, "/testbed/tests", 20).await;
        assert_eq!(paths, ["tests/test_b.py"]);
        assert_eq!(
            executed_paths(&ws, &run_of("pytest tests/"), WORKSPACE, 1)
                .await
                .len(),
            1
        );

        let snap = snapshot(
            &ws,
            &run_of("python repro.py"),
            WORKSPACE,
            None,
            ReadLimits::default(),
        )
        .await
        .unwrap();
        assert_eq!(snap.files.len(), 1);
        assert_eq!(snap.files[0].current.as_deref(), Some("print('now')\n"));
        // Without a pristine tree, the base version comes from the checkout's history.
        assert_eq!(snap.files[0].base.as_deref(), Some("print('base')\n"));
        assert!(
            snap.agent_patch.contains("+print('now')"),
            "{}",
            snap.agent_patch
        );
        let views = read_views(
            &ws,
            &["missing.py".to_string()],
            None,
            ReadLimits {
                max_files: 5,
                max_file_chars: 3,
            },
        )
        .await;
        assert_eq!(
            (views[0].base.as_deref(), views[0].current.as_deref()),
            (None, None)
        );
    }

    #[tokio::test]
    async fn shebang_scripts_are_python() {
        let (d, ws) = workspace();
        std::fs::create_dir(d.path().join("bin")).unwrap();
        std::fs::write(
            d.path().join("bin/tool"),
            "#!/usr/bin/env python3\nprint(1)\n",
        )
        .unwrap();
        std::fs::write(d.path().join("bin/sh"), "#!/bin/sh\necho 1\n").unwrap();
        assert!(matches!(
            classify_in(&ws, "bin/tool --x").await,
            CommandClass::Python(_)
        ));
        assert_eq!(classify_in(&ws, "bin/sh").await, CommandClass::Real);
    }

    #[test]
    fn view_paths() {
        assert_eq!(view_path("/testbed/./a/b.py"), "a/b.py");
        assert_eq!(view_path("/testbed"), "");
        assert_eq!(view_path("/testbedx/a.py"), "/testbedx/a.py");
        assert_eq!(view_path("/tmp//r.py"), "/tmp/r.py");
        assert_eq!(workspace_path("a.py"), "/testbed/a.py");
        assert_eq!(workspace_path("/tmp/r.py"), "/tmp/r.py");
    }
}
