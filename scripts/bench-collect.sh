#!/usr/bin/env bash
# Rebuild BENCHMARKS.md's per-crate sections from benchmarks/results/*.md; the intro and the
# headline table (everything before the first per-crate section) are kept as written.
set -euo pipefail
cd "$(dirname "$0")/.."
first=$(grep -n '^## .* benchmarks\|^## Sandbox' BENCHMARKS.md | head -1 | cut -d: -f1)
{
  head -n $((first - 1)) BENCHMARKS.md
  for f in sandbox grade agent rollout engine lsp curate train rl synth select world env; do
    # One heading level down, outside code fences (a `# comment` in a shell block stays as is).
    awk '/^```/ { fence = !fence } !fence && /^#/ { $0 = "#" $0 } { print }' "benchmarks/results/$f.md"
    echo
  done
} > BENCHMARKS.md.new
mv BENCHMARKS.md.new BENCHMARKS.md
