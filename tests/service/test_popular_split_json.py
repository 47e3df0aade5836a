#!/usr/bin/python3
"""test_popular_split_json.py — issue 20: hot sets and the popular split for a
declared feature schema, end to end. A Zipf JSON stream (a single-valued id,
a list of tags, a feature without vocab, a list `more` in the tags' table) through `piperec run` with
`batch.split: popular`, consumed by the Python client; then `piperec vocab hot`.

One partition, so the stream order is the file order and the streamed rows
equal those of `piperec process` over the same lines (one engine, two
drivers). Checks:
  - every row exactly once across both streams: the multiset of rows (labels,
    dense, every feature's values with their lengths) of all batches equals
    the offline output, each stream on its own is a subsequence of the offline
    row order; sequence numbers strictly increase; both streams non-empty;
  - popular rows hold only hot values: every element of every vocab feature
    (the tags list included) was seen at least PR_HOT_SET_MIN_COUNT (4) times
    by the end of its row's block; some popular rows carry a non-empty list;
  - hot sets per table: GET /v1/hot for `user` and `tags` (shares of list
    elements, the tags table's counting more's too) against the exact offline
    counts, coverage within 1%; the member `more` answers its table's; a feature
    without vocab is a 404 that says so; piperec_hot_coverage_ratio has a row
    per vocab feature; `piperec vocab hot --url` writes what /v1/hot answers,
    `--input` the exact top K of the offline vocab/ dir, per feature.
Env (pr_script_test): PIPEREC, PR_SOURCE_DIR, PR_TMP.
"""
import collections
import json
import os
import random
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np

PIPEREC = os.environ["PIPEREC"]
T = os.environ["PR_TMP"]
sys.path.insert(0, os.path.join(os.environ["PR_SOURCE_DIR"], "clients", "python"))
import piperec_client as pc  # noqa: E402

N = 12000          # records (about 1 MB of JSON: well under the test broker's 5 MB)
TOP_K = 128        # hot.top_k (>= 100: the coverage metric has its k=100 row)
MIN_COUNT = 4      # PR_HOT_SET_MIN_COUNT (service/pr_hot.h)
BLOCK = 4096       # PR__BLOCK_ROWS: rows are classified after their block is observed
VOCAB = ("user", "tags")                     # the vocabularies (tables)
FEATS = ("user", "tags", "bucket", "more")
TABLE = {"user": "user", "tags": "tags", "more": "tags"}  # more: `table: tags`
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


def zipf(rng, n, s):
    """A Zipf(s) draw over 0..n-1 by inversion of a precomputed table."""
    key = (n, s)
    if key not in zipf.cdf:
        w = np.arange(1, n + 1, dtype=np.float64) ** -s
        zipf.cdf[key] = np.cumsum(w / w.sum())
    return int(np.searchsorted(zipf.cdf[key], rng.random()))


zipf.cdf = {}


def gen(path):
    rng = random.Random(11)
    with open(path, "w") as f:
        for i in range(N):
            ev = {"click": i % 3 == 0, "price": round(rng.random() * 200, 2)}
            if i % 50 != 7:  # a few users missing (index 0 under the default profile)
                ev["user"] = "u%d" % zipf(rng, 3000, 1.1)
            k = rng.randrange(0, 5)
            if k:
                ev["tags"] = [zipf(rng, 400, 1.6) for _ in range(k)]
            k = rng.randrange(0, 3)
            if k:
                ev["more"] = [zipf(rng, 600, 1.6) for _ in range(k)]
            f.write(json.dumps(ev) + "\n")


try:
    data = os.path.join(T, "events.jsonl")
    gen(data)

    berr = open(os.path.join(T, "broker.err"), "w")
    broker = subprocess.Popen([PIPEREC, "broker", "--partitions", "1", "--topics", "events"],
                              stdout=subprocess.PIPE, stderr=berr, text=True)
    procs.append(broker)
    first = broker.stdout.readline()
    if not first.startswith("bootstrap="):
        fail("broker printed %r" % first)
    bootstrap = first.strip().split("=", 1)[1]
    subprocess.run([PIPEREC, "produce", "--bootstrap", bootstrap, "--topic", "events",
                    "--format", "json", "--input", data], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    cfg = os.path.join(T, "run.yaml")
    with open(cfg, "w") as f:
        f.write("""pipelines:
  - name: p
    source:
      kafka:
        topics: [events]
        group.id: popular-json
        properties: { bootstrap.servers: "%s", auto.offset.reset: earliest }
      format: json
    schema:
      labels:
        - { name: click, path: click }
      dense:
        - { name: price, path: price, default: 0 }
      sparse:
        - { name: user, path: user, ops: [vocab] }
        - { name: tags, path: tags, list: { max_len: 4 }, ops: [vocab] }
        - { name: bucket, path: price, ops: [ { bucketize: [1, 10, 100] } ] }
        - { name: more, path: more, list: { max_len: 2 }, ops: [vocab], table: tags }
    transform:
      vocab: { profile: default }
    batch: { size: 128, max_delay_ms: 50, split: popular }
    sinks:
      trainer: { listen: "127.0.0.1:0" }
hot: { top_k: %d, half_life_records: 1000000000 }
http: { listen: "127.0.0.1:0" }
log: { level: info }
""" % (bootstrap, TOP_K))
    off_dir = os.path.join(T, "off")
    subprocess.run([PIPEREC, "process", "--config", cfg, "--input", data, "--output", off_dir,
                    "--no-progress"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    off_lab = np.load(os.path.join(off_dir, "labels.npy"))
    off_den = np.load(os.path.join(off_dir, "dense.npy"))
    off_val, off_len, off_at = {}, {}, {}
    for name in FEATS:
        off_val[name] = np.load(os.path.join(off_dir, "sparse", name + ".values.npy"))
        off_len[name] = np.load(os.path.join(off_dir, "sparse", name + ".lengths.npy"))
        off_at[name] = np.concatenate(([0], np.cumsum(off_len[name])))
    if len(off_lab) != N:
        fail("offline run kept %d of %d rows" % (len(off_lab), N))

    def off_row(i):
        return (off_lab[i].astype(np.float32).tobytes(), off_den[i].astype(np.float32).tobytes(),
                tuple(tuple(off_val[n][off_at[n][i]:off_at[n][i + 1]].tolist()) for n in FEATS))
    offline = [off_row(i) for i in range(N)]

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
    seqs, seen, got = [], set(), 0
    with pc.TrainerClient("127.0.0.1:%d" % tp, "p", credits=16) as c:
        deadline = time.monotonic() + 120
        while got < N and time.monotonic() < deadline:
            b = c.recv(1.0)
            if b is None:
                continue
            if b.sequence in seen:  # a redelivery keeps its sequence number
                c.ack(b.sequence)
                continue
            if not b.jagged or list(b.keys) != list(FEATS):
                fail("batch %d: jagged %s keys %s" % (b.sequence, b.jagged, list(b.keys)))
            seen.add(b.sequence)
            seqs.append(b.sequence)
            feats = {}
            for name in FEATS:
                v, ln = b.feature(name)
                feats[name] = (v, np.concatenate(([0], np.cumsum(ln))))
            for i in range(b.rows):
                streams[b.popular].append((
                    np.asarray(b.labels[i], dtype=np.float32).tobytes(),
                    np.asarray(b.dense[i], dtype=np.float32).tobytes(),
                    tuple(tuple(feats[n][0][feats[n][1][i]:feats[n][1][i + 1]].tolist())
                          for n in FEATS)))
            got += b.rows
            c.ack(b.sequence)
    if got != N:
        fail("received %d rows of %d" % (got, N))
    if any(y <= x for x, y in zip(seqs, seqs[1:])):
        fail("sequence numbers of first deliveries not strictly increasing")

    # Every row exactly once; each stream keeps the input order.
    if collections.Counter(offline) != collections.Counter(streams[False] + streams[True]):
        fail("the rows of both streams are not the input rows exactly once")
    pos_of = {}
    for name, rows in (("regular", streams[False]), ("popular", streams[True])):
        j, positions = 0, []
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

    # Popular rows hold only hot values, every list element included.
    # A table counts every member's elements (tags and more share one).
    occ = {t: collections.defaultdict(list) for t in VOCAB}
    for i in range(N):
        for name, t in TABLE.items():
            for v in off_val[name][off_at[name][i]:off_at[name][i + 1]].tolist():
                occ[t][v].append(i)
    with_list = 0
    for i in pos_of["popular"]:
        for name, t in TABLE.items():
            vals = off_val[name][off_at[name][i]:off_at[name][i + 1]].tolist()
            with_list += name == "more" and len(vals) > 0
            for v in vals:
                o = occ[t][v]
                if len(o) < MIN_COUNT or o[MIN_COUNT - 1] >= i + BLOCK:
                    fail("popular row %d: %s value %d seen %d times by row %d" %
                         (i, name, v, sum(1 for x in o if x < i + BLOCK), i + BLOCK))
    if with_list == 0:
        fail("no popular row has a non-empty list of the table member more")

    # Hot sets per vocab feature: sketch coverage vs exact element counts.
    status = json.loads(http(hp, "/v1/status"))["pipelines"][0]
    if list(status["vocab_sizes"].keys()) != list(VOCAB):
        fail("/v1/status vocab_sizes keys %s" % list(status["vocab_sizes"].keys()))
    worst = 0.0
    for k in (10, TOP_K):
        for name in VOCAB:
            h = json.loads(http(hp, "/v1/hot?pipeline=p&column=%s&k=%d" % (name, k)))
            counts = sorted((len(o) for o in occ[name].values()), reverse=True)
            total = sum(counts)
            if h["rows_observed"] != total:
                fail("/v1/hot %s: rows_observed %d, elements %d" % (name, h["rows_observed"], total))
            exact = sum(counts[:k]) / total
            worst = max(worst, abs(h["coverage"] - exact))
            if abs(h["coverage"] - exact) > 0.01:
                fail("feature %s k %d: sketch coverage %.4f, exact %.4f" %
                     (name, k, h["coverage"], exact))
    try:
        http(hp, "/v1/hot?pipeline=p&column=bucket&k=5")
        fail("/v1/hot for a feature without vocab answered 200")
    except urllib.error.HTTPError as e:
        body = e.read().decode()
        if e.code != 404 or "vocab feature" not in body:
            fail("/v1/hot bucket: %d %s" % (e.code, body))
    # A table's member answers its table's hot set.
    h_more = json.loads(http(hp, "/v1/hot?pipeline=p&feature=more&k=10"))
    h_tags = json.loads(http(hp, "/v1/hot?pipeline=p&column=tags&k=10"))
    if h_more["column"] != "tags" or h_more["items"] != h_tags["items"]:
        fail("/v1/hot for the member more: %s, its table tags: %s" % (h_more, h_tags))
    metrics = http(hp, "/metrics")
    for name in VOCAB:
        if not re.search(r'^piperec_hot_coverage_ratio\{pipeline="p",column="%s",k="100"\} '
                         % name, metrics, re.M):
            fail("no coverage metric for %s" % name)
    cov = re.findall(r'^piperec_hot_coverage_ratio\{pipeline="p",column="(\w+)"', metrics, re.M)
    if sorted(set(cov)) != sorted(VOCAB):
        fail("coverage metric columns %s" % cov)
    m = re.search(r'^piperec_popular_records_total\{pipeline="p"\} (\S+)$', metrics, re.M)
    if not m or float(m.group(1)) != n_pop:
        fail("piperec_popular_records_total %s, received %d" % (m and m.group(1), n_pop))

    # vocab hot --url: the /v1/hot answer as TSV, per feature.
    out = os.path.join(T, "hot_url.tsv")
    subprocess.run([PIPEREC, "vocab", "hot", "--top", "20", "--url", "http://127.0.0.1:%d" % hp,
                    "--pipeline", "p", "--output", out], check=True, stderr=subprocess.DEVNULL)
    rows = [l.rstrip("\n").split("\t") for l in open(out) if not l.startswith("#")]
    for name in VOCAB:
        h = json.loads(http(hp, "/v1/hot?pipeline=p&column=%s&k=20" % name))
        want = [str(it["index"]) for it in h["items"]]
        if [r[2] for r in rows if r[0] == name] != want or not want:
            fail("vocab hot --url feature %s differs from /v1/hot" % name)
    run.terminate()
    if run.wait(30) != 0:
        fail("run exited %d" % run.returncode)

    # vocab hot --input: the exact top K of an offline vocab/ dir (min_count
    # 2, which counts), per vocab feature.
    cfg2 = os.path.join(T, "off2.yaml")
    with open(cfg2, "w") as f:
        f.write(open(cfg).read().replace("profile: default }", "profile: default, min_count: 2 }"))
    off2 = os.path.join(T, "off2")
    subprocess.run([PIPEREC, "process", "--config", cfg2, "--input", data, "--output", off2,
                    "--no-progress"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    out = os.path.join(T, "hot_dir.tsv")
    subprocess.run([PIPEREC, "vocab", "hot", "--top", "20", "--config", cfg2, "--input",
                    os.path.join(off2, "vocab"), "--output", out], check=True,
                   stderr=subprocess.DEVNULL)
    rows = [l.rstrip("\n").split("\t") for l in open(out) if not l.startswith("#")]
    for name in VOCAB:
        ents = []
        for l in open(os.path.join(off2, "vocab", name + ".tsv")):
            if l.startswith("#") or not l.strip():
                continue
            idx, _, cnt = l.split("\t")[:3]
            if int(idx) >= 0 and int(cnt) > 0:
                ents.append((-int(cnt), int(idx)))
        ents.sort()
        want = [str(i) for _, i in ents[:20]]
        if [r[2] for r in rows if r[0] == name] != want or not want:
            fail("vocab hot --input feature %s differs from the exact top 20" % name)
    print("test_popular_split_json: ok (%d of %d rows popular, %d with tags; %d batches, "
          "worst coverage error %.4f)" % (n_pop, N, with_list, len(seqs), worst))
finally:
    cleanup()
