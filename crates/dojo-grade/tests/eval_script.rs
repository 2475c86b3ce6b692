//! A task that carries a SWE-bench `eval_script` is graded the way the harness runs it: the
//! script's commands before its test command (here an `export` the tests need and a checkout of
//! a test file) run after the model patch and before the test patch, in a real sandbox with
//! real pytest. The script has the shape of the real ones in `../shared/data/swebench`
//! (conda activation, git diagnostics, `pip install -e .`, checkout, here-document).
//!
//! Needs the sandbox's kernel features, uv and PyPI access (for pytest); otherwise SKIPPED
//! (under `CI=true` a missing feature fails instead).

use std::time::Duration;

mod common;
use common::{sandbox_for, skip};

use dojo_grade::{GradeOptions, Verdict};
use dojo_task::EnvRegistry;
use serde_json::json;

const BASE: &str = "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567";
const CALC: &str = "def add(a, b):\n    return a - b\n";
const GOLD: &str = "diff --git a/calc/core.py b/calc/core.py\n--- a/calc/core.py\n+++ b/calc/core.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n";
const TEST_PATCH: &str = "diff --git a/tests/test_add.py b/tests/test_add.py\nnew file mode 100644\n--- /dev/null\n+++ b/tests/test_add.py\n@@ -0,0 +1,10 @@\n+import os\n+from calc.core import add\n+\n+\n+def test_add():\n+    assert add(2, 3) == 5\n+\n+\n+def test_env():\n+    assert os.environ.get(\"CALC_EVAL_SCRIPT\") == \"1\"\n";

fn eval_script() -> String {
    format!(
        "#!/bin/bash\nset -uxo pipefail\nsource /opt/miniconda3/bin/activate\nconda activate testbed\ncd /testbed\ngit config --global --add safe.directory /testbed\ncd /testbed\ngit status\ngit show\ngit -c core.fileMode=false diff {BASE}\nsource /opt/miniconda3/bin/activate\nconda activate testbed\npython -m pip install -e .\nexport CALC_EVAL_SCRIPT=1\ngit checkout {BASE} tests/test_other.py\ngit apply -v - <<'EOF_114329324912'\n{TEST_PATCH}\nEOF_114329324912\n: '>>>>> Start Test Output'\npython -m pytest -rA -p no:cacheprovider tests/test_add.py tests/test_other.py\n: '>>>>> End Test Output'\ngit checkout {BASE} tests/test_other.py\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_script_commands_run_after_the_model_patch() {
    if !common::sandboxes_or_skip() {
        return;
    }
    let t = common::task(json!({"instance_id": "local__calc-3", "repo": "local/calc",
        "base_commit": BASE, "patch": GOLD, "test_patch": TEST_PATCH, "version": "1.0",
        "FAIL_TO_PASS": ["tests/test_add.py::test_add", "tests/test_add.py::test_env"],
        "PASS_TO_PASS": ["tests/test_other.py::test_other"],
        "eval_script": eval_script(),
        "env": {"python": "3.11", "requirements": ["pytest==8.3.3"], "editable": false,
                "timeout_s": 120, "env": {"PYTHONPATH": "/testbed"}}}));
    let env = EnvRegistry::default().resolve(&t).unwrap();
    assert!(env.origin.ends_with("+ eval_script"), "{}", env.origin);
    let src = common::project(&[
        ("calc/__init__.py", ""),
        ("calc/core.py", CALC),
        ("tests/__init__.py", ""),
        (
            "tests/test_other.py",
            "def test_other():\n    assert True\n",
        ),
    ]);
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

    // The gold patch resolves only because the script's `export` reached the test command.
    let r = grade(GOLD).await;
    assert_eq!(
        r.outcome,
        Verdict::Resolved,
        "{:?}\n{}",
        r.error,
        r.test_output
    );
    // The log shows the commands, and says why the reinstall did not run.
    for want in [
        "+ export CALC_EVAL_SCRIPT=1",
        "+ git checkout dojo-base tests/test_other.py",
        "dojo: reinstall not run",
    ] {
        assert!(
            r.test_output.contains(want),
            "{want:?} missing:\n{}",
            r.test_output
        );
    }
    assert!(!r.test_output.contains("conda"), "{}", r.test_output);

    // A model patch that breaks the other test file is undone before the tests run (by the
    // script's checkout, as in the harness, and by the restore of the task's test files).
    let broken_other = format!(
        "{GOLD}diff --git a/tests/test_other.py b/tests/test_other.py\n--- a/tests/test_other.py\n+++ b/tests/test_other.py\n@@ -1,2 +1,2 @@\n def test_other():\n-    assert True\n+    assert False\n"
    );
    let r = grade(&broken_other).await;
    assert_eq!(
        r.outcome,
        Verdict::Resolved,
        "{:?}\n{}",
        r.error,
        r.test_output
    );
}
