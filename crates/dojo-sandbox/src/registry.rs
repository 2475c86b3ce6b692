//! Kept sandboxes (`dojo sandbox run --keep`): a `state.json` in the sandbox's directory under
//! `$DOJO_HOME/sandboxes/<id>/` records the holder (pid and start time, so a recycled pid is never
//! mistaken for it) and what commands need; [`crate::Sandbox::attach`] re-opens the namespaces
//! from `/proc`. Directories of non-kept sandboxes hold their owner instead ([`crate::leftovers`]).

use std::path::{Path, PathBuf};

use crate::error::{Result, SandboxError, io_err};
use crate::types::{BackendKind, Limits, TransferCaps};

/// `$DOJO_HOME/sandboxes`: one directory per live sandbox (its upper dirs, and for kept
/// sandboxes its `state.json`), plus `.trash` (see [`crate::trash`]).
pub fn sandboxes_dir() -> PathBuf {
    dojo_cache::dojo_home().join("sandboxes")
}

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
    #[serde(default)]
    pub caps: TransferCaps,
    /// The base commit diffs are taken against (see [`crate::Sandbox::diff`]).
    #[serde(default)]
    pub base: Option<String>,
    /// The environment's tree layer, network and CPUs (see [`crate::EnvRuntime`]).
    #[serde(default)]
    pub runtime: crate::types::EnvRuntime,
    #[serde(default)]
    pub venv_writable: bool,
}

impl State {
    /// Whether the process holding the sandbox is still the one that recorded it.
    pub fn alive(&self) -> bool {
        self.holder_pid
            .is_some_and(|p| start_time(p) == self.holder_start)
    }

    /// The `dojo sandbox ls` line: id, backend, running or gone, lower tree (tab-separated).
    pub fn ls_line(&self) -> String {
        format!(
            "{}\t{:?}\t{}\t{}",
            self.id,
            self.backend,
            if self.alive() { "running" } else { "gone" },
            self.lower.display()
        )
    }
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

pub(crate) fn write_state(dir: &Path, st: &State) -> Result<()> {
    let p = state_path(dir);
    let json = serde_json::to_vec_pretty(st)
        .map_err(|e| crate::error::failed(format!("writing {}", p.display()), e))?;
    std::fs::write(&p, json).map_err(io_err(&p))
}

pub(crate) fn update_holder(dir: &Path, generation: u32, pid: i32) -> Result<()> {
    let mut st = load_dir(dir)?;
    st.generation = generation;
    st.holder_pid = Some(pid);
    st.holder_start = start_time(pid);
    write_state(dir, &st)
}

pub(crate) fn load_dir(dir: &Path) -> Result<State> {
    let p = state_path(dir);
    let text = std::fs::read(&p)
        .map_err(|_| SandboxError::Gone(format!("{} (no {})", dir.display(), p.display())))?;
    serde_json::from_slice(&text).map_err(|e| crate::error::failed(p.display().to_string(), e))
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
