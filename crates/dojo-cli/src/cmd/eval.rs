//! `dojo eval` (dojo-grade): grade SWE-bench predictions against a task file, resumably, and
//! write the official per-instance and run reports.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use dojo_grade::batch::{self, EvalJob};
use dojo_grade::{Prediction, RunSummary};
use dojo_task::Preparer;

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

pub fn run(args: EvalArgs) -> anyhow::Result<i32> {
    let mut l = load(&args.common)?;
    l.opts.force = args.force;
    l.opts.grade.allow_test_infrastructure = args.allow_test_infrastructure;
    let (preds, malformed) = dojo_grade::read_predictions(&args.predictions)
        .with_context(|| format!("reading predictions {}", args.predictions.display()))?;
    for m in &malformed {
        eprintln!(
            "{}: line {}: {}",
            args.predictions.display(),
            m.line,
            m.reason
        );
    }
    // A prediction for an instance the task file does not have is named here, not only in
    // report.json: it is a wrong file or a wrong id, and nothing of it gets graded.
    for p in preds.iter().filter(|p| !l.all_ids.contains(&p.instance_id)) {
        eprintln!(
            "{}: line {}: instance {} is not in the task file {}",
            args.predictions.display(),
            p.line,
            p.instance_id,
            args.common.tasks.display()
        );
    }
    let by_id: BTreeMap<&str, &Prediction> =
        preds.iter().map(|p| (p.instance_id.as_str(), p)).collect();
    let jobs: Vec<EvalJob> = l
        .tasks
        .iter()
        .filter_map(|t| {
            let p = by_id.get(t.instance_id.as_str())?;
            Some(EvalJob {
                task: t.clone(),
                env: l.registry.resolve(t).map_err(std::sync::Arc::new),
                prediction: (*p).clone(),
            })
        })
        .collect();
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    if !args.force {
        let done = jobs
            .iter()
            .filter(|j| {
                batch::existing_report(&batch::instance_dir(&args.out, &j.prediction.instance_id))
                    .is_some()
            })
            .count();
        if done > 0 {
            println!(
                "resuming: {done} of {} instance(s) already graded in {} (kept; --force regrades them)",
                jobs.len(),
                args.out.display()
            );
        }
    }
    let preparer = Preparer::new(l.preparer_opts.clone());
    let reports = runtime()?.block_on(batch::eval_jobs(jobs, &args.out, &preparer, &l.opts));
    let mut summary = RunSummary::build(
        l.tasks.iter().map(|t| t.instance_id.as_str()),
        preds.iter().map(|p| p.instance_id.as_str()),
        reports.iter(),
        l.opts.grade.semantics,
    );
    summary.malformed_prediction_lines = malformed;
    let path = args.out.join("report.json");
    dojo_rundir::write_atomic(&path, &serde_json::to_vec_pretty(&summary.to_json())?)
        .with_context(|| format!("writing {}", path.display()))?;
    println!(
        "instances: {} submitted, {} resolved, {} unresolved, {} empty patch, {} error ({} infrastructure), {} malformed prediction line(s)",
        summary.submitted_instances,
        summary.resolved_instances,
        summary.unresolved_instances,
        summary.empty_patch_instances,
        summary.error_instances,
        summary.infra_failure_instances,
        summary.malformed_prediction_lines.len()
    );
    for (id, kind) in &summary.error_kinds {
        println!("error: {id}: {}", kind.as_str());
    }
    for id in &summary.test_infrastructure_ids {
        println!("test infrastructure touched by the model patch: {id} (see its report.json)");
    }
    println!("report: {}", path.display());
    if reports.is_empty() {
        // Every prediction was malformed, unknown or not selected: a run that graded nothing
        // is an input error, not a result.
        eprintln!(
            "error: nothing to grade: none of the {} usable prediction(s) in {} names a selected instance of {} ({} malformed line(s))",
            preds.len(),
            args.predictions.display(),
            args.common.tasks.display(),
            summary.malformed_prediction_lines.len()
        );
        return Ok(1);
    }
    Ok(0)
}
