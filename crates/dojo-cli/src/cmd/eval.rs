//! `dojo eval` (dojo-grade): grade SWE-bench predictions against a task file, resumably, and
//! write the official per-instance and run reports.

use crate::exit::Exit;
use std::path::PathBuf;

use anyhow::Context;
use dojo_grade::RunSummary;
use dojo_grade::batch;

use super::runtime;
use super::task_set::{CommonArgs, load};

#[derive(clap::Args)]
pub struct EvalArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// SWE-bench predictions (`instance_id`, `model_name_or_path`, `model_patch`), JSONL.
    #[arg(long)]
    predictions: PathBuf,
    /// Output directory: `<id>/report.json`, `<id>/test_output.txt`, `report.json`.
    #[arg(long)]
    out: PathBuf,
    /// Re-grade instances that already have a report.
    #[arg(long)]
    force: bool,
    /// Grade a patch that changes conftest.py, pytest's configuration or interpreter startup
    /// files instead of grading it unresolved (such a patch can fake its results; the touch is
    /// recorded in report.json either way).
    #[arg(long)]
    allow_test_infrastructure: bool,
}

pub fn run(args: EvalArgs) -> anyhow::Result<Exit> {
    let mut l = load(&args.common)?;
    l.opts.force = args.force;
    l.opts.grade.allow_test_infrastructure = args.allow_test_infrastructure;
    let (preds, malformed) = dojo_grade::read_predictions(&args.predictions)
        .with_context(|| format!("reading predictions {}", args.predictions.display()))?;
    let warnings = dojo_grade::predictions::input_warnings(
        &args.predictions,
        &preds,
        &malformed,
        &l.all_ids,
        &args.common.tasks,
    );
    for w in warnings {
        eprintln!("{w}");
    }
    let jobs = batch::jobs_for(&l.tasks, &l.registry, &preds);
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    if let Some(line) = batch::resume_line(&jobs, &args.out).filter(|_| !args.force) {
        println!("{line}");
    }
    let reports = runtime()?.block_on(l.eval(jobs, &args.out));
    let mut summary = RunSummary::build(
        l.tasks.iter().map(|t| t.instance_id.as_str()),
        preds.iter().map(|p| p.instance_id.as_str()),
        reports.iter(),
        l.opts.grade.semantics,
    );
    summary.malformed_prediction_lines = malformed;
    let path = args.out.join("report.json");
    summary
        .write(&path)
        .with_context(|| format!("writing {}", path.display()))?;
    println!("{}", summary.report_lines(&path));
    if reports.is_empty() {
        // Every prediction was malformed, unknown or not selected: a run that graded nothing
        // is an input error, not a result.
        let (file, tasks) = (&args.predictions, &args.common.tasks);
        eprintln!("{}", summary.nothing_graded(preds.len(), file, tasks));
        return Ok(Exit::Failure);
    }
    // Unresolved predictions are the run's result; infrastructure failures leave it incomplete.
    Ok(Exit::infrastructure_if(summary.infra_failure_instances > 0))
}
