//! An eval script's reinstall (`python -m pip install -e .`) runs after the model patch in a
//! grading sandbox, as in the harness: a gold patch that changes the project's setup metadata
//! (its version and a console script) resolves only when the reinstall ran. It runs offline, in
//! the sandbox's private copy-on-write view of the pip-built environment; an agent's sandbox
//! (read-only venv) says in the log that it did not run, and the same patch fails there. A
//! patch that adds a dependency cannot be satisfied offline: pip says so in the log; with the
//! env's `reinstall_network = true` it is installed from the index (here one on loopback).
//!
//! Needs the sandbox's kernel features, uv and PyPI access (pip, setuptools, pytest for the env
//! build); otherwise SKIPPED (under `CI=true` a missing feature fails instead).

use std::time::Duration;

mod common;
use common::{ci, sandbox_for, skip};

use dojo_grade::{GradeOptions, Verdict, grade_in_sandbox};
use dojo_sandbox::{Sandbox, SandboxOptions};
use dojo_task::EnvRegistry;
use serde_json::json;

const BASE: &str = "1a1b2c3d4e5f60718293a4b5c6d7e8f901234567";
const SETUP: &str =
    "from setuptools import setup\nsetup(name='meta', version='0.1', packages=['meta'])\n";
const GOLD: &str = "diff --git a/setup.py b/setup.py\n--- a/setup.py\n+++ b/setup.py\n@@ -1,2 +1,2 @@\n from setuptools import setup\n-setup(name='meta', version='0.1', packages=['meta'])\n+setup(name='meta', version='0.2', packages=['meta'], entry_points={'console_scripts': ['meta-hello=meta:hello']})\n";
const TEST_PATCH: &str = "diff --git a/tests/test_meta.py b/tests/test_meta.py\nnew file mode 100644\n--- /dev/null\n+++ b/tests/test_meta.py\n@@ -0,0 +1,10 @@\n+import importlib.metadata as m\n+import shutil\n+\n+\n+def test_version():\n+    assert m.version(\"meta\") == \"0.2\"\n+\n+\n+def test_script():\n+    assert shutil.which(\"meta-hello\")\n";

fn eval_script() -> String {
    format!(
        "#!/bin/bash\nset -uxo pipefail\nsource /opt/miniconda3/bin/activate\nconda activate testbed\ncd /testbed\ngit status\nsource /opt/miniconda3/bin/activate\nconda activate testbed\npython -m pip install -e .\ngit checkout {BASE} tests/test_meta.py\ngit apply -v - <<'EOF_114329324912'\n{TEST_PATCH}\nEOF_114329324912\n: '>>>>> Start Test Output'\npytest -rA -p no:cacheprovider tests/test_meta.py\n: '>>>>> End Test Output'\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reinstall_after_the_model_patch_picks_up_new_metadata() {
    if !common::sandboxes_or_skip() {
        return;
    }
    let mut reg = EnvRegistry::default();
    reg.add_text(
        "meta.toml",
        "schema_version = 3\nrepo = \"local/meta\"\n[default]\npython = \"3.11\"\ninstaller = \"pip\"\nrequirements = [\"pytest==8.3.3\"]\ntimeout_s = 120\n",
    )
    .unwrap();
    let t = common::task(json!({"instance_id": "local__meta-1", "repo": "local/meta",
        "base_commit": BASE, "patch": GOLD, "test_patch": TEST_PATCH, "version": "0.1",
        "FAIL_TO_PASS": ["tests/test_meta.py::test_version", "tests/test_meta.py::test_script"],
        "PASS_TO_PASS": [], "eval_script": eval_script()}));
    let env = reg.resolve(&t).unwrap();
    assert_eq!(env.spec.installer, dojo_sandbox::pyenv::Installer::Pip);
    let src = common::project(&[
        ("setup.py", SETUP),
        ("meta/__init__.py", "def hello():\n    print('hello')\n"),
    ]);
    let (pristine, venv) = match sandbox_for(src, &env).await {
        Ok(x) => x,
        Err(e) => return skip(format!("cannot build the pristine tree or venv: {e}")),
    };
    let opts = GradeOptions {
        timeout: Some(Duration::from_secs(90)),
        ..Default::default()
    };
    let grade = async |writable: bool, patch: &str| {
        let so = SandboxOptions {
            writable_venv: writable,
            ..Default::default()
        };
        let mut sb = Sandbox::create(&pristine, Some(&venv), &so).await.unwrap();
        let r = grade_in_sandbox(&mut sb, &t, &env, Some(patch), &opts).await;
        // The shared environment is untouched by the sandbox's reinstall.
        let out = sb
            .exec(&dojo_sandbox::ExecRequest::shell(
                "test -w /venv/bin && echo rw || echo ro",
            ))
            .await
            .unwrap();
        sb.teardown().await.unwrap();
        (r, out.stdout_lossy().trim().to_string())
    };

    let (r, rw) = grade(true, GOLD).await;
    assert_eq!(rw, "rw");
    assert_eq!(
        r.outcome,
        Verdict::Resolved,
        "{:?}\n{}",
        r.error,
        r.test_output
    );
    assert!(
        r.test_output.contains("Successfully installed meta-0.2") && !skipped(&r.test_output),
        "{}",
        r.test_output
    );
    assert!(
        !venv.path.join("bin/meta-hello").exists(),
        "the reinstall wrote into the shared venv"
    );

    let (r, ro) = grade(false, GOLD).await;
    assert_eq!(ro, "ro");
    assert_ne!(r.outcome, Verdict::Resolved, "{}", r.test_output);
    assert!(skipped(&r.test_output), "{}", r.test_output);

    // A patch that adds a dependency (as pylint-4661 adds `appdirs`): offline, pip cannot
    // satisfy it, says so in the log, and the tests run against the old install (unresolved).
    // Only `reinstall_network = true` (the index at grading time) could install it.
    let new_dep = GOLD.replace(
        "'meta-hello=meta:hello']})",
        "'meta-hello=meta:hello']}, install_requires=['dojo-absent-dependency'])",
    );
    assert_ne!(new_dep, GOLD);
    let (r, _) = grade(true, &new_dep).await;
    assert_ne!(r.outcome, Verdict::Resolved, "{}", r.test_output);
    assert!(
        r.test_output.contains("dojo-absent-dependency") && !skipped(&r.test_output),
        "{}",
        r.test_output
    );
    // The report says the tests ran on the old build.
    assert!(r.reinstall_failed, "{}", r.test_output);
    assert!(!r.infra_failure);
    // The same failure with a patch that changes a C source: its change is not in what the
    // tests would import, so it is not graded (an environment error, not the agent's failure).
    let with_c = format!(
        "{new_dep}{}",
        common::new_files(&[("meta/_speed.c", "int speed(void) { return 1; }\n")])
    );
    let (r, _) = grade(true, &with_c).await;
    assert_eq!(
        (r.outcome, r.error_kind, r.infra_failure),
        (Verdict::Error, Some(dojo_grade::ErrorKind::EnvBuild), true),
        "{:?}\n{}",
        r.error,
        r.test_output
    );
    assert!(
        r.error.as_deref().unwrap_or("").contains("meta/_speed.c"),
        "{:?}",
        r.error
    );
    // A reinstall that works is not flagged.
    let (r, _) = grade(true, GOLD).await;
    assert!(!r.reinstall_failed, "{}", r.test_output);

    // `reinstall_network = true`: the grading sandbox has the network and the reinstall the
    // index, here one on the host's loopback that holds the new dependency, reached through
    // slirp4netns's gateway with `host_loopback` (an operator's local mirror).
    if dojo_sandbox::usernet::slirp4netns().is_none() {
        assert!(!ci(), "slirp4netns is missing (.ci/run installs it)");
        eprintln!("SKIPPED (reinstall_network): slirp4netns not found");
        return;
    }
    reg.add_text(
        "meta-net.toml",
        "schema_version = 3\nrepo = \"local/meta\"\n[default]\npython = \"3.11\"\ninstaller = \"pip\"\nrequirements = [\"pytest==8.3.3\"]\ntimeout_s = 120\n[versions.\"0.1\"]\nreinstall_network = true\n",
    )
    .unwrap();
    let mut net_env = reg.resolve(&t).unwrap();
    assert!(net_env.reinstall_network);
    assert_eq!(net_env.spec, env.spec, "the same environment is built");
    let port = serve_index(wheel("dojo-dep", "dojo_dep"));
    net_env.env.insert(
        "PIP_INDEX_URL".into(),
        format!("http://10.0.2.2:{port}/simple/"),
    );
    // pip trusts plain http only on localhost; the gateway is not, to pip.
    net_env
        .env
        .insert("PIP_TRUSTED_HOST".into(), "10.0.2.2".into());
    // The loopback index has no setuptools for an isolated build: use the environment's.
    net_env
        .env
        .insert("PIP_NO_BUILD_ISOLATION".into(), "0".into());
    let with_dep = GOLD.replace(
        "'meta-hello=meta:hello']})",
        "'meta-hello=meta:hello']}, install_requires=['dojo-dep'])",
    );
    let mut net_venv = venv.clone();
    net_venv.runtime.network = true; // what dojo-grade's batch does for reinstall_network
    net_venv.runtime.host_loopback = true;
    let so = SandboxOptions {
        writable_venv: true,
        ..Default::default()
    };
    let mut sb = Sandbox::create(&pristine, Some(&net_venv), &so)
        .await
        .unwrap();
    let r = grade_in_sandbox(&mut sb, &t, &net_env, Some(&with_dep), &opts).await;
    sb.teardown().await.unwrap();
    assert_eq!(
        r.outcome,
        Verdict::Resolved,
        "{:?}\n{}",
        r.error,
        r.test_output
    );
    assert!(r.test_output.contains("dojo-dep-1.0"), "{}", r.test_output);
}

/// A pure-Python wheel of `dist` (module `module`), built with the host's Python.
fn wheel(dist: &str, module: &str) -> (String, Vec<u8>) {
    let d = tempfile::tempdir().unwrap();
    let name = format!("{module}-1.0-py3-none-any.whl");
    let path = d.path().join(&name);
    let script = format!(
        "import zipfile\nz = zipfile.ZipFile({path:?}, 'w')\nz.writestr('{module}/__init__.py', 'X = 1\\n')\nz.writestr('{module}-1.0.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: {dist}\\nVersion: 1.0\\n')\nz.writestr('{module}-1.0.dist-info/WHEEL', 'Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')\nz.writestr('{module}-1.0.dist-info/RECORD', '')\nz.close()\n",
        path = path.display().to_string()
    );
    let st = std::process::Command::new("python3")
        .args(["-c", &script])
        .status()
        .unwrap();
    assert!(st.success());
    (name, std::fs::read(&path).unwrap())
}

/// A package index on loopback holding one wheel (PEP 503 HTML); returns its port. Serves
/// until the test process ends.
fn serve_index((file, bytes): (String, Vec<u8>)) -> u16 {
    use std::io::{BufRead, BufReader, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            let mut r = BufReader::new(&conn);
            let mut first = String::new();
            if r.read_line(&mut first).is_err() {
                continue;
            }
            let mut h = String::new();
            while r.read_line(&mut h).is_ok_and(|n| n > 2) {
                h.clear();
            }
            let path = first.split_whitespace().nth(1).unwrap_or("");
            let (ctype, body) = if path.starts_with("/simple/") && !path.ends_with(".whl") {
                let page =
                    format!("<html><body><a href=\"/files/{file}\">{file}</a></body></html>");
                ("text/html", page.into_bytes())
            } else if path == format!("/files/{file}") {
                ("application/octet-stream", bytes.clone())
            } else {
                ("text/plain", Vec::new())
            };
            let status = if body.is_empty() {
                "404 Not Found"
            } else {
                "200 OK"
            };
            let mut w = &conn;
            let _ = write!(
                w,
                "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = w.write_all(&body);
        }
    });
    port
}

/// The log line the skipped reinstall prints (the command itself is echoed too, with that text
/// inside its `else` branch).
fn skipped(log: &str) -> bool {
    log.lines()
        .any(|l| l.starts_with("dojo: reinstall not run"))
}
