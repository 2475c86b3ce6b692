#!/usr/bin/env bash
# Engine benchmark, side by side with llama.cpp on the same GGUF, 1 and 2 threads.
# Needs llama-cpp-python (builds from source: pip install llama-cpp-python==0.3.36) in $PY, or
# its Python package (the sdist's llama_cpp/ directory, plus numpy) with LLAMA_CPP_LIB_PATH
# pointing at a shared build of the llama.cpp it vendors:
#   cmake -S vendor/llama.cpp -B build-shared -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=ON \
#     -DLLAMA_CURL=OFF && cmake --build build-shared --target llama   (libs in build-shared/bin)
# Usage: scripts/bench-engine-vs-llamacpp.sh [PYTHON_WITH_LLAMA_CPP]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${1:-python3}"
cd "$ROOT"
# candle's quantized kernels use AVX2/FMA only when compiled for them (llama.cpp builds with
# GGML_NATIVE too); a separate target dir keeps the normal build's artefacts intact.
export CARGO_TARGET_DIR="$ROOT/target-engine-native"
RUSTFLAGS="-C target-cpu=native" cargo build --release -p dojo-bench --example engine_bench
BIN="$CARGO_TARGET_DIR/release/examples/engine_bench"
GGUF="$("$BIN" path)"
uptime
for t in 1 2; do
  RAYON_NUM_THREADS=$t "$BIN" speed "$GGUF"
  "$PY" crates/dojo-bench/fixtures/engine/llamacpp.py "$GGUF" "$t"
done
# Reference: the GGUF's own Q4_1 kernels everywhere (the engine before WeightMode::Mixed).
DOJO_ENGINE_WEIGHTS=quantized RAYON_NUM_THREADS=1 "$BIN" speed "$GGUF"
RAYON_NUM_THREADS=2 "$BIN" agent "$GGUF"
uptime
