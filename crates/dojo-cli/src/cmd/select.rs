//! `dojo select` (dojo-select): one prediction per task from k graded candidates, with the
//! pass@k / best@k table and curves.

use std::path::PathBuf;

use anyhow::{Context, bail};
use dojo_rollout::policy::PolicyConfig;
use dojo_select::verifier::{JudgeLimits, Judgement, Precomputed, judge_all};
use dojo_select::{LoadOptions, SelectOptions, Selector, SelectorKind};

#[derive(clap::Args)]
pub struct SelectArgs {
    /// `dojo rollout` run directories (repeat to pool runs over the same task file).
    #[arg(long, required = true, num_args = 1..)]
    pub rollouts: Vec<PathBuf>,
    /// `oracle` (pass@k, reference only), `random`, `majority`, `verifier` (needs --verifier),
    /// a comma-separated list, or `all`.
    #[arg(long, default_value = "majority")]
    pub selector: String,
    /// The verifier's judge model: `openai:MODEL` (an endpoint that returns top_logprobs),
    /// `embedded[:MODEL]`, or a policy file of those kinds.
    #[arg(long)]
    pub verifier: Option<String>,
    /// Verifier requests in flight at once.
    #[arg(long, default_value_t = 4)]
    pub verifier_concurrency: usize,
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
    let kinds = SelectorKind::parse_list(&a.selector)?;
    let set = dojo_select::candidates::load_runs(
        &a.rollouts,
        LoadOptions {
            allow_partial: a.partial,
        },
    )?;
    if a.k == Some(0) {
        anyhow::bail!("-k must be at least 1");
    }
    let mut selectors: Vec<Box<dyn Selector>> = Vec::new();
    let mut notes = Vec::new();
    for kind in kinds {
        if let Some(s) = kind.build() {
            selectors.push(s);
            continue;
        }
        match &a.verifier {
            Some(spec) => {
                let (s, note) = verifier(spec, &set, a.verifier_concurrency)?;
                eprintln!("{note}");
                notes.push(note);
                selectors.push(s);
            }
            None if a.selector.split(',').any(|s| s.trim() == "all") => {
                notes.push("verifier: not run (no --verifier given)".to_string());
            }
            None => bail!(
                "the verifier selector needs a judge model: --verifier openai:MODEL | embedded[:MODEL] | POLICY_FILE"
            ),
        }
    }
    let out = dojo_select::select(
        &set,
        &SelectOptions {
            selectors,
            notes,
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

/// Judges every candidate with the verifier model; the selector and a line on how it went.
fn verifier(
    spec: &str,
    set: &dojo_select::CandidateSet,
    concurrency: usize,
) -> anyhow::Result<(Box<dyn Selector>, String)> {
    let policy = PolicyConfig::parse(spec).with_context(|| format!("--verifier {spec}"))?;
    let rt = crate::cmd::rollout::runtime()?;
    let started = std::time::Instant::now();
    let judgements = rt.block_on(async {
        let embedded = match &policy.kind {
            dojo_rollout::policy::PolicyKind::Embedded { model } => {
                let m = model.clone();
                tokio::task::spawn_blocking(move || crate::cmd::rollout::embedded_backend(&m))
                    .await??
            }
            _ => None,
        };
        let model = dojo_rollout::run_dir::model_backends(&policy, embedded)?;
        anyhow::Ok(
            judge_all(
                model.for_sample(0),
                set,
                JudgeLimits::default(),
                concurrency,
            )
            .await?,
        )
    })?;
    let scored = judgements
        .values()
        .filter(|j| matches!(j, Judgement::Scored { .. }))
        .count();
    let bound = judgements
        .values()
        .filter(|j| matches!(j, Judgement::Scored { bound: true, .. }))
        .count();
    let failed: Vec<&String> = judgements
        .values()
        .filter_map(|j| match j {
            Judgement::Failed(e) => Some(e),
            Judgement::Scored { .. } => None,
        })
        .collect();
    let secs = started.elapsed().as_secs_f64();
    let mut note = format!(
        "verifier {}: {scored} of {} candidates scored ({bound} with one answer only bounded), {} failed; {secs:.1} s ({:.2} s per candidate, model load included)",
        policy.label(),
        judgements.len(),
        failed.len(),
        secs / judgements.len().max(1) as f64
    );
    if let Some(first) = failed.first() {
        note.push_str(&format!(" (first: {first})"));
    }
    Ok((
        Box::new(Precomputed::from_judgements("verifier", &judgements)),
        note,
    ))
}
