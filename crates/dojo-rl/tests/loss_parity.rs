//! The RL loss against PyTorch: loss value, gradient with respect to the logprobs (and the
//! entropy) and the metrics, for every aggregation mode, with and without truncated
//! importance correction + KL + entropy; a masked sample with NaN inputs must get exactly
//! zero gradient. Fixtures from `tests/fixtures/make_fixtures.py`.

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{Device, Tensor, Var};
use dojo_rl::loss::{Aggregation, LossConfig, LossInputs, ppo_loss};

fn fixtures() -> (HashMap<String, Tensor>, serde_json::Value) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let t = candle_core::safetensors::load(dir.join("loss.safetensors"), &Device::Cpu).unwrap();
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("loss.json")).unwrap()).unwrap();
    assert_eq!(j["schema_version"], 1);
    (t, j)
}

fn vec2(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}

fn close(what: &str, got: f64, want: f64) {
    assert!(
        (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
        "{what}: got {got}, PyTorch {want}"
    );
}

#[test]
fn loss_and_gradients_match_pytorch_in_every_mode() {
    let (t, j) = fixtures();
    let mask = &t["mask"];
    let lens: Vec<usize> = mask
        .to_vec2::<f32>()
        .unwrap()
        .iter()
        .map(|r| r.iter().filter(|&&m| m > 0.5).count())
        .collect();
    let cases = j["cases"].as_object().unwrap();
    assert_eq!(cases.len(), 6);
    for (name, case) in cases {
        let s = &case["settings"];
        let full = s.get("tis_cap").is_some();
        let aggregation = Aggregation::ALL
            .into_iter()
            .find(|a| a.as_str() == s["aggregation"].as_str().unwrap())
            .unwrap();
        let cfg = LossConfig {
            aggregation,
            norm_length: s["norm_length"].as_u64().unwrap() as usize,
            tis_cap: s.get("tis_cap").and_then(|v| v.as_f64()).unwrap_or(2.0),
            kl_coef: s.get("kl_coef").and_then(|v| v.as_f64()).unwrap_or(0.0),
            entropy_coef: s
                .get("entropy_coef")
                .and_then(|v| v.as_f64())
                .unwrap_or(0.0),
            ..LossConfig::default()
        };
        let lp = Var::from_tensor(&t["logprobs"]).unwrap();
        let h = Var::from_tensor(&t["entropy"]).unwrap();
        let x = LossInputs {
            logprobs: lp.as_tensor(),
            sampling_logprobs: &t["sampling_logprobs"],
            advantages: &t["advantages"],
            mask,
            trainer_old_logprobs: full.then_some(&t["trainer_old_logprobs"]),
            ref_logprobs: full.then_some(&t["ref_logprobs"]),
            entropy: full.then_some(h.as_tensor()),
        };
        let denom = cfg.aggregation.denominator(&lens, cfg.norm_length);
        let (loss, m) = ppo_loss(&x, &cfg, denom).unwrap();
        close(
            &format!("{name} loss"),
            loss.to_scalar::<f32>().unwrap() as f64,
            case["loss"].as_f64().unwrap(),
        );
        let grads = loss.backward().unwrap();
        let g = vec2(grads.get(lp.as_tensor()).unwrap());
        let want = vec2(&t[&format!("grad.{name}")]);
        for (i, (a, b)) in g.iter().zip(&want).enumerate() {
            close(&format!("{name} grad[{i}]"), *a as f64, *b as f64);
        }
        // Row 3 is masked and its inputs are NaN: exactly zero gradient.
        assert!(g[3 * 7..].iter().all(|v| *v == 0.0), "{name}: {g:?}");
        if full {
            let gh = vec2(grads.get(h.as_tensor()).unwrap());
            let want = vec2(&t[&format!("grad_entropy.{name}")]);
            for (i, (a, b)) in gh.iter().zip(&want).enumerate() {
                close(&format!("{name} entropy grad[{i}]"), *a as f64, *b as f64);
            }
        }
        let sm = m.summary();
        let want = &case["metrics"];
        close(
            &format!("{name} clip_frac_low"),
            sm.clip_frac_low,
            want["clip_frac_low"].as_f64().unwrap(),
        );
        close(
            &format!("{name} clip_frac_high"),
            sm.clip_frac_high,
            want["clip_frac_high"].as_f64().unwrap(),
        );
        close(
            &format!("{name} approx_kl"),
            sm.approx_kl,
            want["approx_kl"].as_f64().unwrap(),
        );
        close(
            &format!("{name} pg_loss"),
            sm.pg_loss,
            want["pg_loss"].as_f64().unwrap(),
        );
        if full {
            for k in [
                "tis_gap_mean",
                "tis_gap_max",
                "tis_truncated_frac",
                "ref_kl",
            ] {
                let got = match k {
                    "tis_gap_mean" => sm.tis_gap_mean,
                    "tis_gap_max" => sm.tis_gap_max,
                    "tis_truncated_frac" => sm.tis_truncated_frac,
                    _ => sm.ref_kl,
                };
                close(&format!("{name} {k}"), got, want[k].as_f64().unwrap());
            }
        }
        assert_eq!(sm.tokens, 10);
    }
}
