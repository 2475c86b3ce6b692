//! 200 MB of output: no deadlock, bounded memory (its own test binary, so the peak-RSS
//! measurement is not polluted by other tests running in parallel).

mod common;

use std::time::Duration;

use dojo_sandbox::ExecRequest;

fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn output_of_200_mb_neither_deadlocks_nor_blows_memory() {
    skip_unless_ns!();
    let sb = common::sandbox().await;
    let before = peak_rss_kb();
    let out = sb
        .exec(
            &ExecRequest::shell("head -c 200000000 /dev/zero | tr '\\0' a; echo; echo done >&2; head -c 50000000 /dev/zero >&2")
                .output_cap(1 << 20, 1 << 20)
                .timeout(Duration::from_secs(120)),
        )
        .await
        .unwrap();
    assert!(out.success(), "{:?}", out.exit_code);
    assert!(out.stdout_truncated && out.stderr_truncated);
    assert!(out.stdout.len() < (2 << 20) + 200, "{}", out.stdout.len());
    assert!(out.stdout.starts_with(b"aaaa"));
    let grown_mb = (peak_rss_kb().saturating_sub(before)) / 1024;
    assert!(grown_mb < 64, "peak RSS grew by {grown_mb} MB");
    sb.teardown().await.unwrap();
}
