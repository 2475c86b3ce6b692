//! One thread pool for the kernels: candle's own element-wise pool kept off by default.
//!
//! Why: candle 0.11 runs its CPU element-wise ops (the adds of residuals and of gradients,
//! scaling, the optimizer's updates) on a pool of its own, `CANDLE_NUM_THREADS` threads
//! (default: the cores) that spin for a while after each op before they sleep, beside rayon's
//! pool, which every kernel here and every matmul uses. On a machine with few cores the two
//! pools' threads take turns spinning on the cores the other pool's work needs: on a
//! 2,048-token step of SmolLM2-135M on 2 cores, about 8% of the CPU samples were candle's
//! threads waiting (BENCHMARKS.md, *Page faults and spinning threads*). With one candle
//! thread its element-wise ops run on the calling thread, with no pool to wait for.

/// Sets `CANDLE_NUM_THREADS=1` unless the user set it (then their choice stands). Returns the
/// value in force.
///
/// # Safety
/// Sets an environment variable: call it at the start of `main`, before any other thread
/// exists and before the first candle op (candle reads the variable once).
pub unsafe fn single_candle_pool() -> String {
    const VAR: &str = "CANDLE_NUM_THREADS";
    match std::env::var(VAR) {
        Ok(v) => v,
        Err(_) => {
            // SAFETY: the caller guarantees no other thread exists yet.
            unsafe { std::env::set_var(VAR, "1") };
            "1".into()
        }
    }
}
