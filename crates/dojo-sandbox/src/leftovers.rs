//! Crash leftovers: what a dojo process killed with `kill -9` leaves behind, and its sweep.
//!
//! A sandbox's processes and mounts die with their creator (the holder and the launcher watch a
//! lifeline pipe), but two things outlive it: its directory `$DOJO_HOME/sandboxes/<id>` and its
//! memory/pids cgroups. Each sandbox directory therefore records its owner at creation
//! (`owner.json`: pid and start time, so a recycled pid is never mistaken for it; a kept
//! sandbox's owner is its holder, from `state.json`). [`sweep`] removes what belongs to dead
//! owners, and is safe while other dojo processes run: it touches
//!
//! - a directory only when its recorded owner is dead, or it has no record at all and is over
//!   an hour old (a creation that crashed before writing one, or an older dojo's leftover);
//! - a cgroup only when no process is left in it and either its directory says its owner is
//!   dead or it has no directory here and is over a minute old (a live sandbox always has its
//!   holder in its cgroup, from a few milliseconds after the cgroup is made until teardown);
//! - nothing of a sandbox whose cgroup still holds processes, whatever its record says (its
//!   owner may run in another pid namespace, where its pid means nothing here).
//!
//! Every process sweeps once, at its first sandbox creation (a directory listing and one small
//! read per sandbox); `dojo sandbox doctor --clean` sweeps on demand.

use std::path::Path;
use std::time::Duration;

use crate::cgroup;
use crate::error::{Result, io_err};
use crate::registry::{self, start_time};

const OWNER_FILE: &str = "owner.json";

/// Who created a sandbox (not kept ones: their holder, in `state.json`, outlives the creator).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Owner {
    schema_version: u32,
    pid: i32,
    /// Start time in clock ticks since boot (`/proc/<pid>/stat`).
    start: Option<u64>,
}

/// Record this process as the owner of a new sandbox directory.
pub(crate) fn record_owner(dir: &Path) -> Result<()> {
    let pid = std::process::id() as i32;
    let o = Owner {
        schema_version: 1,
        pid,
        start: start_time(pid),
    };
    let p = dir.join(OWNER_FILE);
    let json = serde_json::to_vec(&o)
        .map_err(|e| crate::error::failed(format!("writing {}", p.display()), e))?;
    std::fs::write(&p, json).map_err(io_err(&p))
}

fn alive(pid: i32, start: Option<u64>) -> bool {
    start.is_some() && start_time(pid) == start
}

/// Whether a sandbox directory's owner lives: `Some(false)` dead, `None` no record.
fn owner_alive(dir: &Path) -> Option<bool> {
    if let Ok(st) = registry::load_dir(dir) {
        return Some(st.holder_pid.is_some_and(|p| alive(p, st.holder_start)));
    }
    let text = std::fs::read(dir.join(OWNER_FILE)).ok()?;
    let o: Owner = serde_json::from_slice(&text).ok()?;
    Some(alive(o.pid, o.start))
}

fn age(p: &Path) -> Duration {
    std::fs::metadata(p)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .unwrap_or_default()
}

/// What a sweep removed.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Swept {
    /// Sandbox ids whose directories were removed.
    pub dirs: Vec<String>,
    /// Sandbox ids whose cgroups were removed.
    pub cgroups: Vec<String>,
}

impl std::fmt::Display for Swept {
    /// The `cleaned:` line of `dojo sandbox doctor --clean`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cleaned: {} sandbox director{} and {} cgroup{} of dead processes",
            self.dirs.len(),
            if self.dirs.len() == 1 { "y" } else { "ies" },
            self.cgroups.len(),
            if self.cgroups.len() == 1 { "" } else { "s" }
        )
    }
}

/// Remove the directories and cgroups of sandboxes whose owner is dead (see the module docs).
/// Directories go through the trash (deleted in the background: [`crate::trash::flush`] waits).
pub fn sweep() -> Swept {
    let base = registry::sandboxes_dir();
    let mut swept = Swept::default();
    let mut dead = Vec::new();
    if let Ok(rd) = std::fs::read_dir(&base) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let dir = e.path();
            let gone = match owner_alive(&dir) {
                Some(a) => !a,
                None => age(&dir) > Duration::from_secs(3600),
            };
            if gone {
                dead.push(name);
            }
        }
    }
    let driver = cgroup::detect();
    for id in dead {
        // Processes left in its cgroup mean the sandbox still runs (its owner may live in
        // another pid namespace): leave it for a later sweep.
        if let Some(d) = &driver {
            let h = d.open(&id);
            if !h.is_empty() {
                continue;
            }
            if h.remove().is_ok() {
                swept.cgroups.push(id.clone());
            }
        }
        crate::trash::discard(&base.join(&id));
        swept.dirs.push(id);
    }
    if let Some(d) = &driver {
        for (id, age) in d.list() {
            if swept.cgroups.contains(&id)
                || base.join(&id).exists()
                || age < Duration::from_secs(60)
            {
                continue;
            }
            let h = d.open(&id);
            if h.is_empty() && h.remove().is_ok() {
                swept.cgroups.push(id);
            }
        }
    }
    swept
}

/// [`sweep`] once per process, at its first sandbox creation.
pub(crate) fn sweep_once() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        let s = sweep();
        if !s.dirs.is_empty() || !s.cgroups.is_empty() {
            tracing::info!(
                dirs = s.dirs.len(),
                cgroups = s.cgroups.len(),
                "removed leftovers of sandboxes whose process died"
            );
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swept_line() {
        let s = Swept {
            dirs: vec!["a".into()],
            cgroups: vec!["a".into(), "b".into()],
        };
        assert_eq!(
            s.to_string(),
            "cleaned: 1 sandbox directory and 2 cgroups of dead processes"
        );
        assert_eq!(
            Swept::default().to_string(),
            "cleaned: 0 sandbox directories and 0 cgroups of dead processes"
        );
    }
}
