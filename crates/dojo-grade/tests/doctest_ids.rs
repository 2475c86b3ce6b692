//! A task without a test patch whose FAIL_TO_PASS id is a doctest of the very module the fix
//! edits (`calc/core.py::calc.core.add`, as `pytest --doctest-modules` names it; common in
//! sdist and SWE-smith-style tasks). Grading restores only test files: the module is not one,
//! so the gold patch resolves (it used to be reverted before the tests ran, and graded
//! unresolved); a model edit of a real test file named by an id is still restored.
//!
//! Needs the sandbox's kernel features, uv and PyPI access (for pytest); otherwise SKIPPED
//! (under `CI=true` a missing feature fails instead).

use std::time::Duration;

mod common;
use common::{sandbox_for, skip};

use dojo_grade::{GradeOptions, InfraKind, Verdict};
use dojo_task::EnvRegistry;
use serde_json::json;

const CORE: &str = "def add(a, b):\n    \"\"\"\n    >>> add(2, 3)\n    5\n    \"\"\"\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n";
const GOLD: &str = "diff --git a/calc/core.py b/calc/core.py\n--- a/calc/core.py\n+++ b/calc/core.py\n@@ -3,7 +3,7 @@ def add(a, b):\n     >>> add(2, 3)\n     5\n     \"\"\"\n-    return a - b\n+    return a + b\n \n \n def mul(a, b):\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_doctest_id_does_not_restore_the_module_the_fix_edits() {
    if !common::sandboxes_or_skip() {
        return;
    }
    let src = common::project(&[
        ("calc/__init__.py", ""),
        ("calc/core.py", CORE),
        ("tests/__init__.py", ""),
        (
            "tests/test_mul.py",
            "from calc.core import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n",
        ),
    ]);
    let t = common::task(json!({
        "instance_id": "local__calc-3", "repo": "local/calc", "base_commit": "x", "patch": GOLD,
        "test_patch": "", "version": "1.0",
        "FAIL_TO_PASS": ["calc/core.py::calc.core.add"],
        "PASS_TO_PASS": ["tests/test_mul.py::test_mul"],
        "env": {"python": "3.11", "requirements": ["pytest==8.3.3"], "editable": false,
                "test_cmd": "python -m pytest -rA -p no:cacheprovider --doctest-modules calc tests",
                "test_directives": "none", "timeout_s": 120, "env": {"PYTHONPATH": "/testbed"}}}));
    assert_eq!(
        dojo_grade::guard::task_test_files(&t),
        ["tests/test_mul.py"],
        "the doctest's module is not a test file"
    );
    let env = EnvRegistry::default().resolve(&t).unwrap();
    let (pristine, venv) = match sandbox_for(src, &env).await {
        Ok(x) => x,
        Err(e) => return skip(format!("cannot build the pristine tree or venv: {e}")),
    };
    let opts = GradeOptions {
        timeout: Some(Duration::from_secs(60)),
        ..Default::default()
    };
    let grade =
        async |patch: &str| common::grade_fresh(&pristine, &venv, &t, &env, patch, &opts).await;

    let r = grade(GOLD).await;
    assert_eq!(
        r.outcome,
        Verdict::Resolved,
        "{:?}\n{}",
        r.error,
        r.test_output
    );
    assert!(
        r.test_infrastructure.is_empty(),
        "{:?}",
        r.test_infrastructure
    );
    assert!(
        r.test_output.contains("PASSED calc/core.py::calc.core.add"),
        "{}",
        r.test_output
    );

    // The fix plus an edit of the PASS_TO_PASS test file (a test file by the rule): that file
    // is restored, the fix is kept.
    let edit_test = format!(
        "{GOLD}diff --git a/tests/test_mul.py b/tests/test_mul.py\n--- a/tests/test_mul.py\n+++ b/tests/test_mul.py\n@@ -4,2 +4,2 @@\n def test_mul():\n-    assert mul(2, 3) == 6\n+    assert mul(2, 3) == 7\n"
    );
    let r = grade(&edit_test).await;
    assert_eq!(
        r.outcome,
        Verdict::Resolved,
        "{:?}\n{}",
        r.error,
        r.test_output
    );
    assert_eq!(
        (
            r.test_infrastructure[0].path.as_str(),
            r.test_infrastructure[0].kind
        ),
        ("tests/test_mul.py", InfraKind::TaskTestFile)
    );
}
