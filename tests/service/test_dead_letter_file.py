#!/usr/bin/python3
"""test_dead_letter_file.py — `piperec run` with no source.dead_letter_topic
keeps every rejected record in the dead-letter file (a user audit: they were
only counted and logged, the log capped at 5 lines a second, and a burst's
"(N similar messages suppressed)" never said when no warning followed).

1. state.dir set, no topic: good records among a burst of bad ones (bytes
   that are not text included) on two partitions. Every bad record is in
   <state.dir>/p.deadletters with its reason, partition, offset and exact
   bytes; piperec_dead_letters_total{result="file"} counts them; the burst's
   suppressed count is logged while the run goes on (no later reject) and
   the logged plus suppressed warnings add up to the rejects; the group's
   committed offsets reach the end only with the letters in the file.
2. kill -9, restart, more bad records: appended once (the committed
   offsets were past the first ones: none written twice); at SIGTERM a
   summary line of rejects by reason.
3. No state.dir and no topic: one startup warning naming the keys to set.
Env (pr_script_test): PIPEREC, PR_TMP, PR_SOURCE_DIR.
"""
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

from confluent_kafka import Producer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from svc_run import broker, committed, fail, metric, start  # noqa: E402

PIPEREC = os.environ["PIPEREC"]
T = os.environ["PR_TMP"]
procs = []


def config(name, state):
    st = '    state: { dir: "%s", checkpoint_interval_s: 1 }\n' % state if state else ""
    return """pipelines:
  - name: p
    source:
      kafka:
        topics: [ev]
        group.id: g-dlf
        properties: { bootstrap.servers: "%s", auto.offset.reset: earliest,
                      fetch.wait.max.ms: 10, auto.commit.interval.ms: 200,
                      session.timeout.ms: 6000, heartbeat.interval.ms: 500 }
      format: criteo_tsv
    batch: { size: 64, max_delay_ms: 5 }
    sinks:
      files: { dir: "%s", roll_batches: 20 }
%sengine: { threads: 1 }
http: { listen: "127.0.0.1:0" }
log: { level: info }
""" % (bootstrap, os.path.join(T, "out-" + name), st)


def dead_letters_file(hp):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % hp, timeout=10) as r:
            page = r.read().decode()
    except OSError:
        return -1
    m = re.search(r'^piperec_dead_letters_total\{pipeline="p",result="file"\} (\S+)$', page, re.M)
    return float(m.group(1)) if m else -1


def read_letters(path):
    """[(reason, partition, offset, payload bytes)] of a dead-letter file."""
    data = open(path, "rb").read()
    out, i = [], 0
    while i < len(data):
        nl = data.index(b"\n", i)
        f = data[i:nl].split(b"\t")
        if f[0] != b"piperec-dead-letter" or len(f) != 9:
            fail("dead-letter file: bad header %r" % data[i:nl])
        n = int(f[6])
        payload = data[nl + 1:nl + 1 + n]
        if data[nl + 1 + n:nl + 2 + n] != b"\n":
            fail("dead-letter file: letter at %d not followed by a newline" % i)
        out.append((f[1].decode(), int(f[3]), int(f[4]), payload))
        i = nl + 2 + n
    return out


def produce(msgs):
    """msgs: [(partition, bytes)]; returns [(partition, offset, bytes)]."""
    pr = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    done = []

    def dr(err, m):
        if err:
            fail("produce: %s" % err)
        done.append((m.partition(), m.offset(), m.value()))

    for p, v in msgs:
        pr.produce("ev", value=v, partition=p, on_delivery=dr)
    if pr.flush(30) != 0:
        fail("producer: messages not delivered")
    return done


def wait_for(what, cond, bound=60):
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    fail("timed out waiting for " + what)


try:
    bootstrap = broker(PIPEREC, 2, "ev", procs)
    data = os.path.join(T, "in.tsv")
    subprocess.run([PIPEREC, "gen", "--rows", "300", "--seed", "5", "--output", data],
                   check=True, stderr=subprocess.DEVNULL)
    good = open(data, "rb").read().splitlines()
    bad = [b"garbage %d \x00\xff\xfe not tsv" % i for i in range(12)]
    bad[3] = b"1\tx\ty"  # a few fields
    msgs = [(i % 2, g) for i, g in enumerate(good[:150])]
    msgs += [(i % 2, b) for i, b in enumerate(bad)]  # one burst, then good ones only
    msgs += [(i % 2, g) for i, g in enumerate(good[150:])]
    sent = produce(msgs)
    want = sorted((p, o, v) for p, o, v in sent if v in bad)

    # 1. No topic, state.dir: the file.
    state = os.path.join(T, "state")
    cfg = os.path.join(T, "run.yaml")
    open(cfg, "w").write(config("a", state))
    run, hp = start(PIPEREC, cfg, "run1", procs)
    wait_for("rows and rejects", lambda: metric(hp, "piperec_records_out_total") == len(good)
             and metric(hp, "piperec_rejected_records_total") == len(bad))
    err1 = os.path.join(T, "run1.err")
    # The burst ended: its suppressed count is said within a second or two.
    wait_for("the suppressed count", lambda: "similar messages suppressed" in open(err1).read(),
             5)
    log = open(err1).read()
    logged = len(re.findall(r"warn: ev \[\d\] offset \d+ record \d+: field_count", log))
    supp = sum(int(n) for n in re.findall(
        r"consumer: rejected records: (\d+) similar messages suppressed", log))
    supp += sum(int(n) for n in re.findall(r"field_count: .*\((\d+) similar messages suppressed\)",
                                           log))
    if logged + supp != len(bad):
        fail("%d reject warnings logged + %d suppressed != %d rejects" % (logged, supp, len(bad)))
    if dead_letters_file(hp) != len(bad):
        fail("piperec_dead_letters_total{result=\"file\"} %s, want %d" %
             (dead_letters_file(hp), len(bad)))
    wait_for("every offset committed",
             lambda: committed(bootstrap, "g-dlf", "ev")[0] == len(sent), 30)
    letters = read_letters(os.path.join(state, "p.deadletters"))
    got = sorted((p, o, v) for r, p, o, v in letters)
    if got != want:
        fail("dead letters %r, want %r" % (got[:4], want[:4]))
    if sorted(set(r for r, p, o, v in letters)) != ["field_count"]:
        fail("reasons %r" % sorted(set(r for r, p, o, v in letters)))

    # 2. kill -9, restart, more bad records: appended once.
    run.send_signal(signal.SIGKILL)
    run.wait()
    more = produce([(0, b"late bad \x01 one"), (1, good[0]), (1, b"late bad two")])
    run, hp = start(PIPEREC, cfg, "run2", procs)
    wait_for("the new rejects", lambda: metric(hp, "piperec_rejected_records_total") == 2)
    wait_for("every offset committed",
             lambda: committed(bootstrap, "g-dlf", "ev")[0] == len(sent) + 3, 30)
    letters = read_letters(os.path.join(state, "p.deadletters"))
    want += sorted((p, o, v) for p, o, v in more if v.startswith(b"late bad"))
    got = sorted((p, o, v) for r, p, o, v in letters)
    if got != sorted(want):
        fail("after restart: %d dead letters, want %d (none twice)" % (len(got), len(want)))
    run.terminate()
    if run.wait(60) != 0:
        fail("run2 exited %d after SIGTERM" % run.returncode)
    if not re.search(r"consumer: 2 record\(s\) rejected \(field_count 2\); dead letters: 0 to "
                     r"the topic, 2 to the file", open(os.path.join(T, "run2.err")).read()):
        fail("run2: no summary of rejects at close")

    # 3. Neither topic nor state.dir: warned once at startup.
    cfg3 = os.path.join(T, "run3.yaml")
    open(cfg3, "w").write(config("c", None).replace("g-dlf", "g-dlf3"))
    run, hp = start(PIPEREC, cfg3, "run3", procs)
    run.terminate()
    run.wait(60)
    log = open(os.path.join(T, "run3.err")).read()
    if log.count("pipeline p: no source.dead_letter_topic and no state.dir: rejected records "
                 "will be counted and logged only") != 1:
        fail("run3: no (or more than one) startup warning about rejects kept nowhere")
    print("test_dead_letter_file: ok (%d dead letters in the file with their bytes, offsets "
          "committed, suppressed count logged; restart appended 2, none twice)" % len(bad))
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
