#!/usr/bin/python3
"""json_fault.py — JSON events and their check for the declared-schema fault
tests (test_fault_kill_json.sh, test_vocab_log_rebalance_json.sh).

  json_fault.py schema
      the `schema:` block the tests use (to stdout): a label, the row id as a
      dense feature (float32: exact below 2^24), and four vocab features:
      `user` (a string id, missing in some records: index 0 under the default
      profile), `hist` (a list of 0..5 integer ids), `item` (an integer id
      through modulus 1000), and `seen` (the last 3 of a list of 0..4 item
      ids, the same modulus, in item's table: `table: item`).
  json_fault.py gen FIRST COUNT FILE
      COUNT JSON lines with row ids FIRST.. (deterministic per row id).
  json_fault.py check --bootstrap B --topic T [--topic T2] --input F... \
          [--offline DIR] [--epochs-min K] [--timeout S]
      Reads every TrainingBatch of the Kafka sink topics (from the start,
      until every row id is there or the timeout) and proves:
        - nothing lost: every input row id was delivered (duplicates allowed:
          at-least-once; they are counted);
        - every delivery of a row carries its label and the same indices;
        - one index per value and one value per index, per table (item and
          seen share one), over all deliveries of every run and instance (a
          list element by element; a missing user is index 0);
        - with --offline (the `piperec process` output of the same lines in
          the same order, one partition): every row's indices equal those of
          that uninterrupted run;
        - (epoch, sequence) strictly increase per topic in log order, and at
          least --epochs-min epochs were seen.
      Prints a one-line summary.
"""
import argparse
import collections
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))

SCHEMA = """    schema:
      labels:
        - { name: click, path: click }
      dense:
        - { name: rid, path: rid }
      sparse:
        - { name: user, path: user.id, ops: [vocab] }
        - { name: hist, path: hist, list: { max_len: 5 }, ops: [vocab] }
        - { name: item, path: item, ops: [ { modulus: 1000 }, vocab ] }
        - { name: seen, path: seen, list: { max_len: 3, keep: last },
            ops: [ { modulus: 1000 }, vocab ], table: item }"""
FEATS = ("user", "hist", "item", "seen")
TABLE = {"user": "user", "hist": "hist", "item": "item", "seen": "item"}


def record(rid):
    """Row rid's event: ids skewed so that values repeat across rows."""
    x = (rid * 2654435761) & 0xffffffff
    ev = {"rid": rid, "click": rid % 3 == 0}
    if rid % 17 != 5:
        ev["user"] = {"id": "u%d" % ((x >> 3) % (50 + rid // 40))}
    n = (x >> 11) % 6
    if n:
        ev["hist"] = [((x >> (13 + 2 * j)) * (j + 7)) % (30 + rid // 25) for j in range(n)]
    ev["item"] = (x >> 7) % 5000
    m = (x >> 5) % 5
    if m:
        ev["seen"] = [((x >> (3 + j)) * 7919 + rid) % 5000 for j in range(m)]
    return ev


def raw_values(ev):
    """The raw value of each element of each feature, as the index stands for."""
    return {"user": [ev["user"]["id"] if "user" in ev else None],
            "hist": list(ev.get("hist", [])),
            "item": [ev["item"] % 1000],
            "seen": [s % 1000 for s in ev.get("seen", [])[-3:]]}


def cmd_gen(a):
    with open(a.file, "w") as f:
        for rid in range(a.first, a.first + a.count):
            f.write(json.dumps(record(rid), separators=(",", ":")) + "\n")


def read_batches(bootstrap, topics, want, timeout):
    """Every batch of the topics, in log order per topic; stops once every row
    id in `want` was seen (then drains what is already there) or at timeout."""
    from confluent_kafka import Consumer, KafkaError
    import piperec_client as pc
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "json-fault-check-%d" % os.getpid(),
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.subscribe(list(topics))
    out = collections.defaultdict(list)
    seen = set()
    deadline = time.monotonic() + timeout
    quiet = None
    while time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None or (m.error() and m.error().code() == KafkaError._PARTITION_EOF):
            if want <= seen:
                quiet = quiet or time.monotonic()
                if time.monotonic() - quiet > 1.0:
                    break
            continue
        if m.error():
            continue
        quiet = None
        b = pc.decode_batch(m.value())
        out[m.topic()].append(b)
        rid_col = 0  # the schema's only dense feature
        for i in range(b.rows):
            seen.add(int(b.dense[i][rid_col]))
    c.close()
    return out


def cmd_check(a):
    events = {}
    for path in a.input:
        for line in open(path):
            ev = json.loads(line)
            events[ev["rid"]] = ev
    want = set(events)
    by_topic = read_batches(a.bootstrap, a.topic, want, a.timeout)
    off = None
    if a.offline:
        rid = np.load(os.path.join(a.offline, "dense.npy"))[:, 0].astype(np.int64)
        off = {}
        for name in FEATS:
            v = np.load(os.path.join(a.offline, "sparse", name + ".values.npy"))
            ln = np.load(os.path.join(a.offline, "sparse", name + ".lengths.npy"))
            at = np.concatenate(([0], np.cumsum(ln)))
            for i, r in enumerate(rid.tolist()):
                off.setdefault(r, {})[name] = v[at[i]:at[i + 1]].tolist()
        if set(off) != want:
            sys.exit("the offline run holds %d rows, the input %d" % (len(off), len(want)))
    got = {}                  # rid -> {feature: indices}
    deliveries = 0
    epochs = set()
    v2i = {t: {} for t in TABLE.values()}
    i2v = {t: {} for t in TABLE.values()}
    for topic, batches in by_topic.items():
        last = (0, 0)
        for b in batches:
            if not b.jagged or list(b.keys) != list(FEATS):
                sys.exit("%s seq %d: not the schema's jagged batch (keys %s)" %
                         (topic, b.sequence, list(b.keys)))
            if (b.epoch, b.sequence) <= last:
                sys.exit("%s: (epoch, seq) (%d, %d) after (%d, %d)" %
                         (topic, b.epoch, b.sequence, last[0], last[1]))
            last = (b.epoch, b.sequence)
            epochs.add(b.epoch)
            cols = {}
            for name in FEATS:
                v, ln = b.feature(name)
                cols[name] = (np.asarray(v).tolist(), np.concatenate(([0], np.cumsum(ln))))
            rid_col = 0  # the schema's only dense feature
            for i in range(b.rows):
                r = int(b.dense[i][rid_col])
                ev = events.get(r)
                if ev is None:
                    sys.exit("%s seq %d: row id %d is not an input row" % (topic, b.sequence, r))
                if float(b.labels[i][0]) != (1.0 if ev["click"] else 0.0):
                    sys.exit("row %d: label %s" % (r, b.labels[i]))
                idx = {n: cols[n][0][cols[n][1][i]:cols[n][1][i + 1]] for n in FEATS}
                deliveries += 1
                if r in got and got[r] != idx:
                    sys.exit("row %d delivered twice with different indices: %s, then %s" %
                             (r, got[r], idx))
                got[r] = idx
                if off is not None and off[r] != idx:
                    sys.exit("row %d: indices %s, the uninterrupted run's %s" % (r, idx, off[r]))
                raw = raw_values(ev)
                for n in FEATS:
                    t = TABLE[n]
                    if len(raw[n]) != len(idx[n]):
                        sys.exit("row %d feature %s: %d indices for %d values" %
                                 (r, n, len(idx[n]), len(raw[n])))
                    for val, ix in zip(raw[n], idx[n]):
                        if val is None:
                            if ix != 0:
                                sys.exit("row %d: a missing %s has index %d, not 0" % (r, n, ix))
                            continue
                        if v2i[t].setdefault(val, ix) != ix:
                            sys.exit("feature %s (table %s): value %r has indices %d and %d" %
                                     (n, t, val, v2i[t][val], ix))
                        if i2v[t].setdefault(ix, val) != val:
                            sys.exit("feature %s (table %s): index %d stands for %r and %r" %
                                     (n, t, ix, i2v[t][ix], val))
    lost = want - set(got)
    if lost:
        sys.exit("%d rows lost (e.g. %s)" % (len(lost), sorted(lost)[:5]))
    if len(epochs) < a.epochs_min:
        sys.exit("%d epochs seen (%s), want at least %d; batches per topic %s" % (len(epochs), sorted(epochs), a.epochs_min, {t: len(bs) for t, bs in by_topic.items()}))
    per_topic = " ".join("%s=%d" % (t, sum(b.rows for b in bs)) for t, bs in sorted(by_topic.items()))
    print("%d rows, %d deliveries (%d duplicates), %d epochs, %s; values: %s" %
          (len(got), deliveries, deliveries - len(got), len(epochs), per_topic,
           " ".join("%s=%d" % (t, len(v2i[t])) for t in sorted(v2i))))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("schema")
    g = sub.add_parser("gen")
    g.add_argument("first", type=int)
    g.add_argument("count", type=int)
    g.add_argument("file")
    c = sub.add_parser("check")
    c.add_argument("--bootstrap", required=True)
    c.add_argument("--topic", action="append", required=True)
    c.add_argument("--input", action="append", required=True)
    c.add_argument("--offline")
    c.add_argument("--epochs-min", type=int, default=1)
    c.add_argument("--timeout", type=float, default=90)
    a = ap.parse_args()
    if a.cmd == "schema":
        print(SCHEMA)
    elif a.cmd == "gen":
        cmd_gen(a)
    else:
        cmd_check(a)


if __name__ == "__main__":
    main()
