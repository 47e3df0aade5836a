#!/usr/bin/python3
"""check_notices.py — replays what a trainer received from a bounded
vocabulary (eviction) and checks that the recycled-index notices keep its
embedding rows right.

  check_notices.py --log L --notices N --input TSV [--input TSV...] --rows R
                   --modulus M --capacity C

--log and --notices are fault_trainer.py's (one record and one JSON line per
batch, arrival order). Replaying them as a trainer would, with each notice
number applied once (RecycledTracker), the trainer's view of every column
is a map index -> value: a notice (column, index, row, number) frees the
index before row `row` of its batch; a row's (value, index) then either
fills a free index or must find that index holding the same value. A row
that finds its index holding another value means a trainer would have
trained one embedding row for two values: a lost or misplaced notice.
Also: indices stay below the capacity, every row 0..R-1 arrived, and at
least one notice was seen (so the test exercised eviction). Profile default:
index 0 (missing) and 1 (OOV) are not values.
Prints "batches B rows R notices N (applied A, repeated D) violations 0".
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fault"))
from fault_check import read_inputs, read_log  # noqa: E402


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", required=True)
    ap.add_argument("--notices", required=True)
    ap.add_argument("--input", action="append", required=True)
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--modulus", type=int, required=True)
    ap.add_argument("--capacity", type=int, required=True)
    a = ap.parse_args()

    batches, ids, sparse = read_log(a.log)
    notes = [json.loads(l) for l in open(a.notices) if l.strip()]
    if len(notes) < len(batches):
        fail("%d notice lines for %d batches" % (len(notes), len(batches)))
    n_sparse = sparse.shape[1]
    keys = read_inputs(a.input, a.rows, n_sparse)
    if ids.min() < 0 or ids.max() >= a.rows:
        fail("a row id outside 0..%d" % (a.rows - 1))
    lost = np.flatnonzero(np.bincount(ids, minlength=a.rows) == 0)
    if len(lost):
        fail("%d row(s) never received, e.g. %s" % (len(lost), lost[:10].tolist()))
    if sparse.max() >= a.capacity:
        fail("index %d is not below the capacity %d" % (sparse.max(), a.capacity))

    held = [dict() for _ in range(n_sparse)]  # per column: index -> key
    applied, repeated, seen_numbers, n_notes = 0, 0, set(), 0
    violations = 0
    pos = 0
    for bi, (epoch, seq, rows) in enumerate(batches):
        if notes[bi]["seq"] != seq or notes[bi]["epoch"] != epoch:
            fail("notice line %d is for batch (%d, %d), log has (%d, %d)"
                 % (bi, notes[bi]["epoch"], notes[bi]["seq"], epoch, seq))
        by_row = {}
        for col, idx, row, num in notes[bi]["recycled"]:
            n_notes += 1
            if num in seen_numbers:
                repeated += 1
                continue
            seen_numbers.add(num)
            applied += 1
            by_row.setdefault(row, []).append((col, idx))
        for r in range(rows):
            for col, idx in by_row.get(r, ()):
                held[col].pop(idx, None)
            rid = ids[pos + r]
            for c in range(n_sparse):
                idx = int(sparse[pos + r, c])
                if idx < 2:
                    continue
                raw = keys[c][rid]
                key = 0 if raw < 0 else raw % a.modulus
                have = held[c].get(idx)
                if have is None:
                    held[c][idx] = key
                elif have != key:
                    violations += 1
                    if violations <= 5:
                        print("violation: batch (%d, %d) row %d column %d index %d: holds key "
                              "%x, row has %x (no notice in between)"
                              % (epoch, seq, r, c, idx, have, key), file=sys.stderr)
        # notices for rows past the batch's end (none expected) still apply
        for row in sorted(k for k in by_row if k >= rows):
            for col, idx in by_row[row]:
                held[col].pop(idx, None)
        pos += rows
    if violations:
        fail("%d row(s) found their index holding another value" % violations)
    if applied == 0:
        fail("no recycled-index notice: the test did not make the vocabulary evict")
    print("batches %d rows %d notices %d (applied %d, repeated %d) violations 0"
          % (len(batches), len(ids), n_notes, applied, repeated))


if __name__ == "__main__":
    main()
