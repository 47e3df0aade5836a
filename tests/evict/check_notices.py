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
With --once (a run without restarts, issue 19) every notice number must come
exactly once and every `row` must lie within its batch (0..rows).

The same replay for the two outputs that carry notices in files:

  check_notices.py --offline DIR --input TSV --modulus M --capacity C
  check_notices.py --files DIR --input TSV [--input TSV...] --rows R
                   --modulus M --capacity C

--offline reads `piperec process --output DIR`: sparse.npy (row i = the
i-th accepted input line; rejects.tsv names the others) and recycled.npy,
int64 [N, 4] (column, output row, index, number), which must exist, number
its notices 1..N in order and list them in row order. --files reads a files
sink's DIR/batches-<epoch>-<first>-<last>/ rolls ((epoch, first) order): every
meta.json must be valid JSON, each batch's "recycled" entries (column, row
of the roll's files, index, number) lie within the batch, and dense column 0
is the row id (transform dense: [], input rows numbered as for --log), so
every row 0..R-1 must be there. Both then check, per column, that the rows
between two notices of an index all hold one key (replay_mapping), that
every notice sits at the first row that uses its index anew (the row holds
the index in that column), that indices stay below the capacity and that
the same rows without their notices would break the mapping (so the test
exercised eviction and the check has teeth). Prints "rows R notices N
(applied A, repeated D) index-epochs E violations 0 (without notices V)".
"""
import argparse
import glob
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fault"))
from fault_check import read_inputs, read_log  # noqa: E402


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def replay_mapping(sparse, keys, notes, first_index):
    """Apply notices (column, row, index, number; an int64 [K, 4] array) to
    rows in output order, each number once (the first time it is listed),
    and split the rows of every (column, index) into epochs at its notices: a
    notice at row r starts a new epoch from row r on. Returns (applied,
    repeated, epochs, violations, without): an epoch whose rows hold two keys
    is a violation (a trainer would train one embedding row for two values);
    `without` counts the same with every notice ignored. Indices below
    first_index (the default profile's missing and OOV) are not values."""
    _, first = np.unique(notes[:, 3], return_index=True)
    app = notes[np.sort(first)]
    repeated = len(notes) - len(app)
    epochs = violations = without = 0
    for c in range(sparse.shape[1]):
        rows = np.flatnonzero(sparse[:, c] >= first_index)
        nt = app[app[:, 0] == c]
        # Events sorted by (index, row, notice before row): the epoch of a row
        # is the count of its index's notices at or before it, and the rows
        # of one (index, epoch) are one run of the sorted rows.
        ev_idx = np.concatenate([nt[:, 2], sparse[rows, c].astype(np.int64)])
        ev_row = np.concatenate([nt[:, 1], rows])
        ev_kind = np.r_[np.zeros(len(nt), np.int64), np.ones(len(rows), np.int64)]
        ev_key = np.r_[np.zeros(len(nt), np.int64), keys[rows, c]]
        o = np.lexsort((ev_kind, ev_row, ev_idx))
        ev_idx, ev_row, ev_kind, ev_key = ev_idx[o], ev_row[o], ev_kind[o], ev_key[o]
        epoch = np.cumsum(ev_kind == 0)
        r = ev_kind == 1
        idx, row, key, epoch = ev_idx[r], ev_row[r], ev_key[r], epoch[r]
        if not len(idx):
            continue
        new_idx = np.r_[True, idx[1:] != idx[:-1]]
        for with_notes in (True, False):
            new = new_idx | np.r_[True, epoch[1:] != epoch[:-1]] if with_notes else new_idx
            run = np.cumsum(new) - 1
            first_key = key[np.flatnonzero(new)][run]
            bad = np.unique(run[key != first_key])
            if not with_notes:
                without += len(bad)
                continue
            epochs += int(new.sum())
            violations += len(bad)
            for g in bad[:max(0, 10 - (violations - len(bad)))]:
                m = run == g
                print("violation: column %d index %d: keys %s at rows %s with no notice between"
                      % (c, idx[m][0], np.unique(key[m])[:4].tolist(), row[m][:6].tolist()),
                      file=sys.stderr)
    return len(app), repeated, epochs, violations, without


def check_exact(sparse, notes):
    """Every notice sits at the first row that uses its index anew: that row
    holds the index in the notice's column."""
    col, row, idx = notes[:, 0], notes[:, 1], notes[:, 2]
    past = row >= sparse.shape[0]
    held = sparse[np.minimum(row, sparse.shape[0] - 1), col]
    bad = np.flatnonzero(past | (held != idx))
    for i in bad[:3]:
        print("notice %d (column %d index %d) at row %d, which holds %s"
              % (notes[i, 3], col[i], idx[i], row[i], "nothing" if past[i] else held[i]),
              file=sys.stderr)
    if len(bad):
        fail("%d notice(s) not at the first row that uses their index" % len(bad))


def tsv_keys(path, skip, n_dense, has_label, n_sparse, modulus):
    """Per accepted line of a TSV (lines not in `skip`, 1-based), the key of
    every sparse column: hex2int mod modulus, -1 when missing."""
    out, first = [], int(has_label) + n_dense
    with open(path) as f:
        for no, line in enumerate(f, 1):
            if no in skip:
                continue
            v = line.rstrip("\n").split("\t")[first:first + n_sparse]
            out.append([int(x, 16) % modulus if x else -1 for x in v])
    return np.array(out, dtype=np.int64).reshape(-1, n_sparse)


def finish(sparse, keys, notes, capacity, first_index):
    if sparse.max() >= capacity:
        fail("index %d is not below the capacity %d" % (sparse.max(), capacity))
    bad = (notes[:, 0] < 0) | (notes[:, 0] >= sparse.shape[1]) | (notes[:, 2] < first_index) | \
        (notes[:, 2] >= capacity)
    if bad.any():
        fail("notice %d names column %d index %d" % tuple(notes[np.flatnonzero(bad)[0]][[3, 0, 2]]))
    applied, repeated, epochs, violations, without = replay_mapping(sparse, keys, notes,
                                                                    first_index)
    if violations:
        fail("%d index epoch(s) hold two values" % violations)
    if applied == 0:
        fail("no recycled-index notice: the test did not make the vocabulary evict")
    if without == 0:
        fail("the rows alone keep the mapping without their notices: nothing was checked")
    print("rows %d notices %d (applied %d, repeated %d) index-epochs %d violations 0 "
          "(without notices %d)" % (len(sparse), len(notes), applied, repeated, epochs, without))


def main_offline(a):
    d = a.offline
    sparse = np.load(os.path.join(d, "sparse.npy"))
    n_dense = np.load(os.path.join(d, "dense.npy"), mmap_mode="r").shape[1]
    has_label = os.path.exists(os.path.join(d, "labels.npy"))
    path = os.path.join(d, "recycled.npy")
    if not os.path.exists(path):
        fail("%s: missing" % path)
    rec = np.load(path)
    if rec.dtype != np.int64 or rec.ndim != 2 or rec.shape[1] != 4:
        fail("recycled.npy: %s %s, expected int64 [N, 4]" % (rec.dtype, rec.shape))
    if len(rec) and (rec[:, 3] != np.arange(1, len(rec) + 1)).any():
        fail("recycled.npy: numbers are not 1..%d in order" % len(rec))
    if len(rec) and ((np.diff(rec[:, 1]) < 0).any() or rec[:, 1].min() < 0):
        fail("recycled.npy: rows not in output order")
    skip = set()
    with open(os.path.join(d, "rejects.tsv")) as f:
        skip = {int(line.split("\t", 1)[0]) for line in f if line.strip()}
    keys = tsv_keys(a.input[0], skip, n_dense, has_label, sparse.shape[1], a.modulus)
    if keys.shape[0] != sparse.shape[0]:
        fail("%d accepted input lines, sparse.npy has %d rows" % (keys.shape[0], sparse.shape[0]))
    notes = rec
    check_exact(sparse, notes)
    finish(sparse, keys, notes, a.capacity, a.first_index)


def read_files(d, n_rows):
    """A files sink's rolls in sequence order: (sparse, row ids, notices with
    rows numbered over the concatenated rolls)."""
    rolls = sorted(glob.glob(os.path.join(d, "batches-*-*-*")),
                   key=lambda p: [int(x) for x in os.path.basename(p).split("-")[1:3]])
    if not rolls:
        fail("%s: no roll" % d)
    sparse, ids, notes, base = [], [], [], 0
    for r in rolls:
        with open(os.path.join(r, "meta.json")) as f:
            try:
                meta = json.load(f)
            except ValueError as e:
                fail("%s/meta.json: not JSON: %s" % (r, e))
        sp = np.load(os.path.join(r, "sparse.npy"))
        dn = np.load(os.path.join(r, "dense.npy"))
        if meta["rows"] != len(sp) or len(dn) != len(sp):
            fail("%s: meta.json says %d rows, the files hold %d" % (r, meta["rows"], len(sp)))
        at = 0
        for b in meta["batches"]:
            if b["row_start"] != at:
                fail("%s: batch %d starts at row %d, expected %d" % (r, b["seq"], b["row_start"], at))
            for col, row, idx, num in b.get("recycled", []):
                if not at <= row <= at + b["rows"]:
                    fail("%s: batch %d (rows %d..%d) has a notice for row %d"
                         % (r, b["seq"], at, at + b["rows"] - 1, row))
                notes.append((col, base + row, idx, num))
            at += b["rows"]
        sparse.append(sp)
        ids.append(dn[:, 0])
        base += len(sp)
    sparse = np.concatenate(sparse)
    fid = np.concatenate(ids)
    ids = fid.astype(np.int64)
    if (ids != fid).any() or ids.min() < 0 or ids.max() >= n_rows:
        fail("dense column 0 is not a row id 0..%d" % (n_rows - 1))
    return sparse, ids, np.array(notes, dtype=np.int64).reshape(-1, 4)


def main_files(a):
    sparse, ids, notes = read_files(a.files, a.rows)
    lost = np.flatnonzero(np.bincount(ids, minlength=a.rows) == 0)
    if len(lost):
        fail("%d row(s) never written, e.g. %s" % (len(lost), lost[:10].tolist()))
    raw = read_inputs(a.input, a.rows, sparse.shape[1])
    keys = np.where(raw < 0, -1, raw % a.modulus).T[ids]
    check_exact(sparse, notes)
    finish(sparse, keys, notes, a.capacity, a.first_index)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log")
    ap.add_argument("--notices")
    ap.add_argument("--offline", help="a `piperec process` output directory")
    ap.add_argument("--files", help="a files sink's directory")
    ap.add_argument("--input", action="append", required=True)
    ap.add_argument("--rows", type=int)
    ap.add_argument("--modulus", type=int, required=True)
    ap.add_argument("--capacity", type=int, required=True)
    ap.add_argument("--once", action="store_true",
                    help="--log: every notice number once, every row within its batch")
    ap.add_argument("--first-index", type=int, default=2,
                    help="the profile's first value index: 2 (default), 0 (dlrm)")
    a = ap.parse_args()
    if a.offline:
        return main_offline(a)
    if a.files:
        if a.rows is None:
            fail("--files needs --rows")
        return main_files(a)
    if not a.log or not a.notices or a.rows is None:
        fail("--log, --notices and --rows are required (or --offline DIR, or --files DIR)")

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
            if a.once and not 0 <= row <= rows:
                fail("batch (%d, %d) of %d rows: notice %d at row %d" % (epoch, seq, rows, num, row))
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
    if a.once and repeated:
        fail("%d notice(s) came more than once" % repeated)
    if a.once and sorted(seen_numbers) != list(range(1, len(seen_numbers) + 1)):
        fail("notice numbers are not 1..%d" % len(seen_numbers))
    print("batches %d rows %d notices %d (applied %d, repeated %d) violations 0"
          % (len(batches), len(ids), n_notes, applied, repeated))


if __name__ == "__main__":
    main()
