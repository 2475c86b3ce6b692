#!/usr/bin/env bash
# Pinned Python-side tools the tests and the runtime use, installed from PyPI into
# target/pytools (a venv) and exported on PATH. Idempotent; sourced by scripts/test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/target/pytools"
PY="${DOJO_PYTHON:-python3}"
if [ ! -x "$TOOLS/bin/uv" ]; then
  "$PY" -m venv "$TOOLS"
  "$TOOLS/bin/python" -m pip install --quiet --disable-pip-version-check uv==0.13.9
fi
# Everything else goes through uv (fast, cached).
"$TOOLS/bin/uv" pip install --quiet --python "$TOOLS/bin/python" -r "$ROOT/scripts/test-requirements.txt"
export PATH="$TOOLS/bin:$PATH"
export DOJO_PYTOOLS="$TOOLS"
