//! A launcher that cannot start must not take sandboxes down with it.
//!
//! Pid 1 of a sandbox re-executes the calling binary as the in-sandbox launcher. A binary the
//! dynamic loader cannot start inside the sandbox (a `--features cuda` build whose CUDA
//! libraries live in a directory the sandbox does not show) used to die there, pid 1 with it,
//! and every sandbox failed with "I/O error on /proc/N/ns/user". Here `/bin/true` stands in for
//! such a binary: exec'd without error, gone before it greets. Sandboxes must still be created,
//! run commands, reset and tear down, through the per-command `setns` path.
//!
//! One test in its own binary: it sets the launcher override for the whole process.

mod common;

use dojo_sandbox::ExecRequest;

#[tokio::test]
async fn sandboxes_work_when_the_launcher_dies_before_greeting() {
    // SAFETY: set before any sandbox (or the doctor's probe) exists; the only test here.
    unsafe { std::env::set_var("DOJO_SANDBOX_LAUNCHER_EXE", "/bin/true") };
    skip_unless_ns!();
    for round in 0..2 {
        let mut sb = common::sandbox().await;
        let out = common::sh(&sb, "cat README.md; echo err >&2; exit 3").await;
        assert_eq!(out.exit_code, Some(3), "round {round}: {out:?}");
        assert_eq!(out.stdout_lossy(), "hello\n", "round {round}");
        assert_eq!(out.stderr_lossy(), "err\n", "round {round}");
        sb.write_file("new.txt", b"x\n").await.unwrap();
        assert!(sb.diff().await.unwrap().contains("new.txt"));
        sb.reset().await.unwrap();
        let out = sb
            .exec(&ExecRequest::new(["ls", "/testbed"]))
            .await
            .unwrap();
        assert!(!out.stdout_lossy().contains("new.txt"), "{out:?}");
        sb.teardown().await.unwrap();
    }
}
