"""Jagged batches (a declared schema, issue 20) through a real trainer sink
(bt_serve with BT_JAGGED=1): the numpy client's Batch and StreamDataset's
KeyedJaggedTensor / triple carry the true lengths, labels [B, L] and dense
[B, D]."""

import pytest


def test_numpy_client_jagged(bt):
    r = bt(6, """
    from piperec_client import TrainerClient
    n = 0
    with TrainerClient(ADDR, "bt", credits=4) as c:
        for b in c.batches(count=6, timeout=5):
            labels, dense, values, lengths = expected_jagged(b.sequence)
            assert b.jagged and b.sparse is None
            assert b.keys == ["user", "hist"]
            assert b.label_names == ["click", "buy"] and b.dense_names == ["price", "twice"]
            assert b.labels.shape == (4, 2) and b.labels.dtype == np.float32
            assert np.array_equal(b.labels, labels) and np.array_equal(b.dense, dense)
            assert np.array_equal(b.values, values) and np.array_equal(b.lengths, lengths)
            v, l = b.feature("hist")
            assert np.array_equal(l, lengths[4:]) and np.array_equal(v, values[4:])
            assert b.vocab_sizes == [100 + b.sequence, 200 + b.sequence]
            n += 1
    RESULT["n"] = n
    """, jagged=True)
    assert r["n"] == 6


def test_feature_tables(bt):
    # shared vocabularies (TrainingBatch field 33): each key's table, in the
    # protobuf and raw layouts alike; [] (tables = the keys) without it
    r = bt(4, """
    from piperec_client import TrainerClient
    n = 0
    for layout in ("protobuf", "raw"):
        with TrainerClient(ADDR, "bt", credits=2, layout=layout) as c:
            for b in c.batches(count=2, timeout=5):
                assert b.feature_tables == ["user", "user"], (layout, b.feature_tables)
                assert b.tables == ["user", "user"] and b.keys == ["user", "hist"]
                n += 1
    RESULT["n"] = n
    """, jagged=True, tables=True)
    assert r["n"] == 4
    r = bt(2, """
    from piperec_client import TrainerClient
    with TrainerClient(ADDR, "bt", credits=2) as c:
        for b in c.batches(count=2, timeout=5):
            assert b.feature_tables == [] and b.tables == ["user", "hist"]
    RESULT["n"] = 2
    """, jagged=True)
    assert r["n"] == 2


def test_dataset_jagged(bt):
    pytest.importorskip("torch")
    r = bt(6, """
    import piperec.torch as pt
    class FakeKJT:
        def __init__(self, keys, values, lengths):
            self.k, self.v, self.l = keys, values, lengths
    seen = []
    for fmt in ("triple", "auto"):
        real = pt.KeyedJaggedTensor
        if fmt == "auto" and real is None:
            pt.KeyedJaggedTensor = FakeKJT
        ds = pt.StreamDataset(ADDR, "bt", credits=2, sparse_format=fmt, max_batches=3,
                              idle_timeout=2.0)
        for b in ds:
            labels, dense, values, lengths = expected_jagged(b.sequence)
            assert b.jagged and b.sparse is None and b.keys == ["user", "hist"]
            assert b.labels.dtype == torch.float32 and tuple(b.labels.shape) == (4, 2)
            assert np.array_equal(b.labels.numpy(), labels)
            assert np.array_equal(b.dense.numpy(), dense)
            sf = b.sparse_features
            if fmt == "triple":
                assert isinstance(sf, pt.JaggedSparse) and sf.keys == ["user", "hist"]
                v, l = sf.values, sf.lengths
                # EmbeddingBag inputs per feature, without hand-written slicing
                eb = b.embedding_bag_inputs()
                assert list(eb) == ["user", "hist"]
                o = 0
                for k, name in enumerate(["user", "hist"]):
                    ln = lengths[4 * k:4 * k + 4]
                    ev, eo = eb[name]
                    assert np.array_equal(ev.numpy(), values[o:o + ln.sum()]), name
                    assert np.array_equal(eo.numpy(), np.concatenate([[0], np.cumsum(ln)[:-1]]))
                    o += ln.sum()
                bag = torch.nn.EmbeddingBag(10000, 3, mode="sum")
                assert tuple(bag(*eb["hist"]).shape) == (4, 3)
            else:
                v, l = (sf.v, sf.l) if isinstance(sf, FakeKJT) else (sf.values(), sf.lengths())
            assert v.dtype == torch.int64
            assert np.array_equal(v.numpy(), values) and np.array_equal(l.numpy(), lengths)
            assert b.label_names == ["click", "buy"]
            seen.append(b.sequence)
        pt.KeyedJaggedTensor = real
    RESULT["seen"] = sorted(seen)
    """, jagged=True)
    assert r["seen"] == list(range(1, 7))


def test_criteo_batch_as_keyed_jagged(bt):
    # A Criteo batch offers the same keys / values / lengths view (one value per row and column).
    r = bt(3, """
    from piperec_client import TrainerClient
    n = 0
    with TrainerClient(ADDR, "bt", credits=4) as c:
        for b in c.batches(count=3, timeout=5):
            g, dense, sparse, labels = expected(b.sequence)
            assert not b.jagged and b.keys == ["C1", "C2"]
            assert np.array_equal(b.values, sparse.T.reshape(-1))
            assert np.array_equal(b.lengths, np.ones(8))
            v, l = b.feature("C2")
            assert np.array_equal(v, sparse[:, 1]) and np.array_equal(l, np.ones(4))
            n += 1
    RESULT["n"] = n
    """)
    assert r["n"] == 3
