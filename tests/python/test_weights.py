"""test_weights.py — weighted list features (id-score lists, `weights:`) on
the Python side: a KeyedJaggedTensor's weights.

Hand-built bytes, so no piperec is needed:
- a jagged TrainingBatch with fields 31 (weights, float32 per value) and 32
  (weighted_keys) decodes to ``Batch.weights`` / ``weighted_keys`` /
  ``feature_weights(name)`` (ones for an unweighted feature), zero copy; a
  batch without them has weights None; malformed ones are refused;
- the raw layout with flag 32 and 8 sections (section 7 at header offset
  120) decodes to the same batch, as views on the buffer; a 7-section batch
  (an older server) decodes with weights None; a later server's extra
  sections are skipped; malformed ones are refused;
- piperec.torch: JaggedSparse keeps unpacking as a triple and carries
  ``.weights``; StreamDataset over a stand-in server (both layouts, the raw
  host path with its ring slots and the kept-batches lease) passes the
  weights to the KeyedJaggedTensor (a stand-in when torchrec is absent) and
  to JaggedSparse; the device copy (CUDA stream stand-ins) copies them;
  ``embedding_bag_inputs(weights=True)`` feeds nn.EmbeddingBag's
  per_sample_weights;
- piperec.files: FileDataset reads sparse/<name>.weights.npy (meta.json
  ``weighted_keys``) across parts and batch boundaries, ones for unweighted
  features, none for older outputs.
With PIPEREC set (ctest): `piperec process` of a weighted schema read by
FileDataset against a reference computed from the events, and `piperec run`
streaming the same events to the numpy client (TrainingBatch frames) and to
StreamDataset (raw layout): the same weights, value for value.
"""

import json
import os
import pickle
import socket
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

SRC = os.environ.get("PR_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
sys.path.insert(0, os.path.join(SRC, "clients", "python"))

import piperec_client as pc  # noqa: E402

KEYS = ["user", "hist", "tag"]
WEIGHTED = ["hist"]


# ---------------------------------------------------------------- a batch's data

def _data(seq, rows):
    """A jagged batch's arrays: `user` one value a row, `hist` a weighted
    list of 0-3 values, `tag` an unweighted list of 0-2 values (so ones come
    before and after the weighted feature's weights)."""
    lengths, values, weights = [], [], []
    for k in KEYS:
        for r in range(rows):
            n = {"user": 1, "hist": (r + seq) % 4, "tag": (r + 1) % 3}[k]
            lengths.append(n)
            for j in range(n):
                values.append({"user": 10 * seq + r, "hist": 1000 * seq + 10 * r + j,
                               "tag": 7 + j}[k])
                weights.append(seq + r + 0.25 * j if k == "hist" else 1.0)
    labels = np.array([[(seq + r) % 2] for r in range(rows)], dtype=np.float32)
    dense = np.array([[r + 0.5, seq * 2.0] for r in range(rows)], dtype=np.float32)
    return (labels, dense, np.array(values, dtype=np.int64), np.array(lengths, dtype=np.int32),
            np.array(weights, dtype=np.float32))


def _meta(seq, rows, weighted=True, extra_weighted=()):
    """A jagged TrainingBatch's fields other than the tensors."""
    m = (pc._field_bytes(1, b"w") + pc._field_varint(2, seq) + pc._field_varint(3, rows)
         + pc._field_varint(4, 2) + pc._field_varint(5, len(KEYS)) + pc._field_varint(6, 8)
         + b"".join(pc._field_varint(14, 5000) for _ in KEYS) + pc._field_varint(22, 1)
         + b"".join(pc._field_bytes(23, k.encode()) for k in KEYS) + pc._field_varint(26, 1)
         + pc._field_bytes(29, b"click") + pc._field_bytes(30, b"a") + pc._field_bytes(30, b"b"))
    for k in (WEIGHTED if weighted else []) + list(extra_weighted):
        m += pc._field_bytes(32, k.encode())
    return m


def _pb(seq, rows=3, weighted=True, weights=None, extra_weighted=()):
    """A jagged TrainingBatch (protobuf bytes); `weights`: the field 31
    bytes to send instead of the right ones."""
    labels, dense, values, lengths, w = _data(seq, rows)
    body = (_meta(seq, rows, weighted, extra_weighted) + pc._field_bytes(24, values.tobytes())
            + pc._field_bytes(25, lengths.tobytes()) + pc._field_bytes(27, labels.tobytes())
            + pc._field_bytes(28, dense.tobytes()))
    if weighted:
        body += pc._field_bytes(31, w.tobytes() if weights is None else weights)
    return body


def _up64(x):
    return (x + 63) & ~63


def _raw(seq, rows=3, weighted=True, nsec=None, flags=None, weights=None, extra_weighted=(),
         meta_weighted=None):
    """(frame preamble, payload) of a raw-layout jagged batch as a server
    writes it (docs/trainer-protocol.md, "Raw batch layout"): sections 64-byte
    aligned counting the preamble; with `weighted`, flag 32 and section 7
    (its descriptor at header offset 120). nsec/flags/weights: override the
    section count, the flags and the weights bytes (malformed batches);
    meta_weighted: weighted_keys in the metadata (default: as `weighted`)."""
    labels, dense, values, lengths, w = _data(seq, rows)
    mw = weighted if meta_weighted is None else meta_weighted
    secs = [dense.tobytes(), labels.tobytes(), lengths.tobytes(), values.tobytes(), b"", b"",
            _meta(seq, rows, mw, extra_weighted)]
    if weighted:
        secs.append(w.tobytes() if weights is None else weights)
    if nsec is None:
        nsec = 8 if weighted else 7
    v = 1
    while True:  # the preamble holds the payload length; the padding depends on the preamble
        pre, at, offs = 5 + v, pc.RAW_HEADER, []
        for sb in secs:
            at = _up64(pre + at) - pre
            offs.append(at)
            at += len(sb)
        at = _up64(pre + at) - pre  # zero padding at the end, as a server may send
        if len(pc._varint(at)) == v:
            break
        v = len(pc._varint(at))
    payload = bytearray(at)
    if flags is None:
        flags = pc.RAW_JAGGED | (pc.RAW_WEIGHTS if weighted else 0)
    hdr = pc._RAW_HDR.pack(pc.RAW_MAGIC, pc.RAW_VERSION, pc.RAW_HEADER, flags, rows, 2, 1,
                           len(KEYS), pre, 4, seq, len(values), 0, nsec)
    payload[:len(hdr)] = hdr
    for i, (o, sb) in enumerate(zip(offs, secs)):
        struct.pack_into("<II", payload, 64 + 8 * i, o, len(sb))  # section 7: offset 120
        payload[o:o + len(sb)] = sb
    head = bytes([(pc.F_RAW_BATCH << 3) | 2]) + pc._varint(len(payload))
    return struct.pack("<I", len(head) + len(payload)) + head, bytes(payload)


def _raw_buf(*a, **kw):
    """A raw batch in one bytearray, preamble included: (buf, start, end)."""
    pre, payload = _raw(*a, **kw)
    buf = bytearray(pre + payload)
    return buf, len(pre), len(buf)


def _check_batch(b, seq, rows=3, weighted=True):
    labels, dense, values, lengths, w = _data(seq, rows)
    assert b.jagged and b.keys == KEYS and b.sequence == seq and b.rows == rows
    assert np.array_equal(b.values, values) and np.array_equal(b.lengths, lengths)
    assert np.array_equal(b.labels, labels) and np.array_equal(b.dense, dense)
    if not weighted:
        assert b.weights is None and b.weighted_keys == []
        return
    assert b.weighted_keys == WEIGHTED
    assert b.weights.dtype == np.float32 and b.weights.shape == values.shape
    assert np.array_equal(b.weights, w)
    for k in KEYS:
        fv, fl = b.feature(k)
        fw = b.feature_weights(k)
        assert fw.dtype == np.float32 and fw.shape == fv.shape, k
        if k not in WEIGHTED:
            assert np.array_equal(fw, np.ones(len(fv), np.float32)), k
    hv, hl = b.feature("hist")
    want = [seq + r + 0.25 * j for r in range(rows) for j in range(hl[r])]
    assert b.feature_weights("hist").tolist() == want


# ---------------------------------------------------------------- protobuf

def test_protobuf_weighted_batch_decodes():
    buf = bytearray(_pb(5))
    b = pc.decode_batch(buf)
    _check_batch(b, 5)
    # a view on the frame, no copy
    assert not b.weights.flags.owndata and np.shares_memory(b.weights, np.frombuffer(buf, np.uint8))
    # the hand-checked example: hist lengths (5 + r) % 4 = 1, 2, 3, weights 5 + r + j / 4
    assert b.feature("hist")[1].tolist() == [1, 2, 3]
    assert b.feature_weights("hist").tolist() == [5.0, 6.0, 6.25, 7.0, 7.25, 7.5]
    assert b.feature_weights("tag").tolist() == [1.0, 1.0, 1.0]  # tag lengths 1, 2, 0
    assert b.weights.tolist()[:3] == [1.0, 1.0, 1.0]  # user, unweighted, before hist
    assert b.layout == "protobuf" and b.raw_flags == 0


def test_protobuf_weighted_batch_without_a_value():
    # every list empty: the weights field is empty, so absent on the wire,
    # beside weighted_keys (what piperec run sends for such a batch)
    rows = 2
    body = (pc._field_bytes(1, b"w") + pc._field_varint(2, 9) + pc._field_varint(3, rows)
            + pc._field_varint(5, 1) + pc._field_varint(6, 8) + pc._field_varint(22, 1)
            + pc._field_bytes(23, b"hist") + pc._field_bytes(25, bytes(4 * rows))
            + pc._field_bytes(32, b"hist"))
    b = pc.decode_batch(bytearray(body))
    assert b.weighted_keys == ["hist"] and b.weights is not None and len(b.weights) == 0
    assert len(b.feature_weights("hist")) == 0


def test_protobuf_fields_31_32_in_the_field_decoder():
    buf = _pb(2)
    b = pc._new_batch()
    spans, keys = pc._decode_fields(b, buf, 0, len(buf))
    assert keys == KEYS and b.weighted_keys == WEIGHTED
    a, e = spans[31]
    assert np.array_equal(np.frombuffer(buf[a:e], "<f4"), _data(2, 3)[4])


def test_protobuf_without_weights():
    b = pc.decode_batch(_pb(3, weighted=False))
    _check_batch(b, 3, weighted=False)
    assert b.feature_weights("hist") is None and b.feature_weights("user") is None
    for name in ("nope", ""):  # an unknown name raises as feature(name) does
        for exc in (ValueError, KeyError):
            with pytest.raises(exc):
                b.feature_weights(name)
            with pytest.raises(exc):
                b.feature(name)


def test_unknown_feature_raises_on_a_weighted_batch_too():
    b = pc.decode_batch(_pb(3))
    with pytest.raises(KeyError) as ei:
        b.feature_weights("nope")
    assert isinstance(ei.value, ValueError) and isinstance(ei.value, pc.UnknownFeature)
    assert "nope" in str(ei.value) and "user" in str(ei.value)


def test_criteo_batch_has_no_weights():
    rows = 4
    body = (pc._field_bytes(1, b"c") + pc._field_varint(2, 1) + pc._field_varint(3, rows)
            + pc._field_varint(4, 1) + pc._field_varint(5, 2) + pc._field_varint(6, 4)
            + pc._field_bytes(7, np.arange(rows, dtype="<i4").tobytes())
            + pc._field_bytes(8, np.zeros(rows, "<f4").tobytes())
            + pc._field_bytes(9, np.arange(2 * rows, dtype="<i4").tobytes()))
    b = pc.decode_batch(body)
    assert not b.jagged and b.weights is None and b.weighted_keys == []
    assert b.feature_weights("C2") is None and b.feature("C2")[0].tolist() == [4, 5, 6, 7]


@pytest.mark.parametrize("case", ["short", "long", "unknown_key", "keys_without_weights"])
def test_protobuf_malformed_weights_refused(case):
    if case == "short":
        body = _pb(1, weights=_data(1, 3)[4].tobytes()[:-4])
    elif case == "long":
        body = _pb(1, weights=_data(1, 3)[4].tobytes() + b"\0\0\x80\x3f")
    elif case == "unknown_key":
        body = _pb(1, extra_weighted=["nope"])
    else:
        body = _pb(1, weighted=False, extra_weighted=["hist"])
    with pytest.raises(ValueError):
        pc.decode_batch(body)


# ---------------------------------------------------------------- raw layout

def test_raw_weighted_8_sections():
    buf, a, e = _raw_buf(7)
    assert struct.unpack_from("<I", buf, a + 60)[0] == 8
    off, n = struct.unpack_from("<II", buf, a + 120)
    assert n == 4 * len(_data(7, 3)[2]) and (a + off) % 64 == 0  # 64-byte aligned, preamble counted
    b = pc.decode_raw(buf, a, e)
    _check_batch(b, 7)
    assert b.layout == "raw" and b.raw_flags & pc.RAW_WEIGHTS and b.epoch == 4
    assert np.shares_memory(b.weights, np.frombuffer(buf, np.uint8))  # a view on the buffer
    assert b.weights.ctypes.data == np.frombuffer(buf, np.uint8).ctypes.data + a + off
    # the same batch as its TrainingBatch
    p = pc.decode_batch(_pb(7))
    assert np.array_equal(p.weights, b.weights) and p.weighted_keys == b.weighted_keys
    for k in KEYS:
        assert np.array_equal(p.feature_weights(k), b.feature_weights(k))


def test_raw_7_sections_old_server():
    buf, a, e = _raw_buf(7, weighted=False)
    assert struct.unpack_from("<I", buf, a + 60)[0] == 7
    assert bytes(buf[a + 120:a + 128]) == b"\0" * 8
    b = pc.decode_raw(buf, a, e)
    _check_batch(b, 7, weighted=False)
    assert not b.raw_flags & pc.RAW_WEIGHTS and b.feature_weights("hist") is None


def test_raw_more_sections_than_known():
    # a later server may add sections: the ones known are read
    for weighted, nsec in ((True, 9), (False, 8)):
        buf, a, e = _raw_buf(2, weighted=weighted, nsec=nsec)
        _check_batch(pc.decode_raw(buf, a, e), 2, weighted=weighted)


@pytest.mark.parametrize("case", ["flag_with_7_sections", "short_weights", "long_weights",
                                  "keys_without_flag", "unknown_key"])
def test_raw_malformed_weights_refused(case):
    w = _data(1, 3)[4].tobytes()
    kw = {"flag_with_7_sections": dict(nsec=7),
          "short_weights": dict(weights=w[:-4]),
          "long_weights": dict(weights=w + w[:4]),
          "keys_without_flag": dict(weighted=False, meta_weighted=True),
          "unknown_key": dict(extra_weighted=["nope"])}[case]
    buf, a, e = _raw_buf(1, **kw)
    with pytest.raises(ValueError):
        pc.decode_raw(buf, a, e)


# ---------------------------------------------------------------- a stand-in server

def _serve(batches, layout):
    """A one-connection stand-in piperec: SubscribeOk (the layout asked for
    when `layout` is "raw", else protobuf), then `batches` (seq, rows,
    weighted) as TrainingBatch or raw frames, then Error{SHUTDOWN} once
    every batch but the last is acked (a client acks a batch when it asks
    for the next one); it reads acks until the client closes. Returns
    (endpoint, thread, acked sequences)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    acked = []

    def frames(s, buf):
        while True:
            while len(buf) >= 4:
                (n,) = struct.unpack_from("<I", buf, 0)
                if len(buf) < 4 + n:
                    break
                msg = bytes(buf[4:4 + n])
                del buf[:4 + n]
                for num, wt, v, a, e in pc._fields(msg):
                    return num, msg[a:e]
            chunk = s.recv(65536)
            if not chunk:
                return None, b""
            buf += chunk

    def run():
        s, _ = srv.accept()
        srv.close()
        buf = bytearray()
        try:
            kind, _ = frames(s, buf)
            assert kind == pc.F_SUBSCRIBE
            raw = layout == "raw"
            s.sendall(pc._frame(pc.F_SUBSCRIBE_OK, pc._field_varint(1, 1) + pc._field_bytes(2, b"w")
                                + pc._field_varint(8, 64) + pc._field_varint(11, 1 if raw else 0)))
            for seq, rows, weighted in batches:
                if raw:
                    pre, payload = _raw(seq, rows, weighted)
                    s.sendall(pre + payload)
                else:
                    s.sendall(pc._frame(pc.F_BATCH, _pb(seq, rows, weighted)))
            s.settimeout(20)
            stopped = False
            while True:
                if not stopped and len(acked) >= len(batches) - 1:
                    s.sendall(pc._frame(pc.F_ERROR, pc._field_varint(1, 7)
                                        + pc._field_bytes(2, b"stop")))
                    stopped = True
                kind, body = frames(s, buf)
                if kind is None:
                    break
                if kind == pc.F_ACK:
                    for num, wt, v, a, e in pc._fields(body):
                        acked.extend(pc._packed_varints(body, a, e) if wt == 2 else [v])
        except OSError:
            pass
        finally:
            s.close()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return "127.0.0.1:%d" % srv.getsockname()[1], t, acked


# 3 rows: frames below SMALL_FRAME (decoded from their own bytes); 600 rows:
# frames into the raw feed's ring slots (views leased to the loop)
BATCHES = [(1, 3, True), (2, 600, True), (3, 3, False), (4, 600, True), (5, 600, False)]


@pytest.mark.parametrize("layout", ["protobuf", "raw"])
def test_numpy_client_over_a_stand_in(layout):
    addr, t, acked = _serve(BATCHES, layout)
    with pc.TrainerClient(addr, "w", layout=layout) as c:
        assert c.layout == layout
        got = list(c.batches(timeout=10))
    t.join(10)
    assert [b.sequence for b in got] == [s for s, _, _ in BATCHES] == acked  # acked each
    for b, (seq, rows, weighted) in zip(got, BATCHES):
        _check_batch(b, seq, rows, weighted)


torch = None


def _torch():
    global torch
    torch = pytest.importorskip("torch")
    import piperec.torch as pt
    return pt


class FakeKJT:
    """torchrec's KeyedJaggedTensor as far as piperec uses it (torchrec is
    not installed in CI): the constructor's keywords, the accessors."""

    def __init__(self, keys, values, lengths, offsets=None, weights=None, **kw):
        self._k, self._v, self._l, self._o, self._w = keys, values, lengths, offsets, weights
        self.passed = {"offsets": offsets is not None, "weights": weights is not None}

    def keys(self):
        return self._k

    def values(self):
        return self._v

    def lengths(self):
        return self._l

    def weights(self):
        if self._w is None:
            raise ValueError("no weights")
        return self._w

    def weights_or_none(self):
        return self._w

    def to(self, device, non_blocking=False):
        f = lambda t: None if t is None else t.to(device, non_blocking=non_blocking)  # noqa: E731
        return FakeKJT(self._k, f(self._v), f(self._l), f(self._o), f(self._w))


@pytest.fixture
def kjt(monkeypatch):
    """The KeyedJaggedTensor class StreamDataset uses: torchrec's, or FakeKJT."""
    pt = _torch()
    if pt.KeyedJaggedTensor is None:
        monkeypatch.setattr(pt, "KeyedJaggedTensor", FakeKJT)
    return pt.KeyedJaggedTensor


def _sf_weights(sf):
    if isinstance(sf, tuple):
        return sf.weights
    return sf.weights_or_none()


def test_jagged_sparse_stays_a_triple():
    pt = _torch()
    v, ln, w = torch.arange(4), torch.ones(4, dtype=torch.int32), torch.full((4,), 0.5)
    plain = pt.JaggedSparse(["a"], v, ln)
    assert plain.weights is None and len(plain) == 3
    keys, values, lengths = plain  # positional users: unpacking, indexing
    assert plain[-1] is ln and plain[1] is v and keys == ["a"]
    sf = pt.JaggedSparse(["a"], v, ln, w)
    assert sf.weights is w and len(sf) == 3 and sf[-1] is ln and tuple(sf) == (["a"], v, ln)
    assert pt.JaggedSparse(["a"], v, ln, weights=w).weights is w
    assert pt.JaggedSparse(keys=["a"], values=v, lengths=ln).weights is None
    back = pickle.loads(pickle.dumps(sf))  # DataLoader workers pickle batches
    assert isinstance(back, pt.JaggedSparse) and torch.equal(back.weights, w)
    assert pickle.loads(pickle.dumps(plain)).weights is None
    assert "weights" in repr(sf)


@pytest.mark.parametrize("layout", ["protobuf", "raw"])
@pytest.mark.parametrize("fmt", ["triple", "auto"])
def test_dataset_passes_weights(layout, fmt, kjt):
    pt = _torch()
    addr, t, acked = _serve(BATCHES, layout)
    ds = pt.StreamDataset(addr, "w", layout=layout, sparse_format=fmt, idle_timeout=10,
                          pin_memory=False)
    kept = list(ds)  # every batch kept alive: ring slots must not be refilled under them
    t.join(10)
    seqs = [s for s, _, _ in BATCHES]
    # the last batch's ack may come after the server's SHUTDOWN: not sent on the raw feed
    assert [b.sequence for b in kept] == seqs and acked[:len(seqs) - 1] == seqs[:-1]
    for b, (seq, rows, weighted) in zip(kept, BATCHES):
        labels, dense, values, lengths, w = _data(seq, rows)
        sf = b.sparse_features
        assert isinstance(sf, pt.JaggedSparse if fmt == "triple" else kjt)
        if fmt == "auto" and kjt is FakeKJT:
            assert sf.passed["weights"] == weighted  # no weights keyword without weights
        values_t = sf.values if fmt == "triple" else sf.values()
        assert np.array_equal(values_t.numpy(), values)
        got = _sf_weights(sf)
        assert b.weighted_keys == (WEIGHTED if weighted else [])
        if not weighted:
            assert got is None and b.weights is None
            continue
        assert got.dtype == torch.float32 and np.array_equal(got.numpy(), w)
        assert b.weights is got
        eb = b.embedding_bag_inputs(weights=True)
        o = 0
        for k in KEYS:
            ev, eo, ew = eb[k]
            n = len(ev)
            assert np.array_equal(ew.numpy(), w[o:o + n]) and np.array_equal(ev.numpy(), values[o:o + n])
            o += n
        assert all(len(x) == 2 for x in b.embedding_bag_inputs().values())  # the default: pairs


def test_raw_views_are_zero_copy_and_leased():
    pt = _torch()
    buf, a, e = _raw_buf(2, 600)
    b = pc.decode_raw(buf, a, e)
    ds = pt.StreamDataset("127.0.0.1:1", "w", layout="raw", sparse_format="triple")
    out = ds._raw_views(b, "ep", 4, [])
    assert out.sparse_features.weights.data_ptr() == b.weights.ctypes.data  # no copy
    assert out.weighted_keys == WEIGHTED and out.jagged and out.keys == KEYS
    # the host path leases the slot to the weights view too (piperec.feed)
    from piperec.feed import _Slot
    slot = _Slot()

    class OneFeed:
        def next(self, timeout=None):
            return conn, slot, b

        def release(self, s):
            pass

    class Conn:
        endpoint = "ep"
    conn = Conn()
    got = ds._raw_take(OneFeed(), 1, [], False, None, None)
    assert got[3] is slot and slot.leased()
    assert any(r() is b.weights for r in slot.leases)


def test_device_copy_carries_the_weights(monkeypatch, kjt):
    # the GPU feed's copy on a side stream, with stand-ins for the CUDA
    # stream and event (as test_gpufeed does), copying to the CPU
    pt = _torch()
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
    w = _data(2, 600)[4]
    for fmt in ("triple", "auto"):
        for weighted in (True, False):
            del calls[:]
            buf, a, e = _raw_buf(2, 600, weighted=weighted)
            b = pc.decode_raw(buf, a, e)
            ds = pt.StreamDataset("127.0.0.1:1", "w", layout="raw", sparse_format=fmt)
            out = ds._raw_views(b, "ep", 0, [])
            side = FakeStream()
            g, ev = ds._copy_to(out, torch.device("cpu"), side)
            assert calls[0] == ("enter", side) and calls[-1] == ("exit", side)
            ds._on_current_stream(g, ev, torch.device("cpu"))
            # dense, labels, values, lengths, and the weights when there are some
            assert sum(1 for c in calls if c[0] == "rs") == (5 if weighted else 4)
            got = _sf_weights(g.sparse_features)
            assert g.weighted_keys == (WEIGHTED if weighted else [])
            if weighted:
                assert torch.equal(got, torch.from_numpy(w))
            else:
                assert got is None
            moved = g.to("cpu")  # StreamBatch.to keeps them (JaggedSparse rebuilt)
            mw = _sf_weights(moved.sparse_features)
            assert (mw is None) == (not weighted) and (mw is None or torch.equal(mw, got))


def test_embedding_bag_with_per_sample_weights():
    pt = _torch()
    b = pc.decode_batch(_pb(3, rows=5))
    ds = pt.StreamDataset("127.0.0.1:1", "w", sparse_format="triple")
    out = ds._to_torch(b, "ep", 0, [], False)
    ev, eo, ew = out.embedding_bag_inputs(weights=True)["hist"]
    bag = torch.nn.EmbeddingBag(5000, 4, mode="sum")
    got = bag(ev, eo, per_sample_weights=ew)
    fv, fl = b.feature("hist")
    fw, fl = b.feature_weights("hist"), fl.tolist()
    want, o = [], 0
    for r in range(5):
        rows = bag.weight[torch.tensor(fv[o:o + fl[r]])]
        want.append((rows * torch.tensor(fw[o:o + fl[r]])[:, None]).sum(0))
        o += fl[r]
    assert torch.allclose(got, torch.stack(want))
    # a batch without weights: None in the third place
    b0 = pc.decode_batch(_pb(3, rows=5, weighted=False))
    assert all(x[2] is None for x in
               ds._to_torch(b0, "ep", 0, [], False).embedding_bag_inputs(weights=True).values())


# ---------------------------------------------------------------- piperec.files

def _write_part(d, seqs, weighted=True, meta_weighted=None, bad=None):
    """A declared schema's .npy output (docs/formats.md) holding the rows of
    the batches `seqs` (3 rows each), with sparse/hist.weights.npy when
    `weighted`; meta.json's weighted_keys from meta_weighted (default: as
    `weighted`; None in meta: an older output). Returns the per-feature
    (values, lengths, weights) it wrote."""
    os.makedirs(os.path.join(d, "sparse"))
    feats = {k: ([], [], []) for k in KEYS}
    labels, dense = [], []
    for seq in seqs:
        lab, den, values, lengths, w = _data(seq, 3)
        labels.append(lab)
        dense.append(den)
        at = 0
        for f, k in enumerate(KEYS):
            ln = lengths[3 * f:3 * f + 3]
            n = int(ln.sum())
            feats[k][0].append(values[at:at + n])
            feats[k][1].append(ln)
            feats[k][2].append(w[at:at + n])
            at += n
    meta = {"pipeline": "w", "jagged": True, "rows": 3 * len(seqs), "n_labels": 1, "n_dense": 2,
            "feature_keys": KEYS, "label_names": ["click"], "dense_names": ["a", "b"],
            "vocab_sizes": [5000] * len(KEYS)}
    mw = weighted if meta_weighted is None else meta_weighted
    if mw:
        meta["weighted_keys"] = WEIGHTED if mw is True else mw
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f)
    np.save(os.path.join(d, "labels.npy"), np.concatenate(labels))
    np.save(os.path.join(d, "dense.npy"), np.concatenate(dense))
    out = {}
    for k, (v, ln, w) in feats.items():
        v, ln, w = np.concatenate(v), np.concatenate(ln), np.concatenate(w)
        np.save(os.path.join(d, "sparse", k + ".values.npy"), v)
        np.save(os.path.join(d, "sparse", k + ".lengths.npy"), ln)
        if weighted and k in WEIGHTED:
            np.save(os.path.join(d, "sparse", k + ".weights.npy"),
                    w[:-1] if bad == "short" else w)
        out[k] = (v, ln, w)
    return out


def _files_collect(ds):
    """Per feature, the concatenation over the batches of its values,
    lengths and weights (None when a batch had none)."""
    pt = _torch()
    got = {k: ([], [], []) for k in KEYS}
    sizes = []
    for b in ds:
        sizes.append(b.rows)
        sf = b.sparse_features
        w = _sf_weights(sf)
        assert (w is None) == (not b.weighted_keys)
        assert b.weights is w
        for k, (ev, eo, ew) in b.embedding_bag_inputs(weights=True).items():
            lengths = torch.diff(torch.cat([eo, torch.tensor([len(ev)])])).numpy()
            got[k][0].append(ev.numpy())
            got[k][1].append(lengths)
            got[k][2].append(None if ew is None else ew.numpy())
        assert isinstance(sf, pt.JaggedSparse) or hasattr(sf, "weights_or_none")
    return got, sizes


@pytest.mark.parametrize("fmt", ["triple", "auto"])
def test_files_read_weights(tmp_path, fmt, kjt):
    from piperec.files import FileDataset
    want1 = _write_part(str(tmp_path / "p1"), [1, 2, 3])
    want2 = _write_part(str(tmp_path / "p2"), [4, 5])
    ds = FileDataset([str(tmp_path / "p1"), str(tmp_path / "p2")], batch_size=4,
                     sparse_format=fmt)
    assert ds.weighted_keys == WEIGHTED and ds.jagged
    got, sizes = _files_collect(ds)
    assert sizes == [4, 4, 4, 3]  # batches across the two parts
    for k in KEYS:
        v = np.concatenate([want1[k][0], want2[k][0]])
        w = np.concatenate([want1[k][2], want2[k][2]])
        assert np.array_equal(np.concatenate(got[k][0]), v), k
        gw = np.concatenate(got[k][2])
        assert gw.dtype == np.float32 and np.array_equal(gw, w), k
        if k not in WEIGHTED:
            assert np.all(gw == 1), k
    b = next(iter(ds))
    assert b.weighted_keys == WEIGHTED
    if fmt == "auto" and kjt is FakeKJT:
        assert b.sparse_features.passed["weights"]


def test_files_older_output_has_no_weights(tmp_path, kjt):
    from piperec.files import FileDataset
    _write_part(str(tmp_path / "old"), [1, 2], weighted=False)
    for fmt in ("triple", "auto"):
        ds = FileDataset(str(tmp_path / "old"), batch_size=4, sparse_format=fmt)
        assert ds.weighted_keys == []
        for b in ds:
            assert b.weighted_keys == [] and _sf_weights(b.sparse_features) is None
            if fmt == "auto" and kjt is FakeKJT:
                assert not b.sparse_features.passed["weights"]


def test_files_weighting_change_ends_a_batch(tmp_path):
    from piperec.files import FileDataset
    _write_part(str(tmp_path / "a"), [1, 2], weighted=False)
    _write_part(str(tmp_path / "b"), [3, 4])
    ds = FileDataset([str(tmp_path / "a"), str(tmp_path / "b")], batch_size=4,
                     sparse_format="triple")
    got = [(b.rows, b.weighted_keys) for b in ds]
    assert got == [(4, []), (2, []), (4, WEIGHTED), (2, WEIGHTED)]


@pytest.mark.parametrize("bad", ["missing_file", "short", "unknown_key"])
def test_files_malformed_weights_refused(tmp_path, bad):
    _torch()
    from piperec.files import FileDataset
    if bad == "missing_file":  # meta.json names a feature without its weights.npy
        _write_part(str(tmp_path / "x"), [1], weighted=False, meta_weighted=True)
    elif bad == "short":
        _write_part(str(tmp_path / "x"), [1, 2], bad="short")
    else:
        _write_part(str(tmp_path / "x"), [1], meta_weighted=["hist", "nope"])
    with pytest.raises(ValueError) as ei:
        FileDataset(str(tmp_path / "x"), batch_size=4, sparse_format="triple")
    assert "weights" in str(ei.value)


# ---------------------------------------------------------------- against piperec (ctest)

SCHEMA = """    schema:
      labels: [ { name: y, path: y } ]
      sparse:
        - { name: u, path: u, ops: [ { hash: 1000 } ] }
        - { name: cats, path: cats.id, list: { max_len: 8 },
            weights: { path: cats.score, default: 0.25 }, ops: [ { hash: 1000 } ] }
        - { name: tags, path: tags, list: { max_len: 8 }, ops: [ { hash: 50 } ] }
"""


def _events(n):
    """JSON events with a weighted list of objects (some without a score:
    the default 0.25), and the weights they give, in order."""
    events, want = [], []
    for i in range(n):
        cats = []
        for j in range(i % 4):
            c = {"id": "c%d" % ((i + j) % 17)}
            if (i + j) % 3:
                c["score"] = 0.5 * ((i * 7 + j) % 9) + 0.125
            cats.append(c)
        want += [c.get("score", 0.25) for c in cats]
        events.append({"y": i % 2, "u": "u%d" % i, "cats": cats,
                       "tags": ["t%d" % k for k in range(i % 3)]})
    return events, np.array(want, dtype=np.float32)


def _piperec():
    P = os.environ.get("PIPEREC")
    if not P or not os.path.exists(P):
        pytest.skip("PIPEREC not set: run through ctest")
    return P


def _process(P, tmp_path, n):
    """`piperec process` of n events: (output dir, the events' weights)."""
    cfg = tmp_path / "w.yaml"
    cfg.write_text("pipelines:\n  - name: w\n    source: { kafka: { topics: [w] }, format: json }\n"
                   + SCHEMA)
    events, want = _events(n)
    (tmp_path / "ev.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    r = subprocess.run([P, "process", "--config", str(cfg), "--input", str(tmp_path / "ev.jsonl"),
                        "--output", str(tmp_path / "out"), "--no-progress"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return str(tmp_path / "out"), want


def test_process_output_weights_against_the_events(tmp_path):
    """`piperec process` of a schema with a weighted list of objects (scores
    with a default) and unweighted features: FileDataset's weights are the
    events' scores, value for value, and ones elsewhere."""
    P = _piperec()
    _torch()
    from piperec.files import FileDataset
    out, want = _process(P, tmp_path, 300)
    meta = json.load(open(os.path.join(out, "meta.json")))
    assert meta.get("weighted_keys") == ["cats"], meta
    ds = FileDataset(out, batch_size=64, sparse_format="triple")
    assert ds.weighted_keys == ["cats"]
    per = {"u": [], "cats": [], "tags": []}
    for b in ds:
        for k, (ev, eo, ew) in b.embedding_bag_inputs(weights=True).items():
            per[k].append(ew.numpy())
    assert np.array_equal(np.concatenate(per["cats"]), want)
    assert np.all(np.concatenate(per["u"]) == 1) and np.all(np.concatenate(per["tags"]) == 1)
    assert np.array_equal(np.concatenate(per["cats"]),
                          np.load(os.path.join(out, "sparse", "cats.weights.npy")))


def test_stream_weights_both_layouts(tmp_path, piperec_broker, free_port):
    """`piperec run` (one partition, two pipelines over the same topic): the
    numpy client over TrainingBatch frames and StreamDataset over the raw
    layout get the weights of `piperec process` for the same events, value
    for value, with the values they weigh."""
    P = _piperec()
    _torch()
    import piperec.torch as pt
    n = 2000
    out, want = _process(P, tmp_path, n)
    boot = piperec_broker(1, "w")
    r = subprocess.run([P, "produce", "--bootstrap", boot, "--topic", "w", "--format", "json",
                        "--input", str(tmp_path / "ev.jsonl")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    ports = [free_port(), free_port()]
    pipes = "".join("""  - name: p%d
    source:
      kafka:
        topics: [w]
        group.id: g%d
        properties: { bootstrap.servers: "%s", auto.offset.reset: earliest, fetch.wait.max.ms: "10" }
      format: json
%s    batch: { size: 256, max_delay_ms: 20 }
    sinks:
      trainer: { listen: "127.0.0.1:%d" }
""" % (i, i, boot, SCHEMA, port) for i, port in enumerate(ports))
    cfg = tmp_path / "run.yaml"
    cfg.write_text("pipelines:\n" + pipes + "http: { listen: \"127.0.0.1:0\" }\n")
    run = subprocess.Popen([P, "run", "--config", str(cfg)], stderr=open(tmp_path / "run.err", "w"))
    try:
        deadline = time.time() + 20
        while True:
            try:
                c = pc.TrainerClient("127.0.0.1:%d" % ports[0], "p0", timeout=2)
                break
            except OSError:
                assert time.time() < deadline, (tmp_path / "run.err").read_text()[-3000:]
                time.sleep(0.1)
        got = {"protobuf": [], "raw": []}
        with c:
            rows = 0
            for b in c.batches(timeout=30):
                assert b.layout == "protobuf" and b.weighted_keys == ["cats"]
                got["protobuf"].append({k: (b.feature(k)[0].copy(), b.feature_weights(k).copy())
                                        for k in b.keys})
                rows += b.rows
                if rows >= n:
                    break
        ds = pt.StreamDataset("127.0.0.1:%d" % ports[1], "p1", layout="raw", sparse_format="triple",
                              idle_timeout=30, connect_timeout=20)
        rows = 0
        for b in ds:
            assert b.weighted_keys == ["cats"]
            got["raw"].append({k: (v.numpy().copy(), w.numpy().copy()) for k, (v, _, w)
                               in b.embedding_bag_inputs(weights=True).items()})
            rows += b.rows
            if rows >= n:
                break
        assert ds.info.get("layout") == pc.LAYOUT_RAW  # the server sent the raw layout
    finally:
        run.kill()
        run.wait()
    vals = {k: np.load(os.path.join(out, "sparse", k + ".values.npy")) for k in ("u", "cats", "tags")}
    for layout, batches in got.items():
        for k in ("u", "cats", "tags"):
            v = np.concatenate([x[k][0] for x in batches])
            w = np.concatenate([x[k][1] for x in batches])
            assert np.array_equal(v, vals[k]), (layout, k)
            assert w.dtype == np.float32 and len(w) == len(v), (layout, k)
            assert np.array_equal(w, want if k == "cats" else np.ones(len(v), np.float32)), (layout, k)
