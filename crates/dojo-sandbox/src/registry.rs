//! Kept sandboxes (`dojo sandbox run --keep`): a `state.json` in the sandbox's directory under
//! `$DOJO_HOME/sandboxes/<id>/` records the holder (pid and start time, so a recycled pid is never
//! mistaken for it) and what commands need; `attach` re-opens the namespaces from `/proc`.

use std::path::{Path, PathBuf};

use crate::{
    BackendKind, Inner, Limits, Pristine, PythonEnv, Result, Sandbox, SandboxError, SandboxOptions,
    ns, sandboxes_dir,
};

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct State {
    pub schema_version: u32,
    pub id: String,
    pub backend: BackendKind,
    pub holder_pid: Option<i32>,
    pub holder_start: Option<u64>,
    pub lower: PathBuf,
    pub venv: Option<PathBuf>,
    pub env: std::collections::BTreeMap<String, String>,
    pub limits: Limits,
    pub generation: u32,
}

/// Start time (clock ticks since boot) of a process, from /proc/<pid>/stat.
pub fn start_time(pid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &s[s.rfind(')')? + 2..];
    after.split_whitespace().nth(19)?.parse().ok()
}

fn state_path(dir: &Path) -> PathBuf {
    dir.join("state.json")
}

pub(crate) fn save(
    sb: &Sandbox,
    pristine: &Pristine,
    env: Option<&PythonEnv>,
    opts: &SandboxOptions,
) -> Result<()> {
    let (pid, generation) = match &sb.inner {
        Inner::Ns(n) => (Some(n.holder_pid), n.generation),
        Inner::Fallback(_) => (None, 0),
    };
    let st = State {
        schema_version: 1,
        id: sb.id.clone(),
        backend: sb.backend(),
        holder_pid: pid,
        holder_start: pid.and_then(start_time),
        lower: pristine.path.clone(),
        venv: env.map(|e| e.path.clone()),
        env: opts.env.clone(),
        limits: opts.limits.clone(),
        generation,
    };
    write_state(&sb.root, &st)
}

pub(crate) fn write_state(dir: &Path, st: &State) -> Result<()> {
    let p = state_path(dir);
    let json = serde_json::to_vec_pretty(st).map_err(|e| SandboxError::Other(e.to_string()))?;
    std::fs::write(&p, json).map_err(ns::io_err(&p))
}

pub(crate) fn update_holder(dir: &Path, generation: u32, pid: i32) -> Result<()> {
    let mut st = load_dir(dir)?;
    st.generation = generation;
    st.holder_pid = Some(pid);
    st.holder_start = start_time(pid);
    write_state(dir, &st)
}

fn load_dir(dir: &Path) -> Result<State> {
    let p = state_path(dir);
    let text = std::fs::read(&p)
        .map_err(|_| SandboxError::Gone(format!("{} (no {})", dir.display(), p.display())))?;
    serde_json::from_slice(&text).map_err(|e| SandboxError::Other(format!("{}: {e}", p.display())))
}

/// Ids of kept sandboxes recorded here.
pub fn list() -> Vec<State> {
    let mut v = Vec::new();
    if let Ok(rd) = std::fs::read_dir(sandboxes_dir()) {
        for e in rd.flatten() {
            if let Ok(st) = load_dir(&e.path()) {
                v.push(st);
            }
        }
    }
    v
}

pub(crate) fn attach(id: &str) -> Result<Sandbox> {
    if id.is_empty() || id.contains('/') || id.starts_with('.') {
        return Err(SandboxError::Gone(id.to_string()));
    }
    let dir = sandboxes_dir().join(id);
    let st = load_dir(&dir)?;
    let inner = match st.backend {
        BackendKind::Fallback => Inner::Fallback(crate::fallback::FbSandbox {
            ws: dir.join("ws"),
            live: Default::default(),
            env: ns::base_env(st.venv.as_ref().map(|v| v.to_str().unwrap_or("")), &st.env),
            limits: st.limits.clone(),
        }),
        _ => {
            let pid = st.holder_pid.ok_or_else(|| SandboxError::Gone(id.into()))?;
            if start_time(pid) != st.holder_start || st.holder_start.is_none() {
                return Err(SandboxError::Gone(format!(
                    "{id} (holder {pid} is not running)"
                )));
            }
            let open = |k: &str| -> Result<std::os::fd::OwnedFd> {
                let p = PathBuf::from(format!("/proc/{pid}/ns/{k}"));
                Ok(std::fs::File::open(&p).map_err(ns::io_err(&p))?.into())
            };
            Inner::Ns(ns::NsSandbox {
                dir: dir.clone(),
                holder_pid: pid,
                holder: None,
                userns: open("user")?,
                mntns: open("mnt")?,
                netns: open("net")?,
                lower: st.lower.clone(),
                venv: st.venv.clone(),
                keep: true,
                generation: st.generation,
                cgroup: crate::cgroup::detect().map(|d| d.open(id)),
                launcher: None,
                live: Default::default(),
                env: ns::base_env(st.venv.as_ref().map(|_| ns::VENV_PATH), &st.env),
                limits: st.limits.clone(),
            })
        }
    };
    Ok(Sandbox {
        id: id.to_string(),
        root: dir,
        inner,
        keep: true,
        done: false,
    })
}
