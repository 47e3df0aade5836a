#!/usr/bin/python3
"""baseline_json.py — the Python streaming baseline for bench/bench_json_stream.sh:
a plain confluent-kafka consumer plus json + numpy doing the work of
examples/clickstream.yaml on the clickstream of `piperec gen --format json`
(one JSON object per Kafka message):

    consume(up to --batch messages) -> json.loads each -> the configured paths
      labels  click, purchase (default 0), dwell (default 0)       -> float32 [B, 3]
      dense   price     default 0, clip [0, 10000], log1p
              age_days  neg2zero, log1p (missing: 0)
              price_z   fill 20, standardize (mean 20, std 15)     -> float32 [B, 3]
      sparse  user      string id -> vocabulary
              item      int id, modulus 1000000 -> vocabulary
              category  string, default "unknown" -> vocabulary
              tags      list, first 8, hash 4096 (xxh64, piperec's seed)
              history   list, last 10 -> vocabulary per element
              age_bucket  bucketize [30, 90, 365, 1000]
              hour      hour_of_day(ts ms) -> vocabulary
              weekday   day_of_week(ts ms)
              cat_x_device  cross(item.category, context.device): XXH64 of the
                            tagged bytes, then hash 65536 of that integer
      vocabularies: profile default (0 = missing, 1 = OOV, first appearances
      from 2, in row order and list elements left to right), one dict per
      feature, kept across batches
    -> a jagged batch: per sparse feature int64 values + int32 lengths

It is written the way a competent Python engineer would: json.loads per
message (the standard library's C parser), one pass over the parsed events
to pull the paths into columns, numpy for the dense arithmetic, times and
bucketize, numpy unique (first-appearance order) for the integer
vocabularies so each distinct value costs one dict lookup per batch, a dict
lookup per value for the string ids. One process, one consumer, so one core
for the Python work (librdkafka fetches on its own threads, as in piperec).

The clock runs from the first message received to the last row processed
(the consumer-group join before it is not counted, as for piperec), with the
process CPU time over the same window (librdkafka's threads included) and the
seconds its threads waited for a CPU. Prints one JSON line: rows, seconds,
rows_per_s, cpu_seconds, cpu_us_per_row, runqueue_wait_seconds,
vocab_entries.

With --check JSONL DIR it first runs the same Pipeline over the lines of JSONL
(in file order, --batch lines at a time) and compares its arrays with
`piperec process --config` output in DIR (labels.npy, dense.npy,
sparse/<name>.values.npy and .lengths.npy): "matches_piperec" in the JSON
line says the two sides compute the same thing.

usage: baseline_json.py --bootstrap HOST:PORT --topic T --rows N
                        [--batch K] [--timeout S] [--check JSONL DIR]
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import xxhash
from confluent_kafka import Consumer

SEED = 0x7069706572656300  # PR_FOP_HASH_SEED: b"piperec\0" read big-endian
BOUNDS = np.array([30, 90, 365, 1000], dtype=np.float64)
MS_HOUR, MS_DAY = 3600 * 1000, 86400 * 1000
SPARSE = ["user", "item", "category", "tags", "history", "age_bucket", "hour", "weekday",
          "cat_x_device"]
_EMPTY = {}


class Vocab:
    """Profile default: None (missing) -> 0, new values from 2 in order of arrival."""

    def __init__(self):
        self.d = {None: 0}

    def map(self, keys):
        d = self.d
        out = []
        app = out.append
        for k in keys:
            i = d.get(k)
            if i is None:
                i = d[k] = len(d) + 1  # len(d) counts the None entry: first new is 2
            app(i)
        return np.array(out, dtype=np.int64)

    def map_ints(self, arr):
        """Integer keys (no missing) as a numpy array: one lookup per distinct value."""
        if len(arr) == 0:
            return np.zeros(0, dtype=np.int64)
        uniq, first, inv = np.unique(arr, return_index=True, return_inverse=True)
        glob = np.empty(len(uniq), dtype=np.int64)
        d = self.d
        for j in np.argsort(first, kind="stable"):
            k = int(uniq[j])
            i = d.get(k)
            if i is None:
                i = d[k] = len(d) + 1
            glob[j] = i
        return glob[inv.reshape(-1)]

    def __len__(self):
        return len(self.d) - 1


def runqueue_wait():
    """Seconds this process's threads were runnable but waiting for a CPU
    (schedstat; what the other users of a shared machine cost), 0 when the
    kernel has no schedstat."""
    total = 0
    try:
        for t in os.listdir("/proc/self/task"):
            with open("/proc/self/task/%s/schedstat" % t) as f:
                total += int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0.0
    return total / 1e9


def cross_bytes(cat, dev):
    """pr_fop_cross_bytes of two strings: tag 3, 4-byte LE length, bytes, per value."""
    a, b = cat.encode(), dev.encode()
    return b"\x03" + len(a).to_bytes(4, "little") + a + b"\x03" + len(b).to_bytes(4, "little") + b


def num(v, default=np.nan):
    return default if v is None else float(v)


class Pipeline:
    def __init__(self):
        self.vocab = {n: Vocab() for n in ("user", "item", "category", "history", "hour")}

    def process(self, payloads):
        evs = [json.loads(p) for p in payloads]
        n = len(evs)
        labels = np.empty((n, 3), dtype=np.float64)
        dense_in = np.empty((n, 2), dtype=np.float64)  # item.price, user.age_days
        ts = np.empty(n, dtype=np.int64)
        ts_ok = np.ones(n, dtype=bool)
        user, item, cat = [], [], []
        item_ok = np.ones(n, dtype=bool)
        tag_vals, tag_len, hist_vals, hist_len, xdev = [], [], [], [], []
        for r, ev in enumerate(evs):
            u = ev.get("user") or _EMPTY
            it = ev.get("item") or _EMPTY
            lab = ev.get("label") or _EMPTY
            ctx = ev.get("context") or _EMPTY
            labels[r, 0] = num(lab.get("click"), 0.0)
            labels[r, 1] = num(lab.get("purchase"), 0.0)
            labels[r, 2] = num(lab.get("dwell_s"), 0.0)
            dense_in[r, 0] = num(it.get("price"))
            dense_in[r, 1] = num(u.get("age_days"))
            t = ev.get("ts")
            if t is None:
                ts_ok[r] = False
                t = 0
            ts[r] = t
            user.append(u.get("id"))
            i = it.get("id")
            if i is None:
                item_ok[r] = False
                i = 0
            item.append(i)
            c = it.get("category")
            cat.append("unknown" if c is None else c)
            tags = [x for x in (it.get("tags") or ()) if x is not None][:8]
            tag_vals.extend(tags)
            tag_len.append(len(tags))
            h = [x for x in (ev.get("history") or ()) if x is not None][-10:]
            hist_vals.extend(h)
            hist_len.append(len(h))
            d = ctx.get("device")
            xdev.append(None if c is None or d is None else cross_bytes(c, d))

        # dense, computed in float64 and stored as float32 (as the engine)
        price = dense_in[:, 0]
        price_d = np.log1p(np.clip(np.where(np.isnan(price), 0.0, price), 0.0, 10000.0))
        age = dense_in[:, 1]
        age_d = np.log1p(np.where(age < 0, 0.0, age))
        age_d = np.where(np.isnan(age_d), 0.0, age_d)
        price_z = (np.where(np.isnan(price), 20.0, price) - 20.0) / 15.0
        dense = np.stack([price_d, age_d, price_z], axis=1).astype(np.float32)

        v = self.vocab
        sp = {}
        ones = np.ones(n, dtype=np.int32)
        sp["user"] = (v["user"].map(user), ones)
        items = np.array(item, dtype=np.int64) % 1000000
        iv = v["item"].map_ints(items[item_ok])
        item_idx = np.zeros(n, dtype=np.int64)
        item_idx[item_ok] = iv
        sp["item"] = (item_idx, ones)
        sp["category"] = (v["category"].map(cat), ones)
        h64 = xxhash.xxh64_intdigest
        sp["tags"] = (np.array([h64(t.encode(), SEED) % 4096 for t in tag_vals], dtype=np.int64),
                      np.array(tag_len, dtype=np.int32))
        sp["history"] = (v["history"].map_ints(np.array(hist_vals, dtype=np.int64)),
                         np.array(hist_len, dtype=np.int32))
        bucket = np.searchsorted(BOUNDS, age, side="right") + 1
        sp["age_bucket"] = (np.where(np.isnan(age), 0, bucket).astype(np.int64), ones)
        hour = (ts // MS_HOUR) % 24 + 1
        hidx = np.zeros(n, dtype=np.int64)
        hidx[ts_ok] = v["hour"].map_ints(hour[ts_ok])
        sp["hour"] = (hidx, ones)
        wd = (ts // MS_DAY + 3) % 7 + 1  # 1970-01-01 was a Thursday (ISO 4)
        sp["weekday"] = (np.where(ts_ok, wd, 0).astype(np.int64), ones)
        # cross gives the full 64-bit XXH64 (an integer); hash then hashes
        # its 8 little-endian bytes, mod 65536
        sp["cat_x_device"] = (np.array(
            [0 if b is None else h64(h64(b, SEED).to_bytes(8, "little"), SEED) % 65536
             for b in xdev], dtype=np.int64), ones)
        return labels.astype(np.float32), dense, sp


def check(jsonl, out_dir, batch):
    """None when Pipeline over jsonl equals piperec's output in out_dir, else why not."""
    lines = [l for l in open(jsonl, "rb").read().split(b"\n") if l]
    pipe = Pipeline()
    parts = [pipe.process(lines[i:i + batch]) for i in range(0, len(lines), batch)]
    got = {"labels": np.concatenate([p[0] for p in parts]),
           "dense": np.concatenate([p[1] for p in parts])}
    for name in SPARSE:
        got["sparse/%s.values" % name] = np.concatenate([p[2][name][0] for p in parts])
        got["sparse/%s.lengths" % name] = np.concatenate([p[2][name][1] for p in parts])
    for name, a in got.items():
        b = np.load(os.path.join(out_dir, name + ".npy"))
        if a.shape != b.shape:
            return "%s: shape %s vs piperec %s" % (name, a.shape, b.shape)
        same = np.allclose(a, b, rtol=1e-6, atol=1e-7) if a.dtype == np.float32 else \
            np.array_equal(a.astype(np.int64), b.astype(np.int64))
        if not same:
            bad = np.flatnonzero((a != b).reshape(len(a), -1).any(axis=1))
            return "%s differs at %d rows, first %d: %s vs piperec %s" % (
                name, len(bad), bad[0], a[bad[0]], b[bad[0]])
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", default="clicks")
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--check", nargs=2, metavar=("JSONL", "DIR"))
    args = ap.parse_args()
    mismatch = check(args.check[0], args.check[1], args.batch) if args.check else None

    c = Consumer({"bootstrap.servers": args.bootstrap,
                  "group.id": "bench-python-%d" % os.getpid(),
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "session.timeout.ms": 10000})
    c.subscribe([args.topic])
    pipe = Pipeline()
    rows = 0
    t_first = None
    deadline = time.time() + args.timeout
    while rows < args.rows and time.time() < deadline:
        msgs = c.consume(num_messages=args.batch, timeout=0.5)
        if not msgs:
            continue
        if t_first is None:
            t_first, c_first, w_first = time.perf_counter(), time.process_time(), runqueue_wait()
        payloads = [m.value() for m in msgs if m.error() is None]
        if payloads:
            labels, dense, sparse = pipe.process(payloads)
            rows += len(labels)
    t_last, c_last, w_last = time.perf_counter(), time.process_time(), runqueue_wait()
    c.close()
    if t_first is None or rows < args.rows:
        sys.exit("baseline_json: read %d of %d rows before the timeout" % (rows, args.rows))
    s = t_last - t_first
    res = {"bench": "json_stream_python", "threads": 1, "rows": rows,
           "seconds": round(s, 3), "rows_per_s": round(rows / s),
           "cpu_seconds": round(c_last - c_first, 2),
           "cpu_us_per_row": round((c_last - c_first) / rows * 1e6, 2),
           "runqueue_wait_seconds": round(w_last - w_first, 2),
           "vocab_entries": sum(len(v) for v in pipe.vocab.values()),
           "pipeline": "confluent-kafka + json + numpy + xxhash, clickstream.yaml's features, "
                       "%d msgs/consume" % args.batch}
    if args.check:
        res["matches_piperec"] = mismatch is None
        if mismatch:
            res["mismatch"] = mismatch
    print(json.dumps(res))
    sys.exit(1 if mismatch else 0)


if __name__ == "__main__":
    main()
