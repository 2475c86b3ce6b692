//! CPU time of one `Sandbox::exec(true)`, summed over every process it involves (the caller, the
//! in-sandbox launcher, the pre-warmed supervisor, the command, and the kernel work of their
//! namespaces), which a loaded machine inflates far less than wall time; and each command's
//! wall time (median, 10th percentile). The process puts itself in a fresh cgroup v1 `cpuacct`
//! group (inherited by the sandbox it creates) and reads its usage around N commands in one
//! sandbox, 3 ms apart (each command finds its supervisor armed). With `--bare`, the same loop
//! runs `/usr/bin/true` on the host with tokio's `Command` instead (the baseline; the sandbox is
//! still created, so both runs hold the same processes).
//!
//! `cargo run --release -p dojo-bench --no-default-features --example exec_cpu -- [N] [--bare]
//! [--mt]` as root (`--mt`: a multi-threaded runtime, 2 workers on this machine);
//! `scripts/etc-layout-cpu.sh` runs it alternately with the `/etc` snapshot and with one bind
//! per `/etc` entry (`DOJO_SANDBOX_ETC=binds`); `scripts/sandbox-exec-trace.sh` runs it under
//! `perf` to split each command into phases. Without cgroup v1 `cpuacct` only wall times are
//! printed; without namespaces, SKIPPED.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use dojo_sandbox::{ExecRequest, PristineStore, Sandbox, SandboxOptions, Source};

fn main() {
    // `--mt`: a multi-threaded runtime (2 workers, like `sandbox_bench`) instead of one thread.
    let mut rt = if std::env::args().any(|a| a == "--mt") {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    rt.enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(run());
}

async fn run() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bare = args.iter().any(|a| a == "--bare");
    let n: usize = args.iter().find_map(|s| s.parse().ok()).unwrap_or(300);
    let root = PathBuf::from("/sys/fs/cgroup/cpuacct");
    if !dojo_sandbox::doctor::namespaces_usable() {
        println!("SKIPPED: needs the namespace backend (as root)");
        return;
    }
    let cg = root
        .join("cpuacct.usage")
        .exists()
        .then(|| root.join(format!("dojo-exec-cpu-{}", std::process::id())));
    if let Some(cg) = &cg {
        std::fs::create_dir_all(cg).expect("create the cpuacct group");
        std::fs::write(cg.join("cgroup.procs"), "0").expect("join the cpuacct group");
    }
    let usage = || -> Option<u64> {
        let p = cg.as_ref()?.join("cpuacct.usage");
        let s = std::fs::read_to_string(&p).expect("cpuacct.usage");
        Some(s.trim().parse().expect("cpuacct.usage is a number"))
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
    let req = ExecRequest::new(["/usr/bin/true"]);
    let _ = sb.exec(&req).await.expect("warm-up");
    let c0 = usage();
    let mut wall = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let ok = if bare {
            let o = tokio::process::Command::new("/usr/bin/true")
                .output()
                .await
                .expect("spawn");
            o.status.success()
        } else {
            sb.exec(&req).await.expect("exec").success()
        };
        wall.push(t.elapsed().as_secs_f64() * 1000.0);
        assert!(ok);
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    let cpu = match (c0, usage()) {
        (Some(a), Some(b)) => format!(
            "{:.1} us CPU per command",
            (b - a) as f64 / n as f64 / 1000.0
        ),
        _ => "CPU not measured (no cgroup v1 cpuacct)".into(),
    };
    wall.sort_by(f64::total_cmp);
    let q = |f: f64| wall[((wall.len() - 1) as f64 * f) as usize];
    println!(
        "{} true: {cpu} ({n} commands); wall p50 {:.3} ms, p10 {:.3} ms",
        if bare { "bare" } else { "exec" },
        q(0.5),
        q(0.1)
    );
    sb.teardown().await.expect("teardown");
    if let Some(cg) = &cg {
        // Back to the parent group so this one can be removed.
        let _ = std::fs::write(root.join("cgroup.procs"), "0");
        let _ = std::fs::remove_dir(cg);
    }
}
