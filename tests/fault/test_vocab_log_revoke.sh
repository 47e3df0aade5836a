#!/bin/sh
# test_vocab_log_revoke.sh — a rebalance while a block waits for the vocab
# log (docs/vocab-log.md, "How a block gets its indices").
#
# The pipeline keeps reading while its worker's block waits for the log to
# decide new values, so a revoke can come while rows of the revoked
# partitions sit in that block. They must go (the new owner reads them
# again), the rest of the block must still get its indices from the log,
# and nothing may be lost.
#
# The log lives on a second test broker, which is taken down (SIGUSR1) after
# the first rows: new values cannot be decided, a block waits. A plain Kafka
# consumer (group_joiner.py) then joins the replica's group; the cooperative
# rebalance revokes part of the replica's partitions while its block waits
# (before the replica read during such waits, the rebalance could not even
# complete until the log was back). The log returns (SIGUSR2), and
# fault_check.py proves: every row reached the replica's trainer or the
# joiner, and each raw value kept one index in every delivery.
. "$(dirname "$0")/fault_lib.sh"

STEP=4000
NROWS=$(( 3 * STEP ))
start_broker 8 events
mkfifo "$T/vbroker.fifo"
"$PIPEREC" broker --partitions 1 --topics vocab:1 > "$T/vbroker.fifo" 2> "$T/vbroker.err" &
VBROKER=$!; pids="$pids $VBROKER"
exec 4< "$T/vbroker.fifo"
read -r _vfirst <&4 || fail "vocab broker printed nothing"
VB="${_vfirst#bootstrap=}"

TPORT=$(free_port)
STATE="$T/state"
write_config "$T/r1.yaml"
printf '    vocab_log: { topic: vocab, properties: { bootstrap.servers: "%s" } }\n' "$VB" \
    > "$T/vl.part"
sed -i "/^    state:/r $T/vl.part" "$T/r1.yaml"
start_replica 1
wait_until 60 "replica 1's http port" has_port 1
TPORT_1=$TPORT
$PY "$FAULT_DIR/fault_trainer.py" --connect "127.0.0.1:$TPORT" --log "$T/trainer.log" \
    --status "$T/trainer.status" --stop-file "$T/trainer.stop" --max-rows "$NROWS" \
    2> "$T/trainer.err" &
TRAINER=$!; pids="$pids $TRAINER"

produce_step() {
    rows $(( $1 * STEP )) $STEP "$T/in$1.tsv"
    "$PIPEREC" produce --bootstrap "$B" --topic events --input "$T/in$1.tsv" --rate 8000 \
        -X sticky.partitioning.linger.ms=0 > "$T/produce$1.out" 2> "$T/produce$1.err" ||
        fail "producer $1"
}
trainer_at_least() { [ "$(trainer_field 1)" -ge "$1" ]; }
produce_step 0
wait_until 60 "the first $STEP rows at the trainer" trainer_at_least $STEP

# The log goes away: the next new values cannot be decided.
kill -USR1 "$VBROKER"
produce_step 1
waiting() {
    v=$(scrape 1 | awk '$1 == "piperec_vocab_log_values_waiting{pipeline=\"p\"}" { print $2 }')
    [ "${v:-0}" != 0 ]
}
wait_until 30 "a block waiting for the vocab log" waiting
revokes() { grep -c "partition(s) revoked" "$T/r1.err" || true; }
r0=$(revokes)

# A consumer joins the group: the replica must give up partitions now.
$PY "$FAULT_DIR/group_joiner.py" --bootstrap "$B" --group fault --topic events \
    --ids "$T/joiner.ids" --stop-file "$T/joiner.stop" 2> "$T/joiner.err" &
JOINER=$!; pids="$pids $JOINER"
revoked() { [ "$(revokes)" -gt "$r0" ]; }
wait_until 60 "a revoke while the block waits for the log" revoked
# The log is still down, so the block waited through the revoke; what is
# left of it (its rows of the partitions kept) waits again.
wait_until 10 "the rest of the block waiting for the log again" waiting
# The second step of the cooperative rebalance hands the joiner what was
# revoked. Only then more rows: a replica whose next block is full stops
# reading (and serving rebalances) until the log is back, and would lose
# the rest of its partitions to the joiner (still no row lost, but this
# test is about the revoke above).
joiner_has() { grep -q "assigned [1-9]" "$T/joiner.err"; }
wait_until 60 "the joiner's partitions" joiner_has
produce_step 2

# The log comes back: the rest of the waiting block is decided.
kill -USR2 "$VBROKER"
union_all() {
    [ -s "$T/trainer.log" ] && $PY "$FAULT_DIR/fault_check.py" --log "$T/trainer.log" \
        --input /dev/null --rows "$NROWS" --modulus "$MODULUS" --skip-indices \
        --also-ids "$T/joiner.ids"
}
wait_until 120 "every row at the trainer or the joiner" union_all
touch "$T/trainer.stop" "$T/joiner.stop"
wait "$TRAINER" || fail "trainer exited $?"
wait "$JOINER" || fail "joiner exited $?"
kill -TERM "$RUN_1"
wait "$RUN_1" || fail "replica exited $?"
out=$(check --input "$T/in0.tsv" --input "$T/in1.tsv" --input "$T/in2.tsv" \
      --also-ids "$T/joiner.ids") || fail "check"
joined=$(wc -l < "$T/joiner.ids")
echo "revoke while a block waited for the vocab log: $out; the joiner read $joined rows"
echo "test_vocab_log_revoke: ok"
