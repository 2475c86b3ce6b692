//! The agent loop: prompt → policy turn → parse → tool → observation, under budgets.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dojo_llm::{ChatBackend, ChatMessage, ChatRequest, LlmError, Role};
use dojo_sandbox::{SandboxError, WORKSPACE};
use dojo_trajectory::{
    ActionRecord, AgentInfo, Blame, Event, HostFingerprint, PolicyInfo, SamplingConfig, Step,
    StopReason, ToolOutcome, Trajectory,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::action::{self, ActionFormat, CONTINUE_MSG, FormatError, ParsedTurn};
use crate::context::{self, ContextConfig};
use crate::prompt::{PromptError, Prompts};
use crate::tools::{ToolContext, ToolError, ToolOutput, ToolRegistry};
use dojo_sandbox::workspace::Workspace;

/// Which role carries observations back to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ObservationRole {
    User,
    Tool,
}

/// Everything that shapes one rollout, apart from the tools and the policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// Named tool set (for the record; the registry passed to [`Agent::new`] is what runs).
    pub tool_set: String,
    pub action_format: ActionFormat,
    /// Model name sent in requests; empty lets the endpoint configuration decide.
    pub model: String,
    pub sampling: SamplingConfig,
    pub max_steps: u32,
    /// Stop when one request's prompt + completion reaches this many tokens.
    pub max_context_tokens: Option<u64>,
    /// Stop when all requests together used this many tokens.
    pub max_total_tokens: Option<u64>,
    /// Wall-time budget of the whole rollout, in seconds.
    pub max_wall_secs: f64,
    /// Timeout of one tool command, in seconds.
    pub command_timeout_secs: f64,
    /// Stop after this many consecutive turns without a valid call.
    pub max_format_errors: u32,
    /// Append "This is step k of a maximum of M…" to each observation.
    pub step_counter: bool,
    /// Default: `tool` for native calls, `user` for text formats.
    pub observation_role: Option<ObservationRole>,
    /// Directory with template overrides (`system.jinja`, `instance.jinja`, …).
    pub prompt_dir: Option<PathBuf>,
    /// SWE-Master context compression; off when `None`.
    pub context: Option<ContextConfig>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            tool_set: "swe-master".into(),
            action_format: ActionFormat::Xml,
            model: String::new(),
            sampling: SamplingConfig::default(),
            max_steps: 150,
            max_context_tokens: Some(131_072),
            max_total_tokens: None,
            max_wall_secs: 5400.0,
            command_timeout_secs: 90.0,
            max_format_errors: 5,
            step_counter: true,
            observation_role: None,
            prompt_dir: None,
            context: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Prompt(#[from] PromptError),
    #[error("agent configuration: {0}")]
    Config(String),
}

/// One task sample to run.
#[derive(Debug, Clone, Default)]
pub struct TaskInput {
    pub task_id: String,
    pub sample_index: u32,
    /// Template variables; `problem_statement` at least.
    pub vars: Map<String, Value>,
    /// Where the rollout runs, for the record.
    pub environment: HostFingerprint,
}

/// A configured agent; cheap to share, one [`Agent::run`] per rollout.
pub struct Agent {
    cfg: AgentConfig,
    tools: ToolRegistry,
    backend: Arc<dyn ChatBackend>,
    prompts: Prompts,
    policy: PolicyInfo,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// How a step ended the loop.
enum Flow {
    Continue,
    Stop(StopReason, Option<String>),
}

impl Agent {
    pub fn new(
        cfg: AgentConfig,
        tools: ToolRegistry,
        backend: Arc<dyn ChatBackend>,
    ) -> Result<Self, AgentError> {
        if cfg.max_steps == 0 {
            return Err(AgentError::Config("max_steps must be at least 1".into()));
        }
        if tools.is_empty() {
            return Err(AgentError::Config("the tool registry is empty".into()));
        }
        if !(cfg.command_timeout_secs > 0.0 && cfg.max_wall_secs > 0.0) {
            return Err(AgentError::Config(
                "command_timeout_secs and max_wall_secs must be positive".into(),
            ));
        }
        let prompts = Prompts::load(cfg.prompt_dir.as_deref())?;
        let policy = PolicyInfo {
            kind: "chat".into(),
            endpoint: Some(backend.describe()),
            ..Default::default()
        };
        Ok(Agent {
            cfg,
            tools,
            backend,
            prompts,
            policy,
        })
    }

    /// Describe the policy in the records this agent writes.
    pub fn with_policy(mut self, policy: PolicyInfo) -> Self {
        self.policy = policy;
        self
    }

    pub fn config(&self) -> &AgentConfig {
        &self.cfg
    }

    pub fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    fn observation_role(&self) -> ObservationRole {
        self.cfg
            .observation_role
            .unwrap_or(if self.cfg.action_format == ActionFormat::Native {
                ObservationRole::Tool
            } else {
                ObservationRole::User
            })
    }

    /// The system and instance messages for a task.
    pub fn initial_messages(
        &self,
        vars: &Map<String, Value>,
    ) -> Result<Vec<ChatMessage>, PromptError> {
        let mut ctx = vars.clone();
        ctx.entry("workspace").or_insert_with(|| json!(WORKSPACE));
        ctx.insert("max_steps".into(), json!(self.cfg.max_steps));
        ctx.insert(
            "action_format".into(),
            json!(self.cfg.action_format.as_str()),
        );
        ctx.insert("tools".into(), Value::Array(self.tools.schemas()));
        ctx.entry("problem_statement").or_insert_with(|| json!(""));
        let tools_text = if self.cfg.action_format.is_text() {
            self.prompts.render("tools_text", &ctx)?
        } else {
            String::new()
        };
        ctx.insert("tools_text".into(), json!(tools_text));
        Ok(vec![
            ChatMessage::system(self.prompts.render("system", &ctx)?),
            ChatMessage::user(self.prompts.render("instance", &ctx)?),
        ])
    }

    /// The request for LLM call `call` of a rollout; a configured seed becomes that call's own
    /// seed ([`dojo_llm::derive_seed`]), so turns do not replay one random stream.
    fn request(&self, messages: Vec<ChatMessage>, call: u64) -> ChatRequest {
        let s = &self.cfg.sampling;
        ChatRequest {
            model: self.cfg.model.clone(),
            messages,
            tools: (self.cfg.action_format == ActionFormat::Native).then(|| self.tools.specs()),
            temperature: s.temperature,
            top_p: s.top_p,
            max_tokens: s.max_tokens,
            seed: s.seed.map(|seed| dojo_llm::derive_seed(seed, call)),
            logprobs: s.logprobs,
            top_logprobs: s.top_logprobs,
            extra: s.extra.clone(),
            ..Default::default()
        }
    }

    /// Run one rollout in `ws`. Never fails: every failure ends up in the record's stop reason.
    pub async fn run(&self, ws: &dyn Workspace, task: &TaskInput) -> Trajectory {
        let mut run = Run::new(self, task);
        let (reason, detail) = run.drive(ws, task).await;
        run.finish(ws, reason, detail).await
    }
}

/// The mutable state of one rollout.
struct Run<'a> {
    agent: &'a Agent,
    t: Trajectory,
    start: Instant,
    /// Message index ranges `[start, end)` of each completed turn.
    turns: Vec<(usize, usize)>,
    /// Turns already folded into a compression summary.
    compressed_turns: u32,
    consecutive_format_errors: u32,
}

impl<'a> Run<'a> {
    fn new(agent: &'a Agent, task: &TaskInput) -> Self {
        let cfg = &agent.cfg;
        let mut t = Trajectory::new(&task.task_id, task.sample_index);
        t.policy = agent.policy.clone();
        if t.policy.model.is_none() && !cfg.model.is_empty() {
            t.policy.model = Some(cfg.model.clone());
        }
        t.sampling = cfg.sampling.clone();
        t.agent = AgentInfo {
            tool_set: cfg.tool_set.clone(),
            action_format: cfg.action_format.as_str().into(),
            prompt: cfg.prompt_dir.as_ref().map(|p| p.display().to_string()),
            config: serde_json::to_value(cfg).unwrap_or(Value::Null),
        };
        t.tools = agent.tools.specs();
        t.environment = task.environment.clone();
        if t.environment.dojo_version.is_empty() {
            t.environment.dojo_version = env!("CARGO_PKG_VERSION").into();
        }
        t.started_at_ms = unix_ms();
        Run {
            agent,
            t,
            start: Instant::now(),
            turns: Vec::new(),
            compressed_turns: 0,
            consecutive_format_errors: 0,
        }
    }

    fn event(&mut self, step: u32, kind: &str, blame: Blame, message: impl Into<String>) {
        self.t.events.push(Event {
            step,
            kind: kind.into(),
            blame,
            message: message.into(),
        });
    }

    fn remaining_wall(&self) -> Duration {
        Duration::from_secs_f64(self.agent.cfg.max_wall_secs).saturating_sub(self.start.elapsed())
    }

    /// Compresses the next window of turns if [`context::due_window`] says one is due: the
    /// summarizer (the policy itself, with the `summary` prompt) reads the window's transcript and
    /// its answer replaces those turns in later prompts. A failed compression is recorded as an
    /// infrastructure event and the rollout goes on uncompressed.
    async fn maybe_compress(&mut self, step: u32, task: &TaskInput) {
        let Some(cc) = self.agent.cfg.context.clone() else {
            return;
        };
        let Some(window) = context::due_window(
            &cc,
            &self.t.messages,
            &self.turns,
            self.compressed_turns,
            &task.vars,
        ) else {
            return;
        };
        let prompt = match self.agent.prompts.render("summary", &window.vars) {
            Ok(p) => p,
            Err(e) => {
                self.event(
                    step,
                    "compression_failed",
                    Blame::Infrastructure,
                    e.to_string(),
                );
                return;
            }
        };
        // Its own seed stream, apart from the turns' (steps are numbered from 1, below 2^32).
        let mut req = self
            .agent
            .request(vec![ChatMessage::user(prompt)], (1 << 32) | u64::from(step));
        req.tools = None;
        req.temperature = Some(cc.temperature);
        req.max_tokens = cc.max_summary_tokens;
        let started = Instant::now();
        let resp =
            tokio::time::timeout(self.remaining_wall(), self.agent.backend.complete(req)).await;
        let llm_ms = ms(started.elapsed());
        match resp {
            Ok(Ok(resp)) => {
                self.t.llm_calls += 1;
                let usage = resp.usage.unwrap_or_default();
                self.t.usage.add(&usage);
                let summary = resp
                    .choices
                    .first()
                    .map(|c| c.message.text())
                    .unwrap_or_default();
                self.t
                    .compressions
                    .push(window.event(step, &summary, usage, llm_ms));
                self.compressed_turns = window.last;
            }
            Ok(Err(e)) => {
                self.t.llm_calls += 1;
                self.event(
                    step,
                    "compression_failed",
                    Blame::Infrastructure,
                    e.to_string(),
                );
            }
            Err(_) => self.event(
                step,
                "compression_failed",
                Blame::Infrastructure,
                "wall-time budget ran out",
            ),
        }
    }

    async fn drive(
        &mut self,
        ws: &dyn Workspace,
        task: &TaskInput,
    ) -> (StopReason, Option<String>) {
        let cfg = &self.agent.cfg;
        match self.agent.initial_messages(&task.vars) {
            Ok(m) => self.t.messages = m,
            // A template that cannot render for this task: our configuration, not the agent.
            Err(e) => {
                return (
                    StopReason::EnvError,
                    Some(format!("rendering prompts: {e}")),
                );
            }
        }
        let mut ctx = ToolContext::new(ws, Duration::from_secs_f64(cfg.command_timeout_secs));
        for step in 1..=cfg.max_steps {
            if self.remaining_wall().is_zero() {
                return (StopReason::Timeout, None);
            }
            match self.step(&mut ctx, step, task).await {
                Flow::Continue => {}
                Flow::Stop(r, d) => return (r, d),
            }
        }
        (StopReason::MaxSteps, None)
    }

    fn step_suffix(&self, step: u32) -> String {
        let cfg = &self.agent.cfg;
        if !cfg.step_counter {
            return String::new();
        }
        let vars =
            json!({"step": step, "max_steps": cfg.max_steps, "remaining": cfg.max_steps - step});
        self.agent
            .prompts
            .render("step", &vars)
            .map(|s| format!("\n{s}"))
            .unwrap_or_default()
    }

    fn push_observation(&mut self, call_id: Option<&str>, text: String) -> usize {
        let msg = match (self.agent.observation_role(), call_id) {
            (ObservationRole::Tool, Some(id)) => ChatMessage::tool(id, text),
            (ObservationRole::Tool, None)
                if self.agent.cfg.action_format != ActionFormat::Native =>
            {
                let mut m = ChatMessage::new(Role::Tool, text);
                m.tool_call_id = None;
                m
            }
            _ => ChatMessage::user(text),
        };
        self.t.messages.push(msg);
        self.t.messages.len() - 1
    }

    /// One turn: ask the policy, parse its call, run it, then check the token budgets.
    async fn step(&mut self, ctx: &mut ToolContext<'_>, index: u32, task: &TaskInput) -> Flow {
        let mut step = Step {
            index,
            started_ms: ms(self.start.elapsed()),
            ..Default::default()
        };
        self.maybe_compress(index, task).await;
        let (messages, prompt_parts) = context::prompt(&self.t);
        step.prompt = prompt_parts;
        let turn_start = self.t.messages.len();

        // 1. Ask the policy.
        let assistant = match self.ask_policy(&mut step, messages, index).await {
            Ok(m) => m,
            Err(flow) => return flow,
        };
        let usage = step.usage;

        // 2. Parse its call.
        let flow = match action::parse(self.agent.cfg.action_format, &assistant) {
            Err(fe) => self.format_error(&mut step, index, fe, &assistant),
            Ok(turn) => self.act(ctx, &mut step, index, turn).await,
        };
        self.turns.push((turn_start, self.t.messages.len()));
        self.t.steps.push(step);

        // 4. Token budgets, checked after the step so its work is kept.
        if matches!(flow, Flow::Continue) {
            return self.token_budgets(usage);
        }
        flow
    }

    /// Ask the policy for the next turn and record its answer (usage, ids, token ids) on `step`;
    /// the assistant message is pushed onto the conversation. A failed call is the returned `Err`.
    async fn ask_policy(
        &mut self,
        step: &mut Step,
        messages: Vec<ChatMessage>,
        index: u32,
    ) -> Result<ChatMessage, Flow> {
        let req = self.agent.request(messages, u64::from(index));
        let llm_started = Instant::now();
        let answer =
            tokio::time::timeout(self.remaining_wall(), self.agent.backend.complete(req)).await;
        step.llm_ms = ms(llm_started.elapsed());
        self.t.llm_calls += 1;
        let resp = match answer {
            Err(_) => {
                return Err(Flow::Stop(
                    StopReason::Timeout,
                    Some("wall-time budget ran out waiting for the policy".into()),
                ));
            }
            Ok(Err(e)) => return Err(self.llm_failure(index, e)),
            Ok(Ok(r)) => r,
        };
        let usage = resp.usage.unwrap_or_default();
        self.t.usage.add(&usage);
        step.usage = usage;
        step.response_id = Some(resp.id.clone()).filter(|s| !s.is_empty());
        step.prompt_token_ids = resp.prompt_token_ids.clone();
        let Some(choice) = resp.choices.into_iter().next() else {
            return Err(Flow::Stop(
                StopReason::LlmError,
                Some("response without choices".into()),
            ));
        };
        step.finish_reason = choice.finish_reason.clone();
        step.completion_token_ids = choice.token_ids.clone();
        step.logprobs = choice.logprobs.clone();
        let assistant = choice.message;
        self.t.messages.push(assistant.clone());
        step.assistant_message = self.t.messages.len() - 1;
        Ok(assistant)
    }

    /// A turn without a valid call: record it, answer it (once per native call id), and stop
    /// after `max_format_errors` such turns in a row.
    fn format_error(
        &mut self,
        step: &mut Step,
        index: u32,
        fe: FormatError,
        assistant: &ChatMessage,
    ) -> Flow {
        let cfg = &self.agent.cfg;
        self.t.format_errors += 1;
        self.consecutive_format_errors += 1;
        self.event(index, fe.kind(), Blame::Agent, fe.to_string());
        step.format_error = Some(fe.to_string());
        let text = match &fe {
            FormatError::NoCall => CONTINUE_MSG.to_string(),
            other => format!("ERROR: {other}.\n{CONTINUE_MSG}"),
        } + &self.step_suffix(index);
        // Native calls that failed to parse still need an answer per call id.
        let ids: Vec<String> = assistant
            .tool_calls
            .iter()
            .flatten()
            .map(|c| c.id.clone())
            .collect();
        if cfg.action_format == ActionFormat::Native && !ids.is_empty() {
            for id in ids {
                let i = self.push_observation(Some(&id), text.clone());
                step.observation_messages.push(i);
            }
        } else {
            let i = self.push_observation(None, text);
            step.observation_messages.push(i);
        }
        if self.consecutive_format_errors >= cfg.max_format_errors {
            return Flow::Stop(
                StopReason::FormatErrors,
                Some(format!(
                    "{} consecutive turns without a valid function call",
                    self.consecutive_format_errors
                )),
            );
        }
        Flow::Continue
    }

    /// 3. Run the parsed call, within what is left of the wall-time budget.
    async fn act(
        &mut self,
        ctx: &mut ToolContext<'_>,
        step: &mut Step,
        index: u32,
        turn: ParsedTurn,
    ) -> Flow {
        self.consecutive_format_errors = 0;
        step.action = Some(ActionRecord {
            tool: turn.call.name.clone(),
            arguments: Value::Object(turn.call.arguments.clone()),
            call_id: turn
                .call
                .id
                .clone()
                .unwrap_or_else(|| format!("step_{index}")),
        });
        let tool_started = Instant::now();
        let result = tokio::time::timeout(
            self.remaining_wall(),
            self.agent
                .tools
                .call(ctx, &turn.call.name, &turn.call.arguments),
        )
        .await;
        step.tool_ms = ms(tool_started.elapsed());
        match result {
            Err(_) => Flow::Stop(
                StopReason::Timeout,
                Some("wall-time budget ran out during a tool call".into()),
            ),
            Ok(Err(ToolError::Env { tool, source })) => {
                self.event(
                    index,
                    "env_error",
                    Blame::Infrastructure,
                    format!("{tool}: {source}"),
                );
                Flow::Stop(
                    StopReason::EnvError,
                    Some(format!("sandbox failure in {tool}: {source}")),
                )
            }
            Ok(Ok(out)) => self.observe(step, index, &turn, out),
        }
    }

    /// Record a tool's outcome and feed its output back, answering any skipped calls.
    fn observe(&mut self, step: &mut Step, index: u32, turn: &ParsedTurn, out: ToolOutput) -> Flow {
        step.tool = Some(ToolOutcome {
            exit_code: out.exit_code,
            truncated: out.truncated,
            timed_out: out.timed_out,
            blocked: out.blocked,
            error: out.error,
            duration_ms: step.tool_ms,
        });
        if let Some(note) = &out.infra_note {
            self.event(
                index,
                "tool_infra",
                Blame::Infrastructure,
                format!("{}: {note}", turn.call.name),
            );
        }
        if out.blocked && self.agent.tools.get(&turn.call.name).is_none() {
            self.event(
                index,
                "unknown_tool",
                Blame::Agent,
                format!("unknown function {:?}", turn.call.name),
            );
        }
        let text = if out.submitted {
            out.text.clone()
        } else {
            out.text.clone() + &self.step_suffix(index)
        };
        let i = self.push_observation(turn.call.id.as_deref(), text);
        step.observation_messages.push(i);
        for id in &turn.skipped_ids {
            let i = self.push_observation(
                Some(id),
                "ERROR: Only one function call is executed per turn; this call was skipped.".into(),
            );
            step.observation_messages.push(i);
        }
        if out.submitted {
            return Flow::Stop(StopReason::Submitted, None);
        }
        Flow::Continue
    }

    /// The context and total token budgets, given the last call's usage.
    fn token_budgets(&self, usage: dojo_llm::Usage) -> Flow {
        let cfg = &self.agent.cfg;
        let context_used = usage.prompt_tokens + usage.completion_tokens;
        if let Some(max) = cfg.max_context_tokens.filter(|&m| context_used >= m) {
            return Flow::Stop(
                StopReason::MaxTokens,
                Some(format!("context reached {context_used} of {max} tokens")),
            );
        }
        if let Some(max) = cfg
            .max_total_tokens
            .filter(|&m| self.t.usage.total_tokens >= m)
        {
            return Flow::Stop(
                StopReason::MaxTokens,
                Some(format!(
                    "rollout used {} of {max} tokens",
                    self.t.usage.total_tokens
                )),
            );
        }
        Flow::Continue
    }

    fn llm_failure(&mut self, index: u32, e: LlmError) -> Flow {
        let blame = if e.is_infrastructure() {
            Blame::Infrastructure
        } else {
            Blame::Model
        };
        self.event(index, e.kind(), blame, e.to_string());
        match e {
            // The conversation outgrew the model: the agent's budget, not the infrastructure.
            LlmError::ContextLength { .. } => {
                Flow::Stop(StopReason::MaxTokens, Some(e.to_string()))
            }
            _ => Flow::Stop(StopReason::LlmError, Some(e.to_string())),
        }
    }

    async fn finish(
        mut self,
        ws: &dyn Workspace,
        mut reason: StopReason,
        mut detail: Option<String>,
    ) -> Trajectory {
        match ws.diff().await {
            Ok(p) => self.t.patch = Some(p),
            // The agent wrote more than any fix needs: its outcome, recorded without the patch.
            Err(e @ SandboxError::TooLarge { .. }) => {
                self.event(
                    self.t.steps.len() as u32,
                    "patch_too_large",
                    Blame::Agent,
                    e.to_string(),
                );
                detail = Some(match detail {
                    Some(d) => format!("{d}; {e}"),
                    None => e.to_string(),
                });
            }
            Err(e) => {
                self.event(
                    self.t.steps.len() as u32,
                    "env_error",
                    Blame::Infrastructure,
                    format!("extracting the diff: {e}"),
                );
                if !reason.is_infrastructure() {
                    reason = StopReason::EnvError;
                    detail = Some(format!("extracting the diff: {e}"));
                }
            }
        }
        self.t.stop_reason = reason;
        self.t.stop_detail = detail;
        self.t.forced_submission = reason.is_budget();
        self.t.infra_failure = reason.is_infrastructure();
        self.t.wall_ms = ms(self.start.elapsed());
        self.t
    }
}
