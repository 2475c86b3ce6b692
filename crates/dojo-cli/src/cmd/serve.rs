//! `dojo serve`: the embedded engine (dojo-engine) behind an OpenAI-compatible API.
//!
//! Only available when the CLI is built with the `engine` feature (the default); without it the
//! command explains how to get it instead of failing obscurely.

use crate::exit::Exit;
#[derive(clap::Args)]
pub struct ServeArgs {
    /// A `.gguf` file, a Hugging Face model directory (config.json + *.safetensors +
    /// tokenizer.json), a hub name in the local Hugging Face cache, or `default`
    /// (SmolLM2-135M-Instruct Q4_1, downloaded on first use).
    #[arg(long, default_value = "default")]
    pub model: String,
    /// Port to listen on; 0 picks a free one (the address is printed on stdout).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Address to bind. Beyond loopback an API key is required.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Every request but `/health` must send `Authorization: Bearer KEY` (16+ characters).
    #[arg(long, env = "DOJO_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Model name reported by /v1/models (default: the file name).
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Finished conversations kept for prefix KV reuse (0 disables reuse).
    #[arg(long, default_value_t = 4)]
    pub prefix_cache: usize,
    /// GGUF weights: `auto`, `quantized` (the file's kernels everywhere), `mixed` (Q8_0 decode,
    /// dense prefill) or `dense` (f32). `auto` picks dense in portable builds, mixed in native.
    #[arg(long, default_value = "auto")]
    pub weights: String,
    /// KV cache: `f32`, or `f16` (half the memory per cached token, as llama.cpp's default;
    /// logits move in their last digits). `auto` is f32 unless `DOJO_ENGINE_KV` says otherwise.
    #[arg(long, default_value = "auto")]
    pub kv_cache: String,
    /// `cpu`, or `cuda` / `cuda:N` in a build with the `cuda` feature (needs nvcc).
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

#[cfg(feature = "engine")]
pub fn run(args: ServeArgs) -> anyhow::Result<Exit> {
    use anyhow::Context;
    use dojo_engine::{Engine, EngineOptions};

    let weights = dojo_engine::WeightMode::parse(&args.weights).with_context(|| {
        format!(
            "--weights {:?}: expected auto, quantized, mixed or dense",
            args.weights
        )
    })?;
    let kv_cache = dojo_engine::KvCacheType::parse(&args.kv_cache)
        .with_context(|| format!("--kv-cache {:?}: expected auto, f32 or f16", args.kv_cache))?;
    let device = dojo_engine::device(&args.device)?;
    let key = dojo_llm::access::ApiKey::new(args.api_key.as_deref()).context("--api-key")?;
    let opts = EngineOptions {
        model_id: args.served_model_name.clone(),
        prefix_cache_entries: args.prefix_cache,
        weights,
        kv_cache,
        device,
        ..Default::default()
    };
    let spec = dojo_tokenizer::ModelSpec::resolve(&args.model)?;
    let engine =
        Engine::load_spec(&spec, opts).with_context(|| format!("loading model {}", args.model))?;
    let rt = super::runtime()?;
    rt.block_on(async move {
        let addr = format!("{}:{}", args.host, args.port);
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .with_context(|| format!("binding {addr}"))?;
        let local = listener.local_addr()?;
        dojo_llm::access::check_exposure(local, key.as_ref())?;
        println!(
            "dojo serve: model {} listening on http://{local}",
            engine.model_id()
        );
        dojo_engine::server::serve_listener(
            engine,
            listener,
            key,
            dojo_llm::access::shutdown_signal(),
        )
        .await
        .context("serving")?;
        eprintln!("dojo serve: shut down");
        anyhow::Ok(Exit::Success)
    })
}

#[cfg(not(feature = "engine"))]
pub fn run(_: ServeArgs) -> anyhow::Result<Exit> {
    super::needs_engine("dojo serve")
}
