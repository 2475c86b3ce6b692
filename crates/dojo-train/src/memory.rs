//! The memory plan: a training step's peak memory estimated from the model's dimensions before
//! anything large is allocated, checked against a budget, and the cheapest way to fit chosen.
//!
//! Why: on a CPU machine the first sign of a run that does not fit used to be the kernel's OOM
//! killer, minutes in (`dojo train sft` with its default micro-batch of four 2,048-token rows on
//! a 24 GB machine; `dojo rl`'s update of one 3.5K-token episode). The plan decides three
//! things, in this order:
//! 1. whether the step fits as it is (autograd keeps every block's activations);
//! 2. whether it fits with activation checkpointing ([`TrainModel::loss_grads`]:
//!    the same values, about a third more compute, activations of one block at a time);
//! 3. otherwise the run is refused before the first step with the figures and the settings to
//!    lower (`--batch-size`, `--max-len`, `--max-batch-tokens`, `--lora-rank`, `--max-memory`).
//!
//! The estimate is a model of candle's CPU graph, not a measurement: its coefficients were
//! fitted on SmolLM2-135M (BENCHMARKS.md, *memory plan*) and err on the high side. The budget
//! defaults to the memory available when the run starts (`MemAvailable`, or a smaller cgroup
//! limit), less a margin for the allocator and the rest of the process.
//!
//! [`TrainModel::loss_grads`]: crate::TrainModel::loss_grads

use dojo_engine::Config;

use crate::TrainError;

const F32: u64 = 4;
/// Measured live activations per token and block over the count of floats `block_floats`
/// gives (allocator slack, views that copy, gradients in flight).
const ACTIVATION_SLACK: f64 = 1.2;
/// Logit-sized `(rows, vocab)` tensors counted for the loss and its backward pass. With the
/// fused cross-entropy two are alive (the logits, their gradient); five were counted for the
/// primitives (shifted, exponentials, log-probabilities besides), and the estimate keeps that
/// margin (the RL update's entropy, when asked, still builds them).
const HEAD_COPIES: u64 = 5;
/// Freed blocks of a MiB or more kept for reuse in a process that trains, at most
/// ([`dojo_kernels::alloc`]: each step would otherwise map its large tensors afresh, a page
/// fault per 4 KiB).
pub const REUSE_BYTES: u64 = 512 << 20;
/// Fixed overhead of the process beyond tensors (code, tokenizer, allocator pools, the blocks
/// kept for reuse).
const PROCESS_BYTES: u64 = (512 << 20) + REUSE_BYTES;

/// Turns on the reuse of large freed blocks (up to [`REUSE_BYTES`]) for binaries whose global
/// allocator is [`dojo_kernels::alloc::ReuseLarge`] (`dojo`, the examples); a no-op otherwise.
pub fn reuse_freed_blocks() {
    dojo_kernels::alloc::enable_reuse(REUSE_BYTES as usize);
}

/// Floats a token keeps alive in one transformer block until the backward pass, counted op by
/// op from `TrainModel::block` (norms from primitives, projections, RoPE, the attention op's
/// output, the MLP).
fn block_floats(cfg: &Config) -> u64 {
    let h = cfg.hidden_size as u64;
    let kv = (cfg.num_kv_heads * cfg.head_dim) as u64;
    let i = cfg.intermediate_size as u64;
    19 * h + 8 * kv + 4 * i
}

/// The shape of the largest micro-batch a run will see: rows, padded length, loss rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchShape {
    pub rows: usize,
    pub len: usize,
    /// Rows of logits alive at once: the positions the loss reads, or for a loss computed in
    /// chunks of rows ([`head_chunk_rows`]) at most a chunk.
    pub logit_rows: usize,
}

/// What a step's peak is made of, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Estimate {
    /// Every weight, f32.
    pub weights: u64,
    /// Gradients, AdamW's two moments and clipping's temporaries of the trainable parameters
    /// (with LoRA, the adapters themselves too).
    pub trainer_state: u64,
    /// Activations autograd keeps for the backward pass.
    pub activations: u64,
    /// The attention op's score-sized temporaries of one block.
    pub attention: u64,
    /// The LM head's logits and the loss's intermediates at the loss rows.
    pub head: u64,
    pub process: u64,
}

impl Estimate {
    pub fn total(&self) -> u64 {
        self.weights
            + self.trainer_state
            + self.activations
            + self.attention
            + self.head
            + self.process
    }
}

/// Peak memory of one training step on `batch`, with or without activation checkpointing.
/// `params` counts every weight; `trainable` the parameters the optimizer updates (all of
/// them, or the LoRA adapters', which are not part of `params`).
pub fn estimate(
    cfg: &Config,
    params: u64,
    trainable: u64,
    lora: bool,
    batch: BatchShape,
    checkpointing: bool,
) -> Estimate {
    let tokens = (batch.rows * batch.len) as u64;
    let block = (tokens as f64 * block_floats(cfg) as f64 * ACTIVATION_SLACK) as u64 * F32;
    let layers = cfg.num_layers as u64;
    let activations = if checkpointing {
        // Each block's input, plus one block's graph while it is recomputed.
        layers * tokens * cfg.hidden_size as u64 * F32 + block
    } else {
        layers * block
    };
    let heads = cfg.num_heads.max(1);
    // The fused attention op's temporaries (its backward pass is the peak).
    let attention =
        dojo_kernels::attention_scratch_bytes(batch.rows, heads, batch.len, cfg.head_dim);
    let head = HEAD_COPIES * batch.logit_rows as u64 * cfg.vocab_size as u64 * F32;
    let fixed = fixed_bytes(params, trainable, lora, 0);
    Estimate {
        weights: params * F32,
        // Gradient, two moments, a clipped copy; LoRA's adapters are extra weights besides.
        trainer_state: fixed - params * F32 - PROCESS_BYTES,
        activations,
        attention,
        head,
        process: PROCESS_BYTES,
    }
}

/// What the plan decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Plan {
    pub budget: u64,
    pub checkpointing: bool,
    pub estimate: Estimate,
}

impl std::fmt::Display for Plan {
    /// `memory plan: about 7.1 GiB a step of a 20.7 GiB budget, activation checkpointing on`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "memory plan: about {} a step of a {} budget{}",
            gib(self.estimate.total()),
            gib(self.budget),
            if self.checkpointing {
                ", activation checkpointing on"
            } else {
                ""
            }
        )
    }
}

/// Fit a run whose largest micro-batch is `batch` into `budget` bytes: as it is, with
/// activation checkpointing, or not at all ([`TrainError::Memory`], which says what to lower).
pub fn plan(
    cfg: &Config,
    params: u64,
    trainable: u64,
    lora: bool,
    batch: BatchShape,
    budget: u64,
) -> Result<Plan, TrainError> {
    for checkpointing in [false, true] {
        let estimate = estimate(cfg, params, trainable, lora, batch, checkpointing);
        if estimate.total() <= budget {
            return Ok(Plan {
                budget,
                checkpointing,
                estimate,
            });
        }
    }
    let e = estimate(cfg, params, trainable, lora, batch, true);
    let fixed = e.weights + e.trainer_state + e.process;
    let advice = if fixed > budget {
        "the weights and optimizer state alone exceed it: train LoRA adapters (--lora-rank), a \
         lower --lora-rank, or a smaller model"
    } else {
        "lower --batch-size, --max-batch-tokens or --max-len"
    };
    Err(TrainError::Memory(format!(
        "a training step needs about {} (weights {}, optimizer state {}, activations {}, \
         attention {}, logits {}; largest micro-batch {} rows × {} tokens, activation \
         checkpointing on), more than the budget of {} (--max-memory): {advice}",
        gib(e.total()),
        gib(e.weights),
        gib(e.trainer_state),
        gib(e.activations),
        gib(e.attention),
        gib(e.head),
        batch.rows,
        batch.len,
        gib(budget),
    )))
}

/// Rows of logits a loss that is a sum over rows computes at once: about 32M floats (128 MB a
/// copy; for SmolLM2's 49K vocabulary 682 rows).
pub fn head_chunk_rows(cfg: &Config) -> usize {
    ((32usize << 20) / cfg.vocab_size.max(1)).max(1)
}

/// Whether a step on `batch` needs activation checkpointing to keep its activations, attention
/// and logits within `activation_budget` bytes (the budget less weights and optimizer state):
/// the per-update decision of runs whose batch shapes vary (RL episodes).
pub fn needs_checkpointing(cfg: &Config, batch: BatchShape, activation_budget: u64) -> bool {
    let e = estimate(cfg, 0, 0, false, batch, false);
    e.activations + e.attention + e.head > activation_budget
}

/// What a run keeps besides activations: the weights (`params`), `weight_copies` more copies
/// of them (RL's merged sampling copy, a reference model), the optimizer state of the
/// `trainable` parameters and the process overhead. An activation budget is a budget less this.
pub fn fixed_bytes(params: u64, trainable: u64, lora: bool, weight_copies: u64) -> u64 {
    let per_trainable = if lora { 5 } else { 4 };
    params * F32 * (1 + weight_copies) + per_trainable * trainable * F32 + PROCESS_BYTES
}

/// `12.3 GiB`.
pub fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// The default budget: memory available now (`MemAvailable`, or a lower cgroup v1/v2 limit),
/// less 10% for the allocator and whatever else runs. `None` where neither can be read.
pub fn default_budget() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let available = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())?
        * 1024;
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .filter_map(|p| std::fs::read_to_string(p).ok()?.trim().parse::<u64>().ok())
    .min();
    let avail = cgroup.map_or(available, |c| c.min(available));
    Some(avail / 10 * 9)
}

/// Parse `--max-memory`: bytes, or a number with `K`, `M`, `G` or `T` (binary multiples;
/// `GiB`/`GB` spellings accepted).
pub fn parse_size(s: &str) -> Result<u64, TrainError> {
    let bad = |why: String| TrainError::Config(format!("--max-memory {why}"));
    let t = s.trim();
    let digits = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: f64 = num
        .parse()
        .map_err(|_| bad(format!("{s:?}: expected a size such as 16G or 512M")))?;
    let mult: u64 = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        "T" | "TB" | "TIB" => 1 << 40,
        other => return Err(bad(format!("{s:?}: unknown unit {other:?} (K, M, G or T)"))),
    };
    let bytes = n * mult as f64;
    if !(bytes.is_finite() && bytes >= 1.0) {
        return Err(bad(format!("{s:?}: not a positive size")));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-135M's dimensions.
    fn smollm2() -> Config {
        Config {
            arch: dojo_engine::Arch::Llama,
            vocab_size: 49152,
            hidden_size: 576,
            intermediate_size: 1536,
            num_layers: 30,
            num_heads: 9,
            num_kv_heads: 3,
            head_dim: 64,
            rope_theta: 100000.0,
            rms_eps: 1e-5,
            max_position: 8192,
            rope_interleaved: false,
        }
    }

    const P: u64 = 134_515_008;

    #[test]
    fn checkpointing_is_chosen_only_when_the_plain_step_does_not_fit() {
        let cfg = smollm2();
        let short = BatchShape {
            rows: 1,
            len: 256,
            logit_rows: 255,
        };
        let p = plan(&cfg, P, P, false, short, 20 << 30).unwrap();
        assert!(!p.checkpointing, "{p:?}");
        // The README's default micro-batch: four 2,048-token rows.
        let long = BatchShape {
            rows: 4,
            len: 2048,
            logit_rows: 4 * 2047,
        };
        let p = plan(&cfg, P, P, false, long, 20 << 30).unwrap();
        assert!(p.checkpointing, "{p:?}");
        assert!(p.estimate.total() <= 20 << 30);
    }

    #[test]
    fn a_step_that_cannot_fit_is_refused_with_the_settings_to_lower() {
        let cfg = smollm2();
        let long = BatchShape {
            rows: 4,
            len: 2048,
            logit_rows: 4 * 2047,
        };
        let e = plan(&cfg, P, P, false, long, 2 << 30)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--max-memory") && e.contains("--lora-rank"),
            "{e}"
        );
        let e = plan(&cfg, P, 0, true, long, 4 << 30)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--batch-size"), "{e}");
        // An absurd LoRA rank: its adapters alone are terabytes.
        let absurd = 999_999u64 * (576 + 576) * 7 * 30;
        let e = plan(&cfg, P, absurd, true, long, 20 << 30)
            .unwrap_err()
            .to_string();
        assert!(e.contains("optimizer state"), "{e}");
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("16G").unwrap(), 16 << 30);
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("1.5g").unwrap(), 3 << 29);
        assert_eq!(parse_size("1000").unwrap(), 1000);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("5Q").is_err());
    }

    #[test]
    fn the_default_budget_is_read_here() {
        let b = default_budget().expect("/proc/meminfo on Linux");
        assert!(b > 0);
    }
}
