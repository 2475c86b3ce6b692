//! 100 create/run/teardown cycles leave 0 mounts, 0 processes and 0 directories behind.
//! (Its own test binary: it counts processes of the sandbox uid on the whole host.)

mod common;

use dojo_sandbox::ExecRequest;

fn mount_count() -> usize {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .count()
}

fn sandbox_uid_processes() -> Vec<i32> {
    let uid = dojo_sandbox::testing::sandbox_uid();
    let me = std::process::id() as i32;
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(e.path().join("status")) else {
            continue;
        };
        let ruid = status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ruid == Some(uid) {
            v.push(pid);
        }
    }
    v
}

fn cgroup_dirs_of(ids: &[String]) -> Vec<String> {
    let mut v = Vec::new();
    for id in ids {
        for c in ["memory", "pids", "cpu"] {
            let d = format!("/sys/fs/cgroup/{c}/dojo/{id}");
            if std::path::Path::new(&d).exists() {
                v.push(d);
            }
        }
    }
    v
}

#[tokio::test]
async fn hundred_cycles_leave_nothing_behind() {
    // A uid of our own, so sandboxes of other test binaries running meanwhile are not counted.
    // SAFETY: set before any sandbox exists in this process (one test in this binary).
    unsafe { std::env::set_var("DOJO_SANDBOX_UID", "1600077") };
    skip_unless_ns!();
    if !dojo_sandbox::testing::is_root() {
        eprintln!(
            "SKIPPED: counting the sandbox uid's processes needs a dedicated uid (run as root)"
        );
        return;
    }
    let pristine = common::small_pristine();
    let mounts = mount_count();
    let procs_before = sandbox_uid_processes();
    let mut ids = Vec::new();
    for i in 0..100 {
        let mut sb = dojo_sandbox::Sandbox::create(&pristine, None, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("cycle {i}: {e}"));
        ids.push(sb.id().to_string());
        let out = sb
            .exec(&ExecRequest::shell(
                "echo $((6*7)) > answer; (setsid sleep 600 &); cat answer",
            ))
            .await
            .unwrap();
        assert_eq!(out.stdout_lossy(), "42\n", "cycle {i}");
        if i % 10 == 0 {
            sb.reset().await.unwrap();
        }
        sb.teardown().await.unwrap();
    }
    dojo_sandbox::trash::flush();
    assert_eq!(mount_count(), mounts, "host mounts changed");
    // The kernel may need a moment to finish reaping killed namespaces.
    let mut left = sandbox_uid_processes();
    for _ in 0..200 {
        if left.len() <= procs_before.len() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        left = sandbox_uid_processes();
    }
    assert!(left.len() <= procs_before.len(), "processes left: {left:?}");
    let dir = dojo_sandbox::sandboxes_dir();
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name() != ".trash")
        .map(|e| e.path())
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let trash: Vec<_> = std::fs::read_dir(dir.join(".trash"))
        .map(|r| r.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(trash.is_empty(), "{trash:?}");
    let cg = cgroup_dirs_of(&ids);
    assert!(cg.is_empty(), "cgroups left behind: {cg:?}");
}
