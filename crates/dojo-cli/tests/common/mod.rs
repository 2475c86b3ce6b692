//! Helpers shared by the end-to-end tests of the `dojo` binary (each test file includes this
//! module; not every file uses every helper).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// The bundled benchmark's task file.
pub const BUNDLED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tasksets/mini/tasks.jsonl"
);

/// Under `CI=true` a missing prerequisite CI provides is a failure, not a skip.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Where `scripts/setup-tools.sh` puts the pinned Python tools (`uv`, `datasets`, …).
pub fn pytools() -> PathBuf {
    std::env::var_os("DOJO_PYTOOLS").map_or_else(
        || PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/pytools")),
        PathBuf::from,
    )
}

/// Run the real binary with `args` and the pinned tools; echo everything for failing tests.
pub fn dojo(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_dojo"))
        .args(args)
        .env("DOJO_PYTOOLS", pytools())
        .output()
        .expect("running the dojo binary");
    eprintln!(
        "$ dojo {}\n--- exit {:?}\n--- stdout\n{}--- stderr\n{}",
        args.join(" "),
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A scratch directory (removed on drop) for one test.
pub fn scratch(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("dojo-cli-{tag}-"))
        .tempdir()
        .expect("scratch dir")
}

/// The sandbox can run and the bundled tasks `ids` have their trees and environments (built
/// now if needed, which needs PyPI and `uv`: `source scripts/setup-tools.sh`). `Err` = the
/// reason to skip; under `CI=true` a missing kernel feature fails instead.
pub fn bundled_ready(ids: &[&str]) -> Result<(), String> {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("DOJO_PYTOOLS").is_none() {
            // SAFETY: set once, under the Once, before this test process starts other threads
            // that read the environment (std serialises its own reads with set_var).
            unsafe { std::env::set_var("DOJO_PYTOOLS", pytools()) };
        }
    });
    if !dojo_sandbox::doctor::namespaces_usable() {
        let reason = "user/mount/pid/net namespaces unavailable".to_string();
        assert!(!ci(), "CI=true: {reason}");
        return Err(reason);
    }
    let tasks = dojo_task::load_tasks(std::path::Path::new(BUNDLED)).map_err(|e| e.to_string())?;
    let reg = dojo_task::EnvRegistry::embedded().map_err(|e| e.to_string())?;
    for id in ids {
        let t = tasks
            .iter()
            .find(|t| t.instance_id == *id)
            .ok_or_else(|| format!("{id} not in the bundled benchmark"))?;
        let env = reg.resolve(t).map_err(|e| e.to_string())?;
        dojo_task::prepare(t, &env, &Default::default()).map_err(|e| {
            format!(
                "cannot prepare {id} (offline, or uv missing: source scripts/setup-tools.sh): {e}"
            )
        })?;
    }
    Ok(())
}
