//! The simulated environment as a workspace: [`SimWorkspace`] wraps the real sandbox the agent's
//! tools already use and decides per command ([`crate::route`]) whether the sandbox runs it,
//! the transition model (SWT) predicts it, or both (shadow). Reads, edits, search and plain shell
//! commands always run for real on the copy-on-write checkout, so the agent's patch is real;
//! only running Python or tests is simulated. At the end [`simulated_reward`] asks the reward
//! model (SWR) for the verdict (an empty patch is unresolved without a call).
//!
//! The models sit behind the small [`WorldModel`] trait (the prompts, reply parsing and
//! endpoints live with the client that implements it). A model that fails, times out or
//! answers with something unparseable is an infrastructure failure: in `sim`/`hybrid` the
//! command fails with a [`SandboxError`], which stops the rollout as `env_error` (never an
//! invented observation); in `shadow` the agent already has the real answer and the failure is
//! counted in the drift summary, apart from the agreement figures.
//!
//! Everything routed away from plain execution is logged in a [`SimLog`] (schema-versioned,
//! stored in the trajectory's metadata under [`METADATA_KEY`]) with its drift where measured.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dojo_grade::parsers::Parser;
use dojo_llm::BoxFuture;
use dojo_rundir::clip::{Keep, Unit, clip, cut};
use dojo_sandbox::Workspace;
use dojo_sandbox::{ExecOutput, ExecRequest, Sandbox, SandboxError, WORKSPACE};
use serde::{Deserialize, Serialize};

use crate::classify::{CommandClass, PythonRun};
use crate::client::{WorldClient, WorldError, rollout_seed};
use crate::context::{FileView, WorldTask};
use crate::drift::{DriftSummary, Observed, TransitionDrift, compare_transition};
use crate::observe::{self, ReadLimits, Snapshot};
use crate::route::{ExecutionMode, Route, route};

/// Version of the [`SimLog`] layout.
pub const SIM_LOG_SCHEMA_VERSION: u32 = 1;
/// Key of the [`SimLog`] in a trajectory's `metadata`.
pub const METADATA_KEY: &str = "world";
/// The reply to an install: the simulated environment has nothing to install into.
pub const CANNED_INSTALL: &str = "Successfully installed packages.\n";
/// Characters of a command or predicted output kept in the log.
const LOG_TEXT_CAP: usize = 4000;

/// What the world models know of the task, fixed for a rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimTask {
    /// What the models are told (flattened: the serialized layout is unchanged).
    #[serde(flatten)]
    pub world: WorldTask,
    pub test_patch: Option<String>,
    /// The task's test files (`dojo_grade::guard::task_test_files`): what SWR is shown, as in
    /// the SWR records captured from real grading.
    #[serde(default)]
    pub test_files: Vec<String>,
    /// The grading log parser, for test-status drift.
    pub parser: Parser,
    /// Whether this sandbox has the task's Python environment (hybrid runs cheap commands
    /// for real only then).
    pub has_environment: bool,
    /// The base commit's tree on the host (base versions of executed files); without it they
    /// are read with `git show HEAD:` in the workspace when it has that history.
    #[serde(skip)]
    pub pristine_dir: Option<std::path::PathBuf>,
}

impl Default for SimTask {
    fn default() -> Self {
        SimTask {
            world: WorldTask::default(),
            test_patch: None,
            test_files: Vec::new(),
            parser: Parser::Pytest,
            has_environment: false,
            pristine_dir: None,
        }
    }
}

/// One command for the transition model.
#[derive(Debug, Clone)]
pub struct TransitionQuery<'a> {
    pub task: &'a SimTask,
    pub command: &'a str,
    pub files: Vec<FileView>,
    pub agent_patch: String,
}

/// The final state for the reward model.
#[derive(Debug, Clone)]
pub struct RewardQuery<'a> {
    pub task: &'a SimTask,
    pub agent_patch: &'a str,
    /// The test files with the task's test patch applied.
    pub test_files: Vec<FileView>,
}

/// The transition model's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PredictedOutput {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: i32,
}

/// The reward model's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RewardVerdict {
    pub resolved: bool,
    /// The predicted reward (the mean over samples when several were drawn).
    pub reward: f64,
    pub test_report: String,
    /// Whether the model was asked at all (an empty patch is unresolved without a call).
    pub called: bool,
    /// Samples drawn (and parsed) for `reward`.
    #[serde(default)]
    pub samples: u32,
    /// The seed of the coin that broke an exact tie of the samples (`None`: no tie).
    #[serde(default)]
    pub tie_seed: Option<u64>,
}

/// Why a world model gave no answer. Every variant is an infrastructure failure: it is never
/// the agent's doing and never becomes a reward or an observation.
///
/// The causes are kept as text, not as `#[source]` errors: a failure is cloned into each
/// rollout that asked, compared in tests and written into the episode's record, and the
/// backends' errors (HTTP, engine, parse) are neither `Clone` nor comparable. The text is the
/// cause's whole chain ([`dojo_rundir::error_chain`]), so nothing of it is lost.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelFailure {
    #[error("world model error: {0}")]
    Model(String),
    #[error("world model timed out: {0}")]
    Timeout(String),
    #[error("world model reply could not be parsed: {0}")]
    Unparseable(String),
    /// The question could not be asked (e.g. a reward for a task that lists no tests): the
    /// task's data is at fault, still never the agent.
    #[error("world model context: {0}")]
    Context(String),
}

/// The transition and reward models, however they are served.
///
/// **Execution model.** One model serves every rollout of a run, shared behind an `Arc`: calls
/// from different rollouts arrive concurrently (from one multi-threaded tokio runtime), while
/// one rollout asks at most one question at a time (`transition` for each command the router
/// simulates, in the episode's order; `reward` once, after the episode). An implementation
/// batches or queues as its backend needs; it must not block a runtime thread. A future may be
/// dropped before it finishes (the episode's time ran out). Every `Err` is an infrastructure
/// failure ([`ModelFailure`]): it is never turned into an observation or a reward.
pub trait WorldModel: Send + Sync {
    /// Predict the output of a command that runs Python or tests.
    fn transition<'a>(
        &'a self,
        query: &'a TransitionQuery<'a>,
    ) -> BoxFuture<'a, Result<PredictedOutput, ModelFailure>>;
    /// Judge the final patch.
    fn reward<'a>(
        &'a self,
        query: &'a RewardQuery<'a>,
    ) -> BoxFuture<'a, Result<RewardVerdict, ModelFailure>>;
    /// Recorded in the log (`openai:MODEL`, `embedded`...).
    fn describe(&self) -> String;
}

/// One command the router did not simply run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommandRecord {
    pub command: String,
    /// `python`, `install` or `blocked`.
    pub class: String,
    /// `simulate`, `shadow`, `canned`, `refuse` or `real` (hybrid running Python for real).
    pub route: String,
    pub files: Vec<String>,
    pub prediction: Option<PredictedOutput>,
    pub drift: Option<TransitionDrift>,
    /// The model failure, when there was one (infrastructure).
    pub error: Option<String>,
    pub model_ms: u64,
    pub real_ms: Option<u64>,
}

/// The reward model's verdict of a rollout and, in shadow, the real one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RewardRecord {
    pub predicted: Option<RewardVerdict>,
    pub real: Option<bool>,
    pub error: Option<String>,
    pub model_ms: u64,
}

/// Everything a rollout's simulated environment did, for the trajectory and the run report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimLog {
    pub schema_version: u32,
    pub mode: ExecutionMode,
    pub world_model: String,
    pub commands: Vec<CommandRecord>,
    pub reward: Option<RewardRecord>,
    pub drift: DriftSummary,
}

impl SimLog {
    pub fn new(mode: ExecutionMode, world_model: String) -> SimLog {
        SimLog {
            schema_version: SIM_LOG_SCHEMA_VERSION,
            mode,
            world_model,
            commands: Vec::new(),
            reward: None,
            drift: DriftSummary::default(),
        }
    }

    /// Record a reward verdict (or failure), and in shadow mode its agreement with the real
    /// grade.
    pub fn record_reward(
        &mut self,
        predicted: Result<RewardVerdict, ModelFailure>,
        real: Option<bool>,
        model_ms: u64,
    ) {
        let (predicted, error) = match predicted {
            Ok(v) => (Some(v), None),
            Err(e) => (None, Some(e.to_string())),
        };
        match (&predicted, real) {
            (Some(v), Some(r)) => self.drift.reward.record(v.resolved, r),
            (None, _) => self.drift.reward_failures += 1,
            (Some(_), None) => {}
        }
        self.reward = Some(RewardRecord {
            predicted,
            real,
            error,
            model_ms,
        });
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// The log stored in a trajectory's metadata, if any (another schema version: `None`).
    pub fn from_metadata(metadata: &serde_json::Map<String, serde_json::Value>) -> Option<SimLog> {
        let v = metadata.get(METADATA_KEY)?;
        let log: SimLog = serde_json::from_value(v.clone()).ok()?;
        (log.schema_version == SIM_LOG_SCHEMA_VERSION).then_some(log)
    }
}

/// Told about every command that runs Python or tests for real, with the workspace as it was
/// before it ran: how `dojo rollout` records SWT training data from the commands a simulated
/// environment runs for real (hybrid, shadow), from the same [`Snapshot`] the model was shown,
/// so the workspace is read once per command.
pub trait RealRunObserver: Send + Sync {
    fn observe(&self, command: &str, before: &Snapshot, out: &ExecOutput);
    /// How much of the workspace to read (the same for the model and the record).
    fn read_limits(&self) -> ReadLimits;
}

/// A workspace whose commands are routed between the real sandbox and the world model.
pub struct SimWorkspace<'a> {
    inner: &'a dyn Workspace,
    mode: ExecutionMode,
    world: Arc<dyn WorldModel>,
    task: Arc<SimTask>,
    observer: Option<&'a dyn RealRunObserver>,
    log: Mutex<SimLog>,
}

impl<'a> SimWorkspace<'a> {
    pub fn new(
        inner: &'a dyn Workspace,
        mode: ExecutionMode,
        world: Arc<dyn WorldModel>,
        task: Arc<SimTask>,
    ) -> SimWorkspace<'a> {
        let log = SimLog::new(mode, world.describe());
        SimWorkspace {
            inner,
            mode,
            world,
            task,
            observer: None,
            log: Mutex::new(log),
        }
    }

    /// Report the commands that run Python or tests for real to `observer`.
    pub fn with_observer(mut self, observer: &'a dyn RealRunObserver) -> SimWorkspace<'a> {
        self.observer = Some(observer);
        self
    }

    pub fn task(&self) -> &SimTask {
        &self.task
    }

    /// The log so far.
    pub fn log(&self) -> SimLog {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The log, for the trajectory.
    pub fn into_log(self) -> SimLog {
        self.log.into_inner().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, rec: CommandRecord, drift: Option<&TransitionDrift>, failed: bool) {
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = drift {
            log.drift.add_transition(d);
        }
        if failed && rec.route == "shadow" {
            log.drift.transition_failures += 1;
        }
        log.commands.push(rec);
    }

    fn limits(&self) -> ReadLimits {
        self.observer.map(|o| o.read_limits()).unwrap_or_default()
    }

    /// The workspace before `run` executes ([`observe::snapshot`]).
    async fn snapshot(&self, run: &PythonRun, cwd: &str) -> Result<Snapshot, SandboxError> {
        let base = self.task.pristine_dir.as_deref();
        observe::snapshot(self.inner, run, cwd, base, self.limits()).await
    }

    /// Runs `req` for real; an observer is told about it with the state before it ran.
    async fn run_real(
        &self,
        req: &ExecRequest,
        script: &str,
        before: Option<&Snapshot>,
    ) -> Result<ExecOutput, SandboxError> {
        let out = self.inner.exec(req).await?;
        if let (Some(o), Some(b)) = (self.observer, before) {
            o.observe(script, b, &out);
        }
        Ok(out)
    }

    async fn predict(
        &self,
        script: &str,
        before: &Result<Snapshot, SandboxError>,
    ) -> (Vec<String>, Result<PredictedOutput, ModelFailure>, u64) {
        let snap = match before {
            Ok(s) => s,
            Err(e) => {
                return (
                    Vec::new(),
                    Err(ModelFailure::Model(format!(
                        "reading the workspace for the model: {}",
                        dojo_rundir::error_chain(e)
                    ))),
                    0,
                );
            }
        };
        let names = snap.files.iter().map(|f| f.path.clone()).collect();
        let query = TransitionQuery {
            task: &self.task,
            command: script,
            files: snap.files.clone(),
            agent_patch: snap.agent_patch.clone(),
        };
        let t0 = Instant::now();
        let result = self.world.transition(&query).await;
        (names, result, t0.elapsed().as_millis() as u64)
    }

    async fn run(&self, req: &ExecRequest) -> Result<ExecOutput, SandboxError> {
        let Some(script) = shell_script(req) else {
            return self.inner.exec(req).await;
        };
        if self.mode == ExecutionMode::Real && self.observer.is_none() {
            return self.inner.exec(req).await;
        }
        let cwd = req.cwd.as_deref().unwrap_or(WORKSPACE);
        let class = observe::classify_in(self.inner, script).await;
        let route = route(self.mode, &class, self.task.has_environment);
        let class_name = match &class {
            CommandClass::Python(_) => "python",
            CommandClass::Install => "install",
            CommandClass::Blocked(_) => "blocked",
            CommandClass::Real => return self.inner.exec(req).await,
        };
        let rec = CommandRecord {
            command: cap_chars(script),
            class: class_name.into(),
            route: route.as_str().into(),
            files: Vec::new(),
            prediction: None,
            drift: None,
            error: None,
            model_ms: 0,
            real_ms: None,
        };
        match route {
            Route::Real => self.run_routed_real(req, script, cwd, &class, rec).await,
            Route::Canned => {
                self.push(rec, None, false);
                Ok(synthetic(CANNED_INSTALL, "", 0, Duration::ZERO))
            }
            Route::Refuse(reason) => {
                let msg = format!(
                    "This command is not allowed in the simulated environment: {reason}. Please use a different command.\n"
                );
                self.push(rec, None, false);
                Ok(synthetic("", &msg, 1, Duration::ZERO))
            }
            Route::Simulate => self.simulate(req, script, cwd, &class, rec).await,
            Route::Shadow => self.shadow(req, script, cwd, &class, rec).await,
        }
    }

    /// A Python run for real (hybrid; real mode with an observer): the observer records it from
    /// the state before it ran.
    async fn run_routed_real(
        &self,
        req: &ExecRequest,
        script: &str,
        cwd: &str,
        class: &CommandClass,
        mut rec: CommandRecord,
    ) -> Result<ExecOutput, SandboxError> {
        let before = match (class, self.observer) {
            (CommandClass::Python(run), Some(_)) => self.snapshot(run, cwd).await.ok(),
            _ => None,
        };
        let t0 = Instant::now();
        let out = self.run_real(req, script, before.as_ref()).await;
        rec.real_ms = Some(t0.elapsed().as_millis() as u64);
        if self.mode != ExecutionMode::Real {
            self.push(rec, None, false);
        }
        out
    }

    /// A Python run answered by the model alone.
    async fn simulate(
        &self,
        req: &ExecRequest,
        script: &str,
        cwd: &str,
        class: &CommandClass,
        mut rec: CommandRecord,
    ) -> Result<ExecOutput, SandboxError> {
        let CommandClass::Python(run) = class else {
            return self.inner.exec(req).await;
        };
        let before = self.snapshot(run, cwd).await;
        let (files, result, ms) = self.predict(script, &before).await;
        rec.files = files;
        rec.model_ms = ms;
        match result {
            Ok(p) => {
                let out = synthetic(&p.stdout, &p.stderr, p.exit_code, Duration::from_millis(ms));
                rec.prediction = Some(cap_prediction(p));
                self.push(rec, None, false);
                Ok(out)
            }
            Err(e) => {
                rec.error = Some(e.to_string());
                self.push(rec, None, true);
                Err(SandboxError::Failed {
                    what: format!(
                        "simulated environment: no answer for `{}`",
                        cut(script, LOG_TEXT_CAP, Unit::Chars, Keep::Head).ellipsis()
                    ),
                    source: Box::new(e),
                })
            }
        }
    }

    /// A command run for real, its Python runs also predicted by the model and the two
    /// compared (the drift recorded).
    async fn shadow(
        &self,
        req: &ExecRequest,
        script: &str,
        cwd: &str,
        class: &CommandClass,
        mut rec: CommandRecord,
    ) -> Result<ExecOutput, SandboxError> {
        // The model is asked about the workspace as it is before the command runs, as in `sim`
        // (and as capture records real runs): a command that writes files must not show the
        // model its own effects. The same snapshot goes to the observer: the workspace is read
        // once.
        let (before, predicted) = match class {
            CommandClass::Python(run) => {
                let before = self.snapshot(run, cwd).await;
                let predicted = self.predict(script, &before).await;
                (before.ok(), Some(predicted))
            }
            _ => (None, None),
        };
        let t0 = Instant::now();
        let real = self.run_real(req, script, before.as_ref()).await?;
        rec.real_ms = Some(t0.elapsed().as_millis() as u64);
        let Some((files, result, ms)) = predicted else {
            self.push(rec, None, false);
            return Ok(real);
        };
        rec.files = files;
        rec.model_ms = ms;
        match result {
            Ok(p) => {
                let observed_real = Observed {
                    stdout: real.stdout_lossy(),
                    stderr: real.stderr_lossy(),
                    exit_code: if real.timed_out { None } else { real.exit_code },
                };
                let observed_sim = Observed {
                    stdout: p.stdout.clone(),
                    stderr: p.stderr.clone(),
                    exit_code: Some(p.exit_code),
                };
                let d = compare_transition(&observed_real, &observed_sim, self.task.parser);
                rec.prediction = Some(cap_prediction(p));
                rec.drift = Some(d.clone());
                self.push(rec, Some(&d), false);
            }
            Err(e) => {
                rec.error = Some(e.to_string());
                self.push(rec, None, true);
            }
        }
        Ok(real)
    }
}

impl Workspace for SimWorkspace<'_> {
    fn exec<'b>(&'b self, req: &'b ExecRequest) -> BoxFuture<'b, Result<ExecOutput, SandboxError>> {
        Box::pin(self.run(req))
    }
    fn read_file<'b>(&'b self, path: &'b str) -> BoxFuture<'b, Result<Vec<u8>, SandboxError>> {
        self.inner.read_file(path)
    }
    fn write_file<'b>(
        &'b self,
        path: &'b str,
        data: &'b [u8],
    ) -> BoxFuture<'b, Result<(), SandboxError>> {
        self.inner.write_file(path, data)
    }
    fn diff(&self) -> BoxFuture<'_, Result<String, SandboxError>> {
        self.inner.diff()
    }
    fn sandbox(&self) -> Option<&Sandbox> {
        // Language servers need a Python environment; only real execution modes offer one.
        if self.task.has_environment {
            self.inner.sandbox()
        } else {
            None
        }
    }
}

/// The script of a `bash -c SCRIPT` request (what every tool sends), else `None`.
fn shell_script(req: &ExecRequest) -> Option<&str> {
    match req.argv.as_slice() {
        [bash, c, script] if bash == "bash" && c == "-c" => Some(script),
        _ => None,
    }
}

fn synthetic(stdout: &str, stderr: &str, code: i32, duration: Duration) -> ExecOutput {
    ExecOutput {
        exit_code: Some(code),
        signal: None,
        stdout: stdout.as_bytes().to_vec(),
        stderr: stderr.as_bytes().to_vec(),
        stdout_truncated: false,
        stderr_truncated: false,
        timed_out: false,
        duration,
    }
}

/// The log's copy of a command or an output: its head, the cut marked.
fn cap_chars(s: &str) -> String {
    clip(s, LOG_TEXT_CAP, Unit::Chars, Keep::Head).0
}

fn cap_prediction(p: PredictedOutput) -> PredictedOutput {
    PredictedOutput {
        stdout: cap_chars(&p.stdout),
        stderr: cap_chars(&p.stderr),
        exit_code: p.exit_code,
    }
}

fn model_failure(e: WorldError) -> ModelFailure {
    let text = dojo_rundir::error_chain(&e);
    match e {
        WorldError::Timeout { .. } => ModelFailure::Timeout(text),
        WorldError::Unparseable { .. } => ModelFailure::Unparseable(text),
        WorldError::Context { .. } => ModelFailure::Context(text),
        WorldError::Model { .. } | WorldError::Setup { .. } => ModelFailure::Model(text),
    }
}

/// The SWE-World client is the world model of real runs: SWE-World's prompts and parsers over
/// any chat backend (OpenAI-compatible endpoints, the embedded engine).
impl WorldModel for WorldClient {
    fn transition<'a>(
        &'a self,
        q: &'a TransitionQuery<'a>,
    ) -> BoxFuture<'a, Result<PredictedOutput, ModelFailure>> {
        Box::pin(async move {
            let ctx = q
                .task
                .world
                .swt_context(q.command, q.files.clone(), &q.agent_patch);
            let p = self.predict_transition(&ctx).await.map_err(model_failure)?;
            Ok(PredictedOutput {
                stdout: p.value.stdout,
                stderr: p.value.stderr,
                exit_code: p.value.exit_code,
            })
        })
    }
    fn reward<'a>(
        &'a self,
        q: &'a RewardQuery<'a>,
    ) -> BoxFuture<'a, Result<RewardVerdict, ModelFailure>> {
        Box::pin(async move {
            let ctx = q
                .task
                .world
                .swr_context(q.agent_patch, q.test_files.clone());
            // The selector's call (`dojo select --selector swr`): k samples, their mean.
            let cfg = self.config();
            let est = self
                .predict_reward(&ctx, cfg.swr_samples.max(1))
                .await
                .map_err(model_failure)?;
            let v = est.verdict(rollout_seed(cfg.swr_seed, &ctx.task_id, q.agent_patch));
            Ok(RewardVerdict {
                resolved: v.resolved,
                reward: est.mean,
                // The report of a sample that agrees with the verdict.
                test_report: est
                    .samples
                    .iter()
                    .find(|t| (t.reward == 1) == v.resolved)
                    .or(est.samples.first())
                    .map(|t| t.test_report.clone())
                    .unwrap_or_default(),
                called: !est.empty_patch,
                samples: est.samples.len() as u32,
                tie_seed: v.tie_seed,
            })
        })
    }
    fn describe(&self) -> String {
        self.describe_roles()
    }
}

/// A task's test files (`test_files`, [`SimTask::test_files`]) with its test patch applied on
/// top of the workspace (in a rollout the agent is done; graders reset the sandbox before real
/// grading), read as the SWR records of real grading read them ([`observe::read_views`], base
/// versions from `base`, the pristine tree). A patch that does not apply leaves the files as
/// they are, which the model sees.
pub async fn test_files_after_patch(
    ws: &dyn Workspace,
    test_patch: Option<&str>,
    test_files: &[String],
    base: Option<&std::path::Path>,
) -> Vec<FileView> {
    let Some(test_patch) = test_patch.filter(|p| !p.trim().is_empty()) else {
        return Vec::new();
    };
    let req =
        ExecRequest::shell("git apply --whitespace=nowarn - 2>&1 || patch -p1 --forward -s 2>&1")
            .stdin(test_patch.as_bytes().to_vec())
            .timeout(Duration::from_secs(60))
            .cwd(WORKSPACE);
    let _ = ws.exec(&req).await;
    observe::read_views(ws, test_files, base, ReadLimits::default()).await
}

/// The reward model's verdict on `agent_patch`: an empty patch is unresolved without a call
/// (SWE-World's rule); otherwise one call, failures returned as they are (infrastructure).
pub async fn simulated_reward(
    world: &dyn WorldModel,
    task: &SimTask,
    agent_patch: &str,
    test_files: Vec<FileView>,
) -> (Result<RewardVerdict, ModelFailure>, u64) {
    if agent_patch.trim().is_empty() {
        return (
            Ok(RewardVerdict {
                resolved: false,
                reward: 0.0,
                test_report: String::new(),
                called: false,
                samples: 0,
                tie_seed: None,
            }),
            0,
        );
    }
    let query = RewardQuery {
        task,
        agent_patch,
        test_files,
    };
    let t0 = Instant::now();
    let r = world.reward(&query).await;
    (r, t0.elapsed().as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dojo_sandbox::LocalWorkspace;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A world model answering from a fixed script, counting its calls.
    struct Scripted {
        transition: Result<PredictedOutput, ModelFailure>,
        reward: Result<RewardVerdict, ModelFailure>,
        calls: AtomicUsize,
        seen_files: Mutex<Vec<Vec<FileView>>>,
    }

    impl Scripted {
        fn new(transition: Result<PredictedOutput, ModelFailure>) -> Scripted {
            Scripted {
                transition,
                reward: Ok(RewardVerdict {
                    resolved: true,
                    reward: 1.0,
                    test_report: "PASSED".into(),
                    called: true,
                    samples: 1,
                    tie_seed: None,
                }),
                calls: AtomicUsize::new(0),
                seen_files: Mutex::new(Vec::new()),
            }
        }
    }

    impl WorldModel for Scripted {
        fn transition<'a>(
            &'a self,
            q: &'a TransitionQuery<'a>,
        ) -> BoxFuture<'a, Result<PredictedOutput, ModelFailure>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.seen_files.lock().unwrap().push(q.files.clone());
            Box::pin(async move { self.transition.clone() })
        }
        fn reward<'a>(
            &'a self,
            _q: &'a RewardQuery<'a>,
        ) -> BoxFuture<'a, Result<RewardVerdict, ModelFailure>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move { self.reward.clone() })
        }
        fn describe(&self) -> String {
            "scripted".into()
        }
    }

    fn pred(stdout: &str, code: i32) -> PredictedOutput {
        PredictedOutput {
            stdout: stdout.into(),
            stderr: String::new(),
            exit_code: code,
        }
    }

    fn workspace() -> (tempfile::TempDir, LocalWorkspace) {
        crate::observe::tests::committed(&[
            ("repro.py", "print('real')\n"),
            ("tests/test_a.py", "def test_a(): pass\n"),
        ])
    }

    fn task(env: bool) -> Arc<SimTask> {
        Arc::new(SimTask {
            world: WorldTask {
                task_id: "t".into(),
                ..Default::default()
            },
            has_environment: env,
            ..Default::default()
        })
    }

    #[tokio::test]
    async fn sim_routes_per_command() {
        let (_d, ws) = workspace();
        let world = Arc::new(Scripted::new(Ok(pred("simulated\n", 3))));
        let sim = SimWorkspace::new(&ws, ExecutionMode::Sim, world.clone(), task(false));

        let out = sim
            .exec(&ExecRequest::shell("python repro.py"))
            .await
            .unwrap();
        assert_eq!(out.stdout_lossy(), "simulated\n");
        assert_eq!(out.exit_code, Some(3));

        let out = sim
            .exec(&ExecRequest::shell("pip install -e ."))
            .await
            .unwrap();
        assert_eq!(out.stdout_lossy(), CANNED_INSTALL);

        let out = sim
            .exec(&ExecRequest::shell("rm -rf /testbed"))
            .await
            .unwrap();
        assert_eq!(out.exit_code, Some(1));
        assert!(out.stderr_lossy().contains("not allowed"));
        assert!(ws.root().join("repro.py").exists());

        let out = sim.exec(&ExecRequest::shell("cat repro.py")).await.unwrap();
        assert_eq!(out.stdout_lossy(), "print('real')\n");

        let out = sim
            .exec(&ExecRequest::shell("pytest tests/"))
            .await
            .unwrap();
        assert_eq!(out.exit_code, Some(3));

        assert_eq!(world.calls.load(Ordering::SeqCst), 2);
        let seen = world.seen_files.lock().unwrap().clone();
        assert_eq!(seen[0].len(), 1);
        assert_eq!(seen[0][0].path, "repro.py");
        assert_eq!(seen[0][0].current.as_deref(), Some("print('real')\n"));
        assert_eq!(seen[0][0].base.as_deref(), Some("print('real')\n"));
        // A directory is expanded to its Python files.
        assert_eq!(seen[1][0].path, "tests/test_a.py");

        let log = sim.into_log();
        let routes: Vec<&str> = log.commands.iter().map(|c| c.route.as_str()).collect();
        assert_eq!(routes, ["simulate", "canned", "refuse", "simulate"]);
        assert!(log.drift.is_empty());
    }

    #[tokio::test]
    async fn a_model_failure_is_an_infrastructure_error_not_an_observation() {
        let (_d, ws) = workspace();
        let world = Arc::new(Scripted::new(Err(ModelFailure::Unparseable(
            "prose instead of JSON".into(),
        ))));
        let sim = SimWorkspace::new(&ws, ExecutionMode::Sim, world, task(false));
        let err = sim
            .exec(&ExecRequest::shell("python repro.py"))
            .await
            .unwrap_err();
        assert!(err.is_infrastructure());
        assert!(err.to_string().contains("prose instead of JSON"), "{err}");
        let log = sim.into_log();
        assert_eq!(log.commands.len(), 1);
        assert!(log.commands[0].error.is_some());
        assert!(log.commands[0].prediction.is_none());
    }

    #[tokio::test]
    async fn shadow_answers_for_real_and_measures() {
        let (_d, ws) = workspace();
        let world = Arc::new(Scripted::new(Ok(pred("real\n", 1))));
        let sim = SimWorkspace::new(&ws, ExecutionMode::Shadow, world, task(true));
        // `bash` runs the script for real (the host's python3 may be absent: use a shell stand-in).
        std::fs::write(ws.root().join("run.py"), "").unwrap();
        let out = sim
            .exec(&ExecRequest::shell("echo real; exit 0 # python run.py"))
            .await
            .unwrap();
        // Classified real (the comment is not a command): no record.
        assert_eq!(out.stdout_lossy(), "real\n");
        let out = sim
            .exec(&ExecRequest::shell(
                "python3 -c 'print(\"real\")' || echo real",
            ))
            .await
            .unwrap();
        assert!(out.stdout_lossy().contains("real"));
        let log = sim.into_log();
        assert_eq!(log.commands.len(), 1);
        assert_eq!(log.commands[0].route, "shadow");
        let d = log.commands[0].drift.as_ref().unwrap();
        assert!(!d.exit_code_agrees);
        assert_eq!(d.text_similarity, 1.0);
        assert_eq!(log.drift.transitions, 1);
        assert_eq!(log.drift.exit_code_agreeing, 0);
    }

    #[tokio::test]
    async fn shadow_model_failure_is_counted_apart() {
        let (_d, ws) = workspace();
        let world = Arc::new(Scripted::new(Err(ModelFailure::Timeout("650 s".into()))));
        let sim = SimWorkspace::new(&ws, ExecutionMode::Shadow, world, task(true));
        let out = sim
            .exec(&ExecRequest::shell("python3 -c 'print(1)' || echo 1"))
            .await
            .unwrap();
        assert!(out.stdout_lossy().contains('1'));
        let log = sim.into_log();
        assert_eq!(log.drift.transition_failures, 1);
        assert_eq!(log.drift.transitions, 0);
    }

    #[tokio::test]
    async fn hybrid_runs_cheap_commands_for_real_when_there_is_an_environment() {
        let (_d, ws) = workspace();
        let world = Arc::new(Scripted::new(Ok(pred("sim\n", 0))));
        let sim = SimWorkspace::new(&ws, ExecutionMode::Hybrid, world.clone(), task(true));
        let _ = sim
            .exec(&ExecRequest::shell("python3 -c 'print(1)' || true"))
            .await
            .unwrap();
        assert_eq!(world.calls.load(Ordering::SeqCst), 0);
        let out = sim.exec(&ExecRequest::shell("pytest")).await.unwrap();
        assert_eq!(out.stdout_lossy(), "sim\n");
        assert_eq!(world.calls.load(Ordering::SeqCst), 1);
    }

    /// A workspace counting how often the agent's patch is read.
    struct Counting<'a> {
        inner: &'a LocalWorkspace,
        diffs: AtomicUsize,
    }
    impl Workspace for Counting<'_> {
        fn exec<'b>(
            &'b self,
            req: &'b ExecRequest,
        ) -> BoxFuture<'b, Result<ExecOutput, SandboxError>> {
            self.inner.exec(req)
        }
        fn read_file<'b>(&'b self, path: &'b str) -> BoxFuture<'b, Result<Vec<u8>, SandboxError>> {
            self.inner.read_file(path)
        }
        fn write_file<'b>(
            &'b self,
            path: &'b str,
            data: &'b [u8],
        ) -> BoxFuture<'b, Result<(), SandboxError>> {
            self.inner.write_file(path, data)
        }
        fn diff(&self) -> BoxFuture<'_, Result<String, SandboxError>> {
            self.diffs.fetch_add(1, Ordering::SeqCst);
            self.inner.diff()
        }
    }

    /// Records what it is told, as capture does.
    #[derive(Default)]
    struct Observer(Mutex<Vec<(String, Snapshot, Option<i32>)>>);
    impl RealRunObserver for Observer {
        fn observe(&self, command: &str, before: &Snapshot, out: &ExecOutput) {
            self.0
                .lock()
                .unwrap()
                .push((command.into(), before.clone(), out.exit_code));
        }
        fn read_limits(&self) -> ReadLimits {
            ReadLimits::default()
        }
    }

    #[tokio::test]
    async fn real_runs_reach_the_observer_with_the_read_the_model_got() {
        let (_d, ws) = workspace();
        std::fs::write(ws.root().join("repro.py"), "print('edited')\n").unwrap();
        let counting = Counting {
            inner: &ws,
            diffs: AtomicUsize::new(0),
        };
        let observer = Observer::default();
        let world = Arc::new(Scripted::new(Ok(pred("x\n", 0))));
        let sim = SimWorkspace::new(&counting, ExecutionMode::Shadow, world.clone(), task(true))
            .with_observer(&observer);
        // `repro.py` names the executed file; `|| true` keeps the run real without python.
        let cmd = "python3 repro.py 2>/dev/null || true";
        sim.exec(&ExecRequest::shell(cmd)).await.unwrap();
        // Shadow: the model and the record share one read of the workspace.
        assert_eq!(counting.diffs.load(Ordering::SeqCst), 1);
        let seen = world.seen_files.lock().unwrap().clone();
        let told = observer.0.lock().unwrap().clone();
        assert_eq!(told.len(), 1);
        assert_eq!((told[0].0.as_str(), told[0].2), (cmd, Some(0)));
        assert_eq!(told[0].1.files, seen[0]);
        assert_eq!(told[0].1.files[0].path, "repro.py");
        assert_eq!(told[0].1.files[0].base.as_deref(), Some("print('real')\n"));
        assert!(told[0].1.agent_patch.contains("+print('edited')"));

        // Hybrid: a cheap command runs for real and is recorded; a simulated one is not.
        let observer = Observer::default();
        let sim = SimWorkspace::new(&ws, ExecutionMode::Hybrid, world.clone(), task(true))
            .with_observer(&observer);
        sim.exec(&ExecRequest::shell(cmd)).await.unwrap();
        sim.exec(&ExecRequest::shell("pytest")).await.unwrap();
        let told = observer.0.lock().unwrap().clone();
        assert_eq!(told.len(), 1);
        assert_eq!(told[0].0, cmd);
        let routes: Vec<String> = sim
            .into_log()
            .commands
            .into_iter()
            .map(|c| c.route)
            .collect();
        assert_eq!(routes, ["real", "simulate"]);

        // Real mode with an observer: recorded, nothing logged, the model never asked.
        let observer = Observer::default();
        let calls = world.calls.load(Ordering::SeqCst);
        let sim = SimWorkspace::new(&ws, ExecutionMode::Real, world.clone(), task(true))
            .with_observer(&observer);
        sim.exec(&ExecRequest::shell(cmd)).await.unwrap();
        assert_eq!(observer.0.lock().unwrap().len(), 1);
        assert_eq!(world.calls.load(Ordering::SeqCst), calls);
        assert!(sim.into_log().commands.is_empty());
    }

    #[test]
    fn the_task_serializes_flat() {
        // `world` is flattened: files written before it existed read back the same.
        let t = SimTask {
            world: WorldTask {
                task_id: "t".into(),
                gold_patch: Some("g".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let v = serde_json::to_value(&t).unwrap();
        assert_eq!(v["task_id"], "t");
        assert_eq!(v["gold_patch"], "g");
        assert!(v.get("world").is_none());
        let back: SimTask = serde_json::from_value(v).unwrap();
        assert_eq!(back, t);
    }

    #[tokio::test]
    async fn swr_sees_the_task_test_files_after_its_test_patch_with_base_versions() {
        let (_d, ws) = workspace();
        let t = SimTask {
            test_patch: Some(
                "diff --git a/tests/test_a.py b/tests/test_a.py\n--- a/tests/test_a.py\n+++ b/tests/test_a.py\n@@ -1 +1 @@\n-def test_a(): pass\n+def test_a(): assert 0\n".into(),
            ),
            test_files: vec!["tests/test_a.py".into()],
            ..Default::default()
        };
        let files = test_files_after_patch(
            &ws,
            t.test_patch.as_deref(),
            &t.test_files,
            t.pristine_dir.as_deref(),
        )
        .await;
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].path, "tests/test_a.py");
        assert_eq!(
            files[0].current.as_deref(),
            Some("def test_a(): assert 0\n")
        );
        assert_eq!(files[0].base.as_deref(), Some("def test_a(): pass\n"));
    }

    #[tokio::test]
    async fn empty_patch_is_unresolved_without_a_call() {
        let world = Scripted::new(Ok(pred("", 0)));
        let (v, _) = simulated_reward(&world, &SimTask::default(), "  \n", Vec::new()).await;
        let v = v.unwrap();
        assert!(!v.resolved && !v.called);
        assert_eq!(world.calls.load(Ordering::SeqCst), 0);
        let (v, _) = simulated_reward(
            &world,
            &SimTask::default(),
            "diff --git a/x b/x\n",
            Vec::new(),
        )
        .await;
        assert!(v.unwrap().resolved);
        assert_eq!(world.calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn reward_confusion_in_the_log() {
        let mut log = SimLog::new(ExecutionMode::Shadow, "m".into());
        let v = |r| RewardVerdict {
            resolved: r,
            reward: if r { 1.0 } else { 0.0 },
            test_report: String::new(),
            called: true,
            samples: 1,
            tie_seed: None,
        };
        log.record_reward(Ok(v(true)), Some(false), 5);
        log.record_reward(Ok(v(false)), Some(false), 5);
        log.record_reward(Err(ModelFailure::Model("down".into())), Some(true), 5);
        assert_eq!(log.drift.reward.false_positive, 1);
        assert_eq!(log.drift.reward.true_negative, 1);
        assert_eq!(log.drift.reward_failures, 1);
        let mut meta = serde_json::Map::new();
        meta.insert(METADATA_KEY.into(), log.to_json());
        assert_eq!(SimLog::from_metadata(&meta), Some(log));
    }
}
