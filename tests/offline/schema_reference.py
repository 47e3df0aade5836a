#!/usr/bin/python3
"""schema_reference.py — `piperec process` with a declared feature schema
(JSON lines -> the offline layout) against an independent Python reference.

Generates a clickstream of JSON lines (string and integer ids, nested fields,
lists longer than max_len, absent and empty lists, missing fields with and
without defaults, a few bad records), runs the binary, and recomputes every
output here from the documented semantics (docs/configuration.md, "Feature
schema"; pr_engine.h):
  - ids (the one rule, offline and streaming alike): a JSON integer is an
    integer, a JSON string is a string, even one that reads as a number
    ("42" is not 42); vocabulary key of an integer = its int64 bits, of a
    string = XXH64(bytes, seed "piperec\\0"); a JSON number with a fraction
    or an exponent (4.0) on an id path rejects the record as wrong_type, even
    where a dense feature reads the same path
  - vocab: per feature, indices in order of first appearance, list elements
    left to right; profile default: 0 = missing, first index 2; profile dlrm:
    a missing single value is key 0, first index 0
  - hash N: XXH64(value bytes) mod N (integer: 8 bytes little-endian)
  - cross: XXH64 over, per value, a tag byte (2 integer, 3 string), for a
    string its 4-byte little-endian length, then the value's bytes
  - bucketize: 1 + number of boundaries <= x; missing stays 0
  - hour_of_day: 1 + UTC hour; modulus: v mod N
  - lists: keep max_len values, first or last; absent list length 0
  - dense: fill/default, clip, log1p, float32; missing without default 0;
    age: (event time - the time) in seconds, a fill after it
Checks labels.npy, dense.npy, sparse/<f>.values.npy / .lengths.npy, the
rejected line numbers, and that --threads 1 and 4 and two block sizes give
byte-identical files. The id rule on its own small schema (a "42" string
and the integer 42 are two ids; 4.0 on an id path that a dense feature
also reads is wrong_type), with the reasons in rejects.tsv and the summary
line. Both vocabulary profiles, and eviction lru on the list
feature (values and recycled.npy: feature, row, index, number, against a
Python LRU), and count_mode two_pass with min_count 3.

usage: schema_reference.py   ($PIPEREC, $PR_TMP)
"""
import glob
import json
import math
import os
import random
import struct
import subprocess
import sys

import numpy as np
import xxhash

SEED = 0x7069706572656300
M64 = (1 << 64) - 1

CONFIG = """pipelines:
  - name: clicks
    schema:
      event_time: {{ path: ts, unit: ms }}
      labels:
        - {{ name: click, path: label.click }}
        - {{ name: purchase, path: label.purchase, default: 0 }}
      dense:
        - {{ name: price, path: item.price, default: 0, ops: [ {{ clip: [0, 1000] }}, log1p ] }}
        - {{ name: item_age, path: item.published, ops: [ age, {{ fill: -1 }} ] }}
      sparse:
        - {{ name: user, path: user.id, ops: [vocab] }}
        - {{ name: item, path: item.id, ops: [ {{ modulus: 1000 }}, vocab ] }}
        - {{ name: category, path: item.category, default: unknown, ops: [vocab] }}
        - {{ name: tags, path: item.tags, list: {{ max_len: 3 }}, ops: [ {{ hash: 1000 }} ] }}
        - {{ name: history, path: history, list: {{ max_len: 5, keep: last }}, ops: [vocab] }}
        - {{ name: age_bucket, path: user.age_days, ops: [ {{ bucketize: [30, 90, 365] }} ] }}
        - {{ name: hour, path: ts, ops: [hour_of_day, vocab] }}
        - {{ name: cat_x_device, cross: [item.category, context.device], ops: [ {{ hash: 5000 }} ] }}
    transform:
      vocab: {{ profile: {profile} }}
engine: {{ backend: cpu }}
"""

SPARSE = ["user", "item", "category", "tags", "history", "age_bucket", "hour", "cat_x_device"]


def gen(n, rng):
    """JSON lines and the parsed events (None for a line that must be rejected)."""
    lines, events = [], []
    cats = ["shoes", "hats", "bags", "42", "socks"]
    for i in range(n):
        if i % 97 == 13:
            lines.append('{"ts": 1732615200000, "user": {"id": {"x": 1}}}')  # wrong type
            events.append(None)
            continue
        if i % 113 == 50:
            lines.append('{"ts": 17, "user": ')  # truncated
            events.append(None)
            continue
        e = {"ts": 1732615200000 + i * 3_600_123 // 7}
        if rng.random() < 0.9:
            uid = rng.randrange(40)
            e["user"] = {"id": uid if uid % 3 else "u%d" % uid}
            if rng.random() < 0.7:
                e["user"]["age_days"] = rng.randrange(0, 800)
        item = {"id": rng.randrange(5000)}
        if rng.random() < 0.8:
            item["category"] = rng.choice(cats)
        if rng.random() < 0.7:
            item["price"] = round(rng.uniform(-5, 1500), 2)
        if rng.random() < 0.6:
            item["published"] = e["ts"] - rng.randrange(-10**6, 10**10)
        r = rng.random()
        if r < 0.6:
            item["tags"] = ["t%d" % rng.randrange(20) for _ in range(rng.randrange(0, 6))]
        e["item"] = item
        if rng.random() < 0.5:
            e["context"] = {"device": rng.choice(["ios", "android", "web"])}
        r = rng.random()
        if r < 0.7:
            e["history"] = [rng.randrange(60) for _ in range(rng.randrange(0, 9))]
        elif r < 0.8:
            e["history"] = []
        e["label"] = {"click": rng.randrange(2)}
        if rng.random() < 0.5:
            e["label"]["purchase"] = rng.randrange(2)
        lines.append(json.dumps(e))
        events.append(e)
    return lines, events


def get(e, path):
    for k in path.split("."):
        if not isinstance(e, dict) or k not in e:
            return None
        e = e[k]
    return e


def as_id(v):
    """('int', value) or ('str', bytes): the JSON type decides, never the text."""
    if isinstance(v, int):
        return ("int", v)
    return ("str", v.encode())


def key_of(idv):
    t, v = idv
    return v & M64 if t == "int" else xxhash.xxh64_intdigest(v, seed=SEED)


def value_bytes(idv):
    t, v = idv
    return struct.pack("<q", v) if t == "int" else v


def cross_bytes(vals):
    out = b""
    for t, v in vals:
        if t == "int":
            out += b"\x02" + struct.pack("<q", v)
        else:
            out += b"\x03" + struct.pack("<I", len(v)) + v
    return out


class Vocab:
    def __init__(self, profile):
        self.first = 2 if profile == "default" else 0
        self.profile = profile
        self.map = {}

    def index(self, key):
        """key None = missing."""
        if key is None:
            if self.profile == "default":
                return 0
            key = 0
        if key not in self.map:
            self.map[key] = self.first + len(self.map)
        return self.map[key]


def reference(events, profile):
    voc = {f: Vocab(profile) for f in ("user", "item", "category", "history", "hour")}
    labels, dense = [], []
    vals = {f: [] for f in SPARSE}
    lens = {f: [] for f in SPARSE}

    def single(f, v):
        vals[f].append(v)
        lens[f].append(1)

    for e in events:
        if e is None:
            continue
        p = get(e, "label.purchase")
        labels.append([float(get(e, "label.click")), float(p if p is not None else 0)])
        price = get(e, "item.price")
        x = min(max(float(price if price is not None else 0), 0.0), 1000.0)
        pub = get(e, "item.published")
        dense.append([math.log1p(x), -1.0 if pub is None else (e["ts"] - pub) / 1000.0])
        u = get(e, "user.id")
        single("user", voc["user"].index(None if u is None else key_of(as_id(u))))
        it = as_id(get(e, "item.id"))
        single("item", voc["item"].index((it[1] & M64) % 1000))
        c = get(e, "item.category")
        single("category", voc["category"].index(key_of(as_id(c if c is not None else "unknown"))))
        tags = (get(e, "item.tags") or [])[:3]
        for t in tags:
            vals["tags"].append(xxhash.xxh64_intdigest(value_bytes(as_id(t)), seed=SEED) % 1000)
        lens["tags"].append(len(tags))
        hist = (get(e, "history") or [])[-5:]
        for h in hist:
            vals["history"].append(voc["history"].index(key_of(as_id(h))))
        lens["history"].append(len(hist))
        age = get(e, "user.age_days")
        single("age_bucket", 0 if age is None else 1 + sum(1 for b in (30, 90, 365) if b <= age))
        hour = 1 + (e["ts"] // 1000 // 3600) % 24
        single("hour", voc["hour"].index(hour))
        dev = get(e, "context.device")
        if c is None or dev is None:
            single("cat_x_device", 0)
        else:
            h = xxhash.xxh64_intdigest(cross_bytes([as_id(c), as_id(dev)]), seed=SEED)
            single("cat_x_device", xxhash.xxh64_intdigest(struct.pack("<Q", h), seed=SEED) % 5000)
    return labels, dense, vals, lens


def run(piperec, cfg, inp, out, threads, block_rows):
    cmd = [piperec, "process", "--config", cfg, "--input", inp, "--output", out,
           "--threads", str(threads), "--block-rows", str(block_rows), "--no-progress"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("FAIL: %s\n%s%s" % (" ".join(cmd), p.stdout, p.stderr))


def check(out, events, profile):
    labels, dense, vals, lens = reference(events, profile)
    n = len(labels)
    got = np.load(os.path.join(out, "labels.npy"))
    assert got.dtype == np.float32 and got.shape == (n, 2), (got.dtype, got.shape)
    assert np.array_equal(got, np.array(labels, dtype=np.float32)), "labels differ"
    got = np.load(os.path.join(out, "dense.npy"))
    assert got.dtype == np.float32 and got.shape == (n, 2), (got.dtype, got.shape)
    assert np.allclose(got, np.array(dense, dtype=np.float32), rtol=1e-6, atol=0), "dense"
    for f in SPARSE:
        v = np.load(os.path.join(out, "sparse", f + ".values.npy"))
        ln = np.load(os.path.join(out, "sparse", f + ".lengths.npy"))
        assert v.dtype == np.int64 and ln.dtype == np.int32, (f, v.dtype, ln.dtype)
        assert ln.shape == (n,), (f, ln.shape)
        if not np.array_equal(ln, np.array(lens[f], dtype=np.int32)):
            sys.exit("FAIL: %s lengths differ: %s vs %s" % (f, ln[:20], lens[f][:20]))
        want = np.array(vals[f], dtype=np.int64)
        if not np.array_equal(v, want):
            bad = np.nonzero(v[:len(want)] != want[:len(v)])[0]
            sys.exit("FAIL: %s values differ (%d vs %d values, first at %s): %s vs %s"
                     % (f, len(v), len(want), bad[:3], v[bad[:3]], want[bad[:3]]))
    rej = [int(l.split("\t")[0]) for l in open(os.path.join(out, "rejects.tsv"))]
    want = [i + 1 for i, e in enumerate(events) if e is None]
    assert rej == want, (rej, want)


def files(out):
    res = {}
    for p in sorted(glob.glob(os.path.join(out, "**", "*"), recursive=True)):
        if os.path.isfile(p):
            res[os.path.relpath(p, out)] = open(p, "rb").read()
    return res


def lru_reference(events, cap):
    """history's values and notices under eviction lru with `cap` indices
    (profile default: 2 reserved). A new value takes the next index while
    there is room, else the least recently used value's index (a notice:
    feature, row, index); a known value becomes the most recent."""
    order, vals, notices, nxt = {}, [], [], 2
    row = 0
    for e in events:
        if e is None:
            continue
        for h in (get(e, "history") or [])[-5:]:
            k = key_of(as_id(h))
            if k in order:
                idx = order.pop(k)
            elif nxt < cap:
                idx, nxt = nxt, nxt + 1
            else:
                old = next(iter(order))
                idx = order.pop(old)
                notices.append((4, row, idx))
            order[k] = idx
            vals.append(idx)
        row += 1
    return vals, notices


def check_two_pass(piperec, tmp, inp, events):
    """count_mode two_pass, min_count 3 (profile default): a value seen at
    least 3 times in the whole file gets an index (first appearance order
    among those), others OOV (1), missing 0. user and history checked."""
    text = CONFIG.format(profile="default").replace(
        "      vocab: { profile: default }\n",
        "      vocab: { profile: default, min_count: 3, count_mode: two_pass }\n")
    cfg = os.path.join(tmp, "clicks-2pass.yaml")
    with open(cfg, "w") as f:
        f.write(text)
    out = os.path.join(tmp, "out-2pass")
    run(piperec, cfg, inp, out, 2, 500)
    seq = {"user": [], "history": []}
    for e in events:
        if e is None:
            continue
        u = get(e, "user.id")
        seq["user"].append(None if u is None else key_of(as_id(u)))
        seq["history"].extend(key_of(as_id(h)) for h in (get(e, "history") or [])[-5:])
    for f, keys in seq.items():
        counts = {}
        for k in keys:
            if k is not None:
                counts[k] = counts.get(k, 0) + 1
        idx, want = {}, []
        for k in keys:
            if k is None:
                want.append(0)
            elif counts[k] < 3:
                want.append(1)
            else:
                idx.setdefault(k, 2 + len(idx))
                want.append(idx[k])
        got = np.load(os.path.join(out, "sparse", f + ".values.npy"))
        assert np.array_equal(got, np.array(want, dtype=np.int64)), "two_pass " + f
    print("ok: two_pass min_count 3 (user, history)")


def check_lru(piperec, tmp, inp, events):
    """Bounded vocabulary on a list feature: values and recycled.npy."""
    cfg = os.path.join(tmp, "clicks-lru.yaml")
    text = CONFIG.format(profile="default").replace(
        "      vocab: { profile: default }\n",
        "      vocab: { profile: default }\n"
        "      columns: { history: { eviction: lru, capacity: 22 } }\n")
    with open(cfg, "w") as f:
        f.write(text)
    outs = []
    for threads, block_rows in ((1, 8192), (4, 100)):
        out = os.path.join(tmp, "out-lru-%d-%d" % (threads, block_rows))
        run(piperec, cfg, inp, out, threads, block_rows)
        outs.append(out)
    vals, notices = lru_reference(events, 22)
    got = np.load(os.path.join(outs[0], "sparse", "history.values.npy"))
    assert np.array_equal(got, np.array(vals, dtype=np.int64)), "lru history values differ"
    rec = np.load(os.path.join(outs[0], "recycled.npy"))
    assert rec.shape == (len(notices), 4), (rec.shape, len(notices))
    assert [tuple(r[:3]) for r in rec.tolist()] == notices, "notices differ"
    assert rec[:, 3].tolist() == list(range(1, len(notices) + 1)), "notice numbers"
    assert files(outs[0]) == files(outs[1]), "lru outputs depend on threads/blocks"
    print("ok: lru on a list feature, %d notices, threads 1/4 identical" % len(notices))


ID_CONFIG = """pipelines:
  - name: ids
    schema:
      labels: [ { name: click, path: click } ]
      dense:
        - { name: item_num, path: item }
      sparse:
        - { name: item, path: item, ops: [vocab] }
        - { name: user, path: user, ops: [vocab] }
    transform:
      vocab: { profile: default }
engine: { backend: cpu }
"""

ID_LINES = [
    '{"click": 1, "item": 4, "user": 42}',
    '{"click": 0, "item": 4.0, "user": 42}',   # (b) whole float on an id path: wrong_type
    '{"click": 1, "item": 5, "user": "42"}',   # (a) "42" is a string id, not 42
    '{"click": 0, "item": 6, "user": 4.0}',    # a float id without a dense reader: wrong_type
    '{"click": 1, "item": 4, "user": "x"}',
    '{"click": 1, "item": 7, "user": 42}',
    '{"click": 1, "item": "7", "user": 42}',   # a string where the dense feature needs a number
    '{"click": 1, "item": 8, "user": "42"',    # truncated
]


def check_id_rules(piperec, tmp):
    """The one id rule (the streaming decoder's, tests/ingest/test_json_decode.c
    test_id_rules has the same records): JSON type decides integer or string;
    a float is never an id. Same outputs for --threads 1 and 3."""
    cfg = os.path.join(tmp, "ids.yaml")
    inp = os.path.join(tmp, "ids.jsonl")
    with open(cfg, "w") as f:
        f.write(ID_CONFIG)
    with open(inp, "w") as f:
        f.write("\n".join(ID_LINES) + "\n")
    outs = []
    for threads in (1, 3):
        out = os.path.join(tmp, "out-ids-%d" % threads)
        cmd = [piperec, "process", "--config", cfg, "--input", inp, "--output", out,
               "--threads", str(threads), "--block-rows", "64", "--no-progress"]
        p = subprocess.run(cmd, capture_output=True, text=True)
        assert p.returncode == 0, (cmd, p.stderr)
        assert "4 rows, 4 rejected (truncated=1 wrong_type=3)" in p.stderr, p.stderr
        outs.append(out)
    out = outs[0]
    user = np.load(os.path.join(out, "sparse", "user.values.npy")).tolist()
    assert user == [2, 3, 4, 2], user  # 42, "42", "x", 42
    item = np.load(os.path.join(out, "sparse", "item.values.npy")).tolist()
    assert item == [2, 3, 2, 4], item  # 4, 5, 4, 7
    dense = np.load(os.path.join(out, "dense.npy")).ravel().tolist()
    assert dense == [4.0, 5.0, 4.0, 7.0], dense
    keys = sorted(l.split("\t")[0] for l in open(os.path.join(out, "vocab", "user.tsv"))
                  if not l.startswith("#"))
    rej = [l.split("\t")[:2] for l in open(os.path.join(out, "rejects.tsv"))]
    assert rej == [["2", "wrong_type"], ["4", "wrong_type"], ["7", "wrong_type"],
                   ["8", "truncated"]], rej
    assert files(outs[0]) == files(outs[1]), "id outputs depend on threads"
    print("ok: id rule (\"42\" vs 42, 4.0 wrong_type), rejects by reason, threads 1/3 identical"
          " (%d vocab lines)" % len(keys))


def main():
    piperec = os.environ["PIPEREC"]
    tmp = os.environ.get("PR_TMP", "/tmp/schema_reference")
    os.makedirs(tmp, exist_ok=True)
    lines, events = gen(3000, random.Random(20))
    inp = os.path.join(tmp, "events.jsonl")
    with open(inp, "w") as f:
        f.write("\n".join(lines) + "\n")
    for profile in ("default", "dlrm"):
        cfg = os.path.join(tmp, "clicks-%s.yaml" % profile)
        with open(cfg, "w") as f:
            f.write(CONFIG.format(profile=profile))
        outs = []
        for threads, block_rows in ((1, 8192), (4, 64), (2, 1000)):
            out = os.path.join(tmp, "out-%s-%d-%d" % (profile, threads, block_rows))
            run(piperec, cfg, inp, out, threads, block_rows)
            outs.append(out)
        check(outs[0], events, profile)
        base = files(outs[0])
        for o in outs[1:]:
            other = files(o)
            assert base.keys() == other.keys(), (o, base.keys() ^ other.keys())
            for k in base:
                assert base[k] == other[k], "%s/%s differs from %s" % (o, k, outs[0])
        print("ok: profile %s, %d events, %d rows, threads 1/4/2 identical"
              % (profile, len(events), sum(1 for e in events if e is not None)))
    check_id_rules(piperec, tmp)
    check_lru(piperec, tmp, inp, events)
    check_two_pass(piperec, tmp, inp, events)
    # Criteo TSV given to a declared schema: refused, nothing half-done.
    tsv = os.path.join(tmp, "criteo.tsv")
    with open(tsv, "w") as f:
        f.write("1\t" + "\t".join(["1"] * 13 + ["a1"] * 26) + "\n")
    p = subprocess.run([piperec, "process", "--config", cfg, "--input", tsv, "--output",
                        os.path.join(tmp, "out-tsv")], capture_output=True, text=True)
    assert p.returncode == 2 and "no JSON object in the first 1" in p.stderr, (p.returncode, p.stderr)
    # A JSON lines file whose first lines are bad records: those are rejects,
    # as the same lines further on (only an input without objects is refused).
    bad_first = os.path.join(tmp, "bad-first.jsonl")
    with open(inp) as src, open(bad_first, "w") as f:
        f.write("[1, 2, 3]\nnot json at all\n" + src.read())
    for arg in (bad_first, "-"):
        p = subprocess.run([piperec, "process", "--config", cfg, "--input", arg, "--output",
                            os.path.join(tmp, "out-bad-first")], capture_output=True, text=True,
                           stdin=open(bad_first) if arg == "-" else None)
        assert p.returncode == 0, (arg, p.returncode, p.stderr)
        rej = open(os.path.join(tmp, "out-bad-first", "rejects.tsv")).read().splitlines()
        assert [r.split("\t")[:2] for r in rej[:2]] == [["1", "not_object"], ["2", "not_json"]], rej[:3]
    print("ok: TSV input refused for a declared schema; bad first lines of JSON lines rejected")
    p = subprocess.run([piperec, "process", "--config", cfg, "--input", inp, "--output",
                        os.path.join(tmp, "out-hls"), "--backend", "hls-sim"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "run on the cpu backend" in p.stderr, (p.returncode, p.stderr)
    print("ok: --backend hls-sim refused for a declared schema, saying why")


if __name__ == "__main__":
    main()
