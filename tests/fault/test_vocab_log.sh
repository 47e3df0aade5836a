#!/bin/sh
# test_vocab_log.sh — issue 9: three `piperec run` replicas in one consumer
# group share one vocabulary through a vocab_log topic (docs/vocab-log.md).
#
# The broker has `events` (8 partitions) and `vocab` (1 partition). Three
# replicas start together on an empty log (all three race to write its
# Settings record), each with its own state dir and trainer (fault_trainer.py
# records every row id and index it receives). Rows are produced in four
# steps; after the second, replica 2 is killed with -9, its state dir is
# deleted, and it is restarted empty while rows keep coming. Then, over all
# three trainers' output, fault_check.py proves: no row missing, each
# (column, raw value) has exactly one index and each index one value, and
# the indices of every column are contiguous from 0 (profile dlrm).
# Afterwards every replica's vocabulary (exported from its snapshot after a
# clean stop) is the same, a fourth replica with an empty state dir rebuilds
# exactly that vocabulary from the log alone, and a replica whose transform
# settings differ from the log's exits naming the difference.
. "$(dirname "$0")/fault_lib.sh"

STEP=6000
NROWS=$(( 4 * STEP ))
start_broker 8 events,vocab:1

# replica_config I [GROUP] [MODULUS] [RESET]: $T/r$I.yaml, trainer port
# TPORT_I, state dir $T/state$I.
replica_config() {
    _port=$(eval echo "\${TPORT_$1}")
    {
        pipeline_head "${2:-shared}" "${4:-earliest}" "${3:-$MODULUS}"
        cat <<Y
      vocab: { profile: dlrm }
    batch: { size: 512, max_delay_ms: 50 }
    sinks:
      trainer: { listen: "127.0.0.1:$_port" }
    state: { dir: "$T/state$1", checkpoint_interval_s: 2 }
    vocab_log: { topic: vocab }
http: { listen: "127.0.0.1:0" }
log: { level: info }
Y
    } > "$T/r$1.yaml"
}
# start_trainer_i I: fault_trainer.py on replica I's trainer port.
start_trainer_i() {
    _port=$(eval echo "\${TPORT_$1}")
    $PY "$FAULT_DIR/fault_trainer.py" --connect "127.0.0.1:$_port" --log "$T/trainer$1.log" \
        --status "$T/trainer$1.status" --stop-file "$T/trainer.stop" --max-rows "$NROWS" \
        2> "$T/trainer$1.err" &
    pids="$pids $!"
    eval "TRAINER_$1=$!"
}
logs() { echo "--log $T/trainer1.log --log $T/trainer2.log --log $T/trainer3.log"; }
# shellcheck disable=SC2046
all_rows() { $PY "$FAULT_DIR/fault_check.py" $(logs) --input /dev/null --rows "$NROWS" \
    --modulus "$MODULUS" --per-log-seq --skip-indices; }
some_rows() {
    for i in 1 2 3; do [ -s "$T/trainer$i.log" ] && return 0; done
    return 1
}

for i in 1 2 3; do
    eval "TPORT_$i=$(free_port)"
    replica_config $i
done
for i in 1 2 3; do start_replica $i; done
for i in 1 2 3; do wait_until 60 "replica $i's http port" has_port $i; done
for i in 1 2 3; do start_trainer_i $i; done
grep -l "has no Settings record yet: wrote one" "$T"/r?.err | wc -l | grep -q '^[1-3]$' ||
    fail "no replica wrote the log's Settings record"

produce_step() {
    rows $(( $1 * STEP )) $STEP "$T/in$1.tsv"
    "$PIPEREC" produce --bootstrap "$B" --topic events --input "$T/in$1.tsv" --rate 8000 \
        > "$T/produce$1.out" 2> "$T/produce$1.err" || fail "producer $1"
}
produce_step 0
wait_until 60 "first rows at a trainer" some_rows
produce_step 1
# Replica 2 dies without a word, and comes back with nothing on disk.
kill -9 "$RUN_2"
wait "$RUN_2" 2>/dev/null || true
rm -rf "$T/state2"
t_kill=$(ms)
produce_step 2
start_replica 2
produce_step 3
wait_until 180 "every row at some trainer" all_rows
t_all=$(( $(ms) - t_kill ))
touch "$T/trainer.stop"
for i in 1 2 3; do wait "$(eval echo "\$TRAINER_$i")" || fail "trainer $i exited $?"; done
inputs=""
for i in 0 1 2 3; do inputs="$inputs --input $T/in$i.tsv"; done
# shellcheck disable=SC2046,SC2086
out=$($PY "$FAULT_DIR/fault_check.py" $(logs) $inputs --rows "$NROWS" --modulus "$MODULUS" \
      --per-log-seq --contiguous) || fail "check"
echo "3 replicas, one kill -9 with empty restart: $out"
grep -q "vocab log vocab read to offset [1-9][0-9]* (from its start" "$T/r2.err" ||
    fail "the restarted replica did not rebuild from the log"

# The same vocabulary everywhere: stop (each saves a snapshot once its log
# lag is 0), export, compare.
for i in 1 2 3; do wait_until 30 "replica $i caught up with the log" lag_zero $i; done
for i in 1 2 3; do kill -TERM "$(eval echo "\$RUN_$i")"; done
for i in 1 2 3; do wait "$(eval echo "\$RUN_$i")" || fail "replica $i exited $?"; done
for i in 1 2 3; do
    "$PIPEREC" vocab export --config "$T/r$i.yaml" --pipeline p --output "$T/export$i" \
        2> "$T/export$i.err" || fail "export $i"
done
diff -r "$T/export1" "$T/export2" > /dev/null || fail "replicas 1 and 2 hold different vocabularies"
diff -r "$T/export1" "$T/export3" > /dev/null || fail "replicas 1 and 3 hold different vocabularies"

# An empty state dir rebuilds the same vocabulary from the log alone (its
# own group, reading nothing from `events`).
TPORT_4=$(free_port)
replica_config 4 rebuild "$MODULUS" latest
start_replica 4
wait_until 60 "replica 4's http port" has_port 4
kill -TERM "$RUN_4"
wait "$RUN_4" || fail "replica 4 exited $?"
"$PIPEREC" vocab export --config "$T/r4.yaml" --pipeline p --output "$T/export4" \
    2> "$T/export4.err" || fail "export 4"
diff -r "$T/export1" "$T/export4" > /dev/null || fail "the rebuilt vocabulary differs"
n=$(cat "$T"/export1/*.tsv | grep -vc '^#')

# Different settings: the replica exits and says what differs.
TPORT_5=$(free_port)
replica_config 5 other 99991 latest
if POD_NAME=r5 "$PIPEREC" run --config "$T/r5.yaml" 2> "$T/r5.err"; then
    fail "a replica with another modulus started"
fi
grep -q "column C1 modulus is $MODULUS in the log, 99991 here" "$T/r5.err" ||
    fail "the settings conflict was not named: $(tail -3 "$T/r5.err")"
echo "vocabularies equal on 3 replicas and rebuilt from the log ($n entries); all rows ${t_all} ms after the kill; settings conflict named"
echo "OK"
