//! # dojo-bench: the benchmark programs of every stage, in one place
//!
//! Each stage's figures in `benchmarks/results/<area>.md` come from one program here, run next
//! to a named baseline in the same process (the reproduce command heads each results file). The
//! programs are examples of this crate (`cargo run --release -p dojo-bench --example NAME`);
//! their inputs live in `fixtures/` and the scripts that install a baseline's tools and then run
//! a program are in the repository's `scripts/bench-*.sh`.
//!
//! | program | stage | results |
//! |---|---|---|
//! | `sandbox_bench` | sandbox create / command overhead / `dojo sandbox run` vs `git clone --shared` | `sandbox.md` |
//! | `grade_bench`, `grade_profile` | grading vs the bare test command | `grade.md` |
//! | `agent_bench`, `vs_mini_swe_agent` | agent runtime vs mini-swe-agent | `agent.md` |
//! | `rollout_overhead` | the rollout scheduler with many concurrent rollouts | `rollout.md` |
//! | `engine_bench` (feature `engine`) | the embedded engine vs llama.cpp | `engine.md` |
//! | `lsp_bench` | `lsp_tool` latency, memory, accuracy vs grep | `lsp.md` |
//! | `curate_bench` | curation throughput vs plain Python | `curate.md` |
//!
//! This library holds what the programs share: argument lookup, medians, process CPU time, the
//! host line printed above tables, and paths to the repository's task set and fixtures. The
//! benchmarks use only the public (or `#[doc(hidden)]` testing) surface of the crates they
//! measure. Not published; the engine program needs the `engine` feature (default), so
//! `--no-default-features` builds the others without candle.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The value after `--name` on the command line, if any.
pub fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// The median (the upper one for an even count); NaN for no samples.
pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
}

/// CPU time of this process (all threads; child processes excluded).
pub fn cpu_time() -> Duration {
    // SAFETY: an all-zero rusage is a valid value, and getrusage only fills the struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU time of this process's waited-for children and their waited-for descendants (user +
/// system): take the difference around a child's run to get what the child cost.
pub fn children_cpu_time() -> Duration {
    // SAFETY: as in `cpu_time`.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// "host: N cores, load average …": printed above every table (the machine is shared).
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

/// The repository's root (this crate is `crates/dojo-bench`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A file under this crate's `fixtures/`.
pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(rel)
}

/// The bundled task set, `tasksets/mini/tasks.jsonl`.
pub fn mini_tasks() -> PathBuf {
    repo_root().join("tasksets/mini/tasks.jsonl")
}

/// The bundled tasks, the registry, and the `--instance` task (default iniconfig-1) with its
/// environment: what the grading programs measure.
pub type Bundled = (
    Vec<dojo_task::Task>,
    dojo_task::EnvRegistry,
    dojo_task::Task,
    dojo_task::RepoEnv,
);

/// Load [`Bundled`] from the bundled task set.
pub fn bundled() -> Result<Bundled, Box<dyn std::error::Error>> {
    let path = mini_tasks();
    let tasks = dojo_task::load_tasks(&path)?;
    let reg = dojo_task::EnvRegistry::embedded()?;
    let id = arg("--instance").unwrap_or_else(|| "pytest-dev__iniconfig-1".into());
    let task = tasks
        .iter()
        .find(|t| t.instance_id == id)
        .ok_or_else(|| format!("no instance {id} in {}", path.display()))?
        .clone();
    let env = reg.resolve(&task)?;
    Ok((tasks, reg, task, env))
}
