//! The trainable transformer: Llama (SmolLM2), Qwen2/2.5 and Qwen3 with f32 [`Var`] weights.
//!
//! Weights come from dojo-engine's loaders (GGUF dequantized to f32, Hugging Face safetensors)
//! and keep the engine's [`Config`], so the same files, the same architecture flags and the
//! same checks serve inference and training. Each layer runs the engine's transformer block
//! ([`dojo_engine::block`]), whose ops (dojo-kernels' RMSNorm, RoPE, SiLU gate and causal
//! attention) all have backward passes; what differs from inference is only where attention
//! finds its keys (the batch itself, right-padded, instead of a KV cache written in place,
//! which autograd would not track) and how a projection reads its weight (f32 variables, with
//! LoRA updates). A test checks that both give the same logits on the same weights, and the
//! parity tests pin every gradient against PyTorch.
//!
//! Parameters are named as in Hugging Face checkpoints (`model.layers.0.self_attn.q_proj.weight`),
//! which is also the layout checkpoints are saved in. llama.cpp stores Llama q/k weights
//! permuted for interleaved RoPE; they are permuted back at load time so that training and
//! saving always use the Hugging Face (rotate-half) form.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use candle_core::quantized::QMatMul;
use candle_core::{DType, Device, Tensor, Var};
use dojo_engine::model::{Linear as EngineLinear, rope_tables};
use dojo_engine::{Arch, Config, Model as EngineModel};
use serde_json::{Value as Json, json};

use crate::TrainError;
use crate::lora::{Lora, LoraConfig};
use crate::ops::{frozen_matmul, linear};
use dojo_engine::block::{LayerWeights, Norm, Positions, Proj, block, causal_attention};
use dojo_kernels::rms_norm;

/// Layer `prefix` of a [`TrainModel`] as the shared block reads it: the weights by Hugging
/// Face name, projections with their LoRA updates.
struct TrainLayer<'a> {
    model: &'a TrainModel,
    prefix: String,
    train: bool,
}

impl LayerWeights for TrainLayer<'_> {
    fn project(&self, p: Proj, x: &Tensor) -> candle_core::Result<Tensor> {
        let module = match p {
            Proj::Q => "self_attn.q_proj",
            Proj::K => "self_attn.k_proj",
            Proj::V => "self_attn.v_proj",
            Proj::O => "self_attn.o_proj",
            Proj::Gate => "mlp.gate_proj",
            Proj::Up => "mlp.up_proj",
            Proj::Down => "mlp.down_proj",
        };
        self.model
            .proj(x, &format!("{}.{module}", self.prefix), self.train)
    }

    fn norm(&self, n: Norm) -> Option<&Tensor> {
        let name = match n {
            Norm::Attn => "input_layernorm",
            Norm::Ffn => "post_attention_layernorm",
            Norm::QHead => "self_attn.q_norm",
            Norm::KHead => "self_attn.k_norm",
        };
        self.model
            .weights
            .get(&format!("{}.{name}.weight", self.prefix))
    }
}

/// A model whose weights are trainable variables.
pub struct TrainModel {
    pub config: Config,
    /// `lm_head` shares the embedding matrix (SmolLM2, small Qwen models).
    pub tied: bool,
    params: BTreeMap<String, Var>,
    /// What the forward pass reads: the variables' tensors, or (with LoRA) detached views of
    /// the same storage, so that autograd computes no gradient for frozen weights.
    weights: BTreeMap<String, Tensor>,
    /// LoRA adapters, when the base weights are frozen.
    pub(crate) lora: Option<Lora>,
    /// Whether [`TrainModel::loss_grads`] recomputes blocks instead of keeping their
    /// activations.
    pub(crate) checkpointing: Checkpointing,
    /// Rows of logits a separable loss computes at once ([`LossRows::Separable`]).
    pub(crate) logit_chunk_rows: usize,
    cos: Tensor,
    sin: Tensor,
    pub(crate) device: Device,
}

fn qmatmul_tensor(w: &QMatMul, device: &Device) -> candle_core::Result<Tensor> {
    match w {
        QMatMul::Tensor(t) => t.to_dtype(DType::F32),
        QMatMul::TensorF16(t) => t.to_dtype(DType::F32),
        QMatMul::QTensor(q) => q.dequantize(device),
    }
}

/// llama.cpp's converter permutes q/k rows per head from rotate-half to interleaved RoPE order
/// (`reshape(n_head, 2, hd/2, in).swapaxes(1, 2)`); this is its inverse.
pub fn unpermute_rope_rows(w: &Tensor, n_head: usize) -> candle_core::Result<Tensor> {
    let dims = w.dims().to_vec();
    let out = dims[0];
    let rest: usize = dims[1..].iter().product();
    let hd = out / n_head;
    w.reshape((n_head, hd / 2, 2, rest))?
        .transpose(1, 2)?
        .contiguous()?
        .reshape(dims)
}

/// HF-layout parameter names of one layer, with whether each exists for `arch`.
fn layer_names(arch: Arch, i: usize) -> Vec<String> {
    let p = format!("model.layers.{i}");
    let mut v = vec![format!("{p}.input_layernorm.weight")];
    for n in ["q", "k", "v", "o"] {
        v.push(format!("{p}.self_attn.{n}_proj.weight"));
        if arch == Arch::Qwen2 && n != "o" {
            v.push(format!("{p}.self_attn.{n}_proj.bias"));
        }
    }
    if arch == Arch::Qwen3 {
        v.push(format!("{p}.self_attn.q_norm.weight"));
        v.push(format!("{p}.self_attn.k_norm.weight"));
    }
    v.push(format!("{p}.post_attention_layernorm.weight"));
    for n in ["gate", "up", "down"] {
        v.push(format!("{p}.mlp.{n}_proj.weight"));
    }
    v
}

/// Activation checkpointing in [`TrainModel::loss_grads`] (the memory plan's choice).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checkpointing {
    Off,
    On,
    /// Per call: on when the batch's activations, attention and logits would take more than
    /// this many bytes ([`crate::memory::needs_checkpointing`]), for batches whose shapes vary.
    Auto {
        activation_budget: u64,
    },
}

/// How [`TrainModel::loss_grads`] may call its loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossRows {
    /// A sum over rows: called on chunks of rows, the results summed.
    Separable,
    /// Called once on every row.
    Whole,
}

/// What every block of one batch shares: its shape and RoPE tables (the attention op builds
/// its causal mask block by block).
pub(crate) struct BlockInputs {
    b: usize,
    t: usize,
    cos: Tensor,
    sin: Tensor,
}

/// One micro-batch on the device: right-padded ids and the rows that carry loss.
pub struct DeviceBatch {
    /// `(b, t)` u32 token ids (padding after each sequence's end).
    pub ids: Tensor,
    /// Row `bi * t + p` of the flattened hidden states for every position `p` whose next
    /// token is trained.
    pub rows: Tensor,
    /// The token each of those rows must predict.
    pub targets: Tensor,
    /// Number of trained tokens (`rows.len()`).
    pub n_trained: usize,
}

impl DeviceBatch {
    /// Build from sequences of `(input_ids, labels)`; labels follow the Hugging Face convention
    /// (same positions as the ids, −100 for no loss, shifted inside the loss).
    pub fn new(seqs: &[(&[u32], &[i32])], device: &Device) -> candle_core::Result<DeviceBatch> {
        let t = seqs.iter().map(|(ids, _)| ids.len()).max().unwrap_or(0);
        let b = seqs.len();
        let mut ids = vec![0u32; b * t];
        let mut rows = Vec::new();
        let mut targets = Vec::new();
        for (bi, (s_ids, s_labels)) in seqs.iter().enumerate() {
            ids[bi * t..bi * t + s_ids.len()].copy_from_slice(s_ids);
            for p in 0..s_ids.len().saturating_sub(1) {
                let l = s_labels[p + 1];
                if l >= 0 {
                    rows.push((bi * t + p) as u32);
                    targets.push(l as u32);
                }
            }
        }
        let n_trained = rows.len();
        Ok(DeviceBatch {
            ids: Tensor::from_vec(ids, (b, t), device)?,
            rows: Tensor::from_vec(rows, n_trained, device)?,
            targets: Tensor::from_vec(targets, n_trained, device)?,
            n_trained,
        })
    }
}

impl TrainModel {
    /// Take over an engine model's weights (dequantized, q/k un-permuted for llama.cpp Llama
    /// files) as trainable variables.
    pub fn from_engine(model: EngineModel) -> Result<TrainModel, TrainError> {
        let device = model.device().clone();
        let mut cfg = model.config.clone();
        let interleaved = cfg.rope_interleaved;
        cfg.rope_interleaved = false;
        let mut params: BTreeMap<String, Var> = BTreeMap::new();
        let mut put = |name: String, t: Tensor| -> Result<(), TrainError> {
            let t = t.to_dtype(DType::F32)?.contiguous()?;
            params.insert(name, Var::from_tensor(&t)?);
            Ok(())
        };
        let lm = qmatmul_tensor(&model.lm_head, &device)?;
        let tied = match &model.lm_head {
            QMatMul::Tensor(t) => t.id() == model.embed.id(),
            _ => false,
        };
        put("model.embed_tokens.weight".into(), model.embed.clone())?;
        put("model.norm.weight".into(), model.norm.clone())?;
        if !tied {
            put("lm_head.weight".into(), lm)?;
        }
        for (i, l) in model.layers.iter().enumerate() {
            let p = format!("model.layers.{i}");
            let mut lin = |n: &str, lin: &EngineLinear, heads: Option<usize>| {
                let mut w = qmatmul_tensor(&lin.w, &device)?;
                let mut b = lin.b.clone();
                if let Some(h) = heads.filter(|_| interleaved) {
                    w = unpermute_rope_rows(&w, h)?;
                    b = b.map(|b| unpermute_rope_rows(&b, h)).transpose()?;
                }
                put(format!("{p}.{n}.weight"), w)?;
                if let Some(b) = b {
                    put(format!("{p}.{n}.bias"), b.flatten_all()?)?;
                }
                Ok::<(), TrainError>(())
            };
            lin("self_attn.q_proj", &l.q, Some(cfg.num_heads))?;
            lin("self_attn.k_proj", &l.k, Some(cfg.num_kv_heads))?;
            lin("self_attn.v_proj", &l.v, None)?;
            lin("self_attn.o_proj", &l.o, None)?;
            lin("mlp.gate_proj", &l.gate, None)?;
            lin("mlp.up_proj", &l.up, None)?;
            lin("mlp.down_proj", &l.down, None)?;
            put(format!("{p}.input_layernorm.weight"), l.attn_norm.clone())?;
            put(
                format!("{p}.post_attention_layernorm.weight"),
                l.ffn_norm.clone(),
            )?;
            if let (Some(qn), Some(kn)) = (&l.q_norm, &l.k_norm) {
                put(format!("{p}.self_attn.q_norm.weight"), qn.clone())?;
                put(format!("{p}.self_attn.k_norm.weight"), kn.clone())?;
            }
        }
        Self::assemble(cfg, tied, params, &device)
    }

    fn assemble(
        config: Config,
        tied: bool,
        params: BTreeMap<String, Var>,
        device: &Device,
    ) -> Result<TrainModel, TrainError> {
        let mut want = vec![
            "model.embed_tokens.weight".to_string(),
            "model.norm.weight".into(),
        ];
        if !tied {
            want.push("lm_head.weight".into());
        }
        for i in 0..config.num_layers {
            want.extend(layer_names(config.arch, i));
        }
        for n in &want {
            if !params.contains_key(n) {
                return Err(TrainError::Model(format!(
                    "{:?} model is missing parameter {n}",
                    config.arch
                )));
            }
        }
        let (cos, sin) = rope_tables(&config, device)?;
        let weights = params
            .iter()
            .map(|(k, v)| (k.clone(), v.as_tensor().clone()))
            .collect();
        crate::memory::reuse_freed_blocks();
        Ok(TrainModel {
            logit_chunk_rows: crate::memory::head_chunk_rows(&config),
            config,
            tied,
            params,
            weights,
            lora: None,
            checkpointing: Checkpointing::Off,
            cos,
            sin,
            device: device.clone(),
        })
    }

    /// Load a GGUF file (any quantization the engine reads), dequantized to f32.
    pub fn load_gguf(path: &Path, device: &Device) -> Result<TrainModel, TrainError> {
        let m = dojo_engine::loader::load_gguf_with(path, device, dojo_engine::WeightMode::Dense)?;
        Self::from_engine(m)
    }

    /// Load a Hugging Face directory (`config.json` + `*.safetensors`).
    pub fn load_hf_dir(dir: &Path, device: &Device) -> Result<TrainModel, TrainError> {
        Self::from_engine(dojo_engine::loader::load_safetensors(dir, device)?)
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Parameters by Hugging Face name, in a fixed (sorted) order.
    pub fn params(&self) -> &BTreeMap<String, Var> {
        &self.params
    }

    pub fn num_params(&self) -> usize {
        self.params.values().map(|v| v.elem_count()).sum()
    }

    /// What the optimizer updates: every weight, or with LoRA the adapters only
    /// (`MODULE.lora_A.weight`, `MODULE.lora_B.weight`).
    pub fn trainable(&self) -> &BTreeMap<String, Var> {
        match &self.lora {
            Some(l) => &l.vars,
            None => &self.params,
        }
    }

    /// Add the gradients of the trainable parameters in `store` (one backward pass) to
    /// `grads`, by name: micro-batches accumulate into one optimizer step.
    pub fn accumulate_grads(
        &self,
        store: &candle_core::backprop::GradStore,
        grads: &mut HashMap<String, Tensor>,
    ) -> Result<(), TrainError> {
        for (name, var) in self.trainable() {
            if let Some(g) = store.get(var.as_tensor()) {
                let g = match grads.remove(name) {
                    Some(acc) => (acc + g)?,
                    None => g.clone(),
                };
                grads.insert(name.clone(), g);
            }
        }
        Ok(())
    }

    pub fn num_trainable(&self) -> usize {
        self.trainable().values().map(|v| v.elem_count()).sum()
    }

    pub fn lora(&self) -> Option<&Lora> {
        self.lora.as_ref()
    }

    /// Freeze the base weights and add fresh LoRA adapters (see [`crate::lora`]).
    pub fn enable_lora(&mut self, config: LoraConfig, seed: u64) -> Result<(), TrainError> {
        if self.lora.is_some() {
            return Err(TrainError::Config("LoRA is already enabled".into()));
        }
        let shapes = self.lora_shapes(&config)?;
        self.lora = Some(Lora::init(config, &shapes, seed, &self.device)?);
        for t in self.weights.values_mut() {
            *t = t.detach();
        }
        Ok(())
    }

    /// The `(out, in)` shapes of the weights `config` adapts, after checking its rank against
    /// them (nothing allocated).
    pub fn lora_shapes(
        &self,
        config: &LoraConfig,
    ) -> Result<Vec<crate::lora::ModuleShape>, TrainError> {
        let mut shapes = Vec::new();
        for m in config.modules(self.config.num_layers) {
            let w = self.p(&format!("{m}.weight"))?;
            shapes.push((m, w.dims2()?));
        }
        // Checked before anything is allocated: a rank past a matrix's smaller side adds no
        // capacity, and an absurd one (999,999) would allocate gigabytes first.
        if let Some((m, (o, i))) = shapes.iter().min_by_key(|(_, (o, i))| (*o).min(*i))
            && (config.rank == 0 || config.rank > (*o).min(*i))
        {
            return Err(TrainError::Config(format!(
                "LoRA rank {} is out of range for this model: 1 to {} (the smaller side of \
                 {m}, {o}x{i}); lower --lora-rank",
                config.rank,
                (*o).min(*i)
            )));
        }
        Ok(shapes)
    }

    /// Fold the adapters into the base weights (`W + scale · B A`, as peft's
    /// `merge_and_unload`) and make every weight trainable again.
    pub fn merge_lora(&mut self) -> Result<(), TrainError> {
        let Some(lora) = self.lora.take() else {
            return Ok(());
        };
        for m in lora.adapters.keys() {
            let var = &self.params[&format!("{m}.weight")];
            let merged = (var.as_tensor().detach() + lora.merged_delta(m)?)?;
            var.set(&merged)?;
        }
        self.weights = self
            .params
            .iter()
            .map(|(k, v)| (k.clone(), v.as_tensor().clone()))
            .collect();
        Ok(())
    }

    fn p(&self, name: &str) -> candle_core::Result<&Tensor> {
        self.weights
            .get(name)
            .ok_or_else(|| candle_core::Error::Msg(format!("missing parameter {name}")))
    }

    /// `x W^T + b`, plus the module's LoRA update when it has one.
    fn proj(&self, x: &Tensor, module: &str, train: bool) -> candle_core::Result<Tensor> {
        let w = self.p(&format!("{module}.weight"))?;
        let b = self.weights.get(&format!("{module}.bias"));
        let Some(lora) = &self.lora else {
            return linear(x, w, b);
        };
        let y = frozen_matmul(x, w)?;
        let y = match b {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        };
        if lora.adapters.contains_key(module) {
            y + lora.delta(module, x, train)?
        } else {
            Ok(y)
        }
    }

    /// The LM head on rows `x`.
    fn head(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if self.lora.is_some() {
            frozen_matmul(x, self.lm_head()?)
        } else {
            linear(x, self.lm_head()?, None)
        }
    }

    fn lm_head(&self) -> candle_core::Result<&Tensor> {
        if self.tied {
            self.p("model.embed_tokens.weight")
        } else {
            self.p("lm_head.weight")
        }
    }

    /// Hidden states after the last block, before the final norm: `(b * t, hidden)`, without
    /// gradients. Sequences are right-padded; causal attention keeps padding from reaching real
    /// tokens. Each block's output is detached: through the weights (variables) autograd would
    /// otherwise keep every block's intermediates alive for as long as the result lives (for
    /// RL's old-policy logprobs of four 3.5K-token episodes, tens of GB).
    pub fn hidden(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        let ctx = self.block_inputs(ids)?;
        let mut x = self.embed(ids)?.detach();
        for i in 0..self.config.num_layers {
            x = self.block(i, &x, &ctx, false)?.detach();
        }
        Ok(x)
    }

    /// Token embeddings of `ids` `(b, t)`: `(b * t, hidden)`.
    pub(crate) fn embed(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        self.p("model.embed_tokens.weight")?
            .index_select(&ids.flatten_all()?, 0)
    }

    /// What every block of a batch of shape `ids` shares: its shape and RoPE tables.
    pub(crate) fn block_inputs(&self, ids: &Tensor) -> candle_core::Result<BlockInputs> {
        let cfg = &self.config;
        let (b, t) = ids.dims2()?;
        if t > cfg.max_position {
            return Err(candle_core::Error::Msg(format!(
                "sequence of {t} tokens exceeds the model's {} positions",
                cfg.max_position
            )));
        }
        Ok(BlockInputs {
            b,
            t,
            cos: self.cos.narrow(0, 0, t)?,
            sin: self.sin.narrow(0, 0, t)?,
        })
    }

    /// Transformer block `i` on the hidden states `x` `(b * t, hidden)`: the engine's block
    /// ([`dojo_engine::block`]) on these weights, attention over the batch's own positions.
    pub(crate) fn block(
        &self,
        i: usize,
        x: &Tensor,
        ctx: &BlockInputs,
        train: bool,
    ) -> candle_core::Result<Tensor> {
        let w = TrainLayer {
            model: self,
            prefix: format!("model.layers.{i}"),
            train,
        };
        let at = Positions {
            b: ctx.b,
            t: ctx.t,
            cos: &ctx.cos,
            sin: &ctx.sin,
        };
        block(&self.config, &w, x, &at, |q, k, v| {
            causal_attention(q, k, v)
        })
    }

    /// Logits for every position: `(b, t, vocab)`, without gradients.
    pub fn logits(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        // Without gradients, as `hidden`.
        let (b, t) = ids.dims2()?;
        let x = rms_norm(
            &self.hidden(ids)?,
            self.p("model.norm.weight")?,
            self.config.rms_eps,
        )?;
        // Through `head`: with LoRA the frozen head gets no weight gradient (for SmolLM2 a
        // vocab × hidden matrix per backward pass), as in `loss_grads`.
        Ok(self.head(&x)?.reshape((b, t, ()))?.detach())
    }

    /// Logits `(n, vocab)` of the flattened positions `rows` (`bi * t + p`, u32) only: the LM
    /// head and its `vocab`-wide outputs for the positions a loss reads, not for every
    /// position of every sequence (RL's episodes are mostly prompt and observations). Without
    /// gradients, as [`TrainModel::hidden`].
    pub fn logits_at(&self, ids: &Tensor, rows: &Tensor) -> candle_core::Result<Tensor> {
        Ok(self.head_rows(&self.hidden(ids)?, rows)?.detach())
    }

    /// Final norm and LM head at the rows `rows` of the hidden states `h` `(b * t, hidden)`.
    pub(crate) fn head_rows(&self, h: &Tensor, rows: &Tensor) -> candle_core::Result<Tensor> {
        let x = rms_norm(
            &h.index_select(rows, 0)?,
            self.p("model.norm.weight")?,
            self.config.rms_eps,
        )?;
        self.head(&x)
    }

    /// The weights as an engine model (dense f32, rotate-half RoPE), sharing the tensors:
    /// generation and `dojo serve`'s code path on the trained weights.
    pub fn to_engine(&self) -> Result<EngineModel, TrainError> {
        if self.lora.is_some() {
            return Err(TrainError::Model(
                "the engine runs merged weights: merge the LoRA adapters first".into(),
            ));
        }
        self.engine_model()
    }

    /// [`TrainModel::to_engine`] with the LoRA adapters folded into copies of the weights
    /// they adapt (`W + scale · B A`), leaving this model's weights and adapters as they are:
    /// sampling from the current policy while LoRA training continues (RL).
    pub fn to_engine_merged(&self) -> Result<EngineModel, TrainError> {
        self.engine_model()
    }

    fn engine_model(&self) -> Result<EngineModel, TrainError> {
        let t = |n: &str| -> Result<Tensor, TrainError> { Ok(self.p(n)?.detach()) };
        let weight = |module: &str| -> Result<Tensor, TrainError> {
            let w = t(&format!("{module}.weight"))?;
            match self.lora.as_ref() {
                Some(l) if l.adapters.contains_key(module) => {
                    Ok((w + l.merged_delta(module)?.detach())?)
                }
                _ => Ok(w),
            }
        };
        let mut layers = Vec::with_capacity(self.config.num_layers);
        for i in 0..self.config.num_layers {
            let p = format!("model.layers.{i}");
            let lin = |n: &str| -> Result<EngineLinear, TrainError> {
                Ok(EngineLinear {
                    w: QMatMul::Tensor(weight(&format!("{p}.{n}"))?),
                    b: self
                        .params
                        .get(&format!("{p}.{n}.bias"))
                        .map(|v| v.as_tensor().detach()),
                })
            };
            let opt = |n: &str| {
                self.params
                    .get(&format!("{p}.{n}"))
                    .map(|v| v.as_tensor().detach())
            };
            layers.push(dojo_engine::model::Layer {
                attn_norm: t(&format!("{p}.input_layernorm.weight"))?,
                q: lin("self_attn.q_proj")?,
                k: lin("self_attn.k_proj")?,
                v: lin("self_attn.v_proj")?,
                o: lin("self_attn.o_proj")?,
                q_norm: opt("self_attn.q_norm.weight"),
                k_norm: opt("self_attn.k_norm.weight"),
                ffn_norm: t(&format!("{p}.post_attention_layernorm.weight"))?,
                gate: lin("mlp.gate_proj")?,
                up: lin("mlp.up_proj")?,
                down: lin("mlp.down_proj")?,
            });
        }
        let embed = t("model.embed_tokens.weight")?;
        let lm_head = if self.tied {
            QMatMul::Tensor(embed.clone())
        } else {
            QMatMul::Tensor(t("lm_head.weight")?)
        };
        Ok(EngineModel::new(
            self.config.clone(),
            embed,
            layers,
            t("model.norm.weight")?,
            lm_head,
            &self.device,
        )?)
    }

    /// The base weights by name (tied models omit `lm_head.weight`, as Hugging Face does;
    /// LoRA adapters are not included: see [`TrainModel::merge_lora`]).
    pub fn tensors(&self) -> HashMap<String, Tensor> {
        self.params
            .iter()
            .map(|(k, v)| (k.clone(), v.as_tensor().detach()))
            .collect()
    }

    /// Replace the weights with those of a safetensors file (a checkpoint of this model),
    /// checking names and shapes.
    pub fn load_weights(&self, path: &Path) -> Result<(), TrainError> {
        let loaded = candle_core::safetensors::load(path, &self.device)
            .map_err(|e| TrainError::file(path, e))?;
        for (name, var) in &self.params {
            let t = loaded
                .get(name)
                .ok_or_else(|| TrainError::file(path, format!("missing tensor {name}")))?;
            if t.dims() != var.dims() {
                return Err(TrainError::file(
                    path,
                    format!(
                        "tensor {name} has shape {:?}, the model {:?}",
                        t.dims(),
                        var.dims()
                    ),
                ));
            }
            var.set(&t.to_dtype(DType::F32)?)?;
        }
        Ok(())
    }

    /// A Hugging Face `config.json` for these weights. `base` (the source directory's
    /// config.json, when there is one) keeps fields this crate does not model.
    pub fn hf_config(&self, base: Option<&Json>, bos: Option<u32>, eos: Option<u32>) -> Json {
        let c = &self.config;
        let (mt, archi) = match c.arch {
            Arch::Llama => ("llama", "LlamaForCausalLM"),
            Arch::Qwen2 => ("qwen2", "Qwen2ForCausalLM"),
            Arch::Qwen3 => ("qwen3", "Qwen3ForCausalLM"),
        };
        let mut out = match base {
            Some(Json::Object(o)) => o.clone(),
            _ => serde_json::Map::new(),
        };
        let fields = json!({
            "architectures": [archi],
            "model_type": mt,
            "vocab_size": c.vocab_size,
            "hidden_size": c.hidden_size,
            "intermediate_size": c.intermediate_size,
            "num_hidden_layers": c.num_layers,
            "num_attention_heads": c.num_heads,
            "num_key_value_heads": c.num_kv_heads,
            "head_dim": c.head_dim,
            "rope_theta": c.rope_theta,
            "rms_norm_eps": c.rms_eps,
            "max_position_embeddings": c.max_position,
            "tie_word_embeddings": self.tied,
            "hidden_act": "silu",
            "attention_bias": c.arch == Arch::Qwen2,
        });
        // transformers 5 keeps rope_theta in `rope_parameters` and says `dtype`; 4 says
        // `rope_theta` and `torch_dtype`. Follow the source's spelling.
        let v5 = out.contains_key("rope_parameters");
        if let Json::Object(f) = fields {
            for (k, v) in f {
                if k == "rope_theta" && v5 {
                    continue;
                }
                out.insert(k, v);
            }
        }
        let dtype_key = if out.contains_key("dtype") {
            "dtype"
        } else {
            "torch_dtype"
        };
        out.insert(dtype_key.into(), json!("float32"));
        if base.is_none() {
            out.insert("rope_scaling".into(), Json::Null);
            if let Some(b) = bos {
                out.insert("bos_token_id".into(), json!(b));
            }
            if let Some(e) = eos {
                out.insert("eos_token_id".into(), json!(e));
            }
        }
        Json::Object(out)
    }

    /// The parts of the configuration a checkpoint must match to be resumed into this model.
    pub fn fingerprint(&self) -> Json {
        let c = &self.config;
        json!({
            "arch": format!("{:?}", c.arch).to_lowercase(),
            "vocab_size": c.vocab_size,
            "hidden_size": c.hidden_size,
            "intermediate_size": c.intermediate_size,
            "num_layers": c.num_layers,
            "num_heads": c.num_heads,
            "num_kv_heads": c.num_kv_heads,
            "head_dim": c.head_dim,
            "tied": self.tied,
            "num_params": self.num_params(),
        })
    }
}
