#!/bin/sh
# test_evict_files.sh — issue 14 point 2: the files sink carries the
# recycled-index notices. A Zipf stream (rows with their id in I1) goes
# through `piperec run` with eviction lru (columns of at most 402 indices)
# into a files sink only, in rolls of a few batches. Every meta.json must
# stay valid JSON and list each batch's notices ("recycled": [[column, row,
# index, number], ...], row numbered like row_start); check_notices.py
# --files then replays them over the rolls' sparse.npy in sequence order and
# proves: every row was written, indices stay below the capacity, each
# notice sits at the first row that uses its index anew, and between two
# notices of an index all its rows hold one value (while without the notices
# they would not). Then the same stream again with eviction ttl by event
# time (ttl_s: 1; rows produced at 5000/s, so the Kafka timestamps span ~4 s
# and values idle for a second of event time make room): the same checks.
# Third, lru under batch ordering event_time (rows of the 4 partitions merged
# by Kafka timestamp, so rows leave in another order than the engine saw
# them): the notices must still sit at the first row of the new value
# (issue 19; they came at row 0 of the next batch before).
. "$(dirname "$0")/../fault/fault_lib.sh"

NROWS=20000
CAP=402
MODULUS=100000
start_broker 4
"$PIPEREC" gen --rows $NROWS --seed 5 --zipf 1.1 --output - 2>/dev/null |
    awk 'BEGIN { FS = OFS = "\t" } { $2 = NR - 1; print }' > "$T/in.tsv"
"$PIPEREC" produce --bootstrap "$B" --topic events --input "$T/in.tsv" --rate 5000 \
    -X sticky.partitioning.linger.ms=0 > "$T/produce.out" 2> "$T/produce.err" ||
    fail "producer exited $?"
# one_run NAME EVICTION [BATCH_KEYS]: run into $T/NAME, check the notices.
one_run() {
OUT="$T/$1"
{
    pipeline_head "evict-files-$1" "earliest" "$MODULUS"
    cat <<Y
      vocab: { profile: default, capacity: $CAP, $2 }
    batch: { size: 256, max_delay_ms: 50${3:+, $3} }
    sinks:
      files: { dir: "$T/$1", roll_batches: 8 }
http: { listen: "127.0.0.1:0" }
log: { level: info }
Y
} > "$T/run.yaml"
all_written() { [ "$(files_rows "$OUT")" -ge $NROWS ]; }

start_run "$1"
wait_until 60 "every row in a closed roll" all_written
recycled=$(metric piperec_vocab_recycled_total)
kill -TERM "$RUN"
wait "$RUN" || fail "run exited $?"
rolls=$(ls -d "$T"/"$1"/batches-* | wc -l)
[ "$rolls" -gt 1 ] || fail "one roll only: the test wants several"
out=$($PY "$(dirname "$0")/check_notices.py" --files "$T/$1" --input "$T/in.tsv" \
      --rows $NROWS --modulus $MODULUS --capacity $CAP) || fail "check_notices"
echo "$1 ($2), files sink, $rolls rolls: $out; the run sent $recycled notices"
[ "$recycled" -gt 0 ] || fail "$1: no index was recycled"
}
one_run lru "eviction: lru"
one_run ttl "eviction: ttl, ttl_s: 1"
one_run event_time "eviction: lru" "ordering: event_time, allowed_lateness_ms: 0"
echo "OK"
