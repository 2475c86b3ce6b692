//! What a sandbox sees of the host: a minimal root, listed here and nowhere else.
//!
//! A sandbox's `/` is a small read-only tmpfs holding only mount points. Of the host it shows,
//! read-only and `nosuid`:
//!
//! | in the sandbox | why |
//! |---|---|
//! | `/usr`, `/bin`, `/sbin`, `/lib`, `/lib32`, `/lib64`, `/libx32` (those that exist; symlinks copied as symlinks) | the shell, coreutils, git, patch, the system Python and the dynamic loader and libraries every program needs |
//! | a few entries of `/etc` ([`ETC_ENTRIES`]: users and groups, the loader cache, alternatives, TLS roots, time zone, locale aliases, shell profiles, git/pip/python config), as one read-only snapshot of their world-readable contents (taken when the process starts; one mount rather than one per entry) | what those programs read at start; no credentials, nothing of other services |
//! | the interpreter installation of the venv (from `pyvenv.cfg`'s `dojo-interpreter-home`, else `home`), when it is not under `/usr` | a uv- or pyenv-managed Python under a home directory or `/opt` (one under a home the sandbox uid cannot enter, `/root` at 0700, is staged by the holder before it drops to that uid: only the installation itself is shown, at its own path) |
//! | the language-server tools directory ([`tools_dir`]: `$DOJO_TOOLS`, else `/var/lib/dojo/tools` as root, else `~/.local/share/dojo/tools`), when it exists | the LSP servers agents query run inside the sandbox |
//! | `$DOJO_NODE`'s installation, when set and outside `/usr` | the Node.js that runs the pyright family |
//!
//! Beside those the sandbox has its own `/testbed` (the overlay of the pristine tree), `/venv`
//! (the environment, read-only), `/.dojo-base` (the pristine tree's own `.git`, read-only: the
//! base diffs are computed against, out of the agent's reach), `/tmp` (private, mode 1777), `/dev` (null, zero, full, random,
//! urandom, tty, a private `/dev/shm` and `devpts`), `/proc` (of its own pid namespace) and
//! `/sys` (a fresh sysfs of its own network namespace: no host interfaces, and no cgroup tree,
//! so no other sandbox's memory use).
//!
//! Everything else of the host is absent: `/home`, `/root`, `/var`, `/run`, `/srv`, `/opt`,
//! `/mnt`, `/media`, the checkout and every other project tree, task files, and so every host
//! unix socket (`connect()` to a path is not something Landlock or the network namespace stop;
//! only not seeing the path does). `$DOJO_HOME` (pristine trees, environments, other sandboxes'
//! state) is additionally covered by an empty tmpfs wherever it falls inside something shown,
//! compared by its canonical path, however it is written (relative, through a symlink, with
//! `..`). `dojo sandbox doctor` prints this list for the host it runs on.
//!
//! An environment build ([`crate::pyenv`]; it runs the project's build backend, `setup.py` and
//! the spec's install commands) sees the same system directories and `/etc` entries
//! ([`env_build`]) plus its interpreter's installation when outside `/usr`; no language-server
//! tools. Beside them: `/testbed` (a throwaway overlay of the pristine tree), `/venv` (the
//! cache entry being built, writable), `/uv-cache` (the host's uv cache, writable: where uv
//! puts it, `UV_CACHE_DIR` or `~/.cache/uv`), `/tmp` (private, 1777), `/dev` as above and a
//! `/proc` of its own pid namespace. It keeps the host's network (uv reaches the package
//! index) and none of the caller's environment variables but proxy, TLS-root, `UV_*` and
//! `PIP_*` settings.

use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

/// Top-level system directories shown when they exist.
pub const SYSTEM_DIRS: &[&str] = &["usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// Entries of `/etc` shown when they exist. Everything else of `/etc` (service configuration,
/// host keys, `shadow`, package manager state) stays out.
pub const ETC_ENTRIES: &[&str] = &[
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "ca-certificates.conf",
    "crypto-policies",
    "debian_version",
    "environment",
    "fonts",
    "gai.conf",
    "gitconfig",
    "group",
    "host.conf",
    "hosts",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "locale.conf",
    "localtime",
    "login.defs",
    "lsb-release",
    "magic",
    "magic.mime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "perl",
    "pip.conf",
    "pki",
    "profile",
    "profile.d",
    "protocols",
    "python3",
    "python3.10",
    "python3.11",
    "python3.12",
    "python3.13",
    "python3.8",
    "python3.9",
    "redhat-release",
    "resolv.conf",
    "services",
    "shells",
    "ssl",
    "system-release",
    "terminfo",
    "timezone",
    "vim",
    "xdg",
];

/// How one visible path appears.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A read-only bind of the host directory `source`.
    Dir,
    /// A read-only bind of the host file `source`.
    File,
    /// A copy of a host symlink (pointing at `source`).
    Symlink,
    /// An empty directory holding deeper mount points.
    Parent,
}

/// One path of the host a sandbox sees.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Visible {
    /// Where it appears inside the sandbox.
    pub path: PathBuf,
    /// The host path behind it (canonical), or the symlink's target.
    pub source: PathBuf,
    pub kind: Kind,
    pub why: &'static str,
}

/// The shared tools directory (language servers): [`dojo_cache::tools_dir`].
pub fn tools_dir() -> PathBuf {
    dojo_cache::tools_dir()
}

/// An absolute, `..`-free spelling of `p` without resolving symlinks (relative to the cwd).
fn absolute(p: &Path) -> Option<PathBuf> {
    let p = std::path::absolute(p).ok()?;
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    Some(out)
}

/// How the host path `path` would be shown: a bind of a directory or file, or a copied symlink.
fn entry(path: PathBuf, why: &'static str) -> Option<Visible> {
    let md = std::fs::symlink_metadata(&path).ok()?;
    let (kind, source) = if md.file_type().is_symlink() {
        (Kind::Symlink, std::fs::read_link(&path).ok()?)
    } else if md.is_dir() {
        (Kind::Dir, path.clone())
    } else if md.is_file() {
        (Kind::File, path.clone())
    } else {
        return None;
    };
    Some(Visible {
        path,
        source,
        kind,
        why,
    })
}

/// The system directories and `/etc` entries (the host does not change under a process).
fn system() -> &'static [Visible] {
    static S: OnceLock<Vec<Visible>> = OnceLock::new();
    S.get_or_init(|| {
        let mut v: Vec<Visible> = SYSTEM_DIRS
            .iter()
            .filter_map(|d| {
                entry(
                    Path::new("/").join(d),
                    "system programs, libraries and the dynamic loader",
                )
            })
            .collect();
        if Path::new("/etc").is_dir() {
            v.push(Visible {
                path: "/etc".into(),
                source: "/etc".into(),
                kind: Kind::Parent,
                why: "holds the configuration entries below",
            });
            v.extend(ETC_ENTRIES.iter().filter_map(|e| {
                entry(
                    Path::new("/etc").join(e),
                    "configuration programs read at start",
                )
            }));
        }
        v
    })
}

/// Whether `p` (absolute) is already shown through one of `v`'s binds or symlinks into them.
fn covered(v: &[Visible], p: &Path) -> bool {
    v.iter()
        .any(|e| matches!(e.kind, Kind::Dir | Kind::File) && p.starts_with(&e.path))
        || resolve_in(v, p).is_some_and(|r| {
            v.iter()
                .any(|e| matches!(e.kind, Kind::Dir | Kind::File) && r.starts_with(&e.path))
        })
}

/// `p` with a leading symlinked system directory (`/lib` → `usr/lib`) replaced by its target.
fn resolve_in(v: &[Visible], p: &Path) -> Option<PathBuf> {
    v.iter().find_map(|e| {
        let rest = p.strip_prefix(&e.path).ok()?;
        (e.kind == Kind::Symlink).then(|| {
            let t = if e.source.is_absolute() {
                e.source.clone()
            } else {
                e.path.parent().unwrap_or(Path::new("/")).join(&e.source)
            };
            absolute(&t).unwrap_or(t).join(rest)
        })
    })
}

/// Add a bind of the host directory `dir` at its own path (and the empty parents leading to
/// it), unless it is already visible, is `/` or overlaps the sandbox's own mount points.
fn add_extra(v: &mut Vec<Visible>, dir: &Path, why: &'static str) {
    let Some(written) = absolute(dir) else { return };
    let Ok(source) = std::fs::canonicalize(dir) else {
        return;
    };
    if !source.is_dir() || written == Path::new("/") || covered(v, &written) {
        return;
    }
    let own = ["/testbed", "/venv", "/tmp", "/dev", "/proc", "/sys", "/etc"];
    if own.iter().any(|o| written.starts_with(o)) || v.iter().any(|e| e.path.starts_with(&written))
    {
        return;
    }
    let mut parents: Vec<PathBuf> = written
        .ancestors()
        .skip(1)
        .filter(|a| *a != Path::new("/"))
        .map(Path::to_path_buf)
        .collect();
    parents.reverse();
    for p in parents {
        if v.iter().any(|e| e.path == p) {
            continue;
        }
        v.push(Visible {
            source: p.clone(),
            path: p,
            kind: Kind::Parent,
            why: "leads to a deeper entry",
        });
    }
    v.push(Visible {
        path: written,
        source,
        kind: Kind::Dir,
        why,
    });
}

/// The installation an interpreter belongs to, from the directory holding its binary: the
/// directory above a `bin/`, else that directory itself. The one rule for what sandboxes and
/// builds show of an interpreter (`visible`) and for what must be executable here.
pub fn installation_root(bin_dir: &Path) -> PathBuf {
    match bin_dir.parent() {
        Some(up) if bin_dir.ends_with("bin") => up.to_path_buf(),
        _ => bin_dir.to_path_buf(),
    }
}

/// The interpreter installation a venv's `python` comes from: `pyvenv.cfg`'s `home` (its `bin`
/// directory), one level up. A venv built by dojo names it `dojo-interpreter-home`: its `home`
/// is the venv's own `.dojo-base/bin`, links into that installation (`pyenv::BUILD_SCRIPT`).
fn interpreter_root(venv: &Path) -> Option<PathBuf> {
    let cfg = std::fs::read_to_string(venv.join("pyvenv.cfg")).ok()?;
    let key = |name: &str| {
        cfg.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == name).then(|| PathBuf::from(v.trim()))
        })
    };
    let home = key("dojo-interpreter-home").or_else(|| key("home"))?;
    let home = std::fs::canonicalize(home).ok()?;
    Some(installation_root(&home))
}

/// Everything of the host a sandbox with this venv sees, in mount order (parents first).
pub fn visible(venv: Option<&Path>) -> Vec<Visible> {
    let mut v = system().to_vec();
    if let Some(root) = venv.and_then(interpreter_root) {
        add_extra(&mut v, &root, "the venv's Python installation");
    }
    // Made before it is needed: a language server installed after this sandbox was created
    // (the first `lsp_tool` call on a fresh machine) lands inside a directory that is already
    // bound, so the sandbox sees it; a directory missing now would never be shown.
    let tools = tools_dir();
    if !tools.is_dir() {
        let _ = std::fs::create_dir_all(&tools);
    }
    add_extra(&mut v, &tools, "language-server tools");
    if let Some(node) = std::env::var_os("DOJO_NODE").filter(|n| !n.is_empty())
        && let Ok(real) = std::fs::canonicalize(&node)
        && let Some(prefix) = real.parent().and_then(Path::parent)
    {
        add_extra(&mut v, prefix, "the Node.js that runs the pyright family");
    }
    v
}

/// Everything of the host an environment build sees (see [`crate::pyenv`]): the system
/// directories and `/etc` entries, and the installation of the interpreter `python` when it is
/// not under `/usr`. No language-server tools: a build does not run them.
pub fn env_build(python: &Path) -> Vec<Visible> {
    let mut v = system().to_vec();
    if let Ok(real) = std::fs::canonicalize(python)
        && let Some(bin) = real.parent()
    {
        let root = installation_root(bin);
        add_extra(&mut v, &root, "the build's Python installation");
    }
    v
}

/// Bumped when the snapshot's layout changes.
const ETC_SNAPSHOT_VERSION: &str = "etc-v1";

/// The `/etc` entries of `v` as one directory to bind at `/etc`: a copy under
/// `$DOJO_HOME/etc/<fingerprint>/etc`, made once per host state and shared by every process.
///
/// Why a copy and not a bind per entry: each per-command mount namespace copies every mount
/// of the sandbox (and tears them down when the command ends), and the ~40 entries of `/etc`
/// were most of them. The copy holds only what is world-readable (the binds showed nothing
/// else either: the sandbox uid is not the owner); symlinks stay symlinks. Its key is a
/// fingerprint of every entry's type, mode, size, mtime, inode and link target, taken once per
/// process: a host change (a new `ld.so.cache`, updated CA roots) gives a new snapshot at the
/// next start. `None` (the entries are then bound one by one) when the cache is not writable,
/// or with `DOJO_SANDBOX_ETC=binds` (the layout before the snapshot, for comparisons).
pub(crate) fn etc_snapshot(v: &[Visible]) -> Option<PathBuf> {
    static SNAP: OnceLock<Option<PathBuf>> = OnceLock::new();
    SNAP.get_or_init(|| {
        if std::env::var("DOJO_SANDBOX_ETC").is_ok_and(|v| v == "binds") {
            return None;
        }
        let entries: Vec<&Visible> = v
            .iter()
            .filter(|e| e.path.parent() == Some(Path::new("/etc")) && e.kind != Kind::Parent)
            .collect();
        let mut print = String::from(ETC_SNAPSHOT_VERSION);
        for e in &entries {
            fingerprint(&e.path, &mut print);
        }
        let key = dojo_cache::sha256_hex(&print);
        let cache = dojo_cache::Cache::open().ok()?;
        let built = cache.get_or_build("etc", &key, |tmp| -> std::io::Result<()> {
            let etc = tmp.join("etc");
            std::fs::create_dir(&etc)?;
            for e in &entries {
                if let Some(name) = e.path.file_name() {
                    copy_readable(&e.path, &etc.join(name))?;
                }
            }
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&etc, std::fs::Permissions::from_mode(0o755))?;
            std::fs::set_permissions(tmp, std::fs::Permissions::from_mode(0o755))
        });
        match built {
            Ok(dir) => Some(dir.join("etc")),
            Err(e) => {
                tracing::warn!("no /etc snapshot ({e}); binding the entries one by one");
                None
            }
        }
    })
    .clone()
}

/// Append what identifies `p` and everything under it (not following symlinks).
fn fingerprint(p: &Path, out: &mut String) {
    use std::fmt::Write;
    use std::os::unix::fs::MetadataExt;
    let Ok(md) = std::fs::symlink_metadata(p) else {
        return;
    };
    let _ = write!(
        out,
        "\n{}\t{:o}\t{}\t{}.{}\t{}",
        p.display(),
        md.mode(),
        md.size(),
        md.mtime(),
        md.mtime_nsec(),
        md.ino()
    );
    if md.file_type().is_symlink() {
        if let Ok(t) = std::fs::read_link(p) {
            let _ = write!(out, "\t-> {}", t.display());
        }
    } else if md.is_dir()
        && let Ok(rd) = std::fs::read_dir(p)
    {
        let mut names: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
        names.sort();
        for n in names {
            fingerprint(&n, out);
        }
    }
}

/// Copy `src` to `dst`: world-readable files and directories (modes kept), symlinks as
/// symlinks; anything else (unreadable entries, sockets, devices) is left out.
fn copy_readable(src: &Path, dst: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let md = std::fs::symlink_metadata(src)?;
    let mode = md.permissions().mode();
    if md.file_type().is_symlink() {
        std::os::unix::fs::symlink(std::fs::read_link(src)?, dst)?;
    } else if md.is_dir() && mode & 0o005 == 0o005 {
        std::fs::create_dir(dst)?;
        for e in std::fs::read_dir(src)?.flatten() {
            copy_readable(&e.path(), &dst.join(e.file_name()))?;
        }
        std::fs::set_permissions(dst, std::fs::Permissions::from_mode(mode & 0o755))?;
    } else if md.is_file() && mode & 0o004 != 0 {
        std::fs::copy(src, dst)?;
        std::fs::set_permissions(dst, std::fs::Permissions::from_mode(mode & 0o755))?;
    }
    Ok(())
}

/// Where `$DOJO_HOME` appears inside a sandbox with these entries: each spot to cover with an
/// empty tmpfs (its canonical path compared with each bind's canonical source).
pub fn hidden(v: &[Visible]) -> Vec<PathBuf> {
    let home = dojo_cache::dojo_home();
    let mut homes = Vec::new();
    if let Ok(c) = std::fs::canonicalize(&home) {
        homes.push(c);
    }
    if let Some(a) = absolute(&home)
        && !homes.contains(&a)
    {
        homes.push(a);
    }
    let mut out = Vec::new();
    for h in &homes {
        for e in v {
            if !matches!(e.kind, Kind::Dir) {
                continue;
            }
            if let Ok(rest) = h.strip_prefix(&e.source) {
                let spot = e.path.join(rest);
                if !out.contains(&spot) {
                    out.push(spot);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_removes_dots_without_resolving() {
        assert_eq!(
            absolute(Path::new("/a/b/../c/./d")).unwrap(),
            PathBuf::from("/a/c/d")
        );
    }

    #[test]
    fn home_directories_and_var_are_not_shown() {
        let v = visible(None);
        for p in [
            "/home", "/root", "/var", "/run", "/srv", "/opt", "/mnt", "/work",
        ] {
            // Only as an empty parent on the way to the tools directory (`/var/lib/dojo/tools`
            // as root), never with its contents.
            let tools = tools_dir();
            assert!(
                !v.iter()
                    .any(|e| e.path == Path::new(p)
                        && !(e.kind == Kind::Parent && tools.starts_with(p))),
                "{p} is visible: {v:?}"
            );
            assert!(
                !v.iter().any(|e| e.path.starts_with(p)
                    && e.kind != Kind::Parent
                    && !e.path.starts_with(&tools)),
                "something under {p} is visible: {v:?}"
            );
        }
        assert!(v.iter().any(|e| e.path == Path::new("/usr")));
    }

    #[test]
    fn the_sandboxs_own_mount_points_are_never_bound_from_the_host() {
        let mut v = system().to_vec();
        let d = tempfile::tempdir().unwrap();
        let deep = d.path().join("a/b");
        std::fs::create_dir_all(&deep).unwrap();
        add_extra(&mut v, &deep, "test");
        // Under /tmp: one of the sandbox's own mount points, never shown from the host.
        assert!(!v.iter().any(|e| e.path == deep));
    }
}
