//! Where each command of a rollout runs: for real in the sandbox, in the transition model, or
//! both. The execution mode (`--execution`) and the command's class ([`crate::classify`]) decide:
//!
//! | mode | Python / tests | install | blocked | other |
//! |---|---|---|---|---|
//! | `real` | real | real | real (the tools' own rules) | real |
//! | `sim` | model | canned | refused | real |
//! | `hybrid` | real if the task has a working environment and the command is cheap, else model | real with an environment, else canned | refused | real |
//! | `shadow` | real, and the model's prediction measured against it | real | real | real |
//!
//! "Cheap" means anything but a whole test suite ([`crate::classify::PythonRun::whole_suite`]):
//! one script, one test file or a filtered run.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::classify::CommandClass;
use crate::client::Role;

/// How a rollout's environment answers commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionMode {
    /// Everything runs in the real sandbox with the task's Python environment.
    #[default]
    Real,
    /// No Python environment: Python and tests go to the transition model, the reward model
    /// grades.
    Sim,
    /// Real where the task has an environment and the command is cheap, simulated otherwise.
    Hybrid,
    /// Real answers to the agent; the models' predictions are recorded with their drift.
    Shadow,
}

impl ExecutionMode {
    pub const ALL: [ExecutionMode; 4] = [
        ExecutionMode::Real,
        ExecutionMode::Sim,
        ExecutionMode::Hybrid,
        ExecutionMode::Shadow,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionMode::Real => "real",
            ExecutionMode::Sim => "sim",
            ExecutionMode::Hybrid => "hybrid",
            ExecutionMode::Shadow => "shadow",
        }
    }
    /// Whether this mode needs the task's Python environment built (for real execution or
    /// real grading).
    pub fn needs_environment(self) -> bool {
        matches!(self, ExecutionMode::Real | ExecutionMode::Shadow)
    }
    /// Whether this mode consults the world models at all.
    pub fn uses_world_model(self) -> bool {
        !matches!(self, ExecutionMode::Real)
    }
}

impl fmt::Display for ExecutionMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown mode or world-model name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {value:?} is not one of {expected}")]
pub struct ParseModeError {
    what: &'static str,
    value: String,
    expected: &'static str,
}

impl FromStr for ExecutionMode {
    type Err = ParseModeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ExecutionMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| ParseModeError {
                what: "env mode",
                value: s.to_string(),
                expected: "real, sim, hybrid, shadow",
            })
    }
}

/// Which model plays SWT and SWR (`--world-model`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "model")]
pub enum WorldModelSpec {
    /// The embedded engine (offline): `embedded` is the bundled model (a floor for fidelity),
    /// `embedded:DIR` a checkpoint such as one `dojo train sft` wrote from `dojo curate --world`
    /// data (a Hugging Face directory or a GGUF file).
    Embedded(Option<String>),
    /// A model served behind an OpenAI-compatible endpoint.
    Openai(String),
}

impl FromStr for WorldModelSpec {
    type Err = ParseModeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once(':') {
            None if s == "embedded" => Ok(WorldModelSpec::Embedded(None)),
            Some(("embedded", model)) if !model.trim().is_empty() => {
                Ok(WorldModelSpec::Embedded(Some(model.to_string())))
            }
            Some(("openai", model)) if !model.trim().is_empty() => {
                Ok(WorldModelSpec::Openai(model.to_string()))
            }
            _ => Err(ParseModeError {
                what: "world model",
                value: s.to_string(),
                expected: "embedded, embedded:MODEL, openai:MODEL",
            }),
        }
    }
}

impl WorldModelSpec {
    /// The model the embedded engine loads for this spec: `default` (the bundled one) or the
    /// path `embedded:DIR` names; `None` for a served model.
    pub fn engine_model(&self) -> Option<String> {
        match self {
            WorldModelSpec::Embedded(m) => Some(m.clone().unwrap_or_else(|| "default".into())),
            WorldModelSpec::Openai(_) => None,
        }
    }
}

impl fmt::Display for WorldModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorldModelSpec::Embedded(None) => f.write_str("embedded"),
            WorldModelSpec::Embedded(Some(m)) => write!(f, "embedded:{m}"),
            WorldModelSpec::Openai(m) => write!(f, "openai:{m}"),
        }
    }
}

/// The `[world]` table of a policy file (also set by `--execution` / `--world-model`). Part of
/// the policy, so a run directory never mixes real and simulated trajectories on resume.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorldPolicy {
    #[serde(default)]
    pub mode: ExecutionMode,
    /// `embedded`, `embedded:DIR` or `openai:MODEL` ([`WorldModelSpec`]): the model of both
    /// roles, unless `swt_model` / `swr_model` name one; required unless `mode = "real"` or
    /// both of those are set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The transition model (SWT) when it is not `model`: SWE-World trains one model per role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swt_model: Option<String>,
    /// The reward model (SWR) when it is not `model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swr_model: Option<String>,
    /// Comma-separated OpenAI-compatible endpoints of the world model (default:
    /// `OPENAI_BASE_URL`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// SWT's endpoints when they are not `base_url` (two servers, one model each).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swt_base_url: Option<String>,
    /// SWR's endpoints when they are not `base_url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swr_base_url: Option<String>,
    /// The variable holding the endpoints' API key (default `OPENAI_API_KEY`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// SWR samples per reward (default 1): [`crate::RewardEstimate::verdict`] over their mean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swr_samples: Option<u32>,
    /// Seed of the coin that breaks SWR ties (default 0; mixed with task and patch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swr_seed: Option<u64>,
    /// Show SWT/SWR the initial analysis this model wrote for each task, from the cache that
    /// `dojo tasks analyze --model` fills ([`crate::analysis`]); a task without one is shown
    /// "No initial analysis provided." and counted in the log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis_model: Option<String>,
    /// Where the analyses are cached (default `$DOJO_HOME/world-analysis`; `dojo tasks analyze
    /// --cache`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis_cache: Option<std::path::PathBuf>,
    /// Per-section prompt caps of SWT and SWR (`[world.caps]`, characters; default SWE-World's,
    /// [`Caps::swe_world`]). A model trained with `dojo curate --world-caps` should be sent the
    /// same caps it was trained on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caps: Option<crate::Caps>,
}

impl WorldPolicy {
    /// The model that plays `role` ([`Role::Swt`] or [`Role::Swr`]): its own key, else `model`.
    pub fn role_model(&self, role: Role) -> Option<&str> {
        match role {
            Role::Swt => self.swt_model.as_deref(),
            Role::Swr => self.swr_model.as_deref(),
            _ => None,
        }
        .or(self.model.as_deref())
    }

    /// The endpoints of `role`: its own key, else `base_url` (`None`: `OPENAI_BASE_URL`).
    pub fn role_base_url(&self, role: Role) -> Option<&str> {
        match role {
            Role::Swt => self.swt_base_url.as_deref(),
            Role::Swr => self.swr_base_url.as_deref(),
            _ => None,
        }
        .or(self.base_url.as_deref())
    }

    /// The models the embedded engine must load for this policy, each once (`default` for the
    /// bundled one, else the path `embedded:DIR` names); empty when no simulated mode asks for
    /// one.
    pub fn embedded_models(&self) -> Vec<String> {
        if self.mode == ExecutionMode::Real {
            return Vec::new();
        }
        let mut models = Vec::new();
        for role in [Role::Swt, Role::Swr] {
            let Some(Ok(spec)) = self.role_model(role).map(str::parse::<WorldModelSpec>) else {
                continue;
            };
            if let Some(m) = spec.engine_model().filter(|m| !models.contains(m)) {
                models.push(m);
            }
        }
        models
    }
}

/// Settings given on the command line (`dojo rollout`, `dojo rl`) over a policy's `[world]`
/// table: each one given replaces the table's value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorldOverrides {
    pub mode: Option<ExecutionMode>,
    pub model: Option<String>,
    pub swt_model: Option<String>,
    pub swr_model: Option<String>,
    pub base_url: Option<String>,
    pub swr_samples: Option<u32>,
    pub swr_seed: Option<u64>,
}

/// A command-line world setting that cannot be used as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct OverrideError(&'static str);

impl WorldOverrides {
    fn given(&self) -> bool {
        self.mode.is_some()
            || self.model.is_some()
            || self.swt_model.is_some()
            || self.swr_model.is_some()
            || self.base_url.is_some()
            || self.swr_samples.is_some()
            || self.swr_seed.is_some()
    }

    /// Lay the settings given over `world` (a policy's `[world]` table, created when any is
    /// given).
    pub fn apply(&self, world: &mut Option<WorldPolicy>) -> Result<(), OverrideError> {
        if !self.given() {
            return Ok(());
        }
        if self.swr_samples == Some(0) {
            return Err(OverrideError("--swr-samples must be at least 1"));
        }
        let w = world.get_or_insert_with(Default::default);
        if let Some(m) = self.mode {
            w.mode = m;
        }
        let set = |to: &mut Option<String>, from: &Option<String>| {
            if from.is_some() {
                to.clone_from(from);
            }
        };
        set(&mut w.model, &self.model);
        set(&mut w.swt_model, &self.swt_model);
        set(&mut w.swr_model, &self.swr_model);
        set(&mut w.base_url, &self.base_url);
        if self.swr_samples.is_some() {
            w.swr_samples = self.swr_samples;
        }
        if self.swr_seed.is_some() {
            w.swr_seed = self.swr_seed;
        }
        Ok(())
    }

    /// The `[world]` table of every rollout of `dojo rl` (which has no policy file): `None` in
    /// real mode, where a world-model setting is refused as a mistake.
    pub fn rl_world(&self) -> Result<Option<WorldPolicy>, OverrideError> {
        let mut world = None;
        self.apply(&mut world)?;
        match world {
            Some(w) if w.mode == ExecutionMode::Real => {
                if w.model.is_some()
                    || w.swt_model.is_some()
                    || w.swr_model.is_some()
                    || w.swr_samples.is_some()
                {
                    return Err(OverrideError(
                        "--world-model, --swt-model, --swr-model and --swr-samples need --execution sim, hybrid or shadow",
                    ));
                }
                Ok(None)
            }
            w => Ok(w),
        }
    }
}

/// What to do with one command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// Run it in the sandbox.
    Real,
    /// Ask the transition model.
    Simulate,
    /// Run it for real, answer with the real result, and measure the model's prediction.
    Shadow,
    /// Answer with a canned success (installs with nothing to install into).
    Canned,
    /// Refuse it with this reason.
    Refuse(String),
}

impl Route {
    /// Short name for records and reports.
    pub fn as_str(&self) -> &'static str {
        match self {
            Route::Real => "real",
            Route::Simulate => "simulate",
            Route::Shadow => "shadow",
            Route::Canned => "canned",
            Route::Refuse(_) => "refuse",
        }
    }
}

/// The route of a command of class `class` in `mode`; `has_environment` says whether the task
/// has a working Python environment in this sandbox.
pub fn route(mode: ExecutionMode, class: &CommandClass, has_environment: bool) -> Route {
    match (mode, class) {
        (ExecutionMode::Real, _) => Route::Real,
        (ExecutionMode::Shadow, CommandClass::Python(_)) => Route::Shadow,
        (ExecutionMode::Shadow, _) => Route::Real,
        (ExecutionMode::Sim | ExecutionMode::Hybrid, CommandClass::Blocked(reason)) => {
            Route::Refuse(reason.clone())
        }
        (ExecutionMode::Sim | ExecutionMode::Hybrid, CommandClass::Real) => Route::Real,
        (ExecutionMode::Sim, CommandClass::Python(_)) => Route::Simulate,
        (ExecutionMode::Sim, CommandClass::Install) => Route::Canned,
        (ExecutionMode::Hybrid, CommandClass::Python(run)) => {
            if has_environment && !run.whole_suite {
                Route::Real
            } else {
                Route::Simulate
            }
        }
        (ExecutionMode::Hybrid, CommandClass::Install) => {
            if has_environment {
                Route::Real
            } else {
                Route::Canned
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::classify;

    #[test]
    fn routing_table() {
        let cases = [
            // (mode, command, has env, route)
            (ExecutionMode::Real, "python x.py", true, "real"),
            (ExecutionMode::Real, "rm -rf /", true, "real"),
            (ExecutionMode::Sim, "python x.py", true, "simulate"),
            (ExecutionMode::Sim, "pytest", false, "simulate"),
            (ExecutionMode::Sim, "pip install x", false, "canned"),
            (ExecutionMode::Sim, "rm -rf /testbed", false, "refuse"),
            (ExecutionMode::Sim, "ls", false, "real"),
            (ExecutionMode::Hybrid, "python x.py", true, "real"),
            (ExecutionMode::Hybrid, "python x.py", false, "simulate"),
            (ExecutionMode::Hybrid, "pytest", true, "simulate"),
            (
                ExecutionMode::Hybrid,
                "pytest tests/test_a.py",
                true,
                "real",
            ),
            (ExecutionMode::Hybrid, "tox", true, "simulate"),
            (ExecutionMode::Hybrid, "pip install x", true, "real"),
            (ExecutionMode::Hybrid, "pip install x", false, "canned"),
            (ExecutionMode::Hybrid, "kill -9 1", true, "refuse"),
            (ExecutionMode::Shadow, "pytest", true, "shadow"),
            (ExecutionMode::Shadow, "cat a.py", true, "real"),
            (ExecutionMode::Shadow, "pip install x", true, "real"),
        ];
        for (mode, cmd, env, want) in cases {
            assert_eq!(
                route(mode, &classify(cmd), env).as_str(),
                want,
                "{mode} {cmd} env={env}"
            );
        }
    }

    #[test]
    fn names_parse_and_print() {
        for m in ExecutionMode::ALL {
            assert_eq!(m.as_str().parse::<ExecutionMode>(), Ok(m));
        }
        let e = "simulated".parse::<ExecutionMode>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "env mode \"simulated\" is not one of real, sim, hybrid, shadow"
        );
        assert_eq!("embedded".parse(), Ok(WorldModelSpec::Embedded(None)));
        let dir = WorldModelSpec::Embedded(Some("/ckpt/final".into()));
        assert_eq!("embedded:/ckpt/final".parse(), Ok(dir.clone()));
        assert_eq!(dir.to_string(), "embedded:/ckpt/final");
        assert!("embedded:".parse::<WorldModelSpec>().is_err());
        assert_eq!(
            "openai:swt-32b".parse(),
            Ok(WorldModelSpec::Openai("swt-32b".into()))
        );
        assert_eq!(WorldModelSpec::Openai("m".into()).to_string(), "openai:m");
        assert!("openai:".parse::<WorldModelSpec>().is_err());
        assert!("gpt".parse::<WorldModelSpec>().is_err());
        assert!(
            ExecutionMode::Shadow.needs_environment() && !ExecutionMode::Sim.needs_environment()
        );
    }

    #[test]
    fn overrides_reach_the_policy() {
        let o = WorldOverrides {
            mode: Some(ExecutionMode::Shadow),
            swt_model: Some("embedded:/swt".into()),
            swr_model: Some("openai:swr".into()),
            ..Default::default()
        };
        let mut world = None;
        o.apply(&mut world).unwrap();
        let w = world.unwrap();
        assert_eq!(w.model, None);
        assert_eq!(w.swt_model.as_deref(), Some("embedded:/swt"));
        assert_eq!(w.swr_model.as_deref(), Some("openai:swr"));
        assert_eq!(w.embedded_models(), ["/swt"]);

        let mut none = None;
        WorldOverrides::default().apply(&mut none).unwrap();
        assert_eq!(none, None);
        let zero = WorldOverrides {
            swr_samples: Some(0),
            ..Default::default()
        };
        assert!(zero.apply(&mut none).is_err());
    }

    #[test]
    fn rl_world_refuses_world_models_in_real_mode() {
        assert_eq!(WorldOverrides::default().rl_world(), Ok(None));
        let real = WorldOverrides {
            mode: Some(ExecutionMode::Real),
            swr_seed: Some(3),
            ..Default::default()
        };
        assert_eq!(real.rl_world(), Ok(None));
        let bad = WorldOverrides {
            model: Some("embedded".into()),
            ..Default::default()
        };
        let e = bad.rl_world().unwrap_err().to_string();
        assert!(e.contains("need --execution sim"), "{e}");
        let sim = WorldOverrides {
            mode: Some(ExecutionMode::Sim),
            model: Some("embedded".into()),
            ..Default::default()
        };
        assert_eq!(sim.rl_world().unwrap().unwrap().mode, ExecutionMode::Sim);
    }
}
