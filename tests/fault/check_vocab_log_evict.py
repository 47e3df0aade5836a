#!/usr/bin/python3
"""check_vocab_log_evict.py — replicas that share a bounded vocabulary through
the vocab log (eviction decided through the log) agree on every index.

  check_vocab_log_evict.py --files DIR [--files DIR...] --input TSV --rows R
                           --modulus M --capacity C

Each DIR is one replica's files sink (rolls with meta.json notices, dense
column 0 = the row id; check_notices.read_files). Notices are numbered by the
log, so a recycle has the same number, column and index on every replica; a
replica announces it before the first row of its own stream that uses the
index anew. So a row's index means the value of (column, index, epoch), the
epoch being the number of the index's last notice before the row on that
replica (0: its first assignment). Checks:
  - the union of the replicas' rows holds every row 0..R-1;
  - a notice number names the same (column, index) on every replica (a
    replica restarted from its snapshot announces undelivered notices again,
    under the same numbers: a repeat never moves an epoch back);
  - each (column, index, epoch) holds one value over ALL replicas' rows: no
    two replicas (and no two rows of one) ever used an index for two values
    in one epoch;
  - indices stay below the capacity, and eviction happened (notices > 0).
Prints "replicas N rows R notices K index-epochs E violations 0".
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "evict"))
from check_notices import read_files  # noqa: E402
from fault_check import read_inputs  # noqa: E402


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", action="append", required=True)
    ap.add_argument("--input", action="append", required=True)
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--modulus", type=int, required=True)
    ap.add_argument("--capacity", type=int, required=True)
    ap.add_argument("--first-index", type=int, default=2)
    a = ap.parse_args()

    reps = [read_files(d, a.rows) for d in a.files]
    n_sparse = reps[0][0].shape[1]
    raw = read_inputs(a.input, a.rows, n_sparse)
    keys_all = np.where(raw < 0, -1, raw % a.modulus).T  # [row id, column]

    seen = np.zeros(a.rows, dtype=bool)
    by_number = {}          # notice number -> (column, index)
    value_of = {}           # (column, index, epoch) -> key
    violations = 0
    n_notes = 0
    for d, (sparse, ids, notes) in zip(a.files, reps):
        seen[ids] = True
        if len(sparse) and sparse.max() >= a.capacity:
            fail("%s: index %d is not below the capacity %d" % (d, sparse.max(), a.capacity))
        for col, _, idx, num in notes.tolist():
            if by_number.setdefault(num, (col, idx)) != (col, idx):
                fail("notice %d is column %d index %d on %s, column %d index %d elsewhere"
                     % (num, col, idx, d, *by_number[num]))
        n_notes = max(n_notes, len(notes))
        # Replay this replica's stream: epochs per (column, index).
        epoch = [dict() for _ in range(n_sparse)]
        at = 0
        order = np.argsort(notes[:, 1], kind="stable") if len(notes) else []
        notes = notes[order] if len(notes) else notes
        keys = keys_all[ids]
        for r in range(len(sparse)):
            while at < len(notes) and notes[at, 1] <= r:
                col, _, idx, num = notes[at].tolist()
                epoch[col][idx] = max(epoch[col].get(idx, 0), num)
                at += 1
            row = sparse[r]
            for c in range(n_sparse):
                idx = int(row[c])
                if idx < a.first_index:
                    continue
                k = int(keys[r, c])
                e = epoch[c].get(idx, 0)
                have = value_of.setdefault((c, idx, e), k)
                if have != k:
                    violations += 1
                    if violations <= 5:
                        print("violation: %s row id %d column %d index %d epoch %d: value %x, "
                              "%x elsewhere" % (d, ids[r], c, idx, e, k, have), file=sys.stderr)
    lost = np.flatnonzero(~seen)
    if len(lost):
        fail("%d row(s) at no replica, e.g. %s" % (len(lost), lost[:10].tolist()))
    if violations:
        fail("%d row(s) used an index for another value than the log gave it" % violations)
    if not by_number:
        fail("no recycled-index notice: the test did not make the vocabulary evict")
    print("replicas %d rows %d notices %d index-epochs %d violations 0"
          % (len(reps), a.rows, len(by_number), len(value_of)))


if __name__ == "__main__":
    main()
