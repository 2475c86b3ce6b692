//! Patch I/O: binary-safe diffs, the harness's apply chain, refusal of escaping paths.

mod common;

use dojo_sandbox::{ApplyMethod, SandboxError};

#[tokio::test]
async fn diff_round_trips_through_apply_including_binary() {
    skip_unless_ns!();
    let a = common::sandbox().await;
    let out = common::sh(
        &a,
        "printf 'def f():\\n    return 42\\n' > pkg/mod.py && printf '\\x00\\x01\\x02binary' > blob.bin && rm README.md",
    )
    .await;
    assert!(out.success());
    let d = a.diff().await.unwrap();
    assert!(d.contains("GIT binary patch"), "{d}");
    let b = common::sandbox().await;
    let r = b.apply_patch(&d).await.unwrap();
    assert_eq!(r.method, Some(ApplyMethod::GitApply), "{}", r.log);
    assert_eq!(
        b.read_file("blob.bin").await.unwrap(),
        b"\x00\x01\x02binary"
    );
    assert_eq!(b.diff().await.unwrap(), d);
    a.teardown().await.unwrap();
    b.teardown().await.unwrap();
}

#[tokio::test]
async fn fuzzy_patch_falls_back_and_reports_the_method() {
    skip_unless_ns!();
    let sb = common::sandbox().await;
    // Context that no longer matches exactly: git apply refuses, patch --fuzz applies.
    let patch = "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1,3 +1,3 @@\n def f():\n-    return 41\n+    return 43\n # a comment that is not there\n";
    let r = sb.apply_patch(patch).await.unwrap();
    assert!(r.applied(), "{}", r.log);
    assert_ne!(r.method, Some(ApplyMethod::GitApply));
    assert!(r.log.contains("git apply"), "{}", r.log);
    assert!(
        String::from_utf8(sb.read_file("pkg/mod.py").await.unwrap())
            .unwrap()
            .contains("43")
    );
    // A patch that cannot apply at all.
    let r = sb
        .apply_patch("--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-a\n+b\n")
        .await
        .unwrap();
    assert!(!r.applied());
    sb.teardown().await.unwrap();
}

#[tokio::test]
async fn patches_leaving_the_repository_are_refused() {
    skip_unless_ns!();
    let sb = common::sandbox().await;
    for p in [
        "--- a/../../etc/passwd\n+++ b/../../etc/passwd\n@@ -1 +1 @@\n-a\n+b\n",
        "--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n",
        "diff --git a/evil b/evil\nnew file mode 120000\n--- /dev/null\n+++ b/evil\n@@ -0,0 +1 @@\n+/etc\n",
    ] {
        let e = sb.apply_patch(p).await.unwrap_err();
        assert!(matches!(e, SandboxError::PatchRefused(_)), "{e}");
    }
    sb.teardown().await.unwrap();
}
