//! The grading flow for real: a small project in a namespace sandbox with a uv-built venv and
//! real pytest, graded with the gold patch and every kind of bad input (empty, binary, escaping
//! and non-applying patches, a broken test patch, a hanging test run), then validated. Also the
//! bundled benchmark's first task end to end when its file exists.
//!
//! Needs the sandbox's kernel features, uv and PyPI access (for pytest); otherwise SKIPPED
//! (under `CI=true` a missing feature fails instead).

use std::path::PathBuf;
use std::time::Duration;

mod common;
use common::{setup_home, skip};

use dojo_grade::{
    ErrorKind, GradeOptions, Parser, ResolvedStatus, Semantics, Verdict, eval_report_from_log,
    grade_in_sandbox, validate_in_sandbox,
};
use dojo_sandbox::{PristineStore, PythonEnv, Sandbox, SandboxOptions, Source};
use dojo_task::{EnvRegistry, RepoEnv, Task};
use serde_json::json;

const CALC: &str = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n";
const GOLD: &str = "diff --git a/calc/core.py b/calc/core.py\n--- a/calc/core.py\n+++ b/calc/core.py\n@@ -1,5 +1,5 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n \n \n def mul(a, b):\n";
const TEST_PATCH: &str = "diff --git a/tests/test_add.py b/tests/test_add.py\nnew file mode 100644\n--- /dev/null\n+++ b/tests/test_add.py\n@@ -0,0 +1,9 @@\n+from calc.core import add\n+\n+\n+def test_add():\n+    assert add(2, 3) == 5\n+\n+\n+def test_add_zero():\n+    assert add(0, 0) == 0\n";

fn project() -> PathBuf {
    let d = tempfile::tempdir().unwrap().keep();
    for (p, c) in [
        ("calc/__init__.py", ""),
        ("calc/core.py", CALC),
        ("tests/__init__.py", ""),
        (
            "tests/test_mul.py",
            "from calc.core import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n",
        ),
    ] {
        let f = d.join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, c).unwrap();
    }
    d
}

fn task(f2p: &[&str]) -> Task {
    task_with_cmd(f2p, "python -m pytest -rA -p no:cacheprovider")
}

fn task_with_cmd(f2p: &[&str], test_cmd: &str) -> Task {
    let row = json!({"instance_id": "local__calc-1", "repo": "local/calc", "base_commit": "x", "patch": GOLD,
        "test_patch": TEST_PATCH, "version": "1.0",
        "FAIL_TO_PASS": f2p, "PASS_TO_PASS": ["tests/test_add.py::test_add_zero"],
        "env": {"python": "3.11", "requirements": ["pytest==8.3.3"], "editable": false,
                "test_cmd": test_cmd, "timeout_s": 120,
                "env": {"PYTHONPATH": "/testbed"}}});
    let loc = dojo_task::Location {
        file: "test".into(),
        unit: "line",
        index: 1,
    };
    Task::from_row(row.as_object().unwrap().clone(), &loc).unwrap()
}

async fn sandbox_for(
    src: PathBuf,
    env: &RepoEnv,
) -> Result<(dojo_sandbox::Pristine, PythonEnv), String> {
    let p = PristineStore::open()
        .and_then(|s| s.build(&Source::Dir { path: src }))
        .map_err(|e| e.to_string())?;
    let venv = PythonEnv::build_async(&env.spec, Some(&p))
        .await
        .map_err(|e| e.to_string())?;
    Ok((p, venv))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grading_flow_and_bad_input_in_a_real_sandbox() {
    if !common::sandboxes_or_skip() {
        return;
    }
    let t = task(&["tests/test_add.py::test_add"]);
    let env = EnvRegistry::default().resolve(&t).unwrap();
    let (pristine, venv) = match sandbox_for(project(), &env).await {
        Ok(x) => x,
        Err(e) => return skip(format!("cannot build the pristine tree or venv: {e}")),
    };
    let opts = GradeOptions {
        timeout: Some(Duration::from_secs(60)),
        ..Default::default()
    };
    let grade = async |patch: Option<&str>, t: &Task, opts: &GradeOptions| {
        let mut sb = Sandbox::create(&pristine, Some(&venv), &SandboxOptions::default())
            .await
            .unwrap();
        let r = grade_in_sandbox(&mut sb, t, &env, patch, opts).await;
        sb.teardown().await.unwrap();
        r
    };

    // Gold: resolved, and re-grading the written log gives the same verdict.
    let r = grade(Some(GOLD), &t, &opts).await;
    assert_eq!(
        r.outcome,
        Verdict::Resolved,
        "{:?}\n{}",
        r.error,
        r.test_output
    );
    assert_eq!(r.resolution_status, Some(ResolvedStatus::Full));
    let regraded = eval_report_from_log(
        &t.instance_id,
        Some(GOLD),
        &r.test_output,
        Parser::Pytest,
        &dojo_grade::GoldLists {
            fail_to_pass: t.f2p(),
            pass_to_pass: t.p2p(),
            ..Default::default()
        },
        dojo_grade::EvalType::PassAndFail,
        Semantics::Classic,
    );
    assert_eq!(regraded.tests_status, r.tests_status);
    save_log("gold", &r.test_output, &t);

    // A patch too big for the environment (over 96 KiB) reaches the sandbox on stdin instead,
    // and grades the same.
    let mut big = GOLD.to_string();
    big.push_str("diff --git a/big.txt b/big.txt\nnew file mode 100644\n--- /dev/null\n+++ b/big.txt\n@@ -0,0 +1,2000 @@\n");
    for i in 0..2000 {
        big.push_str(&format!("+{i:060}\n"));
    }
    assert!(big.len() > 100 << 10);
    let r = grade(Some(&big), &t, &opts).await;
    assert_eq!(
        (r.outcome, r.patch_apply_method.as_deref()),
        (Verdict::Resolved, Some("git_apply")),
        "{:?}\n{}",
        r.error,
        r.test_output
    );

    // No patch: not run.
    assert_eq!(grade(None, &t, &opts).await.outcome, Verdict::EmptyPatch);
    assert_eq!(
        grade(Some("  \n"), &t, &opts).await.outcome,
        Verdict::EmptyPatch
    );

    // A patch that does not apply: the agent's error, not infrastructure.
    let r = grade(
        Some(&GOLD.replace("return a - b", "return a / b")),
        &t,
        &opts,
    )
    .await;
    assert_eq!(
        (r.outcome, r.error_kind, r.infra_failure),
        (Verdict::Error, Some(ErrorKind::PatchApply), false)
    );

    // A task whose test patch does not apply: the task's fault (infrastructure), named.
    let mut broken = t.clone();
    broken.test_patch = "diff --git a/tests/test_mul.py b/tests/test_mul.py\n--- a/tests/test_mul.py\n+++ b/tests/test_mul.py\n@@ -1,2 +1,2 @@\n-no such line\n+x\n nor this\n".into();
    let r = grade(Some(GOLD), &broken, &opts).await;
    assert_eq!(
        (r.outcome, r.error_kind, r.infra_failure),
        (Verdict::Error, Some(ErrorKind::TestPatchApply), true),
        "{:?}",
        r.error
    );
    assert!(
        r.error.as_deref().unwrap().contains("git apply"),
        "{:?}",
        r.error
    );

    // Binary hunks and paths outside the repository: clear verdicts.
    let bin = "diff --git a/x.bin b/x.bin\nnew file mode 100644\nindex 0000000..e69de29\nGIT binary patch\nliteral 3\nKcmZQzU|;|M00aO5\n\nliteral 0\nHcmV?d00001\n";
    assert_eq!(
        grade(Some(bin), &t, &opts).await.error_kind,
        Some(ErrorKind::BadPatch)
    );
    let escape = "diff --git a/../../etc/x b/../../etc/x\nnew file mode 100644\n--- /dev/null\n+++ b/../../etc/x\n@@ -0,0 +1 @@\n+x\n";
    assert_eq!(
        grade(Some(escape), &t, &opts).await.error_kind,
        Some(ErrorKind::BadPatch)
    );

    // A model that writes the test file itself cannot pre-empt the test patch.
    let cheat = "diff --git a/tests/test_add.py b/tests/test_add.py\nnew file mode 100644\n--- /dev/null\n+++ b/tests/test_add.py\n@@ -0,0 +1,5 @@\n+def test_add():\n+    pass\n+\n+def test_add_zero():\n+    pass\n";
    let r = grade(Some(cheat), &t, &opts).await;
    assert_eq!(
        r.outcome,
        Verdict::Unresolved,
        "{:?}\n{}",
        r.error,
        r.test_output
    );
    save_log("cheat", &r.test_output, &t);

    // Non-UTF-8 output from the test command is graded (decoded lossily), not a crash.
    let noisy = task_with_cmd(
        &["tests/test_add.py::test_add"],
        "printf '\\377\\376 raw bytes\\n'; python -m pytest -rA -p no:cacheprovider",
    );
    let noisy_env = EnvRegistry::default().resolve(&noisy).unwrap();
    let mut sb = Sandbox::create(&pristine, Some(&venv), &SandboxOptions::default())
        .await
        .unwrap();
    let r = grade_in_sandbox(&mut sb, &noisy, &noisy_env, Some(GOLD), &opts).await;
    sb.teardown().await.unwrap();
    assert_eq!(
        r.outcome,
        Verdict::Resolved,
        "{:?}\n{}",
        r.error,
        r.test_output
    );
    assert!(r.test_output.contains('\u{fffd}'), "{}", r.test_output);
    save_log("non_utf8", &r.test_output, &t);

    // A FAIL_TO_PASS test that no longer exists: unresolved, named in the failures.
    let gone = task(&[
        "tests/test_add.py::test_add",
        "tests/test_add.py::test_gone",
    ]);
    let r = grade(Some(GOLD), &gone, &opts).await;
    assert_eq!(r.outcome, Verdict::Unresolved);
    assert_eq!(
        r.tests_status.as_ref().unwrap().fail_to_pass.failure,
        ["tests/test_add.py::test_gone"]
    );

    // A hanging test run: timeout, an infrastructure error.
    let hang = GOLD.replace("+    return a + b", "+    while True:\n+        pass");
    let hang = hang.replace("@@ -1,5 +1,5 @@", "@@ -1,5 +1,6 @@");
    let short = GradeOptions {
        timeout: Some(Duration::from_secs(3)),
        ..Default::default()
    };
    let r = grade(Some(&hang), &t, &short).await;
    assert_eq!(
        (r.outcome, r.error_kind, r.infra_failure),
        (Verdict::Error, Some(ErrorKind::Timeout), true),
        "{}",
        r.test_output
    );

    // Validation: test patch alone fails F2P, gold passes; lists derived.
    let mut sb = Sandbox::create(&pristine, Some(&venv), &SandboxOptions::default())
        .await
        .unwrap();
    let v = validate_in_sandbox(&mut sb, &t, &env, &opts).await;
    sb.teardown().await.unwrap();
    assert!(v.ok, "{:?}", v.problems);
    assert_eq!(v.derived_fail_to_pass, ["tests/test_add.py::test_add"]);
    assert_eq!(v.derived_pass_to_pass, ["tests/test_add.py::test_add_zero"]);
}

/// Logs our runs produce, for the differential test to compare with the official parser.
fn save_log(name: &str, log: &str, t: &Task) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dojo-grade-logs");
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join(format!("{name}.txt")), log);
    let gold = json!({"FAIL_TO_PASS": t.f2p(), "PASS_TO_PASS": t.p2p()});
    let _ = std::fs::write(dir.join(format!("{name}.gold.json")), gold.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bundled_benchmark_task_validates() {
    setup_home();
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tasksets/mini/tasks.jsonl"
    ));
    if !path.exists() {
        return skip(format!("{} not present", path.display()));
    }
    if !common::sandboxes_or_skip() {
        return;
    }
    let tasks = dojo_task::load_tasks(&path).unwrap();
    let t = tasks
        .iter()
        .find(|t| t.repo == "pytest-dev/iniconfig")
        .unwrap_or(&tasks[0])
        .clone();
    let env = EnvRegistry::embedded().unwrap().resolve(&t).unwrap();
    let (t2, e2) = (t.clone(), env.clone());
    let prepared = match tokio::task::spawn_blocking(move || {
        dojo_task::prepare(&t2, &e2, &Default::default())
    })
    .await
    .unwrap()
    {
        Ok(p) => p,
        Err(e) => {
            return skip(format!(
                "cannot prepare {} (network or sandbox): {e}",
                t.instance_id
            ));
        }
    };
    let mut sb = Sandbox::create(
        &prepared.pristine,
        Some(&prepared.env),
        &SandboxOptions::default(),
    )
    .await
    .unwrap();
    let v = validate_in_sandbox(&mut sb, &t, &env, &GradeOptions::default()).await;
    sb.teardown().await.unwrap();
    assert!(v.ok, "{}: {:?}", t.instance_id, v.problems);
    // The frozen lists are derived again, exactly (ids the parser cuts at whitespace are
    // left out on both sides, see `derive_lists`).
    let sorted = |xs: &[String]| {
        let mut v = xs.to_vec();
        v.sort();
        v
    };
    assert_eq!(
        sorted(&v.derived_fail_to_pass),
        sorted(t.f2p()),
        "{}",
        t.instance_id
    );
    assert_eq!(
        sorted(&v.derived_pass_to_pass),
        sorted(t.p2p()),
        "{}",
        t.instance_id
    );
}
