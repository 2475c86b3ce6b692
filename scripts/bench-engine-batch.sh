#!/usr/bin/env bash
# Batched vs round-robin decoding in dojo serve, side by side with llama.cpp's server, on the
# bundled SmolLM2-135M Q4_1 GGUF: aggregate tokens/s and peak RSS for 1, 8 and 16 concurrent
# conversations (128 greedy tokens each), each configuration run REPEATS times (median in the
# results file). Loopback only.
#
# Usage: scripts/bench-engine-batch.sh [LLAMA_SERVER] [PYTHON_WITH_LLAMA_CPP_SERVER]
#   LLAMA_SERVER: llama.cpp's `llama-server` binary (continuous batching, --parallel slots),
#     built from the llama.cpp that llama-cpp-python 0.3.36 vendors:
#       cmake -S vendor/llama.cpp -B build -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF \
#         -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF && cmake --build build --target llama-server
#   PYTHON_WITH_LLAMA_CPP_SERVER: a python with `llama-cpp-python[server]` (one model, requests
#     served one at a time behind a lock: it has no parallel slots).
# Either may be omitted (or "-") to skip that engine. Env: REPEATS (3), COUNTS ("1 8 16"),
# MAX_TOKENS (128), THREADS (2).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
LLAMA_SERVER="${1:--}"
LCP_PY="${2:--}"
REPEATS="${REPEATS:-3}"
COUNTS="${COUNTS:-1 8 16}"
MAX_TOKENS="${MAX_TOKENS:-128}"
THREADS="${THREADS:-2}"
[ -x target/release/dojo ] || cargo build --release -p dojo-cli
DOJO="$ROOT/target/release/dojo"
GGUF="$(ls "${DOJO_HOME:-$HOME/.cache/dojo}"/models/smollm2-135m-instruct-q4_1-*/*.gguf | head -1)"
BENCH=(python3 "$ROOT/scripts/bench-engine-batch.py" --max-tokens "$MAX_TOKENS")
export RAYON_NUM_THREADS="$THREADS"
uptime
for rep in $(seq "$REPEATS"); do
  for n in $COUNTS; do
    # Both dojo modes share one binary; DOJO_ENGINE_BATCH picks the scheduler.
    for batch in 1 0; do
      DOJO_ENGINE_BATCH=$batch "${BENCH[@]}" --label "dojo batch=$batch" --conversations "$n" \
        -- "$DOJO" serve --model "$GGUF" --port '{port}' --weights mixed
    done
    if [ "$LLAMA_SERVER" != - ]; then
      "${BENCH[@]}" --label "llama-server --parallel $n" --conversations "$n" \
        -- "$LLAMA_SERVER" -m "$GGUF" --port '{port}' --host 127.0.0.1 -t "$THREADS" \
        -tb "$THREADS" --parallel "$n" -c $((n * 512)) --cont-batching --no-webui
    fi
    if [ "$LCP_PY" != - ]; then
      "${BENCH[@]}" --label "llama-cpp-python server" --conversations "$n" \
        -- "$LCP_PY" -m llama_cpp.server --model "$GGUF" --port '{port}' --host 127.0.0.1 \
        --n_threads "$THREADS" --n_threads_batch "$THREADS" --n_ctx 2048
    fi
  done
done
uptime
