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
