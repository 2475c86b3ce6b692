//! `dojo select` (dojo-select): one prediction per task from k graded candidates, with the
//! selectors × k table, the pass@k / best@k and turn-budget curves.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use dojo_rollout::policy::PolicyConfig;
use dojo_select::hybrid::{DEFAULT_L2, Hybrid, HybridWeights};
use dojo_select::selector::SharedSelector;
use dojo_select::verifier::{JudgeLimits, Judgement, Precomputed, judge_all};
use dojo_select::{CandidateSet, LoadOptions, SelectOptions, SelectorKind};
use dojo_task::{EnvRegistry, PrepareOptions, Preparer, Task};

#[derive(clap::Args)]
pub struct SelectArgs {
    /// `dojo rollout` run directories (repeat to pool runs over the same task file).
    #[arg(long, num_args = 1.., required_unless_present = "predictions", conflicts_with = "predictions")]
    pub rollouts: Vec<PathBuf>,
    /// SWE-bench predictions files, one per sample (file i is every task's sample i), graded
    /// here as `dojo eval` grades them (into OUT/graded/, resumable); needs --tasks.
    #[arg(long, num_args = 1.., requires = "tasks")]
    pub predictions: Vec<PathBuf>,
    /// The task file: for --predictions, and for the tests selector's sandboxes (default: the
    /// task file the first run directory's run.json names).
    #[arg(long)]
    pub tasks: Option<PathBuf>,
    /// Extra environment specs (`*.toml`), overriding the embedded `envs/`.
    #[arg(long)]
    pub envs: Option<PathBuf>,
    /// Local repositories of git-based tasks (`owner__name` or `name`).
    #[arg(long)]
    pub repos: Option<PathBuf>,
    /// Concurrent sandboxes when grading --predictions.
    #[arg(long, default_value_t = 1, value_parser = crate::args::positive::<usize>())]
    pub workers: usize,
    /// `oracle` (pass@k, reference only), `random`, `majority`, `verifier` (needs --verifier),
    /// `tests` (the agents' tests run on every candidate, in sandboxes), `hybrid` (a logistic
    /// combination of majority, tests and, with --verifier, the verifier), a comma-separated
    /// list, or `all`.
    #[arg(long, default_value = "majority")]
    pub selector: String,
    /// Weights for the hybrid selector (a `hybrid.json` of an earlier selection). Without them
    /// the weights are fitted on this selection's candidates, each task scored with weights
    /// fitted on the other tasks; the fit on all tasks is written to OUT/hybrid.json.
    #[arg(long)]
    pub hybrid_weights: Option<PathBuf>,
    /// The verifier's judge model: `openai:MODEL` (an endpoint that returns top_logprobs),
    /// `embedded[:MODEL]`, or a policy file of those kinds.
    #[arg(long)]
    pub verifier: Option<String>,
    /// SWE-World's reward model for the swr selector: `openai:MODEL` (an SWR model server),
    /// `embedded[:MODEL]`, or a policy file of those kinds.
    #[arg(long)]
    pub swr: Option<String>,
    /// SWR samples averaged per candidate (SWE-World: 3).
    #[arg(long, default_value_t = 3, value_parser = crate::args::positive::<u32>())]
    pub swr_samples: u32,
    /// Verifier (and SWR) requests in flight at once.
    #[arg(long, default_value_t = 4)]
    pub verifier_concurrency: usize,
    /// Candidates per task to select among (default: the most any task has).
    #[arg(short, long, value_parser = crate::args::positive::<usize>())]
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

/// The task file's tasks with what preparing their sandboxes needs.
struct TaskContext {
    tasks: Vec<Task>,
    registry: EnvRegistry,
    preparer: Preparer,
}

fn task_context(a: &SelectArgs) -> anyhow::Result<TaskContext> {
    let path = match &a.tasks {
        Some(p) => p.clone(),
        None => {
            let dir = a.rollouts.first().context("no run directory given")?;
            PathBuf::from(dojo_select::candidates::tasks_file_of(dir)?)
        }
    };
    let tasks = dojo_task::load_tasks(&path).with_context(|| {
        format!(
            "loading the task file {} (pass --tasks if the run's task file moved)",
            path.display()
        )
    })?;
    Ok(TaskContext {
        tasks,
        registry: EnvRegistry::with_dir(a.envs.as_deref())?,
        preparer: Preparer::new(PrepareOptions {
            repos_dir: a.repos.clone(),
        }),
    })
}

fn load_candidates(a: &SelectArgs, ctx: Option<&TaskContext>) -> anyhow::Result<CandidateSet> {
    if a.predictions.is_empty() {
        return Ok(dojo_select::candidates::load_runs(
            &a.rollouts,
            LoadOptions {
                allow_partial: a.partial,
            },
        )?);
    }
    let ctx = ctx.context("--predictions needs --tasks")?;
    let opts = dojo_grade::batch::BatchOptions {
        workers: a.workers,
        progress: false,
        ..Default::default()
    };
    let graded = a.out.join("graded");
    let started = std::time::Instant::now();
    let set = crate::cmd::runtime()?.block_on(dojo_select::candidates::load_predictions(
        &a.predictions,
        &ctx.tasks,
        &ctx.registry,
        &ctx.preparer,
        &opts,
        &graded,
    ))?;
    eprintln!(
        "graded {} predictions file(s) into {} in {:.1} s",
        a.predictions.len(),
        graded.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(set)
}

pub fn run(a: SelectArgs) -> anyhow::Result<i32> {
    let kinds = SelectorKind::parse_list(&a.selector)?;
    if a.k == Some(0) {
        anyhow::bail!("-k must be at least 1");
    }
    let all = a.selector.split(',').any(|s| s.trim() == "all");
    let wants_tests = kinds.contains(&SelectorKind::Tests) || kinds.contains(&SelectorKind::Hybrid);
    let wants_swr = a.swr.is_some()
        && (kinds.contains(&SelectorKind::Swr) || kinds.contains(&SelectorKind::Hybrid));
    let ctx = if !a.predictions.is_empty() || wants_tests || wants_swr {
        Some(task_context(&a)?)
    } else {
        None
    };
    let set = load_candidates(&a, ctx.as_ref())?;
    let k = a.k.unwrap_or_else(|| set.max_k()).max(1); // a set with no candidates: 1
    let mut notes = Vec::new();
    // Seconds spent scoring beforehand, by selector (a hybrid's: its components').
    let mut precompute: HashMap<String, f64> = HashMap::new();
    let mut note = |n: String| {
        eprintln!("{n}");
        notes.push(n);
    };
    let verifier_sel = match &a.verifier {
        Some(spec)
            if kinds.contains(&SelectorKind::Verifier) || kinds.contains(&SelectorKind::Hybrid) =>
        {
            let started = std::time::Instant::now();
            let (s, n) = verifier(spec, &set, a.verifier_concurrency)?;
            precompute.insert("verifier".into(), started.elapsed().as_secs_f64());
            note(n);
            Some(s)
        }
        Some(_) => None,
        None if kinds.contains(&SelectorKind::Verifier) && !all => bail!(
            "the verifier selector needs a judge model: --verifier openai:MODEL | embedded[:MODEL] | POLICY_FILE"
        ),
        None => {
            if kinds.contains(&SelectorKind::Verifier) {
                note("verifier: not run (no --verifier given)".to_string());
            }
            None
        }
    };
    let swr_sel = match (&a.swr, &ctx) {
        (Some(spec), Some(ctx)) if wants_swr => {
            let started = std::time::Instant::now();
            let (s, n) = swr(spec, ctx, &set, a.swr_samples, a.verifier_concurrency)?;
            precompute.insert("swr".into(), started.elapsed().as_secs_f64());
            note(n);
            Some(s)
        }
        (None, _) if kinds.contains(&SelectorKind::Swr) && !all => bail!(
            "the swr selector needs SWE-World's reward model: --swr openai:MODEL | embedded[:MODEL] | POLICY_FILE"
        ),
        (None, _) if kinds.contains(&SelectorKind::Swr) => {
            note("swr: not run (no --swr given)".to_string());
            None
        }
        _ => None,
    };
    let tests_sel: Option<SharedSelector> = match (&ctx, wants_tests) {
        (Some(ctx), true) => {
            let started = std::time::Instant::now();
            let s = run_tests(ctx, &set, k)?;
            precompute.insert("tests".into(), started.elapsed().as_secs_f64());
            note(s.1);
            Some(s.0)
        }
        _ => None,
    };
    let majority = SelectorKind::Majority
        .build()
        .context("majority needs nothing computed")?;
    let mut selectors: Vec<SharedSelector> = Vec::new();
    for kind in kinds {
        let s = match kind {
            SelectorKind::Verifier => verifier_sel.clone(),
            SelectorKind::Swr => swr_sel.clone(),
            SelectorKind::Tests => tests_sel.clone(),
            SelectorKind::Hybrid => {
                let mut components = vec![majority.clone()];
                components.extend(tests_sel.clone());
                components.extend(verifier_sel.clone());
                components.extend(swr_sel.clone());
                let parts: f64 = components
                    .iter()
                    .filter_map(|c| precompute.get(c.name()))
                    .sum();
                let started = std::time::Instant::now();
                let (h, n) = hybrid(&a, components, &set, k)?;
                precompute.insert("hybrid".into(), parts + started.elapsed().as_secs_f64());
                note(n);
                Some(h)
            }
            _ if kind == SelectorKind::Majority => Some(majority.clone()),
            _ => kind.build(),
        };
        selectors.extend(s);
    }
    let out = dojo_select::select(
        &set,
        &SelectOptions {
            selectors,
            notes,
            precompute_seconds: precompute,
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
        "{:<12} {:>24} {:>11} {:>14}",
        "selector",
        format!("resolved@{}", out.k),
        "gap closed",
        "s / task"
    );
    println!(
        "{:<12} {:>24} {:>11} {:>14}",
        "pass@k",
        at(&out.pass_at_k),
        "100%",
        "–"
    );
    for s in &out.selectors {
        println!(
            "{:<12} {:>24} {:>11} {:>14}",
            s.name,
            at(&s.best_at_k),
            s.gap_closed
                .map_or("–".to_string(), |g| format!("{:.0}%", 100.0 * g)),
            format!("{:.3}", s.precompute_seconds_per_task + s.seconds_per_task)
        );
    }
    if let Some(last) = out.sequential.points.last() {
        println!(
            "by turn budget: pass@1 {:.1}% at {} steps (see report.html)",
            100.0 * last.pass_at_1.mean,
            last.budget
        );
    }
    println!("wrote {} in {}", out.files.join(", "), a.out.display());
    Ok(0)
}

/// Runs the agents' tests on every candidate; the selector and a line on how it went.
fn run_tests(
    ctx: &TaskContext,
    set: &CandidateSet,
    k: usize,
) -> anyhow::Result<(SharedSelector, String)> {
    let tasks: HashMap<String, (Task, Result<dojo_task::RepoEnv, String>)> =
        ctx.tasks
            .iter()
            .map(|t| {
                // Agent-written tests run in the task's real environment; a task with none (a
                // simulated-only task) is a failure that says so.
                let env = ctx.registry.resolve(t).map_err(|e| {
                    format!("the tests selector needs the task's real environment: {e}")
                });
                (t.instance_id.clone(), (t.clone(), env))
            })
            .collect();
    let (sel, stats) = crate::cmd::runtime()?.block_on(dojo_select::agent_tests::run_agent_tests(
        set,
        k,
        &tasks,
        &ctx.preparer,
        &dojo_sandbox::SandboxOptions::default(),
    ));
    let mut n = format!(
        "tests: {} agent-written test(s) in {} of {} tasks, {} runs ({} passed), {} infrastructure failure(s); {:.1} s ({:.2} s per task)",
        stats.tests,
        stats.tasks_with_tests,
        set.tasks.len(),
        stats.runs,
        stats.passed,
        stats.infra_failures,
        stats.seconds,
        stats.seconds / set.tasks.len().max(1) as f64
    );
    if let Some(f) = &stats.first_failure {
        n.push_str(&format!(" (first: {f})"));
    }
    Ok((Arc::new(sel), n))
}

/// The hybrid selector: saved weights, or weights fitted here (saved to OUT/hybrid.json).
fn hybrid(
    a: &SelectArgs,
    components: Vec<SharedSelector>,
    set: &CandidateSet,
    k: usize,
) -> anyhow::Result<(SharedSelector, String)> {
    let describe = |w: &HybridWeights| {
        w.features
            .iter()
            .zip(&w.weights)
            .map(|(f, w)| format!("{f} {w:+.3}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(path) = &a.hybrid_weights {
        let w = HybridWeights::load(path)?;
        let n = format!(
            "hybrid: weights from {} ({}, bias {:+.3}; fitted on {} candidates of {} tasks)",
            path.display(),
            describe(&w),
            w.bias,
            w.candidates,
            w.tasks
        );
        let h = Hybrid::with_weights(components, w)
            .map_err(|e| anyhow::anyhow!("--hybrid-weights {}: {e}", path.display()))?;
        return Ok((Arc::new(h), n));
    }
    let tasks: Vec<dojo_select::TaskCandidates> = set
        .tasks
        .iter()
        .map(|t| dojo_select::TaskCandidates {
            task_id: t.task_id.clone(),
            candidates: t.candidates.iter().take(k).cloned().collect(),
        })
        .collect();
    let h = Hybrid::cross_fitted(components, &tasks, DEFAULT_L2);
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let path = a.out.join("hybrid.json");
    h.weights().save(&path)?;
    let n = format!(
        "hybrid: logistic weights fitted on this selection's {} graded candidates ({} resolved), each task scored with weights fitted on the other tasks; on all tasks: {}, bias {:+.3} (saved to {}, reload with --hybrid-weights)",
        h.weights().candidates,
        h.weights().positives,
        describe(h.weights()),
        h.weights().bias,
        path.display()
    );
    Ok((Arc::new(h), n))
}

/// Scores every candidate with SWE-World's reward model; the selector and a line on how it went.
fn swr(
    spec: &str,
    ctx: &TaskContext,
    set: &CandidateSet,
    samples: u32,
    concurrency: usize,
) -> anyhow::Result<(SharedSelector, String)> {
    let policy = PolicyConfig::parse(spec).with_context(|| format!("--swr {spec}"))?;
    // SWR needs only the test command: a task without an environment spec (a simulated-only
    // task) gets the simulation's defaults, as in `dojo rollout --env-mode sim`; a spec that
    // fails to resolve keeps the reason.
    let tasks: HashMap<String, Result<dojo_select::swr::SwrTask, String>> = ctx
        .tasks
        .iter()
        .map(|t| {
            let task = dojo_rollout::world_sim::repo_env_or_default(&ctx.registry, t)
                .map(|env| dojo_select::swr::SwrTask {
                    problem_statement: t.problem_statement.clone(),
                    test_command: env.test_command(t),
                    fail_to_pass: t.f2p().to_vec(),
                    pass_to_pass: t.p2p().to_vec(),
                })
                .map_err(|e| format!("environment: {e}"));
            (t.instance_id.clone(), task)
        })
        .collect();
    let rt = crate::cmd::runtime()?;
    let started = std::time::Instant::now();
    let (sel, stats) = rt.block_on(async {
        let model = dojo_rollout::embedded::policy_backends(&policy).await?;
        let backend = model.for_sample(0);
        let client = Arc::new(dojo_world::WorldClient::new(
            backend.clone(),
            backend,
            dojo_world::WorldClientConfig::default(),
        ));
        anyhow::Ok(dojo_select::swr::score_all(client, set, &tasks, samples, concurrency).await)
    })?;
    let secs = started.elapsed().as_secs_f64();
    let mut n = format!(
        "swr {}: {} candidates scored ({samples} samples each, {} samples failed), {} empty patches at 0 without a call, {} failed; {secs:.1} s ({:.2} s per candidate, model load included)",
        policy.label(),
        stats.scored,
        stats.failed_samples,
        stats.empty,
        stats.failed,
        secs / set.candidates().max(1) as f64
    );
    if let Some(f) = &stats.first_failure {
        n.push_str(&format!(" (first failure: {f})"));
    }
    Ok((Arc::new(sel), n))
}

/// Judges every candidate with the verifier model; the selector and a line on how it went.
fn verifier(
    spec: &str,
    set: &dojo_select::CandidateSet,
    concurrency: usize,
) -> anyhow::Result<(SharedSelector, String)> {
    let policy = PolicyConfig::parse(spec).with_context(|| format!("--verifier {spec}"))?;
    let rt = crate::cmd::runtime()?;
    let started = std::time::Instant::now();
    let judgements = rt.block_on(async {
        let model = dojo_rollout::embedded::policy_backends(&policy).await?;
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
        Arc::new(Precomputed::from_judgements("verifier", &judgements)),
        note,
    ))
}
