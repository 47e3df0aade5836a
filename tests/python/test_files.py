"""piperec.files.FileDataset over real piperec output: `piperec gen` +
`piperec process` (the default Criteo config; examples/clickstream.yaml's
declared schema; both again with a bounded vocabulary that evicts, so
recycled.npy has notices), files-sink rolls made from those outputs (order
by (epoch, first_seq), `.tmp-` and stray entries skipped, notices from
meta.json), and real rolls of `piperec run` beside a trainer sink read by
StreamDataset. Concatenating the batches must give the .npy arrays value for
value, the list features' lengths and offsets, every notice at its row, the
stream's batch form (fields, dtypes, shapes), and the batch sizes asked for.
"""

import glob
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
SRC = os.environ.get("PR_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
sys.path.insert(0, os.path.join(SRC, "clients", "python"))

import piperec  # noqa: E402
import piperec.torch as pt  # noqa: E402
from piperec.files import FileDataset  # noqa: E402

EVICT = ("pipelines:\n  - name: criteo\n    source: { kafka: { topics: [e] } }\n"
         "    transform:\n      vocab: { profile: default, capacity: 1002, eviction: lru }\n")


def _piperec():
    p = os.environ.get("PIPEREC")
    if not p or not os.path.exists(p):
        pytest.skip("PIPEREC not set: run through ctest")
    return p


def _run(args, **kw):
    r = subprocess.run(args, capture_output=True, text=True, timeout=120, **kw)
    assert r.returncode == 0, "%s failed:\n%s" % (args, r.stderr[-3000:])
    return r


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """{name: process output dir}: criteo (default config), lru (Criteo,
    evicting), click (clickstream.yaml), clickev (clickstream.yaml, evicting)."""
    P = _piperec()
    t = tmp_path_factory.mktemp("files")
    _run([P, "gen", "--rows", "5000", "--seed", "3", "--output", str(t / "in.tsv")])
    _run([P, "gen", "--rows", "12000", "--seed", "7", "--zipf", "1.1", "--output", str(t / "z.tsv")])
    _run([P, "gen", "--format", "json", "--rows", "3000", "--seed", "7", "--output", str(t / "ev.jsonl")])
    (t / "lru.yaml").write_text(EVICT)
    click = os.path.join(SRC, "examples", "clickstream.yaml")
    text = open(click).read()
    assert "vocab: { profile: default }" in text
    (t / "clickev.yaml").write_text(text.replace(
        "vocab: { profile: default }", "vocab: { profile: default, capacity: 300, eviction: lru }"))
    runs = {"criteo": [], "lru": ["--config", str(t / "lru.yaml")],
            "click": ["--config", click], "clickev": ["--config", str(t / "clickev.yaml")]}
    inputs = {"criteo": "in.tsv", "lru": "z.tsv", "click": "ev.jsonl", "clickev": "ev.jsonl"}
    out = {}
    for name, cfg in runs.items():
        out[name] = str(t / name)
        _run([P, "process"] + cfg + ["--input", str(t / inputs[name]), "--output", out[name],
                                     "--no-progress", "--block-rows", "4096"])
    for name in ("lru", "clickev"):
        assert len(np.load(os.path.join(out[name], "recycled.npy"))) > 0, name
    return out


# ---------------------------------------------------------------- what a directory holds

def _npy(d, name):
    p = os.path.join(d, name)
    return np.load(p) if os.path.exists(p) else None


def _expected(d):
    """The output's arrays as FileDataset must give them, whole: dense,
    labels (float32), per key (values, lengths), notices [(column, index,
    row, number)] with output rows."""
    meta = json.load(open(os.path.join(d, "meta.json")))
    rec = _npy(d, "recycled.npy")
    notices = [] if rec is None else [(int(c), int(i), int(r), int(n)) for c, r, i, n in rec.tolist()]
    if meta.get("jagged"):
        keys = meta["feature_keys"]
        feats = {k: (_npy(d, "sparse/%s.values.npy" % k), _npy(d, "sparse/%s.lengths.npy" % k))
                 for k in keys}
        return dict(meta=meta, keys=keys, dense=_npy(d, "dense.npy"),
                    labels=_npy(d, "labels.npy").astype(np.float32), feats=feats, notices=notices)
    sparse = _npy(d, "sparse.npy")
    feats = {k: (sparse[:, c].astype(np.int64), np.ones(len(sparse), np.int32))
             for c, k in enumerate(meta["sparse_names"])}
    return dict(meta=meta, keys=meta["sparse_names"], dense=_npy(d, "dense.npy"),
                labels=_npy(d, "labels.npy").astype(np.float32), feats=feats, sparse=sparse,
                notices=notices)


def _collect(ds):
    """Concatenate a dataset's batches (checking each batch's form on the
    way): dense, labels, per key (values, lengths), notices with dataset
    rows, batch sizes, the batches."""
    dense, labels, notices, sizes, batches = [], [], [], [], []
    feats = {}
    at = 0
    for b in ds:
        _check_form(b)
        dense.append(b.dense.numpy())
        labels.append(b.labels.numpy())
        for k, (v, off) in b.embedding_bag_inputs().items():
            # offsets: row r's values start at off[r] (EmbeddingBag)
            lens = np.diff(np.append(off.numpy(), len(v)))
            vs, ls = feats.setdefault(k, ([], []))
            vs.append(v.numpy().copy())
            ls.append(lens)
        notices += [(c, i, r + at, n) for c, i, r, n in b.recycled]
        sizes.append(b.rows)
        batches.append(b)
        at += b.rows
    feats = {k: (np.concatenate(v), np.concatenate(ln)) for k, (v, ln) in feats.items()}
    return dict(dense=np.concatenate(dense), labels=np.concatenate(labels), feats=feats,
                notices=notices, sizes=sizes, batches=batches)


def _check_form(b):
    """A StreamBatch as StreamDataset makes one (piperec/torch.py)."""
    assert isinstance(b, pt.StreamBatch)
    B = b.rows
    sf = b.sparse_features
    assert isinstance(sf, pt.JaggedSparse) and sf.keys == b.keys
    assert sf.values.dtype == torch.int64 and sf.lengths.dtype == torch.int32
    assert tuple(sf.lengths.shape) == (len(b.keys) * B,)
    assert int(sf.lengths.sum()) == sf.values.numel()
    assert b.dense.dtype == torch.float32 and b.dense.shape[0] == B and b.dense.is_contiguous()
    assert b.labels.dtype == torch.float32 and b.labels.shape[0] == B
    assert all(0 <= r < B for _, _, r, _ in b.recycled)
    assert all(isinstance(x, int) for n in b.recycled for x in n)
    assert len(b.vocab_sizes) == len(b.keys) and b._ring is None
    if b.jagged:
        assert b.sparse is None and b.labels.dim() == 2
    else:
        assert b.labels.dim() == 1 and not b.label_names and not b.dense_names
        assert b.sparse.dtype == torch.int64 and tuple(b.sparse.shape) == (B, len(b.keys))
        # column c is sparse[:, c]: a transposed view on the key-major values
        assert b.sparse.stride() == (1, B) and torch.equal(sf.lengths, torch.ones_like(sf.lengths))
        assert torch.equal(b.sparse.t().reshape(-1), sf.values)


def _assert_same(got, want):
    assert np.array_equal(got["dense"], want["dense"])
    assert got["labels"].dtype == np.float32 and np.array_equal(got["labels"], want["labels"])
    assert list(got["feats"]) == list(want["keys"])
    for k, (v, ln) in want["feats"].items():
        gv, gl = got["feats"][k]
        assert np.array_equal(gl, ln), k
        assert np.array_equal(gv, v), k
    assert got["notices"] == want["notices"]


# ---------------------------------------------------------------- process output

@pytest.mark.parametrize("name,bs", [("criteo", 1024), ("criteo", 5000), ("criteo", 7000),
                                     ("click", 700), ("click", 1)])
def test_process_output_value_for_value(outputs, name, bs):
    d = outputs[name]
    want = _expected(d)
    ds = FileDataset(d, batch_size=bs, sparse_format="triple")
    got = _collect(ds)
    _assert_same(got, want)
    n = len(want["dense"])
    assert got["sizes"] == [bs] * (n // bs) + ([n % bs] if n % bs else [])
    assert len(ds) == len(got["sizes"]) and ds.rows == n
    assert [b.sequence for b in got["batches"]] == list(range(1, len(ds) + 1))
    assert all(b.epoch is None and b.endpoint == d for b in got["batches"])
    meta = want["meta"]
    assert ds.meta == meta and ds.vocab_sizes == meta["vocab_sizes"] and ds.keys == want["keys"]
    assert all(b.vocab_sizes == meta["vocab_sizes"] for b in got["batches"])
    assert ds.jagged == bool(meta.get("jagged"))
    if ds.jagged:
        assert ds.label_names == meta["label_names"] and ds.dense_names == meta["dense_names"]
        b = got["batches"][0]
        assert b.label_names == meta["label_names"] and b.dense_names == meta["dense_names"]
        assert tuple(b.labels.shape) == (b.rows, meta["n_labels"])
        assert tuple(b.dense.shape) == (b.rows, meta["n_dense"])
        # a list feature really has rows of 0 and of several values
        tags = want["feats"]["tags"][1]
        assert (tags == 0).any() and (tags > 1).any()


@pytest.mark.parametrize("name", ["criteo", "click"])
def test_drop_last(outputs, name):
    d = outputs[name]
    n = json.load(open(os.path.join(d, "meta.json")))["rows"]
    bs = 1100
    ds = FileDataset(d, batch_size=bs, drop_last=True, sparse_format="triple")
    got = _collect(ds)
    assert got["sizes"] == [bs] * (n // bs) and len(ds) == n // bs
    want = _expected(d)
    assert np.array_equal(got["dense"], want["dense"][:bs * (n // bs)])
    assert np.array_equal(got["labels"], want["labels"][:bs * (n // bs)])
    k = want["keys"][-1]
    v, ln = want["feats"][k]
    assert np.array_equal(got["feats"][k][1], ln[:bs * (n // bs)])
    assert np.array_equal(got["feats"][k][0], v[:int(ln[:bs * (n // bs)].sum())])
    whole = FileDataset(d, batch_size=n, drop_last=True)
    assert len(whole) == 1 and len(FileDataset(d, batch_size=n + 1, drop_last=True)) == 0


@pytest.mark.parametrize("name", ["lru", "clickev"])
def test_recycled_notices_at_their_row(outputs, name):
    d = outputs[name]
    want = _expected(d)
    rec = np.load(os.path.join(d, "recycled.npy"))
    # a batch size that puts the first notice at row 0 of a batch, and one that does not
    first = int(rec[0, 1])
    for bs in sorted({first, 777}):
        ds = FileDataset(d, batch_size=bs, sparse_format="triple")
        got = _collect(ds)
        _assert_same(got, want)
        start = 0
        for b in got["batches"]:
            exp = [(int(c), int(i), int(r) - start, int(n)) for c, r, i, n in rec.tolist()
                   if start <= r < start + b.rows]
            assert b.recycled == exp
            start += b.rows
        if bs == first:
            assert got["batches"][1].recycled[0][2] == 0
    # the notices drive reset_recycled as the stream's do
    b = next(b for b in FileDataset(d, batch_size=first + 1) if b.recycled)
    tables = [torch.nn.Embedding(max(1, v), 2) for v in b.vocab_sizes]
    assert pt.reset_recycled(tables, b) > 0
    assert [v for v in piperec.RecycledTracker().fresh(b)] == b.recycled


def test_kjt_when_torchrec(outputs, monkeypatch):
    class FakeKJT:
        def __init__(self, keys, values, lengths):
            self._k, self._v, self._l = keys, values, lengths

        def keys(self):
            return self._k

        def values(self):
            return self._v

        def lengths(self):
            return self._l
    if pt.KeyedJaggedTensor is None:
        monkeypatch.setattr(pt, "KeyedJaggedTensor", FakeKJT)
    kjt = pt.KeyedJaggedTensor
    for name in ("criteo", "click"):
        auto = list(FileDataset(outputs[name], batch_size=999))
        tri = list(FileDataset(outputs[name], batch_size=999, sparse_format="triple"))
        for a, t in zip(auto, tri):
            assert isinstance(a.sparse_features, kjt)
            ea, et = a.embedding_bag_inputs(), t.embedding_bag_inputs()
            assert list(ea) == list(et)
            for k in ea:
                assert torch.equal(ea[k][0], et[k][0]) and torch.equal(ea[k][1], et[k][1])


def test_dataloader_workers_keep_the_order(outputs):
    from torch.utils.data import DataLoader
    for name in ("lru", "clickev"):
        ds = FileDataset(outputs[name], batch_size=1000, sparse_format="triple")
        one = _collect(ds)
        two = _collect(DataLoader(ds, batch_size=None, num_workers=2))
        assert one["sizes"] == two["sizes"] and one["notices"] == two["notices"]
        assert np.array_equal(one["dense"], two["dense"])
        for k, (v, ln) in one["feats"].items():
            assert np.array_equal(two["feats"][k][0], v) and np.array_equal(two["feats"][k][1], ln)


# ---------------------------------------------------------------- files-sink rolls

def _write_roll(path, want, lo, hi, epoch, first_seq, last_seq):
    """A files-sink roll holding rows [lo, hi) of a process output: its
    arrays, and meta.json with the batch list and the notices of those rows
    (roll rows) as the files sink writes them."""
    os.makedirs(path)
    meta = dict(want["meta"])
    notices = [[c, r - lo, i, n] for c, i, r, n in want["notices"] if lo <= r < hi]
    meta.update(epoch=epoch, first_seq=first_seq, last_seq=last_seq, rows=hi - lo,
                batches=[{"seq": first_seq, "rows": hi - lo, "row_start": 0, "offsets": [],
                          **({"recycled": notices} if notices else {})}])
    with open(os.path.join(path, "meta.json"), "w") as f:
        json.dump(meta, f)
    np.save(os.path.join(path, "dense.npy"), want["dense"][lo:hi])
    if meta.get("jagged"):
        np.save(os.path.join(path, "labels.npy"), want["labels"][lo:hi])
        os.makedirs(os.path.join(path, "sparse"))
        for k, (v, ln) in want["feats"].items():
            o = np.concatenate([[0], np.cumsum(ln, dtype=np.int64)])
            np.save(os.path.join(path, "sparse", k + ".values.npy"), v[o[lo]:o[hi]])
            np.save(os.path.join(path, "sparse", k + ".lengths.npy"), ln[lo:hi])
    else:
        np.save(os.path.join(path, "labels.npy"), want["labels"][lo:hi].astype(np.int32))
        np.save(os.path.join(path, "sparse.npy"), want["sparse"][lo:hi])


@pytest.mark.parametrize("name", ["lru", "clickev"])
def test_files_sink_rolls_in_order(outputs, tmp_path, name):
    want = _expected(outputs[name])
    n = len(want["dense"])
    # (epoch, first_seq) order differs from the names' text order: 0-9 < 0-10 < 1-1
    cuts = [0, n // 5, n // 3, n // 2, n]
    rolls = [("batches-0-1-8", 0, 1, 8), ("batches-0-9-9", 0, 9, 9),
             ("batches-0-10-12", 0, 10, 12), ("batches-1-1-3", 1, 1, 3)]
    d = tmp_path / "sink"
    for (dirname, epoch, f, last), lo, hi in zip(rolls, cuts, cuts[1:]):
        _write_roll(str(d / dirname), want, lo, hi, epoch, f, last)
    # what readers skip: a roll still being written, stray files and dirs
    _write_roll(str(d / ".tmp-batches-1-4"), want, 0, 10, 1, 4, 4)
    _write_roll(str(d / "batches-old"), want, 0, 10, 0, 0, 0)
    (d / "notes.txt").write_text("not a roll\n")
    (d / "batches-2-1-1").mkdir()  # no meta.json: not complete
    ds = FileDataset(str(d), batch_size=640, sparse_format="triple")
    assert ds.paths == [str(d / r[0]) for r in rolls]
    got = _collect(ds)
    _assert_same(got, want)
    # batches run across rolls: every one but the last is full
    assert got["sizes"] == [640] * (n // 640) + ([n % 640] if n % 640 else [])
    bounds = dict(zip(cuts, rolls))
    for i, b in enumerate(got["batches"]):
        row = 640 * i
        roll = max((c for c in cuts[:-1] if c <= row))
        assert b.endpoint == str(d / bounds[roll][0]) and b.epoch == bounds[roll][1]
    # one roll on its own
    one = FileDataset(str(d / "batches-0-9-9"), batch_size=10 ** 6, sparse_format="triple")
    assert one.rows == cuts[2] - cuts[1] and list(one)[0].epoch == 0
    # a list of paths: read one after the other
    two = _collect(FileDataset([str(d / "batches-0-1-8"), str(d / "batches-0-9-9")],
                               batch_size=500, sparse_format="triple"))
    assert np.array_equal(two["dense"], want["dense"][:cuts[2]])


@pytest.mark.parametrize("name", ["lru", "clickev"])
def test_consume_output_layout(outputs, tmp_path, name):
    """A `piperec consume --output` directory: one set of arrays, meta.json
    with a batch list (epoch, seq per batch) whose notices have rows of the
    output's files, no recycled.npy."""
    want = _expected(outputs[name])
    n = len(want["dense"])
    d = str(tmp_path / "consumed")
    _write_roll(d, want, 0, n, 0, 1, 1)
    meta = json.load(open(os.path.join(d, "meta.json")))
    for k in ("epoch", "first_seq", "last_seq"):
        del meta[k]
    cuts = list(range(0, n, 256)) + [n]
    meta["batches"] = []
    for seq, (lo, hi) in enumerate(zip(cuts, cuts[1:]), 1):
        b = {"epoch": 3, "seq": seq, "rows": hi - lo, "row_start": lo, "offsets": [],
             "vocab_sizes": meta["vocab_sizes"]}
        rec = [[c, r, i, num] for c, i, r, num in want["notices"] if lo <= r < hi]
        if rec:
            b["recycled"] = rec
        meta["batches"].append(b)
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f)
    assert not os.path.exists(os.path.join(d, "recycled.npy"))
    ds = FileDataset(d, batch_size=999, sparse_format="triple")
    got = _collect(ds)
    _assert_same(got, want)
    assert all(b.epoch is None for b in got["batches"])


def test_layout_change_ends_a_batch(outputs):
    crit, click = outputs["criteo"], outputs["click"]
    n1 = json.load(open(os.path.join(crit, "meta.json")))["rows"]
    n2 = json.load(open(os.path.join(click, "meta.json")))["rows"]
    for drop in (False, True):
        ds = FileDataset([crit, click], batch_size=1024, drop_last=drop, sparse_format="triple")
        bs = list(ds)
        tail = [] if drop else [n1 % 1024]
        tail2 = [] if drop else [n2 % 1024]
        assert [b.rows for b in bs] == [1024] * (n1 // 1024) + tail + [1024] * (n2 // 1024) + tail2
        assert [b.jagged for b in bs] == [False] * (len(bs) - n2 // 1024 - len(tail2)) + \
            [True] * (n2 // 1024 + len(tail2))
        assert ds.jagged and ds.keys == json.load(open(os.path.join(click, "meta.json")))["feature_keys"]
        assert [b.sequence for b in bs] == list(range(1, len(bs) + 1))


# ---------------------------------------------------------------- errors

def test_not_a_piperec_output(outputs, tmp_path):
    f = tmp_path / "in.tsv"
    f.write_text("1\t2\n")
    for bad in (f, tmp_path / "empty", tmp_path / "only-tmp"):
        if bad != f:
            bad.mkdir()
    (tmp_path / "only-tmp" / ".tmp-batches-0-1").mkdir()
    for bad in (f, tmp_path / "empty", tmp_path / "only-tmp"):
        with pytest.raises(ValueError) as e:
            FileDataset(str(bad))
        assert str(bad) in str(e.value) and "not a piperec output" in str(e.value)
    with pytest.raises(FileNotFoundError, match="no-such"):
        FileDataset(str(tmp_path / "no-such"))
    broken = tmp_path / "broken"
    shutil.copytree(outputs["click"], broken)
    os.remove(broken / "sparse" / "tags.lengths.npy")
    with pytest.raises(ValueError, match="tags.lengths.npy"):
        FileDataset(str(broken))
    (broken / "meta.json").write_text("{not json")
    with pytest.raises(ValueError, match="meta.json"):
        FileDataset(str(broken))
    with pytest.raises(ValueError, match="batch_size"):
        FileDataset(outputs["criteo"], batch_size=0)


def test_package_exports_it():
    assert piperec.FileDataset is FileDataset


def test_dense_vectors_by_feature(tmp_path):
    """A schema with dense vectors (dim): dense_names NAME[0].., and
    dense_feature / dense_slices give each feature's columns as a view."""
    P = _piperec()
    cfg = tmp_path / "v.yaml"
    cfg.write_text("pipelines:\n  - name: v\n    source: { kafka: { topics: [v] }, format: json }\n"
                   "    schema:\n      labels: [ { name: y, path: y } ]\n      dense:\n"
                   "        - { name: a, path: a, default: 0 }\n"
                   "        - { name: emb, path: e, dim: 3, default: 0 }\n"
                   "        - { name: b, path: b, default: 0 }\n"
                   "      sparse: [ { name: u, path: u, ops: [vocab] } ]\n")
    rows = [{"y": i % 2, "a": i, "e": [i, -i, 0.5 * i], "b": 2 * i, "u": "u%d" % i}
            for i in range(50)]
    (tmp_path / "ev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _run([P, "process", "--config", str(cfg), "--input", str(tmp_path / "ev.jsonl"), "--output",
          str(tmp_path / "out"), "--no-progress"])
    assert piperec.dense_slices(["a", "emb[0]", "emb[1]", "emb[2]", "b"]) == {
        "a": slice(0, 1), "emb": slice(1, 4), "b": slice(4, 5)}
    got = []
    for b in FileDataset(str(tmp_path / "out"), batch_size=16):
        assert b.dense_names == ["a", "emb[0]", "emb[1]", "emb[2]", "b"]
        e = b.dense_feature("emb")
        assert tuple(e.shape) == (b.rows, 3) and e.data_ptr() == b.dense[:, 1:].data_ptr()
        got.append(e.numpy().copy())
        assert b.dense_feature("b").numpy()[:, 0].tolist() == b.dense.numpy()[:, 4].tolist()
    want = np.array([r["e"] for r in rows], dtype=np.float32)
    assert np.array_equal(np.concatenate(got), want)


# ---------------------------------------------------------------- real rolls and the stream

def _until(ds, rows):
    """A dataset's batches until `rows` rows came (or it ended)."""
    got = 0
    for b in ds:
        yield b
        got += b.rows
        if got >= rows:
            return


def test_real_rolls_match_process_and_stream(tmp_path, piperec_broker, free_port):
    """`piperec run` (one partition, lru eviction) writes rolls and feeds a
    StreamDataset; `piperec process` reads the same rows with the same
    config. The rolls, the process output and the stream hold the same rows
    and notices (indices depend on the data order only), and the batch
    forms agree."""
    P = _piperec()
    rows = 6000
    _run([P, "gen", "--rows", str(rows), "--seed", "7", "--zipf", "1.1", "--output",
          str(tmp_path / "in.tsv")])
    boot = piperec_broker(1, "ev")
    procs = []
    try:
        _run([P, "produce", "--bootstrap", boot, "--topic", "ev", "--input", str(tmp_path / "in.tsv")])
        port = free_port()
        cfg = tmp_path / "run.yaml"
        cfg.write_text("""pipelines:
  - name: p
    source:
      kafka:
        topics: [ev]
        group.id: g
        properties: { bootstrap.servers: "%s", auto.offset.reset: earliest, fetch.wait.max.ms: "10" }
    transform:
      vocab: { profile: default, capacity: 1002, eviction: lru }
    batch: { size: 256, max_delay_ms: 20 }
    sinks:
      files: { dir: "%s/rolls", roll_batches: 4 }
      trainer: { listen: "127.0.0.1:%d" }
http: { listen: "127.0.0.1:0" }
""" % (boot, tmp_path, port))
        run = subprocess.Popen([P, "run", "--config", str(cfg)], stderr=open(tmp_path / "run.err", "w"))
        procs.append(run)
        stream = _collect(_until(pt.StreamDataset("127.0.0.1:%d" % port, "p", sparse_format="triple",
                                                  idle_timeout=30.0, connect_timeout=20.0), rows))
        deadline = time.time() + 30

        def in_rolls():
            metas = glob.glob(str(tmp_path / "rolls" / "batches-*" / "meta.json"))
            return sum(json.load(open(m))["rows"] for m in metas)
        while in_rolls() < rows and time.time() < deadline:
            time.sleep(0.05)
        assert in_rolls() == rows, (tmp_path / "run.err").read_text()[-3000:]
        # every row is in a closed roll; the stream's last batch is unacked
        # (the loop stopped at it), which a clean stop would wait for
        run.kill()
        run.wait()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    _run([P, "process", "--config", str(cfg), "--input", str(tmp_path / "in.tsv"),
          "--output", str(tmp_path / "proc"), "--no-progress"])
    want = _expected(str(tmp_path / "proc"))
    assert len(want["dense"]) == rows and want["notices"]
    ds = FileDataset(str(tmp_path / "rolls"), batch_size=1000, sparse_format="triple")
    assert len(ds.paths) > 2
    assert [tuple(int(x) for x in os.path.basename(p).split("-")[1:3]) for p in ds.paths] == \
        sorted(tuple(int(x) for x in os.path.basename(p).split("-")[1:3]) for p in ds.paths)
    _assert_same(_collect(ds), want)
    assert stream["sizes"] and sum(stream["sizes"]) == rows, "the stream lost rows"
    _assert_same(stream, want)
    # batch for batch: while the stream's batches are full, FileDataset's of
    # that size are the same batches (values, notices, dtypes, shapes, strides)
    sb = stream["batches"]
    fb = list(FileDataset(str(tmp_path / "rolls"), batch_size=sb[0].rows, sparse_format="triple"))
    same = 0
    for s, f in zip(sb, fb):
        if s.rows != f.rows:
            break
        _assert_same_batch(f, s)
        same += 1
    assert same >= 1


def _assert_same_batch(f, s):
    for a in ("rows", "keys", "jagged", "label_names", "dense_names", "recycled"):
        assert getattr(f, a) == getattr(s, a), a
    for a in ("dense", "labels", "sparse"):
        x, y = getattr(f, a), getattr(s, a)
        assert x.dtype == y.dtype and x.shape == y.shape and x.stride() == y.stride(), a
        assert torch.equal(x, y), a
    assert type(f.sparse_features) is type(s.sparse_features)
    assert f.sparse_features.keys == s.sparse_features.keys
    for a in ("values", "lengths"):
        x, y = getattr(f.sparse_features, a), getattr(s.sparse_features, a)
        assert x.dtype == y.dtype and torch.equal(x, y), a
    assert len(f.vocab_sizes) == len(s.vocab_sizes)
