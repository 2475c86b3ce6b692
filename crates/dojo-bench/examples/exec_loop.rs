//! `true` through one sandbox's launcher, N times with a 3 ms pause before each (as the
//! per-command rows of `sandbox_bench`), printing the median and 10th percentile in ms; a
//! small process to trace with `perf` (`scripts/sandbox-exec-trace.sh` splits each command
//! into phases from the scheduler's events).
//!
//! Run: `cargo run --release -p dojo-bench --no-default-features --example exec_loop -- [N]`
//! (as root, where `dojo sandbox doctor` shows the namespace backend).

use std::time::{Duration, Instant};

use dojo_sandbox::{ExecRequest, PristineStore, Sandbox, SandboxOptions, Source};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let dir = std::env::temp_dir().join(format!("dojo-exec-loop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    std::fs::write(dir.join("a.txt"), "x").expect("scratch file");
    let store = PristineStore::open().expect("store");
    let p = store
        .build(&Source::Dir { path: dir.clone() })
        .expect("pristine");
    let sb = Sandbox::create(&p, None, &SandboxOptions::default())
        .await
        .expect("sandbox");
    let req = ExecRequest::new(["/usr/bin/true"]);
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        std::thread::sleep(Duration::from_millis(3));
        let t = Instant::now();
        assert!(sb.exec(&req).await.expect("exec").success());
        v.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    drop(sb);
    let _ = std::fs::remove_dir_all(&dir);
    v.sort_by(f64::total_cmp);
    println!("p50 {:.3} p10 {:.3}", v[v.len() / 2], v[v.len() / 10]);
}
