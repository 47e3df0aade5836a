#!/bin/sh
# stream_offline_jagged.sh — jagged batches end to end (issue 20): JSON events
# of `piperec gen --format json` through examples/clickstream.yaml's declared
# schema, streamed by `piperec run` (1 partition) to a files sink, equal
# `piperec process` on the same lines array by array: labels.npy, dense.npy,
# and every feature's values and lengths (the rolls concatenated in sequence
# order), and meta.json names the features and their vocabulary sizes.
# JAGGED_EVICT=1: the history list's vocabulary is bounded (capacity 300,
# eviction lru), and the streamed recycled-index notices (meta.json, per
# feature, rows of the rolls) equal offline recycled.npy. A feature `recent`
# (the history's last 3) shares the history's table (`table:`): its elements
# interleave with the history's in one column, in stream and offline alike.
# Labels by value (`in:`) and through an operator (`at_least`), a dense
# flag by value on a list, and a dense `age` go the same way.
# Env (from pr_script_test): PIPEREC, PR_SOURCE_DIR, PR_TMP.
set -eu
T="$PR_TMP"
N=4000
fail() { echo "FAIL: $*" >&2; tail -20 "$T/run.err" >&2 || true; exit 1; }
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

"$PIPEREC" gen --format json --rows $N --seed 5 --output "$T/events.jsonl"
mkfifo "$T/broker.fifo"
"$PIPEREC" broker --partitions 1 --topics clicks > "$T/broker.fifo" 2> "$T/broker.err" &
pids="$pids $!"
exec 3< "$T/broker.fifo"
read -r first <&3 || fail "broker printed nothing"
B="${first#bootstrap=}"

sed -n '/^    schema:/,/^    transform:/p' "$PR_SOURCE_DIR/examples/clickstream.yaml" | sed '$d' \
    > "$T/schema.yaml"
grep -q "history" "$T/schema.yaml" || fail "could not take the schema from the example"
# a shared vocabulary: the history's last 3 items again, in history's table
sed -i '/- { name: history,/a\        - { name: recent, path: history, list: { max_len: 3, keep: last }, ops: [vocab], table: history }' \
    "$T/schema.yaml"
grep -q "table: history" "$T/schema.yaml" || fail "could not add the shared feature"
# labels by value and through operators, and a dense flag by value
sed -i '/^      labels:$/a\        - { name: ios, path: context.device, in: [ios] }\n        - { name: long_dwell, path: label.dwell_s, default: 0, ops: [ { at_least: 5 } ] }' \
    "$T/schema.yaml"
sed -i '/^      dense:$/a\        - { name: tagged_sale, path: item.tags, in: [sale, limited], default: -1 }' \
    "$T/schema.yaml"
grep -q "at_least" "$T/schema.yaml" && grep -q "tagged_sale" "$T/schema.yaml" ||
    fail "could not add the labels and flag by value"
# age: the record's own event time minus a time in it (age_days read as
# seconds since the epoch), never the Kafka message time: stream = offline
sed -i '/^      dense:$/a\        - { name: since, path: user.age_days, ops: [ { age: s }, { fill: -1 } ] }' \
    "$T/schema.yaml"
grep -q "age: s" "$T/schema.yaml" || fail "could not add age"
cat > "$T/run.yaml" <<Y
pipelines:
  - name: p
    source:
      kafka:
        topics: [clicks]
        group.id: jagged-e2e
        properties:
          bootstrap.servers: "$B"
          auto.offset.reset: earliest
          fetch.wait.max.ms: 10
      format: json
$(cat "$T/schema.yaml")
    transform:
      vocab: { profile: default }
$( [ "${JAGGED_EVICT:-0}" = 1 ] && echo "      columns: { history: { eviction: lru, capacity: 300 } }")
    batch: { size: 300, max_delay_ms: 50 }
    sinks:
      files: { dir: "$T/batches", roll_batches: 4 }
    state: { dir: "$T/state" }
http: { listen: "127.0.0.1:0" }
log: { level: info }
Y
"$PIPEREC" run --config "$T/run.yaml" 2> "$T/run.err" &
RUN=$!
pids="$pids $RUN"
wait_until 20 "the http port in the log" grep -q "http on port" "$T/run.err"
HP=$(sed -n 's/.*http on port \([0-9]*\).*/\1/p' "$T/run.err" | head -1)
"$PIPEREC" produce --bootstrap "$B" --topic clicks --format json --input "$T/events.jsonl" \
    > /dev/null 2> "$T/produce.err" || fail "produce"
wait_until 60 "rows through the engine" sh -c \
    "curl -sf 'http://127.0.0.1:$HP/metrics' | grep -q '^piperec_engine_rows_total{pipeline=\"p\"} $N\$'"
kill -TERM "$RUN"
rc=0; wait "$RUN" || rc=$?
[ "$rc" -eq 0 ] || fail "piperec run exited $rc after SIGTERM"
"$PIPEREC" process --config "$T/run.yaml" --input "$T/events.jsonl" --output "$T/offline" \
    --no-progress > /dev/null 2> "$T/process.err" || fail "piperec process: $(cat "$T/process.err")"

/usr/bin/python3 - "$T/batches" "$T/offline" "$N" "${JAGGED_EVICT:-0}" <<'PY'
import json, os, sys
import numpy as np
out, off, n, evict = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
rolls = sorted((d for d in os.listdir(out) if d.startswith("batches-")),
               key=lambda s: [int(x) for x in s.split("-")[1:3]])
assert rolls, "no rolls"
metas = [json.load(open(os.path.join(out, d, "meta.json"))) for d in rolls]
keys = metas[0]["feature_keys"]
assert all(m["jagged"] and m["feature_keys"] == keys for m in metas)
offline_keys = {f[:-len(".lengths.npy")] for f in os.listdir(os.path.join(off, "sparse"))
                if f.endswith(".lengths.npy")}
assert set(keys) == offline_keys, (keys, offline_keys)
def cat(rel):
    return np.concatenate([np.load(os.path.join(out, d, rel)) for d in rolls])
for rel in ["labels.npy", "dense.npy"] + ["sparse/%s.%s.npy" % (k, w) for k in keys
                                           for w in ("lengths", "values")]:
    s, o = cat(rel), np.load(os.path.join(off, rel))
    assert s.dtype == o.dtype and s.shape == o.shape, (rel, s.dtype, s.shape, o.dtype, o.shape)
    assert np.array_equal(s, o), rel
assert np.load(os.path.join(off, "labels.npy")).shape[0] == n
hist = cat("sparse/history.lengths.npy")
assert hist.min() == 0 and hist.max() > 1, "history should be a true list"
assert all(len(m["vocab_sizes"]) == len(keys) for m in metas)
# the last batch's vocabulary sizes are the offline run's; a shared table's
# features report its one size
om = json.load(open(os.path.join(off, "meta.json")))
sizes = dict(zip(keys, metas[-1]["vocab_sizes"]))
assert metas[-1]["vocab_sizes"] == om["vocab_sizes"], (metas[-1]["vocab_sizes"], om["vocab_sizes"])
assert sizes["recent"] == sizes["history"] > 2, sizes
assert om["feature_tables"][keys.index("recent")] == "history", om
assert all(m["feature_tables"] == om["feature_tables"] for m in metas), metas[0]
notes, base = [], 0
for d, m in zip(rolls, metas):
    for b in m["batches"]:
        notes += [(c, base + r, i, num) for c, r, i, num in b.get("recycled", [])]
    base += m["rows"]
if evict:
    rec = np.load(os.path.join(off, "recycled.npy"))
    assert len(rec) > 10 and len(notes) == len(rec), (len(notes), rec.shape)
    assert {c for c, _, _, _ in notes} <= {keys.index("history"), keys.index("recent")}
    assert sorted(notes, key=lambda t: t[3]) == [tuple(int(x) for x in r) for r in rec], "notices differ"
else:
    assert not notes
print("stream == offline (%d notices)" % len(notes))
print("stream == offline: %d rows, %d rolls, features %s" % (n, len(rolls), keys))
PY
