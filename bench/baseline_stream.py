#!/usr/bin/python3
"""baseline_stream.py — the Python streaming baseline for bench/bench_stream.sh:
a plain confluent-kafka consumer plus pandas doing the operators of piperec's
default pipeline on Criteo TSV records (one line per Kafka message):

    consume(up to --batch messages) -> pandas.read_csv of the joined lines
      dense:  fillna(0), clip(lower=0) (Neg2Zero), log1p -> float32
      sparse: fillna("0") (dlrm: missing = key 0), int(x, 16) (Hex2Int),
              mod M (Modulus), index in order of first appearance kept across
              batches (VocabGen + VocabMap: pd.factorize per batch for the
              batch's uniques, then a dict per column for the global index)
      labels: int32

It is written the way a competent Python engineer would (vectorised pandas
where pandas has it, one dict lookup per distinct value per batch, not per
row) so that the ratio measures the C service, not a strawman. One process,
one consumer, so one core for the Python work (librdkafka fetches on its own
threads, as in piperec).

The clock runs from the first message received to the last row processed
(the consumer-group join before it is not counted, as for piperec). Prints
one JSON line: rows, seconds, rows_per_s, vocab_entries.

With --check TSV DIR it first runs the same Pipeline over the lines of TSV
(in file order, --batch lines at a time) and checks that its arrays equal
`piperec process` output in DIR for that file ("matches_piperec" in the
JSON line): the two sides compute the same thing.

usage: baseline_stream.py --bootstrap HOST:PORT --topic T --rows N
                          [--modulus M] [--batch K] [--timeout S] [--check TSV DIR]
"""
import argparse
import io
import json
import os
import sys
import time

import numpy as np
import pandas as pd
from confluent_kafka import Consumer

N_DENSE, N_SPARSE = 13, 26
NAMES = ["label"] + ["I%d" % i for i in range(1, N_DENSE + 1)] + \
        ["C%d" % i for i in range(1, N_SPARSE + 1)]
SPARSE = NAMES[1 + N_DENSE:]
DENSE = NAMES[1:1 + N_DENSE]


class Pipeline:
    def __init__(self, modulus):
        self.modulus = modulus
        self.vocab = [dict() for _ in range(N_SPARSE)]

    def process(self, lines):
        df = pd.read_csv(io.BytesIO(b"\n".join(lines)), sep="\t", header=None, names=NAMES,
                         dtype={n: str for n in SPARSE})
        labels = df["label"].to_numpy(dtype=np.int32)
        dense = df[DENSE].fillna(0).clip(lower=0)
        dense = np.log1p(dense.to_numpy(dtype=np.float64)).astype(np.float32)
        sparse = np.empty((len(df), N_SPARSE), dtype=np.int32)
        m = self.modulus
        for j, c in enumerate(SPARSE):
            keys = df[c].fillna("0").apply(lambda x: int(x, 16) % m)
            codes, uniq = pd.factorize(keys, sort=False)  # batch-local, first appearance
            d = self.vocab[j]
            glob = np.fromiter((d.setdefault(k, len(d)) for k in uniq), dtype=np.int64,
                               count=len(uniq))
            sparse[:, j] = glob[codes]
        return labels, dense, sparse


def check(tsv, npy_dir, modulus, batch):
    """None when Pipeline over tsv equals piperec's output in npy_dir, else why not."""
    lines = open(tsv, "rb").read().split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    pipe = Pipeline(modulus)
    parts = [pipe.process(lines[i:i + batch]) for i in range(0, len(lines), batch)]
    got = {n: np.concatenate([p[k] for p in parts]) for k, n in enumerate(("labels", "dense", "sparse"))}
    for name, a in got.items():
        b = np.load(os.path.join(npy_dir, name + ".npy"))
        if a.shape != b.shape:
            return "%s: shape %s vs piperec %s" % (name, a.shape, b.shape)
        same = np.allclose(a, b, rtol=1e-6, atol=0) if name == "dense" else \
            np.array_equal(a.astype(np.int64), b.astype(np.int64))
        if not same:
            return "%s values differ" % name
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", default="events")
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--modulus", type=int, default=524288)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--check", nargs=2, metavar=("TSV", "DIR"))
    args = ap.parse_args()
    mismatch = check(args.check[0], args.check[1], args.modulus, args.batch) if args.check else None

    c = Consumer({"bootstrap.servers": args.bootstrap,
                  "group.id": "bench-python-%d" % os.getpid(),
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "session.timeout.ms": 10000})
    c.subscribe([args.topic])
    pipe = Pipeline(args.modulus)
    rows = 0
    t_first = None
    deadline = time.time() + args.timeout
    while rows < args.rows and time.time() < deadline:
        msgs = c.consume(num_messages=args.batch, timeout=0.5)
        if not msgs:
            continue
        if t_first is None:
            t_first = time.perf_counter()
        lines = [m.value() for m in msgs if m.error() is None]
        if lines:
            labels, dense, sparse = pipe.process(lines)
            rows += len(labels)
    t_last = time.perf_counter()
    c.close()
    if t_first is None or rows < args.rows:
        sys.exit("baseline_stream: read %d of %d rows before the timeout" % (rows, args.rows))
    s = t_last - t_first
    res = {"bench": "stream_python_baseline", "threads": 1, "rows": rows,
           "seconds": round(s, 3), "rows_per_s": round(rows / s),
           "vocab_entries": sum(len(d) for d in pipe.vocab),
           "pipeline": "confluent-kafka + pandas, dlrm mod %d, %d msgs/consume"
                       % (args.modulus, args.batch)}
    if args.check:
        res["matches_piperec"] = mismatch is None
        if mismatch:
            res["mismatch"] = mismatch
    print(json.dumps(res))
    sys.exit(1 if mismatch else 0)


if __name__ == "__main__":
    main()
