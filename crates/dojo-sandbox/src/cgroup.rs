//! Resource limits through cgroups, behind a trait: v1 (this development host: hybrid layout,
//! memory/pids/cpu controllers writable as root) and v2 (production: one unified hierarchy with
//! `memory.max`, `pids.max`, `cpu.max`, `cgroup.kill`). Without a usable cgroup tree (not root,
//! or `DOJO_CGROUP=off`) sandboxes still get rlimits; `dojo sandbox doctor` says which applies.

use std::fs;
use std::path::{Path, PathBuf};

use crate::types::Limits;

/// Creates one cgroup (per hierarchy) per sandbox.
pub trait CgroupDriver: Send + Sync + std::fmt::Debug {
    /// "v1" or "v2".
    fn version(&self) -> &'static str;
    /// Controllers that will be used.
    fn controllers(&self) -> Vec<String>;
    fn create(&self, id: &str, limits: &Limits) -> std::io::Result<Box<dyn CgroupHandle>>;
    /// The handle of an existing sandbox cgroup (kept sandboxes re-attached by id).
    fn open(&self, id: &str) -> Box<dyn CgroupHandle>;
    /// The sandbox cgroups that exist, by id, each with its age (sweeping crash leftovers).
    fn list(&self) -> Vec<(String, std::time::Duration)>;
}

/// One sandbox's cgroup(s).
pub trait CgroupHandle: Send + Sync + std::fmt::Debug {
    /// `cgroup.procs` files a process writes "0" into to join (one per hierarchy).
    fn procs_files(&self) -> Vec<PathBuf>;
    /// Whether the memory limit is enforced by the cgroup (else rlimits are used instead).
    fn limits_memory(&self) -> bool;
    /// Memory currently charged (bytes), when known.
    fn memory_current(&self) -> Option<u64>;
    /// SIGKILL every process in the cgroup.
    fn kill_all(&self);
    /// Remove the cgroup(s); retries while processes are still exiting.
    fn remove(&self) -> std::io::Result<()>;
    /// Whether no process is left in it (a missing cgroup is empty).
    fn is_empty(&self) -> bool;
}

/// The subdirectories of `dirs` (cgroups by id) with their ages.
fn list_in(dirs: &[&Path]) -> Vec<(String, std::time::Duration)> {
    let mut out: Vec<(String, std::time::Duration)> = Vec::new();
    for d in dirs {
        let Ok(rd) = fs::read_dir(d) else { continue };
        for e in rd.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let age = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .unwrap_or_default();
            match out.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) => slot.1 = slot.1.min(age),
                None => out.push((name, age)),
            }
        }
    }
    out
}

/// Pick the driver for this host, or `None` when cgroups cannot be managed here.
pub fn detect() -> Option<Box<dyn CgroupDriver>> {
    if std::env::var("DOJO_CGROUP").is_ok_and(|v| v == "off" || v == "0") {
        return None;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    detect_at(Path::new("/sys/fs/cgroup"))
}

/// The driver for a cgroup tree mounted at `root`: v2 when `root` is a unified hierarchy with
/// the memory and pids controllers, v1 when it holds `memory/` and `pids/` hierarchies.
/// (Separate from [`detect`] so both layouts can be checked against a directory laid out like
/// them on hosts that have only one.)
pub fn detect_at(root: &Path) -> Option<Box<dyn CgroupDriver>> {
    if let Ok(c) = fs::read_to_string(root.join("cgroup.controllers")) {
        let has = |x: &str| c.split_whitespace().any(|w| w == x);
        if has("memory") && has("pids") {
            return Some(Box::new(V2 {
                base: root.join("dojo"),
                cpu: has("cpu"),
            }));
        }
    }
    let mem = root.join("memory");
    let pids = root.join("pids");
    if mem.join("cgroup.procs").exists() && pids.join("cgroup.procs").exists() {
        let cpu = root.join("cpu");
        return Some(Box::new(V1 {
            memory: mem.join("dojo"),
            pids: pids.join("dojo"),
            cpu: cpu
                .join("cpu.cfs_quota_us")
                .exists()
                .then(|| cpu.join("dojo")),
        }));
    }
    None
}

/// A failed write to a cgroup file: the file named, the error kept as the cause (the callers'
/// `io::Result`s carry it inside an `io::Error` of the same kind).
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
struct FileError {
    path: std::path::PathBuf,
    #[source]
    source: std::io::Error,
}

fn write(path: &Path, v: &str) -> std::io::Result<()> {
    fs::write(path, v).map_err(|source| {
        let kind = source.kind();
        let path = path.to_path_buf();
        std::io::Error::new(kind, FileError { path, source })
    })
}

fn pids_in(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn kill_pids(dir: &Path) {
    for _ in 0..50 {
        let pids = pids_in(dir);
        if pids.is_empty() {
            return;
        }
        for p in pids {
            crate::sys::kill_pid(p, libc::SIGKILL);
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

fn rmdir_retry(dir: &Path) -> std::io::Result<()> {
    let mut last = None;
    for _ in 0..200 {
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => last = Some(e),
        }
        kill_pids(dir);
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("rmdir failed")))
}

#[derive(Debug)]
struct V1 {
    memory: PathBuf,
    pids: PathBuf,
    cpu: Option<PathBuf>,
}

impl CgroupDriver for V1 {
    fn version(&self) -> &'static str {
        "v1"
    }
    fn controllers(&self) -> Vec<String> {
        let mut v = vec!["memory".to_string(), "pids".to_string()];
        if self.cpu.is_some() {
            v.push("cpu".into());
        }
        v
    }
    fn create(&self, id: &str, limits: &Limits) -> std::io::Result<Box<dyn CgroupHandle>> {
        let mut dirs = Vec::new();
        let mem = self.memory.join(id);
        fs::create_dir_all(&mem)?;
        dirs.push(mem.clone());
        if let Some(m) = limits.memory_bytes {
            write(&mem.join("memory.limit_in_bytes"), &m.to_string())?;
        }
        let pids = self.pids.join(id);
        fs::create_dir_all(&pids)?;
        dirs.push(pids.clone());
        if let Some(p) = limits.max_processes {
            write(&pids.join("pids.max"), &p.to_string())?;
        }
        if let (Some(cpu), Some(pct)) = (&self.cpu, limits.cpu_quota_percent) {
            let d = cpu.join(id);
            fs::create_dir_all(&d)?;
            write(&d.join("cpu.cfs_period_us"), "100000")?;
            write(
                &d.join("cpu.cfs_quota_us"),
                &(pct as u64 * 1000).to_string(),
            )?;
            dirs.push(d);
        }
        Ok(Box::new(V1Handle { dirs }))
    }
    fn open(&self, id: &str) -> Box<dyn CgroupHandle> {
        let mut dirs = vec![self.memory.join(id), self.pids.join(id)];
        if let Some(c) = &self.cpu
            && c.join(id).exists()
        {
            dirs.push(c.join(id));
        }
        Box::new(V1Handle { dirs })
    }
    fn list(&self) -> Vec<(String, std::time::Duration)> {
        let mut dirs = vec![self.memory.as_path(), self.pids.as_path()];
        dirs.extend(self.cpu.as_deref());
        list_in(&dirs)
    }
}

#[derive(Debug)]
struct V1Handle {
    dirs: Vec<PathBuf>,
}

impl CgroupHandle for V1Handle {
    fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }
    fn limits_memory(&self) -> bool {
        true
    }
    fn memory_current(&self) -> Option<u64> {
        fs::read_to_string(self.dirs[0].join("memory.usage_in_bytes"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
    fn kill_all(&self) {
        for d in &self.dirs {
            kill_pids(d);
        }
    }
    fn remove(&self) -> std::io::Result<()> {
        for d in &self.dirs {
            rmdir_retry(d)?;
        }
        Ok(())
    }
    fn is_empty(&self) -> bool {
        self.dirs.iter().all(|d| pids_in(d).is_empty())
    }
}

#[derive(Debug)]
struct V2 {
    base: PathBuf,
    cpu: bool,
}

impl CgroupDriver for V2 {
    fn version(&self) -> &'static str {
        "v2"
    }
    fn controllers(&self) -> Vec<String> {
        let mut v = vec!["memory".to_string(), "pids".to_string()];
        if self.cpu {
            v.push("cpu".into());
        }
        v
    }
    fn create(&self, id: &str, limits: &Limits) -> std::io::Result<Box<dyn CgroupHandle>> {
        let ctl = if self.cpu {
            "+memory +pids +cpu"
        } else {
            "+memory +pids"
        };
        if !self.base.exists() {
            fs::create_dir_all(&self.base)?;
        }
        if let Some(parent) = self.base.parent() {
            let _ = write(&parent.join("cgroup.subtree_control"), ctl);
        }
        let _ = write(&self.base.join("cgroup.subtree_control"), ctl);
        let dir = self.base.join(id);
        fs::create_dir_all(&dir)?;
        if let Some(m) = limits.memory_bytes {
            write(&dir.join("memory.max"), &m.to_string())?;
            let _ = write(&dir.join("memory.swap.max"), "0");
        }
        if let Some(p) = limits.max_processes {
            write(&dir.join("pids.max"), &p.to_string())?;
        }
        if let (true, Some(pct)) = (self.cpu, limits.cpu_quota_percent) {
            write(
                &dir.join("cpu.max"),
                &format!("{} 100000", pct as u64 * 1000),
            )?;
        }
        Ok(Box::new(V2Handle { dir }))
    }
    fn open(&self, id: &str) -> Box<dyn CgroupHandle> {
        Box::new(V2Handle {
            dir: self.base.join(id),
        })
    }
    fn list(&self) -> Vec<(String, std::time::Duration)> {
        list_in(&[self.base.as_path()])
    }
}

#[derive(Debug)]
struct V2Handle {
    dir: PathBuf,
}

impl CgroupHandle for V2Handle {
    fn procs_files(&self) -> Vec<PathBuf> {
        vec![self.dir.join("cgroup.procs")]
    }
    fn limits_memory(&self) -> bool {
        true
    }
    fn memory_current(&self) -> Option<u64> {
        fs::read_to_string(self.dir.join("memory.current"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
    fn kill_all(&self) {
        if write(&self.dir.join("cgroup.kill"), "1").is_err() {
            kill_pids(&self.dir);
        }
    }
    fn remove(&self) -> std::io::Result<()> {
        rmdir_retry(&self.dir)
    }
    fn is_empty(&self) -> bool {
        pids_in(&self.dir).is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(p: &Path) -> String {
        fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    fn limits() -> Limits {
        Limits {
            memory_bytes: Some(256 << 20),
            max_processes: Some(64),
            cpu_quota_percent: Some(150),
            ..Limits::default()
        }
    }

    /// A directory laid out like a cgroup2 mount: the driver writes the v2 files.
    #[test]
    fn v2_writes_limits_procs_and_kill_files() {
        let root = tempfile::tempdir().unwrap();
        fs::write(
            root.path().join("cgroup.controllers"),
            "cpuset cpu io memory pids\n",
        )
        .unwrap();
        fs::write(root.path().join("cgroup.subtree_control"), "").unwrap();
        let d = detect_at(root.path()).expect("v2 layout detected");
        assert_eq!(d.version(), "v2");
        assert_eq!(d.controllers(), ["memory", "pids", "cpu"]);
        let h = d.create("sbx1", &limits()).unwrap();
        let dir = root.path().join("dojo/sbx1");
        assert_eq!(read(&dir.join("memory.max")), (256u64 << 20).to_string());
        assert_eq!(read(&dir.join("memory.swap.max")), "0");
        assert_eq!(read(&dir.join("pids.max")), "64");
        assert_eq!(read(&dir.join("cpu.max")), "150000 100000");
        // Controllers are delegated down to the sandbox's cgroup.
        assert_eq!(
            read(&root.path().join("cgroup.subtree_control")),
            "+memory +pids +cpu"
        );
        assert_eq!(
            read(&root.path().join("dojo/cgroup.subtree_control")),
            "+memory +pids +cpu"
        );
        assert_eq!(h.procs_files(), vec![dir.join("cgroup.procs")]);
        assert!(h.limits_memory());
        fs::write(dir.join("memory.current"), "12345\n").unwrap();
        assert_eq!(h.memory_current(), Some(12345));
        h.kill_all();
        assert_eq!(read(&dir.join("cgroup.kill")), "1");
        // Re-opening by id (kept sandboxes) addresses the same directory.
        assert_eq!(d.open("sbx1").procs_files(), h.procs_files());
        // A real cgroupfs removes the interface files with the directory; here we do.
        for e in fs::read_dir(&dir).unwrap() {
            fs::remove_file(e.unwrap().path()).unwrap();
        }
        h.remove().unwrap();
        assert!(!dir.exists());
    }

    #[test]
    fn v2_without_limits_writes_no_limit_files() {
        let root = tempfile::tempdir().unwrap();
        fs::write(root.path().join("cgroup.controllers"), "memory pids\n").unwrap();
        let d = detect_at(root.path()).unwrap();
        assert_eq!(d.controllers(), ["memory", "pids"]);
        let none = Limits {
            memory_bytes: None,
            max_processes: None,
            max_file_size_bytes: None,
            max_open_files: None,
            cpu_quota_percent: Some(50),
            workspace_bytes: None,
        };
        d.create("x", &none).unwrap();
        let dir = root.path().join("dojo/x");
        for f in ["memory.max", "pids.max", "cpu.max"] {
            assert!(!dir.join(f).exists(), "{f} written without a limit");
        }
    }

    #[test]
    fn v1_layout_writes_per_hierarchy_files() {
        let root = tempfile::tempdir().unwrap();
        for h in ["memory", "pids", "cpu"] {
            fs::create_dir_all(root.path().join(h)).unwrap();
            fs::write(root.path().join(h).join("cgroup.procs"), "").unwrap();
        }
        fs::write(root.path().join("cpu/cpu.cfs_quota_us"), "-1").unwrap();
        let d = detect_at(root.path()).expect("v1 layout detected");
        assert_eq!(d.version(), "v1");
        let h = d.create("s", &limits()).unwrap();
        let p = |x: &str| root.path().join(x);
        assert_eq!(
            read(&p("memory/dojo/s/memory.limit_in_bytes")),
            (256u64 << 20).to_string()
        );
        assert_eq!(read(&p("pids/dojo/s/pids.max")), "64");
        assert_eq!(read(&p("cpu/dojo/s/cpu.cfs_quota_us")), "150000");
        assert_eq!(h.procs_files().len(), 3);
    }

    #[test]
    fn no_cgroup_tree_means_no_driver() {
        let root = tempfile::tempdir().unwrap();
        assert!(detect_at(root.path()).is_none());
        // cgroup2 without the memory controller is not usable either.
        fs::write(root.path().join("cgroup.controllers"), "cpu io\n").unwrap();
        assert!(detect_at(root.path()).is_none());
    }
}
