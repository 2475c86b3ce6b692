//! Rollouts in a simulated environment (`--execution sim|hybrid|shadow`, the policy's `[world]`
//! table): how a task is prepared for each mode, the [`dojo_world::sim::SimWorkspace`] the agent's
//! tools run through, and the final reward.
//!
//! - `sim`: only the pristine tree is built (no Python environment, no environment spec needed:
//!   tasks with just `repo` + `base_commit` run); the reward model grades.
//! - `hybrid`: the environment is built when the task has one; without it the rollout runs as
//!   `sim`. Grading is real with an environment, simulated without.
//! - `shadow`: everything real (environment required), plus the models' predictions and their
//!   drift, recorded in the trajectory's metadata.
//!
//! A reward model that fails is a grading infrastructure failure, never an unresolved sample.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use dojo_grade::parsers::Parser;
use dojo_llm::ChatBackend;
use dojo_sandbox::{Pristine, PristineStore, PythonEnv, Sandbox};
use dojo_task::{EnvOverride, EnvRegistry, Preparer, RepoEnv, Task, TaskError, task_source};
use dojo_trajectory::Trajectory;
use dojo_world::analysis::lookup_analysis;
use dojo_world::client::Role;
use dojo_world::route::{ExecutionMode, WorldModelSpec, WorldPolicy};
use dojo_world::sim::{
    METADATA_KEY, ModelFailure, RewardVerdict, SimLog, SimTask, WorldModel, simulated_reward,
    test_files_after_patch,
};
use dojo_world::{AnalysisInput, WorldClient, WorldClientConfig, WorldTask};

/// The world model and mode of a run.
#[derive(Clone)]
pub struct SimSetup {
    pub mode: ExecutionMode,
    pub model: Arc<dyn WorldModel>,
    /// Where the initial analyses are cached and the model whose analyses to show.
    pub analysis: Option<(std::path::PathBuf, String)>,
}

/// One task's simulated environment.
#[derive(Clone)]
pub struct SimRun {
    pub mode: ExecutionMode,
    pub model: Arc<dyn WorldModel>,
    pub task: Arc<SimTask>,
}

impl SimRun {
    /// Whether the final reward comes from the reward model instead of real grading.
    pub fn simulated_grading(&self) -> bool {
        !self.task.has_environment
    }
}

/// Reply budget of the embedded world model, SWT and SWR alike: room for a test run's output
/// or a test report, and a bound on a reply that never ends.
pub const EMBEDDED_MAX_TOKENS: u32 = 1024;

/// Why a simulated environment could not be had, by whose fault: the `[world]` settings (a
/// role without a model, a model not loaded, a bad endpoint), the task (what the simulation
/// needs of it), the machine (the pristine tree could not be built), or the world model itself
/// (a failed call: an infrastructure failure the rollout records as such). None is retried
/// here.
///
/// Each says `what` went wrong and keeps the error under it, if any, as its source.
#[derive(Debug, thiserror::Error)]
pub enum WorldSimError {
    #[error("{}", said(what, source))]
    Settings {
        what: String,
        #[source]
        source: Option<BoxError>,
    },
    #[error("{}", said(what, source))]
    Task {
        what: String,
        #[source]
        source: Option<BoxError>,
    },
    #[error("{}", said(what, source))]
    Prepare {
        what: String,
        #[source]
        source: Option<BoxError>,
    },
    #[error("{}", said(what, source))]
    Model {
        what: String,
        #[source]
        source: Option<BoxError>,
    },
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `what: source`, or either alone.
fn said(what: &str, source: &Option<BoxError>) -> String {
    match (what, source) {
        (w, None) => w.to_string(),
        ("", Some(s)) => s.to_string(),
        (w, Some(s)) => format!("{w}: {s}"),
    }
}

/// Constructors: `kind(what)` for a message, `kind_from(what, source)` with its cause.
impl WorldSimError {
    fn settings(what: impl Into<String>) -> Self {
        WorldSimError::Settings {
            what: what.into(),
            source: None,
        }
    }
    fn settings_from(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        WorldSimError::Settings {
            what: what.into(),
            source: Some(source.into()),
        }
    }
    fn task(what: impl Into<String>) -> Self {
        WorldSimError::Task {
            what: what.into(),
            source: None,
        }
    }
    fn task_from(source: impl Into<BoxError>) -> Self {
        WorldSimError::Task {
            what: String::new(),
            source: Some(source.into()),
        }
    }
    fn prepare_from(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        WorldSimError::Prepare {
            what: what.into(),
            source: Some(source.into()),
        }
    }
    fn model_from(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        WorldSimError::Model {
            what: what.into(),
            source: Some(source.into()),
        }
    }
}

/// The embedded engines of a run's world models, one per distinct model the policy's roles name
/// ([`WorldPolicy::embedded_models`]): loaded once per run ([`crate::embedded::embedded_world`], feature `engine`) and
/// shared by every rollout, so one checkpoint playing both roles is loaded once.
#[derive(Clone, Default)]
pub struct EmbeddedWorld {
    /// By [`WorldModelSpec::engine_model`]: `default` or a checkpoint path.
    backends: BTreeMap<String, Arc<dyn ChatBackend>>,
}

impl EmbeddedWorld {
    /// The engine that serves `model` (`default` or a checkpoint path).
    pub fn insert(&mut self, model: String, backend: Arc<dyn ChatBackend>) {
        self.backends.insert(model, backend);
    }
    fn get(&self, model: &str) -> Option<Arc<dyn ChatBackend>> {
        self.backends.get(model).cloned()
    }
}

/// One role's backend, and the model name to send it (`None`: the embedded engine, which has
/// one model).
struct RoleBackend {
    backend: Arc<dyn ChatBackend>,
    remote_model: Option<String>,
}

/// The backend of `role` in `policy`: `embedded[:DIR]` from `embedded`, `openai:MODEL` over the
/// role's endpoints (`swt_base_url` / `swr_base_url`, else `base_url`, comma-separated; default
/// `OPENAI_BASE_URL`).
fn role_backend(
    policy: &WorldPolicy,
    role: Role,
    embedded: &EmbeddedWorld,
    timeout: std::time::Duration,
) -> Result<RoleBackend, WorldSimError> {
    let key = match role {
        Role::Swt => "swt_model",
        _ => "swr_model",
    };
    let spec: WorldModelSpec = policy
        .role_model(role)
        .ok_or_else(|| {
            WorldSimError::settings(format!(
                "env mode {} needs a world model for {role} ([world] model or {key} = \"openai:MODEL\" or \"embedded\", or --world-model / --{})",
                policy.mode,
                key.replace('_', "-")
            ))
        })?
        .parse()
        .map_err(|e: dojo_world::route::ParseModeError| {
            WorldSimError::settings_from(role.to_string(), e)
        })?;
    match spec {
        WorldModelSpec::Embedded(_) => {
            // Always `Some` for an embedded spec.
            let m = spec.engine_model().unwrap_or_default();
            let backend = embedded.get(&m).ok_or_else(|| {
                WorldSimError::settings(format!(
                    "{role}: the embedded world model {m} is not loaded (the models a policy names are loaded by builds with the `engine` feature)"
                ))
            })?;
            Ok(RoleBackend {
                backend,
                remote_model: None,
            })
        }
        WorldModelSpec::Openai(model) => {
            let mut endpoints = dojo_llm::ClientConfig::from_env()
                .map_err(|e| WorldSimError::settings_from(role.to_string(), e))?
                .endpoints;
            if let Some(url) = policy.role_base_url(role) {
                let key = dojo_llm::api_key_from_env(policy.api_key_env.as_deref());
                endpoints =
                    dojo_llm::EndpointConfig::list(&format!("{role} base URL"), url, key, None)
                        .map_err(|e| WorldSimError::settings_from("", e))?;
            }
            let backend = dojo_world::client::role_backend(role, endpoints, timeout)
                .map_err(|e| WorldSimError::settings_from("", e))?;
            Ok(RoleBackend {
                backend,
                remote_model: Some(model),
            })
        }
    }
}

/// The world model a policy's `[world]` table names, SWT and SWR each from its own key or from
/// `model`: `openai:MODEL` over HTTP, or `embedded[:DIR]` (the engines in `embedded`). An
/// embedded role gets no JSON mode (the engine has none; the parser finds JSON in text either
/// way) and a reply budget of [`EMBEDDED_MAX_TOKENS`]: without one the engine generates up to
/// its context window (8k tokens, minutes on a CPU) whenever a small model never closes its
/// JSON reply.
pub fn world_model(
    policy: &WorldPolicy,
    embedded: &EmbeddedWorld,
) -> Result<Arc<dyn WorldModel>, WorldSimError> {
    Ok(Arc::new(world_client(policy, embedded)?))
}

fn world_client(
    policy: &WorldPolicy,
    embedded: &EmbeddedWorld,
) -> Result<WorldClient, WorldSimError> {
    let mut cfg = swr_sampling(policy);
    let swt = role_backend(policy, Role::Swt, embedded, cfg.swt_timeout)?;
    let swr = role_backend(policy, Role::Swr, embedded, cfg.swr_timeout)?;
    match &swt.remote_model {
        Some(m) => cfg.swt_model = m.clone(),
        None => {
            cfg.swt_json_mode = false;
            cfg.swt_max_tokens = Some(EMBEDDED_MAX_TOKENS);
        }
    }
    match &swr.remote_model {
        Some(m) => cfg.swr_model = m.clone(),
        None => cfg.swr_max_tokens = Some(EMBEDDED_MAX_TOKENS),
    }
    // Prompts fit the window of every role's model that states one (the embedded engine's
    // 8K for SmolLM2: SWE-World's caps add up to about 77K tokens).
    let roles = [
        (Role::Swt, &swt.backend, cfg.swt_max_tokens),
        (Role::Swr, &swr.backend, cfg.swr_max_tokens),
    ];
    for (role, backend, reply) in roles {
        let Some(window) = backend.context_tokens() else {
            continue;
        };
        let reply = reply.unwrap_or(EMBEDDED_MAX_TOKENS) as usize;
        if let Some(fitted) = cfg.caps.fit(window, reply).map_err(|e| {
            WorldSimError::settings_from(format!("{role} ({})", backend.describe()), e)
        })? {
            tracing::warn!(
                "{role} ({}): a {window}-token context: world-model prompt caps scaled to {:.1}% \
                 (problem {} characters, executed code {}, agent patch {}, at most {} files); \
                 cuts are marked in each prompt and counted in world.jsonl",
                backend.describe(),
                100.0 * fitted.max_prompt_chars() as f64 / cfg.caps.max_prompt_chars() as f64,
                fitted.problem,
                fitted.executed_code,
                fitted.agent_patch,
                fitted.max_files
            );
            cfg.caps = fitted;
        }
    }
    Ok(WorldClient::new(swt.backend, swr.backend, cfg))
}

/// The client defaults with the policy's prompt caps and SWR sampling (`caps`, `swr_samples`,
/// `swr_seed`).
fn swr_sampling(policy: &WorldPolicy) -> WorldClientConfig {
    let d = WorldClientConfig::default();
    WorldClientConfig {
        caps: policy.caps.clone().unwrap_or_else(|| d.caps.clone()),
        swr_samples: policy.swr_samples.unwrap_or(d.swr_samples).max(1),
        swr_seed: policy.swr_seed.unwrap_or(d.swr_seed),
        ..d
    }
}

/// [`analysis_input`] of every task: a task without a gold patch is bad input, said before
/// any request is made.
pub fn analysis_inputs(tasks: &[Task]) -> Result<Vec<AnalysisInput>, WorldSimError> {
    tasks.iter().map(analysis_input).collect()
}

/// What the initial analysis of `task` is written from ([`dojo_world::analysis`]). A task
/// without a gold patch has none to analyse: an error naming the task and the field.
pub fn analysis_input(task: &Task) -> Result<AnalysisInput, WorldSimError> {
    if task.patch.trim().is_empty() {
        return Err(WorldSimError::task(format!(
            "task {}: field `patch` is empty; the initial analysis is written from the gold patch",
            task.instance_id
        )));
    }
    Ok(AnalysisInput {
        task_id: task.instance_id.clone(),
        repo: task.repo.clone(),
        problem_statement: task.problem_statement.clone(),
        hints: (!task.hints_text.trim().is_empty()).then(|| task.hints_text.clone()),
        gold_patch: task.patch.clone(),
        test_patch: (!task.test_patch.trim().is_empty()).then(|| task.test_patch.clone()),
        fail_to_pass: task.f2p().to_vec(),
        pass_to_pass: task.p2p().to_vec(),
    })
}

/// What a task's sandboxes are created from in a simulated mode.
pub struct SimPrepared {
    pub pristine: Pristine,
    pub env: Option<PythonEnv>,
    pub repo_env: RepoEnv,
    pub run: SimRun,
}

/// The task's environment spec, or, for a task no spec covers, the defaults (`pytest -rA`,
/// the pytest parser): a simulated run needs only the test command and parser from it.
pub fn repo_env_or_default(registry: &EnvRegistry, task: &Task) -> Result<RepoEnv, WorldSimError> {
    match registry.resolve(task) {
        Ok(e) => Ok(e),
        Err(TaskError::NoEnv { .. }) => {
            let mut t = task.clone();
            t.env = Some(EnvOverride::default());
            let mut e = registry.resolve(&t).map_err(WorldSimError::task_from)?;
            e.origin = "(no environment spec: defaults for simulation)".into();
            Ok(e)
        }
        Err(e) => Err(WorldSimError::task_from(e)),
    }
}

/// The pristine tree alone (no Python environment), built on a blocking thread.
async fn pristine_only(task: &Task, preparer: &Preparer) -> Result<Pristine, WorldSimError> {
    let (t, opts) = (task.clone(), preparer.options().clone());
    tokio::task::spawn_blocking(move || {
        let source = task_source(&t, &opts).map_err(|e| WorldSimError::prepare_from("", e))?;
        let store =
            PristineStore::open().map_err(|e| WorldSimError::prepare_from("pristine store", e))?;
        store.build(&source).map_err(|e| {
            WorldSimError::prepare_from(format!("instance {}: pristine tree", t.instance_id), e)
        })
    })
    .await
    .map_err(|e| WorldSimError::prepare_from("the preparing thread failed", e))?
}

/// What the world models are told about `task`: the one mapping from a dataset task, used by
/// the simulation, real runs' capture (`world_capture`) and the `swr` selector. No initial
/// analysis: records get theirs when `dojo curate --world` renders them, the simulation from
/// its cache.
pub fn world_task(task: &Task, env: &RepoEnv) -> WorldTask {
    WorldTask {
        task_id: task.instance_id.clone(),
        problem_statement: task.problem_statement.clone(),
        test_command: env.test_command(task),
        fail_to_pass: task.f2p().to_vec(),
        pass_to_pass: task.p2p().to_vec(),
        gold_patch: (!task.patch.trim().is_empty()).then(|| task.patch.clone()),
        analysis: None,
    }
}

/// The task's test files as grading runs them (its test patch applied to the base commit),
/// read as the SWR records of real grading read them: for a caller with no rollout sandbox, the
/// `swr` selector, so SWR is asked with the files it was trained with. Grading restores test
/// files before applying the test patch, so a candidate's own edits to them do not count and
/// one read serves every candidate of the task.
pub async fn graded_test_files(
    task: &Task,
    preparer: &Preparer,
    opts: &dojo_sandbox::SandboxOptions,
) -> Result<Vec<dojo_world::FileView>, WorldSimError> {
    let paths = dojo_grade::guard::task_test_files(task);
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    let pristine = pristine_only(task, preparer).await?;
    let sb = Sandbox::create(&pristine, None, opts).await.map_err(|e| {
        WorldSimError::prepare_from(format!("instance {}: sandbox", task.instance_id), e)
    })?;
    let files =
        test_files_after_patch(&sb, Some(&task.test_patch), &paths, Some(&pristine.path)).await;
    if let Err(e) = sb.teardown().await {
        tracing::warn!(task = %task.instance_id, "sandbox teardown: {e}");
    }
    Ok(files)
}

/// Prepare `task` for `setup.mode` (see the module documentation).
pub async fn prepare(
    setup: &SimSetup,
    task: &Task,
    registry: &EnvRegistry,
    preparer: &Preparer,
) -> Result<SimPrepared, WorldSimError> {
    let repo_env = match setup.mode {
        ExecutionMode::Real | ExecutionMode::Shadow => {
            registry.resolve(task).map_err(WorldSimError::task_from)?
        }
        ExecutionMode::Sim | ExecutionMode::Hybrid => repo_env_or_default(registry, task)?,
    };
    let (pristine, env) = match setup.mode {
        ExecutionMode::Sim => (pristine_only(task, preparer).await?, None),
        ExecutionMode::Real | ExecutionMode::Shadow => {
            let tree = preparer
                .prepare(task, &repo_env)
                .await
                .map_err(|e| WorldSimError::prepare_from("", e))?;
            (tree.pristine.clone(), Some(tree.env.clone()))
        }
        ExecutionMode::Hybrid => match registry.resolve(task) {
            Ok(_) => match preparer.prepare(task, &repo_env).await {
                Ok(tree) => (tree.pristine.clone(), Some(tree.env.clone())),
                Err(e) => {
                    tracing::warn!(task = %task.instance_id, "hybrid: no working environment ({e}); simulating");
                    (pristine_only(task, preparer).await?, None)
                }
            },
            Err(_) => (pristine_only(task, preparer).await?, None),
        },
    };
    let mut world = world_task(task, &repo_env);
    world.analysis = setup.analysis.as_ref().and_then(|(root, model)| {
        let a = lookup_analysis(root, &task.instance_id, model);
        if a.is_none() {
            tracing::warn!(
                task = %task.instance_id,
                "no initial analysis by {model} cached (run `dojo tasks analyze --model {model}`)"
            );
        }
        a
    });
    let sim_task = SimTask {
        world,
        test_patch: (!task.test_patch.trim().is_empty()).then(|| task.test_patch.clone()),
        // The test files SWR records of real grading show (`world_capture::swr_record`).
        test_files: dojo_grade::guard::task_test_files(task),
        parser: Parser::from(repo_env.log_parser),
        has_environment: env.is_some(),
        pristine_dir: Some(pristine.path.clone()),
    };
    Ok(SimPrepared {
        pristine,
        env,
        repo_env,
        run: SimRun {
            mode: setup.mode,
            model: setup.model.clone(),
            task: Arc::new(sim_task),
        },
    })
}

fn log_of(traj: &Trajectory, run: &SimRun) -> SimLog {
    SimLog::from_metadata(&traj.metadata)
        .unwrap_or_else(|| SimLog::new(run.mode, run.model.describe()))
}

fn store_log(traj: &mut Trajectory, log: &SimLog) {
    traj.metadata.insert(METADATA_KEY.into(), log.to_json());
}

/// Ask the reward model about the workspace's final state (applies the task's test patch on
/// top of it: call after the patch was taken, before the sandbox is reset or torn down).
pub async fn predict_reward(
    run: &SimRun,
    sb: &Sandbox,
    patch: &str,
) -> (Result<RewardVerdict, ModelFailure>, u64) {
    let files = if patch.trim().is_empty() {
        Vec::new()
    } else {
        let t = &run.task;
        test_files_after_patch(
            sb,
            t.test_patch.as_deref(),
            &t.test_files,
            t.pristine_dir.as_deref(),
        )
        .await
    };
    simulated_reward(&*run.model, &run.task, patch, files).await
}

/// The reward model grades the rollout (no real grading possible). `Err`: the model failed, an
/// infrastructure failure the caller records as such.
pub async fn grade_simulated(
    run: &SimRun,
    sb: &Sandbox,
    traj: &mut Trajectory,
) -> Result<(), WorldSimError> {
    let patch = traj.patch.clone().unwrap_or_default();
    let t0 = Instant::now();
    let (verdict, ms) = predict_reward(run, sb, &patch).await;
    let mut log = log_of(traj, run);
    log.record_reward(verdict.clone(), None, ms);
    store_log(traj, &log);
    match verdict {
        Ok(v) => {
            traj.set_grade(v.resolved);
            traj.reward = Some(v.reward);
            traj.grading = Some(serde_json::json!({
                "simulated": true,
                "world_model": run.model.describe(),
                "resolved": v.resolved,
                "reward": v.reward,
                "model_called": v.called,
                "test_report": v.test_report,
                "duration_s": t0.elapsed().as_secs_f64(),
            }));
            Ok(())
        }
        Err(e) => Err(WorldSimError::model_from("simulated grading", e)),
    }
}

/// Shadow mode: record the reward model's verdict next to the real one (`None` when real
/// grading failed: then only the prediction is kept, outside the confusion matrix).
pub fn record_shadow_reward(
    run: &SimRun,
    traj: &mut Trajectory,
    predicted: (Result<RewardVerdict, ModelFailure>, u64),
    real: Option<bool>,
) {
    let mut log = log_of(traj, run);
    log.record_reward(predicted.0, real, predicted.1);
    store_log(traj, &log);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_files_carry_a_world_table() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.toml");
        std::fs::write(
            &p,
            "kind = \"gold-replay\"\n\n[world]\nmode = \"shadow\"\nmodel = \"openai:swt\"\nbase_url = \"http://127.0.0.1:9/v1\"\n",
        )
        .unwrap();
        let policy = crate::policy::PolicyConfig::load(&p).unwrap();
        let w = policy.world.clone().unwrap();
        assert_eq!(w.mode, ExecutionMode::Shadow);
        assert_eq!(w.model.as_deref(), Some("openai:swt"));
        // Part of the recorded policy: a run directory never mixes modes on resume.
        assert!(policy.to_json().to_string().contains("\"shadow\""));
        // Without the table nothing changes in the recorded policy.
        let plain = crate::policy::PolicyConfig::parse("gold-replay").unwrap();
        assert!(!plain.to_json().to_string().contains("world"));
        std::fs::write(&p, "kind = \"gold-replay\"\n\n[world]\nmode = \"dream\"\n").unwrap();
        let e = crate::policy::PolicyConfig::load(&p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("dream"), "{e}");
    }

    /// An engine stand-in: never called, it only says which model it is and its window.
    struct Engine(&'static str, usize);
    impl ChatBackend for Engine {
        fn complete(
            &self,
            _req: dojo_llm::ChatRequest,
        ) -> dojo_llm::BoxFuture<'_, Result<dojo_llm::ChatResponse, dojo_llm::LlmError>> {
            Box::pin(async {
                Err(dojo_llm::LlmError::Backend {
                    endpoint: self.0.into(),
                    detail: "not called".into(),
                })
            })
        }
        fn describe(&self) -> String {
            format!("embedded:{}", self.0)
        }
        fn context_tokens(&self) -> Option<usize> {
            Some(self.1)
        }
    }

    fn engines(models: &[&'static str]) -> EmbeddedWorld {
        engines_with(models, 8_192)
    }

    fn engines_with(models: &[&'static str], window: usize) -> EmbeddedWorld {
        let mut e = EmbeddedWorld::default();
        for m in models {
            e.insert(m.to_string(), Arc::new(Engine(m, window)));
        }
        e
    }

    #[test]
    fn the_embedded_world_model_has_a_reply_budget() {
        let policy = WorldPolicy {
            mode: ExecutionMode::Sim,
            model: Some("embedded".into()),
            swr_samples: Some(3),
            ..Default::default()
        };
        let client = world_client(&policy, &engines(&["default"])).unwrap();
        let c = client.config();
        assert_eq!(c.swt_max_tokens, Some(EMBEDDED_MAX_TOKENS));
        assert_eq!(c.swr_max_tokens, Some(EMBEDDED_MAX_TOKENS));
        assert!(!c.swt_json_mode);
        assert_eq!(c.swr_samples, 3);
        assert_eq!(client.describe_roles(), "world client (embedded:default)");
        // Its prompts fit its 8K window with the reply.
        assert!(c.caps.max_prompt_chars() * 2 / 5 + EMBEDDED_MAX_TOKENS as usize <= 8_192);
        assert!(c.caps.problem < dojo_world::Caps::swe_world().problem);
    }

    #[test]
    fn world_caps_from_the_policy_reach_both_roles() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.toml");
        std::fs::write(
            &p,
            "kind = \"gold-replay\"\n\n[world]\nmode = \"shadow\"\nmodel = \"embedded:/ckpt\"\n\n[world.caps]\nexecuted_code = 2000\nmax_files = 2\n",
        )
        .unwrap();
        let w = crate::policy::PolicyConfig::load(&p)
            .unwrap()
            .world
            .unwrap();
        assert_eq!(w.embedded_models(), ["/ckpt"]);
        // A checkpoint whose window holds SWE-World's caps.
        let client = world_client(&w, &engines_with(&["/ckpt"], 1 << 20)).unwrap();
        let c = client.config();
        // Named keys change; the others keep SWE-World's caps.
        assert_eq!(c.caps.executed_code, 2000);
        assert_eq!(c.caps.max_files, 2);
        assert_eq!(c.caps.problem, dojo_world::Caps::swe_world().problem);
        std::fs::write(&p, "kind = \"gold-replay\"\n\n[world.caps]\nexecuted = 1\n").unwrap();
        let e = crate::policy::PolicyConfig::load(&p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("executed"), "{e}");
        // The bundled model, and nothing to load for real runs or remote models.
        let w = |mode, m: &str| WorldPolicy {
            mode,
            model: Some(m.into()),
            ..Default::default()
        };
        assert_eq!(
            w(ExecutionMode::Sim, "embedded").embedded_models(),
            ["default"]
        );
        assert!(
            w(ExecutionMode::Real, "embedded")
                .embedded_models()
                .is_empty()
        );
        assert!(
            w(ExecutionMode::Sim, "openai:m")
                .embedded_models()
                .is_empty()
        );
    }

    #[test]
    fn each_role_can_have_its_own_model() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.toml");
        // SWE-World's layout: one trained checkpoint per role.
        std::fs::write(
            &p,
            "kind = \"gold-replay\"\n\n[world]\nmode = \"shadow\"\nswt_model = \"embedded:/swt\"\nswr_model = \"embedded:/swr\"\n",
        )
        .unwrap();
        let w = crate::policy::PolicyConfig::load(&p)
            .unwrap()
            .world
            .unwrap();
        assert_eq!(w.role_model(Role::Swt), Some("embedded:/swt"));
        assert_eq!(w.role_model(Role::Swr), Some("embedded:/swr"));
        assert_eq!(w.embedded_models(), ["/swt", "/swr"]);
        let client = world_client(&w, &engines(&["/swt", "/swr"])).unwrap();
        assert_eq!(
            client.describe_roles(),
            "world client (SWT embedded:/swt, SWR embedded:/swr)"
        );
        // A role's key overrides `model` for that role only; one checkpoint loads once.
        let w = WorldPolicy {
            mode: ExecutionMode::Sim,
            model: Some("embedded:/both".into()),
            swr_model: Some("embedded:/both".into()),
            ..Default::default()
        };
        assert_eq!(w.embedded_models(), ["/both"]);
        // Mixed: an embedded SWT and a served SWR, each configured for its kind.
        let w = WorldPolicy {
            mode: ExecutionMode::Sim,
            model: Some("embedded".into()),
            swr_model: Some("openai:swr-32b".into()),
            swr_base_url: Some("http://127.0.0.1:9/v1".into()),
            ..Default::default()
        };
        assert_eq!(w.embedded_models(), ["default"]);
        assert_eq!(w.role_base_url(Role::Swr), Some("http://127.0.0.1:9/v1"));
        assert_eq!(w.role_base_url(Role::Swt), None);
        let client = world_client(&w, &engines(&["default"])).unwrap();
        let c = client.config();
        assert_eq!(c.swr_model, "swr-32b");
        assert_eq!(
            c.swr_max_tokens,
            WorldClientConfig::default().swr_max_tokens
        );
        assert_eq!(c.swt_max_tokens, Some(EMBEDDED_MAX_TOKENS));
        assert_eq!(
            client.describe_roles(),
            "world client (SWT embedded:default, SWR swr-32b)"
        );
        // The other role's engine missing is an error naming the role.
        let w = WorldPolicy {
            mode: ExecutionMode::Sim,
            swt_model: Some("embedded:/swt".into()),
            ..Default::default()
        };
        let e = world_client(&w, &engines(&["/swt"])).err().unwrap();
        assert!(matches!(e, WorldSimError::Settings { .. }), "{e}");
        let e = e.to_string();
        assert!(e.contains("for SWR") && e.contains("swr_model"), "{e}");
    }

    #[test]
    fn a_world_policy_needs_a_usable_model() {
        let p = |m: Option<&str>| WorldPolicy {
            mode: ExecutionMode::Sim,
            model: m.map(str::to_string),
            base_url: Some("http://127.0.0.1:9/v1".into()),
            api_key_env: None,
            ..Default::default()
        };
        let none = EmbeddedWorld::default();
        let e = world_model(&p(None), &none).err().unwrap().to_string();
        assert!(e.contains("needs a world model for SWT"), "{e}");
        let e = world_model(&p(Some("gpt")), &none)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("not one of embedded, embedded:MODEL, openai:MODEL"),
            "{e}"
        );
        let e = world_model(&p(Some("embedded")), &none)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("engine"), "{e}");
        assert!(world_model(&p(Some("openai:swt")), &none).is_ok());
    }
}
