#!/bin/sh
# consume_cli.sh — `piperec consume` against a trainer sink serving 12
# synthetic batches (bt_serve.c): it receives all of them, acks each one
# exactly once (bt_serve checks), prints the summary and writes one .npy set
# that numpy loads with the expected values.
set -eu
# Usage errors exit 2.
set +e; "$PIPEREC" consume --pipeline bt 2>/dev/null; rc=$?; set -e; [ "$rc" = 2 ]
"$BT_SERVE" trainer 12 sh -c '"$0" consume --connect 127.0.0.1:$BT_PORT --pipeline bt --count 12 \
    --credits 3 --client-id cli-test --output "$1" > "$1.summary"' "$PIPEREC" "$PR_TMP/out"
cat "$PR_TMP/out.summary"
grep -q "count reached: 12 batches, 48 rows, seq 1..12 (max 12), 0 out of order, 0 repeated" "$PR_TMP/out.summary"
/usr/bin/python3 - "$PR_TMP/out" <<'PY'
import json, sys
import numpy as np
d = sys.argv[1]
dense, sparse, labels = (np.load(f"{d}/{n}.npy") for n in ("dense", "sparse", "labels"))
g = np.arange(48)
assert dense.shape == (48, 3) and sparse.shape == (48, 2) and labels.shape == (48,)
assert np.array_equal(dense, (g[:, None] + 0.5 * np.arange(3)).astype(np.float32))
assert np.array_equal(sparse, 10 * g[:, None] + np.arange(2))
assert np.array_equal(labels, g % 2)
meta = json.load(open(f"{d}/meta.json"))
assert [b["seq"] for b in meta["batches"]] == list(range(1, 13)) and meta["rows"] == 48
assert meta["batches"][2]["offsets"][0] == {"topic": "events", "partition": 0, "first": 8, "last": 11, "rows": 4}
assert meta["batches"][0]["vocab_sizes"] == [101, 201]
print("consume output OK")
PY
# A wrong pipeline name is a clear error, exit 1.
if "$BT_SERVE" trainer 1 sh -c '"$0" consume --connect 127.0.0.1:$BT_PORT --pipeline nope 2> "$1"' \
    "$PIPEREC" "$PR_TMP/err"; then exit 1; fi
grep -q "unknown pipeline 'nope'" "$PR_TMP/err"
echo OK
