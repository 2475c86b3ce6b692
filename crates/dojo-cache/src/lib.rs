//! # dojo-cache: the `$DOJO_HOME` cache shared by every stage
//!
//! Pristine trees (sandbox), Python environments (sandbox), downloaded sources (task) and model
//! files (engine) are all expensive to build and must never be seen half-built. This crate owns
//! the one mechanism they share:
//!
//! - [`Cache::get_or_build`]: build an entry at most once across threads *and processes*
//!   (an exclusive file lock per entry), into a temporary sibling directory, then publish it with
//!   an atomic `rename`. A crash mid-build leaves only a temporary directory, which the next
//!   build in its bucket removes once no builder holds its key's lock; readers never see a
//!   partial entry.
//! - [`Cache::fetch`]: a download checked against its sha256 before it is published.
//! - [`share`]: identical files of entries stored once (hard links into `objects/`).
//! - [`archive`]: unpacking the sdists and wheels those entries are built from.
//!
//! One file published atomically (reports, summaries, manifests) is `dojo_rundir::write_atomic`.
//!
//! Layout: `$DOJO_HOME/<bucket>/<key>` (default `$DOJO_HOME` = `~/.cache/dojo`).

pub mod archive;
pub mod share;

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Errors name the entry and the cause, so a user can see which cache path to inspect.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cache directory {path} is not usable: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("download of {url} failed: {source}")]
    Download {
        url: String,
        #[source]
        source: BoxError,
    },
    /// A `file:` URL whose file could not be read.
    #[error("download of {url} failed: reading {}: {source}", .path.display())]
    Local {
        url: String,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("sha256 mismatch for {url}: expected {expected}, got {actual}")]
    Checksum {
        url: String,
        expected: String,
        actual: String,
    },
    #[error("building cache entry {entry} failed: {source}")]
    Build {
        entry: PathBuf,
        #[source]
        source: BoxError,
    },
}

/// A cause kept as it was (an HTTP client's error, a builder's own error type).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub type Result<T, E = CacheError> = std::result::Result<T, E>;

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> CacheError + '_ {
    move |source| CacheError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The root of every cached artefact: `$DOJO_HOME`, else `$HOME/.cache/dojo`.
pub fn dojo_home() -> PathBuf {
    if let Some(h) = std::env::var_os("DOJO_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    home.join(".cache").join("dojo")
}

/// The shared tools directory (language servers), one rule for the crate that installs there
/// (dojo-lsp) and the one that shows it to sandboxes (dojo-sandbox): `$DOJO_TOOLS`, else a
/// directory sandboxes can see (they hide `$DOJO_HOME` and mount a private `/tmp`, so a server
/// installed there could not start inside a rollout): `/var/lib/dojo/tools` for root (root-owned,
/// so no sandbox can plant a binary there first), `$XDG_DATA_HOME/dojo/tools` (default
/// `~/.local/share/dojo/tools`) otherwise.
pub fn tools_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("DOJO_TOOLS").filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return PathBuf::from("/var/lib/dojo/tools");
    }
    let data = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")));
    match data {
        Some(d) => d.join("dojo/tools"),
        None => dojo_home().join("tools"),
    }
}

/// Hex sha256 of some bytes; cache keys are built from it.
pub fn sha256_hex(bytes: impl AsRef<[u8]>) -> String {
    hex::encode(Sha256::digest(bytes.as_ref()))
}

/// Hex sha256 of a file's contents, streamed.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = File::open(path).map_err(io_err(path))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf).map_err(io_err(path))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// A cache rooted at one directory.
#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
}

impl Cache {
    /// The cache at [`dojo_home`].
    pub fn open() -> Result<Cache> {
        Cache::at(dojo_home())
    }

    /// A cache rooted at `root` (created if missing).
    pub fn at(root: impl Into<PathBuf>) -> Result<Cache> {
        let root = root.into();
        fs::create_dir_all(&root).map_err(io_err(&root))?;
        Ok(Cache { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `$DOJO_HOME/<bucket>`, created if missing.
    pub fn bucket(&self, bucket: &str) -> Result<PathBuf> {
        let dir = self.root.join(bucket);
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        Ok(dir)
    }

    /// Store the identical files of `dir` (an entry being built) once: [`share::share_files`]
    /// into the `objects` bucket.
    pub fn share(&self, dir: &Path) -> Result<share::ShareStats> {
        share::share_files(dir, &self.bucket("objects")?)
    }

    /// [`Cache::share`] for a builder (a venv, a pristine tree), before it publishes: only disk
    /// is at stake, so a failure is logged and the entry keeps its own copies.
    pub fn share_or_keep(&self, dir: &Path) {
        match self.share(dir) {
            Ok(s) => tracing::info!(
                dir = %dir.display(),
                files = s.files,
                shared_mb = s.shared_bytes / 1_000_000,
                stored_mb = s.stored_bytes / 1_000_000,
                "cache entry's files stored once"
            ),
            Err(e) => tracing::warn!(
                dir = %dir.display(),
                error = &e as &dyn std::error::Error,
                "cache entry's files not shared; the entry keeps its own copies"
            ),
        }
    }

    /// Return `<bucket>/<key>`, building it first if it does not exist.
    ///
    /// `build` receives an empty temporary directory and must fill it; on success it becomes the
    /// entry atomically. Concurrent callers (threads or processes) for the same key wait on a lock
    /// and then find the published entry. On failure nothing is published.
    pub fn get_or_build<E: Into<BoxError>>(
        &self,
        bucket: &str,
        key: &str,
        build: impl FnOnce(&Path) -> std::result::Result<(), E>,
    ) -> Result<PathBuf> {
        let dir = self.bucket(bucket)?;
        let entry = dir.join(key);
        if entry.exists() {
            return Ok(entry);
        }
        let lock_path = dir.join(format!(".{key}.lock"));
        let lock = File::create(&lock_path).map_err(io_err(&lock_path))?;
        lock.lock().map_err(io_err(&lock_path))?;
        // Someone else may have published while we waited.
        if entry.exists() {
            return Ok(entry);
        }
        sweep_orphans(&dir, key);
        let tmp = dir.join(format!(".{key}.tmp-{}", std::process::id()));
        if tmp.exists() {
            fs::remove_dir_all(&tmp).map_err(io_err(&tmp))?;
        }
        fs::create_dir_all(&tmp).map_err(io_err(&tmp))?;
        if let Err(e) = build(&tmp) {
            let _ = fs::remove_dir_all(&tmp);
            return Err(CacheError::Build {
                entry,
                source: e.into(),
            });
        }
        fs::rename(&tmp, &entry).map_err(io_err(&entry))?;
        tracing::debug!(entry = %entry.display(), "published cache entry");
        Ok(entry)
    }

    /// Download `url` into `downloads/<sha256>/<file_name>` unless already there, verifying the
    /// sha256 before publishing. Returns the file's path.
    pub fn fetch(&self, url: &str, sha256: &str, file_name: &str) -> Result<PathBuf> {
        let sha = sha256.to_ascii_lowercase();
        let dir = self.get_or_build("downloads", &sha, |tmp| -> Result<()> {
            let dest = tmp.join(file_name);
            download(url, &dest)?;
            let actual = sha256_file(&dest)?;
            if actual != sha {
                return Err(CacheError::Checksum {
                    url: url.to_string(),
                    expected: sha.clone(),
                    actual,
                });
            }
            Ok(())
        })?;
        Ok(dir.join(file_name))
    }
}

/// The CA bundle the host trusts, as pip, git and curl use it: `SSL_CERT_FILE`, else Debian's
/// bundle. Hosts behind a TLS-inspecting proxy add its CA there, and Mozilla's built-in roots
/// alone would then reject every download.
fn system_root_certs() -> Option<ureq::tls::RootCerts> {
    let path = std::env::var_os("SSL_CERT_FILE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/etc/ssl/certs/ca-certificates.crt"));
    let pem = fs::read(&path).ok()?;
    let certs: Vec<_> = ureq::tls::parse_pem(&pem)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    (!certs.is_empty()).then(|| ureq::tls::RootCerts::new_with_certs(&certs))
}

/// The HTTP agent of every download: the environment's proxy settings and CA bundle, as pip
/// and cargo use them.
fn agent() -> ureq::Agent {
    let mut tls = ureq::tls::TlsConfig::builder();
    if let Some(roots) = system_root_certs() {
        tls = tls.root_certs(roots);
    }
    ureq::Agent::config_builder()
        .proxy(ureq::Proxy::try_from_env())
        .tls_config(tls.build())
        .build()
        .into()
}

/// Remove the temporary directories that builders killed mid-build left in `dir` (a bucket):
/// `.<key>.tmp-<pid>` of a key whose lock nobody holds. The caller holds `own`'s lock, so every
/// temporary of `own` is an orphan. Best effort: what cannot be removed stays for the next
/// build (each is hundreds of MB for an environment, and nothing else would ever remove it).
fn sweep_orphans(dir: &Path, own: &str) {
    let Ok(names) = fs::read_dir(dir) else {
        return;
    };
    for name in names.flatten().map(|e| e.file_name()) {
        let Some((key, _pid)) = name
            .to_str()
            .and_then(|n| n.strip_prefix('.'))
            .and_then(|n| n.rsplit_once(".tmp-"))
        else {
            continue;
        };
        let path = dir.join(&name);
        if key == own {
            let _ = fs::remove_dir_all(&path);
            continue;
        }
        // A builder of `key` holds its lock for as long as its temporary is in use.
        let lock_path = dir.join(format!(".{key}.lock"));
        let Ok(lock) = File::create(&lock_path) else {
            continue;
        };
        if lock.try_lock().is_ok() {
            let _ = fs::remove_dir_all(&path);
        }
    }
}

/// GET a small document (a package index page) into memory, with an `Accept` header. Not
/// cached and not checksummed: use it to find the URL and sha256 that [`Cache::fetch`] then
/// downloads and verifies.
pub fn http_get(url: &str, accept: &str) -> Result<Vec<u8>> {
    let fail = |source: ureq::Error| CacheError::Download {
        url: url.to_string(),
        source: source.into(),
    };
    let resp = agent()
        .get(url)
        .header("Accept", accept)
        .call()
        .map_err(fail)?;
    resp.into_body()
        .with_config()
        .limit(64 << 20)
        .read_to_vec()
        .map_err(fail)
}

/// Stream `url` to `dest`. Uses the proxy settings and CA bundle of the environment, as pip and
/// cargo do. A `file:` URL (task files may name local sdists) is copied from this machine.
fn download(url: &str, dest: &Path) -> Result<()> {
    let fail = |source: BoxError| CacheError::Download {
        url: url.to_string(),
        source,
    };
    if url
        .get(..5)
        .is_some_and(|s| s.eq_ignore_ascii_case("file:"))
    {
        let src =
            file_url_path(url).ok_or_else(|| fail("not a local file URL (file:///path)".into()))?;
        fs::copy(&src, dest).map_err(|source| CacheError::Local {
            url: url.to_string(),
            path: src.clone(),
            source,
        })?;
        return Ok(());
    }
    let resp = agent().get(url).call().map_err(|e| fail(e.into()))?;
    let mut reader = resp.into_body().into_reader();
    let mut out = File::create(dest).map_err(io_err(dest))?;
    io::copy(&mut reader, &mut out).map_err(|e| fail(e.into()))?;
    out.flush().map_err(io_err(dest))?;
    Ok(())
}

/// The local path of `file:///path` (or `file://localhost/path`), percent-decoded; `None` for
/// another host or a malformed escape.
fn file_url_path(url: &str) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let rest = url.get(5..)?.strip_prefix("//")?;
    let host_len = rest.find('/')?;
    if !(host_len == 0 || rest[..host_len].eq_ignore_ascii_case("localhost")) {
        return None;
    }
    let path = rest[host_len..].split(['?', '#']).next()?.as_bytes();
    let mut bytes = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < path.len() {
        if path[i] == b'%' {
            // Two hex digits exactly (`from_str_radix` alone would take "+1").
            let hex = path.get(i + 1..i + 3)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            bytes.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            i += 3;
        } else {
            bytes.push(path[i]);
            i += 1;
        }
    }
    Some(PathBuf::from(std::ffi::OsString::from_vec(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn builds_once_under_contention() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::at(tmp.path()).unwrap();
        let builds = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let cache = cache.clone();
                let builds = builds.clone();
                std::thread::spawn(move || {
                    cache
                        .get_or_build("b", "k", |d| -> io::Result<()> {
                            builds.fetch_add(1, Ordering::SeqCst);
                            fs::write(d.join("f"), b"x")
                        })
                        .unwrap()
                })
            })
            .collect();
        for h in handles {
            let p = h.join().unwrap();
            assert_eq!(fs::read(p.join("f")).unwrap(), b"x");
        }
        assert_eq!(builds.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn failed_build_publishes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::at(tmp.path()).unwrap();
        let err = cache
            .get_or_build("b", "k", |d| {
                fs::write(d.join("half"), b"x").unwrap();
                Err("boom")
            })
            .unwrap_err();
        assert!(err.to_string().contains("boom"), "{err}");
        assert!(!tmp.path().join("b/k").exists());
        let leftovers: Vec<_> = fs::read_dir(tmp.path().join("b"))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains("tmp"))
            .collect();
        assert!(leftovers.is_empty());
    }

    /// Temporaries of builders killed mid-build (another pid) are removed by the next build in
    /// the bucket, its own key's and other keys' alike, but never one whose key's lock is held.
    #[test]
    fn a_killed_builders_temporaries_are_swept_unless_their_key_is_locked() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::at(tmp.path()).unwrap();
        let b = cache.bucket("b").unwrap();
        for orphan in [".k.tmp-999999", ".other.tmp-999998", ".busy.tmp-999997"] {
            fs::create_dir_all(b.join(orphan).join("venv")).unwrap();
        }
        let busy = File::create(b.join(".busy.lock")).unwrap();
        busy.lock().unwrap();
        // (flock: a lock taken through another open file of the same path conflicts.)
        std::thread::scope(|s| {
            s.spawn(|| cache.get_or_build("b", "k", |d| fs::write(d.join("f"), b"x")))
                .join()
                .unwrap()
                .unwrap();
        });
        assert!(!b.join(".k.tmp-999999").exists());
        assert!(!b.join(".other.tmp-999998").exists());
        assert!(b.join(".busy.tmp-999997").exists(), "a held lock: in use");
        drop(busy);
    }

    /// A real download from PyPI (a registry this project may reach): the verified file is
    /// published, and a wrong checksum publishes nothing.
    #[test]
    fn fetch_verifies_sha256_against_pypi() {
        const URL: &str = "https://files.pythonhosted.org/packages/01/e1/2069291243c926a2ff1cd706c7f3eeb9b62144bf60f77c9fb9ff2fb26bd3/iniconfig-2.3.1.tar.gz";
        const SHA: &str = "67f4b9c50da0dedf52af349e7749a80a9057a5031199791b906c3bb3ae878960";
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::at(tmp.path()).unwrap();
        let path = cache.fetch(URL, SHA, "iniconfig-2.3.1.tar.gz").unwrap();
        assert_eq!(sha256_file(&path).unwrap(), SHA);
        let wrong = "0".repeat(64);
        let err = cache.fetch(URL, &wrong, "x.tar.gz").unwrap_err();
        assert!(err.to_string().contains("sha256 mismatch"), "{err}");
        assert!(!tmp.path().join("downloads").join(&wrong).exists());
    }

    /// A `file:` source is read from this machine and checked like a download.
    #[test]
    fn fetch_reads_local_file_urls() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::at(tmp.path().join("cache")).unwrap();
        let src = tmp.path().join("a b%.tar.gz");
        fs::write(&src, b"sdist bytes").unwrap();
        let sha = sha256_hex(b"sdist bytes");
        let url = format!("file://{}", tmp.path().join("a%20b%25.tar.gz").display());
        let got = cache.fetch(&url, &sha, "x.tar.gz").unwrap();
        assert_eq!(fs::read(got).unwrap(), b"sdist bytes");
        let wrong = cache.fetch(&url, &"0".repeat(64), "x.tar.gz").unwrap_err();
        assert!(wrong.to_string().contains("sha256 mismatch"), "{wrong}");
        for bad in [
            "file://otherhost/x",
            "file:///a/%zz",
            "file:///a/%+1",
            "file:relative",
        ] {
            assert!(cache.fetch(bad, &"1".repeat(64), "y").is_err(), "{bad}");
        }
        assert_eq!(
            file_url_path("file://localhost/a/%C3%A9?q#f"),
            Some(PathBuf::from("/a/\u{e9}"))
        );
    }

    #[test]
    fn sha256_of_known_bytes() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
