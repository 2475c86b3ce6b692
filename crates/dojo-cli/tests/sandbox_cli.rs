//! `dojo sandbox ...` end to end through the real binary: doctor, run (output and exit code
//! passed through), the `--keep` → exec → diff → rm life cycle, a bad `--source`, and the same
//! sandbox for an unprivileged user.
//!
//! Each test runs the binary with its own `$DOJO_HOME` (a temporary directory), so pristine trees
//! and sandboxes never touch the user's cache. `auto` picks the namespace backend where the kernel
//! allows it (else the fallback backend, announced on stderr); both must behave the same here.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

mod common;
use common::scratch;

struct Home(tempfile::TempDir);

impl Home {
    fn new() -> Home {
        Home(scratch("home"))
    }
    fn path(&self) -> &Path {
        self.0.path()
    }
    fn dojo(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_dojo"))
            .args(args)
            .env("DOJO_HOME", self.path())
            .env_remove("DOJO_SANDBOX_BACKEND")
            .output()
            .expect("running dojo")
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A small source tree (a directory source).
fn source_tree() -> tempfile::TempDir {
    let d = scratch("src");
    std::fs::write(d.path().join("README.md"), "hello\n").unwrap();
    std::fs::create_dir_all(d.path().join("pkg")).unwrap();
    std::fs::write(d.path().join("pkg/__init__.py"), "VALUE = 1\n").unwrap();
    d
}

#[test]
fn doctor_json_parses_and_names_the_backend() {
    let home = Home::new();
    let out = home.dojo(&["sandbox", "doctor", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor --json is not JSON ({e}): {}", text(&out.stdout)));
    let backend = v["backend"].as_str().unwrap_or_default();
    assert!(
        ["namespace", "fallback"].contains(&backend),
        "backend {backend:?} in {v}"
    );
    assert!(v["schema_version"].as_u64().is_some(), "{v}");
    assert!(
        v["features"].as_array().is_some_and(|f| !f.is_empty()),
        "{v}"
    );
}

#[test]
fn run_passes_output_through_and_exits_with_the_command_code() {
    let home = Home::new();
    let src = source_tree();
    let out = home.dojo(&[
        "sandbox",
        "run",
        "--source",
        src.path().to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "echo hi; echo oops >&2; cat README.md; exit 3",
    ]);
    assert_eq!(out.status.code(), Some(3), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "hi\nhello\n");
    assert!(text(&out.stderr).contains("oops"), "{}", text(&out.stderr));
    // Torn down: no sandbox directory is left behind.
    assert_eq!(leftover_sandboxes(home.path()), Vec::<PathBuf>::new());
}

/// Sandbox directories under `$DOJO_HOME/sandboxes` (the trash is flushed by the CLI).
fn leftover_sandboxes(home: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(home.join("sandboxes")) {
        Ok(rd) => rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                !p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn alive(pid: i64) -> bool {
    // A zombie has no cmdline left; anything else with that pid is alive.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
    })
}

#[test]
fn keep_exec_diff_rm_life_cycle() {
    let home = Home::new();
    let src = source_tree();
    let out = home.dojo(&[
        "sandbox",
        "run",
        "--keep",
        "--source",
        src.path().to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "echo edited >> README.md && echo new > added.txt",
    ]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let id = text(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_string();
    assert!(
        id.len() >= 8 && id.chars().all(|c| c.is_ascii_hexdigit()),
        "no id printed: {:?}",
        text(&out.stdout)
    );
    let dir = home.path().join("sandboxes").join(&id);
    let state: Value =
        serde_json::from_slice(&std::fs::read(dir.join("state.json")).unwrap()).unwrap();
    let holder = state["holder_pid"].as_i64();

    // The edit persisted in the kept sandbox; exec sees it and passes its exit code through.
    let out = home.dojo(&[
        "sandbox",
        "exec",
        &id,
        "--",
        "sh",
        "-c",
        "cat README.md; exit 5",
    ]);
    assert_eq!(out.status.code(), Some(5), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "hello\nedited\n");

    let out = home.dojo(&["sandbox", "diff", &id]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let diff = text(&out.stdout);
    assert!(
        diff.contains("diff --git a/README.md b/README.md"),
        "{diff}"
    );
    assert!(diff.contains("+edited"), "{diff}");
    assert!(diff.contains("added.txt"), "{diff}");

    let out = home.dojo(&["sandbox", "rm", &id]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    // Nothing left: no directory, no holder process, no mount naming the sandbox.
    assert!(!dir.exists(), "{} left behind", dir.display());
    assert_eq!(leftover_sandboxes(home.path()), Vec::<PathBuf>::new());
    if let Some(pid) = holder {
        assert!(!alive(pid), "holder {pid} survived `rm`");
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    assert!(!mounts.contains(&id), "a mount of {id} survived");
    // A second rm names the missing sandbox.
    let out = home.dojo(&["sandbox", "rm", &id]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains(&id), "{}", text(&out.stderr));
}

#[test]
fn bad_source_is_a_clear_error_naming_it() {
    let home = Home::new();
    let missing = home.path().join("no-such-project");
    let out = home.dojo(&[
        "sandbox",
        "run",
        "--source",
        missing.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("no-such-project"),
        "error does not name the source: {err}"
    );
    assert_eq!(leftover_sandboxes(home.path()), Vec::<PathBuf>::new());
}

/// dojo run by an ordinary user: no root, no capabilities, only unprivileged user namespaces.
/// Run as root (as CI does), the test drops to `nobody` with `setpriv` and checks that the same
/// backend is chosen and a sandbox behaves as it does for root: the command sees the tree as
/// uid 0 of its own namespace, writes go to the sandbox only, and nothing is left behind.
#[test]
fn an_unprivileged_user_gets_the_same_sandbox() {
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| text(&o.stdout));
    if uid.ok().as_deref().map(str::trim) != Some("0") {
        println!("SKIPPED: not root, so every other test here already runs unprivileged");
        return;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        assert!(!common::ci(), "setpriv (util-linux) is missing");
        println!("SKIPPED: setpriv (util-linux) not installed");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("unprivileged");
    let open = |p: &Path, mode| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
    // Everything `nobody` needs, under a directory it can reach: a copy of the binary (the
    // build directory may sit below a private one), a source tree, a writable $DOJO_HOME.
    open(dir.path(), 0o755).unwrap();
    let bin = dir.path().join("dojo");
    std::fs::copy(env!("CARGO_BIN_EXE_dojo"), &bin).unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("README.md"), "hello\n").unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    open(&home, 0o777).unwrap();
    let as_nobody = |args: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&bin)
            .args(args)
            .env("HOME", &home)
            .env("DOJO_HOME", &home)
            .env_remove("DOJO_SANDBOX_BACKEND")
            .output()
            .expect("running dojo through setpriv")
    };
    let doctor = |out: Output| -> String {
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["backend"].as_str().unwrap_or_default().to_string()
    };
    let root_backend = doctor(Home::new().dojo(&["sandbox", "doctor", "--json"]));
    assert_eq!(
        doctor(as_nobody(&["sandbox", "doctor", "--json"])),
        root_backend
    );
    let script = "cat README.md; id -u; echo x > new; ls";
    let src_arg = src.to_string_lossy();
    let out = as_nobody(&[
        "sandbox", "run", "--source", &src_arg, "--", "sh", "-c", script,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "hello\n0\nREADME.md\nnew\n");
    assert!(
        !src.join("new").exists(),
        "the write reached the source tree"
    );
    assert_eq!(leftover_sandboxes(&home), Vec::<PathBuf>::new());
}
