#!/usr/bin/python3
"""test_kafka_sink_json.py — issue 20: the Kafka sink carries jagged batches.

`piperec gen --format json` events through `piperec run` with the example's
declared schema (examples/clickstream.yaml: labels, dense features, single
ids, the `tags` and `history` lists) into the Kafka sink; a plain Kafka
consumer (confluent_kafka) reads the TrainingBatch messages back and
decodes them with the Python client's decode_batch. One input partition, so
the stream order is the file order, and the rows, taken in sequence order,
must equal the offline layout of `piperec process` on the same lines:
labels.npy, dense.npy and per feature sparse/<name>.values.npy and
lengths.npy, value for value. The list features' lengths are the true ones
(not all 1; some 0), as the npy layout has them.
Env (pr_script_test): PIPEREC, PR_SOURCE_DIR, PR_TMP.
"""
import os
import re
import subprocess
import sys
import time

import numpy as np
from confluent_kafka import Consumer

PIPEREC = os.environ["PIPEREC"]
SRC = os.environ["PR_SOURCE_DIR"]
T = os.environ["PR_TMP"]
sys.path.insert(0, os.path.join(SRC, "clients", "python"))
import piperec_client as pc  # noqa: E402

N = 3000
procs = []


def fail(msg):
    print("FAIL:", msg)
    for name in ("broker.err", "run.err"):
        p = os.path.join(T, name)
        if os.path.exists(p):
            print("---", name)
            print("".join(open(p).readlines()[-30:]))
    sys.exit(1)


def cleanup():
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def example_schema():
    """The `schema:` block of examples/clickstream.yaml, as written there."""
    lines = open(os.path.join(SRC, "examples", "clickstream.yaml")).read().split("\n")
    start = next(i for i, l in enumerate(lines) if l.startswith("    schema:"))
    end = next(i for i, l in enumerate(lines) if l.startswith("    transform:"))
    return "\n".join(lines[start:end])


try:
    data = os.path.join(T, "events.jsonl")
    subprocess.run([PIPEREC, "gen", "--format", "json", "--rows", str(N), "--seed", "5",
                    "--output", data], check=True)
    berr = open(os.path.join(T, "broker.err"), "w")
    broker = subprocess.Popen([PIPEREC, "broker", "--partitions", "1", "--topics",
                               "clicks,batches"], stdout=subprocess.PIPE, stderr=berr, text=True)
    procs.append(broker)
    first = broker.stdout.readline()
    if not first.startswith("bootstrap="):
        fail("broker printed %r" % first)
    bootstrap = first.strip().split("=", 1)[1]
    subprocess.run([PIPEREC, "produce", "--bootstrap", bootstrap, "--topic", "clicks",
                    "--format", "json", "--input", data], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    cfg = os.path.join(T, "run.yaml")
    with open(cfg, "w") as f:
        f.write("""pipelines:
  - name: p
    source:
      kafka:
        topics: [clicks]
        group.id: kafka-sink-json
        properties: { bootstrap.servers: "%s", auto.offset.reset: earliest }
      format: json
%s
    transform:
      vocab: { profile: default }
    batch: { size: 200, max_delay_ms: 50 }
    sinks:
      kafka:
        topic: batches
        properties: { bootstrap.servers: "%s" }
http: { listen: "127.0.0.1:0" }
log: { level: info }
""" % (bootstrap, example_schema(), bootstrap))
    off = os.path.join(T, "off")
    subprocess.run([PIPEREC, "process", "--config", cfg, "--input", data, "--output", off,
                    "--no-progress"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    off_lab = np.load(os.path.join(off, "labels.npy"))
    off_den = np.load(os.path.join(off, "dense.npy"))
    feats = sorted(n[:-len(".values.npy")] for n in os.listdir(os.path.join(off, "sparse"))
                   if n.endswith(".values.npy"))
    off_val = {n: np.load(os.path.join(off, "sparse", n + ".values.npy")) for n in feats}
    off_len = {n: np.load(os.path.join(off, "sparse", n + ".lengths.npy")) for n in feats}
    rows_off = len(off_lab)
    if rows_off < N * 0.9:
        fail("offline kept %d of %d rows" % (rows_off, N))
    for n in ("tags", "history"):
        if (off_len[n] == 1).all() or not (off_len[n] == 0).any() or off_len[n].max() < 2:
            fail("offline %s lengths are not those of a list: %s" % (n, off_len[n][:20]))

    run = subprocess.Popen([PIPEREC, "run", "--config", cfg],
                           stderr=open(os.path.join(T, "run.err"), "w"))
    procs.append(run)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["batches"])
    batches = {}
    got = 0
    deadline = time.monotonic() + 90
    while got < rows_off and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        b = pc.decode_batch(m.value())
        if b.sequence in batches:  # produced again after a failed delivery report
            continue
        hdr = dict(m.headers() or [])
        if hdr.get("piperec.sequence", b"").decode() != str(b.sequence):
            fail("batch %d: header piperec.sequence %r" % (b.sequence, hdr))
        batches[b.sequence] = b
        got += b.rows
    c.close()
    if got != rows_off:
        fail("read %d rows from the batches topic, offline has %d" % (got, rows_off))
    run.terminate()
    if run.wait(30) != 0:
        fail("run exited %d" % run.returncode)

    seqs = sorted(batches)
    if seqs != list(range(1, len(seqs) + 1)):
        fail("sequence numbers %s..." % seqs[:10])
    lab = np.concatenate([np.asarray(batches[s].labels, dtype=np.float32).reshape(
        batches[s].rows, -1) for s in seqs])
    den = np.concatenate([np.asarray(batches[s].dense, dtype=np.float32).reshape(
        batches[s].rows, -1) for s in seqs])
    if not np.array_equal(lab, off_lab.reshape(lab.shape)):
        fail("labels differ from labels.npy")
    if not np.array_equal(den, off_den.reshape(den.shape)):
        fail("dense differs from dense.npy")
    for n in feats:
        vals, lens = [], []
        for s in seqs:
            b = batches[s]
            if not b.jagged:
                fail("batch %d is not jagged" % s)
            v, ln = b.feature(n)
            vals.append(np.asarray(v, dtype=np.int64))
            lens.append(np.asarray(ln, dtype=np.int32))
        vals, lens = np.concatenate(vals), np.concatenate(lens)
        if not np.array_equal(lens, off_len[n]):
            fail("feature %s: lengths differ from %s.lengths.npy" % (n, n))
        if not np.array_equal(vals, off_val[n]):
            fail("feature %s: values differ from %s.values.npy" % (n, n))
    print("test_kafka_sink_json: ok (%d rows in %d batches, %d features; history %d values)"
          % (got, len(seqs), len(feats), len(off_val["history"])))
finally:
    cleanup()
