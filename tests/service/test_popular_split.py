#!/usr/bin/python3
"""test_popular_split.py — issue 14 items 5 and 6 end to end: a Zipf stream
(`piperec gen --zipf 1.3`) through `piperec run` with `batch.split: popular`
and hot sets on, consumed by the Python client; then `piperec vocab hot`.

One partition, so the stream order is the file order and the streamed
indices equal those of `piperec process` over the same file (one engine, two
drivers). Checks:
  - every row exactly once across both streams: the multiset of rows
    (label, dense, sparse) of all batches equals the offline output, and each
    stream on its own is a subsequence of the offline row order (per-partition
    order holds within each stream); sequence numbers strictly increase;
  - popular batches contain only hot indices: each index of a popular row was
    seen at least PR_HOT_SET_MIN_COUNT (4) times in the stream up to the end
    of its row's block (at most 4096 rows later); both streams are non-empty;
  - Batch.popular is what the client exposes, piperec_popular_records_total
    and piperec_popular_share_ratio agree with what was received;
  - top-K from the sketch (GET /v1/hot, K = 100 and 256) against the exact
    offline counts: coverage within 1% (absolute) for every column;
  - `piperec vocab hot --url` writes what /v1/hot answers; `--input` on an
    offline vocab/ dir (min_count 2, which counts) the exact top K.
Env (pr_script_test): PIPEREC, PR_SOURCE_DIR, PR_TMP.
"""
import collections
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

import numpy as np

PIPEREC = os.environ["PIPEREC"]
T = os.environ["PR_TMP"]
sys.path.insert(0, os.path.join(os.environ["PR_SOURCE_DIR"], "clients", "python"))
import piperec_client as pc  # noqa: E402

N = 20000          # rows (about 4 MB of TSV: under the mock broker's 5 MB per partition)
TOP_K = 256        # hot.top_k
MIN_COUNT = 4      # PR_HOT_SET_MIN_COUNT (service/pr_hot.h)
BLOCK = 4096       # PR__BLOCK_ROWS: rows are classified after their block is observed
procs = []


def fail(msg):
    print("FAIL:", msg)
    for name in ("broker.err", "run.err"):
        p = os.path.join(T, name)
        if os.path.exists(p):
            print("---", name)
            print("".join(open(p).readlines()[-30:]))
    sys.exit(1)


def http(port, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
        return r.read().decode()


def cleanup():
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


try:
    data = os.path.join(T, "zipf.tsv")
    subprocess.run([PIPEREC, "gen", "--zipf", "1.3", "--rows", str(N), "--seed", "7",
                    "--output", data], check=True)
    subprocess.run([PIPEREC, "process", "--input", data, "--output", os.path.join(T, "off")],
                   check=True, stderr=subprocess.DEVNULL)
    off_lab = np.load(os.path.join(T, "off", "labels.npy")).reshape(-1)
    off_den = np.load(os.path.join(T, "off", "dense.npy"))
    off_spa = np.load(os.path.join(T, "off", "sparse.npy"))
    if len(off_lab) != N:
        fail("offline run kept %d of %d rows" % (len(off_lab), N))

    berr = open(os.path.join(T, "broker.err"), "w")
    broker = subprocess.Popen([PIPEREC, "broker", "--partitions", "1", "--topics", "events"],
                              stdout=subprocess.PIPE, stderr=berr, text=True)
    procs.append(broker)
    first = broker.stdout.readline()
    if not first.startswith("bootstrap="):
        fail("broker printed %r" % first)
    bootstrap = first.strip().split("=", 1)[1]
    subprocess.run([PIPEREC, "produce", "--bootstrap", bootstrap, "--topic", "events",
                    "--input", data, "--lines-per-message", "20"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    cfg = os.path.join(T, "run.yaml")
    with open(cfg, "w") as f:
        f.write("""pipelines:
  - name: p
    source:
      kafka:
        topics: [events]
        group.id: popular-g
        properties: { bootstrap.servers: "%s", auto.offset.reset: earliest }
    batch: { size: 128, max_delay_ms: 50, split: popular }
    sinks:
      trainer: { listen: "127.0.0.1:0" }
hot: { top_k: %d, half_life_records: 1000000000 }
http: { listen: "127.0.0.1:0" }
log: { level: info }
""" % (bootstrap, TOP_K))
    rerr_path = os.path.join(T, "run.err")
    run = subprocess.Popen([PIPEREC, "run", "--config", cfg], stderr=open(rerr_path, "w"))
    procs.append(run)
    hp = None
    deadline = time.monotonic() + 30
    while hp is None and time.monotonic() < deadline:
        m = re.search(r"http on port (\d+)", open(rerr_path).read())
        hp = int(m.group(1)) if m else None
        time.sleep(0.05)
    if hp is None:
        fail("no http port in the log")
    tp = 0
    while not tp and time.monotonic() < deadline:
        tp = json.loads(http(hp, "/v1/status"))["pipelines"][0]["trainer_port"]
        time.sleep(0.05)
    if not tp:
        fail("no trainer port in /v1/status")

    streams = {False: [], True: []}  # popular -> rows in arrival order
    seqs = []
    seen = set()
    got = 0
    with pc.TrainerClient("127.0.0.1:%d" % tp, "p", credits=16) as c:
        deadline = time.monotonic() + 120
        while got < N and time.monotonic() < deadline:
            b = c.recv(1.0)
            if b is None:
                continue
            if b.sequence in seen:
                # a redelivery (at-least-once: e.g. an ack late under load)
                # keeps its sequence number; a trainer skips it
                c.ack(b.sequence)
                continue
            seen.add(b.sequence)
            seqs.append(b.sequence)
            for i in range(b.rows):
                streams[b.popular].append((int(b.labels[i]), b.dense[i].tobytes(),
                                           b.sparse[i].tobytes()))
            got += b.rows
            c.ack(b.sequence)
    if got != N:
        fail("received %d rows of %d" % (got, N))
    if any(y <= x for x, y in zip(seqs, seqs[1:])):
        fail("sequence numbers of first deliveries not strictly increasing")

    # Every row exactly once; each stream keeps the input order.
    offline = [(int(off_lab[i]), off_den[i].astype(np.float32).tobytes(),
                off_spa[i].astype(off_spa.dtype).tobytes()) for i in range(N)]
    if collections.Counter(offline) != collections.Counter(streams[False] + streams[True]):
        fail("the rows of both streams are not the input rows exactly once")
    pos_of = {}
    for name, rows in (("regular", streams[False]), ("popular", streams[True])):
        j = 0
        positions = []
        for i, row in enumerate(offline):
            if j < len(rows) and rows[j] == row:
                positions.append(i)
                j += 1
        if j != len(rows):
            fail("%s stream is not in input order (matched %d of %d)" % (name, j, len(rows)))
        pos_of[name] = positions
    n_pop = len(streams[True])
    if n_pop == 0 or n_pop == N:
        fail("popular rows: %d of %d (want both streams non-empty)" % (n_pop, N))

    # Popular rows hold only hot indices: seen >= MIN_COUNT times by the end
    # of the row's block.
    first_seen = {}
    for col in range(off_spa.shape[1]):
        occ = collections.defaultdict(list)
        for i, v in enumerate(off_spa[:, col].tolist()):
            occ[v].append(i)
        for i in pos_of["popular"]:
            v = int(off_spa[i, col])
            o = occ[v]
            if len(o) < MIN_COUNT or o[MIN_COUNT - 1] >= i + BLOCK:
                fail("popular row %d: column %d index %d seen %d times by row %d" %
                     (i, col, v, sum(1 for x in o if x < i + BLOCK), i + BLOCK))
        first_seen[col] = occ

    # Metrics agree with what arrived.
    metrics = http(hp, "/metrics")
    def metric(name):
        m = re.search(r'^%s\{pipeline="p"\} (\S+)$' % name, metrics, re.M)
        if not m:
            fail("no %s in /metrics" % name)
        return float(m.group(1))
    if metric("piperec_popular_records_total") != n_pop:
        fail("piperec_popular_records_total %s, received %d" %
             (metric("piperec_popular_records_total"), n_pop))
    share = metric("piperec_popular_share_ratio")
    if abs(share - n_pop / N) > 1e-5:
        fail("piperec_popular_share_ratio %s, received %.6f" % (share, n_pop / N))

    # Sketch top-K coverage vs exact offline counts, every column.
    names = list(json.loads(http(hp, "/v1/status"))["pipelines"][0]["vocab_sizes"].keys())
    worst = 0.0
    for k in (100, TOP_K):
        for col, name in enumerate(names):
            h = json.loads(http(hp, "/v1/hot?pipeline=p&column=%s&k=%d" % (name, k)))
            counts = sorted((len(o) for o in first_seen[col].values()), reverse=True)
            exact = sum(counts[:k]) / N
            worst = max(worst, abs(h["coverage"] - exact))
            if abs(h["coverage"] - exact) > 0.01:
                fail("column %s k %d: sketch coverage %.4f, exact %.4f" %
                     (name, k, h["coverage"], exact))

    # vocab hot --url: the /v1/hot answer as TSV.
    out = os.path.join(T, "hot_url.tsv")
    subprocess.run([PIPEREC, "vocab", "hot", "--top", "50", "--url", "http://127.0.0.1:%d" % hp,
                    "--pipeline", "p", "--output", out], check=True, stderr=subprocess.DEVNULL)
    rows = [l.rstrip("\n").split("\t") for l in open(out) if not l.startswith("#")]
    for name in names:
        h = json.loads(http(hp, "/v1/hot?pipeline=p&column=%s&k=50" % name))
        want = [str(it["index"]) for it in h["items"]]
        got_idx = [r[2] for r in rows if r[0] == name]
        if got_idx != want:
            fail("vocab hot --url column %s: %s, /v1/hot %s" % (name, got_idx[:5], want[:5]))
        if [r[1] for r in rows if r[0] == name] != [str(i + 1) for i in range(len(want))]:
            fail("vocab hot --url column %s: ranks not 1..n" % name)
    run.terminate()
    if run.wait(30) != 0:
        fail("run exited %d" % run.returncode)

    # vocab hot --input: the exact top K by count of an offline vocab/ dir.
    cfg2 = os.path.join(T, "off.yaml")
    with open(cfg2, "w") as f:
        f.write("pipelines:\n  - name: p\n    transform: { vocab: { profile: default, min_count: 2 } }\n"
                "    sinks: { files: { dir: \"%s\" } }\n" % os.path.join(T, "unused"))
    subprocess.run([PIPEREC, "process", "--config", cfg2, "--input", data, "--output",
                    os.path.join(T, "off2")], check=True, stderr=subprocess.DEVNULL)
    out = os.path.join(T, "hot_dir.tsv")
    subprocess.run([PIPEREC, "vocab", "hot", "--top", "20", "--config", cfg2, "--input",
                    os.path.join(T, "off2", "vocab"), "--output", out], check=True,
                   stderr=subprocess.DEVNULL)
    rows = [l.rstrip("\n").split("\t") for l in open(out) if not l.startswith("#")]
    for name in names:
        ents = []
        for l in open(os.path.join(T, "off2", "vocab", name + ".tsv")):
            if l.startswith("#") or not l.strip():
                continue
            idx, _, cnt = l.split("\t")[:3]
            if int(idx) >= 0 and int(cnt) > 0:
                ents.append((-int(cnt), int(idx)))
        ents.sort()
        want = [str(i) for _, i in ents[:20]]
        if [r[2] for r in rows if r[0] == name] != want:
            fail("vocab hot --input column %s differs from the exact top 20" % name)
    print("test_popular_split: ok (%d of %d rows popular, %d batches, worst coverage error %.4f)"
          % (n_pop, N, len(seqs), worst))
finally:
    cleanup()
