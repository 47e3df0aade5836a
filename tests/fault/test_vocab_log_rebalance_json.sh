#!/bin/sh
# test_vocab_log_rebalance_json.sh — issue 20: a declared schema (JSON events,
# a list feature, a missing id) on two `piperec run` instances sharing the
# vocab log (docs/vocab-log.md), through a cooperative rebalance and a
# `kill -9`.
#
# Instance 1 starts alone on `events` (4 partitions) and delivers; instance 2
# joins the group while events keep coming, so the cooperative rebalance
# revokes partitions from instance 1 mid-stream (rows of theirs in its
# blocks are dropped: the new owner reads them again). Then instance 1 is
# killed (-9) while it consumes and restarted on its state dir (its
# partitions go to instance 2 and come back). Each instance writes its
# batches to its own Kafka sink topic. json_fault.py check reads both and
# proves: nothing lost, every delivery of a row with the same indices, and
# one index per value per feature across both instances and every run (one
# shared vocabulary: each list element, each id), (epoch, seq) increasing
# per instance; both instances delivered rows.
. "$(dirname "$0")/fault_lib.sh"

STEP=2000
NROWS=$(( 3 * STEP ))
JF="$FAULT_DIR/json_fault.py"
start_broker 4 events,b1,b2,vocab:1

replica_config_json() { # I
    cat > "$T/r$1.yaml" <<Y
pipelines:
  - name: p
    source:
      kafka:
        topics: [events]
        group.id: shared-json
        properties:
          bootstrap.servers: "$B"
          auto.offset.reset: earliest
          session.timeout.ms: "3000"
          heartbeat.interval.ms: "500"
          fetch.wait.max.ms: "10"
          auto.commit.interval.ms: "1000"
      format: json
$($PY "$JF" schema)
    transform:
      vocab: { profile: default }
    batch: { size: 128, max_delay_ms: 50 }
    sinks:
      kafka: { topic: b$1, properties: { bootstrap.servers: "$B" } }
    state: { dir: "$T/state$1", checkpoint_interval_s: 2 }
    vocab_log: { topic: vocab }
http: { listen: "127.0.0.1:0" }
log: { level: info }
Y
}
metric_of() { # I NAME: instance I's sample of NAME for pipeline p (0 if none)
    scrape "$1" | awk -v m="$2{pipeline=\"p\"}" '$1 == m { print $2; f = 1 } END { if (!f) print 0 }'
}
acked() { [ "$(metric_of "$1" piperec_batches_acked_total)" -gt "${2:-0}" ]; }
produce_step() { # I [RATE]: rows I*STEP.. in the background (PROD)
    $PY "$JF" gen $(( $1 * STEP )) $STEP "$T/in$1.jsonl"
    "$PIPEREC" produce --bootstrap "$B" --topic events --format json --input "$T/in$1.jsonl" \
        --rate "${2:-2000}" > "$T/produce$1.out" 2> "$T/produce$1.err" &
    PROD=$!; pids="$pids $PROD"
}
revokes() { grep -c "partition(s) revoked" "$T/r1.err" || true; }

for i in 1 2; do replica_config_json $i; done
"$PIPEREC" run --config "$T/r1.yaml" --check | grep -q ok || fail "--check: $(cat "$T/r1.yaml")"
t_start=$(ms)
start_replica 1
wait_until 60 "instance 1's http port" has_port 1

# 1. instance 1 alone, then instance 2 joins while events come
produce_step 0
wait_until 60 "instance 1's first batch in Kafka" acked 1
r0=$(revokes)
start_replica 2
wait_until 60 "instance 2's http port" has_port 2
revoked() { [ "$(revokes)" -gt "$r0" ]; }
wait_until 60 "a cooperative revoke on instance 1" revoked
wait "$PROD" || fail "producer 0 exited $?"

# 2. kill -9 instance 1 while it consumes; restart it on its state dir
produce_step 1
a1=$(metric_of 1 piperec_batches_acked_total)
wait_until 60 "instance 1 delivering after the rebalance" acked 1 "$a1"
kill -9 "$RUN_1"
wait "$RUN_1" 2>/dev/null || true
wait "$PROD" || fail "producer 1 exited $?"
ports() { grep -c "http on port" "$T/r1.err" || true; }
restarted() { [ "$(ports)" -gt 1 ]; }
start_replica 1
wait_until 60 "instance 1's http port after the restart" restarted
grep -q "epoch 2 " "$T/r1.err" || fail "instance 1's restart is not epoch 2"
produce_step 2
wait "$PROD" || fail "producer 2 exited $?"

out=$($PY "$JF" check --bootstrap "$B" --topic b1 --topic b2 --input "$T/in0.jsonl" \
    --input "$T/in1.jsonl" --input "$T/in2.jsonl" --timeout 120 2> "$T/check.err") ||
    fail "check: $(cat "$T/check.err")"
case "$out" in
*" b1=0 "* | *" b2=0;"*) fail "an instance delivered no rows: $out" ;;
esac
for i in 1 2; do kill -TERM "$(eval echo "\$RUN_$i")"; done
for i in 1 2; do wait "$(eval echo "\$RUN_$i")" || fail "instance $i exited $?"; done
echo "2 instances, vocab_log, rebalance + kill -9 (JSON, $NROWS events): $out; $(( $(ms) - t_start )) ms"
echo "test_vocab_log_rebalance_json: ok"
