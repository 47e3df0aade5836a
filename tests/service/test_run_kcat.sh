#!/bin/sh
# test_run_kcat.sh — `piperec run` with real clients around it:
#   piperec broker (mock cluster)  <- kcat produces the Criteo sample
#   piperec run --config           -> piperec consume --output (npy)
#   curl /metrics | promtool check metrics, /healthz, /readyz, /v1/status
#   a malformed line lands in the dead-letter topic (read with kcat)
#   the streamed arrays equal `piperec process` on the same lines (numpy)
#   SIGTERM drains and exits 0; a bad config (or --set) exits 2 naming the key;
#   the broker's address comes from --set, not the file.
# Env (from pr_script_test): PIPEREC, PR_TEST_DATA, PR_TMP.
set -eu
T="$PR_TMP"
DATA="$PR_TEST_DATA/criteo_sample_100.tsv"
PY=/usr/bin/python3
fail() { echo "FAIL: $*" >&2; for f in "$T"/*.err; do echo "--- $f"; tail -20 "$f"; done >&2; exit 1; }
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# Wait (bounded) until a command succeeds.
wait_until() { # seconds, description, command...
    n=$(( $1 * 10 )); what=$2; shift 2
    while ! "$@" >/dev/null 2>&1; do
        n=$((n - 1)); [ $n -gt 0 ] || fail "timed out waiting for $what"
        sleep 0.1
    done
}

# 1. a bad config exits 2 and names the key
cat > "$T/bad.yaml" <<'Y'
pipelines:
  - name: p
    source: { kafka: { topics: [events], properties: { bootstrap.servers: "127.0.0.1:1" } } }
    batch: { size: abc }
    sinks: { trainer: { listen: "127.0.0.1:0" } }
Y
rc=0; "$PIPEREC" run --config "$T/bad.yaml" 2> "$T/bad.err" || rc=$?
[ "$rc" -eq 2 ] || fail "bad config: exit $rc, expected 2"
grep -q "batch.size" "$T/bad.err" || fail "bad config message does not name batch.size: $(cat "$T/bad.err")"
# ... and so does a bad --set
rc=0; "$PIPEREC" run --config "$T/bad.yaml" --set 'pipelines[p].batch.size=64' \
    --set 'engine.threads=0' --check 2> "$T/bad_set.err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "engine.threads: must be between 1 and 64, got 0" "$T/bad_set.err" \
    && ! grep -q "batch.size" "$T/bad_set.err" || fail "--set: exit $rc, $(cat "$T/bad_set.err")"

# 2. broker
mkfifo "$T/broker.fifo"
"$PIPEREC" broker --partitions 1 --topics events,events-dlq > "$T/broker.fifo" 2> "$T/broker.err" &
pids="$pids $!"
exec 3< "$T/broker.fifo"
read -r first <&3 || fail "broker printed nothing"
B="${first#bootstrap=}"

# 3. piperec run
cat > "$T/run.yaml" <<Y
pipelines:
  - name: p
    source:
      kafka:
        topics: [events]
        group.id: run-test
        properties:
          bootstrap.servers: "127.0.0.1:1"   # the broker's address comes from --set
          auto.offset.reset: earliest
          session.timeout.ms: 4000
          heartbeat.interval.ms: 300
          fetch.wait.max.ms: 10
      format: criteo_tsv
      dead_letter_topic: events-dlq
    batch: { size: 16, max_delay_ms: 50 }
    sinks:
      trainer: { listen: "127.0.0.1:0" }
    state: { dir: "$T/state" }
http: { listen: "127.0.0.1:0" }
hot: { top_k: 128 }
log: { level: info }
Y
SET="pipelines[*].source.kafka.properties.bootstrap.servers=$B"
"$PIPEREC" run --config "$T/run.yaml" --set "$SET" --check | grep -q ok || fail "--check"
"$PIPEREC" run --config "$T/run.yaml" --set "$SET" 2> "$T/run.err" &
RUN=$!
pids="$pids $RUN"
wait_until 20 "the http port in the log" grep -q "http on port" "$T/run.err"
HP=$(sed -n 's/.*http on port \([0-9]*\).*/\1/p' "$T/run.err" | head -1)
TP=$(sed -n 's/.*trainers connect to port \([0-9]*\).*/\1/p' "$T/run.err" | head -1)
[ -n "$HP" ] && [ -n "$TP" ] || fail "no ports in the log"
U="http://127.0.0.1:$HP"
curl -sf "$U/healthz" | grep -q ok || fail "/healthz"

# 4. kcat produces the sample plus one malformed line
kcat -b "$B" -P -t events -l "$DATA"
printf 'user-7|1\t2\t3\n' | kcat -b "$B" -P -t events -K '|'   # keyed: its dead letter keeps the key
printf 'tomb-1|\n' | kcat -b "$B" -P -t events -K '|' -Z       # a tombstone (null value)
good=$(grep -c . "$DATA")

# 5. a trainer (piperec consume) writes what it gets as npy
"$PIPEREC" consume --connect "127.0.0.1:$TP" --pipeline p --output "$T/stream" \
    --idle-timeout-ms 3000 --quiet > "$T/consume.out" 2> "$T/consume.err" &
CONS=$!
pids="$pids $CONS"
wait_until 30 "/readyz" curl -sf "$U/readyz"
wait_until 30 "all records consumed" sh -c \
    "curl -sf '$U/metrics' | grep -q '^piperec_messages_in_total{pipeline=\"p\"} $((good + 2))\$'"
wait "$CONS" || fail "piperec consume failed: $(cat "$T/consume.err")"

# 6. metrics: promtool-clean and with the expected figures
curl -sf "$U/metrics" > "$T/metrics.txt"
promtool check metrics < "$T/metrics.txt" || fail "promtool check metrics"
grep -q '^piperec_rejected_records_total{pipeline="p",reason="field_count"} 1$' "$T/metrics.txt" \
    || fail "the malformed line is not counted"
grep -q '^piperec_rejected_records_total{pipeline="p",reason="empty"} 1$' "$T/metrics.txt" \
    || fail "the tombstone is not counted"
grep -q '^piperec_build_info{version=' "$T/metrics.txt" || fail "no build info"
curl -sf "$U/v1/status" | $PY -c '
import json, sys
s = json.load(sys.stdin)
p = s["pipelines"][0]
assert s["healthy"] and s["ready"], s
assert p["name"] == "p" and p["backend"] == "cpu", p
assert p["assignment"] and p["assignment"][0]["topic"] == "events", p
f = p["freshness_seconds"]  # the mean beside the bucket-bound quantiles
assert f["event_to_emit_mean"] is None or f["event_to_emit_mean"] >= 0, f
assert sum(p["vocab_sizes"].values()) > 0, p
print("status ok: %d records in, %d batches" % (p["records_in"], p["batches_emitted"]))
' || fail "/v1/status"

# hot sets: GET /v1/hot and the coverage metric (hot.top_k 128 above)
curl -sf "$U/v1/hot?pipeline=p&column=C1&k=5" | $PY -c '
import json, sys
h = json.load(sys.stdin)
assert h["pipeline"] == "p" and h["column"] == "C1" and h["k"] == 5, h
assert 1 <= len(h["items"]) <= 5 and h["rows_observed"] > 0, h
shares = [i["share"] for i in h["items"]]
assert shares == sorted(shares, reverse=True) and 0 < h["coverage"] <= 1.0 + 1e-9, h
' || fail "/v1/hot"
code=$(curl -s -o /dev/null -w '%{http_code}' "$U/v1/hot?pipeline=p&column=C1&k=0")
[ "$code" = 400 ] || fail "/v1/hot with k=0 answered $code, want 400"
code=$(curl -s -o /dev/null -w '%{http_code}' "$U/v1/hot?pipeline=nope&column=C1")
[ "$code" = 404 ] || fail "/v1/hot for an unknown pipeline answered $code, want 404"
grep -q '^piperec_hot_coverage_ratio{pipeline="p",column="C1",k="100"} ' "$T/metrics.txt" \
    || fail "no hot coverage metric"

# 7. the dead letter (produced asynchronously: read again for up to 10 s, as
# a loaded machine can delay its delivery past this point; once seen, exactly
# one)
i=0
while :; do
    kcat -b "$B" -C -t events-dlq -o beginning -e -q -f '%k|%S|%h|%s\n' > "$T/dlq.txt"
    [ "$(grep -c . "$T/dlq.txt")" -ge 2 ] || [ $i -ge 20 ] && break
    i=$((i + 1)); sleep 0.5
done
[ "$(grep -c . "$T/dlq.txt")" -eq 2 ] || fail "dead-letter topic: $(cat "$T/dlq.txt")"
grep "^user-7|" "$T/dlq.txt" | grep -q "piperec-reason=field_count" \
    || fail "dead letter without the source message's key or reason: $(cat "$T/dlq.txt")"
# the tombstone's letter is a tombstone too (kcat %S: -1 for a null value)
grep "^tomb-1|" "$T/dlq.txt" | grep -q "^tomb-1|-1|.*piperec-reason=empty" \
    || fail "the tombstone's dead letter: $(cat "$T/dlq.txt")"

# 8. SIGTERM drains and exits 0
kill -TERM "$RUN"
rc=0; wait "$RUN" || rc=$?
[ "$rc" -eq 0 ] || fail "piperec run exited $rc after SIGTERM"
ls "$T/state"/p.vocab > /dev/null || fail "no vocabulary snapshot in state.dir"

# 9. streaming == offline on the same lines (1 partition)
"$PIPEREC" process --config "$T/run.yaml" --input "$DATA" --output "$T/offline" --no-progress \
    > "$T/process.out" 2> "$T/process.err" || fail "piperec process"
$PY - "$T/stream" "$T/offline" <<'PYEOF'
import sys
import numpy as np
s, o = sys.argv[1], sys.argv[2]
for name in ("labels", "dense", "sparse"):
    a = np.load("%s/%s.npy" % (s, name))
    b = np.load("%s/%s.npy" % (o, name))
    if a.shape != b.shape or a.dtype != b.dtype:
        sys.exit("%s: stream %s %s vs offline %s %s" % (name, a.shape, a.dtype, b.shape, b.dtype))
    if name == "dense":
        same = np.array_equal(a.view(np.uint32), b.view(np.uint32))  # bit for bit
    else:
        same = np.array_equal(a, b)
    if not same:
        sys.exit("%s differs between streaming and offline" % name)
print("streaming == offline: %d rows" % len(np.load(s + "/labels.npy")))
PYEOF
echo "test_run_kcat: ok"
