#!/usr/bin/python3
"""test_consume_checkpoint.py — issue 12: `piperec consume --checkpoint-file F
--checkpoint-every N --output DIR` in checkpoint delivery
(docs/trainer-protocol.md, "Checkpoint delivery").

`piperec broker` (2 partitions) -> `piperec run` (sinks.trainer.delivery:
checkpoint) -> `piperec consume`. Rows carry unique ids in two dense columns
(id = I1 * 1000 + I2; log1p of an integer is exact enough that
round(expm1(v)) gives it back) and are produced a few at a time, so batches
trickle in. consume is killed with SIGKILL a few batches after one of its
checkpoints, several times, and run again each time with the same F and
DIR; a last run stops cleanly on its idle timeout. Checks:
- each restarted run first gets exactly the batches (epoch, seq) that the
  killed run received after its last checkpoint: none skipped, none twice;
- DIR/dense.npy (the "model": cut back to the checkpoint at each restart)
  holds every produced id exactly once, and meta.json parses and agrees;
- F's position holds every produced offset, and F loads as a Python
  StreamDataset-style position (Position.from_dict);
- usage errors: --checkpoint-every without a file, another pipeline's F.
Env (from pr_script_test): PIPEREC, PR_SOURCE_DIR, PR_TMP.
"""
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.environ["PR_SOURCE_DIR"], "clients", "python"))
from piperec_client import Position  # noqa: E402
from svc_run import free_port  # noqa: E402

PIPEREC = os.environ["PIPEREC"]
T = os.environ["PR_TMP"]
TOTAL, CHUNK = 1200, 24
procs = []



def sparse_cols(out):
    return np.load(os.path.join(out, "sparse.npy"), mmap_mode="r").shape[1]

def fail(msg):
    print("FAIL:", msg)
    for f in sorted(os.listdir(T)):
        if f.endswith(".err"):
            with open(os.path.join(T, f), errors="replace") as fh:
                print("---", f)
                print("".join(fh.readlines()[-20:]))
    sys.exit(1)



def produce(bootstrap, first, n):
    path = os.path.join(T, "rows.tsv")
    with open(path, "w") as f:
        for i in range(first, first + n):
            dense = [str(i // 1000), str(i % 1000)] + ["1"] * 11
            sparse = ["%08x" % (i * 7919 % 1000003)] * 26
            f.write("\t".join([str(i % 2)] + dense + sparse) + "\n")
    r = subprocess.run([PIPEREC, "produce", "--bootstrap", bootstrap, "--topic", "ck",
                        "--input", path], capture_output=True, text=True)
    if r.returncode:
        fail("produce: " + r.stderr)


BATCH = re.compile(r"batch (\d+)/(\d+): (\d+) rows")
CKPT = re.compile(r"checkpoint (\d+): (\d+) batches")


class Consume:
    """One `piperec consume` run; its stderr lines are read by a thread."""

    def __init__(self, port, ckpt, out, n, extra=(), every=4):
        self.log = open(os.path.join(T, "consume-%d.err" % n), "w")
        self.p = subprocess.Popen(
            [PIPEREC, "consume", "--connect", "127.0.0.1:%d" % port, "--pipeline", "p",
             "--credits", "2", "--checkpoint-file", ckpt, "--checkpoint-every", str(every),
             "--output", out, "--verbose"] + list(extra),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(self.p)
        self.events = []  # ("batch", (epoch, seq)) / ("ckpt", batches in the lineage)
        self.cv = threading.Condition()
        self.th = threading.Thread(target=self._read, daemon=True)
        self.th.start()

    def _read(self):
        for line in self.p.stderr:
            self.log.write(line)
            self.log.flush()
            m, k = BATCH.search(line), CKPT.search(line)
            with self.cv:
                if m:
                    self.events.append(("batch", (int(m.group(1)), int(m.group(2)))))
                elif k:
                    self.events.append(("ckpt", int(k.group(2))))
                self.cv.notify_all()

    def wait_for(self, pred, timeout):
        with self.cv:
            if not self.cv.wait_for(lambda: pred(self.events), timeout):
                fail("consume: timed out waiting (events: %s)" % self.events[-6:])

    def finish(self):
        self.p.wait()
        self.th.join()
        return self.p.stdout.read()


def run_scenario(bootstrap, port):
    ckpt, out = os.path.join(T, "consume.ckpt"), os.path.join(T, "out")
    rng = random.Random(12)
    produced = [0]
    stop = threading.Event()

    def producer():  # rows trickle in: ~1-2 batches per chunk
        while produced[0] < TOTAL and not stop.is_set():
            produce(bootstrap, produced[0], CHUNK)
            produced[0] += CHUNK
            time.sleep(0.08)

    pt = threading.Thread(target=producer, daemon=True)
    pt.start()
    pending = []  # batches the previous (killed) run got after its last checkpoint
    lost_total, lineage = 0, 0
    for run in range(4):
        c = Consume(port, ckpt, out, run)
        if pending:  # the restarted run gets them first, in order
            c.wait_for(lambda ev: sum(e[0] == "batch" for e in ev) >= len(pending), 30)
            got = [e[1] for e in c.events if e[0] == "batch"][:len(pending)]
            if sorted(got) != sorted(pending):
                fail("run %d: first batches %s, expected the lost %s" % (run, got, pending))
        # Kill it 1-3 batches after its 2nd checkpoint of this run.
        k = 1 + rng.randrange(3)

        def ready(ev):
            cks = [i for i, e in enumerate(ev) if e[0] == "ckpt"]
            return len(cks) >= 2 and sum(e[0] == "batch" for e in ev[cks[1]:]) >= k

        c.wait_for(ready, 60)
        c.p.send_signal(signal.SIGKILL)
        c.finish()
        with open(ckpt) as f:
            st = json.load(f)
        # Batches after the checkpoint F holds (F may be one later than the
        # last line read if the kill raced a checkpoint: F is the truth).
        batches = [e[1] for e in c.events if e[0] == "batch"]
        n_here = st["batches"] - lineage  # this run's batches that F holds: a prefix
        pending = batches[n_here:]
        if len(set(batches)) != len(batches):
            fail("run %d: a batch twice: %s" % (run, batches))
        lost_total += len(pending)
        lineage = st["batches"]
        print("run %d: %d batches, checkpoint %d holds %d batches; %d after it were lost"
              % (run, len(batches), st["checkpoint"], st["batches"], len(pending)))
    if lost_total == 0:
        fail("no kill fell between checkpoints: the test did not test anything")
    pt.join()
    # Last run: everything left, then a clean stop on the idle timeout.
    c = Consume(port, ckpt, out, 9, ["--idle-timeout-ms", "3000"])
    summary = c.finish()
    print(summary.strip())
    if c.p.returncode != 0 or "idle timeout" not in summary:
        fail("last consume: rc %d, %r" % (c.p.returncode, summary))
    got = [e[1] for e in c.events if e[0] == "batch"]
    if sorted(got[:len(pending)]) != sorted(pending):
        fail("last run: first batches %s, expected the lost %s" % (got[:len(pending)], pending))

    dense = np.load(os.path.join(out, "dense.npy"))
    ids = sorted(int(round(np.expm1(a))) * 1000 + int(round(np.expm1(b)))
                 for a, b in dense[:, :2].astype(np.float64))
    if ids != list(range(TOTAL)):
        dup = len(ids) - len(set(ids))
        fail("output: %d rows, %d duplicates, %d missing" % (len(ids), dup, TOTAL - len(set(ids))))
    meta = json.load(open(os.path.join(out, "meta.json")))
    if meta["rows"] != TOTAL or sum(b["rows"] for b in meta["batches"]) != TOTAL:
        fail("meta.json rows disagree")
    # The files sink's closing keys: shape, names and the last batch's vocab_sizes.
    if (meta.get("n_sparse") != sparse_cols(out) or meta.get("dense_names", [""])[0] != "I1"
            or len(meta.get("sparse_names", [])) != meta["n_sparse"]
            or meta.get("vocab_sizes") != meta["batches"][-1]["vocab_sizes"]):
        fail("meta.json closing keys: %s" % {k: v for k, v in meta.items() if k != "batches"})
    labels = np.load(os.path.join(out, "labels.npy"))
    sparse = np.load(os.path.join(out, "sparse.npy"))
    if labels.shape != (TOTAL,) or sparse.shape[0] != TOTAL:
        fail("labels/sparse rows disagree")
    st = json.load(open(ckpt))
    pos = Position.from_dict(st["position"])
    n_off = sum(b - a + 1 for _, _, a, b in pos.ranges())
    if st["rows"] != TOTAL or n_off != TOTAL or len(pos.ranges()) != 2:
        fail("checkpoint file: %s" % st)
    if st["delivery"] != "checkpoint" or st["pipeline"] != "p" or st["version"] != 1:
        fail("checkpoint file header: %s" % st)
    print("output: %d ids once each; checkpoint %d holds offsets %s"
          % (TOTAL, st["checkpoint"], pos.to_dict()))


def tail_and_stop(bootstrap, port, run):
    """The tail after the last --checkpoint-every group is checkpointed once
    the stream pauses (the committed offsets reach the ends while piperec
    runs), and SIGTERM of `piperec run` is a clean end for consume: exit 0,
    "server stopping", and the server's drain does not time out."""
    ckpt, out = os.path.join(T, "consume.ckpt"), os.path.join(T, "out")
    produce(bootstrap, TOTAL, CHUNK)
    c = Consume(port, ckpt, out, 10, every=1000)
    c.wait_for(lambda ev: any(e[0] == "batch" for e in ev) and ev[-1][0] == "ckpt", 30)
    tool = os.path.join(os.environ["PR_SOURCE_DIR"], "tests", "fault", "kafka_offsets.py")
    deadline = time.monotonic() + 20
    while True:
        done, ends = (int(x) for x in subprocess.run(
            ["/usr/bin/python3", tool, bootstrap, "ck", "ck"], check=True, capture_output=True,
            text=True).stdout.split())
        if done == ends == TOTAL + CHUNK:
            break
        if time.monotonic() > deadline:
            fail("the idle tail was not committed: %d of %d" % (done, ends))
        time.sleep(0.2)
    run.send_signal(signal.SIGTERM)
    summary = c.finish()
    run.wait(timeout=30)
    if c.p.returncode != 0 or "server stopping" not in summary:
        fail("consume at the server's clean stop: rc %d, %r" % (c.p.returncode, summary))
    log = open(os.path.join(T, "run.err")).read()
    if "drain timed out" in log or "not acknowledged at shutdown" in log:
        fail("the drain waited for consume: %s" % log[-800:])
    st = json.load(open(ckpt))
    if st["rows"] != TOTAL + CHUNK:
        fail("checkpoint after the stop: %d rows" % st["rows"])
    print("idle tail committed (%d offsets); SIGTERM: consume exit 0, drain without a timeout"
          % done)


def usage_checks(port):
    r = subprocess.run([PIPEREC, "consume", "--connect", "127.0.0.1:%d" % port, "--pipeline",
                        "p", "--checkpoint-every", "3"], capture_output=True, text=True)
    if r.returncode != 2 or "needs --checkpoint-file" not in r.stderr:
        fail("--checkpoint-every alone: rc %d %r" % (r.returncode, r.stderr))
    other = os.path.join(T, "other.ckpt")
    with open(other, "w") as f:
        json.dump({"version": 1, "pipeline": "q", "delivery": "checkpoint", "position": {}}, f)
    r = subprocess.run([PIPEREC, "consume", "--connect", "127.0.0.1:%d" % port, "--pipeline",
                        "p", "--checkpoint-file", other], capture_output=True, text=True)
    if r.returncode != 2 or "pipeline 'q', not 'p'" not in r.stderr:
        fail("another pipeline's file: rc %d %r" % (r.returncode, r.stderr))
    with open(other, "w") as f:
        f.write('{"version": 1, "pipeline": "p", "position": {"ck/0": [[5, 2]]}}')
    r = subprocess.run([PIPEREC, "consume", "--connect", "127.0.0.1:%d" % port, "--pipeline",
                        "p", "--checkpoint-file", other], capture_output=True, text=True)
    if r.returncode != 2 or "0 <= first <= last" not in r.stderr:
        fail("a bad range: rc %d %r" % (r.returncode, r.stderr))


def main():
    br = subprocess.Popen([PIPEREC, "broker", "--partitions", "2", "--topics", "ck"],
                          stdout=subprocess.PIPE, stderr=open(os.path.join(T, "broker.err"), "w"),
                          text=True)
    procs.append(br)
    first = br.stdout.readline().strip()
    if not first.startswith("bootstrap="):
        fail("broker printed %r" % first)
    bootstrap = first[len("bootstrap="):]
    port = free_port()
    cfg = os.path.join(T, "run.yaml")
    with open(cfg, "w") as f:
        f.write("""pipelines:
  - name: p
    source:
      kafka:
        topics: [ck]
        group.id: ck
        properties: { bootstrap.servers: "%s", auto.offset.reset: earliest,
                      session.timeout.ms: "3000", heartbeat.interval.ms: "500",
                      auto.commit.interval.ms: "200" }
    batch: { size: 16, max_delay_ms: 20 }
    sinks:
      trainer: { listen: "127.0.0.1:%d", max_unacked_batches: 4, delivery: checkpoint }
    state: { dir: "%s/state" }
http: { listen: "127.0.0.1:0" }
log: { level: info }
""" % (bootstrap, port, T))
    run = subprocess.Popen([PIPEREC, "run", "--config", cfg],
                           stderr=open(os.path.join(T, "run.err"), "w"))
    procs.append(run)
    usage_checks(port)
    run_scenario(bootstrap, port)
    tail_and_stop(bootstrap, port, run)
    print("OK")


try:
    main()
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
