#!/usr/bin/env bash
# The engine on a real GPU, for a session that is lent one (the `device` tool: a machine with
# an NVIDIA GPU, nvcc and PyTorch's CUDA wheels, but no crate registry and no network). The
# build happens here; the GPU machine only runs what was built.
#
#   bash scripts/gpu-check.sh pack   # here: build the CUDA test binary into .gpu/ (~8 MB, xz)
#   bash scripts/gpu-check.sh run    # there (carry .gpu): the GPU-vs-CPU engine test
#
# `pack` needs a CUDA toolkit: a system one, or `eval "$(bash scripts/cuda-toolkit.sh DIR)"`.
# `run` finds the CUDA libraries PyTorch's wheels installed (nvidia/cu13/lib) and the driver,
# then runs tests/qwen.rs with DOJO_TEST_DEVICE=cuda: tiny Llama/Qwen2/Qwen3 models as f32,
# Q8_0 and Q4_1 GGUF in every weight mode, logits against the CPU, 300 greedy tokens through
# the engine (KV cache growth, prefix reuse). The log goes to $OUT/gpu-check.log when $OUT is
# set.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
case "${1:-}" in
pack)
  command -v nvcc >/dev/null || { echo "gpu-check: no nvcc; see scripts/cuda-toolkit.sh" >&2; exit 1; }
  export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
  bin=$(cargo test -p dojo-engine --features cuda --test qwen --no-run --message-format=json \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "qwen" and m.get("executable"):
        print(m["executable"])')
  mkdir -p .gpu
  strip -o .gpu/qwen "$bin"
  rm -f .gpu/qwen.xz && xz -T2 -6 .gpu/qwen
  ls -la .gpu
  ;;
run)
  xz -dkf .gpu/qwen.xz && chmod +x .gpu/qwen
  libs=$(python3 - <<'EOF'
import glob, os, site
dirs = set()
for sp in site.getsitepackages():
    for lib in ("libcublas.so.13", "libcurand.so.10", "libcudart.so.13"):
        for f in glob.glob(os.path.join(sp, "nvidia", "**", lib), recursive=True):
            dirs.add(os.path.dirname(f))
print(":".join(sorted(dirs)))
EOF
)
  export LD_LIBRARY_PATH="${libs}:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv || true
  log="${OUT:-/tmp}/gpu-check.log"
  set -o pipefail
  DOJO_TEST_DEVICE="${DOJO_TEST_DEVICE:-cuda}" .gpu/qwen --test-threads 1 --nocapture 2>&1 | tee "$log"
  ;;
*)
  echo "usage: gpu-check.sh pack|run" >&2
  exit 2
  ;;
esac
