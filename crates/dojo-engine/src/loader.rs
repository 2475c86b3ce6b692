//! Building a [`Model`] from a GGUF file, a Hugging Face safetensors directory, or random
//! weights (tests).

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;

use candle_core::quantized::{GgmlDType, QMatMul, gguf_file};
use candle_core::{DType, Device, Tensor};
use rand::{Rng, SeedableRng};
use serde_json::Value as Json;

use crate::EngineError;
use crate::model::{Arch, Config, Layer, Linear, Model};

fn model_err(path: &Path, reason: impl std::fmt::Display) -> EngineError {
    EngineError::Load {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// A load failure on an underlying error, which stays the cause.
fn model_cause(
    path: &Path,
    what: impl Into<String>,
    source: impl std::error::Error + Send + Sync + 'static,
) -> EngineError {
    EngineError::LoadFrom {
        path: path.to_path_buf(),
        what: what.into(),
        source: Box::new(source),
    }
}

/// How the linear layers of a quantized GGUF model are multiplied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightMode {
    /// [`WeightMode::Dense`] in a portable x86-64 build (no AVX2 compiled in: candle's
    /// quantized kernels are slow there) when the f32 weights stay under
    /// [`DENSE_AUTO_MAX_BYTES`]; [`WeightMode::Mixed`] otherwise.
    #[default]
    Auto,
    /// Keep the GGUF quantization and its kernels everywhere (least memory; computes what
    /// llama.cpp computes).
    Quantized,
    /// Quantized for decode: Q4_1 through dojo-engine's own SIMD kernel ([`crate::q4_1`]),
    /// and the quantizations without a SIMD kernel here (Q5_0, Q5_1; Q4_1 on a CPU without
    /// AVX2) re-quantized to Q8_0 at load. Prefill through the dense GEMM
    /// ([`crate::Model::dense_prefill_rows`]).
    Mixed,
    /// Dequantize to f32 at load time and use the dense matmul.
    Dense,
}

/// Prompt chunks of at least this many tokens take the dense GEMM in [`WeightMode::Mixed`].
/// Measured on SmolLM2-135M Q4_1, 2 threads (`engine_bench prefill-rows`): dequantizing and
/// packing every weight costs a chunk about 100 ms whatever its length, after which the GEMM
/// costs 1.6 ms a token against the quantized kernel's 3.0; they cross near 100 tokens (a
/// 48-token chunk: 147 ms quantized, 209 ms dense).
pub const DENSE_PREFILL_ROWS: usize = 96;

impl WeightMode {
    /// `auto`, `quantized` or `dense` (the `DOJO_ENGINE_WEIGHTS` variable, CLI flags).
    pub fn parse(s: &str) -> Option<WeightMode> {
        match s {
            "auto" => Some(WeightMode::Auto),
            "quantized" => Some(WeightMode::Quantized),
            "mixed" => Some(WeightMode::Mixed),
            "dense" => Some(WeightMode::Dense),
            _ => None,
        }
    }

    /// `Auto` defers to the `DOJO_ENGINE_WEIGHTS` variable (benchmarks compare the modes).
    pub fn or_env(self) -> WeightMode {
        if self != WeightMode::Auto {
            return self;
        }
        std::env::var("DOJO_ENGINE_WEIGHTS")
            .ok()
            .and_then(|v| WeightMode::parse(&v))
            .unwrap_or(self)
    }
}

/// Largest f32 weight footprint [`WeightMode::Auto`] will dequantize to.
pub const DENSE_AUTO_MAX_BYTES: usize = 2 << 30;

/// Whether candle has a SIMD dot product for `dtype`. candle 0.11 has none for Q4_1/Q5_0/Q5_1
/// (the default model is Q4_1): they only run fast where the compiler auto-vectorizes the
/// scalar loop (`-C target-cpu=native`), ~7x slower without. Its AVX2 kernels for the others
/// are picked at run time, and its f32 GEMM picks AVX2/AVX-512 at run time too.
fn fast_quantized_kernel(dtype: GgmlDType) -> bool {
    !matches!(dtype, GgmlDType::Q4_1 | GgmlDType::Q5_0 | GgmlDType::Q5_1)
}

/// [`WeightMode::Mixed`]: whether a weight of `dtype` is re-quantized to Q8_0 for decode. Q4_1
/// keeps its bytes where dojo-engine's own kernel runs ([`crate::q4_1`]).
fn needs_requant(dtype: GgmlDType) -> bool {
    match dtype {
        GgmlDType::Q4_1 => !dojo_kernels::q4_1::available(),
        dt => !fast_quantized_kernel(dt),
    }
}

/// ggml type ids candle cannot read, by name, for the error message.
fn ggml_type_name(id: u32) -> &'static str {
    match id {
        4 | 5 => "Q4_2/Q4_3 (removed from ggml)",
        16 => "IQ2_XXS",
        17 => "IQ2_XS",
        18 => "IQ3_XXS",
        19 => "IQ1_S",
        20 => "IQ4_NL",
        21 => "IQ3_S",
        22 => "IQ2_S",
        23 => "IQ4_XS",
        24 => "I8",
        25 => "I16",
        26 => "I32",
        27 => "I64",
        28 => "F64",
        29 => "IQ1_M",
        34 => "TQ1_0",
        35 => "TQ2_0",
        39 => "MXFP4",
        _ => "unknown",
    }
}

/// Turn candle's "unknown dtype for tensor N" into a message that names the quantization.
fn gguf_read_error(path: &Path, e: candle_core::Error) -> EngineError {
    // candle appends a backtrace when RUST_BACKTRACE is set; the first line is the message.
    let full = e.to_string();
    let msg = full.lines().next().unwrap_or_default().to_string();
    if let Some(id) = msg
        .strip_prefix("unknown dtype for tensor ")
        .and_then(|n| n.trim().parse::<u32>().ok())
    {
        return model_err(
            path,
            format!(
                "unsupported quantization: ggml type {id} ({}); supported: F32, F16, BF16, Q4_0, \
                 Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K",
                ggml_type_name(id)
            ),
        );
    }
    EngineError::GgufRead {
        path: path.to_path_buf(),
        message: msg,
        source: Box::new(e),
    }
}

/// Load a GGUF model (any quantization candle supports: Q4_0/1, Q5_0/1, Q8_0, K-quants, F16,
/// BF16, F32), with [`WeightMode::Auto`] (or the `DOJO_ENGINE_WEIGHTS` override) and
/// [`crate::KvCacheType::Auto`] caches (or the `DOJO_ENGINE_KV` override).
pub fn load_gguf(path: &Path, device: &Device) -> Result<Model, EngineError> {
    let mut model = load_gguf_with(path, device, WeightMode::Auto.or_env())?;
    model.kv_dtype = crate::KvCacheType::Auto.resolve(model.kv_dtype);
    Ok(model)
}

/// [`load_gguf`] with an explicit [`WeightMode`].
pub fn load_gguf_with(
    path: &Path,
    device: &Device,
    mode: WeightMode,
) -> Result<Model, EngineError> {
    let mut file = File::open(path).map_err(|e| model_cause(path, "cannot open", e))?;
    let ct = gguf_file::Content::read(&mut file).map_err(|e| gguf_read_error(path, e))?;
    let config = gguf_config(path, &ct.metadata)?;
    let mode = resolve_weight_mode(mode, &ct);
    let mut w = GgufWeights {
        path,
        ct: &ct,
        file,
        device,
        mode,
    };
    let embed_q = w.quantized("token_embd.weight")?;
    let embed = w.dequantize(&embed_q, "token_embd.weight")?;
    let lm_head = if w.has("output.weight") {
        let q = w.quantized("output.weight")?;
        w.matmul(q, "output.weight")?
    } else if mode == WeightMode::Dense {
        // Tied: share the already dequantized embedding.
        QMatMul::Tensor(embed.clone())
    } else {
        w.matmul(embed_q, "token_embd.weight")?
    };
    let norm = w.dense("output_norm.weight")?;
    let layers = (0..config.num_layers)
        .map(|i| w.layer(i))
        .collect::<Result<Vec<_>, _>>()?;
    let mut model = Model::new(config, embed, layers, norm, lm_head, device)?;
    if mode == WeightMode::Mixed {
        model.dense_prefill_rows = Some(DENSE_PREFILL_ROWS);
    }
    Ok(model)
}

/// The model's dimensions from a GGUF file's `{arch}.*` metadata (the vocabulary size comes
/// from the embedding later).
fn gguf_config(path: &Path, md: &HashMap<String, gguf_file::Value>) -> Result<Config, EngineError> {
    let get = |k: &str| md.get(k);
    let arch_name = get("general.architecture")
        .and_then(|v| v.to_string().ok())
        .cloned()
        .ok_or_else(|| model_err(path, "metadata has no general.architecture"))?;
    let arch = Arch::parse(&arch_name).ok_or_else(|| {
        model_err(
            path,
            format!("unsupported architecture `{arch_name}` (supported: llama, qwen2, qwen3)"),
        )
    })?;
    let int = |k: &str| -> Result<usize, EngineError> {
        get(&format!("{arch_name}.{k}"))
            .and_then(|v| v.to_u64().ok().or_else(|| v.to_u32().ok().map(u64::from)))
            .map(|v| v as usize)
            .ok_or_else(|| model_err(path, format!("metadata has no integer {arch_name}.{k}")))
    };
    let float = |k: &str| get(&format!("{arch_name}.{k}")).and_then(|v| v.to_f32().ok());
    let hidden = int("embedding_length")?;
    let heads = int("attention.head_count")?;
    Ok(Config {
        arch,
        vocab_size: 0,
        hidden_size: hidden,
        intermediate_size: int("feed_forward_length")?,
        num_layers: int("block_count")?,
        num_heads: heads,
        num_kv_heads: int("attention.head_count_kv").unwrap_or(heads),
        head_dim: int("attention.key_length").unwrap_or(hidden / heads.max(1)),
        rope_theta: float("rope.freq_base").unwrap_or(10_000.0),
        rms_eps: float("attention.layer_norm_rms_epsilon").unwrap_or(1e-6) as f64,
        max_position: int("context_length").unwrap_or(4096),
        rope_interleaved: arch == Arch::Llama,
    })
}

/// [`WeightMode::Auto`] decided for this file: dense when a 2-D weight's quantization has no
/// fast kernel here (a portable x86 build) and the f32 copy is affordable, mixed otherwise.
fn resolve_weight_mode(mode: WeightMode, ct: &gguf_file::Content) -> WeightMode {
    let dense_bytes: usize = ct
        .tensor_infos
        .values()
        .filter(|t| t.shape.rank() == 2)
        .map(|t| t.shape.elem_count() * 4)
        .sum();
    let portable_x86 =
        cfg!(any(target_arch = "x86_64", target_arch = "x86")) && !cfg!(target_feature = "avx2");
    let mode = match mode {
        WeightMode::Auto if portable_x86 && dense_bytes <= DENSE_AUTO_MAX_BYTES => {
            WeightMode::Dense
        }
        WeightMode::Auto => WeightMode::Mixed,
        m => m,
    };
    tracing::debug!(?mode, dense_bytes, "GGUF weight mode");
    mode
}

/// The tensors of an open GGUF file, read one by one in the form the [`WeightMode`] asks for.
struct GgufWeights<'a> {
    path: &'a Path,
    ct: &'a gguf_file::Content,
    file: File,
    device: &'a Device,
    mode: WeightMode,
}

impl GgufWeights<'_> {
    fn has(&self, name: &str) -> bool {
        self.ct.tensor_infos.contains_key(name)
    }

    fn quantized(&mut self, name: &str) -> Result<candle_core::quantized::QTensor, EngineError> {
        self.ct
            .tensor(&mut self.file, name, self.device)
            .map_err(|e| model_cause(self.path, format!("tensor {name}"), e))
    }

    fn dequantize(
        &self,
        q: &candle_core::quantized::QTensor,
        name: &str,
    ) -> Result<Tensor, EngineError> {
        q.dequantize(self.device)
            .map_err(|e| model_cause(self.path, format!("tensor {name}"), e))
    }

    /// A tensor read and dequantized to f32 (norms, biases).
    fn dense(&mut self, name: &str) -> Result<Tensor, EngineError> {
        let q = self.quantized(name)?;
        self.dequantize(&q, name)
    }

    /// A 2-D weight as the [`WeightMode`] multiplies it.
    fn matmul(
        &self,
        q: candle_core::quantized::QTensor,
        name: &str,
    ) -> Result<QMatMul, EngineError> {
        let terr = |e: candle_core::Error| model_cause(self.path, format!("tensor {name}"), e);
        match self.mode {
            WeightMode::Dense => Ok(QMatMul::Tensor(self.dequantize(&q, name)?)),
            WeightMode::Mixed
                if needs_requant(q.dtype())
                    && q.shape().dims().last().is_some_and(|d| d % 32 == 0) =>
            {
                let dense = self.dequantize(&q, name)?;
                let q8 = candle_core::quantized::QTensor::quantize(&dense, GgmlDType::Q8_0)
                    .map_err(terr)?;
                Ok(QMatMul::from_qtensor(q8)?)
            }
            // candle's CPU kernels for these types take blocks in pairs and panic on an odd
            // count (a row of 32, 96, ... values): keep such a weight dense instead.
            _ if self.device.is_cpu()
                && matches!(
                    q.dtype(),
                    GgmlDType::Q4_1 | GgmlDType::Q5_0 | GgmlDType::Q5_1
                )
                && q.shape().dims().last().is_some_and(|d| d % 64 != 0) =>
            {
                Ok(QMatMul::Tensor(self.dequantize(&q, name)?))
            }
            _ => Ok(QMatMul::from_qtensor(q)?),
        }
    }

    /// `{prefix}.{n}.weight`, with `{prefix}.{n}.bias` when the file has one.
    fn linear(&mut self, prefix: &str, n: &str) -> Result<Linear, EngineError> {
        let wname = format!("{prefix}.{n}.weight");
        let q = self.quantized(&wname)?;
        let w = self.matmul(q, &wname)?;
        let bname = format!("{prefix}.{n}.bias");
        let b = if self.has(&bname) {
            Some(self.dense(&bname)?)
        } else {
            None
        };
        Ok(Linear { w, b })
    }

    /// Transformer block `i` (`blk.{i}.*`).
    fn layer(&mut self, i: usize) -> Result<Layer, EngineError> {
        let p = format!("blk.{i}");
        let q = self.linear(&p, "attn_q")?;
        let k = self.linear(&p, "attn_k")?;
        let v = self.linear(&p, "attn_v")?;
        let o = self.linear(&p, "attn_output")?;
        let gate = self.linear(&p, "ffn_gate")?;
        let up = self.linear(&p, "ffn_up")?;
        let down = self.linear(&p, "ffn_down")?;
        let attn_norm = self.dense(&format!("{p}.attn_norm.weight"))?;
        let ffn_norm = self.dense(&format!("{p}.ffn_norm.weight"))?;
        let (q_norm, k_norm) = if self.has(&format!("{p}.attn_q_norm.weight")) {
            (
                Some(self.dense(&format!("{p}.attn_q_norm.weight"))?),
                Some(self.dense(&format!("{p}.attn_k_norm.weight"))?),
            )
        } else {
            (None, None)
        };
        Ok(Layer {
            attn_norm,
            q,
            k,
            v,
            o,
            q_norm,
            k_norm,
            ffn_norm,
            gate,
            up,
            down,
        })
    }
}

/// Load a Hugging Face directory: `config.json` + `*.safetensors` (f32/bf16/f16, computed in
/// f32 on the CPU).
pub fn load_safetensors(dir: &Path, device: &Device) -> Result<Model, EngineError> {
    let (config, tied) = safetensors_config(&dir.join("config.json"))?;
    let mut tensors = SafetensorsWeights {
        dir,
        tensors: read_safetensors(dir, device)?,
    };
    let embed = tensors.take("model.embed_tokens.weight")?;
    let norm = tensors.take("model.norm.weight")?;
    let lm_head = if tied {
        QMatMul::Tensor(embed.clone())
    } else {
        QMatMul::Tensor(tensors.take("lm_head.weight")?)
    };
    let layers = (0..config.num_layers)
        .map(|i| tensors.layer(config.arch, i))
        .collect::<Result<Vec<_>, _>>()?;
    Model::new(config, embed, layers, norm, lm_head, device)
}

/// The model's dimensions from `config.json`, and whether the output head is tied to the
/// embedding (`tie_word_embeddings`).
fn safetensors_config(cfg_path: &Path) -> Result<(Config, bool), EngineError> {
    let cfg: Json = serde_json::from_str(
        &std::fs::read_to_string(cfg_path).map_err(|e| model_cause(cfg_path, "cannot read", e))?,
    )
    .map_err(|e| model_cause(cfg_path, "invalid JSON", e))?;
    let arch_name = cfg.get("model_type").and_then(Json::as_str).unwrap_or("");
    let arch = Arch::parse(arch_name).ok_or_else(|| {
        model_err(
            cfg_path,
            format!("unsupported model_type `{arch_name}` (supported: llama, qwen2, qwen3)"),
        )
    })?;
    if let Some(rs) = cfg.get("rope_scaling").filter(|v| !v.is_null()) {
        return Err(model_err(
            cfg_path,
            format!("rope_scaling is not supported: {rs}"),
        ));
    }
    if let Some(rt) = cfg
        .pointer("/rope_parameters/rope_type")
        .and_then(Json::as_str)
        .filter(|t| *t != "default")
    {
        return Err(model_err(
            cfg_path,
            format!("rope_parameters.rope_type `{rt}` is not supported"),
        ));
    }
    let int = |k: &str| -> Result<usize, EngineError> {
        cfg.get(k)
            .and_then(Json::as_u64)
            .map(|v| v as usize)
            .ok_or_else(|| model_err(cfg_path, format!("missing integer `{k}`")))
    };
    let hidden = int("hidden_size")?;
    let heads = int("num_attention_heads")?;
    let config = Config {
        arch,
        vocab_size: int("vocab_size")?,
        hidden_size: hidden,
        intermediate_size: int("intermediate_size")?,
        num_layers: int("num_hidden_layers")?,
        num_heads: heads,
        num_kv_heads: int("num_key_value_heads").unwrap_or(heads),
        head_dim: int("head_dim").unwrap_or(hidden / heads.max(1)),
        // transformers 5 moved it into `rope_parameters`.
        rope_theta: cfg
            .get("rope_theta")
            .or_else(|| cfg.pointer("/rope_parameters/rope_theta"))
            .and_then(Json::as_f64)
            .unwrap_or(10_000.0) as f32,
        rms_eps: cfg
            .get("rms_norm_eps")
            .and_then(Json::as_f64)
            .unwrap_or(1e-6),
        max_position: int("max_position_embeddings").unwrap_or(4096),
        rope_interleaved: false,
    };
    let tied = cfg
        .get("tie_word_embeddings")
        .and_then(Json::as_bool)
        .unwrap_or(false);
    Ok((config, tied))
}

/// Every tensor of every `*.safetensors` file in `dir` (in name order; a later file's tensor
/// replaces an earlier one of the same name).
fn read_safetensors(dir: &Path, device: &Device) -> Result<HashMap<String, Tensor>, EngineError> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| model_cause(dir, "cannot list", e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(model_err(dir, "no *.safetensors files"));
    }
    let mut tensors = HashMap::new();
    for f in &files {
        let part = candle_core::safetensors::load(f, device)
            .map_err(|e| model_cause(f, "cannot read safetensors", e))?;
        tensors.extend(part);
    }
    Ok(tensors)
}

/// The tensors of a Hugging Face checkpoint, each taken once and converted to f32.
struct SafetensorsWeights<'a> {
    dir: &'a Path,
    tensors: HashMap<String, Tensor>,
}

impl SafetensorsWeights<'_> {
    fn take(&mut self, name: &str) -> Result<Tensor, EngineError> {
        self.tensors
            .remove(name)
            .ok_or_else(|| model_err(self.dir, format!("missing tensor {name}")))?
            .to_dtype(DType::F32)
            .map_err(|e| model_cause(self.dir, format!("tensor {name}"), e))
    }

    fn linear(&mut self, prefix: &str, n: &str, with_bias: bool) -> Result<Linear, EngineError> {
        Ok(Linear {
            w: QMatMul::Tensor(self.take(&format!("{prefix}.{n}.weight"))?),
            b: if with_bias {
                Some(self.take(&format!("{prefix}.{n}.bias"))?)
            } else {
                None
            },
        })
    }

    /// Transformer block `i` (`model.layers.{i}.*`): Qwen2 has q/k/v biases, Qwen3 q/k norms.
    fn layer(&mut self, arch: Arch, i: usize) -> Result<Layer, EngineError> {
        let p = format!("model.layers.{i}");
        let bias = arch == Arch::Qwen2;
        let q = self.linear(&p, "self_attn.q_proj", bias)?;
        let k = self.linear(&p, "self_attn.k_proj", bias)?;
        let v = self.linear(&p, "self_attn.v_proj", bias)?;
        let o = self.linear(&p, "self_attn.o_proj", false)?;
        let gate = self.linear(&p, "mlp.gate_proj", false)?;
        let up = self.linear(&p, "mlp.up_proj", false)?;
        let down = self.linear(&p, "mlp.down_proj", false)?;
        let (q_norm, k_norm) = if arch == Arch::Qwen3 {
            (
                Some(self.take(&format!("{p}.self_attn.q_norm.weight"))?),
                Some(self.take(&format!("{p}.self_attn.k_norm.weight"))?),
            )
        } else {
            (None, None)
        };
        Ok(Layer {
            attn_norm: self.take(&format!("{p}.input_layernorm.weight"))?,
            q,
            k,
            v,
            o,
            q_norm,
            k_norm,
            ffn_norm: self.take(&format!("{p}.post_attention_layernorm.weight"))?,
            gate,
            up,
            down,
        })
    }
}

/// A randomly initialised model (normal, std 0.02; norms at 1), deterministic in `seed`.
/// For fast tests of the engine's mechanics.
pub fn random_model(config: Config, seed: u64, device: &Device) -> Result<Model, EngineError> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut randn = |shape: (usize, usize)| -> Result<Tensor, EngineError> {
        let n = shape.0 * shape.1;
        // Box-Muller keeps this free of extra distribution crates.
        let v: Vec<f32> = (0..n)
            .map(|_| {
                let u1: f32 = rng.random::<f32>().max(1e-7);
                let u2: f32 = rng.random::<f32>();
                0.02 * (-2.0 * u1.ln()).sqrt() * (2.0 * std::f32::consts::PI * u2).cos()
            })
            .collect();
        Ok(Tensor::from_vec(v, shape, device)?)
    };
    let (h, i, hd) = (
        config.hidden_size,
        config.intermediate_size,
        config.head_dim,
    );
    let (nh, nkv) = (config.num_heads, config.num_kv_heads);
    let ones = |n: usize| Tensor::ones(n, DType::F32, device);
    let embed = randn((config.vocab_size, h))?;
    let mut layers = Vec::new();
    for _ in 0..config.num_layers {
        let bias = config.arch == Arch::Qwen2;
        let mut lin = |o: usize, inp: usize, b: bool| -> Result<Linear, EngineError> {
            Ok(Linear {
                w: QMatMul::Tensor(randn((o, inp))?),
                b: if b {
                    Some(randn((1, o))?.squeeze(0)?)
                } else {
                    None
                },
            })
        };
        let q = lin(nh * hd, h, bias)?;
        let k = lin(nkv * hd, h, bias)?;
        let v = lin(nkv * hd, h, bias)?;
        let o = lin(h, nh * hd, false)?;
        let gate = lin(i, h, false)?;
        let up = lin(i, h, false)?;
        let down = lin(h, i, false)?;
        let qk_norm = config.arch == Arch::Qwen3;
        layers.push(Layer {
            attn_norm: ones(h)?,
            q,
            k,
            v,
            o,
            q_norm: if qk_norm { Some(ones(hd)?) } else { None },
            k_norm: if qk_norm { Some(ones(hd)?) } else { None },
            ffn_norm: ones(h)?,
            gate,
            up,
            down,
        });
    }
    let lm_head = QMatMul::Tensor(embed.clone());
    Model::new(config, embed, layers, ones(h)?, lm_head, device)
}
