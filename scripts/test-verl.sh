#!/usr/bin/env bash
# Opt-in: dojo's verl agent loop (python/dojo-verl) inside a real verl 0.9.1, on a CPU: verl's own
# AgentLoopWorker runs DojoAgentLoop against a real `dojo env serve` (sandboxes, grading,
# shaping); verl's post-processing and compute_advantage (rloo, dojo_rloo) check the values.
# vLLM is the one part replaced (it needs a GPU): scripts/verl-gpu-check.sh runs it for real.
#
#   DOJO_VERL_PYTHON=/work/venv-verl/bin/python bash scripts/test-verl.sh
#
# DOJO_VERL_PYTHON: a python where `import verl` works (pip install verl==0.9.1 and its deps:
# see python/dojo-verl/README.md). Without it: SKIPPED.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${DOJO_VERL_PYTHON:-}" ]; then
    echo "SKIPPED verl test: set DOJO_VERL_PYTHON=/path/to/python with verl==0.9.1 importable (python/dojo-verl/README.md)"
    exit 0
fi
"$DOJO_VERL_PYTHON" -c "import verl, sys; assert verl.__version__ == '0.9.1', verl.__version__" \
    || { echo "DOJO_VERL_PYTHON=$DOJO_VERL_PYTHON: verl 0.9.1 is not importable there" >&2; exit 1; }
source scripts/setup-tools.sh
cargo build -p dojo-cli --no-default-features --locked
PYTHONDONTWRITEBYTECODE=1 DOJO_BIN="$PWD/target/debug/dojo" PYTHONPATH="$PWD/python/dojo-verl/src${PYTHONPATH:+:$PYTHONPATH}" \
    "$DOJO_VERL_PYTHON" -m pytest -q -p no:cacheprovider python/dojo-verl/tests "$@"
