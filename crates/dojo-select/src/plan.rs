//! What `dojo select` does before selecting: load the candidates (run directories, or
//! predictions files graded here), then build the selectors asked for, computing the scores of
//! those that need models or sandboxes (verifier, SWR, the agents' tests, the hybrid over them)
//! and timing each, so the selection's cost can be reported per selector.
//!
//! Execution model: [`plan`] is async and runs on the caller's runtime; the model-scored
//! selectors send up to `verifier_concurrency` requests at once, the tests selector runs its
//! sandboxes one task at a time. Nothing is retried here: a failed judgement or test run is
//! counted in the selector's note and scores as the selector's documented default.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use dojo_rollout::policy::PolicyConfig;
use dojo_task::{EnvRegistry, PrepareOptions, Preparer, Task};

use crate::hybrid::{DEFAULT_L2, Hybrid, HybridWeights};
use crate::selector::SharedSelector;
use crate::verifier::{Judgement, Precomputed, judge_all};
use crate::{CandidateSet, LoadOptions, SelectError, SelectOptions, SelectorKind};
use dojo_reward::judge::JudgeLimits;

/// What `dojo select` was asked (its flags).
#[derive(Debug, Clone, Default)]
pub struct PlanSettings {
    /// `dojo rollout` run directories.
    pub rollouts: Vec<PathBuf>,
    /// SWE-bench predictions files, file i holding every task's sample i (graded here).
    pub predictions: Vec<PathBuf>,
    /// The task file (default: the one the first run directory names).
    pub tasks: Option<PathBuf>,
    pub envs: Option<PathBuf>,
    pub repos: Option<PathBuf>,
    /// Concurrent sandboxes grading the predictions files.
    pub workers: usize,
    /// Selector names, comma-separated, or `all`.
    pub selector: String,
    pub hybrid_weights: Option<PathBuf>,
    /// The verifier's judge model (`openai:MODEL`, `embedded[:MODEL]`, a policy file).
    pub verifier: Option<String>,
    /// SWE-World's reward model, as the verifier.
    pub swr: Option<String>,
    pub swr_samples: u32,
    pub verifier_concurrency: usize,
    pub k: Option<usize>,
    pub seed: u64,
    /// Select on run directories still being written or interrupted.
    pub partial: bool,
    pub out: PathBuf,
}

/// The candidates and the selection's options, selectors built.
pub struct Plan {
    pub set: CandidateSet,
    pub options: SelectOptions,
}

/// The task file's tasks with what preparing their sandboxes needs.
struct TaskContext {
    tasks: Vec<Task>,
    registry: EnvRegistry,
    preparer: Preparer,
}

fn flag(flag: &str, reason: impl std::fmt::Display) -> SelectError {
    SelectError::Settings {
        flag: flag.to_string(),
        reason: reason.to_string(),
    }
}

/// `flag`'s value (`value`, when naming it helps) failed to load: the error stays the cause.
fn flag_from(
    flag: &str,
    value: Option<String>,
    source: impl std::error::Error + Send + Sync + 'static,
) -> SelectError {
    SelectError::SettingsFrom {
        flag: flag.to_string(),
        value,
        source: Box::new(source),
    }
}

/// Loads the candidates and builds the selectors; `say` hears each selector's note (how its
/// scores were obtained, what failed) as it is computed.
pub async fn plan(s: &PlanSettings, mut say: impl FnMut(&str)) -> Result<Plan, SelectError> {
    let kinds = SelectorKind::parse_list(&s.selector)?;
    check_models_given(s, &kinds)?;
    let wants_tests = kinds.contains(&SelectorKind::Tests) || kinds.contains(&SelectorKind::Hybrid);
    let wants_swr = s.swr.is_some()
        && (kinds.contains(&SelectorKind::Swr) || kinds.contains(&SelectorKind::Hybrid));
    let ctx = if !s.predictions.is_empty() || wants_tests || wants_swr {
        Some(task_context(s)?)
    } else {
        None
    };
    let set = load_candidates(s, ctx.as_ref(), &mut say).await?;
    let k = s.k.unwrap_or_else(|| set.max_k()).max(1); // a set with no candidates: 1
    let mut notes = Vec::new();
    let mut scoring = Scoring {
        precompute: HashMap::new(),
        note: |n: String| {
            say(&n);
            notes.push(n);
        },
    };
    let verifier_sel = scoring.verifier(s, &kinds, &set).await?;
    let swr_sel = scoring
        .swr(s, &kinds, ctx.as_ref().filter(|_| wants_swr), &set)
        .await?;
    let tests_sel = match (&ctx, wants_tests) {
        (Some(ctx), true) => Some(scoring.tests(ctx, &set, k).await),
        _ => None,
    };
    let majority = SelectorKind::Majority
        .build()
        .ok_or_else(|| flag("--selector", "majority needs nothing computed"))?;
    let mut selectors: Vec<SharedSelector> = Vec::new();
    for kind in kinds {
        let v = match kind {
            SelectorKind::Verifier => verifier_sel.clone(),
            SelectorKind::Swr => swr_sel.clone(),
            SelectorKind::Tests => tests_sel.clone(),
            SelectorKind::Hybrid => {
                let mut components = vec![majority.clone()];
                components.extend(tests_sel.clone());
                components.extend(verifier_sel.clone());
                components.extend(swr_sel.clone());
                Some(scoring.hybrid(s, components, &set, k)?)
            }
            SelectorKind::Majority => Some(majority.clone()),
            _ => kind.build(),
        };
        selectors.extend(v);
    }
    let precompute = scoring.precompute;
    Ok(Plan {
        set,
        options: SelectOptions {
            selectors,
            notes,
            precompute_seconds: precompute,
            k: s.k,
            seed: s.seed,
            out: s.out.clone(),
        },
    })
}

/// A model-scored selector named alone needs its model (`all` runs those whose model is given).
fn check_models_given(s: &PlanSettings, kinds: &[SelectorKind]) -> Result<(), SelectError> {
    let all = s.selector.split(',').any(|x| x.trim() == "all");
    if kinds.contains(&SelectorKind::Verifier) && s.verifier.is_none() && !all {
        return Err(flag(
            "--verifier",
            "the verifier selector needs a judge model: --verifier openai:MODEL | embedded[:MODEL] | POLICY_FILE",
        ));
    }
    if kinds.contains(&SelectorKind::Swr) && s.swr.is_none() && !all {
        return Err(flag(
            "--swr",
            "the swr selector needs SWE-World's reward model: --swr openai:MODEL | embedded[:MODEL] | POLICY_FILE",
        ));
    }
    Ok(())
}

/// The selectors whose scores are computed before selection (verifier, SWR, tests, hybrid):
/// each one's seconds go into `precompute` (a hybrid's include its components') and its note
/// to `note`.
struct Scoring<N> {
    precompute: HashMap<String, f64>,
    note: N,
}

impl<N: FnMut(String)> Scoring<N> {
    async fn verifier(
        &mut self,
        s: &PlanSettings,
        kinds: &[SelectorKind],
        set: &CandidateSet,
    ) -> Result<Option<SharedSelector>, SelectError> {
        match &s.verifier {
            Some(spec)
                if kinds.contains(&SelectorKind::Verifier)
                    || kinds.contains(&SelectorKind::Hybrid) =>
            {
                let started = Instant::now();
                let (v, n) = verifier(spec, set, s.verifier_concurrency).await?;
                self.precompute
                    .insert("verifier".into(), started.elapsed().as_secs_f64());
                (self.note)(n);
                Ok(Some(v))
            }
            Some(_) => Ok(None),
            None => {
                if kinds.contains(&SelectorKind::Verifier) {
                    (self.note)("verifier: not run (no --verifier given)".to_string());
                }
                Ok(None)
            }
        }
    }

    /// `ctx`: the tasks, when SWR is wanted.
    async fn swr(
        &mut self,
        s: &PlanSettings,
        kinds: &[SelectorKind],
        ctx: Option<&TaskContext>,
        set: &CandidateSet,
    ) -> Result<Option<SharedSelector>, SelectError> {
        match (&s.swr, ctx) {
            (Some(spec), Some(ctx)) => {
                let started = Instant::now();
                let (v, n) = swr(spec, ctx, set, s.swr_samples, s.verifier_concurrency).await?;
                self.precompute
                    .insert("swr".into(), started.elapsed().as_secs_f64());
                (self.note)(n);
                Ok(Some(v))
            }
            (None, _) if kinds.contains(&SelectorKind::Swr) => {
                (self.note)("swr: not run (no --swr given)".to_string());
                Ok(None)
            }
            _ => Ok(None),
        }
    }

    async fn tests(&mut self, ctx: &TaskContext, set: &CandidateSet, k: usize) -> SharedSelector {
        let started = Instant::now();
        let (v, n) = run_tests(ctx, set, k).await;
        self.precompute
            .insert("tests".into(), started.elapsed().as_secs_f64());
        (self.note)(n);
        v
    }

    fn hybrid(
        &mut self,
        s: &PlanSettings,
        components: Vec<SharedSelector>,
        set: &CandidateSet,
        k: usize,
    ) -> Result<SharedSelector, SelectError> {
        let parts: f64 = components
            .iter()
            .filter_map(|c| self.precompute.get(c.name()))
            .sum();
        let started = Instant::now();
        let (h, n) = hybrid(s, components, set, k)?;
        self.precompute
            .insert("hybrid".into(), parts + started.elapsed().as_secs_f64());
        (self.note)(n);
        Ok(h)
    }
}

fn task_context(s: &PlanSettings) -> Result<TaskContext, SelectError> {
    let path = match &s.tasks {
        Some(p) => p.clone(),
        None => {
            let dir = s
                .rollouts
                .first()
                .ok_or_else(|| SelectError::Empty("no run directory given".into()))?;
            PathBuf::from(crate::candidates::tasks_file_of(dir)?)
        }
    };
    let tasks = dojo_task::load_tasks(&path).map_err(|e| SelectError::InputFrom {
        path: path.clone(),
        what: "loading the task file (pass --tasks if the run's task file moved)",
        source: e.into(),
    })?;
    Ok(TaskContext {
        tasks,
        registry: EnvRegistry::with_dir(s.envs.as_deref())
            .map_err(|e| flag_from("--envs", None, e))?,
        preparer: Preparer::new(PrepareOptions {
            repos_dir: s.repos.clone(),
        }),
    })
}

async fn load_candidates(
    s: &PlanSettings,
    ctx: Option<&TaskContext>,
    say: &mut impl FnMut(&str),
) -> Result<CandidateSet, SelectError> {
    if s.predictions.is_empty() {
        return crate::candidates::load_runs(
            &s.rollouts,
            LoadOptions {
                allow_partial: s.partial,
            },
        );
    }
    let ctx = ctx.ok_or_else(|| flag("--predictions", "needs --tasks"))?;
    let opts = dojo_grade::batch::BatchOptions {
        workers: s.workers,
        ..Default::default()
    };
    let graded = s.out.join("graded");
    let started = Instant::now();
    let set = crate::candidates::load_predictions(
        &s.predictions,
        &ctx.tasks,
        &ctx.registry,
        &ctx.preparer,
        &opts,
        &graded,
    )
    .await?;
    say(&format!(
        "graded {} predictions file(s) into {} in {:.1} s",
        s.predictions.len(),
        graded.display(),
        started.elapsed().as_secs_f64()
    ));
    Ok(set)
}

/// Runs the agents' tests on every candidate; the selector and a line on how it went.
async fn run_tests(ctx: &TaskContext, set: &CandidateSet, k: usize) -> (SharedSelector, String) {
    let tasks: HashMap<String, (Task, Result<dojo_task::RepoEnv, SelectError>)> = ctx
        .tasks
        .iter()
        .map(|t| {
            // Agent-written tests run in the task's real environment; a task with none (a
            // simulated-only task) is a failure that says so.
            let env = ctx.registry.resolve(t).map_err(SelectError::NeedsRealEnv);
            (t.instance_id.clone(), (t.clone(), env))
        })
        .collect();
    let (sel, stats) = crate::agent_tests::run_agent_tests(
        set,
        k,
        &tasks,
        &ctx.preparer,
        &dojo_sandbox::SandboxOptions::default(),
    )
    .await;
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
    (Arc::new(sel), n)
}

/// The hybrid selector: saved weights, or weights fitted here (saved to OUT/hybrid.json).
fn hybrid(
    s: &PlanSettings,
    components: Vec<SharedSelector>,
    set: &CandidateSet,
    k: usize,
) -> Result<(SharedSelector, String), SelectError> {
    let describe = |w: &HybridWeights| {
        w.features
            .iter()
            .zip(&w.weights)
            .map(|(f, w)| format!("{f} {w:+.3}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(path) = &s.hybrid_weights {
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
            .map_err(|e| flag_from("--hybrid-weights", Some(path.display().to_string()), e))?;
        return Ok((Arc::new(h), n));
    }
    let tasks: Vec<crate::TaskCandidates> = set
        .tasks
        .iter()
        .map(|t| crate::TaskCandidates {
            task_id: t.task_id.clone(),
            candidates: t.candidates.iter().take(k).cloned().collect(),
        })
        .collect();
    let h = Hybrid::cross_fitted(components, &tasks, DEFAULT_L2);
    std::fs::create_dir_all(&s.out).map_err(|e| SelectError::Io {
        path: s.out.clone(),
        source: e.into(),
    })?;
    let path = s.out.join("hybrid.json");
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

/// The chat backend of a model policy given by a flag (`--verifier`, `--swr`).
async fn model(
    name: &str,
    spec: &str,
) -> Result<(PolicyConfig, Arc<dyn dojo_llm::ChatBackend>), SelectError> {
    let policy = PolicyConfig::parse(spec).map_err(|e| flag_from(name, None, e))?;
    let model = dojo_rollout::embedded::policy_backends(&policy)
        .await
        .map_err(|e| flag_from(name, Some(spec.to_string()), e))?;
    let backend = model.for_sample(0);
    Ok((policy, backend))
}

/// Scores every candidate with SWE-World's reward model; the selector and a line on how it went.
async fn swr(
    spec: &str,
    ctx: &TaskContext,
    set: &CandidateSet,
    samples: u32,
    concurrency: usize,
) -> Result<(SharedSelector, String), SelectError> {
    // The context real grading's SWR records hold, less the gold patch: the test command (a
    // task without an environment spec, a simulated-only task, gets the simulation's defaults,
    // as in `dojo rollout --execution sim`) and the test files as graded, read once per task
    // from its pristine tree. A task whose spec or tree fails keeps the reason.
    let mut tasks: HashMap<String, Result<crate::swr::SwrTask, SelectError>> = HashMap::new();
    let wanted: std::collections::HashSet<&str> =
        set.tasks.iter().map(|t| t.task_id.as_str()).collect();
    for t in ctx
        .tasks
        .iter()
        .filter(|t| wanted.contains(t.instance_id.as_str()))
    {
        let task = async {
            use dojo_rollout::world_sim::{graded_test_files, repo_env_or_default, world_task};
            let env = repo_env_or_default(&ctx.registry, t)?;
            let opts = dojo_sandbox::SandboxOptions::default();
            Ok(crate::swr::SwrTask {
                test_files: graded_test_files(t, &ctx.preparer, &opts).await?,
                world: world_task(t, &env).at_test_time(),
            })
        }
        .await
        .map_err(SelectError::Environment);
        tasks.insert(t.instance_id.clone(), task);
    }
    let started = Instant::now();
    let (policy, backend) = model("--swr", spec).await?;
    let client = Arc::new(dojo_world::WorldClient::new(
        backend.clone(),
        backend,
        dojo_world::WorldClientConfig::default(),
    ));
    let (sel, stats) = crate::swr::score_all(client, set, &tasks, samples, concurrency).await;
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
async fn verifier(
    spec: &str,
    set: &CandidateSet,
    concurrency: usize,
) -> Result<(SharedSelector, String), SelectError> {
    let started = Instant::now();
    let (policy, backend) = model("--verifier", spec).await?;
    let judgements = judge_all(backend, set, JudgeLimits::default(), concurrency)
        .await
        .map_err(|e| flag_from("--verifier", None, e))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_model_selector_without_its_model_names_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let s = PlanSettings {
            rollouts: vec![dir.path().to_path_buf()],
            selector: "verifier".into(),
            out: dir.path().join("out"),
            ..Default::default()
        };
        let e = plan(&s, |_| {}).await.err().unwrap().to_string();
        assert!(e.starts_with("--verifier: "), "{e}");
        let s = PlanSettings {
            selector: "swr".into(),
            ..s
        };
        let e = plan(&s, |_| {}).await.err().unwrap().to_string();
        assert!(e.starts_with("--swr: "), "{e}");
        let s = PlanSettings {
            selector: "sharpest".into(),
            ..s
        };
        let e = plan(&s, |_| {}).await.err().unwrap().to_string();
        assert!(e.contains("unknown selector `sharpest`"), "{e}");
    }
}
