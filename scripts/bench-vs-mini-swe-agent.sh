#!/usr/bin/env bash
# The same scripted 30-step trajectory run by mini-swe-agent and by dojo, in one run.
# Installs mini-swe-agent from PyPI into target/msa-venv with the
# pinned uv of scripts/setup-tools.sh, then runs the Rust bench, which drives both.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-tools.sh
if [ ! -x target/msa-venv/bin/python ]; then
  uv venv -q -p /usr/bin/python3.11 target/msa-venv
fi
VIRTUAL_ENV="$PWD/target/msa-venv" uv pip install -q "mini-swe-agent==2.4.6"
MSA_PYTHON="$PWD/target/msa-venv/bin/python" cargo run --release -p dojo-bench --no-default-features --example vs_mini_swe_agent -- "$@"
