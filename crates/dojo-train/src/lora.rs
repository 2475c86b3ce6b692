//! LoRA adapters: low-rank updates `W x + scale · B A dropout(x)` on chosen projections, with
//! the base weights frozen, saved in the layout `peft` loads and merged into full weights.
//!
//! Training a 135M model fully keeps two AdamW moments per weight; with LoRA only the adapters
//! are variables (the base weights enter the graph as detached tensors, so autograd computes no
//! gradient for them and the optimizer keeps no state for them). Initialisation follows peft:
//! `A` kaiming-uniform with `a = √5` (uniform in ±1/√in), `B` zeros, so training starts from
//! the base model exactly; `scale = alpha / r`. Dropout applies to the adapter's input only,
//! during training, from a generator reseeded at every optimizer step (a resumed run draws the
//! same masks as an uninterrupted one).
//!
//! On disk (`adapter_config.json` + `adapter_model.safetensors`) the names are peft's
//! (`base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`), so
//! `PeftModel.from_pretrained(base, DIR)` loads what this module writes and the reverse.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Mutex;

use candle_core::{DType, Device, Tensor, Var};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value as Json, json};

use crate::TrainError;

/// Adapter configuration file name (peft's).
pub const ADAPTER_CONFIG_FILE: &str = "adapter_config.json";
/// Adapter weights file name (peft's).
pub const ADAPTER_WEIGHTS_FILE: &str = "adapter_model.safetensors";
/// Prefix peft puts before the model's own parameter names.
const PEFT_PREFIX: &str = "base_model.model.";

/// Short target names (`--lora-targets`) and the module paths inside a layer.
pub const TARGETS: &[(&str, &str)] = &[
    ("q", "self_attn.q_proj"),
    ("k", "self_attn.k_proj"),
    ("v", "self_attn.v_proj"),
    ("o", "self_attn.o_proj"),
    ("gate", "mlp.gate_proj"),
    ("up", "mlp.up_proj"),
    ("down", "mlp.down_proj"),
];

/// LoRA hyper-parameters (part of a run's identity).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LoraConfig {
    pub rank: usize,
    pub alpha: f64,
    pub dropout: f64,
    /// Short names from [`TARGETS`], in that order.
    pub targets: Vec<String>,
}

impl LoraConfig {
    /// Check the values and normalise the targets (accepting `q` or `q_proj`, any order).
    pub fn new(
        rank: usize,
        alpha: f64,
        dropout: f64,
        targets: &[&str],
    ) -> Result<LoraConfig, TrainError> {
        if rank == 0 {
            return Err(TrainError::Config("--lora-rank must be at least 1".into()));
        }
        if !(alpha.is_finite() && alpha > 0.0) {
            return Err(TrainError::Config(format!(
                "--lora-alpha {alpha} must be positive"
            )));
        }
        if !(0.0..1.0).contains(&dropout) {
            return Err(TrainError::Config(format!(
                "--lora-dropout {dropout} must be in [0, 1)"
            )));
        }
        let mut picked = Vec::new();
        for t in targets {
            let t = t.trim();
            let short = t.strip_suffix("_proj").unwrap_or(t);
            if !TARGETS.iter().any(|(s, _)| *s == short) {
                return Err(TrainError::Config(format!(
                    "--lora-targets: unknown module {t:?} (known: q, k, v, o, gate, up, down)"
                )));
            }
            picked.push(short.to_string());
        }
        let targets: Vec<String> = TARGETS
            .iter()
            .map(|(s, _)| s.to_string())
            .filter(|s| picked.contains(s))
            .collect();
        if targets.is_empty() {
            return Err(TrainError::Config("--lora-targets names no module".into()));
        }
        Ok(LoraConfig {
            rank,
            alpha,
            dropout,
            targets,
        })
    }

    pub fn scale(&self) -> f64 {
        self.alpha / self.rank as f64
    }

    /// peft's `target_modules` (`q_proj`, ...).
    pub fn peft_targets(&self) -> Vec<String> {
        self.targets.iter().map(|t| format!("{t}_proj")).collect()
    }

    /// Module paths (`model.layers.N.self_attn.q_proj`) of a model with `num_layers` layers.
    pub fn modules(&self, num_layers: usize) -> Vec<String> {
        let mut v = Vec::new();
        for i in 0..num_layers {
            for (short, path) in TARGETS {
                if self.targets.iter().any(|t| t == short) {
                    v.push(format!("model.layers.{i}.{path}"));
                }
            }
        }
        v
    }

    /// The `adapter_config.json` peft reads.
    pub fn adapter_config(&self, base_model: &str) -> Json {
        json!({
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "base_model_name_or_path": base_model,
            "r": self.rank,
            "lora_alpha": self.alpha,
            "lora_dropout": self.dropout,
            "target_modules": self.peft_targets(),
            "bias": "none",
            "fan_in_fan_out": false,
            "inference_mode": true,
            "init_lora_weights": true,
            "modules_to_save": null,
            "use_rslora": false,
            "use_dora": false,
        })
    }

    /// The LoRA settings of `dojo train sft`'s flags: adapters of `rank` on `targets`, or
    /// none (full fine-tuning) without a rank; `merge` (write merged weights) needs a rank.
    pub fn from_flags(
        rank: Option<usize>,
        alpha: f64,
        dropout: f64,
        targets: &[String],
        merge: bool,
    ) -> Result<Option<LoraConfig>, TrainError> {
        let Some(rank) = rank else {
            if merge {
                return Err(TrainError::Config(
                    "--merge merges LoRA adapters: it needs --lora-rank".into(),
                ));
            }
            return Ok(None);
        };
        let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
        LoraConfig::new(rank, alpha, dropout, &targets).map(Some)
    }

    /// The base model an adapter names (`base_model_name_or_path`): what `dojo train merge`
    /// merges into when no `--model` is given.
    pub fn base_model(dir: &Path) -> Result<String, TrainError> {
        let (_, raw) = LoraConfig::read(dir)?;
        raw.get("base_model_name_or_path")
            .and_then(Json::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .ok_or_else(|| {
                TrainError::Config(format!(
                    "{}: the adapter names no base model; pass --model",
                    dir.display()
                ))
            })
    }

    /// Read an `adapter_config.json` (peft's or ours).
    pub fn read(dir: &Path) -> Result<(LoraConfig, Json), TrainError> {
        let p = dir.join(ADAPTER_CONFIG_FILE);
        let s = std::fs::read_to_string(&p).map_err(|e| TrainError::file(&p, e))?;
        let v: Json = serde_json::from_str(&s).map_err(|source| TrainError::Json {
            path: p.to_path_buf(),
            source,
        })?;
        let field = |k: &str| {
            v.get(k)
                .ok_or_else(|| TrainError::file(&p, format!("missing field {k}")))
        };
        if field("peft_type")?.as_str() != Some("LORA") {
            return Err(TrainError::file(&p, "peft_type is not LORA"));
        }
        let unsupported = |k: &str| v.get(k).and_then(Json::as_bool) == Some(true);
        for k in ["use_rslora", "use_dora", "fan_in_fan_out"] {
            if unsupported(k) {
                return Err(TrainError::file(&p, format!("{k} is not supported")));
            }
        }
        if v.get("lora_bias").and_then(Json::as_bool) == Some(true) {
            return Err(TrainError::file(&p, "lora_bias is not supported"));
        }
        for k in ["rank_pattern", "alpha_pattern"] {
            if v.get(k)
                .and_then(Json::as_object)
                .is_some_and(|o| !o.is_empty())
            {
                return Err(TrainError::file(&p, format!("{k} is not supported")));
            }
        }
        if v.get("layers_to_transform").is_some_and(|x| !x.is_null()) {
            return Err(TrainError::file(&p, "layers_to_transform is not supported"));
        }
        if v.get("bias")
            .and_then(Json::as_str)
            .is_some_and(|b| b != "none")
        {
            return Err(TrainError::file(&p, "only bias \"none\" is supported"));
        }
        let rank = field("r")?
            .as_u64()
            .ok_or_else(|| TrainError::file(&p, "r is not an integer"))?
            as usize;
        let alpha = field("lora_alpha")?
            .as_f64()
            .ok_or_else(|| TrainError::file(&p, "lora_alpha is not a number"))?;
        let dropout = v.get("lora_dropout").and_then(Json::as_f64).unwrap_or(0.0);
        let targets: Vec<String> = match field("target_modules")? {
            Json::Array(a) => a
                .iter()
                .map(|t| t.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| TrainError::file(&p, "target_modules holds a non-string"))?,
            Json::String(s) => vec![s.clone()],
            _ => return Err(TrainError::file(&p, "target_modules is not a list")),
        };
        let refs: Vec<&str> = targets.iter().map(String::as_str).collect();
        let cfg =
            LoraConfig::new(rank, alpha, dropout, &refs).map_err(|e| TrainError::file(&p, e))?;
        Ok((cfg, v))
    }
}

/// One adapted projection: `A` `(r, in)` and `B` `(out, r)`.
pub struct Adapter {
    pub a: Var,
    pub b: Var,
}

/// A module path and the `(out, in)` shape of the weight an adapter is added to.
pub type ModuleShape = (String, (usize, usize));

/// The adapters of a model and their dropout generator.
pub struct Lora {
    pub config: LoraConfig,
    /// By module path (`model.layers.0.self_attn.q_proj`).
    pub adapters: BTreeMap<String, Adapter>,
    /// The same variables by parameter name (`MODULE.lora_A.weight`), for the optimizer.
    pub vars: BTreeMap<String, Var>,
    rng: Mutex<StdRng>,
}

/// Parameter names of a module's adapter matrices.
pub fn adapter_names(module: &str) -> (String, String) {
    (
        format!("{module}.lora_A.weight"),
        format!("{module}.lora_B.weight"),
    )
}

impl Lora {
    /// Fresh adapters for `modules`, whose base weights have the given `(out, in)` shapes.
    pub fn init(
        config: LoraConfig,
        shapes: &[ModuleShape],
        seed: u64,
        device: &Device,
    ) -> Result<Lora, TrainError> {
        let r = config.rank;
        let mut adapters = BTreeMap::new();
        let mut vars = BTreeMap::new();
        for (i, (module, (out, inp))) in shapes.iter().enumerate() {
            // kaiming_uniform_(a=√5) on an (r, in) matrix: bound = 1/√in.
            let mut rng = StdRng::seed_from_u64(seed ^ 0x4c6f_5241 ^ ((i as u64) << 32));
            let bound = 1.0 / (*inp as f32).sqrt();
            let a: Vec<f32> = (0..r * inp)
                .map(|_| rng.random_range(-bound..bound))
                .collect();
            let a = Var::from_tensor(&Tensor::from_vec(a, (r, *inp), device)?)?;
            let b = Var::from_tensor(&Tensor::zeros((*out, r), DType::F32, device)?)?;
            let (an, bn) = adapter_names(module);
            vars.insert(an, a.clone());
            vars.insert(bn, b.clone());
            adapters.insert(module.clone(), Adapter { a, b });
        }
        Ok(Lora {
            config,
            adapters,
            vars,
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
        })
    }

    /// Reseed the dropout generator for optimizer step `step` of a run seeded `seed`.
    pub fn reseed(&self, seed: u64, step: u64) {
        let s = seed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(step.wrapping_mul(0xD1B5_4A32_D192_ED03));
        if let Ok(mut g) = self.rng.lock() {
            *g = StdRng::seed_from_u64(s);
        }
    }

    /// The dropout generator's state, to draw the same masks again
    /// (the recomputation of activation checkpointing in [`crate::TrainModel::loss_grads`]).
    pub(crate) fn dropout_state(&self) -> StdRng {
        match self.rng.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Put back a state [`Lora::dropout_state`] returned.
    pub(crate) fn set_dropout_state(&self, state: StdRng) {
        match self.rng.lock() {
            Ok(mut g) => *g = state,
            Err(p) => *p.into_inner() = state,
        }
    }

    /// `scale · B A dropout(x)` for rows `x` `(n, in)`.
    pub fn delta(&self, module: &str, x: &Tensor, train: bool) -> candle_core::Result<Tensor> {
        let ad = &self.adapters[module];
        let p = self.config.dropout;
        let x = if train && p > 0.0 {
            let n = x.elem_count();
            let keep = 1.0 - p as f32;
            let mask: Vec<f32> = {
                let mut g = self
                    .rng
                    .lock()
                    .map_err(|_| candle_core::Error::Msg("dropout generator poisoned".into()))?;
                (0..n)
                    .map(|_| {
                        if g.random::<f32>() < keep {
                            1.0 / keep
                        } else {
                            0.0
                        }
                    })
                    .collect()
            };
            (x * Tensor::from_vec(mask, x.shape(), x.device())?)?
        } else {
            x.clone()
        };
        // Scaled on the rank-r side: one (n, r) tensor instead of another (n, out) one kept
        // for the backward pass.
        let h = (dojo_kernels::matmul(&x, &ad.a.as_tensor().t()?)? * self.config.scale())?;
        dojo_kernels::matmul(&h, &ad.b.as_tensor().t()?)
    }

    /// `scale · B A` for a module: what merging adds to its weight.
    pub fn merged_delta(&self, module: &str) -> candle_core::Result<Tensor> {
        let ad = &self.adapters[module];
        ad.b.as_tensor().matmul(ad.a.as_tensor())? * self.config.scale()
    }

    /// The adapter tensors under peft's names.
    pub fn peft_tensors(&self) -> HashMap<String, Tensor> {
        self.vars
            .iter()
            .map(|(k, v)| (format!("{PEFT_PREFIX}{k}"), v.as_tensor().detach()))
            .collect()
    }

    /// Save `adapter_config.json` + `adapter_model.safetensors` into `dir`.
    pub fn save(&self, dir: &Path, base_model: &str) -> Result<(), TrainError> {
        crate::checkpoint::write_json(
            &dir.join(ADAPTER_CONFIG_FILE),
            &self.config.adapter_config(base_model),
        )?;
        let mut meta = HashMap::new();
        meta.insert("format".to_string(), "pt".to_string());
        meta.insert(
            "dojo_schema_version".to_string(),
            crate::TRAIN_SCHEMA_VERSION.to_string(),
        );
        crate::checkpoint::save_safetensors(
            &self.peft_tensors(),
            &dir.join(ADAPTER_WEIGHTS_FILE),
            &meta,
        )
    }

    /// Replace the adapter weights with those saved in `dir` (peft's layout), checking that
    /// the configuration matches and that every tensor is there with the right shape.
    pub fn load_weights(&self, dir: &Path) -> Result<(), TrainError> {
        let (cfg, _) = LoraConfig::read(dir)?;
        let cfg_path = dir.join(ADAPTER_CONFIG_FILE);
        if cfg.rank != self.config.rank
            || cfg.alpha != self.config.alpha
            || cfg.targets != self.config.targets
        {
            return Err(TrainError::file(
                &cfg_path,
                format!(
                    "adapter r={} alpha={} targets {:?}, this run r={} alpha={} targets {:?}",
                    cfg.rank,
                    cfg.alpha,
                    cfg.targets,
                    self.config.rank,
                    self.config.alpha,
                    self.config.targets
                ),
            ));
        }
        let p = dir.join(ADAPTER_WEIGHTS_FILE);
        let loaded = candle_core::safetensors::load(&p, self.device()?)
            .map_err(|e| TrainError::file(&p, e))?;
        for (name, var) in &self.vars {
            // peft writes `...lora_A.weight`; older versions kept the adapter name.
            let t = loaded
                .get(&format!("{PEFT_PREFIX}{name}"))
                .or_else(|| {
                    loaded.get(&format!(
                        "{PEFT_PREFIX}{}",
                        name.replace(".weight", ".default.weight")
                    ))
                })
                .ok_or_else(|| {
                    TrainError::file(&p, format!("missing tensor {PEFT_PREFIX}{name}"))
                })?;
            if t.dims() != var.dims() {
                return Err(TrainError::file(
                    &p,
                    format!(
                        "tensor {name} has shape {:?}, the model's adapter {:?}",
                        t.dims(),
                        var.dims()
                    ),
                ));
            }
            var.set(&t.to_dtype(DType::F32)?)?;
        }
        if loaded.len() != self.vars.len() {
            return Err(TrainError::file(
                &p,
                format!(
                    "holds {} tensors, the adapter has {}",
                    loaded.len(),
                    self.vars.len()
                ),
            ));
        }
        Ok(())
    }

    fn device(&self) -> Result<&Device, TrainError> {
        self.vars
            .values()
            .next()
            .map(|v| v.device())
            .ok_or_else(|| TrainError::Model("the adapter has no modules".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_checked_and_normalised() {
        let c = LoraConfig::new(4, 8.0, 0.0, &["v_proj", "q", "down"]).unwrap();
        assert_eq!(c.targets, ["q", "v", "down"]);
        assert_eq!(c.peft_targets(), ["q_proj", "v_proj", "down_proj"]);
        assert_eq!(c.scale(), 2.0);
        assert_eq!(
            c.modules(1),
            [
                "model.layers.0.self_attn.q_proj",
                "model.layers.0.self_attn.v_proj",
                "model.layers.0.mlp.down_proj"
            ]
        );
        let e = LoraConfig::new(4, 8.0, 0.0, &["qq"]).unwrap_err();
        assert!(e.to_string().contains("unknown module \"qq\""), "{e}");
        assert!(LoraConfig::new(0, 8.0, 0.0, &["q"]).is_err());
        assert!(LoraConfig::new(4, 8.0, 1.0, &["q"]).is_err());
    }

    #[test]
    fn init_is_peft_like_and_seeded() {
        let c = LoraConfig::new(2, 4.0, 0.0, &["q"]).unwrap();
        let shapes = vec![("m".to_string(), (6usize, 16usize))];
        let l = Lora::init(c.clone(), &shapes, 7, &Device::Cpu).unwrap();
        let a = l.adapters["m"].a.as_tensor().flatten_all().unwrap();
        let a = a.to_vec1::<f32>().unwrap();
        assert!(a.iter().all(|x| x.abs() <= 0.25), "bound 1/sqrt(16)");
        assert!(a.iter().any(|x| *x != 0.0));
        let b = l.adapters["m"].b.as_tensor().sum_all().unwrap();
        assert_eq!(b.to_scalar::<f32>().unwrap(), 0.0);
        let again = Lora::init(c, &shapes, 7, &Device::Cpu).unwrap();
        let a2 = again.adapters["m"].a.as_tensor().flatten_all().unwrap();
        assert_eq!(a, a2.to_vec1::<f32>().unwrap());
    }

    #[test]
    fn base_model_is_read_from_the_adapter() {
        let dir = tempfile::tempdir().unwrap();
        let c = LoraConfig::new(4, 8.0, 0.0, &["q"]).unwrap();
        let write = |base: &str| {
            std::fs::write(
                dir.path().join(ADAPTER_CONFIG_FILE),
                c.adapter_config(base).to_string(),
            )
            .unwrap()
        };
        write("/models/base");
        assert_eq!(LoraConfig::base_model(dir.path()).unwrap(), "/models/base");
        write("");
        let e = LoraConfig::base_model(dir.path()).unwrap_err().to_string();
        assert!(
            e.ends_with(": the adapter names no base model; pass --model"),
            "{e}"
        );
    }

    #[test]
    fn flags_make_lora_or_refuse_merge_without_it() {
        let t = vec!["q".to_string(), "v".to_string()];
        assert!(
            LoraConfig::from_flags(None, 16.0, 0.0, &t, false)
                .unwrap()
                .is_none()
        );
        let e = LoraConfig::from_flags(None, 16.0, 0.0, &t, true).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--merge merges LoRA adapters: it needs --lora-rank"
        );
        let c = LoraConfig::from_flags(Some(4), 8.0, 0.0, &t, true)
            .unwrap()
            .unwrap();
        assert_eq!((c.rank, c.scale()), (4, 2.0));
    }
}
