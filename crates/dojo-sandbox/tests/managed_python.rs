//! The interpreter a spec asks for: the host's when it has that version (the system's, else
//! pyenv's newest `X.Y.N`); else a uv-managed CPython, and when none can be fetched (here: a
//! mirror on a closed loopback port) an error that names the version, what was tried and the
//! mirror option. One test in this binary: it sets process environment variables.

mod common;

use dojo_sandbox::PythonEnvSpec;

#[test]
fn host_interpreter_or_a_named_error_when_no_managed_one_is_reachable() {
    common::home();
    skip_unless_uv!();
    let spec = |v: &str| PythonEnvSpec {
        python: v.into(),
        ..Default::default()
    };
    if std::path::Path::new("/usr/bin/python3.11").is_file() {
        assert_eq!(
            spec("3.11").interpreter().unwrap(),
            std::path::Path::new("/usr/bin/python3.11")
        );
    }

    // pyenv's layout: the newest plain X.Y.N wins; free-threaded, pre-release and virtualenv
    // names and a version without the binary are not taken.
    let pyenv = tempfile::tempdir().unwrap();
    let fake = |name: &str, bin: Option<&str>| {
        let d = pyenv.path().join("versions").join(name).join("bin");
        std::fs::create_dir_all(&d).unwrap();
        if let Some(b) = bin {
            std::fs::write(d.join(b), "").unwrap();
        }
    };
    fake("3.8.2", Some("python3.8"));
    fake("3.8.10", Some("python3.8"));
    fake("3.8.99t", Some("python3.8"));
    fake("3.8-dev", Some("python3.8"));
    fake("3.8.11rc1", Some("python3.8"));
    fake("3.8.12", None);
    fake("my-venv-3.8.50", Some("python3.8"));
    fake("3.80.1", Some("python3.80"));
    // SAFETY: the only test of this binary; set before anything reads them.
    unsafe { std::env::set_var("PYENV_ROOT", pyenv.path()) };
    assert_eq!(
        dojo_sandbox::pyenv::pyenv_python("3.8"),
        Some(pyenv.path().join("versions/3.8.10/bin/python3.8"))
    );
    assert_eq!(dojo_sandbox::pyenv::pyenv_python("3.7"), None);

    if ["/usr/bin/python3.8", "/usr/local/bin/python3.8"]
        .iter()
        .any(|p| std::path::Path::new(p).exists())
    {
        eprintln!("SKIPPED (error path): the host has python3.8");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let no_pyenv = tempfile::tempdir().unwrap();
    // Nothing listens on port 9 (discard) of loopback: the download fails at once.
    // SAFETY: as above.
    unsafe {
        std::env::set_var("PYENV_ROOT", no_pyenv.path());
        std::env::set_var("DOJO_PYTHONS", dir.path());
        std::env::set_var("DOJO_PYTHON_MIRROR", "http://127.0.0.1:9/mirror");
    }
    let e = spec("3.8").interpreter().unwrap_err().to_string();
    for want in [
        "python 3.8",
        "uv python install 3.8",
        "127.0.0.1:9",
        "DOJO_PYTHON_MIRROR",
    ] {
        assert!(e.contains(want), "{want:?} missing: {e}");
    }
}
