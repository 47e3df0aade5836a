#!/usr/bin/python3
"""test_weighted_lists.py — weighted list features (`weights:`, id-score
lists) end to end, against a NumPy/Python reference computed from the
events:

- `cats`: ids and scores in one list of objects, with holes (an object
  without the id drops its score, one without the score, or with null there,
  takes the default 0.25, a null element adds nothing), through vocab;
- `hist`: two parallel lists (ids and dwell times), keep the last 3, the
  ids through hex2int (an empty string becomes missing and is dropped with
  its weight) and hash;
- `cat_h`: the same ids as `cats`, unweighted (holes never reach it);
- `aff`: a map read by its keys (`list: { from: keys }`), each weighted by
  its value (`weights: { from: values }`, null takes the default 0.5), keys
  repeated in the raw JSON (first place, last value: Python's json.loads is
  the reference), keep the last 3, through vocab;
- `tags`: a tag set, the keys of a map of anything, through hash.

Offline (`piperec process`): values, lengths and sparse/<name>.weights.npy
equal the reference; meta.json's weighted_keys; the bad events (a weights
list of another length, an id without a weight and no default, a string or
a bool weight, a weight beyond float32) are rejected with the reason and
the feature named, and so are a map's string value and a list where the
map belongs; 1 and 4 threads write the same bytes.

Streaming (`piperec run`, one partition, engine.threads 1 and 3, half the
events preloaded and the rest produced while it reads): the files sink's
rolls equal the offline output byte for byte, weights included; the
dead-letter topic holds the bad events in input order; `piperec consume`
(the protobuf layout at one run, the raw layout at the other) writes the
same weights.npy and names the weighted features.
Env (pr_script_test): PIPEREC, PR_SOURCE_DIR, PR_TMP.
"""
import glob
import json
import os
import random
import subprocess
import time

import numpy as np
from svc_run import (broker, dead_letters, fail, json_run_config, metric, produce_json, rolls,
                     start, trainer_port)

PIPEREC = os.environ["PIPEREC"]
T = os.environ["PR_TMP"]
N = 1500
SEED = 0x7069706572656300  # the hash operator's seed (docs/configuration.md, "Hash bytes")
procs = []

SCHEMA = """    schema:
      labels: [ { name: click, path: click } ]
      sparse:
        - { name: user, path: user, ops: [vocab] }
        - { name: cats, path: cats.id, list: { max_len: 4 },
            weights: { path: cats.score, default: 0.25 }, ops: [vocab] }
        - { name: hist, path: hist, list: { max_len: 3, keep: last },
            weights: { path: dwell }, ops: [hex2int, { hash: 1000 }] }
        - { name: cat_h, path: cats.id, list: { max_len: 8 }, ops: [ { hash: 50 } ] }
        - { name: aff, path: u.aff, list: { max_len: 3, keep: last, from: keys },
            weights: { from: values, default: 0.5 }, ops: [vocab] }
        - { name: tags, path: tags, list: { max_len: 6, from: keys }, ops: [ { hash: 70 } ] }
    transform: { vocab: { profile: default } }
"""


def config(topic="w", outdir="/nonexistent", bootstrap="127.0.0.1:1", threads=1):
    return json_run_config(SCHEMA, topic, outdir, bootstrap, threads)


def events():
    """(every line, the good events, the bad lines) with bad ones among them."""
    r = random.Random(5)
    lines, good, bad = [], [], []
    for i in range(N):
        e = {"click": i % 3 == 0, "user": "u%d" % r.randrange(150)}
        if r.random() < 0.8:
            cats = []
            for _ in range(r.randrange(7)):
                k = r.random()
                if k < 0.06:
                    cats.append(None)
                    continue
                o = {}
                if k > 0.12:
                    o["id"] = "c%d" % r.randrange(40)
                if k > 0.25:
                    o["score"] = round(r.uniform(-2, 5), 3) if k < 0.9 else None
                cats.append(o)
            e["cats"] = cats
        if r.random() < 0.7:
            n = r.randrange(6)
            e["hist"] = [r.choice(["", "%x" % r.randrange(1 << 20)]) if r.random() < 0.1
                         else "%x" % r.randrange(1 << 20) for _ in range(n)]
            e["dwell"] = [r.choice([r.randrange(100), round(r.uniform(0, 30), 2)])
                          for _ in range(n)]
        line = json.dumps(e)[:-1] + maps(r) + "}"
        lines.append(line + "\n")
        good.append(json.loads(line))
        if i in (7, 700, 1400):
            for b in ('{"click": 1, "user": "b", "hist": ["a", "b"], "dwell": [1]}',
                      '{"click": 1, "user": "b", "hist": ["a"]}',
                      '{"click": 1, "user": "b", "cats": [{"id": "x", "score": "0.5"}]}',
                      '{"click": 1, "user": "b", "hist": ["a"], "dwell": [true]}',
                      '{"click": 1, "user": "b", "hist": ["a"], "dwell": [1e300]}',
                      '{"click": 1, "user": "b", "u": {"aff": {"x": 1, "y": "2"}}}',
                      '{"click": 1, "user": "b", "u": {"aff": ["x"]}}'):
                lines.append(b + "\n")
                bad.append(b)
    return lines, good, bad


def maps(r):
    """', "u": {"aff": {...}}, "tags": {...}' written by hand: a key may be
    given twice (the JSON reference, json.loads, keeps its first place and
    its last value)."""
    out = ""
    if r.random() < 0.85:
        ents = []
        for _ in range(r.randrange(6)):
            v = r.random()
            ents.append('"k%d": %s' % (r.randrange(25), "null" if v < 0.1 else
                                       json.dumps(round(r.uniform(-3, 3), 3) if v < 0.6
                                                  else r.randrange(10))))
        out += ', "u": {"aff": {%s}}' % ", ".join(ents)
    if r.random() < 0.6:
        out += ', "tags": {%s}' % ", ".join(
            '"t%d": %s' % (r.randrange(12), r.choice(["true", "1", "[1, {}]", "null", '"x"']))
            for _ in range(r.randrange(5)))
    return out


def f32(x):
    return float(np.float32(x))


def reference(good):
    """{feature: (values int64, lengths int32, weights float32 or None)}."""
    vocab = {"user": {}, "cats": {}, "aff": {}}

    def index(f, key):
        return vocab[f].setdefault(key, len(vocab[f]) + 2)

    import xxhash
    out = {k: ([], [], []) for k in ("user", "cats", "hist", "cat_h", "aff", "tags")}
    for e in good:
        out["user"][0].append(index("user", e["user"]))
        out["user"][1].append(1)
        cats = [o for o in e.get("cats") or [] if o is not None and o.get("id") is not None]
        ids = [o["id"] for o in cats][:4]
        ws = [0.25 if o.get("score") is None else o["score"] for o in cats][:4]
        out["cats"][0].extend(index("cats", c) for c in ids)
        out["cats"][1].append(len(ids))
        out["cats"][2].extend(f32(w) for w in ws)
        hs = [o["id"] for o in cats][:8]
        out["cat_h"][0].extend(xxhash.xxh64_intdigest(c.encode(), seed=SEED) % 50 for c in hs)
        out["cat_h"][1].append(len(hs))
        pairs = [(int(h, 16), w) for h, w in zip(e.get("hist") or [], e.get("dwell") or [])
                 if h != ""][-3:]
        out["hist"][0].extend(hash_int(v) % 1000 for v, _ in pairs)
        out["hist"][1].append(len(pairs))
        out["hist"][2].extend(f32(w) for _, w in pairs)
        aff = list((e.get("u") or {}).get("aff", {}).items())[-3:]
        out["aff"][0].extend(index("aff", k) for k, _ in aff)
        out["aff"][1].append(len(aff))
        out["aff"][2].extend(f32(0.5 if w is None else w) for _, w in aff)
        tags = list(e.get("tags", {}))[:6]
        out["tags"][0].extend(xxhash.xxh64_intdigest(t.encode(), seed=SEED) % 70 for t in tags)
        out["tags"][1].append(len(tags))
    return {k: (np.array(v, np.int64), np.array(n, np.int32),
                np.array(w, np.float32) if k in ("cats", "hist", "aff") else None)
            for k, (v, n, w) in out.items()}


def hash_int(v):
    """The hash operator of an integer: XXH64 of its 8 little-endian bytes."""
    import xxhash
    return xxhash.xxh64_intdigest(int(v).to_bytes(8, "little"), seed=SEED)


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


def check_against(d, want, hashed):
    for f, (v, n, w) in want.items():
        if f in ("hist", "cat_h", "tags") and not hashed:
            continue
        got_v = np.load(os.path.join(d, "sparse", f + ".values.npy"))
        got_n = np.load(os.path.join(d, "sparse", f + ".lengths.npy"))
        if not np.array_equal(got_n, n):
            fail("%s: lengths differ from the reference (row %d)" %
                 (f, int(np.argmax(got_n != n)) if got_n.shape == n.shape else -1))
        if not np.array_equal(got_v, v):
            fail("%s: values differ from the reference" % f)
        wp = os.path.join(d, "sparse", f + ".weights.npy")
        if w is None:
            if os.path.exists(wp):
                fail("%s: unweighted, yet %s exists" % (f, wp))
            continue
        got_w = np.load(wp)
        if got_w.dtype != np.float32 or got_w.tobytes() != w.tobytes():
            k = int(np.argmax(got_w != w)) if got_w.shape == w.shape else -1
            fail("%s: weights differ from the reference at %d (%s vs %s)" %
                 (f, k, got_w.shape, w.shape))


def offline(data, good, bad):
    log = process(data, os.path.join(T, "off1"), 1)
    process(data, os.path.join(T, "off4"), 4)
    for n in npy(os.path.join(T, "off1")):
        a = np.load(os.path.join(T, "off1", n))
        b = np.load(os.path.join(T, "off4", n))
        if a.tobytes() != b.tobytes() or a.shape != b.shape:
            fail("process: %s differs between 1 and 4 threads" % n)
    want = reference(good)
    check_against(os.path.join(T, "off1"), want, hashed=True)
    meta = json.load(open(os.path.join(T, "off1", "meta.json")))
    if meta.get("weighted_keys") != ["cats", "hist", "aff"]:
        fail("meta.json weighted_keys %r" % meta.get("weighted_keys"))
    rej = [ln.split("\t") for ln in open(os.path.join(T, "off1", "rejects.tsv"))]
    if [r[3].rstrip("\n") for r in rej] != bad:
        fail("rejects.tsv holds %d records, not the %d bad ones in order" % (len(rej), len(bad)))
    reasons = [r[1] for r in rej]
    if reasons.count("number_out_of_range") != 3 or reasons.count("wrong_type") != len(bad) - 3:
        fail("reject reasons %r" % reasons)
    says = ["1 numbers for 2 ids", "no default", "a string", "a bool", "beyond float32",
            "aff (u.aff): weights (u.aff): a weight is a string", "u.aff: a map (an object)"]
    for r, s in zip(rej, says):
        if s not in r[2] or ("weights" not in r[2] and "map" not in r[2]):
            fail("the reject does not say why: %r (expected %r)" % (r[2], s))
    nw = sum(len(w) for _, _, w in want.values() if w is not None)
    print("offline: %d rows, %d weights = the reference, 1 thread = 4, %d rejects (%s)" %
          (len(good), nw, len(bad), log.splitlines()[0]))
    return os.path.join(T, "off1")


def consume(topic, threads, layout):
    cons_dir = os.path.join(T, "cons%d" % threads)
    # stops 15 s after its last batch (the second half's producer may start late)
    cons = subprocess.Popen([PIPEREC, "consume", "--connect",
                             "127.0.0.1:%d" % trainer_port(topic), "--pipeline", "p",
                             "--output", cons_dir, "--layout", layout, "--quiet",
                             "--idle-timeout-ms", "15000"],
                            stdout=subprocess.DEVNULL, stderr=open(cons_dir + ".err", "w"))
    procs.append(cons)
    return cons, cons_dir


def check_stream(topic, out, cons_dir, layout, want, bad, bootstrap):
    for n in want:
        got = np.concatenate([np.load(os.path.join(r, n)) for r in rolls(out)])
        if got.tobytes() != want[n].tobytes() or got.shape != want[n].shape:
            fail("%s: %s differs from the offline output" % (topic, n))
    for f in ("cats", "hist", "aff"):
        n = "sparse/%s.weights.npy" % f
        if np.load(os.path.join(cons_dir, n)).tobytes() != want[n].tobytes():
            fail("%s: consume's %s (%s layout) differs" % (topic, n, layout))
    if os.path.exists(os.path.join(cons_dir, "sparse", "cat_h.weights.npy")):
        fail("%s: consume wrote weights for an unweighted feature" % topic)
    cmeta = json.load(open(os.path.join(cons_dir, "meta.json")))
    if cmeta.get("weighted_keys") != ["cats", "hist", "aff"]:
        fail("%s: consume's meta weighted_keys %r" % (topic, cmeta.get("weighted_keys")))
    dlq = dead_letters(bootstrap, topic + "-dlq")
    if dlq != bad:
        fail("%s: dead letters %r" % (topic, dlq[:3]))


def streaming(lines, good, bad, ref):
    bootstrap = broker(PIPEREC, 1, "w1,w1-dlq,w3,w3-dlq", procs)
    half = os.path.join(T, "half1.jsonl")
    rest = os.path.join(T, "half2.jsonl")
    open(half, "w").writelines(lines[:len(lines) // 2])
    open(rest, "w").writelines(lines[len(lines) // 2:])
    want = {n: np.load(os.path.join(ref, n)) for n in npy(ref)}
    for threads, layout in ((1, "protobuf"), (3, "raw")):
        topic = "w%d" % threads
        produce_json(PIPEREC, bootstrap, topic, half)
        out = os.path.join(T, "out%d" % threads)
        cfg = os.path.join(T, topic + ".yaml")
        open(cfg, "w").write(config(topic, out, bootstrap, threads))
        run, hp = start(PIPEREC, cfg, topic, procs)
        cons, cons_dir = consume(topic, threads, layout)
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
        check_stream(topic, out, cons_dir, layout, want, bad, bootstrap)
        print("streaming: engine.threads %d: rolls = process (weights too), consume (%s layout) "
              "= process, %d dead letters in order" % (threads, layout, len(bad)))


try:
    lines, good, bad = events()
    data = os.path.join(T, "events.jsonl")
    open(data, "w").writelines(lines)
    ref = offline(data, good, bad)
    streaming(lines, good, bad, ref)
    print("test_weighted_lists: ok")
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
