//! Times the fused causal attention ([`dojo_kernels::causal_attention`]) against the op it
//! replaced ([`dojo_kernels::causal_attention_reference_blocked`]) at SmolLM2-135M's shape
//! (9 query heads over 3 kv heads, head dimension 64), forward and forward + backward,
//! alternating the two sides so that a machine's drift weighs on both alike.
//!
//! `cargo run --release -p dojo-kernels --example attention_bench -- [t] [reps] [fused|reference|both] [fwd]`
//! (defaults 2048, 3, both; `fwd` skips the backward pass). Threads: `RAYON_NUM_THREADS`;
//! the fused op's tiles: `TILES=bq,bk`.
//! Each pass is timed in wall time and in CPU time of all threads (on a loaded machine the
//! second is the steadier). The last line is the process's peak resident memory, for
//! comparing one side at a time.

use std::time::Instant;

use candle_core::{Device, Result, Tensor, Var};

type Attention = fn(&Tensor, &Tensor, &Tensor, usize, f64) -> Result<Tensor>;

/// The fused op, in the tiles of `TILES=bq,bk` if set (the defaults otherwise).
fn fused(q: &Tensor, k: &Tensor, v: &Tensor, t: usize, scale: f64) -> Result<Tensor> {
    let tiles = std::env::var("TILES").ok().and_then(|s| {
        let (bq, bk) = s.split_once(',')?;
        Some((bq.parse().ok()?, bk.parse().ok()?))
    });
    let (bq, bk) = tiles.unwrap_or((dojo_kernels::QUERY_TILE, dojo_kernels::KEY_TILE));
    dojo_kernels::causal_attention_blocked(q, k, v, t, scale, bq, bk)
}

fn reference(q: &Tensor, k: &Tensor, v: &Tensor, t: usize, scale: f64) -> Result<Tensor> {
    let (b, kv, rows, _) = q.dims4()?;
    let block = dojo_kernels::attention_block_positions(b, kv * rows / t, k.dim(2)?);
    dojo_kernels::causal_attention_reference_blocked(q, k, v, t, scale, block)
}

/// CPU seconds the process's threads have run (`/proc/self/task/*/schedstat`, nanoseconds):
/// on a loaded machine, the work a pass did, where wall time also counts the waits for a core.
fn cpu_seconds() -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .sum::<f64>()
        * 1e-9
}

/// Wall and CPU seconds of one forward (and, with `grad`, backward) pass.
fn once(f: Attention, x: &[Var; 3], w: &Tensor, t: usize, grad: bool) -> Result<(f64, f64)> {
    let (start, cpu) = (Instant::now(), cpu_seconds());
    if grad {
        let out = f(
            x[0].as_tensor(),
            x[1].as_tensor(),
            x[2].as_tensor(),
            t,
            0.125,
        )?;
        let grads = (out * w)?.sum_all()?.backward()?;
        std::hint::black_box(grads);
    } else {
        let (q, k, v) = (
            x[0].as_detached_tensor(),
            x[1].as_detached_tensor(),
            x[2].as_detached_tensor(),
        );
        std::hint::black_box(f(&q, &k, &v, t, 0.125)?);
    }
    Ok((start.elapsed().as_secs_f64(), cpu_seconds() - cpu))
}

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let t: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(2048);
    let reps: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(3);
    let which = args.get(2).map_or("both", String::as_str);
    let backward = args.get(3).is_none_or(|a| a != "fwd");
    let (b, kv, rep, hd) = (1, 3, 3, 64);
    let dev = Device::Cpu;
    let rand = |shape: &[usize]| Tensor::randn(0f32, 1.0, shape, &dev);
    let x = [
        Var::from_tensor(&rand(&[b, kv, rep * t, hd])?)?,
        Var::from_tensor(&rand(&[b, kv, t, hd])?)?,
        Var::from_tensor(&rand(&[b, kv, t, hd])?)?,
    ];
    let w = rand(&[b, kv, rep * t, hd])?;
    let sides: Vec<(&str, Attention)> = [("fused", fused as Attention), ("reference", reference)]
        .into_iter()
        .filter(|(name, _)| which == "both" || which == *name)
        .collect();
    println!(
        "t = {t}, {} threads, {reps} reps each, alternating",
        rayon::current_num_threads()
    );
    let passes: &[bool] = if backward { &[false, true] } else { &[false] };
    for &grad in passes {
        // One untimed pass of each side first (allocator, page faults, caches).
        for (_, f) in &sides {
            once(*f, &x, &w, t, grad)?;
        }
        let mut times = vec![Vec::new(); sides.len()];
        for _ in 0..reps {
            for (i, (_, f)) in sides.iter().enumerate() {
                times[i].push(once(*f, &x, &w, t, grad)?);
            }
        }
        for ((name, _), ts) in sides.iter().zip(&times) {
            let (mut wall, mut cpu): (Vec<f64>, Vec<f64>) = ts.iter().copied().unzip();
            wall.sort_by(f64::total_cmp);
            cpu.sort_by(f64::total_cmp);
            println!(
                "{:<16} {:<9} wall min {:7.1} ms median {:7.1} ms | cpu min {:7.1} ms median {:7.1} ms",
                if grad { "forward+backward" } else { "forward" },
                name,
                wall[0] * 1e3,
                wall[wall.len() / 2] * 1e3,
                cpu[0] * 1e3,
                cpu[cpu.len() / 2] * 1e3
            );
        }
    }
    if let Some(mib) = peak_rss_mib() {
        println!("peak resident memory {mib:.0} MiB");
    }
    Ok(())
}
