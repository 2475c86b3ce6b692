#!/usr/bin/env bash
# SFT learning signal: base vs fine-tuned SmolLM2-135M on held-out tasks from other projects.
#
#   scripts/bench-sft-signal.sh OUT [STEPS] [EVAL_STEPS]
#
# 1. 10 + 10 synthesized tasks from tenacity 9.2.1 and inflection 0.5.1 (training projects);
# 2. gold-replay trajectories through R2E-Gym's tools in the native (Hermes) action format,
#    which is how the embedded model is evaluated (`dojo train sft --eval-tasks` uses the same);
# 3. `dojo curate` to tokens.parquet;
# 4. the bundled GGUF dequantized to an f32 Hugging Face directory (base for training and for
#    the base model's evaluation, so both sides run the same f32 weights);
# 5. LoRA r16 SFT (STEPS optimizer steps of 2 rows, default 8), merged, then both models rolled
#    out greedily on tasksets/mini (17 tasks from 9 projects not used for training), EVAL_STEPS
#    turns of 128 tokens each (default 3). OUT/lora/eval.json has the figures.
# About 1 h on 2 cores (training 32 min, evaluation 2 x 15 min). DOJO_BIN overrides the binary
# (default target/debug/dojo: build it first with `cargo build -p dojo-cli`).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
out="$(mkdir -p "$1" && cd "$1" && pwd)"
steps="${2:-8}"
eval_steps="${3:-3}"
dojo="${DOJO_BIN:-$root/target/debug/dojo}"
envs="$out/envs"
mkdir -p "$envs"
cp benchmarks/synth/envs/tenacity.toml "$envs/"
cd "$out"
for p in tenacity==9.2.1 inflection==0.5.1; do
  n=${p%%==*}
  # Without a spec dojo synth writes a default one into --envs (inflection needs no more).
  "$dojo" synth --project "$p" --envs "$envs" --out "synth/$n.jsonl" --max 10 --seed 1 --workers 2
done
cat > gold.toml <<'T'
kind = "gold-replay"
[agent]
tool_set = "r2e"
action_format = "native"
T
for n in tenacity inflection; do
  "$dojo" rollout --tasks "synth/$n.jsonl" --policy gold.toml --out "runs/gold-$n" --envs "$envs" --workers 2
done
"$dojo" curate --rollouts runs/gold-tenacity runs/gold-inflection --out sft --filters dedup,format,cap
(cd "$root" && RAYON_NUM_THREADS=2 cargo run -q -p dojo-train --example train_bench -- \
  --seq 16 --iters 1 --write-hf "$out/smollm2-hf")
"$dojo" train sft --data sft --model "$out/smollm2-hf" --out lora --lora-rank 16 --lora-alpha 32 \
  --lora-dropout 0 --lr 1e-3 --warmup-steps 0 --max-len 2304 --batch-size 1 --grad-accum 2 \
  --max-steps "$steps" --save-every 2 --merge --quiet \
  --eval-tasks "$root/tasksets/mini/tasks.jsonl" --eval-max-turns "$eval_steps" --eval-max-tokens 128 \
  --eval-workers 1
cat lora/eval.json
