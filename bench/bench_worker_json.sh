#!/bin/sh
# bench_worker_json.sh — the worker thread's CPU per row on JSON clickstream
# (issue 21): `piperec run` with examples/clickstream.yaml's schema, K
# consumer instances, engine.threads T for each T of "$1", one JSON event per
# message preloaded in P partitions of `piperec broker`; the worker's phase
# profile (PIPEREC_WORKER_PROF=1, logged at stop) and per-thread CPU over the
# first-row-out to last-row-out window (bench_sweep.py poll).
# Env: BENCH_WJ_BUILD (default build), BENCH_WJ_ROWS (200000),
# BENCH_WJ_PARTITIONS (64), BENCH_WJ_CONSUMERS (2), BENCH_WJ_BATCH (8192),
# BENCH_WJ_OUT (directory for prof.log and poll-T-N.json; default a temp dir).
# Usage: bench/bench_worker_json.sh "1 2 8"
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${BENCH_WJ_BUILD:-build}
PIPEREC=$BUILD/piperec
ROWS=${BENCH_WJ_ROWS:-200000}
PARTS=${BENCH_WJ_PARTITIONS:-64}
K=${BENCH_WJ_CONSUMERS:-2}
BATCH=${BENCH_WJ_BATCH:-8192}
PY=${BENCH_SWEEP_PYTHON:-python3}
TMP=$(mktemp -d "${BENCH_TMP:-/tmp}/piperec-wj.XXXXXX")
OUT=${BENCH_WJ_OUT:-$TMP}
mkdir -p "$OUT"
BPID=""; RPID=""; CPID=""
stop_pid() {
    [ -n "$1" ] || return 0
    kill -TERM "$1" 2>/dev/null || return 0
    i=0
    while kill -0 "$1" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.2; i=$((i + 1)); done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}
cleanup() { stop_pid "$CPID"; stop_pid "$RPID"; stop_pid "$BPID"; rm -rf "$TMP"; }
trap cleanup EXIT INT TERM
free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

mkfifo "$TMP/broker.fifo"
"$PIPEREC" broker --partitions "$PARTS" --topics clicks > "$TMP/broker.fifo" 2> "$TMP/broker.err" &
BPID=$!
exec 3< "$TMP/broker.fifo"
read -r first <&3 || { cat "$TMP/broker.err" >&2; exit 1; }
B=${first#bootstrap=}
"$PIPEREC" produce --bootstrap "$B" --topic clicks --format json --gen "$ROWS" \
    -X sticky.partitioning.linger.ms=0 >&2

N=0
for T in $1; do
    N=$((N + 1))
    TPORT=$(free_port); HPORT=$(free_port)
    # examples/clickstream.yaml with this run's broker, group, sizes and ports
    sed -e "s/127.0.0.1:9092/$B/" \
        -e "s/^\(        topics: \[clicks\]\)/\1\n        group.id: wj-$T-$N-$$/" \
        -e "s/^\(      format: json\)/\1\n      consumers: $K/" \
        -e "s/batch: { size: 1024, max_delay_ms: 50 }/batch: { size: $BATCH, max_delay_ms: 100 }/" \
        -e "s/listen: \"127.0.0.1:7070\" }/listen: \"127.0.0.1:$TPORT\", max_unacked_batches: 64 }/" \
        -e "s/^engine: { backend: cpu }/engine: { backend: cpu, threads: $T }\nhttp: { listen: \"127.0.0.1:$HPORT\" }\nlog: { level: warn }/" \
        "$HERE/../examples/clickstream.yaml" > "$TMP/run.yaml"
    PIPEREC_WORKER_PROF=1 "$PIPEREC" run --config "$TMP/run.yaml" 2> "$TMP/run.err" &
    RPID=$!
    "$PIPEREC" consume --connect "127.0.0.1:$TPORT" --pipeline clicks --credits 64 --quiet \
        --connect-timeout-ms 30000 > "$TMP/consume.out" 2> "$TMP/consume.err" &
    CPID=$!
    $PY "$HERE/bench_sweep.py" poll "127.0.0.1:$HPORT" "$ROWS" "$RPID" "$BPID" "$CPID" \
        > "$OUT/poll-$T-$N.json" || { tail -5 "$TMP/run.err" >&2; exit 1; }
    stop_pid "$CPID"; CPID=""
    stop_pid "$RPID"; RPID=""
    grep 'worker profile' "$TMP/run.err" | sed "s/^/threads=$T json k=$K: /" >> "$OUT/prof.log" || true
    $PY - "$OUT/poll-$T-$N.json" "$T" <<'PYEOF'
import json, sys
p = json.load(open(sys.argv[1]))
rows = p["rows"]
th = p["thread_cpu_seconds"]
us = lambda pred: round(sum(v for k, v in th.items() if pred(k)) * 1e6 / rows, 3)
print("threads=%s rows=%d rows/s=%.0f worker=%s pool=%s all=%s us/row" % (
    sys.argv[2], rows, rows / p["seconds"], us(lambda k: k.endswith("-w")),
    us(lambda k: "pool" in k or "eng" in k), round(p["cpu_seconds"] * 1e6 / rows, 3)))
print("  threads:", json.dumps({k: round(v * 1e6 / rows, 3) for k, v in sorted(th.items())}))
PYEOF
done
cat "$OUT/prof.log"
