#!/usr/bin/python3
"""fault_check.py — checks what fault_trainer.py recorded against the input.

  fault_check.py --log L [--log L...] --input TSV [--input TSV...] --rows N --modulus M
                 [--epochs-min K] [--skip-indices] [--per-log-seq] [--contiguous]
                 [--also-ids FILE]

The inputs are the TSV files produced to Kafka, whose dense column 0 (field
2) is the row id 0..N-1. Checks, exiting 1 on the first failure:
  * lost rows: every row id 0..N-1 was received at least once (--also-ids:
    a text file of row ids, one per line, that a plain Kafka consumer in
    the same group read instead; they count as received, without indices);
  * index stability: in every sparse column, each raw value got one index in
    every delivery (first-seen mapping over all epochs), and each index
    stands for one key hex2int(raw) mod M (dlrm profile: missing = key 0);
  * (epoch, seq): strictly increasing in arrival order (one trainer; with
    several logs, one per replica's trainer, only with --per-log-seq, which
    checks each log and allows a restart from an empty state dir to begin
    again at epoch 1);
  * --contiguous: in every column the indices received are exactly
    0..max (no index skipped: the dlrm profile's first index is 0);
  * at least --epochs-min distinct epochs were seen.
Several --log files (replicas sharing a vocab_log) are checked as one
stream: a row may arrive through any replica.
Prints "rows N received R duplicates D epochs E batches B".
"""
import argparse
import struct
import sys

import numpy as np

HDR = struct.Struct("<QQII")


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def read_log(path):
    data = open(path, "rb").read()
    pos, batches, ids, sparse = 0, [], [], []
    while pos < len(data):
        if pos + HDR.size > len(data):
            fail("log: torn header at byte %d" % pos)
        epoch, seq, rows, ns = HDR.unpack_from(data, pos)
        pos += HDR.size
        need = rows * 8 * (1 + ns)
        if pos + need > len(data):
            fail("log: torn batch at byte %d" % pos)
        ids.append(np.frombuffer(data, np.int64, rows, pos))
        pos += rows * 8
        sparse.append(np.frombuffer(data, np.int64, rows * ns, pos).reshape(rows, ns))
        pos += rows * 8 * ns
        batches.append((epoch, seq, rows))
    if not batches:
        fail("log: no batch received")
    return batches, np.concatenate(ids), np.concatenate(sparse)


def read_inputs(paths, n_rows, n_sparse):
    """Per sparse column, the raw value of every row id as an integer key
    (hex2int; an empty value is -1): the generator writes each value one way
    (8 lower-case digits), so the integer stands for the raw string."""
    keys = np.full((n_sparse, n_rows), -2, dtype=np.int64)
    for p in paths:
        with open(p) as f:
            for line in f:
                fields = line.rstrip("\n").split("\t")
                rid = int(fields[1])
                if not 0 <= rid < n_rows:
                    fail("input %s: row id %d out of range" % (p, rid))
                keys[:, rid] = [int(v, 16) if v else -1 for v in fields[14:14 + n_sparse]]
    return keys


def check_contiguous(sparse):
    for c in range(sparse.shape[1]):
        u = np.unique(sparse[:, c])
        if u[0] != 0 or u[-1] != len(u) - 1:
            missing = np.setdiff1d(np.arange(u[-1] + 1), u)[:5]
            fail("column %d: indices not contiguous from 0: %d distinct, max %d, e.g. missing %s"
                 % (c, len(u), u[-1], missing.tolist()))


def check_indices(ids, sparse, keys, modulus):
    """Each raw value got one index in every delivery; each index stands for
    one key (hex2int mod M, missing = 0 under the dlrm profile)."""
    changes = 0
    for c in range(sparse.shape[1]):
        raw = keys[c][ids]
        if (raw == -2).any():
            fail("a received row is not in the inputs")
        idx = sparse[:, c]
        pairs = np.unique(np.stack([raw, idx], axis=1), axis=0)
        vals, counts = np.unique(pairs[:, 0], return_counts=True)
        for v in vals[counts > 1][:5]:
            print("index change: column %d value %x: indices %s"
                  % (c, v, pairs[pairs[:, 0] == v, 1].tolist()), file=sys.stderr)
        changes += int((counts - 1).sum())
        mod = np.where(pairs[:, 0] < 0, 0, pairs[:, 0] % modulus)
        by_idx = np.unique(np.stack([pairs[:, 1], mod], axis=1), axis=0)
        if len(np.unique(by_idx[:, 0])) != len(by_idx):
            fail("column %d: an index stands for two keys" % c)
    return changes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", action="append", required=True)
    ap.add_argument("--input", action="append", required=True)
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--modulus", type=int, required=True)
    ap.add_argument("--epochs-min", type=int, default=1)
    ap.add_argument("--skip-indices", action="store_true")
    ap.add_argument("--per-log-seq", action="store_true")
    ap.add_argument("--contiguous", action="store_true")
    ap.add_argument("--also-ids")
    a = ap.parse_args()
    if len(a.log) > 1 and not a.per_log_seq:
        fail("several --log need --per-log-seq")

    parts = [read_log(p) for p in a.log]
    batches = [b for p in parts for b in p[0]]
    ids = np.concatenate([p[1] for p in parts])
    sparse = np.concatenate([p[2] for p in parts])

    # (epoch, seq) strictly increasing in arrival order, per trainer; with
    # --per-log-seq a drop back to epoch 1 is a replica restarted empty.
    for p in parts:
        prev = (0, 0)
        for epoch, seq, _ in p[0]:
            if (epoch, seq) <= prev and not (a.per_log_seq and epoch == 1 and prev[0] >= 1
                                             and seq == 1):
                fail("(epoch, seq) went from %s to %s" % (prev, (epoch, seq)))
            prev = (epoch, seq)
    epochs = sorted({b[0] for b in batches})
    if len(epochs) < a.epochs_min:
        fail("saw %d epoch(s) %s, expected at least %d" % (len(epochs), epochs, a.epochs_min))

    # Lost rows.
    if ids.min() < 0 or ids.max() >= a.rows:
        fail("received a row id outside 0..%d" % (a.rows - 1))
    counts = np.bincount(ids, minlength=a.rows)
    if a.also_ids:
        other = np.loadtxt(a.also_ids, dtype=np.int64, ndmin=1)
        if len(other) and (other.min() < 0 or other.max() >= a.rows):
            fail("--also-ids: a row id outside 0..%d" % (a.rows - 1))
        counts = counts + np.bincount(other, minlength=a.rows)
    lost = np.flatnonzero(counts == 0)
    if len(lost):
        fail("%d row(s) never received, e.g. %s" % (len(lost), lost[:10].tolist()))
    dups = int(counts.sum() - a.rows)

    # Index stability.
    if not a.skip_indices:
        changes = check_indices(ids, sparse, read_inputs(a.input, a.rows, sparse.shape[1]),
                                a.modulus)
        if changes:
            fail("%d index change(s)" % changes)
    if a.contiguous:
        check_contiguous(sparse)
    print("rows %d received %d duplicates %d epochs %d (%d..%d) batches %d%s"
          % (a.rows, len(ids), dups, len(epochs), epochs[0], epochs[-1], len(batches),
             "" if a.skip_indices else " index-changes 0"))


if __name__ == "__main__":
    main()
