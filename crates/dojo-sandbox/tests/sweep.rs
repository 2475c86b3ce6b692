//! Crash leftovers: a dojo process killed with SIGKILL leaves its sandbox directory (and, as
//! root, its memory and pids cgroups) behind; the next process to create a sandbox removes
//! them, and so does `dojo sandbox doctor --clean` (`leftovers::sweep`), without touching the
//! sandboxes of processes that still run.

mod common;

use std::io::BufRead;
use std::path::PathBuf;

/// Not a test: the process the real test starts and kills (it creates a sandbox, says which,
/// and waits to be killed).
#[test]
#[ignore = "run by leftovers_of_killed_processes_are_swept"]
fn helper_create_and_wait() {
    if std::env::var("DOJO_SWEEP_HELPER").as_deref() != Ok("1") {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let sb = common::sandbox().await;
        println!("READY {} {}", sb.id(), sb.holder_pid().unwrap_or(0));
        std::io::Write::flush(&mut std::io::stdout()).unwrap();
        tokio::time::sleep(std::time::Duration::from_secs(600)).await;
    });
}

/// Start the helper, wait until its sandbox exists, SIGKILL it and wait until the sandbox's
/// processes are gone. Returns the sandbox id.
fn create_in_a_process_then_kill_it() -> String {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "helper_create_and_wait",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("DOJO_SWEEP_HELPER", "1")
        .env("DOJO_TEST_SHARED_HOME", common::home())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    // (The harness prints the test's name on the same line.)
    let ready = out
        .lines()
        .map_while(Result::ok)
        .find_map(|l| l.split_once("READY ").map(|(_, r)| r.to_string()))
        .expect("the helper created a sandbox");
    let mut parts = ready.split_whitespace();
    let id = parts.next().unwrap().to_string();
    let holder: i32 = parts.next().unwrap().parse().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    // The holder dies with its creator (lifeline); wait for it, not for a fixed time.
    // SAFETY: signal 0 only checks existence.
    while holder > 1 && unsafe { libc::kill(holder, 0) } == 0 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // The sandbox's own processes may outlive the holder by a moment on a loaded machine, and
    // a sweep rightly leaves a cgroup that still has processes: wait until it is empty
    // (bounded, so a leak fails the assertions below instead of hanging).
    if let Some(d) = dojo_sandbox::cgroup::detect() {
        let h = d.open(&id);
        let start = std::time::Instant::now();
        while !h.is_empty() && start.elapsed() < std::time::Duration::from_secs(60) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    id
}

fn cgroup_ids() -> Option<Vec<String>> {
    dojo_sandbox::cgroup::detect().map(|d| d.list().into_iter().map(|(id, _)| id).collect())
}

#[tokio::test]
async fn leftovers_of_killed_processes_are_swept() {
    skip_unless_ns!();
    let base: PathBuf = dojo_sandbox::sandboxes_dir();

    // 1. Killed: its directory (and cgroups) stay behind ...
    let id = create_in_a_process_then_kill_it();
    assert!(base.join(&id).exists(), "nothing was left to sweep");
    if let Some(ids) = cgroup_ids() {
        assert!(ids.contains(&id), "no cgroup was left to sweep");
    }
    // ... until this process creates its first sandbox.
    let live = common::sandbox().await;
    dojo_sandbox::trash::flush();
    assert!(
        !base.join(&id).exists(),
        "the killed process's directory is still there"
    );
    if let Some(ids) = cgroup_ids() {
        assert!(
            !ids.contains(&id),
            "the killed process's cgroup is still there"
        );
    }

    // 2. The on-demand sweep (`dojo sandbox doctor --clean`) removes another killed process's
    //    leftovers and leaves the sandbox of this live process alone.
    let id2 = create_in_a_process_then_kill_it();
    let swept = dojo_sandbox::leftovers::sweep();
    dojo_sandbox::trash::flush();
    assert!(swept.dirs.contains(&id2), "{swept:?}");
    assert!(!swept.dirs.contains(&live.id().to_string()), "{swept:?}");
    assert!(!base.join(&id2).exists());
    assert!(live.host_dir().exists());
    if let Some(ids) = cgroup_ids() {
        assert!(!ids.contains(&id2));
        assert!(ids.contains(&live.id().to_string()));
    }
    assert!(common::sh(&live, "true").await.success());
    live.teardown().await.unwrap();
}
