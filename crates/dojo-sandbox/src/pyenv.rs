//! Shared, read-only Python environments built with `uv`, one per [`PythonEnvSpec`] (and pristine tree,
//! when the project is installed editable).
//!
//! The venv is built *at the path sandboxes see it* (`/venv`) in a private mount namespace where
//! `/testbed` is an overlay of the pristine tree: every script's shebang says `/venv/bin/python`
//! and the editable install points at `/testbed`, so each rollout imports its own copy of the
//! project (an editable install pointing at the pristine path would silently hide every edit in
//! src-layout projects). The interpreter is a world-readable system Python (default
//! `/usr/bin/python3.11`), so the unprivileged sandbox uid can execute it.
//!
//! The build runs the project's own code, so it is confined almost like a sandbox command (see
//! the `child::env_build` module): user, mount and pid namespaces, the minimal root of
//! [`crate::visible::env_build`], Landlock and the seccomp filter; it keeps the network and the
//! host's uv cache, and gets a clean environment.

use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use dojo_rundir::clip::{self, Keep, Unit};

use crate::child::{self, EnvBuildPlan, Layers, UV_CACHE_PATH};
use crate::cmdenv::{GIT_SAFE_DIRECTORY_ENV, VENV_PATH};
use crate::error::{BuildError, Result, SandboxError, io_err};
use crate::exec;
use crate::ids::{is_root, sandbox_gid, sandbox_uid};
use crate::pristine::Pristine;

mod keep;
use crate::sys::cstr;
use crate::types::EnvRuntime;
pub(crate) use keep::TREE_EXCLUDE;
use keep::keep_tree;

/// How to build a Python environment. The project under test is installed editable against
/// [`crate::WORKSPACE`], never against the pristine path (that hides edits in src layouts).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PythonEnvSpec {
    /// e.g. "3.11" (resolved to `/usr/bin/python3.11`) or an absolute interpreter path.
    #[serde(default)]
    pub python: String,
    /// Pinned requirements (`pytest==7.4.0`).
    #[serde(default)]
    pub requirements: Vec<String>,
    /// Extra shell commands run after the requirements, at the workspace root (e.g. `pip install -e .`).
    /// They may call `dojo_pip_install ARG...`: the environment's installer (pip or uv) with
    /// the build's settings (`exclude_newer`, the cache).
    #[serde(default)]
    pub install: Vec<String>,
    /// Install the project itself editable at `/testbed` (default true).
    #[serde(default = "yes")]
    pub editable: bool,
    /// Shell commands run first, at the workspace root, before any requirement (the harness's
    /// `pre_install`: system tweaks, `sed` on the project's metadata...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_install: Vec<String>,
    /// What installs the requirements and the editable project.
    #[serde(default, skip_serializing_if = "Installer::is_uv")]
    pub installer: Installer,
    /// Commands of sandboxes over this environment reach the network: user-mode networking
    /// (slirp4netns) from the sandbox's own network namespace, never the host's, so the host's
    /// loopback and abstract sockets stay out of reach ([`crate::usernet`]). Off by default;
    /// builds always have the network.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub network: bool,
    /// CPUs the tests see: the sandbox's commands run on an affinity mask of this many CPUs
    /// (what `nproc` and `os.sched_getaffinity` report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    /// Resolve every install of the build as of this day (`YYYY-MM-DD`, midnight UTC): uv's
    /// `--exclude-newer`, pip's `--uploaded-prior-to`, for the requirements, the project's build
    /// dependencies and the `install` commands, and the venv's seeded setuptools and wheel. What
    /// an image built that day got for the packages a spec leaves unpinned (setuptools before
    /// `pkg_resources` was removed, pytest before nose-style `setup` was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude_newer: Option<String>,
}

/// The installer of an environment build.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Installer {
    /// `uv pip install` (fast; PEP 660 editable installs).
    #[default]
    Uv,
    /// `python -m pip install` in a venv seeded with pip, as the SWE-bench harness installs,
    /// with the editables of the harness's pip (2023): a path entry instead of setuptools'
    /// import-hook finder (`editable_mode=compat`, set in the venv's `pip.conf` so that an eval
    /// script's reinstall gets it too, where the venv's pip would use PEP 660), and, where the project's isolated build backend has no
    /// `build_editable` (pinned below setuptools 64, where old pip ran `setup.py develop`), a
    /// build with the venv's own setuptools.
    Pip,
}

impl Installer {
    fn is_uv(&self) -> bool {
        *self == Installer::Uv
    }
}

fn yes() -> bool {
    true
}

impl PythonEnvSpec {
    /// Parse a TOML document with the `PythonEnvSpec` fields.
    pub fn from_toml_str(text: &str) -> Result<PythonEnvSpec> {
        toml::from_str(text).map_err(|e| SandboxError::EnvFrom {
            spec: "<toml>".into(),
            source: e.into(),
        })
    }

    /// Read a TOML file with the `PythonEnvSpec` fields.
    pub fn from_toml_file(path: &Path) -> Result<PythonEnvSpec> {
        let text = std::fs::read_to_string(path).map_err(io_err(path))?;
        toml::from_str(&text).map_err(|e| SandboxError::EnvFrom {
            spec: path.display().to_string(),
            source: e.into(),
        })
    }

    fn describe(&self) -> String {
        format!(
            "python {} with {} requirement(s){}",
            if self.python.is_empty() {
                "3.11"
            } else {
                &self.python
            },
            self.requirements.len(),
            if self.editable {
                ", editable project"
            } else {
                ""
            }
        )
    }

    /// The interpreter: an absolute path as given; a version `X.Y` from the host when it has
    /// one ([`host_python`]: the system's, else a pyenv installation), else a uv-managed CPython
    /// installed into [`pythons_dir`] (see [`managed_python`]). The sandbox uid must be able to
    /// run it from what sandboxes see of it (see [`runnable_in_sandbox`]).
    pub fn interpreter(&self) -> Result<PathBuf> {
        let err = |reason: String| SandboxError::Env {
            spec: self.describe(),
            reason,
        };
        let from = |e: crate::BuildError| SandboxError::EnvFrom {
            spec: self.describe(),
            source: e.into(),
        };
        let p = match self.python.as_str() {
            "" => PathBuf::from(crate::pristine::DEFAULT_PYTHON),
            v if v.starts_with('/') => PathBuf::from(v),
            v => match host_python(v) {
                Some(p) => p,
                None => managed_python(v).map_err(from)?,
            },
        };
        if !p.exists() {
            return Err(err(format!(
                "Python interpreter {} not found (sandboxes need a world-readable system Python)",
                p.display()
            )));
        }
        runnable_in_sandbox(&p).map_err(from)?;
        Ok(p)
    }
}

/// Can the sandbox uid run `python` from what a sandbox sees of it? Sandboxes and builds show
/// an interpreter's installation (the directory above its `bin/`, as `visible` binds it) at its
/// own path, under parent directories of mode 0755 made for the purpose: so only the
/// installation and the path below it to the binary need the execute bit for others, not the
/// host's directories above it (a pyenv installation under `/root`, mode 0700, runs).
fn runnable_in_sandbox(python: &Path) -> std::result::Result<(), BuildError> {
    let real = std::fs::canonicalize(python).map_err(BuildError::io(python.display()))?;
    let root = crate::visible::installation_root(real.parent().unwrap_or(&real));
    match crate::ids::closed_to_others(real.ancestors().take_while(|a| a.starts_with(&root))) {
        Some((a, mode)) => Err(BuildError::NotRunnable {
            python: python.to_path_buf(),
            dir: a.to_path_buf(),
            mode,
        }),
        None => Ok(()),
    }
}

/// The host's own `pythonX.Y`, when it has one: the system's (`/usr/bin`, `/usr/local/bin`),
/// else the newest pyenv installation of that minor version (see [`pyenv_python`]).
pub fn host_python(version: &str) -> Option<PathBuf> {
    ["/usr/bin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(format!("python{version}")))
        .find(|p| p.is_file())
        .or_else(|| pyenv_python(version))
}

/// The newest CPython `version.N` that pyenv installed: `$PYENV_ROOT/versions/X.Y.N/bin/pythonX.Y`
/// (`PYENV_ROOT` defaults to `~/.pyenv`, as pyenv's own). Only plain `X.Y.N` names count: pyenv's
/// virtualenvs, free-threaded (`3.13.0t`), pre-release, PyPy and conda builds are other
/// interpreters than the spec's. The shims are not used: they are scripts that ask pyenv at run
/// time, which a sandbox has not.
pub fn pyenv_python(version: &str) -> Option<PathBuf> {
    let root = match std::env::var_os("PYENV_ROOT").filter(|v| !v.is_empty()) {
        Some(r) => PathBuf::from(r),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".pyenv"),
    };
    let prefix = format!("{version}.");
    std::fs::read_dir(root.join("versions"))
        .ok()?
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let patch: u32 = name.strip_prefix(&prefix)?.parse().ok()?;
            let bin = root
                .join("versions")
                .join(&name)
                .join("bin")
                .join(format!("python{version}"));
            bin.is_file().then_some((patch, bin))
        })
        .max_by_key(|(patch, _)| *patch)
        .map(|(_, bin)| bin)
}

/// Where uv-managed interpreters are installed: `$DOJO_PYTHONS`, else `pythons/` beside the
/// shared tools directory (`/var/lib/dojo/pythons` for root), a place the sandbox uid can
/// reach (`$DOJO_HOME` is hidden from sandboxes and often under a 0700 home).
pub fn pythons_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("DOJO_PYTHONS").filter(|v| !v.is_empty()) {
        return PathBuf::from(d);
    }
    let tools = dojo_cache::tools_dir();
    tools
        .parent()
        .map_or_else(|| tools.join("pythons"), |p| p.join("pythons"))
}

/// A uv-managed CPython `version` (python-build-standalone): found in [`pythons_dir`], else
/// installed there with `uv python install` (network; `DOJO_PYTHON_MIRROR` or
/// `UV_PYTHON_INSTALL_MIRROR` names a mirror of the release downloads), made world-readable.
/// The error says what was tried and what to do.
pub fn managed_python(version: &str) -> std::result::Result<PathBuf, BuildError> {
    let dir = pythons_dir();
    let uv = crate::uv::ensure_uv().map_err(|e| BuildError::NoUv {
        version: version.to_string(),
        source: Box::new(e),
    })?;
    let uv_cmd = |args: &[&str]| {
        let mut c = std::process::Command::new(&uv);
        c.args(args)
            .env("UV_PYTHON_INSTALL_DIR", &dir)
            .env("UV_NO_PROGRESS", "1")
            .stdin(std::process::Stdio::null());
        if let Some(m) = std::env::var_os("DOJO_PYTHON_MIRROR").filter(|m| !m.is_empty()) {
            c.env("UV_PYTHON_INSTALL_MIRROR", m);
        }
        c
    };
    let find = || -> Option<PathBuf> {
        let o = uv_cmd(&[
            "python",
            "find",
            "--managed-python",
            "--no-project",
            "--no-config",
            version,
        ])
        .output()
        .ok()?;
        let p = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
        (o.status.success() && p.is_absolute()).then_some(p)
    };
    if let Some(p) = find() {
        return Ok(p);
    }
    std::fs::create_dir_all(&dir).map_err(BuildError::io(dir.display()))?;
    let out = uv_cmd(&[
        "python",
        "install",
        "--no-bin",
        "--no-registry",
        "--no-config",
        version,
    ])
    .output()
    .map_err(BuildError::io(format_args!("running {}", uv.display())))?;
    if !out.status.success() {
        let log = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = log.lines().rev().take(6).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(BuildError::PythonInstall {
            version: version.to_string(),
            dir,
            log_tail: tail.join(" | "),
        });
    }
    let _ = std::process::Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(&dir)
        .status();
    find().ok_or_else(|| BuildError::PythonNotFound {
        version: version.to_string(),
        dir: dir.clone(),
    })
}

/// A built environment.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PythonEnv {
    pub id: String,
    /// The venv directory on the host (its `bin/` is put first on PATH inside the sandbox).
    pub path: PathBuf,
    #[serde(default)]
    pub runtime: EnvRuntime,
}

pub use crate::uv::find_uv;

/// The marker the build script prints before each step (`step` in `pyenv_build.sh`).
const STEP_MARKER: &str = "@@DOJO_BUILD_STEP ";

/// The last step a failed build's stderr names, and the stderr without the step markers.
fn failed_step(stderr: &str) -> (String, String) {
    let mut step = String::from("starting the build");
    let mut log = String::with_capacity(stderr.len());
    for line in stderr.lines() {
        match line.strip_prefix(STEP_MARKER) {
            Some(s) => step = s.to_string(),
            None => {
                log.push_str(line);
                log.push('\n');
            }
        }
    }
    (step, log)
}

/// The build, in the harness's order: venv (seeded with pip for the pip installer),
/// `pre_install` commands, requirements, the editable project, the `install` commands.
const BUILD_SCRIPT: &str = include_str!("pyenv_build.sh");

impl PythonEnv {
    /// Build (once) and return the environment for `spec`. When `spec.editable`, the project of
    /// `pristine` is installed editable at `/testbed` and the entry is keyed on the pristine id
    /// too. Blocking: use [`PythonEnv::build_async`] from async code.
    pub fn build(spec: &PythonEnvSpec, pristine: Option<&Pristine>) -> Result<PythonEnv> {
        let err = |reason: String| SandboxError::Env {
            spec: spec.describe(),
            reason,
        };
        if spec.editable && pristine.is_none() {
            return Err(err(
                "an editable install needs the pristine tree of the project".into(),
            ));
        }
        let from = |e: Box<dyn std::error::Error + Send + Sync>| SandboxError::EnvFrom {
            spec: spec.describe(),
            source: e,
        };
        let python = spec.interpreter()?;
        let uv = crate::uv::ensure_uv().map_err(|e| from(e.into()))?;
        // What the tests may do (network, CPUs) does not change what is built.
        let built = PythonEnvSpec {
            network: false,
            cpus: None,
            ..spec.clone()
        };
        // v2: the files the build writes into the project tree are kept (`tree/`); v3: only
        // the files it creates (v2 also kept its changes to project files); v4: the pip
        // installer's editables are a path entry (`editable_mode=compat`); v5: pre_install's
        // edits of tracked files are kept, and the venv survives symlinks to its interpreter; v6:
        // `editable_mode=compat` only where pip would build the editable through PEP 660; v7:
        // uv byte-compiles at install, as pip does; v8 (pip installer only, the one whose
        // environments an eval script reinstalls in): the project's build requirements are kept;
        // v9 / v10: the base's standard library copied into the venv's installation, not
        // linked (a module's resolved path stays under sysconfig's `stdlib`).
        let v = match spec.installer {
            Installer::Uv => 9,
            Installer::Pip => 10,
        };
        let identity = serde_json::json!({
            "v": v,
            "spec": built,
            "python": python,
            "pristine": if spec.editable || !spec.install.is_empty() {
                pristine.map(|p| p.id.clone())
            } else {
                None
            },
        });
        let key = dojo_cache::sha256_hex(identity.to_string());
        let cache = dojo_cache::Cache::open().map_err(|e| from(e.into()))?;
        let entry = cache
            .get_or_build("envs", &key, |tmp| {
                build_into(spec, pristine, &python, &uv, tmp)?;
                cache.share_or_keep(&tmp.join("venv"));
                Ok::<_, BuildError>(())
            })
            .map_err(|e| from(e.into()))?;
        let tree = entry.join("tree");
        Ok(PythonEnv {
            id: key,
            path: entry.join("venv"),
            runtime: EnvRuntime {
                tree: tree.is_dir().then_some(tree),
                network: spec.network,
                host_loopback: false,
                cpus: spec.cpus,
            },
        })
    }

    /// Async wrapper around [`PythonEnv::build`].
    pub async fn build_async(
        spec: &PythonEnvSpec,
        pristine: Option<&Pristine>,
    ) -> Result<PythonEnv> {
        let (s, p) = (spec.clone(), pristine.cloned());
        tokio::task::spawn_blocking(move || PythonEnv::build(&s, p.as_ref()))
            .await
            .map_err(|e| crate::error::failed("env build task", e))?
    }
}

/// Build the environment of `spec` into `tmp` (its `venv/`, the kept project files in `tree/`,
/// `meta.json`), in steps: the namespace plan, uv staged where the build sees it, the build
/// script run, the project files it wrote kept, its failure reported by step, the venv owned
/// like the pristine tree, the metadata written.
fn build_into(
    spec: &PythonEnvSpec,
    pristine: Option<&Pristine>,
    python: &Path,
    uv: &Path,
    tmp: &Path,
) -> std::result::Result<(), BuildError> {
    let venv = tmp.join("venv");
    let layer = tmp.join(".layer");
    let upper = layer.join("upper");
    let work = layer.join("work");
    for d in [&venv, &upper, &work] {
        std::fs::create_dir_all(d).map_err(BuildError::io(d.display()))?;
    }
    std::fs::set_permissions(&venv, std::fs::Permissions::from_mode(0o755))
        .map_err(BuildError::io(venv.display()))?;
    let cache = uv_cache_dir();
    let (status_r, status_w) =
        exec::pipe().map_err(BuildError::io("the environment build's status pipe"))?;
    let plan = build_plan(pristine, python, &layer, &venv, cache.as_deref(), &status_w);
    stage_uv(uv, &venv)?;
    let mut cmd = build_command(spec, python, cache.is_some());
    use std::os::unix::process::CommandExt;
    // SAFETY: run_env_build only issues async-signal-safe system calls on the prepared plan.
    unsafe {
        cmd.pre_exec(move || child::run_env_build(&plan));
    }
    let out = cmd.output();
    drop(status_w);
    let msgs = exec::read_status(status_r);
    let kept = match (&out, pristine) {
        (Ok(o), Some(p)) if o.status.success() && exec::status_error("", &msgs).is_none() => {
            keep_tree(&upper, &p.path, &tmp.join("tree"), &venv)
        }
        _ => Ok(()),
    };
    crate::trash::remove_all(&layer);
    kept?;
    if let Some(e) = exec::status_error("preparing the environment build", &msgs) {
        return Err(BuildError::Sandbox(Box::new(e)));
    }
    let out = out.map_err(BuildError::io("starting the environment build"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let (step, log) = failed_step(&stderr);
        let log = clip::cut(&log, 8000, Unit::Bytes, Keep::Tail).kept();
        return Err(BuildError::Failed {
            what: format!(
                "the environment build (installer {}), step {step:?},",
                installer_name(spec.installer)
            ),
            status: out.status,
            output: log.trim().to_string(),
        });
    }
    own_venv(&venv)?;
    let meta = serde_json::json!({
        "schema_version": 1,
        "spec": spec,
        "python": python,
        "pristine": pristine.map(|p| p.id.clone()),
        "mount_path": VENV_PATH,
    });
    let meta_path = tmp.join("meta.json");
    std::fs::write(&meta_path, meta.to_string()).map_err(BuildError::io(meta_path.display()))?;
    Ok(())
}

fn installer_name(i: Installer) -> &'static str {
    match i {
        Installer::Uv => "uv",
        Installer::Pip => "pip",
    }
}

/// The build's namespace: what it sees of the host (the sandbox's minimal root, its own
/// interpreter included; never homes, the checkout, task files or the rest of `$DOJO_HOME`),
/// the pristine tree under an overlay whose upper layer is `layer`, the venv and uv's cache
/// writable, its status reported on `status_w`.
fn build_plan(
    pristine: Option<&Pristine>,
    python: &Path,
    layer: &Path,
    venv: &Path,
    cache: Option<&Path>,
    status_w: &std::os::fd::OwnedFd,
) -> EnvBuildPlan {
    let crate::ns::RootPlan {
        entries,
        hide,
        etc,
        extra,
    } = crate::ns::root_entries(&crate::visible::env_build(python));
    // SAFETY: no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let pc = |p: &Path| cstr(p.as_os_str().as_encoded_bytes());
    // As root, host root and the sandbox uid (owner of the pristine tree, whose files the
    // overlay copies up) keep their ids inside; otherwise the caller's uid becomes root there.
    let (uid_map, gid_map) = if is_root() {
        let (su, sg) = (sandbox_uid(), sandbox_gid());
        (
            format!("0 0 1\n{su} {su} 1\n"),
            format!("0 0 1\n{sg} {sg} 1\n"),
        )
    } else {
        (format!("0 {uid} 1\n"), format!("0 {gid} 1\n"))
    };
    EnvBuildPlan {
        stage_outside: is_root(),
        uid_map: cstr(uid_map),
        gid_map: cstr(gid_map),
        status_w: status_w.as_raw_fd(),
        layers: Layers {
            lower: pristine.map(|p| pc(&p.path)),
            tree: None,
            layer: pc(layer),
            venv: Some(pc(venv)),
            cache: cache.map(pc),
            etc,
            extra,
        },
        entries,
        hide,
        landlock_abi: crate::confine::landlock_abi(),
        seccomp: crate::confine::seccomp_prog(),
    }
}

/// uv, where the build sees it: the build namespace has a private /tmp, and uv may live there
/// on the host (a checkout's target/pytools under /tmp), so it is staged inside the venv being
/// built (`.dojo-uv/`; the script removes it).
fn stage_uv(uv: &Path, venv: &Path) -> std::result::Result<(), BuildError> {
    let staged = venv.join(".dojo-uv");
    std::fs::create_dir_all(&staged).map_err(BuildError::io(staged.display()))?;
    let staged_uv = staged.join("uv");
    if std::fs::hard_link(uv, &staged_uv).is_err() {
        std::fs::copy(uv, &staged_uv).map_err(BuildError::io(format_args!(
            "staging {} for the build",
            uv.display()
        )))?;
    }
    Ok(())
}

/// The build script's command line and environment (nothing of the caller's environment).
fn build_command(spec: &PythonEnvSpec, python: &Path, cached: bool) -> std::process::Command {
    let mut cmd = std::process::Command::new("/bin/bash");
    cmd.arg("-c")
        .arg(BUILD_SCRIPT)
        .arg("dojo-env-build")
        .arg(format!("{}/.dojo-uv/uv", VENV_PATH))
        .arg(python)
        .arg(if spec.editable { "1" } else { "0" })
        .arg(installer_name(spec.installer))
        .args(&spec.requirements)
        .env_clear()
        .envs(build_env(cached))
        .envs(GIT_SAFE_DIRECTORY_ENV)
        .stdin(std::process::Stdio::null());
    if !spec.install.is_empty() {
        cmd.env("DOJO_INSTALL", spec.install.join("\n"));
    }
    if !spec.pre_install.is_empty() {
        cmd.env("DOJO_PRE_INSTALL", spec.pre_install.join("\n"));
    }
    if let Some(day) = &spec.exclude_newer {
        cmd.env("DOJO_EXCLUDE_NEWER", format!("{day}T00:00:00Z"));
    }
    cmd
}

/// The venv owned like the pristine tree (as root: the sandbox uid, root inside), so a
/// sandbox's private copy-on-write view of it (`SandboxOptions::writable_venv`) can copy files
/// up; sandboxes still see it read-only otherwise.
fn own_venv(venv: &Path) -> std::result::Result<(), BuildError> {
    let Some((u, g)) = crate::ids::owner() else {
        return Ok(());
    };
    for e in walkdir::WalkDir::new(venv) {
        let e = e.map_err(|source| BuildError::Walk {
            what: "chown of the venv".into(),
            source,
        })?;
        std::os::unix::fs::lchown(e.path(), Some(u), Some(g)).map_err(BuildError::io(
            format_args!("chown of {}", e.path().display()),
        ))?;
    }
    Ok(())
}

/// The uv cache environment builds share, where uv would put it on the host (`UV_CACHE_DIR`,
/// else `$XDG_CACHE_HOME/uv`, else `~/.cache/uv`), created when missing; `None` when there is
/// none (uv then caches under the build's throwaway `/tmp`).
fn uv_cache_dir() -> Option<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let dir = env("UV_CACHE_DIR")
        .or_else(|| env("XDG_CACHE_HOME").map(|c| c.join("uv")))
        .or_else(|| env("HOME").map(|h| h.join(".cache/uv")))?;
    std::fs::create_dir_all(&dir).ok()?;
    std::fs::canonicalize(dir).ok()
}

/// The build's whole environment: nothing of the caller's (API keys, tokens, paths) but what
/// reaching the package index needs (proxies, TLS roots, uv and pip settings). A TLS bundle
/// named there must lie in what the build sees (`/etc/ssl`, `/usr`).
fn build_env(cache: bool) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = [
        (
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        ),
        ("HOME", "/tmp"),
        ("TMPDIR", "/tmp"),
        ("LANG", "C.UTF-8"),
        ("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into();
    let passed = [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "no_proxy",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
    ];
    for (k, v) in std::env::vars() {
        let index = (k.starts_with("UV_") || k.starts_with("PIP_")) && k != "UV_CACHE_DIR";
        if index || passed.contains(&k.as_str()) {
            env.push((k, v));
        }
    }
    if cache {
        env.push(("UV_CACHE_DIR".into(), UV_CACHE_PATH.into()));
        // ccache's directory inside the same shared mount (pyenv_build.sh uses it where the
        // host has ccache): uv keeps to its own buckets there.
        env.push(("DOJO_CCACHE".into(), format!("{UV_CACHE_PATH}/dojo-ccache")));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_files_keep_the_builds_times_and_are_excluded_from_diffs() {
        let d = tempfile::tempdir().unwrap();
        let (upper, pristine, dest, venv) = (
            d.path().join("upper"),
            d.path().join("pristine"),
            d.path().join("dest"),
            d.path().join("venv"),
        );
        for p in [&upper.join("pkg"), &pristine.join("pkg"), &venv] {
            std::fs::create_dir_all(p).unwrap();
        }
        // A generated C file beside its pristine .pyx, written by the build an hour ago.
        std::fs::write(pristine.join("pkg/_fast.pyx"), "x").unwrap();
        std::fs::write(upper.join("pkg/_fast.pyx"), "changed by the build").unwrap();
        std::fs::write(upper.join("pkg/_fast.c"), "/* cython */").unwrap();
        let then = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(upper.join("pkg/_fast.c"))
            .unwrap()
            .set_times(std::fs::FileTimes::new().set_modified(then))
            .unwrap();
        keep_tree(&upper, &pristine, &dest, &venv).unwrap();
        let kept = std::fs::metadata(dest.join("pkg/_fast.c")).unwrap();
        assert_eq!(kept.modified().unwrap(), then);
        // A change to a pristine file is not kept: it would show in every agent's diff.
        assert!(!dest.join("pkg/_fast.pyx").exists());
        let exclude = std::fs::read_to_string(venv.join(TREE_EXCLUDE)).unwrap();
        assert_eq!(exclude, "/pkg/_fast.c\n");
    }
}
