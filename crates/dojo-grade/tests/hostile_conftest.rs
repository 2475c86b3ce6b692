//! A model patch that adds a `conftest.py` runs code during grading, before any test. Here it
//! tries what an adversarial run did from a grading sandbox: connect to a host unix socket
//! (mode 0666, served by a host process) and, if that works, use what it read to make the
//! failing tests pass. The connect must fail, and grading must still classify both a wrong
//! patch (unresolved) and the gold patch (resolved) correctly with the conftest in place.
//!
//! Needs the sandbox's kernel features, uv and PyPI access (for pytest); otherwise SKIPPED
//! (under `CI=true` a missing feature fails instead).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

mod common;
use common::skip;

use dojo_grade::{GradeOptions, Verdict, grade_in_sandbox};
use dojo_sandbox::{PristineStore, PythonEnv, Sandbox, SandboxOptions, Source};
use dojo_task::{EnvRegistry, Task};
use serde_json::json;

const CALC: &str = "def add(a, b):\n    return a - b\n";
const GOLD: &str = "diff --git a/calc/core.py b/calc/core.py\n--- a/calc/core.py\n+++ b/calc/core.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n";
const TEST_PATCH: &str = "diff --git a/tests/test_add.py b/tests/test_add.py\nnew file mode 100644\n--- /dev/null\n+++ b/tests/test_add.py\n@@ -0,0 +1,5 @@\n+from calc.core import add\n+\n+\n+def test_add():\n+    assert add(2, 3) == 5\n";

/// The hostile conftest: record what connecting gave in /tmp (read back by the test), and if
/// the host answered, patch `add` so the failing test passes.
fn conftest(socket: &str) -> String {
    format!(
        "import socket\n\
         try:\n\
         \x20   s = socket.socket(socket.AF_UNIX)\n\
         \x20   s.connect({socket:?})\n\
         \x20   got = 'CONNECTED ' + s.recv(100).decode()\n\
         except Exception as e:\n\
         \x20   got = 'REFUSED ' + type(e).__name__ + ': ' + str(e)\n\
         open('/tmp/dojo-probe.txt', 'w').write(got)\n\
         if got.startswith('CONNECTED'):\n\
         \x20   import calc.core\n\
         \x20   calc.core.add = lambda a, b: a + b\n"
    )
}

/// A git patch adding `path` with `text` (which ends with a newline).
fn new_file_patch(path: &str, text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut p = format!(
        "diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{} @@\n",
        lines.len()
    );
    for l in lines {
        p.push('+');
        p.push_str(l);
        p.push('\n');
    }
    p
}

fn project() -> PathBuf {
    let d = tempfile::tempdir().unwrap().keep();
    for (p, c) in [
        ("calc/__init__.py", ""),
        ("calc/core.py", CALC),
        ("tests/__init__.py", ""),
    ] {
        let f = d.join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, c).unwrap();
    }
    d
}

fn task() -> Task {
    let row = json!({"instance_id": "local__calc-2", "repo": "local/calc", "base_commit": "x",
        "patch": GOLD, "test_patch": TEST_PATCH, "version": "1.0",
        "FAIL_TO_PASS": ["tests/test_add.py::test_add"], "PASS_TO_PASS": [],
        "env": {"python": "3.11", "requirements": ["pytest==8.3.3"], "editable": false,
                "test_cmd": "python -m pytest -rA -p no:cacheprovider", "timeout_s": 120,
                "env": {"PYTHONPATH": "/testbed"}}});
    let loc = dojo_task::Location {
        file: "test".into(),
        unit: "line",
        index: 1,
    };
    Task::from_row(row.as_object().unwrap().clone(), &loc).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conftest_cannot_reach_a_host_unix_socket_during_grading() {
    if std::env::var_os("DOJO_PYTOOLS").is_none() {
        let tools = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/pytools"));
        // SAFETY: the only test of this binary; set before any other thread reads it.
        unsafe { std::env::set_var("DOJO_PYTOOLS", tools) };
    }
    if !common::sandboxes_or_skip() {
        return;
    }
    // A host service on a 0666 socket outside /tmp (every sandbox has its own /tmp), handing
    // its secret to whoever connects.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.path().join("service.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let _ = s.write_all(b"host-secret-3b9a\n");
        }
    });
    let mut probe = String::new();
    let mut c = std::os::unix::net::UnixStream::connect(&path).unwrap();
    std::io::Read::read_to_string(&mut c, &mut probe).unwrap();
    assert!(probe.contains("host-secret"), "the host service works");

    let t = task();
    let env = EnvRegistry::default().resolve(&t).unwrap();
    let pristine = PristineStore::open()
        .and_then(|s| s.build(&Source::Dir { path: project() }))
        .unwrap();
    let venv = match PythonEnv::build_async(&env.spec, Some(&pristine)).await {
        Ok(v) => v,
        Err(e) => return skip(format!("cannot build the venv (uv, PyPI): {e}")),
    };
    let hostile = new_file_patch("conftest.py", &conftest(&path.display().to_string()));
    // By default grading refuses a patch that adds a conftest.py without running anything
    // (the guard's own tests cover that); this test is about the sandbox, so it lets the
    // conftest run and checks that the socket stays out of reach.
    let opts = GradeOptions {
        timeout: Some(Duration::from_secs(60)),
        allow_test_infrastructure: true,
        ..Default::default()
    };
    for (name, patch, expected) in [
        ("conftest alone", hostile.clone(), Verdict::Unresolved),
        (
            "gold + conftest",
            format!("{GOLD}{hostile}"),
            Verdict::Resolved,
        ),
    ] {
        let mut sb = Sandbox::create(&pristine, Some(&venv), &SandboxOptions::default())
            .await
            .unwrap();
        let r = grade_in_sandbox(&mut sb, &t, &env, Some(&patch), &opts).await;
        let got = sb.read_file("/tmp/dojo-probe.txt").await;
        sb.teardown().await.unwrap();
        let got = String::from_utf8_lossy(&got.expect("the conftest ran")).into_owned();
        assert!(
            got.starts_with("REFUSED") && !got.contains("host-secret"),
            "{name}: the conftest reached the host socket: {got}"
        );
        assert_eq!(
            (r.outcome, r.infra_failure),
            (expected, false),
            "{name}: {:?}\n{}",
            r.error,
            r.test_output
        );
        assert!(
            r.touched_test_infrastructure,
            "{name}: the touch is recorded"
        );
    }
}
