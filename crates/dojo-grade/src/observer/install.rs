//! Installing the observer into an environment: its source, its compiled cache and the
//! one-line `.pth` that runs it at interpreter startup ([`install`]).

use std::path::{Path, PathBuf};

/// The observer's source, installed in each environment's site-packages ([`install`]).
pub const OBSERVER_PY: &str = include_str!("../observer.py");

/// The file names [`install`] writes. The `.pth` sorts first, so it runs before any other
/// `.pth` of the environment (an editable install's path hook included).
const PY_NAME: &str = "_dojo_observer.py";
const PTH_NAME: &str = "00-dojo-observer.pth";

/// Why the observer could not be installed in an environment.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("no lib/python*/site-packages under the environment {0}")]
    NoSitePackages(PathBuf),
    #[error("writing the test observer into {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The observer compiled by the environment's interpreter (its `sys.version`, a NUL, then the
/// marshalled code), named by the source's hash, so that a `.pth` only ever names the cache of
/// its own source. Compiling the source at every interpreter start cost about 9 ms.
fn cache_name() -> String {
    use sha2::{Digest, Sha256};
    let h = Sha256::digest(OBSERVER_PY.as_bytes());
    let hex: String = h[..6].iter().map(|x| format!("{x:02x}")).collect();
    format!("_dojo_observer.{hex}.cache")
}

/// The `.pth` line for the observer in `site` (relative to the environment's prefix): Python
/// runs a `.pth` line that starts with `import` at startup. It loads the observer only when
/// grading named a run, from the compiled cache when it was made by this very interpreter
/// (else from the source), with a copy of the builtins taken then (code under test that
/// replaces `builtins.getattr` later does not reach the observer's), and never lets an error of
/// its own stop the interpreter.
fn pth_line(site: &str) -> String {
    let program = format!(
        "try:
 import sys, marshal, builtins
 d = os.path.join(sys.prefix, '{site}')
 c = None
 try:
  h, _, b = open(os.path.join(d, '{cache}'), 'rb').read().partition(chr(0).encode())
  c = marshal.loads(b) if h == sys.version.encode() else None
 except Exception:
  pass
 p = os.path.join(d, '{PY_NAME}')
 if c is None:
  c = compile(open(p, 'rb').read(), p, 'exec')
 exec(c, {{'__name__': '_dojo_observer', '__file__': p, '__builtins__': dict(builtins.__dict__)}})
except Exception:
 pass
",
        cache = cache_name()
    );
    format!("import os; 'DOJO_OBSERVER_RUN' in os.environ and exec({program:?})\n")
}

/// Install the observer in the environment at `venv` (its host path): idempotent, each file
/// written only when its content differs, atomically (`dojo_rundir::write_atomic`) so that a
/// concurrent grading run never reads half a file; the compiled cache made once per observer source by the
/// environment's own interpreter (`-I -S`: nothing of the environment runs), on the host. A
/// cache that cannot be made is only slower: the `.pth` compiles the source instead.
pub fn install(venv: &Path) -> Result<(), InstallError> {
    let lib = venv.join("lib");
    let mut found = false;
    let dirs = std::fs::read_dir(&lib).map_err(|source| InstallError::Write {
        path: lib.clone(),
        source,
    })?;
    for d in dirs.flatten() {
        let name = d.file_name().to_string_lossy().into_owned();
        let site = d.path().join("site-packages");
        if !name.starts_with("python") || !site.is_dir() {
            continue;
        }
        found = true;
        write_if_changed(&site.join(PY_NAME), OBSERVER_PY)?;
        let cache = site.join(cache_name());
        if !cache.exists() {
            compile_cache(venv, &site.join(PY_NAME), &cache);
            remove_stale_caches(&site, &cache_name());
        }
        write_if_changed(
            &site.join(PTH_NAME),
            &pth_line(&format!("lib/{name}/site-packages")),
        )?;
    }
    if !found {
        return Err(InstallError::NoSitePackages(venv.to_path_buf()));
    }
    Ok(())
}

/// Compile `source` into `cache` with the environment's interpreter; failures leave no cache.
fn compile_cache(venv: &Path, source: &Path, cache: &Path) {
    const PROGRAM: &str = "import marshal, sys\n\
        code = compile(open(sys.argv[1], 'rb').read(), sys.argv[1], 'exec')\n\
        sys.stdout.buffer.write(sys.version.encode() + bytes([0]) + marshal.dumps(code))\n";
    let out = std::process::Command::new(venv.join("bin").join("python"))
        .args(["-I", "-S", "-c", PROGRAM])
        .arg(source)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    let written = match out {
        Ok(o) if o.status.success() => dojo_rundir::write_atomic(cache, &o.stdout).is_ok(),
        _ => false,
    };
    if !written {
        tracing::debug!(cache = %cache.display(), "the observer's compiled cache was not made");
    }
}

/// Other observer versions' caches in `site` (a `.pth` names only its own).
fn remove_stale_caches(site: &Path, keep: &str) {
    for e in std::fs::read_dir(site).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("_dojo_observer.") && name.ends_with(".cache") && name != keep {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

fn write_if_changed(path: &Path, content: &str) -> Result<(), InstallError> {
    if std::fs::read(path).is_ok_and(|b| b == content.as_bytes()) {
        return Ok(());
    }
    dojo_rundir::write_atomic(path, content.as_bytes()).map_err(|source| InstallError::Write {
        path: path.to_path_buf(),
        source,
    })
}
