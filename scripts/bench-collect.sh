#!/usr/bin/env bash
# Rebuild BENCHMARKS.md's per-crate sections from benchmarks/results/*.md; the intro and the
# headline table (everything before the first per-crate section) are kept as written.
# `--check`: write nothing, exit 1 when BENCHMARKS.md is not what the results files give (a
# section edited in BENCHMARKS.md only: edit benchmarks/results/<crate>.md, then run this).
set -euo pipefail
cd "$(dirname "$0")/.."
first=$(grep -n '^## .* benchmarks\|^## Sandbox' BENCHMARKS.md | head -1 | cut -d: -f1)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
{
  head -n $((first - 1)) BENCHMARKS.md
  for f in sandbox grade agent rollout engine lsp curate train rl synth select world env; do
    # One heading level down, outside code fences (a `# comment` in a shell block stays as is).
    awk '/^```/ { fence = !fence } !fence && /^#/ { $0 = "#" $0 } { print }' "benchmarks/results/$f.md"
    echo
  done
} > "$out"
if [ "${1:-}" = --check ]; then
  if ! cmp -s "$out" BENCHMARKS.md; then
    echo "BENCHMARKS.md differs from benchmarks/results/*.md (edit the results file, then run scripts/bench-collect.sh):" >&2
    diff "$out" BENCHMARKS.md | head -20 >&2
    exit 1
  fi
  exit 0
fi
cp "$out" BENCHMARKS.md
