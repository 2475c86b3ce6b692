#!/usr/bin/env bash
# World-model fidelity in `shadow` mode: every command that runs Python or tests runs for real AND
# is predicted by SWT; every graded rollout is also judged by SWR. Prints the run's drift
# section (dojo_world::drift::DriftSummary, also in drift.json): SWT exit-code agreement, test-status
# agreement, mean text similarity, and SWR accuracy / precision / recall / F1 against real
# grading, beside SWE-World's published SWR figures (32B: 0.754 / 0.779 / 0.770 / 0.774).
#
# Usage:
#   scripts/bench-world-fidelity.sh --world-model openai:MODEL --world-base-url URL \
#       [--policy POLICY] [--tasks FILE] [--samples N] [--swr-samples K] [--out DIR]
#   scripts/bench-world-fidelity.sh --world-model embedded        # the offline floor
# POLICY defaults to gold-replay (every patch is the gold one: SWR has no real negatives, so
# precision/recall are degenerate; use a model policy, e.g. openai:AGENT or embedded, and
# --samples > 1 for a mix of resolved and unresolved rollouts). DOJO_BIN overrides the binary
# (default: cargo run --release -p dojo-cli).
set -euo pipefail
cd "$(dirname "$0")/.."

policy=gold-replay
tasks=tasksets/mini/tasks.jsonl
samples=1
out=""
world_model=""
world_url=""
swr_samples=1
while [ $# -gt 0 ]; do
  case "$1" in
    --policy) policy="$2"; shift 2 ;;
    --tasks) tasks="$2"; shift 2 ;;
    --samples) samples="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --world-model) world_model="$2"; shift 2 ;;
    --world-base-url) world_url="$2"; shift 2 ;;
    --swr-samples) swr_samples="$2"; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
if [ -z "$world_model" ]; then
  echo "--world-model embedded|openai:MODEL is required" >&2
  exit 2
fi
[ -n "$out" ] || out="$(mktemp -d /tmp/dojo-world-fidelity.XXXXXX)/run"
source scripts/setup-tools.sh >/dev/null
read -r -a dojo <<< "${DOJO_BIN:-cargo run -q --release -p dojo-cli --}"

args=(rollout --tasks "$tasks" --policy "$policy" --samples "$samples" --out "$out"
      --execution shadow --world-model "$world_model" --swr-samples "$swr_samples")
[ -n "$world_url" ] && args+=(--world-base-url "$world_url")
echo "\$ dojo ${args[*]}" >&2
log="$(dirname "$out")/rollout.log"
"${dojo[@]}" "${args[@]}" | tee "$log" >&2

# The figures are dojo's own (dojo_world::drift::DriftSummary::to_markdown, from drift.json).
echo "# World-model fidelity (shadow mode): $world_model, policy $policy, tasks $tasks"
echo
awk '/^## Simulation drift/{on=1} on&&/^$/&&seen{exit} on{print; if(/^\|/)seen=1}' "$log"
echo
echo "SWE-World's published SWR (32B): accuracy 0.754, precision 0.779, recall 0.770, F1 0.774."
echo "drift.json: $out/drift.json"
