#!/usr/bin/env bash
# World-model fidelity of a reward model (SWR) and a transition model (SWT) that `dojo train sft`
# trained on data dojo collected from its own real runs, measured in `shadow` mode on held-out
# tasks from other projects, beside the bundled model (the floor).
#
#   scripts/bench-world-trained.sh OUT [STEPS]
#
# 1. 10 + 10 synthesized tasks from tenacity 9.2.1 and inflection 0.5.1 (training projects);
# 2. real rollouts of each: gold-replay (runs the failing tests' files after the fix, resolved,
#    reward 1) and its decoy (scripts/world-decoys.py: the same edits with the bug left in, so the
#    same test run fails for real and the non-empty patch does not resolve, reward 0); dojo
#    records every test run (SWT) and every grading (SWR) in world.jsonl;
# 3. `dojo curate --world swr|swt` with small prompt caps (OUT/caps.toml: ~1.1-1.3k tokens a
#    sample; long targets keep their last 160 characters, where pytest's summary is);
# 4. per role, LoRA r16 SFT of the bundled SmolLM2-135M on it (one epoch of 2-row steps, or
#    STEPS steps), merged;
# 5. the 17 bundled tasks (9 projects not used for training) rolled out for real, gold and decoy
#    (samples 0 and 1), in one shadow run with each checkpoint in its role (`--swt-model` /
#    `--swr-model embedded:DIR`), sent the caps it was trained on: every test run is also predicted by SWT, every graded rollout
#    is also judged by SWR, and dojo's drift summary compares both with the real results.
# About 1.5 h on 2 cores (training 2 x ~18 min; the floor run another ~45 min, BASE= skips it).
# DOJO_BIN overrides the binary (default target/debug/dojo: `cargo build -p dojo-cli` first).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
out="$(mkdir -p "$1" && cd "$1" && pwd)"
steps="${2:-}"
dojo="${DOJO_BIN:-$root/target/debug/dojo}"
source scripts/setup-tools.sh >/dev/null
mini="$root/tasksets/mini/tasks.jsonl"
mkdir -p "$out/envs"
cp benchmarks/synth/envs/tenacity.toml "$out/envs/"
cd "$out"
cat > caps.toml <<'T'
[world.caps]
analysis = 100
problem = 400
command = 150
executed_code = 300
agent_patch = 700
gold_patch = 700
fail_to_pass = 250
pass_to_pass = 150
max_files = 1
target_output = 160
T
policy() { # NAME KIND [FILE]
  { echo "kind = \"$2\""; [ -n "${3:-}" ] && echo "file = \"$3\""; echo; cat caps.toml; } > "$1"
}
for p in tenacity==9.2.1 inflection==0.5.1; do
  n=${p%%==*}
  [ -s "synth/$n.jsonl" ] ||
    "$dojo" synth --project "$p" --envs envs --out "synth/$n.jsonl" --max 10 --seed 1 --workers 2
done
cat synth/tenacity.jsonl synth/inflection.jsonl > synth/train.jsonl
# Real runs: gold-replay, then the decoys of its trajectories.
real() { # NAME TASKS
  "$dojo" rollout --tasks "$2" --policy gold-replay --envs envs --workers 2 --out "runs/$1-gold"
  python3 "$root/scripts/world-decoys.py" "runs/$1-gold/trajectories.jsonl" "$1-decoy.jsonl"
  "$dojo" rollout --tasks "$2" --policy "replay:$1-decoy.jsonl" --envs envs --workers 2 --out "runs/$1-decoy"
}
real train synth/train.jsonl
policy gold.toml gold-replay
args=(--epochs 1)
[ -n "$steps" ] && args=(--max-steps "$steps")
# One model per role, as SWE-World trains them: SWR on the graded rollouts, SWT on the test runs.
for role in swr swt; do
  "$dojo" curate --rollouts runs/train-gold runs/train-decoy --world "$role" --world-policy gold.toml \
    --out "$role-data"
  RAYON_NUM_THREADS=2 "$dojo" train sft --data "$role-data" --model default --out "$role-lora" \
    --lora-rank 16 --lora-alpha 32 --lora-dropout 0 --lr 1e-3 --warmup-steps 0 --max-len 2048 \
    --batch-size 1 --grad-accum 2 --save-every 5 --merge --quiet "${args[@]}"
done
# Held out: the real gold and decoy trajectories of the bundled tasks, replayed in shadow mode as
# samples 0 and 1 of one run, so its drift summary holds both real positives and real negatives.
real mini "$mini"
python3 "$root/scripts/world-decoys.py" runs/mini-gold/trajectories.jsonl mini-decoy1.jsonl 1
cat runs/mini-gold/trajectories.jsonl mini-decoy1.jsonl > mini-mixed.jsonl
policy mixed.toml replay "$out/mini-mixed.jsonl"
shadow() { # NAME WORLD-MODEL FLAGS...
  local name=$1; shift
  /usr/bin/time -v "$dojo" rollout --tasks "$mini" --policy mixed.toml --samples 2 --workers 1 \
    --out "shadow/$name" --execution shadow "$@" 2> "shadow-$name.time" | tee "shadow-$name.log"
}
# One run, each checkpoint in its own role (SWT predicts the test runs, SWR judges the gradings).
shadow trained --swt-model "embedded:$out/swt-lora/merged" --swr-model "embedded:$out/swr-lora/merged"
# The bundled model in both roles, sent the same caps (the floor); BASE= skips it (about 45 min:
# it rarely closes its JSON).
[ -n "${BASE-1}" ] && shadow base --world-model embedded
for run in shadow/*/; do echo "$run"; cat "$run/drift.json"; echo; done
