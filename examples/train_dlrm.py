#!/usr/bin/python3
"""train_dlrm.py — a small DLRM trained from a live piperec stream, on the CPU or a GPU.

    # everything local: test broker, generator with a planted signal, piperec run
    /usr/bin/python3 examples/train_dlrm.py --spawn --piperec build/piperec [--device cuda]

    # or against a running service
    /usr/bin/python3 examples/train_dlrm.py --connect 127.0.0.1:7070 --pipeline criteo

With --spawn it starts `piperec broker` (the test Kafka broker), loads it with
`piperec gen --signal 1 | piperec produce` (labels depend on a few sparse and
dense features plus noise, so learning is measurable) and runs `piperec run`
on the default DLRM transforms (dense log, sparse modulus + vocabulary) with a
trainer sink (engine.threads and source.consumers from the CPUs: 2 and 1 on a
small machine, up to 8 threads and 4 consumer instances from 8 CPUs on, so a
GPU host's stream is not held to one consumer's rate). The model reads that
sink through piperec.torch.StreamDataset
in the raw tensor layout (the GPU feed: batches land in pinned buffers and,
with --device cuda, are copied to the GPU on a side stream while the previous
step runs). DLRM = one fused embedding table for every sparse feature (each
feature's rows at its own offset, one embedding_bag call per batch, grown in
place with its SparseAdam state as the vocabulary grows), a bottom MLP on the
dense features, pairwise dot-product interactions, a top MLP.

It trains on the first --train-rows rows of the stream, then scores the next
--heldout-rows rows without training on them and prints their AUC as
`heldout_auc=...` with rows/s from the first batch, the steady rows/s after
the first 20 batches (`steady_rows_per_s`; `warmup_seconds` is what those
took: CUDA start-up, the tables' first growth) and, on CUDA, the share of
wall time the GPU spent in training steps; exit 1 when below --min-auc, if
given.

It imports the installed `piperec` package when there is one (pip install
./clients/python), else this checkout's clients/python (--checkout forces
that), and prints which.
"""

import argparse
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.normpath(os.path.join(HERE, "..", "clients", "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402


def import_piperec(use_checkout=False):
    """piperec.torch, the installed package first (or the checkout's with
    use_checkout / when none is installed); says which on stderr."""
    if use_checkout:
        sys.path.insert(0, CHECKOUT)
    try:
        import piperec.torch as pt
    except ImportError:
        sys.path.insert(0, CHECKOUT)
        import piperec.torch as pt
    import piperec
    where = os.path.dirname(os.path.abspath(piperec.__file__))
    kind = "this checkout" if where.startswith(CHECKOUT) else "installed"
    print("piperec package %s from %s (%s)" % (getattr(piperec, "__version__", "?"), where, kind),
          file=sys.stderr, flush=True)
    return pt


# ---------------------------------------------------------------- the model

def mlp(sizes, last_act=True):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_act:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def emb_init(t):
    nn.init.uniform_(t, -0.05, 0.05)


class FusedEmbedding(nn.Module):
    """Every sparse feature in one table: feature k's rows start at
    base[k], so a batch is one embedding_bag call. Each feature has a
    capacity that grows (x1.5 headroom) when the stream's vocabulary passes
    it; rows and SparseAdam state move with their feature."""

    def __init__(self, n_keys, dim):
        super().__init__()
        self.caps, self.dim = [1] * n_keys, dim
        w = torch.empty(n_keys, dim)
        emb_init(w)
        self.weight = nn.Parameter(w)
        self.register_buffer("base", torch.arange(n_keys), persistent=False)

    def grow(self, vocab_sizes, optimizer):
        """Make room for vocab_sizes (a list of ints); True when it grew."""
        if all(v <= c for v, c in zip(vocab_sizes, self.caps)):
            return False  # the per-batch check: Python ints, no device work
        caps = [c if v <= c else int(v * 1.5) + 1 for v, c in zip(vocab_sizes, self.caps)]
        old_base = [0] + list(np.cumsum(self.caps[:-1]))
        new_base = [0] + list(np.cumsum(caps[:-1]))
        old = self.weight.data
        new = torch.empty(sum(caps), self.dim, device=old.device)
        emb_init(new)

        def move(src, dst):
            for k, c in enumerate(self.caps):
                dst[new_base[k]:new_base[k] + c] = src[old_base[k]:old_base[k] + c]
            return dst
        move(old, new)
        p = nn.Parameter(new)
        st = optimizer.state.pop(self.weight, None)
        for g in optimizer.param_groups:
            g["params"] = [p if q is self.weight else q for q in g["params"]]
        if st:
            optimizer.state[p] = {k: move(v, torch.zeros_like(new)) if torch.is_tensor(v)
                                  and v.shape == old.shape else v for k, v in st.items()}
        self.weight, self.caps = p, caps
        self.base = torch.tensor(new_base, device=old.device)
        return True

    def forward(self, values, lengths, rows):
        """[rows, n_keys, dim] from KeyedJaggedTensor values/lengths."""
        k = len(self.caps)
        per_key = lengths.view(k, rows).sum(1)
        idx = values + torch.repeat_interleave(self.base, per_key, output_size=values.numel())
        offsets = torch.cumsum(lengths, 0) - lengths
        out = F.embedding_bag(idx, self.weight, offsets.long(), mode="sum", sparse=True)
        return out.view(k, rows, self.dim).transpose(0, 1)


class PerFeatureEmbedding(nn.Module):
    """The example's model before issue 22, kept to measure the fused table
    against (--embedding per-feature): one EmbeddingBag per sparse feature,
    a lookup per feature and batch, grown with piperec.torch.grow_embeddings
    (which checks every table every batch)."""

    def __init__(self, n_keys, dim, grow_fn):
        super().__init__()
        self.dim, self._grow = dim, grow_fn
        self.tables = nn.ModuleList(nn.EmbeddingBag(1, dim, mode="sum", sparse=True)
                                    for _ in range(n_keys))
        for t in self.tables:
            emb_init(t.weight.data)

    @property
    def caps(self):
        return [t.num_embeddings for t in self.tables]

    def grow(self, vocab_sizes, optimizer):
        return bool(self._grow(self.tables, [int(v) for v in vocab_sizes], optimizer=optimizer,
                               init=emb_init, headroom=1.5))

    def forward(self, values, lengths, rows):
        k = len(self.tables)
        lengths = lengths.view(k, rows)
        per_key = lengths.sum(1)
        starts = torch.cumsum(per_key, 0) - per_key
        out = []
        for f in range(k):
            off = torch.cumsum(lengths[f], 0) - lengths[f]
            a = int(starts[f])  # a device sync per feature, as the old example had
            out.append(self.tables[f](values[a:a + int(per_key[f])].long(), off.long()))
        return torch.stack(out, 0).transpose(0, 1)


class DLRM(nn.Module):
    def __init__(self, n_dense, n_sparse, dim=16, bottom=(64,), top=(64, 32), embedding=None):
        super().__init__()
        self.emb = embedding if embedding is not None else FusedEmbedding(n_sparse, dim)
        self.bottom = mlp((n_dense,) + tuple(bottom) + (dim,))
        n_f = n_sparse + 1
        self.register_buffer("iu", torch.triu_indices(n_f, n_f, offset=1), persistent=False)
        self.top = mlp((dim + n_f * (n_f - 1) // 2,) + tuple(top) + (1,), last_act=False)

    def forward(self, dense, sparse_features):
        x = self.bottom(dense)
        values, lengths = kjt_parts(sparse_features)
        t = torch.cat([x.unsqueeze(1), self.emb(values, lengths, dense.shape[0])], 1)
        z = torch.bmm(t, t.transpose(1, 2))[:, self.iu[0], self.iu[1]]
        return self.top(torch.cat([x, z], 1)).squeeze(1)


def kjt_parts(sf):
    """(values, lengths) of a KeyedJaggedTensor or a JaggedSparse."""
    if isinstance(sf, tuple):  # JaggedSparse (keys, values, lengths), or (values, lengths)
        return sf[-2], sf[-1]
    return sf.values(), sf.lengths()


def auc(y, s):
    """Area under the ROC curve (ties get average ranks)."""
    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s))
    ss = s[order]
    i = 0
    while i < len(ss):  # average ranks of ties
        j = i
        while j + 1 < len(ss) and ss[j + 1] == ss[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1
        i = j + 1
    pos = y.sum()
    neg = len(y) - pos
    if pos == 0 or neg == 0:
        return float("nan")
    return float((ranks[y == 1].sum() - pos * (pos + 1) / 2) / (pos * neg))


# ---------------------------------------------------------------- a local stream

# The test broker keeps only the last ~5 MB of each partition. The rows
# produced and not yet taken by the trainer are at most LOOKAHEAD_BYTES per
# partition, so the local stream cannot lose rows at any partition count,
# provided the messages are spread over the partitions: `piperec produce`
# sends Criteo TSV messages unkeyed, and librdkafka's sticky partitioner
# (kcat's default too) would put a whole burst on one partition (seen: all
# 138K rows of a 32-partition run on partition 0, "offset out of range"), so
# the producer runs with sticky.partitioning.linger.ms=0: each unkeyed
# message goes to a random partition. (~243 bytes a row of `piperec gen`.)
ROW_BYTES = 243
LOOKAHEAD_BYTES = 1_500_000
PRODUCE_SPREAD = ["-X", "sticky.partitioning.linger.ms=0"]
# What piperec run says when the broker no longer has the rows it was to read
# next (the wording of ingest/ and of librdkafka's error name).
LOST_ROWS = re.compile(r"offset \d+ is out of range|offset out of range|OFFSET_OUT_OF_RANGE", re.I)


def lookahead_rows(partitions, batch):
    """Rows the producer may run ahead of the trainer: at most
    LOOKAHEAD_BYTES (plus one chunk, an eighth of it) per partition; at
    least two batches where that still keeps each partition under 3.5 MB."""
    per_part = LOOKAHEAD_BYTES // ROW_BYTES
    rows = per_part * partitions
    if rows < 2 * batch:
        rows = min(2 * batch, partitions * (3_500_000 // ROW_BYTES))
    return rows


class LocalStream:
    """piperec broker + gen --signal | produce + piperec run, in a temp dir."""

    def __init__(self, piperec, rows, seed, batch, partitions, rate, log):
        self.tmp = tempfile.mkdtemp(prefix="piperec-dlrm.")
        self.procs = []
        self.log = log
        br = self._spawn([piperec, "broker", "--partitions", str(partitions), "--topics", "events"],
                         "broker", stdout=subprocess.PIPE)
        line = br.stdout.readline().decode()
        if not line.startswith("bootstrap="):
            raise RuntimeError("piperec broker printed %r" % line)
        bootstrap = line.strip().split("=", 1)[1]
        cfg = os.path.join(self.tmp, "run.yaml")
        ncpu = os.cpu_count() or 2
        threads = max(2, min(8, ncpu // 2))
        consumers = min(4, partitions) if ncpu >= 8 else 1
        with open(cfg, "w") as f:
            f.write("""pipelines:
  - name: dlrm
    source:
      kafka:
        topics: [events]
        group.id: dlrm-example
        properties:
          bootstrap.servers: "%s"
          auto.offset.reset: earliest
          fetch.wait.max.ms: 10
      format: criteo_tsv
      consumers: %d
    batch: { size: %d, max_delay_ms: 200 }
    sinks:
      trainer: { listen: "127.0.0.1:0", max_unacked_batches: 64 }
    state: { dir: "%s/state" }
engine: { threads: %d }
limits: { max_inflight_bytes: 2GiB }
http: { listen: "127.0.0.1:0" }
log: { level: info }
""" % (bootstrap, consumers, batch, self.tmp, threads))
        self.run_err = os.path.join(self.tmp, "run.err")
        self._spawn([piperec, "run", "--config", cfg], "run", stderr=open(self.run_err, "w"))
        self.port = None
        deadline = time.monotonic() + 30
        while self.port is None and time.monotonic() < deadline:
            m = re.search(r"trainers connect to port (\d+)", open(self.run_err).read())
            if m:
                self.port = int(m.group(1))
            else:
                time.sleep(0.05)
        if self.port is None:
            raise RuntimeError("piperec run did not start:\n" + open(self.run_err).read()[-2000:])
        # Produce only once the consumer owns the partitions: the test broker
        # keeps ~5 MB per partition, so rows produced while the consumer group
        # is still forming could be gone before piperec reads them.
        while open(self.run_err).read().count("consumer: assigned") < consumers:
            if time.monotonic() > deadline:
                raise RuntimeError("piperec run got no partitions:\n" + open(self.run_err).read()[-2000:])
            time.sleep(0.05)
        self.endpoint = "127.0.0.1:%d" % self.port
        # gen | produce, in chunks, staying at most `lookahead` rows ahead of
        # what the trainer took: the test broker keeps only ~5 MB per
        # partition and piperec stops reading Kafka while its trainers are
        # behind (backpressure), so producing everything up front would
        # lose rows. A real Kafka cluster keeps them; this is only the demo.
        self.piperec, self.bootstrap, self.seed, self.rate = piperec, bootstrap, seed, rate
        self.rows, self.produced, self.taken = rows, 0, 0
        self.lookahead = lookahead_rows(partitions, batch)
        self.stop = False
        self.feeder = threading.Thread(target=self._feed, daemon=True)
        self.feeder.start()

    def lost_rows(self):
        """piperec's complaint when the test broker dropped rows it had not read."""
        return LOST_ROWS.search(open(self.run_err).read()) is not None

    def took(self, rows):
        """The trainer received `rows` more rows."""
        self.taken += rows

    def _feed(self):
        # One `piperec gen` and one `piperec produce` for the whole run;
        # rows go from one to the other in chunks, only while the producer
        # is less than `lookahead` rows ahead of the trainer.
        chunk = max(self.lookahead // 8, 1)
        gen = subprocess.Popen([self.piperec, "gen", "--signal", "1", "--rows", str(self.rows),
                                "--seed", str(self.seed), "--output", "-"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        prod = subprocess.Popen([self.piperec, "produce", "--bootstrap", self.bootstrap, "--topic",
                                 "events", "--input", "-", "--lines-per-message", "16", "--rate",
                                 str(self.rate)] + PRODUCE_SPREAD,
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        self.procs += [gen, prod]
        try:
            while not self.stop and self.produced < self.rows:
                if self.produced - self.taken >= self.lookahead:
                    time.sleep(0.01)
                    continue
                lines = list(itertools.islice(gen.stdout, min(chunk, self.rows - self.produced)))
                if not lines:
                    break
                prod.stdin.write(b"".join(lines))
                prod.stdin.flush()
                self.produced += len(lines)
            prod.stdin.close()
        except (BrokenPipeError, ValueError):
            pass  # produce failed (said below) or close() came first
        if prod.wait() != 0 and not self.stop:
            print("piperec produce failed: %s" % prod.stderr.read().decode()[-500:], file=self.log)

    def _spawn(self, argv, name, **kw):
        kw.setdefault("stderr", subprocess.DEVNULL)
        p = subprocess.Popen(argv, **kw)
        self.procs.append(p)
        return p

    def close(self):
        self.stop = True
        self.feeder.join()
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(3)  # piperec run drains: waits for acks no trainer will send
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


# ---------------------------------------------------------------- training

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--spawn", action="store_true", help="start broker, producer and piperec run")
    src.add_argument("--connect", help="HOST:PORT[,HOST:PORT...] of running trainer sinks")
    ap.add_argument("--pipeline", default="dlrm")
    ap.add_argument("--piperec", default=os.path.join(HERE, "..", "build", "piperec"))
    ap.add_argument("--device", choices=("cpu", "cuda"),
                    default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--layout", choices=("raw", "protobuf"), default="raw",
                    help="trainer stream batch layout (raw: the GPU feed)")
    ap.add_argument("--compact", action=argparse.BooleanOptionalAction, default=True,
                    help="raw layout: Criteo batches without all-ones lengths, int32 values "
                    "(the TrainingBatch's bytes; widened on the GPU)")
    ap.add_argument("--embedding", choices=("fused", "per-feature"), default="fused",
                    help="fused: one table, one embedding_bag a batch; per-feature: the "
                    "example before issue 22 (a table and a lookup per feature, a loss sync "
                    "every step), to measure against")
    ap.add_argument("--checkout", action="store_true",
                    help="use this checkout's clients/python even when piperec is installed")
    ap.add_argument("--train-rows", type=int, default=200_000)
    ap.add_argument("--heldout-rows", type=int, default=50_000)
    ap.add_argument("--batch", type=int, default=2048, help="rows per batch (--spawn)")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rate", type=int, default=100000, help="events/s produced at most (--spawn)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--emb-lr", type=float, default=0.03)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on 2 cores shared with piperec)")
    ap.add_argument("--max-seconds", type=float, default=110, help="stop training after this long")
    ap.add_argument("--min-auc", type=float, help="exit 1 when the held-out AUC is below this")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch has no CUDA device here")
    pt = import_piperec(args.checkout)

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    stream = None
    t_start = time.monotonic()
    try:
        if args.spawn:
            stream = LocalStream(args.piperec, args.train_rows + args.heldout_rows + 4 * args.batch,
                                 args.seed, args.batch, args.partitions, args.rate, sys.stderr)
            endpoints = [stream.endpoint]
        else:
            endpoints = args.connect.split(",")
        dev = torch.device(args.device)
        kw = {"layout": args.layout}
        if args.layout == "raw":
            kw["compact"] = args.compact
        if args.layout == "raw" and dev.type == "cuda":
            kw["device"] = dev  # side-stream copy, overlapped with the previous step
        ds = pt.StreamDataset(endpoints, args.pipeline, credits=8, idle_timeout=20, **kw)
        rc = train(ds, args, t_start, dev, stream, pt)
        if stream is not None and stream.lost_rows():
            print("the test broker dropped rows piperec had not read (offset out of range)",
                  file=sys.stderr)
            rc = 1
        return rc
    finally:
        if stream is not None:
            stream.close()


class GpuBusy:
    """Share of wall time the GPU spent in training steps (CUDA events
    around each step, read at the periodic sync: no extra sync per step)."""

    def __init__(self, on):
        self.on, self.pairs, self.busy_ms = on, [], 0.0

    def start(self):
        if not self.on:
            return None
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def stop(self, e):
        if e is not None:
            f = torch.cuda.Event(enable_timing=True)
            f.record()
            self.pairs.append((e, f))

    def collect(self):
        for a, b in self.pairs:  # after a sync: all recorded
            self.busy_ms += a.elapsed_time(b)
        self.pairs = []


def _now():
    return time.monotonic()  # the training clock (a test steps it by hand)


# The first batches pay one-time costs (CUDA context and kernel loading,
# the tables' first growth steps while the vocabulary is young): rows/s
# after them is the steady rate (steady_rows_per_s), rows_per_s counts
# from the first batch.
WARMUP_BATCHES = 20


def train(ds, args, t_start, dev, stream=None, pt=None):
    model = opt_dense = opt_emb = None
    warm = None  # (clock, rows trained) once WARMUP_BATCHES were trained
    per_step_sync = False
    loss_fn = nn.BCEWithLogitsLoss()
    rows_trained = batches = grown = 0
    t_first = t_end = None  # first batch; end of training (scoring is not training)
    hold_y, hold_s = [], []
    loss_sum, loss_n = None, 0
    busy = GpuBusy(dev.type == "cuda")
    for b in ds:
        if stream is not None:
            stream.took(b.rows)
        if model is None:
            t_first = _now()
            emb = None
            if getattr(args, "embedding", "fused") == "per-feature":
                emb = PerFeatureEmbedding(len(b.keys), args.dim, pt.grow_embeddings)
            model = DLRM(b.dense.shape[1], len(b.keys), dim=args.dim, embedding=emb).to(dev)
            opt_dense = torch.optim.Adam([p for n, p in model.named_parameters()
                                          if not n.startswith("emb.")], lr=args.lr)
            opt_emb = torch.optim.SparseAdam(list(model.emb.parameters()), lr=args.emb_lr)
            per_step_sync = emb is not None
        dense, labels, sf = b.dense, b.labels, b.sparse_features
        if dense.device != dev:  # protobuf layout, or the CPU
            dense, labels = dense.to(dev), labels.to(dev)
            v, ln = kjt_parts(sf)
            sf = (v.to(dev), ln.to(dev)) if isinstance(sf, tuple) else sf.to(dev)
        training = t_end is None and rows_trained < args.train_rows and _now() - t_start < args.max_seconds
        # The vocabulary grows with the stream: make room first (a Python
        # check per batch; the table moves only when a feature outgrows it).
        grown += model.emb.grow(b.vocab_sizes, opt_emb)
        if training:
            ev = busy.start()
            logits = model(dense, sf)
            loss = loss_fn(logits, labels)
            opt_dense.zero_grad()
            opt_emb.zero_grad()
            loss.backward()
            opt_dense.step()
            opt_emb.step()
            busy.stop(ev)
            rows_trained += b.rows
            batches += 1
            if batches == WARMUP_BATCHES:  # one sync, so the steady clock starts after the work
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                warm = (_now(), rows_trained)
            d = loss.detach()
            if per_step_sync:
                d = float(d)  # the old example's per-step loss read (a device sync)
            loss_sum = d if loss_sum is None else loss_sum + d
            loss_n += 1
            if batches % 50 == 0:  # the only sync with the device while training
                print("batch %d rows %d loss %.4f (%.1f s)" % (batches, rows_trained,
                                                              float(loss_sum) / loss_n,
                                                              _now() - t_start),
                      file=sys.stderr, flush=True)
                busy.collect()
                loss_sum, loss_n = None, 0
            continue
        if t_end is None:  # training ends here: its rows/s counts no held-out scoring
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t_end = _now()
        with torch.no_grad():
            hold_s.append(torch.sigmoid(model(dense, sf)).cpu().numpy())
        hold_y.append(labels.cpu().numpy().copy())
        if sum(len(y) for y in hold_y) >= args.heldout_rows:
            break
    if model is None or not hold_y:
        print("no held-out data: the stream ended after %d training rows" % rows_trained,
              file=sys.stderr)
        return 1
    if dev.type == "cuda":
        torch.cuda.synchronize()
        busy.collect()
    y, s = np.concatenate(hold_y), np.concatenate(hold_s)
    a = auc(y, s)
    if t_end is None:
        t_end = _now()
    t_train = t_end - (t_first or t_start)
    steady = rows_trained / max(t_train, 1e-9)
    if warm is not None and t_end > warm[0] and rows_trained > warm[1]:
        steady = (rows_trained - warm[1]) / (t_end - warm[0])
    gpu = ""
    if dev.type == "cuda":
        gpu = " device=%s gpu_busy=%.2f" % (torch.cuda.get_device_name(dev),
                                             busy.busy_ms / 1000.0 / max(t_train, 1e-9))
    print("heldout_auc=%.4f heldout_rows=%d positive=%.3f train_rows=%d batches=%d "
          "train_seconds=%.1f rows_per_s=%.0f warmup_seconds=%.1f steady_rows_per_s=%.0f "
          "total_seconds=%.1f tables_grown=%d rows_in_tables=%d embedding=%s layout=%s%s"
          % (a, len(y), y.mean(), rows_trained, batches, t_train, rows_trained / max(t_train, 1e-9),
             (warm[0] - (t_first or t_start)) if warm else t_train, steady,
             _now() - t_start, grown, sum(model.emb.caps),
             getattr(args, "embedding", "fused"), getattr(args, "layout", "raw"), gpu),
          flush=True)
    if args.min_auc is not None and not a >= args.min_auc:
        print("held-out AUC %.4f below %.2f" % (a, args.min_auc), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
