//! cgroup v2 against the real kernel: a sandbox's cgroup carries its limits and is removed at
//! teardown. This development host mounts cgroup v1 only, so here the test reports itself skipped;
//! the v2 driver's file protocol is unit-tested against a directory in `src/cgroup.rs`.

mod common;

use std::path::Path;

use dojo_sandbox::{Limits, Sandbox, SandboxOptions};

#[tokio::test]
async fn v2_cgroup_carries_the_limits_and_goes_with_the_sandbox() {
    skip_unless_ns!();
    if !Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        eprintln!("SKIPPED: cgroup v2 not mounted on this host");
        return;
    }
    let Some(driver) = dojo_sandbox::cgroup::detect() else {
        eprintln!(
            "SKIPPED: cgroup v2 is mounted but not manageable here (not root, or DOJO_CGROUP=off)"
        );
        return;
    };
    assert_eq!(driver.version(), "v2");
    let opts = SandboxOptions {
        limits: Limits {
            memory_bytes: Some(300 << 20),
            max_processes: Some(77),
            ..Limits::default()
        },
        ..SandboxOptions::default()
    };
    let sb = Sandbox::create(&common::small_pristine(), None, &opts)
        .await
        .unwrap();
    let dir = Path::new("/sys/fs/cgroup/dojo").join(sb.id());
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    assert_eq!(read("memory.max").trim(), (300u64 << 20).to_string());
    assert_eq!(read("pids.max").trim(), "77");
    let out = common::sh(&sb, "cat /proc/self/cgroup").await;
    assert!(out.stdout_lossy().contains(sb.id()), "{out:?}");
    sb.teardown().await.unwrap();
    assert!(!dir.exists(), "cgroup {} left behind", dir.display());
}
