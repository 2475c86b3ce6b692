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
