//! The pinned `uv` that builds the Python environments.
//!
//! A user's own `uv` is used when one is configured or on PATH; otherwise dojo fetches the
//! pinned wheel from PyPI once (sha256-checked, through the `$DOJO_HOME` cache) and unpacks its
//! binary, so `dojo demo` works on a fresh machine without a separate setup step.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::BuildError;

/// The `uv` version dojo installs when none is found (the same pin as `scripts/setup-tools.sh`).
pub const UV_VERSION: &str = "0.13.9";

/// PyPI wheels of the pinned `uv`: (arch, file name, URL, sha256).
const WHEELS: &[(&str, &str, &str, &str)] = &[
    (
        "x86_64",
        "uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "https://files.pythonhosted.org/packages/3d/aa/26d64642d808de4a652579ef950d7cd2d37f080a8babf9c67c6b75fc4c3f/uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19",
    ),
    (
        "aarch64",
        "uv-0.13.9-py3-none-manylinux_2_28_aarch64.whl",
        "https://files.pythonhosted.org/packages/fe/2f/51a5de367c602592c018a42a23d57fba5f2689fe6c3bf025dcf043b39c61/uv-0.13.9-py3-none-manylinux_2_28_aarch64.whl",
        "ecb6028d79dc96fbeafffe5c8af62a7099487ebc05a701e76714eebcffd06375",
    ),
];

/// `uv`: `$DOJO_UV`, else `$DOJO_PYTOOLS/bin/uv`, else `uv` on PATH.
pub fn find_uv() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("DOJO_UV").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    if let Some(t) = std::env::var_os("DOJO_PYTOOLS") {
        let p = Path::new(&t).join("bin/uv");
        if p.exists() {
            return Some(p);
        }
    }
    crate::cmdenv::on_host_path("uv")
}

/// [`find_uv`], else the pinned `uv` from PyPI, fetched and unpacked once into the cache.
/// The error says what was tried and how to provide `uv` by hand.
pub fn ensure_uv() -> Result<PathBuf, BuildError> {
    if let Some(p) = find_uv() {
        return Ok(p);
    }
    let arch = std::env::consts::ARCH;
    let Some(&(_, file, url, sha256)) = WHEELS.iter().find(|w| w.0 == arch) else {
        return Err(BuildError::NoUvWheel { arch });
    };
    let fail = |source| BuildError::UvInstall {
        version: UV_VERSION,
        source,
    };
    let cache = dojo_cache::Cache::open().map_err(fail)?;
    let wheel = cache.fetch(url, sha256, file).map_err(fail)?;
    let entry = cache
        .get_or_build("tools", &format!("uv-{UV_VERSION}-{arch}"), |tmp| {
            unpack_binary(&wheel, tmp)
        })
        .map_err(fail)?;
    Ok(entry.join("uv"))
}

/// Unpack `uv` from the wheel (a zip) into `dir/uv`, world-executable (sandboxed builds run it
/// as an unprivileged uid).
fn unpack_binary(wheel: &Path, dir: &Path) -> Result<(), BuildError> {
    let member = format!("uv-{UV_VERSION}.data/scripts/uv");
    let bin = dir.join("uv");
    dojo_cache::archive::extract_zip_member(wheel, &member, &bin, 0o755)?;
    let v = Command::new(&bin)
        .arg("--version")
        .output()
        .map_err(BuildError::io(format_args!("running {}", bin.display())))?;
    let text = String::from_utf8_lossy(&v.stdout);
    if !v.status.success() || !text.contains(UV_VERSION) {
        return Err(BuildError::UvVersion {
            bin: bin.clone(),
            printed: text.trim().to_string(),
            expected: UV_VERSION,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh machine: no uv configured or on PATH, empty cache. dojo fetches the pinned wheel
    /// from PyPI and the binary it unpacks runs.
    #[test]
    fn installs_the_pinned_uv_from_pypi_when_none_is_found() {
        let Some(&(_, file, url, sha256)) = WHEELS.iter().find(|w| w.0 == std::env::consts::ARCH)
        else {
            println!("SKIPPED: no pinned uv wheel for {}", std::env::consts::ARCH);
            return;
        };
        // Reuse the real download cache (the wheel is 17 MB), unpack into a fresh directory.
        let wheel = match dojo_cache::Cache::open().and_then(|c| c.fetch(url, sha256, file)) {
            Ok(w) => w,
            Err(e) if std::env::var("CI").as_deref() != Ok("true") => {
                println!("SKIPPED: fetching {url}: {e}");
                return;
            }
            Err(e) => panic!("fetching the pinned uv wheel: {e}"),
        };
        let dir = tempfile::tempdir().unwrap();
        unpack_binary(&wheel, dir.path()).unwrap();
        let out = Command::new(dir.path().join("uv"))
            .arg("--version")
            .output()
            .unwrap();
        assert!(String::from_utf8_lossy(&out.stdout).contains(UV_VERSION));
    }

    #[test]
    fn a_wheel_without_uv_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let bogus = dir.path().join("bogus.whl");
        std::fs::write(&bogus, b"not a zip").unwrap();
        let e = unpack_binary(&bogus, dir.path()).unwrap_err().to_string();
        assert!(e.contains("bogus.whl"), "{e}");
    }
}
