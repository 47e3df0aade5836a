#!/usr/bin/python3
"""train_jagged.py — a DLRM-style model over jagged features from a live piperec stream.

    # everything local: test broker, JSON clickstream generator, piperec run
    /usr/bin/python3 examples/train_jagged.py --spawn --piperec build/piperec

    # or against a running service with a declared schema (examples/clickstream.yaml)
    /usr/bin/python3 examples/train_jagged.py --connect 127.0.0.1:7070 --pipeline clicks

With --spawn it starts `piperec broker`, runs `piperec run` on a declared
feature schema over JSON events (user and item ids, category, a list of tags
hashed to 4096 buckets, the user's click history as a list through the
vocabulary, device, hour of day, price and age as dense features; labels
click and purchase) and feeds it `piperec gen --format json | piperec
produce --format json` (a clickstream with a planted signal: clicks depend
on the user's affinity to the item's category and on the history).

The batches are jagged (docs/trainer-protocol.md, "Jagged batches"): per
feature int64 values key-major and int32 lengths (a list feature has 0..
values per row), labels float32 [B, L], dense float32 [B, D]. The model
has one EmbeddingBag (mode sum) per vocabulary table, fed (values, offsets)
with the offsets taken from the lengths, grown in place with grow_embeddings
as the vocabulary sizes grow: the click history shares the candidate item's
vocabulary (`table: item`), so an item has one index, and one embedding, as
the candidate and in a history (the batch's ``feature_tables``); a bottom MLP on the dense features,
pairwise dot-product interactions and a top MLP predict --label (click).
A schema with weighted lists (`weights:`, an id-score list) sends each
value's weight, and the bags take them as per_sample_weights.

It trains on the first --train-rows rows of the stream, then scores the next
--heldout-rows rows without training on them and prints their AUC as
`heldout_auc=...` (exit 1 when below --min-auc, if given).

--serve-events N (with --spawn) then serves the model as a model server would:
`piperec serve --state` beside the running pipeline (its vocabulary as the
stream left it), N new events of the generator posted to it in requests of
256 through `piperec.serving.ServeClient.batch` (the rows as one raw batch,
the same features and layout as training's, no feature code of its own), each
scored by the trained model, and prints `serving_auc=...` with the time a
request took. Ids the pipeline indexed after training stopped get a fresh
embedding row, as new ids do in training.

--schema FILE (with --spawn) takes the schema and transform sections of
FILE's first pipeline instead of the one below, e.g. what `piperec infer`
wrote from a sample of the events:

    build/piperec gen --format json --rows 20000 --seed 9 --output sample.jsonl
    build/piperec infer --input sample.jsonl --output inferred.yaml
    /usr/bin/python3 examples/train_jagged.py --spawn --schema inferred.yaml

--downsample RATE (with --spawn) keeps that share of the negatives
(schema.downsample, decided by event_id) with a label `weight` of 1/RATE on
them; --weight NAME (default `weight` when the stream has it) weighs each
row's loss by that label, so the model learns the click rate of the data
before the sampling.
"""

import argparse
import urllib.request
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

from piperec.serving import ServeClient  # noqa: E402
from piperec.torch import JaggedSparse, StreamDataset, grow_embeddings  # noqa: E402

# The declared schema of the --spawn pipeline (docs/configuration.md, "Feature schema").
SCHEMA = """    schema:
      event_time: { path: ts, unit: ms }
      labels:
        - { name: click, path: label.click }
        - { name: purchase, path: label.purchase, default: 0 }
      dense:
        - { name: price, path: item.price, default: 0, ops: [ { clip: [0, 10000] }, log1p ] }
        - { name: age_days, path: user.age_days, default: 0, ops: [ neg2zero, log1p ] }
      sparse:
        - { name: user, path: user.id, ops: [vocab] }
        - { name: item, path: item.id, ops: [vocab] }
        - { name: category, path: item.category, default: unknown, ops: [vocab] }
        - { name: tags, path: item.tags, list: { max_len: 8 }, ops: [ { hash: 4096 } ] }
        - { name: history, path: history, list: { max_len: 20, keep: last }, ops: [vocab],
            table: item }
        - { name: device, path: context.device, ops: [vocab] }
        - { name: hour, path: ts, ops: [hour_of_day] }
        - { name: cat_x_device, cross: [item.category, context.device], ops: [ { hash: 4096 } ] }
    transform:
      vocab: { profile: default }
"""


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


def features(sf, rows):
    """Per key (values, offsets, weights) of a KeyedJaggedTensor or a
    JaggedSparse: values key-major, so feature k's values follow those of
    features < k; offsets[r] = where row r's values start (an empty bag when
    length 0); weights the values' weights when the schema has weighted lists
    (`weights:`, 1 on an unweighted feature's values), else None."""
    if isinstance(sf, JaggedSparse):
        values, lengths, n = sf.values, sf.lengths, len(sf.keys)
        weights = getattr(sf, "weights", None)
    else:  # torchrec KeyedJaggedTensor
        values, lengths, n = sf.values(), sf.lengths(), len(sf.keys())
        weights = sf.weights_or_none()
    lengths = lengths.view(n, rows).long()
    per_key = lengths.sum(1)
    starts = torch.cumsum(per_key, 0) - per_key
    out = []
    for k in range(n):
        offsets = torch.cumsum(lengths[k], 0) - lengths[k]
        a = int(starts[k])
        w = None if weights is None else weights[a:a + int(per_key[k])]
        out.append((values[a:a + int(per_key[k])], offsets, w))
    return out


class JaggedDLRM(nn.Module):
    """One EmbeddingBag (sum) per vocabulary table, a bottom MLP on the
    dense features, dot-product interactions, a top MLP. `tables`: each
    feature's table (the batch's ``tables``: features that share a
    vocabulary, `table:` in the schema, look their ids up in one bag);
    None: every feature its own."""

    def __init__(self, n_dense, n_feat, dim=16, bottom=(32,), top=(64, 32), tables=None):
        super().__init__()
        names = list(tables) if tables else list(range(n_feat))
        self.table_names = list(dict.fromkeys(names))      # distinct, in first-use order
        self.table_of = [self.table_names.index(t) for t in names]
        self.tables = nn.ModuleList()
        for _ in self.table_names:
            t = nn.EmbeddingBag(1, dim, mode="sum", sparse=True)  # grown from the batches
            emb_init(t.weight.data)
            self.tables.append(t)
        self.bottom = mlp((max(n_dense, 1),) + tuple(bottom) + (dim,))
        n_f = n_feat + 1
        self.register_buffer("iu", torch.triu_indices(n_f, n_f, offset=1), persistent=False)
        self.top = mlp((dim + n_f * (n_f - 1) // 2,) + tuple(top) + (1,), last_act=False)

    def forward(self, dense, sparse_features):
        rows = dense.shape[0]
        if dense.shape[1] == 0:
            dense = torch.zeros(rows, 1)
        x = self.bottom(dense)
        feats = [x]
        for k, (values, offsets, w) in enumerate(features(sparse_features, rows)):
            # a weighted list (an id-score list): each id's vector times its weight
            feats.append(self.tables[self.table_of[k]](values, offsets, per_sample_weights=w))
        t = torch.stack(feats, 1)                      # [B, 1 + n_feat, dim]
        z = torch.bmm(t, t.transpose(1, 2))[:, self.iu[0], self.iu[1]]
        return self.top(torch.cat([x, z], 1)).squeeze(1)


def table_sizes(b, model=None):
    """Rows each table needs: the batch's vocab_sizes, or (a feature
    without a bounded size, 0) its largest value + 1; per table of `model`
    (the largest of its features': a shared vocabulary reports one size)."""
    sizes = list(b.vocab_sizes)
    sf = b.sparse_features
    if 0 in sizes:
        for k, (values, _, _) in enumerate(features(sf, b.rows)):
            if sizes[k] == 0 and values.numel():
                sizes[k] = int(values.max()) + 1
    if model is None:
        return sizes
    out = [0] * len(model.table_names)
    for k, t in enumerate(model.table_of):
        out[t] = max(out[t], sizes[k])
    return out


def auc(y, s):
    """Area under the ROC curve (ties get average ranks)."""
    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s))
    ss = s[order]
    i = 0
    while i < len(ss):
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

def schema_of(path):
    """The `schema:` and `transform:` sections of the first pipeline of a
    config file (as `piperec infer` writes them: four spaces deep), as text."""
    out, inside = [], False
    for line in open(path):
        key = re.match(r"^    ([a-z_]+):", line)
        if key:
            inside = key.group(1) in ("schema", "transform")
        elif re.match(r"^ {0,3}\S", line) and out:  # the next pipeline or a top-level key
            break
        if inside:
            out.append(line)
    if not out:
        raise SystemExit("%s: no schema: section four spaces deep" % path)
    return "".join(out)


def with_downsample(schema, rate):
    """SCHEMA with the negatives downsampled to `rate` (None: as it is)."""
    if not rate:
        return schema
    return schema.replace("    schema:\n", "    schema:\n      downsample: { rate: %r, where: { "
                          "path: label.click, in: [0] }, key: event_id, weight: weight }\n" % rate, 1)


class StreamRefused(RuntimeError):
    """`piperec run` refused the pipeline (e.g. a build without streaming schemas)."""


# What piperec run says when the broker no longer has the rows it was to read
# next (as in train_dlrm.py): the run then ends early, so the example fails.
LOST_ROWS = re.compile(r"offset \d+ is out of range|offset out of range|OFFSET_OUT_OF_RANGE", re.I)


class LocalStream:
    """piperec broker + gen --format json | produce + piperec run, in a temp dir."""

    def __init__(self, piperec, rows, seed, batch, partitions, log, downsample=None,
                 schema=SCHEMA):
        self.tmp = tempfile.mkdtemp(prefix="piperec-jagged.")
        self.procs = []
        self.log = log
        br = self._spawn([piperec, "broker", "--partitions", str(partitions), "--topics", "clicks"],
                         stdout=subprocess.PIPE)
        line = br.stdout.readline().decode()
        if not line.startswith("bootstrap="):
            raise RuntimeError("piperec broker printed %r" % line)
        bootstrap = line.strip().split("=", 1)[1]
        cfg = self.config = os.path.join(self.tmp, "run.yaml")
        with open(cfg, "w") as f:
            f.write("""pipelines:
  - name: clicks
    source:
      kafka:
        topics: [clicks]
        group.id: jagged-example
        properties:
          bootstrap.servers: "%s"
          auto.offset.reset: earliest
          fetch.wait.max.ms: 10
      format: json
%s    batch: { size: %d, max_delay_ms: 200 }
    sinks:
      trainer: { listen: "127.0.0.1:0", max_unacked_batches: 64 }
    state: { dir: "%s/state" }
limits: { max_inflight_bytes: 2GiB }
http: { listen: "127.0.0.1:0" }
log: { level: info }
""" % (bootstrap, with_downsample(schema, downsample), batch, self.tmp))
        self.downsample = downsample
        self.run_err = os.path.join(self.tmp, "run.err")
        run = self._spawn([piperec, "run", "--config", cfg], stderr=open(self.run_err, "w"))
        deadline = time.monotonic() + 30
        self.port = None
        while self.port is None:
            text = open(self.run_err).read()
            m = re.search(r"trainers connect to port (\d+)", text)
            if m:
                self.port = int(m.group(1))
            elif run.poll() is not None:
                raise StreamRefused("piperec run exited:\n" + text[-2000:])
            elif time.monotonic() > deadline:
                raise RuntimeError("piperec run did not start:\n" + text[-2000:])
            else:
                time.sleep(0.05)
        # Produce only once the consumer owns the partitions (the test broker
        # keeps ~5 MB per partition).
        while "partition(s) assigned" not in open(self.run_err).read():
            if time.monotonic() > deadline:
                raise RuntimeError("piperec run got no partitions:\n" + open(self.run_err).read()[-2000:])
            time.sleep(0.05)
        self.endpoint = "127.0.0.1:%d" % self.port
        m = re.search(r"http on port (\d+)", open(self.run_err).read())
        self.http = int(m.group(1)) if m else None
        # gen | produce in chunks, at most `lookahead` rows ahead of the
        # trainer (backpressure plus the test broker's small partitions).
        self.piperec, self.bootstrap, self.seed = piperec, bootstrap, seed
        self.rows, self.produced, self.taken = rows, 0, 0
        self.lookahead = max(2 * batch, 8000 * partitions)
        self.stop = False
        self.feeder = threading.Thread(target=self._feed, daemon=True)
        self.feeder.start()

    def took(self, rows):
        self.taken += rows

    def lost_rows(self):
        """piperec's complaint when the test broker dropped rows it had not read."""
        return LOST_ROWS.search(open(self.run_err).read()) is not None

    def _consumed(self):
        """Events piperec has read: the rows a trainer took, or, when
        downsampling drops some before any trainer sees them, the messages
        piperec consumed (its /metrics), one event each."""
        if not self.downsample or not self.http:
            return self.taken
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.http, timeout=5) as r:
                page = r.read().decode()
        except OSError:
            return 0
        return sum(float(v) for v in
                   re.findall(r"^piperec_messages_in_total\{[^}]*\} (\S+)$", page, re.M))

    def _feed(self):
        chunk = max(self.lookahead // 4, 1)
        while not self.stop and self.produced < self.rows:
            if self.produced - self._consumed() >= self.lookahead:
                time.sleep(0.02)
                continue
            n = min(chunk, self.rows - self.produced)
            gen = subprocess.Popen([self.piperec, "gen", "--format", "json", "--rows", str(n),
                                    "--first-row", str(self.produced), "--seed", str(self.seed),
                                    "--output", "-"], stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL)
            prod = subprocess.run([self.piperec, "produce", "--bootstrap", self.bootstrap, "--topic",
                                   "clicks", "--format", "json", "--input", "-"], stdin=gen.stdout,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            gen.stdout.close()
            gen.wait()
            if prod.returncode != 0:
                print("piperec produce failed: %s" % prod.stderr.decode()[-500:], file=self.log)
                return
            self.produced += n

    def _spawn(self, argv, **kw):
        kw.setdefault("stderr", subprocess.DEVNULL)
        p = subprocess.Popen(argv, **kw)
        self.procs.append(p)
        return p

    def close(self):
        self.stop = True
        if hasattr(self, "feeder"):
            self.feeder.join()
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(3)
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
    ap.add_argument("--pipeline", default="clicks")
    ap.add_argument("--piperec", default=os.path.join(HERE, "..", "build", "piperec"))
    ap.add_argument("--label", default="click", help="which label column to predict")
    ap.add_argument("--train-rows", type=int, default=300_000)
    ap.add_argument("--heldout-rows", type=int, default=50_000)
    ap.add_argument("--batch", type=int, default=1024, help="rows per batch (--spawn)")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--emb-lr", type=float, default=0.05)
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--max-seconds", type=float, default=110, help="stop training after this long")
    ap.add_argument("--min-auc", type=float, help="exit 1 when the held-out AUC is below this")
    ap.add_argument("--downsample", type=float, help="--spawn: keep this share of the negatives, "
                    "with a weight label (schema.downsample)")
    ap.add_argument("--schema", help="--spawn: the schema and transform sections of this "
                    "config file's first pipeline (e.g. `piperec infer`'s output)")
    ap.add_argument("--weight", help="label weighing each row's loss (default: `weight` when "
                    "the stream has such a label)")
    ap.add_argument("--serve-events", type=int, default=0, help="--spawn: then score this many "
                    "new events through `piperec serve` (serving_auc=...)")
    args = ap.parse_args(argv)

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    stream = None
    t_start = time.monotonic()
    try:
        if args.spawn:
            try:
                rows = args.train_rows + args.heldout_rows + 4 * args.batch
                if args.downsample:  # events to produce: dropped negatives give no row
                    rows = int(rows / args.downsample)
                stream = LocalStream(args.piperec, rows, args.seed, args.batch, args.partitions,
                                     sys.stderr, args.downsample,
                                     schema_of(args.schema) if args.schema else SCHEMA)
            except StreamRefused as e:
                print("stream refused: %s" % e, file=sys.stderr)
                return 3
            endpoints = [stream.endpoint]
        else:
            endpoints = args.connect.split(",")
        ds = StreamDataset(endpoints, args.pipeline, credits=8, idle_timeout=20)
        rc, model, label = train(ds, args, t_start, stream)
        if not rc and stream is not None and args.serve_events:
            rc = serve_check(stream, model, label, args)
        if stream is not None and stream.lost_rows():
            print("the test broker dropped rows piperec had not read (offset out of range)",
                  file=sys.stderr)
            rc = 1
        return rc
    finally:
        if stream is not None:
            stream.close()


def train(ds, args, t_start, stream=None):
    model = opt_dense = opt_emb = None
    loss_fn = nn.BCEWithLogitsLoss(reduction="none")
    rows_trained = batches = 0
    t_first = None
    hold_y, hold_s, hold_w = [], [], []
    loss_ema = None
    label, weight = 0, None
    for b in ds:
        if stream is not None:
            stream.took(b.rows)
        if not getattr(b, "jagged", False):
            print("not a jagged stream: pipeline %r has no declared schema" % args.pipeline,
                  file=sys.stderr)
            return 1, None, 0
        if model is None:
            t_first = time.monotonic()
            label = b.label_names.index(args.label) if args.label in b.label_names else 0
            wname = args.weight or ("weight" if "weight" in b.label_names else None)
            if wname is not None and wname not in b.label_names:
                print("no label %r to weigh by (labels %s)" % (wname, b.label_names),
                      file=sys.stderr)
                return 1, None, 0
            weight = b.label_names.index(wname) if wname else None
            tables = list(getattr(b, "feature_tables", None) or ())  # shared vocabularies
            model = JaggedDLRM(b.dense.shape[1], len(b.keys), dim=args.dim, tables=tables)
            opt_dense = torch.optim.Adam([p for n, p in model.named_parameters()
                                          if not n.startswith("tables.")], lr=args.lr)
            opt_emb = torch.optim.SparseAdam(list(model.tables.parameters()), lr=args.emb_lr)
            print("features %s, labels %s, dense %s" % (b.keys, b.label_names, b.dense_names),
                  file=sys.stderr, flush=True)
            shared = {t: [k for k, u in zip(b.keys, tables) if u == t] for t in tables}
            shared = {t: ks for t, ks in shared.items() if len(ks) > 1}
            if shared:
                print("shared embedding tables %s" % shared, file=sys.stderr, flush=True)
        # Vocabularies grow with the stream: grow the tables (and their
        # SparseAdam state) before using the new indices.
        grow_embeddings(model.tables, table_sizes(b, model), optimizer=opt_emb, init=emb_init,
                        headroom=1.5)
        y = b.labels[:, label]
        training = rows_trained < args.train_rows and time.monotonic() - t_start < args.max_seconds
        if training:
            logits = model(b.dense, b.sparse_features)
            per_row = loss_fn(logits, y)
            # a weighted mean: rows a downsampling kept stand for 1/rate rows
            loss = per_row.mean() if weight is None else \
                (per_row * b.labels[:, weight]).sum() / b.labels[:, weight].sum()
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
        hold_y.append(y.numpy().copy())
        if weight is not None:
            hold_w.append(b.labels[:, weight].numpy().copy())
        if sum(len(v) for v in hold_y) >= args.heldout_rows:
            break
    if model is None or not hold_y:
        print("no held-out data: the stream ended after %d training rows" % rows_trained,
              file=sys.stderr)
        return 1, model, label
    y, s = np.concatenate(hold_y), np.concatenate(hold_s)
    a = auc(y, s)
    t_train = time.monotonic() - (t_first or t_start)
    print("heldout_auc=%.4f heldout_rows=%d positive=%.3f train_rows=%d batches=%d "
          "train_seconds=%.1f rows_per_s=%.0f total_seconds=%.1f rows_in_tables=%d"
          % (a, len(y), y.mean(), rows_trained, batches, t_train, rows_trained / max(t_train, 1e-9),
             time.monotonic() - t_start, sum(t.num_embeddings for t in model.tables)),
          flush=True)
    if hold_w:  # the click rate the model predicts vs the data's before the sampling
        w = np.concatenate(hold_w)
        print("heldout_mean_prediction=%.4f heldout_weighted_positive=%.4f"
              % (float((s * w).sum() / w.sum()), float((y * w).sum() / w.sum())), flush=True)
    if args.min_auc is not None and not a >= args.min_auc:
        print("held-out AUC %.4f below %.2f" % (a, args.min_auc), file=sys.stderr)
        return 1, model, label
    return 0, model, label


# ---------------------------------------------------------------- serving

def serve_check(stream, model, label, args):
    """The trained model behind `piperec serve`: new events in, scores out,
    and their AUC (serving_auc=...). 0, or 1 when below --min-auc."""
    serve = stream._spawn([args.piperec, "serve", "--config", stream.config, "--state",
                           os.path.join(stream.tmp, "state"), "--listen", "127.0.0.1:0",
                           "--reload-s", "0", "--threads", "2"], stderr=subprocess.PIPE, text=True)
    line = serve.stderr.readline()
    m = re.search(r"listening on http://127.0.0.1:(\d+)", line)
    if not m:
        print("piperec serve did not start: %s%s" % (line, serve.stderr.read()[-2000:]),
              file=sys.stderr)
        return 1
    client = ServeClient("http://127.0.0.1:%s" % m.group(1))
    events = subprocess.run([args.piperec, "gen", "--format", "json", "--rows",
                             str(args.serve_events), "--seed", str(args.seed + 1000), "--output",
                             "-"], capture_output=True, text=True, check=True).stdout.splitlines()
    ys, ss, ms = [], [], []
    model.eval()
    with torch.no_grad():
        for at in range(0, len(events), 256):
            t0 = time.perf_counter()
            b = client.batch(events[at:at + 256])  # the features, as training's batches
            ms.append((time.perf_counter() - t0) * 1e3)
            grow_embeddings(model.tables, table_sizes(b, model), init=emb_init)
            ss.append(torch.sigmoid(model(b.dense, b.sparse_features)).numpy())
            ys.append(b.labels[:, label].numpy().copy())
    client.close()
    y, s = np.concatenate(ys), np.concatenate(ss)
    a = auc(y, s)
    print("serving_auc=%.4f serving_rows=%d request_ms_p50=%.2f (256 events, batch() alone)"
          % (a, len(y), float(np.median(ms))), flush=True)
    if args.min_auc is not None and not a >= args.min_auc:
        print("serving AUC %.4f below %.2f" % (a, args.min_auc), file=sys.stderr)
        return 1
    return 0

if __name__ == "__main__":
    sys.exit(main())
