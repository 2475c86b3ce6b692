//! `dojo rl` (dojo-rl): reinforcement learning on the policy's own graded rollouts, on one
//! machine.
//!
//! The loop, its run directory and resume are dojo-rl's ([`dojo_rl::run::run`]); this module
//! supplies its environment: each step, the trainer's current weights become an embedded
//! engine in memory (no round trip through disk), the agent rolls out G samples of each task
//! through `dojo rollout`'s path (sandboxes, tools, grading, the crash-safe store under
//! `OUT/rollouts/step-NNNNNNNN`), and the graded trajectories go back to the loop.
//! Settings come from `--config rl.toml`, overridden by the flags; every check (G ≥ 2, task
//! file, environments of the tasks, the run directory's configuration and model) runs before
//! the first rollout.
//!
//! `--env-mode sim` (SWE-World) trains without environments: tasks need only `repo` +
//! `base_commit` (+ patches and test lists), Python and tests are answered by the world model
//! and the reward is its reward model's verdict (`--swr-samples` averaged); a world model that
//! fails is an infrastructure failure, masked like any other.

use std::path::PathBuf;

#[derive(clap::Args)]
pub struct RlArgs {
    /// Task file (SWE-bench JSON/JSONL/Parquet) the training tasks come from.
    #[arg(long)]
    tasks: PathBuf,
    /// Base model: `default` (the bundled SmolLM2-135M), a GGUF file or a Hugging Face directory.
    #[arg(long, default_value = "default")]
    model: String,
    /// Run directory (created; an existing one is resumed).
    #[arg(long)]
    out: PathBuf,
    /// Settings file (`rl.toml`); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Rollouts per task (G).
    #[arg(long)]
    group: Option<usize>,
    /// Steps to run.
    #[arg(long, value_parser = crate::args::positive::<u64>())]
    steps: Option<u64>,
    /// Tasks per step.
    #[arg(long)]
    tasks_per_step: Option<usize>,
    /// Advantage estimator: loo (SWE-Master), grpo, drgrpo.
    #[arg(long)]
    advantage: Option<String>,
    /// LoRA rank (alpha 2r, all seven projections, no dropout; full fine-tuning without it).
    #[arg(long, value_parser = crate::args::positive::<usize>())]
    lora_rank: Option<usize>,
    /// Learning rate.
    #[arg(long)]
    lr: Option<f64>,
    /// Agent step budget per rollout.
    #[arg(long, value_parser = crate::args::positive::<u32>())]
    max_steps: Option<u32>,
    /// Tokens generated per model turn.
    #[arg(long)]
    max_new_tokens: Option<u32>,
    /// Held-out tasks evaluated every `eval_every` steps (greedy, one sample each).
    #[arg(long)]
    eval_tasks: Option<PathBuf>,
    /// Only these instance ids of --tasks (repeatable).
    #[arg(long = "instance")]
    instances: Vec<String>,
    /// Directory of environment specs overriding the embedded `envs/`.
    #[arg(long)]
    envs: Option<PathBuf>,
    /// Concurrent rollouts (sandboxes); their model calls are batched by the engine. Default:
    /// every episode of a step at once (G × tasks per step), at most 16 (the engine's batch).
    #[arg(long, value_parser = crate::args::positive::<usize>())]
    workers: Option<usize>,
    /// Device: cpu, cuda, cuda:N.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Simulated environments (`--env-mode sim` needs no environments: SWT answers Python and
    /// tests, SWR gives the reward), as in `dojo rollout`.
    #[command(flatten)]
    world: super::rollout::WorldArgs,
}

#[cfg(feature = "engine")]
impl RlArgs {
    /// The `[world]` table of every rollout's policy; `None` in real mode.
    fn world(&self) -> anyhow::Result<Option<dojo_world::route::WorldPolicy>> {
        let mut world = None;
        self.world.apply(&mut world)?;
        match world {
            Some(w) if w.mode == dojo_world::route::EnvMode::Real => {
                anyhow::ensure!(
                    w.model.is_none()
                        && w.swt_model.is_none()
                        && w.swr_model.is_none()
                        && w.swr_samples.is_none(),
                    "--world-model, --swt-model, --swr-model and --swr-samples need --env-mode sim, hybrid or shadow"
                );
                Ok(None)
            }
            w => Ok(w),
        }
    }
}

#[cfg(feature = "engine")]
mod imp {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use anyhow::Context;
    use dojo_llm::ChatBackend;
    use dojo_rl::RlError;
    use dojo_rl::config::RlConfig;
    use dojo_rl::run::Environment;
    use dojo_rollout::agent_runner::DojoAgent;
    use dojo_rollout::policy::{PolicyConfig, PolicyKind};
    use dojo_rollout::run_dir::{RolloutOptions, make_backends};
    use dojo_train::TrainModel;
    use dojo_trajectory::Trajectory;
    use serde_json::json;

    use super::RlArgs;

    /// Rollouts through `dojo rollout`'s path with the trainer's current weights.
    struct AgentEnv {
        rt: tokio::runtime::Runtime,
        format: dojo_tokenizer::ChatFormat,
        tasks_file: PathBuf,
        eval_tasks: Option<PathBuf>,
        envs: Option<PathBuf>,
        workers: usize,
        out: PathBuf,
        cfg: RlConfig,
        /// The simulated environment of every rollout (`None`: real).
        world: Option<dojo_world::route::WorldPolicy>,
        /// The embedded world models, loaded once (`--world-model embedded`).
        world_embedded: dojo_rollout::world_sim::EmbeddedWorld,
        /// What the last `rollouts` call measured ([`Environment::rollout_report`]).
        last_report: Option<serde_json::Value>,
    }

    impl AgentEnv {
        fn policy(&self, step: u64, greedy: bool) -> PolicyConfig {
            let mut policy = PolicyConfig::new(PolicyKind::Embedded {
                model: format!("rl-step-{step}"),
            });
            policy.name = Some(format!("embedded:rl-step-{step}"));
            policy.sampling.temperature = Some(if greedy {
                0.0
            } else {
                self.cfg.rollout.temperature
            });
            policy.sampling.max_tokens = Some(self.cfg.rollout.max_new_tokens);
            policy.sampling.seed = Some(dojo_llm::derive_seed(self.cfg.seed, step));
            // Every running episode may have a request in the engine: it decodes them as one
            // batch and prefills a prompt prefix they share (system prompt, a group's task) once.
            policy.llm_concurrency = Some(self.workers);
            let agent = &mut policy.agent;
            agent.insert("max_steps".into(), self.cfg.rollout.max_steps.into());
            // As `dojo demo` runs the embedded model: the engine renders the tool schemas and
            // parses Hermes-style calls back into `tool_calls`.
            agent.insert("action_format".into(), "native".into());
            agent.insert("tool_set".into(), "r2e".into());
            // The loss needs the logprob of every sampled token.
            agent.insert("sampling".into(), json!({"logprobs": true}));
            policy.world = self.world.clone();
            policy
        }

        fn roll(
            &self,
            model: &TrainModel,
            policy: PolicyConfig,
            tasks_file: &Path,
            instances: &[String],
            samples: u32,
            dir: &Path,
        ) -> Result<(Vec<Trajectory>, serde_json::Value), RlError> {
            let infra = |e: String| RlError::Episode(format!("rollouts in {}: {e}", dir.display()));
            // LoRA runs sample from the adapters folded into copies of the weights.
            let engine = dojo_engine::Engine::from_parts(
                model.to_engine_merged()?,
                self.format.clone(),
                dojo_engine::EngineOptions::default(),
            );
            let backend: Arc<dyn ChatBackend> = Arc::new(engine.clone());
            // The step's engine (and its copy of the weights) goes with this call; only its
            // counters are kept.
            // A directory left by an interrupted run was sampled from other weights.
            if dir.exists() {
                std::fs::remove_dir_all(dir).map_err(|e| infra(e.to_string()))?;
            }
            let agent = DojoAgent::from_policy(&policy).map_err(infra)?;
            let backends =
                make_backends(&policy, Some(backend)).map_err(|e| infra(e.to_string()))?;
            let opts = RolloutOptions {
                shard: None,
                tasks_file: tasks_file.to_path_buf(),
                instances: instances.to_vec(),
                label: policy.label(),
                policy,
                samples,
                out: dir.to_path_buf(),
                workers: self.workers,
                export_predictions: false,
                envs_dir: self.envs.clone(),
                prepare: dojo_task::PrepareOptions::default(),
                progress: false,
            };
            let o = self
                .rt
                .block_on(dojo_rollout::run_dir::run_rollout_with_world(
                    &opts,
                    agent,
                    backends,
                    &self.world_embedded,
                ))
                .map_err(|e| infra(e.to_string()))?;
            let store = dojo_rollout::Store::<Trajectory>::open(&o.store_path)
                .map_err(|e| infra(e.to_string()))?;
            Ok((store.records().to_vec(), engine.stats().to_json()))
        }
    }

    impl Environment for AgentEnv {
        fn rollouts(
            &mut self,
            step: u64,
            model: &TrainModel,
            tasks: &[String],
            group: usize,
        ) -> Result<Vec<Vec<Trajectory>>, RlError> {
            let dir = self.out.join(format!("rollouts/step-{step:08}"));
            let (all, counters) = self.roll(
                model,
                self.policy(step, false),
                &self.tasks_file.clone(),
                tasks,
                group as u32,
                &dir,
            )?;
            self.last_report = Some(json!({"workers": self.workers, "engine": counters}));
            Ok(tasks
                .iter()
                .map(|t| {
                    let mut g: Vec<Trajectory> =
                        all.iter().filter(|x| &x.task_id == t).cloned().collect();
                    g.sort_by_key(|x| x.sample_index);
                    g
                })
                .collect())
        }

        fn evaluate(
            &mut self,
            step: u64,
            model: &TrainModel,
        ) -> Result<Option<serde_json::Value>, RlError> {
            let Some(file) = self.eval_tasks.clone() else {
                return Ok(None);
            };
            let dir = self.out.join(format!("eval/step-{step:08}"));
            let (all, _) = self.roll(model, self.policy(step, true), &file, &[], 1, &dir)?;
            let resolved = all.iter().filter(|t| t.is_resolved()).count();
            let infra = all.iter().filter(|t| t.is_infrastructure_failure()).count();
            Ok(Some(json!({
                "tasks": all.len(),
                "resolved": resolved,
                "infrastructure_failures": infra,
            })))
        }

        /// The step's concurrency and the engine's counters ([`dojo_engine::Stats::to_json`]):
        /// requests, prompt tokens prefilled or taken from a cached or shared prefix, generated
        /// tokens, batched decode steps and the largest batch.
        fn rollout_report(&mut self) -> serde_json::Value {
            self.last_report.take().unwrap_or_default()
        }

        /// The world model's settings (mode, model, SWR samples and seed, analysis model), not
        /// where it is served or cached: a run resumed with another world model is refused.
        fn settings(&self) -> serde_json::Value {
            let Some(w) = &self.world else {
                return serde_json::Value::Null;
            };
            let w = dojo_world::route::WorldPolicy {
                base_url: None,
                api_key_env: None,
                analysis_cache: None,
                ..w.clone()
            };
            serde_json::to_value(w).unwrap_or_default()
        }
    }

    pub fn run(a: RlArgs) -> anyhow::Result<i32> {
        let mut cfg = match &a.config {
            Some(p) => RlConfig::from_toml_file(p)?,
            None => RlConfig::default(),
        };
        if let Some(g) = a.group {
            cfg.group = g;
        }
        if let Some(s) = a.steps {
            cfg.steps = s;
        }
        if let Some(n) = a.tasks_per_step {
            cfg.tasks_per_step = n;
        }
        if let Some(e) = &a.advantage {
            cfg.advantage.estimator = dojo_rl::Estimator::parse(e)
                .with_context(|| format!("--advantage {e:?}: expected loo, grpo or drgrpo"))?;
        }
        if a.lora_rank.is_some() {
            cfg.lora_rank = a.lora_rank;
        }
        if let Some(lr) = a.lr {
            cfg.optim.lr = lr;
        }
        if let Some(n) = a.max_steps {
            cfg.rollout.max_steps = n;
        }
        if let Some(n) = a.max_new_tokens {
            cfg.rollout.max_new_tokens = n;
        }
        cfg.validate()?;
        let world = a.world()?;
        // The world model is usable (named, its endpoints configured) before the first step.
        let world_embedded = super::super::rollout::embedded_world_backend(world.as_ref())?;
        if let Some(w) = &world {
            dojo_rollout::world_sim::world_model(w, &world_embedded)
                .map_err(|e| anyhow::anyhow!("--env-mode {}: {e}", w.mode))?;
        }
        // In sim (and hybrid) mode a task needs no environment: `repo` + `base_commit` do.
        let needs_env = world.as_ref().is_none_or(|w| w.mode.needs_environment());
        // Every task must be runnable before the first step.
        let tasks = dojo_rollout::run_dir::load_tasks(&a.tasks, &a.instances)
            .with_context(|| format!("--tasks {}", a.tasks.display()))?;
        let registry = dojo_task::EnvRegistry::with_dir(a.envs.as_deref())?;
        for t in tasks.iter().filter(|_| needs_env) {
            registry.resolve(t).with_context(|| {
                format!(
                    "--tasks {}: task {} has no environment (add an env spec with --envs, or train in --env-mode sim)",
                    a.tasks.display(),
                    t.instance_id
                )
            })?;
        }
        if let Some(e) = &a.eval_tasks {
            for t in dojo_rollout::run_dir::load_tasks(e, &[])
                .with_context(|| format!("--eval-tasks {}", e.display()))?
                .into_iter()
                .filter(|_| needs_env)
            {
                registry.resolve(&t).with_context(|| {
                    format!(
                        "--eval-tasks {}: task {} has no environment",
                        e.display(),
                        t.instance_id
                    )
                })?;
            }
        }
        let device =
            dojo_engine::device(&a.device).with_context(|| format!("--device {}", a.device))?;
        let src = dojo_train::ModelSource::resolve(&a.model)?;
        let mut model = src.load(&device)?;
        if let Some(r) = cfg.lora_rank {
            // Alpha 2r (scale 2), no dropout: the sampling policy must be the trained one.
            let lora = dojo_train::LoraConfig::new(
                r,
                2.0 * r as f64,
                0.0,
                &["q", "k", "v", "o", "gate", "up", "down"],
            )?;
            model.enable_lora(lora, cfg.seed)?;
        }
        let format = src.chat_format()?;
        let reference = if cfg.loss.kl_coef > 0.0 {
            Some(src.load(&device)?)
        } else {
            None
        };
        let ids: Vec<String> = tasks.iter().map(|t| t.instance_id.clone()).collect();
        let mut env = AgentEnv {
            rt: crate::cmd::runtime()?,
            format,
            tasks_file: a.tasks.clone(),
            eval_tasks: a.eval_tasks.clone(),
            envs: a.envs.clone(),
            workers: a
                .workers
                .unwrap_or(
                    (cfg.group * cfg.tasks_per_step.min(ids.len()))
                        .min(dojo_engine::EngineOptions::default().max_active),
                )
                .max(1),
            out: a.out.clone(),
            cfg: cfg.clone(),
            world,
            world_embedded,
            last_report: None,
        };
        let s = dojo_rl::run::run(
            &a.out,
            &cfg,
            &model,
            &a.model,
            reference.as_ref(),
            &ids,
            &mut env,
        )
        .with_context(|| format!("dojo rl --out {}", a.out.display()))?;
        if let Some(r) = s.resumed_from {
            eprintln!("resumed from step {r}");
        }
        if let Some(m) = &s.last {
            println!(
                "step {}: reward {:.3}, resolved {:.3}, masked {:.3} → {}",
                m.step,
                m.batch.reward_mean,
                m.batch.resolved_rate,
                m.batch.masked_share,
                a.out.join(dojo_rl::run::METRICS_FILE).display()
            );
        }
        Ok(0)
    }
}

#[cfg(feature = "engine")]
pub fn run(a: RlArgs) -> anyhow::Result<i32> {
    imp::run(a)
}

#[cfg(not(feature = "engine"))]
pub fn run(a: RlArgs) -> anyhow::Result<i32> {
    let _ = a;
    anyhow::bail!(
        "dojo rl needs the candle stack, but this dojo was built without it; rebuild with \
         the `engine` feature (the default): cargo build -p dojo-cli --features engine"
    )
}
