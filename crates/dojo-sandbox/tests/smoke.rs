mod common;

use dojo_sandbox::ExecRequest;

#[tokio::test]
async fn create_exec_edit_diff_reset_teardown() {
    skip_unless_ns!();
    let mut sb = common::sandbox().await;
    let out = common::sh(&sb, "pwd; id -u; cat README.md; ls /; echo err >&2; exit 3").await;
    eprintln!(
        "stdout: {}\nstderr: {}",
        out.stdout_lossy(),
        out.stderr_lossy()
    );
    assert_eq!(out.exit_code, Some(3));
    assert!(out.stdout_lossy().starts_with("/testbed\n0\nhello\n"));
    assert_eq!(out.stderr_lossy(), "err\n");
    sb.write_file("pkg/mod.py", b"def f():\n    return 42\n")
        .await
        .unwrap();
    assert_eq!(
        sb.read_file("/testbed/pkg/mod.py").await.unwrap(),
        b"def f():\n    return 42\n"
    );
    let out = common::sh(&sb, "echo new > newfile.txt && cat pkg/mod.py").await;
    assert!(out.stdout_lossy().contains("42"), "{out:?}");
    let d = sb.diff().await.unwrap();
    eprintln!("{d}");
    assert!(d.contains("+    return 42"));
    assert!(d.contains("newfile.txt"));
    sb.reset().await.unwrap();
    let out = sb
        .exec(&ExecRequest::new(["cat", "pkg/mod.py"]))
        .await
        .unwrap();
    assert!(out.stdout_lossy().contains("41"), "{out:?}");
    assert_eq!(sb.diff().await.unwrap(), "");
    sb.teardown().await.unwrap();
}

/// `Sandbox::exec` goes through the in-sandbox launcher (pid 1 of each command's namespace is a
/// supervisor forked from it), not a per-command `setns` from this (possibly large) process.
#[tokio::test]
async fn commands_run_through_the_in_sandbox_launcher() {
    skip_unless_ns!();
    let sb = common::sandbox().await;
    let out = common::sh(&sb, "tr '\\0' ' ' < /proc/1/cmdline; echo; echo pid=$$").await;
    let s = out.stdout_lossy();
    assert!(s.contains("dojo-sandbox-launcher"), "{out:?}");
    assert!(s.contains("pid=2"), "{out:?}");
    // Timeouts, stdin and exit codes take the same path.
    let out = sb
        .exec(&dojo_sandbox::ExecRequest::shell("read x; echo got:$x; exit 7").stdin("hi\n"))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(7), "{out:?}");
    assert_eq!(out.stdout_lossy(), "got:hi\n");
    let out = sb
        .exec(
            &dojo_sandbox::ExecRequest::shell("sleep 30")
                .timeout(std::time::Duration::from_millis(200)),
        )
        .await
        .unwrap();
    // Died of the SIGTERM sent at the timeout (15), within the grace period.
    assert!(out.timed_out && out.signal == Some(15), "{out:?}");
    sb.teardown().await.unwrap();
}

/// Many commands at once in one sandbox: each gets its own output and exit code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commands_in_one_sandbox_keep_their_own_results() {
    skip_unless_ns!();
    let sb = std::sync::Arc::new(common::sandbox().await);
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let sb = sb.clone();
            tokio::spawn(async move {
                let script = format!("sleep 0.0{}; echo out-{i}; exit {i}", i % 5);
                (i, sb.exec(&ExecRequest::shell(script)).await.unwrap())
            })
        })
        .collect();
    for t in tasks {
        let (i, out) = t.await.unwrap();
        assert_eq!(out.exit_code, Some(i), "{out:?}");
        assert_eq!(out.stdout_lossy(), format!("out-{i}\n"));
    }
    let Ok(sb) = std::sync::Arc::try_unwrap(sb) else {
        panic!("sandbox still shared")
    };
    sb.teardown().await.unwrap();
}
