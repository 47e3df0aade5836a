"""piperec.torch.StreamDataset against a real trainer sink (bt_serve)."""

import pytest

torch = pytest.importorskip("torch")


def test_shapes_dtypes_and_values(bt):
    r = bt(10, """
    from piperec.torch import StreamDataset, JaggedSparse
    ds = StreamDataset(ADDR, "bt", credits=2, idle_timeout=1.0, sparse_format="triple")
    seqs = []
    for b in ds:
        g, dense, sparse, labels = expected(b.sequence)
        assert b.dense.shape == (4, 3) and b.dense.dtype == torch.float32
        assert b.labels.shape == (4,) and b.labels.dtype == torch.float32
        assert b.sparse.shape == (4, 2) and b.sparse.dtype == torch.int64
        assert np.array_equal(b.dense.numpy(), dense)
        assert np.array_equal(b.sparse.numpy(), sparse)
        assert np.array_equal(b.labels.numpy(), labels)
        sf = b.sparse_features
        assert isinstance(sf, JaggedSparse) and sf.keys == ["C1", "C2"]
        assert sf.values.dtype == torch.int64 and sf.lengths.dtype == torch.int32
        assert np.array_equal(sf.values.numpy(), sparse.T.reshape(-1))  # key-major
        assert np.array_equal(sf.lengths.numpy(), np.ones(8))           # one-hot
        assert b.vocab_sizes == [100 + b.sequence, 200 + b.sequence]
        assert b.endpoint == ADDR and b.rows == 4 and b.epoch in (None, 0)
        if not torch.cuda.is_available():
            assert not b.dense.is_pinned()
        seqs.append(b.sequence)
    RESULT["seqs"] = seqs
    RESULT["info"] = ds.info
    """)
    assert r["seqs"] == list(range(1, 11))
    assert r["info"]["n_dense"] == 3 and r["info"]["n_sparse"] == 2


def test_equal_to_numpy_client_and_kjt(bt):
    # The same batches through the numpy client and through the dataset's
    # conversion (triple, and the KeyedJaggedTensor branch with a stand-in
    # class when torchrec is not installed).
    r = bt(10, """
    import piperec.torch as pt
    from piperec_client import TrainerClient
    class FakeKJT:
        def __init__(self, keys, values, lengths):
            self.k, self.v, self.l = keys, values, lengths
        def keys(self): return self.k
        def values(self): return self.v
        def lengths(self): return self.l
    real = pt.KeyedJaggedTensor
    ds = pt.StreamDataset(ADDR, "bt")
    n = 0
    with TrainerClient(ADDR, "bt", credits=4) as c:
        for b in c.batches(count=10, timeout=5):
            t = ds._to_torch(b, ADDR, 0, ["C1", "C2"], False)
            assert np.array_equal(t.dense.numpy(), b.dense)
            assert np.array_equal(t.sparse.numpy(), b.sparse.astype(np.int64))
            assert np.array_equal(t.labels.numpy(), b.labels.astype(np.float32))
            assert t.vocab_sizes == b.vocab_sizes
            d, s, l = b.to_torch()
            assert torch.equal(t.dense, d) and torch.equal(t.sparse, s.long())
            pt.KeyedJaggedTensor = real or FakeKJT
            ds.sparse_format = "auto"
            k = ds._to_torch(b, ADDR, 0, ["C1", "C2"], False).sparse_features
            pt.KeyedJaggedTensor = real
            ds.sparse_format = "triple"
            j = ds._to_torch(b, ADDR, 0, ["C1", "C2"], False).sparse_features
            assert list(k.keys()) == list(j.keys) == ["C1", "C2"]
            assert torch.equal(k.values(), j.values) and torch.equal(k.lengths().int(), j.lengths)
            assert np.array_equal(j.values.view(2, 4).t().numpy(), b.sparse)
            n += 1
    RESULT["n"] = n
    """)
    assert r["n"] == 10


def test_dataloader_workers_split_the_stream(bt):
    # Two DataLoader workers, each with its own connection; piperec deals the
    # batches. max_batches=20 each over 40 batches: both must take part, and
    # together they see every row exactly once.
    r = bt(40, """
    from piperec.torch import StreamDataset, StreamDataLoader
    ds = StreamDataset(ADDR, "bt", credits=2, max_batches=20, idle_timeout=5.0)
    dl = StreamDataLoader(ds, num_workers=2, processes=True)
    rows, seqs = [], []
    for b in dl:
        rows += [int(x) for x in b.dense[:, 0]]
        seqs.append(b.sequence)
    RESULT["rows"], RESULT["seqs"] = rows, seqs
    RESULT["state"] = dl.state_dict()
    """)
    assert sorted(r["rows"]) == list(range(160))
    assert sorted(r["seqs"]) == list(range(1, 41))
    (pos,) = r["state"]["endpoints"].values()
    assert pos["batches"] == 40 and pos["last_seq"] == 40 and pos["floor"] == 40


def test_dataloader_workers_default_in_main_process(bt):
    # Issue 22: StreamDataLoader(num_workers=2) over TrainingBatch starts no
    # worker processes by default: one connection in the main process,
    # iterating the loader is iterating the dataset (each batch recorded
    # once), every row exactly once in stream order, each batch acked once
    # (bt_serve), the state_dict that of one process; processes=True (and
    # views=True) keep the worker path.
    r = bt(40, """
    import os, threading
    from piperec.torch import StreamDataset, StreamDataLoader
    ds = StreamDataset(ADDR, "bt", credits=4, idle_timeout=2.0, sparse_format="triple")
    dl = StreamDataLoader(ds, num_workers=2, prefetch_factor=2, persistent_workers=True)
    RESULT["workers"], RESULT["direct"] = dl.num_workers, dl._direct
    RESULT["gen"] = iter(dl).gi_code is ds._generate.__code__
    rows, seqs, pids = [], [], set()
    for b in dl:
        g, dense, sparse, labels = expected(b.sequence)
        assert np.array_equal(b.dense.numpy(), dense)
        assert np.array_equal(b.sparse.numpy(), sparse)
        rows += [int(x) for x in b.dense[:, 0]]
        seqs.append(b.sequence)
    RESULT["rows"], RESULT["seqs"] = rows, seqs
    RESULT["state"] = dl.state_dict()
    RESULT["kept"] = [StreamDataLoader(ds, num_workers=2, processes=True).num_workers,
                      StreamDataLoader(ds, num_workers=2, views=True).num_workers,
                      StreamDataLoader(ds, num_workers=2, views=True, processes=False).num_workers]
    """)
    assert r["workers"] == 0 and r["direct"] and r["gen"]
    assert r["rows"] == list(range(160))  # one connection: every row once, in order
    assert r["seqs"] == list(range(1, 41))
    (pos,) = r["state"]["endpoints"].values()
    assert pos["batches"] == 40 and pos["last_seq"] == 40 and pos["floor"] == 40
    assert r["kept"] == [2, 2, 0]


def test_ranks_split_the_stream(bt):
    # Two "DDP ranks" (separate processes, RANK=0/1, no process group
    # needed): the same split, done by the server, nothing hashed.
    r = bt(30, """
    import subprocess
    code = chr(10).join([
        "import json, os, sys",
        "sys.path.insert(0, %r)" % sys.path[0],
        "from piperec.torch import StreamDataset",
        "ds = StreamDataset(sys.argv[1], 'bt', credits=2, max_batches=15, idle_timeout=5.0)",
        "print(json.dumps([b.sequence for b in ds]))"])
    ps = [subprocess.Popen([sys.executable, "-c", code, ADDR], stdout=subprocess.PIPE,
                           env=dict(os.environ, RANK=str(k))) for k in range(2)]
    RESULT["seqs"] = [json.loads(p.communicate()[0]) for p in ps]
    """)
    a, b = r["seqs"]
    assert len(a) == len(b) == 15 and not set(a) & set(b)
    assert sorted(a + b) == list(range(1, 31))


def test_state_dict_round_trip(bt):
    # Consume 5 batches, "crash" (close without acking the 5th), restore
    # from the state: the redelivered 5th is skipped (and acked), the rest
    # arrives once. bt_serve checks every batch was acked exactly once.
    r = bt(10, """
    import io
    from piperec.torch import StreamDataset
    ds = StreamDataset(ADDR, "bt", credits=2, idle_timeout=1.0)
    it = iter(ds)
    first = [next(it).sequence for _ in range(5)]
    state = ds.state_dict()
    it.close()  # like a crash: batch 5 was used but never acked
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    restored = torch.load(buf)
    ds2 = StreamDataset(ADDR, "bt", credits=2, idle_timeout=1.0)
    ds2.load_state_dict(restored)
    rest = [b.sequence for b in ds2]
    RESULT.update(first=first, rest=rest, state=state, skipped=ds2.skipped, after=ds2.state_dict())
    """)
    assert r["first"] == [1, 2, 3, 4, 5]
    assert r["rest"] == [6, 7, 8, 9, 10]
    assert r["skipped"] == 1
    (pos,) = r["state"]["endpoints"].values()
    assert pos["last_seq"] == 5 and pos["floor"] == 5 and pos["unacked"] == [5] and pos["rows"] == 20
    (after,) = r["after"]["endpoints"].values()
    assert after["last_seq"] == 10 and after["batches"] == 10


def test_state_positions_and_merge():
    from piperec.torch import StreamBatch, StreamDataset, merge_state_dicts

    def batch(seq, epoch=3):
        b = StreamBatch()
        b.endpoint, b.epoch, b.sequence, b.rows = "h:1", epoch, seq, 10
        return b

    ds0 = StreamDataset("h:1", "p", resume_window=100)
    ds1 = StreamDataset("h:1", "p", resume_window=100)
    for s in (1, 3, 5, 7):
        ds0._record(batch(s))
    for s in (2, 4, 8):
        ds1._record(batch(s))
    s0 = ds0.state_dict()["endpoints"]["h:1"]
    assert s0["epoch"] == 3 and s0["last_seq"] == 7 and s0["floor"] == 1
    assert s0["ranges"] == [3, 3, 5, 5, 7, 7]
    m = merge_state_dicts([ds0.state_dict(), ds1.state_dict()])
    e = m["endpoints"]["h:1"]
    assert e["floor"] == 5 and e["ranges"] == [7, 8] and e["last_seq"] == 8 and e["batches"] == 7
    ds = StreamDataset("h:1", "p")
    ds.load_state_dict(m)
    skip = [s for s in range(1, 12) if ds._already_consumed("h:1", 3, s)]
    assert skip == [1, 2, 3, 4, 5, 7, 8]        # 6 was never consumed: delivered
    assert not ds._already_consumed("h:1", 4, 1)  # a new epoch (server restart): not skipped
    # resume_window=0: everything <= the position counts as consumed
    ds0.resume_window = 0
    ds.load_state_dict(ds0.state_dict())
    assert [s for s in range(1, 10) if ds._already_consumed("h:1", 3, s)] == list(range(1, 8))
    # a newer epoch replaces the position
    ds0._record(batch(1, epoch=4))
    assert ds0.state_dict()["endpoints"]["h:1"]["epoch"] == 4
    with pytest.raises(ValueError):
        StreamDataset("h:1", "other").load_state_dict(m)


def test_dataset_protobuf_kept_batches_intact(bt):
    # TrainingBatch frames are received into one buffer per connection,
    # reused frame after frame: every tensor of a batch is copied out of it
    # first. A loop that keeps every batch finds each one intact at the end.
    r = bt(30, """
    import piperec_client as pc
    pc.SMALL_FRAME = 0  # every frame into the reused buffer, as a real batch's would
    from piperec.torch import StreamDataset
    ds = StreamDataset(ADDR, "bt", credits=4, idle_timeout=1.0, sparse_format="triple")
    kept = list(ds)
    RESULT["n"], RESULT["bad"] = len(kept), sum(not intact(b) for b in kept)
    """)
    assert r["n"] == 30 and r["bad"] == 0


@pytest.mark.parametrize("pin", [False, True])
def test_dataloader_workers_ring_exactly_once(bt, pin):
    # Issue 22: StreamDataLoader workers hand TrainingBatches over in reused
    # shared-memory ring slots (prefetch_factor * num_workers + 2 a worker)
    # instead of new shared tensors per batch, each slot leased to its
    # batch. Every row arrives exactly once with the values one process
    # gets (expected()), each worker's batches in its connection's order. A
    # loop that drops each batch after its step keeps the rings at their
    # size: a buffer crosses once per slot, slots are refilled many times.
    # pin_memory=True (the default with CUDA): the loop gets the pin
    # thread's page-locked copies; a slot is still mapped once per buffer,
    # and the loader still forgets the rings at the end (on torch 2.11 with
    # CUDA the copy re-ran the unpickling hook and kept the rings: 24 maps
    # for 12 buffers, and a leak per epoch).
    if pin and not torch.cuda.is_available():
        pytest.skip("pin_memory needs a CUDA device")
    r = bt(60, """
    import piperec.torch as pt
    from piperec.torch import StreamDataset, StreamDataLoader
    views, order = pt._ring_views, {}
    RESULT["bufs"] = 0
    def counting(b):
        token, slot, gen, buf = b._ring[:4]
        RESULT["bufs"] += buf is not None
        order.setdefault(token, []).append(b.sequence)
        views(b)
    pt._ring_views = counting
    ds = StreamDataset(ADDR, "bt", credits=6, idle_timeout=2.0, sparse_format="triple")
    dl = StreamDataLoader(ds, num_workers=2, prefetch_factor=2, processes=True, pin_memory=%s)
    assert dl._ring_n == 6
    rows, n = [], 0
    for b in dl:
        g, dense, sparse, labels = expected(b.sequence)
        assert b._ring is None
        assert b.dense.is_pinned() == %s
        assert np.array_equal(b.dense.numpy(), dense)
        assert np.array_equal(b.sparse.numpy(), sparse)
        assert np.array_equal(b.labels.numpy(), labels)
        assert np.array_equal(b.sparse_features.values.numpy(), sparse.T.reshape(-1))
        assert np.array_equal(b.sparse_features.lengths.numpy(), np.ones(8))
        assert b.offsets == [{"topic": b.offsets[0]["topic"], "partition": 0,
                              "first_offset": int(g[0]), "last_offset": int(g[-1]), "rows": 4}]
        rows += [int(x) for x in b.dense[:, 0]]
        b.sparse_features.lengths[:] = 7  # the loop may write its batch: the next fill starts over
        n += 1
    RESULT["rows"] = rows
    RESULT["order"] = list(order.values())
    RESULT["state"] = dl.state_dict()
    RESULT["left"] = len(pt._RING_BUFS) + len(pt._RING_FLAGS)
    RESULT["after"] = ds._ring_slots  # a plain DataLoader later gets torch's hand-off
    """ % (pin, pin))
    assert sorted(r["rows"]) == list(range(240))  # every row exactly once
    assert len(r["order"]) == 2 and all(len(o) > 6 for o in r["order"])  # both workers, slots reused
    assert all(o == sorted(o) for o in r["order"])  # each connection's order kept
    assert r["bufs"] <= 2 * 6  # a buffer crosses once per slot, not once per batch
    assert r["left"] == 0  # the loader's iterator forgot its rings when it ended
    assert r["after"] == 0
    (pos,) = r["state"]["endpoints"].values()
    assert pos["batches"] == 60 and pos["last_seq"] == 60 and pos["floor"] == 60


@pytest.mark.parametrize("workers", [1, 2])
def test_dataloader_workers_kept_batches_intact(bt, workers):
    # Issue 22: batches from worker processes are views on leased ring
    # slots (no copy-out in the main process), yet a batch the loop keeps
    # is never refilled: the loop keeps every batch (a list, as gradient
    # accumulation or a replay buffer would) and checks them all at the
    # end, the workers' rings grew instead. With _RING_MAX 8 the rest came
    # in plain tensors (torch's hand-off), still intact. Once the loop
    # drops them, every slot's flag is clear again.
    r = bt(60, """
    import gc
    import piperec.torch as pt
    from piperec.torch import StreamDataset, StreamDataLoader
    pt._RING_MAX = 8  # the workers fork with it
    flags = []
    views = pt._ring_views
    def keep_flags(b):
        if b._ring[4] is not None:
            flags.append(b._ring[4].numpy())
        views(b)
    pt._ring_views = keep_flags
    ds = StreamDataset(ADDR, "bt", credits=6, idle_timeout=2.0, sparse_format="triple")
    dl = StreamDataLoader(ds, num_workers=%d, prefetch_factor=2, views=True, pin_memory=False)
    kept = []
    for b in dl:
        kept.append(b)
        g, dense, sparse, labels = expected(b.sequence)
        assert np.array_equal(b.dense.numpy(), dense)
    bad = sum(not intact(h) for h in kept)
    RESULT["bad"], RESULT["rows"] = bad, [int(x) for h in kept for x in h.dense[:, 0]]
    RESULT["ptrs"] = len({h.dense.data_ptr() for h in kept})
    RESULT["leased"] = sum(int(f.astype(np.int64).sum()) for f in flags)
    del kept, b
    gc.collect()
    RESULT["after"] = sum(int(f.astype(np.int64).sum()) for f in flags)
    RESULT["state"] = dl.state_dict()
    """ % workers)
    assert r["bad"] == 0  # no kept batch was refilled under the loop
    assert sorted(r["rows"]) == list(range(240))
    assert r["ptrs"] == 60  # every kept batch on memory of its own
    assert 0 < r["leased"] <= workers * 8  # the rings grew to their cap, the rest plain
    assert r["after"] == 0  # dropped batches gave their slots back
    (pos,) = r["state"]["endpoints"].values()
    assert pos["batches"] == 60 and pos["floor"] == 60
