"""piperec.files — training batches from piperec's .npy files.

What: ``FileDataset``, a torch ``IterableDataset`` over the files piperec
writes outside the trainer stream, all in one .npy layout (docs/formats.md):

- a ``piperec process --output DIR`` directory (a backfill);
- a ``piperec consume --output DIR`` directory;
- a files-sink directory (``sinks.files``): its rolls
  ``batches-<epoch>-<first_seq>-<last_seq>/`` are read in (epoch, first_seq)
  order, and ``.tmp-*`` directories (rolls still being written) and every
  other entry are skipped; one roll directory on its own works too.

Both layouts are read: Criteo (dense.npy, sparse.npy, labels.npy) and a
declared schema's (labels.npy [N, L], dense.npy [N, D],
sparse/<name>.values.npy + sparse/<name>.lengths.npy, and
sparse/<name>.weights.npy for each weighted list that meta.json's
``weighted_keys`` names).

Why: a model is often trained first on a backfill (``piperec process``) and
then on the live stream (``StreamDataset``). FileDataset yields the same
``piperec.torch.StreamBatch`` that StreamDataset yields for the same data —
the same fields, dtypes and shapes, labels float32, sparse features as a
KeyedJaggedTensor or JaggedSparse, recycled-index notices in ``recycled`` —
so one training loop (``embedding_bag_inputs()``, ``reset_recycled``,
``grow_embeddings``) serves both, with nothing written by hand: no offsets
from lengths, no dtype conversions, no roll ordering, no notice bookkeeping.

Arrays are opened with ``np.load(mmap_mode="r")``: a batch's rows are copied
out of the mapped files into new tensors, and a backfill is never read whole.
"""

import json
import os
import re
import warnings

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from piperec import torch as _pt

__all__ = ["FileDataset"]

_ROLL = re.compile(r"^batches-(\d+)-(\d+)-(\d+)$")
_HELP = ("expected a directory holding meta.json (piperec process "
         "--output, piperec consume --output, or one files-sink roll), or a files-sink "
         "directory of batches-<epoch>-<first_seq>-<last_seq>/ rolls")


# ---------------------------------------------------------------- finding the parts

def _roll_dirs(path):
    """The complete rolls under a files-sink directory, in (epoch, first_seq)
    order; .tmp- directories and anything else are skipped."""
    rolls = []
    for name in os.listdir(path):
        m = _ROLL.match(name)
        full = os.path.join(path, name)
        if m and os.path.isfile(os.path.join(full, "meta.json")):
            rolls.append(((int(m.group(1)), int(m.group(2)), int(m.group(3))), full))
    return [full for _, full in sorted(rolls)]


def _part_dirs(path):
    """The directories (parts) a path stands for, in read order."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError("FileDataset: %s: no such file or directory" % path)
    if not os.path.isdir(path):
        raise ValueError("FileDataset: %s is not a piperec output: %s" % (path, _HELP))
    if os.path.isfile(os.path.join(path, "meta.json")):
        return [path]
    rolls = _roll_dirs(path)
    if not rolls:
        raise ValueError("FileDataset: %s is not a piperec output (no meta.json and no "
                         "complete roll): %s" % (path, _HELP))
    return rolls


# ---------------------------------------------------------------- one part

def _load(path, required=True):
    """A .npy file, memory-mapped read-only; None when absent and not required."""
    if not os.path.isfile(path):
        if required:
            raise ValueError("FileDataset: %s is missing (%s)" % (path, _HELP))
        return None
    return np.load(path, mmap_mode="r")


def _read_meta(d):
    path = os.path.join(d, "meta.json")
    try:
        with open(path) as f:
            meta = json.load(f)
    except ValueError as e:
        raise ValueError("FileDataset: %s is not valid JSON: %s" % (path, e)) from None
    if not isinstance(meta, dict):
        raise ValueError("FileDataset: %s is not a JSON object" % path)
    return meta


def _roll_epoch(meta):
    """A roll's epoch (its meta.json has epoch and first_seq); None for a
    process or consume output."""
    if "epoch" in meta and "first_seq" in meta:
        return int(meta["epoch"])
    return None


def _notices_of(d, meta):
    """The part's recycled-index notices as an int64 [K, 4] array of
    (column, row, index, number), row a row of the part's files, sorted by
    row (stable): recycled.npy (piperec process) or the "recycled" lists of
    meta.json's batches (a files-sink roll, a consume output)."""
    npy = _load(os.path.join(d, "recycled.npy"), required=False)
    rows = [] if npy is None else [np.asarray(npy, dtype=np.int64).reshape(-1, 4)]
    for b in meta.get("batches") or ():
        if isinstance(b, dict) and b.get("recycled"):
            rows.append(np.asarray(b["recycled"], dtype=np.int64).reshape(-1, 4))
    if not rows:
        return np.zeros((0, 4), dtype=np.int64)
    out = np.concatenate(rows)
    return out[np.argsort(out[:, 1], kind="stable")]


class _Part:
    """One directory of .npy files: its meta.json, its memory-mapped arrays,
    its rows and notices."""

    def __init__(self, d):
        self.path = d
        self.meta = meta = _read_meta(d)
        self.jagged = bool(meta.get("jagged"))
        self.epoch = _roll_epoch(meta)
        self.vocab_sizes = [int(v) for v in meta.get("vocab_sizes") or ()]
        if self.jagged:
            self._open_jagged(d, meta)
        else:
            self._open_criteo(d, meta)
        self.rows = self._check_rows(meta)
        self.notices = _notices_of(d, meta)

    def _open_criteo(self, d, meta):
        n_dense, n_sparse = int(meta.get("n_dense", 0)), int(meta.get("n_sparse", 0))
        self.dense = _load(os.path.join(d, "dense.npy"), required=n_dense > 0)
        self.sparse = _load(os.path.join(d, "sparse.npy"), required=n_sparse > 0)
        self.labels = _load(os.path.join(d, "labels.npy"), required=False)
        self.n_dense = self.dense.shape[1] if self.dense is not None else n_dense
        n_sparse = self.sparse.shape[1] if self.sparse is not None else n_sparse
        names = list(meta.get("sparse_names") or ())
        self.keys = names if len(names) == n_sparse else ["C%d" % (i + 1) for i in range(n_sparse)]
        self.n_labels = 0
        self.label_names, self.dense_names = [], []
        self.weighted_keys = []
        self.feature_tables = []

    def _open_jagged(self, d, meta):
        self.keys = [str(k) for k in meta.get("feature_keys") or ()]
        self.weighted_keys = [str(k) for k in meta.get("weighted_keys") or ()]
        self.feature_tables = [str(k) for k in meta.get("feature_tables") or ()]
        if self.feature_tables and len(self.feature_tables) != len(self.keys):
            raise ValueError("FileDataset: %s: meta.json has %d feature_tables for %d "
                             "feature_keys" % (d, len(self.feature_tables), len(self.keys)))
        unknown = [k for k in self.weighted_keys if k not in self.keys]
        if unknown:
            raise ValueError("FileDataset: %s: meta.json's weighted_keys %s are not among its "
                             "feature_keys" % (d, unknown))
        self.values, self.lengths, self.weights = [], [], []
        for k in self.keys:
            self.values.append(_load(os.path.join(d, "sparse", k + ".values.npy")))
            self.lengths.append(_load(os.path.join(d, "sparse", k + ".lengths.npy")))
            w = None
            if k in self.weighted_keys:  # one float32 per value of the feature
                w = _load(os.path.join(d, "sparse", k + ".weights.npy"))
                if w.shape != self.values[-1].shape:
                    raise ValueError("FileDataset: %s: sparse/%s.weights.npy holds %s weights for "
                                     "%s values" % (d, k, w.shape, self.values[-1].shape))
            self.weights.append(w)
        n_labels, n_dense = int(meta.get("n_labels", 0)), int(meta.get("n_dense", 0))
        self.labels = _load(os.path.join(d, "labels.npy"), required=n_labels > 0)
        self.dense = _load(os.path.join(d, "dense.npy"), required=n_dense > 0)
        self.n_labels = self.labels.shape[1] if self.labels is not None else n_labels
        self.n_dense = self.dense.shape[1] if self.dense is not None else n_dense
        self.label_names = list(meta.get("label_names") or ())
        self.dense_names = list(meta.get("dense_names") or ())

    def _arrays(self):
        arrays = [("dense.npy", self.dense), ("labels.npy", self.labels)]
        if self.jagged:
            arrays += [("sparse/%s.lengths.npy" % k, a) for k, a in zip(self.keys, self.lengths)]
        else:
            arrays.append(("sparse.npy", self.sparse))
        return [(name, a) for name, a in arrays if a is not None]

    def _check_rows(self, meta):
        """Every array's row count (they must agree; meta.json's ``rows``
        when the part has no array at all)."""
        counts = {name: int(a.shape[0]) for name, a in self._arrays()}
        if not counts:
            return int(meta.get("rows", 0))
        if len(set(counts.values())) > 1:
            raise ValueError("FileDataset: %s: arrays of different row counts: %s" % (
                self.path, ", ".join("%s %d" % kv for kv in sorted(counts.items()))))
        return next(iter(counts.values()))

    def layout(self):
        """What must match for a batch to take rows of two parts."""
        return (self.meta.get("pipeline"), self.jagged, tuple(self.keys), self.n_dense,
                self.n_labels, tuple(self.weighted_keys))

    # A DataLoader worker started by spawn gets the part by pickle: send the
    # directory and map the files again there (a memmap pickles its data).
    def __getstate__(self):
        return {"path": self.path}

    def __setstate__(self, state):
        self.__init__(state["path"])


# ---------------------------------------------------------------- the batch plan

def _plan(parts, batch_size, drop_last):
    """Batches as lists of (part number, first row, end row): batch_size rows
    each, taken across consecutive parts of one layout; a change of layout
    closes the batch. With drop_last a short batch (the end, or before a
    change of layout) is left out."""
    plan, cur, have, layout = [], [], 0, None
    for i, p in enumerate(parts):
        if cur and p.layout() != layout:
            plan.append(cur)
            cur, have = [], 0
        layout, start = p.layout(), 0
        while start < p.rows:
            n = min(batch_size - have, p.rows - start)
            cur.append((i, start, start + n))
            have += n
            start += n
            if have == batch_size:
                plan.append(cur)
                cur, have = [], 0
    if cur:
        plan.append(cur)
    if drop_last:  # a short batch ends its parts' rows: no later batch reads past it
        plan = [b for b in plan if sum(e - s for _, s, e in b) == batch_size]
    return plan


# ---------------------------------------------------------------- building batches

def _notices(part, s, e, at):
    """The part's notices for rows [s, e) as the stream carries them:
    (column, index, row in the batch, number); `at` is the batch row of s."""
    rows = part.notices[:, 1]
    lo, hi = np.searchsorted(rows, s, "left"), np.searchsorted(rows, e, "left")
    return [(int(c), int(idx), int(r) - s + at, int(num))
            for c, r, idx, num in part.notices[lo:hi].tolist()]


def _largest(parts):
    """Per key, the largest meta.json vocabulary size of these parts (of one
    layout; the last part's sizes when some part has none)."""
    sizes = [p.vocab_sizes for p in parts]
    if any(len(v) != len(sizes[-1]) for v in sizes):
        return list(sizes[-1])
    return [max(v) for v in zip(*sizes)]


class FileDataset(IterableDataset):
    """piperec's .npy output as ``piperec.torch.StreamBatch``es.

    path: a ``piperec process --output`` or ``piperec consume --output``
        directory, a files-sink directory (its rolls in (epoch, first_seq)
        order; ``.tmp-*`` and other entries skipped), one roll, or a list of
        such paths (read one after the other). The rolls are those present
        when the dataset is made.
    batch_size: rows per batch. A batch takes rows across rolls (and listed
        paths) of one layout, so every batch but the last has batch_size
        rows; a change of layout (another pipeline, features or label and
        dense widths) ends the batch before it.
    drop_last: leave out the short batches (the last one, and one before a
        change of layout).
    sparse_format: as StreamDataset's: "auto" (KeyedJaggedTensor when
        torchrec is importable), "kjt" (require torchrec) or "triple"
        (JaggedSparse).
    pin_memory: build the batches in page-locked memory (with CUDA only:
        a warning, and no pinning, without it).

    Batches are those of StreamDataset for the same rows: Criteo ``dense``
    float32 [B, n_dense], ``labels`` float32 [B] (the files hold int32;
    zeros when there is no labels.npy), ``sparse`` int64 [B, n_sparse] (a
    view on the key-major ``sparse_features`` values), every length 1; a
    declared schema's (``jagged`` True) ``labels`` float32 [B, L], ``dense``
    float32 [B, D], ``sparse`` None, the true lengths; with weighted lists
    (meta.json ``weighted_keys``, ``sparse/<name>.weights.npy``) the
    sparse features carry float32 weights, one per value (the
    KeyedJaggedTensor's ``weights``, JaggedSparse ``.weights``; 1 for the
    values of an unweighted feature), as ``StreamBatch.weights``, and
    ``weighted_keys`` names the weighted features ([] when none; a change
    of them ends a batch like a change of keys). ``vocab_sizes`` is
    the largest of the meta.json ``vocab_sizes`` of the parts the batch
    reads (a process output's final sizes, a roll's at its last batch): at
    least what each of its rows needs. ``recycled`` holds the notices whose
    row is in the batch, as (column, index, row in the batch, number), from
    recycled.npy (process) or meta.json (rolls, consume output); call
    ``reset_recycled(tables, b)`` before the step, as for the stream (after
    a crash a files sink can write rows and notices twice: pass a
    ``piperec.RecycledTracker`` to apply each number once). ``endpoint`` is
    the directory of the batch's first row, ``epoch`` its roll's epoch (None
    outside a files sink), ``sequence`` the batch's number in the dataset
    from 1, ``offsets`` [] and ``replica`` "".

    Rows come in file order (no shuffling: a notice holds from its row on).
    Under DataLoader workers (``batch_size=None``: the dataset makes the
    batches) worker w of W builds batches w, w + W, ..., and the DataLoader
    hands them out in order again.

    Attributes: ``paths`` (the part directories in read order), ``metas``
    (their meta.json dicts), ``meta`` (the last one), ``keys``, ``jagged``,
    ``weighted_keys``, ``label_names``, ``dense_names``, ``n_dense`` (of the last part),
    ``vocab_sizes`` (the largest per key over the parts with those keys: the
    embedding table sizes), ``rows``; ``len()`` is the number of batches.
    """

    def __init__(self, path, batch_size=4096, drop_last=False, sparse_format="auto",
                 pin_memory=False):
        super().__init__()
        if int(batch_size) < 1:
            raise ValueError("batch_size must be >= 1, not %r" % (batch_size,))
        if sparse_format not in ("auto", "kjt", "triple"):
            raise ValueError("sparse_format must be auto, kjt or triple, not %r" % (sparse_format,))
        if sparse_format == "kjt" and _pt.KeyedJaggedTensor is None:
            raise ImportError("sparse_format='kjt' needs torchrec (torchrec.sparse.jagged_tensor)")
        paths = [path] if isinstance(path, (str, bytes, os.PathLike)) else list(path)
        dirs = [d for p in paths for d in _part_dirs(p)]
        if not dirs:
            raise ValueError("FileDataset: no path given")
        self.batch_size, self.drop_last = int(batch_size), bool(drop_last)
        if pin_memory and not torch.cuda.is_available():
            warnings.warn("FileDataset: pin_memory=True but torch has no CUDA; not pinning")
            pin_memory = False
        self.sparse_format, self.pin_memory = sparse_format, bool(pin_memory)
        self._parts = [_Part(d) for d in dirs]
        self._plan = _plan(self._parts, self.batch_size, self.drop_last)
        self._describe()

    def _describe(self):
        last = self._parts[-1]
        self.paths = [p.path for p in self._parts]
        self.metas = [p.meta for p in self._parts]
        self.meta = last.meta
        self.keys, self.jagged = list(last.keys), last.jagged
        self.weighted_keys = list(last.weighted_keys)
        self.feature_tables = list(last.feature_tables)
        self.label_names, self.dense_names = list(last.label_names), list(last.dense_names)
        self.n_dense = last.n_dense
        self.rows = sum(p.rows for p in self._parts)
        self.vocab_sizes = _largest([p for p in self._parts if p.keys == last.keys])

    def __len__(self):
        return len(self._plan)

    def __iter__(self):
        wi = get_worker_info()
        share, n_shares = (wi.id, wi.num_workers) if wi is not None else (0, 1)
        return self._generate(share, n_shares)

    def _generate(self, share, n_shares):
        cursors = {}  # (part, key number) -> its values' position at the part's next row
        for i, slices in enumerate(self._plan):
            starts = self._value_starts(slices, cursors)
            if i % n_shares == share:
                yield self._batch(i + 1, slices, starts)

    def _value_starts(self, slices, cursors):
        """Jagged parts: per slice and key, (first value, value count), and
        each part's cursor moved past the slice (batches of other workers
        included, so every worker knows where its rows' values begin)."""
        out = []
        for pi, s, e in slices:
            p = self._parts[pi]
            if not p.jagged:
                out.append(None)
                continue
            spans = []
            for k, lengths in enumerate(p.lengths):
                at = cursors.get((pi, k), 0)
                n = int(lengths[s:e].sum(dtype=np.int64))
                spans.append((at, n))
                cursors[(pi, k)] = at + n
            out.append(spans)
        return out

    def _empty(self, shape, dtype):
        return torch.empty(shape, dtype=dtype, pin_memory=self.pin_memory)

    def _sparse_features(self, keys, values, lengths, weights=None):
        return _pt._sparse_features(self.sparse_format, keys, values, lengths, weights=weights)

    def _batch(self, number, slices, starts):
        parts = [self._parts[pi] for pi, _, _ in slices]
        rows = sum(e - s for _, s, e in slices)
        out = self._jagged(slices, starts, rows) if parts[0].jagged else \
            self._criteo(slices, rows)
        out.keys = list(parts[0].keys)
        out.weighted_keys = list(parts[0].weighted_keys)
        out.feature_tables = list(parts[0].feature_tables)
        out.vocab_sizes = _largest(parts)
        out.recycled, at = [], 0
        for pi, s, e in slices:
            out.recycled += _notices(self._parts[pi], s, e, at)
            at += e - s
        out.endpoint, out.epoch = parts[0].path, parts[0].epoch
        out.sequence, out.rows = number, rows
        out.offsets, out.replica = [], ""
        out._ring = out._ring_token = None
        return out

    def _criteo(self, slices, rows):
        """A Criteo batch, laid out as StreamDataset._to_torch lays it out."""
        p0 = self._parts[slices[0][0]]
        nd, ns = p0.n_dense, len(p0.keys)
        dense = self._empty((rows, nd), torch.float32)
        labels = self._empty(rows, torch.float32)
        values = self._empty(ns * rows, torch.int64)
        lengths = torch.ones(ns * rows, dtype=torch.int32, pin_memory=self.pin_memory)
        d, lab, v = dense.numpy(), labels.numpy(), values.numpy().reshape(ns, rows)
        at = 0
        for pi, s, e in slices:
            p, n = self._parts[pi], e - s
            if p.dense is not None:
                d[at:at + n] = p.dense[s:e]
            if p.labels is not None:
                lab[at:at + n] = p.labels[s:e]
            else:
                lab[at:at + n] = 0
            if p.sparse is not None:
                v[:, at:at + n] = p.sparse[s:e].T  # key-major, as a KeyedJaggedTensor wants
            at += n
        out = _pt.StreamBatch()
        out.dense, out.labels = dense, labels
        out.sparse = values.view(ns, rows).t()
        out.sparse_features = self._sparse_features(list(p0.keys), values, lengths)
        out.jagged, out.label_names, out.dense_names = False, [], []
        return out

    def _jagged(self, slices, starts, rows):
        """A declared schema's batch, laid out as StreamDataset._jagged_to_torch
        lays it out: values and lengths key-major."""
        p0 = self._parts[slices[0][0]]
        nk = len(p0.keys)
        labels = self._empty((rows, p0.n_labels), torch.float32)
        dense = self._empty((rows, p0.n_dense), torch.float32)
        total = sum(n for spans in starts for _, n in spans)
        values = self._empty(total, torch.int64)
        lengths = self._empty(nk * rows, torch.int32)
        weights = None
        if p0.weighted_keys:  # ones, then each weighted feature's weights at its values' places
            weights = self._empty(total, torch.float32)
            w = weights.numpy()
            w.fill(1)
        lab, d = labels.numpy(), dense.numpy()
        v, ln = values.numpy(), lengths.numpy().reshape(nk, rows)
        at, pos = 0, 0
        for pi, s, e in slices:
            p, n = self._parts[pi], e - s
            if p.labels is not None:
                lab[at:at + n] = p.labels[s:e]
            if p.dense is not None:
                d[at:at + n] = p.dense[s:e]
            for k in range(nk):
                ln[k, at:at + n] = p.lengths[k][s:e]
            at += n
        for k in range(nk):  # key-major: every slice's values of key k, then key k + 1
            for (pi, _, _), spans in zip(slices, starts):
                first, n = spans[k]
                p = self._parts[pi]
                v[pos:pos + n] = p.values[k][first:first + n]
                if weights is not None and p.weights[k] is not None:
                    w[pos:pos + n] = p.weights[k][first:first + n]
                pos += n
        out = _pt.StreamBatch()
        out.dense, out.labels, out.sparse = dense, labels, None
        out.sparse_features = self._sparse_features(list(p0.keys), values, lengths, weights)
        out.jagged = True
        out.label_names, out.dense_names = list(p0.label_names), list(p0.dense_names)
        return out

    def __repr__(self):
        return "FileDataset(%d parts, %d rows, %d batches of %d%s)" % (
            len(self._parts), self.rows, len(self._plan), self.batch_size,
            ", jagged" if self.jagged else "")
