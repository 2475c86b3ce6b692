//! `rl.toml`: every setting of an RL run, its validation, and the hash that ties a run
//! directory to the settings that shape its gradients.
//!
//! Command-line flags override the file's values; the result is validated once, before the
//! first step, with errors naming the field (`group: must be at least 2`). A run directory
//! records the hash of the settings that change what a step computes; resuming it with
//! different ones is refused instead of silently mixing two experiments. The number of steps
//! and the checkpoint / evaluation cadence are left out of the hash so that a finished run can
//! be extended.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::RlError;
use crate::loss::LossConfig;
use dojo_reward::advantage::AdvantageConfig;
use dojo_reward::shaping::RewardConfig;

/// Optimizer settings (`[optim]`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OptimConfig {
    pub lr: f64,
    pub weight_decay: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    /// Global gradient-norm clip (0: none).
    pub max_grad_norm: f64,
    /// Optimizer steps per batch of rollouts (the batch is split into this many mini-batches).
    pub mini_batches: usize,
    /// Sequences per forward pass (gradients are accumulated).
    pub micro_batch_size: usize,
    /// Recompute the old policy's logprobs with the trainer before updating, which enables
    /// truncated importance correction against the engine's sampling logprobs.
    pub recompute_old_logprobs: bool,
}

impl Default for OptimConfig {
    fn default() -> Self {
        OptimConfig {
            lr: 1e-6,
            weight_decay: 0.0,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            max_grad_norm: 1.0,
            mini_batches: 4,
            micro_batch_size: 4,
            recompute_old_logprobs: false,
        }
    }
}

impl OptimConfig {
    pub fn adamw(&self) -> dojo_train::AdamWConfig {
        dojo_train::AdamWConfig {
            beta1: self.beta1,
            beta2: self.beta2,
            eps: self.eps,
            weight_decay: self.weight_decay,
        }
    }

    pub fn validate(&self) -> Result<(), RlError> {
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(RlError::config(
                "optim.lr",
                format!("must be > 0, got {}", self.lr),
            ));
        }
        if !(self.max_grad_norm.is_finite() && self.max_grad_norm >= 0.0) {
            return Err(RlError::config("optim.max_grad_norm", "must be >= 0"));
        }
        if self.mini_batches == 0 {
            return Err(RlError::config("optim.mini_batches", "must be at least 1"));
        }
        if self.micro_batch_size == 0 {
            return Err(RlError::config(
                "optim.micro_batch_size",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

/// Agent turns per episode of [`RlConfig::cpu`].
pub const CPU_MAX_STEPS: u32 = 10;
/// New tokens per model turn of [`RlConfig::cpu`].
pub const CPU_MAX_NEW_TOKENS: u32 = 256;

/// Rollout budgets of the sampling agent (`[rollout]`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RolloutConfig {
    pub max_steps: u32,
    /// Tokens generated per model turn.
    pub max_new_tokens: u32,
    pub temperature: f64,
}

impl Default for RolloutConfig {
    fn default() -> Self {
        RolloutConfig {
            max_steps: 150,
            max_new_tokens: 4096,
            temperature: 1.0,
        }
    }
}

/// Everything an RL run is configured by. The defaults are SWE-Master's published RL run
/// (rllm/verl, Qwen2.5-Coder-32B): 32 tasks per step, G = 4 at temperature 1, leave-one-out
/// advantages, lr 1e-6, `seq-mean-token-sum`, clip 0.2 / 0.28, no KL, no entropy bonus, 4
/// mini-batches per step, 150 agent steps; runs on one CPU want far smaller numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RlConfig {
    /// Rollouts per task (G).
    pub group: usize,
    /// Tasks sampled per step.
    pub tasks_per_step: usize,
    /// Steps to run (not hashed: a run can be extended).
    pub steps: u64,
    /// LoRA rank (`None`: full fine-tuning).
    pub lora_rank: Option<usize>,
    pub seed: u64,
    /// Checkpoint every N steps (not hashed).
    pub checkpoint_every: u64,
    /// Held-out evaluation every M steps (0: only after the last step; not hashed).
    pub eval_every: u64,
    pub reward: RewardConfig,
    pub advantage: AdvantageConfig,
    pub loss: LossConfig,
    pub optim: OptimConfig,
    pub rollout: RolloutConfig,
}

impl Default for RlConfig {
    fn default() -> Self {
        RlConfig {
            group: 4,
            tasks_per_step: 32,
            steps: 10,
            lora_rank: None,
            seed: 0,
            checkpoint_every: 5,
            eval_every: 0,
            reward: RewardConfig::default(),
            advantage: AdvantageConfig::default(),
            loss: LossConfig::default(),
            optim: OptimConfig::default(),
            rollout: RolloutConfig::default(),
        }
    }
}

/// A TOML parse error, shown without the newline toml ends its text with.
#[derive(Debug)]
pub struct TomlError(pub toml::de::Error);

impl std::fmt::Display for TomlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.to_string().trim_end())
    }
}

impl std::error::Error for TomlError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl RlConfig {
    /// Read `rl.toml`; unknown keys and wrong types are errors naming the file and the key.
    pub fn from_toml_file(path: &Path) -> Result<RlConfig, RlError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| RlError::config_from(&path.display().to_string(), e))?;
        toml::from_str(&text)
            .map_err(|e| RlError::config_from(&path.display().to_string(), TomlError(e)))
    }

    /// SWE-Master's recipe with rollout budgets the embedded 135M model finishes on a CPU:
    /// 10 agent turns of at most 256 new tokens each ([`CPU_MAX_STEPS`], [`CPU_MAX_NEW_TOKENS`]),
    /// instead of 150 turns of 4,096 (an hour or more per episode there).
    /// `examples/rl/swe-master.toml` holds the GPU budgets.
    pub fn cpu() -> RlConfig {
        RlConfig {
            rollout: RolloutConfig {
                max_steps: CPU_MAX_STEPS,
                max_new_tokens: CPU_MAX_NEW_TOKENS,
                ..RolloutConfig::default()
            },
            ..RlConfig::default()
        }
    }

    /// The defaults for `device` (`cpu`, `cuda`, `cuda:N`): on a CPU the embedded model gets
    /// budgets it finishes ([`RlConfig::cpu`]), elsewhere SWE-Master's.
    pub fn for_device(device: &str) -> RlConfig {
        if device == "cpu" {
            RlConfig::cpu()
        } else {
            RlConfig::default()
        }
    }

    /// The run's settings: `file` (`rl.toml`), else `base` ([`RlConfig::default`] or
    /// [`RlConfig::cpu`]), the command line's values over them, validated.
    pub fn resolve(
        file: Option<&Path>,
        base: RlConfig,
        flags: &RlOverrides,
    ) -> Result<RlConfig, RlError> {
        let mut cfg = match file {
            Some(p) => RlConfig::from_toml_file(p)?,
            None => base,
        };
        flags.apply(&mut cfg)?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// All range checks; the first failure names its field.
    pub fn validate(&self) -> Result<(), RlError> {
        if self.group < 2 {
            return Err(RlError::config(
                "group",
                format!(
                    "must be at least 2 (advantages compare a rollout with its group mates), got {}",
                    self.group
                ),
            ));
        }
        if self.tasks_per_step == 0 {
            return Err(RlError::config("tasks_per_step", "must be at least 1"));
        }
        if self.checkpoint_every == 0 {
            return Err(RlError::config("checkpoint_every", "must be at least 1"));
        }
        if self.lora_rank == Some(0) {
            return Err(RlError::config("lora_rank", "must be at least 1"));
        }
        if self.rollout.max_steps == 0 {
            return Err(RlError::config("rollout.max_steps", "must be at least 1"));
        }
        if !(self.rollout.temperature.is_finite() && self.rollout.temperature > 0.0) {
            return Err(RlError::config(
                "rollout.temperature",
                "must be > 0 (RL needs sampling, and logprobs of the sampling distribution)",
            ));
        }
        self.reward.validate()?;
        self.advantage.validate()?;
        self.loss.validate()?;
        self.optim.validate()?;
        Ok(())
    }

    /// Hash of the settings that change what a step computes (everything but `steps`,
    /// `checkpoint_every` and `eval_every`).
    pub fn hash(&self) -> String {
        hex::encode(Sha256::digest(self.hashed_json().to_string().as_bytes()))
    }

    /// The hashed settings as JSON (what [`RlConfig::hash`] digests).
    pub fn hashed_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            for k in ["steps", "checkpoint_every", "eval_every"] {
                o.remove(k);
            }
        }
        v
    }
}

/// The command line's settings over `rl.toml`; `None` keeps the file's (or the default).
#[derive(Debug, Clone, Default)]
pub struct RlOverrides {
    pub group: Option<usize>,
    pub steps: Option<u64>,
    pub tasks_per_step: Option<usize>,
    /// An estimator's name (`loo`, `grpo`, `drgrpo`), checked here.
    pub advantage: Option<String>,
    pub lora_rank: Option<usize>,
    pub lr: Option<f64>,
    pub max_steps: Option<u32>,
    pub max_new_tokens: Option<u32>,
}

impl RlOverrides {
    fn apply(&self, cfg: &mut RlConfig) -> Result<(), RlError> {
        fn set<T: Clone>(to: &mut T, from: &Option<T>) {
            if let Some(v) = from {
                *to = v.clone();
            }
        }
        set(&mut cfg.group, &self.group);
        set(&mut cfg.steps, &self.steps);
        set(&mut cfg.tasks_per_step, &self.tasks_per_step);
        if let Some(e) = &self.advantage {
            cfg.advantage.estimator = dojo_reward::Estimator::parse(e).ok_or_else(|| {
                RlError::config(
                    "--advantage",
                    format!("{e:?}: expected loo, grpo or drgrpo"),
                )
            })?;
        }
        if self.lora_rank.is_some() {
            cfg.lora_rank = self.lora_rank;
        }
        set(&mut cfg.optim.lr, &self.lr);
        set(&mut cfg.rollout.max_steps, &self.max_steps);
        set(&mut cfg.rollout.max_new_tokens, &self.max_new_tokens);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_gpu_example_is_swe_masters_recipe_and_the_cpu_preset_differs_in_budgets_only() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/rl/swe-master.toml");
        assert_eq!(
            RlConfig::from_toml_file(&path).unwrap(),
            RlConfig::default()
        );
        let cpu = RlConfig::cpu();
        assert_eq!(
            (cpu.rollout.max_steps, cpu.rollout.max_new_tokens),
            (10, 256)
        );
        assert_eq!(
            RlConfig {
                rollout: RlConfig::default().rollout,
                ..cpu
            },
            RlConfig::default()
        );
    }

    #[test]
    fn flags_override_the_file_and_are_validated() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rl.toml");
        std::fs::write(&file, "group = 4\nsteps = 7\n[optim]\nlr = 0.5\n").unwrap();
        let flags = RlOverrides {
            steps: Some(2),
            advantage: Some("grpo".into()),
            max_steps: Some(9),
            ..Default::default()
        };
        let c = RlConfig::resolve(Some(&file), RlConfig::default(), &flags).unwrap();
        assert_eq!((c.group, c.steps, c.optim.lr), (4, 2, 0.5));
        assert_eq!(c.advantage.estimator, dojo_reward::Estimator::Grpo);
        assert_eq!(c.rollout.max_steps, 9);
        let bad = RlOverrides {
            advantage: Some("ppo".into()),
            ..Default::default()
        };
        let e = RlConfig::resolve(None, RlConfig::default(), &bad)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--advantage") && e.contains("expected loo, grpo or drgrpo"),
            "{e}"
        );
        let one = RlOverrides {
            group: Some(1),
            ..Default::default()
        };
        let e = RlConfig::resolve(Some(&file), RlConfig::default(), &one)
            .unwrap_err()
            .to_string();
        assert!(e.contains("group: must be at least 2"), "{e}");
    }

    use super::*;

    #[test]
    fn defaults_are_swe_master() {
        let c = RlConfig::default();
        c.validate().unwrap();
        assert_eq!(c.advantage.estimator, dojo_reward::Estimator::Loo);
        assert_eq!((c.loss.clip_low, c.loss.clip_high), (0.2, 0.28));
        assert_eq!(c.loss.kl_coef, 0.0);
        assert_eq!(c.loss.entropy_coef, 0.0);
        assert_eq!(c.reward.budget_alpha, 0.5);
        assert_eq!(
            (c.group, c.tasks_per_step, c.optim.mini_batches),
            (4, 32, 4)
        );
        assert_eq!(c.loss.aggregation, crate::Aggregation::SeqMeanTokenSum);
        assert_eq!(c.optim.lr, 1e-6);
    }

    #[test]
    fn toml_sections_and_errors_name_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("rl.toml");
        std::fs::write(
            &p,
            "group = 4\n[advantage]\nestimator = \"grpo\"\n[loss]\naggregation = \"seq-mean-token-sum-norm\"\n",
        )
        .unwrap();
        let c = RlConfig::from_toml_file(&p).unwrap();
        assert_eq!(c.group, 4);
        assert_eq!(c.advantage.estimator, dojo_reward::Estimator::Grpo);
        assert_eq!(c.loss.aggregation, crate::Aggregation::SeqMeanTokenSumNorm);
        std::fs::write(&p, "[loss]\nclip_hi = 0.3\n").unwrap();
        let e = RlConfig::from_toml_file(&p).unwrap_err().to_string();
        assert!(e.contains("rl.toml") && e.contains("clip_hi"), "{e}");
        let c = RlConfig {
            group: 1,
            ..RlConfig::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.starts_with("group:"), "{e}");
    }

    #[test]
    fn hash_ignores_the_step_count_only() {
        let a = RlConfig::default();
        let b = RlConfig {
            steps: 99,
            checkpoint_every: 3,
            ..a.clone()
        };
        assert_eq!(a.hash(), b.hash());
        let mut c = a.clone();
        c.loss.clip_high = 0.2;
        assert_ne!(a.hash(), c.hash());
    }

    #[test]
    fn cpu_budgets_only_on_the_cpu() {
        assert_eq!(RlConfig::for_device("cpu").rollout.max_steps, CPU_MAX_STEPS);
        assert_eq!(
            RlConfig::for_device("cuda:0").rollout.max_steps,
            RlConfig::default().rollout.max_steps
        );
    }
}
