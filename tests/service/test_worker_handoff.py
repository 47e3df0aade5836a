#!/usr/bin/python3
"""test_worker_handoff.py — exactly once and in order through engine.overlap's
block handoff, with no failure anywhere.

With engine.overlap the pipeline thread reads the next block while a worker
runs the engine and batcher on the previous one, and the two swap blocks
once the worker is done. A race in that handoff (a run that finished between
two looks at the worker's state was taken for "idle", so the finished block
was swapped back in before it was reset) ran a whole block twice and lost
another one; it showed up about once in eight runs of test_popular_split.

This test makes the handoff happen thousands of times: one partition, rows
produced at a steady rate as 1- and 20-line messages while `piperec run`
reads (so most blocks are small), tiny batches, the files sink. Several
rounds on fresh consumer groups. Each round's output, in sequence order,
must equal `piperec process` over the same input row for row: same count,
same order, same values (one partition: the stream order is the file order,
and both drivers share the engine). The last round adds a vocab_log: new
values are decided through the log, and while a block waits the next one's
values are proposed ahead; one replica must still number every value in
first-appearance order, exactly as the offline run does.
Rounds vary engine.threads (1, 2, 4) and PIPEREC_WORKER_DEFER_EMIT (the
worker's batches sent by the pipeline thread beside the next block, the
default, or by the worker itself, the old path): every combination must give
the offline output row for row.
Env (pr_script_test): PIPEREC, PR_TMP. PR_HANDOFF_VOCAB_ALL=1 gives every
round its own vocab_log topic (tests/service/handoff_loaded.sh runs copies
of it at once on a loaded machine).
"""
import glob
import os
import re
import subprocess
import sys
import time
import urllib.request

import numpy as np

PIPEREC = os.environ["PIPEREC"]
T = os.environ["PR_TMP"]
N = 12000          # rows per round (about 2.4 MB of TSV: under the broker's 5 MB)
ROUNDS = 5       # the last one with a vocab_log
VOCAB_ALL = os.environ.get("PR_HANDOFF_VOCAB_ALL") == "1"  # every round with one
# Per round: engine.threads and PIPEREC_WORKER_DEFER_EMIT (1: deferred sends).
ROUND_THREADS = (1, 2, 4, 4, 2)
ROUND_DEFER = ("1", "0", "1", "0", "1")
procs = []


def fail(msg):
    print("FAIL:", msg)
    for p in sorted(glob.glob(os.path.join(T, "*.err"))):
        print("---", os.path.basename(p))
        print("".join(open(p).readlines()[-20:]))
    sys.exit(1)


def metric(hp, name):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % hp, timeout=10) as r:
        m = re.search(r'^%s\{pipeline="p"\} (\S+)$' % name, r.read().decode(), re.M)
    return int(float(m.group(1))) if m else 0


def out_rows(hp):
    return metric(hp, "piperec_records_out_total")


def read_rolls(d):
    """Every committed roll of a files sink dir, in batch-sequence order."""
    rolls = []
    for r in glob.glob(os.path.join(d, "batches-*")):
        epoch, first = (int(x) for x in os.path.basename(r).split("-")[1:3])
        rolls.append(((epoch, first), r))
    rolls.sort()
    if not rolls:
        return None
    cat = lambda name: np.concatenate([np.load(os.path.join(r, name)) for _, r in rolls])
    return cat("labels.npy").reshape(-1), cat("dense.npy"), cat("sparse.npy")


try:
    berr = open(os.path.join(T, "broker.err"), "w")
    topics = ",".join("events%d" % i for i in range(ROUNDS)) + ",vocab"
    if VOCAB_ALL:
        topics += "".join(",vocab%d" % i for i in range(ROUNDS))
    broker = subprocess.Popen([PIPEREC, "broker", "--partitions", "1", "--topics", topics],
                              stdout=subprocess.PIPE, stderr=berr, text=True)
    procs.append(broker)
    first = broker.stdout.readline()
    if not first.startswith("bootstrap="):
        fail("broker printed %r" % first)
    bootstrap = first.strip().split("=", 1)[1]

    for rnd in range(ROUNDS):
        data = os.path.join(T, "in%d.tsv" % rnd)
        subprocess.run([PIPEREC, "gen", "--rows", str(N), "--seed", str(11 + rnd), "--output",
                        data], check=True, stderr=subprocess.DEVNULL)
        off = os.path.join(T, "off%d" % rnd)
        subprocess.run([PIPEREC, "process", "--input", data, "--output", off], check=True,
                       stderr=subprocess.DEVNULL)
        want = (np.load(os.path.join(off, "labels.npy")).reshape(-1),
                np.load(os.path.join(off, "dense.npy")), np.load(os.path.join(off, "sparse.npy")))
        if len(want[0]) != N:
            fail("round %d: offline run kept %d of %d rows" % (rnd, len(want[0]), N))

        outdir = os.path.join(T, "out%d" % rnd)
        cfg = os.path.join(T, "run%d.yaml" % rnd)
        with open(cfg, "w") as f:
            f.write("""pipelines:
  - name: p
    source:
      kafka:
        topics: [events%d]
        group.id: handoff-%d
        properties: { bootstrap.servers: "%s", auto.offset.reset: earliest }
    batch: { size: 32, max_delay_ms: 5 }
    sinks:
      files: { dir: "%s", roll_batches: 50 }
%s
engine: { overlap: true, threads: %d }
http: { listen: "127.0.0.1:0" }
log: { level: info }
""" % (rnd, rnd, bootstrap, outdir,
       "    vocab_log: { topic: vocab%d }" % rnd if VOCAB_ALL else
       "    vocab_log: { topic: vocab }" if rnd == ROUNDS - 1 else "",
       ROUND_THREADS[rnd % len(ROUND_THREADS)]))
        rerr = os.path.join(T, "run%d.err" % rnd)
        env = dict(os.environ, PIPEREC_WORKER_DEFER_EMIT=ROUND_DEFER[rnd % len(ROUND_DEFER)])
        run = subprocess.Popen([PIPEREC, "run", "--config", cfg], stderr=open(rerr, "w"), env=env)
        procs.append(run)
        hp = None
        deadline = time.monotonic() + 30
        while hp is None and time.monotonic() < deadline:
            m = re.search(r"http on port (\d+)", open(rerr).read())
            hp = int(m.group(1)) if m else None
            time.sleep(0.05)
        if hp is None:
            fail("round %d: no http port in the log" % rnd)
        # Half as single lines, half as 20-line messages, at a steady rate
        # while the run reads: many small blocks, many handoffs.
        lines = open(data).readlines()
        half = os.path.join(T, "a%d.tsv" % rnd), os.path.join(T, "b%d.tsv" % rnd)
        open(half[0], "w").writelines(lines[:N // 2])
        open(half[1], "w").writelines(lines[N // 2:])
        for path, per in ((half[0], "1"), (half[1], "20")):
            subprocess.run([PIPEREC, "produce", "--bootstrap", bootstrap, "--topic",
                            "events%d" % rnd, "--input", path, "--rate", "4000",
                            "--lines-per-message", per], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while out_rows(hp) < N and time.monotonic() < deadline:
            time.sleep(0.1)
        got_out = out_rows(hp)
        time.sleep(0.3)  # anything extra would show up now
        got_out = out_rows(hp)
        ahead = metric(hp, "piperec_vocab_log_ahead_proposals_total")
        run.terminate()
        if run.wait(30) != 0:
            fail("round %d: run exited %d" % (rnd, run.returncode))
        if got_out != N:
            fail("round %d: piperec_records_out_total %d, produced %d" % (rnd, got_out, N))
        got = read_rolls(outdir)
        if got is None:
            fail("round %d: no rolls in %s" % (rnd, outdir))
        if len(got[0]) != N:
            fail("round %d: the files hold %d rows of %d" % (rnd, len(got[0]), N))
        for name, a, b in zip(("labels", "dense", "sparse"), got, want):
            if a.shape != b.shape or not np.array_equal(a, b):
                bad = next(i for i in range(N) if not np.array_equal(a[i], b[i]))
                if name == "sparse":
                    cols = [c for c in range(a.shape[1]) if a[bad][c] != b[bad][c]]
                    print("row %d: columns %s: streamed %s, offline %s" %
                          (bad, cols, [int(a[bad][c]) for c in cols],
                           [int(b[bad][c]) for c in cols]))
                fail("round %d: %s differ from the offline output first at row %d" %
                     (rnd, name, bad))
        if rnd == ROUNDS - 1 and ahead == 0:
            fail("round %d: no value was proposed ahead: the look-ahead path was not "
                 "exercised" % rnd)
        print("round %d: %d rows exactly once, in order (engine.threads %d, deferred sends %s)%s" %
              (rnd, N, ROUND_THREADS[rnd % len(ROUND_THREADS)],
               ROUND_DEFER[rnd % len(ROUND_DEFER)], " (vocab_log; %d values proposed ahead)" % ahead
               if rnd == ROUNDS - 1 else ""))
    print("test_worker_handoff: ok")
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
