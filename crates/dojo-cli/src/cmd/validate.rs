//! `dojo validate` (dojo-grade): is each task runnable (its test patch alone fails
//! FAIL_TO_PASS, the gold patch makes it pass)? With `--write`, fills in the lists of new tasks.

use std::path::PathBuf;

use anyhow::Context;
use dojo_grade::{batch, diagnose};
use dojo_task::Preparer;

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
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(args: ValidateArgs) -> anyhow::Result<i32> {
    let l = load(&args.common)?;
    let jobs: Vec<_> = l
        .tasks
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, t)| {
            let env = l.registry.resolve(&t);
            (i, t, env)
        })
        .collect();
    let preparer = Preparer::new(l.preparer_opts.clone());
    let started = std::time::Instant::now();
    // With --out, each task's files are written as soon as it is validated: a run stopped
    // halfway (killed, out of time) keeps every task it finished. The table comes at the end.
    let early = std::sync::Mutex::new(std::collections::HashSet::new());
    let written_early = |v: &dojo_grade::Validation| {
        if let Some(out) = &args.out {
            let dir = out.join(&v.instance_id);
            match diagnose::write_validation(&dir, v) {
                Ok(_) => {
                    if let Ok(mut done) = early.lock() {
                        done.insert(v.instance_id.clone());
                    }
                }
                Err(e) => eprintln!("writing {}: {e} (retried at the end)", dir.display()),
            }
        }
    };
    let mut results = runtime()?.block_on(batch::validate_tasks(
        jobs,
        &preparer,
        &l.opts,
        &written_early,
    ));
    results.sort_by_key(|(i, _)| *i);
    let elapsed = started.elapsed();
    let ok = results.iter().filter(|(_, v)| v.ok).count();
    // Full problems and logs: under --out for every task (written above), else under a fresh
    // temporary directory for the tasks that did not validate (the rows point there).
    let log_root = match &args.out {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!(
            "dojo-validate-{}-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            std::process::id()
        )),
    };
    let early = early.into_inner().unwrap_or_default();
    println!("{}", diagnose::validate_header());
    for (_, v) in &results {
        let dir = log_root.join(&v.instance_id);
        let written = if args.out.is_some() && early.contains(&v.instance_id) {
            Some(dir)
        } else if args.out.is_some() || !v.ok {
            Some(
                diagnose::write_validation(&dir, v)
                    .with_context(|| format!("writing {}", dir.display()))?,
            )
        } else {
            None
        };
        println!("{}", diagnose::validate_row(v, written.as_deref()));
    }
    println!(
        "\nrunnable: {ok}/{} ({:.1} s, {:.2} tasks/min, {} worker(s))",
        results.len(),
        elapsed.as_secs_f64(),
        results.len() as f64 / elapsed.as_secs_f64().max(1e-9) * 60.0,
        l.opts.workers
    );
    if args.write {
        let fill: dojo_task::NewLists = results
            .iter()
            .filter(|(_, v)| v.ok && v.new_task)
            .map(|(_, v)| {
                let lists = (&v.derived_fail_to_pass[..], &v.derived_pass_to_pass[..]);
                (v.instance_id.as_str(), lists)
            })
            .collect();
        let n = dojo_task::fill_lists(&args.common.tasks, &l.tasks, fill)?;
        println!(
            "wrote FAIL_TO_PASS / PASS_TO_PASS of {n} task(s) into {}",
            args.common.tasks.display()
        );
        let skipped: Vec<&str> = results
            .iter()
            .filter(|(_, v)| v.new_task && !v.ok)
            .map(|(_, v)| v.instance_id.as_str())
            .collect();
        if !skipped.is_empty() {
            println!(
                "not written (not runnable, see above): {}",
                skipped.join(", ")
            );
        }
    }
    Ok(if ok == results.len() { 0 } else { 1 })
}
