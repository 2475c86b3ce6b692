//! `dojo select` (dojo-select): one prediction per task from k graded candidates, with the
//! pass@k / best@k table and curves.

use std::path::PathBuf;

use anyhow::Context;
use dojo_select::{LoadOptions, SelectOptions, SelectorKind};

#[derive(clap::Args)]
pub struct SelectArgs {
    /// `dojo rollout` run directories (repeat to pool runs over the same task file).
    #[arg(long, required = true, num_args = 1..)]
    pub rollouts: Vec<PathBuf>,
    /// `oracle` (pass@k, reference only), `random`, `majority`, a comma-separated list, or `all`.
    #[arg(long, default_value = "majority")]
    pub selector: String,
    /// Candidates per task to select among (default: the most any task has).
    #[arg(short, long)]
    pub k: Option<usize>,
    /// Seed of tie-breaks and bootstrap intervals.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Select on run directories still being written or interrupted (the output says so).
    #[arg(long)]
    pub partial: bool,
    /// Output directory: predictions.jsonl, selection.json, report.html.
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run(a: SelectArgs) -> anyhow::Result<i32> {
    let selectors = SelectorKind::parse_list(&a.selector)?;
    let set = dojo_select::candidates::load_runs(
        &a.rollouts,
        LoadOptions {
            allow_partial: a.partial,
        },
    )?;
    if a.k == Some(0) {
        anyhow::bail!("-k must be at least 1");
    }
    let out = dojo_select::select(
        &set,
        &SelectOptions {
            selectors,
            k: a.k,
            seed: a.seed,
            out: a.out.clone(),
        },
    )
    .with_context(|| format!("selecting into {}", a.out.display()))?;
    if out.partial {
        eprintln!(
            "warning: partial view: a run directory is still being written or was interrupted"
        );
    }
    for p in &out.problems {
        eprintln!("warning: {p}");
    }
    println!(
        "{} tasks, {} candidates (k = {}; {} infrastructure failures left out, {} ungraded)",
        out.tasks,
        set.candidates(),
        out.k,
        out.infra_left_out,
        out.ungraded
    );
    if !out.tasks_short.is_empty() {
        println!(
            "{} task(s) have fewer than {} candidates (see selection.json: tasks_short)",
            out.tasks_short.len(),
            out.k
        );
    }
    let at = |c: &[dojo_select::run::CurvePoint]| {
        c.last().map_or(String::new(), |p| {
            format!(
                "{:.1}% [{:.1}, {:.1}]",
                100.0 * p.estimate.mean,
                100.0 * p.estimate.low,
                100.0 * p.estimate.high
            )
        })
    };
    println!(
        "{:<12} {:>24} {:>11}",
        "selector",
        format!("resolved@{}", out.k),
        "gap closed"
    );
    println!("{:<12} {:>24} {:>11}", "pass@k", at(&out.pass_at_k), "100%");
    for s in &out.selectors {
        println!(
            "{:<12} {:>24} {:>11}",
            s.name,
            at(&s.best_at_k),
            s.gap_closed
                .map_or("–".to_string(), |g| format!("{:.0}%", 100.0 * g))
        );
    }
    println!("wrote {} in {}", out.files.join(", "), a.out.display());
    Ok(0)
}
