//! The fallback backend, for hosts that refuse namespaces or overlayfs (inside some containers):
//! the workspace is a `git clone --shared` of the pristine tree, commands run in their own session
//! under a subreaper supervisor that kills every descendant (setsid escapees included) when the
//! command ends or times out, with rlimits, Landlock (writes only in the workspace and /tmp) and
//! the same seccomp filter. There is no private /tmp, no network isolation and no uid change: it
//! is weaker, so it is only used when asked for or announced loudly on stderr.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::beneath::open_path;
use crate::child::{self, ExecPlan, Mode};
use crate::cmdenv::{base_env, envp, exe_candidates};
use crate::confine::{landlock_abi, rlimits, seccomp_prog};
use crate::error::{Result, SandboxError, io_err, setup_failed};
use crate::exec::{self, LiveSet};
use crate::pristine::{BASE_TAG, run};
use crate::sys::{CArgv, cstr};
use crate::types::{ExecRequest, Limits, WORKSPACE};

pub(crate) struct FbSandbox {
    pub ws: PathBuf,
    /// The pristine tree (its `.git` is the trusted base of diffs).
    pub lower: PathBuf,
    pub live: LiveSet,
    pub env: BTreeMap<String, String>,
    pub limits: Limits,
}

fn git(ws: &Path) -> Command {
    let mut c = Command::new("git");
    c.arg("-C")
        .arg(ws)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null");
    c
}

pub(crate) fn create(
    dir: &Path,
    lower: &Path,
    venv: Option<&Path>,
    tree: Option<&Path>,
    limits: &Limits,
    extra_env: &BTreeMap<String, String>,
) -> Result<FbSandbox> {
    let ws = dir.join("ws");
    // The pristine tree belongs to the sandbox uid, not to us; the local transport drops `-c`
    // settings for the upload side, so trust it through a private global config.
    let cfg = dir.join("gitconfig");
    std::fs::write(&cfg, "[safe]\n\tdirectory = *\n").map_err(io_err(&cfg))?;
    run(
        Command::new("git")
            .env("GIT_CONFIG_GLOBAL", &cfg)
            .args(["clone", "-q", "--shared", "--no-checkout"])
            .arg(lower)
            .arg(&ws),
        "git clone --shared",
    )
    .map_err(SandboxError::SetupCommand)?;
    run(git(&ws).args(["checkout", "-q", BASE_TAG]), "git checkout")
        .map_err(SandboxError::SetupCommand)?;
    let _ = std::fs::copy(
        lower.join(".git/info/exclude"),
        ws.join(".git/info/exclude"),
    );
    run(git(&ws).args(["tag", "-f", BASE_TAG, BASE_TAG]), "git tag")
        .map_err(SandboxError::SetupCommand)?;
    if let (Some(t), Some(v)) = (tree, venv) {
        // The environment build's files over the clone, left out of diffs as in namespaces.
        run(
            Command::new("cp")
                .arg("-a")
                .arg(format!("{}/.", t.display()))
                .arg(&ws),
            "copying the environment's tree files",
        )
        .map_err(SandboxError::SetupCommand)?;
        let list = std::fs::read(v.join(crate::pyenv::TREE_EXCLUDE)).unwrap_or_default();
        let ex = ws.join(".git/info/exclude");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&ex)
            .map_err(io_err(&ex))?;
        std::io::Write::write_all(&mut f, &list).map_err(io_err(&ex))?;
    }
    let venv_s = venv.map(|v| v.display().to_string());
    Ok(FbSandbox {
        ws,
        lower: lower.to_path_buf(),
        live: Default::default(),
        env: base_env(venv_s.as_deref(), extra_env),
        limits: limits.clone(),
    })
}

impl FbSandbox {
    /// Map a sandbox path (`/testbed/...` or relative) to the host workspace.
    pub(crate) fn host_path(&self, p: &str) -> String {
        if p == WORKSPACE {
            return self.ws.display().to_string();
        }
        if let Some(rest) = p.strip_prefix(&format!("{WORKSPACE}/")) {
            return self.ws.join(rest).display().to_string();
        }
        if p.starts_with('/') {
            p.to_string()
        } else {
            self.ws.join(p).display().to_string()
        }
    }

    pub(crate) fn command(
        &self,
        req: &ExecRequest,
    ) -> Result<(tokio::process::Command, OwnedFd, OwnedFd)> {
        if req.argv.is_empty() {
            return Err(SandboxError::Other("empty argv".into()));
        }
        let cwd = self.host_path(req.cwd.as_deref().unwrap_or(WORKSPACE));
        let mut env = self.env.clone();
        for (k, v) in &req.env {
            env.insert(k.clone(), v.clone());
        }
        env.insert("PWD".into(), cwd.clone());
        let (status_r, status_w) = exec::pipe().map_err(|e| setup_failed("pipe", e))?;
        let plan = ExecPlan {
            mode: Mode::Fallback,
            status_w: status_w.as_raw_fd(),
            lifeline_r: exec::lifeline_r(),
            cgroup_procs: Vec::new(),
            exe_candidates: exe_candidates(&req.argv[0], &env),
            argv: CArgv::new(req.argv.iter().map(cstr).collect()),
            envp: envp(&env),
            cwd: cstr(&cwd),
            rlimits: rlimits(&self.limits, false),
            landlock_abi: landlock_abi(),
            landlock_full: vec![
                cstr(self.ws.as_os_str().as_encoded_bytes()),
                cstr("/tmp"),
                cstr("/dev/shm"),
            ],
            landlock_files: vec![cstr("/dev")],
            landlock_ruleset: -1,
            seccomp: Some(seccomp_prog()),
            scrub: None,
        };
        let mut cmd = tokio::process::Command::new("/bin/false");
        // SAFETY: run_command only issues async-signal-safe system calls on the prepared plan.
        unsafe {
            cmd.pre_exec(move || Err(child::run_command(&plan)));
        }
        Ok((cmd, status_r, status_w))
    }

    pub(crate) fn kill_live(&self) {
        for pid in self.live.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            crate::sys::kill_pid(*pid, libc::SIGKILL);
        }
    }

    pub(crate) fn ws_fd(&self) -> Result<OwnedFd> {
        open_path(&self.ws).map_err(|_| io_err(&self.ws)(std::io::Error::other("gone")))
    }
}
