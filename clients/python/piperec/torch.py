"""piperec.torch — the PyTorch side of piperec's trainer stream.

``StreamDataset`` is an ``IterableDataset`` over one or more piperec trainer
endpoints (docs/trainer-protocol.md). Every iterator — the main process, each
``DataLoader`` worker, each DDP rank — opens its *own* connection to every
endpoint, and the server deals each batch to exactly one connection with
free credit. So batches are split between workers and ranks by piperec, not
by the client: nothing is hashed or strided here, a slow worker simply gets
fewer batches, and a worker that dies has its unacknowledged batches resent
to the others.

A yielded ``StreamBatch`` holds torch tensors: ``dense`` float32 [B, n_dense],
``labels`` float32 [B], ``sparse`` int64 [B, n_sparse] (column c is
``sparse[:, c]``) and ``sparse_features``: a torchrec ``KeyedJaggedTensor``
when torchrec is importable, else a ``JaggedSparse(keys, values, lengths)``
triple with the same layout (values key-major, one value per row and key
since piperec columns are one-hot, so every length is 1).

A pipeline with a declared ``schema:`` sends jagged batches: then ``labels``
is float32 [B, n_labels], ``dense`` float32 [B, n_dense], ``sparse`` is None
(features have any number of values per row) and ``sparse_features`` carries
the true lengths (0.. for a list feature, 1 for a single-valued one);
``keys`` are the batch's feature keys, ``label_names`` / ``dense_names`` name
the label and dense columns, and ``vocab_sizes`` / notices index ``keys``.
Weighted lists (``weights:``, id-score lists) add float32 weights, one per
value: the KeyedJaggedTensor's ``weights`` (JaggedSparse ``.weights``, None
without them), also ``StreamBatch.weights``; ``weighted_keys`` names the
weighted features; the GPU feed copies them with the values.

Positions: ``state_dict()`` records, per endpoint, the batch epoch (when the
batch header carries one), the last sequence consumed and the exact set of
sequences consumed near it; ``load_state_dict()`` makes a new run skip (and
acknowledge) batches it already consumed. That turns piperec's at-least-once
delivery into "no batch trained twice across a restore" for redelivered
batches, but it is not exactly-once relative to a checkpoint: batches that
were acknowledged after the checkpoint was taken are not sent again (see
docs/pytorch.md; exactly-once needs the server-side checkpoint mode).

The GPU feed (issue 22; ``layout="raw"``): batches travel in the raw tensor
layout, are received straight into a ring of preallocated buffers
(page-locked when CUDA is available) and come out as zero-copy tensor views
on them: to a device by one background thread per connection, on the host
by the iterating thread itself (``recv_thread``); with ``device="cuda"`` each batch is
copied to the GPU on a side CUDA stream, the current stream waits on that
copy's event, and the buffer is reused only once the copy has finished and
the batch was acknowledged. On the host the views lease their buffer: it
is refilled only once every tensor on it is gone (the ring adds a buffer
meanwhile), so a kept batch never changes. See piperec.feed and
docs/pytorch.md.

``grow_embeddings`` grows nn.Embedding / nn.EmbeddingBag tables in place to
the per-column vocabulary sizes each batch carries, keeping trained rows and
(optionally) the optimizer state of those rows.
"""

import bisect
import math
import os
import select
import socket
import threading
import time
import warnings
import weakref
from collections import deque
from typing import NamedTuple

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from piperec.feed import InlineFeed, RawFeed
from piperec_client import (RAW_UNIT, ConnectionClosed, Position, ServerError, TrainerClient,
                            dense_slices)

try:  # optional: torchrec's KeyedJaggedTensor for sparse features
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
except Exception:  # ImportError, or a torchrec built for another torch
    KeyedJaggedTensor = None

__all__ = ["StreamDataset", "StreamDataLoader", "StreamBatch", "JaggedSparse", "grow_embeddings", "reset_recycled",
           "merge_state_dicts", "STATE_VERSION"]

STATE_VERSION = 1


class _KeysValuesLengths(NamedTuple):
    keys: list
    values: torch.Tensor
    lengths: torch.Tensor


class JaggedSparse(_KeysValuesLengths):
    """Sparse features without torchrec, laid out like a KeyedJaggedTensor:
    ``values`` int64, key-major (all rows of key 0, then key 1, ...),
    ``lengths`` int32 [n_keys * B] (values of each row of each key; all 1
    for Criteo's one-hot columns). A KeyedJaggedTensor has methods where this
    has attributes: :meth:`StreamBatch.embedding_bag_inputs` reads both.

    ``weights``: float32 [len(values)], the weight of each value (weighted
    lists; 1 on the values of an unweighted feature), or None when the batch
    has none: ``JaggedSparse(keys, values, lengths, weights=None)``. It is an
    attribute beside the (keys, values, lengths) triple, not a fourth item,
    so code that unpacks or indexes the triple (``k, v, l = sf``,
    ``sf[-1]``) keeps working."""

    weights = None  # class default: also what _make / _replace copies carry

    def __new__(cls, keys, values, lengths, weights=None):
        self = super().__new__(cls, keys, values, lengths)
        if weights is not None:
            self.weights = weights
        return self

    def __repr__(self):
        return "JaggedSparse(keys=%r, values=%r, lengths=%r, weights=%r)" % (
            self.keys, self.values, self.lengths, self.weights)


def _sf_parts(sf):
    """(values, lengths, weights or None) of a JaggedSparse or a
    KeyedJaggedTensor (weights_or_none(); a stand-in without it: None)."""
    if isinstance(sf, JaggedSparse):
        return sf.values, sf.lengths, sf.weights
    w = getattr(sf, "weights_or_none", None)
    return sf.values(), sf.lengths(), (w() if callable(w) else None)


class StreamBatch:
    """One TrainingBatch as torch tensors, plus where it came from.

    dense float32 [B, n_dense]; labels float32 [B]; sparse int64 [B, n_sparse];
    sparse_features: KeyedJaggedTensor or JaggedSparse (shares ``sparse``'s
    memory); vocab_sizes: list of int per sparse column (embedding rows
    needed so far); keys: sparse column names; endpoint, epoch (None when the
    header has none), sequence, rows: the batch's identity in the stream;
    offsets: its input provenance, [{"topic", "partition", "first_offset",
    "last_offset", "rows"}] (what checkpoint delivery's position is made of);
    replica: the piperec replica that built it ("" from older servers);
    recycled: recycled-index notices [(column, index, row, number)] of a
    bounded vocabulary: reset those rows first (``reset_recycled``).
    Jagged batches (declared schema; ``jagged`` True): labels float32
    [B, n_labels], sparse None, sparse_features with the true lengths,
    label_names / dense_names the column names (see the module doc).
    Weighted lists: ``sparse_features`` carries the weights (the
    KeyedJaggedTensor's ``weights()``, JaggedSparse ``.weights``; float32,
    one per value, 1 for unweighted features), ``weights`` is that tensor
    (None without weighted lists), ``weighted_keys`` names the weighted
    features ([] when none). Shared vocabularies (``table:``):
    ``feature_tables`` gives each key's vocabulary table ([] when none is
    shared): features of one table share one embedding table."""

    __slots__ = ("dense", "labels", "sparse", "sparse_features", "vocab_sizes", "keys", "endpoint",
                 "epoch", "sequence", "rows", "offsets", "replica", "recycled", "jagged",
                 "label_names", "dense_names", "weighted_keys", "feature_tables", "_ring",
                 "_ring_token")

    def _state(self):
        return {k: getattr(self, k, None) for k in self.__slots__}

    def __getstate__(self):
        st = self._state()
        ring = st.get("_ring")
        if isinstance(ring, _RingRef):  # a worker's ring slot: send its key, not its tensors
            st["_ring"] = ring.wire()
            st["dense"] = st["labels"] = st["sparse"] = st["sparse_features"] = None
        return st

    def __setstate__(self, state):
        for k, v in state.items():
            setattr(self, k, v)
        if state.get("_ring") is not None:
            _ring_views(self)

    def dense_feature(self, name):
        """One dense feature's columns of ``dense``, a view: [B, dim] for a
        dense vector (``dim:`` in the schema, columns NAME[0]..), [B, 1] for
        a number (piperec.dense_slices)."""
        return self.dense[:, dense_slices(self.dense_names)[name]]

    @property
    def weights(self):
        """The batch's weights (float32, one per value of
        ``sparse_features``, key-major), or None without weighted lists."""
        sf = getattr(self, "sparse_features", None)
        return None if sf is None else _sf_parts(sf)[2]

    def embedding_bag_inputs(self, weights=False):
        """{feature: (values, offsets)} for an ``nn.EmbeddingBag`` (or
        ``F.embedding_bag``) per sparse feature: values int64 (the feature's
        values, row after row), offsets int64 [B] (row r's values start at
        offsets[r]). The same with or without torchrec: sparse_features a
        KeyedJaggedTensor (methods) or a JaggedSparse (attributes). Views
        on the batch's memory, offsets excepted. ``weights=True``: triples
        (values, offsets, per_sample_weights), the last the feature's
        float32 weights (``EmbeddingBag(mode="sum")(values, offsets,
        per_sample_weights=...)``), or None when the batch has no weights."""
        sf = self.sparse_features
        keys = sf.keys
        keys = keys() if callable(keys) else keys
        values, lengths, w = _sf_parts(sf)
        nk = len(keys)
        rows = lengths.numel() // nk if nk else 0
        lens = lengths.reshape(nk, rows).to(torch.int64)
        # offsets on the batch's device (a batch moved to the GPU stays there)
        offsets = torch.cat([lens.new_zeros(nk, min(rows, 1)), lens.cumsum(1)[:, :-1]], 1)
        out, start = {}, 0
        for name, n in zip(keys, lens.sum(1).tolist()):  # one device sync, not one per key
            if weights:
                out[name] = (values[start:start + n], offsets[len(out)],
                             None if w is None else w[start:start + n])
            else:
                out[name] = (values[start:start + n], offsets[len(out)])
            start += n
        return out

    def _map(self, fn):
        out = StreamBatch()
        for k, v in self._state().items():  # not __setstate__: its ring hook would map the slot again
            setattr(out, k, v)
        # fn makes new tensors: no longer a view on a worker's ring slot, but
        # the loader still learns whose ring it came from (it forgets the
        # ring's slots when its iterator ends): DataLoader(pin_memory=True)
        # hands the loop the pinned copy, not the batch it unpickled
        ring = self._ring
        out._ring_token = ring[0] if isinstance(ring, tuple) else getattr(self, "_ring_token", None)
        out._ring = None
        out.dense, out.labels = fn(self.dense), fn(self.labels)
        out.sparse = fn(self.sparse) if self.sparse is not None else None
        sf = self.sparse_features
        if isinstance(sf, JaggedSparse):
            out.sparse_features = JaggedSparse(sf.keys, fn(sf.values), fn(sf.lengths),
                                               None if sf.weights is None else fn(sf.weights))
        elif hasattr(sf, "pin_memory") or hasattr(sf, "to"):
            out.sparse_features = fn(sf)
        return out

    def pin_memory(self):
        """Page-locked copy (what DataLoader(pin_memory=True) calls)."""
        return self._map(lambda t: t.pin_memory())

    def to(self, device, non_blocking=False):
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def __repr__(self):
        return "StreamBatch(endpoint=%r, epoch=%r, sequence=%d, rows=%d)" % (
            self.endpoint, self.epoch, self.sequence, self.rows)


# ---------------------------------------------------------------- worker hand-off ring

# StreamDataLoader(processes=True) over TrainingBatch frames: a worker builds
# each batch's tensors in one slot of a ring of shared-memory buffers it
# allocates once, and a batch crosses to the main process as the slot's key
# (the buffer itself only the first time a slot is used). torch otherwise
# shares every tensor of every batch through a new shared-memory segment
# and a file-descriptor hand-off (a connection to the worker's
# resource_sharer thread each): 5 per batch, ~10 ms a batch in the main
# process (bench/RESULTS.md, "Issue 22: the loader over TrainingBatch").
#
# Leases: the loop gets the batch's tensors as views on the slot, no copy
# (a copy-out was about half of the main process's CPU a batch). The slot
# stays the batch's for as long as any tensor on it lives: the views are
# made from a numpy array of their own per batch (the lease), and when the
# last tensor, view or numpy array on it is gone, the lease's finalizer
# clears the slot's byte in the ring's shared flags. A worker refills only
# a slot whose flag is clear; when every slot is leased it adds one (up to
# _RING_MAX a ring), and past that builds the batch in plain tensors
# (torch's own hand-off): memory follows what the loop keeps, as with
# tensors of their own, and a batch never changes under the loop.
# Ordering: the worker writes a slot only after it loaded a clear flag (a
# control dependency, kept on every CPU); the main process clears the flag
# only after the loop dropped every tensor on the slot, i.e. after the reads
# whose values the loop used (ordered by total store order on x86; on weaker
# models a store does not become visible before the loads it follows retire).

_RING_MAX = 256  # slots a worker's ring may grow to while the loop keeps batches
_RING_BUFS = {}  # main process: (token, slot) -> (generation, uint8 numpy view of the buffer)
_RING_FLAGS = {}  # main process: token -> the ring's shared flags (uint8 numpy, 1 = leased)
_RING_LOCK = threading.Lock()  # unpickled by the main thread or the pin thread


def _ring_layout(rows, nd, ns):
    """Byte offsets of dense, labels, values, lengths in a slot, and its size
    (each section 64-byte aligned)."""
    def up(x):
        return (x + 63) & ~63
    o_labels = up(rows * nd * 4)
    o_values = up(o_labels + rows * 4)
    o_lengths = up(o_values + ns * rows * 8)
    return 0, o_labels, o_values, o_lengths, o_lengths + ns * rows * 4


def _slot_tensors(buf, rows, nd, ns):
    """dense [rows, nd] f32, labels [rows] f32, values [ns * rows] i64 and
    lengths [ns * rows] i32 as views on a slot buffer."""
    od, ol, ov, on, _ = _ring_layout(rows, nd, ns)
    dense = buf[od:od + rows * nd * 4].view(torch.float32).view(rows, nd)
    labels = buf[ol:ol + rows * 4].view(torch.float32)
    values = buf[ov:ov + ns * rows * 8].view(torch.int64)
    lengths = buf[on:on + ns * rows * 4].view(torch.int32)
    return dense, labels, values, lengths


class _RingRef:
    """Where a worker built a batch: its ring, slot and the slot's buffer
    generation (a slot grown for a bigger batch gets a new buffer); the
    buffer and the ring's flags travel only the first time."""

    __slots__ = ("token", "slot", "gen", "buf", "flags", "shape", "kjt")

    def wire(self):
        return (self.token, self.slot, self.gen, self.buf, self.flags, self.shape, self.kjt)


class _WorkerRing:
    """A worker's ring of shared-memory slots and their lease flags (see
    above)."""

    def __init__(self, n_slots):
        self.token = "%d-%s" % (os.getpid(), os.urandom(6).hex())
        self.flags = torch.zeros(_RING_MAX, dtype=torch.uint8).share_memory_()
        self.free = self.flags.numpy()
        self.flags_sent = False
        self.bufs, self.gens = [None] * n_slots, [0] * n_slots
        self.next = 0
        self.warned = False

    def _free_slot(self):
        n = len(self.bufs)
        for k in range(n):
            i = (self.next + k) % n
            if not self.free[i]:
                return i
        if n < _RING_MAX:
            self.bufs.append(None)
            self.gens.append(0)
            return n
        return None

    def take(self, rows, nd, ns, kjt):
        """A free slot for a rows x (nd dense, ns sparse) batch: (ref,
        (dense, labels, values, lengths)), lengths all ones; None when every
        one of _RING_MAX slots is leased."""
        i = self._free_slot()
        if i is None:
            if not self.warned:
                self.warned = True
                warnings.warn("piperec: the training loop keeps %d batches of this DataLoader "
                              "worker alive; further ones cross in torch's own shared tensors "
                              "(slower) until some are dropped" % _RING_MAX)
            return None
        self.next = i + 1
        size = _ring_layout(rows, nd, ns)[4]
        buf = self.bufs[i]
        fresh = buf is None or buf.numel() < size
        if fresh:
            buf = self.bufs[i] = torch.empty(size, dtype=torch.uint8).share_memory_()
            self.gens[i] += 1
        views = _slot_tensors(buf, rows, nd, ns)
        views[3].fill_(1)  # one-hot columns: every length is 1 (the last lease's loop may have written)
        self.free[i] = 1
        ref = _RingRef()
        ref.token, ref.slot, ref.gen, ref.shape, ref.kjt = self.token, i, self.gens[i], (rows, nd, ns), kjt
        ref.buf = buf if fresh else None
        ref.flags = None if self.flags_sent else self.flags
        self.flags_sent = True
        return ref, views


def _weights_of(b):
    """A numpy Batch's weights as a tensor on the same memory (None when it
    has none); a misaligned view inside a frame is copied once."""
    w = getattr(b, "weights", None)
    if w is None:
        return None
    if not w.flags.aligned:
        w = np.ascontiguousarray(w)
    return torch.from_numpy(w)


def _raw_batch(b, sparse_format, keys, endpoint=None, epoch=None):
    """A decoded raw-layout batch (piperec_client.decode_raw) as a
    StreamBatch of tensors on its arrays (no copy): the trainer stream's
    raw batches and `piperec serve`'s ?layout=raw answers. keys: a Criteo
    batch's sparse names (a jagged batch names its own)."""
    out = StreamBatch()
    out.dense, out.labels = torch.from_numpy(b.dense), torch.from_numpy(b.labels)
    values, lengths = torch.from_numpy(b.values), torch.from_numpy(b.lengths)
    offsets = torch.from_numpy(b.kjt_offsets) if b.kjt_offsets is not None else None
    if b.jagged:
        keys = list(b.keys)
        out.sparse = None
    else:
        out.sparse = values.view(b.n_sparse, b.rows).t()
    out.sparse_features = _sparse_features(sparse_format, keys, values, lengths, offsets,
                                           _weights_of(b))
    out.keys = keys
    out.jagged = bool(b.jagged)
    out.label_names, out.dense_names = list(b.label_names), list(b.dense_names)
    return StreamDataset._finish(out, b, endpoint, epoch)


def _sparse_features(sparse_format, keys, values, lengths, offsets=None, weights=None):
    """A KeyedJaggedTensor (torchrec importable, sparse_format not "triple")
    or a JaggedSparse; offsets and weights passed only when given."""
    if KeyedJaggedTensor is not None and sparse_format != "triple":
        kw = {}
        if offsets is not None:
            kw["offsets"] = offsets
        if weights is not None:
            kw["weights"] = weights
        return KeyedJaggedTensor(keys=keys, values=values, lengths=lengths, **kw)
    return JaggedSparse(keys, values, lengths, weights)


def _sparse_of(kjt, keys, values, lengths):
    if kjt:
        return KeyedJaggedTensor(keys=keys, values=values, lengths=lengths)
    return JaggedSparse(keys, values, lengths)


def _ring_release(flags, slot):
    flags[slot] = 0


def _ring_views(b):
    """Main process, unpickling: b's tensors as views on its worker's slot,
    through a lease of their own (see "worker hand-off ring")."""
    token, slot, gen, buf, flags, (rows, nd, ns), kjt = b._ring
    with _RING_LOCK:
        if flags is not None:
            _RING_FLAGS[token] = flags.numpy()
        if buf is not None:
            _RING_BUFS[(token, slot)] = (gen, buf.numpy())
        have, arr = _RING_BUFS.get((token, slot), (None, None))
        fl = _RING_FLAGS.get(token)
    if have != gen or fl is None:
        raise RuntimeError("piperec: a DataLoader worker's batch in ring slot %d came without "
                           "its buffer" % slot)
    lease = arr.view()  # this batch's own array: its tensors keep it, and only them
    weakref.finalize(lease, _ring_release, fl, slot).atexit = False
    dense, labels, values, lengths = _slot_tensors(torch.from_numpy(lease), rows, nd, ns)
    b.dense, b.labels = dense, labels
    b.sparse = values.view(ns, rows).t()
    b.sparse_features = _sparse_of(kjt, b.keys, values, lengths)


def _ring_drop(tokens):
    """Forget the rings whose loader iterator ended (leased batches keep their
    own references to the memory)."""
    with _RING_LOCK:
        for k in [k for k in _RING_BUFS if k[0] in tokens]:
            del _RING_BUFS[k]
        for t in tokens:
            _RING_FLAGS.pop(t, None)


# ---------------------------------------------------------------- positions

def _batch_epoch(b):
    """The batch header's epoch, or None for servers whose header has none."""
    e = getattr(b, "epoch", None)
    return None if e is None else int(e)


class _Position:
    """What one trainer consumed from one endpoint in one epoch: every
    sequence <= floor, plus the merged inclusive ranges above it."""

    __slots__ = ("epoch", "last_seq", "floor", "ranges", "batches", "rows", "unacked")

    def __init__(self, epoch=None):
        self.epoch = epoch
        self.last_seq = 0
        self.floor = 0
        self.ranges = []  # sorted, disjoint, non-adjacent [a, b] lists, all > floor
        self.batches = self.rows = 0
        self.unacked = []

    def contains(self, seq):
        if seq <= self.floor:
            return True
        i = bisect.bisect_right(self.ranges, [seq, math.inf]) - 1
        return i >= 0 and self.ranges[i][0] <= seq <= self.ranges[i][1]

    def add(self, seq):
        """Record seq; False when it was already recorded."""
        if self.contains(seq):
            return False
        r = self.ranges
        i = bisect.bisect_left(r, [seq, seq])
        left = i > 0 and r[i - 1][1] == seq - 1
        right = i < len(r) and r[i][0] == seq + 1
        if left and right:
            r[i - 1][1] = r[i][1]
            del r[i]
        elif left:
            r[i - 1][1] = seq
        elif right:
            r[i][0] = seq
        else:
            r.insert(i, [seq, seq])
        if r and r[0][0] == self.floor + 1:
            self.floor = r.pop(0)[1]
        self.last_seq = max(self.last_seq, seq)
        return True

    def to_dict(self, window):
        floor = max(self.floor, self.last_seq - window) if window is not None else self.floor
        flat = []
        for a, b in self.ranges:
            if b > floor:
                flat += [max(a, floor + 1), b]
        return {"epoch": self.epoch, "last_seq": self.last_seq, "floor": floor, "ranges": flat,
                "batches": self.batches, "rows": self.rows, "unacked": list(self.unacked)}

    @classmethod
    def from_dict(cls, d):
        p = cls(d.get("epoch"))
        p.last_seq, p.floor = int(d.get("last_seq", 0)), int(d.get("floor", 0))
        flat = [int(x) for x in d.get("ranges", [])]
        p.ranges = [[a, b] for a, b in zip(flat[0::2], flat[1::2]) if a <= b]
        p._normalise()
        p.batches, p.rows = int(d.get("batches", 0)), int(d.get("rows", 0))
        p.unacked = [int(x) for x in d.get("unacked", [])]
        return p

    def _normalise(self):
        rs = sorted(self.ranges)
        out = []
        for a, b in rs:
            if b <= self.floor:
                continue
            a = max(a, self.floor + 1)
            if out and a <= out[-1][1] + 1:
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
        if out and out[0][0] == self.floor + 1:
            self.floor = out.pop(0)[1]
        self.ranges = out


def merge_state_dicts(states):
    """Union of several StreamDataset state dicts (one per DDP rank, say):
    a batch consumed by any of them counts as consumed. Load the result on
    every rank after a restore, with any world size."""
    states = [s for s in states if s]
    if not states:
        return {}
    if any(s.get("delivery") == "checkpoint" for s in states):
        return _merge_checkpoint_states(states)
    out = {"version": STATE_VERSION, "pipeline": states[0].get("pipeline"), "endpoints": {}}
    merged = {}
    for s in states:
        if s.get("pipeline") != out["pipeline"]:
            raise ValueError("state dicts of different pipelines: %r, %r"
                             % (out["pipeline"], s.get("pipeline")))
        for ep, d in s.get("endpoints", {}).items():
            p = _Position.from_dict(d)
            m = merged.get(ep)
            if m is None or _newer_epoch(p.epoch, m.epoch):
                merged[ep] = p
                continue
            if p.epoch != m.epoch:
                continue  # an older epoch: superseded
            m.floor = max(m.floor, p.floor)
            m.ranges += [list(r) for r in p.ranges]
            m._normalise()
            m.last_seq = max(m.last_seq, p.last_seq)
            m.batches += p.batches
            m.rows += p.rows
            m.unacked = sorted(set(m.unacked) | set(p.unacked))
    out["endpoints"] = {ep: p.to_dict(None) for ep, p in merged.items()}
    return out


def _merge_checkpoint_states(states):
    """Checkpoint delivery: the union of the ranks' offset positions."""
    pos = Position()
    for s in states:
        if s.get("delivery") != "checkpoint":
            raise ValueError("cannot merge an ack-delivery state with checkpoint-delivery ones")
        if s.get("pipeline") != states[0].get("pipeline"):
            raise ValueError("state dicts of different pipelines: %r, %r"
                             % (states[0].get("pipeline"), s.get("pipeline")))
        pos = pos.merge(Position.from_dict(s.get("position")))
    return {"version": STATE_VERSION, "pipeline": states[0].get("pipeline"),
            "delivery": "checkpoint", "position": pos.to_dict()}


def _newer_epoch(a, b):
    return a is not None and (b is None or a > b)


# ---------------------------------------------------------------- the dataset

def _rank():
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except Exception:
        pass
    return int(os.environ.get("RANK", 0))


class _Conn:
    """One connection of one iterator: its client, endpoint and unacked
    batches."""

    def __init__(self, endpoint, client):
        self.endpoint, self.client = endpoint, client
        self.rbuf = None

    def into(self, n):
        """The connection's receive buffer for a frame of n bytes, reused
        frame after frame (TrainingBatch: every tensor is copied out of the
        frame before the next one is read)."""
        if self.rbuf is None or len(self.rbuf) < n:
            self.rbuf = bytearray(n + n // 4)
        return memoryview(self.rbuf)[:n]

    def buffered(self):
        """True when the client already holds bytes of a next frame, which
        select() on the socket would not report."""
        return len(getattr(self.client, "_buf", b"")) >= 4


class StreamDataset(IterableDataset):
    """Batches of one piperec pipeline as torch tensors.

    endpoints: "host:port" (or "unix:/path": sinks.trainer.unix_path on this
        node) or a list of them (several piperec services of
        the same pipeline, e.g. one per Kafka partition set): each iterator
        connects to all and takes batches from whichever has one.
    pipeline: the pipeline name (Subscribe).
    credits: credit window asked per connection (capped by the server).
    pin_memory: None (default) = pin when torch.cuda.is_available(); True =
        pin (a warning, and no pinning, when torch has no CUDA); False = never.
        Only the main process pins: inside DataLoader workers pinning is left
        to DataLoader(pin_memory=...), which StreamDataLoader sets for you.
    sparse_format: "auto" (KeyedJaggedTensor when torchrec is importable),
        "kjt" (require torchrec) or "triple" (JaggedSparse).
    max_batches: stop each iterator after this many batches (None: never).
    idle_timeout: stop an iterator when no batch came for this many seconds
        (None: wait forever; the iterator also ends when every server closes).
    ack_lag: batches an iterator keeps unacknowledged behind the one it yields.
        0 (in the main process) acks a batch when the next one is asked for,
        i.e. after the training step on it. Under DataLoader workers the
        DataLoader prefetches, so asking for the next batch does not mean the
        last one was trained on; StreamDataLoader sets prefetch_factor + 1.
    resume_window: sequences below (last consumed - resume_window) count as
        consumed after a restore (0 = skip every sequence <= the restored
        position, the simplest rule); above it the exact set is kept.
    connect_timeout: keep retrying a refused connection this long (seconds).
    client_id: prefix of the client id the server logs (rank and worker added).
    delivery: "ack" (default; positions are batch sequences, see above) or
        "checkpoint", for servers with ``sinks.trainer.delivery: checkpoint``
        (docs/trainer-protocol.md, "Checkpoint delivery"): state_dict() is
        then the offset-based position of the rows received by the training
        loop (a ``piperec_client.Position`` as a dict, merged with the
        restored one), load_state_dict() sends it as ``Subscribe.resume`` on
        every (re)connect, and :meth:`commit_checkpoint` must be called once
        the checkpoint holding that state is durable. A lost connection
        raises ``ConnectionError`` instead of ending the iterator: the model
        must be restored from its last checkpoint (rows trained since are
        replayed).
    layout: "protobuf" (the default without a device: TrainingBatch frames,
        decoded and copied into new tensors per batch) or "raw" (the
        default with a device; the GPU feed: raw tensor frames
        received by background threads into a ring of preallocated, pinned
        when CUDA is available, buffers; tensors are views on them, and a
        buffer is refilled only once its batch was acknowledged and no
        tensor on it lives). A server without the raw layout
        answers with TrainingBatch frames, which are then copied as before.
    device: with layout="raw" (implied), a torch device ("cuda", "cuda:1") to copy
        each batch to on a side CUDA stream (the current stream waits on
        the copy's event; the next batch's copy overlaps this step); None or
        "cpu" yields the host views.
    streams: layout="raw": connections (and receive threads) per endpoint
        (default 1). StreamDataLoader(num_workers=N) starts no worker
        processes over a raw dataset: its batches come from these threads.
    kjt_offsets: layout="raw": ask the server for the KeyedJaggedTensor
        offsets too (passed to the KeyedJaggedTensor).
    compact: layout="raw": Criteo batches travel without their all-ones
        lengths and with int32 values when the pipeline's columns are int32
        (the bytes of a TrainingBatch, 2.3x fewer than the default raw
        layout). On the host path ``sparse`` and the values are then int32
        and the lengths a shared ones tensor; on a device, values are
        widened to int64 there and the lengths are a cached device tensor.
    compact_wire: layout="raw" without ``compact``: still ask the server for
        the compact wire form (Subscribe.compact; default True) and rebuild
        the default raw tensors on this side: int32 values widened by the
        receive thread into an int64 array of the batch's ring slot (on a
        device: by the copy there), and int32 all-ones lengths kept per
        slot (read only by convention, as a device's cached ones are). The
        tensors are the default raw layout's, values and dtypes; the socket
        carries 160 bytes a Criteo row instead of 368, which bounds the
        default raw layout on a loopback (bench/RESULTS.md). False: the full
        raw bytes on the wire, as before. Jagged batches are never compacted.
    recv_thread: layout="raw": None (default) = batches to a ``device`` are
        received by background threads (one per connection; the receive
        overlaps the training step and the copy), host batches (``device``
        None or "cpu") on the iterating thread itself when the next batch
        is asked for (piperec.feed.InlineFeed: no hand-off between threads,
        which cost more than the overlap on the host path, bench/RESULTS.md);
        True / False: always / never a receive thread. Batches, acks,
        state_dict() and checkpoint delivery are the same either way.
    """

    def __init__(self, endpoints, pipeline, credits=8, pin_memory=None, sparse_format="auto",
                 max_batches=None, idle_timeout=None, ack_lag=None, resume_window=4096,
                 connect_timeout=10.0, client_id=None, delivery="ack", layout=None,
                 device=None, streams=1, kjt_offsets=False, compact=False, compact_wire=True,
                 recv_thread=None):
        super().__init__()
        if layout is None:  # a device means the GPU feed
            layout = "raw" if device is not None else "protobuf"
        if layout not in ("protobuf", "raw"):
            raise ValueError("layout must be protobuf or raw, not %r" % (layout,))
        if device is not None and layout != "raw":
            raise ValueError("device= needs layout='raw' (the GPU feed)")
        self.layout, self.device, self.streams = layout, device, max(1, int(streams))
        self.kjt_offsets, self.compact = kjt_offsets, compact
        self.recv_thread = None if recv_thread is None else bool(recv_thread)
        self.compact_wire = bool(compact or compact_wire)
        self._feed = None
        self._dev_ones = {}  # (device, n) -> int32 ones on the device (compact lengths)
        if delivery not in ("ack", "checkpoint"):
            raise ValueError("delivery must be ack or checkpoint, not %r" % (delivery,))
        self.delivery = delivery
        self.endpoints = [endpoints] if isinstance(endpoints, str) else list(endpoints)
        if not self.endpoints:
            raise ValueError("StreamDataset: no endpoint")
        if sparse_format not in ("auto", "kjt", "triple"):
            raise ValueError("sparse_format must be auto, kjt or triple, not %r" % (sparse_format,))
        if sparse_format == "kjt" and KeyedJaggedTensor is None:
            raise ImportError("sparse_format='kjt' needs torchrec (torchrec.sparse.jagged_tensor)")
        self.pipeline = pipeline
        self.credits = credits
        self.pin_memory = pin_memory
        self.sparse_format = sparse_format
        self.max_batches = max_batches
        self.idle_timeout = idle_timeout
        self.ack_lag = ack_lag
        self.resume_window = resume_window
        self.connect_timeout = connect_timeout
        self.client_id = client_id or "torch-%d" % os.getpid()
        self._loader_ack_lag = 3  # DataLoader default prefetch_factor 2, + 1
        self._ring_slots = 0  # StreamDataLoader workers: ring slots per worker (0: no ring)
        self._restored = {}   # endpoint -> _Position loaded by load_state_dict
        self._positions = {}  # endpoint -> _Position consumed (this process's view)
        self.info = None      # SubscribeOk of the first connection, once iterated
        self.skipped = 0      # batches skipped as already consumed
        self._resume = Position()    # checkpoint delivery: the restored checkpoint's position
        self._position = Position()  # checkpoint delivery: rows received since (training loop)
        self._live = []              # connections of this process's running iterator
        self._ckpt_id = 0
        self.checkpoint_released = {}  # endpoint -> batches the last short-connection commit released

    # -- positions

    def _record(self, b):
        """Mark a StreamBatch as consumed (the iterator and StreamDataLoader
        call this where the training loop receives the batch)."""
        if self.delivery == "checkpoint":
            for r in b.offsets or ():
                self._position.add(r["topic"], r["partition"], r["first_offset"], r["last_offset"])
            return
        p = self._positions.get(b.endpoint)
        if p is None or _newer_epoch(b.epoch, p.epoch):
            p = self._positions[b.endpoint] = _Position(b.epoch)
        elif b.epoch != p.epoch:
            return  # a batch of an older epoch: nothing to record against
        if p.add(b.sequence):
            p.batches += 1
            p.rows += b.rows

    def _already_consumed(self, endpoint, epoch, seq):
        if self.delivery == "checkpoint":
            return False  # the server filters by the resume position
        r = self._restored.get(endpoint)
        return r is not None and r.epoch == epoch and seq <= r.last_seq and r.contains(seq)

    def state_dict(self):
        """The data position: {"version", "pipeline", "endpoints": {endpoint:
        {"epoch", "last_seq", "floor", "ranges", "batches", "rows",
        "unacked"}}}. Plain ints and lists: torch.save and json both work.

        delivery="checkpoint": {"version", "pipeline", "delivery":
        "checkpoint", "position": Position.to_dict()}, the restored position
        merged with every row the training loop received since."""
        if self.delivery == "checkpoint":
            return {"version": STATE_VERSION, "pipeline": self.pipeline, "delivery": "checkpoint",
                    "position": self._resume.copy().merge(self._position).to_dict()}
        return {"version": STATE_VERSION, "pipeline": self.pipeline,
                "endpoints": {ep: p.to_dict(self.resume_window)
                              for ep, p in self._positions.items()}}

    def load_state_dict(self, state):
        """Resume from state_dict() (or merge_state_dicts()): iterators made
        after this skip, and acknowledge, batches recorded there."""
        if not state:
            self._restored, self._positions = {}, {}
            self._resume, self._position = Position(), Position()
            return
        if state.get("version") != STATE_VERSION:
            raise ValueError("unsupported StreamDataset state version %r" % (state.get("version"),))
        if state.get("pipeline") != self.pipeline:
            raise ValueError("state of pipeline %r loaded into a dataset of %r"
                             % (state.get("pipeline"), self.pipeline))
        if (state.get("delivery") or "ack") != self.delivery:
            raise ValueError("a %s-delivery state loaded into a %s-delivery dataset"
                             % (state.get("delivery") or "ack", self.delivery))
        if self.delivery == "checkpoint":
            self._resume = Position.from_dict(state.get("position"))
            self._position = Position()
            return
        eps = state.get("endpoints", {})
        self._restored = {ep: _Position.from_dict(d) for ep, d in eps.items()}
        self._positions = {ep: _Position.from_dict(d) for ep, d in eps.items()}

    def commit_checkpoint(self, state, timeout=10.0):
        """delivery="checkpoint": tell piperec that the checkpoint holding
        ``state`` (this dataset's state_dict(), or merge_state_dicts() of
        every rank's) is durable: call it after the checkpoint file is
        fsync'd (and renamed into place), never before. piperec then commits
        the input offsets the checkpoint holds.

        It is sent on this process's running iterator's connections
        (num_workers=0). When this process has none, e.g. under DataLoader
        workers (each worker holds its own connections, which the main
        process cannot reach), it opens a short connection per endpoint that
        subscribes with ``resume=state`` and sends the commit: the server
        releases the batches a checkpoint holds whichever connection trained
        on them, so one commit per endpoint covers every worker and rank.
        Such a connection may be dealt a batch before it closes; that batch
        is unacked and goes back to the queue (not lost, not trained); it
        waits for the server's CheckpointOk (TimeoutError after `timeout`
        seconds; a server in ack delivery answers ServerError PROTOCOL
        naming sinks.trainer.delivery, an older one never answers), and
        ``self.checkpoint_released[endpoint]`` says how many batches it let go.
        Returns the number of endpoints committed to."""
        if self.delivery != "checkpoint":
            raise RuntimeError("commit_checkpoint() needs StreamDataset(delivery='checkpoint')")
        if (state or {}).get("delivery") != "checkpoint":
            raise ValueError("commit_checkpoint(): not a checkpoint-delivery state_dict()")
        pos = Position.from_dict(state.get("position"))
        self._ckpt_id += 1
        done = 0
        if self._live:
            for c in self._live:
                if self._feed is not None:  # raw layout: sent by the connection's thread
                    self._feed.commit(c, pos, self._ckpt_id, timeout)
                else:
                    c.client.commit_checkpoint(pos, self._ckpt_id)
                done += 1
        else:
            for ep in self.endpoints:
                with TrainerClient(ep, self.pipeline, credits=1, timeout=timeout, resume=pos,
                                   client_id="%s-commit" % self.client_id) as c:
                    c.commit_checkpoint(pos, self._ckpt_id)
                    deadline = time.monotonic() + timeout
                    while (c.checkpoint_ok is None or c.checkpoint_ok[0] != self._ckpt_id) \
                            and time.monotonic() < deadline:
                        c.recv(timeout=0.05)  # reads the CheckpointOk (a batch: left unacked)
                    if c.checkpoint_ok is None or c.checkpoint_ok[0] != self._ckpt_id:
                        raise TimeoutError("%s: no CheckpointOk in %.0f s (is the server's "
                                           "sinks.trainer.delivery 'checkpoint'?)" % (ep, timeout))
                    self.checkpoint_released[ep] = c.checkpoint_ok[1]
                done += 1
        # A later (re)connect without load_state_dict resumes from here.
        self._resume = self._resume.merge(pos)
        return done

    # -- iteration

    def _want_pin(self):
        if self.pin_memory is False:
            return False
        has_cuda = torch.cuda.is_available()
        if self.pin_memory and not has_cuda:
            warnings.warn("StreamDataset(pin_memory=True) but torch has no CUDA device: not pinning")
        return has_cuda

    def _connect(self, endpoint, cid):
        deadline = time.monotonic() + self.connect_timeout
        while True:
            try:
                resume = self._resume if self.delivery == "checkpoint" else None
                return TrainerClient(endpoint, self.pipeline, credits=self.credits, client_id=cid,
                                     resume=resume, layout=self.layout,
                                     kjt_offsets=self.kjt_offsets,
                                     compact=self.compact_wire and self.layout == "raw")
            except (ConnectionRefusedError, ConnectionResetError, socket.timeout,
                    FileNotFoundError):  # a unix: socket piperec has not made yet
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.1)

    def __iter__(self):
        wi = get_worker_info()
        in_worker = wi is not None
        cid = "%s-r%d-w%d" % (self.client_id, _rank(), wi.id if in_worker else 0)
        lag = self.ack_lag if self.ack_lag is not None else (
            self._loader_ack_lag if in_worker else 0)
        if self.layout == "raw":
            return self._generate_raw(cid, lag, self._want_pin(), not in_worker)
        ring = _WorkerRing(self._ring_slots) if in_worker and self._ring_slots else None
        return self._generate(cid, lag, self._want_pin() and not in_worker, not in_worker, ring)

    def _generate(self, cid, lag, pin, record, ring=None):
        conns = []
        try:
            for ep in self.endpoints:
                conns.append(_Conn(ep, self._connect(ep, cid)))
            if record:
                self._live = conns  # commit_checkpoint() sends on these
            info = conns[0].client.info
            if self.info is None:
                self.info = info
            granted = min(int(c.client.info.get("credits", self.credits) or self.credits)
                          for c in conns)
            if lag > max(granted - 2, 0):
                warnings.warn("ack_lag %d needs credits >= %d; the server granted %d: using %d"
                              % (lag, lag + 2, granted, max(granted - 2, 0)))
                lag = max(granted - 2, 0)
            keys = list(info.get("sparse_names") or [])
            n_sparse = int(info.get("n_sparse", 0))
            if len(keys) != n_sparse:
                keys = ["C%d" % (i + 1) for i in range(n_sparse)]
            pending = deque()  # (conn, sequence) consumed, not yet acked, oldest first
            live = list(conns)
            rr = [0]
            n = 0
            while self.max_batches is None or n < self.max_batches:
                got = self._recv_any(live, rr)
                if got is None:
                    break
                conn, b = got
                epoch = _batch_epoch(b)
                if self._already_consumed(conn.endpoint, epoch, b.sequence):
                    conn.client.ack(b.sequence)  # consumed before the restore: skip
                    self.skipped += 1
                    continue
                out = self._to_torch(b, conn.endpoint, epoch, keys, pin, ring)
                while len(pending) > lag:
                    self._ack(pending, 1)
                pending.append((conn, b.sequence))
                if record:
                    self._record(out)
                    self._note_unacked(pending)
                n += 1
                yield out
            # Ended normally (count, idle, every server closed): the loop has
            # (or, under a DataLoader, will have) every batch yielded so far.
            self._ack(pending, len(pending))
            if record:
                self._note_unacked(pending)
        finally:
            # A generator closed early (GeneratorExit) lands here with
            # batches unacked: the server resends them (at least once).
            if self._live is conns:
                self._live = []
            for c in conns:
                try:
                    c.client.close()
                except OSError:
                    pass

    def _generate_raw(self, cid, lag, pin, record):
        """The GPU feed (layout="raw"): see the module doc and piperec.feed.

        On a CUDA device one batch is staged ahead: when the next batch is
        already received, its copy is issued before this one is yielded, so
        it runs on the side stream while the training step runs."""
        clients, feed = [], None
        try:
            for ep in self.endpoints:
                for k in range(self.streams):
                    sid = cid if self.streams == 1 else "%s-s%d" % (cid, k)
                    clients.append((ep, self._connect(ep, sid)))
            info = clients[0][1].info
            if self.info is None:
                self.info = info
            granted = min(int(c.info.get("credits", self.credits) or self.credits)
                          for _, c in clients)
            if lag > max(granted - 2, 0):
                warnings.warn("ack_lag %d needs credits >= %d; the server granted %d: using %d"
                              % (lag, lag + 2, granted, max(granted - 2, 0)))
                lag = max(granted - 2, 0)
            keys = list(info.get("sparse_names") or [])
            if len(keys) != int(info.get("n_sparse", 0)):
                keys = ["C%d" % (i + 1) for i in range(int(info.get("n_sparse", 0)))]
            dev = torch.device(self.device) if self.device is not None else None
            if dev is not None and dev.type == "cpu":
                dev = None
            # compact on the wire, default tensors wanted: the receive thread
            # widens on the host; to a device, the copy widens there
            wide = not self.compact and dev is None
            if self._inline(dev):
                feed = InlineFeed(clients, pin=pin, torch_mod=torch, wide=wide)
            else:
                feed = RawFeed(clients, pin=pin, torch_mod=torch, wide=wide)
            if record:
                self._live, self._feed = feed.conns, feed
            side = torch.cuda.Stream(device=dev) if dev is not None and dev.type == "cuda" else None
            pending = deque()  # (conn, sequence, slot, copy event): yielded, not yet acked
            staged = deque()   # (out, conn, sequence, slot, copy event): not yet yielded
            n = 0
            while self.max_batches is None or n < self.max_batches:
                if not staged:
                    got = self._raw_take(feed, self.idle_timeout, keys, pin, dev, side)
                    if got is None:
                        break
                    if got is not False:
                        staged.append(got)
                    continue
                if side is not None and len(staged) < 2 and (
                        self.max_batches is None or n + 1 < self.max_batches):
                    got = self._raw_take(feed, 0, keys, pin, dev, side, wait=False)
                    if got:
                        staged.append(got)
                out, conn, seq, slot, ev = staged.popleft()
                if ev is not None:
                    self._on_current_stream(out, ev, dev)
                while len(pending) > lag:
                    self._raw_ack(feed, pending, 1)
                pending.append((conn, seq, slot, ev))
                if record:
                    self._record(out)
                    self._note_unacked(pending)
                n += 1
                yield out
            for _, conn, seq, slot, ev in staged:  # taken, never yielded: the server resends
                if ev is not None:
                    ev.synchronize()
                feed.release(slot)
            self._raw_ack(feed, pending, len(pending))
            if record:
                self._note_unacked(pending)
        finally:
            if self._feed is feed and feed is not None:
                self._live, self._feed = [], None
            if feed is not None:
                feed.close()
            for _, c in clients:
                try:
                    c.close()
                except OSError:
                    pass

    def _inline(self, dev):
        """Receive on the consumer's thread (piperec.feed.InlineFeed)?
        recv_thread None (default): yes on the host path (no device), where
        there is no copy to overlap; True / False: always a thread / never."""
        if self.recv_thread is None:
            return dev is None
        return not self.recv_thread

    def _raw_take(self, feed, timeout, keys, pin, dev, side, wait=True):
        """The next batch of the feed as (out, conn, sequence, slot, copy
        event), its device copy issued; None at the end (idle timeout, every
        connection gone) or, with wait=False, when none is ready; False for
        a batch skipped as consumed before a restore."""
        got = feed.next(timeout if wait else 0)
        if got is None:
            return None
        conn, slot, b = got
        if isinstance(b, BaseException):
            if not isinstance(b, (ConnectionError, ServerError)) or (
                    isinstance(b, ServerError) and b.code != "SHUTDOWN"):
                raise b  # a server Error or a malformed frame: not a connection that ended
            self._lost(conn, b)
            return False
        epoch = _batch_epoch(b)
        if self._already_consumed(conn.endpoint, epoch, b.sequence):
            feed.ack(conn, b.sequence)  # consumed before the restore: skip
            feed.release(slot)
            self.skipped += 1
            return False
        if b.layout == "raw":
            out = self._raw_views(b, conn.endpoint, epoch, keys)
            if dev is None and slot is not None:  # the loop's views lease the slot (piperec.feed)
                # (a compact batch's unit lengths are a shared array, not the slot's)
                slot.lease((b.dense, b.labels, b.values, b.kjt_offsets, b.weights,
                            None if b.raw_flags & RAW_UNIT else b.lengths))
        else:  # a server without the raw layout: copied out, the buffer is free
            out = self._to_torch(b, conn.endpoint, epoch, keys, pin)
            feed.release(slot)
            slot = None
        ev = None
        if dev is not None:
            out, ev = self._copy_to(out, dev, side, unit=bool(b.raw_flags & RAW_UNIT))
        return out, conn, b.sequence, slot, ev

    @staticmethod
    def _raw_ack(feed, pending, k):
        """Ack the k oldest pending batches, then give their buffers back
        (after their copy to the device finished)."""
        by_conn, slots = {}, []
        for _ in range(min(k, len(pending))):
            conn, seq, slot, ev = pending.popleft()
            by_conn.setdefault(id(conn), (conn, []))[1].append(seq)
            if ev is not None:
                ev.synchronize()
            slots.append(slot)
        for conn, seqs in by_conn.values():
            feed.ack(conn, *seqs)
        for slot in slots:
            feed.release(slot)

    def _raw_views(self, b, endpoint, epoch, keys):
        """A raw batch as tensors sharing the receive buffer (no copy; a
        batch compact on the wire was widened by the receive thread, on
        arrays of its ring slot: piperec.feed.widen)."""
        return _raw_batch(b, self.sparse_format, keys, endpoint, epoch)

    def _sparse_features(self, keys, values, lengths, offsets=None, weights=None):
        return _sparse_features(self.sparse_format, keys, values, lengths, offsets, weights)

    def _copy_to(self, out, dev, side, unit=None):
        """Issue the copy of a batch to `dev` on the side stream (CUDA), or
        a plain copy (another device). Returns (device batch, copy event or
        None); the consumer's stream waits on the event when the batch is
        yielded (_on_current_stream). `unit`: the batch came with unit
        lengths (compact on the wire; None: when ``compact``)."""
        values, lengths, weights = _sf_parts(out.sparse_features)
        g = StreamBatch()
        g.__setstate__(out._state())
        g._ring = None
        ev = None
        ones = None
        if (self.compact if unit is None else unit) and out.sparse is not None and lengths.numel():
            # compact Criteo batch: all-ones lengths, cached on the device
            ones = self._dev_ones.get((str(dev), lengths.numel()))
            if ones is None:
                ones = self._dev_ones[(str(dev), lengths.numel())] = lengths.to(dev)
        if side is None:
            g.dense, g.labels = out.dense.to(dev), out.labels.to(dev)
            values = values.to(dev).long()
            lengths = ones if ones is not None else lengths.to(dev)
            weights = weights.to(dev) if weights is not None else None
        else:
            with torch.cuda.stream(side):
                g.dense = out.dense.to(dev, non_blocking=True)
                g.labels = out.labels.to(dev, non_blocking=True)
                values = values.to(dev, non_blocking=True).long()  # int32 (compact): widened there
                lengths = ones if ones is not None else lengths.to(dev, non_blocking=True)
                if weights is not None:  # the weights section, copied as the values are
                    weights = weights.to(dev, non_blocking=True)
                ev = torch.cuda.Event()
                ev.record(side)
        g.sparse = values.view(len(out.keys), out.rows).t() if out.sparse is not None else None
        g.sparse_features = self._sparse_features(out.keys, values, lengths, weights=weights)
        return g, ev

    @staticmethod
    def _on_current_stream(g, ev, dev):
        """Make the consumer's current stream wait for g's copy, and keep
        g's memory from being reused before that stream is done with it."""
        main = torch.cuda.current_stream(dev)
        main.wait_event(ev)
        values, lengths, weights = _sf_parts(g.sparse_features)
        for t in (g.dense, g.labels, values, lengths, weights):
            if t is not None:
                t.record_stream(main)

    def _note_unacked(self, pending):
        for p in self._positions.values():
            p.unacked = []
        for item in pending:  # (conn, seq, ...)
            p = self._positions.get(item[0].endpoint)
            if p is not None:
                p.unacked.append(item[1])

    @staticmethod
    def _ack(pending, k):
        by_conn = {}
        for _ in range(min(k, len(pending))):
            conn, seq = pending.popleft()
            by_conn.setdefault(id(conn), (conn, []))[1].append(seq)
        for conn, seqs in by_conn.values():
            try:
                conn.client.ack(*seqs)
            except OSError:
                pass  # connection gone: the server resends them elsewhere

    def _lost(self, conn, err=None):
        """Connection `conn` ended with `err` (what its receive raised). Only
        a server's SHUTDOWN notice (a stop, SIGTERM) ends the iteration
        quietly; a server that died, a reset or a TIMEOUT raises, so that a
        crash never looks like the end of the stream. Under checkpoint
        delivery every end raises: the model must be restored."""
        if self.delivery == "checkpoint":
            raise ConnectionError(
                "piperec at %s closed the trainer stream (checkpoint delivery): restore the last "
                "checkpoint (model and load_state_dict) before training on" % conn.endpoint)
        if isinstance(err, ServerError) and err.code == "SHUTDOWN":
            return
        raise ConnectionClosed(
            "piperec at %s: the trainer stream ended without the server's shutdown notice (%s): "
            "the server died or the connection broke; its unacknowledged batches are delivered "
            "again (to another trainer, or after a reconnect)" % (conn.endpoint, err or "closed"))

    def _recv_any(self, live, rr):
        """Next (conn, numpy Batch) from any live connection, or None on idle
        timeout / when every server has closed. Round robin between
        connections that have a batch ready."""
        deadline = None if self.idle_timeout is None else time.monotonic() + self.idle_timeout
        while live:
            if len(live) == 1:
                ready = live
            else:
                ready = [c for c in live if c.buffered()]
                if not ready:
                    left = None if deadline is None else max(0.0, deadline - time.monotonic())
                    socks = select.select([c.client.sock for c in live], [], [], left)[0]
                    ready = [c for c in live if c.client.sock in socks]
                    if not ready:
                        return None
            start = rr[0] % len(ready)
            for k in range(len(ready)):
                c = ready[(start + k) % len(ready)]
                if len(live) == 1:
                    t = None if deadline is None else max(0.0, deadline - time.monotonic())
                    if t == 0.0:
                        return None
                else:
                    t = 0.05  # bytes are there; finish a frame or come back
                try:
                    b = c.client.recv(t, into=c.into)
                except (EOFError, OSError) as e:
                    live.remove(c)
                    self._lost(c, e)
                    break
                except ServerError as e:
                    if e.code != "SHUTDOWN":
                        raise
                    live.remove(c)
                    self._lost(c, e)
                    break
                if b is not None:
                    rr[0] += 1
                    return c, b
                if len(live) == 1:
                    return None  # single connection timed out
            if deadline is not None and time.monotonic() >= deadline:
                return None
        return None

    def _jagged_to_torch(self, b, pin):
        """A jagged batch's tensors: one copy each out of the frame."""
        def copy(a, dtype):
            t = torch.empty(a.shape, dtype=dtype, pin_memory=pin)
            t.numpy()[...] = a
            return t
        out = StreamBatch()
        out.dense = copy(b.dense, torch.float32)
        out.labels = copy(b.labels, torch.float32)
        out.sparse = None
        values, lengths = copy(b.values, torch.int64), copy(b.lengths, torch.int32)
        w = getattr(b, "weights", None)
        weights = copy(w, torch.float32) if w is not None else None
        keys = list(b.keys)
        out.sparse_features = self._sparse_features(keys, values, lengths, weights=weights)
        out.keys = keys
        out.label_names, out.dense_names = list(b.label_names), list(b.dense_names)
        return out

    def _to_torch(self, b, endpoint, epoch, keys, pin, ring=None):
        """A TrainingBatch as new tensors (one copy each out of the frame),
        or, in a StreamDataLoader worker (ring), as tensors in the worker's
        next ring slot."""
        out = StreamBatch()
        out._ring = None
        if getattr(b, "jagged", False):
            out = self._jagged_to_torch(b, pin)
            out.jagged, out._ring = True, None
            return self._finish(out, b, endpoint, epoch)
        rows, nd, ns = b.rows, b.n_dense, b.n_sparse
        use_kjt = KeyedJaggedTensor is not None and self.sparse_format != "triple"
        got = ring.take(rows, nd, ns, use_kjt) if ring is not None else None
        if got is not None:
            out._ring, (dense, labels, values, lengths) = got
        else:
            dense = torch.empty((rows, nd), dtype=torch.float32, pin_memory=pin)
            labels = torch.empty(rows, dtype=torch.float32, pin_memory=pin)
            values = torch.empty(ns * rows, dtype=torch.int64, pin_memory=pin)
            lengths = torch.ones(ns * rows, dtype=torch.int32, pin_memory=pin)
        cols = b.dense.T  # [nd, rows]: column-major on the wire
        if cols.flags.c_contiguous and nd:
            # a strided write per column: 0.6 of numpy's 2-D transposing copy (bench/RESULTS.md)
            flat = dense.numpy().reshape(-1)
            for c in range(nd):
                flat[c::nd] = cols[c]
        else:
            dense.numpy()[...] = b.dense
        labels.numpy()[...] = b.labels
        values.numpy().reshape(ns, rows)[...] = b.sparse.T  # key-major, as a KJT wants
        out.dense, out.labels = dense, labels
        out.sparse = values.view(ns, rows).t()
        if use_kjt:
            out.sparse_features = KeyedJaggedTensor(keys=keys, values=values, lengths=lengths)
        else:
            out.sparse_features = JaggedSparse(keys, values, lengths)
        out.keys = keys
        out.jagged, out.label_names, out.dense_names = False, [], []
        return self._finish(out, b, endpoint, epoch)

    @staticmethod
    def _finish(out, b, endpoint, epoch):
        rows = b.rows
        out.vocab_sizes = [int(v) for v in b.vocab_sizes]
        out.endpoint, out.epoch, out.sequence, out.rows = endpoint, epoch, b.sequence, rows
        out.offsets = [dict(r) for r in getattr(b, "offsets", None) or ()]
        out.replica = getattr(b, "replica", "")
        out.recycled = list(getattr(b, "recycled", None) or ())
        out.weighted_keys = list(getattr(b, "weighted_keys", None) or ())
        out.feature_tables = list(getattr(b, "feature_tables", None) or ())
        return out


class StreamDataLoader(DataLoader):
    """A DataLoader over a StreamDataset whose state_dict() is the position
    of what the training loop received (not what workers prefetched).

    batch_size is None (piperec makes the batches). num_workers > 0 starts
    no worker processes by default (``processes`` False): the batches come
    from the dataset's receive path in the main process (layout="raw": the
    feed, ``streams`` connections per endpoint, default 1; TrainingBatch:
    one connection per endpoint, decoded as one process decodes), and
    iterating the loader is iterating the dataset (no DataLoader fetcher,
    collate or second record per batch; unless a collate_fn is given), so
    num_workers > 0 costs exactly what one process costs (issue 22:
    worker processes were 0.54 of one process over TrainingBatch by the
    median on the 2-core CI box, 0.74 with views; bench/RESULTS.md). The
    dataset pins as it would in one process (its pin_memory; the loader's
    pin_memory applies to worker processes only).

    processes (TrainingBatch only; True when views is): num_workers > 0
    starts DataLoader worker processes, each with its own connection (the
    server deals the batches between them); it sets the dataset's ack lag
    to prefetch_factor + 1 and pins in the DataLoader (pin_memory defaults
    to the dataset's setting). Batches cross from the workers in reused
    shared-memory ring slots, each leased to its batch: the loop's tensors
    are views on the slot (no copy in this process), and a worker refills
    the slot only once every tensor on it is gone, so a batch the loop
    keeps stays intact for as long as it is kept (its worker adds slots
    meanwhile; see "worker hand-off ring"). Worth it only where decoding is
    the bound and the workers have cores of their own. A raw dataset never
    starts them.

    views: kept for older callers (it used to skip a copy-out that no
    longer exists); True still implies processes."""

    def __init__(self, dataset, num_workers=0, pin_memory=None, prefetch_factor=2, views=False,
                 processes=None, **kwargs):
        if not isinstance(dataset, StreamDataset):
            raise TypeError("StreamDataLoader needs a StreamDataset")
        kwargs.pop("batch_size", None)
        processes = bool(views) if processes is None else bool(processes)
        in_main = num_workers > 0 and (dataset.layout == "raw" or not processes)
        # Over a raw dataset, or with workers routed to the main process,
        # the loader adds nothing to a batch: iterate the dataset itself
        # (the DataLoader's single-process fetcher, collate and this
        # class's _record cost 5-20% of the client's CPU a batch,
        # bench/RESULTS.md).
        self._direct = (dataset.layout == "raw" or in_main) and "collate_fn" not in kwargs
        self._ring_n = 0  # worker ring slots (see "worker hand-off ring")
        if in_main:
            # The dataset's receive path in this process replaces worker
            # processes: no inter-process hand-off per batch, pinned (when
            # wanted) by the dataset. For a raw dataset the `streams`
            # (connections per endpoint, default 1) set the receive
            # parallelism: more connections only pay where the receive is
            # the bound and cores are free (bench/RESULTS.md).
            num_workers, pin_memory = 0, False
            for k in ("persistent_workers", "worker_init_fn", "multiprocessing_context"):
                kwargs.pop(k, None)
        if pin_memory is None:
            pin_memory = dataset._want_pin() if num_workers > 0 else False
        if num_workers > 0:
            dataset._loader_ack_lag = prefetch_factor + 1
            kwargs["prefetch_factor"] = prefetch_factor
            # batches cross from the workers in reused shared-memory slots
            # (see "worker hand-off ring" above for the bound); not under a
            # collate_fn, whose output could keep views on a slot
            if "collate_fn" not in kwargs:
                self._ring_n = prefetch_factor * num_workers + 2
        super().__init__(dataset, batch_size=None, num_workers=num_workers, pin_memory=pin_memory,
                         **kwargs)

    def __iter__(self):
        if self._direct:
            return iter(self.dataset)  # records each batch as the loop receives it
        return self._loader_iter()

    def _loader_iter(self):
        tokens = set()
        # Only the workers this loader starts (now, as the iterator is made)
        # use the ring: a plain DataLoader over the same dataset, which would
        # not copy batches out of their slots, keeps torch's hand-off.
        self.dataset._ring_slots = self._ring_n
        try:
            it = super().__iter__()
        finally:
            self.dataset._ring_slots = 0
        try:
            for b in it:
                if getattr(b, "_ring", None) is not None:  # views on a leased worker ring slot
                    tokens.add(b._ring[0])
                    b._ring = None
                elif getattr(b, "_ring_token", None) is not None:  # the pin thread's copy of one
                    tokens.add(b._ring_token)
                self.dataset._record(b)
                yield b
        finally:
            if tokens:
                _ring_drop(tokens)

    def state_dict(self):
        return self.dataset.state_dict()

    def load_state_dict(self, state):
        self.dataset.load_state_dict(state)


# ---------------------------------------------------------------- growing embeddings

_EMB = (nn.Embedding, nn.EmbeddingBag)


def _tables(module_or_tables):
    m = module_or_tables
    if isinstance(m, _EMB):
        return [m]
    if isinstance(m, (nn.ModuleDict, dict)):
        return list(m.values())
    if isinstance(m, (nn.ModuleList, list, tuple)):
        return list(m)
    if isinstance(m, nn.Module):
        return [x for x in m.modules() if isinstance(x, _EMB)]
    raise TypeError("grow_embeddings: expected an nn.Embedding/EmbeddingBag, a list or dict of "
                    "them, or a module holding them; got %s" % type(m).__name__)


def _init_rows(table, n, dim, dtype, device):
    """n fresh rows initialised by the table's own reset_parameters (so a
    subclass's init is honoured), run on a temporary weight."""
    saved_w, saved_n = table.weight, table.num_embeddings
    saved_pad = getattr(table, "padding_idx", None)
    tmp = nn.Parameter(torch.empty(n, dim, dtype=dtype, device=device))
    try:
        table.weight, table.num_embeddings = tmp, n
        if hasattr(table, "padding_idx"):
            table.padding_idx = None
        with torch.no_grad():
            table.reset_parameters()
        return tmp.detach()
    finally:
        table.weight, table.num_embeddings = saved_w, saved_n
        if hasattr(table, "padding_idx"):
            table.padding_idx = saved_pad


def reset_recycled(module_or_tables, notices, optimizer=None, init=None, tracker=None):
    """Reset the embedding rows a bounded vocabulary recycled.

    module_or_tables: as for grow_embeddings (tables in sparse column order,
        or a dict/ModuleDict keyed by column name; then pass notices with
        names: use ``keys`` of the batch to map column numbers).
    notices: a batch (``.recycled``) or a list of (column, index, row,
        number) tuples.
    optimizer: optimizers (one or a list) whose per-parameter state shaped
        like the weight (Adam/AdamW exp_avg and exp_avg_sq, Adagrad sum, SGD
        momentum_buffer) gets those rows zeroed (Adagrad: the group's
        initial_accumulator_value): the new value starts with no history.
        Scalar state such as Adam's `step` is per table and is left alone.
    init: optional fn(tensor [n, dim]) for the new rows; default: the
        table's reset_parameters() on fresh rows (nn.Embedding: N(0, 1)); pass
        ``torch.nn.init.zeros_`` to zero them.
    tracker: a piperec.RecycledTracker: notices it already applied (re-sent
        after a server restart) are skipped.

    Rows beyond a table's size are grown first (grow_embeddings). Call it
    before the batch's forward pass: the whole batch then sees the new rows
    (rows of the batch before a notice's `row` used the old value; a trainer
    that wants them exact splits the batch at `row`). Returns the number of
    rows reset."""
    if tracker is not None:
        notices = tracker.fresh(notices)
    elif hasattr(notices, "recycled"):
        notices = notices.recycled
    notices = list(notices or ())
    if not notices:
        return 0
    tables = _tables(module_or_tables)
    if isinstance(module_or_tables, (nn.ModuleDict, dict)):
        tables = list(module_or_tables.values())
    if optimizer is None:
        optimizers = []
    elif isinstance(optimizer, (list, tuple)):
        optimizers = list(optimizer)
    else:
        optimizers = [optimizer]
    by_col = {}
    for n in notices:
        by_col.setdefault(int(n[0]), []).append(int(n[1]))
    done = 0
    for col, idx in by_col.items():
        if col >= len(tables):
            raise ValueError("reset_recycled: notice for column %d, only %d tables" %
                             (col, len(tables)))
        table = tables[col]
        need = max(idx) + 1
        if need > table.num_embeddings:
            grow_embeddings(table, need, optimizer=optimizer, init=init)
        w = table.weight
        rows = torch.tensor(sorted(set(idx)), dtype=torch.long, device=w.device)
        if init is not None:
            fresh = torch.empty(len(rows), table.embedding_dim, dtype=w.dtype, device=w.device)
            with torch.no_grad():
                init(fresh)
        else:
            fresh = _init_rows(table, len(rows), table.embedding_dim, w.dtype, w.device)
        with torch.no_grad():
            w.index_copy_(0, rows, fresh)
        for o in optimizers:
            for g in o.param_groups:
                if not any(p is w for p in g["params"]):
                    continue
                fill = float(g.get("initial_accumulator_value", 0.0))
                st = o.state.get(w, {})
                for k, v in st.items():
                    if torch.is_tensor(v) and v.dim() >= 1 and v.shape[0] == w.shape[0]:
                        with torch.no_grad():
                            v.index_fill_(0, rows, fill if k == "sum" else 0.0)
        done += len(rows)
    return done


def grow_embeddings(module_or_tables, vocab_sizes, optimizer=None, init=None, headroom=1.0):
    """Grow embedding tables in place to hold vocab_sizes rows.

    module_or_tables: an nn.Embedding/EmbeddingBag, a list/ModuleList of them,
        a dict/ModuleDict of them, or any module (its Embedding/EmbeddingBag
        submodules in registration order).
    vocab_sizes: an int (one table), a list in table order (a batch's
        ``vocab_sizes``), or a dict keyed like the ModuleDict.
    optimizer: an optimizer (or a list of them) holding the tables' weights:
        its param groups are pointed at the new weights, and per-parameter
        state tensors shaped like the old weight (Adam/AdamW/SparseAdam
        exp_avg and exp_avg_sq, Adagrad sum, SGD momentum_buffer, ...) grow
        with it: trained rows keep their state, new rows get zeros (Adagrad:
        the group's initial_accumulator_value); scalars such as Adam's step
        are kept. An optimizer not passed here keeps training the old,
        detached weight: rebuild its param groups after growing.
    init: optional fn(tensor [n_new, dim]) to initialise new rows in place;
        default: the table's own reset_parameters() (nn.Embedding: N(0, 1)).
    headroom: grow to max(needed, ceil(old * headroom)) rows to grow less often.

    A table only grows (never shrinks). Its weight becomes a new Parameter
    (changing the shape of a Parameter in place breaks autograd while an old
    graph still references it): anything else holding the old Parameter —
    an optimizer not passed here, a DistributedDataParallel wrapper, an EMA
    copy — must be rebuilt or updated. Call it between steps (after
    optimizer.step(), before the next forward). Returns [(table index or
    key, old rows, new rows)] for the tables that grew.
    """
    tables = _tables(module_or_tables)
    if optimizer is None:
        optimizers = []
    elif isinstance(optimizer, (list, tuple)):
        optimizers = list(optimizer)
    else:
        optimizers = [optimizer]
    if isinstance(vocab_sizes, dict):
        if not isinstance(module_or_tables, (nn.ModuleDict, dict)):
            raise TypeError("vocab_sizes as a dict needs tables as a dict/ModuleDict")
        names = list(module_or_tables.keys())
        sizes = [vocab_sizes.get(k) for k in names]
    else:
        names = list(module_or_tables.keys()) if isinstance(
            module_or_tables, (nn.ModuleDict, dict)) else list(range(len(tables)))
        sizes = [vocab_sizes] if isinstance(vocab_sizes, int) else list(vocab_sizes)
        if len(sizes) != len(tables):
            raise ValueError("grow_embeddings: %d tables but %d vocabulary sizes"
                             % (len(tables), len(sizes)))
    grown = []
    for name, table, need in zip(names, tables, sizes):
        if need is None:
            continue
        old = table.num_embeddings
        need = int(need)
        if need <= old:
            continue
        new = max(need, int(math.ceil(old * headroom)))
        w = table.weight
        fresh = torch.empty(new - old, table.embedding_dim, dtype=w.dtype, device=w.device)
        if init is not None:
            with torch.no_grad():
                init(fresh)
        else:
            fresh = _init_rows(table, new - old, table.embedding_dim, w.dtype, w.device)
        with torch.no_grad():
            nw = nn.Parameter(torch.cat([w.detach(), fresh], 0), requires_grad=w.requires_grad)
        table.weight = nw
        table.num_embeddings = new
        for o in optimizers:
            _swap_in_optimizer(o, w, nw, old, new)
        grown.append((name, old, new))
    return grown


def _swap_in_optimizer(optimizer, old_p, new_p, old, new):
    """Point the optimizer's param groups at new_p and grow old_p's state."""
    found = False
    fill = 0.0
    for g in optimizer.param_groups:
        for i, p in enumerate(g["params"]):
            if p is old_p:
                g["params"][i] = new_p
                found = True
                fill = float(g.get("initial_accumulator_value", 0.0))
    if not found:
        return
    state = optimizer.state.pop(old_p, None)
    if not state:
        return
    for k, v in list(state.items()):
        if torch.is_tensor(v) and v.dim() >= 1 and v.shape[0] == old and \
                tuple(v.shape[1:]) == tuple(old_p.shape[1:]):
            pad = torch.full((new - old,) + tuple(v.shape[1:]), fill if k == "sum" else 0.0,
                             dtype=v.dtype, device=v.device)
            state[k] = torch.cat([v, pad], 0)
    optimizer.state[new_p] = state
