"""piperec_client — a small pure-Python client for piperec's trainer stream.

Speaks the protocol of docs/trainer-protocol.md (u32 little-endian length +
one protobuf ``piperec.trainer.v1.Frame`` per message) with a tiny built-in
protobuf reader/writer, so it needs nothing but the standard library and
numpy (no generated ``_pb2`` modules, no protoc). Tensors come back as numpy
arrays that are views on the received frame (``np.frombuffer``, zero copy),
and as torch tensors through :meth:`Batch.to_torch` when torch is installed.

Example::

    from piperec_client import TrainerClient

    with TrainerClient("127.0.0.1:7070", "criteo", credits=8) as client:
        for batch in client.batches():      # acks each batch when the next one is asked for
            dense, sparse, labels = batch.dense, batch.sparse, batch.labels
            ...                             # [rows, n_dense] float32, [rows, n_sparse] int32/64, [rows] int32

Raw tensor layout (``layout="raw"``, docs/trainer-protocol.md "Raw batch
layout"): the server sends each batch as one fixed header and 64-byte
aligned sections (dense and labels float32 row-major, KeyedJaggedTensor
int64 values and int32 lengths, and float32 weights when a list feature is
weighted), and ``recv(into=...)`` receives a batch
straight into a caller's preallocated buffer (pinned memory for a GPU
feed), the arrays being views on it. A server that predates the layout
answers with TrainingBatch frames, which decode as always.

A server that goes away raises :class:`ConnectionClosed` (a
``ConnectionError`` and an ``EOFError``) naming the endpoint and what
happened, from every call that touches the socket.

Delivery is at least once: a batch that is not acked before the connection
drops is sent again, possibly to another trainer. Ack only after the batch
is used (``batches()`` does that for you).
"""

import functools
import os
import socket
import struct
import time

import numpy as np

__all__ = ["TrainerClient", "Batch", "Position", "ServerError", "ConnectionClosed", "PROTOCOL_VERSION",
           "LAYOUT_PROTOBUF", "LAYOUT_RAW", "decode_raw", "UnknownFeature"]

PROTOCOL_VERSION = 1
MAX_FRAME = 1 << 31
SUBSCRIBE_FRAME_MAX = 1 << 20  # the frames before SubscribeOk (it, Ping, Error) are small

# Frame oneof field numbers (schemas/trainer.proto).
F_SUBSCRIBE, F_SUBSCRIBE_OK, F_BATCH, F_ACK, F_CREDIT, F_PING, F_PONG, F_ERROR = range(1, 9)
F_CHECKPOINT_COMMIT, F_CHECKPOINT_OK, F_RAW_BATCH = 9, 10, 11

# Subscribe.layout / SubscribeOk.layout.
LAYOUT_PROTOBUF, LAYOUT_RAW = 0, 1
_LAYOUTS = {"protobuf": LAYOUT_PROTOBUF, "raw": LAYOUT_RAW}

# Raw layout header (docs/trainer-protocol.md): magic "PRBT", version,
# header bytes, flags, rows, n_dense, n_labels, n_keys, preamble, epoch,
# sequence, n_values, n_notices, n_sections; then (offset, bytes) pairs.
RAW_MAGIC, RAW_VERSION, RAW_HEADER = 0x54425250, 1, 128
RAW_JAGGED, RAW_POPULAR, RAW_OFFSETS, RAW_UNIT, RAW_VALUES32 = 1, 2, 4, 8, 16
RAW_WEIGHTS = 32  # section 7 (float32 weights, one per value) present; 8 sections
_RAW_HDR = struct.Struct("<IHHIIIIIIQQQII")
(S_DENSE, S_LABELS, S_LENGTHS, S_VALUES, S_OFFSETS, S_NOTICES, S_META, S_WEIGHTS) = range(8)
_RAW_NSEC = 7  # sections every raw batch has; S_WEIGHTS comes with RAW_WEIGHTS only
_RAW_TABLE = struct.Struct("<%dI" % (2 * _RAW_NSEC))  # the section table: (offset, bytes) each
_RAW_SEC7 = struct.Struct("<II")  # section 7's (offset, bytes), at header offset 120
_F4, _I4, _I8 = np.dtype("<f4"), np.dtype("<i4"), np.dtype("<i8")
SMALL_FRAME = 4096  # frames up to this size never go into a caller's buffer
HEAD_READ = 256  # bytes read for a frame's head when it may go into a caller's buffer

ERROR_CODES = {
    0: "UNSPECIFIED", 1: "BAD_FRAME", 2: "UNSUPPORTED_VERSION", 3: "UNKNOWN_PIPELINE",
    4: "PROTOCOL", 5: "UNKNOWN_SEQUENCE", 6: "TIMEOUT", 7: "SHUTDOWN",
    8: "UNAUTHENTICATED", 9: "UNAVAILABLE",
}


class ServerError(Exception):
    """The server sent an Error message (code name in .code; .endpoint the
    server that sent it, named in the message when known)."""

    def __init__(self, code, message, endpoint=None):
        self.code = ERROR_CODES.get(code, str(code))
        self.endpoint = endpoint
        where = "" if endpoint is None else "piperec at %s: " % endpoint
        super().__init__("%sserver error %s: %s" % (where, self.code, message))


class UnknownFeature(ValueError, KeyError):
    """Batch.feature(name) / feature_weights(name) of a name the batch's
    ``keys`` lack: a ValueError (what ``keys.index`` raised before) and a
    KeyError."""

    def __str__(self):  # a KeyError would quote its message
        return str(self.args[0]) if self.args else ""


class ConnectionClosed(ConnectionError, EOFError):
    """The server went away: closed the connection, reset it, or a write
    found it gone. The message names the endpoint and the call that saw it.
    It is an ``EOFError`` too, so code written for clean closes still ends
    its loop."""


def _named(e, address, what=""):
    """`e` again, of the same type (callers retry on a refused, reset or
    timed-out connection by type), with a message that names the endpoint
    and what failed; a type that cannot be rebuilt so becomes
    ConnectionClosed (an OSError too)."""
    msg = "piperec at %s: %s%s" % (address, e.strerror or e, what)
    try:
        return type(e)(e.errno, msg) if e.errno is not None else type(e)(msg)
    except Exception:  # noqa: BLE001 — a constructor with other arguments
        return ConnectionClosed(msg)


# ---------------------------------------------------------------- protobuf, the few bits we need

def _varint(v):
    v = int(v)  # a numpy integer would overflow below (NumPy 2 / NEP 50)
    if v < 0:
        v += 1 << 64
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _field_varint(num, v):
    return _varint(num << 3) + _varint(v) if v else b""


def _field_bytes(num, data):
    return _varint((num << 3) | 2) + _varint(len(data)) + data if data else b""


def _read_varint(buf, pos):
    if pos < len(buf) and buf[pos] < 0x80:  # the common one-byte case
        return int(buf[pos]), pos + 1
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _packed_varints(buf, a, e):
    """The varints of a packed repeated field, buf[a:e], as a list: one
    loop over the bytes, no call per value (a batch's 26+ vocabulary sizes
    are parsed per batch)."""
    out, v, shift = [], 0, 0
    for byte in bytes(buf[a:e]):
        v |= (byte & 0x7F) << shift
        if byte < 0x80:
            out.append(v)
            v = shift = 0
        else:
            shift += 7
            if shift > 63:
                raise ValueError("truncated varint")
    if shift:
        raise ValueError("truncated varint")
    return out


def _fields(buf, start=0, end=None):
    """Yield (field number, wire type, value, start, end) over a message.

    value is the integer for varint/fixed fields; for length-delimited ones
    the payload is buf[start:end] (value = None)."""
    pos = start
    end = len(buf) if end is None else end
    while pos < end:
        key, pos = _read_varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, pos = _read_varint(buf, pos)
            yield num, wt, v, pos, pos
        elif wt == 1:
            yield num, wt, struct.unpack_from("<Q", buf, pos)[0], pos, pos + 8
            pos += 8
        elif wt == 5:
            yield num, wt, struct.unpack_from("<I", buf, pos)[0], pos, pos + 4
            pos += 4
        elif wt == 2:
            n, pos = _read_varint(buf, pos)
            if pos + n > end:
                raise ValueError("truncated field %d" % num)
            yield num, wt, None, pos, pos + n
            pos += n
        else:
            raise ValueError("unsupported wire type %d" % wt)


def _signed64(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def _signed32(v):
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def _frame(num, body):
    msg = _varint((num << 3) | 2) + _varint(len(body)) + body
    return struct.pack("<I", len(msg)) + msg


# ---------------------------------------------------------------- batches

def dense_slices(dense_names):
    """{feature: slice of the dense columns} from a batch's (or meta.json's)
    ``dense_names``: a dense vector's columns ``NAME[0]``..``NAME[dim-1]``
    (``dim:`` in the schema) are one feature, ``slice(k, k + dim)``; a
    scalar feature is ``slice(k, k + 1)``. So ``dense[:, s["item_emb"]]``
    is the [rows, dim] embedding, a view. Cached per list of names (every
    batch of a stream has the same)."""
    return dict(_dense_slices(tuple(dense_names)))


@functools.lru_cache(maxsize=16)
def _dense_slices(dense_names):
    out, order = {}, []
    for k, n in enumerate(dense_names):
        name = n[:n.rindex("[")] if n.endswith("]") and "[" in n else n
        if name in out and out[name].stop == k:
            out[name] = slice(out[name].start, k + 1)
        else:
            out[name] = slice(k, k + 1)
            order.append(name)
    return tuple((n, out[n]) for n in order)


class Batch:
    """One TrainingBatch. Arrays are zero-copy views on the received frame:
    labels int32 [rows], dense float32 [rows, n_dense], sparse int32 or int64
    [rows, n_sparse] (column-major underneath, so dense[:, c] is contiguous).

    `epoch` is the server's restart epoch (0 when it keeps no state.dir):
    `sequence` restarts at 1 in each epoch, so (epoch, sequence) strictly
    increases across server restarts; a higher epoch means "restarted, what
    follows may repeat rows you already saw (at-least-once)".

    `replica` names the piperec replica that built the batch (its source's
    group_instance_id, else $POD_NAME, else its host name; "" from servers
    that predate it).

    `popular` is True for a popular batch (the pipeline's batch.split is
    popular): every row's sparse indices were in the server's hot sets, so a
    Hotline-style trainer can run it against GPU-resident embeddings only.
    Popular and regular batches share one `sequence` (each stream alone has
    gaps) and each keeps per-partition order; every row comes in exactly one
    of them (docs/trainer-protocol.md, "Popular batches").

    `hot_version` is the hot-set version the batch's rows were judged
    against (split popular; the latest of its rows'): compare it with the
    `version` of GET /v1/hot to know whether pinned rows are current. 0 when
    the pipeline does not split, and from servers that predate it.

    `recycled` lists the recycled-index notices of a bounded vocabulary
    (transform eviction lru/lfu/ttl) as (column, index, row, number) tuples:
    from batch row `row` on, embedding row `index` of sparse column `column`
    belongs to a new value, so reset it (weights and optimizer state) before
    training on that row. `number` counts the pipeline's notices from 1; after
    a server restart journaled notices come again with their numbers: apply
    each number once (`RecycledTracker`, piperec.torch.reset_recycled). []
    when none, and from servers without eviction.

    Jagged batches (a pipeline with a declared ``schema:``, ``jagged`` True;
    docs/trainer-protocol.md, "Jagged batches"): ``keys`` names the sparse
    and list features in schema order, ``values`` int64 holds every value
    key-major (all of feature 0's values, rows in order, then feature 1, ...),
    ``lengths`` int32 [n_keys * rows] key-major gives the true count per
    (feature, row) (1 for a single-valued feature, 0.. for a list), the
    KeyedJaggedTensor layout; ``labels`` is float32 [rows, n_labels] and
    ``dense`` float32 [rows, n_dense] (row-major); ``label_names`` and
    ``dense_names`` name their columns; ``sparse`` is None; ``vocab_sizes``
    and the notices' ``column`` index ``keys``. ``feature(name)`` gives one
    feature's (values, lengths). A Criteo batch has ``jagged`` False and its
    ``keys`` / ``values`` / ``lengths`` are derived from ``sparse`` (one value
    per row and column, a copy).

    A batch of the raw layout (``layout`` "raw"; TrainerClient(layout="raw"))
    has the same attributes, all views on the received buffer without a
    copy: ``labels`` float32 ([rows] for a Criteo batch, [rows, n_labels]
    for a jagged one), ``dense`` float32 [rows, n_dense] row-major,
    ``values`` int64 and ``lengths`` int32 (key-major, for Criteo too),
    ``sparse`` int64 [rows, n_sparse] (a transposed view of ``values``) for
    a Criteo batch, and ``kjt_offsets`` int32 [n_keys * rows + 1] when
    asked for (``kjt_offsets=True``), else None. With ``compact=True`` a
    Criteo batch's ``values``/``sparse`` are int32 when the pipeline's
    columns are, and ``lengths`` is a shared array of ones (read only by
    convention). ``raw_flags`` is the raw header's flags word (8: unit
    lengths, 16: int32 values, 32: weights; docs/trainer-protocol.md), 0
    for a TrainingBatch; ``piperec.feed.widen`` clears 8 and 16 when it
    rebuilds the full form.

    Weighted lists (id-score lists, ``weights:`` in the schema): ``weights``
    is float32 [n_values], one weight per value in the order of ``values``
    (the KeyedJaggedTensor's weights: 1.0 on the values of a feature without
    weights), a view on the frame like ``values``; ``weighted_keys`` names
    the features whose weights came from the events. A batch of a schema
    without weighted lists (and every Criteo batch) has ``weights`` None and
    ``weighted_keys`` []. ``feature_weights(name)`` gives one feature's
    weights, aligned with ``feature(name)``'s values.

    Shared vocabularies (``table:`` in the schema): ``feature_tables`` gives
    each feature's vocabulary table, in the order of ``keys`` (its own name,
    or the feature whose vocabulary it shares), [] when no feature shares
    one; ``tables`` is that list, or ``keys`` when it is empty. Features of
    one table have one index per value: give them one embedding table."""

    __slots__ = ("pipeline", "replica", "popular", "hot_version", "recycled", "epoch", "sequence", "rows", "n_dense", "n_sparse", "sparse_width", "labels",
                 "dense", "sparse", "offsets", "min_event_time_ms", "max_event_time_ms",
                 "emit_time_ms", "vocab_sizes", "sparse_names", "jagged", "n_labels",
                 "label_names", "dense_names", "_keys", "_values", "_lengths", "layout",
                 "kjt_offsets", "raw_flags", "weights", "weighted_keys", "feature_tables")

    @property
    def tables(self):
        """Each feature's vocabulary table (feature_tables, else the keys)."""
        return list(self.feature_tables) if self.feature_tables else list(self.keys)

    @property
    def keys(self):
        """Sparse feature names (KeyedJaggedTensor keys)."""
        if self._keys is None:
            names = list(self.sparse_names)
            self._keys = names if len(names) == self.n_sparse else [
                "C%d" % (i + 1) for i in range(self.n_sparse)]
        return self._keys

    @property
    def values(self):
        """int64 values, key-major (KeyedJaggedTensor values)."""
        if self._values is None:
            self._values = np.ascontiguousarray(self.sparse.T, dtype=np.int64).reshape(-1)
        return self._values

    @property
    def lengths(self):
        """int32 [n_keys * rows], key-major (KeyedJaggedTensor lengths)."""
        if self._lengths is None:
            self._lengths = np.ones(self.n_sparse * self.rows, dtype=np.int32)
        return self._lengths

    def dense_feature(self, name):
        """One dense feature's columns, a view: float32 [rows, dim] for a
        dense vector (``dim:``), [rows, 1] for a number (dense_slices)."""
        return self.dense[:, dense_slices(self.dense_names)[name]]

    def _feature_span(self, name):
        """(first value, value count, lengths [rows]) of feature `name`;
        ValueError (a KeyError too) for a name not in ``keys``."""
        try:
            f = self.keys.index(name)
        except ValueError:
            raise UnknownFeature("no feature %r in this batch (keys: %s)"
                                 % (name, ", ".join(self.keys))) from None
        lengths = self.lengths[f * self.rows:(f + 1) * self.rows]
        start = int(self.lengths[:f * self.rows].sum(dtype=np.int64))
        return start, int(lengths.sum(dtype=np.int64)), lengths

    def feature(self, name):
        """(values, lengths) of one sparse feature: lengths int32 [rows]."""
        start, n, lengths = self._feature_span(name)
        return self.values[start:start + n], lengths

    def feature_weights(self, name):
        """One feature's weights: float32, as long as ``feature(name)``'s
        values (a view on ``weights``); ones for a feature without weights
        in a batch that has some; None when the batch has no weights. An
        unknown name raises as ``feature(name)`` does."""
        start, n, _ = self._feature_span(name)
        if self.weights is None:
            return None
        return self.weights[start:start + n]

    def to_torch(self):
        """(dense, sparse, labels) as torch tensors sharing memory with the
        arrays; for a jagged batch `sparse` is the triple (keys, values,
        lengths). Weighted lists' weights are not in it (the triple stays a
        triple for its callers): ``torch.from_numpy(batch.weights)``, or
        piperec.torch's StreamDataset, whose KeyedJaggedTensor carries them."""
        import torch  # optional dependency
        def conv(a):
            if not a.flags.aligned:
                a = np.ascontiguousarray(a)  # rare: misaligned inside the frame, one copy
            return torch.from_numpy(a)
        if self.jagged:
            return conv(self.dense), (list(self.keys), conv(self.values), conv(self.lengths)), \
                conv(self.labels)
        return conv(self.dense), conv(self.sparse), conv(self.labels)

    def __repr__(self):
        return "Batch(pipeline=%r, epoch=%d, sequence=%d, rows=%d%s)" % (
            self.pipeline, self.epoch, self.sequence, self.rows, ", popular" if self.popular else "")

    @property
    def position(self):
        """(epoch, sequence): strictly increasing per pipeline across restarts."""
        return (self.epoch, self.sequence)


def _decode_range(buf, s, e):
    r = {"topic": "", "partition": 0, "first_offset": 0, "last_offset": 0, "rows": 0}
    for num, wt, v, a, b in _fields(buf, s, e):
        if num == 1 and wt == 2:
            r["topic"] = bytes(buf[a:b]).decode()
        elif wt == 0 and num in (2, 3, 4, 5):
            key = ("partition", "first_offset", "last_offset", "rows")[num - 2]
            r[key] = _signed32(v) if num == 2 else (_signed64(v) if num in (3, 4) else v)
    return r


def _decode_recycled(buf, s, e):
    """RecycledIndices: parallel arrays (packed or not) -> [(column, index, row, number)]."""
    cols = {1: [], 2: [], 3: [], 4: []}
    for num, wt, v, a, b in _fields(buf, s, e):
        if num not in cols:
            continue
        if wt == 0:
            cols[num].append(v)
        elif wt == 2:
            p = a
            while p < b:
                x, p = _read_varint(buf, p)
                cols[num].append(x)
    n = len(cols[1])
    if any(len(cols[k]) != n for k in (2, 3, 4)):
        raise ValueError("RecycledIndices: arrays of different lengths")
    return [(cols[1][i], _signed64(cols[2][i]), cols[3][i], cols[4][i]) for i in range(n)]


class RecycledTracker:
    """Applies each recycled-index notice once, in order.

    ``fresh(batch)`` returns the notices of `batch` not seen before (by
    number), for the caller to reset; notices re-sent after a server restart
    (same numbers) are dropped. ``last`` is the highest number applied; keep
    it in the trainer checkpoint (``state_dict``/``load_state_dict``).

    A new tracker (no ``last``, nothing loaded) starts at the first number it
    meets: a stream that begins past #1 (a replica started from a copied
    snapshot, a vocabulary imported, a trainer joining a running pipeline)
    has nothing below it for this trainer's fresh model to reset, and
    waiting for those numbers kept every later one in the set for good."""

    def __init__(self, last=0):
        self.last = last
        self._seen = set()
        self._started = last > 0

    def fresh(self, batch):
        out = []
        notices = getattr(batch, "recycled", None) or ()
        if notices and not self._started:
            self.last = min(n[3] for n in notices) - 1
        self._started = self._started or bool(notices)
        for n in notices:
            num = n[3]
            if num <= self.last or num in self._seen:
                continue  # applied already (a re-announcement after a restart)
            self._seen.add(num)
            out.append(n)
        while (self.last + 1) in self._seen:  # keep the set small: numbers are dense
            self.last += 1
            self._seen.discard(self.last)
        return out

    def state_dict(self):
        return {"last": self.last, "seen": sorted(self._seen)}

    def load_state_dict(self, st):
        self.last = int(st.get("last", 0))
        self._seen = set(int(x) for x in st.get("seen", ()))
        self._started = True


def _new_batch():
    b = Batch()
    b.pipeline, b.sequence, b.rows, b.n_dense, b.n_sparse, b.sparse_width = "", 0, 0, 0, 0, 4
    b.epoch = 0
    b.replica = ""
    b.popular = False
    b.hot_version = 0
    b.recycled = []
    b.min_event_time_ms = b.max_event_time_ms = b.emit_time_ms = 0
    b.offsets, b.vocab_sizes, b.sparse_names = [], [], []
    b.jagged, b.n_labels, b.label_names, b.dense_names = False, 0, [], []
    b._keys = b._values = b._lengths = None
    b.layout, b.kjt_offsets = "protobuf", None
    b.raw_flags = 0
    b.weights, b.weighted_keys = None, []
    b.feature_tables = []
    return b


# _decode_fields' tables: varint fields stored as they are, as signed 64-bit,
# and as booleans (attribute names of Batch)
_META_VARINT = {2: "sequence", 3: "rows", 4: "n_dense", 5: "n_sparse", 6: "sparse_width",
                16: "epoch", 21: "hot_version", 26: "n_labels"}
_META_SIGNED = {11: "min_event_time_ms", 12: "max_event_time_ms", 13: "emit_time_ms"}
_META_BOOL = {20: "popular", 22: "jagged"}
_META_TEXT = {23: None, 29: "label_names", 30: "dense_names", 15: "sparse_names",
              32: "weighted_keys", 33: "feature_tables"}
_TENSOR_FIELDS = frozenset((7, 8, 9, 24, 25, 27, 28, 31))
_PACKED = {}  # packed vocab_sizes bytes -> tuple of ints (they change slowly)


def _packed_cached(buf, a, e):
    """_packed_varints of buf[a:e], remembered by its bytes: a stream's
    vocabulary sizes are the same from one batch to the next most of the
    time, and parsing 26+ varints in Python was ~10 us a batch (issue 22)."""
    key = bytes(buf[a:e])
    out = _PACKED.get(key)
    if out is None:
        if len(_PACKED) >= 64:
            _PACKED.clear()
        out = _PACKED[key] = tuple(_packed_varints(key, 0, len(key)))
    return out


def _decode_fields(b, buf, start, end):
    """Fill b from a TrainingBatch's fields; returns (tensor spans, feature keys).

    One inline loop (no generator, one-byte varints read in place, tables
    of fields): it runs per batch on the meta section of every raw batch
    and on every protobuf batch (issue 22: 17 -> 8 us a raw batch's meta)."""
    feature_keys, spans = [], {}
    pos, n = start, len(buf)
    if end is None:
        end = n
    while pos < end:
        key = buf[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = _read_varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 1 or wt == 5:
            pos += 8 if wt == 1 else 4
            if pos > n:
                raise ValueError("truncated field %d" % num)
            continue
        if wt != 0 and wt != 2:
            raise ValueError("unsupported wire type %d" % wt)
        if pos < n and buf[pos] < 0x80:
            v = buf[pos]
            pos += 1
        else:
            v, pos = _read_varint(buf, pos)
        if wt == 0:
            if num in _META_VARINT: setattr(b, _META_VARINT[num], v)
            elif num in _META_SIGNED: setattr(b, _META_SIGNED[num], _signed64(v))
            elif num in _META_BOOL: setattr(b, _META_BOOL[num], v != 0)
            elif num == 14: b.vocab_sizes.append(v)
            continue
        a, e = pos, pos + v
        if e > end:
            raise ValueError("truncated field %d" % num)
        pos = e
        if num in _TENSOR_FIELDS: spans[num] = (a, e)
        elif num == 14: b.vocab_sizes += _packed_cached(buf, a, e)
        elif num in _META_TEXT:
            text = bytes(buf[a:e]).decode()
            (feature_keys if num == 23 else getattr(b, _META_TEXT[num])).append(text)
        elif num == 1: b.pipeline = bytes(buf[a:e]).decode()
        elif num == 10: b.offsets.append(_decode_range(buf, a, e))
        elif num == 17: b.replica = bytes(buf[a:e]).decode(errors="replace")
        elif num == 18: b.recycled = _decode_recycled(buf, a, e)
    return spans, feature_keys


def decode_batch(buf, start=0, end=None):
    """Decode a TrainingBatch from buf[start:end] (buf: bytes or bytearray)."""
    mv = memoryview(buf)
    b = _new_batch()
    spans, feature_keys = _decode_fields(b, buf, start, end)
    rows = b.rows
    sdt = np.int64 if b.sparse_width == 8 else np.int32

    def tensor(num, dtype, cols):
        a, e = spans.get(num, (0, 0))
        want = rows * max(cols, 1) * np.dtype(dtype).itemsize
        if e - a != want:
            if num == 7 and e == a:
                return np.zeros(rows, dtype=dtype)  # no labels in this pipeline
            raise ValueError("field %d: %d bytes, expected %d" % (num, e - a, want))
        arr = np.frombuffer(mv[a:e], dtype=np.dtype(dtype).newbyteorder("<"))
        if cols == 0:
            return arr
        return arr.reshape(cols, rows).T  # column-major on the wire: a transposed view, no copy

    if b.jagged:
        return _decode_jagged(b, mv, spans, feature_keys)
    b.labels = tensor(7, np.int32, 0)
    b.dense = tensor(8, np.float32, b.n_dense) if b.n_dense else np.zeros((rows, 0), np.float32)
    b.sparse = tensor(9, sdt, b.n_sparse) if b.n_sparse else np.zeros((rows, 0), sdt)
    return b


def _check_weighted(b, what):
    """A batch's weighted_keys against its keys and weights (both or neither),
    and its feature_tables (one per key, or none)."""
    if b.feature_tables and len(b.feature_tables) != len(b._keys):
        raise ValueError("%s: %d feature_tables for %d feature keys"
                         % (what, len(b.feature_tables), len(b._keys)))
    if b.weighted_keys and b.weights is None:
        raise ValueError("%s: weighted_keys %s without weights" % (what, b.weighted_keys))
    unknown = [k for k in b.weighted_keys if k not in b._keys]
    if unknown:
        raise ValueError("%s: weighted_keys %s not among the feature keys" % (what, unknown))


def _decode_jagged(b, mv, spans, feature_keys):
    """The jagged tensors (fields 24, 25, 27, 28; 31 when weighted) as views
    on the frame."""
    rows, nf = b.rows, b.n_sparse

    def arr(num, dtype, want):
        a, e = spans.get(num, (0, 0))
        if e - a != want * np.dtype(dtype).itemsize:
            raise ValueError("field %d: %d bytes, expected %d" % (num, e - a,
                                                                   want * np.dtype(dtype).itemsize))
        return np.frombuffer(mv[a:e], dtype=np.dtype(dtype).newbyteorder("<"))

    if len(feature_keys) != nf:
        raise ValueError("jagged batch: %d feature_keys for n_sparse %d" % (len(feature_keys), nf))
    b._keys = feature_keys
    b._lengths = arr(25, np.int32, nf * rows)
    if (b._lengths < 0).any():
        raise ValueError("jagged batch: negative length")
    b._values = arr(24, np.int64, int(b._lengths.sum(dtype=np.int64)))
    if 31 in spans:  # weighted lists: one float32 per value
        b.weights = arr(31, np.float32, len(b._values))
    elif b.weighted_keys and not len(b._values):
        # an empty bytes field is absent on the wire: weighted, no value at all
        b.weights = np.empty(0, np.float32)
    _check_weighted(b, "jagged batch")
    b.labels = arr(27, np.float32, rows * b.n_labels).reshape(rows, b.n_labels)
    b.dense = arr(28, np.float32, rows * b.n_dense).reshape(rows, b.n_dense)
    b.sparse = None
    return b


_ONES = {}


def _ones(n):
    """A shared int32 array of n ones (the lengths of a compact batch): one
    per size, not one per batch; do not write to it."""
    a = _ONES.get(n)
    if a is None:
        if len(_ONES) > 64:
            _ONES.clear()
        a = _ONES[n] = np.ones(n, np.int32)
    return a


def decode_raw(buf, start=0, end=None, keys=None):
    """Decode a raw-layout batch (the payload of Frame.raw_batch, buf[start:end])
    into a Batch whose arrays are views on buf. `keys`: the Criteo sparse
    names (SubscribeOk.sparse_names; C1.. when None or short)."""
    end = len(buf) if end is None else end
    mv = memoryview(buf)
    if end - start < RAW_HEADER:
        raise ValueError("raw batch: %d bytes, shorter than its header" % (end - start))
    (magic, version, hbytes, flags, rows, n_dense, n_labels, n_keys, _pre, epoch, seq, n_values,
     n_notices, nsec_hdr) = _RAW_HDR.unpack_from(buf, start)
    if magic != RAW_MAGIC or version != RAW_VERSION or hbytes < RAW_HEADER or nsec_hdr < _RAW_NSEC:
        raise ValueError("raw batch: bad header (magic %#x, version %d)" % (magic, version))
    table = _RAW_TABLE.unpack_from(buf, start + 64)
    want = (rows * n_dense * 4, rows * n_labels * 4, 0 if flags & RAW_UNIT else n_keys * rows * 4,
            n_values * (4 if flags & RAW_VALUES32 else 8),
            (n_keys * rows + 1) * 4 if flags & RAW_OFFSETS else 0, n_notices * 32, None)
    nsec = _RAW_NSEC
    if flags & RAW_WEIGHTS:  # section 7, its (offset, bytes) at header offset 120
        if nsec_hdr < _RAW_NSEC + 1:
            raise ValueError("raw batch: weights flag with %d sections" % nsec_hdr)
        table += _RAW_SEC7.unpack_from(buf, start + 64 + 8 * _RAW_NSEC)
        want += (n_values * 4,)
        nsec += 1
    sec = []
    for i in range(nsec):
        off, n = table[2 * i], table[2 * i + 1]
        if off < hbytes or start + off + n > end or (want[i] is not None and n != want[i]):
            raise ValueError("raw batch: section %d (%d bytes at %d) does not fit its shape"
                             % (i, n, off))
        sec.append(mv[start + off:start + off + n])
    b = _new_batch()
    b.layout, b.raw_flags = "raw", flags
    meta = bytes(sec[S_META])  # small: parsing bytes beats parsing a view of the buffer
    _, feature_keys = _decode_fields(b, meta, 0, len(meta))
    b.sequence, b.epoch, b.rows, b.n_dense, b.n_sparse = seq, epoch, rows, n_dense, n_keys
    b.jagged, b.popular = bool(flags & RAW_JAGGED), bool(flags & RAW_POPULAR)
    f4, i4, i8 = _F4, _I4, _I8
    b.dense = np.frombuffer(sec[S_DENSE], f4).reshape(rows, n_dense)
    labels = np.frombuffer(sec[S_LABELS], f4).reshape(rows, n_labels)
    b._lengths = _ones(n_keys * rows) if flags & RAW_UNIT else np.frombuffer(sec[S_LENGTHS], i4)
    b._values = np.frombuffer(sec[S_VALUES], i4 if flags & RAW_VALUES32 else i8)
    b.kjt_offsets = np.frombuffer(sec[S_OFFSETS], i4) if flags & RAW_OFFSETS else None
    if flags & RAW_WEIGHTS:
        b.weights = np.frombuffer(sec[S_WEIGHTS], f4)
    elif b.weighted_keys:
        raise ValueError("raw batch: weighted_keys %s without the weights flag" % b.weighted_keys)
    if b.jagged:
        b.n_labels, b.labels, b.sparse = n_labels, labels, None
        if len(feature_keys) != n_keys:
            raise ValueError("raw batch: %d feature keys for %d keys" % (len(feature_keys), n_keys))
        b._keys = feature_keys
        _check_weighted(b, "raw batch")
    else:
        b.labels, b.sparse_width = labels.reshape(rows), b._values.dtype.itemsize
        b.sparse = b._values.reshape(n_keys, rows).T
        names = list(keys or ())
        b._keys = names if len(names) == n_keys else ["C%d" % (i + 1) for i in range(n_keys)]
    return b


# ---------------------------------------------------------------- positions (checkpoint delivery)

class Position:
    """The input rows a model has trained on, in input terms: per (topic,
    partition) a sorted list of disjoint inclusive offset intervals, built
    from the batches' ``offsets`` provenance. Batch boundaries depend on
    timing; offsets do not, so this is what a checkpoint must store to be
    resumed exactly (docs/trainer-protocol.md, "Checkpoint delivery").

    ``add_batch(b)`` after training on b; ``to_dict()``/``from_dict()`` for
    the checkpoint file; ``merge()`` for the union of data-parallel ranks;
    pass it as ``TrainerClient(resume=...)`` and to ``commit_checkpoint()``."""

    def __init__(self):
        self.parts = {}  # (topic, partition) -> [[first, last], ...]

    def add(self, topic, partition, first, last):
        iv = self.parts.setdefault((topic, partition), [])
        out, placed = [], False
        for a, b in iv:
            if b < first - 1:
                out.append([a, b])
            elif a > last + 1:
                if not placed:
                    out.append([first, last])
                    placed = True
                out.append([a, b])
            else:
                first, last = min(a, first), max(b, last)
        if not placed:
            out.append([first, last])
        out.sort()
        self.parts[(topic, partition)] = out

    def add_batch(self, b):
        for r in b.offsets:
            self.add(r["topic"], r["partition"], r["first_offset"], r["last_offset"])

    def merge(self, other):
        for (t, p), iv in other.parts.items():
            for a, b in iv:
                self.add(t, p, a, b)
        return self

    def contains(self, topic, partition, offset):
        return any(a <= offset <= b for a, b in self.parts.get((topic, partition), ()))

    def ranges(self):
        """[(topic, partition, first, last)] in a stable order."""
        return [(t, p, a, b) for (t, p), iv in sorted(self.parts.items()) for a, b in iv]

    def to_dict(self):
        return {"%s/%d" % (t, p): [list(x) for x in iv] for (t, p), iv in sorted(self.parts.items())}

    @classmethod
    def from_dict(cls, d):
        pos = cls()
        for k, iv in (d or {}).items():
            t, _, p = k.rpartition("/")
            for a, b in iv:
                pos.add(t, int(p), int(a), int(b))
        return pos

    def copy(self):
        return Position().merge(self)

    def __eq__(self, other):
        return isinstance(other, Position) and self.parts == other.parts

    def __repr__(self):
        return "Position(%r)" % (self.to_dict(),)


def _encode_ranges(field, position):
    out = b""
    for t, p, a, b in position.ranges():
        r = (_field_bytes(1, t.encode()) + _field_varint(2, p) + _field_varint(3, a)
             + _field_varint(4, b))
        out += _varint((field << 3) | 2) + _varint(len(r)) + r
    return out


# ---------------------------------------------------------------- client

def read_token(path):
    """The first line of a token file that is not blank or a # comment."""
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                return line
    raise ValueError("token file %s holds no token" % path)


UNIX_PREFIX = "unix:"  # an endpoint "unix:/path": sinks.trainer.unix_path, same node


def _connect(address, host, port, timeout):
    """A connected stream socket to "host:port" (TCP, no Nagle) or
    "unix:/path" (a Unix domain socket: no TCP/IP stack on the way, for a
    trainer on the same node as piperec)."""
    if address.startswith(UNIX_PREFIX):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(timeout)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            s.connect(address[len(UNIX_PREFIX):])
        except BaseException:
            s.close()
            raise
        return s
    s = socket.create_connection((host, int(port)), timeout=timeout)
    try:  # a server that resets at once makes this fail: leave no socket behind
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except BaseException:
        s.close()
        raise
    return s


class TrainerClient:
    """A subscription to one pipeline. Not thread-safe: use one per thread."""

    def __init__(self, address, pipeline, credits=8, client_id=None, timeout=10.0,
                 token=None, token_file=None, tls=False, ca_file=None, cert_file=None,
                 key_file=None, ssl_context=None, resume=None, layout="protobuf",
                 kjt_offsets=False, compact=False):
        """Connect to ``address`` ("host:port", or "unix:/path" for the
        server's ``sinks.trainer.unix_path`` on the same node) and subscribe.

        Checkpoint delivery (server ``sinks.trainer.delivery: checkpoint``):
        ``resume`` is the :class:`Position` of the checkpoint the model was
        restored from (None or empty for a fresh model); the server never
        sends rows of it again. Call :meth:`commit_checkpoint` once a
        checkpoint is durable.

        Security (docs/operations.md, "Security"): ``token`` (or ``token_file``,
        first non-comment line) is sent in Subscribe; TLS is used when ``tls``
        is true, a ``ca_file`` (server CA, PEM), a ``cert_file``/``key_file``
        pair (client certificate for mutual TLS) or an ``ssl_context`` is given.
        The server certificate is checked against ``ca_file`` (else the system
        CAs) and the host name or IP of ``address``.

        ``layout``: "protobuf" (TrainingBatch frames, the default) or "raw"
        (the raw tensor layout; ``kjt_offsets`` adds the KJT offsets;
        ``compact`` asks for Criteo batches without the all-ones lengths and
        with int32 values when the columns are int32: the bytes of a
        TrainingBatch; ``lengths`` is then a shared ones array). The
        server's answer is in ``self.layout``: "protobuf" from a server that
        predates the raw layout, whose batches then decode as always."""
        if layout not in _LAYOUTS:
            raise ValueError("layout must be protobuf or raw, not %r" % (layout,))
        local = address.startswith(UNIX_PREFIX)
        host, _, port = address.rpartition(":")
        host = host.strip("[]") or "127.0.0.1"
        if not local and not port.isdigit():
            raise ValueError("piperec endpoint %r: expected HOST:PORT (e.g. 127.0.0.1:7070, the "
                             "server's sinks.trainer.listen) or unix:/path" % (address,))
        self.pipeline = pipeline
        self.endpoint = address
        if token_file is not None and token is None:
            token = read_token(token_file)
        want_tls = tls or ca_file or cert_file or ssl_context is not None
        if local and want_tls:
            raise ValueError("%s: TLS does not apply to a Unix domain socket (the socket file's "
                             "permissions guard it)" % address)
        cid = client_id or "python-%d" % os.getpid()
        body = (_field_varint(1, PROTOCOL_VERSION) + _field_bytes(2, pipeline.encode())
                + _field_varint(3, credits) + _field_bytes(4, cid.encode()))
        if token:
            body += _field_bytes(5, token.encode())
        if resume is not None:
            body += _encode_ranges(6, resume)
        body += (_field_varint(7, _LAYOUTS[layout]) + _field_varint(8, 1 if kjt_offsets else 0)
                 + _field_varint(9, 1 if compact else 0))
        self.checkpoint_ok = None  # (id, batches released) of the last CheckpointOk
        self._buf = bytearray()
        # MSG_WAITALL receives into a caller's buffer: plain sockets only (an
        # SSL socket takes no flags)
        self._waitall = not want_tls and hasattr(socket, "MSG_WAITALL") and os.name == "posix"
        self._rcvto = None  # SO_RCVTIMEO as last set (None: none)
        self._frame, self._filled, self._base, self._flen = None, 0, 0, 0
        self.info = None  # SubscribeOk's fields, once it came
        self._tmo = timeout  # the socket's timeout as last set (create_connection)
        try:
            self.sock = _connect(address, host, port, timeout)
        except OSError as e:  # keep the type (callers retry on refused), name the endpoint
            raise _named(e, address, " (connecting, timeout %.1f s)" % timeout
                         if isinstance(e, socket.timeout) else "") from None
        try:
            if want_tls:
                self._tls(host, ssl_context, ca_file, cert_file, key_file)
            self._subscribe(body, timeout)
        except BaseException:
            self.sock.close()  # a failed handshake leaves no socket behind
            raise

    def _tls(self, host, ctx, ca_file, cert_file, key_file):
        import ssl
        if ctx is None:
            ctx = ssl.create_default_context(cafile=ca_file)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            if cert_file:
                ctx.load_cert_chain(cert_file, key_file)
        try:
            self.sock = ctx.wrap_socket(self.sock, server_hostname=host)
        except OSError as e:  # a reset, an EOF or a refused certificate: name the endpoint
            raise _named(e, self.endpoint, " (TLS handshake)") from None

    def _subscribe(self, body, timeout):
        """Send Subscribe, wait for SubscribeOk (answering what comes first)."""
        self._send(F_SUBSCRIBE, body, "Subscribe", timeout)
        deadline = time.monotonic() + timeout
        while True:
            kind, buf, a, e = self._read_frame(deadline)
            if kind is None:
                raise TimeoutError("piperec at %s: no SubscribeOk within %.1f s" % (self.endpoint, timeout))
            if kind == F_SUBSCRIBE_OK:
                self.info = self._subscribe_ok(buf, a, e)
                self.layout = "raw" if self.info.get("layout") == LAYOUT_RAW else "protobuf"
                break
            self._control(kind, buf, a, e)

    # -- framing

    def _gone(self, what, err=None):
        why = "closed the connection" if err is None else "connection lost (%s)" % (err,)
        return ConnectionClosed("piperec at %s: %s while %s" % (self.endpoint, why, what))

    def _settimeout(self, t, exact=False):
        # settimeout() costs a system call: for receives, skip it when the
        # socket's timeout is already at most `t` plus a little (a recv that
        # times out early is retried against the deadline in _recv_some).
        cur = self._tmo
        if t is None or exact:
            if cur != t:
                self.sock.settimeout(t)
                self._tmo = t
        elif cur is None or cur > t + 0.005 or cur < min(t, 0.2) * 0.5:
            self.sock.settimeout(t)
            self._tmo = t

    def _rcvtimeo(self, t):
        """The kernel's receive timeout (SO_RCVTIMEO) for blocking receives;
        None: none. Set only when it changes much, as _settimeout does."""
        cur = self._rcvto
        if t is None:
            if cur is None:
                return
        elif cur is not None and t - 0.2 <= cur <= t + 0.005 and cur >= min(t, 0.2) * 0.5:
            return
        us = 0 if t is None else max(int(t * 1e6), 1000)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                             struct.pack("@ll", us // 1000000, us % 1000000))
        self._rcvto = t

    def _recv_some(self, deadline, into=None, size=65536):
        """One recv of at most `size` bytes (into a memoryview when given);
        False on timeout.

        Into a memoryview on a plain socket (the body of a large frame), one
        blocking recv(MSG_WAITALL) under a kernel receive timeout fills the
        whole view in one system call and one GIL release: a timeout-mode
        socket polls and returns per chunk the kernel has (tens of calls
        for a 3 MB batch, each a poll, a recv and a GIL hand-off)."""
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            try:
                if into is not None and self._waitall:
                    self._settimeout(None)
                    self._rcvtimeo(left)
                    n = chunk = self.sock.recv_into(into, 0, socket.MSG_WAITALL)
                elif into is not None:
                    self._settimeout(left)
                    n = chunk = self.sock.recv_into(into)
                else:
                    self._settimeout(left)
                    chunk = self.sock.recv(size)
                    n = len(chunk)
                break
            except (socket.timeout, BlockingIOError):
                continue  # the deadline decides (BlockingIOError: SO_RCVTIMEO passed)
            except OSError as e:
                raise self._gone("receiving", e) from None
        if n == 0:
            raise self._gone("receiving")
        return chunk

    def _read_frame(self, deadline, into=None):
        """Next frame as (oneof field, buffer, start, end) or (None,)*4 on timeout.

        The body is received straight into its own bytearray (no copy for
        large frames), which the batch's arrays then view; with `into` (a
        callable: frame bytes -> writable uint8 memoryview at least that
        long) a frame over SMALL_FRAME bytes lands there instead, length
        prefix included, at offset 0. A frame cut by a timeout is resumed at
        the next call. With `into`, the frame head is read in HEAD_READ
        bytes, not 64 KiB: the rest of a large frame then lands in the
        caller's buffer without passing through (and being copied out of)
        self._buf, which cost four copies of 64 KiB per raw batch."""
        if self._frame is None:
            size = 65536 if into is None else HEAD_READ
            while len(self._buf) < 4:
                chunk = self._recv_some(deadline, size=size)
                if chunk is False:
                    return None, None, 0, 0
                self._buf += chunk
            (n,) = struct.unpack_from("<I", self._buf, 0)
            # Before SubscribeOk only small control frames come: a peer that
            # announces more is not piperec (an HTTP answer reads as ~1.3 GB)
            limit = MAX_FRAME if self.info is not None else SUBSCRIBE_FRAME_MAX
            if n > limit:
                raise ValueError("piperec at %s: a frame of %d bytes (more than %d%s): not a "
                                 "piperec trainer port?" % (self.endpoint, n, limit,
                                                            "" if self.info is not None
                                                            else " before SubscribeOk"))
            have = min(n, len(self._buf) - 4)
            if into is not None and n > SMALL_FRAME:
                frame = into(4 + n)
                frame[:4 + have] = self._buf[:4 + have]
                self._base, self._filled = 4, 4 + have
            else:
                frame = bytearray(n)
                frame[:have] = self._buf[4:4 + have]
                self._base, self._filled = 0, have
            del self._buf[:4 + have]
            self._frame, self._flen = frame, self._base + n
        frame = self._frame
        view = memoryview(frame)
        while self._filled < self._flen:
            got = self._recv_some(deadline, view[self._filled:self._flen])
            if got is False:
                return None, None, 0, 0
            self._filled += got
        self._frame = None
        for num, wt, v, a, e in _fields(frame, self._base, self._flen):
            if wt == 2:
                return num, frame, a, e
        return 0, frame, 0, 0

    def _send(self, num, body, what="a frame", timeout=30):
        try:
            self._settimeout(timeout, exact=True)
            self.sock.sendall(_frame(num, body))
        except OSError as e:
            raise self._gone("sending " + what, e) from None

    def _subscribe_ok(self, buf, a, e):
        info = {"dense_names": [], "sparse_names": []}
        names = {1: "protocol_version", 3: "n_dense", 4: "n_sparse", 5: "sparse_width", 8: "credits",
                 9: "keepalive_ms", 11: "layout"}
        for num, wt, v, s, t in _fields(buf, a, e):
            if wt == 0 and num in names:
                info[names[num]] = v
            elif wt == 2:
                text = bytes(buf[s:t]).decode()
                if num == 2: info["pipeline"] = text
                elif num == 6: info["dense_names"].append(text)
                elif num == 7: info["sparse_names"].append(text)
                elif num == 10: info["server"] = text
        return info

    def _control(self, kind, buf, a, e):
        if kind == F_PING:
            nonce = t = 0
            for num, wt, v, _, _ in _fields(buf, a, e):
                if num == 1: nonce = v
                elif num == 2: t = v
            self._send(F_PONG, _field_varint(1, nonce) + _field_varint(2, t), "Pong")
        elif kind == F_ERROR:
            code, msg = 0, ""
            for num, wt, v, s, t in _fields(buf, a, e):
                if num == 1 and wt == 0: code = v
                elif num == 2 and wt == 2: msg = bytes(buf[s:t]).decode()
            raise ServerError(code, msg, self.endpoint)
        elif kind == F_CHECKPOINT_OK:
            cid = rel = 0
            for num, wt, v, _, _ in _fields(buf, a, e):
                if num == 1 and wt == 0: cid = v
                elif num == 2 and wt == 0: rel = v
            self.checkpoint_ok = (cid, rel)
        # Pong and message types from newer servers: ignored.

    # -- public API

    def recv(self, timeout=None, into=None):
        """Next Batch, or None when `timeout` seconds pass first. Raises
        ConnectionClosed (an EOFError) when the server goes away,
        ServerError on a server Error. `into`: see _read_frame (a raw batch
        received there has its arrays on that memory; the caller keeps it
        untouched until done with the batch)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            kind, buf, a, e = self._read_frame(deadline, into)
            if kind is None:
                return None
            if kind == F_BATCH:
                return decode_batch(buf, a, e)
            if kind == F_RAW_BATCH:
                return decode_raw(buf, a, e, self.info.get("sparse_names") if self.info else None)
            self._control(kind, buf, a, e)

    def ack(self, *sequences):
        """Acknowledge batches by sequence number (each returns one credit)."""
        body = b"".join(_varint(s) for s in sequences)
        self._send(F_ACK, _field_bytes(1, body), "Ack")

    def commit_checkpoint(self, position, checkpoint_id=0):
        """Checkpoint delivery: a checkpoint holding every row of `position`
        (a :class:`Position`, the whole position of the checkpoint) is
        durable; the server may now commit those input offsets. Call it only
        after the checkpoint file is fsync'd. The server's CheckpointOk lands
        in ``self.checkpoint_ok`` while batches are read."""
        self._send(F_CHECKPOINT_COMMIT, _encode_ranges(1, position) + _field_varint(2, checkpoint_id),
                   "CheckpointCommit")

    def add_credits(self, n):
        self._send(F_CREDIT, _field_varint(1, n), "Credit")

    def batches(self, count=None, timeout=None):
        """Yield batches; each is acked when the loop asks for the next one
        (so a batch whose loop body did not finish is redelivered). Stops
        after `count` batches, after `timeout` idle seconds, or when the
        server stops (its SHUTDOWN notice). A server that goes away without
        it (killed, a reset) raises ConnectionClosed naming the endpoint, a
        server Error (TIMEOUT: a batch unacked for ack_timeout_ms) raises
        ServerError: never a quiet end that looks like the stream's."""
        n = 0
        while count is None or n < count:
            try:
                b = self.recv(timeout)
            except ServerError as e:
                if e.code == "SHUTDOWN":
                    return
                raise
            if b is None:
                return
            n += 1
            yield b
            self.ack(b.sequence)

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(description="consume a piperec trainer stream")
    ap.add_argument("--connect", required=True, help="HOST:PORT")
    ap.add_argument("--pipeline", required=True)
    ap.add_argument("--count", type=int)
    ap.add_argument("--credits", type=int, default=8)
    ap.add_argument("--timeout", type=float, help="stop after this many idle seconds")
    ap.add_argument("--tls", action="store_true", help="TLS, server checked against system CAs")
    ap.add_argument("--tls-ca", help="TLS, server checked against this CA file (PEM)")
    ap.add_argument("--tls-cert", help="client certificate (mutual TLS)")
    ap.add_argument("--tls-key", help="client certificate key")
    ap.add_argument("--token-file", help="bearer token file")
    args = ap.parse_args(argv)
    rows = batches = 0
    t0 = time.monotonic()
    with TrainerClient(args.connect, args.pipeline, credits=args.credits, tls=args.tls,
                       ca_file=args.tls_ca, cert_file=args.tls_cert, key_file=args.tls_key,
                       token_file=args.token_file) as c:
        for b in c.batches(count=args.count, timeout=args.timeout):
            rows += b.rows
            batches += 1
    dt = time.monotonic() - t0
    print("%d batches, %d rows, %.0f rows/s" % (batches, rows, rows / dt if dt > 0 else 0))


if __name__ == "__main__":
    main()
