#!/bin/bash
# `tracekit info` start-up, two checkouts interleaved (issue 32: <= 0.35 s on a 1 MB trace).
#   BEFORE=/tmp/tk_before AFTER=$PWD N=20 benchmarks/startup_info.sh [info options]
# BEFORE: e.g. `git archive e368def tracekit | tar -x -C /tmp/tk_before`, then
# `python -m compileall -q /tmp/tk_before/tracekit` (bytecode compiled, as installed) and the
# same in AFTER. Prints the min and median wall time of each side.
N=${N:-10}; BEFORE=${BEFORE:?a checkout holding tracekit/}; AFTER=${AFTER:-$PWD}
F=${TRACE:-../shared/fixtures/torch/h100_bert_small_hf_inference.json.gz}; P=${PYTHON:-python}
for i in $(seq "$N"); do
  for side in before after; do
    if [ $side = before ]; then PP=$BEFORE; else PP=$AFTER; fi
    s=$(date +%s.%N); PYTHONPATH=$PP $P -m tracekit info "$@" "$F" >/dev/null 2>&1; e=$(date +%s.%N)
    echo "$side $(echo "$e - $s" | bc)"
  done
done | sort -k1,1 -k2n | awk '{v[$1]=v[$1]" "$2; n[$1]++}
  END {for (k in v) {split(substr(v[k], 2), a, " "); printf "%s: min %.3f median %.3f (n=%d)\n", k, a[1], a[int((n[k]+1)/2)], n[k]}}'
