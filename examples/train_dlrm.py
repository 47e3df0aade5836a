#!/usr/bin/python3
"""train_dlrm.py — a small DLRM trained on CPU from a live piperec stream.

    # everything local: test broker, generator with a planted signal, piperec run
    /usr/bin/python3 examples/train_dlrm.py --spawn --piperec build/piperec

    # or against a running service
    /usr/bin/python3 examples/train_dlrm.py --connect 127.0.0.1:7070 --pipeline criteo

With --spawn it starts `piperec broker` (the test Kafka broker), loads it with
`piperec gen --signal 1 | piperec produce` (labels depend on a few sparse and
dense features plus noise, so learning is measurable) and runs `piperec run`
on the default DLRM transforms (dense log, sparse modulus + vocabulary) with a
trainer sink. The model reads that sink through piperec.torch.StreamDataset:
DLRM = one EmbeddingBag per sparse column (grown in place with
grow_embeddings as the vocabulary grows, SparseAdam state included), a bottom
MLP on the dense features, pairwise dot-product interactions, a top MLP.

It trains on the first --train-rows rows of the stream, then scores the next
--heldout-rows rows without training on them and prints their AUC as
`heldout_auc=...` (exit 1 when below --min-auc, if given).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "clients", "python"))  # a checkout; pip install works too

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from piperec.torch import JaggedSparse, StreamDataset, grow_embeddings  # noqa: E402


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


class DLRM(nn.Module):
    def __init__(self, n_dense, n_sparse, dim=16, bottom=(64,), top=(64, 32)):
        super().__init__()
        self.tables = nn.ModuleList()
        for _ in range(n_sparse):
            t = nn.EmbeddingBag(1, dim, mode="sum", sparse=True)  # grown from the batches
            emb_init(t.weight.data)
            self.tables.append(t)
        self.bottom = mlp((n_dense,) + tuple(bottom) + (dim,))
        n_f = n_sparse + 1
        self.register_buffer("iu", torch.triu_indices(n_f, n_f, offset=1), persistent=False)
        self.top = mlp((dim + n_f * (n_f - 1) // 2,) + tuple(top) + (1,), last_act=False)

    def forward(self, dense, sparse_features):
        x = self.bottom(dense)
        feats = [x]
        for k, (values, offsets) in enumerate(jagged(sparse_features, dense.shape[0])):
            feats.append(self.tables[k](values, offsets))
        t = torch.stack(feats, 1)                      # [B, 1 + n_sparse, dim]
        z = torch.bmm(t, t.transpose(1, 2))[:, self.iu[0], self.iu[1]]
        return self.top(torch.cat([x, z], 1)).squeeze(1)


def jagged(sf, rows):
    """Per key (values, offsets) from a KeyedJaggedTensor or a JaggedSparse."""
    if isinstance(sf, JaggedSparse):
        values, lengths, n = sf.values, sf.lengths, len(sf.keys)
    else:  # torchrec KeyedJaggedTensor
        values, lengths, n = sf.values(), sf.lengths(), len(sf.keys())
    lengths = lengths.view(n, rows)
    starts = torch.cumsum(lengths.sum(1), 0) - lengths.sum(1)
    out = []
    for k in range(n):
        off = torch.cumsum(lengths[k], 0) - lengths[k]
        a = int(starts[k])
        out.append((values[a:a + int(lengths[k].sum())], off))
    return out


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
    batch: { size: %d, max_delay_ms: 200 }
    sinks:
      trainer: { listen: "127.0.0.1:0", max_unacked_batches: 64 }
    state: { dir: "%s/state" }
limits: { max_inflight_bytes: 2GiB }
http: { listen: "127.0.0.1:0" }
log: { level: info }
""" % (bootstrap, batch, self.tmp))
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
        while "partition(s) assigned" not in open(self.run_err).read():
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
        self.lookahead = max(2 * batch, 12000 * partitions)
        self.stop = False
        self.feeder = threading.Thread(target=self._feed, daemon=True)
        self.feeder.start()

    def took(self, rows):
        """The trainer received `rows` more rows."""
        self.taken += rows

    def _feed(self):
        chunk = max(self.lookahead // 4, 1)
        while not self.stop and self.produced < self.rows:
            if self.produced - self.taken >= self.lookahead:
                time.sleep(0.02)
                continue
            n = min(chunk, self.rows - self.produced)
            gen = subprocess.Popen([self.piperec, "gen", "--signal", "1", "--rows", str(n), "--first-row",
                                    str(self.produced), "--seed", str(self.seed), "--output", "-"],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            prod = subprocess.run([self.piperec, "produce", "--bootstrap", self.bootstrap, "--topic",
                                   "events", "--input", "-", "--lines-per-message", "16", "--rate",
                                   str(self.rate)], stdin=gen.stdout, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE)
            gen.stdout.close()
            gen.wait()
            if prod.returncode != 0:
                print("piperec produce failed: %s" % prod.stderr.decode()[-500:], file=self.log)
                return
            self.produced += n

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
    ap.add_argument("--train-rows", type=int, default=1_000_000)
    ap.add_argument("--heldout-rows", type=int, default=100_000)
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
        ds = StreamDataset(endpoints, args.pipeline, credits=8, idle_timeout=20)
        return train(ds, args, t_start, stream)
    finally:
        if stream is not None:
            stream.close()


def train(ds, args, t_start, stream=None):
    model = opt_dense = opt_emb = None
    loss_fn = nn.BCEWithLogitsLoss()
    rows_trained = batches = grown = 0
    t_first = None
    hold_y, hold_s = [], []
    loss_ema = None
    for b in ds:
        if stream is not None:
            stream.took(b.rows)
        if model is None:
            t_first = time.monotonic()
            model = DLRM(b.dense.shape[1], b.sparse.shape[1], dim=args.dim)
            opt_dense = torch.optim.Adam([p for n, p in model.named_parameters()
                                          if not n.startswith("tables.")], lr=args.lr)
            opt_emb = torch.optim.SparseAdam(list(model.tables.parameters()), lr=args.emb_lr)
        training = rows_trained < args.train_rows and time.monotonic() - t_start < args.max_seconds
        # Vocabulary grows as the stream goes: grow the tables first (with
        # headroom, so big tables are not copied every batch) and the
        # SparseAdam state of their rows.
        grown += len(grow_embeddings(model.tables, b.vocab_sizes, optimizer=opt_emb, init=emb_init,
                                     headroom=1.5))
        if training:
            logits = model(b.dense, b.sparse_features)
            loss = loss_fn(logits, b.labels)
            opt_dense.zero_grad()
            opt_emb.zero_grad()
            loss.backward()
            opt_dense.step()
            opt_emb.step()
            rows_trained += b.rows
            batches += 1
            loss_ema = float(loss) if loss_ema is None else 0.95 * loss_ema + 0.05 * float(loss)
            if batches % 50 == 0:
                print("batch %d rows %d loss %.4f (%.1f s)" % (batches, rows_trained, loss_ema,
                                                              time.monotonic() - t_start),
                      file=sys.stderr, flush=True)
            continue
        with torch.no_grad():
            hold_s.append(torch.sigmoid(model(b.dense, b.sparse_features)).numpy())
        hold_y.append(b.labels.numpy().copy())
        if sum(len(y) for y in hold_y) >= args.heldout_rows:
            break
    if model is None or not hold_y:
        print("no held-out data: the stream ended after %d training rows" % rows_trained,
              file=sys.stderr)
        return 1
    y, s = np.concatenate(hold_y), np.concatenate(hold_s)
    a = auc(y, s)
    t_train = time.monotonic() - (t_first or t_start)
    print("heldout_auc=%.4f heldout_rows=%d positive=%.3f train_rows=%d batches=%d "
          "train_seconds=%.1f rows_per_s=%.0f total_seconds=%.1f tables_grown=%d rows_in_tables=%d"
          % (a, len(y), y.mean(), rows_trained, batches, t_train, rows_trained / max(t_train, 1e-9),
             time.monotonic() - t_start, grown, sum(t.num_embeddings for t in model.tables)),
          flush=True)
    if args.min_auc is not None and not a >= args.min_auc:
        print("held-out AUC %.4f below %.2f" % (a, args.min_auc), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
