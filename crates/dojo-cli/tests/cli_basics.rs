//! Behaviour of the `dojo` binary itself, whatever the subcommand.

use std::process::Command;

const BUNDLED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tasksets/mini/tasks.jsonl"
);

/// `dojo … | head`: a reader that goes away ends dojo quietly with 141 (128 + SIGPIPE), like
/// other Unix tools, instead of a panic message.
#[test]
fn closed_stdout_exits_quietly() {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_dojo"))
        .args(["tasks", "check", BUNDLED])
        .stdout(writer)
        .output()
        .expect("running the dojo binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "stderr: {stderr}");
}

/// `dojo serve --device cuda` in a build without the `cuda` feature: a clear error that says how
/// to get CUDA, before any model is loaded, and never a silent fall back to the CPU.
#[test]
fn serve_on_cuda_without_the_feature_is_a_clear_error() {
    if !cfg!(feature = "engine") || cfg!(feature = "cuda") {
        println!("SKIPPED: needs a build with `engine` and without `cuda`");
        return;
    }
    let stderr = fails(&["serve", "--device", "cuda", "--port", "0"]);
    assert!(stderr.contains("--features cuda"), "stderr: {stderr}");
}

/// Run `dojo ARGS`, which must fail; its stderr.
fn fails(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_dojo"))
        .args(args)
        .output()
        .expect("running the dojo binary");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "dojo {args:?} succeeded: {stderr}");
    stderr
}

/// An unknown `--kv-cache` is refused by name before any model is loaded.
#[test]
fn serve_with_an_unknown_kv_cache_type_is_a_clear_error() {
    if !cfg!(feature = "engine") {
        println!("SKIPPED: needs a build with `engine`");
        return;
    }
    let stderr = fails(&["serve", "--kv-cache", "q8", "--port", "0"]);
    assert!(
        stderr.contains("--kv-cache \"q8\": expected auto, f32 or f16"),
        "stderr: {stderr}"
    );
}

/// `dojo demo` writes under `$DOJO_HOME/demo` by default, says so first, and leaves nothing in
/// the directory it was started from (here it stops early, at a task file that does not exist).
#[test]
fn demo_writes_under_dojo_home_not_the_working_directory() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_dojo"))
        .args(["demo", "--no-model", "--tasks", "no-such-tasks.jsonl"])
        .env("DOJO_HOME", home.path())
        .current_dir(cwd.path())
        .output()
        .expect("running the dojo binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "stderr: {stderr}");
    let want = home.path().join("demo");
    assert!(
        stderr.contains(&format!("writing into {}", want.display())),
        "stderr: {stderr}"
    );
    assert!(want.is_dir());
    assert_eq!(std::fs::read_dir(cwd.path()).unwrap().count(), 0);
}
