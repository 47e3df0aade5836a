#!/usr/bin/python3
"""test_consumer_instances.py — several consumer instances in one process
(source.consumers, issue 21): each is a member of the group with its share
of the partitions, and the process still delivers every row once, commits
every offset and reports the whole assignment.

8 partitions, 3 instances, 3 decode threads, files sink: every partition is
assigned (piperec_assigned_partitions 8 across the instances), every row
comes out exactly once (labels and dense values as a multiset equal
`piperec process` on the same rows: the partitions interleave, so the order
and the vocabulary indices may differ), SIGTERM drains and exits 0, the
group's committed offsets reach every partition's end, and a restart on the
same group reads nothing again. At the stop the three instances revoke and
commit before any of them leaves, then leave together: no instance takes a
sibling's partitions over while the process stops (one rebalance, not one
per instance, each ~5 s on the test broker). A user-set group.instance.id
property with consumers > 1 is refused.
Env (pr_script_test): PIPEREC, PR_TMP, PR_SOURCE_DIR.
"""
import glob
import os
import re
import subprocess
import sys
import time
import urllib.request

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from svc_run import start  # noqa: E402

PIPEREC = os.environ["PIPEREC"]
T = os.environ["PR_TMP"]
SRC = os.environ["PR_SOURCE_DIR"]
N = 12000
procs = []


def fail(msg):
    print("FAIL:", msg)
    for p in sorted(glob.glob(os.path.join(T, "*.err"))):
        print("---", os.path.basename(p))
        print("".join(open(p, errors="replace").readlines()[-15:]))
    sys.exit(1)


def metric(hp, name):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % hp, timeout=10) as r:
        page = r.read().decode()
    return sum(float(v) for v in re.findall(r'^%s\{pipeline="p"[^}]*\} (\S+)$' % name, page, re.M))


def rows_of(dirs):
    lab = np.concatenate([np.load(os.path.join(d, "labels.npy")).reshape(-1) for d in dirs])
    den = np.concatenate([np.load(os.path.join(d, "dense.npy")) for d in dirs])
    m = np.column_stack([lab.astype(np.float64), den.astype(np.float64)])
    return m[np.lexsort(m.T[::-1])]


try:
    berr = open(os.path.join(T, "broker.err"), "w")
    broker = subprocess.Popen([PIPEREC, "broker", "--partitions", "8", "--topics", "ev"],
                              stdout=subprocess.PIPE, stderr=berr, text=True)
    procs.append(broker)
    first = broker.stdout.readline()
    if not first.startswith("bootstrap="):
        fail("broker printed %r" % first)
    bootstrap = first.strip().split("=", 1)[1]
    data = os.path.join(T, "in.tsv")
    subprocess.run([PIPEREC, "gen", "--rows", str(N), "--seed", "9", "--output", data],
                   check=True, stderr=subprocess.DEVNULL)
    subprocess.run([PIPEREC, "produce", "--bootstrap", bootstrap, "--topic", "ev", "--input",
                    data, "-X", "sticky.partitioning.linger.ms=0"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    off = os.path.join(T, "off")
    subprocess.run([PIPEREC, "process", "--input", data, "--output", off, "--no-progress"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    outdir = os.path.join(T, "out")
    cfg = os.path.join(T, "run.yaml")
    text = """pipelines:
  - name: p
    source:
      kafka:
        topics: [ev]
        group.id: inst
        properties: { bootstrap.servers: "%s", auto.offset.reset: earliest,
                      session.timeout.ms: 6000, heartbeat.interval.ms: 500 }
      consumers: 3
      decode_threads: 3
    batch: { size: 256, max_delay_ms: 20 }
    sinks:
      files: { dir: "%s", roll_batches: 20 }
engine: { threads: 2 }
http: { listen: "127.0.0.1:0" }
log: { level: info }
""" % (bootstrap, outdir)
    open(cfg, "w").write(text)

    # a group.instance.id property cannot serve three members
    bad = os.path.join(T, "bad.yaml")
    open(bad, "w").write(text.replace("auto.offset.reset: earliest,",
                                      "auto.offset.reset: earliest, group.instance.id: x,"))
    rc = subprocess.run([PIPEREC, "run", "--config", bad], stdout=subprocess.DEVNULL,
                        stderr=open(os.path.join(T, "bad.err"), "w"), timeout=60).returncode
    if rc == 0 or "group.instance.id" not in open(os.path.join(T, "bad.err")).read():
        fail("consumers 3 with a group.instance.id property: exit %d" % rc)

    run, hp = start(PIPEREC, cfg, "run1", procs)
    deadline = time.monotonic() + 90
    while metric(hp, "piperec_records_out_total") < N and time.monotonic() < deadline:
        time.sleep(0.2)
    parts = metric(hp, "piperec_assigned_partitions")
    out = metric(hp, "piperec_records_out_total")
    time.sleep(0.5)
    out = metric(hp, "piperec_records_out_total")
    run.terminate()
    if run.wait(60) != 0:
        fail("run exited %d after SIGTERM" % run.returncode)
    log = open(os.path.join(T, "run1.err")).read()
    if out != N:
        fail("records out %d, produced %d" % (out, N))
    if parts != 8:
        fail("piperec_assigned_partitions %d, expected 8 over the three instances" % parts)
    if log.count("consumer: assigned") < 3:
        fail("fewer than three instances were assigned partitions:\n%s" %
             "\n".join(l for l in log.splitlines() if "assigned" in l))
    stop = log[log.find("draining"):]
    if "draining" not in log or "3 instance(s) revoked and committed" not in stop:
        fail("the three instances did not leave the group together at the stop")
    if "consumer: assigned" in stop or "commit on revoke" in stop:
        fail("partitions were reassigned (or a commit failed) while the process stopped:\n%s" %
             "\n".join(l for l in stop.splitlines() if "consumer:" in l))
    rolls = sorted(glob.glob(os.path.join(outdir, "batches-*")))
    got, want = rows_of(rolls), rows_of([off])
    if got.shape != want.shape or not np.array_equal(got, want):
        fail("the rows out are not the rows in (%s vs %s)" % (got.shape, want.shape))
    committed, end = (int(x) for x in subprocess.run(
        ["/usr/bin/python3", os.path.join(SRC, "tests", "fault", "kafka_offsets.py"), bootstrap,
         "inst", "ev"], check=True, capture_output=True, text=True).stdout.split())
    if committed != end or end != N:
        fail("committed offsets %d of %d (topic end %d)" % (committed, N, end))

    run, hp = start(PIPEREC, cfg, "run2", procs)
    deadline = time.monotonic() + 30
    while metric(hp, "piperec_assigned_partitions") < 8 and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.5)
    again = metric(hp, "piperec_records_in_total")
    run.terminate()
    if run.wait(60) != 0:
        fail("second run exited %d" % run.returncode)
    if again != 0:
        fail("a restart on the same group read %d records again" % again)
    print("test_consumer_instances: ok (%d rows once over 3 instances, 8 partitions, offsets "
          "committed)" % N)
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
