//! Python environments: built with uv at the sandbox path, editable install against /testbed, so
//! each rollout imports its own copy (src layout included), shared read-only.

mod common;

use dojo_sandbox::{
    PristineStore, PythonEnv, PythonEnvSpec, Sandbox, SandboxError, SandboxOptions, Source,
};

#[tokio::test]
async fn editable_install_imports_each_rollouts_own_copy() {
    skip_unless_ns!();
    skip_unless_uv!();
    let src = common::tree(&[
        (
            "pyproject.toml",
            "[build-system]\nrequires = [\"setuptools>=64\"]\nbuild-backend = \"setuptools.build_meta\"\n\n[project]\nname = \"srcpkg\"\nversion = \"0.1\"\n\n[tool.setuptools.packages.find]\nwhere = [\"src\"]\n",
        ),
        ("src/srcpkg/__init__.py", "VALUE = 'pristine'\n"),
    ]);
    let p = PristineStore::open()
        .unwrap()
        .build(&Source::Dir { path: src })
        .unwrap();
    let spec = PythonEnvSpec::from_toml_str("python = \"3.11\"\nrequirements = []\n").unwrap();
    assert!(spec.editable, "editable is the default");
    let env = match PythonEnv::build_async(&spec, Some(&p)).await {
        Ok(e) => e,
        Err(e) if e.to_string().contains("setuptools") && e.to_string().contains("network") => {
            eprintln!("SKIPPED: no package index reachable: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    // The editable finder points at /testbed, never at the pristine path.
    let pth: String = walk_text(&env.path);
    assert!(
        pth.contains("/testbed"),
        "no /testbed in the editable install"
    );
    assert!(
        !pth.contains(&p.path.display().to_string()),
        "editable install points at the pristine tree"
    );

    let a = Sandbox::create(&p, Some(&env), &SandboxOptions::default())
        .await
        .unwrap();
    let b = Sandbox::create(&p, Some(&env), &SandboxOptions::default())
        .await
        .unwrap();
    a.write_file("src/srcpkg/__init__.py", b"VALUE = 'edited-a'\n")
        .await
        .unwrap();
    let probe = "cd /tmp && python -c 'import srcpkg, importlib.metadata as m; print(srcpkg.VALUE, srcpkg.__file__, m.version(\"srcpkg\"))'";
    let out_a = common::sh(&a, probe).await;
    let out_b = common::sh(&b, probe).await;
    assert_eq!(
        out_a.stdout_lossy().trim(),
        "edited-a /testbed/src/srcpkg/__init__.py 0.1",
        "{out_a:?}"
    );
    assert_eq!(
        out_b.stdout_lossy().trim(),
        "pristine /testbed/src/srcpkg/__init__.py 0.1",
        "{out_b:?}"
    );
    a.teardown().await.unwrap();
    b.teardown().await.unwrap();
}

/// The pip installer gives a flat-layout project the editable install the harness's pip gave it:
/// `/testbed` on `sys.path`, not setuptools' import-hook finder (through which astroid cannot map
/// files to modules: pylint 2.9-2.15's checkers were never registered). A backend pinned below
/// setuptools 64 (no `build_editable`, pylint-7277's `setuptools~=62.6`) is built with the
/// venv's setuptools, as old pip's `setup.py develop` was.
#[tokio::test]
async fn pip_editables_are_a_path_entry_as_the_harness_had() {
    skip_unless_ns!();
    skip_unless_uv!();
    for (name, requires) in [
        ("flatpkg", "setuptools>=64"),
        ("oldpkg", "setuptools~=62.6"),
    ] {
        let src = common::tree(&[
            (
                "pyproject.toml",
                &format!(
                    "[build-system]\nrequires = [\"{requires}\"]\nbuild-backend = \"setuptools.build_meta\"\n\n[project]\nname = \"{name}\"\nversion = \"0.1\"\n\n[tool.setuptools]\npackages = [\"{name}\"]\n"
                ),
            ),
            (&format!("{name}/__init__.py"), "VALUE = 1\n"),
        ]);
        let p = PristineStore::open()
            .unwrap()
            .build(&Source::Dir { path: src })
            .unwrap();
        let spec = PythonEnvSpec {
            python: "3.11".into(),
            installer: dojo_sandbox::pyenv::Installer::Pip,
            ..PythonEnvSpec::from_toml_str("python = \"3.11\"\n").unwrap()
        };
        let env = match PythonEnv::build_async(&spec, Some(&p)).await {
            Ok(e) => e,
            Err(e) if e.to_string().contains("network") => {
                eprintln!("SKIPPED: no package index reachable: {e}");
                return;
            }
            Err(e) => panic!("{name}: {e}"),
        };
        let site = env.path.join("lib/python3.11/site-packages");
        let finders: Vec<String> = std::fs::read_dir(&site)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("__editable__") && n.ends_with("_finder.py"))
            .collect();
        assert!(finders.is_empty(), "{name}: import-hook finder {finders:?}");
        let sb = Sandbox::create(&p, Some(&env), &SandboxOptions::default())
            .await
            .unwrap();
        let probe = format!(
            "cd /tmp && python -c 'import sys, {name}; print(\"/testbed\" in sys.path, {name}.__file__)' && python -m pip config list"
        );
        let out = common::sh(&sb, &probe).await;
        let text = out.stdout_lossy();
        assert!(
            text.starts_with(&format!("True /testbed/{name}/__init__.py\n")),
            "{name}: {out:?}"
        );
        // An eval script's reinstall in a grading sandbox reads the same setting.
        assert!(text.contains("editable_mode=compat"), "{name}: {text}");
        sb.teardown().await.unwrap();
    }
}

/// pip 22.1-25.2 (the newest for Python 3.7 and 3.8) still runs `setup.py develop` for a
/// project without `pyproject.toml`, as the harness's pip did, unless a config setting is
/// given: then it builds in an isolated PEP 517 environment with today's setuptools (astropy
/// 3.x's `ah_bootstrap.py` needs `pkg_resources`, gone there). So the venv gets no
/// `editable_mode=compat` setting, and the install is `setup.py develop`'s `.egg-link`.
#[tokio::test]
async fn old_pip_keeps_setup_py_develop_for_a_project_without_pyproject() {
    skip_unless_ns!();
    skip_unless_uv!();
    let spec = PythonEnvSpec {
        python: "3.8".into(),
        installer: dojo_sandbox::pyenv::Installer::Pip,
        ..PythonEnvSpec::from_toml_str("python = \"3.8\"\n").unwrap()
    };
    if let Err(e) = spec.interpreter() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{e}");
        eprintln!("SKIPPED: {e}");
        return;
    }
    let src = common::tree(&[
        (
            "setup.py",
            "from setuptools import setup\nsetup(name='legacypkg', version='0.1', packages=['legacypkg'])\n",
        ),
        ("legacypkg/__init__.py", "VALUE = 1\n"),
    ]);
    let Some((p, env)) = editable_env(&spec, src).await else {
        return;
    };
    let site = env.path.join("lib/python3.8/site-packages");
    assert!(
        site.join("legacypkg.egg-link").exists(),
        "not installed by setup.py develop: {:?}",
        std::fs::read_dir(&site)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect::<Vec<_>>()
    );
    assert!(!env.path.join("pip.conf").exists());
    let sb = Sandbox::create(&p, Some(&env), &SandboxOptions::default())
        .await
        .unwrap();
    let out = common::sh(
        &sb,
        "cd /tmp && python -c 'import legacypkg; print(legacypkg.__file__)'",
    )
    .await;
    assert_eq!(
        out.stdout_lossy().trim(),
        "/testbed/legacypkg/__init__.py",
        "{out:?}"
    );
    sb.teardown().await.unwrap();
}

fn walk_text(dir: &std::path::Path) -> String {
    let mut s = String::new();
    for e in walkdir::WalkDir::new(dir).into_iter().flatten() {
        let n = e.file_name().to_string_lossy();
        if n.ends_with(".pth") || (n.starts_with("__editable__") && n.ends_with(".py")) {
            s.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
        }
    }
    s
}

#[tokio::test]
async fn missing_python_and_uv_are_named_errors() {
    common::home();
    let spec = PythonEnvSpec {
        python: "3.99".into(),
        editable: false,
        ..Default::default()
    };
    let e = PythonEnv::build(&spec, None).unwrap_err();
    assert!(matches!(
        e,
        SandboxError::Env { .. } | SandboxError::EnvFrom { .. }
    ));
    assert!(e.to_string().contains("python3.99"), "{e}");
    let e = PythonEnvSpec::from_toml_str("python = 3\n").unwrap_err();
    assert!(e.to_string().contains("python"), "{e}");
}

/// An environment build runs project code (build backends, `setup.py`, the spec's install
/// commands): it sees the sandbox's minimal root, not the host. Its `/tmp` is private and
/// sticky like a sandbox's, and nothing of the caller's environment reaches it.
#[tokio::test]
async fn env_build_sees_only_the_minimal_root() {
    skip_unless_ns!();
    skip_unless_uv!();
    // Host things a hostile build would look for: a task file with the gold patch beside the
    // checkout, another task's pristine tree, homes and services.
    let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let tasks = scratch.path().join("tasks.jsonl");
    std::fs::write(&tasks, "{\"patch\": \"gold-answer-5d2e\"}\n").unwrap();
    std::fs::set_permissions(&tasks, std::fs::Permissions::from_mode(0o644)).unwrap();
    let other = common::small_pristine();
    let mut probes = vec![
        env!("CARGO_MANIFEST_DIR").to_string(),
        scratch.path().display().to_string(),
        other.path.display().to_string(),
    ];
    for p in ["/home", "/root", "/var", "/run", "/srv", "/opt", "/mnt"] {
        if std::path::Path::new(p).exists() {
            probes.push(p.to_string());
        }
    }
    let mut script = String::from(
        "stat -c %a /tmp > /venv/probe-tmp-mode\n\
         env > /venv/probe-env\n\
         : > /venv/probe-seen\n",
    );
    for p in &probes {
        script.push_str(&format!(
            "if [ -e '{p}' ]; then echo '{p}' >> /venv/probe-seen; fi\n"
        ));
    }
    script.push_str(&format!(
        "cat '{}' >> /venv/probe-seen 2>/dev/null || true\n\
         touch '{}/escaped' 2>/dev/null && echo wrote-host >> /venv/probe-seen || true\n",
        tasks.display(),
        scratch.path().display()
    ));
    let spec = PythonEnvSpec {
        python: "3.11".into(),
        editable: false,
        install: vec![script],
        ..Default::default()
    };
    let env = PythonEnv::build_async(&spec, None).await.unwrap();
    let read = |n: &str| std::fs::read_to_string(env.path.join(n)).unwrap();
    assert_eq!(read("probe-tmp-mode").trim(), "1777");
    let seen = read("probe-seen");
    assert!(
        seen.trim().is_empty(),
        "the environment build saw host paths: {seen}"
    );
    assert!(!scratch.path().join("escaped").exists());
    let build_env = read("probe-env");
    assert!(
        !build_env.contains("DOJO_HOME="),
        "the caller's environment reached the build: {build_env}"
    );
    // What the build needs was there: the venv was made.
    assert!(env.path.join("bin/python").exists());
}

/// An interpreter of pyenv's under a home directory no other user may enter (`/root`, 0700):
/// found for its `X.Y`, built into a venv and run by the sandbox uid, which sees only that
/// installation, at its own path (the SWE-bench specs ask for 3.6–3.9; this host's system Python
/// is 3.11).
#[tokio::test]
async fn pyenv_interpreter_under_a_private_home_runs_in_sandboxes() {
    skip_unless_ns!();
    skip_unless_uv!();
    let Some((version, python)) = ["3.9", "3.10", "3.8", "3.12"].iter().find_map(|v| {
        let system = ["/usr/bin", "/usr/local/bin"]
            .iter()
            .any(|d| std::path::Path::new(d).join(format!("python{v}")).exists());
        (!system)
            .then(|| dojo_sandbox::pyenv::pyenv_python(v))
            .flatten()
            .map(|p| (*v, p))
    }) else {
        eprintln!("SKIPPED: no pyenv interpreter of a version the system lacks");
        return;
    };
    let spec = PythonEnvSpec {
        python: version.into(),
        editable: false,
        ..Default::default()
    };
    assert_eq!(spec.interpreter().unwrap(), python);
    let env = PythonEnv::build_async(&spec, None).await.unwrap();
    let p = common::small_pristine();
    let sb = Sandbox::create(&p, Some(&env), &SandboxOptions::default())
        .await
        .unwrap();
    let out = common::sh(
        &sb,
        "awk '{print $2}' /proc/self/uid_map; python -c 'import sys, ssl, sqlite3, ctypes; print(\"%d.%d\" % sys.version_info[:2]); import os; print(os.path.realpath(os.__file__))'; ls /root/.pyenv/versions 2>&1 | wc -l",
    )
    .await;
    let text = out.stdout_lossy();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{out:?}");
    // Root inside maps to the unprivileged sandbox uid outside (when dojo runs as root).
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert_ne!(
            lines[0], "0",
            "the sandbox runs as an unprivileged uid: {out:?}"
        );
    }
    assert_eq!(lines[1], version, "{out:?}");
    // The standard library is the installation's, copied into the venv's `.dojo-base`
    // (sys.base_prefix): a module's resolved path stays under sysconfig's `stdlib`, as in the
    // harness's conda environment (astroid's `is_standard_module` compares them). The
    // installation itself is still shown (its shared libraries, `ssl`, `sqlite3`, `ctypes`).
    let root = dojo_sandbox::visible::installation_root(python.parent().unwrap());
    assert!(
        std::path::Path::new(lines[2]).starts_with("/venv/.dojo-base/lib/"),
        "{out:?}"
    );
    // Only this installation of pyenv's is shown, not its siblings or shims.
    if root.starts_with("/root/.pyenv/versions") {
        assert_eq!(lines[3], "1", "{out:?}");
    }
    sb.teardown().await.unwrap();
}

/// Python 3.6 (SWE-bench's django 3.0-3.2 specs) with the uv installer: uv's byte-compiling
/// script needs Python >= 3.7, so such a build compiles with the interpreter's own compileall
/// instead. It used to fail at the environment; now it builds, imports its requirement, and
/// has it compiled.
#[tokio::test]
async fn a_python_36_environment_builds_with_uv() {
    skip_unless_ns!();
    skip_unless_uv!();
    let Some(python) = dojo_sandbox::pyenv::pyenv_python("3.6") else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true: pyenv's Python 3.6 is missing"
        );
        eprintln!("SKIPPED: no Python 3.6 here");
        return;
    };
    let spec = PythonEnvSpec {
        python: "3.6".into(),
        requirements: vec!["six==1.16.0".into()],
        editable: false,
        ..Default::default()
    };
    assert_eq!(spec.interpreter().unwrap(), python);
    let env = PythonEnv::build_async(&spec, None).await.unwrap();
    let p = common::small_pristine();
    let sb = Sandbox::create(&p, Some(&env), &SandboxOptions::default())
        .await
        .unwrap();
    let out = common::sh(
        &sb,
        "python -c 'import sys, six; print(\"%d.%d\" % sys.version_info[:2], six.__version__)'; ls /venv/lib/python3.6/site-packages/__pycache__ | grep -c '^six'",
    )
    .await;
    assert_eq!(
        out.stdout_lossy().lines().collect::<Vec<_>>(),
        ["3.6 1.16.0", "1"],
        "{out:?}"
    );
    sb.teardown().await.unwrap();
}

/// `exclude_newer`: every install of the build resolves as of that day, with either installer
/// (`dojo_pip_install` in install commands too)
/// (and is byte-compiled, as pip compiles);
/// with pip the venv's seeded setuptools is taken back to that day too (the SWE-bench images
/// were built when setuptools still had `pkg_resources`).
#[tokio::test]
async fn exclude_newer_resolves_as_of_that_day() {
    skip_unless_ns!();
    skip_unless_uv!();
    for installer in [
        dojo_sandbox::pyenv::Installer::Uv,
        dojo_sandbox::pyenv::Installer::Pip,
    ] {
        let spec = PythonEnvSpec {
            python: "3.11".into(),
            requirements: vec!["iniconfig".into()],
            // An install command through the environment's installer (an eval script's
            // requirement install moved into the build): as of the day too.
            install: vec!["dojo_pip_install -q 'six<2'".into()],
            editable: false,
            installer,
            // iniconfig 2.0.0 came out on 2023-01-07; setuptools 66 on 2023-01-13; six 1.17.0
            // on 2024-12-04.
            exclude_newer: Some("2022-12-31".into()),
            ..Default::default()
        };
        let env = match PythonEnv::build_async(&spec, None).await {
            Ok(e) => e,
            Err(e) if e.to_string().contains("iniconfig") && e.to_string().contains("network") => {
                eprintln!("SKIPPED: no package index reachable: {e}");
                return;
            }
            Err(e) => panic!("{installer:?}: {e}"),
        };
        let site = env.path.join("lib/python3.11/site-packages");
        let names: Vec<String> = std::fs::read_dir(&site)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.iter().any(|n| n == "iniconfig-1.1.1.dist-info")
                && names.iter().any(|n| n == "six-1.16.0.dist-info"),
            "{installer:?}: {names:?}"
        );
        // Byte-compiled at install by either installer, as the harness's pip does.
        assert!(
            site.join("iniconfig/__pycache__").is_dir(),
            "{installer:?}: iniconfig was not byte-compiled"
        );
        if installer == dojo_sandbox::pyenv::Installer::Pip {
            let st = names
                .iter()
                .find_map(|n| n.strip_prefix("setuptools-"))
                .and_then(|v| v.split('.').next())
                .and_then(|m| m.parse::<u32>().ok());
            assert!(st.is_some_and(|m| m <= 65), "{names:?}");
        }
    }
}

/// A failed build names the installer that ran and the step that failed (it used to say "uv"
/// whichever installer ran), and its log is the failing command's, without the step markers.
#[tokio::test]
async fn a_failed_build_names_its_installer_and_step() {
    skip_unless_ns!();
    skip_unless_uv!();
    for (installer, name) in [
        (dojo_sandbox::pyenv::Installer::Uv, "installer uv"),
        (dojo_sandbox::pyenv::Installer::Pip, "installer pip"),
    ] {
        let spec = PythonEnvSpec {
            python: "3.11".into(),
            installer,
            requirements: vec!["./dojo-no-such-requirement-dir".into()],
            editable: false,
            ..Default::default()
        };
        let e = PythonEnv::build_async(&spec, None).await.unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains(name), "{msg}");
        assert!(
            msg.contains("step \"installing the requirements\""),
            "{msg}"
        );
        assert!(!msg.contains("@@DOJO_BUILD_STEP"), "{msg}");
    }
}

/// An eval script's reinstall at grading runs offline and without build isolation, so it
/// builds with what the environment holds: a pip environment keeps the project's build
/// requirements (here flit_core, seaborn's backend; astropy's extension-helpers), which pip's
/// isolated editable install had only in a throwaway build environment. Without them the
/// reinstall failed and a patch to compiled sources was never compiled.
#[tokio::test]
async fn pip_environments_keep_build_requirements_for_an_offline_reinstall() {
    skip_unless_ns!();
    skip_unless_uv!();
    let p = common::pristine_of(&[
        (
            "pyproject.toml",
            "[build-system]\nrequires = [\"flit_core>=3.2,<4\"]\nbuild-backend = \"flit_core.buildapi\"\n\n[project]\nname = \"flitpkg\"\nversion = \"0.1\"\ndescription = \"A flit project\"\n",
        ),
        ("flitpkg/__init__.py", "VALUE = 1\n"),
    ]);
    let spec = PythonEnvSpec {
        python: "3.11".into(),
        installer: dojo_sandbox::pyenv::Installer::Pip,
        ..PythonEnvSpec::from_toml_str("python = \"3.11\"\n").unwrap()
    };
    let Some(env) = common::build_env_or_skip(&spec, &p).await else {
        return;
    };
    let opts = SandboxOptions {
        writable_venv: true,
        ..SandboxOptions::default()
    };
    let sb = Sandbox::create(&p, Some(&env), &opts).await.unwrap();
    // As `dojo_task::pre_test_commands` runs an offline reinstall.
    let out = common::sh(
        &sb,
        "cd /testbed && export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INDEX=1 PIP_NO_BUILD_ISOLATION=0 \
         && python -m pip install -q -e . && cd /tmp && python -c 'import flitpkg; print(flitpkg.__file__)'",
    )
    .await;
    assert_eq!(
        out.stdout_lossy().trim(),
        "/testbed/flitpkg/__init__.py",
        "{out:?}"
    );
    sb.teardown().await.unwrap();
}

/// Environments of two projects with the same packages store those packages once (one inode
/// for `six.py` in both venvs, dojo-cache's `share`), and the interpreter still loads their
/// compiled files: the build moved each .pyc's source timestamp with its source.
#[tokio::test]
async fn environments_of_two_projects_store_their_common_packages_once() {
    skip_unless_ns!();
    skip_unless_uv!();
    use std::os::unix::fs::MetadataExt;
    let spec = PythonEnvSpec::from_toml_str(
        "python = \"3.11\"\nrequirements = [\"six==1.16.0\"]\ninstaller = \"pip\"\n",
    )
    .unwrap();
    let mut built = Vec::new();
    for name in ["alpha", "beta"] {
        let pyproject = format!(
            "[build-system]\nrequires = [\"setuptools>=64\"]\nbuild-backend = \"setuptools.build_meta\"\n\n[project]\nname = \"{name}\"\nversion = \"0.1\"\n"
        );
        let init = format!("{name}/__init__.py");
        let src = common::tree(&[
            ("pyproject.toml", pyproject.as_str()),
            (init.as_str(), "NAME = 1\n"),
        ]);
        let Some(built_one) = editable_env(&spec, src).await else {
            return;
        };
        built.push(built_one);
    }
    let six = |env: &PythonEnv| {
        std::fs::metadata(env.path.join("lib/python3.11/site-packages/six.py"))
            .unwrap()
            .ino()
    };
    assert_ne!(built[0].1.id, built[1].1.id, "one environment per project");
    assert_eq!(six(&built[0].1), six(&built[1].1), "six.py stored twice");

    let (p, env) = &built[1];
    let sb = Sandbox::create(p, Some(env), &SandboxOptions::default())
        .await
        .unwrap();
    let out = common::sh(
        &sb,
        "cd /tmp && python -v -c 'import six, beta' 2>&1 | grep -c \"code object from '/venv/lib/python3.11/site-packages/__pycache__/six\"",
    )
    .await;
    assert_eq!(out.stdout_lossy().trim(), "1", "{out:?}");
    sb.teardown().await.unwrap();
}

/// The pristine tree of `src` and `spec`'s environment for it; `None` (the test skips) where
/// no package index is reachable.
async fn editable_env(
    spec: &PythonEnvSpec,
    src: std::path::PathBuf,
) -> Option<(dojo_sandbox::Pristine, PythonEnv)> {
    let p = PristineStore::open()
        .unwrap()
        .build(&Source::Dir { path: src })
        .unwrap();
    match PythonEnv::build_async(spec, Some(&p)).await {
        Ok(e) => Some((p, e)),
        Err(e) if e.to_string().contains("network") => {
            eprintln!("SKIPPED: no package index reachable: {e}");
            None
        }
        Err(e) => panic!("{e}"),
    }
}
