//! `dojo serve` without the rest of the CLI: the engine's OpenAI-compatible server over one GGUF
//! file, for the batching benchmark (`scripts/bench-engine-batch.sh`). A release build of this
//! example needs only the engine's dependencies, not the whole `dojo` binary's.
//!
//! Usage: serve_gguf MODEL.gguf PORT [WEIGHTS]  (weights: auto, quantized, mixed, dense; the
//! scheduler follows `DOJO_ENGINE_BATCH`, threads follow `RAYON_NUM_THREADS`).

use dojo_engine::{Engine, EngineOptions, WeightMode};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(model), Some(port)) = (args.get(1), args.get(2)) else {
        return Err("usage: serve_gguf MODEL.gguf PORT [auto|quantized|mixed|dense]".into());
    };
    let port: u16 = port.parse().map_err(|e| format!("port {port:?}: {e}"))?;
    let weights = args
        .get(3)
        .map_or(Some(WeightMode::Auto), |w| WeightMode::parse(w));
    let weights = weights.ok_or("weights: expected auto, quantized, mixed or dense")?;
    let engine = Engine::load(
        std::path::Path::new(model),
        EngineOptions {
            weights,
            ..Default::default()
        },
    )?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        // Until Ctrl-C (the benchmark script kills it when done).
        let stop = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        dojo_engine::server::serve_listener(engine, listener, None, stop).await
    })?;
    Ok(())
}
