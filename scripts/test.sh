#!/usr/bin/env bash
# The whole test suite: installs the Python tools the tests use (pinned), then runs every test.
# README and .ci/run both call exactly this script.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-tools.sh
python3 scripts/check-import-cycles.py
cargo test --workspace --locked "$@"
# Opt-in (DOJO_VERL_PYTHON): the verl agent loop under a real verl install.
bash scripts/test-verl.sh
