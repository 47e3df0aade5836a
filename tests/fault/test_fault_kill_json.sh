#!/bin/sh
# test_fault_kill_json.sh — issue 20: `kill -9` of `piperec run` under load
# with a declared schema (JSON events, a list feature, a missing id),
# restarted each time on the same state dir; test_fault_kill.sh's Criteo
# scenario for the jagged path.
#
# One partition, so the stream order is the file order and an uninterrupted
# run is `piperec process` on the same lines. A producer writes the events
# in KILLS + 1 steps (rate-limited); each run is killed while it consumes,
# at a different point after its first batch, and the next starts on the
# same state dir (journal + snapshot). Batches go to the Kafka sink (acked by
# delivery reports, so a kill loses no acknowledged batch and replays the
# rest). json_fault.py check then reads every batch of every run and proves:
# nothing lost, every delivery of a row with the indices of the uninterrupted
# run (every list element included), one index per value per feature,
# (epoch, seq) strictly increasing, KILLS + 1 epochs.
. "$(dirname "$0")/fault_lib.sh"

KILLS=3
STEP=2500
NROWS=$(( (KILLS + 1) * STEP ))
JF="$FAULT_DIR/json_fault.py"
start_broker 1 events,batches
STATE="$T/state"
cat > "$T/run.yaml" <<Y
pipelines:
  - name: p
    source:
      kafka:
        topics: [events]
        group.id: fault-json
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
    batch: { size: 256, max_delay_ms: 50 }
    sinks:
      kafka: { topic: batches }
    state: { dir: "$STATE", checkpoint_interval_s: 2 }
http: { listen: "127.0.0.1:0" }
log: { level: info }
Y
sed -i "s|      kafka: { topic: batches }|      kafka: { topic: batches, properties: { bootstrap.servers: \"$B\" } }|" "$T/run.yaml"
"$PIPEREC" run --config "$T/run.yaml" --check | grep -q ok || fail "--check: $(cat "$T/run.yaml")"

# A batch of this run is in Kafka (acked by its delivery report).
acked() { [ "$(metric piperec_batches_acked_total)" -gt 0 ]; }
t_start=$(ms)
inputs=""
i=0
while [ $i -le $KILLS ]; do
    $PY "$JF" gen $(( i * STEP )) $STEP "$T/in$i.jsonl"
    inputs="$inputs --input $T/in$i.jsonl"
    "$PIPEREC" produce --bootstrap "$B" --topic events --format json --input "$T/in$i.jsonl" \
        --rate 2500 > "$T/produce$i.out" 2> "$T/produce$i.err" &
    PROD=$!; pids="$pids $PROD"
    start_run "run$i"
    grep -q "epoch $(( i + 1 )) " "$T/run$i.err" || fail "run $i is not epoch $(( i + 1 ))"
    if [ $i -eq $KILLS ]; then
        wait "$PROD" || fail "producer $i exited $?"
        break
    fi
    # Kill once this run delivers, plus a different delay each time.
    wait_until 60 "run $i's first batch in Kafka" acked
    sleep "0.$(( (i * 3) % 10 ))"
    kill -9 "$RUN"
    wait "$RUN" 2>/dev/null || true
    wait "$PROD" || fail "producer $i exited $?"
    i=$((i + 1))
done

cat "$T"/in*.jsonl > "$T/all.jsonl"
"$PIPEREC" process --config "$T/run.yaml" --input "$T/all.jsonl" --output "$T/offline" \
    --no-progress > /dev/null 2> "$T/process.err" || fail "piperec process"
# shellcheck disable=SC2086
out=$($PY "$JF" check --bootstrap "$B" --topic batches $inputs --offline "$T/offline" \
    --epochs-min $(( KILLS + 1 )) --timeout 120 2> "$T/check.err") ||
    fail "check: $(cat "$T/check.err")"
kill -TERM "$RUN"
wait "$RUN" || fail "last run exited $?"
echo "kill -9 x$KILLS (JSON, $NROWS events): $out; $(( $(ms) - t_start )) ms"
echo "test_fault_kill_json: ok"
