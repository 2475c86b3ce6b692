//! The RL loop and its run directory, independent of where rollouts come from.
//!
//! Each step: pick the step's tasks (a pure function of the seed and the step number, so a
//! resumed run picks the same ones) → the [`Environment`] rolls out G episodes per task with
//! the current weights and grades them → shaping, advantages ([`dojo_reward::group`]) → one
//! optimizer step per mini-batch ([`crate::update`]) → one metrics line → a checkpoint every
//! `checkpoint_every` steps and after the last. `dojo rl` supplies an environment that runs
//! the agent with the embedded engine in sandboxes; tests supply small real ones.
//!
//! Run directory (`OUT/`, every file versioned):
//! - `rl_run.json`: the configuration, its hash, the model's fingerprint and source, the task
//!   ids. A different configuration or another model is refused before the first step.
//! - `metrics.jsonl`: one line per finished step.
//! - `eval.jsonl`: held-out evaluations every `eval_every` steps and after the last, when the
//!   environment has them.
//! - `report.html`: the metrics and evaluations as charts and tables ([`crate::report`]),
//!   rewritten after every step.
//! - `checkpoint-NNNNNNNN/`: weights (or the LoRA adapter), optimizer moments and
//!   `rl_state.json`, written atomically (dojo-train's checkpoint writer).
//!
//! Resume after `kill -9`: the newest complete checkpoint is loaded and metrics lines of
//! later steps are dropped, then those steps run again; no step is lost or counted twice.
//! Everything a step computes on the CPU is a function of the weights, the seed and the step
//! number, so a resumed run reaches the same weights as an uninterrupted one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use dojo_train::checkpoint;
use dojo_train::{AdamW, TrainModel};
use dojo_trajectory::Trajectory;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::Serialize;
use serde_json::{Value as Json, json};

use crate::config::RlConfig;
use crate::metrics::{
    EVAL_FILE, METRICS_FILE, RUN_FILE, RlRunManifest, RolloutTime, RunState, STATE_FILE,
};
use crate::update::{EpisodeSample, policy_update, token_logprobs};
use crate::{RL_SCHEMA_VERSION, RlError};

use dojo_reward::episode::samples_of;
use dojo_reward::group::{Episode, assemble};

/// An environment's [`Environment::step_done`] is handed the step's metrics line.
pub use crate::metrics::StepMetrics;

/// Where rollouts come from: the agent in sandboxes for `dojo rl`
/// ([`crate::agent_env::AgentEnv`]), a small environment in tests.
///
/// Execution model: the loop calls the methods one at a time from its own thread, in step
/// order; an implementation runs a step's episodes concurrently inside `rollouts` and returns
/// when all are graded. Episodes that fail for infrastructure reasons come back marked and are
/// masked by the loop; an `Err` aborts the run without a checkpoint for that step, and running
/// it again resumes from the last checkpoint (the step's rollouts are redone with the restored
/// weights). Nothing is retried at this level.
pub trait EpisodeSource {
    /// Roll out `group` episodes of each task with the model's current weights and grade them;
    /// one inner vector per task, in the order given. `step` is 1-based.
    fn rollouts(
        &mut self,
        step: u64,
        model: &TrainModel,
        tasks: &[String],
        group: usize,
    ) -> Result<Vec<Vec<Trajectory>>, RlError>;

    /// Held-out evaluation of the current weights (`None`: the environment has none).
    fn evaluate(&mut self, _step: u64, _model: &TrainModel) -> Result<Option<Json>, RlError> {
        Ok(None)
    }

    /// The environment's own settings that change what a step computes (for `dojo rl`: the
    /// world model, its mode and SWR sampling), recorded in `rl_run.json`; resuming a run
    /// directory with other settings is refused. Not where things live (endpoints, caches).
    fn settings(&self) -> Json {
        Json::Null
    }

    /// What the environment measured of the last [`Environment::rollouts`] call (for `dojo rl`:
    /// the engine's batching and prefill counters, the concurrency), put in that step's metrics
    /// line as `rollout_report`; null leaves it out.
    fn rollout_report(&mut self) -> Json {
        Json::Null
    }

    /// Step `m.step` is done (metrics written), with `steps_left` to go, estimated at `left_s`
    /// seconds from this invocation's mean step time: a progress line's moment. Default:
    /// nothing.
    fn step_done(&mut self, _m: &StepMetrics, _steps_left: u64, _left_s: f64) {}

    /// Step `step`'s policy update has finished `done` of its `of` optimizer updates after
    /// `elapsed_s` seconds of training (`done = 0`: the update starts, with `tokens` response
    /// tokens to train on): a progress line's moment, since on a CPU one step's update can
    /// take minutes. Default: nothing.
    fn update_progress(
        &mut self,
        _step: u64,
        _done: usize,
        _of: usize,
        _tokens: usize,
        _elapsed_s: f64,
    ) {
    }
}

/// What a finished (or resumed and finished) run did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    pub out: PathBuf,
    pub resumed_from: Option<u64>,
    pub steps: u64,
    pub last: Option<StepMetrics>,
}

impl RunSummary {
    /// The closing line of `dojo rl`: the last step's reward, resolved and masked shares, and
    /// where the metrics are; `None` when no step ran.
    pub fn last_step_line(&self) -> Option<String> {
        self.last.as_ref().map(|m| {
            format!(
                "step {}: reward {:.3}, resolved {:.3}, masked {:.3} → {}",
                m.step,
                m.batch.reward_mean,
                m.batch.resolved_rate,
                m.batch.masked_share,
                self.out.join(crate::metrics::METRICS_FILE).display()
            )
        })
    }
}

/// Load the weights of `src` on `device` and [`run`] RL with them: with LoRA when
/// `cfg.lora_rank` is set (alpha 2r, scale 2, all seven projections, no dropout: the sampling
/// policy must be the trained one), a frozen reference copy when the loss has a KL term, and
/// activation checkpointing where an update would not fit otherwise.
pub fn run_from_source(
    out: &Path,
    cfg: &RlConfig,
    src: &dojo_train::ModelSource,
    model_id: &str,
    device: &candle_core::Device,
    tasks: &[String],
    env: &mut dyn EpisodeSource,
) -> Result<RunSummary, RlError> {
    let mut model = src.load(device)?;
    if let Some(r) = cfg.lora_rank {
        let lora = dojo_train::LoraConfig::new(
            r,
            2.0 * r as f64,
            0.0,
            &["q", "k", "v", "o", "gate", "up", "down"],
        )?;
        model.enable_lora(lora, cfg.seed)?;
    }
    let reference = if cfg.loss.kl_coef > 0.0 {
        Some(src.load(device)?)
    } else {
        None
    };
    // Episodes vary in length: each update decides whether its micro-batches need activation
    // checkpointing to fit (beside the sampling copy and a reference).
    model.set_checkpointing(model.auto_checkpointing(None, 1 + u64::from(reference.is_some())));
    run(out, cfg, &model, model_id, reference.as_ref(), tasks, env)
}

/// The tasks of step `step`: `n` of `tasks`, shuffled by (seed, step).
pub fn tasks_for_step(tasks: &[String], n: usize, seed: u64, step: u64) -> Vec<String> {
    let mut rng = StdRng::seed_from_u64(seed ^ step.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut v = tasks.to_vec();
    v.shuffle(&mut rng);
    v.truncate(n.min(tasks.len()));
    v
}

/// Complete checkpoints by step, oldest first.
fn checkpoints(out: &Path) -> Vec<(u64, PathBuf)> {
    dojo_rundir::checkpoint::list(out, STATE_FILE)
}

/// Refuse a run directory made with another configuration, model, task set or environment;
/// write the manifest of a new one. What may change on resume: the step count and how often
/// to checkpoint and evaluate.
fn open_run_dir(out: &Path, m: &RlRunManifest) -> Result<(), RlError> {
    dojo_rundir::Manifest::new(
        out,
        RUN_FILE,
        dojo_rundir::Compare::AllBut(&[
            "config_hash",
            "config.steps",
            "config.checkpoint_every",
            "config.eval_every",
        ]),
    )
    .open(m)?;
    Ok(())
}

/// `model_id` is the base model the adapters of a LoRA run apply to (written into
/// `adapter_config.json`, as SFT does, so `dojo train merge` and peft find it).
fn save_checkpoint(
    out: &Path,
    step: u64,
    model: &TrainModel,
    model_id: &str,
    opt: &AdamW,
) -> Result<PathBuf, RlError> {
    let dir = dojo_rundir::checkpoint::publish(out, &checkpoint::checkpoint_name(step), |d| {
        match model.lora() {
            Some(l) => l.save(d, model_id)?,
            None => {
                let mut meta = HashMap::new();
                meta.insert("format".to_string(), "pt".to_string());
                checkpoint::save_safetensors(
                    &model.tensors(),
                    &d.join(checkpoint::WEIGHTS_FILE),
                    &meta,
                )?;
            }
        }
        opt.save(&d.join(checkpoint::OPTIMIZER_FILE))?;
        let st = RunState {
            schema_version: RL_SCHEMA_VERSION,
            step,
            optimizer_steps: opt.step,
        };
        let p = d.join(STATE_FILE);
        std::fs::write(&p, serde_json::to_vec_pretty(&st).unwrap_or_default())
            .map_err(|e| dojo_train::TrainError::file(&p, e))
    })?;
    // Older checkpoints are superseded.
    dojo_rundir::checkpoint::prune(out, STATE_FILE, 1)?;
    Ok(dir)
}

fn load_checkpoint(
    dir: &Path,
    model: &TrainModel,
    cfg: &RlConfig,
) -> Result<(RunState, AdamW), RlError> {
    let p = dir.join(STATE_FILE);
    let text = std::fs::read_to_string(&p).map_err(RlError::io(&p))?;
    let st: RunState = serde_json::from_str(&text).map_err(|source| RlError::InvalidState {
        path: p.clone(),
        source,
    })?;
    match model.lora() {
        Some(l) => l.load_weights(dir)?,
        None => model.load_weights(&dir.join(checkpoint::WEIGHTS_FILE))?,
    }
    let opt = AdamW::load(
        cfg.optim.adamw(),
        st.optimizer_steps,
        &dir.join(checkpoint::OPTIMIZER_FILE),
        model.trainable(),
        model.device(),
    )?;
    Ok((st, opt))
}

/// Run (or resume) `cfg.steps` steps of RL on `tasks` into `out`. `model` holds the base
/// weights (with LoRA enabled when `cfg.lora_rank` is set); `model_id` names where they came
/// from; `reference` is the frozen reference policy, needed when `loss.kl_coef > 0`.
pub fn run(
    out: &Path,
    cfg: &RlConfig,
    model: &TrainModel,
    model_id: &str,
    reference: Option<&TrainModel>,
    tasks: &[String],
    env: &mut dyn EpisodeSource,
) -> Result<RunSummary, RlError> {
    cfg.validate()?;
    if tasks.is_empty() {
        return Err(RlError::config("tasks", "the task list is empty"));
    }
    if cfg.loss.kl_coef > 0.0 && reference.is_none() {
        return Err(RlError::config(
            "loss.kl_coef",
            "a KL penalty needs the reference model",
        ));
    }
    if cfg.lora_rank.is_some() != model.lora().is_some() {
        return Err(RlError::config(
            "lora_rank",
            "the model's LoRA adapters do not match the configuration",
        ));
    }
    let manifest = RlRunManifest {
        schema_version: RL_SCHEMA_VERSION,
        config_hash: cfg.hash(),
        config: cfg.clone(),
        model: model_id.to_string(),
        model_fingerprint: model.fingerprint(),
        tasks: tasks.to_vec(),
        environment: env.settings(),
    };
    open_run_dir(out, &manifest)?;
    dojo_rundir::checkpoint::clean(out, &[])?;
    let (start, mut opt, resumed_from) = match checkpoints(out).pop() {
        Some((_, dir)) => {
            let (st, opt) = load_checkpoint(&dir, model, cfg)?;
            (st.step, opt, Some(st.step))
        }
        None => (0, AdamW::new(cfg.optim.adamw()), None),
    };
    let metrics = checkpoint::open_step_log(&out.join(METRICS_FILE), start)?;
    let evals = checkpoint::open_step_log(&out.join(EVAL_FILE), start)?;
    let mut last = None;
    let started = Instant::now();
    for step in start + 1..=cfg.steps {
        let m = one_step(step, cfg, model, reference, tasks, env, &mut opt)?;
        metrics.append(&m)?;
        let per_step = started.elapsed().as_secs_f64() / (step - start) as f64;
        let steps_left = cfg.steps - step;
        env.step_done(&m, steps_left, per_step * steps_left as f64);
        last = Some(m);
        // Evaluated before the checkpoint (it does not change the weights): a crash in between
        // leaves an eval line past the last checkpoint, which resume truncates and redoes,
        // instead of a checkpointed step whose eval line is lost.
        let eval_now = (cfg.eval_every > 0 && step % cfg.eval_every == 0) || step == cfg.steps;
        if eval_now && let Some(e) = env.evaluate(step, model)? {
            evals.append(&json!({"schema_version": RL_SCHEMA_VERSION, "step": step, "eval": e}))?;
        }
        if step % cfg.checkpoint_every == 0 || step == cfg.steps {
            save_checkpoint(out, step, model, model_id, &opt)?;
        }
        crate::report::write(out)?;
    }
    Ok(RunSummary {
        out: out.to_path_buf(),
        resumed_from,
        steps: cfg.steps,
        last,
    })
}

fn one_step(
    step: u64,
    cfg: &RlConfig,
    model: &TrainModel,
    reference: Option<&TrainModel>,
    tasks: &[String],
    env: &mut dyn EpisodeSource,
    opt: &mut AdamW,
) -> Result<StepMetrics, RlError> {
    let picked = tasks_for_step(tasks, cfg.tasks_per_step, cfg.seed, step);
    let t0 = Instant::now();
    let rolled = env.rollouts(step, model, &picked, cfg.group)?;
    let generation_s = t0.elapsed().as_secs_f64();
    let rollout_report = env.rollout_report();
    let rollout_time = RolloutTime::of(rolled.iter().flatten());
    let t1 = Instant::now();
    if rolled.len() != picked.len() {
        return Err(RlError::Episode(format!(
            "step {step}: {} groups of rollouts for {} tasks",
            rolled.len(),
            picked.len()
        )));
    }
    let mut groups = Vec::with_capacity(rolled.len());
    for trajs in &rolled {
        let mut g = Vec::with_capacity(trajs.len());
        for t in trajs {
            let infrastructure = t.is_infrastructure_failure();
            // An infrastructure failure may have no usable tokens; it is masked anyway.
            let samples = match samples_of(t) {
                Ok(s) => s,
                Err(_) if infrastructure => Vec::new(),
                Err(e) => return Err(e.into()),
            };
            let resolved = t.is_graded().then(|| t.is_resolved());
            g.push(Episode {
                samples,
                stop: t.stop_reason,
                infrastructure,
                resolved,
            });
        }
        groups.push(g);
    }
    let (mut samples, batch) = assemble(groups, &cfg.reward, &cfg.advantage)?;
    let shaping_s = t1.elapsed().as_secs_f64();
    let t2 = Instant::now();
    let mb = cfg.optim.micro_batch_size;
    if cfg.optim.recompute_old_logprobs {
        let lps = token_logprobs(model, &samples, mb)?;
        for (s, lp) in samples.iter_mut().zip(lps) {
            s.trainer_old_logprobs = Some(lp);
        }
    }
    if let Some(r) = reference.filter(|_| cfg.loss.kl_coef > 0.0) {
        let lps = token_logprobs(r, &samples, mb)?;
        for (s, lp) in samples.iter_mut().zip(lps) {
            s.ref_logprobs = Some(lp);
        }
    }
    let trainable: Vec<EpisodeSample> =
        samples.into_iter().filter(|s| s.n_response() > 0).collect();
    let mut updates = Vec::new();
    if !trainable.is_empty() {
        let n = cfg.optim.mini_batches.min(trainable.len());
        let per = trainable.len().div_ceil(n);
        let of = trainable.len().div_ceil(per);
        let tokens = trainable.iter().map(|s| s.n_response()).sum();
        env.update_progress(step, 0, of, tokens, t2.elapsed().as_secs_f64());
        for (i, chunk) in trainable.chunks(per).enumerate() {
            updates.push(policy_update(
                model,
                opt,
                chunk,
                &cfg.loss,
                &cfg.optim,
                cfg.optim.lr,
            )?);
            env.update_progress(step, i + 1, of, tokens, t2.elapsed().as_secs_f64());
        }
    }
    Ok(StepMetrics {
        schema_version: RL_SCHEMA_VERSION,
        step,
        tasks: picked,
        batch,
        updates,
        generation_s,
        shaping_s,
        training_s: t2.elapsed().as_secs_f64(),
        rollout_time,
        rollout_report,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_tasks_are_deterministic() {
        let t: Vec<String> = (0..10).map(|i| format!("t{i}")).collect();
        assert_eq!(tasks_for_step(&t, 3, 1, 5), tasks_for_step(&t, 3, 1, 5));
        assert_eq!(tasks_for_step(&t, 3, 1, 5).len(), 3);
        assert_eq!(tasks_for_step(&t, 30, 1, 5).len(), 10);
    }

    #[test]
    fn last_step_line() {
        let mut s = RunSummary {
            out: PathBuf::from("/rl"),
            resumed_from: None,
            steps: 2,
            last: None,
        };
        assert_eq!(s.last_step_line(), None);
        s.last = Some(StepMetrics {
            schema_version: 1,
            step: 2,
            tasks: vec!["a".into()],
            batch: dojo_reward::group::BatchStats {
                reward_mean: 0.25,
                resolved_rate: 0.5,
                masked_share: 0.125,
                ..Default::default()
            },
            updates: vec![],
            generation_s: 1.0,
            shaping_s: 0.0,
            training_s: 0.0,
            rollout_time: Default::default(),
            rollout_report: Json::Null,
        });
        assert_eq!(
            s.last_step_line().as_deref(),
            Some("step 2: reward 0.250, resolved 0.500, masked 0.125 → /rl/metrics.jsonl")
        );
    }
}
