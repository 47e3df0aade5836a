#!/bin/sh
# test_avro_registry.sh — `piperec run` on registry-framed Avro (issue 23),
# against a test schema registry (avro_registry.py, bearer token):
#   A: N clickstream events under schema id 1 (examples/clickstream.avsc)
#      + 2 events framed with id 99, which the registry does not know
#      -> N rows, 2 rejects unknown_schema_id (in /metrics and the DLQ)
#   registry down; B: N events under id 2 (clickstream_v2.avsc: context
#      dropped, fields added and reordered: schema evolution mid-stream)
#      -> nothing rejected or lost: decoding waits (piperec_decode_waiting 1,
#      piperec_decode_waits_total > 0, /readyz "waits to decode")
#   registry up but slower than timeout_ms -> still waiting, nothing rejected
#   registry up again (same port) -> all 2N rows, ready again
#   the registry client's families count fetches, 404s, refused, timeouts,
#   the cached schemas
#   streaming == offline: the streamed vocabularies equal `piperec process`
#   of the same events as JSON lines (B without context); offline Avro (a file
#   of framed records from `piperec gen --format avro`, ids 1 and 2, through
#   the registry with basic auth and cache_max 1) writes byte-identical .npy
#   files (and vocabularies, rejects.tsv) to offline JSON; a zero-length record
#   is `empty`; an Avro container file is refused by its magic, and the
#   converter in docs/formats.md turns it into records that process the same.
# Env (from pr_script_test): PIPEREC, PR_SOURCE_DIR, PR_TMP.
set -eu
T="$PR_TMP"
N=1500
PY=/usr/bin/python3
REG="$PR_SOURCE_DIR/tests/ingest/avro_registry.py"
V1="$PR_SOURCE_DIR/examples/clickstream.avsc"
V2="$PR_SOURCE_DIR/tests/ingest/clickstream_v2.avsc"
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
metric() { curl -sf "$U/metrics" | sed -n "s/^$1{pipeline=\"p\"${2:-}} //p"; }

# 1. events, schemas, the registry
mkdir -p "$T/reg"
cp "$V1" "$T/reg/1.avsc"
cp "$V2" "$T/reg/2.avsc"
echo secret > "$T/token"
echo pa55 > "$T/password"
"$PIPEREC" gen --format json --rows $((2 * N)) --seed 9 --output "$T/all.jsonl"
head -n $N "$T/all.jsonl" > "$T/a.jsonl"
tail -n +$((N + 1)) "$T/all.jsonl" > "$T/b.jsonl"
head -n 2 "$T/a.jsonl" > "$T/u.jsonl"
# B as JSON under v2: no context
$PY -c 'import json,sys
for l in open(sys.argv[1]):
    d = json.loads(l); d.pop("context", None); print(json.dumps(d))' "$T/b.jsonl" > "$T/b2.jsonl"
cat "$T/a.jsonl" "$T/b2.jsonl" > "$T/json_equiv.jsonl"

REGPID=""
start_registry() { # port (0: any) [delay ms]
    rm -f "$T/reg.port"
    $PY "$REG" --dir "$T/reg" --port "$1" --port-file "$T/reg.port" --token secret \
        --basic "piperec:pa55" --delay-ms "${2:-0}" \
        2> "$T/registry.err" &
    REGPID=$!
    pids="$pids $REGPID"
    wait_until 10 "the registry" test -s "$T/reg.port"
}
start_registry 0
RP=$(cat "$T/reg.port")
curl -sf -H "Authorization: Bearer secret" "http://127.0.0.1:$RP/schemas/ids/1" | grep -q Click \
    || fail "registry does not answer"

# 2. broker, configs
mkfifo "$T/broker.fifo"
"$PIPEREC" broker --partitions 1 --topics clicks,clicks-dlq > "$T/broker.fifo" 2> "$T/broker.err" &
pids="$pids $!"
exec 3< "$T/broker.fifo"
read -r first <&3 || fail "broker printed nothing"
B="${first#bootstrap=}"
sed -n '/^    schema:/,/^    transform:/p' "$PR_SOURCE_DIR/examples/clickstream.yaml" \
    | sed '$d' > "$T/schema.yaml"
config() { # format lines
    cat <<Y
pipelines:
  - name: p
    source:
      kafka:
        topics: [clicks]
        group.id: run-avro
        properties:
          bootstrap.servers: "$B"
          auto.offset.reset: earliest
          session.timeout.ms: 4000
          heartbeat.interval.ms: 300
          fetch.wait.max.ms: 10
$1
      dead_letter_topic: clicks-dlq
$(cat "$T/schema.yaml")
    transform:
      vocab: { profile: default }
    batch: { size: 256, max_delay_ms: 50 }
    sinks:
      files: { dir: "$T/batches" }
    state: { dir: "$T/state" }
http: { listen: "127.0.0.1:0" }
log: { level: info }
Y
}
config "      format: avro
      schema_registry: { url: \"http://127.0.0.1:$RP/\", token_file: \"$T/token\", timeout_ms: 500 }" \
    > "$T/run.yaml"
config "      format: json" > "$T/json.yaml"
"$PIPEREC" run --config "$T/run.yaml" --check | grep -q ok || fail "--check: $(cat "$T/run.yaml")"
sed 's/schema_registry: .*/avro: { framing: plain }/' "$T/run.yaml" > "$T/bad.yaml"
rc=0; "$PIPEREC" run --config "$T/bad.yaml" --check > /dev/null 2> "$T/bad.err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "writer schema" "$T/bad.err" || fail "avro without a schema: exit $rc"

"$PIPEREC" run --config "$T/run.yaml" 2> "$T/run.err" &
RUN=$!
pids="$pids $RUN"
wait_until 20 "the http port in the log" grep -q "http on port" "$T/run.err"
HP=$(sed -n 's/.*http on port \([0-9]*\).*/\1/p' "$T/run.err" | head -1)
U="http://127.0.0.1:$HP"

# 3. A (id 1) and two messages of an unknown id
"$PIPEREC" produce --bootstrap "$B" --topic clicks --format avro --avro-schema "$V1" \
    --schema-id 1 --input "$T/a.jsonl" > "$T/produce.out" 2> "$T/produce.err" || fail "produce A"
"$PIPEREC" produce --bootstrap "$B" --topic clicks --format avro --avro-schema "$V1" \
    --schema-id 99 --input "$T/u.jsonl" > /dev/null 2> "$T/produce_u.err" || fail "produce U"
wait_until 60 "A consumed" sh -c "[ \"\$(curl -sf '$U/metrics' | sed -n 's/^piperec_engine_rows_total{pipeline=\"p\"} //p')\" = $N ]"
wait_until 20 "the unknown ids rejected" sh -c \
    "curl -sf '$U/metrics' | grep -q '^piperec_rejected_records_total{pipeline=\"p\",reason=\"unknown_schema_id\"} 2\$'"
curl -sf "$U/readyz" | grep -q "^ready" || fail "not ready after A: $(curl -s "$U/readyz")"
# the registry client's families: id 1 fetched once, id 99 asked once (404,
# then remembered), both in the cache
[ "$(metric piperec_schema_registry_fetches_total)" = 1 ] || fail "fetches $(metric piperec_schema_registry_fetches_total)"
[ "$(metric piperec_schema_registry_failures_total ',kind="404"')" = 1 ] || fail "404s"
[ "$(metric piperec_schema_registry_failures_total ',kind="refused"')" = 0 ] || fail "refused before the registry went down"
[ "$(metric piperec_schema_registry_cache_schemas)" = 2 ] || fail "cache $(metric piperec_schema_registry_cache_schemas)"
[ "$(metric piperec_schema_registry_cache_evictions_total)" = 0 ] || fail "evictions"

# 4. the registry goes down; B under a new id waits, nothing is rejected
kill "$REGPID"; wait "$REGPID" 2>/dev/null || true
"$PIPEREC" produce --bootstrap "$B" --topic clicks --format avro --avro-schema "$V2" \
    --schema-id 2 --input "$T/b.jsonl" > /dev/null 2> "$T/produce_b.err" || fail "produce B"
wait_until 30 "decoding to wait" sh -c "[ \"\$(curl -sf '$U/metrics' | sed -n 's/^piperec_decode_waiting{pipeline=\"p\"} //p')\" = 1 ]"
curl -s "$U/readyz" | grep -q "waits to decode: schema id 2" || fail "/readyz: $(curl -s "$U/readyz")"
sleep 1
[ "$(metric piperec_decode_waits_total)" -gt 1 ] || fail "decode_waits_total: $(metric piperec_decode_waits_total)"
[ "$(metric piperec_engine_rows_total)" = $N ] || fail "rows moved while waiting"
[ "$(metric piperec_schema_registry_failures_total ',kind="refused"')" -ge 1 ] || fail "refused not counted"
curl -sf "$U/metrics" | grep '^piperec_rejected_records_total{pipeline="p"' | grep -v 'unknown_schema_id' \
    | grep -v ' 0$' && fail "something was rejected while the registry was down"

# 4b. up but slower than timeout_ms (500): still waiting, still nothing rejected
start_registry "$RP" 1500
sleep 2
[ "$(metric piperec_decode_waiting)" = 1 ] || fail "not waiting on a slow registry"
curl -s "$U/readyz" | grep -q "waits to decode: .*Timeout" || fail "/readyz (slow): $(curl -s "$U/readyz")"
[ "$(metric piperec_engine_rows_total)" = $N ] || fail "rows moved on a slow registry"
[ "$(metric piperec_schema_registry_failures_total ',kind="timeout"')" -ge 1 ] || fail "timeout not counted"
kill "$REGPID"; wait "$REGPID" 2>/dev/null || true

# 5. back up on the same port: every event of B arrives
start_registry "$RP"
wait_until 60 "B consumed" sh -c "[ \"\$(curl -sf '$U/metrics' | sed -n 's/^piperec_engine_rows_total{pipeline=\"p\"} //p')\" = $((2 * N)) ]"
wait_until 10 "ready again" sh -c "curl -sf '$U/readyz' | grep -q '^ready'"
[ "$(metric piperec_decode_waiting)" = 0 ] || fail "still waiting"
[ "$(metric piperec_records_in_total)" = $((2 * N)) ] || fail "records_in $(metric piperec_records_in_total)"
[ "$(metric piperec_rejected_records_total ',reason="unknown_schema_id"')" = 2 ] || fail "unknown ids"
[ "$(metric piperec_rejected_records_total ',reason="bad_avro"')" = 0 ] || fail "bad_avro"
[ "$(metric piperec_schema_registry_fetches_total)" = 2 ] || fail "fetches after B"
[ "$(metric piperec_schema_registry_failures_total ',kind="5xx"')" = 0 ] || fail "5xx"
wait_until 30 "the dead letters" sh -c \
    "[ \$(kcat -b '$B' -C -t clicks-dlq -o beginning -e -q -f '%h\n' | grep -c 'piperec-reason=unknown_schema_id') -eq 2 ]"
kill -TERM "$RUN"
rc=0; wait "$RUN" || rc=$?
[ "$rc" -eq 0 ] || fail "piperec run exited $rc after SIGTERM"

# 6. streaming == offline JSON of the same events (vocabularies)
"$PIPEREC" vocab export --config "$T/run.yaml" --pipeline p --output "$T/vstream" \
    > /dev/null 2> "$T/vexport.err" || fail "vocab export"
"$PIPEREC" process --config "$T/json.yaml" --input "$T/json_equiv.jsonl" --output "$T/offjson" \
    --no-progress > /dev/null 2> "$T/process_json.err" || fail "process json"
for f in "$T"/offjson/vocab/*.tsv; do
    cmp -s "$f" "$T/vstream/$(basename "$f")" || fail "vocabulary $(basename "$f"): streaming Avro != offline JSON"
done

# 7. offline Avro (framed records, ids 1 and 2, through the registry) == offline JSON
"$PIPEREC" gen --format avro --avro-schema "$V1" --schema-id 1 --rows $N --seed 9 \
    --output "$T/a.avrof"
"$PIPEREC" gen --format avro --avro-schema "$V2" --schema-id 2 --rows $N --first-row $N --seed 9 \
    --output "$T/b.avrof"
cat "$T/a.avrof" "$T/b.avrof" > "$T/all.avrof"
# (basic auth this time, and a cache of one schema: ids 1 and 2 evict each other)
sed "s|token_file: \"$T/token\"|username: piperec, password_file: \"$T/password\", cache_max: 1|" \
    "$T/run.yaml" > "$T/basic.yaml"
grep -q "password_file" "$T/basic.yaml" || fail "basic.yaml"
"$PIPEREC" process --config "$T/basic.yaml" --input "$T/all.avrof" --output "$T/offavro" \
    --no-progress > /dev/null 2> "$T/process_avro.err" || fail "process avro"
grep -q "$((2 * N)) rows, 0 rejected" "$T/process_avro.err" || fail "offline avro: $(cat "$T/process_avro.err")"
n=0
for f in $(cd "$T/offjson" && find . -name '*.npy' -o -name '*.tsv' | sort); do
    cmp -s "$T/offjson/$f" "$T/offavro/$f" || fail "offline $f: Avro != JSON"
    n=$((n + 1))
done
[ $n -gt 10 ] || fail "only $n files compared"
# 8. an offline reject keeps its binary record on one line, as hex; a
# zero-length record is `empty`, as an empty Kafka message is; every record
# rejected: the outputs are written, and the exit is 1 (nothing to train on)
printf '\006\005\001\002\003\004\012\000' > "$T/bad.avrof"
rc=0
"$PIPEREC" process --config "$T/basic.yaml" --input "$T/bad.avrof" --output "$T/offbad" \
    --no-progress > /dev/null 2> "$T/process_bad.err" || rc=$?
[ $rc -eq 1 ] && grep -q "every record was rejected (2): nothing to train on" "$T/process_bad.err" ||
    fail "process bad: rc $rc, $(cat "$T/process_bad.err")"
[ "$(wc -l < "$T/offbad/rejects.tsv")" -eq 2 ] || fail "rejects.tsv: $(cat "$T/offbad/rejects.tsv")"
grep -q "^1	bad_framing	.*	05010203040a$" "$T/offbad/rejects.tsv" ||
    fail "rejects.tsv line: $(cat "$T/offbad/rejects.tsv")"
grep -q "^2	empty	" "$T/offbad/rejects.tsv" || fail "empty record: $(cat "$T/offbad/rejects.tsv")"
# 9. an Avro container file: refused by its magic; the converter of
# docs/formats.md ("Avro container files", run as written there) turns it
# into records that process to the same files as piperec gen's plain ones
config "      format: avro
      avro: { schema_file: \"$V1\" }" > "$T/file.yaml"
"$PIPEREC" gen --rows 200 --seed 3 --format avro --avro-schema "$V1" --schema-id plain \
    --output "$T/plain.avrof"
$PY - "$V1" "$T/plain.avrof" "$T/events.avro" <<'PYEOF'
import io, sys, avro.datafile, avro.io, avro.schema
schema = avro.schema.parse(open(sys.argv[1]).read())
buf, pos = open(sys.argv[2], "rb").read(), 0
with open(sys.argv[3], "wb") as f:
    w = avro.datafile.DataFileWriter(f, avro.io.DatumWriter(), schema)
    while pos < len(buf):
        n = shift = 0
        while True:
            b = buf[pos]; pos += 1; n |= (b & 0x7F) << shift; shift += 7
            if not b & 0x80:
                break
        w.append(avro.io.DatumReader(schema).read(avro.io.BinaryDecoder(io.BytesIO(buf[pos:pos + n]))))
        pos += n
    w.close()
PYEOF
rc=0; "$PIPEREC" process --config "$T/file.yaml" --input "$T/events.avro" --output "$T/offcont" \
    --no-progress > /dev/null 2> "$T/process_cont.err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "an Avro object container file" "$T/process_cont.err" ||
    fail "container file: exit $rc, $(cat "$T/process_cont.err")"
awk '/^### Avro container files/ {on = 1} on && /^```python/ {code = 1; next}
     code && /^```/ {exit} code {print}' "$PR_SOURCE_DIR/docs/formats.md" > "$T/convert.py"
[ -s "$T/convert.py" ] || fail "no converter in docs/formats.md"
$PY "$T/convert.py" "$T/events.avro" "$T/converted.avrof" || fail "the docs' converter"
for x in plain converted; do
    "$PIPEREC" process --config "$T/file.yaml" --input "$T/$x.avrof" --output "$T/off$x" \
        --no-progress > /dev/null 2> "$T/process_$x.err" || fail "process $x: $(cat "$T/process_$x.err")"
done
grep -q "200 rows, 0 rejected" "$T/process_converted.err" || fail "converted: $(cat "$T/process_converted.err")"
for f in $(cd "$T/offplain" && find . -name '*.npy' | sort); do
    cmp -s "$T/offplain/$f" "$T/offconverted/$f" || fail "container $f differs from plain records"
done
echo "test_avro_registry: ok ($((2 * N)) events, 2 schema ids, registry down and up, $n files equal)"
