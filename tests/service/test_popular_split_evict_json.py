#!/usr/bin/python3
"""test_popular_split_evict_json.py — issue 20: the popular split of a declared
schema with bounded vocabularies (eviction lru), so that indices are recycled
and their notices name features. A Zipf JSON stream (a single-valued id and a
list of tags, both evicting) through `piperec run` with `batch.split:
popular` (popular_min_rows, so some popular rows merge back), consumed by the
Python client.

One partition: the streamed indices and notices equal those of `piperec
process` on the same lines (its recycled.npy: feature, output row, index,
number). Checks:
  - every row exactly once across both streams, equal to the offline rows;
  - notice numbers follow the rows, not the blocks: `piperec process` with
    another --block-rows and --threads writes the same recycled.npy (the
    engine numbered a jagged block's notices in element order, which made
    the numbers depend on where blocks end), and every streamed notice has
    the offline notice's number, feature and index, exactly once across both
    streams; the k-th streamed notice of a (feature, index), in merged-stream
    order, is the k-th offline one;
  - in the merged stream (sequence order; a notice applies in front of its
    row), every row comes after the notice that gave each of its elements'
    indices their current value and before the next notice of that index:
    a popular row never overtakes a notice, a row of the old value never
    follows one;
  - both streams non-empty, and notices were sent.
Env (pr_script_test): PIPEREC, PR_SOURCE_DIR, PR_TMP.
"""
import bisect
import collections
import json
import os
import random
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

N = 12000
FEATS = ("user", "tags")  # both vocab features, both evicting
procs = []


def fail(msg):
    print("FAIL:", msg)
    for name in ("broker.err", "run.err"):
        p = os.path.join(T, name)
        if os.path.exists(p):
            print("---", name)
            print("".join(open(p).readlines()[-30:]))
    sys.exit(1)


def cleanup():
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def gen(path):
    rng = random.Random(5)
    wu = np.arange(1, 1501, dtype=np.float64) ** -1.2
    wt = np.arange(1, 301, dtype=np.float64) ** -1.3
    cu, ct = np.cumsum(wu / wu.sum()), np.cumsum(wt / wt.sum())
    with open(path, "w") as f:
        for i in range(N):
            ev = {"click": i % 2, "rid": i,
                  "user": "u%d" % int(np.searchsorted(cu, rng.random()))}
            k = rng.randrange(0, 4)
            if k:
                ev["tags"] = [int(np.searchsorted(ct, rng.random())) for _ in range(k)]
            f.write(json.dumps(ev) + "\n")


def http(port, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
        return r.read().decode()


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
        group.id: popular-evict-json
        properties: { bootstrap.servers: "%s", auto.offset.reset: earliest }
      format: json
    schema:
      labels:
        - { name: click, path: click }
      dense:
        - { name: rid, path: rid }
      sparse:
        - { name: user, path: user, ops: [vocab] }
        - { name: tags, path: tags, list: { max_len: 3 }, ops: [vocab] }
    transform:
      vocab: { profile: default, capacity: 150, eviction: lru }
    batch: { size: 128, max_delay_ms: 50, split: popular, popular_min_rows: 4 }
    sinks:
      trainer: { listen: "127.0.0.1:0" }
hot: { top_k: 32, half_life_records: 1000000000 }
http: { listen: "127.0.0.1:0" }
log: { level: info }
""" % bootstrap)
    off = os.path.join(T, "off")
    subprocess.run([PIPEREC, "process", "--config", cfg, "--input", data, "--output", off,
                    "--no-progress"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    off2 = os.path.join(T, "off2")
    subprocess.run([PIPEREC, "process", "--config", cfg, "--input", data, "--output", off2,
                    "--no-progress", "--block-rows", "1000", "--threads", "2"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for name in ["recycled.npy"] + ["sparse/%s.values.npy" % n for n in FEATS]:
        if open(os.path.join(off, name), "rb").read() != open(os.path.join(off2, name), "rb").read():
            fail("%s depends on --block-rows / --threads" % name)
    off_rid = np.load(os.path.join(off, "dense.npy"))[:, 0].astype(np.int64)
    if list(off_rid) != list(range(N)):
        fail("offline rows are not the input rows in order")
    off_rows = []
    vals = {n: np.load(os.path.join(off, "sparse", n + ".values.npy")).tolist() for n in FEATS}
    lens = {n: np.load(os.path.join(off, "sparse", n + ".lengths.npy")) for n in FEATS}
    at = {n: np.concatenate(([0], np.cumsum(lens[n]))) for n in FEATS}
    for i in range(N):
        off_rows.append(tuple(tuple(vals[n][at[n][i]:at[n][i + 1]]) for n in FEATS))
    rec = np.load(os.path.join(off, "recycled.npy")).tolist()  # feature, row, index, number
    if len(rec) < 10:
        fail("only %d notices offline: the vocabularies did not evict" % len(rec))
    off_notice = {int(num): (int(f), int(r), int(ix)) for f, r, ix, num in rec}
    by_key = collections.defaultdict(list)  # (feature, index) -> sorted [(row, number)]
    for num, (f, r, ix) in off_notice.items():
        by_key[(f, ix)].append((r, num))
    for v in by_key.values():
        v.sort()

    rerr_path = os.path.join(T, "run.err")
    run = subprocess.Popen([PIPEREC, "run", "--config", cfg], stderr=open(rerr_path, "w"))
    procs.append(run)
    hp, tp = None, 0
    deadline = time.monotonic() + 30
    while hp is None and time.monotonic() < deadline:
        m = re.search(r"http on port (\d+)", open(rerr_path).read())
        hp = int(m.group(1)) if m else None
        time.sleep(0.05)
    while hp and not tp and time.monotonic() < deadline:
        tp = json.loads(http(hp, "/v1/status"))["pipelines"][0]["trainer_port"]
        time.sleep(0.05)
    if not tp:
        fail("no trainer port")

    where = {}          # rid -> (seq, row)
    note_at = {}        # number -> (seq, row, feature, index)
    seen, got, n_pop, pop_batches = set(), 0, 0, 0
    with pc.TrainerClient("127.0.0.1:%d" % tp, "p", credits=16) as c:
        deadline = time.monotonic() + 120
        while got < N and time.monotonic() < deadline:
            b = c.recv(1.0)
            if b is None:
                continue
            if b.sequence in seen:
                c.ack(b.sequence)
                continue
            seen.add(b.sequence)
            for col, idx, row, num in b.recycled:
                if num in note_at:
                    fail("notice %d sent twice" % num)
                note_at[num] = (b.sequence, row, col, idx)
            fv = {}
            for n in FEATS:
                v, ln = b.feature(n)
                fv[n] = (np.asarray(v).tolist(), np.concatenate(([0], np.cumsum(ln))))
            for i in range(b.rows):
                rid = int(b.dense[i][0])
                if rid in where:
                    fail("row %d received twice" % rid)
                where[rid] = (b.sequence, i)
                row = tuple(tuple(fv[n][0][fv[n][1][i]:fv[n][1][i + 1]]) for n in FEATS)
                if row != off_rows[rid]:
                    fail("row %d: %s, offline %s" % (rid, row, off_rows[rid]))
            got += b.rows
            if b.popular:
                n_pop += b.rows
                pop_batches += 1
            c.ack(b.sequence)
    if got != N or len(where) != N:
        fail("received %d rows of %d" % (got, N))
    if n_pop == 0 or n_pop == N:
        fail("popular rows: %d of %d (want both streams non-empty)" % (n_pop, N))
    if set(note_at) != set(off_notice):
        fail("notice numbers: %d streamed, %d offline" % (len(note_at), len(off_notice)))
    for num, (seq, row, col, idx) in note_at.items():
        if (col, idx) != (off_notice[num][0], off_notice[num][2]):
            fail("notice %d: (%d, %d), offline (%d, %d)" %
                 (num, col, idx, off_notice[num][0], off_notice[num][2]))
    # Streamed notices per (feature, index), in merged-stream order: the k-th
    # stands for the k-th offline one (its row: where the new value starts).
    st_key = collections.defaultdict(list)
    for num, (seq, row, col, idx) in sorted(note_at.items(), key=lambda x: x[1][:2]):
        st_key[(col, idx)].append((seq, row))
    if {k: len(v) for k, v in st_key.items()} != {k: len(v) for k, v in by_key.items()}:
        fail("streamed notices per (feature, index) differ from the offline ones")

    # Merged-stream order: a notice at (seq, row) applies before row `row`.
    def before(a, b_):  # position a strictly before position b_
        return a < b_
    for rid in range(N):
        pos = where[rid]
        for f, n in enumerate(FEATS):
            for ix in set(off_rows[rid][f]):
                lst = by_key.get((f, ix))
                if not lst:
                    continue
                k = bisect.bisect_right(lst, (rid, float("inf")))
                st = st_key[(f, ix)]
                if k > 0 and not st[k - 1] <= pos:
                    # the notice that gave ix its current value: at or before this row
                    fail("row %d at %s overtook the notice of %s index %d (new value from "
                         "row %d) at %s" % (rid, pos, n, ix, lst[k - 1][0], st[k - 1]))
                if k < len(lst) and not before(pos, st[k]):
                    # the next notice of ix: strictly after this row
                    fail("row %d at %s (old value of %s index %d) after its notice at %s" %
                         (rid, pos, n, ix, st[k]))
    run.terminate()
    if run.wait(30) != 0:
        fail("run exited %d" % run.returncode)
    print("test_popular_split_evict_json: ok (%d of %d rows popular in %d batches, %d notices)"
          % (n_pop, N, pop_batches, len(note_at)))
finally:
    cleanup()
