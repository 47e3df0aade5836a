#!/bin/sh
# python_client.sh — clients/python/piperec_client.py against a real trainer
# sink (bt_serve.c serving 10 synthetic batches, keepalive pings every
# 200 ms): SubscribeOk info, every value of every batch (numpy views, zero
# copy), ack of all 10 exactly once (checked by bt_serve), torch tensors when
# torch is importable, and a clean ServerError for a wrong pipeline name.
set -eu
export PYTHONPATH="$PR_SOURCE_DIR/clients/python"
cat > "$PR_TMP/client.py" <<'PY'
import os, sys, time
import numpy as np
import piperec_client as pc

addr = "127.0.0.1:%s" % os.environ["BT_PORT"]
try:
    pc.TrainerClient(addr, "nope")
    sys.exit("a wrong pipeline must fail")
except pc.ServerError as e:
    assert e.code == "UNKNOWN_PIPELINE", e

with pc.TrainerClient(addr, "bt", credits=2, client_id="py-test") as c:
    assert c.info["n_dense"] == 3 and c.info["n_sparse"] == 2 and c.info["credits"] == 2, c.info
    assert c.info["keepalive_ms"] == 200
    # Credit window: with 2 unacked batches nothing else arrives.
    b1, b2 = c.recv(5), c.recv(5)
    assert (b1.sequence, b2.sequence) == (1, 2)
    assert c.recv(0.3) is None
    time.sleep(0.5)  # let the server ping us: recv must answer with Pong
    c.ack(1, 2)
    seqs = []
    for b in c.batches(count=8, timeout=5):
        g = np.arange((b.sequence - 1) * 4, b.sequence * 4)
        assert b.pipeline == "bt" and b.rows == 4
        assert b.dense.shape == (4, 3) and b.dense.dtype == np.float32
        assert b.sparse.shape == (4, 2) and b.sparse.dtype == np.int32
        assert np.array_equal(b.dense, (g[:, None] + 0.5 * np.arange(3)).astype(np.float32))
        assert np.array_equal(b.sparse, 10 * g[:, None] + np.arange(2))
        assert np.array_equal(b.labels, g % 2)
        assert b.dense.base is not None  # a view, not a copy
        assert b.offsets == [{"topic": "events", "partition": 0, "first_offset": int(g[0]),
                              "last_offset": int(g[-1]), "rows": 4}], b.offsets
        assert b.vocab_sizes == [100 + b.sequence, 200 + b.sequence]
        assert b.min_event_time_ms == 1700000000000 + g[0]
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None:
            d, s, l = b.to_torch()
            assert d.shape == (4, 3) and s.dtype == torch.int32 and int(l.sum()) == int((g % 2).sum())
        seqs.append(b.sequence)
    assert seqs == list(range(3, 11)), seqs
print("python client OK")
PY
"$BT_SERVE" trainer 10 /usr/bin/python3 "$PR_TMP/client.py"
