#!/bin/sh
# test_fault_kill.sh — issue 11, fault injection: 10 successive `kill -9` of
# `piperec run` under load, restarted each time on the same state dir.
#
# A producer writes the rows in 10 steps (8 partitions, rate-limited so the
# mock broker's ~5 MB per partition is never outrun); each run is killed
# while it consumes, at a different point after its first batch. One trainer
# (fault_trainer.py) stays subscribed across the restarts and records every
# row id and index it receives. Then a last run drains and fault_check.py
# proves: 0 rows lost, 0 index changes (each (column, raw value) keeps one
# index over every delivery of every epoch, each index stands for one key),
# (epoch, seq) strictly increasing across all restarts, 11 epochs. Prints
# the duplicate count (rows re-read after each kill: at-least-once).
. "$(dirname "$0")/fault_lib.sh"

KILLS=10
STEP=6000
NROWS=$(( (KILLS + 1) * STEP ))
start_broker 8
TPORT=$(free_port)
STATE="$T/state"
# Commit every second: some kills land after a commit, some before.
KAFKA_EXTRA='auto.commit.interval.ms: "1000"'
write_config "$T/run.yaml"
start_trainer
t_start=$(ms)

i=0
while [ $i -le $KILLS ]; do
    rows $(( i * STEP )) $STEP "$T/in$i.tsv"
    "$PIPEREC" produce --bootstrap "$B" --topic events --input "$T/in$i.tsv" --rate 6000 \
        > "$T/produce$i.out" 2> "$T/produce$i.err" &
    PROD=$!; pids="$pids $PROD"
    start_run "run$i"
    grep -q "epoch $(( i + 1 )) " "$T/run$i.err" || fail "run $i is not epoch $(( i + 1 ))"
    if [ $i -eq $KILLS ]; then
        wait "$PROD" || fail "producer $i exited $?"
        break
    fi
    # Kill once this run is delivering: after the trainer got a batch of its
    # epoch, plus a different extra delay each time (0..0.9 s) so the kill
    # lands at different points (mid-batch, mid-journal-append, mid-checkpoint).
    wait_until 60 "run $i's first batch" trainer_in_epoch $(( i + 1 ))
    sleep "0.$(( i % 10 ))"
    kill -9 "$RUN"
    wait "$RUN" 2>/dev/null || true
    wait "$PROD" || fail "producer $i exited $?"
    i=$((i + 1))
done
wait_until 120 "every row at the trainer" trainer_has_all
kill -TERM "$RUN"
wait "$RUN" || fail "last run exited $?"
stop_trainer
dt=$(( $(ms) - t_start ))
inputs=""
i=0
while [ $i -le $KILLS ]; do inputs="$inputs --input $T/in$i.tsv"; i=$((i + 1)); done
# shellcheck disable=SC2086
out=$(check $inputs --epochs-min $(( KILLS + 1 ))) || fail "check"
echo "kill -9 x$KILLS: $out; ${dt} ms"
echo "test_fault_kill: ok"
