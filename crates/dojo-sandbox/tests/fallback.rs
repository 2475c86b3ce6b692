//! The fallback backend (explicitly chosen): clone workspace, process-group + subreaper control.

mod common;

use std::time::Duration;

use dojo_sandbox::{BackendKind, ExecRequest, Sandbox, SandboxOptions};

#[tokio::test]
async fn fallback_backend_runs_edits_diffs_resets_and_kills_escapees() {
    common::home();
    let opts = SandboxOptions {
        backend: BackendKind::Fallback,
        ..Default::default()
    };
    let mut sb = Sandbox::create(&common::small_pristine(), None, &opts)
        .await
        .unwrap();
    assert_eq!(sb.backend(), BackendKind::Fallback);
    let out = common::sh(&sb, "cat README.md; echo 'y = 1' >> pkg/mod.py").await;
    assert_eq!(out.stdout_lossy(), "hello\n", "{out:?}");
    sb.write_file("/testbed/new.txt", b"new\n").await.unwrap();
    assert_eq!(sb.read_file("new.txt").await.unwrap(), b"new\n");
    let d = sb.diff().await.unwrap();
    assert!(d.contains("+y = 1") && d.contains("new.txt"), "{d}");
    // Escapees and TERM-ignoring loops are killed.
    let tag = 3_100_000 + std::process::id() % 100_000;
    let out = sb
        .exec(
            &ExecRequest::shell(format!(
                "(setsid bash -c 'exec sleep {tag}' </dev/null >/dev/null 2>&1 &); trap '' TERM; while :; do :; done"
            ))
            .timeout(Duration::from_millis(300))
            .grace(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    assert!(out.timed_out);
    let mut alive = true;
    for _ in 0..200 {
        alive = std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&format!("sleep\0{tag}")))
        });
        if !alive {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!alive, "setsid escapee survived");
    // Landlock keeps writes in the workspace and /tmp.
    if dojo_sandbox::testing::landlock_abi() > 0 {
        let out = common::sh(&sb, "echo x > /etc/dojo-fallback-escape").await;
        assert_ne!(out.exit_code, Some(0));
        assert!(!std::path::Path::new("/etc/dojo-fallback-escape").exists());
    }
    sb.reset().await.unwrap();
    assert_eq!(sb.diff().await.unwrap(), "");
    sb.teardown().await.unwrap();
}
