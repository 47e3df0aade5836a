#!/bin/sh
# test_serve_log.sh — `piperec serve --from-log` follows a shared vocabulary
# log as a replica does, never writing it (docs/serving.md): an id a replica
# gives an index reaches serving without a reload.
#
# JSON events (the clickstream of `piperec gen`), a declared schema with
# vocab_log. `piperec process` over the first half is imported into the log
# (`vocab import`); `serve --from-log` then answers the second half's events
# as `piperec transform` does with the first half's vocabulary (their new ids
# OOV). A replica streams the second half; once it caught up, serve answers
# the second half as `transform` with the log's whole vocabulary
# (`vocab export --from-log`) does: its ids known, index for index;
# /v1/status and /metrics show the log position and no lag; SIGTERM exits 0.
. "$(dirname "$0")/fault_lib.sh"

N=2000
start_broker 1 events,vocab:1
"$PIPEREC" gen --format json --rows $N --seed 31 --output "$T/all.jsonl" 2> /dev/null || fail gen
head -n $((N / 2)) "$T/all.jsonl" > "$T/first.jsonl"
tail -n $((N - N / 2)) "$T/all.jsonl" > "$T/second.jsonl"
cat > "$T/r1.yaml" <<Y
pipelines:
  - name: p
    source:
      kafka:
        topics: [events]
        group.id: served
        properties:
          bootstrap.servers: "$B"
          auto.offset.reset: earliest
          session.timeout.ms: "3000"
          heartbeat.interval.ms: "500"
          fetch.wait.max.ms: "10"
      format: json
    schema:
      event_time: { path: ts, unit: ms }
      labels:
        - { name: click, path: label.click }
      dense:
        - { name: price, path: item.price, default: 0, ops: [ log1p ] }
      sparse:
        - { name: user, path: user.id, ops: [vocab] }
        - { name: item, path: item.id, ops: [vocab] }
        - { name: history, path: history, list: { max_len: 10, keep: last }, ops: [vocab],
            table: item }
    transform:
      vocab: { profile: default }
    batch: { size: 256, max_delay_ms: 50 }
    sinks:
      files: { dir: "$T/batches1" }
    state: { dir: "$T/state1", checkpoint_interval_s: 2 }
    vocab_log: { topic: vocab }
http: { listen: "127.0.0.1:0" }
log: { level: info }
Y
"$PIPEREC" process --config "$T/r1.yaml" --input "$T/first.jsonl" --output "$T/off1" \
    --no-progress > /dev/null 2> "$T/off1.err" || fail "process: $(cat "$T/off1.err")"
"$PIPEREC" vocab import --config "$T/r1.yaml" --input "$T/off1/vocab" 2> "$T/import.err" ||
    fail "import: $(cat "$T/import.err")"

"$PIPEREC" serve --config "$T/r1.yaml" --from-log --listen 127.0.0.1:0 2> "$T/serve.err" &
SERVE=$!; pids="$pids $SERVE"
sport() { sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$T/serve.err"; }
has_sport() { [ -n "$(sport)" ]; }
wait_until 60 "serve listening" has_sport
post() { curl -sf --data-binary @"$1" "http://127.0.0.1:$(sport)/v1/transform"; }
transform() { "$PIPEREC" transform --config "$T/r1.yaml" --vocab "$1" --input "$2" 2>/dev/null; }

post "$T/second.jsonl" > "$T/served0.jsonl" || fail "POST before the replica"
transform "$T/off1" "$T/second.jsonl" > "$T/want0.jsonl"
cmp -s "$T/served0.jsonl" "$T/want0.jsonl" ||
    fail "serve --from-log (the imported log) != transform with the imported vocabulary"
grep -q '"user":1,' "$T/served0.jsonl" || fail "no unseen user in the second half"
end0=$(curl -sf "http://127.0.0.1:$(sport)/v1/status" |
    $PY -c 'import json,sys; print(json.load(sys.stdin)["vocab"]["log_end"])')

# A replica streams the second half: the log grows.
"$PIPEREC" produce --bootstrap "$B" --topic events --format json --input "$T/second.jsonl" \
    > /dev/null 2> "$T/produce.err" || fail "produce: $(cat "$T/produce.err")"
start_replica 1
wait_until 60 "replica 1's http port" has_port 1
rows_in() { scrape 1 | awk '$1 == "piperec_engine_rows_total{pipeline=\"p\"}" { print $2 }'; }
all_rows() { [ "$(rows_in)" = "$((N - N / 2))" ]; }
wait_until 120 "the second half through the replica" all_rows
wait_until 30 "replica 1 caught up with the log" lag_zero 1
kill -TERM "$RUN_1"
wait "$RUN_1" || fail "replica 1 exited $?"
"$PIPEREC" vocab export --config "$T/r1.yaml" --from-log --output "$T/logvocab" \
    2> "$T/export.err" || fail "export --from-log: $(cat "$T/export.err")"
status() { curl -sf "http://127.0.0.1:$(sport)/v1/status"; }
serve_caught_up() {
    status | $PY -c 'import json,sys; v=json.load(sys.stdin)["vocab"]; sys.exit(v["log_offset"] < v["log_end"])'
}
wait_until 20 "serve applied the log" serve_caught_up
post "$T/second.jsonl" > "$T/served1.jsonl" || fail "POST after the replica"
transform "$T/logvocab" "$T/second.jsonl" > "$T/want1.jsonl"
cmp -s "$T/served1.jsonl" "$T/want1.jsonl" ||
    fail "serve --from-log after the replica != transform with the log's vocabulary: $(diff "$T/served1.jsonl" "$T/want1.jsonl" | head -4)"
! grep -q '"user":1,' "$T/served1.jsonl" || fail "users still OOV after the replica"
cmp -s "$T/served0.jsonl" "$T/served1.jsonl" && fail "nothing changed after the replica"
status | $PY -c '
import json, sys
st = json.load(sys.stdin)
v = st["vocab"]
assert v["source"] == "log vocab", v
assert v["log_offset"] == v["log_end"] > int(sys.argv[1]), (v, sys.argv[1])
assert st["events"] == 2 * int(sys.argv[2]), st
' "$end0" "$((N - N / 2))" || fail "status: $(status)"
curl -sf "http://127.0.0.1:$(sport)/metrics" > "$T/serve.metrics" || fail "metrics"
grep -q '^piperec_serve_vocab_log_lag_records 0$' "$T/serve.metrics" ||
    fail "log lag: $(grep vocab_log "$T/serve.metrics")"
promtool check metrics < "$T/serve.metrics" > "$T/promtool.out" 2>&1 ||
    fail "promtool: $(cat "$T/promtool.out")"
kill -TERM "$SERVE"
wait "$SERVE" || fail "serve exited $?"
grep -q "stopped after $((2 * (N - N / 2))) events" "$T/serve.err" || fail "serve: $(cat "$T/serve.err")"
echo ok
