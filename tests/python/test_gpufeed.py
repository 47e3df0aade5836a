"""The GPU feed (issue 22): the raw tensor layout through the numpy client
(views on one preallocated, 64-byte aligned buffer, Criteo and jagged
batches, content equal to the TrainingBatch path) and through
StreamDataset(layout="raw") (ring of reused buffers, views, acks, the
thread path that StreamDataLoader workers are routed to), and over the
co-located transport (sinks.trainer.unix_path, endpoints "unix:/path"),
against bt_serve, which checks that every batch was acked exactly once."""

import os

import pytest

torch = pytest.importorskip("torch")


def test_numpy_client_raw_views(bt):
    r = bt(12, """
    import piperec_client as pc
    pc.SMALL_FRAME = 0  # bt_serve's batches are tiny: make every batch land in `buf`
    buf = np.zeros(1 << 16, np.uint8)
    base = (-buf.ctypes.data) % 64
    mem = buf[base:]
    with pc.TrainerClient(ADDR, "bt", credits=4, layout="raw", kjt_offsets=True) as c:
        assert c.layout == "raw" and c.info["layout"] == 1
        n = 0
        for _ in range(12):
            b = c.recv(5, into=lambda k: memoryview(mem)[:k])
            g, dense, sparse, labels = expected(b.sequence)
            assert b.layout == "raw" and not b.jagged and b.rows == 4
            assert b.dense.dtype == np.float32 and b.dense.shape == (4, 3) and b.dense.flags.c_contiguous
            assert np.array_equal(b.dense, dense)
            assert b.labels.dtype == np.float32 and np.array_equal(b.labels, labels)
            assert b.sparse.dtype == np.int64 and np.array_equal(b.sparse, sparse)
            assert np.array_equal(b.values, sparse.T.reshape(-1))
            assert np.array_equal(b.lengths, np.ones(8)) and b.lengths.dtype == np.int32
            assert np.array_equal(b.kjt_offsets, np.arange(9))
            assert b.vocab_sizes == [100 + b.sequence, 200 + b.sequence]
            assert b.offsets[0]["first_offset"] == g[0] and b.offsets[0]["rows"] == 4
            assert b.keys == ["C1", "C2"]
            for a in (b.dense, b.labels, b.values, b.lengths, b.kjt_offsets):
                assert np.shares_memory(a, mem), "not a view on the buffer"
                assert a.ctypes.data % 64 == 0, "section not 64-byte aligned"
            c.ack(b.sequence)
            n += 1
    RESULT["n"] = n
    """)
    assert r["n"] == 12


def test_numpy_client_raw_jagged(bt):
    r = bt(6, """
    import piperec_client as pc
    with pc.TrainerClient(ADDR, "bt", credits=4, layout="raw") as c:
        seqs = []
        for b in c.batches(count=6, timeout=5):
            labels, dense, values, lengths = expected_jagged(b.sequence)
            assert b.layout == "raw" and b.jagged and b.keys == ["user", "hist"]
            assert np.array_equal(b.labels, labels) and b.labels.shape == (4, 2)
            assert np.array_equal(b.dense, dense)
            assert np.array_equal(b.values, values) and np.array_equal(b.lengths, lengths)
            assert b.label_names == ["click", "buy"] and b.dense_names == ["price", "twice"]
            assert b.sparse is None and b.kjt_offsets is None
            assert b.feature("hist")[1].tolist() == lengths[4:].tolist()
            seqs.append(b.sequence)
    RESULT["seqs"] = seqs
    """, jagged=True)
    assert r["seqs"] == list(range(1, 7))


def test_numpy_client_raw_compact(bt):
    # compact: a Criteo batch's values in int32 (bt_serve's columns are
    # int32) and no lengths section: the bytes of a TrainingBatch.
    r = bt(8, """
    import piperec_client as pc
    with pc.TrainerClient(ADDR, "bt", credits=4, layout="raw", compact=True, kjt_offsets=True) as c:
        n = 0
        for b in c.batches(count=8, timeout=5):
            g, dense, sparse, labels = expected(b.sequence)
            assert b.values.dtype == np.int32 and b.sparse.dtype == np.int32
            assert np.array_equal(b.sparse, sparse) and np.array_equal(b.dense, dense)
            assert np.array_equal(b.lengths, np.ones(8)) and np.array_equal(b.kjt_offsets, np.arange(9))
            assert np.array_equal(b.labels, labels)
            n += 1
    RESULT["n"] = n
    """)
    assert r["n"] == 8


def test_protobuf_and_raw_agree(bt):
    # Two connections, one per layout, share the stream: whatever each gets,
    # it decodes to the rows bt_serve built; and a protobuf client's Batch is
    # unchanged (int32 labels, column-major views).
    r = bt(16, """
    import piperec_client as pc
    a = pc.TrainerClient(ADDR, "bt", credits=2)
    b = pc.TrainerClient(ADDR, "bt", credits=2, layout="raw")
    assert a.layout == "protobuf" and "layout" not in a.info
    got = {}
    import time
    deadline = time.monotonic() + 20
    while len(got) < 16 and time.monotonic() < deadline:
        for c in (a, b):
            x = c.recv(0.05)
            if x is None:
                continue
            g, dense, sparse, labels = expected(x.sequence)
            assert np.array_equal(x.dense, dense) and np.array_equal(x.sparse, sparse)
            assert np.array_equal(x.labels, labels)
            assert x.layout == ("raw" if c is b else "protobuf")
            if c is a:
                assert x.labels.dtype == np.int32
            got[x.sequence] = x.layout
            c.ack(x.sequence)
    a.close(); b.close()
    RESULT["layouts"] = sorted(set(got.values()))
    RESULT["n"] = len(got)
    """)
    assert r["n"] == 16 and r["layouts"] == ["protobuf", "raw"]


def test_dataset_raw_ring(bt):
    r = bt(40, """
    import piperec_client as pc
    pc.SMALL_FRAME = 0
    from piperec.torch import StreamDataset, JaggedSparse
    ds = StreamDataset(ADDR, "bt", credits=4, idle_timeout=1.0, sparse_format="triple", layout="raw")
    seqs, ptrs = [], set()
    it = iter(ds)
    for b in it:
        g, dense, sparse, labels = expected(b.sequence)
        assert b.dense.shape == (4, 3) and b.dense.dtype == torch.float32
        assert b.labels.shape == (4,) and b.labels.dtype == torch.float32
        assert b.sparse.shape == (4, 2) and b.sparse.dtype == torch.int64
        assert np.array_equal(b.dense.numpy(), dense)
        assert np.array_equal(b.sparse.numpy(), sparse)
        assert np.array_equal(b.labels.numpy(), labels)
        sf = b.sparse_features
        assert isinstance(sf, JaggedSparse) and sf.keys == ["C1", "C2"]
        assert np.array_equal(sf.values.numpy(), sparse.T.reshape(-1))
        assert b.vocab_sizes == [100 + b.sequence, 200 + b.sequence]
        assert b.offsets[0]["first_offset"] == g[0]
        assert b.dense.is_pinned() == torch.cuda.is_available()
        ptrs.add(b.dense.data_ptr())
        seqs.append(b.sequence)
        feed = ds._feed
        RESULT["slots"] = len(feed.slots)
        RESULT["grows"] = max(s.grows for s in feed.slots)
    RESULT["seqs"] = seqs
    RESULT["ptrs"] = len(ptrs)
    """)
    assert r["seqs"] == list(range(1, 41))
    # 40 batches through a ring of credits + 1 buffers, each allocated once.
    assert r["slots"] == 5 and r["grows"] == 1 and r["ptrs"] <= 5


def test_dataset_raw_compact(bt):
    r = bt(10, """
    from piperec.torch import StreamDataset
    ds = StreamDataset(ADDR, "bt", credits=3, idle_timeout=1.0, sparse_format="triple",
                       layout="raw", compact=True)
    seqs = []
    for b in ds:
        g, dense, sparse, labels = expected(b.sequence)
        assert b.sparse.dtype == torch.int32 and np.array_equal(b.sparse.numpy(), sparse)
        assert np.array_equal(b.sparse_features.lengths.numpy(), np.ones(8))
        assert np.array_equal(b.dense.numpy(), dense)
        seqs.append(b.sequence)
    RESULT["seqs"] = seqs
    """)
    assert r["seqs"] == list(range(1, 11))


def test_dataset_raw_compact_wire(bt):
    # The default raw dataset asks for the compact wire form and widens on
    # the host: the same tensors as the full raw bytes (int64 values and
    # sparse, int32 all-ones lengths), on arrays of the batch's ring slot,
    # allocated once each; compact_wire=False still gets the full bytes.
    r = bt(30, """
    import piperec_client as pc
    pc.SMALL_FRAME = 0
    from piperec.torch import StreamDataset
    RESULT["flags"], RESULT["ptrs"] = {}, {}
    for wire in (True, False):
        ds = StreamDataset(ADDR, "bt", credits=3, idle_timeout=1.0, sparse_format="triple",
                           layout="raw", compact_wire=wire, max_batches=15)
        seen, ptrs = set(), set()
        real = pc.decode_raw
        def spy(*a, **kw):  # the flags as received, before the receive thread widens
            b = real(*a, **kw)
            seen.add(b.raw_flags)
            return b
        pc.decode_raw = spy
        for b in ds:
            g, dense, sparse, labels = expected(b.sequence)
            sf = b.sparse_features
            assert b.sparse.dtype == torch.int64 and np.array_equal(b.sparse.numpy(), sparse)
            assert sf.values.dtype == torch.int64 and np.array_equal(sf.values.numpy(), sparse.T.reshape(-1))
            assert sf.lengths.dtype == torch.int32 and np.array_equal(sf.lengths.numpy(), np.ones(8))
            assert np.array_equal(b.dense.numpy(), dense) and np.array_equal(b.labels.numpy(), labels)
            ptrs.add(sf.values.data_ptr())
            RESULT["wide" + str(wire)] = sum(s.wide is not None for s in ds._feed.slots)
        pc.decode_raw = real
        RESULT["flags"][str(wire)] = sorted(seen)
        RESULT["ptrs"][str(wire)] = len(ptrs)
    """)
    assert r["flags"] == {"True": [pc_flags_compact()], "False": [0]}
    assert r["ptrs"]["True"] <= 4  # one int64 array per slot of the ring, reused
    assert r["wideTrue"] >= 1 and r["wideFalse"] == 0


def pc_flags_compact():
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))
    import piperec_client as pc
    return pc.RAW_UNIT | pc.RAW_VALUES32


def test_widen_without_slot_and_int64_wire():
    # piperec.feed.widen (the receive thread's): a compact batch decoded
    # from its own bytes (no ring slot) gets fresh arrays, one in a slot the
    # slot's (reused); one whose values stayed int64 on the wire (an int64
    # pipeline) keeps them, only its lengths come from the ones; the views
    # equal the full raw bytes'.
    import sys
    import numpy as np
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
    import bench_trainer_py as bench
    import piperec_client as pc
    import piperec.torch as pt
    from piperec.feed import _Slot, widen
    ds = pt.StreamDataset("127.0.0.1:1", "bench", layout="raw", sparse_format="triple")
    keys = ["C%d" % (i + 1) for i in range(26)]
    pre, payload = bench.encode_raw(64)
    full = pc.decode_raw(memoryview(bytearray(pre + payload)), len(pre))
    pre, payload = bench.encode_raw(64, compact=True)

    def compact():
        return pc.decode_raw(memoryview(bytearray(pre + payload)), len(pre))
    assert compact().raw_flags == pc.RAW_UNIT | pc.RAW_VALUES32 and full.raw_flags == 0
    a = ds._raw_views(full, "ep", 0, keys)
    slot = _Slot()
    ptrs = set()
    for s in (None, slot, slot):
        w = widen(compact(), s)
        assert w.raw_flags == 0 and w.sparse_width == 8
        b = ds._raw_views(w, "ep", 0, keys)
        for x, y in ((a.sparse, b.sparse), (a.sparse_features.values, b.sparse_features.values),
                     (a.sparse_features.lengths, b.sparse_features.lengths)):
            assert x.dtype == y.dtype and torch.equal(x, y)
        if s is not None:
            ptrs.add(b.sparse_features.values.data_ptr())
    assert len(ptrs) == 1 and slot.wide is not None
    assert widen(full) is full and full.raw_flags == 0  # nothing to do
    c = compact()
    c.raw_flags, c._values = pc.RAW_UNIT, full._values  # int64 values on the wire, unit lengths
    widen(c, _Slot())
    assert c._values is full._values and np.array_equal(c.lengths, full.lengths)
    # to a device (no widening on the host: the copy widens; unit: cached device ones)
    e = ds._raw_views(compact(), "ep", 0, keys)
    assert e.sparse.dtype == torch.int32
    g1, _ = ds._copy_to(e, torch.device("cpu"), None, unit=True)
    g2, _ = ds._copy_to(e, torch.device("cpu"), None, unit=True)
    assert g1.sparse.dtype == torch.int64 and torch.equal(g1.sparse, a.sparse)
    assert g1.sparse_features.lengths is g2.sparse_features.lengths
    assert torch.equal(g1.sparse_features.lengths, a.sparse_features.lengths)


def test_dataset_raw_jagged_and_state(bt):
    r = bt(8, """
    from piperec.torch import StreamDataset
    ds = StreamDataset(ADDR, "bt", credits=3, idle_timeout=1.0, sparse_format="triple", layout="raw")
    n = 0
    for b in ds:
        labels, dense, values, lengths = expected_jagged(b.sequence)
        assert b.jagged and b.keys == ["user", "hist"] and b.sparse is None
        assert np.array_equal(b.labels.numpy(), labels)
        assert np.array_equal(b.sparse_features.values.numpy(), values)
        assert np.array_equal(b.sparse_features.lengths.numpy(), lengths)
        n += 1
    RESULT["n"] = n
    RESULT["state"] = ds.state_dict()
    """, jagged=True)
    assert r["n"] == 8
    ep = list(r["state"]["endpoints"].values())[0]
    assert ep["batches"] == 8 and ep["unacked"] == []


def test_loader_workers_use_threads(bt):
    # StreamDataLoader(num_workers=2) over a raw dataset starts no worker
    # process: the dataset's receive threads (streams=2: two connections,
    # a thread each) in this process.
    r = bt(30, """
    import multiprocessing as mp
    from piperec.torch import StreamDataLoader, StreamDataset
    ds = StreamDataset(ADDR, "bt", credits=3, idle_timeout=1.0, sparse_format="triple", layout="raw",
                       streams=2)
    loader = StreamDataLoader(ds, num_workers=2)
    # the loader is the one-process path: its iterator is the dataset's, not
    # a DataLoader iterator (whose fetcher, collate and second record cost
    # 5-20% of the client's CPU a batch)
    assert iter(StreamDataLoader(ds, num_workers=2)).gi_code is ds._generate_raw.__code__
    seqs = []
    for b in loader:
        assert not mp.active_children()
        g, dense, sparse, labels = expected(b.sequence)
        assert np.array_equal(b.dense.numpy(), dense)
        seqs.append(b.sequence)
        RESULT["conns"] = len(ds._live)
    RESULT["seqs"] = sorted(seqs)
    RESULT["state_batches"] = sum(p["batches"] for p in loader.state_dict()["endpoints"].values())
    """)
    assert r["seqs"] == list(range(1, 31))
    assert r["conns"] == 2 and r["state_batches"] == 30


def test_raw_layout_refusals():
    from piperec.torch import StreamDataset
    import piperec_client as pc
    with pytest.raises(ValueError):
        StreamDataset("127.0.0.1:1", "p", layout="bogus")
    with pytest.raises(ValueError):
        StreamDataset("127.0.0.1:1", "p", layout="protobuf", device="cpu")  # a device: raw only
    with pytest.raises(ValueError):
        pc.TrainerClient("127.0.0.1:1", "p", layout="arrow")


def test_connection_errors_name_the_endpoint():
    # A server that accepts, answers SubscribeOk, sends a Ping and then goes
    # away: the Pong, recv, ack and commit paths all raise ConnectionClosed
    # (a ConnectionError, and an EOFError for loops that stop on EOF) naming
    # the endpoint.
    import socket
    import struct
    import threading
    import piperec_client as pc

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    addr = "127.0.0.1:%d" % srv.getsockname()[1]

    def serve(mode):
        s, _ = srv.accept()
        n = struct.unpack("<I", s.recv(4))[0]
        s.recv(n)
        ok = pc._field_varint(8, 4)  # SubscribeOk{credits: 4}
        s.sendall(pc._frame(pc.F_SUBSCRIBE_OK, ok))
        if mode == "ping":
            s.sendall(pc._frame(pc.F_PING, pc._field_varint(1, 7)))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()  # RST: like a killed server

    for mode in ("ping", "close"):
        t = threading.Thread(target=serve, args=(mode,))
        t.start()
        c = pc.TrainerClient(addr, "p")
        t.join()
        with pytest.raises(ConnectionError) as ei:
            for _ in range(50):  # the first write may still be accepted by the kernel
                c.recv(1.0)
                c.ack(1)
                c.commit_checkpoint(pc.Position(), 1)
        assert addr in str(ei.value) and isinstance(ei.value, EOFError)
        c.close()
    srv.close()


def test_dataset_raw_against_old_server(bt):
    # A server that predates the raw layout grants layout 0 and sends
    # TrainingBatch frames (here: the dataset's Subscribe is stripped of the
    # layout field, as an old server would ignore it): the raw dataset
    # decodes them, copies them out, frees the buffer at once, and acks.
    r = bt(12, """
    import piperec_client as pc
    import piperec.torch as pt
    pc.SMALL_FRAME = 0  # TrainingBatch frames land in the ring buffers too
    real = pt.TrainerClient
    def old_server_client(*a, **kw):
        kw["layout"] = "protobuf"
        return real(*a, **kw)
    pt.TrainerClient = old_server_client
    ds = pt.StreamDataset(ADDR, "bt", credits=3, idle_timeout=1.0, sparse_format="triple", layout="raw")
    seqs = []
    for b in ds:
        g, dense, sparse, labels = expected(b.sequence)
        assert np.array_equal(b.dense.numpy(), dense) and np.array_equal(b.sparse.numpy(), sparse)
        assert np.array_equal(b.labels.numpy(), labels)
        for s in ds._feed.slots:  # copied out of the ring (its buffer was given back)
            if s.view is not None:
                lo = s.view.ctypes.data
                assert not lo <= b.dense.data_ptr() < lo + s.cap
        seqs.append(b.sequence)
    RESULT["seqs"] = seqs
    """)
    assert r["seqs"] == list(range(1, 13))


def test_dataset_raw_device_cpu(bt):
    # device="cpu" is the host path (views), with the staging loop exercised.
    r = bt(6, """
    from piperec.torch import StreamDataset
    ds = StreamDataset(ADDR, "bt", credits=2, idle_timeout=1.0, sparse_format="triple",
                       layout="raw", device="cpu", max_batches=6)
    seqs = [b.sequence for b in ds]
    RESULT["seqs"] = seqs
    """)
    assert r["seqs"] == list(range(1, 7))


def test_cuda_copy_logic_with_stand_ins(monkeypatch):
    # No GPU in CI: run the side-stream copy and the hand-out (wait_event,
    # record_stream) with stand-ins for the CUDA stream and event objects,
    # copying to the CPU, so their logic is exercised on every machine.
    import numpy as np
    import piperec_client as pc
    import piperec.torch as pt
    calls = []

    class FakeStream:
        def wait_event(self, ev):
            calls.append(("wait", ev))

    class FakeEvent:
        def record(self, stream=None):
            calls.append(("record", stream))

    class Ctx:
        def __init__(self, s):
            self.s = s

        def __enter__(self):
            calls.append(("enter", self.s))

        def __exit__(self, *a):
            calls.append(("exit", self.s))

    main = FakeStream()
    monkeypatch.setattr(torch.cuda, "stream", Ctx)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda dev=None: main)
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, s: calls.append(("rs", s)),
                        raising=False)
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
    import bench_trainer_py as bench
    pre, payload = bench.encode_raw(64)
    buf = memoryview(bytearray(pre + payload))
    b = pc.decode_raw(buf, len(pre), len(buf))
    ds = pt.StreamDataset("127.0.0.1:1", "bench", layout="raw", sparse_format="triple")
    keys = ["C%d" % (i + 1) for i in range(26)]
    out = ds._raw_views(b, "ep", 0, keys)
    side = FakeStream()
    g, ev = ds._copy_to(out, torch.device("cpu"), side)
    assert isinstance(ev, FakeEvent)
    assert calls[0] == ("enter", side) and ("record", side) in calls and calls[-1] == ("exit", side)
    ds._on_current_stream(g, ev, torch.device("cpu"))
    assert ("wait", ev) in calls and sum(1 for c in calls if c[0] == "rs") == 4
    assert torch.equal(g.dense, out.dense) and torch.equal(g.sparse, out.sparse)
    assert g.sparse.shape == (64, 26) and g.sparse_features.values.shape == (64 * 26,)
    assert g.sequence == out.sequence and g.vocab_sizes == out.vocab_sizes
    np.testing.assert_array_equal(g.labels.numpy(), b.labels)
    # compact: int32 values widened on the device, lengths a cached tensor
    bench_c = pc.decode_raw(buf, len(pre), len(buf))
    bench_c._values = bench_c._values.astype(np.int32)
    bench_c.sparse = bench_c._values.reshape(26, 64).T
    bench_c._lengths = pc._ones(26 * 64)
    dsc = pt.StreamDataset("127.0.0.1:1", "bench", layout="raw", sparse_format="triple", compact=True)
    outc = dsc._raw_views(bench_c, "ep", 0, keys)
    g1, _ = dsc._copy_to(outc, torch.device("cpu"), side)
    g2, _ = dsc._copy_to(outc, torch.device("cpu"), side)
    assert g1.sparse_features.values.dtype == torch.int64 and g1.sparse.dtype == torch.int64
    assert torch.equal(g1.sparse, out.sparse)
    assert g1.sparse_features.lengths is g2.sparse_features.lengths  # cached, not per batch


def test_dataset_raw_over_tls(bt, tmp_path, monkeypatch):
    # TLS: the receive thread is the only user of the SSL socket (acks are
    # queued to it), and it reads decrypted bytes select() cannot see.
    import shutil
    import subprocess
    if not shutil.which("openssl"):
        pytest.skip("openssl CLI missing")
    d = str(tmp_path)

    def ossl(*args):
        subprocess.run(["openssl"] + list(args), cwd=d, check=True, capture_output=True)
    ossl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=ca")
    ossl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
         "server.key", "-out", "server.csr", "-subj", "/CN=piperec")
    (tmp_path / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    ossl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
         "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "server.ext")
    monkeypatch.setenv("BT_TLS_CERT", os.path.join(d, "server.crt"))
    monkeypatch.setenv("BT_TLS_KEY", os.path.join(d, "server.key"))
    # Every frame lands in a caller's buffer (SMALL_FRAME 0): the raw ring's
    # slots, then the TrainingBatch dataset's reused buffer, both over TLS.
    r = bt(20, """
    import piperec_client as pc
    import piperec.torch as pt
    pc.SMALL_FRAME = 0
    real = pt.TrainerClient
    pt.TrainerClient = lambda *a, **kw: real(*a, ca_file=%r, **kw)
    ds = pt.StreamDataset(ADDR, "bt", credits=3, idle_timeout=1.0, sparse_format="triple", layout="raw")
    seqs = []
    for b in ds:
        assert intact(b)
        seqs.append(b.sequence)
        if len(seqs) == 10:
            break
    del ds, b
    kept = list(pt.StreamDataset(ADDR, "bt", credits=3, idle_timeout=1.0, sparse_format="triple"))
    assert all(intact(b) for b in kept)
    RESULT["seqs"] = sorted(set(seqs + [b.sequence for b in kept]))  # unacked at the break: resent
    """ % os.path.join(d, "ca.crt"))
    assert r["seqs"] == list(range(1, 21))


def test_dataset_raw_buffers_live_until_acked(bt):
    # ack_lag=2: a batch is acked (and its buffer reused) only once two more
    # were handed out, so the views of the last three batches stay intact
    # while the receive thread keeps filling the other buffers.
    r = bt(30, """
    import piperec_client as pc
    pc.SMALL_FRAME = 0
    from piperec.torch import StreamDataset
    ds = StreamDataset(ADDR, "bt", credits=5, idle_timeout=1.0, sparse_format="triple",
                       layout="raw", ack_lag=2)
    held = []
    n = 0
    for b in ds:
        held = (held + [b])[-3:]
        for h in held:
            g, dense, sparse, labels = expected(h.sequence)
            assert np.array_equal(h.dense.numpy(), dense), "buffer reused before its ack"
            assert np.array_equal(h.sparse.numpy(), sparse)
        n += 1
    RESULT["n"] = n
    """)
    assert r["n"] == 30


def test_dataset_device_implies_raw_layout():
    # StreamDataset(device=...) is the GPU feed without also naming the
    # layout; no device keeps TrainingBatch frames; a device with the
    # protobuf layout named is a contradiction, refused.
    from piperec.torch import StreamDataset
    assert StreamDataset("h:1", "p").layout == "protobuf"
    assert StreamDataset("h:1", "p", device="cpu").layout == "raw"
    assert StreamDataset("h:1", "p", device="cuda:1").layout == "raw"
    assert StreamDataset("h:1", "p", layout="raw").layout == "raw"
    with pytest.raises(ValueError, match="device= needs layout='raw'"):
        StreamDataset("h:1", "p", layout="protobuf", device="cuda")


@pytest.mark.parametrize("recv_thread", [False, True], ids=["inline", "thread"])
def test_dataset_raw_kept_batches_intact(bt, recv_thread):
    # Host path views lease their buffer (piperec.feed, "Ownership"): the
    # loop keeps every other batch in a list, as gradient accumulation or
    # a replay buffer would, and at the end every kept batch still holds
    # its own values (before, a buffer was refilled once its batch was
    # acked, under the kept views). The ring grew by what was kept; the
    # dropped batches' buffers were refilled. Then a loop that keeps
    # nothing runs on two buffers (the one handed out and the one before).
    r = bt(60, """
    import piperec_client as pc
    pc.SMALL_FRAME = 0
    from piperec.torch import StreamDataset
    ds = StreamDataset(ADDR, "bt", credits=4, idle_timeout=1.0, sparse_format="triple",
                       layout="raw", recv_thread=%r)
    kept, n = [], 0
    for b in ds:
        n += 1
        if n %% 2:
            kept.append(b)
        RESULT["slots"] = len(ds._feed.slots)
        if n == 40:
            break
    bad = sum(not intact(h) for h in kept)
    RESULT["bad"], RESULT["kept"] = bad, len(kept)
    RESULT["ptrs"] = len({h.dense.data_ptr() for h in kept})
    del kept
    ptrs = set()
    for b in ds:
        g, dense, sparse, labels = expected(b.sequence)
        assert np.array_equal(b.dense.numpy(), dense)
        ptrs.add(b.dense.data_ptr())
    RESULT["later_ptrs"] = len(ptrs)
    """ % (recv_thread,))
    assert r["bad"] == 0  # no kept batch was refilled under the loop
    assert r["kept"] == 20 and r["ptrs"] == 20  # each on a buffer of its own
    assert r["slots"] >= 20  # the ring grew by what the loop kept
    # the receive thread fills ahead into free buffers; inline, two carry the stream
    assert r["later_ptrs"] <= (6 if recv_thread else 2)


def test_unix_socket_endpoints(bt, tmp_path, monkeypatch):
    # sinks.trainer.unix_path: the same stream over a Unix domain socket;
    # StreamDataset (raw ring, then protobuf) and the numpy client take
    # "unix:/path" endpoints; every batch acked exactly once (bt_serve).
    monkeypatch.setenv("BT_UNIX", str(tmp_path / "trainer.sock"))
    r = bt(30, """
    import piperec_client as pc
    import piperec.torch as pt
    ep = "unix:" + os.environ["BT_UNIX"]
    seqs = []
    ds = pt.StreamDataset(ep, "bt", credits=3, idle_timeout=1.0, sparse_format="triple", layout="raw")
    for b in ds:
        g, dense, sparse, labels = expected(b.sequence)
        assert np.array_equal(b.dense.numpy(), dense) and np.array_equal(b.sparse.numpy(), sparse)
        assert b.endpoint == ep
        seqs.append(b.sequence)
        if len(seqs) == 10:
            break
    del ds
    with pc.TrainerClient(ep, "bt", credits=4) as c:
        assert c.layout == "protobuf"
        for b in c.batches(count=10, timeout=5):
            g, dense, sparse, labels = expected(b.sequence)
            assert np.array_equal(b.sparse, sparse)
            seqs.append(b.sequence)
    for b in pt.StreamDataset(ep, "bt", credits=2, idle_timeout=1.0, sparse_format="triple"):
        seqs.append(b.sequence)
    RESULT["seqs"] = sorted(set(seqs))  # a batch left unacked at a break comes again
    """)
    assert r["seqs"] == list(range(1, 31))


def test_unix_socket_refusals(tmp_path):
    import piperec_client as pc
    with pytest.raises(ValueError, match="TLS does not apply"):
        pc.TrainerClient("unix:" + str(tmp_path / "s"), "p", tls=True)
    with pytest.raises(FileNotFoundError, match="piperec at unix:"):
        pc.TrainerClient("unix:" + str(tmp_path / "missing.sock"), "p", timeout=1)


@pytest.mark.parametrize("recv_thread", [None, True, False], ids=["default", "thread", "inline"])
def test_dataset_raw_receive_paths_agree(bt, recv_thread):
    # The host path's two receive paths (issue 22): on the iterating thread
    # (piperec.feed.InlineFeed, the default without a device) and a receive
    # thread per connection (RawFeed): the same batches, each acked exactly
    # once (bt_serve checks), two connections, and with ack_lag=2 the views
    # of the last three batches stay intact (a slot is never refilled
    # before its batch was acked).
    r = bt(40, """
    import piperec_client as pc
    pc.SMALL_FRAME = 0
    from piperec.feed import InlineFeed, RawFeed
    from piperec.torch import StreamDataset
    ds = StreamDataset(ADDR, "bt", credits=5, idle_timeout=1.0, sparse_format="triple",
                       layout="raw", ack_lag=2, streams=2, recv_thread=%r)
    held, seqs = [], []
    for b in ds:
        RESULT["feed"] = type(ds._feed).__name__
        held = (held + [b])[-3:]
        for h in held:
            g, dense, sparse, labels = expected(h.sequence)
            assert np.array_equal(h.dense.numpy(), dense), "buffer reused before its ack"
            assert np.array_equal(h.sparse.numpy(), sparse) and h.sparse.dtype == torch.int64
            assert np.array_equal(h.labels.numpy(), labels)
        seqs.append(b.sequence)
        RESULT["conns"] = len(ds._live)
    RESULT["seqs"] = sorted(seqs)
    RESULT["state_batches"] = sum(p["batches"] for p in ds.state_dict()["endpoints"].values())
    """ % (recv_thread,))
    assert r["seqs"] == list(range(1, 41))
    assert r["conns"] == 2 and r["state_batches"] == 40
    assert r["feed"] == ("RawFeed" if recv_thread else "InlineFeed")


def test_inline_feed_reuses_the_last_released_slot(bt):
    # InlineFeed takes the slot released last (its memory still in cache):
    # with ack_lag 0 two slots of the ring carry the whole stream.
    r = bt(30, """
    import piperec_client as pc
    pc.SMALL_FRAME = 0
    from piperec.torch import StreamDataset
    ds = StreamDataset(ADDR, "bt", credits=6, idle_timeout=1.0, sparse_format="triple", layout="raw")
    ptrs = set()
    for b in ds:
        ptrs.add(b.dense.data_ptr())
        RESULT["slots"] = len(ds._feed.slots)
        RESULT["used"] = sum(s.cap > 0 for s in ds._feed.slots)
    RESULT["ptrs"] = len(ptrs)
    """)
    assert r["slots"] == 7 and r["used"] == 2 and r["ptrs"] == 2


def test_inline_feed_errors_name_the_endpoint():
    # A server that goes away under InlineFeed: the ack's failure is kept
    # and reported by the next next() as (conn, None, ConnectionError naming
    # the endpoint); commit raises it; then the feed ends.
    import socket
    import struct
    import threading
    import piperec_client as pc
    from piperec.feed import InlineFeed

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    addr = "127.0.0.1:%d" % srv.getsockname()[1]

    def serve():
        s, _ = srv.accept()
        n = struct.unpack("<I", s.recv(4))[0]
        s.recv(n)
        s.sendall(pc._frame(pc.F_SUBSCRIBE_OK, pc._field_varint(8, 4)))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()  # RST: like a killed server

    t = threading.Thread(target=serve)
    t.start()
    c = pc.TrainerClient(addr, "p", layout="raw")
    t.join()
    feed = InlineFeed([(addr, c)])
    conn = feed.conns[0]
    for _ in range(50):  # the first write may still be accepted by the kernel
        feed.ack(conn, 1)
        if conn.error is not None:
            break
    got = feed.next(1.0)
    assert got is not None and got[0] is conn and got[1] is None
    assert isinstance(got[2], ConnectionError) and addr in str(got[2])
    with pytest.raises(ConnectionError) as ei:
        feed.commit(conn, pc.Position(), 1)
    assert addr in str(ei.value)
    assert feed.next(0.1) is None  # every connection ended
    feed.close()
    c.close()
    srv.close()
