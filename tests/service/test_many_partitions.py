#!/usr/bin/python3
"""test_many_partitions.py — offsets of a pipeline with more partitions than
the store of safe offsets once looked at (a fixed array of 256).

300 partitions; each gets one Criteo line, then a message with no row in
it (a blank line: one record, rejected `empty`, so that it is not silently
dropped). Such a message reaches no batch, so its offset is committed only
because the pipeline notes, for every assigned partition, how far the
consumer got. With
consumers 1 and 2 (the store reads the whole assignment of both instances),
`piperec run` delivers the 300 rows and, after SIGTERM, the group's
committed offsets are at every partition's end (600); before the fix the
partitions past the 256th of the assignment stayed one message short.
Env (pr_script_test): PIPEREC, PR_TMP, PR_SOURCE_DIR.
"""
import os
import subprocess
import sys
import time

from confluent_kafka import Producer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from svc_run import broker, committed, fail, metric, start  # noqa: E402

PIPEREC = os.environ["PIPEREC"]
T = os.environ["PR_TMP"]
P = 300
procs = []

try:
    bootstrap = broker(PIPEREC, P, "ev", procs)
    data = os.path.join(T, "in.tsv")
    subprocess.run([PIPEREC, "gen", "--rows", str(P), "--seed", "5", "--output", data],
                   check=True, stderr=subprocess.DEVNULL)
    lines = open(data, "rb").read().splitlines()
    pr = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for p in range(P):
        pr.produce("ev", value=lines[p] + b"\n", partition=p)
        pr.produce("ev", value=b"\n", partition=p)  # no row: rejected `empty`
    if pr.flush(30) != 0:
        fail("producer: messages not delivered")

    for consumers in (1, 2):
        group = "many%d" % consumers
        cfg = os.path.join(T, "run%d.yaml" % consumers)
        open(cfg, "w").write("""pipelines:
  - name: p
    source:
      kafka:
        topics: [ev]
        group.id: %s
        properties: { bootstrap.servers: "%s", auto.offset.reset: earliest,
                      session.timeout.ms: 6000, heartbeat.interval.ms: 500 }
      consumers: %d
    batch: { size: 64, max_delay_ms: 20 }
    sinks:
      files: { dir: "%s", roll_batches: 20 }
engine: { threads: 2 }
http: { listen: "127.0.0.1:0" }
log: { level: info }
""" % (group, bootstrap, consumers, os.path.join(T, "out%d" % consumers)))
        run, hp = start(PIPEREC, cfg, "run%d" % consumers, procs)
        deadline = time.monotonic() + 90
        while metric(hp, "piperec_records_out_total") < P and time.monotonic() < deadline:
            time.sleep(0.2)
        out = metric(hp, "piperec_records_out_total")
        rejected = metric(hp, "piperec_rejected_records_total")
        time.sleep(1.0)  # the last acks and a store of safe offsets
        run.terminate()
        if run.wait(60) != 0:
            fail("consumers %d: run exited %d after SIGTERM" % (consumers, run.returncode))
        if out != P:
            fail("consumers %d: records out %d, produced %d" % (consumers, out, P))
        if rejected != P:
            fail("consumers %d: %d records rejected, want %d (each blank message is one, "
                 "`empty`)" % (consumers, rejected, P))
        got, end = committed(bootstrap, group, "ev")
        if end != 2 * P or got != end:
            fail("consumers %d: committed offsets sum to %d, the partitions end at %d "
                 "(%d partitions one message short)" % (consumers, got, end, end - got))
    print("test_many_partitions: ok (%d partitions, consumers 1 and 2: every offset committed, "
          "records without rows included)" % P)
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
