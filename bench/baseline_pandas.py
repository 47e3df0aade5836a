#!/usr/bin/python3
"""baseline_pandas.py — the CPU baseline: the same offline pipeline as
`piperec process` (default config: dlrm profile, modulus 524288) written the
way the Piper paper's CPU baseline and most DLRM preprocessing scripts are:

    pandas.read_csv -> dense: fillna(0), clip(lower=0), log1p -> float32
                    -> sparse: fillna, apply(int(x, 16)), mod M,
                       per-column index in order of first appearance
                       (pd.factorize(sort=False), i.e. a dict map)
                    -> np.save dense.npy, sparse.npy, labels.npy

It times the whole job (read, transform, write) on one core and prints one
JSON line like the other benchmarks. With --compare DIR it also checks that
its arrays equal piperec's output for the same input (so the comparison is
between two implementations of the same thing).

usage: baseline_pandas.py --input FILE [--modulus M] [--out DIR] [--compare DIR]
"""
import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import pandas as pd

N_DENSE, N_SPARSE = 13, 26


def pipeline(path, modulus, out_dir):
    names = ["label"] + ["I%d" % i for i in range(1, N_DENSE + 1)] + \
            ["C%d" % i for i in range(1, N_SPARSE + 1)]
    df = pd.read_csv(path, sep="\t", header=None, names=names,
                     dtype={n: str for n in names[1 + N_DENSE:]})
    labels = df["label"].to_numpy(dtype=np.int32)
    dense_cols = names[1:1 + N_DENSE]
    dense = df[dense_cols].fillna(0).clip(lower=0)
    dense = np.log1p(dense.to_numpy(dtype=np.float64)).astype(np.float32)
    sparse = np.empty((len(df), N_SPARSE), dtype=np.int32)
    for j, c in enumerate(names[1 + N_DENSE:]):
        keys = df[c].fillna("0").apply(lambda x: int(x, 16) % modulus)
        codes, _ = pd.factorize(keys, sort=False)
        sparse[:, j] = codes
    np.save(os.path.join(out_dir, "dense.npy"), dense)
    np.save(os.path.join(out_dir, "sparse.npy"), sparse)
    np.save(os.path.join(out_dir, "labels.npy"), labels)
    return len(df), os.path.getsize(path)


def compare(mine, theirs):
    for name in ("dense", "sparse", "labels"):
        a = np.load(os.path.join(mine, name + ".npy"))
        b = np.load(os.path.join(theirs, name + ".npy"))
        if a.shape != b.shape:
            return "%s: shape %s vs piperec %s" % (name, a.shape, b.shape)
        if name == "dense":
            if not np.allclose(a, b, rtol=1e-6, atol=0):
                return "dense values differ"
        elif not np.array_equal(a.astype(np.int64), b.astype(np.int64)):
            return "%s values differ" % name
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True)
    ap.add_argument("--modulus", type=int, default=524288)
    ap.add_argument("--out")
    ap.add_argument("--compare")
    args = ap.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="baseline_pandas.")
    os.makedirs(out, exist_ok=True)
    t0 = time.perf_counter()
    rows, size = pipeline(args.input, args.modulus, out)
    s = time.perf_counter() - t0
    res = {"bench": "baseline_pandas", "threads": 1, "rows": rows, "seconds": round(s, 4),
           "rows_per_s": round(rows / s), "mb_per_s": round(size / s / 1e6, 1),
           "pipeline": "tsv->npy dlrm mod %d" % args.modulus}
    if args.compare:
        diff = compare(out, args.compare)
        res["matches_piperec"] = diff is None
        if diff:
            res["mismatch"] = diff
    print(json.dumps(res))
    sys.exit(0 if not args.compare or res["matches_piperec"] else 1)


if __name__ == "__main__":
    main()
