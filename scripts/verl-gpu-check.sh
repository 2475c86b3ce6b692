#!/usr/bin/env bash
# The part of the verl integration a CPU cannot run: one real PPO step of verl 0.9.1 (vLLM
# rollout replicas, FSDP actor, the dojo agent loop and its token bridge, dojo_rloo advantages,
# the policy update) on the bundled mini task set, with `dojo env serve` on this machine.
# Everything else is covered on a CPU by scripts/test-verl.sh.
#
#   VERL_PYTHON=/path/to/python MODEL=/path/to/Qwen3-0.6B bash scripts/verl-gpu-check.sh
#
# Needs: one or more GPUs; a python with `pip install "verl[vllm]==0.9.1"` and
# `pip install -e python/dojo-verl`; a local HF model directory (a small chat model with a
# Qwen-style template); the dojo binary's sandbox prerequisites (scripts/setup-tools.sh).
# Passes when verl finishes its step and every episode reached dojo and came back graded.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${VERL_PYTHON:?set VERL_PYTHON to a python with verl[vllm]==0.9.1 and dojo-verl installed}"
: "${MODEL:?set MODEL to a local HF model directory}"
GPUS="${GPUS:-$("$VERL_PYTHON" -c 'import torch; print(torch.cuda.device_count())')}"
[ "$GPUS" -ge 1 ] || { echo "no GPU visible" >&2; exit 1; }
work="$(mktemp -d /tmp/dojo-verl-gpu.XXXXXX)"
trap 'kill "${serve_pid:-0}" 2>/dev/null || true; wait 2>/dev/null || true' EXIT
source scripts/setup-tools.sh
cargo build -p dojo-cli --no-default-features --locked
dojo=target/debug/dojo
"$dojo" tasks export --tasks tasksets/mini/tasks.jsonl --format verl --out "$work/train.parquet"
"$dojo" env serve --port 0 --out "$work/episodes" --max-episodes 8 --tasks tasksets/mini/tasks.jsonl >"$work/serve.out" 2>"$work/serve.log" &
serve_pid=$!
until grep -q "listening on" "$work/serve.out"; do sleep 0.2; done
export DOJO_ENV_URL="$(awk '/listening on/ {print $NF}' "$work/serve.out")"
export DOJO_BRIDGE_HOST=127.0.0.1
export DOJO_AGENT_LOOP_CONFIG="$("$VERL_PYTHON" -c 'import dojo_verl; print(dojo_verl.AGENT_LOOP_CONFIG)')"
"$VERL_PYTHON" -m verl.trainer.main_ppo --config-path "$PWD/examples/verl" --config-name dojo_swe_master \
    data.train_files="$work/train.parquet" data.val_files="$work/train.parquet" \
    data.train_batch_size=2 data.max_prompt_length=4096 data.max_response_length=8192 \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.rollout.n=4 actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.5 actor_rollout_ref.rollout.agent.num_workers=1 \
    actor_rollout_ref.actor.ppo_mini_batch_size=2 actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384 \
    trainer.nnodes=1 trainer.n_gpus_per_node="$GPUS" trainer.total_training_steps=1 \
    trainer.val_before_train=false trainer.test_freq=-1 trainer.save_freq=-1 \
    trainer.default_local_dir="$work/ckpt" 2>&1 | tee "$work/train.log"
n=$(wc -l <"$work/episodes/episodes.jsonl")
echo "episodes stored by dojo env serve: $n (expected 8 = 2 tasks x n 4)"
[ "$n" -ge 8 ]
grep -q "training/global_step:1\|step:1 " "$work/train.log"
echo "verl GPU check passed; logs in $work"
