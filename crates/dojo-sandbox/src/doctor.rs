//! `dojo sandbox doctor`: which isolation features work on this host, probed for real (a forked
//! child tries each one as the sandbox uid), which backend `Auto` will use, and what of the host
//! a sandbox sees ([`crate::visible`]). `--clean` also sweeps crash leftovers
//! ([`crate::leftovers`]).

use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::Path;

use crate::ids::{chown_to_sandbox, is_root, sandbox_uid};
use crate::sys::{self, cstr};
use crate::types::BackendKind;
use crate::{cgroup, confine};

/// One probed feature.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Feature {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

/// Everything `doctor` reports.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub schema_version: u32,
    pub kernel: String,
    pub running_as_root: bool,
    pub sandbox_uid: u32,
    pub features: Vec<Feature>,
    pub landlock_abi: i32,
    pub cgroup_version: Option<String>,
    pub cgroup_controllers: Vec<String>,
    pub backend: BackendKind,
    /// What of the host a sandbox sees (without a venv; see [`crate::visible`]).
    pub visible: Vec<crate::visible::Visible>,
    /// Where `$DOJO_HOME` falls inside something visible, covered by an empty tmpfs.
    pub hidden: Vec<std::path::PathBuf>,
    /// The snapshot shown at `/etc` (copies of the `/etc` entries listed in `visible`), or
    /// `None` when they are bound one by one.
    pub etc_snapshot: Option<std::path::PathBuf>,
}

/// `dojo sandbox doctor`'s text: the kernel features, cgroups, backend, and what of the host a
/// sandbox sees.
impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let who = if self.running_as_root {
            "root"
        } else {
            "non-root"
        };
        writeln!(f, "kernel {}; running as {who}", self.kernel)?;
        writeln!(f, "sandbox uid: {}", self.sandbox_uid)?;
        for x in &self.features {
            let mark = if x.ok { "ok" } else { "--" };
            writeln!(f, "  [{mark}] {:<45} {}", x.name, x.detail)?;
        }
        match &self.cgroup_version {
            Some(v) => writeln!(
                f,
                "  [ok] cgroup {v} controllers: {}",
                self.cgroup_controllers.join(", ")
            )?,
            None => writeln!(f, "  [--] cgroups: not managed here (rlimits only)")?,
        }
        writeln!(f, "backend: {:?}", self.backend)?;
        write!(
            f,
            "visible inside a sandbox (read-only; plus its own /testbed, /venv, /tmp, /dev, /proc, /sys):"
        )?;
        for v in &self.visible {
            let what = match v.kind {
                crate::visible::Kind::Symlink => format!("-> {}", v.source.display()),
                crate::visible::Kind::Parent => String::new(),
                _ if v.source != v.path => format!("(from {})", v.source.display()),
                _ => String::new(),
            };
            write!(f, "\n  {:<28} {:<24} {}", v.path.display(), what, v.why)?;
        }
        for h in &self.hidden {
            write!(f, "\n  {:<28} covered: it is $DOJO_HOME", h.display())?;
        }
        if let Some(s) = &self.etc_snapshot {
            write!(f, "\n  /etc entries above are copies: {}", s.display())?;
        }
        Ok(())
    }
}

/// Why a probe failed: the system call's error, as the report shows it.
#[derive(Debug, thiserror::Error)]
enum ProbeError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("probe exited with {0}")]
    Exit(std::process::ExitStatus),
}

/// Try `unshare(flags)` (plus an overlay mount with `userxattr` when `overlay`) in a forked child
/// running as the sandbox uid.
fn probe(flags: libc::c_int, overlay: bool) -> Result<(), ProbeError> {
    // Unique per call: probes may run concurrently in one process (parallel tests), and a
    // shared scratch directory made them fail each other, so callers wrongly saw "unusable".
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("dojo-probe-{}-{flags}-{seq}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for d in ["l", "u", "w", "m"] {
        std::fs::create_dir_all(dir.join(d))?;
        let _ = chown_to_sandbox(&dir.join(d));
    }
    let _ = chown_to_sandbox(&dir);
    let uid = sandbox_uid();
    let root = is_root();
    let uid_map = cstr(format!("0 {uid} 1\n"));
    let opts = cstr(format!(
        "userxattr,lowerdir={0}/l,upperdir={0}/u,workdir={0}/w",
        dir.display()
    ));
    let target: CString = cstr(dir.join("m").as_os_str().as_encoded_bytes());
    let mut cmd = std::process::Command::new("/bin/true");
    // SAFETY: only async-signal-safe system calls on data prepared above.
    unsafe {
        cmd.pre_exec(move || {
            let err = std::io::Error::last_os_error;
            if root
                && (libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setresgid(uid, uid, uid) != 0
                    || libc::setresuid(uid, uid, uid) != 0)
            {
                return Err(err());
            }
            libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
            if libc::unshare(flags) != 0 {
                return Err(err());
            }
            if flags & libc::CLONE_NEWUSER != 0
                && (!sys::write_file(c"/proc/self/setgroups", b"deny")
                    || !sys::write_file(c"/proc/self/uid_map", uid_map.as_bytes())
                    || !sys::write_file(c"/proc/self/gid_map", uid_map.as_bytes()))
            {
                return Err(err());
            }
            if overlay
                && !sys::mount(
                    c"overlay".as_ptr(),
                    target.as_ptr(),
                    c"overlay".as_ptr(),
                    0,
                    opts.as_ptr(),
                )
            {
                return Err(err());
            }
            Ok(())
        });
    }
    let r = match cmd.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(ProbeError::Exit(s)),
        Err(e) => Err(ProbeError::Io(e)),
    };
    let _ = std::fs::remove_dir_all(&dir);
    r
}

/// Whether the namespace backend can run here (user+mount+pid+net namespaces and overlayfs with
/// `userxattr` as the sandbox uid).
pub fn namespaces_usable() -> bool {
    // The host does not change under a running process: probe once.
    static USABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *USABLE.get_or_init(|| {
        probe(
            libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWNET | libc::CLONE_NEWPID,
            true,
        )
        .is_ok()
    })
}

fn feature(name: &str, r: Result<(), ProbeError>) -> Feature {
    Feature {
        name: name.into(),
        ok: r.is_ok(),
        detail: r.map_or_else(|e| e.to_string(), |()| "works".into()),
    }
}

/// `dojo sandbox doctor [--clean]`: the host's report and, with `clean`, what the sweep of
/// dead sandboxes removed.
#[derive(Debug, Clone)]
pub struct Checkup {
    pub report: Report,
    pub swept: Option<crate::leftovers::Swept>,
}

impl Checkup {
    /// Take the report, after sweeping dead sandboxes' leftovers when `clean`.
    pub fn run(clean: bool) -> Checkup {
        let report = report();
        let swept = clean.then(|| {
            let s = crate::leftovers::sweep();
            crate::trash::flush();
            s
        });
        Checkup { report, swept }
    }

    /// The report as JSON, with the sweep under `swept`.
    pub fn to_json(&self) -> serde_json::Result<serde_json::Value> {
        let mut v = serde_json::to_value(&self.report)?;
        if let Some(s) = &self.swept {
            v["swept"] = serde_json::to_value(s)?;
        }
        Ok(v)
    }
}

impl std::fmt::Display for Checkup {
    /// The report, then the sweep's `cleaned:` line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.report)?;
        if let Some(s) = &self.swept {
            write!(f, "\n{s}")?;
        }
        Ok(())
    }
}

/// Probe everything.
pub fn report() -> Report {
    let u = libc::CLONE_NEWUSER;
    let mut features = vec![
        feature("user namespace", probe(u, false)),
        feature("mount namespace", probe(u | libc::CLONE_NEWNS, false)),
        feature("pid namespace", probe(u | libc::CLONE_NEWPID, false)),
        feature("network namespace", probe(u | libc::CLONE_NEWNET, false)),
        feature(
            "overlayfs (userxattr) in a user namespace",
            probe(u | libc::CLONE_NEWNS, true),
        ),
    ];
    let abi = confine::landlock_abi();
    features.push(Feature {
        name: "landlock".into(),
        ok: abi > 0,
        detail: if abi > 0 {
            format!("ABI {abi}")
        } else {
            "unavailable (writes are still confined by the read-only root)".into()
        },
    });
    let seccomp = std::fs::read_to_string("/proc/self/status")
        .map(|s| s.lines().any(|l| l.starts_with("Seccomp_filters:")))
        .unwrap_or(false)
        || Path::new("/proc/sys/kernel/seccomp/actions_avail").exists();
    features.push(Feature {
        name: "seccomp filter".into(),
        ok: seccomp,
        detail: if seccomp {
            "available".into()
        } else {
            "not available".into()
        },
    });
    let slirp = crate::usernet::slirp4netns();
    features.push(Feature {
        name: "slirp4netns (network = true)".into(),
        ok: slirp.is_some(),
        detail: match slirp {
            Some(p) => p.display().to_string(),
            None => "not found: environments with `network = true` cannot start \
                     (apt-get install slirp4netns, or DOJO_SLIRP4NETNS)"
                .into(),
        },
    });
    let cg = cgroup::detect();
    let visible = crate::visible::visible(None);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    Report {
        schema_version: 3,
        kernel,
        running_as_root: is_root(),
        sandbox_uid: sandbox_uid(),
        features,
        landlock_abi: abi,
        cgroup_version: cg.as_ref().map(|c| c.version().to_string()),
        cgroup_controllers: cg.as_ref().map(|c| c.controllers()).unwrap_or_default(),
        backend: auto_backend(),
        hidden: crate::visible::hidden(&visible),
        etc_snapshot: crate::visible::etc_snapshot(&visible),
        visible,
    }
}

/// Which backend `Auto` resolves to on this host (probed once). `DOJO_SANDBOX_BACKEND`
/// (`namespace` | `fallback`) overrides it.
pub fn auto_backend() -> BackendKind {
    static B: std::sync::OnceLock<BackendKind> = std::sync::OnceLock::new();
    *B.get_or_init(|| match std::env::var("DOJO_SANDBOX_BACKEND").as_deref() {
        Ok("fallback") => BackendKind::Fallback,
        Ok("namespace") => BackendKind::Namespace,
        _ => {
            if namespaces_usable() {
                BackendKind::Namespace
            } else {
                let msg = "dojo-sandbox: WARNING: user/mount/pid/net namespaces or overlayfs are \
                           not usable on this host; using the FALLBACK backend (git clone --shared \
                           + process groups): no network isolation, no private /tmp, no uid \
                           change. Run `dojo sandbox doctor` for details.";
                eprintln!("{msg}");
                tracing::warn!("{msg}");
                BackendKind::Fallback
            }
        }
    })
}
