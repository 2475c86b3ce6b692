//! `dojo validate` (dojo-grade): is each task runnable (its test patch alone fails
//! FAIL_TO_PASS, the gold patch makes it pass)? With `--write`, fills in the lists of new tasks.

use crate::exit::Exit;
use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::Context;
use dojo_grade::diagnose;

use super::runtime;
use super::task_set::{CommonArgs, load};

#[derive(clap::Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Fill in FAIL_TO_PASS / PASS_TO_PASS of new tasks (none, or empty) that validate: tests
    /// failing with the test patch alone and passing with the gold patch, and tests passing
    /// both times. JSONL task files only; only those two values change, in place.
    #[arg(long)]
    write: bool,
    /// Write each task's problems, and each run's report and log, under this directory (by
    /// default only the tasks that do not validate are written, under a temporary directory).
    /// The tasks it already holds a validation of are kept: a stopped run resumes.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Validate again the tasks that `--out` already holds a validation of (by default they are
    /// kept and the run resumes; one that ended at the infrastructure is always validated again).
    #[arg(long)]
    force: bool,
}

pub fn run(args: ValidateArgs) -> anyhow::Result<Exit> {
    let l = load(&args.common)?;
    let started = std::time::Instant::now();
    // With --out, each task's files are written as soon as it is validated: a run stopped
    // halfway (killed, out of time) keeps every task it finished. The table comes at the end.
    let logs = diagnose::ValidationLogs::new(args.out.as_deref());
    let written_early = |v: &dojo_grade::Validation| {
        if let Err(e) = logs.write_early(v) {
            let dir = logs.dir(v);
            eprintln!("writing {}: {e} (retried at the end)", dir.display());
        }
    };
    let kept: HashMap<String, dojo_grade::Validation> = l
        .tasks
        .iter()
        .filter(|_| !args.force)
        .filter_map(|t| Some((t.instance_id.clone(), logs.kept(&t.instance_id)?)))
        .collect();
    if let (Some(out), false) = (&args.out, kept.is_empty()) {
        println!(
            "resuming: {} of {} task(s) already validated in {} (kept; --force validates them again)",
            kept.len(),
            l.tasks.len(),
            out.display()
        );
    }
    let results = runtime()?.block_on(l.validate(&kept, &written_early));
    let elapsed = started.elapsed();
    let ok = results.iter().filter(|v| v.ok).count();
    println!("{}", diagnose::validate_header());
    for v in &results {
        let row = logs.row(v);
        println!(
            "{}",
            row.with_context(|| format!("writing {}", logs.dir(v).display()))?
        );
    }
    let line = diagnose::runnable_line(ok, results.len(), elapsed, l.opts.workers);
    println!("{line}");
    if args.write {
        let written = diagnose::write_lists(&args.common.tasks, &l.tasks, &results)?;
        println!("{written}");
    }
    Ok(Exit::failure_if(ok != results.len()))
}
