#!/bin/sh
# test_run_json.sh — `piperec run` on JSON events through a declared schema
# (examples/clickstream.yaml's schema, source.format json):
#   piperec gen --format json + one bad line per reject reason (wrong_type
#   three times: a string label, a float id, a whole float id) + "42" and 42
#   as user ids (two ids, streaming and offline alike)
#   piperec produce --format json (1 partition)   -> piperec run (files sink)
#   every record is counted: rows in, rejects by reason in /metrics, each bad
#   line in the dead-letter topic with its piperec-reason header
#   a second run on the same state dir, and vocab import, are refused (lock)
#   SIGTERM drains and exits 0; the streamed vocabularies (piperec vocab
#   export of the state dir) equal `piperec process` on the same lines, and
#   offline rejects the same lines for the same reasons; `vocab lookup` of
#   every event from the state dir equals the lookup from the offline output
#   a declared schema with source.format criteo_tsv is refused (exit 2)
#   hot sets per vocab feature: /v1/hot counts every element of a list
# Env (from pr_script_test): PIPEREC, PR_SOURCE_DIR, PR_TMP.
set -eu
T="$PR_TMP"
N=3000
fail() { echo "FAIL: $*" >&2; for f in "$T"/*.err; do echo "--- $f"; tail -20 "$f"; done >&2; exit 1; }
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

wait_until() { # seconds, description, command...
    n=$(( $1 * 10 )); what=$2; shift 2
    while ! "$@" >/dev/null 2>&1; do
        n=$((n - 1)); [ $n -gt 0 ] || fail "timed out waiting for $what"
        sleep 0.1
    done
}

# 1. events: the generated clickstream, then one bad line per reason
"$PIPEREC" gen --format json --rows $N --seed 3 --output "$T/events.jsonl"
{
    printf '%s\n' '{"user": {"id": "u1"} "x": 1}'                # not_json
    printf '%s\n' '[1, 2]'                                        # not_object
    printf '%s\n' '{"user": {"id": "u1"'                          # truncated
    printf '{"user": {"id": "\377"}}\n'                            # bad_utf8
    printf '%s\n' '{"user": {"id": "a\q"}}'                       # bad_escape
    printf '%s\n' '{"label": {"click": 1e400}}'                   # number_out_of_range
    printf '%s\n' '{"label": {"click": "yes"}}'                   # wrong_type
    printf '%s\n' '{"ts": "noon", "label": {"click": 1}}'         # bad_time (event_time in ms)
    printf '%s\n' '{"label": {"click": 1}, "user": {"id": 4.5}}'  # wrong_type: a float id
    printf '%s\n' '{"label": {"click": 1}, "item": {"id": 4.0}}'  # wrong_type: whole, still no id
} > "$T/bad.jsonl"
BAD=10
# the id rule: "42" and 42 are two ids (a string hashed, an integer its bits),
# kept alike streaming and offline (the vocabularies are compared in 6.)
{
    printf '%s\n' '{"label": {"click": 1}, "user": {"id": "42"}}'
    printf '%s\n' '{"label": {"click": 0}, "user": {"id": 42}}'
} > "$T/ids.jsonl"
GOOD=2
cat "$T/events.jsonl" "$T/bad.jsonl" "$T/ids.jsonl" > "$T/all.jsonl"

# 2. broker and topic
mkfifo "$T/broker.fifo"
"$PIPEREC" broker --partitions 1 --topics clicks,clicks-dlq > "$T/broker.fifo" 2> "$T/broker.err" &
pids="$pids $!"
exec 3< "$T/broker.fifo"
read -r first <&3 || fail "broker printed nothing"
B="${first#bootstrap=}"

# 3. the example's schema, streamed to a files sink
sed -n '/^    schema:/,/^    transform:/p' "$PR_SOURCE_DIR/examples/clickstream.yaml" \
    | sed '$d' > "$T/schema.yaml"
grep -q "history" "$T/schema.yaml" || fail "could not take the schema from the example"
cat > "$T/run.yaml" <<Y
pipelines:
  - name: p
    source:
      kafka:
        topics: [clicks]
        group.id: run-json
        properties:
          bootstrap.servers: "$B"
          auto.offset.reset: earliest
          session.timeout.ms: 4000
          heartbeat.interval.ms: 300
          fetch.wait.max.ms: 10
      format: json
      dead_letter_topic: clicks-dlq
$(cat "$T/schema.yaml")
    transform:
      vocab: { profile: default }
    batch: { size: 256, max_delay_ms: 50 }
    sinks:
      files: { dir: "$T/batches" }
    state: { dir: "$T/state" }
hot: { top_k: 16 }
http: { listen: "127.0.0.1:0" }
log: { level: info }
Y
"$PIPEREC" run --config "$T/run.yaml" --check | grep -q ok || fail "--check: $(cat "$T/run.yaml")"
sed 's/format: json/format: criteo_tsv/' "$T/run.yaml" > "$T/tsv.yaml"
rc=0; "$PIPEREC" run --config "$T/tsv.yaml" --check > /dev/null 2> "$T/tsv.err" || rc=$?
[ "$rc" -eq 2 ] || fail "declared schema with criteo_tsv: exit $rc, expected 2"
grep -q "source.format" "$T/tsv.err" || fail "refusal does not name source.format"

"$PIPEREC" run --config "$T/run.yaml" 2> "$T/run.err" &
RUN=$!
pids="$pids $RUN"
wait_until 20 "the http port in the log" grep -q "http on port" "$T/run.err"
HP=$(sed -n 's/.*http on port \([0-9]*\).*/\1/p' "$T/run.err" | head -1)
U="http://127.0.0.1:$HP"

"$PIPEREC" produce --bootstrap "$B" --topic clicks --format json --input "$T/all.jsonl" \
    > "$T/produce.out" 2> "$T/produce.err" || fail "produce"
wait_until 60 "all records consumed" sh -c \
    "curl -sf '$U/metrics' | grep -q '^piperec_messages_in_total{pipeline=\"p\"} $((N + BAD + GOOD))\$'"
wait_until 30 "rows through the engine" sh -c \
    "curl -sf '$U/metrics' | grep -q '^piperec_engine_rows_total{pipeline=\"p\"} $((N + GOOD))\$'"

# 4. rejects by reason, and their dead letters
curl -sf "$U/metrics" > "$T/metrics.txt"
for r in not_json not_object truncated bad_utf8 bad_escape number_out_of_range wrong_type=3 bad_time; do
    c=1; case $r in *=*) c=${r#*=}; r=${r%=*};; esac
    grep -q "^piperec_rejected_records_total{pipeline=\"p\",reason=\"$r\"} $c\$" "$T/metrics.txt" \
        || fail "reason $r not counted $c times: $(grep rejected_records "$T/metrics.txt")"
done
grep -q '^piperec_records_in_total{pipeline="p"} '$((N + GOOD))'$' "$T/metrics.txt" || fail "records_in"
# /v1/status shows where each operator of the declared schema runs (issue 20 item 6)
curl -sf "$U/v1/status" > "$T/status.json"
/usr/bin/python3 - "$T/status.json" <<'PY' || fail "/v1/status placement: $(cat "$T/status.json")"
import json, sys
p = json.load(open(sys.argv[1]))["pipelines"][0]
feats = {f["name"]: f for f in p["features"]}
ops = [o for f in feats.values() for o in f["ops"]]
assert ops and all(o["on"] == "cpu" for o in ops), ops
assert feats["history"]["kind"] == "list", feats["history"]
assert [o["op"] for o in feats["history"]["ops"]][-1] == "vocab", feats["history"]
PY
# hot sets per vocab feature (issue 20): the history list counts every
# element (more than one per record), a single id one per kept record; a
# feature without vocab has none
curl -sf "$U/v1/hot?pipeline=p&column=history&k=5" > "$T/hot_history.json" || fail "/v1/hot history"
curl -sf "$U/v1/hot?pipeline=p&feature=user&k=5" > "$T/hot_user.json" || fail "/v1/hot user"
/usr/bin/python3 - "$T/hot_history.json" "$T/hot_user.json" $((N + GOOD)) <<'PY' \
    || fail "/v1/hot: $(cat "$T/hot_history.json" "$T/hot_user.json")"
import json, sys
h, u, n = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
assert h["column"] == "history" and len(h["items"]) == 5, h
assert h["rows_observed"] > n, (h["rows_observed"], n)
assert u["rows_observed"] == n, (u["rows_observed"], n)
PY
code=$(curl -s -o /dev/null -w '%{http_code}' "$U/v1/hot?pipeline=p&column=tags&k=5")
[ "$code" = 404 ] || fail "/v1/hot for tags (hash, no vocab): HTTP $code"
grep -q '^piperec_hot_coverage_ratio{pipeline="p",column="history",k="100"}' "$T/metrics.txt" \
    && fail "coverage at k=100 with hot.top_k 16"
wait_until 30 "the dead letters" sh -c \
    "[ \$(kcat -b '$B' -C -t clicks-dlq -o beginning -e -q -f '%h\n' | grep -c piperec-reason) -eq $BAD ]"
kcat -b "$B" -C -t clicks-dlq -o beginning -e -q -f '%h\n' > "$T/dlq.txt"
grep -q "piperec-reason=bad_time" "$T/dlq.txt" || fail "no bad_time dead letter"
grep -q "piperec-detail=event_time (ts)" "$T/dlq.txt" || fail "the bad_time detail names no feature: $(cat "$T/dlq.txt")"

# one process per pipeline's state dir: a second `run` and a `vocab import`
# are refused while this one holds it (the lock names the holder's pid)
rc=0; "$PIPEREC" run --config "$T/run.yaml" > /dev/null 2> "$T/run2.err" || rc=$?
[ "$rc" -eq 1 ] || fail "a second run on the same state dir: exit $rc, expected 1"
grep -q "state/p.lock is locked by another process, pid $RUN" "$T/run2.err" \
    || fail "second run's message: $(cat "$T/run2.err")"
rc=0; "$PIPEREC" vocab import --config "$T/run.yaml" --pipeline p --input "$T/run.yaml.d" --force \
    > /dev/null 2> "$T/import.err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "stop the service first" "$T/import.err" \
    || fail "vocab import under a running service: exit $rc: $(cat "$T/import.err")"

# 5. SIGTERM drains and exits 0
kill -TERM "$RUN"
rc=0; wait "$RUN" || rc=$?
[ "$rc" -eq 0 ] || fail "piperec run exited $rc after SIGTERM"

# 6. streaming == offline: the same vocabularies (one partition: same order)
"$PIPEREC" vocab export --config "$T/run.yaml" --pipeline p --output "$T/vstream" \
    > /dev/null 2> "$T/vexport.err" || fail "vocab export"
"$PIPEREC" process --config "$T/run.yaml" --input "$T/all.jsonl" --output "$T/offline" \
    --no-progress > "$T/process.out" 2> "$T/process.err" || fail "piperec process"
for f in "$T"/offline/vocab/*.tsv; do
    name=$(basename "$f")
    cmp -s "$f" "$T/vstream/$name" || fail "vocabulary $name differs between streaming and offline"
done
[ "$(ls "$T/vstream" | wc -l)" -eq "$(ls "$T/offline/vocab" | wc -l)" ] || fail "vocab files"
# ids -> indices from the service's own state dir (snapshot + journal) equal
# those from the offline output, for every event's user and history
for f in user history; do
    "$PIPEREC" vocab lookup --config "$T/run.yaml" --feature $f --events --ids "$T/all.jsonl" \
        > "$T/lk-stream-$f.tsv" 2> "$T/lookup.err" || fail "vocab lookup --state $f"
    "$PIPEREC" vocab lookup --config "$T/run.yaml" --feature $f --events --ids "$T/all.jsonl" \
        --input "$T/offline" > "$T/lk-offline-$f.tsv" 2>> "$T/lookup.err" \
        || fail "vocab lookup --input $f"
    cmp -s "$T/lk-stream-$f.tsv" "$T/lk-offline-$f.tsv" || fail "lookup $f: state dir != offline"
    grep -q "	known" "$T/lk-stream-$f.tsv" || fail "lookup $f: nothing known"
done
# per-stage times, as the Criteo path prints them (issue 20)
grep -Eq "^piperec process: thread-seconds per stage: decode [0-9]+\.[0-9]{2}, engine [0-9]+\.[0-9]{2}, write [0-9]+\.[0-9]{2}, idle [0-9]+\.[0-9]{2}, vocab export [0-9]+\.[0-9]{2}\$" \
    "$T/process.err" || fail "no stage times: $(cat "$T/process.err")"
# offline rejects the same lines for the same reasons (the summary line, rejects.tsv)
grep -q "$((N + GOOD)) rows, $BAD rejected (not_json=1 not_object=1 truncated=1 bad_utf8=1 bad_escape=1 number_out_of_range=1 wrong_type=3 bad_time=1)" \
    "$T/process.err" || fail "offline rejects differ: $(cat "$T/process.err")"
[ "$(cut -f2 "$T/offline/rejects.tsv" | sort | uniq -c | awk '{print $2 "=" $1}' | sort | tr '\n' ' ')" = \
  "bad_escape=1 bad_time=1 bad_utf8=1 not_json=1 not_object=1 number_out_of_range=1 truncated=1 wrong_type=3 " ] \
    || fail "rejects.tsv reasons: $(cut -f2 "$T/offline/rejects.tsv" | tr '\n' ' ')"
echo "test_run_json: ok ($N events, $BAD rejects, $(ls "$T/vstream" | wc -l) vocabularies equal)"
