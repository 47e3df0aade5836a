#!/usr/bin/python3
"""test_consume_notices.py — `piperec consume --output` keeps the
recycled-index notices of a bounded vocabulary (it wrote none: the output's
rows then used indices whose meaning had changed, with nothing to say where).

A Zipf Criteo stream through `piperec run` with an evicting vocabulary
(lru, a small capacity), one partition, a trainer sink read by `piperec
consume --output`. One partition, so the stream is the file in order and
its indices and notices equal `piperec process` on the same lines: meta.json's
per-batch "recycled" ([column, row, index, number], row a row of the
output's files) must be exactly the rows of process's recycled.npy, the
arrays equal, and the summary line must count the notices.
Env (pr_script_test): PIPEREC, PR_TMP.
"""
import json
import os
import re
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from svc_run import broker, fail, metric, start  # noqa: E402

PIPEREC = os.environ["PIPEREC"]
T = os.environ["PR_TMP"]
N = 6000
procs = []
CFG = """pipelines:
  - name: p
    source:
      kafka:
        topics: [events]
        properties:
          bootstrap.servers: "%s"
          auto.offset.reset: earliest
          fetch.wait.max.ms: "10"
    schema: { label: true, dense: 13, sparse: 26 }
    transform:
      sparse: [hex2int, { modulus: 100000 }, vocab]
      vocab: { profile: default, capacity: 64, eviction: lru }
    batch: { size: 512, max_delay_ms: 50 }
    sinks:
      trainer: { listen: "127.0.0.1:0" }
http: { listen: "127.0.0.1:0" }
"""

try:
    data = os.path.join(T, "in.tsv")
    subprocess.run([PIPEREC, "gen", "--rows", str(N), "--seed", "4", "--zipf", "1.1", "--output",
                    data], check=True, capture_output=True)
    cfg = os.path.join(T, "p.yaml")
    off = os.path.join(T, "offline")
    with open(cfg, "w") as f:
        f.write(CFG % "127.0.0.1:1")
    subprocess.run([PIPEREC, "process", "--config", cfg, "--input", data, "--output", off,
                    "--no-progress"], check=True, capture_output=True)
    want = np.load(os.path.join(off, "recycled.npy"))
    if len(want) == 0:
        fail("the offline run recycled nothing: make the vocabulary smaller")
    bs = broker(PIPEREC, 1, "events", procs)
    with open(cfg, "w") as f:
        f.write(CFG % bs)
    subprocess.run([PIPEREC, "produce", "--bootstrap", bs, "--topic", "events", "--input", data],
                   check=True, capture_output=True)
    run, hp = start(PIPEREC, cfg, "run", procs)
    port = None
    for _ in range(300):
        m = re.search(r"trainers connect to port (\d+)", open(os.path.join(T, "run.err")).read())
        if m:
            port = m.group(1)
            break
        subprocess.run(["sleep", "0.1"])
    if not port:
        fail("no trainer port")
    # the group's join first (seconds on the test broker), so that the idle
    # timeout below counts only the stream's own pauses
    for _ in range(600):
        if metric(hp, "piperec_records_in_total") > 0:
            break
        subprocess.run(["sleep", "0.1"])
    else:
        fail("no records read in 60 s")
    out = os.path.join(T, "consumed")
    c = subprocess.run([PIPEREC, "consume", "--connect", "127.0.0.1:" + port, "--pipeline", "p",
                        "--output", out, "--idle-timeout-ms", "3000"], capture_output=True,
                       text=True, timeout=120)
    if c.returncode != 0:
        fail("consume: %s %s" % (c.stdout, c.stderr))
    meta = json.load(open(os.path.join(out, "meta.json")))
    if meta["rows"] != N:
        fail("consumed %d rows of %d" % (meta["rows"], N))
    got = np.array([n for b in meta["batches"] for n in b.get("recycled", [])],
                   dtype=np.int64).reshape(-1, 4)
    if not np.array_equal(got, want):
        fail("notices: %d consumed, %d offline; first differing: %s vs %s" % (
            len(got), len(want), got[:3].tolist(), want[:3].tolist()))
    if not np.array_equal(np.load(os.path.join(out, "sparse.npy")),
                          np.load(os.path.join(off, "sparse.npy"))):
        fail("the consumed indices differ from the offline ones")
    if "%d recycled-index notice(s)" % len(want) not in c.stdout:
        fail("the summary does not count the notices: %s" % c.stdout)
finally:
    for p in procs:
        p.kill()
        p.wait()
print("consume notices: ok (%d notices, as offline)" % len(want))
