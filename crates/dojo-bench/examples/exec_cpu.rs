//! CPU time of one `Sandbox::exec(true)`, summed over every process it involves (the caller, the
//! in-sandbox launcher, the pre-warmed supervisor, the command, and the kernel work of their
//! namespaces), which a loaded machine inflates far less than wall time. The process puts itself
//! in a fresh cgroup v1 `cpuacct` group (inherited by the sandbox it creates) and reads its usage
//! around N commands in one sandbox, 3 ms apart (each command finds its supervisor armed).
//!
//! `cargo run --release -p dojo-bench --no-default-features --example exec_cpu -- [N]` as root
//! on a cgroup v1 host; `scripts/etc-layout-cpu.sh` runs it alternately with the `/etc` snapshot
//! and with one bind per `/etc` entry (`DOJO_SANDBOX_ETC=binds`). Prints SKIPPED without
//! namespaces or `cpuacct`.

use std::path::PathBuf;
use std::time::Duration;

use dojo_sandbox::{ExecRequest, PristineStore, Sandbox, SandboxOptions, Source};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let root = PathBuf::from("/sys/fs/cgroup/cpuacct");
    if !dojo_sandbox::doctor::namespaces_usable() || !root.join("cpuacct.usage").exists() {
        println!("SKIPPED: needs the namespace backend and cgroup v1 cpuacct (as root)");
        return;
    }
    let cg = root.join(format!("dojo-exec-cpu-{}", std::process::id()));
    std::fs::create_dir_all(&cg).expect("create the cpuacct group");
    std::fs::write(cg.join("cgroup.procs"), "0").expect("join the cpuacct group");
    let usage = || -> u64 {
        let p = cg.join("cpuacct.usage");
        let s = std::fs::read_to_string(&p).expect("cpuacct.usage");
        s.trim().parse().expect("cpuacct.usage is a number")
    };
    let src = tempfile::tempdir().expect("tempdir");
    std::fs::write(src.path().join("README"), "x\n").expect("write");
    let p = PristineStore::open()
        .and_then(|s| {
            s.build(&Source::Dir {
                path: src.path().to_path_buf(),
            })
        })
        .expect("pristine");
    let sb = Sandbox::create(&p, None, &SandboxOptions::default())
        .await
        .expect("sandbox");
    let req = ExecRequest::new(["true"]);
    let _ = sb.exec(&req).await.expect("warm-up");
    let c0 = usage();
    for _ in 0..n {
        let o = sb.exec(&req).await.expect("exec");
        assert!(o.success(), "{o:?}");
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    let per = (usage() - c0) as f64 / n as f64 / 1000.0;
    println!("exec true: {per:.1} us CPU per command ({n} commands)");
    sb.teardown().await.expect("teardown");
    // Back to the parent group so this one can be removed.
    let _ = std::fs::write(root.join("cgroup.procs"), "0");
    let _ = std::fs::remove_dir(&cg);
}
