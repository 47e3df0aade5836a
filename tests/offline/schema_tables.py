#!/usr/bin/python3
"""schema_tables.py — shared vocabularies (`table:`): a candidate item, a
click history (a list cut to its last 5) and a cart (a list of objects) in
one table, beside a user id in its own.

Checked with `piperec process` on JSON lines with filtered and rejected
records mixed in:
  - one index per value across the table, given in input order and, within
    a record, in schema order (item, then history's kept elements, then
    cart's), against a Python reference; the user's table is apart;
  - vocab/item.tsv is the table (no history.tsv, no cart.tsv), meta.json
    gives every member the table's size and lists feature_tables;
  - byte-identical outputs at --threads 1, 2 and 4 on blocks of 64 and
    100 rows and of 8192 (rounds split among workers and not);
  - a bounded table (capacity 60, eviction lru): the same bytes at every
    thread count, and each recycled-index notice names a member feature and
    a row whose values hold the recycled index.

usage: schema_tables.py   ($PIPEREC, $PR_TMP)
"""
import filecmp
import json
import os
import random
import subprocess
import sys

import numpy as np

piperec, tmp = os.environ["PIPEREC"], os.environ["PR_TMP"]

CONFIG = """pipelines:
  - name: t
    source: { format: json }
    schema:
      labels: [ { name: y, path: y } ]
      filter: [ { path: type, in: [click, view] } ]
      sparse:
        - { name: item, path: item, ops: [vocab] }
        - { name: user, path: user, ops: [vocab] }
        - { name: history, path: history, list: { max_len: 5, keep: last }, ops: [vocab],
            table: item }
        - { name: cart, path: cart.id, list: { max_len: 4 }, ops: [vocab], table: item }
    transform:
      vocab: { profile: default%s }
%s"""


def events(n, seed):
    rnd = random.Random(seed)
    items = ["i%d" % k for k in range(300)]
    out = []
    for r in range(n):
        e = {"y": r % 2, "type": "click" if r % 7 else "buy", "user": "u%d" % rnd.randrange(90)}
        if rnd.random() < 0.9:
            e["item"] = rnd.choice(items[: 20 + r // 20])
        e["history"] = [rnd.choice(items) for _ in range(rnd.randrange(9))]
        e["cart"] = [{"id": rnd.choice(items)} for _ in range(rnd.randrange(6))]
        if r % 97 == 5:
            e["history"] = "not a list"  # rejected: wrong_type
        out.append(e)
    return out


def process(cfg, inp, out, threads, block_rows):
    p = subprocess.run([piperec, "process", "--config", cfg, "--input", inp, "--output", out,
                        "--threads", str(threads), "--block-rows", str(block_rows),
                        "--no-progress"], capture_output=True, text=True)
    if p.returncode:
        sys.exit("FAIL: piperec process: %s" % p.stderr)


def same_tree(a, b):
    for root, _, files in os.walk(a):
        for f in files:
            pa = os.path.join(root, f)
            pb = os.path.join(b, os.path.relpath(pa, a))
            if f != "meta.json" and not filecmp.cmp(pa, pb, shallow=False):
                sys.exit("FAIL: %s differs from %s" % (pb, pa))


def reference(evs):
    table, users = {}, {}
    want = {"item": [], "user": [], "history": [], "cart": []}
    for e in evs:
        if e["type"] not in ("click", "view") or not isinstance(e["history"], list):
            continue
        def idx(d, v):
            if v not in d:
                d[v] = len(d) + 2  # profile default: 0 missing, 1 OOV
            return d[v]
        want["item"].append(idx(table, e["item"]) if "item" in e else 0)
        want["user"].append(idx(users, e["user"]))
        want["history"] += [idx(table, v) for v in e["history"][-5:]]
        want["cart"] += [idx(table, c["id"]) for c in e["cart"][:4]]
    return want, len(table) + 2, table


def main():
    evs = events(6000, 11)
    inp = os.path.join(tmp, "events.jsonl")
    with open(inp, "w") as f:
        for e in evs:
            f.write(json.dumps(e) + "\n")
    cfg = os.path.join(tmp, "tables.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG % ("", ""))
    runs = [(1, 8192), (2, 100), (4, 64)]
    for th, br in runs:
        process(cfg, inp, os.path.join(tmp, "o%d" % th), th, br)
    o1 = os.path.join(tmp, "o1")
    for th, _ in runs[1:]:
        same_tree(o1, os.path.join(tmp, "o%d" % th))
    want, size, table_ix = reference(evs)
    for k, v in want.items():
        got = np.load(os.path.join(o1, "sparse", k + ".values.npy")).tolist()
        if got != v:
            bad = next(i for i, (a, b) in enumerate(zip(got, v)) if a != b) if len(got) == len(v) \
                else "length %d vs %d" % (len(got), len(v))
            sys.exit("FAIL: %s differs from the reference at %s" % (k, bad))
    vocabs = sorted(os.listdir(os.path.join(o1, "vocab")))
    assert vocabs == ["item.tsv", "user.tsv"], vocabs
    meta = json.load(open(os.path.join(o1, "meta.json")))
    assert meta["feature_tables"] == ["item", "user", "item", "item"], meta
    sizes = dict(zip(meta["feature_keys"], meta["vocab_sizes"]))
    assert sizes["item"] == sizes["history"] == sizes["cart"] == size, (sizes, size)
    assert meta["rejected"] > 10 and meta["filtered"] > 100, meta
    # `piperec vocab lookup` of a member reads the table: the owner's indices
    ids = "i1\ni5\ni299\nnope\n"
    for feat in ("item", "history", "cart"):
        p = subprocess.run([piperec, "vocab", "lookup", "--config", cfg, "--feature", feat,
                            "--input", o1, "--strings"], input=ids, capture_output=True,
                           text=True)
        assert p.returncode == 0, p.stderr
        got = [line.split("\t")[1] for line in p.stdout.splitlines()]
        want_ix = [str(table_ix.get(v, 1)) for v in ids.split()]
        assert got == want_ix, (feat, got, want_ix)

    # a bounded table: notices name the member and row holding the index
    cfg = os.path.join(tmp, "bounded.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG % (", capacity: 60, eviction: lru", ""))
    for th, br in runs:
        process(cfg, inp, os.path.join(tmp, "b%d" % th), th, br)
    b1 = os.path.join(tmp, "b1")
    for th, _ in runs[1:]:
        same_tree(b1, os.path.join(tmp, "b%d" % th))
    meta = json.load(open(os.path.join(b1, "meta.json")))
    keys = meta["feature_keys"]
    vals = {k: np.load(os.path.join(b1, "sparse", k + ".values.npy")) for k in keys}
    lens = {k: np.load(os.path.join(b1, "sparse", k + ".lengths.npy")) for k in keys}
    offs = {k: np.concatenate([[0], np.cumsum(lens[k])]) for k in keys}
    rec = np.load(os.path.join(b1, "recycled.npy"))
    named = set()
    for col, row, index, _num in rec.tolist():
        k = keys[col]
        named.add(k)
        row_vals = vals[k][offs[k][row]:offs[k][row + 1]].tolist()
        assert index in row_vals, (k, row, index, row_vals)
    assert len(rec) > 100 and named >= {"item", "history", "user"}, (len(rec), named)
    print("shared table: %d values, %d notices naming %s; threads 1/2/4 identical"
          % (size, len(rec), sorted(named)))


main()
