#!/bin/sh
# files_jagged.sh — the files sink with jagged batches (a declared schema,
# issue 20; bt_serve BT_JAGGED=1): 10 batches in rolls of up to 4, every roll holds the declared schema's
# offline layout (labels.npy [n, 2], dense.npy [n, 2],
# sparse/<feature>.values.npy, sparse/<feature>.lengths.npy) and a
# meta.json naming the features; numpy loads it and every value is checked.
set -eu
BT_JAGGED=1 "$BT_SERVE" files "$PR_TMP/out" 10 4
/usr/bin/python3 - "$PR_TMP/out" <<'PY'
import json, os, sys
import numpy as np
out = sys.argv[1]
dirs = sorted(os.listdir(out), key=lambda s: [int(x) for x in s.split("-")[1:3]])
# Rolls of up to 4 batches (a slow machine closes some early, at roll_max_ms),
# together exactly batches 1..10 in order.
seqs = [list(range(int(d.split("-")[2]), int(d.split("-")[3]) + 1)) for d in dirs]
assert sum(seqs, []) == list(range(1, 11)) and all(len(s) <= 4 for s in seqs), dirs
g_next = 0
for d in dirs:
    p = os.path.join(out, d)
    labels = np.load(os.path.join(p, "labels.npy"))
    dense = np.load(os.path.join(p, "dense.npy"))
    meta = json.load(open(os.path.join(p, "meta.json")))
    n = labels.shape[0]
    g = np.arange(g_next, g_next + n)
    assert labels.dtype == np.float32 and labels.shape == (n, 2)
    assert np.array_equal(labels, np.stack([g % 2, g % 3 == 0], 1).astype(np.float32))
    assert dense.dtype == np.float32 and dense.shape == (n, 2)
    assert np.array_equal(dense, np.stack([g + 0.25, 2.0 * g], 1).astype(np.float32))
    assert sorted(os.listdir(os.path.join(p, "sparse"))) == [
        "hist.lengths.npy", "hist.values.npy", "user.lengths.npy", "user.values.npy"]
    ul = np.load(os.path.join(p, "sparse", "user.lengths.npy"))
    uv = np.load(os.path.join(p, "sparse", "user.values.npy"))
    hl = np.load(os.path.join(p, "sparse", "hist.lengths.npy"))
    hv = np.load(os.path.join(p, "sparse", "hist.values.npy"))
    assert ul.dtype == np.int32 and uv.dtype == np.int64 and hl.dtype == np.int32 and hv.dtype == np.int64
    assert np.array_equal(ul, np.ones(n)) and np.array_equal(uv, 10 * g)
    assert np.array_equal(hl, g % 3)
    assert np.array_equal(hv, [100 * x + j for x in g for j in range(x % 3)])
    first, last = (int(x) for x in d.split("-")[2:4])
    assert meta["jagged"] is True and meta["rows"] == n and meta["n_labels"] == 2
    assert meta["feature_keys"] == ["user", "hist"]
    assert meta["label_names"] == ["click", "buy"] and meta["dense_names"] == ["price", "twice"]
    assert meta["vocab_sizes"] == [100 + last, 200 + last]
    assert [b["seq"] for b in meta["batches"]] == list(range(first, last + 1))
    g_next += n
assert g_next == 40
print("files sink jagged output OK:", dirs)
PY
