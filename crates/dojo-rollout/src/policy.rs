//! Policies: who answers the agent's turns.
//!
//! A policy is configured by a TOML/JSON file or a shorthand (`gold-replay`, `openai:MODEL`,
//! `replay:FILE`, `embedded`) and becomes, per rollout, a [`dojo_llm::ChatBackend`] the agent loop
//! talks to. Non-model policies are backends too ([`ScriptedBackend`]): the agent loop, tools and
//! record are then exactly the ones a model run uses. Every backend is wrapped in a
//! [`LimitedBackend`] so LLM calls have their own concurrency limit, apart from sandboxes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use dojo_llm::{
    BoxFuture, ChatBackend, ChatMessage, ChatRequest, ChatResponse, Choice, LlmError, Role, Usage,
};

use crate::gold::{Action, ToolNames};

/// A policy as configured. `kind` selects the variant in files: `kind = "openai"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum PolicyKind {
    /// Any OpenAI-compatible `/v1/chat/completions` endpoint.
    Openai {
        /// Defaults to `OPENAI_BASE_URL`.
        #[serde(default)]
        base_url: Option<String>,
        /// Name of the environment variable holding the key (default `OPENAI_API_KEY`).
        #[serde(default)]
        api_key_env: Option<String>,
        model: String,
        /// Seconds one request may take (default: `DOJO_LLM_TIMEOUT`, else 600).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_timeout_s: Option<f64>,
    },
    /// Replays the task's gold patch through the real tools; no LLM.
    GoldReplay {
        /// Run the tests the failing tests live in before submitting (default true).
        #[serde(default = "yes")]
        run_tests: bool,
    },
    /// Replays the assistant turns of recorded trajectories (matched by task id and sample).
    Replay { file: PathBuf },
    /// The in-process engine (dojo-cli's `engine` feature); `model` = path or `default`.
    Embedded {
        #[serde(default = "default_model")]
        model: String,
    },
}

fn yes() -> bool {
    true
}

fn default_model() -> String {
    "default".into()
}

/// Sampling parameters for model policies (ignored by scripted ones).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Sampling {
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Per-turn completion cap.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub seed: Option<u64>,
    /// Vendor fields sent as-is.
    #[serde(default)]
    pub extra: Map<String, Value>,
}

/// The whole policy file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyConfig {
    #[serde(flatten)]
    pub kind: PolicyKind,
    /// Name used in summaries and as `model_name_or_path` in predictions.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub sampling: Sampling,
    /// LLM calls in flight at once (default: one per sandbox).
    #[serde(default)]
    pub llm_concurrency: Option<usize>,
    /// Agent settings passed to the agent loop (budgets, tool set, action format).
    #[serde(default)]
    pub agent: Map<String, Value>,
    /// The execution mode and world model (`[world]`); absent: real execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world: Option<dojo_world::route::WorldPolicy>,
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error(
        "policy {0:?}: not a known shorthand (gold-replay, openai:MODEL, replay:FILE, embedded[:MODEL]) nor an existing .toml/.json file"
    )]
    Unknown(String),
    #[error("policy file {path}: {source}")]
    File {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl PolicyConfig {
    pub fn new(kind: PolicyKind) -> PolicyConfig {
        PolicyConfig {
            kind,
            name: None,
            sampling: Sampling::default(),
            llm_concurrency: None,
            agent: Map::new(),
            world: None,
        }
    }

    /// The embedded model as an agent, as `dojo demo`, `dojo train sft --eval-tasks` and `dojo
    /// rl` run it: the engine renders the tool schemas into the chat template and parses
    /// Hermes-style calls back into `tool_calls` (`action_format = "native"`, the R2E tool set);
    /// greedy, one request at a time, `max_steps` agent turns of `max_tokens` each.
    pub fn embedded_agent(
        model: &str,
        name: &str,
        max_steps: u32,
        max_tokens: u32,
    ) -> PolicyConfig {
        let mut policy = PolicyConfig::new(PolicyKind::Embedded {
            model: model.to_string(),
        });
        policy.name = Some(format!("embedded:{name}"));
        policy.sampling.max_tokens = Some(max_tokens);
        policy.sampling.temperature = Some(0.0);
        policy.llm_concurrency = Some(1);
        policy.agent.insert("max_steps".into(), max_steps.into());
        policy.agent.insert("action_format".into(), "native".into());
        policy.agent.insert("tool_set".into(), "r2e".into());
        policy
    }

    /// A shorthand or a path to a `.toml` / `.json` policy file.
    pub fn parse(spec: &str) -> Result<PolicyConfig, PolicyError> {
        let path = Path::new(spec);
        let is_file = spec.ends_with(".toml") || spec.ends_with(".json");
        if is_file || path.is_file() {
            return Self::load(path);
        }
        let (head, arg) = spec.split_once(':').unwrap_or((spec, ""));
        let kind = match (head, arg) {
            ("gold-replay" | "gold", "") => PolicyKind::GoldReplay { run_tests: true },
            ("openai", m) if !m.is_empty() => PolicyKind::Openai {
                base_url: None,
                api_key_env: None,
                model: m.to_string(),
                request_timeout_s: None,
            },
            ("replay", f) if !f.is_empty() => PolicyKind::Replay { file: f.into() },
            ("embedded", m) => PolicyKind::Embedded {
                model: if m.is_empty() {
                    default_model()
                } else {
                    m.to_string()
                },
            },
            _ => return Err(PolicyError::Unknown(spec.to_string())),
        };
        Ok(PolicyConfig::new(kind))
    }

    pub fn load(path: &Path) -> Result<PolicyConfig, PolicyError> {
        let ferr = |source: Box<dyn std::error::Error + Send + Sync>| PolicyError::File {
            path: path.to_path_buf(),
            source,
        };
        let text = std::fs::read_to_string(path).map_err(|e| ferr(e.into()))?;
        if path.extension().is_some_and(|e| e == "json") {
            serde_json::from_str(&text).map_err(|e| ferr(e.into()))
        } else {
            toml::from_str(&text).map_err(|e| ferr(e.into()))
        }
    }

    /// Short label: summaries, predictions' `model_name_or_path`.
    pub fn label(&self) -> String {
        if let Some(n) = &self.name {
            return n.clone();
        }
        match &self.kind {
            PolicyKind::Openai { model, .. } => format!("openai:{model}"),
            PolicyKind::GoldReplay { .. } => "gold-replay".into(),
            PolicyKind::Replay { file } => format!("replay:{}", file.display()),
            PolicyKind::Embedded { model } => format!("embedded:{model}"),
        }
    }

    /// The `kind` string recorded in trajectories.
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            PolicyKind::Openai { .. } => "openai",
            PolicyKind::GoldReplay { .. } => "gold-replay",
            PolicyKind::Replay { .. } => "replay",
            PolicyKind::Embedded { .. } => "embedded",
        }
    }

    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// A backend that answers from a fixed list of assistant turns: the i-th request (counted by the
/// assistant messages already in the conversation) gets the i-th turn.
pub struct ScriptedBackend {
    label: String,
    turns: Script,
}

enum Script {
    /// Neutral actions, rendered with the tool names the request offers.
    Actions(Vec<Action>),
    /// Recorded assistant messages, replayed verbatim.
    Messages(Vec<ChatMessage>),
}

impl ScriptedBackend {
    pub fn gold(task_id: &str, actions: Vec<Action>) -> ScriptedBackend {
        ScriptedBackend {
            label: format!("gold-replay:{task_id}"),
            turns: Script::Actions(actions),
        }
    }
    pub fn replay(label: String, messages: Vec<ChatMessage>) -> ScriptedBackend {
        ScriptedBackend {
            label,
            turns: Script::Messages(messages),
        }
    }

    fn turn(&self, req: &ChatRequest) -> Result<ChatMessage, LlmError> {
        let i = req
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        let exhausted = || LlmError::Backend {
            endpoint: self.label.clone(),
            detail: format!(
                "script exhausted after {i} turns (the agent did not stop where the script did)"
            ),
        };
        match &self.turns {
            Script::Messages(ms) => ms.get(i).cloned().ok_or_else(exhausted),
            Script::Actions(acts) => {
                let names = ToolNames::from_specs(req.tools.as_deref().unwrap_or(&[]));
                let a = acts.get(i).ok_or_else(exhausted)?;
                names.message(i, a).ok_or_else(|| LlmError::Backend {
                    endpoint: self.label.clone(),
                    detail: format!("the agent's tool set lacks a tool for {a:?}"),
                })
            }
        }
    }
}

impl ChatBackend for ScriptedBackend {
    fn complete(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatResponse, LlmError>> {
        let res = self.turn(&req).map(|message| {
            let finish = if message.tool_calls.is_some() {
                dojo_llm::finish_reason::TOOL_CALLS
            } else {
                dojo_llm::finish_reason::STOP
            };
            ChatResponse {
                model: self.label.clone(),
                choices: vec![Choice {
                    index: 0,
                    message,
                    finish_reason: Some(finish.to_string()),
                    logprobs: None,
                    token_ids: None,
                    extra: Map::new(),
                }],
                usage: Some(Usage::default()),
                ..Default::default()
            }
        });
        Box::pin(async move { res })
    }
    fn describe(&self) -> String {
        self.label.clone()
    }
}

/// Caps LLM calls in flight across every rollout sharing the semaphore.
pub struct LimitedBackend {
    inner: Arc<dyn ChatBackend>,
    sem: Arc<tokio::sync::Semaphore>,
}

impl LimitedBackend {
    pub fn new(inner: Arc<dyn ChatBackend>, sem: Arc<tokio::sync::Semaphore>) -> Self {
        LimitedBackend { inner, sem }
    }
}

impl ChatBackend for LimitedBackend {
    fn complete(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatResponse, LlmError>> {
        Box::pin(async move {
            let _permit = self.sem.acquire().await.map_err(|_| LlmError::Backend {
                endpoint: self.inner.describe(),
                detail: "LLM concurrency limiter closed".into(),
            })?;
            self.inner.complete(req).await
        })
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn context_tokens(&self) -> Option<usize> {
        self.inner.context_tokens()
    }
}

impl PolicyConfig {
    /// Lay the command line's settings over the policy: agent turns per rollout
    /// (`[agent] max_steps`) and the `[world]` overrides.
    pub fn override_with(
        &mut self,
        max_steps: Option<u32>,
        world: &dojo_world::route::WorldOverrides,
    ) -> Result<(), dojo_world::route::OverrideError> {
        if let Some(n) = max_steps {
            self.agent.insert("max_steps".into(), n.into());
        }
        world.apply(&mut self.world)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shorthands_and_files() {
        assert_eq!(
            PolicyConfig::parse("gold-replay").unwrap().kind,
            PolicyKind::GoldReplay { run_tests: true }
        );
        assert_eq!(
            PolicyConfig::parse("openai:gpt-x").unwrap().label(),
            "openai:gpt-x"
        );
        assert_eq!(
            PolicyConfig::parse("embedded").unwrap().label(),
            "embedded:default"
        );
        assert!(PolicyConfig::parse("nonsense").is_err());
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.toml");
        std::fs::write(
            &p,
            "kind = \"openai\"\nmodel = \"qwen\"\nbase_url = \"http://x/v1\"\nname = \"q\"\nllm_concurrency = 8\n[sampling]\ntemperature = 0.7\n[agent]\nmax_steps = 30\n",
        )
        .unwrap();
        let c = PolicyConfig::parse(p.to_str().unwrap()).unwrap();
        assert_eq!(c.label(), "q");
        assert_eq!(c.sampling.temperature, Some(0.7));
        assert_eq!(c.agent["max_steps"], 30);
        std::fs::write(&p, "kind = \"openai\"\nmodle = \"typo\"\n").unwrap();
        let e = PolicyConfig::parse(p.to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("p.toml"), "{e}");
    }

    #[tokio::test]
    async fn scripted_backend_answers_by_turn_and_reports_exhaustion() {
        let b = ScriptedBackend::gold(
            "t",
            vec![
                Action::Bash {
                    command: "ls".into(),
                },
                Action::Submit,
            ],
        );
        let mut req = ChatRequest {
            messages: vec![ChatMessage::system("s"), ChatMessage::user("u")],
            ..Default::default()
        };
        let r = b.complete(req.clone()).await.unwrap();
        let call = &r.choices[0].message.tool_calls.as_ref().unwrap()[0];
        assert_eq!(call.function.name, "execute_bash");
        assert_eq!(call.function.arguments, r#"{"cmd":"ls"}"#);
        req.messages.push(r.choices[0].message.clone());
        req.messages.push(ChatMessage::tool("call_gold_0", "out"));
        let r = b.complete(req.clone()).await.unwrap();
        assert_eq!(
            r.choices[0].message.tool_calls.as_ref().unwrap()[0]
                .function
                .name,
            "finish"
        );
        req.messages.push(r.choices[0].message.clone());
        let e = b.complete(req).await.unwrap_err();
        assert_eq!(e.class(), dojo_llm::FailureClass::Infrastructure);
    }

    #[test]
    fn command_line_overrides_reach_the_policy() {
        let mut p = PolicyConfig::parse("gold-replay").unwrap();
        let world = dojo_world::route::WorldOverrides {
            swr_seed: Some(7),
            ..Default::default()
        };
        p.override_with(Some(3), &world).unwrap();
        assert_eq!(p.agent["max_steps"], 3);
        assert_eq!(p.world.unwrap().swr_seed, Some(7));
    }
}
