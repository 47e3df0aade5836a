#!/bin/sh
# test_pbuser_stream.sh — the user's own Protobuf messages end to end (issue
# 23): the clickstream of `piperec gen --format json` as shop.Click
# (tests/data/pbuser_clickstream.proto) through examples/clickstream.yaml's
# schema gives the JSON path's output byte for byte:
#   1. offline: length-delimited messages written by Python's protobuf
#      (json_format, the official encoder) -> `piperec process` equals
#      `piperec process` of the JSON lines (every .npy and vocabulary file);
#      two malformed records at the end are rejected bad_protobuf in
#      rejects.tsv; so does `piperec gen --format protobuf` (framed);
#   2. streaming: `piperec produce --format protobuf --schema-id 7`
#      (registry-framed, piperec's own encoder) -> `piperec run` (files sink)
#      equals the offline output array by array; one malformed message is
#      counted by reason and dead-lettered with its reason header.
# Env (from pr_script_test): PIPEREC, PR_SOURCE_DIR, PR_TMP.
set -eu
T="$PR_TMP"
N=3000
PY=/usr/bin/python3
fail() { echo "FAIL: $*" >&2; tail -20 "$T/run.err" >&2 2>/dev/null || true; exit 1; }
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

protoc --descriptor_set_out="$T/click.desc" --include_imports -I "$PR_SOURCE_DIR/tests/data" \
    pbuser_clickstream.proto || fail "protoc"
"$PIPEREC" gen --format json --rows $N --seed 5 --output "$T/events.jsonl"

# 1. offline: Python's encoder, length-delimited, two malformed records last
"$PY" - "$T/click.desc" "$T/events.jsonl" "$T/events.pbd" <<'PY' || fail "python encoder"
import os, sys
from google.protobuf import json_format
sys.path.insert(0, os.path.join(os.environ["PR_SOURCE_DIR"], "tests", "config"))
from records import message_class, write_delimited
cls, bodies = message_class(sys.argv[1], "shop.Click"), []
for line in open(sys.argv[2]):
    m = cls()
    json_format.Parse(line, m)
    bodies.append(m.SerializeToString())
bodies += [b"\x1a\x09\x0a", b"\x10"]  # user: length past the end; ts: truncated
write_delimited(sys.argv[3], bodies)
PY

sed -n '/^    schema:/,/^    transform:/p' "$PR_SOURCE_DIR/examples/clickstream.yaml" | sed '$d' \
    > "$T/schema.yaml"
grep -q "history" "$T/schema.yaml" || fail "could not take the schema from the example"
config() { # format-lines bootstrap
    cat <<Y
pipelines:
  - name: p
    source:
      kafka:
        topics: [clicks]
        group.id: pbuser-e2e
        properties:
          bootstrap.servers: "${2:-127.0.0.1:9}"
          auto.offset.reset: earliest
          fetch.wait.max.ms: 10
$1
$(cat "$T/schema.yaml")
    transform:
      vocab: { profile: default }
    batch: { size: 300, max_delay_ms: 50 }
    sinks:
      files: { dir: "$T/batches", roll_batches: 4 }
    state: { dir: "$T/state" }
http: { listen: "127.0.0.1:0" }
log: { level: info }
Y
}
PBFMT="      format: protobuf
      protobuf: { descriptor_set: \"$T/click.desc\", message: shop.Click }
      dead_letter_topic: clicks-dlq"
config "      format: json" > "$T/json.yaml"
config "$PBFMT" > "$T/pb_offline.yaml"
"$PIPEREC" process --config "$T/json.yaml" --input "$T/events.jsonl" --output "$T/off_json" \
    --no-progress > /dev/null 2> "$T/pj.err" || fail "process json: $(cat "$T/pj.err")"
"$PIPEREC" process --config "$T/pb_offline.yaml" --input "$T/events.pbd" --output "$T/off_pb" \
    --no-progress > /dev/null 2> "$T/pp.err" || fail "process protobuf: $(cat "$T/pp.err")"
grep -q "$N rows, 2 rejected" "$T/pp.err" || fail "process protobuf: $(cat "$T/pp.err")"
for f in $(cd "$T/off_json" && find . -name '*.npy' -o -name '*.tsv' | grep -v rejects); do
    cmp "$T/off_json/$f" "$T/off_pb/$f" || fail "offline protobuf != offline json: $f"
done
[ "$(cut -f2 "$T/off_pb/rejects.tsv" | sort | uniq -c | awk '{print $1, $2}')" = "2 bad_protobuf" ] ||
    fail "rejects.tsv: $(cut -f1-3 "$T/off_pb/rejects.tsv")"
grep -q "^$((N + 1))	bad_protobuf	length 9 past the end at byte 1" "$T/off_pb/rejects.tsv" ||
    fail "rejects.tsv detail: $(cut -f1-3 "$T/off_pb/rejects.tsv")"
echo "offline: protobuf == json ($N rows, 2 rejects)"
# ... and `piperec gen --format protobuf` (piperec's encoder, framed) reads the same
"$PIPEREC" gen --format protobuf --descriptor-set "$T/click.desc" --message shop.Click \
    --schema-id 3 --rows $N --seed 5 --output "$T/gen.pbd" || fail "gen --format protobuf"
"$PIPEREC" process --config "$T/pb_offline.yaml" --input "$T/gen.pbd" --output "$T/off_gen" \
    --no-progress > /dev/null 2> "$T/pg.err" || fail "process gen.pbd: $(cat "$T/pg.err")"
for f in $(cd "$T/off_json" && find . -name '*.npy' -o -name '*.tsv' | grep -v rejects); do
    cmp "$T/off_json/$f" "$T/off_gen/$f" || fail "gen --format protobuf != json: $f"
done

# 2. streaming: registry-framed messages from piperec produce, one malformed
mkfifo "$T/broker.fifo"
"$PIPEREC" broker --partitions 1 --topics clicks,clicks-dlq > "$T/broker.fifo" 2> "$T/broker.err" &
pids="$pids $!"
exec 3< "$T/broker.fifo"
read -r first <&3 || fail "broker printed nothing"
B="${first#bootstrap=}"
config "$PBFMT" "$B" > "$T/run.yaml"
"$PIPEREC" run --config "$T/run.yaml" 2> "$T/run.err" &
RUN=$!
pids="$pids $RUN"
wait_until 20 "the http port in the log" grep -q "http on port" "$T/run.err"
HP=$(sed -n 's/.*http on port \([0-9]*\).*/\1/p' "$T/run.err" | head -1)
"$PIPEREC" produce --bootstrap "$B" --topic clicks --format protobuf --input "$T/events.jsonl" \
    --descriptor-set "$T/click.desc" --message shop.Click --schema-id 7 \
    > /dev/null 2> "$T/produce.err" || fail "produce: $(cat "$T/produce.err")"
printf '\000\000\000\000\007\000\032\011\012' > "$T/bad.bin"
kcat -P -b "$B" -t clicks "$T/bad.bin" || fail "kcat"
wait_until 60 "rows through the engine" sh -c \
    "curl -sf 'http://127.0.0.1:$HP/metrics' | grep -q '^piperec_engine_rows_total{pipeline=\"p\"} $N\$'"
wait_until 20 "the reject counted" sh -c \
    "curl -sf 'http://127.0.0.1:$HP/metrics' | grep -q 'piperec_rejected_records_total{pipeline=\"p\",reason=\"bad_protobuf\"} 1'"
wait_until 20 "the dead letter" sh -c \
    "kcat -C -b '$B' -t clicks-dlq -c 1 -e -f '%h\\n' 2>/dev/null | grep -q piperec-reason=bad_protobuf"
kill -TERM "$RUN"
rc=0; wait "$RUN" || rc=$?
[ "$rc" -eq 0 ] || fail "piperec run exited $rc after SIGTERM"

"$PY" - "$T/batches" "$T/off_json" "$N" <<'PY' || fail "streamed != offline"
import json, os, sys
import numpy as np
out, off, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rolls = sorted((d for d in os.listdir(out) if d.startswith("batches-")),
               key=lambda s: [int(x) for x in s.split("-")[1:3]])
assert rolls, "no rolls"
keys = json.load(open(os.path.join(out, rolls[0], "meta.json")))["feature_keys"]
def cat(rel):
    return np.concatenate([np.load(os.path.join(out, d, rel)) for d in rolls])
for rel in ["labels.npy", "dense.npy"] + ["sparse/%s.%s.npy" % (k, w) for k in keys
                                           for w in ("lengths", "values")]:
    s, o = cat(rel), np.load(os.path.join(off, rel))
    assert s.dtype == o.dtype and s.shape == o.shape, (rel, s.shape, o.shape)
    assert np.array_equal(s, o), rel
assert np.load(os.path.join(off, "labels.npy")).shape[0] == n
print("streaming protobuf == offline json: %d rows, %d rolls" % (n, len(rolls)))
PY
