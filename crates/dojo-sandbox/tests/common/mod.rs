//! Shared helpers for the sandbox tests: a private `$DOJO_HOME`, small source trees, and a skip
//! check for hosts without the kernel features.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use dojo_sandbox::{ExecRequest, Pristine, PristineStore, Sandbox, SandboxOptions, Source};

/// Point `$DOJO_HOME` at a per-process scratch dir (once; every test in a binary shares it).
pub fn home() -> &'static Path {
    static H: OnceLock<PathBuf> = OnceLock::new();
    H.get_or_init(|| {
        // A helper process a test starts (tests/sweep.rs) shares its parent's home.
        let h = match std::env::var_os("DOJO_TEST_SHARED_HOME") {
            Some(p) => std::path::PathBuf::from(p),
            None => {
                // Environments and pristine trees come to ~100 MB a binary: removed when the
                // test binary exits (not by a helper process that shares it).
                // SAFETY: registers a plain function; it runs once, at normal process exit.
                unsafe { libc::atexit(remove_scratch) };
                scratch().join("home")
            }
        };
        std::fs::create_dir_all(&h).unwrap();
        // SAFETY: set once, before any sandbox is created, by the first test to get here.
        unsafe { std::env::set_var("DOJO_HOME", &h) };
        h
    })
}

/// This process's scratch root: `home/` (`$DOJO_HOME`) and the source trees of [`tree`] (a
/// helper process that shares its parent's home puts its trees beside it too).
fn scratch() -> PathBuf {
    std::env::temp_dir().join(format!("dojo-sbx-test-{}", std::process::id()))
}

extern "C" fn remove_scratch() {
    dojo_sandbox::trash::flush();
    dojo_sandbox::trash::remove_all(&scratch());
}

/// `Some(reason)` when the namespace backend cannot run here.
pub fn skip_reason() -> Option<String> {
    home();
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        return None;
    }
    if !dojo_sandbox::doctor::namespaces_usable() {
        return Some("user/mount/pid/net namespaces or overlayfs(userxattr) unavailable".into());
    }
    None
}

#[macro_export]
macro_rules! skip_unless_ns {
    () => {
        if let Some(r) = common::skip_reason() {
            eprintln!("SKIPPED: {r}");
            return;
        }
    };
}

/// Skip the test (with the reason on stderr) when no uv can be found ([`ensure_uv`]).
#[macro_export]
macro_rules! skip_unless_uv {
    () => {
        if !common::ensure_uv() {
            eprintln!("SKIPPED: uv not found (DOJO_UV / DOJO_PYTOOLS / PATH)");
            return;
        }
    };
}

/// A directory with the given files (relative path, contents).
pub fn tree(files: &[(&str, &str)]) -> PathBuf {
    let d = tempfile::Builder::new()
        .prefix("src-")
        // Beside `$DOJO_HOME`: the scratch root of the process that owns it.
        .tempdir_in(home().parent().unwrap())
        .unwrap()
        .keep();
    for (p, c) in files {
        let f = d.join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, c).unwrap();
    }
    d
}

/// The pristine tree of a directory with the given files.
#[allow(dead_code)]
pub fn pristine_of(files: &[(&str, &str)]) -> Pristine {
    PristineStore::open()
        .unwrap()
        .build(&Source::Dir { path: tree(files) })
        .unwrap()
}

/// The environment of `spec` over `p`; `None` (SKIPPED printed) when no package index can be
/// reached for its build dependencies outside CI.
#[allow(dead_code)]
pub async fn build_env_or_skip(
    spec: &dojo_sandbox::PythonEnvSpec,
    p: &Pristine,
) -> Option<dojo_sandbox::PythonEnv> {
    match dojo_sandbox::PythonEnv::build_async(spec, Some(p)).await {
        Ok(e) => Some(e),
        Err(e)
            if std::env::var("CI").as_deref() != Ok("true")
                && e.to_string().contains("setuptools") =>
        {
            eprintln!("SKIPPED: no package index reachable: {e}");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

pub fn small_pristine() -> Pristine {
    static P: OnceLock<Pristine> = OnceLock::new();
    P.get_or_init(|| {
        home();
        let src = tree(&[
            ("README.md", "hello\n"),
            ("pkg/__init__.py", "VALUE = 1\n"),
            ("pkg/mod.py", "def f():\n    return 41\n"),
            (
                "tests/test_mod.py",
                "from pkg.mod import f\n\ndef test_f():\n    assert f() == 41\n",
            ),
        ]);
        PristineStore::open()
            .unwrap()
            .build(&Source::Dir { path: src })
            .unwrap()
    })
    .clone()
}

pub async fn sandbox() -> Sandbox {
    Sandbox::create(&small_pristine(), None, &SandboxOptions::default())
        .await
        .expect("create sandbox")
}

pub async fn sh(sb: &Sandbox, script: &str) -> dojo_sandbox::ExecOutput {
    sb.exec(&ExecRequest::shell(script)).await.expect("exec")
}

/// Make the repo's pinned uv (scripts/setup-tools.sh → target/pytools) findable when nothing
/// else points at one.
pub fn ensure_uv() -> bool {
    home();
    if dojo_sandbox::pyenv::find_uv().is_none() {
        let local = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/pytools/bin/uv");
        if Path::new(local).exists() {
            // SAFETY: tests set it before building any environment; same value every time.
            unsafe { std::env::set_var("DOJO_UV", local) };
        }
    }
    dojo_sandbox::pyenv::find_uv().is_some()
}

/// A venv with no packages (no network needed), or None without uv.
pub fn bare_env() -> Option<dojo_sandbox::PythonEnv> {
    if !ensure_uv() {
        return None;
    }
    let spec = dojo_sandbox::PythonEnvSpec {
        python: "3.11".into(),
        editable: false,
        ..Default::default()
    };
    Some(dojo_sandbox::PythonEnv::build(&spec, None).expect("bare env"))
}
