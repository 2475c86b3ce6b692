//! # dojo-agent: the agent loop and its tools
//!
//! Pipeline position: task → sandbox → **agent** ⇄ policy → trajectory → grade → curate → train.
//!
//! [`Agent::run`] drives one rollout: it renders the prompts ([`prompt`]), asks the policy (any
//! [`dojo_llm::ChatBackend`]) for a turn, parses the turn's tool call in the configured
//! [`ActionFormat`] ([`action`]), runs the tool in the sandbox ([`tools`], through the
//! [`Workspace`] trait), and repeats until the agent submits or a budget runs out. It returns a
//! [`dojo_trajectory::Trajectory`] holding every message as sent and received, the stop reason,
//! whether submission was forced, and the workspace diff; grading is the caller's next step.
//! Infrastructure failures (policy unreachable, sandbox broken) end the rollout with
//! `llm_error`/`env_error` and mark it, so they are never scored as the agent's failure.

pub mod action;
mod agent;
pub mod context;
pub mod prompt;
pub mod tools;

pub use action::{ActionFormat, CONTINUE_MSG, Call, FormatError, ParsedTurn};
pub use agent::{Agent, AgentConfig, AgentError, ObservationRole, TaskInput};
pub use context::ContextConfig;
pub use dojo_sandbox::{LocalWorkspace, Workspace};
pub use prompt::Prompts;
pub use tools::{Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
