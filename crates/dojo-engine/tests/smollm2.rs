//! The real default model (SmolLM2-135M-Instruct Q4_1): a greedy decoding snapshot. The agent
//! runtime's OpenAI client against `dojo serve` on this model (tool calls, logprobs, stop
//! sequences, errors, disconnects, SIGTERM) is tested on the real process, in
//! `crates/dojo-cli/tests/serve_process.rs`.

use std::sync::OnceLock;

use dojo_engine::{Engine, EngineOptions, GenerateRequest, SamplingParams, WeightMode};
use serde_json::json;

fn engine() -> Option<Engine> {
    static ENGINE: OnceLock<Option<Engine>> = OnceLock::new();
    ENGINE
        .get_or_init(|| match dojo_tokenizer::default_model_path() {
            Ok(p) => Some(
                Engine::load(
                    &p,
                    EngineOptions {
                        model_id: Some("smollm2".into()),
                        // Pinned, so the snapshot is the same in native and portable builds
                        // (`WeightMode::Auto` picks per build).
                        weights: WeightMode::Dense,
                        ..Default::default()
                    },
                )
                .expect("load the default model"),
            ),
            Err(e) if std::env::var("CI").as_deref() != Ok("true") => {
                println!("SKIPPED: default model unavailable: {e}");
                None
            }
            Err(e) => panic!("default model unavailable in CI: {e}"),
        })
        .clone()
}

/// Dense (dequantized) weights. The first token is a near tie: with quantized activations (the
/// Q4_1 x Q8_1 kernel, as llama.cpp computes it) `L` (id 60) leads `The` (504) by 0.28 logits,
/// with exact f32 activations `The` leads by 0.08; llama.cpp on the same GGUF matches the
/// quantized path's first 7 tokens.
#[test]
fn greedy_decoding_snapshot() {
    let Some(engine) = engine() else { return };
    let prompt = engine
        .format()
        .prompt(
            &[json!({"role": "user", "content": "What is the capital of France?"})],
            None,
            &Default::default(),
        )
        .unwrap();
    let mut req = GenerateRequest::new(prompt.ids, 24);
    req.sampling = SamplingParams::greedy();
    let g = engine.generate_blocking(req).unwrap();
    insta::assert_snapshot!(format!("{:?}\n{}", g.token_ids, g.text));
}
