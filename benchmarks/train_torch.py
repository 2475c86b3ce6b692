#!/usr/bin/env python3
"""PyTorch baseline for dojo-train's forward + backward benchmark.

    python benchmarks/train_torch.py --model DIR --seq 1024 --batch 1 --iters 3 --threads N [--attn A] [--compile]

DIR is the Hugging Face directory `cargo run --release -p dojo-train --example train_bench --
--write-hf DIR` writes, so both sides train the same f32 weights on the same token ids (every
position trained). Prints one JSON line like the Rust side.

`--lora-rank R`: peft LoRA adapters (alpha 2R, no dropout, q/k/v/o/gate/up/down; peft 0.21.2) on the
frozen base, as `train_bench --lora-rank R` sets up dojo's.

`--attn`: `default` (what `from_pretrained` picks when a user names nothing: SDPA in
transformers 5, the baseline issue 48 asks for), or an explicit `attn_implementation`
(`eager`, `sdpa`). `--compile`: `torch.compile` the model first (its compile time is the
warm-up pass, not timed).
"""

import argparse
import json
import resource
import statistics
import time

import torch
import transformers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lora-rank", type=int, default=None)
    ap.add_argument("--attn", default="default")
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    kw = {} if a.attn == "default" else {"attn_implementation": a.attn}
    model = transformers.AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32, **kw)
    attn = model.config._attn_implementation
    impl = f"PyTorch {torch.__version__} ({attn} attention), transformers {transformers.__version__}"
    if a.lora_rank:
        import peft

        cfg = peft.LoraConfig(
            r=a.lora_rank,
            lora_alpha=2 * a.lora_rank,
            lora_dropout=0.0,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
            task_type="CAUSAL_LM",
        )
        model = peft.get_peft_model(model, cfg)
        impl += f", peft {peft.__version__} LoRA r={a.lora_rank}"
    model.train()
    if a.compile:
        model = torch.compile(model)
        impl += ", torch.compile"
    vocab = model.config.vocab_size
    ids = torch.tensor(
        [[((i * 2654435761 + b * 97) % 2**32) % vocab for i in range(a.seq)] for b in range(a.batch)]
    )
    times = []
    for it in range(a.iters + 1):
        model.zero_grad(set_to_none=True)
        t = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        dt = time.perf_counter() - t
        print(f"iter {it}: {dt:.2f}s loss {loss.item():.4f}", flush=True)
        # Pass 0 is the warm-up; with --iters 0 it is the only pass, and timed.
        if it > 0 or a.iters == 0:
            times.append(dt)
    med = statistics.median(times)
    print(
        json.dumps(
            {
                "impl": impl,
                "attn": attn,
                "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
                "seq": a.seq,
                "batch": a.batch,
                "threads": torch.get_num_threads(),
                "median_s": med,
                "tokens_per_s": a.seq * a.batch / med,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        )
    )


if __name__ == "__main__":
    main()
