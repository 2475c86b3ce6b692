#!/usr/bin/env bash
# Pinned Python-side tools the tests and the runtime use, installed from PyPI into
# target/pytools (a venv) and exported on PATH. Idempotent; sourced by scripts/test.sh.
# Sourced, so it must not change the caller's shell options: the install runs in a subshell.
_dojo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
(
  set -euo pipefail
  tools="$_dojo_root/target/pytools"
  py="${DOJO_PYTHON:-python3}"
  if [ ! -x "$tools/bin/uv" ]; then
    "$py" -m venv "$tools"
    "$tools/bin/python" -m pip install --quiet --disable-pip-version-check uv==0.13.9
  fi
  # Everything else goes through uv (fast, cached).
  "$tools/bin/uv" pip install --quiet --python "$tools/bin/python" -r "$_dojo_root/scripts/test-requirements.txt"
) || { echo "setup-tools: installing the pinned Python tools failed" >&2; return 1 2>/dev/null || exit 1; }
export DOJO_PYTOOLS="$_dojo_root/target/pytools"
export PATH="$DOJO_PYTOOLS/bin:$PATH"
unset _dojo_root
