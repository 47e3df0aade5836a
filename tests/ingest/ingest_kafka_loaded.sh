#!/bin/sh
# ingest_kafka_loaded.sh — test_ingest_kafka under load, for the record (not
# a ctest test: whether it crashes depends on the machine's load).
#
# Runs COPIES copies of build/tests/ingest/test_ingest_kafka at once, RUNS
# times, under `nice -n 5`, each in its own directory with core dumps on; on
# 2 cores the copies overload the machine, which is what made the offset
# reset crash (a segfault after "resetting to the log start", a librdkafka
# abort "rd_kafka_cgrp_terminated: assert: !rd_kafka_assignment_in_progress").
# A crashed copy's backtrace (gdb on its core, all threads) is written beside
# its output. Prints one line per copy and the pass count.
#
# Usage: tests/ingest/ingest_kafka_loaded.sh [RUNS [COPIES]]
# Env: TEST_BIN (default build/tests/ingest/test_ingest_kafka), OUT (default
# /tmp/ingest_kafka_loaded), PR_TEST_FILTER (cmocka test name pattern, e.g.
# "test_offset_out_of_range", passed through).
set -u
runs=${1:-3}
copies=${2:-4}
src=$(cd "$(dirname "$0")" && pwd)
TEST_BIN=${TEST_BIN:-$src/../../build/tests/ingest/test_ingest_kafka}
OUT=${OUT:-/tmp/ingest_kafka_loaded}
. "$src/../loaded_lib.sh"
loaded_copy() {
    (cd "$1" && ulimit -c unlimited && exec nice -n 5 "$TEST_BIN") >"$1/out.txt" 2>&1 &
}
loaded_failed() { # DIR RC: the status, a core's backtrace (gdb, all threads), the first error
    core=$(ls "$1"/core* 2>/dev/null | head -1)
    if [ -n "$core" ]; then
        gdb -batch -ex "thread apply all bt" "$TEST_BIN" "$core" >"$1/bt.txt" 2>&1
    fi
    echo "rc $2${core:+ (core, bt in $1/bt.txt)}" \
        "$(grep -m1 -E 'FAILED|assert|\[  ERROR' "$1/out.txt")"
}
loaded_run ingest_kafka_loaded "$runs" "$copies" "$OUT"
