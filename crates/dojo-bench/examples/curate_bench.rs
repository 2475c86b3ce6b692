//! Curation throughput: the full `dojo curate` pipeline (read, filters, tokenization with the
//! target tokenizer, masks, Parquet + JSONL exports) over trajectory JSONL, timed.
//!
//! ```text
//! python3 crates/dojo-bench/fixtures/curate/gen_trajectories.py /tmp/bench.jsonl 10000 500
//! cargo run --release -p dojo-bench --no-default-features --example curate_bench -- /tmp/bench.jsonl /tmp/bench-out [THREADS]
//! target/pytools/bin/python crates/dojo-bench/fixtures/curate/curate_baseline.py GGUF /tmp/bench-py /tmp/bench.jsonl
//! ```

use std::path::PathBuf;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: curate_bench INPUT.jsonl OUT_DIR [THREADS] [MODEL]");
        std::process::exit(2);
    }
    let threads: usize = args.get(2).map_or(Ok(0), |t| t.parse())?;
    let model_spec = args.get(3).map_or("default", String::as_str);
    let t0 = Instant::now();
    let model = dojo_curate::target_model::load(model_spec)?;
    let load_s = t0.elapsed().as_secs_f64();
    let mut cfg = dojo_curate::Config::new(vec![PathBuf::from(&args[0])], PathBuf::from(&args[1]));
    cfg.threads = threads;
    let t1 = Instant::now();
    let out = dojo_curate::run(&cfg, Some(model.as_ref()))?;
    let secs = t1.elapsed().as_secs_f64();
    print!("{}", dojo_curate::report::stage_table(&out.stages));
    let result = serde_json::json!({
        "trajectories": out.trajectories,
        "bytes": out.bytes_read,
        "kept": out.kept_trajectories,
        "samples": out.samples,
        "threads": if threads == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { threads },
        "model_load_s": (load_s * 100.0).round() / 100.0,
        "total_s": (secs * 100.0).round() / 100.0,
        "stage_s": out.seconds,
        "traj_per_s": (out.trajectories as f64 / secs * 10.0).round() / 10.0,
        "mb_per_s": (out.bytes_read as f64 / 1e6 / secs * 100.0).round() / 100.0,
    });
    println!("{result}");
    Ok(())
}
