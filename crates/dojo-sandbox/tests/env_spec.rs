//! What an environment spec says beyond packages: pip as the installer, `pre_install` steps,
//! files the build writes into the project tree (kept in every sandbox, out of diffs), the
//! network and the CPU count the tests see.

mod common;

use dojo_sandbox::pyenv::Installer;
use dojo_sandbox::{
    EnvSpec, ExecRequest, PristineStore, PythonEnv, Sandbox, SandboxOptions, Source,
};

/// A pip-installed editable project whose build writes a module into the tree (as
/// setuptools-scm writes `src/_pytest/_version.py`): every sandbox imports it, a fresh sandbox's
/// diff is empty, and an agent's edit still shows.
#[tokio::test]
async fn pip_build_with_pre_install_keeps_the_files_it_wrote_into_the_tree() {
    skip_unless_ns!();
    if !common::ensure_uv() {
        eprintln!("SKIPPED: uv not found (DOJO_UV / DOJO_PYTOOLS / PATH)");
        return;
    }
    let src = common::tree(&[
        (
            "setup.py",
            "from setuptools import setup\nsetup(name='scmpkg', version='0.1', packages=['scmpkg'], package_dir={'': 'src'})\n",
        ),
        ("src/scmpkg/__init__.py", "from ._version import V\n"),
    ]);
    let p = PristineStore::open()
        .unwrap()
        .build(&Source::Dir { path: src })
        .unwrap();
    let spec = EnvSpec {
        python: "3.11".into(),
        editable: true,
        installer: Installer::Pip,
        // Runs before the install, in the tree: the editable install needs what it writes.
        pre_install: vec!["printf 'V = \"from-build\"\\n' > src/scmpkg/_version.py".into()],
        ..Default::default()
    };
    let env = match PythonEnv::build_async(&spec, Some(&p)).await {
        Ok(e) => e,
        Err(e) if CI_OFF() && e.to_string().contains("setuptools") => {
            eprintln!("SKIPPED: no package index reachable: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let tree = env
        .runtime
        .tree
        .clone()
        .expect("the build wrote into the tree");
    assert!(tree.join("src/scmpkg/_version.py").is_file());
    assert!(
        !tree.join(".git").exists(),
        ".git is not part of the tree layer"
    );
    let sb = Sandbox::create(&p, Some(&env), &SandboxOptions::default())
        .await
        .unwrap();
    let out = common::sh(
        &sb,
        "cd /tmp && python -c 'import scmpkg; print(scmpkg.V, scmpkg.__file__)' && python -m pip --version >/dev/null && echo pip-ok",
    )
    .await;
    assert_eq!(
        out.stdout_lossy().trim(),
        "from-build /testbed/src/scmpkg/__init__.py\npip-ok",
        "{out:?}"
    );
    assert_eq!(
        sb.diff().await.unwrap(),
        "",
        "the build's files are not the agent's"
    );
    sb.write_file(
        "src/scmpkg/__init__.py",
        b"from ._version import V\nW = 2\n",
    )
    .await
    .unwrap();
    let d = sb.diff().await.unwrap();
    assert!(
        d.contains("+W = 2") && !d.contains("_version.py") && !d.contains("egg-info"),
        "{d}"
    );
    sb.teardown().await.unwrap();
}

#[allow(non_snake_case)]
fn CI_OFF() -> bool {
    std::env::var("CI").as_deref() != Ok("true")
}

/// `network = true` shares the host's network (a loopback listener of the test is reachable),
/// the default does not; `cpus = 1` is what `nproc` says, through the launcher and through a
/// command joining from outside (`spawn`).
#[tokio::test]
async fn network_and_cpus_of_the_tests() {
    skip_unless_ns!();
    let Some(bare) = common::bare_env() else {
        eprintln!("SKIPPED: uv not found (DOJO_UV / DOJO_PYTOOLS / PATH)");
        return;
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let probe = format!(
        "python -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), timeout=5); print(\"connected\")' 2>/dev/null || echo refused; nproc"
    );
    let p = common::small_pristine();
    let mut open = bare.clone();
    open.runtime.network = true;
    open.runtime.cpus = Some(1);
    let sb = Sandbox::create(&p, Some(&open), &SandboxOptions::default())
        .await
        .unwrap();
    let out = common::sh(&sb, &probe).await;
    assert_eq!(out.stdout_lossy().trim(), "connected\n1", "{out:?}");
    let mut proc = sb.spawn(&ExecRequest::shell("nproc")).await.unwrap();
    let mut s = String::new();
    use tokio::io::AsyncReadExt;
    proc.child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut s)
        .await
        .unwrap();
    assert_eq!(s.trim(), "1", "a joining command gets the same CPUs");
    let _ = proc.child.wait().await;
    sb.teardown().await.unwrap();

    let sb = Sandbox::create(&p, Some(&bare), &SandboxOptions::default())
        .await
        .unwrap();
    let out = common::sh(&sb, &probe).await;
    let text = out.stdout_lossy();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("refused"), "{out:?}");
    let all = std::thread::available_parallelism().unwrap().get();
    assert_eq!(lines.next(), Some(all.to_string().as_str()), "{out:?}");
    sb.teardown().await.unwrap();
    drop(listener);
}
