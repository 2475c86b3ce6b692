#!/bin/bash
# Max RSS of `dojo sandbox diff` on a kept sandbox whose workspace holds ~1.6 GB of new text
# files (2 GiB workspace cap): with the default 10 MiB patch cap, and with the cap lifted
# (state.json caps.patch_bytes = 2^60: what the diff read was before, an unlimited buffer).
set -e
DOJO=${DOJO:-target/debug/dojo}
export DOJO_HOME=$(mktemp -d /tmp/dojo-rss-XXXXXX)
SRC=$(mktemp -d /tmp/dojo-rss-src-XXXXXX); echo hello > $SRC/README.md
ID=$($DOJO sandbox run --keep --source $SRC -- bash -c 'for i in $(seq 1 160); do yes "agent output line $i abcdefghijklmnopqrstuvwxyz0123456789" | head -c 10000000 > big_$i.txt; done; du -sh /testbed | cut -f1' 2>/dev/null | tail -1)
echo "sandbox $ID"
ls $DOJO_HOME/sandboxes/$ID
for mode in capped unlimited; do
  if [ $mode = unlimited ]; then
    python3 - "$DOJO_HOME/sandboxes/$ID/state.json" <<'PY'
import json,sys; p=sys.argv[1]; s=json.load(open(p)); s.setdefault("caps",{"patch_bytes":0,"read_bytes":33554432}); s["caps"]["patch_bytes"]=2**60; json.dump(s,open(p,"w"))
PY
  fi
  /usr/bin/time -v $DOJO sandbox diff $ID > /tmp/rss-diff-$mode.out 2> /tmp/rss-time-$mode.txt || true
  echo "$mode: exit $(grep 'Exit status' /tmp/rss-time-$mode.txt | awk '{print $3}') maxrss_kb $(grep 'Maximum resident' /tmp/rss-time-$mode.txt | awk '{print $6}') wall $(grep 'Elapsed' /tmp/rss-time-$mode.txt | awk '{print $8}') stdout_bytes $(stat -c %s /tmp/rss-diff-$mode.out)"
  grep -i "error\|too large" /tmp/rss-time-$mode.txt | head -2
done
$DOJO sandbox rm $ID >/dev/null 2>&1 || true
rm -rf $DOJO_HOME $SRC /tmp/rss-diff-*.out
