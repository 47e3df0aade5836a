#!/bin/sh
# test_evict_vlog_restart.sh — issue 19 with a shared vocabulary (vocab_log):
# a restarted replica re-announces only the notices its trainers had not
# acknowledged, and each notice number reaches each replica's consumers once.
#
# Two `piperec run` replicas in one group (4 partitions), eviction lru
# through the log, each with its own state dir (snapshots only at start:
# checkpoint_interval_s 3600, so a kill -9 leaves the start's snapshot and
# the log replays everything after it) and a files sink (roll_batches 1: a
# batch is acknowledged once its roll is on disk). Every replica announces
# every notice of the log, its own recycles and the other's. Half the
# stream; replica 2 idles until its notice floor (<state>/p.notices) is past
# every notice in its rolls (all acknowledged), then is killed with -9. The
# other half goes in while replica 1 runs alone, recycling more; replica 2
# starts again on its state dir and the same files dir, is stopped before
# it has anything to read (its notice floor must stay), and starts a third
# time, with more rows to read. Checks:
#   - replica 2 announces no notice below its floor at the kill after its
#     restarts (before, the run without blocks saved floor 1 and the third
#     run announced every notice the log replayed again);
#   - no number twice in either replica's rolls (replica 2: both runs);
#   - replica 2 announced, after its restart, notices replica 1 made while
#     it was down (the log's replay: they are its consumers' to get);
#   - check_vocab_log_evict over both replicas: every row somewhere, one
#     (column, index) per number, one value per (column, index, epoch).
. "$(dirname "$0")/../fault/fault_lib.sh"

NROWS=16000
HALF=$((NROWS / 2))
CAP=402
MODULUS=100000
start_broker 4 "events,vocab:1"
"$PIPEREC" gen --rows $NROWS --seed 5 --zipf 1.1 --output - 2>/dev/null |
    awk 'BEGIN { FS = OFS = "\t" } { $2 = NR - 1; print }' > "$T/in.tsv"
head -n $HALF "$T/in.tsv" > "$T/in_a.tsv"
tail -n +$((HALF + 1)) "$T/in.tsv" > "$T/in_b.tsv"

for i in 1 2; do
    {
        pipeline_head "vlog-restart" "earliest" "$MODULUS"
        cat <<Y
      vocab: { profile: default, capacity: $CAP, eviction: lru }
    batch: { size: 256, max_delay_ms: 50 }
    sinks:
      files: { dir: "$T/out$i", roll_batches: 1 }
    state: { dir: "$T/state$i", checkpoint_interval_s: 3600 }
    vocab_log: { topic: vocab, usage_interval_ms: 200 }
http: { listen: "127.0.0.1:0" }
log: { level: info }
Y
    } > "$T/r$i.yaml"
done
produce() {
    "$PIPEREC" produce --bootstrap "$B" --topic events --input "$1" --rate 8000 \
        -X sticky.partitioning.linger.ms=0 >> "$T/produce.out" 2>> "$T/produce.err" ||
        fail "producer exited $?"
}
# notes DIR: the notice numbers in a files sink's rolls, one a line.
notes() {
    $PY - "$1" <<'PY'
import glob, json, os, sys
for r in glob.glob(os.path.join(sys.argv[1], "batches-*")):
    for b in json.load(open(os.path.join(r, "meta.json")))["batches"]:
        for x in b.get("recycled", []):
            print(x[3])
PY
}
ids_all() { # every row id 0..N-1 in the closed rolls of the dirs given
    $PY - "$@" <<'PY'
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

for i in 1 2; do start_replica $i; done
for i in 1 2; do wait_until 60 "replica $i's http port" has_port $i; done
wait_until 60 "both replicas in the group" both_assigned
produce "$T/in_a.tsv"
wait_until 90 "the first half in closed rolls" ids_all $HALF "$T/out1" "$T/out2"
max2=$(notes "$T/out2" | sort -n | tail -1)
[ -n "$max2" ] || fail "replica 2 announced no notice in the first half"
# The floor is the file's first line (acknowledged ranges above it follow).
floor_of() { head -n1 "$1" 2>/dev/null || echo 0; }
floor_past() { [ "$(floor_of "$T/state2/p.notices")" -gt "$max2" ]; }
wait_until 30 "replica 2's notice floor past #$max2" floor_past
floor2=$(floor_of "$T/state2/p.notices")
kill -9 "$RUN_2"
wait "$RUN_2" 2>/dev/null || true
notes "$T/out2" | sort -n > "$T/r2_run1.txt"

produce "$T/in_b.tsv"
wait_until 90 "every row in a closed roll" ids_all $NROWS "$T/out1" "$T/out2"
# assigned N: replica 2's log says "partition(s) assigned" N times or more.
assigned() { [ "$(grep -c "partition(s) assigned" "$T/r2.err")" -ge "$1" ]; }
# Run 2: back in the group with nothing new to read, then stopped. Its store
# cycles must keep the floor it started with (before the fix they saved 1:
# the restored notices the engine still held for a first block pulled it
# down, and run 3 announced everything again).
start_replica 2
wait_until 60 "replica 2 back" has_port 2
wait_until 60 "replica 2 assigned again" assigned 2
kill -TERM "$RUN_2"
wait "$RUN_2" || fail "replica 2 (run 2) exited $?"
[ "$(floor_of "$T/state2/p.notices")" -ge "$floor2" ] ||
    fail "replica 2's run without blocks lowered its notice floor to $(floor_of "$T/state2/p.notices") (from #$floor2)"
# Run 3: in the group, then more rows, so that it processes blocks (its
# restored notices go out with its batches).
start_replica 2
wait_until 60 "replica 2 back" has_port 2
wait_until 60 "replica 2 assigned again" assigned 3
"$PIPEREC" gen --rows 4000 --seed 6 --zipf 1.1 --output - 2>/dev/null |
    awk -v n=$NROWS 'BEGIN { FS = OFS = "\t" } { $2 = n + NR - 1; print }' > "$T/in_c.tsv"
cat "$T/in_c.tsv" >> "$T/in.tsv"
NALL=$((NROWS + 4000))
rows_before=$(files_rows "$T/out2")
r2_rows() { [ "$(files_rows "$T/out2")" -gt "$rows_before" ] && ids_all $NALL "$T/out1" "$T/out2"; }
produce "$T/in_c.tsv"
wait_until 120 "every row, replica 2 back at work" r2_rows
for i in 1 2; do kill -TERM "$(eval echo "\$RUN_$i")"; done
for i in 1 2; do wait "$(eval echo "\$RUN_$i")" || fail "replica $i exited $?"; done

notes "$T/out2" | sort -n > "$T/r2_all.txt"
awk 'NR == FNR { a[$1] = 1; next } !($1 in a)' "$T/r2_run1.txt" "$T/r2_all.txt" > "$T/r2_run2.txt"
below=$(awk -v f="$floor2" '$1 < f' "$T/r2_run2.txt" | wc -l)
[ "$below" -eq 0 ] || fail "replica 2 announced $below acknowledged notice(s) again after its restart"
for i in 1 2; do
    d=$(notes "$T/out$i" | sort -n | uniq -d | wc -l)
    [ "$d" -eq 0 ] || fail "replica $i announced $d notice number(s) twice"
done
others=$(awk -v m="$max2" '$1 > m' "$T/r2_run2.txt" | wc -l)
[ "$others" -gt 0 ] || fail "replica 2 announced none of the recycles made while it was down"
out=$($PY "$(dirname "$0")/../fault/check_vocab_log_evict.py" --files "$T/out1" \
      --files "$T/out2" --input "$T/in.tsv" --rows $NALL --modulus $MODULUS --capacity $CAP) ||
    fail "check_vocab_log_evict"
echo "replica 2: floor #$floor2 at the kill, $(wc -l < "$T/r2_run1.txt") notices before," \
     "$(wc -l < "$T/r2_run2.txt") after (none below the floor, $others made while it was down); $out"
echo "OK"
