//! Helpers shared by the agent benches.

use std::time::Duration;

/// CPU time of this process (all threads; child processes excluded).
pub fn cpu_time() -> Duration {
    // SAFETY: an all-zero rusage is a valid value, and getrusage only fills the struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// "host: N cores, load average …": printed above every table (this machine is shared).
pub fn host_line() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    format!(
        "host: {} cores, load average {}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        load.trim()
    )
}
