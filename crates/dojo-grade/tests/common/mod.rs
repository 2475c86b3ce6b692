//! What the sandboxed grading tests share: skipping without the kernel features, the pinned
//! tools, and a pristine tree plus venv built from a directory of files.

#![allow(dead_code)]

use std::path::PathBuf;

use dojo_grade::{GradeOptions, InstanceReport, grade_in_sandbox};
use dojo_sandbox::{Pristine, PristineStore, PythonEnv, Sandbox, SandboxOptions, Source};
use dojo_task::{RepoEnv, Task};

pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

pub fn skip(reason: String) {
    assert!(!ci(), "CI=true: {reason}");
    println!("SKIPPED: {reason}");
}

/// Point `DOJO_PYTOOLS` at the pinned tools (uv) unless it is set.
pub fn setup_home() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("DOJO_PYTOOLS").is_none() {
            let tools = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/pytools"));
            // SAFETY: set once before any thread of this test binary reads the environment.
            unsafe { std::env::set_var("DOJO_PYTOOLS", tools) };
        }
    });
}

/// [`setup_home`], then whether namespace sandboxes work here; when they do not, the test is
/// SKIPPED (a failure under `CI=true`) and this returns false.
pub fn sandboxes_or_skip() -> bool {
    setup_home();
    if !dojo_sandbox::doctor::namespaces_usable() && !ci() {
        skip("namespaces/overlayfs unavailable".into());
        return false;
    }
    true
}

/// A fresh directory holding `files` (path, contents), kept for the pristine store to read.
pub fn project(files: &[(&str, &str)]) -> PathBuf {
    let d = tempfile::tempdir().unwrap().keep();
    for (p, c) in files {
        let f = d.join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, c).unwrap();
    }
    d
}

/// A task from a JSON row (`Task::from_row`).
pub fn task(row: serde_json::Value) -> Task {
    let loc = dojo_task::Location {
        file: "test".into(),
        unit: "line",
        index: 1,
    };
    Task::from_row(row.as_object().unwrap().clone(), &loc).unwrap()
}

/// The pristine tree of `src` and the venv of `env` over it.
pub async fn sandbox_for(src: PathBuf, env: &RepoEnv) -> Result<(Pristine, PythonEnv), String> {
    let p = PristineStore::open()
        .and_then(|s| s.build(&Source::Dir { path: src }))
        .map_err(|e| e.to_string())?;
    let venv = PythonEnv::build_async(&env.spec, Some(&p))
        .await
        .map_err(|e| e.to_string())?;
    Ok((p, venv))
}

/// A patch creating each `(path, contents)`.
pub fn new_files(files: &[(&str, &str)]) -> String {
    let mut s = String::new();
    for (path, body) in files {
        let n = body.lines().count();
        s.push_str(&format!(
            "diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{n} @@\n"
        ));
        for l in body.lines() {
            s.push_str(&format!("+{l}\n"));
        }
    }
    s
}

/// Grade `patch` once in a fresh sandbox over `pristine` and `venv`, then tear it down.
pub async fn grade_fresh(
    pristine: &Pristine,
    venv: &PythonEnv,
    task: &Task,
    env: &RepoEnv,
    patch: &str,
    opts: &GradeOptions,
) -> InstanceReport {
    let mut sb = Sandbox::create(pristine, Some(venv), &SandboxOptions::default())
        .await
        .unwrap();
    let r = grade_in_sandbox(&mut sb, task, env, Some(patch), opts).await;
    sb.teardown().await.unwrap();
    r
}

/// `task` prepared for `env` (its checkout and environment, built once and cached) and a
/// sandbox over them; the error says why it could not be prepared (network, kernel features).
pub async fn prepared_sandbox(
    task: &Task,
    env: &RepoEnv,
) -> Result<(dojo_task::PreparedTask, Sandbox), String> {
    let (t, e) = (task.clone(), env.clone());
    let prepared = tokio::task::spawn_blocking(move || {
        dojo_task::prepare(&t, &e, &dojo_task::PrepareOptions::default())
    })
    .await
    .unwrap()
    .map_err(|e| format!("cannot prepare {}: {e}", task.instance_id))?;
    let sb = Sandbox::create(
        &prepared.pristine,
        Some(&prepared.env),
        &SandboxOptions::default(),
    )
    .await
    .map_err(|e| format!("cannot create a sandbox for {}: {e}", task.instance_id))?;
    Ok((prepared, sb))
}

/// Whether a red-team grade held: unresolved (not as an infrastructure failure), or an
/// infrastructure error confirmed without the patch; never resolved, never masked.
pub fn held(r: &InstanceReport) -> bool {
    match r.outcome {
        dojo_grade::Verdict::Unresolved => !r.infra_failure,
        dojo_grade::Verdict::Error => {
            r.infra_failure && r.error.as_deref().unwrap_or("").contains("confirmed")
        }
        _ => false,
    }
}
