#!/usr/bin/env bash
# Where a sandboxed command's time goes: runs `true` N times through one sandbox's launcher
# (the `exec_cpu` example) under `perf record` of the scheduler's events, then splits each
# command into phases (medians, µs): the caller preparing and sending the request, the request
# to the end of the command's exec, the command running, its exit to the caller done. For
# comparison, a bare `true`'s exec-to-exit under the same tracing. Needs root and `perf`.
# Usage: scripts/sandbox-exec-trace.sh [N]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
N="${1:-200}"
cd "$ROOT"
RUSTFLAGS="-C target-cpu=native" cargo build --release -q -p dojo-bench --no-default-features --example exec_cpu
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
perf record -q -a -e sched:sched_switch,sched:sched_wakeup,sched:sched_process_exec,sched:sched_process_exit \
  -o "$tmp/sb.data" -- target/release/examples/exec_cpu "$N"
perf script -i "$tmp/sb.data" -F comm,pid,time,event,trace 2>/dev/null > "$tmp/sb.txt"
perf record -q -a -e sched:sched_process_exec,sched:sched_process_exit -o "$tmp/bare.data" \
  -- bash -c "for i in \$(seq $N); do /usr/bin/true; done"
perf script -i "$tmp/bare.data" -F comm,pid,time,event,trace 2>/dev/null > "$tmp/bare.txt"
python3 - "$tmp/sb.txt" "$tmp/bare.txt" <<'PY'
import re, statistics, sys

def events(path):
    out = []
    for line in open(path):
        m = re.match(r"\s*(\S+)\s+(\d+)\s+([\d.]+):\s+sched:(\w+):\s*(.*)", line)
        if m:
            out.append((m[1], int(m[2]), float(m[3]), m[4], m[5]))
    return out

ev = events(sys.argv[1])
main = min(p for c, p, t, e, tr in ev if c.startswith("exec_cpu"))
phases, cur = [], None
for c, p, t, e, tr in ev:
    if e == "sched_wakeup" and re.search(rf"pid={main} ", tr) and c == "swapper":
        if cur and "done" in cur:
            phases.append(cur)
        cur = {"t0": t}  # the caller wakes from its pause
    elif cur is None:
        continue
    elif e == "sched_wakeup" and p == main and "sent" not in cur:
        cur["sent"] = t  # the caller wakes the spare with the request
    elif e == "sched_process_exec" and "true" in tr:
        cur["exec"] = t
    elif e == "sched_process_exit" and c == "true":
        cur["exit"] = t
    elif e == "sched_switch" and p == main and "prev_state=S" in tr and "exit" in cur:
        cur["done"] = t  # the caller's last sleep before the next pause
spans = {
    "caller: request prepared and sent": ("t0", "sent"),
    "request sent -> command's exec done": ("sent", "exec"),
    "command runs (exec -> exit)": ("exec", "exit"),
    "exit -> caller has the result": ("exit", "done"),
    "total": ("t0", "done"),
}
for name, (a, b) in spans.items():
    v = [ph[b] - ph[a] for ph in phases if a in ph and b in ph]
    print(f"{name}: median {statistics.median(v) * 1e6:.0f} us (n={len(v)})")
bare, start = [], {}
for c, p, t, e, tr in events(sys.argv[2]):
    if e == "sched_process_exec" and "/usr/bin/true" in tr:
        start[p] = t
    elif e == "sched_process_exit" and p in start:
        bare.append(t - start.pop(p))
print(f"bare true, exec -> exit: median {statistics.median(bare) * 1e6:.0f} us (n={len(bare)})")
PY
