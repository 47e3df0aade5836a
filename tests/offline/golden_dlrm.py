#!/usr/bin/python3
"""golden_dlrm.py — `piperec process` against an independent numpy computation.

The reference follows Meta DLRM's data_utils.py (Criteo Kaggle): a missing
integer feature is 0, negatives become 0, dense = log(x + 1) as float32; a
categorical is int(x, 16) (missing -> 0), then mod M, then mapped per column to
indices in order of first appearance, from 0. Runs the binary for several
moduli and compares dense (1e-6 relative), sparse and labels (exact), and the
exported vocabularies' sizes.

Also checks the `default` profile with count_mode two_pass and min_count 2
(TorchRec style: 0 = missing, 1 = out-of-vocabulary, values seen at least
min_count times over the whole file get indices from 2 in order of first
appearance), from a file and from stdin (which the driver spools).

usage: golden_dlrm.py [PIPEREC INPUT.tsv TMPDIR]
       (default: $PIPEREC, $PR_TEST_DATA/criteo_sample_100.tsv, $PR_TMP)
"""
import os
import subprocess
import sys

import numpy as np

N_DENSE, N_SPARSE = 13, 26

CONFIG = """pipelines:
  - name: golden
    schema: {{ label: true, dense: {nd}, sparse: {ns} }}
    transform:
      dense: [neg2zero, log1p]
      sparse: [hex2int, {{ modulus: {m} }}, vocab]
      vocab: {{ profile: dlrm }}
engine: {{ backend: cpu, threads: 2 }}
"""


def reference(path, modulus):
    labels, dense, sparse = [], [], []
    with open(path, "rb") as f:
        for raw in f.read().decode().split("\n"):
            line = raw.rstrip("\r")
            if not line:
                continue
            fields = line.split("\t")
            assert len(fields) == 1 + N_DENSE + N_SPARSE, line
            labels.append(int(fields[0]))
            dense.append([int(x) if x else 0 for x in fields[1:1 + N_DENSE]])
            sparse.append([int(x, 16) % modulus if x else 0 for x in fields[1 + N_DENSE:]])
    x_int = np.array(dense, dtype=np.int64)
    x_int[x_int < 0] = 0
    x_dense = np.log(x_int.astype(np.float64) + 1).astype(np.float32)
    x_cat = np.zeros((len(sparse), N_SPARSE), dtype=np.int64)
    vocab_sizes = []
    for c in range(N_SPARSE):
        d = {}
        for r, row in enumerate(sparse):
            x_cat[r, c] = d.setdefault(row[c], len(d))
        vocab_sizes.append(len(d))
    return np.array(labels, dtype=np.int32), x_dense, x_cat, vocab_sizes


def vocab_rows(path):
    with open(path) as f:
        return sum(1 for line in f if line.strip() and not line.startswith("#"))


def check(piperec, data, tmp, modulus):
    cfg = os.path.join(tmp, "golden-%d.yaml" % modulus)
    with open(cfg, "w") as f:
        f.write(CONFIG.format(nd=N_DENSE, ns=N_SPARSE, m=modulus))
    out = os.path.join(tmp, "out-%d" % modulus)
    subprocess.run([piperec, "process", "--config", cfg, "--input", data, "--output", out],
                   check=True)
    y, x_dense, x_cat, vocab_sizes = reference(data, modulus)
    got_y = np.load(os.path.join(out, "labels.npy"))
    got_dense = np.load(os.path.join(out, "dense.npy"))
    got_sparse = np.load(os.path.join(out, "sparse.npy"))
    errors = []
    if got_y.dtype != np.int32 or got_y.shape != y.shape or not np.array_equal(got_y, y):
        errors.append("labels differ: %s %s" % (got_y.dtype, got_y.shape))
    if got_dense.dtype != np.float32 or got_dense.shape != x_dense.shape:
        errors.append("dense: dtype/shape %s %s, want float32 %s" % (got_dense.dtype, got_dense.shape, x_dense.shape))
    elif not np.allclose(got_dense, x_dense, rtol=1e-6, atol=0):
        bad = np.argwhere(~np.isclose(got_dense, x_dense, rtol=1e-6, atol=0))[:5]
        errors.append("dense differs at %s" % [(tuple(i), got_dense[tuple(i)], x_dense[tuple(i)]) for i in bad])
    if got_sparse.dtype not in (np.int32, np.int64) or got_sparse.shape != x_cat.shape:
        errors.append("sparse: dtype/shape %s %s, want %s" % (got_sparse.dtype, got_sparse.shape, x_cat.shape))
    elif not np.array_equal(got_sparse.astype(np.int64), x_cat):
        bad = np.argwhere(got_sparse != x_cat)[:5]
        errors.append("sparse differs at %s" % [(tuple(i), got_sparse[tuple(i)], x_cat[tuple(i)]) for i in bad])
    for c in range(N_SPARSE):
        p = os.path.join(out, "vocab", "C%d.tsv" % (c + 1))
        if not os.path.exists(p):
            errors.append("missing %s" % p)
        elif vocab_rows(p) != vocab_sizes[c]:
            errors.append("%s: %d entries, want %d" % (p, vocab_rows(p), vocab_sizes[c]))
    with open(os.path.join(out, "rejects.tsv")) as f:
        if f.read():
            errors.append("unexpected rejects")
    for e in errors:
        print("modulus %d: %s" % (modulus, e))
    print("modulus %d: %d rows, %s" % (modulus, len(y), "FAIL" if errors else "ok"))
    return not errors


CONFIG_TWO_PASS = """pipelines:
  - name: golden2
    schema: {{ label: true, dense: {nd}, sparse: {ns} }}
    transform:
      dense: [neg2zero, log1p]
      sparse: [hex2int, {{ modulus: {m} }}, vocab]
      vocab: {{ profile: default, min_count: {k}, count_mode: two_pass }}
"""


def check_two_pass(piperec, data, tmp, modulus, min_count):
    cfg = os.path.join(tmp, "two-pass.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG_TWO_PASS.format(nd=N_DENSE, ns=N_SPARSE, m=modulus, k=min_count))
    keys = []
    with open(data) as f:
        for line in f.read().split("\n"):
            line = line.rstrip("\r")
            if line:
                keys.append([int(x, 16) % modulus if x else None
                             for x in line.split("\t")[1 + N_DENSE:]])
    want = np.zeros((len(keys), N_SPARSE), dtype=np.int64)
    for c in range(N_SPARSE):
        counts = {}
        for row in keys:
            if row[c] is not None:
                counts[row[c]] = counts.get(row[c], 0) + 1
        d = {}
        for r, row in enumerate(keys):
            k = row[c]
            if k is None:
                want[r, c] = 0
            elif counts[k] < min_count:
                want[r, c] = 1
            else:
                want[r, c] = d.setdefault(k, len(d) + 2)
    ok = True
    for how in ("file", "stdin"):
        out = os.path.join(tmp, "two-pass-" + how)
        cmd = [piperec, "process", "--config", cfg, "--output", out, "--input"]
        if how == "file":
            subprocess.run(cmd + [data], check=True)
        else:
            with open(data, "rb") as f:
                subprocess.run(cmd + ["-"], check=True, stdin=f)
        got = np.load(os.path.join(out, "sparse.npy")).astype(np.int64)
        if got.shape != want.shape or not np.array_equal(got, want):
            bad = np.argwhere(got != want)[:5] if got.shape == want.shape else []
            print("two_pass min_count %d (%s): differs at %s" % (
                min_count, how, [(tuple(i), got[tuple(i)], want[tuple(i)]) for i in bad]))
            ok = False
    print("two_pass min_count %d modulus %d: %s" % (min_count, modulus, "ok" if ok else "FAIL"))
    return ok


def main():
    if len(sys.argv) >= 4:
        piperec, data, tmp = sys.argv[1:4]
    else:
        piperec = os.environ["PIPEREC"]
        data = os.path.join(os.environ["PR_TEST_DATA"], "criteo_sample_100.tsv")
        tmp = os.environ["PR_TMP"]
    os.makedirs(tmp, exist_ok=True)
    ok = True
    for m in (524288, 1000, 97, 7, 1, 2**40):
        ok &= check(piperec, data, tmp, m)
    ok &= check_two_pass(piperec, data, tmp, 1000, 2)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
