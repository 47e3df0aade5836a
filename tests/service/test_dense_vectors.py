#!/usr/bin/python3
"""test_dense_vectors.py — dense vector features (`dim: N`) end to end: an
embedding of 300 floats (more columns than the Criteo layout's 256), a
4-number vector through log1p, a 2-number one, and one of 2 float32 in
base64 (encoding f32), beside scalar features and a list feature over a
list of objects.

Offline (`piperec process`): every value equals a NumPy reference computed
from the events (defaults for absent, null or empty vectors; clip; log1p);
meta.json names the columns NAME[0]..NAME[dim-1] in schema order; the bad
vectors (a wrong length, a string element, a null element, a value beyond
float32, a number where a list belongs, objects in the list, 4 bytes
where 8 belong, text that is not base64) are rejected wrong_type /
number_out_of_range with the feature named; 1 and 4 threads write the same
bytes. `process --fit` pools a vector's elements into one mean and std.

Streaming (`piperec run`, one partition, engine.threads 1 and 3, half the
events preloaded and the rest produced while it reads): the files sink's
rolls equal the offline output byte for byte; the dead-letter topic holds
the bad events in input order; `piperec consume` over the trainer port (the
protobuf layout at one run, the raw layout at the other) writes the same
dense.npy and names the same columns.
Env (pr_script_test): PIPEREC, PR_SOURCE_DIR, PR_TMP.
"""
import base64
import glob
import json
import os
import random
import re
import struct
import subprocess
import time

import numpy as np
from svc_run import (broker, dead_letters, fail, json_run_config, metric, produce_json, rolls,
                     start, trainer_port)

PIPEREC = os.environ["PIPEREC"]
T = os.environ["PR_TMP"]
N = 1500
DIM = 300
procs = []

SCHEMA = """    schema:
      labels: [ { name: click, path: click } ]
      dense:
        - { name: price, path: price, default: 0 }
        - { name: emb, path: item.emb, dim: %d, default: 0.5, ops: [ { clip: [-1, 1] } ] }
        - { name: cnt, path: counts, dim: 4, ops: [ neg2zero, log1p ] }
        - { name: pos, path: pos, dim: 2, default: -1 }
        - { name: fb, path: fb, dim: 2, encoding: f32 }
      sparse:
        - { name: user, path: user, ops: [vocab] }
        - { name: imp, path: imps.p, list: { max_len: 4 }, ops: [ { hash: 100 } ] }
""" % DIM


def config(topic="v", outdir="/nonexistent", bootstrap="127.0.0.1:1", threads=1):
    return json_run_config(SCHEMA, topic, outdir, bootstrap, threads)


def events():
    """(every line, the good events, the bad lines) with bad ones among them."""
    r = random.Random(11)
    lines, good, bad = [], [], []
    for i in range(N):
        e = {"click": i % 3 == 0, "user": "u%d" % r.randrange(200), "price": r.randrange(100)}
        k = r.random()
        if k < 0.8:
            e["item"] = {"emb": [round(r.uniform(-1.5, 1.5), 2) for _ in range(DIM)]}
        elif k < 0.87:
            e["item"] = {"emb": None}
        elif k < 0.94:
            e["item"] = {"emb": []}
        if r.random() < 0.9:
            e["counts"] = [r.choice([-3, 0, 1, 7, 250]) for _ in range(4)]
        if r.random() < 0.7:
            e["pos"] = [r.randrange(10), r.randrange(10)]
        if r.random() < 0.5:
            e["imps"] = [{"p": r.randrange(10)} for _ in range(r.randrange(4))]
        if r.random() < 0.6:
            e["fb"] = base64.b64encode(struct.pack("<2f", r.uniform(-9, 9), i)).decode()
        lines.append(json.dumps(e) + "\n")
        good.append(e)
        if i in (5, 600, 1200):
            for b in ('{"click": 1, "user": "b", "counts": [1, 2, 3]}',
                      '{"click": 1, "user": "b", "counts": [1, "2", 3, 4]}',
                      '{"click": 1, "user": "b", "counts": [1, null, 3, 4]}',
                      '{"click": 1, "user": "b", "pos": [1e300, 2]}',
                      '{"click": 1, "user": "b", "counts": 5}',
                      '{"click": 1, "user": "b", "pos": [1]}',
                      '{"click": 1, "user": "b", "pos": [{"p": 1}, {"p": 2}]}',
                      '{"click": 1, "user": "b", "fb": "AACAPw=="}',
                      '{"click": 1, "user": "b", "fb": "not base64"}'):
                lines.append(b + "\n")
                bad.append(b)
    return lines, good, bad


def reference(good):
    """The dense matrix the schema makes of the good events (float32)."""
    rows = []
    for e in good:
        emb = (e.get("item") or {}).get("emb") or [0.5] * DIM
        cnt = e.get("counts") or [0] * 4
        pos = e.get("pos") or [-1, -1]
        fb = list(struct.unpack("<2f", base64.b64decode(e["fb"]))) if e.get("fb") else [0, 0]
        rows.append([e["price"]] + [min(max(x, -1), 1) for x in emb] +
                    [np.log1p(max(float(x), 0.0)) for x in cnt] + pos + fb)
    return np.array(rows, dtype=np.float64).astype(np.float32)


def names():
    return (["price"] + ["emb[%d]" % k for k in range(DIM)] + ["cnt[%d]" % k for k in range(4)] +
            ["pos[0]", "pos[1]", "fb[0]", "fb[1]"])


def npy(d):
    return sorted(os.path.relpath(p, d) for p in glob.glob(os.path.join(d, "**", "*.npy"),
                                                          recursive=True)
                  if "/vocab" not in p)


def process(data, out, threads):
    cfg = os.path.join(T, "off.yaml")
    open(cfg, "w").write(config())
    p = subprocess.run([PIPEREC, "process", "--config", cfg, "--input", data, "--output", out,
                        "--threads", str(threads), "--no-progress"], capture_output=True,
                       text=True)
    if p.returncode != 0:
        fail("process: %s" % p.stderr)
    return p.stderr


def offline(data, good, bad):
    log = process(data, os.path.join(T, "off1"), 1)
    process(data, os.path.join(T, "off4"), 4)
    for n in npy(os.path.join(T, "off1")):
        a = np.load(os.path.join(T, "off1", n))
        b = np.load(os.path.join(T, "off4", n))
        if a.tobytes() != b.tobytes() or a.shape != b.shape:
            fail("process: %s differs between 1 and 4 threads" % n)
    d = np.load(os.path.join(T, "off1", "dense.npy"))
    want = reference(good)
    if d.shape != want.shape:
        fail("dense.npy %s, expected %s" % (d.shape, want.shape))
    exact = np.ones(want.shape[1], bool)
    exact[1 + DIM:1 + DIM + 4] = False            # log1p: to the last bit of libm
    if not np.array_equal(d[:, exact], want[:, exact]):
        r, c = np.argwhere(d[:, exact] != want[:, exact])[0]
        fail("dense.npy row %d column %d: %r, expected %r" % (r, c, d[:, exact][r, c],
                                                             want[:, exact][r, c]))
    if not np.allclose(d[:, ~exact], want[:, ~exact], rtol=1e-6, atol=0):
        fail("dense.npy: the log1p vector differs from NumPy's")
    meta = json.load(open(os.path.join(T, "off1", "meta.json")))
    if meta["dense_names"] != names() or meta["n_dense"] != len(names()):
        fail("meta.json dense_names %r (n_dense %r)" % (meta["dense_names"][:6], meta["n_dense"]))
    rej = [ln.split("\t") for ln in open(os.path.join(T, "off1", "rejects.tsv"))]
    reasons = [r[1] for r in rej]
    if [r[3].rstrip("\n") for r in rej] != bad:
        fail("rejects.tsv holds %d records, not the %d bad ones in order" % (len(rej), len(bad)))
    if reasons.count("number_out_of_range") != 3 or reasons.count("wrong_type") != len(bad) - 3:
        fail("reject reasons %r" % reasons)
    if "cnt (counts): a vector of 4 numbers expected, got 3" not in rej[0][2]:
        fail("the reject does not say why: %r" % rej[0][2])
    print("offline: %d rows x %d dense columns = NumPy's, 1 thread = 4, %d rejects (%s)" %
          (len(d), d.shape[1], len(bad), log.splitlines()[0]))
    return os.path.join(T, "off1")


def fit(data, good):
    cfg = os.path.join(T, "fit.yaml")
    open(cfg, "w").write(config().replace("[ neg2zero, log1p ]",
                                          "[ neg2zero, log1p, { standardize: { mean: 0, std: 1 } } ]"))
    p = subprocess.run([PIPEREC, "process", "--config", cfg, "--input", data, "--fit"],
                       capture_output=True, text=True)
    m = re.search(r"cnt: \{ standardize: \{ mean: (\S+), std: (\S+) \} \}", p.stdout)
    if p.returncode != 0 or not m:
        fail("fit: %s %s" % (p.stdout, p.stderr))
    vals = np.array([np.float32(np.log1p(max(float(x), 0.0)))
                     for e in good if e.get("counts") for x in e["counts"]], np.float64)
    mean, std = float(m.group(1)), float(m.group(2))
    if abs(mean - vals.mean()) > 1e-9 * max(1, abs(vals.mean())) or \
            abs(std - vals.std()) > 1e-9 * max(1, vals.std()):
        fail("fit: mean %r std %r, NumPy %r %r over %d values" % (mean, std, vals.mean(),
                                                                 vals.std(), len(vals)))
    print("fit: a vector's %d elements pooled: mean %.6g std %.6g" % (len(vals), mean, std))


def streaming(lines, good, bad, ref):
    bootstrap = broker(PIPEREC, 1, "v1,v1-dlq,v3,v3-dlq", procs)
    half = os.path.join(T, "half1.jsonl")
    rest = os.path.join(T, "half2.jsonl")
    open(half, "w").writelines(lines[:len(lines) // 2])
    open(rest, "w").writelines(lines[len(lines) // 2:])
    want = {n: np.load(os.path.join(ref, n)) for n in npy(ref)}
    for threads, layout in ((1, "protobuf"), (3, "raw")):
        topic = "v%d" % threads
        produce_json(PIPEREC, bootstrap, topic, half)
        out = os.path.join(T, "out%d" % threads)
        cfg = os.path.join(T, topic + ".yaml")
        open(cfg, "w").write(config(topic, out, bootstrap, threads))
        run, hp = start(PIPEREC, cfg, topic, procs)
        cons_dir = os.path.join(T, "cons%d" % threads)
        # consume stops 15 s after its last batch: the second half's producer
        # may take seconds to start on a loaded machine (with 3 s it once read
        # only the preloaded half under a full ctest beside a CI)
        cons = subprocess.Popen([PIPEREC, "consume", "--connect",
                                 "127.0.0.1:%d" % trainer_port(topic), "--pipeline", "p",
                                 "--output", cons_dir, "--layout", layout, "--quiet",
                                 "--idle-timeout-ms", "15000"],
                                stdout=subprocess.DEVNULL, stderr=open(cons_dir + ".err", "w"))
        procs.append(cons)
        produce_json(PIPEREC, bootstrap, topic, rest, 3000)
        deadline = time.monotonic() + 90
        while metric(hp, "piperec_records_out_total") < len(good) and \
                time.monotonic() < deadline:
            time.sleep(0.2)
        if cons.wait(60) != 0:
            fail("%s: consume exited %d" % (topic, cons.returncode))
        rejected = metric(hp, "piperec_rejected_records_total")
        run.terminate()
        if run.wait(60) != 0:
            fail("%s: run exited %d" % (topic, run.returncode))
        if rejected != len(bad):
            fail("%s: %d rejected, expected %d" % (topic, rejected, len(bad)))
        got = {}
        for n in want:
            got[n] = np.concatenate([np.load(os.path.join(r, n)) for r in rolls(out)])
            if got[n].tobytes() != want[n].tobytes() or got[n].shape != want[n].shape:
                fail("%s: %s differs from the offline output" % (topic, n))
        cd = np.load(os.path.join(cons_dir, "dense.npy"))
        if cd.tobytes() != want["dense.npy"].tobytes():
            fail("%s: consume's dense.npy (%s layout) differs: %s" % (topic, layout, cd.shape))
        cmeta = json.load(open(os.path.join(cons_dir, "meta.json")))
        if cmeta.get("dense_names") != names():
            fail("%s: consume's meta names %r" % (topic, cmeta.get("dense_names", [])[:5]))
        dlq = dead_letters(bootstrap, topic + "-dlq")
        if dlq != bad:
            fail("%s: dead letters %r" % (topic, dlq[:3]))
        print("streaming: engine.threads %d: rolls = process, consume (%s layout) = process, "
              "%d dead letters in order" % (threads, layout, len(dlq)))


try:
    lines, good, bad = events()
    data = os.path.join(T, "events.jsonl")
    open(data, "w").writelines(lines)
    ref = offline(data, good, bad)
    fit(data, good)
    streaming(lines, good, bad, ref)
    print("test_dense_vectors: ok")
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
