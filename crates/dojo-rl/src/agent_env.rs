//! The environment of `dojo rl`: each step, the trainer's current weights become an embedded
//! engine in memory (no round trip through disk), the agent rolls out G samples of each task
//! through `dojo rollout`'s path (sandboxes, tools, grading, the crash-safe store under
//! `OUT/rollouts/step-NNNNNNNN`), and the graded trajectories go back to the loop.
//!
//! With a simulated world (`--execution sim`, SWE-World) tasks need only `repo` +
//! `base_commit`: Python and tests are answered by the world model and the reward is its reward
//! model's verdict; a world model that fails is an infrastructure failure, masked like any
//! other.
//!
//! Execution model: [`crate::run::EpisodeSource`]'s calls come one at a time from the loop's thread;
//! each blocks on the caller's tokio runtime (a handle to the CLI's one) while a step's episodes run concurrently
//! (`workers` sandboxes, their model calls batched by the engine). Nothing is retried here: a
//! step whose rollouts fail as a whole is an [`RlError::Rollouts`], and the loop resumes from its
//! last checkpoint when run again.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dojo_llm::ChatBackend;
use dojo_rollout::agent_runner::DojoAgent;
use dojo_rollout::policy::PolicyConfig;
use dojo_rollout::run_dir::{RolloutOptions, load_tasks, make_backends};
use dojo_rollout::world_sim::EmbeddedWorld;
use dojo_train::TrainModel;
use dojo_trajectory::Trajectory;
use dojo_world::route::WorldPolicy;
use serde_json::json;

use crate::RlError;
use crate::config::RlConfig;
use crate::run::{EpisodeSource, StepMetrics};

/// Where an [`AgentEnv`] takes its tasks and writes its rollouts.
#[derive(Debug, Clone)]
pub struct AgentEnvOptions {
    /// The training tasks (SWE-bench JSON/JSONL/Parquet).
    pub tasks_file: PathBuf,
    /// Only these instance ids of `tasks_file` (all when empty).
    pub instances: Vec<String>,
    /// Held-out tasks evaluated greedily, one sample each.
    pub eval_tasks: Option<PathBuf>,
    /// Environment specs overriding the embedded `envs/`.
    pub envs: Option<PathBuf>,
    /// Concurrent episodes; `None`: every episode of a step at once, at most the engine's batch.
    pub workers: Option<usize>,
    /// The run directory (`rollouts/`, `eval/` go under it).
    pub out: PathBuf,
    /// The simulated environment of every rollout (`None`: real sandboxes).
    pub world: Option<WorldPolicy>,
    /// Where progress goes: each step's episodes (as `dojo rollout` shows them) and a line per
    /// finished step.
    pub progress: dojo_progress::Progress,
}

/// Rollouts through `dojo rollout`'s path with the trainer's current weights.
pub struct AgentEnv {
    /// The caller's runtime (the CLI's one), which each step's rollouts block on.
    rt: tokio::runtime::Handle,
    format: dojo_tokenizer::ChatFormat,
    opts: AgentEnvOptions,
    workers: usize,
    cfg: RlConfig,
    /// The embedded world models, loaded once (`--world-model embedded`).
    world_embedded: EmbeddedWorld,
    /// What the last `rollouts` call measured ([`Environment::rollout_report`]).
    last_report: Option<serde_json::Value>,
}

impl AgentEnv {
    /// Checks everything the run needs before the first rollout (the task files load, the
    /// instances exist, every task has an environment unless the world simulates it) and
    /// returns the environment with the training tasks' ids.
    /// `rt`: the runtime the rollouts run on, called from outside it (the loop's thread).
    pub fn new(
        opts: AgentEnvOptions,
        cfg: &RlConfig,
        format: dojo_tokenizer::ChatFormat,
        rt: tokio::runtime::Handle,
    ) -> Result<(AgentEnv, Vec<String>), RlError> {
        // The world model is usable (named, its endpoints configured, an embedded one loaded)
        // before the first step.
        let world_embedded = dojo_rollout::embedded::embedded_world(opts.world.as_ref())
            .map_err(|e| RlError::config_from("--world-model", e))?;
        if let Some(w) = &opts.world {
            dojo_rollout::world_sim::world_model(w, &world_embedded)
                .map_err(|e| RlError::config_from(&format!("--execution {}", w.mode), e))?;
        }
        // In sim (and hybrid) mode a task needs no environment: `repo` + `base_commit` do.
        let needs_env = opts
            .world
            .as_ref()
            .is_none_or(|w| w.mode.needs_environment());
        let registry = dojo_task::EnvRegistry::with_dir(opts.envs.as_deref())
            .map_err(|e| RlError::config_from("envs", e))?;
        let check = |flag: &str, file: &Path, instances: &[String]| {
            let tasks = load_tasks(file, instances).map_err(|e| RlError::ConfigAt {
                field: flag.to_string(),
                what: file.display().to_string(),
                source: e.into(),
            })?;
            for t in tasks.iter().filter(|_| needs_env) {
                registry.resolve(t).map_err(|e| RlError::ConfigAt {
                    field: flag.to_string(),
                    what: format!(
                        "{}: task {} has no environment (add an env spec with --envs, or train in --execution sim)",
                        file.display(),
                        t.instance_id
                    ),
                    source: e.into(),
                })?;
            }
            Ok::<_, RlError>(tasks)
        };
        let tasks = check("--tasks", &opts.tasks_file, &opts.instances)?;
        if let Some(e) = &opts.eval_tasks {
            check("--eval-tasks", e, &[])?;
        }
        let ids: Vec<String> = tasks.iter().map(|t| t.instance_id.clone()).collect();
        let workers = workers(cfg, ids.len(), opts.workers);
        let env = AgentEnv {
            rt,
            format,
            opts,
            workers,
            cfg: cfg.clone(),
            world_embedded,
            last_report: None,
        };
        Ok((env, ids))
    }

    /// The policy of step `step`'s rollouts (see [`step_policy`]).
    pub fn policy(&self, step: u64, greedy: bool) -> PolicyConfig {
        step_policy(
            &self.cfg,
            self.workers,
            self.opts.world.as_ref(),
            step,
            greedy,
        )
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
        let infra = |e: Box<dyn std::error::Error + Send + Sync>| RlError::Rollouts {
            what: format!("rollouts in {}", dir.display()),
            source: e,
        };
        // LoRA runs sample from the adapters folded into copies of the weights. The step's
        // engine (and its copy of the weights) goes with this call; only its counters are kept.
        let engine = dojo_engine::Engine::from_parts(
            model.to_engine_merged()?,
            self.format.clone(),
            dojo_engine::EngineOptions::default(),
        );
        let backend: Arc<dyn ChatBackend> = Arc::new(engine.clone());
        // A directory left by an interrupted run was sampled from other weights.
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(|e| infra(e.into()))?;
        }
        let agent = DojoAgent::from_policy(&policy).map_err(|e| infra(e.into()))?;
        let backends = make_backends(&policy, Some(backend)).map_err(|e| infra(e.into()))?;
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
            envs_dir: self.opts.envs.clone(),
            prepare: dojo_task::PrepareOptions::default(),
            progress: self.opts.progress.clone(),
        };
        let o = self
            .rt
            .block_on(dojo_rollout::run_dir::run_rollout_with_world(
                &opts,
                agent,
                backends,
                &self.world_embedded,
            ))
            .map_err(|e| infra(e.into()))?;
        let store =
            dojo_rollout::Store::<Trajectory>::open(&o.store_path).map_err(|e| infra(e.into()))?;
        Ok((store.records(), engine.stats().to_json()))
    }
}

/// Concurrent episodes: `asked`, or every episode of a step at once (G × tasks per step), at
/// most the engine's batch; at least 1.
fn workers(cfg: &RlConfig, tasks: usize, asked: Option<usize>) -> usize {
    asked
        .unwrap_or(
            (cfg.group * cfg.tasks_per_step.min(tasks))
                .min(dojo_engine::EngineOptions::default().max_active),
        )
        .max(1)
}

/// The policy of step `step`'s rollouts: the embedded engine named after the step, the recipe
/// `dojo demo` runs the embedded model with, the logprob of every sampled token; greedy for
/// evaluation.
pub fn step_policy(
    cfg: &RlConfig,
    workers: usize,
    world: Option<&WorldPolicy>,
    step: u64,
    greedy: bool,
) -> PolicyConfig {
    let name = format!("rl-step-{step}");
    let (steps, tokens) = (cfg.rollout.max_steps, cfg.rollout.max_new_tokens);
    let mut policy = PolicyConfig::embedded_agent(&name, &name, steps, tokens);
    if !greedy {
        policy.sampling.temperature = Some(cfg.rollout.temperature);
    }
    policy.sampling.seed = Some(dojo_llm::derive_seed(cfg.seed, step));
    // Every running episode may have a request in the engine: it decodes them as one batch and
    // prefills a prompt prefix they share (system prompt, a group's task) once.
    policy.llm_concurrency = Some(workers);
    // The loss needs the logprob of every sampled token.
    policy
        .agent
        .insert("sampling".into(), json!({"logprobs": true}));
    policy.world = world.cloned();
    policy
}

/// `step 2: reward 0.250, resolved 0.250 (masked share 0.00); 212 s (generation 190 s,
/// training 20 s); 2 step(s) left, about 424 s`.
fn update_line(step: u64, done: usize, of: usize, tokens: usize, elapsed_s: f64) -> String {
    if done == 0 {
        return format!("step {step}: training on {tokens} response tokens in {of} update(s)");
    }
    let left = elapsed_s / done as f64 * of.saturating_sub(done) as f64;
    let mut line = format!("step {step}: update {done}/{of} done, {elapsed_s:.0} s of training");
    if done < of {
        line.push_str(&format!(", about {left:.0} s left"));
    }
    line
}

fn step_line(m: &StepMetrics, steps_left: u64, left_s: f64) -> String {
    let b = &m.batch;
    let mut line = format!(
        "step {}: reward {:.3}, resolved {:.3} (masked share {:.2}); {:.0} s (generation {:.0} s, training {:.0} s)",
        m.step,
        b.reward_mean,
        b.resolved_rate,
        b.masked_share,
        m.generation_s + m.shaping_s + m.training_s,
        m.generation_s,
        m.training_s
    );
    if steps_left > 0 {
        line.push_str(&format!("; {steps_left} step(s) left, about {left_s:.0} s"));
    }
    line
}

/// Groups `all` by task, in `tasks`' order, each group by sample index (trajectories of other
/// tasks are left out).
fn groups(tasks: &[String], all: Vec<Trajectory>) -> Vec<Vec<Trajectory>> {
    let mut out: Vec<Vec<Trajectory>> = vec![Vec::new(); tasks.len()];
    for t in all {
        if let Some(i) = tasks.iter().position(|x| *x == t.task_id) {
            out[i].push(t);
        }
    }
    for g in &mut out {
        g.sort_by_key(|x| x.sample_index);
    }
    out
}

impl EpisodeSource for AgentEnv {
    fn rollouts(
        &mut self,
        step: u64,
        model: &TrainModel,
        tasks: &[String],
        group: usize,
    ) -> Result<Vec<Vec<Trajectory>>, RlError> {
        let dir = self.opts.out.join(format!("rollouts/step-{step:08}"));
        let file = self.opts.tasks_file.clone();
        let policy = self.policy(step, false);
        let (all, counters) = self.roll(model, policy, &file, tasks, group as u32, &dir)?;
        self.last_report = Some(json!({"workers": self.workers, "engine": counters}));
        Ok(groups(tasks, all))
    }

    fn evaluate(
        &mut self,
        step: u64,
        model: &TrainModel,
    ) -> Result<Option<serde_json::Value>, RlError> {
        let Some(file) = self.opts.eval_tasks.clone() else {
            return Ok(None);
        };
        let dir = self.opts.out.join(format!("eval/step-{step:08}"));
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

    /// A line per finished step: reward, resolved share, its time, and the loop's estimate of
    /// the rest.
    fn step_done(&mut self, m: &StepMetrics, steps_left: u64, left_s: f64) {
        self.opts.progress.line(&step_line(m, steps_left, left_s));
    }

    /// A line when the step's update starts and after each optimizer update, with the time
    /// spent and an estimate of the rest.
    fn update_progress(
        &mut self,
        step: u64,
        done: usize,
        of: usize,
        tokens: usize,
        elapsed_s: f64,
    ) {
        self.opts
            .progress
            .line(&update_line(step, done, of, tokens, elapsed_s));
    }

    /// The world model's settings (mode, model, SWR samples and seed, analysis model), not
    /// where it is served or cached: a run resumed with another world model is refused.
    fn settings(&self) -> serde_json::Value {
        let Some(w) = &self.opts.world else {
            return serde_json::Value::Null;
        };
        let w = WorldPolicy {
            base_url: None,
            api_key_env: None,
            analysis_cache: None,
            ..w.clone()
        };
        serde_json::to_value(w).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_follow_the_task_order_and_sample_index() {
        let all = vec![
            Trajectory::new("b", 1),
            Trajectory::new("a", 1),
            Trajectory::new("b", 0),
            Trajectory::new("a", 0),
        ];
        let g = groups(&["a".into(), "b".into(), "c".into()], all);
        let ids: Vec<Vec<(&str, u32)>> = g
            .iter()
            .map(|g| {
                g.iter()
                    .map(|t| (t.task_id.as_str(), t.sample_index))
                    .collect()
            })
            .collect();
        assert_eq!(
            ids,
            [vec![("a", 0), ("a", 1)], vec![("b", 0), ("b", 1)], vec![]]
        );
    }

    #[test]
    fn the_step_policy_samples_with_logprobs_within_the_budget() {
        let cfg = RlConfig::default();
        let p = step_policy(&cfg, 4, None, 3, false);
        assert_eq!(p.label(), "embedded:rl-step-3");
        assert_eq!(p.agent["sampling"], json!({"logprobs": true}));
        assert_eq!(p.agent["max_steps"], json!(cfg.rollout.max_steps));
        assert_eq!(p.sampling.temperature, Some(cfg.rollout.temperature));
        assert_eq!(p.llm_concurrency, Some(4));
        assert_eq!(
            step_policy(&cfg, 4, None, 3, true).sampling.temperature,
            Some(0.0)
        );
    }

    #[test]
    fn a_step_line_says_the_time_and_what_is_left() {
        let m = StepMetrics {
            schema_version: 1,
            step: 2,
            tasks: vec!["a".into()],
            batch: dojo_reward::group::BatchStats {
                episodes: 4,
                reward_mean: 0.25,
                resolved_rate: 0.25,
                ..Default::default()
            },
            updates: vec![],
            generation_s: 190.0,
            shaping_s: 2.0,
            training_s: 20.0,
            rollout_time: Default::default(),
            rollout_report: serde_json::Value::Null,
        };
        let line = step_line(&m, 2, 424.0);
        assert_eq!(
            line,
            "step 2: reward 0.250, resolved 0.250 (masked share 0.00); 212 s (generation 190 s, training 20 s); 2 step(s) left, about 424 s"
        );
        assert!(!step_line(&m, 0, 0.0).contains("left"));
    }

    #[test]
    fn update_lines_say_what_is_left() {
        assert_eq!(
            update_line(1, 0, 4, 4043, 0.1),
            "step 1: training on 4043 response tokens in 4 update(s)"
        );
        assert_eq!(
            update_line(1, 1, 4, 4043, 150.0),
            "step 1: update 1/4 done, 150 s of training, about 450 s left"
        );
        assert_eq!(
            update_line(1, 4, 4, 4043, 600.0),
            "step 1: update 4/4 done, 600 s of training"
        );
    }

    #[test]
    fn workers_default_to_a_whole_step_within_the_engine_batch() {
        let cfg = RlConfig {
            group: 4,
            tasks_per_step: 2,
            ..RlConfig::default()
        };
        assert_eq!(workers(&cfg, 10, None), 8);
        assert_eq!(workers(&cfg, 1, None), 4);
        assert_eq!(workers(&cfg, 0, None), 1, "never zero");
        assert_eq!(workers(&cfg, 10, Some(3)), 3);
        let big = RlConfig { group: 64, ..cfg };
        assert_eq!(
            workers(&big, 10, None),
            dojo_engine::EngineOptions::default().max_active
        );
    }
}
