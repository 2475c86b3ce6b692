//! The policy update on a real (tiny, random) transformer from dojo-train's fixtures: masked
//! samples change nothing, a failed step leaves the weights alone, LoRA updates only the
//! adapters, and a short RL run on a bandit raises the expected reward.
//!
//! The bandit: the prompt is a fixed token sequence, the policy samples one token (temperature
//! 1, from the model's own distribution, whose logprob is the sampling logprob), and the
//! grader resolves the episode when the token is in a target set of 16 of the 64 ids. The
//! expected reward is the probability mass on the target set, computed exactly from the
//! logits, so the assertion does not depend on sampling noise.

use std::path::PathBuf;

use candle_core::{D, Device, Tensor};
use dojo_reward::group::{Episode, assemble};
use dojo_reward::{AdvantageConfig, Estimator, RewardConfig};
use dojo_rl::config::OptimConfig;
use dojo_rl::loss::LossConfig;
use dojo_rl::update::{EpisodeSample, policy_grads, policy_update, token_logprobs};
use dojo_train::{AdamW, LoraConfig, TrainModel};
use dojo_trajectory::StopReason;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn tiny() -> TrainModel {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dojo-train/tests/fixtures/llama");
    TrainModel::load_hf_dir(&dir, &Device::Cpu).unwrap()
}

const PROMPT: [u32; 5] = [1, 10, 11, 12, 13];

fn next_token_probs(model: &TrainModel, prompt: &[u32]) -> Vec<f32> {
    let ids = Tensor::new(prompt, &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let logits = model.logits(&ids).unwrap().detach();
    let last = logits.get(0).unwrap().get(prompt.len() - 1).unwrap();
    candle_core::Tensor::exp(
        &last
            .broadcast_sub(&last.max_keepdim(D::Minus1).unwrap())
            .unwrap(),
    )
    .and_then(|e| e.broadcast_div(&e.sum_keepdim(D::Minus1)?))
    .unwrap()
    .to_vec1()
    .unwrap()
}

fn sample_for(prompt: &[u32], token: u32, logprob: f32) -> EpisodeSample {
    let mut ids = prompt.to_vec();
    ids.push(token);
    let mut mask = vec![0u8; prompt.len()];
    mask.push(1);
    let mut lps = vec![0f32; prompt.len()];
    lps.push(logprob);
    EpisodeSample {
        input_ids: ids,
        loss_mask: mask,
        sampling_logprobs: lps,
        advantage: 0.0,
        trainer_old_logprobs: None,
        ref_logprobs: None,
    }
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
fn masked_samples_add_exactly_nothing() {
    let model = tiny();
    let probs = next_token_probs(&model, &PROMPT);
    let mut a = sample_for(&PROMPT, 20, probs[20].ln());
    a.advantage = 1.0;
    let mut masked = sample_for(&PROMPT, 30, probs[30].ln());
    masked.advantage = 5.0;
    masked.loss_mask.iter_mut().for_each(|m| *m = 0);
    let cfg = LossConfig::default();
    let (_, _, g1) = policy_grads(&model, std::slice::from_ref(&a), &cfg, 4).unwrap();
    let (_, m2, g2) = policy_grads(&model, &[a, masked.clone()], &cfg, 1).unwrap();
    assert_eq!(m2.tokens, 1.0);
    assert!(!g1.is_empty());
    for (name, t) in &g1 {
        let x: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
        let y: Vec<f32> = g2[name].flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(x, y, "{name}");
    }
    // A batch of masked samples only: no gradient, no update.
    let before = weights(&model);
    let mut opt = AdamW::new(OptimConfig::default().adamw());
    let r = policy_update(
        &model,
        &mut opt,
        &[masked],
        &cfg,
        &OptimConfig::default(),
        1e-2,
    )
    .unwrap();
    assert_eq!(r.metrics.tokens, 0);
    assert_eq!(before, weights(&model));
}

fn grads_vec(g: &std::collections::HashMap<String, Tensor>, name: &str) -> Vec<f32> {
    g[name].flatten_all().unwrap().to_vec1().unwrap()
}

#[test]
fn zero_advantage_samples_are_skipped_without_changing_the_update() {
    // Not running a sample whose advantage is exactly 0 must give the loss and gradients of
    // running it; an advantage of 1e-30 forces the run and adds nothing visible in f32.
    let model = tiny();
    let probs = next_token_probs(&model, &PROMPT);
    let mut a = sample_for(&PROMPT, 20, probs[20].ln());
    a.advantage = 1.0;
    let zero = sample_for(&PROMPT[..4], 7, probs[7].ln() - 0.3);
    let mut tiny_adv = zero.clone();
    tiny_adv.advantage = 1e-30;
    for aggregation in dojo_rl::loss::Aggregation::ALL {
        let cfg = LossConfig {
            aggregation,
            ..LossConfig::default()
        };
        let (l0, m0, g0) = policy_grads(&model, &[a.clone(), zero.clone()], &cfg, 1).unwrap();
        let (l1, m1, g1) = policy_grads(&model, &[a.clone(), tiny_adv.clone()], &cfg, 1).unwrap();
        assert_eq!(l0, l1, "{aggregation:?}");
        assert_eq!(m0.tokens, 1.0, "only the sample that ran");
        assert_eq!(m1.tokens, 2.0);
        assert_eq!(g0.len(), g1.len());
        for name in g0.keys() {
            assert_eq!(grads_vec(&g0, name), grads_vec(&g1, name), "{name}");
        }
    }
    // With an entropy term the zero-advantage sample has a loss of its own: it runs.
    let cfg = LossConfig {
        entropy_coef: 0.01,
        ..LossConfig::default()
    };
    let (_, m, _) = policy_grads(&model, &[a.clone(), zero.clone()], &cfg, 1).unwrap();
    assert_eq!(m.tokens, 2.0);

    // A mini-batch of zero advantages only: zero gradients for every trainable weight, and
    // the optimizer still steps (its moments from the step before move the weights).
    let cfg = LossConfig::default();
    let (l, _, g) = policy_grads(&model, std::slice::from_ref(&zero), &cfg, 1).unwrap();
    assert_eq!(l, 0.0);
    assert_eq!(g.len(), model.trainable().len());
    assert!(g.keys().all(|n| grads_vec(&g, n).iter().all(|v| *v == 0.0)));
    let mut opt = AdamW::new(OptimConfig::default().adamw());
    let optim = OptimConfig::default();
    policy_update(&model, &mut opt, &[a], &cfg, &optim, 1e-2).unwrap();
    let before = weights(&model);
    let r = policy_update(&model, &mut opt, &[zero], &cfg, &optim, 1e-2).unwrap();
    assert_eq!((r.skipped_zero_advantage, r.metrics.tokens), (1, 0));
    assert_eq!(opt.step, 2);
    assert_ne!(before, weights(&model));
}

#[test]
fn checkpointed_updates_have_the_same_loss_metrics_and_gradients() {
    // The memory plan turns activation checkpointing on for long episodes: the update must
    // not change by it (entropy in the loss, so its gradient path is covered too).
    let mut model = tiny();
    let probs = next_token_probs(&model, &PROMPT);
    let mut a = sample_for(&PROMPT, 20, probs[20].ln());
    a.advantage = 1.0;
    let mut b = sample_for(&PROMPT[..4], 7, probs[7].ln());
    b.advantage = -0.5;
    let cfg = LossConfig {
        entropy_coef: 0.01,
        ..LossConfig::default()
    };
    let samples = [a, b];
    let (l0, m0, g0) = policy_grads(&model, &samples, &cfg, 2).unwrap();
    model.set_checkpointing(dojo_train::Checkpointing::On);
    let (l1, m1, g1) = policy_grads(&model, &samples, &cfg, 2).unwrap();
    // Auto with no room for activations decides for checkpointing on every micro-batch.
    model.set_checkpointing(dojo_train::Checkpointing::Auto {
        activation_budget: 0,
    });
    let (l2, _, g2) = policy_grads(&model, &samples, &cfg, 2).unwrap();
    assert!(
        (l0 - l1).abs() < 1e-6 && (l0 - l2).abs() < 1e-6,
        "{l0} {l1} {l2}"
    );
    assert_eq!(m0.tokens, m1.tokens);
    assert_eq!(g0.len(), g1.len());
    for (name, t) in &g0 {
        let x: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
        for g in [&g1, &g2] {
            let y: Vec<f32> = g[name].flatten_all().unwrap().to_vec1().unwrap();
            let scale = x.iter().fold(1e-12f32, |m, v| m.max(v.abs()));
            let d = x
                .iter()
                .zip(&y)
                .fold(0f32, |m, (p, q)| m.max((p - q).abs()))
                / scale;
            assert!(d < 1e-5, "{name}: {d}");
        }
    }
}

#[test]
fn a_failed_step_leaves_the_weights_alone() {
    let model = tiny();
    let before = weights(&model);
    let mut opt = AdamW::new(OptimConfig::default().adamw());
    let mut good = sample_for(&PROMPT, 20, -4.0);
    good.advantage = 1.0;
    let mut bad = sample_for(&PROMPT, 21, -4.0);
    bad.advantage = f64::NAN;
    let e = policy_update(
        &model,
        &mut opt,
        &[good.clone(), bad],
        &LossConfig::default(),
        &OptimConfig::default(),
        1e-2,
    )
    .unwrap_err();
    assert!(e.to_string().contains("sample 1"), "{e}");
    let mut short = good.clone();
    short.sampling_logprobs.pop();
    assert!(
        policy_update(
            &model,
            &mut opt,
            &[short],
            &LossConfig::default(),
            &OptimConfig::default(),
            1e-2
        )
        .is_err()
    );
    assert_eq!(before, weights(&model));
    assert_eq!(opt.step, 0);
}

#[test]
fn trainer_logprobs_match_the_sampling_distribution() {
    let model = tiny();
    let probs = next_token_probs(&model, &PROMPT);
    let s = sample_for(&PROMPT, 20, probs[20].ln());
    let lp = token_logprobs(&model, std::slice::from_ref(&s), 4).unwrap();
    assert!((lp[0][PROMPT.len()] - probs[20].ln()).abs() < 1e-5);
}

/// The update runs the LM head at the loss positions only: the logprobs there are the full
/// forward's, in a padded micro-batch of two samples, and every other position reads 0.
#[test]
fn logprobs_at_loss_positions_match_the_full_logits() {
    let model = tiny();
    let long: Vec<u32> = vec![1, 10, 11, 12, 13, 14, 15, 16];
    let short: Vec<u32> = vec![1, 20, 21, 22];
    let sample = |ids: &[u32], trained: &[usize]| EpisodeSample {
        input_ids: ids.to_vec(),
        loss_mask: (0..ids.len())
            .map(|p| u8::from(trained.contains(&p)))
            .collect(),
        sampling_logprobs: vec![0.0; ids.len()],
        advantage: 0.0,
        trainer_old_logprobs: None,
        ref_logprobs: None,
    };
    let samples = [sample(&long, &[2, 3, 6]), sample(&short, &[3])];
    let lp = token_logprobs(&model, &samples, 4).unwrap();
    for (s, lp) in samples.iter().zip(&lp) {
        for p in 1..s.input_ids.len() {
            if s.loss_mask[p] == 0 {
                assert_eq!(lp[p], 0.0, "position {p}");
                continue;
            }
            let probs = next_token_probs(&model, &s.input_ids[..p]);
            let want = probs[s.input_ids[p] as usize].ln();
            assert!(
                (lp[p] - want).abs() < 1e-4,
                "position {p}: {} vs {want}",
                lp[p]
            );
        }
    }
}

#[test]
fn lora_updates_only_the_adapters() {
    let mut model = tiny();
    model
        .enable_lora(LoraConfig::new(4, 8.0, 0.0, &["q", "v"]).unwrap(), 3)
        .unwrap();
    let base = weights(&model);
    let mut opt = AdamW::new(OptimConfig::default().adamw());
    let mut s = sample_for(&PROMPT, 20, -4.0);
    s.advantage = 1.0;
    let lora_before: Vec<f32> = model
        .trainable()
        .values()
        .flat_map(|v| {
            v.as_tensor()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        })
        .collect();
    policy_update(
        &model,
        &mut opt,
        &[s],
        &LossConfig::default(),
        &OptimConfig::default(),
        1e-2,
    )
    .unwrap();
    let lora_after: Vec<f32> = model
        .trainable()
        .values()
        .flat_map(|v| {
            v.as_tensor()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        })
        .collect();
    assert_eq!(base, weights(&model));
    assert_ne!(lora_before, lora_after);

    // The engine samples from the adapters folded into copies of the weights: same logits
    // as the trainer's base + adapter forward, and the trainer's own weights stay as they are.
    assert!(model.to_engine().is_err());
    let engine = model.to_engine_merged().unwrap();
    let ids = Tensor::new(&PROMPT[..], &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let want: Vec<f32> = model
        .logits(&ids)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let got: Vec<f32> = engine
        .forward_all(&PROMPT, &mut dojo_engine::KvCache::new())
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let max = want
        .iter()
        .zip(&got)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(max < 1e-4, "engine on merged weights differs by {max}");
    assert_eq!(base, weights(&model));
}

/// Target set of the bandit: every fourth id.
fn in_target(t: u32) -> bool {
    t % 4 == 3
}

fn expected_reward(model: &TrainModel) -> f64 {
    next_token_probs(model, &PROMPT)
        .iter()
        .enumerate()
        .filter(|(t, _)| in_target(*t as u32))
        .map(|(_, p)| *p as f64)
        .sum()
}

/// One bandit run; returns the expected reward before and after, and the sampled reward means.
fn bandit(estimator: Estimator, steps: usize) -> (f64, f64, Vec<f64>) {
    let model = tiny();
    let optim = OptimConfig {
        lr: 3e-3,
        ..OptimConfig::default()
    };
    let mut opt = AdamW::new(optim.adamw());
    let adv = AdvantageConfig {
        estimator,
        ..AdvantageConfig::default()
    };
    let mut rng = StdRng::seed_from_u64(7);
    let before = expected_reward(&model);
    let mut curve = Vec::new();
    for _ in 0..steps {
        let probs = next_token_probs(&model, &PROMPT);
        let mut groups = Vec::new();
        for _ in 0..2 {
            let mut group = Vec::new();
            for _ in 0..8 {
                let u: f32 = rng.random();
                let mut acc = 0.0;
                let mut tok = probs.len() as u32 - 1;
                for (i, p) in probs.iter().enumerate() {
                    acc += p;
                    if u < acc {
                        tok = i as u32;
                        break;
                    }
                }
                group.push(Episode {
                    samples: vec![sample_for(&PROMPT, tok, probs[tok as usize].ln())],
                    stop: StopReason::Submitted,
                    infrastructure: false,
                    resolved: Some(in_target(tok)),
                });
            }
            groups.push(group);
        }
        let (samples, stats) = assemble(groups, &RewardConfig::default(), &adv).unwrap();
        curve.push(stats.reward_mean);
        policy_update(
            &model,
            &mut opt,
            &samples,
            &LossConfig::default(),
            &optim,
            optim.lr,
        )
        .unwrap();
    }
    (before, expected_reward(&model), curve)
}

#[test]
fn rl_raises_the_expected_reward_on_a_bandit() {
    for estimator in [Estimator::Loo, Estimator::Grpo, Estimator::DrGrpo] {
        let (before, after, curve) = bandit(estimator, 25);
        eprintln!(
            "{}: expected reward {before:.3} -> {after:.3}; sampled {curve:?}",
            estimator.as_str()
        );
        assert!(
            after > before + 0.15,
            "{}: expected reward {before:.3} -> {after:.3}",
            estimator.as_str()
        );
        let first: f64 = curve[..5].iter().sum::<f64>() / 5.0;
        let last: f64 = curve[curve.len() - 5..].iter().sum::<f64>() / 5.0;
        assert!(
            last > first,
            "{}: sampled reward {curve:?}",
            estimator.as_str()
        );
    }
}
