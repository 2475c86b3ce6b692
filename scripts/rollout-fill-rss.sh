#!/bin/bash
# Max RSS of a whole `dojo rollout` whose agent fills the workspace and submits: one task of the
# bundled set (pytest-dev__iniconfig-1), a replayed policy whose first action writes FILES text
# files of 10 MB into /testbed (1.8 GB with FILES=190, near the 2 GiB workspace cap) and whose
# second submits. Run with the default 10 MiB patch cap, and with the cap lifted
# (DOJO_PATCH_CAP=2^60: how the diff was read before the caps, an unlimited buffer).
# Usage (as root, after `cargo build -p dojo-cli --no-default-features`):
#   scripts/rollout-fill-rss.sh [FILES_CAPPED] [FILES_LIFTED]   (defaults 190 and 40)
set -e
DOJO=${DOJO:-$PWD/target/debug/dojo}
CAPPED=${1:-190}
LIFTED=${2:-40}
W=$(mktemp -d /tmp/dojo-fill-rss-XXXXXX)
python3 - tasksets/mini/tasks.jsonl "$W/one.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
t = next(r for r in rows if r["instance_id"] == "pytest-dev__iniconfig-1")
open(sys.argv[2], "w").write(json.dumps(t) + "\n")
PY
# A gold-replay trajectory gives the prompt; the replayed policy keeps it and acts differently.
$DOJO rollout --tasks "$W/one.jsonl" --policy gold-replay --workers 1 --out "$W/gold" >/dev/null 2>&1
for n in "$CAPPED" "$LIFTED"; do
  python3 - "$W/gold/trajectories.jsonl" "$W/fill$n.jsonl" "$n" <<'PY'
import json, sys
t = json.loads(open(sys.argv[1]).readline())
n = int(sys.argv[3])
cmd = ("mkdir -p /testbed/fill && for i in $(seq 1 %d); do yes 'dojo-fill-line-0123456789abcdef"
       "0123456789abcdef0123456789abcdef0123456789' | head -c 10000000 > /testbed/fill/f$i.txt; "
       "done; du -sm /testbed/fill") % n
call = lambda i, name, args: {"role": "assistant", "content": "", "tool_calls": [{"id": "call_fill_%d" % i,
       "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}
t["messages"] = [m for m in t["messages"] if m["role"] in ("system", "user")][:2] + [
    call(0, "execute_bash", {"command": cmd}), call(1, "submit", {})]
open(sys.argv[2], "w").write(json.dumps(t) + "\n")
PY
done
run() { # NAME FILES [ENV...]
  local name=$1 n=$2; shift 2
  env "$@" /usr/bin/time -v $DOJO rollout --tasks "$W/one.jsonl" --policy "replay:$W/fill$n.jsonl" \
    --workers 1 --out "$W/$name" > "$W/$name.log" 2>&1 || true
  python3 - "$W/$name" "$W/$name.log" "$name" <<'PY'
import json, os, re, sys
d, log, name = sys.argv[1:4]
t = json.loads(open(os.path.join(d, "trajectories.jsonl")).readline())
text = open(log).read()
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text).group(1)
filled = re.search(r"(\d+)\t/testbed/fill", json.dumps([m["content"] for m in t["messages"] if m["role"] == "tool"]).replace("\\t", "\t"))
print(f"{name}: filled {filled.group(1) if filled else '?'} MiB, max RSS {rss // 1024} MiB, wall {wall}, "
      f"patch {len(t.get('patch') or '')} bytes, record {os.path.getsize(os.path.join(d, 'trajectories.jsonl'))} bytes, "
      f"events {[e['kind'] for e in t['events']]}, infra {t['infra_failure']}, resolved {t['resolved']}")
PY
}
run capped-$CAPPED "$CAPPED"
run capped-$LIFTED "$LIFTED"
run lifted-$LIFTED "$LIFTED" DOJO_PATCH_CAP=1152921504606846976
rm -rf "$W"
