#!/bin/sh
# files_numpy.sh — the files sink's output loads with numpy: 10 synthetic
# batches in rolls of 4 -> batches-0-1-4, batches-0-5-8, batches-0-9-10 (epoch 0), every value
# and every meta.json entry checked (bt_serve.c defines the values).
set -eu
"$BT_SERVE" files "$PR_TMP/out" 10 4
/usr/bin/python3 - "$PR_TMP/out" <<'PY'
import json, os, sys
import numpy as np
out = sys.argv[1]
dirs = sorted(d for d in os.listdir(out))
assert dirs == ["batches-0-1-4", "batches-0-5-8", "batches-0-9-10"], dirs
g_next = 0
for d in sorted(dirs, key=lambda s: [int(x) for x in s.split("-")[1:3]]):
    p = os.path.join(out, d)
    dense = np.load(os.path.join(p, "dense.npy"))
    sparse = np.load(os.path.join(p, "sparse.npy"))
    labels = np.load(os.path.join(p, "labels.npy"))
    meta = json.load(open(os.path.join(p, "meta.json")))
    n = labels.shape[0]
    assert dense.shape == (n, 3) and dense.dtype == np.float32, (dense.shape, dense.dtype)
    assert sparse.shape == (n, 2) and sparse.dtype == np.int32, (sparse.shape, sparse.dtype)
    assert labels.dtype == np.int32
    g = np.arange(g_next, g_next + n)
    assert (labels == g % 2).all()
    assert np.array_equal(dense, (g[:, None] + 0.5 * np.arange(3)[None, :]).astype(np.float32))
    assert np.array_equal(sparse, 10 * g[:, None] + np.arange(2)[None, :])
    epoch, first, last = (int(x) for x in d.split("-")[1:4])
    assert epoch == 0 and meta["epoch"] == 0
    assert meta["pipeline"] == "bt" and meta["first_seq"] == first and meta["last_seq"] == last
    assert meta["rows"] == n and [b["seq"] for b in meta["batches"]] == list(range(first, last + 1))
    for b in meta["batches"]:
        g0 = (b["seq"] - 1) * 4
        assert b["row_start"] == g0 - g_next
        assert b["offsets"] == [{"topic": "events", "partition": 0, "first": g0, "last": g0 + 3, "rows": 4}], b
    assert meta["vocab_sizes"] == [100 + last, 200 + last]
    assert meta["sparse_names"] == ["C1", "C2"]
    g_next += n
assert g_next == 40
print("files sink output OK:", dirs)
PY
