//! Escape and abuse behaviours found by an adversarial run against the sandbox, one test each:
//! what a hostile agent (or a model patch's `conftest.py` during grading) tried and must not get.
//! Each failed before the sandbox showed only a minimal root, capped what crosses back to the
//! host, denied io_uring and kept the diff base on the host side.

mod common;

use std::io::Write;
use std::path::Path;

use dojo_sandbox::{ExecRequest, Sandbox, SandboxError, SandboxOptions, TransferCaps};

/// A scratch directory the host can see but which is not under /tmp (every sandbox has a
/// private /tmp, so a host path there proves nothing): the build's own temporary directory,
/// made traversable for the unprivileged sandbox uid.
fn host_scratch() -> tempfile::TempDir {
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

#[tokio::test]
async fn host_unix_socket_is_unreachable() {
    skip_unless_ns!();
    let dir = host_scratch();
    let path = dir.path().join("service.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    // A host service that hands its secret to whoever connects.
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            let mut s = s;
            let _ = s.write_all(b"host-secret-7c1f\n");
        }
    });
    // The host itself can connect: the socket works.
    let mut probe = String::new();
    let mut c = std::os::unix::net::UnixStream::connect(&path).unwrap();
    std::io::Read::read_to_string(&mut c, &mut probe).unwrap();
    assert!(probe.contains("host-secret"));

    let sb = common::sandbox().await;
    let script = format!(
        "/usr/bin/python3 -c \"import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\nprint(s.recv(100))\" {}",
        path.display()
    );
    let out = common::sh(&sb, &script).await;
    assert!(
        !out.stdout_lossy().contains("host-secret") && !out.success(),
        "a sandboxed command read a host socket: {out:?}"
    );
    sb.teardown().await.unwrap();
}

#[tokio::test]
async fn host_homes_services_and_project_trees_are_absent() {
    skip_unless_ns!();
    let scratch = host_scratch();
    // A task file with the gold patch, as `dojo rollout --tasks` would read it.
    let tasks = scratch.path().join("tasks.jsonl");
    std::fs::write(&tasks, "{\"patch\": \"gold-answer-5d2e\"}\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tasks, std::fs::Permissions::from_mode(0o644)).unwrap();
    let sb = common::sandbox().await;
    let checkout = env!("CARGO_MANIFEST_DIR");
    let mut probes = vec![checkout.to_string(), tasks.display().to_string()];
    for p in [
        "/home", "/root", "/var", "/run", "/srv", "/opt", "/mnt", "/media",
    ] {
        if Path::new(p).exists() {
            probes.push(p.to_string());
        }
    }
    // A hidden directory may still exist as an empty parent of the language-server tools
    // directory (`/var/lib/dojo/tools` as root): then it may list only the next step there.
    let tools = dojo_sandbox::visible::tools_dir();
    for p in &probes {
        let out = common::sh(&sb, &format!("ls -A '{p}' 2>/dev/null && echo VISIBLE")).await;
        let listing = out.stdout_lossy();
        if !listing.contains("VISIBLE") {
            continue;
        }
        for name in listing.lines().filter(|l| *l != "VISIBLE") {
            assert!(
                tools.starts_with(Path::new(p).join(name)),
                "{p} shows {name} in the sandbox (only a path to {} may be there): {out:?}",
                tools.display()
            );
        }
    }
    let out = common::sh(&sb, &format!("cat '{}'", tasks.display())).await;
    assert!(!out.stdout_lossy().contains("gold-answer"), "{out:?}");
    // What programs need is there.
    let out = common::sh(
        &sb,
        "git --version && /usr/bin/python3 -c 'import ssl, json, sqlite3' && id -un && ls /etc/passwd",
    )
    .await;
    assert!(out.success(), "{out:?}");
    sb.teardown().await.unwrap();
}

#[tokio::test]
async fn sys_shows_no_host_interfaces_or_cgroups() {
    skip_unless_ns!();
    let sb = common::sandbox().await;
    let out = common::sh(
        &sb,
        "ls /sys/class/net 2>/dev/null | tr '\\n' ' '; echo '|'; ls -A /sys/fs/cgroup 2>/dev/null | wc -l",
    )
    .await;
    let s = out.stdout_lossy();
    let (nets, cgroups) = s.split_once('|').unwrap();
    assert!(
        nets.split_whitespace().all(|n| n == "lo"),
        "host interfaces visible: {s}"
    );
    assert_eq!(cgroups.trim(), "0", "cgroup tree visible: {s}");
    // Python still finds its CPU count without it.
    let out = common::sh(
        &sb,
        "/usr/bin/python3 -c 'import os; print(os.cpu_count())'",
    )
    .await;
    assert!(
        out.success() && out.stdout_lossy().trim().parse::<u32>().is_ok(),
        "{out:?}"
    );
    sb.teardown().await.unwrap();
}

#[tokio::test]
async fn io_uring_is_refused() {
    skip_unless_ns!();
    let sb = common::sandbox().await;
    // io_uring_setup(1, NULL): EFAULT where it is allowed, EPERM from the filter.
    let out = common::sh(
        &sb,
        "/usr/bin/python3 -c \"import ctypes,os; l=ctypes.CDLL(None,use_errno=True); l.syscall.restype=ctypes.c_long; r=l.syscall(425,1,None); print(r, os.strerror(ctypes.get_errno()))\"",
    )
    .await;
    assert!(
        out.stdout_lossy().starts_with("-1 Operation not permitted"),
        "{out:?}"
    );
    sb.teardown().await.unwrap();
}

#[tokio::test]
async fn tmp_is_sticky_and_world_writable() {
    skip_unless_ns!();
    // Both layouts (/tmp on the workspace tmpfs, or a tmpfs of its own), after a reset too, and
    // through both command paths (the launcher, and the per-command join `spawn` uses).
    for workspace_bytes in [Some(64 << 20), None] {
        let mut opts = SandboxOptions::default();
        opts.limits.workspace_bytes = workspace_bytes;
        let mut sb = Sandbox::create(&common::small_pristine(), None, &opts)
            .await
            .unwrap();
        for _ in 0..2 {
            let out = common::sh(&sb, "stat -c %a /tmp").await;
            assert_eq!(
                out.stdout_lossy().trim(),
                "1777",
                "{workspace_bytes:?}: {out:?}"
            );
            let mut p = sb
                .spawn(&ExecRequest::new(["stat", "-c", "%a", "/tmp"]))
                .await
                .unwrap();
            let mut text = String::new();
            tokio::io::AsyncReadExt::read_to_string(p.child.stdout.as_mut().unwrap(), &mut text)
                .await
                .unwrap();
            let _ = p.child.wait().await;
            assert_eq!(text.trim(), "1777", "{workspace_bytes:?}, spawned");
            sb.reset().await.unwrap();
        }
        sb.teardown().await.unwrap();
    }
}

#[tokio::test]
async fn moving_the_base_tag_does_not_hide_the_changes() {
    skip_unless_ns!();
    let sb = common::sandbox().await;
    let out = common::sh(
        &sb,
        "echo changed > pkg/mod.py && git add -A && git -c user.name=a -c user.email=a@b commit -qm x && git tag -f dojo-base HEAD >/dev/null && git diff dojo-base | wc -c",
    )
    .await;
    assert_eq!(out.stdout_lossy().trim(), "0", "setup: {out:?}");
    let d = sb.diff().await.unwrap();
    assert!(d.contains("+changed"), "the diff lost the change: {d:?}");
    sb.teardown().await.unwrap();
}

#[tokio::test]
async fn pid_1_does_not_show_the_host_command_line() {
    skip_unless_ns!();
    let me = std::env::current_exe().unwrap();
    let name = me.file_name().unwrap().to_string_lossy().into_owned();
    let sb = common::sandbox().await;
    let out = common::sh(
        &sb,
        "tr '\\0' ' ' < /proc/1/cmdline; echo; tr '\\0' '\\n' < /proc/1/environ | wc -c",
    )
    .await;
    assert!(!out.stdout_lossy().contains(&name), "{out:?}");
    // Through the per-command path as well (long-running processes, kept sandboxes).
    let mut p = sb
        .spawn(&ExecRequest::shell(
            "tr '\\0' ' ' < /proc/1/cmdline; echo; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'",
        ))
        .await
        .unwrap();
    let mut text = String::new();
    tokio::io::AsyncReadExt::read_to_string(p.child.stdout.as_mut().unwrap(), &mut text)
        .await
        .unwrap();
    let _ = p.child.wait().await;
    assert!(
        !text.contains(&name),
        "pid 1 shows the host command: {text}"
    );
    assert!(
        !text.contains("DOJO_HOME="),
        "pid 1 shows the host environment: {text}"
    );
    sb.teardown().await.unwrap();
}

fn capped(patch_bytes: usize, read_bytes: usize) -> SandboxOptions {
    SandboxOptions {
        caps: TransferCaps {
            patch_bytes,
            read_bytes,
        },
        ..Default::default()
    }
}

#[tokio::test]
async fn a_patch_over_the_cap_is_refused_as_the_agents_doing() {
    skip_unless_ns!();
    let sb = Sandbox::create(&common::small_pristine(), None, &capped(1 << 20, 1 << 20))
        .await
        .unwrap();
    assert!(common::sh(&sb, "echo small > small.txt").await.success());
    assert!(sb.diff().await.unwrap().contains("+small"));
    assert!(common::sh(&sb, "seq 1 1000000 > big.txt").await.success());
    match sb.diff().await {
        Err(e @ SandboxError::TooLarge { .. }) => {
            assert!(!e.is_infrastructure());
            assert!(e.to_string().contains("patch too large"), "{e}");
        }
        other => panic!("expected TooLarge, got {:?}", other.map(|d| d.len())),
    }
    // `dojo sandbox diff` streams the same diff whole, whatever the cap: here into a file.
    let path = std::env::temp_dir().join(format!("dojo-diff-stream-{}", std::process::id()));
    let mut f = tokio::fs::File::create(&path).await.unwrap();
    let n = sb.diff_to(&mut f).await.unwrap();
    drop(f);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(n as usize, text.len());
    assert!(n > 1 << 20, "{n}");
    assert!(text.contains("+small") && text.contains("\n+1000000\n"));
    sb.teardown().await.unwrap();
}

#[tokio::test]
async fn reading_a_file_over_the_cap_is_refused() {
    skip_unless_ns!();
    let sb = Sandbox::create(&common::small_pristine(), None, &capped(1 << 20, 1 << 20))
        .await
        .unwrap();
    assert!(
        common::sh(
            &sb,
            "head -c 3000000 /dev/zero > big.bin && head -c 3000000 /dev/zero > /tmp/big.bin"
        )
        .await
        .success()
    );
    for p in ["big.bin", "/tmp/big.bin"] {
        match sb.read_file(p).await {
            Err(SandboxError::TooLarge { .. }) => {}
            other => panic!("{p}: expected TooLarge, got {:?}", other.map(|d| d.len())),
        }
    }
    assert_eq!(
        sb.read_file("pkg/__init__.py").await.unwrap(),
        b"VALUE = 1\n"
    );
    sb.teardown().await.unwrap();
}

/// The workspace's `.git` is the agent's to write: it can forge the base commit's object, add a
/// replace ref for it, or point `objects/info/alternates` at objects of its own. Each makes
/// `git diff <base>` in the workspace show nothing; the diff the host records must still be the
/// true one (the same as a sandbox where only the edit happened).
#[tokio::test]
async fn forging_the_base_object_does_not_change_the_diff() {
    skip_unless_ns!();
    let control = common::sandbox().await;
    assert!(
        common::sh(&control, "echo changed > pkg/mod.py")
            .await
            .success()
    );
    let truth = control.diff().await.unwrap();
    assert!(truth.contains("+changed"), "{truth:?}");
    control.teardown().await.unwrap();

    // Each attack: commit the edit as N, then make the base id B resolve to N's content.
    let commit = "B=$(git rev-parse dojo-base) && echo changed > pkg/mod.py && git add -A && \
                  git -c user.name=a -c user.email=a@b commit -qm x && N=$(git rev-parse HEAD) && \
                  obj() { echo .git/objects/${1:0:2}/${1:2}; }";
    let attacks = [
        (
            "forged loose object",
            "f=$(obj $B) && chmod u+w $f && cp $(obj $N) $f",
        ),
        ("replace ref", "git replace -f $B $N"),
        (
            "alternates",
            "mkdir -p .git/alt/${B:0:2} && cp $(obj $N) .git/alt/${B:0:2}/${B:2} && rm -f $(obj $B) && \
             echo /testbed/.git/alt > .git/objects/info/alternates",
        ),
    ];
    for (name, attack) in attacks {
        let sb = common::sandbox().await;
        let out = common::sh(&sb, &format!("{commit} && {attack} && git diff $B | wc -c")).await;
        assert_eq!(
            out.stdout_lossy().trim(),
            "0",
            "{name}: the attack did not take in the workspace: {out:?}"
        );
        let d = sb.diff().await.unwrap();
        assert_eq!(d, truth, "{name}: the recorded diff is not the true one");
        sb.teardown().await.unwrap();
    }
}
