#!/bin/sh
# bench/device_lease.sh — a lent GPU machine's whole check in one command,
# within one call's limits: the GPU feed's figures (bench/device_gpu.sh:
# replay server, live `piperec run`, the example old and fused), then the
# thread sweep (bench/device_sweep.sh), `piperec serve` with requests at
# once (bench/bench_serve.sh), then the Python tests on the machine's torch /
# numpy, each stage given what is left of one deadline, so
# the most wanted figures come first and a slow stage cannot starve the
# packing. A device call returns at most 8 files, so everything goes into
# $OUT/results.tar.gz (repacked after each stage: a call cut short still
# returns what was measured), beside the three summaries and this script's
# log.
#
# Here, after building (once):
#   bench/device_lease.sh --pack [BUILD]
#     packs the libraries of every binary both scripts carry into
#     BUILD/devlibs and prints what to carry.
# There, from the repo root:
#   OUT=/dir bench/device_lease.sh
# Env: DEVICE_LEASE_S (the deadline, seconds from the start; default 540),
# DEVICE_LEASE_SWEEP_THREADS (default "16 1 8 4 2": the 16-thread figures
# first), DEVICE_LEASE_AB (baseline switches for an A/B at 16 threads after
# the sweep, default "PIPEREC_RING_SPANS=0 PIPEREC_MERGE_COPY=0"; "" for none), DEVICE_LEASE_TESTS_S (kept for the tests, default 75), and every
# DEVICE_GPU_*, DEVICE_SWEEP_* and BENCH_SWEEP_* knob, with these defaults
# here: BENCH_SWEEP_CONSUMERS=4 (piperec's source.consumers and the
# ceiling's instances), BENCH_SWEEP_CEILING_N=0, BENCH_SWEEP_CEILING_RESET=0,
# BENCH_SWEEP_FRESH_LOADS="0.8 0.5", BENCH_SWEEP_FRESH_S=3,
# BENCH_SWEEP_FRESH_PRODUCERS=4 (one paced producer fell short of its rate
# there), BENCH_SWEEP_OFFLINE_ROWS=16000000 (the offline step's own input: 4M rows
# took 0.26 s at 16 threads, start and exit included).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${DEVICE_GPU_BUILD:-build}

if [ "${1:-}" = "--pack" ]; then
    exec "$HERE/device_pack.sh" "${2:-$BUILD}" piperec bench/bench_ceiling tests/batcher/bt_serve
fi

OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
DEADLINE=${DEVICE_LEASE_S:-540}
T0=$(date +%s)
left() { echo $((DEADLINE - ($(date +%s) - T0))); }
RES=$(mktemp -d "${TMPDIR:-/tmp}/piperec-lease.XXXXXX")
mkdir -p "$RES/gpu" "$RES/sweep" "$RES/tests"
LOG=$OUT/lease.log
log() { echo "lease: +$(($(date +%s) - T0))s $*" | tee -a "$LOG"; }
pack() {
    tar czf "$OUT/results.tar.gz.tmp" -C "$RES" . && mv "$OUT/results.tar.gz.tmp" "$OUT/results.tar.gz"
    for s in gpu sweep tests; do
        [ -f "$RES/$s/summary.md" ] && cp "$RES/$s/summary.md" "$OUT/${s}_summary.md"
    done
    return 0
}
: > "$LOG"

# 1. the GPU feed's figures
t=$(($(left) - ${DEVICE_LEASE_TESTS_S:-75} - 120))
[ $t -gt 240 ] && t=240
log "gpu figures (at most ${t}s)"
OUT=$RES/gpu DEVICE_GPU_CASES=${DEVICE_GPU_CASES:-"bench live example"} \
    DEVICE_GPU_BENCH_S=${DEVICE_GPU_BENCH_S:-60} DEVICE_GPU_LIVE_S=${DEVICE_GPU_LIVE_S:-70} \
    DEVICE_GPU_EXAMPLE_S=${DEVICE_GPU_EXAMPLE_S:-75} \
    timeout -k 5 "$t" "$HERE/device_gpu.sh" > "$RES/gpu/run.log" 2>&1
log "gpu figures: exit $?"
pack

# 2. the thread sweep
t=$(($(left) - ${DEVICE_LEASE_TESTS_S:-75}))
if [ $t -ge 60 ]; then
    log "sweep (at most ${t}s)"
    OUT=$RES/sweep DEVICE_SWEEP_TIMEOUT_S=$((t - 5)) \
        BENCH_SWEEP_CONSUMERS=${BENCH_SWEEP_CONSUMERS:-4} \
        BENCH_SWEEP_CEILING_N=${BENCH_SWEEP_CEILING_N:-0} \
        BENCH_SWEEP_CEILING_RESET=${BENCH_SWEEP_CEILING_RESET:-0} \
        BENCH_SWEEP_FRESH_LOADS=${BENCH_SWEEP_FRESH_LOADS:-"0.8 0.5"} \
        BENCH_SWEEP_FRESH_S=${BENCH_SWEEP_FRESH_S:-3} \
        BENCH_SWEEP_OFFLINE_ROWS=${BENCH_SWEEP_OFFLINE_ROWS:-16000000} \
        BENCH_SWEEP_FRESH_PRODUCERS=${BENCH_SWEEP_FRESH_PRODUCERS:-4} \
        "$HERE/device_sweep.sh" "${DEVICE_LEASE_SWEEP_THREADS:-16 1 8 4 2}" > "$RES/sweep/run.log" 2>&1
    log "sweep: exit $?"
else
    log "sweep: skipped, ${t}s left"
fi
pack

# 2b. A/B at 16 threads, one line a message: the sweep's 16-thread run again
# with each baseline switch of DEVICE_LEASE_AB set (space-separated NAME=0
# items, one short sweep each; default PIPEREC_RING_SPANS=0: the rings taken
# a message at a time, then PIPEREC_MERGE_COPY=0: the merge's copies on the
# pipeline thread alone), beside the main sweep's figure.
for ab in ${DEVICE_LEASE_AB-PIPEREC_RING_SPANS=0 PIPEREC_MERGE_COPY=0}; do
    t=$(($(left) - ${DEVICE_LEASE_TESTS_S:-75}))
    if [ $t -lt 60 ]; then
        log "a/b $ab: skipped, ${t}s left"
        continue
    fi
    log "a/b $ab (at most ${t}s)"
    mkdir -p "$RES/ab-$ab"
    env "$ab" OUT=$RES/ab-$ab DEVICE_SWEEP_TIMEOUT_S=$((t - 5)) \
        BENCH_SWEEP_CONSUMERS=${BENCH_SWEEP_CONSUMERS:-4} BENCH_SWEEP_CEILING_N=0 \
        BENCH_SWEEP_CEILING_RESET=0 BENCH_SWEEP_FRESH=0 BENCH_SWEEP_NO_OFFLINE=1 \
        BENCH_SWEEP_LINES_PER_MSG=0 "$HERE/device_sweep.sh" 16 > "$RES/ab-$ab/run.log" 2>&1
    log "a/b $ab: exit $?"
    pack
done

# 2c. `piperec serve` with requests at once (bench/bench_serve.sh, 8 client
# processes, --threads 1 4 8), when 40 s are left beside the tests.
t=$(($(left) - ${DEVICE_LEASE_TESTS_S:-75}))
if [ $t -ge 40 ]; then
    log "serve threads (at most ${t}s)"
    mkdir -p "$RES/serve"
    BENCH_SV_ROWS=100000 BENCH_SV_SECONDS=2 BENCH_SV_THREADS="1 4 8" BENCH_SV_CLIENTS=8 \
        timeout -k 5 $((t - 5)) sh "$HERE/bench_serve.sh" "$BUILD" > "$RES/serve/run.log" 2>&1
    log "serve threads: exit $?"
    pack
else
    log "serve threads: skipped, ${t}s left"
fi

# 3. the Python tests on this torch / numpy
t=$(($(left) - 10))
if [ $t -ge 20 ]; then
    log "tests (at most ${t}s)"
    OUT=$RES/tests DEVICE_GPU_CASES=pytest DEVICE_GPU_PYTEST_S=$t \
        timeout -k 5 $((t + 5)) "$HERE/device_gpu.sh" > "$RES/tests/run.log" 2>&1
    log "tests: exit $?"
else
    log "tests: skipped, ${t}s left"
fi
pack
log "done; results in $OUT"
