//! One `dojo rollout` invocation as a library call: load tasks, open (or resume) the run directory,
//! run the scheduler, write the summary and, on request, SWE-bench predictions.
//!
//! Run directory layout (all versioned):
//! - `run.json`: what this directory is a run of (policy, tasks file, K). Resuming with another
//!   policy is refused: two policies' trajectories must never mix in one store.
//! - `trajectories.jsonl`: the crash-safe store (one [`dojo_trajectory::Trajectory`] per line).
//! - `summary.json`, `predictions.jsonl` (or `predictions.sample-<k>.jsonl`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use dojo_llm::ChatBackend;
use dojo_task::{EnvRegistry, PrepareOptions, Task};
use dojo_trajectory::Trajectory;

use crate::agent_runner::{AgentLoop, AgentRunner, BackendFactory};
use crate::backends::{GoldBackends, ModelBackends, ReplayBackends};
use crate::error::RolloutError;
use crate::policy::{PolicyConfig, PolicyKind};
use crate::prepared::Prepared;
use crate::scheduler::{RolloutRecord, RunStats, SchedulerConfig, run_jobs};
use crate::shard::Shard;
use crate::store::{Recovery, Store};
use crate::summary::{SampleOutcome, Summary, export_predictions};

pub const RUN_SCHEMA_VERSION: u32 = 1;

/// `run.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunManifest {
    pub schema_version: u32,
    pub policy: Value,
    pub tasks_file: String,
    pub samples: u32,
    pub dojo_version: String,
    /// `I/N` for one shard of a split run (`--shard`); absent for a whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    /// SHA-256 of the task file's bytes, so shards run from copies on other machines can be
    /// checked to be the same set (absent in runs written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks_sha256: Option<String>,
}

/// Everything `dojo rollout` takes.
#[derive(Debug, Clone)]
pub struct RolloutOptions {
    pub tasks_file: PathBuf,
    /// Restrict to these instance ids (empty: all).
    pub instances: Vec<String>,
    pub policy: PolicyConfig,
    pub samples: u32,
    pub out: PathBuf,
    /// Concurrent rollouts (= sandboxes).
    pub workers: usize,
    pub export_predictions: bool,
    /// Extra environment specs overriding the embedded `envs/`.
    pub envs_dir: Option<PathBuf>,
    pub prepare: PrepareOptions,
    /// Where the run's progress goes (quiet, or the binary's bar).
    pub progress: dojo_progress::Progress,
    pub label: String,
    /// Run only this shard of the task set (see [`crate::shard`]).
    pub shard: Option<Shard>,
}

/// What a run produced.
pub struct RolloutOutput {
    pub summary: Summary,
    pub outcomes: Vec<SampleOutcome>,
    pub stats: RunStats,
    pub recovery: Recovery,
    pub store_path: PathBuf,
    pub predictions: Vec<PathBuf>,
    /// The simulation's drift summed over the run (`drift.json`), when any rollout ran in a
    /// simulated or shadow environment.
    pub drift: Option<dojo_world::drift::DriftSummary>,
}

/// The `predictions: FILE` lines `dojo rollout` and `dojo rollout --merge` print.
pub(crate) fn prediction_lines(predictions: &[PathBuf]) -> impl Iterator<Item = String> + '_ {
    predictions
        .iter()
        .map(|p| format!("predictions: {}", p.display()))
}

impl RolloutOutput {
    /// The progress line of a finished run (stderr): jobs planned, resumed from the store, run
    /// now, and where the trajectories are.
    pub fn progress_line(&self) -> String {
        let s = &self.stats;
        format!(
            "{}: {} planned, {} resumed from the store, {} run now → {}",
            self.summary.policy,
            s.planned,
            s.skipped,
            s.ran,
            self.store_path.display()
        )
    }

    /// What `dojo rollout` prints on stdout after a run: the summary table, the simulation's
    /// drift (when any), the predictions files.
    pub fn report(&self) -> String {
        let mut lines = vec![crate::summary::render_table(std::slice::from_ref(
            &self.summary,
        ))];
        lines.extend(self.drift.as_ref().map(|d| d.to_markdown()));
        lines.extend(prediction_lines(&self.predictions));
        lines.join("\n")
    }
}

impl BackendFactory for Box<dyn BackendFactory> {
    fn backend(
        &self,
        p: &Prepared,
        sample: u32,
    ) -> Result<Arc<dyn ChatBackend>, crate::agent_runner::BackendError> {
        (**self).backend(p, sample)
    }
    fn policy_info(&self) -> dojo_trajectory::PolicyInfo {
        (**self).policy_info()
    }
}

/// The backends of a policy. `embedded` is the in-process engine ([`crate::embedded`], behind
/// the `engine` feature, or the trainer's current weights in `dojo rl`); pass it in for
/// `kind = "embedded"`.
pub fn make_backends(
    policy: &PolicyConfig,
    embedded: Option<Arc<dyn ChatBackend>>,
) -> Result<Box<dyn BackendFactory>, RolloutError> {
    let config = policy.clone();
    Ok(match &policy.kind {
        PolicyKind::GoldReplay { run_tests } => Box::new(GoldBackends {
            config,
            run_tests: *run_tests,
        }),
        PolicyKind::Replay { file } => Box::new(ReplayBackends::load(config, file)?),
        PolicyKind::Openai { .. } | PolicyKind::Embedded { .. } => {
            Box::new(model_backends(policy, embedded)?)
        }
    })
}

/// The backends of a model policy (`openai` or `embedded`); other kinds are refused. Also what
/// callers use that need the policy's model itself rather than a rollout (a verifier judge):
/// [`ModelBackends::for_sample`].
pub fn model_backends(
    policy: &PolicyConfig,
    embedded: Option<Arc<dyn ChatBackend>>,
) -> Result<ModelBackends, RolloutError> {
    let config = policy.clone();
    match &policy.kind {
        PolicyKind::Openai { model, .. } => {
            let cfg = openai_client_config(&policy.kind)?;
            let client = dojo_llm::OpenAiClient::new(cfg).map_err(RolloutError::policy)?;
            Ok(ModelBackends {
                config,
                kind: "openai",
                model: model.clone(),
                client: Arc::new(client),
            })
        }
        PolicyKind::Embedded { model } => {
            let client = embedded.ok_or_else(|| {
                RolloutError::Policy(
                    "the embedded engine is not available in this build (build dojo-cli with the `engine` feature)".into(),
                )
            })?;
            Ok(ModelBackends {
                config,
                kind: "embedded",
                model: model.clone(),
                client,
            })
        }
        _ => Err(RolloutError::Policy(format!(
            "{} is not a model policy (use openai:MODEL, embedded[:MODEL] or a policy file of those kinds)",
            policy.kind_name()
        ))),
    }
}

/// The HTTP client settings of an `openai` policy: the environment's (`OPENAI_*`,
/// `DOJO_LLM_TIMEOUT`), overridden by the policy file's `base_url`, `api_key_env` and
/// `request_timeout_s`.
fn openai_client_config(kind: &PolicyKind) -> Result<dojo_llm::ClientConfig, RolloutError> {
    let mut cfg = dojo_llm::ClientConfig::from_env().map_err(RolloutError::policy)?;
    let PolicyKind::Openai {
        base_url,
        api_key_env,
        request_timeout_s,
        ..
    } = kind
    else {
        return Ok(cfg);
    };
    if let Some(url) = base_url {
        let key = dojo_llm::api_key_from_env(api_key_env.as_deref());
        cfg.endpoints = dojo_llm::EndpointConfig::list("policy base_url", url, key, None)
            .map_err(RolloutError::policy)?;
    }
    if let Some(t) = request_timeout_s {
        cfg.request_timeout = dojo_llm::timeout_secs(*t)
            .map_err(|e| RolloutError::policy_in("request_timeout_s", e))?;
    }
    Ok(cfg)
}

/// Load the tasks of a run (all, or the listed instances, in file order).
pub fn load_tasks(file: &Path, instances: &[String]) -> Result<Vec<Task>, RolloutError> {
    dojo_task::load_selected(file, instances).map_err(RolloutError::Tasks)
}

/// `dir/run.json`. Resuming needs the same policy and shard; the task file may have moved
/// (shards run from copies on other machines) and `-n` may change.
pub fn manifest(dir: &Path) -> dojo_rundir::Manifest<'_> {
    dojo_rundir::Manifest::new(
        dir,
        "run.json",
        dojo_rundir::Compare::Only(&["policy", "shard"]),
    )
}

/// The manifest of the rollout directory `dir`.
pub fn read_manifest(dir: &Path) -> Result<RunManifest, RolloutError> {
    manifest(dir).read()?.ok_or_else(|| RolloutError::Io {
        path: dir.join("run.json"),
        source: "missing: not a `dojo rollout` run directory".into(),
    })
}

fn check_manifest(dir: &Path, m: &RunManifest) -> Result<(), RolloutError> {
    let file = manifest(dir);
    if let dojo_rundir::Opened::Resumed(old) = file.open(m)? {
        if old.samples > m.samples {
            tracing::warn!(
                "{}: run had -n {}, now -n {}",
                dir.display(),
                old.samples,
                m.samples
            );
        }
        file.write(m)?;
    }
    Ok(())
}

/// Run (or resume) a rollout with the given agent loop and backends.
pub async fn run_rollout<A: AgentLoop>(
    opts: &RolloutOptions,
    agent: A,
    backends: Box<dyn BackendFactory>,
) -> Result<RolloutOutput, RolloutError> {
    run_rollout_with_world(opts, agent, backends, &Default::default()).await
}

/// [`run_rollout`], with the in-process engines for a policy whose `[world]` models are
/// `embedded[:DIR]` ([`crate::embedded::embedded_world`]).
pub async fn run_rollout_with_world<A: AgentLoop>(
    opts: &RolloutOptions,
    agent: A,
    backends: Box<dyn BackendFactory>,
    world_embedded: &crate::world_sim::EmbeddedWorld,
) -> Result<RolloutOutput, RolloutError> {
    let mut tasks = load_tasks(&opts.tasks_file, &opts.instances)?;
    if let Some(shard) = opts.shard {
        tasks.retain(|t| shard.owns(&t.instance_id));
        if tasks.is_empty() {
            eprintln!(
                "warning: shard {shard} holds no task of {}",
                opts.tasks_file.display()
            );
        }
    }
    let registry = EnvRegistry::with_dir(opts.envs_dir.as_deref()).map_err(RolloutError::Tasks)?;
    let manifest = RunManifest {
        schema_version: RUN_SCHEMA_VERSION,
        policy: opts.policy.to_json(),
        tasks_file: opts.tasks_file.display().to_string(),
        samples: opts.samples,
        dojo_version: env!("CARGO_PKG_VERSION").into(),
        shard: opts.shard.map(|s| s.to_string()),
        tasks_sha256: Some(crate::shard::task_file_sha256(&opts.tasks_file)?),
    };
    check_manifest(&opts.out, &manifest)?;
    let store_path = opts.out.join("trajectories.jsonl");
    let store = Arc::new(Store::<Trajectory>::open(&store_path)?);
    // (A torn last record was cut, with a warning, by the log itself: that sample runs again.)
    let recovery = store.recovery().clone();
    for k in &recovery.duplicates {
        eprintln!(
            "warning: {}: duplicate record {k} ignored (first kept)",
            store_path.display()
        );
    }
    let preparer = Arc::new(dojo_task::Preparer::new(opts.prepare.clone()));
    let llm = opts.policy.llm_concurrency.unwrap_or(opts.workers.max(1));
    let ids: Vec<String> = tasks.iter().map(|t| t.instance_id.clone()).collect();
    let mut runner = AgentRunner::new(tasks, agent, backends, registry, preparer, llm);
    runner.run_id = opts.out.display().to_string();
    if let Some(w) = opts
        .policy
        .world
        .as_ref()
        .filter(|w| w.mode != dojo_world::route::ExecutionMode::Real)
    {
        let model = crate::world_sim::world_model(w, world_embedded)
            .map_err(|e| RolloutError::policy_in("[world]", e))?;
        runner.sim = Some(crate::world_sim::SimSetup {
            mode: w.mode,
            model,
            analysis: w.analysis_model.clone().map(|m| {
                let root = w
                    .analysis_cache
                    .clone()
                    .unwrap_or_else(dojo_world::analysis::default_cache_root);
                (root, m)
            }),
        });
    }
    if crate::world_capture::capture_enabled() {
        let path = opts.out.join(dojo_world::WORLD_FILE);
        let writer =
            dojo_world::record::WorldWriter::open(&path, Default::default()).map_err(|e| {
                RolloutError::Io {
                    path: path.clone(),
                    source: e.into(),
                }
            })?;
        runner.world = Some(Arc::new(writer));
    }
    let cfg = SchedulerConfig {
        samples: opts.samples,
        sandboxes: opts.workers.max(1),
        progress: opts.progress.clone(),
        label: opts.label.clone(),
    };
    let stats = run_jobs(Arc::new(runner), &ids, store.clone(), &cfg).await?;
    finish(opts, &store, &ids, stats, recovery, store_path)
}

fn finish(
    opts: &RolloutOptions,
    store: &Store<Trajectory>,
    ids: &[String],
    stats: RunStats,
    recovery: Recovery,
    store_path: PathBuf,
) -> Result<RolloutOutput, RolloutError> {
    // Only this run's plan counts (a store may hold more samples from an earlier, larger -n).
    let plan: Vec<Trajectory> = store
        .records()
        .into_iter()
        .filter(|t| ids.contains(&t.task_id) && t.sample_index < opts.samples)
        .collect();
    let RunOutputs {
        summary,
        outcomes,
        drift,
        predictions,
    } = write_run_outputs(
        &opts.out,
        &opts.policy.label(),
        &plan,
        opts.samples,
        opts.export_predictions,
    )?;
    Ok(RolloutOutput {
        summary,
        outcomes,
        stats,
        recovery,
        store_path,
        predictions,
        drift,
    })
}

/// The run's drift figures (see [`dojo_world::drift`]).
pub const DRIFT_FILE: &str = "drift.json";

/// What a finished run writes beside its store, computed from the trajectories of its plan.
pub(crate) struct RunOutputs {
    pub summary: Summary,
    pub outcomes: Vec<SampleOutcome>,
    pub drift: Option<dojo_world::drift::DriftSummary>,
    pub predictions: Vec<PathBuf>,
}

/// Write `summary.json`, `drift.json` (when any rollout ran with a simulated environment) and,
/// with `with_predictions`, the SWE-bench predictions of `plan` into `out`: what one run
/// writes at its end, and what a merge of its shards writes the same way.
pub(crate) fn write_run_outputs(
    out: &Path,
    label: &str,
    plan: &[Trajectory],
    samples: u32,
    with_predictions: bool,
) -> Result<RunOutputs, RolloutError> {
    let ioerr = |path: PathBuf| {
        move |e: std::io::Error| RolloutError::Io {
            path,
            source: e.into(),
        }
    };
    let outcomes: Vec<SampleOutcome> = plan.iter().map(|t| t.outcome()).collect();
    let summary = Summary::new(label, &outcomes);
    let sp = out.join("summary.json");
    summary.write_json(&sp).map_err(ioerr(sp.clone()))?;
    let drift = drift_summary(plan);
    if let Some(d) = &drift {
        let dp = out.join(DRIFT_FILE);
        let text = serde_json::to_string_pretty(d).unwrap_or_default();
        dojo_rundir::write_atomic(&dp, text.as_bytes()).map_err(ioerr(dp.clone()))?;
    }
    let predictions = if with_predictions {
        export_predictions(out, label, &outcomes, samples).map_err(ioerr(out.to_path_buf()))?
    } else {
        Vec::new()
    };
    Ok(RunOutputs {
        summary,
        outcomes,
        drift,
        predictions,
    })
}

/// The drift of a run's trajectories summed over their simulation logs; `None` when no
/// rollout ran with a simulated environment.
fn drift_summary(plan: &[Trajectory]) -> Option<dojo_world::drift::DriftSummary> {
    let mut total = dojo_world::drift::DriftSummary::default();
    let mut any = false;
    for t in plan {
        if let Some(log) = dojo_world::sim::SimLog::from_metadata(&t.metadata) {
            total.merge(&log.drift);
            any = true;
        }
    }
    any.then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A policy file's `request_timeout_s` sets the client's request timeout; an unusable one
    /// is a policy error naming the field.
    #[test]
    fn policy_file_sets_the_llm_request_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.toml");
        let file = |t: &str| {
            format!(
                "kind = \"openai\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:9/v1\"\nrequest_timeout_s = {t}\n"
            )
        };
        std::fs::write(&p, file("42.5")).unwrap();
        let policy = PolicyConfig::load(&p).unwrap();
        let cfg = openai_client_config(&policy.kind).unwrap();
        assert_eq!(
            cfg.request_timeout,
            std::time::Duration::from_millis(42_500)
        );
        assert_eq!(cfg.endpoints[0].base_url, "http://127.0.0.1:9/v1");
        std::fs::write(&p, file("0")).unwrap();
        let policy = PolicyConfig::load(&p).unwrap();
        let e = openai_client_config(&policy.kind).unwrap_err().to_string();
        assert!(e.contains("request_timeout_s"), "{e}");
        // Unset, the field stays out of the recorded policy (run.json of older runs resume).
        let short = PolicyConfig::parse("openai:m").unwrap();
        assert!(!short.to_json().to_string().contains("request_timeout_s"));
    }

    #[test]
    fn run_and_merge_lines() {
        let summary = Summary::new("gold-replay", &[]);
        let out = RolloutOutput {
            summary: summary.clone(),
            outcomes: vec![],
            stats: RunStats {
                planned: 3,
                skipped: 1,
                ran: 2,
            },
            recovery: Recovery::default(),
            store_path: PathBuf::from("/run/trajectories.jsonl"),
            predictions: vec![PathBuf::from("/run/predictions.jsonl")],
            drift: None,
        };
        assert_eq!(
            out.progress_line(),
            "gold-replay: 3 planned, 1 resumed from the store, 2 run now → /run/trajectories.jsonl"
        );
        let table = crate::summary::render_table(std::slice::from_ref(&summary));
        assert_eq!(
            out.report(),
            format!("{table}\npredictions: /run/predictions.jsonl")
        );
        let merged = crate::merge::MergeReport {
            shards: 2,
            tasks: 3,
            trajectories: 6,
            summary,
            predictions: vec![],
        };
        assert_eq!(
            merged.progress_line(Path::new("/m")),
            "merged 2 shards: 3 tasks, 6 trajectories → /m"
        );
        assert_eq!(merged.report(), table);
    }
}
