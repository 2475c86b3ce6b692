//! A model's architecture: the hyper-parameters and flags that [`crate::model`] and
//! [`crate::block`] (and dojo-train, through them) read. Types only.

/// Architecture hyper-parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub rope_theta: f32,
    pub rms_eps: f64,
    pub max_position: usize,
    /// llama.cpp permutes Llama q/k weights for interleaved ("normal") RoPE; HF weights and all
    /// Qwen weights use the rotate-half ("neox") form.
    pub rope_interleaved: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
}

impl Arch {
    pub fn parse(s: &str) -> Option<Arch> {
        match s {
            "llama" => Some(Arch::Llama),
            "qwen2" => Some(Arch::Qwen2),
            "qwen3" => Some(Arch::Qwen3),
            _ => None,
        }
    }
}
