//! Greedy continuation of token ids with the embedded engine's loader and forward pass (what
//! `dojo serve --model DIR` runs), to compare a checkpoint with transformers
//! (`benchmarks/train_greedy_hf.py` prints the same JSON).
//!
//! `cargo run -p dojo-train --example greedy -- DIR 1,2,3 [N]`

use candle_core::Device;
use dojo_engine::KvCache;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().ok_or("usage: greedy DIR IDS [N]")?;
    let ids: Vec<u32> = args
        .next()
        .ok_or("usage: greedy DIR IDS [N]")?
        .split(',')
        .map(|s| s.trim().parse())
        .collect::<Result<_, _>>()?;
    let n: usize = args.next().map_or(Ok(20), |s| s.parse())?;
    let model = dojo_engine::loader::load_safetensors(std::path::Path::new(&dir), &Device::Cpu)?;
    let mut cache = KvCache::new();
    let mut logits = model.forward_last(&ids, &mut cache)?;
    let mut out = Vec::new();
    for _ in 0..n {
        let next = dojo_engine::model::argmax(&logits) as u32;
        out.push(next);
        logits = model.forward_last(&[next], &mut cache)?;
    }
    println!(
        "{}",
        serde_json::json!({"impl": "dojo-engine", "generated": out})
    );
    Ok(())
}
