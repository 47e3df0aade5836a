#!/bin/sh
# test_vocab_log_evict.sh — issue 14 point 3 with issue 9: bounded
# vocabularies shared by replicas, every eviction decided through the vocab
# log. Two `piperec run` replicas in one group (4 partitions), eviction lru
# with a small capacity on a Zipf stream, each writing a files sink. Then
# check_vocab_log_evict.py over both outputs: every row at some replica; a
# notice number names the same (column, index) on both; and each (column,
# index, epoch) held one value across BOTH replicas' rows — the replicas
# never used an index for two values. Halfway, replica 2 is killed with -9
# and restarted on its state dir (its snapshot, then the log's tail), as a
# supervisor would. Second part: a replica whose eviction
# settings differ from the log's first Settings record exits naming the key.
. "$(dirname "$0")/fault_lib.sh"

NROWS=16000
CAP=402
MODULUS=100000
start_broker 4 "events,vocab:1"
"$PIPEREC" gen --rows $NROWS --seed 5 --zipf 1.1 --output - 2>/dev/null |
    awk 'BEGIN { FS = OFS = "\t" } { $2 = NR - 1; print }' > "$T/in.tsv"

replica_config() { # I EVICTION
    {
        pipeline_head "shared-evict" "earliest" "$MODULUS"
        cat <<Y
      vocab: { profile: default, capacity: $CAP, $2 }
    batch: { size: 256, max_delay_ms: 50 }
    sinks:
      files: { dir: "$T/out$1", roll_batches: 8 }
    state: { dir: "$T/state$1", checkpoint_interval_s: 1 }
    vocab_log: { topic: vocab, usage_interval_ms: 200 }
http: { listen: "127.0.0.1:0" }
log: { level: info }
Y
    } > "$T/r$1.yaml"
}
# Every row id (dense column 0) in some closed roll: after the kill, rows are
# read again, so a row count alone would be reached early.
all_written() {
    [ $(( $(files_rows "$T/out1") + $(files_rows "$T/out2") )) -ge $NROWS ] &&
        $PY - "$NROWS" "$T/out1" "$T/out2" <<'PY'
import glob, os, sys
import numpy as np
n = int(sys.argv[1])
seen = np.zeros(n, dtype=bool)
for d in sys.argv[2:]:
    for r in glob.glob(os.path.join(d, "batches-*")):
        seen[np.load(os.path.join(r, "dense.npy"))[:, 0].astype(np.int64)] = True
sys.exit(0 if seen.all() else 1)
PY
}
both_assigned() { grep -q "partition(s) assigned" "$T/r1.err" && grep -q "partition(s) assigned" "$T/r2.err"; }

for i in 1 2; do replica_config $i "eviction: lru"; start_replica $i; done
for i in 1 2; do wait_until 60 "replica $i's http port" has_port $i; done
wait_until 60 "both replicas in the group" both_assigned
head -n $((NROWS / 2)) "$T/in.tsv" > "$T/in_a.tsv"
tail -n +$((NROWS / 2 + 1)) "$T/in.tsv" > "$T/in_b.tsv"
produce() {
    "$PIPEREC" produce --bootstrap "$B" --topic events --input "$1" --rate 8000 \
        -X sticky.partitioning.linger.ms=0 >> "$T/produce.out" 2>> "$T/produce.err" ||
        fail "producer exited $?"
}
produce "$T/in_a.tsv"
half_written() { [ $(( $(files_rows "$T/out1") + $(files_rows "$T/out2") )) -ge $((NROWS / 4)) ]; }
wait_until 60 "a quarter of the rows in closed rolls" half_written
kill -9 "$RUN_2"
wait "$RUN_2" 2>/dev/null || true
start_replica 2
produce "$T/in_b.tsv"
wait_until 120 "every row in a closed roll" all_written
grep -q "vocab log vocab read to offset [0-9]* (from the snapshot on" "$T/r2.err" ||
    fail "the restarted replica did not start from its snapshot"
usage=$(scrape 1 | awk '$1 == "piperec_vocab_log_usage_records_total{pipeline=\"p\"}" { print $2 }')
for i in 1 2; do kill -TERM "$(eval echo "\$RUN_$i")"; done
for i in 1 2; do wait "$(eval echo "\$RUN_$i")" || fail "replica $i exited $?"; done
[ "${usage:-0}" -gt 0 ] || fail "replica 1 sent no Usage record"
for i in 1 2; do [ "$(files_rows "$T/out$i")" -gt 0 ] || fail "replica $i wrote no row"; done
out=$($PY "$(dirname "$0")/check_vocab_log_evict.py" --files "$T/out1" --files "$T/out2" \
      --input "$T/in.tsv" --rows $NROWS --modulus $MODULUS --capacity $CAP) ||
    fail "check_vocab_log_evict"
echo "2 replicas, eviction lru through the log, one kill -9 and restart: $out; replica 1 sent $usage Usage records"

# A replica that disagrees with the log's eviction settings exits, naming it.
replica_config 3 "eviction: lfu"
if "$PIPEREC" run --config "$T/r3.yaml" 2> "$T/r3.err"; then
    fail "a replica with eviction lfu joined a log written with lru"
fi
grep -q "eviction is lru in the log, lfu here" "$T/r3.err" ||
    fail "settings difference not named: $(tail -2 "$T/r3.err")"
echo "OK"
