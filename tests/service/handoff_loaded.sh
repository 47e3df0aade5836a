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
. "$src/../loaded_lib.sh"
loaded_copy() {
    PR_TMP=$1 PR_HANDOFF_VOCAB_ALL=1 nice -n 5 /usr/bin/python3 \
        "$src/test_worker_handoff.py" >"$1/out.txt" 2>&1 &
}
loaded_failed() { echo "($(grep -m1 FAIL "$1/out.txt"))"; }
loaded_run handoff_loaded "$runs" "$copies" "$OUT"
