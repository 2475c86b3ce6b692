#!/usr/bin/env bash
# The whole test suite: installs the Python tools the tests use (pinned), then runs every test.
# README and .ci/run both call exactly this script.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-tools.sh
python3 scripts/check-import-cycles.py
bash scripts/bench-collect.sh --check
# Crates that only need dojo-llm's message types do not compile the server stack (its `server`
# feature is for the crates that serve).
if cargo tree -p dojo-trajectory -e normal --locked | grep -qw axum; then
  echo "dojo-trajectory depends on axum: enable dojo-llm's server feature only where a crate serves" >&2
  exit 1
fi
cargo test --workspace --locked "$@"
# Opt-in (DOJO_VERL_PYTHON): the verl agent loop under a real verl install.
bash scripts/test-verl.sh
