#!/usr/bin/python3
"""check_table_rows.py — the rows of every replica's files sink, read back
through one exported vocabulary, are the input's values (test_vocab_log_json).

item (item.id, modulus 1000000) and history (its last 10 ids, the same
modulus, `table: item`) share item's table; last3 (the last 3 ids) has its
own. Every batch row's item index and history indices are looked up in the
exported item.tsv, last3's in last3.tsv; the multiset of rows (item value,
history values, last3 values) over all replicas must equal the input's, so
a member's key that took another index than the owner's for the same value,
or an index two replicas use for two values, fails. Also: history's vocab
size in every batch is item's (one table), and some history value is never
a candidate item (the member's own keys went into the table).

usage: check_table_rows.py EXPORT_DIR INPUT.jsonl... -- BATCH_DIR...
"""
import collections
import glob
import json
import os
import sys

import numpy as np


def table(path):
    """index -> value of an exported vocabulary (rows index, value_hex, ...)."""
    out = {}
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        idx, val = line.split("\t")[:2]
        out[int(idx)] = int(val, 16)
    return out


def input_rows(paths):
    rows = collections.Counter()
    for p in paths:
        for line in open(p):
            e = json.loads(line)
            item = e.get("item", {}).get("id")
            hist = [h % 1000000 for h in e.get("history", [])]
            rows[(None if item is None else item % 1000000, tuple(hist[-10:]),
                  tuple(e.get("history", [])[-3:]))] += 1
    return rows


def jagged(d, name):
    return (np.load(os.path.join(d, "sparse", name + ".values.npy")),
            np.load(os.path.join(d, "sparse", name + ".lengths.npy")))


def batch_rows(dirs, items, last3):
    rows = collections.Counter()
    only_history = 0
    for top in dirs:
        for d in sorted(glob.glob(os.path.join(top, "batches-*"))):
            meta = json.load(open(os.path.join(d, "meta.json")))
            keys = meta["feature_keys"]
            sizes = meta["vocab_sizes"]
            assert sizes[keys.index("history")] == sizes[keys.index("item")], (d, sizes)
            assert meta["feature_tables"][keys.index("history")] == "item", d
            iv, il = jagged(d, "item")
            hv, hl = jagged(d, "history")
            lv, ll = jagged(d, "last3")
            assert len(il) == len(hl) == len(ll) == meta["rows"], d
            io = ho = lo = 0
            for r in range(meta["rows"]):
                item = tuple(items.get(int(x)) for x in iv[io:io + il[r]])
                hist = tuple(items[int(x)] for x in hv[ho:ho + hl[r]])
                l3 = tuple(last3[int(x)] for x in lv[lo:lo + ll[r]])
                io, ho, lo = io + il[r], ho + hl[r], lo + ll[r]
                rows[(item[0] if item else None, hist, l3)] += 1
    return rows


def main():
    sep = sys.argv.index("--")
    export, inputs, dirs = sys.argv[1], sys.argv[2:sep], sys.argv[sep + 1:]
    items = table(os.path.join(export, "item.tsv"))
    last3 = table(os.path.join(export, "last3.tsv"))
    want = input_rows(inputs)
    got = batch_rows(dirs, items, last3)
    if got != want:
        extra, missing = got - want, want - got
        sys.exit("rows differ from the input: %d not in it (e.g. %s), %d missing (e.g. %s)" % (
            sum(extra.values()), list(extra)[:2], sum(missing.values()), list(missing)[:2]))
    cands = {k[0] for k in want}
    hist_only = {h for k in want for h in k[1]} - cands
    if not hist_only or not hist_only <= set(items.values()):
        sys.exit("no history-only value in item's table (%d such values)" % len(hist_only))
    print("%d rows equal the input through the shared table (%d of its %d values only in "
          "histories)" % (sum(got.values()), len(hist_only), len(items)))


main()
