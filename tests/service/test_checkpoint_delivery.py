#!/usr/bin/python3
"""test_checkpoint_delivery.py — issue 12 item 5: checkpoint delivery
(sinks.trainer.delivery: checkpoint, docs/trainer-protocol.md).

A `piperec broker` topic of 2 partitions gets rows with unique ids (id in
dense columns I1, I2: id = I1 * 1000 + I2; log1p of an integer below 65536
is exact in the engine, so round(expm1(v)) gives it back). `piperec run`
streams them in checkpoint mode. A trainer loop (TrainerClient) "trains" by
recording row ids, checkpoints every K batches (position + the ids of its
model lineage, written with fsync + rename, then CheckpointCommit), and is
crashed at seeded random points: the trainer alone (socket dropped, state
reloaded from the checkpoint file, sometimes after a checkpoint that was
written but never committed), piperec alone (kill -9, restart), and both.
After every crash the trainer restores its last checkpoint and resumes with
its position. At the end the lineage of the final model must hold every
produced id exactly once. Then the same with two ranks that checkpoint
together (merged position): disjoint batches, every row once.
Env (from pr_script_test): PIPEREC, PR_SOURCE_DIR, PR_TMP.
"""
import json
import math
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.environ["PR_SOURCE_DIR"], "clients", "python"))
from piperec_client import Position, TrainerClient  # noqa: E402
from svc_run import free_port  # noqa: E402

PIPEREC = os.environ["PIPEREC"]
T = os.environ["PR_TMP"]
procs = []


def fail(msg):
    print("FAIL:", msg)
    for f in sorted(os.listdir(T)):
        if f.endswith(".err"):
            with open(os.path.join(T, f), errors="replace") as fh:
                print("---", f)
                print("".join(fh.readlines()[-15:]))
    sys.exit(1)



def row_id(b, r):
    return round(math.expm1(float(b.dense[r, 0]))) * 1000 + round(math.expm1(float(b.dense[r, 1])))


class Piperec:
    def __init__(self, name, bootstrap, port):
        self.name, self.n = name, 0
        self.cfg = os.path.join(T, name + ".yaml")
        with open(self.cfg, "w") as f:
            f.write("""pipelines:
  - name: p
    source:
      kafka:
        topics: [%s]
        group.id: %s
        properties: { bootstrap.servers: "%s", auto.offset.reset: earliest,
                      session.timeout.ms: "3000", heartbeat.interval.ms: "500",
                      auto.commit.interval.ms: "200" }
    batch: { size: 16, max_delay_ms: 20 }
    sinks:
      trainer: { listen: "127.0.0.1:%d", max_unacked_batches: 4, delivery: checkpoint }
    state: { dir: "%s/state-%s" }
http: { listen: "127.0.0.1:0" }
log: { level: info }
""" % (name, name, bootstrap, port, T, name))
        self.start()

    def start(self):
        self.n += 1
        err = open(os.path.join(T, "%s-%d.err" % (self.name, self.n)), "w")
        self.p = subprocess.Popen([PIPEREC, "run", "--config", self.cfg], stderr=err)
        procs.append(self.p)

    def kill9(self):
        self.p.kill()
        self.p.wait()


def produce(bootstrap, topic, first, n):
    path = os.path.join(T, "rows-%d.tsv" % first)
    with open(path, "w") as f:
        for i in range(first, first + n):
            dense = [str(i // 1000), str(i % 1000)] + ["1"] * 11
            sparse = ["%08x" % (i * 7919 % 1000003)] * 26
            f.write("\t".join([str(i % 2)] + dense + sparse) + "\n")
    r = subprocess.run([PIPEREC, "produce", "--bootstrap", bootstrap, "--topic", topic,
                        "--input", path], capture_output=True, text=True)
    if r.returncode:
        fail("produce: " + r.stderr)


class Trainer:
    """One model lineage of `ranks` data-parallel ranks that checkpoint
    together. The checkpoint file holds the merged position and the ids the
    lineage trained on up to it."""

    def __init__(self, name, port, ranks):
        self.path = os.path.join(T, name + ".ckpt.json")
        self.port, self.ranks, self.ckpt_id = port, ranks, 0
        self.restore()

    def restore(self):
        try:
            with open(self.path) as f:
                st = json.load(f)
        except FileNotFoundError:
            st = {"position": {}, "ids": []}
        self.ckpt_pos = Position.from_dict(st["position"])
        self.ckpt_ids = st["ids"]
        self.pos = [Position() for _ in range(self.ranks)]  # per rank, since the checkpoint
        self.ids = []
        self.batches_since = 0
        self.clients = None

    def connect(self, deadline):
        while time.monotonic() < deadline:
            try:
                self.clients = [TrainerClient("127.0.0.1:%d" % self.port, "p", credits=4,
                                              client_id="rank%d" % r, timeout=5,
                                              resume=self.ckpt_pos) for r in range(self.ranks)]
                return
            except (OSError, EOFError, TimeoutError):
                self.drop()
                time.sleep(0.2)
        fail("trainer cannot connect")

    def drop(self):
        for c in self.clients or []:
            try:
                c.sock.close()
            except OSError:
                pass
        self.clients = None

    def crash(self):
        self.drop()
        self.restore()

    def write_checkpoint(self):
        merged = self.ckpt_pos.copy()
        for p in self.pos:
            merged.merge(p)
        st = {"position": merged.to_dict(), "ids": self.ckpt_ids + self.ids}
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(st, f)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, self.path)
        self.ckpt_pos, self.ckpt_ids = merged, st["ids"]
        self.pos = [Position() for _ in range(self.ranks)]
        self.ids, self.batches_since = [], 0
        return merged

    def checkpoint(self, commit=True):
        merged = self.write_checkpoint()
        if commit:
            self.ckpt_id += 1
            self.clients[0].commit_checkpoint(merged, self.ckpt_id)

    def step(self, k):
        """Train on up to one batch per rank; True when one came."""
        got = False
        for r, c in enumerate(self.clients):
            b = c.recv(timeout=0.05)
            if b is None:
                continue
            got = True
            self.ids.extend(row_id(b, i) for i in range(b.rows))
            self.pos[r].add_batch(b)
            c.ack(b.sequence)
            self.batches_since += 1
        if self.batches_since >= k:
            self.checkpoint()
        return got

    def lineage(self):
        return self.ckpt_ids + self.ids


def scenario(name, bootstrap, ranks, total, seed, kills):
    rng = random.Random(seed)
    port = free_port()
    pr = Piperec(name, bootstrap, port)
    tr = Trainer(name, port, ranks)
    tr.connect(time.monotonic() + 30)
    produced, step, crashes = 0, 0, {"trainer": 0, "piperec": 0, "both": 0}
    plan = sorted(rng.sample(range(20, 400), kills))
    kinds = ["trainer", "piperec", "both"] * kills
    rng.shuffle(kinds)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if produced < total and step % 40 == 0:
            produce(bootstrap, name, produced, 500)  # in steps: the broker keeps ~5 MB a partition
            produced += 500
        step += 1
        try:
            tr.step(k=3 + rng.randrange(4))
        except (OSError, EOFError) as e:  # piperec went away: roll back to the checkpoint
            print("%s: connection lost (%s): restoring the checkpoint" % (name, type(e).__name__))
            tr.crash()
            tr.connect(time.monotonic() + 40)
            continue
        if plan and step >= plan[0]:
            plan.pop(0)
            what = kinds.pop()
            crashes[what] += 1
            if what in ("trainer", "both"):
                if tr.batches_since and rng.random() < 0.3:
                    tr.checkpoint(commit=False)  # durable, commit lost with the trainer
                tr.crash()
            if what in ("piperec", "both"):
                pr.kill9()
                pr.start()
            if tr.clients is None:
                tr.connect(time.monotonic() + 40)
        if produced >= total and len(set(tr.lineage())) >= total and not plan:
            break
    if tr.clients:
        tr.checkpoint()
    lin = sorted(tr.lineage())
    print("%s: %d rows, %d ranks, crashes %s, lineage %d ids" % (name, total, ranks, crashes, len(lin)))
    if lin != list(range(total)):
        dup = len(lin) - len(set(lin))
        missing = total - len(set(lin) & set(range(total)))
        fail("%s: lineage is not every row once: %d duplicates, %d missing" % (name, dup, missing))
    pr.p.terminate()
    pr.p.wait()


def main():
    br = subprocess.Popen([PIPEREC, "broker", "--partitions", "2", "--topics", "one-rank,two-ranks"],
                          stdout=subprocess.PIPE, stderr=open(os.path.join(T, "broker.err"), "w"),
                          text=True)
    procs.append(br)
    first = br.stdout.readline().strip()
    if not first.startswith("bootstrap="):
        fail("broker printed %r" % first)
    bootstrap = first[len("bootstrap="):]
    # One lineage; then two ranks. Each group reads the topic from the start.
    scenario("one-rank", bootstrap, 1, 2000, seed=12, kills=6)
    scenario("two-ranks", bootstrap, 2, 2000, seed=5, kills=4)
    print("OK")


try:
    main()
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
