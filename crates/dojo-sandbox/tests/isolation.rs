//! One test per isolation behaviour the sandbox promises (see the crate docs), against the real kernel features.

mod common;

use std::time::Duration;

use dojo_sandbox::{ExecRequest, Limits, Sandbox, SandboxOptions};

fn limited(f: impl FnOnce(&mut Limits)) -> SandboxOptions {
    let mut o = SandboxOptions::default();
    f(&mut o.limits);
    o
}

#[tokio::test]
async fn writing_outside_testbed_and_tmp_is_refused() {
    skip_unless_ns!();
    let sb = common::sandbox().await;
    let marker = format!("dojo-escape-{}", std::process::id());
    for target in [
        "/etc",
        "/usr",
        "/var/tmp",
        "/opt",
        "/",
        "/dev",
        "/venv-nope",
    ] {
        let out = common::sh(&sb, &format!("echo x > {target}/{marker}")).await;
        assert_ne!(
            out.exit_code,
            Some(0),
            "write to {target} succeeded: {out:?}"
        );
        assert!(!std::path::Path::new(&format!("{target}/{marker}")).exists());
    }
    // /tmp works and is private to the sandbox.
    let out = common::sh(&sb, &format!("echo x > /tmp/{marker} && cat /tmp/{marker}")).await;
    assert!(out.success(), "{out:?}");
    assert!(!std::path::Path::new(&format!("/tmp/{marker}")).exists());
    // The workspace is writable.
    assert!(
        common::sh(&sb, "echo x > /testbed/ok && mkdir -p a/b && touch a/b/c")
            .await
            .success()
    );
    sb.teardown().await.unwrap();
}

#[tokio::test]
async fn another_rollouts_workspace_is_invisible() {
    skip_unless_ns!();
    // A keeps its upper dir on the host's disk, so the test can aim at its real path.
    let a = Sandbox::create(
        &common::small_pristine(),
        None,
        &limited(|l| l.workspace_bytes = None),
    )
    .await
    .unwrap();
    let b = common::sandbox().await;
    assert!(
        common::sh(&a, "echo secret-a > /testbed/secret.txt")
            .await
            .success()
    );
    // B sees the pristine file set, not A's edit.
    let out = common::sh(&b, "cat /testbed/secret.txt").await;
    assert_ne!(out.exit_code, Some(0));
    // A's upper dir on the host is not reachable from B (DOJO_HOME is hidden / unreachable).
    let upper = a.host_dir().join("layer-0/upper/secret.txt");
    assert!(upper.exists(), "test premise: {upper:?}");
    let out = common::sh(&b, &format!("cat {0}; echo y > {0}", upper.display())).await;
    assert_ne!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(std::fs::read_to_string(&upper).unwrap(), "secret-a\n");
    // Nor are A's processes: B only sees its own.
    let mut sleeper = a.spawn(&ExecRequest::new(["sleep", "300"])).await.unwrap();
    let out = common::sh(&b, "ps -e -o comm= | grep -c sleep || true").await;
    assert_eq!(out.stdout_lossy().trim(), "0", "{out:?}");
    let _ = sleeper.child.start_kill();
    let _ = sleeper.child.wait().await;
    a.teardown().await.unwrap();
    b.teardown().await.unwrap();
}

#[tokio::test]
async fn pristine_tree_and_venv_cannot_be_changed() {
    skip_unless_ns!();
    let p = common::small_pristine();
    let before = std::fs::read(p.path.join("pkg/mod.py")).unwrap();
    let sb = common::sandbox().await;
    let out = common::sh(
        &sb,
        &format!(
            "rm -rf /testbed/pkg; echo evil > /testbed/README.md; echo x > {0}/pkg/mod.py; rm -rf {0}",
            p.path.display()
        ),
    )
    .await;
    // (The pristine path itself is not even visible inside: $DOJO_HOME is hidden or unreachable.)
    let _ = out;
    assert_eq!(std::fs::read(p.path.join("pkg/mod.py")).unwrap(), before);
    assert_eq!(
        std::fs::read_to_string(p.path.join("README.md")).unwrap(),
        "hello\n"
    );
    sb.teardown().await.unwrap();

    // The shared venv is mounted read-only.
    let Some(env) = common::bare_env() else {
        eprintln!("SKIPPED (venv part): uv not found");
        return;
    };
    let sb = Sandbox::create(&p, Some(&env), &SandboxOptions::default())
        .await
        .unwrap();
    let out = common::sh(
        &sb,
        "which python; python -c 'import sys; print(sys.prefix)'; touch /venv/x; rm -f /venv/bin/python; echo rc=$?",
    )
    .await;
    let s = out.stdout_lossy();
    assert!(s.starts_with("/venv/bin/python\n/venv\n"), "{out:?}");
    assert!(s.contains("rc=1"), "{out:?}");
    assert!(env.path.join("bin/python").exists());
    assert!(!env.path.join("x").exists());
    sb.teardown().await.unwrap();
}

#[tokio::test]
async fn host_loopback_is_unreachable_but_own_loopback_works() {
    skip_unless_ns!();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let sb = common::sandbox().await;
    let out = common::sh(
        &sb,
        &format!("timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' && echo CONNECTED"),
    )
    .await;
    assert!(!out.stdout_lossy().contains("CONNECTED"), "{out:?}");
    // A server inside the sandbox on its own loopback works.
    let out = common::sh(
        &sb,
        &format!(
            "/usr/bin/python3.11 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 &
             for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && break; sleep 0.1; done
             exec 3<>/dev/tcp/127.0.0.1/{port}; printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3; head -1 <&3"
        ),
    )
    .await;
    assert!(out.stdout_lossy().contains("200"), "{out:?}");
    // No other interface than lo (/proc/net follows the reader's network namespace).
    let out = common::sh(&sb, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").await;
    assert_eq!(out.stdout_lossy().trim(), "lo", "{out:?}");
    drop(listener);
    sb.teardown().await.unwrap();
}

#[tokio::test]
async fn fork_bomb_is_contained() {
    skip_unless_ns!();
    let sb = Sandbox::create(
        &common::small_pristine(),
        None,
        &limited(|l| l.max_processes = Some(64)),
    )
    .await
    .unwrap();
    let out = sb
        .exec(&ExecRequest::shell("b() { b | b & }; b").timeout(Duration::from_secs(5)))
        .await
        .unwrap();
    eprintln!(
        "fork bomb: exit {:?} timed_out {}",
        out.exit_code, out.timed_out
    );
    // Everything it started is gone and the sandbox still works.
    let out = common::sh(&sb, "ps -e | wc -l; echo alive").await;
    assert!(out.stdout_lossy().contains("alive"), "{out:?}");
    sb.teardown().await.unwrap();
}

#[tokio::test]
async fn memory_bomb_is_contained() {
    skip_unless_ns!();
    let sb = Sandbox::create(
        &common::small_pristine(),
        None,
        &limited(|l| l.memory_bytes = Some(256 << 20)),
    )
    .await
    .unwrap();
    let out = sb
        .exec(
            &ExecRequest::new([
                "/usr/bin/python3.11",
                "-c",
                "x = b'x' * (2 << 30); print('allocated')",
            ])
            .timeout(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert!(!out.stdout_lossy().contains("allocated"), "{out:?}");
    assert!(!out.success());
    assert!(common::sh(&sb, "echo alive").await.success());
    sb.teardown().await.unwrap();
}

/// The number on the last line of a command's output (`u64::MAX` when there is none).
fn last_number(s: &str) -> u64 {
    s.lines()
        .last()
        .unwrap_or("")
        .trim()
        .parse()
        .unwrap_or(u64::MAX)
}

#[tokio::test]
async fn disk_fill_is_bounded() {
    skip_unless_ns!();
    let sb = Sandbox::create(
        &common::small_pristine(),
        None,
        &limited(|l| {
            l.max_file_size_bytes = Some(16 << 20);
            l.memory_bytes = Some(512 << 20);
        }),
    )
    .await
    .unwrap();
    // One huge file in the workspace stops at RLIMIT_FSIZE.
    let out = common::sh(
        &sb,
        "dd if=/dev/zero of=/testbed/big bs=1M count=100 2>&1; stat -c %s /testbed/big",
    )
    .await;
    let size = last_number(&out.stdout_lossy());
    assert!(size <= 16 << 20, "{out:?}");
    // Filling /tmp stops at the tmpfs size (half the memory limit here), with ENOSPC.
    let out = common::sh(
        &sb,
        "for i in $(seq 64); do dd if=/dev/zero of=/tmp/f$i bs=1M count=15 2>/dev/null || { echo FULL; break; }; done; du -sm /tmp | cut -f1",
    )
    .await;
    let s = out.stdout_lossy();
    assert!(s.contains("FULL"), "{out:?}");
    let mb = last_number(&s);
    assert!(mb <= 260, "{out:?}");
    sb.teardown().await.unwrap();
}

/// Bytes under a host path (files only).
fn du(p: &std::path::Path) -> u64 {
    let Ok(md) = std::fs::symlink_metadata(p) else {
        return 0;
    };
    if md.is_dir() {
        std::fs::read_dir(p)
            .map(|rd| rd.flatten().map(|e| du(&e.path())).sum())
            .unwrap_or(0)
    } else {
        md.len()
    }
}

#[tokio::test]
async fn workspace_disk_cap_gives_enospc_and_spares_the_host() {
    skip_unless_ns!();
    let mut sb = Sandbox::create(
        &common::small_pristine(),
        None,
        &limited(|l| {
            l.workspace_bytes = Some(48 << 20);
            l.max_file_size_bytes = None;
        }),
    )
    .await
    .unwrap();
    // Filling the workspace stops at the cap with ENOSPC, not at the host's disk.
    let out = common::sh(
        &sb,
        "dd if=/dev/zero of=/testbed/big bs=1M count=200 2>&1; stat -c %s /testbed/big",
    )
    .await;
    let s = out.stdout_lossy();
    assert!(s.contains("No space left on device"), "{out:?}");
    let size = last_number(&s);
    assert!(size <= 48 << 20, "{out:?}");
    // /tmp shares the same cap.
    let out = common::sh(&sb, "echo x > /tmp/more 2>&1 || echo FULL").await;
    assert!(out.stdout_lossy().contains("FULL"), "{out:?}");
    // Nothing of it reached the host.
    assert!(
        du(sb.host_dir()) < 1 << 20,
        "{} bytes on the host",
        du(sb.host_dir())
    );
    // Still usable: freeing space makes writes work again; the diff sees the file.
    let out = common::sh(
        &sb,
        "rm /testbed/big && echo ok > /testbed/small && cat /testbed/small",
    )
    .await;
    assert_eq!(out.stdout_lossy(), "ok\n", "{out:?}");
    // Reset gives a fresh, empty workspace under the same cap.
    assert!(
        common::sh(&sb, "dd if=/dev/zero of=/tmp/f bs=1M count=30 2>/dev/null")
            .await
            .success()
    );
    sb.reset().await.unwrap();
    let out = common::sh(&sb, "test ! -e /testbed/small && test ! -e /tmp/f && dd if=/dev/zero of=/testbed/f bs=1M count=30 2>&1 >/dev/null && echo fresh").await;
    assert!(out.stdout_lossy().contains("fresh"), "{out:?}");
    sb.teardown().await.unwrap();
}

/// Processes on the host whose command line contains `needle`.
fn host_procs(needle: &str) -> Vec<i32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(c) = std::fs::read(e.path().join("cmdline"))
            && String::from_utf8_lossy(&c)
                .replace('\0', " ")
                .contains(needle)
        {
            v.push(pid);
        }
    }
    v
}

/// Host processes whose argv is exactly `argv`.
fn exact_procs(argv: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want) {
            v.push(pid);
        }
    }
    v
}

/// Waits up to 10 s for no host process to mention `needle`.
async fn gone(needle: &str) -> bool {
    for _ in 0..1000 {
        if host_procs(needle).is_empty() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

#[tokio::test]
async fn setsid_double_forked_daemon_does_not_survive() {
    skip_unless_ns!();
    let sb = common::sandbox().await;
    let tag = 3_000_000 + std::process::id() % 100_000;
    // A command that leaves a double-forked setsid daemon behind: killed with the command.
    let out = common::sh(
        &sb,
        &format!(
            "(setsid bash -c 'sleep {tag}' </dev/null >/dev/null 2>&1 &) ; sleep 0.2; echo started"
        ),
    )
    .await;
    assert!(out.success(), "{out:?}");
    assert!(
        gone(&format!("sleep {tag}")).await,
        "daemon survived its command"
    );
    // A long-running process that daemonizes: killed at teardown. Both sleeps `exec`, so each
    // ends as a process whose argv is exactly `sleep N` and stays so until killed; counting
    // that argv (not any command line containing it) keeps the shells that fork and exit on
    // the way there, and a /proc scan racing them, out of the check.
    let t2 = tag + 1;
    let t3 = tag + 2;
    let _p = sb
        .spawn(&ExecRequest::shell(format!(
            "(setsid bash -c 'exec sleep {t2}' </dev/null >/dev/null 2>&1 &); exec sleep {t3}"
        )))
        .await
        .unwrap();
    // Polled for up to 30 s: on a loaded machine the daemon can take seconds to appear.
    let running = || {
        !exact_procs(&["sleep", &t2.to_string()]).is_empty()
            && !exact_procs(&["sleep", &t3.to_string()]).is_empty()
    };
    for _ in 0..3000 {
        if running() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(running(), "the daemon and its parent never both ran");
    sb.teardown().await.unwrap();
    assert!(
        gone(&format!("sleep {t2}")).await,
        "daemon survived teardown"
    );
    assert!(
        gone(&format!("sleep {t3}")).await,
        "command survived teardown"
    );
}

#[tokio::test]
async fn loop_ignoring_sigterm_is_killed() {
    skip_unless_ns!();
    let sb = common::sandbox().await;
    let out = sb
        .exec(
            &ExecRequest::shell(
                "trap '' TERM; (trap '' TERM; while :; do :; done) & while :; do :; done",
            )
            .timeout(Duration::from_millis(500))
            .grace(Duration::from_millis(500)),
        )
        .await
        .unwrap();
    assert!(out.timed_out);
    assert_eq!(out.signal, Some(9), "{out:?}");
    assert!(common::sh(&sb, "echo alive").await.success());
    sb.teardown().await.unwrap();
}

#[tokio::test]
async fn symlink_in_repository_cannot_write_outside() {
    skip_unless_ns!();
    let sb = common::sandbox().await;
    let passwd = std::fs::read("/etc/passwd").unwrap();
    // Inside: writes through the link hit the read-only host view.
    let out = common::sh(
        &sb,
        "ln -s /etc/passwd evil && echo pwned >> evil; ln -s /etc evildir; echo x > evildir/dojo-x",
    )
    .await;
    assert_ne!(out.exit_code, Some(0));
    // From the host API: write_file/read_file through the link never touch the host.
    let _ = sb.write_file("evil", b"pwned\n").await;
    let _ = sb.write_file("evildir/dojo-x", b"pwned\n").await;
    assert_eq!(std::fs::read("/etc/passwd").unwrap(), passwd);
    assert!(!std::path::Path::new("/etc/dojo-x").exists());
    assert!(common::sh(&sb, "ln -s /etc/shadow shadow").await.success());
    if let Ok(v) = sb.read_file("shadow").await {
        assert!(
            v.is_empty() || !String::from_utf8_lossy(&v).contains("root:"),
            "read host shadow"
        );
    }
    sb.teardown().await.unwrap();
}

#[tokio::test]
async fn host_processes_cannot_be_signalled_through_proc() {
    skip_unless_ns!();
    let mut victim = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
        .unwrap();
    let pid = victim.id();
    let sb = common::sandbox().await;
    let out = common::sh(
        &sb,
        &format!("ls /proc/{pid}; kill -9 {pid}; kill -9 -1; echo done"),
    )
    .await;
    assert!(out.stdout_lossy().contains("done"), "{out:?}");
    assert!(
        victim.try_wait().unwrap().is_none(),
        "host process was killed"
    );
    victim.kill().unwrap();
    let _ = victim.wait();
    sb.teardown().await.unwrap();
}

#[tokio::test]
async fn ptrace_is_refused() {
    skip_unless_ns!();
    let sb = common::sandbox().await;
    let out = common::sh(
        &sb,
        "sleep 30 & /usr/bin/python3.11 -c \"import ctypes,os,sys; l=ctypes.CDLL(None,use_errno=True); r=l.ptrace(16,int(sys.argv[1]),0,0); print(r, os.strerror(ctypes.get_errno()))\" $!",
    )
    .await;
    assert!(
        out.stdout_lossy().starts_with("-1 Operation not permitted"),
        "{out:?}"
    );
    sb.teardown().await.unwrap();
}

#[tokio::test]
async fn changing_uid_is_refused() {
    skip_unless_ns!();
    let sb = common::sandbox().await;
    let out = common::sh(
        &sb,
        "/usr/bin/python3.11 -c \"import os\ntry:\n os.setuid(1000); print('changed')\nexcept OSError as e: print('refused', e)\"; id -u",
    )
    .await;
    let s = out.stdout_lossy();
    assert!(s.contains("refused"), "{out:?}");
    // Root inside is the unprivileged sandbox uid outside: a process started inside shows up
    // on the host with that uid.
    let uid = dojo_sandbox::testing::sandbox_uid();
    assert_ne!(uid, 0);
    let mut p = sb.spawn(&ExecRequest::new(["sleep", "301"])).await.unwrap();
    let tag_uid = (0..200).find_map(|_| {
        let pids: Vec<i32> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        let found = pids.into_iter().find_map(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            if cmd != b"sleep\x00301\x00" {
                return None;
            }
            let st = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            st.lines()
                .find(|l| l.starts_with("Uid:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<u32>()
                .ok()
        });
        if found.is_none() {
            std::thread::sleep(Duration::from_millis(10));
        }
        found
    });
    assert_eq!(tag_uid, Some(uid));
    let _ = p.child.start_kill();
    let _ = p.child.wait().await;
    sb.teardown().await.unwrap();
}

#[tokio::test]
async fn mount_and_namespace_calls_are_refused() {
    skip_unless_ns!();
    let sb = common::sandbox().await;
    let out = common::sh(
        &sb,
        "mount -t tmpfs none /testbed 2>&1; echo m=$?; unshare -U true 2>&1; echo u=$?; mount | grep -c ' /testbed ' ",
    )
    .await;
    let s = out.stdout_lossy();
    assert!(s.contains("m=") && !s.contains("m=0"), "{out:?}");
    assert!(!s.contains("u=0"), "{out:?}");
    sb.teardown().await.unwrap();
}
