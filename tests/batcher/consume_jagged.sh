#!/bin/sh
# consume_jagged.sh — `piperec consume --output` with jagged batches (a
# declared schema, issue 20; bt_serve BT_JAGGED=1): the output is the
# declared schema's offline layout (labels.npy [N, L], dense.npy [N, D],
# sparse/<feature>.values.npy, sparse/<feature>.lengths.npy, meta.json),
# every value checked with numpy; with shared vocabularies meta.json names
# each feature's table (feature_tables).
set -eu
BT_JAGGED=1 "$BT_SERVE" trainer 12 sh -c '"$0" consume --connect 127.0.0.1:$BT_PORT --pipeline bt \
    --count 12 --credits 3 --output "$1" > "$1.summary"' "$PIPEREC" "$PR_TMP/out"
grep -q "count reached: 12 batches, 48 rows" "$PR_TMP/out.summary"
/usr/bin/python3 - "$PR_TMP/out" <<'PY'
import json, os, sys
import numpy as np
d = sys.argv[1]
assert not os.path.exists(f"{d}/sparse.npy")
g = np.arange(48)
labels, dense = np.load(f"{d}/labels.npy"), np.load(f"{d}/dense.npy")
assert labels.dtype == np.float32 and labels.shape == (48, 2)
assert np.array_equal(labels, np.stack([g % 2, g % 3 == 0], 1).astype(np.float32))
assert np.array_equal(dense, np.stack([g + 0.25, 2.0 * g], 1).astype(np.float32))
ul, uv = np.load(f"{d}/sparse/user.lengths.npy"), np.load(f"{d}/sparse/user.values.npy")
hl, hv = np.load(f"{d}/sparse/hist.lengths.npy"), np.load(f"{d}/sparse/hist.values.npy")
assert ul.dtype == np.int32 and uv.dtype == np.int64
assert np.array_equal(ul, np.ones(48)) and np.array_equal(uv, 10 * g)
assert np.array_equal(hl, g % 3) and np.array_equal(hv, [100 * x + j for x in g for j in range(x % 3)])
meta = json.load(open(f"{d}/meta.json"))
assert meta["jagged"] is True and meta["feature_keys"] == ["user", "hist"] and meta["rows"] == 48
assert [b["seq"] for b in meta["batches"]] == list(range(1, 13))
assert meta["batches"][0]["vocab_sizes"] == [101, 201]
print("consume jagged output OK")
PY
echo OK

# shared vocabularies (BT_TABLES=1: hist in user's table): meta.json names
# each feature's table, as the batches do (TrainingBatch field 33)
BT_JAGGED=1 BT_TABLES=1 "$BT_SERVE" trainer 2 sh -c '"$0" consume --connect 127.0.0.1:$BT_PORT \
    --pipeline bt --count 2 --output "$1" > "$1.summary"' "$PIPEREC" "$PR_TMP/tables"
/usr/bin/python3 - "$PR_TMP/tables" <<'PY'
import json, sys
meta = json.load(open(sys.argv[1] + "/meta.json"))
assert meta["feature_tables"] == ["user", "user"], meta
print("consume jagged feature_tables OK")
PY
