//! `dojo validate` (dojo-grade): is each task runnable (its test patch alone fails
//! FAIL_TO_PASS, the gold patch makes it pass)? With `--write`, fills in the lists of new tasks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use dojo_grade::{batch, diagnose};
use dojo_task::{Preparer, Task};

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
            let env = l.registry.resolve(&t).map_err(|e| e.to_string());
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
        let n = write_lists(&args.common.tasks, &l.tasks, &results)?;
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

/// Rewrite a JSONL task file, filling in the derived lists of new tasks (no FAIL_TO_PASS yet)
/// that validated cleanly; every other line is kept byte for byte, in its place. Tasks that
/// are not runnable are left as they are (the table above says why). The new file is written
/// beside the old one and renamed over it, so a crash leaves one or the other, never half.
fn write_lists(
    path: &Path,
    tasks: &[Task],
    results: &[(usize, dojo_grade::Validation)],
) -> anyhow::Result<usize> {
    if path.extension().is_none_or(|e| e != "jsonl") {
        bail!("--write needs a .jsonl task file, not {}", path.display());
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let rows: Vec<Option<serde_json::Map<String, serde_json::Value>>> = text
        .split_inclusive('\n')
        .map(|line| serde_json::from_str(line).ok())
        .collect();
    // Lists a row lacks are written in the file's own style: JSON arrays, unless the file's
    // other rows store them as JSON strings (as SWE-bench's datasets do).
    let (arrays, strings) =
        rows.iter()
            .flatten()
            .fold((0, 0), |(a, s), r| match r.get("FAIL_TO_PASS") {
                Some(serde_json::Value::Array(_)) => (a + 1, s),
                Some(serde_json::Value::String(_)) => (a, s + 1),
                _ => (a, s),
            });
    let default_array = arrays >= strings;
    let mut fill: BTreeMap<&str, (&Task, &dojo_grade::Validation)> = BTreeMap::new();
    for (i, v) in results {
        let t = &tasks[*i];
        if v.ok && v.new_task {
            fill.insert(t.instance_id.as_str(), (t, v));
        }
    }
    if fill.is_empty() {
        return Ok(0);
    }
    let mut out = String::with_capacity(text.len());
    let mut n = 0;
    for (line, row) in text.split_inclusive('\n').zip(&rows) {
        let id = row
            .as_ref()
            .and_then(|r| r.get("instance_id"))
            .and_then(|x| x.as_str());
        let Some((t, v)) = id.and_then(|id| fill.remove(id)) else {
            out.push_str(line);
            continue;
        };
        let (f2p, p2p) = (&v.derived_fail_to_pass, &v.derived_pass_to_pass);
        let body = line.strip_suffix('\n').unwrap_or(line);
        // The lists replaced in place, every other byte kept; a line the splicer does not
        // understand is re-serialised instead (same fields and order, our JSON style).
        let new = match dojo_task::splice_lists(
            body,
            &[("FAIL_TO_PASS", f2p), ("PASS_TO_PASS", p2p)],
            default_array,
        ) {
            Some(s) => s,
            None => serde_json::to_string(&t.row_with_lists(f2p, p2p, default_array))?,
        };
        out.push_str(&new);
        out.push('\n');
        n += 1;
    }
    dojo_rundir::write_atomic(path, out.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(n)
}
