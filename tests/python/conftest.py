"""Fixtures: `bt` runs a Python snippet as the client of bt_serve (a real
trainer sink serving N synthetic batches, tests/batcher/bt_serve.c) and
returns what the snippet stored in RESULT; bt_serve itself fails the test
unless every batch was acked exactly once."""

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

SRC = os.environ.get("PR_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

PRELUDE = """
import json, os, sys
sys.path.insert(0, %r)
import numpy as np
import torch
ADDR = "127.0.0.1:%%s" %% os.environ["BT_PORT"]
RESULT = {}
def expected(seq):
    g = np.arange((seq - 1) * 4, seq * 4)
    return g, (g[:, None] + 0.5 * np.arange(3)).astype(np.float32), 10 * g[:, None] + np.arange(2), g %% 2
def intact(b):
    # a (one-hot) batch still holds exactly what bt_serve sent as its sequence
    g, dense, sparse, labels = expected(b.sequence)
    return (np.array_equal(b.dense.numpy(), dense) and np.array_equal(b.sparse.numpy(), sparse)
            and np.array_equal(b.labels.numpy(), labels)
            and np.array_equal(b.sparse_features.values.numpy(), sparse.T.reshape(-1))
            and np.array_equal(b.sparse_features.lengths.numpy(), np.ones(8)))
def expected_jagged(seq):
    # bt_serve's BT_JAGGED batches: (labels [4, 2], dense [4, 2], values, lengths)
    g = np.arange((seq - 1) * 4, seq * 4)
    labels = np.stack([g %% 2, (g %% 3 == 0)], 1).astype(np.float32)
    dense = np.stack([g + 0.25, 2.0 * g], 1).astype(np.float32)
    hist = [100 * x + j for x in g for j in range(x %% 3)]
    values = np.array(list(10 * g) + hist, dtype=np.int64)
    lengths = np.array([1] * 4 + list(g %% 3), dtype=np.int32)
    return labels, dense, values, lengths
""" % os.path.join(SRC, "clients", "python")

EPILOGUE = """
with open(os.environ["BT_RESULT"], "w") as f:
    json.dump(RESULT, f)
"""


@pytest.fixture
def bt(tmp_path):
    serve = os.environ.get("BT_SERVE")
    if not serve or not os.path.exists(serve):
        pytest.skip("BT_SERVE (tests/batcher/bt_serve) not set: run through ctest")

    def run(n_batches, code, timeout=120, jagged=False, tables=False):
        script = tmp_path / "client.py"
        script.write_text(PRELUDE + textwrap.dedent(code) + EPILOGUE)
        out = tmp_path / "result.json"
        env = dict(os.environ, BT_RESULT=str(out), BT_JAGGED="1" if jagged else "0",
                   BT_TABLES="1" if tables else "0")
        p = subprocess.run([serve, "trainer", str(n_batches), sys.executable, str(script)],
                           env=env, capture_output=True, text=True, timeout=timeout)
        assert p.returncode == 0, "bt_serve/client failed:\n%s\n%s" % (p.stdout, p.stderr)
        assert "acked exactly once" in p.stdout
        return json.loads(out.read_text())
    return run


@pytest.fixture
def piperec_broker(tmp_path):
    """start(partitions, topics) -> bootstrap address: a `piperec broker` (the
    test broker, its log in tmp_path/broker.err), stopped when the test ends."""
    procs = []

    def start(partitions, topics):
        piperec = os.environ.get("PIPEREC")
        if not piperec or not os.path.exists(piperec):
            pytest.skip("PIPEREC not set: run through ctest")
        br = subprocess.Popen([piperec, "broker", "--partitions", str(partitions), "--topics",
                               topics], stdout=subprocess.PIPE,
                              stderr=open(tmp_path / "broker.err", "w"), text=True)
        procs.append(br)
        first = br.stdout.readline().strip()
        assert first.startswith("bootstrap="), first
        return first[len("bootstrap="):]
    yield start
    for p in procs:
        p.kill()
        p.wait()


@pytest.fixture
def free_port():
    """A function giving a TCP port free on 127.0.0.1 right now."""
    def pick():
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        return port
    return pick
