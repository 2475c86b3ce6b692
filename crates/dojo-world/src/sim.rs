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

use dojo_agent::Workspace;
use dojo_grade::parsers::Parser;
use dojo_llm::BoxFuture;
use dojo_sandbox::{ExecOutput, ExecRequest, Sandbox, SandboxError, WORKSPACE};
use serde::{Deserialize, Serialize};

use crate::classify::{CommandClass, PythonRun, classify_with};
use crate::client::{WorldClient, WorldError};
use crate::context::{FileView, SwrContext, SwtContext};
use crate::drift::{DriftSummary, Observed, TransitionDrift, compare_transition};
use crate::route::{EnvMode, Route, route};

/// Version of the [`SimLog`] layout.
pub const SIM_LOG_SCHEMA_VERSION: u32 = 1;
/// Key of the [`SimLog`] in a trajectory's `metadata`.
pub const METADATA_KEY: &str = "world";
/// The reply to an install: the simulated environment has nothing to install into.
pub const CANNED_INSTALL: &str = "Successfully installed packages.\n";
/// Executed files sent to the model per command (SWE-World's cap); beyond it the first ones.
pub const MAX_EXECUTED_FILES: usize = 20;
/// Bytes of one file sent to the model; the prompt layer applies its own token caps on top.
pub const MAX_FILE_BYTES: usize = 256 * 1024;
/// Characters of a command or predicted output kept in the log.
const LOG_TEXT_CAP: usize = 4000;

/// What the world models know of the task, fixed for a rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimTask {
    pub task_id: String,
    pub problem_statement: String,
    pub gold_patch: Option<String>,
    pub test_patch: Option<String>,
    /// The per-task initial analysis, when one was generated.
    pub analysis: Option<String>,
    /// The command grading runs (the reward model is told what it would have run).
    pub test_command: String,
    pub fail_to_pass: Vec<String>,
    pub pass_to_pass: Vec<String>,
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
            task_id: String::new(),
            problem_statement: String::new(),
            gold_patch: None,
            test_patch: None,
            analysis: None,
            test_command: String::new(),
            fail_to_pass: Vec::new(),
            pass_to_pass: Vec::new(),
            parser: Parser::Pytest,
            has_environment: false,
            pristine_dir: None,
        }
    }
}

/// A file the model is shown: its contents now and at the base commit (`None`: absent there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutedFile {
    pub path: String,
    pub base: Option<String>,
    pub current: Option<String>,
}

/// One command for the transition model.
#[derive(Debug, Clone)]
pub struct TransitionQuery<'a> {
    pub task: &'a SimTask,
    pub command: &'a str,
    pub files: Vec<ExecutedFile>,
    pub agent_patch: String,
}

/// The final state for the reward model.
#[derive(Debug, Clone)]
pub struct RewardQuery<'a> {
    pub task: &'a SimTask,
    pub agent_patch: &'a str,
    /// The test files with the task's test patch applied.
    pub test_files: Vec<ExecutedFile>,
}

/// The transition model's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prediction {
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
}

/// Why a world model gave no answer. Every variant is an infrastructure failure: it is never
/// the agent's doing and never becomes a reward or an observation.
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
pub trait WorldModel: Send + Sync {
    /// Predict the output of a command that runs Python or tests.
    fn transition<'a>(
        &'a self,
        query: &'a TransitionQuery<'a>,
    ) -> BoxFuture<'a, Result<Prediction, ModelFailure>>;
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
    pub prediction: Option<Prediction>,
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
    pub mode: EnvMode,
    pub world_model: String,
    pub commands: Vec<CommandRecord>,
    pub reward: Option<RewardRecord>,
    pub drift: DriftSummary,
}

impl SimLog {
    pub fn new(mode: EnvMode, world_model: String) -> SimLog {
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

/// A workspace whose commands are routed between the real sandbox and the world model.
pub struct SimWorkspace<'a> {
    inner: &'a dyn Workspace,
    mode: EnvMode,
    world: Arc<dyn WorldModel>,
    task: Arc<SimTask>,
    log: Mutex<SimLog>,
}

impl<'a> SimWorkspace<'a> {
    pub fn new(
        inner: &'a dyn Workspace,
        mode: EnvMode,
        world: Arc<dyn WorldModel>,
        task: Arc<SimTask>,
    ) -> SimWorkspace<'a> {
        let log = SimLog::new(mode, world.describe());
        SimWorkspace {
            inner,
            mode,
            world,
            task,
            log: Mutex::new(log),
        }
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

    /// Program paths the script runs directly (`./x`, `bin/y`) that start with a Python
    /// shebang line.
    async fn python_shebangs(&self, script: &str) -> Vec<String> {
        let mut out = Vec::new();
        for word in script.split_whitespace() {
            let w = word.trim_matches(|c| matches!(c, '(' | ')' | ';' | '&' | '|'));
            if !w.contains('/') || w.ends_with(".py") || w.starts_with('-') {
                continue;
            }
            if let Ok(bytes) = self.inner.read_file(w).await {
                let head = String::from_utf8_lossy(&bytes[..bytes.len().min(128)]).into_owned();
                if head.starts_with("#!")
                    && head.lines().next().is_some_and(|l| l.contains("python"))
                {
                    out.push(w.to_string());
                }
            }
        }
        out
    }

    async fn classify(&self, script: &str) -> CommandClass {
        let shebangs = self.python_shebangs(script).await;
        classify_with(script, &|p| shebangs.iter().any(|s| s == p))
    }

    /// The files the model is shown for `run`: named files (directories expanded to their
    /// `.py` files), capped at [`MAX_EXECUTED_FILES`], each with its base version.
    async fn executed_files(&self, run: &PythonRun, cwd: &str) -> Vec<ExecutedFile> {
        let mut paths: Vec<String> = Vec::new();
        for f in &run.files {
            let abs = absolute(f, cwd);
            if paths.len() >= MAX_EXECUTED_FILES {
                break;
            }
            match self.inner.read_file(&abs).await {
                Ok(_) => paths.push(abs),
                Err(_) => {
                    // A directory (or a missing file, shown to the model as absent).
                    let listed = self.list_py(&abs).await;
                    if listed.is_empty() {
                        paths.push(abs);
                    } else {
                        paths.extend(listed);
                    }
                }
            }
        }
        paths.dedup();
        paths.truncate(MAX_EXECUTED_FILES);
        let mut files = Vec::with_capacity(paths.len());
        for path in paths {
            let current = self.inner.read_file(&path).await.ok().map(cap_text);
            let base = self.base_version(&path).await;
            files.push(ExecutedFile {
                path,
                base,
                current,
            });
        }
        files
    }

    async fn list_py(&self, dir: &str) -> Vec<String> {
        let mut req = ExecRequest::shell(format!(
            "[ -d \"$DOJO_P\" ] && find \"$DOJO_P\" -name '*.py' -not -path '*/.*' | LC_ALL=C sort | head -n {MAX_EXECUTED_FILES}"
        ))
        .timeout(Duration::from_secs(30))
        .cwd(WORKSPACE);
        // Relative to the workspace, so the listing reads the same in every workspace kind.
        let rel = relative(dir);
        req.env.insert(
            "DOJO_P".into(),
            if rel.is_empty() { ".".into() } else { rel },
        );
        match self.inner.exec(&req).await {
            Ok(out) => out
                .stdout_lossy()
                .lines()
                .filter(|l| !l.is_empty())
                .map(|l| format!("{WORKSPACE}/{}", relative(l.trim_start_matches("./"))))
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// The file at the checkout's base commit, when the checkout has its history.
    async fn base_version(&self, path: &str) -> Option<String> {
        let rel = relative(path);
        if let Some(dir) = &self.task.pristine_dir {
            return std::fs::read(dir.join(&rel)).ok().map(cap_text);
        }
        let mut req = ExecRequest::shell("git show \"HEAD:$DOJO_P\" 2>/dev/null")
            .timeout(Duration::from_secs(30))
            .cwd(WORKSPACE);
        req.env.insert("DOJO_P".into(), rel);
        let out = self.inner.exec(&req).await.ok()?;
        out.success().then(|| cap_text(out.stdout))
    }

    async fn predict(
        &self,
        script: &str,
        run: &PythonRun,
        cwd: &str,
    ) -> (Vec<String>, Result<Prediction, ModelFailure>, u64) {
        let files = self.executed_files(run, cwd).await;
        let names = files.iter().map(|f| f.path.clone()).collect();
        let agent_patch = match self.inner.diff().await {
            Ok(p) => p,
            Err(e) => {
                return (
                    names,
                    Err(ModelFailure::Model(format!(
                        "reading the agent's patch for the model: {e}"
                    ))),
                    0,
                );
            }
        };
        let query = TransitionQuery {
            task: &self.task,
            command: script,
            files,
            agent_patch,
        };
        let t0 = Instant::now();
        let result = self.world.transition(&query).await;
        (names, result, t0.elapsed().as_millis() as u64)
    }

    async fn run(&self, req: &ExecRequest) -> Result<ExecOutput, SandboxError> {
        let Some(script) = shell_script(req) else {
            return self.inner.exec(req).await;
        };
        if self.mode == EnvMode::Real {
            return self.inner.exec(req).await;
        }
        let class = self.classify(script).await;
        let route = route(self.mode, &class, self.task.has_environment);
        let class_name = match &class {
            CommandClass::Python(_) => "python",
            CommandClass::Install => "install",
            CommandClass::Blocked(_) => "blocked",
            CommandClass::Real => return self.inner.exec(req).await,
        };
        let mut rec = CommandRecord {
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
        let cwd = req.cwd.as_deref().unwrap_or(WORKSPACE);
        match route {
            Route::Real => {
                let t0 = Instant::now();
                let out = self.inner.exec(req).await;
                rec.real_ms = Some(t0.elapsed().as_millis() as u64);
                self.push(rec, None, false);
                out
            }
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
            Route::Simulate => {
                let CommandClass::Python(run) = &class else {
                    return self.inner.exec(req).await;
                };
                let (files, result, ms) = self.predict(script, run, cwd).await;
                rec.files = files;
                rec.model_ms = ms;
                match result {
                    Ok(p) => {
                        let out =
                            synthetic(&p.stdout, &p.stderr, p.exit_code, Duration::from_millis(ms));
                        rec.prediction = Some(cap_prediction(p));
                        self.push(rec, None, false);
                        Ok(out)
                    }
                    Err(e) => {
                        rec.error = Some(e.to_string());
                        self.push(rec, None, true);
                        Err(SandboxError::Other(format!(
                            "simulated environment: no answer for `{}`: {e}",
                            cap_chars(script)
                        )))
                    }
                }
            }
            Route::Shadow => {
                // The model is asked about the workspace as it is before the command runs, as
                // in `sim` (and as capture records real runs): a command that writes files
                // must not show the model its own effects.
                let predicted = match &class {
                    CommandClass::Python(run) => Some(self.predict(script, run, cwd).await),
                    _ => None,
                };
                let t0 = Instant::now();
                let real = self.inner.exec(req).await?;
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

fn absolute(path: &str, cwd: &str) -> String {
    if path.starts_with('/') {
        path.to_string()
    } else {
        let p = path.trim_start_matches("./");
        format!("{}/{p}", cwd.trim_end_matches('/'))
    }
}

/// A workspace path relative to the workspace root, with empty and `.` segments dropped.
fn relative(path: &str) -> String {
    path.strip_prefix(WORKSPACE)
        .unwrap_or(path)
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect::<Vec<_>>()
        .join("/")
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

fn cap_text(bytes: Vec<u8>) -> String {
    let end = bytes.len().min(MAX_FILE_BYTES);
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

fn cap_chars(s: &str) -> String {
    if s.chars().count() <= LOG_TEXT_CAP {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(LOG_TEXT_CAP).collect();
        t.push('…');
        t
    }
}

fn cap_prediction(p: Prediction) -> Prediction {
    Prediction {
        stdout: cap_chars(&p.stdout),
        stderr: cap_chars(&p.stderr),
        exit_code: p.exit_code,
    }
}

/// A workspace path as the models see it: relative to the repository root.
fn repo_path(path: &str) -> String {
    relative(path)
}

fn file_view(f: ExecutedFile) -> FileView {
    FileView {
        path: repo_path(&f.path),
        base: f.base,
        current: f.current,
    }
}

fn model_failure(e: WorldError) -> ModelFailure {
    match e {
        WorldError::Timeout { .. } => ModelFailure::Timeout(e.to_string()),
        WorldError::Unparseable { .. } => ModelFailure::Unparseable(e.to_string()),
        WorldError::Context { .. } => ModelFailure::Context(e.to_string()),
        WorldError::Model { .. } | WorldError::Setup { .. } => ModelFailure::Model(e.to_string()),
    }
}

/// The SWE-World client is the world model of real runs: SWE-World's prompts and parsers over
/// any chat backend (OpenAI-compatible endpoints, the embedded engine).
impl WorldModel for WorldClient {
    fn transition<'a>(
        &'a self,
        q: &'a TransitionQuery<'a>,
    ) -> BoxFuture<'a, Result<Prediction, ModelFailure>> {
        Box::pin(async move {
            let ctx = SwtContext {
                task_id: q.task.task_id.clone(),
                problem_statement: q.task.problem_statement.clone(),
                command: q.command.to_string(),
                executed_files: q.files.iter().cloned().map(file_view).collect(),
                agent_patch: q.agent_patch.clone(),
                gold_patch: q.task.gold_patch.clone(),
                analysis: q.task.analysis.clone(),
            };
            let p = self.predict_transition(&ctx).await.map_err(model_failure)?;
            Ok(Prediction {
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
            let ctx = SwrContext {
                task_id: q.task.task_id.clone(),
                problem_statement: q.task.problem_statement.clone(),
                test_command: q.task.test_command.clone(),
                test_files: q.test_files.iter().cloned().map(file_view).collect(),
                agent_patch: q.agent_patch.to_string(),
                gold_patch: q.task.gold_patch.clone(),
                fail_to_pass: q.task.fail_to_pass.clone(),
                pass_to_pass: q.task.pass_to_pass.clone(),
                analysis: q.task.analysis.clone(),
            };
            let est = self.predict_reward(&ctx, 1).await.map_err(model_failure)?;
            Ok(RewardVerdict {
                // One sample: its 0/1 reward; several: the majority.
                resolved: est.mean >= 0.5,
                reward: est.mean,
                test_report: est
                    .samples
                    .first()
                    .map(|t| t.test_report.clone())
                    .unwrap_or_default(),
                called: !est.empty_patch,
            })
        })
    }
    fn describe(&self) -> String {
        let m = &self.config().swt_model;
        if m.is_empty() {
            "world client".into()
        } else {
            format!("world client ({m})")
        }
    }
}

/// The files a unified diff touches (`+++ b/PATH` lines), in order, without duplicates.
pub fn patch_files(patch: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in patch.lines() {
        if let Some(rest) = line.strip_prefix("+++ ") {
            let p = rest.split('\t').next().unwrap_or(rest).trim();
            if p == "/dev/null" {
                continue;
            }
            let p = p.strip_prefix("b/").unwrap_or(p).to_string();
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// The task's test files with its test patch applied on top of the agent's workspace (the
/// agent is done; graders reset the sandbox before real grading). A patch that does not apply
/// leaves the files as they are, which the model then sees.
pub async fn test_files_after_patch(ws: &dyn Workspace, test_patch: &str) -> Vec<ExecutedFile> {
    if test_patch.trim().is_empty() {
        return Vec::new();
    }
    let req =
        ExecRequest::shell("git apply --whitespace=nowarn - 2>&1 || patch -p1 --forward -s 2>&1")
            .stdin(test_patch.as_bytes().to_vec())
            .timeout(Duration::from_secs(60))
            .cwd(WORKSPACE);
    let _ = ws.exec(&req).await;
    let mut files = Vec::new();
    for rel in patch_files(test_patch).into_iter().take(MAX_EXECUTED_FILES) {
        let path = format!("{WORKSPACE}/{rel}");
        let current = ws.read_file(&path).await.ok().map(cap_text);
        files.push(ExecutedFile {
            path,
            base: None,
            current,
        });
    }
    files
}

/// The reward model's verdict on `agent_patch`: an empty patch is unresolved without a call
/// (SWE-World's rule); otherwise one call, failures returned as they are (infrastructure).
pub async fn simulated_reward(
    world: &dyn WorldModel,
    task: &SimTask,
    agent_patch: &str,
    test_files: Vec<ExecutedFile>,
) -> (Result<RewardVerdict, ModelFailure>, u64) {
    if agent_patch.trim().is_empty() {
        return (
            Ok(RewardVerdict {
                resolved: false,
                reward: 0.0,
                test_report: String::new(),
                called: false,
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
    use dojo_agent::LocalWorkspace;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A world model answering from a fixed script, counting its calls.
    struct Scripted {
        transition: Result<Prediction, ModelFailure>,
        reward: Result<RewardVerdict, ModelFailure>,
        calls: AtomicUsize,
        seen_files: Mutex<Vec<Vec<ExecutedFile>>>,
    }

    impl Scripted {
        fn new(transition: Result<Prediction, ModelFailure>) -> Scripted {
            Scripted {
                transition,
                reward: Ok(RewardVerdict {
                    resolved: true,
                    reward: 1.0,
                    test_report: "PASSED".into(),
                    called: true,
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
        ) -> BoxFuture<'a, Result<Prediction, ModelFailure>> {
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

    fn pred(stdout: &str, code: i32) -> Prediction {
        Prediction {
            stdout: stdout.into(),
            stderr: String::new(),
            exit_code: code,
        }
    }

    fn workspace() -> (tempfile::TempDir, LocalWorkspace) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("repro.py"), "print('real')\n").unwrap();
        std::fs::create_dir(dir.path().join("tests")).unwrap();
        std::fs::write(dir.path().join("tests/test_a.py"), "def test_a(): pass\n").unwrap();
        let git = |args: &[&str]| {
            let st = std::process::Command::new("git")
                .args(args)
                .current_dir(dir.path())
                .output()
                .unwrap();
            assert!(st.status.success(), "git {args:?}");
        };
        git(&["init", "-q"]);
        git(&["add", "-A"]);
        git(&[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "base",
        ]);
        let ws = LocalWorkspace::new(dir.path());
        (dir, ws)
    }

    fn task(env: bool) -> Arc<SimTask> {
        Arc::new(SimTask {
            task_id: "t".into(),
            has_environment: env,
            ..Default::default()
        })
    }

    #[tokio::test]
    async fn sim_routes_per_command() {
        let (_d, ws) = workspace();
        let world = Arc::new(Scripted::new(Ok(pred("simulated\n", 3))));
        let sim = SimWorkspace::new(&ws, EnvMode::Sim, world.clone(), task(false));

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
        assert_eq!(seen[0][0].path, "/testbed/repro.py");
        assert_eq!(seen[0][0].current.as_deref(), Some("print('real')\n"));
        assert_eq!(seen[0][0].base.as_deref(), Some("print('real')\n"));
        // A directory is expanded to its Python files.
        assert_eq!(seen[1][0].path, "/testbed/tests/test_a.py");

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
        let sim = SimWorkspace::new(&ws, EnvMode::Sim, world, task(false));
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
        let sim = SimWorkspace::new(&ws, EnvMode::Shadow, world, task(true));
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
        let sim = SimWorkspace::new(&ws, EnvMode::Shadow, world, task(true));
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
        let sim = SimWorkspace::new(&ws, EnvMode::Hybrid, world.clone(), task(true));
        let _ = sim
            .exec(&ExecRequest::shell("python3 -c 'print(1)' || true"))
            .await
            .unwrap();
        assert_eq!(world.calls.load(Ordering::SeqCst), 0);
        let out = sim.exec(&ExecRequest::shell("pytest")).await.unwrap();
        assert_eq!(out.stdout_lossy(), "sim\n");
        assert_eq!(world.calls.load(Ordering::SeqCst), 1);
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
        let mut log = SimLog::new(EnvMode::Shadow, "m".into());
        let v = |r| RewardVerdict {
            resolved: r,
            reward: if r { 1.0 } else { 0.0 },
            test_report: String::new(),
            called: true,
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

    #[test]
    fn files_of_a_patch() {
        let p = "diff --git a/t/a.py b/t/a.py\n--- a/t/a.py\n+++ b/t/a.py\n@@\n+x\ndiff --git a/n.py b/n.py\n--- /dev/null\n+++ b/n.py\n";
        assert_eq!(patch_files(p), ["t/a.py", "n.py"]);
    }
}
