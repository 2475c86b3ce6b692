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

/// Pids of a process's direct children (host view).
fn children(pid: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Idle, exactly two pre-warmed supervisors wait under the launcher (a spare's slot is armed
/// again once it has exited, after its command: give that a moment).
fn idle_spares(launcher: i32) -> Vec<i32> {
    let mut spares = children(launcher);
    for _ in 0..500 {
        if spares.len() == 2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        spares = children(launcher);
    }
    assert_eq!(spares.len(), 2, "launcher children: {spares:?}");
    spares
}

/// While idle, the launcher keeps supervisors pre-warmed (already pid 1 of its own pid and
/// mount namespace, `/proc` mounted); each command still gets a supervisor of its own, and
/// nothing a command did carries over to the next: not its pid namespace or processes, not
/// env, cwd, umask, fds or signal dispositions. Teardown takes the spares with it.
#[tokio::test]
async fn each_command_gets_a_fresh_prewarmed_supervisor() {
    skip_unless_ns!();
    let sb = common::sandbox().await;
    let launcher = sb.holder_pid().expect("namespace backend");
    let probe = "readlink /proc/self/ns/pid; echo pid=$$; ls /proc | grep -c '^[0-9]'; \
                 echo foo=${FOO:-unset}; umask; pwd; ls /proc/self/fd | tr '\\n' ' '; echo; \
                 grep -E '^Sig(Blk|Ign)|^NoNewPrivs|^Seccomp:' /proc/self/status";
    let first = common::sh(&sb, probe).await;
    assert!(first.success(), "{first:?}");
    // Change everything a command can change about its own process, and leave a daemon behind.
    let out = common::sh(
        &sb,
        "export FOO=leak; umask 077; cd /tmp; trap '' TERM HUP PIPE; exec 7>/tmp/fd7; \
         setsid sh -c 'sleep 300 & sleep 300' >/dev/null 2>&1 & echo started",
    )
    .await;
    assert!(out.success(), "{out:?}");
    let second = common::sh(&sb, probe).await;
    let (a, b) = (first.stdout_lossy(), second.stdout_lossy());
    let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    assert_ne!(a[0], b[0], "a pid namespace was reused:\n{a:?}\n{b:?}");
    // (All but the process count, which depends on whether `grep` had started when `ls` read
    // /proc: checked on its own below.)
    assert_eq!(a[1], b[1], "state carried over between commands");
    assert_eq!(a[3..], b[3..], "state carried over between commands");
    // pid 1 (the supervisor), the shell (2), ls and grep: nothing left from other commands.
    assert_eq!(b[1], "pid=2", "{b:?}");
    assert!(b[2].parse::<u32>().is_ok_and(|n| n <= 4), "{b:?}");
    assert_eq!(b[3], "foo=unset");
    assert!(
        b[6].split_whitespace()
            .all(|fd| fd.parse::<u32>().is_ok_and(|fd| fd <= 3)),
        "{b:?}"
    );
    assert_eq!(b[7], "SigBlk:\t0000000000000000", "{b:?}");
    // None of the signals the previous command ignored (TERM 15, HUP 1, PIPE 13) is ignored.
    let ign = u64::from_str_radix(b[8].trim_start_matches("SigIgn:\t"), 16).unwrap();
    assert_eq!(ign & (1 << 14 | 1 | 1 << 12), 0, "{b:?}");
    // The seccomp filter the spare installed ahead of the request is in force in the command.
    assert!(
        b.contains(&"NoNewPrivs:\t1") && b.contains(&"Seccomp:\t2"),
        "{b:?}"
    );
    let spares = idle_spares(launcher);
    // Each is pid 1 of a pid namespace of its own, not the launcher's nor the other's.
    let ns = |pid: i32, what: &str| std::fs::read_link(format!("/proc/{pid}/ns/{what}")).ok();
    for &spare in &spares {
        assert_ne!(ns(spare, "pid"), ns(launcher, "pid"));
        assert_ne!(ns(spare, "mnt"), ns(launcher, "mnt"));
    }
    assert_ne!(ns(spares[0], "pid"), ns(spares[1], "pid"));
    // A spare's failures read as before: a missing command is 127, a bad cwd a setup error.
    let out = sb.exec(&ExecRequest::new(["/no/such/cmd"])).await.unwrap();
    assert_eq!(out.exit_code, Some(127), "{out:?}");
    assert!(out.stderr_lossy().contains("command not found"), "{out:?}");
    let err = sb
        .exec(&ExecRequest::shell("true").cwd("/no/such/dir"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("working directory"), "{err}");
    let spares = idle_spares(launcher);
    sb.teardown().await.unwrap();
    let alive = || {
        spares
            .iter()
            .any(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
    };
    for _ in 0..500 {
        if !alive() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!alive(), "a spare supervisor survived teardown");
}

/// The request's edges, on the launcher's path: a request far larger than the launcher's first
/// read (300 KB of arguments) arrives whole; a command without stdin reads `/dev/null` (EOF at
/// once) and holds no fds but its stdio; a process left behind holding stdout does not keep
/// the result waiting.
#[tokio::test]
async fn large_requests_no_stdin_and_leftovers_holding_stdout() {
    skip_unless_ns!();
    let sb = common::sandbox().await;
    // (One argument may not exceed 128 KiB: `execve` refuses it.)
    let part = "x".repeat(100_000);
    let argv = [
        "sh",
        "-c",
        "printf %s \"$@\" | wc -c",
        "sh",
        &part,
        &part,
        &part,
    ];
    let out = sb.exec(&ExecRequest::new(argv)).await.unwrap();
    assert_eq!(out.stdout_lossy().trim(), "300000", "{out:?}");
    let out = common::sh(&sb, "cat; echo eof; ls /proc/self/fd | wc -l").await;
    assert_eq!(out.stdout_lossy(), "eof\n4\n", "{out:?}");
    // Held until the timeout, the result would say so (the default timeout is 120 s).
    let out = common::sh(&sb, "sleep 300 & echo left").await;
    assert!(out.success() && out.stdout_lossy() == "left\n", "{out:?}");
    assert!(!out.timed_out, "{out:?}");
    sb.teardown().await.unwrap();
}

/// Run `reqs` all at once in a fresh sandbox (a task each), tear it down, and return their
/// outputs in order.
async fn exec_at_once(reqs: Vec<ExecRequest>) -> Vec<dojo_sandbox::ExecOutput> {
    let sb = std::sync::Arc::new(common::sandbox().await);
    let tasks: Vec<_> = reqs
        .into_iter()
        .map(|req| {
            let sb = sb.clone();
            tokio::spawn(async move { sb.exec(&req).await.unwrap() })
        })
        .collect();
    let mut outs = Vec::new();
    for t in tasks {
        outs.push(t.await.unwrap());
    }
    let Ok(sb) = std::sync::Arc::try_unwrap(sb) else {
        panic!("sandbox still shared")
    };
    sb.teardown().await.unwrap();
    outs
}

/// More commands at once than the launcher keeps spares: all of them run at the same time (each
/// waits until all four have started; a cap would leave the later ones queued and the
/// earlier ones timing out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_concurrent_commands_than_spares_all_run_at_once() {
    skip_unless_ns!();
    let reqs = (0..4)
        .map(|i| {
            let script = format!(
                "touch /tmp/started-{i}; \
                 while [ $(ls /tmp | grep -c '^started-') -lt 4 ]; do sleep 0.01; done; echo ok"
            );
            ExecRequest::shell(script).timeout(std::time::Duration::from_secs(60))
        })
        .collect();
    for out in exec_at_once(reqs).await {
        assert!(out.success() && !out.timed_out, "{out:?}");
        assert_eq!(out.stdout_lossy(), "ok\n");
    }
}

/// Many commands at once in one sandbox: each gets its own output and exit code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commands_in_one_sandbox_keep_their_own_results() {
    skip_unless_ns!();
    let reqs = (0..16)
        .map(|i| ExecRequest::shell(format!("sleep 0.0{}; echo out-{i}; exit {i}", i % 5)))
        .collect();
    for (i, out) in exec_at_once(reqs).await.into_iter().enumerate() {
        assert_eq!(out.exit_code, Some(i as i32), "{out:?}");
        assert_eq!(out.stdout_lossy(), format!("out-{i}\n"));
    }
}

/// Every command runs in a mount namespace of its own, a copy of the sandbox's (made and torn
/// down per command): the sandbox keeps few mounts, `/etc` being one snapshot rather than a
/// bind per entry. What the programs read there is still present.
#[tokio::test]
async fn the_root_has_few_mounts_and_etc_works() {
    skip_unless_ns!();
    let sb = common::sandbox().await;
    let out = common::sh(
        &sb,
        "wc -l < /proc/self/mountinfo; awk '$5 ~ \"^/etc\"' /proc/self/mountinfo | wc -l; \
         getent passwd root >/dev/null && test -s /etc/ld.so.cache && echo etc-ok",
    )
    .await;
    let s = out.stdout_lossy();
    let mut lines = s.lines();
    let mounts: usize = lines.next().unwrap().trim().parse().unwrap();
    let etc_mounts: usize = lines.next().unwrap().trim().parse().unwrap();
    assert_eq!(lines.next(), Some("etc-ok"), "{out:?}");
    assert_eq!(etc_mounts, 1, "{out:?}");
    assert!(mounts <= 24, "{mounts} mounts in a sandbox");
    sb.teardown().await.unwrap();
}
