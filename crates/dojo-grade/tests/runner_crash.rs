//! A bug that crashes the test runner itself when the test patch runs without the fix
//! (SWE-bench Lite's pytest-7168: the bug made pytest's own reporting raise, INTERNALERROR,
//! no result printed). Grading that run alone is "no valid test output", never the agent's
//! failure; validating the task takes the crash for the bug's when the gold run has results,
//! as the harness does (tests absent from its log count as failing), so the task validates.
//!
//! Needs the sandbox's kernel features, uv and PyPI access (for pytest); otherwise SKIPPED
//! (under `CI=true` a missing feature fails instead).

use std::time::Duration;

mod common;
use common::{sandbox_for, skip};

use dojo_grade::{ErrorKind, GradeOptions, Verdict, validate_in_sandbox};
use dojo_sandbox::{Sandbox, SandboxOptions};
use dojo_task::EnvRegistry;
use serde_json::json;

const CORE: &str = "def add(a, b):\n    return a - b\n";
const GOLD: &str = "diff --git a/calc/core.py b/calc/core.py\n--- a/calc/core.py\n+++ b/calc/core.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n";
const CRASHING_TEST: &str = "import os\n\nfrom calc.core import add\n\nif add(2, 3) != 5:\n    os._exit(3)\n\n\ndef test_add():\n    assert add(2, 3) == 5\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_crash_caused_by_the_bug_validates_the_task() {
    if !common::sandboxes_or_skip() {
        return;
    }
    let src = common::project(&[
        ("calc/__init__.py", ""),
        ("calc/core.py", CORE),
        ("tests/__init__.py", ""),
    ]);
    let test_patch = common::new_files(&[("tests/test_crash.py", CRASHING_TEST)]);
    let row = |f2p: serde_json::Value| {
        json!({
            "instance_id": "local__calc-9", "repo": "local/calc", "base_commit": "x",
            "patch": GOLD, "test_patch": test_patch, "version": "1.0",
            "FAIL_TO_PASS": f2p, "PASS_TO_PASS": [],
            "env": {"python": "3.11", "requirements": ["pytest==8.3.3"], "editable": false,
                    "test_cmd": "python -m pytest -rA -p no:cacheprovider tests",
                    "test_directives": "none", "timeout_s": 120, "env": {"PYTHONPATH": "/testbed"}}})
    };
    let t = common::task(row(json!(["tests/test_crash.py::test_add"])));
    let env = EnvRegistry::default().resolve(&t).unwrap();
    let (pristine, venv) = match sandbox_for(src, &env).await {
        Ok(x) => x,
        Err(e) => return skip(format!("cannot build the pristine tree or venv: {e}")),
    };
    let opts = GradeOptions {
        timeout: Some(Duration::from_secs(60)),
        ..Default::default()
    };
    let mut sb = Sandbox::create(&pristine, Some(&venv), &SandboxOptions::default())
        .await
        .unwrap();
    let v = validate_in_sandbox(&mut sb, &t, &env, &opts).await;
    let before = v.before.as_ref().unwrap();
    // The crash is still what it is in the report of that run...
    assert_eq!(
        (before.outcome, before.error_kind),
        (Verdict::Error, Some(ErrorKind::NoTestOutput)),
        "{}",
        before.test_output
    );
    // ...and the task validates: the gold run passes the test the crash hid.
    assert!(v.ok, "{:?}", v.problems);
    assert_eq!(v.derived_fail_to_pass, ["tests/test_crash.py::test_add"]);
    sb.teardown().await.unwrap();

    // A new task (no lists yet) gets its FAIL_TO_PASS from the gold run.
    let new = common::task(row(json!([])));
    let mut sb = Sandbox::create(&pristine, Some(&venv), &SandboxOptions::default())
        .await
        .unwrap();
    let v = validate_in_sandbox(&mut sb, &new, &env, &opts).await;
    assert!(v.ok && v.new_task, "{:?}", v.problems);
    assert_eq!(v.derived_fail_to_pass, ["tests/test_crash.py::test_add"]);
    sb.teardown().await.unwrap();
}
