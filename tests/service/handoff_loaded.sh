#!/bin/sh
# handoff_loaded.sh — the loaded variant of test_worker_handoff, for the
# record (not a ctest test: its result depends on the machine's load).
#
# Runs COPIES copies of tests/service/test_worker_handoff.py at once, every
# round of each with its own vocab_log topic (PR_HANDOFF_VOCAB_ALL=1), RUNS
# times, under `nice -n 5`; on 2 cores the copies overload the machine, which
# is what made the vocab_log look-ahead skip rows (streamed indices out of
# first-appearance order, "sparse differ from the offline output"). Prints
# one line per copy and the pass count; each failing copy's output stays in
# $OUT/run<r>-<c>/out.txt.
#
# Usage: tests/service/handoff_loaded.sh [RUNS [COPIES]]
# Env: PIPEREC (default build/piperec), OUT (default /tmp/handoff_loaded).
set -u
runs=${1:-3}
copies=${2:-4}
src=$(cd "$(dirname "$0")" && pwd)
PIPEREC=${PIPEREC:-$src/../../build/piperec}
OUT=${OUT:-/tmp/handoff_loaded}
export PIPEREC
pass=0
total=0
r=1
while [ "$r" -le "$runs" ]; do
    pids=""
    c=1
    while [ "$c" -le "$copies" ]; do
        d=$OUT/run$r-$c
        rm -rf "$d" && mkdir -p "$d"
        PR_TMP=$d PR_HANDOFF_VOCAB_ALL=1 nice -n 5 /usr/bin/python3 \
            "$src/test_worker_handoff.py" >"$d/out.txt" 2>&1 &
        pids="$pids $!"
        c=$((c + 1))
    done
    c=1
    for pid in $pids; do
        total=$((total + 1))
        if wait "$pid"; then
            pass=$((pass + 1))
            echo "run $r copy $c: ok"
        else
            echo "run $r copy $c: FAIL ($(grep -m1 FAIL "$OUT/run$r-$c/out.txt"))"
        fi
        c=$((c + 1))
    done
    r=$((r + 1))
done
echo "handoff_loaded: $pass of $total copies passed"
[ "$pass" -eq "$total" ]
