//! The RL loop end to end on a small real environment: a two-turn bandit played by the tiny
//! Llama of dojo-train's fixtures (64-token vocabulary). Each task is a prompt; the policy
//! samples a token, an "observation" (two fixed tokens) follows, the policy samples again, and
//! the grader resolves the episode when that last token is in a target set (a quarter of the
//! vocabulary). Trajectories carry the prompt ids, sampled ids and logprobs of each turn
//! exactly as the engine records them, so the whole path (token streams, shaping,
//! advantages, updates, metrics, checkpoints, resume) is exercised.

use std::path::{Path, PathBuf};

use candle_core::{D, Device, Tensor};
use dojo_llm::{ChoiceLogprobs, TokenLogprob};
use dojo_rl::RlError;
use dojo_rl::config::RlConfig;
use dojo_rl::run::{EpisodeSource, StepMetrics, run};
use dojo_train::TrainModel;
use dojo_trajectory::{Step, StopReason, Trajectory};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn fixture(arch: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../dojo-train/tests/fixtures/{arch}"))
}

fn tiny(arch: &str) -> TrainModel {
    TrainModel::load_hf_dir(&fixture(arch), &Device::Cpu).unwrap()
}

fn probs(model: &TrainModel, ids: &[u32]) -> Vec<f32> {
    let t = Tensor::new(ids, &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let logits = model.logits(&t).unwrap().detach();
    let last = logits.get(0).unwrap().get(ids.len() - 1).unwrap();
    let e = last
        .broadcast_sub(&last.max_keepdim(D::Minus1).unwrap())
        .unwrap()
        .exp()
        .unwrap();
    e.broadcast_div(&e.sum_keepdim(D::Minus1).unwrap())
        .unwrap()
        .to_vec1()
        .unwrap()
}

fn in_target(t: u32) -> bool {
    t % 4 == 3
}

struct Bandit {
    seed: u64,
    /// Drop the logprobs (a policy that does not return them).
    no_logprobs: bool,
    /// Fail at this step (a crash in the middle of a run).
    crash_at: Option<u64>,
    /// Make every episode of this sample index an infrastructure failure.
    infra_sample: Option<u32>,
    /// What [`Environment::settings`] reports (a world model's settings in `dojo rl`).
    settings: serde_json::Value,
}

impl Bandit {
    fn new(seed: u64) -> Bandit {
        Bandit {
            seed,
            no_logprobs: false,
            crash_at: None,
            settings: serde_json::Value::Null,
            infra_sample: None,
        }
    }

    fn episode(&self, model: &TrainModel, task: &str, k: u32, rng: &mut StdRng) -> Trajectory {
        let n: u32 = task.trim_start_matches('t').parse().unwrap();
        let mut prompt = vec![1, 10 + n, 20 + n, 30];
        let mut t = Trajectory::new(task, k);
        for turn in 1..=2u32 {
            let p = probs(model, &prompt);
            let u: f32 = rng.random();
            let mut acc = 0.0;
            let mut tok = p.len() as u32 - 1;
            for (i, q) in p.iter().enumerate() {
                acc += q;
                if u < acc {
                    tok = i as u32;
                    break;
                }
            }
            t.steps.push(Step {
                index: turn,
                prompt_token_ids: Some(prompt.clone()),
                completion_token_ids: Some(vec![tok]),
                logprobs: (!self.no_logprobs).then(|| ChoiceLogprobs {
                    content: Some(vec![TokenLogprob {
                        token: String::new(),
                        logprob: (p[tok as usize] as f64).ln(),
                        bytes: None,
                        top_logprobs: Vec::new(),
                        extra: Default::default(),
                    }]),
                    extra: Default::default(),
                }),
                ..Step::default()
            });
            prompt.push(tok);
            prompt.extend([5, 6]); // the observation
            if turn == 2 {
                t.stop_reason = StopReason::Submitted;
                t.resolved = Some(in_target(tok));
            }
        }
        if self.infra_sample == Some(k) {
            t.stop_reason = StopReason::EnvError;
            t.resolved = None;
            t.steps[1].logprobs = None;
        }
        t
    }
}

impl EpisodeSource for Bandit {
    fn rollouts(
        &mut self,
        step: u64,
        model: &TrainModel,
        tasks: &[String],
        group: usize,
    ) -> Result<Vec<Vec<Trajectory>>, RlError> {
        if self.crash_at == Some(step) {
            return Err(RlError::Episode(format!("simulated crash at step {step}")));
        }
        let mut rng = StdRng::seed_from_u64(self.seed * 1_000_003 + step);
        Ok(tasks
            .iter()
            .map(|t| {
                (0..group as u32)
                    .map(|k| self.episode(model, t, k, &mut rng))
                    .collect()
            })
            .collect())
    }

    fn evaluate(
        &mut self,
        step: u64,
        model: &TrainModel,
    ) -> Result<Option<serde_json::Value>, RlError> {
        // Exact expected reward of the second turn after a fixed first token, task t0.
        let p = probs(model, &[1, 10, 20, 30, 3, 5, 6]);
        let mass: f32 = (0..64u32)
            .filter(|t| in_target(*t))
            .map(|t| p[t as usize])
            .sum();
        Ok(Some(
            serde_json::json!({"step": step, "expected_reward": mass}),
        ))
    }

    fn settings(&self) -> serde_json::Value {
        self.settings.clone()
    }
}

fn cfg(steps: u64) -> RlConfig {
    let mut c = RlConfig {
        group: 8,
        tasks_per_step: 2,
        steps,
        checkpoint_every: 2,
        ..RlConfig::default()
    };
    // One update per step over all tokens, as the figures in benchmarks/results/rl.md.
    c.optim.lr = 3e-3;
    c.optim.mini_batches = 1;
    c.loss.aggregation = dojo_rl::Aggregation::TokenMean;
    c
}

fn tasks() -> Vec<String> {
    (0..4).map(|i| format!("t{i}")).collect()
}

fn metrics(out: &Path) -> Vec<StepMetrics> {
    std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn weights(model: &TrainModel) -> Vec<f32> {
    model
        .params()
        .values()
        .flat_map(|v| {
            v.as_tensor()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        })
        .collect()
}

#[test]
fn a_short_run_raises_the_reward() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny("llama");
    let mut env = Bandit::new(1);
    env.infra_sample = Some(7);
    let mut c = cfg(16);
    c.eval_every = 4;
    let s = run(dir.path(), &c, &model, "llama", None, &tasks(), &mut env).unwrap();
    assert_eq!(s.resumed_from, None);
    let m = metrics(dir.path());
    assert_eq!(m.len(), 16);
    let curve: Vec<f64> = m.iter().map(|x| x.batch.reward_mean).collect();
    eprintln!("reward per step: {curve:?}");
    let first = curve[..4].iter().sum::<f64>() / 4.0;
    let last = curve[12..].iter().sum::<f64>() / 4.0;
    assert!(last > first + 0.2, "reward did not rise: {curve:?}");
    // Sample 7 of every group failed in the sandbox: masked, reported, never trained.
    assert!((m[0].batch.masked_share - 1.0 / 8.0).abs() < 1e-12);
    assert_eq!(m[0].batch.stop_reasons["env_error"], 2);
    assert_eq!(m[0].updates.len(), 1);
    assert!(m[0].updates[0].metrics.tokens == 2 * 7 * 2);
    assert_eq!(m[0].schema_version, 1);
    // Held-out evaluation every 4 steps (and after the last): the expected reward rose.
    let evals: Vec<serde_json::Value> = std::fs::read_to_string(dir.path().join("eval.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let steps: Vec<u64> = evals.iter().map(|e| e["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, vec![4, 8, 12, 16]);
    let er = |i: usize| evals[i]["eval"]["expected_reward"].as_f64().unwrap();
    assert!(er(3) > er(0), "{evals:?}");
    // Only the newest checkpoint is kept.
    assert!(dir.path().join("checkpoint-00000016").is_dir());
    assert!(!dir.path().join("checkpoint-00000014").exists());

    // Baseline in the same run: the same episodes' seeds with updates too small to matter.
    let base_dir = tempfile::tempdir().unwrap();
    let mut c = cfg(16);
    c.optim.lr = 1e-12;
    let mut env = Bandit::new(1);
    env.infra_sample = Some(7);
    run(
        base_dir.path(),
        &c,
        &tiny("llama"),
        "llama",
        None,
        &tasks(),
        &mut env,
    )
    .unwrap();
    let base: Vec<f64> = metrics(base_dir.path())
        .iter()
        .map(|x| x.batch.reward_mean)
        .collect();
    eprintln!("baseline (lr 1e-12) reward per step: {base:?}");
    let base_last = base[12..].iter().sum::<f64>() / 4.0;
    assert!(
        last > base_last + 0.2,
        "trained {last} vs baseline {base_last}"
    );
}

#[test]
fn a_crashed_run_resumes_to_the_same_weights() {
    let whole = tempfile::tempdir().unwrap();
    let a = tiny("llama");
    run(
        whole.path(),
        &cfg(6),
        &a,
        "llama",
        None,
        &tasks(),
        &mut Bandit::new(2),
    )
    .unwrap();

    let cut = tempfile::tempdir().unwrap();
    let b = tiny("llama");
    let mut env = Bandit::new(2);
    env.crash_at = Some(4);
    let e = run(cut.path(), &cfg(6), &b, "llama", None, &tasks(), &mut env).unwrap_err();
    assert!(e.to_string().contains("simulated crash"), "{e}");
    // Steps 1-3 were logged, the checkpoint is at step 2; step 3 runs again.
    assert_eq!(metrics(cut.path()).len(), 3);
    // A fresh process: the base weights again, resumed from the checkpoint.
    let b = tiny("llama");
    let s = run(
        cut.path(),
        &cfg(6),
        &b,
        "llama",
        None,
        &tasks(),
        &mut Bandit::new(2),
    )
    .unwrap();
    assert_eq!(s.resumed_from, Some(2));
    let steps: Vec<u64> = metrics(cut.path()).iter().map(|m| m.step).collect();
    assert_eq!(steps, vec![1, 2, 3, 4, 5, 6]);
    let (wa, wb) = (weights(&a), weights(&b));
    let max = wa
        .iter()
        .zip(&wb)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(max < 1e-6, "resumed weights differ by {max}");
    // Extending a finished run is allowed (the step count is not part of the hash).
    let s = run(
        cut.path(),
        &cfg(7),
        &b,
        "llama",
        None,
        &tasks(),
        &mut Bandit::new(2),
    )
    .unwrap();
    assert_eq!(s.resumed_from, Some(6));
}

#[test]
fn bad_input_fails_before_the_first_update() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny("llama");
    let before = weights(&model);
    // G < 2.
    let mut c = cfg(2);
    c.group = 1;
    let e = run(
        dir.path(),
        &c,
        &model,
        "llama",
        None,
        &tasks(),
        &mut Bandit::new(3),
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("group:"), "{e}");
    // A policy without logprobs.
    let mut env = Bandit::new(3);
    env.no_logprobs = true;
    let e = run(
        dir.path(),
        &cfg(2),
        &model,
        "llama",
        None,
        &tasks(),
        &mut env,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("no logprobs") && e.contains("sample 0"), "{e}");
    assert_eq!(before, weights(&model));
    assert!(!dir.path().join("metrics.jsonl").exists() || metrics(dir.path()).is_empty());
    // The same directory with another configuration.
    let mut c = cfg(2);
    c.loss.clip_high = 0.3;
    let e = run(
        dir.path(),
        &c,
        &model,
        "llama",
        None,
        &tasks(),
        &mut Bandit::new(3),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("loss.clip_high: 0.28 -> 0.3"), "{e}");
    // ... or another model.
    let other = tiny("qwen2");
    let e = run(
        dir.path(),
        &cfg(2),
        &other,
        "qwen2",
        None,
        &tasks(),
        &mut Bandit::new(3),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("another configuration (model"), "{e}");
    // ... or other environment settings (a world model where the run had none).
    let mut env = Bandit::new(3);
    env.settings = serde_json::json!({"mode": "sim", "model": "embedded"});
    let e = run(
        dir.path(),
        &cfg(2),
        &model,
        "llama",
        None,
        &tasks(),
        &mut env,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("environment: null -> ") && e.contains("\"sim\""),
        "{e}"
    );
    // KL without a reference.
    let mut c = cfg(2);
    c.loss.kl_coef = 0.1;
    let e = run(
        dir.path(),
        &c,
        &model,
        "llama",
        None,
        &tasks(),
        &mut Bandit::new(3),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("loss.kl_coef"), "{e}");
}

#[test]
fn lora_kl_and_importance_correction_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = tiny("llama");
    model
        .enable_lora(
            dojo_train::LoraConfig::new(4, 8.0, 0.0, &["q", "v", "o"]).unwrap(),
            1,
        )
        .unwrap();
    let reference = tiny("llama");
    let mut c = cfg(3);
    c.lora_rank = Some(4);
    c.loss.kl_coef = 0.05;
    c.optim.recompute_old_logprobs = true;
    c.optim.mini_batches = 2;
    run(
        dir.path(),
        &c,
        &model,
        "llama",
        Some(&reference),
        &tasks(),
        &mut Bandit::new(4),
    )
    .unwrap();
    let m = metrics(dir.path());
    assert_eq!(m[0].updates.len(), 2);
    // The second mini-batch sees weights moved by the first: the ratio is no longer 1.
    assert!(m[0].updates[1].metrics.approx_kl != 0.0);
    // Trainer and "engine" are the same model here: the gap is float noise.
    assert!(m[0].updates[0].metrics.tis_gap_max < 1e-4);
    assert!(
        dir.path()
            .join("checkpoint-00000003/adapter_model.safetensors")
            .is_file()
    );
}
