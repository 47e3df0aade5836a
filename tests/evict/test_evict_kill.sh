#!/bin/sh
# test_evict_kill.sh — issue 14: bounded vocabularies through `piperec run`
# and kill -9. A Zipf stream (rows with their id in I1) goes through a
# pipeline whose columns hold at most 402 indices with eviction lru; the
# run is killed with -9 twice while it consumes (commits every 3 s, so rows
# and notices are delivered again after each restart) and restarted on the
# same state dir. One trainer (tests/fault/fault_trainer.py) stays subscribed and
# records every row and every recycled-index notice. check_notices.py then
# replays them as a trainer would (each notice number applied once) and
# proves: every row arrived, no index reached the capacity, and no row ever
# found its index holding another value without a notice in between — so
# the notices (journaled, and those not yet acknowledged kept in snapshots)
# survive the crashes.
. "$(dirname "$0")/../fault/fault_lib.sh"
FAULT_DIR=$(cd "$(dirname "$0")/../fault" && pwd)

STEP=8000
NROWS=$(( 3 * STEP ))
CAP=402
MODULUS=100000
start_broker 4
TPORT=$(free_port)
STATE="$T/state"
zipf_rows() { # FIRST COUNT FILE
    "$PIPEREC" gen --rows "$2" --seed 5 --first-row "$1" --zipf 1.1 --output - 2>/dev/null |
        awk -v r="$1" 'BEGIN { FS = OFS = "\t" } { $2 = r + NR - 1; print }' > "$3"
}
{
    pipeline_head "evict" "earliest" "$MODULUS" "auto.commit.interval.ms: \"3000\""
    cat <<Y
      vocab: { profile: default, capacity: $CAP, eviction: lru }
    batch: { size: 256, max_delay_ms: 50 }
    sinks:
      trainer: { listen: "127.0.0.1:$TPORT" }
    state: { dir: "$STATE", checkpoint_interval_s: 5 }
http: { listen: "127.0.0.1:0" }
log: { level: info }
Y
} > "$T/run.yaml"
start_trainer --notices "$T/notices.jsonl"

i=0
while [ $i -lt 3 ]; do
    zipf_rows $(( i * STEP )) $STEP "$T/in$i.tsv"
    start_run "run$i"
    # rows trickle in while this run works, so the kill lands mid-stream
    "$PIPEREC" produce --bootstrap "$B" --topic events --input "$T/in$i.tsv" --rate 3000 \
        -X sticky.partitioning.linger.ms=0 > "$T/produce$i.out" 2> "$T/produce$i.err" &
    PROD=$!; pids="$pids $PROD"
    if [ $i -lt 2 ]; then
        # kill once this run delivers and at least one snapshot was taken
        wait_until 60 "run $i's first batch" trainer_in_epoch $(( i + 1 ))
        sleep 0.$(( 5 + i * 3 ))
        kill -9 "$RUN"
        wait "$RUN" 2>/dev/null || true
    fi
    wait "$PROD" || fail "producer $i exited $?"
    i=$((i + 1))
done
wait_until 120 "every row at the trainer" trainer_has_all
recycled=$(metric piperec_vocab_recycled_total)
kill -TERM "$RUN"
wait "$RUN" || fail "last run exited $?"
stop_trainer
out=$($PY "$(dirname "$0")/check_notices.py" --log "$T/trainer.log" --notices "$T/notices.jsonl" \
      --input "$T/in0.tsv" --input "$T/in1.tsv" --input "$T/in2.tsv" --rows "$NROWS" \
      --modulus "$MODULUS" --capacity "$CAP") || fail "check_notices"
# The kills must have landed mid-stream: rows read again after them, and
# notices of the journal (or not yet acknowledged) announced again.
grep -q "[1-9][0-9]* recycled-index notice(s) to announce again" "$T/run1.err" "$T/run2.err" ||
    fail "no restart announced notices again: the kills missed the journal"
# Issue 19 item 7: an empty state dir restores nothing (it said "52 entries
# restored": the reserved indices of 26 columns).
grep -q "(0 values restored; 0 recycled-index" "$T/run0.err" || fail "run0: not 0 values restored"
# Issue 19 item 5: a restart re-announces only what was not acknowledged:
# the state dir keeps the notice floor, and the restarts read it.
floors=$(sed -n 's/.* those below #\([0-9]*\) were acknowledged before.*/\1/p' \
    "$T/run1.err" "$T/run2.err")
echo "restart floors: $floors"
for f in $floors; do [ "$f" -gt 1 ] && found=1; done
[ -n "${found:-}" ] || fail "no restart knew a notice floor above 1 (state dir evict.notices)"
got=$(echo "$out" | sed -n 's/.* rows \([0-9]*\) .*/\1/p')
[ "${got:-0}" -gt "$NROWS" ] || fail "no row was delivered twice: the kills missed the stream ($out)"
echo "eviction lru, 2 x kill -9: $out; last run sent $recycled notices"
echo "OK"
