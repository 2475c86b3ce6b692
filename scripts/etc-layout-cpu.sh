#!/bin/bash
# CPU per `Sandbox::exec(true)` (whole process tree, cgroup cpuacct) with the /etc snapshot
# (one mount) against one bind per /etc entry (DOJO_SANDBOX_ETC=binds, the layout before it),
# PAIRS alternated runs of N commands each. As root, on a cgroup v1 host.
# Usage: scripts/etc-layout-cpu.sh [PAIRS] [N]   (build first:
#   cargo build --release -p dojo-bench --no-default-features --example exec_cpu)
set -e
PAIRS=${1:-6}; N=${2:-300}
B=${EXEC_CPU:-target/release/examples/exec_cpu}
for i in $(seq 1 "$PAIRS"); do
  echo "binds    $(DOJO_SANDBOX_ETC=binds $B "$N")"
  echo "snapshot $($B "$N")"
done
