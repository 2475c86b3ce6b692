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
# MAX_TOKENS (128), CONTEXT (0: words of shared filler in the system prompt, e.g. 800 for an
# agent-sized prompt of ~2k tokens), SAME_PROMPT (1: every conversation sends one prompt, as the
# samples of an RL group), BASE_SERVE (a previous build's serve_gguf, run alternating with this
# one under the label "dojo-base"), MODES ("1 0": continuous batching, round-robin),
# THREADS (2), WEIGHTS ("mixed": the GGUF's Q4_1 on the quantized decode kernel, as
# `dojo serve --weights mixed`; add "dense" for the f32 weights that `auto` picks in a portable
# build).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
LLAMA_SERVER="${1:--}"
LCP_PY="${2:--}"
REPEATS="${REPEATS:-3}"
COUNTS="${COUNTS:-1 8 16}"
MAX_TOKENS="${MAX_TOKENS:-128}"
THREADS="${THREADS:-2}"
WEIGHTS="${WEIGHTS:-mixed}"
# `dojo serve`'s server without the rest of the CLI (a much smaller release build).
cargo build --release -p dojo-engine --example serve_gguf
SERVE="$ROOT/target/release/examples/serve_gguf"
GGUF="$(ls "${DOJO_HOME:-$HOME/.cache/dojo}"/models/smollm2-135m-instruct-q4_1-*/*.gguf | head -1)"
BENCHCMD=(python3 "$ROOT/scripts/bench-engine-batch.py" --max-tokens "$MAX_TOKENS" --context "${CONTEXT:-0}")
if [ "${SAME_PROMPT:-0}" = 1 ]; then BENCHCMD+=(--same-prompt); fi
OUT="${OUT:-$(mktemp /tmp/bench-engine-batch.XXXXXX.jsonl)}"
bench() { "${BENCHCMD[@]}" "$@" | tee -a "$OUT"; }
export RAYON_NUM_THREADS="$THREADS"
uptime
echo "raw results: $OUT"
for rep in $(seq "$REPEATS"); do
  for n in $COUNTS; do
    # Both dojo modes share one binary; DOJO_ENGINE_BATCH picks the scheduler.
    for w in $WEIGHTS; do
      for batch in ${MODES:-1 0}; do
        DOJO_ENGINE_BATCH=$batch bench --label "dojo $w batch=$batch" \
          --conversations "$n" -- "$SERVE" "$GGUF" '{port}' "$w"
        if [ -n "${BASE_SERVE:-}" ]; then
          DOJO_ENGINE_BATCH=$batch bench --label "dojo-base $w batch=$batch" \
            --conversations "$n" -- "$BASE_SERVE" "$GGUF" '{port}' "$w"
        fi
      done
    done
    if [ "$LLAMA_SERVER" != - ]; then
      bench --label "llama-server --parallel $n" --conversations "$n" \
        -- "$LLAMA_SERVER" -m "$GGUF" --port '{port}' --host 127.0.0.1 -t "$THREADS" \
        -tb "$THREADS" --parallel "$n" -c $((n * (512 + 3 * ${CONTEXT:-0}))) --cont-batching --no-webui
    fi
    if [ "$LCP_PY" != - ]; then
      bench --label "llama-cpp-python server" --conversations "$n" \
        -- "$LCP_PY" -m llama_cpp.server --model "$GGUF" --port '{port}' --host 127.0.0.1 \
        --n_threads "$THREADS" --n_threads_batch "$THREADS" --n_ctx 2048
    fi
  done
done
uptime
# Median of the repeats per configuration, as a markdown table.
python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    rows.setdefault((r["conversations"], r["label"]), []).append(r)
print("| conversations | server | tokens/s (median) | runs | peak RSS MiB (median) |")
print("|---|---|---|---|---|")
for (n, label), rs in sorted(rows.items()):
    tps = [r["tokens_per_s"] for r in rs]
    rss = statistics.median(r["peak_rss_mib"] for r in rs)
    runs = " / ".join(f"{t:.1f}" for t in tps)
    print(f"| {n} | {label} | **{statistics.median(tps):.1f}** | {runs} | {rss:.0f} |")
PY
