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
# A run shorter than a second has no meaningful rate (issue 11: it printed millions of rows/s).
grep -q "0 repeated, n/a rows/s" "$PR_TMP/out.summary"
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
# Nothing listening: the connect is retried with backoff until --connect-timeout-ms
# (issue 11: it failed at the first refusal).
PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
t0=$(date +%s%N)
if "$PIPEREC" consume --connect 127.0.0.1:$PORT --pipeline bt --connect-timeout-ms 1200 \
    2> "$PR_TMP/retry.err"; then exit 1; fi
t1=$(date +%s%N)
cat "$PR_TMP/retry.err"
[ $(( (t1 - t0) / 1000000 )) -ge 1100 ]
grep -q "retrying for up to 1200 ms" "$PR_TMP/retry.err"
grep -q "gave up after [0-9]* tries in 1200 ms" "$PR_TMP/retry.err"
echo OK
