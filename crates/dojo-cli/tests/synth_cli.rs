//! `dojo synth` through the real binary: a run killed with SIGKILL in the middle and resumed
//! gives the same task file as an uninterrupted run; the file passes `dojo tasks check` and
//! `dojo validate`, and `dojo rollout --policy gold-replay` resolves every task.
//!
//! Needs the sandbox's kernel features, uv and PyPI access (for pytest); otherwise SKIPPED
//! (under `CI=true` a missing feature fails instead).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::{ci, dojo, pytools, scratch};

fn skip(reason: &str) {
    assert!(!ci(), "CI=true: {reason}");
    println!("SKIPPED: {reason}");
}

/// A tiny project whose tests catch most injected bugs, and its env spec.
fn project(root: &Path) -> (PathBuf, PathBuf) {
    let src = root.join("calc-src");
    for (p, c) in [
        ("calc/__init__.py", ""),
        (
            "calc/core.py",
            "def clamp(x, lo, hi):\n    if x < lo:\n        return lo\n    if x > hi:\n        return hi\n    return x\n\n\ndef total(items, start=0):\n    s = start\n    for i in range(len(items)):\n        s += items[i]\n    return s\n",
        ),
        ("tests/__init__.py", ""),
        (
            "tests/test_core.py",
            "from calc.core import clamp, total\n\n\ndef test_clamp_low():\n    assert clamp(-5, 0, 10) == 0\n\n\ndef test_clamp_high():\n    assert clamp(50, 0, 10) == 10\n\n\ndef test_clamp_inside():\n    assert clamp(5, 0, 10) == 5\n    assert clamp(10, 0, 10) == 10\n\n\ndef test_total():\n    assert total([1, 2, 3]) == 6\n\n\ndef test_total_start():\n    assert total([1], start=4) == 5\n",
        ),
    ] {
        let f = src.join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, c).unwrap();
    }
    let envs = root.join("envs");
    std::fs::create_dir_all(&envs).unwrap();
    std::fs::write(
        envs.join("calc.toml"),
        "repo = \"local/calc\"\n\n[default]\npython = \"3.11\"\nrequirements = [\"pytest==8.3.3\"]\neditable = false\ntest_cmd = \"python -m pytest -rA -p no:cacheprovider\"\ntimeout_s = 120\nenv = { PYTHONPATH = \"/testbed\" }\n",
    )
    .unwrap();
    (src, envs)
}

fn synth_args<'a>(src: &'a str, envs: &'a str, out: &'a str) -> Vec<&'a str> {
    vec![
        "synth",
        "--source",
        src,
        "--name",
        "calc",
        "--version",
        "1.0",
        "--envs",
        envs,
        "--out",
        out,
        "--max",
        "3",
        "--seed",
        "3",
        "--quiet",
    ]
}

fn lines(p: &Path) -> usize {
    std::fs::read_to_string(p)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

#[test]
fn kill_resume_validate_and_gold_replay() {
    if !dojo_sandbox::doctor::namespaces_usable() {
        return skip("namespaces/overlayfs unavailable");
    }
    let tmp = scratch("synth");
    let (src, envs) = project(tmp.path());
    let (src, envs) = (src.to_str().unwrap(), envs.to_str().unwrap());
    let whole = tmp.path().join("whole.jsonl");
    let out = dojo(&synth_args(src, envs, whole.to_str().unwrap()));
    if !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("environment") {
        return skip("cannot build the environment (uv / PyPI)");
    }
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("operator") && stdout.contains("total"),
        "{stdout}"
    );
    assert_eq!(lines(&whole), 3);

    // Killed (SIGKILL) once the first mutant is settled, then resumed.
    let killed = tmp.path().join("killed.jsonl");
    let progress = tmp.path().join("killed.jsonl.progress.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_dojo"))
        .args(synth_args(src, envs, killed.to_str().unwrap()))
        .env("DOJO_PYTOOLS", pytools())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut waited = 0;
    // The baseline and the header are lines 1-2; a third line is a settled mutant.
    while lines(&progress) < 3 && waited < 1200 {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        waited += 1;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(lines(&killed) < 3, "the run was killed before it finished");
    let out = dojo(&synth_args(src, envs, killed.to_str().unwrap()));
    assert!(out.status.success());
    assert_eq!(
        std::fs::read_to_string(&whole).unwrap(),
        std::fs::read_to_string(&killed).unwrap()
    );

    let w = whole.to_str().unwrap();
    let out = dojo(&["tasks", "check", w]);
    assert!(out.status.success());
    let out = dojo(&["validate", "--tasks", w]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("runnable: 3/3"));
    let rollouts = tmp.path().join("rollouts");
    let out = dojo(&[
        "rollout",
        "--tasks",
        w,
        "--policy",
        "gold-replay",
        "--out",
        rollouts.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let resolved: Vec<bool> = std::fs::read_to_string(rollouts.join("trajectories.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["resolved"] == true)
        .collect();
    assert_eq!(
        resolved,
        [true, true, true],
        "gold-replay resolves every task"
    );
}

/// Flags that are wrong are refused before any environment is built, with a message naming them.
#[test]
fn bad_llm_policy_and_commit_are_refused_up_front() {
    let tmp = scratch("synth-flags");
    let src = tmp.path().join("proj");
    std::fs::create_dir_all(&src).unwrap();
    let out = tmp.path().join("t.jsonl");
    let (s, o) = (src.to_str().unwrap(), out.to_str().unwrap());
    let r = dojo(&[
        "synth",
        "--source",
        s,
        "--out",
        o,
        "--llm-policy",
        "gold-replay",
    ]);
    assert!(!r.status.success());
    let e = String::from_utf8_lossy(&r.stderr);
    assert!(
        e.contains("--llm-policy") && e.contains("not a model policy"),
        "{e}"
    );
    // Not a git repository: the commit cannot be found.
    let r = dojo(&["synth", "--source", s, "--commit", "HEAD", "--out", o]);
    assert!(!r.status.success());
    let e = String::from_utf8_lossy(&r.stderr);
    assert!(
        e.contains("--commit HEAD") && e.contains("not a commit"),
        "{e}"
    );
    assert!(!out.exists(), "nothing written");
}
