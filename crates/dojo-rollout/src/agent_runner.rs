//! The real [`Runner`]: task → prepared pristine tree + Python env → sandbox → agent ⇄ policy →
//! workspace diff → grade → [`Trajectory`].
//!
//! Every failure on the way is classified: preparation and sandbox failures are `env_error`
//! records, a dead endpoint is the agent loop's `llm_error`, a grader that could not run marks the
//! record `infra_failure`; none of them is ever scored as unresolved. Preparation (download, unpack,
//! pristine tree, venv) happens once per task and is shared by its K samples.
//!
//! With a [`WorldWriter`] (on by default in `dojo rollout`), the agent's workspace records the
//! commands that run Python or tests and the grade records the test report, as world-model
//! training data (see [`crate::world_capture`]).

use std::sync::Arc;
use std::time::Instant;

use dojo_agent::{Agent, AgentConfig, TaskInput, ToolRegistry};
use dojo_grade::{GradeOptions, grade_in_sandbox};
use dojo_llm::{BoxFuture, ChatBackend};
use dojo_sandbox::{Sandbox, SandboxOptions};
use dojo_task::{EnvRegistry, Preparer, Task};
use dojo_trajectory::{Blame, Event, HostFingerprint, PolicyInfo, StopReason, Trajectory};
use dojo_world::record::WorldWriter;

use crate::policy::{PolicyConfig, PolicyKind};
use crate::prepared::Prepared;
use crate::world_capture::{CapturingWorkspace, SwtCapture, swr_record};

use crate::scheduler::{Job, RolloutRecord, Runner};
use crate::store::{Key, Keyed};
use crate::summary::SampleOutcome;

impl Keyed for Trajectory {
    fn key(&self) -> Key {
        Key {
            task_id: self.task_id.clone(),
            sample_index: self.sample_index,
        }
    }
}

impl RolloutRecord for Trajectory {
    fn outcome(&self) -> SampleOutcome {
        SampleOutcome {
            task_id: self.task_id.clone(),
            sample_index: self.sample_index,
            resolved: self.is_resolved(),
            infra_error: self.is_infrastructure_failure(),
            stop_reason: self.stop_reason.as_str().to_string(),
            forced: self.forced_submission,
            steps: self.steps.len() as u32,
            tokens: self
                .usage
                .total_tokens
                .max(self.usage.prompt_tokens + self.usage.completion_tokens),
            wall_secs: self.wall_ms as f64 / 1000.0,
            patch: self.patch.clone().unwrap_or_default(),
        }
    }
}

/// What the agent loop must provide: one rollout in `sandbox` against `backend`, returning the
/// record (messages, steps, stop reason, forced flag, patch). [`DojoAgent`] is the real one.
///
/// Execution model: the scheduler calls `run` concurrently, one call per episode (up to the
/// run's workers), each with its own sandbox, which the call may change freely and the caller
/// tears down. `run` never fails: every failure (a model error, a tool crash, a budget) ends the
/// episode with its stop reason in the record, and infrastructure failures are marked so that
/// they are never scored as the agent's. It does not retry model calls (the backend does) and
/// does not grade (the caller does, after `run`). A cancelled future leaves no record: the
/// episode is run again on resume.
pub trait AgentLoop: Send + Sync + 'static {
    fn run<'a>(
        &'a self,
        sandbox: &'a Sandbox,
        prepared: &'a Prepared,
        backend: Arc<dyn ChatBackend>,
        policy: PolicyInfo,
        job: &'a Job,
        environment: HostFingerprint,
    ) -> BoxFuture<'a, Trajectory>;
}

/// The agent loop of `dojo-agent` with a named tool set.
pub struct DojoAgent {
    pub config: AgentConfig,
}

impl DojoAgent {
    /// From a policy's `agent` table. Scripted policies emit native tool calls, so they default to
    /// the native action format; everything else keeps dojo-agent's defaults.
    pub fn from_policy(policy: &PolicyConfig) -> Result<DojoAgent, AgentSettingsError> {
        let mut map = policy.agent.clone();
        if matches!(
            policy.kind,
            PolicyKind::GoldReplay { .. } | PolicyKind::Replay { .. }
        ) {
            map.entry("action_format")
                .or_insert_with(|| "native".into());
        }
        Self::from_settings(map)
    }

    /// From agent settings alone (a policy's `agent` table; `dojo env serve`'s step-wise envs,
    /// whose turns come from the client).
    pub fn from_settings(
        map: serde_json::Map<String, serde_json::Value>,
    ) -> Result<DojoAgent, AgentSettingsError> {
        let config: AgentConfig = serde_json::from_value(serde_json::Value::Object(map))
            .map_err(AgentSettingsError::Invalid)?;
        if ToolRegistry::named(&config.tool_set).is_none() {
            return Err(AgentSettingsError::UnknownToolSet(config.tool_set));
        }
        Ok(DojoAgent { config })
    }
}

/// A policy's `[agent]` table that does not make an agent.
#[derive(Debug, thiserror::Error)]
pub enum AgentSettingsError {
    #[error("[agent] settings: {0}")]
    Invalid(#[source] serde_json::Error),
    #[error("[agent] tool_set {0:?} is not a known tool set")]
    UnknownToolSet(String),
}

/// Why a policy gave an episode no backend: an infrastructure failure of that episode.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error(transparent)]
    Gold(#[from] crate::gold::GoldError),
    #[error("no recorded trajectory for {key} in {source_file}")]
    NoRecording { key: String, source_file: String },
    /// Another factory's own reason (`dojo env serve`'s step-wise envs).
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

/// Why a task could not be prepared for an episode.
#[derive(Debug, thiserror::Error)]
enum PrepareError {
    #[error("no task at index {0}")]
    NoTask(usize),
    #[error(transparent)]
    Sim(#[from] crate::world_sim::WorldSimError),
    #[error(transparent)]
    Task(#[from] dojo_task::TaskError),
}

/// Template variables of a task for the agent's prompts.
pub fn task_vars(task: &Task) -> serde_json::Map<String, serde_json::Value> {
    let mut vars = serde_json::Map::new();
    vars.insert(
        "problem_statement".into(),
        task.problem_statement.clone().into(),
    );
    vars.insert("instance_id".into(), task.instance_id.clone().into());
    vars.insert("repo".into(), task.repo.clone().into());
    vars.insert("hints_text".into(), task.hints_text.clone().into());
    vars
}

impl AgentLoop for DojoAgent {
    fn run<'a>(
        &'a self,
        sandbox: &'a Sandbox,
        prepared: &'a Prepared,
        backend: Arc<dyn ChatBackend>,
        policy: PolicyInfo,
        job: &'a Job,
        environment: HostFingerprint,
    ) -> BoxFuture<'a, Trajectory> {
        Box::pin(async move {
            let tools = ToolRegistry::named(&self.config.tool_set).unwrap_or_default();
            let agent = match Agent::new(self.config.clone(), tools, backend) {
                Ok(a) => a.with_policy(policy),
                Err(e) => {
                    let mut t = Trajectory::new(job.task_id.clone(), job.sample_index);
                    t.stop_reason = StopReason::EnvError;
                    t.infra_failure = true;
                    t.stop_detail = Some(format!("agent configuration: {e}"));
                    return t;
                }
            };
            let input = TaskInput {
                task_id: job.task_id.clone(),
                sample_index: job.sample_index,
                vars: task_vars(&prepared.task),
                environment,
            };
            match &prepared.sim {
                Some(sim) => {
                    // The simulated environment reads the workspace once per command and hands
                    // that read to capture for the commands it runs for real.
                    let capture = prepared
                        .world
                        .as_ref()
                        .map(|writer| SwtCapture::new(writer, prepared, job.sample_index));
                    let mut sim_ws = dojo_world::sim::SimWorkspace::new(
                        sandbox,
                        sim.mode,
                        sim.model.clone(),
                        sim.task.clone(),
                    );
                    if let Some(c) = &capture {
                        sim_ws = sim_ws.with_observer(c);
                    }
                    let mut traj = agent.run(&sim_ws, &input).await;
                    traj.metadata.insert(
                        dojo_world::sim::METADATA_KEY.into(),
                        sim_ws.into_log().to_json(),
                    );
                    traj
                }
                None => {
                    // Capture sits next to the sandbox, so it records only commands that ran.
                    let capture = prepared.world.as_ref().map(|writer| {
                        CapturingWorkspace::new(sandbox, writer, prepared, job.sample_index)
                    });
                    let ws: &dyn dojo_agent::Workspace = match &capture {
                        Some(c) => c,
                        None => sandbox,
                    };
                    agent.run(ws, &input).await
                }
            }
        })
    }
}

/// Makes the per-rollout backend of a policy (scripted ones need the task and its tree).
///
/// Execution model: `backend` is called once per episode, concurrently from the scheduler's
/// tasks, before the episode starts; a model policy returns clones of one shared client (its
/// concurrency limit then spans the run), a scripted one builds a fresh script per episode. An
/// `Err` is an infrastructure failure of that episode (recorded, never scored); it is not
/// retried here.
pub trait BackendFactory: Send + Sync + 'static {
    fn backend(
        &self,
        prepared: &Prepared,
        sample_index: u32,
    ) -> Result<Arc<dyn ChatBackend>, BackendError>;
    /// Recorded in every trajectory.
    fn policy_info(&self) -> dojo_trajectory::PolicyInfo;
}

/// The grader could not run: an infrastructure failure, recorded as such.
fn grading_failed(traj: &mut Trajectory, message: String) {
    traj.infra_failure = true;
    traj.events.push(Event {
        step: traj.steps.len() as u32,
        kind: "grading_error".into(),
        blame: Blame::Infrastructure,
        message,
    });
}

/// Runs rollouts for real.
pub struct AgentRunner<A, B> {
    pub tasks: Vec<Task>,
    pub agent: A,
    pub backends: B,
    /// Each task's environment spec.
    pub registry: EnvRegistry,
    /// Prepares each task once; its K samples (and any other user of the same preparer) share
    /// the tree and venv.
    pub preparer: Arc<Preparer>,
    pub sandbox: SandboxOptions,
    pub grade: GradeOptions,
    pub llm_limit: Arc<tokio::sync::Semaphore>,
    pub run_id: String,
    /// World-model records (`world.jsonl`) of this run; `None`: not captured.
    pub world: Option<Arc<WorldWriter>>,
    /// The simulated environment (`--execution`); `None`: real execution.
    pub sim: Option<crate::world_sim::SimSetup>,
}

impl<A: AgentLoop, B: BackendFactory> AgentRunner<A, B> {
    pub fn new(
        tasks: Vec<Task>,
        agent: A,
        backends: B,
        registry: EnvRegistry,
        preparer: Arc<Preparer>,
        llm_concurrency: usize,
    ) -> Self {
        AgentRunner {
            tasks,
            agent,
            backends,
            registry,
            preparer,
            sandbox: SandboxOptions::default(),
            grade: GradeOptions::default(),
            llm_limit: Arc::new(tokio::sync::Semaphore::new(llm_concurrency.max(1))),
            run_id: String::new(),
            world: None,
            sim: None,
        }
    }

    async fn prepared(&self, job: &Job) -> Result<Prepared, PrepareError> {
        let task = self
            .tasks
            .get(job.task_index)
            .ok_or(PrepareError::NoTask(job.task_index))?;
        if let Some(setup) = &self.sim {
            let p = crate::world_sim::prepare(setup, task, &self.registry, &self.preparer).await?;
            return Ok(Prepared {
                task: task.clone(),
                pristine: p.pristine,
                env: p.env,
                repo_env: p.repo_env,
                world: self.world.clone(),
                sim: Some(p.run),
            });
        }
        let repo_env = self.registry.resolve(task)?;
        let tree = self.preparer.prepare(task, &repo_env).await?;
        Ok(Prepared {
            task: task.clone(),
            pristine: tree.pristine.clone(),
            env: Some(tree.env.clone()),
            repo_env,
            world: self.world.clone(),
            sim: None,
        })
    }

    fn fail(&self, traj: &mut Trajectory, t0: Instant, stop: StopReason, kind: &str, msg: String) {
        traj.stop_reason = stop;
        traj.infra_failure = true;
        traj.stop_detail = Some(msg.clone());
        traj.events.push(Event {
            step: traj.steps.len() as u32,
            kind: kind.into(),
            blame: Blame::Infrastructure,
            message: msg,
        });
        traj.wall_ms = t0.elapsed().as_millis() as u64;
    }

    fn new_traj(&self, job: &Job) -> Trajectory {
        let mut traj = Trajectory::new(job.task_id.clone(), job.sample_index);
        traj.run_id = (!self.run_id.is_empty()).then(|| self.run_id.clone());
        traj.policy = self.backends.policy_info();
        traj.environment.dojo_version = env!("CARGO_PKG_VERSION").into();
        traj.started_at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        traj
    }

    async fn run_one(&self, job: Job) -> Trajectory {
        let t0 = Instant::now();
        let mut traj = self.new_traj(&job);
        let prepared = match self.prepared(&job).await {
            Ok(p) => p,
            Err(e) => {
                self.fail(
                    &mut traj,
                    t0,
                    StopReason::EnvError,
                    "env_error",
                    format!("preparing the task: {e}"),
                );
                return traj;
            }
        };
        traj.environment.pristine = Some(prepared.pristine.id.clone());
        traj.environment.python_env = prepared.env.as_ref().map(|e| e.id.clone());
        let backend = match self.backends.backend(&prepared, job.sample_index) {
            Ok(b) => Arc::new(crate::policy::LimitedBackend::new(
                b,
                self.llm_limit.clone(),
            )) as Arc<dyn ChatBackend>,
            Err(e) => {
                self.fail(
                    &mut traj,
                    t0,
                    StopReason::LlmError,
                    "llm_error",
                    format!("policy: {e}"),
                );
                return traj;
            }
        };
        let mut sb =
            match Sandbox::create(&prepared.pristine, prepared.env.as_ref(), &self.sandbox).await {
                Ok(sb) => sb,
                Err(e) => {
                    self.fail(
                        &mut traj,
                        t0,
                        StopReason::EnvError,
                        "env_error",
                        format!("creating the sandbox: {e}"),
                    );
                    return traj;
                }
            };
        let env = traj.environment.clone();
        let started = traj.started_at_ms;
        traj = self
            .agent
            .run(
                &sb,
                &prepared,
                backend,
                self.backends.policy_info(),
                &job,
                env,
            )
            .await;
        traj.run_id = (!self.run_id.is_empty()).then(|| self.run_id.clone());
        traj.started_at_ms = started;
        traj.environment.sandbox_backend = Some(format!("{:?}", sb.backend()).to_lowercase());
        let swr = self.grade(&mut sb, &prepared, &job, &mut traj).await;
        self.write_world(&job, &traj, swr);
        if let Err(e) = sb.teardown().await {
            tracing::warn!(task = %job.task_id, "sandbox teardown: {e}");
        }
        traj.wall_ms = t0.elapsed().as_millis() as u64;
        traj
    }
}

impl<A: AgentLoop, B: BackendFactory> AgentRunner<A, B> {
    /// Grades a finished rollout: at every stop (forced submissions too), never after an
    /// infrastructure stop. Returns the world-model record of the grading, when captured.
    async fn grade(
        &self,
        sb: &mut Sandbox,
        prepared: &Prepared,
        job: &Job,
        traj: &mut Trajectory,
    ) -> Option<dojo_world::WorldRecord> {
        let mut swr = None;
        let sim = prepared.sim.as_ref();
        if !traj.stop_reason.is_infrastructure() && !traj.infra_failure {
            let patch = traj.patch.clone().unwrap_or_default();
            if let Some(run) = sim.filter(|r| r.simulated_grading()) {
                // No environment to grade in: the reward model's verdict is the grade.
                if let Err(e) = crate::world_sim::grade_simulated(run, sb, traj).await {
                    grading_failed(traj, e.to_string());
                }
            } else {
                swr = self.grade_in_env(sb, prepared, job, traj, &patch).await;
            }
        } else {
            traj.infra_failure = true;
        }
        swr
    }

    /// Grades `patch` in the reset sandbox (with the reward model's shadow prediction, before
    /// the reset, in shadow mode).
    async fn grade_in_env(
        &self,
        sb: &mut Sandbox,
        prepared: &Prepared,
        job: &Job,
        traj: &mut Trajectory,
        patch: &str,
    ) -> Option<dojo_world::WorldRecord> {
        let mut swr = None;
        let sim = prepared.sim.as_ref();
        // Shadow: the reward model judges the same final state, before the reset.
        let shadow = match sim {
            Some(run) if run.mode == dojo_world::route::ExecutionMode::Shadow => {
                Some(crate::world_sim::predict_reward(run, sb, patch).await)
            }
            _ => None,
        };
        match sb.reset().await {
            Ok(()) => {
                let report = grade_in_sandbox(
                    sb,
                    &prepared.task,
                    &prepared.repo_env,
                    Some(patch),
                    &self.grade,
                )
                .await;
                traj.set_grade(report.resolved);
                if let Some(w) = &self.world {
                    swr = swr_record(sb, prepared, job.sample_index, patch, &report, w).await;
                }
                if report.infra_failure {
                    grading_failed(traj, report.error.clone().unwrap_or_default());
                }
                traj.grading = Some(report.to_json());
                if let (Some(run), Some(predicted)) = (sim, shadow) {
                    let real = (!report.infra_failure).then_some(report.resolved);
                    crate::world_sim::record_shadow_reward(run, traj, predicted, real);
                }
            }
            Err(e) => {
                grading_failed(traj, format!("resetting the sandbox for grading: {e}"));
            }
        }
        swr
    }

    /// Writes a finished rollout's world records before its trajectory is stored. A rollout
    /// that failed on infrastructure runs again on resume, so its buffered records are dropped
    /// rather than captured twice. A write failure loses the records, not the rollout.
    fn write_world(&self, job: &Job, traj: &Trajectory, swr: Option<dojo_world::WorldRecord>) {
        let Some(w) = &self.world else { return };
        if traj.is_infrastructure_failure() {
            w.discard_pending(&job.task_id, job.sample_index);
            return;
        }
        if let Err(e) = w.write_rollout(&job.task_id, job.sample_index, swr) {
            tracing::warn!(task = %job.task_id, "world records not written: {e}");
        }
    }
}

impl<A: AgentLoop, B: BackendFactory> Runner for AgentRunner<A, B> {
    type Rec = Trajectory;
    fn run(&self, job: Job) -> impl std::future::Future<Output = Trajectory> + Send {
        self.run_one(job)
    }
    fn infra_failure(&self, job: &Job, message: String) -> Trajectory {
        let mut traj = self.new_traj(job);
        self.fail(
            &mut traj,
            Instant::now(),
            StopReason::EnvError,
            "env_error",
            message,
        );
        traj
    }
}
