//! `$DOJO_HOME` (pristine trees, among them the unbugged sources of synthesized tasks; built
//! environments; other sandboxes' state) stays hidden however its path is written. Its own test
//! binary: it sets `DOJO_HOME` and `DOJO_TOOLS` for the whole process.

use std::path::Path;

use dojo_sandbox::{ExecRequest, PristineStore, Sandbox, SandboxOptions, Source};

#[tokio::test]
async fn dojo_home_written_with_dots_and_a_symlink_stays_hidden() {
    if !dojo_sandbox::doctor::namespaces_usable() && std::env::var("CI").as_deref() != Ok("true") {
        eprintln!("SKIPPED: namespaces unavailable");
        return;
    }
    // The worst case: $DOJO_HOME inside a directory every sandbox is shown (the language-server
    // tools directory), written as `<tools>/x/../link` where `link` is an absolute symlink.
    let tools = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let t = tools.path();
    if t.starts_with("/tmp") {
        // Every sandbox has its own /tmp, so a tools directory there is never shown (dojo says
        // so when DOJO_TOOLS points there): this check needs a checkout outside /tmp.
        eprintln!("SKIPPED: the checkout's target directory is under /tmp");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    // The sandbox's unprivileged uid must be able to reach the tools directory to be shown it;
    // a checkout below a private directory (`mktemp -d` makes 0700 ones) cannot be reached.
    if let Some(private) = t
        .ancestors()
        .skip(1)
        .find(|a| std::fs::metadata(a).is_ok_and(|m| m.permissions().mode() & 0o001 == 0))
    {
        eprintln!(
            "SKIPPED: {} is not searchable by other users, so no sandbox can be shown a tools directory below it",
            private.display()
        );
        return;
    }
    std::fs::set_permissions(t, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(t.join("x")).unwrap();
    std::fs::create_dir_all(t.join("home")).unwrap();
    std::os::unix::fs::symlink(t.join("home"), t.join("link")).unwrap();
    let written = format!("{}/x/../link", t.display());
    // SAFETY: the only test of this binary sets them before anything reads them.
    unsafe {
        std::env::set_var("DOJO_TOOLS", t);
        std::env::set_var("DOJO_HOME", &written);
    }
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("secret.py"), "GOLD = 'unbugged-3e9a'\n").unwrap();
    let pristine = PristineStore::open()
        .unwrap()
        .build(&Source::Dir {
            path: src.path().to_path_buf(),
        })
        .unwrap();
    assert!(pristine.path.starts_with(&written) || pristine.path.starts_with(t));
    let sb = Sandbox::create(&pristine, None, &SandboxOptions::default())
        .await
        .unwrap();
    // The workspace has the file; $DOJO_HOME, by any of its names, shows nothing.
    let out = sb
        .exec(&ExecRequest::shell(format!(
            "cat /testbed/secret.py; for p in '{w}' '{h}' '{l}'; do ls -A \"$p\"; done; grep -rs unbugged '{t}' && echo LEAK",
            w = written,
            h = t.join("home").display(),
            l = t.join("link").display(),
            t = t.display(),
        )))
        .await
        .unwrap();
    let s = out.stdout_lossy();
    assert!(s.contains("unbugged-3e9a"), "{out:?}");
    assert!(!s.contains("LEAK"), "$DOJO_HOME is visible: {out:?}");
    assert!(
        !s.contains("pristine") && !s.contains("sandboxes"),
        "{out:?}"
    );
    // The tools directory itself is shown (language servers run from it).
    let out = sb
        .exec(&ExecRequest::shell(format!("ls -d '{}/x'", t.display())))
        .await
        .unwrap();
    assert!(out.success(), "{out:?}");
    sb.teardown().await.unwrap();
    dojo_sandbox::trash::flush();
    assert!(Path::new(&written).exists());
}
