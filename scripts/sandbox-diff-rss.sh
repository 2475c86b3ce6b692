#!/bin/bash
# Max RSS of `dojo sandbox diff` on a kept sandbox whose workspace holds ~1.6 GB of new text
# files (2 GiB workspace cap). `dojo sandbox diff` streams the whole diff (DOJO); the baseline is
# a binary that buffers it (BASE: a dojo from before the streaming diff, 95ed2c8 or older, with
# the patch cap lifted in the sandbox's state.json: caps.patch_bytes = 2^60), and the same
# buffered read with the default 10 MiB cap ("capped"). Output bytes are compared.
set -e
DOJO=${DOJO:-target/debug/dojo}
BASE=${BASE:?set BASE to a dojo binary from before the streaming diff}
export DOJO_HOME=$(mktemp -d /tmp/dojo-rss-XXXXXX)
SRC=$(mktemp -d /tmp/dojo-rss-src-XXXXXX); echo hello > $SRC/README.md
ID=$($DOJO sandbox run --keep --source $SRC -- bash -c 'for i in $(seq 1 160); do yes "agent output line $i abcdefghijklmnopqrstuvwxyz0123456789" | head -c 10000000 > big_$i.txt; done; du -sh /testbed | cut -f1' 2>/dev/null | tail -1)
echo "sandbox $ID"
for mode in streamed capped buffered; do
  bin=$DOJO; [ $mode = streamed ] || bin=$BASE
  if [ $mode = buffered ]; then
    python3 - "$DOJO_HOME/sandboxes/$ID/state.json" <<'PY'
import json,sys; p=sys.argv[1]; s=json.load(open(p)); s.setdefault("caps",{"patch_bytes":0,"read_bytes":33554432}); s["caps"]["patch_bytes"]=2**60; json.dump(s,open(p,"w"))
PY
  fi
  /usr/bin/time -v $bin sandbox diff $ID > /tmp/rss-diff-$mode.out 2> /tmp/rss-time-$mode.txt || true
  echo "$mode: exit $(grep 'Exit status' /tmp/rss-time-$mode.txt | awk '{print $3}') maxrss_kb $(grep 'Maximum resident' /tmp/rss-time-$mode.txt | awk '{print $6}') wall $(grep 'Elapsed' /tmp/rss-time-$mode.txt | awk '{print $8}') stdout_bytes $(stat -c %s /tmp/rss-diff-$mode.out)"
  grep -i "error\|too large" /tmp/rss-time-$mode.txt | head -2
done
cmp -s /tmp/rss-diff-streamed.out /tmp/rss-diff-buffered.out && echo "streamed == buffered output" || echo "OUTPUTS DIFFER"
$DOJO sandbox rm $ID >/dev/null 2>&1 || true
rm -rf $DOJO_HOME $SRC /tmp/rss-diff-*.out
