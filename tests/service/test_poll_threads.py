#!/usr/bin/python3
"""test_poll_threads.py — one polling thread per consumer instance (issue 21):
source.consumers K > 1 polls each instance on its own thread, and nothing a
user can see may move.

1. Outputs: one partition, Criteo TSV with bad records, eight `piperec run`s
   side by side, consumers 1, 2, 3 x engine.threads 1, 2, and consumers 2, 3
   x engine.threads 4 (decode threads 2), each polling thread decoding its
   own instance's messages into runs (checked in the log: messages went
   through the runs), consumers 2 x engine 2 once more with
   PIPEREC_POLL_DECODE=0 (the pool decodes them, the old path), once with
   PIPEREC_RING_SPANS=0 (a message at a time from the rings, not in spans:
   the log says which way each run took them), and
   consumers 2 x engine 1 with decode_threads auto (the polling threads
   decode there too: auto is at least 2 with several instances),
   batches of 64 rows over thousands of small blocks (half the rows there
   before the start, the rest produced while the runs read, 1- then 20-line
   messages). Each run's files-sink output must equal `piperec process`
   byte for byte, its dead letters the bad records in input order.
2. Instances leaving: two processes of consumers 2 in one group on 8
   partitions; the first stops (SIGTERM: its instances revoke, commit and
   leave while rows keep coming); the second takes over. Every row comes
   out, and the group's committed offsets reach every partition's end.
3. kill -9 and restart, consumers 2, 4 partitions, one state dir: every row
   comes out, and no index changed: across both runs one value keeps one
   index (per column, the map from `piperec process`'s index to the
   stream's is one-to-one over every row out).
4. Stops during rebalances: a process of consumers 3 is stopped (SIGTERM) while a second
   process of consumers 2 joins its group, at several delays, then the second too: each exits
   0 in bounded time. librdkafka 2.0.2's close hung for good when an assign event came while
   an instance closed (#4527); the consumer now unsubscribes, drains and closes with a
   deadline (ingest/consumer.c pr__leave_one).
Env (pr_script_test): PIPEREC, PR_SOURCE_DIR, PR_TMP.
"""
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
from svc_run import fail, metric, rolls

PIPEREC = os.environ["PIPEREC"]
SRC = os.environ["PR_SOURCE_DIR"]
T = os.environ["PR_TMP"]
N = 6000
# engine 4 with polling threads: the worker's blocks come from polls whose
# message facts the polling threads read (issue 21)
COMBOS = [(k, e) for k in (1, 2, 3) for e in (1, 2)] + [(2, 4), (3, 4)]
# consumers, engine threads, PIPEREC_POLL_DECODE (the runs, or the old
# path), source.decode_threads (0: auto, which with consumers > 1 is at least
# 2, so that the polling threads decode at engine.threads 1 too), and
# PIPEREC_RING_SPANS (a poll takes what waits in a ring in spans, in place,
# or one message at a time: the old path)
RUNS = [(k, e, "1", 2, "1") for k, e in COMBOS] + \
    [(2, 2, "0", 2, "1"), (2, 1, "1", 0, "1"), (2, 2, "1", 2, "0")]
NAMES = ["dense.npy", "labels.npy", "sparse.npy"]
procs = []


def arrays(dirs):
    return {n: np.concatenate([np.load(os.path.join(d, n)) for d in dirs]) for n in NAMES}


def broker(parts, topics):
    b = subprocess.Popen([PIPEREC, "broker", "--partitions", str(parts), "--topics",
                          ",".join(topics)], stdout=subprocess.PIPE,
                         stderr=open(os.path.join(T, "broker-%s.err" % topics[0]), "w"), text=True)
    procs.append(b)
    first = b.stdout.readline()
    if not first.startswith("bootstrap="):
        fail("broker printed %r" % first)
    return first.strip().split("=", 1)[1]


def config(topic, group, k, e, outdir, bootstrap, state=None, batch=64, roll=40, decode=2):
    return """pipelines:
  - name: p
    source:
      kafka:
        topics: [%s]
        group.id: %s
        properties: { bootstrap.servers: "%s", auto.offset.reset: earliest,
                      fetch.wait.max.ms: 10, session.timeout.ms: 6000,
                      heartbeat.interval.ms: 500 }
      format: criteo_tsv
      dead_letter_topic: %s-dlq
      decode_threads: %d
      consumers: %d
    batch: { size: %d, max_delay_ms: 5 }
    sinks:
      files: { dir: "%s", roll_batches: %d }
%sengine: { threads: %d, overlap: true }
http: { listen: "127.0.0.1:0" }
log: { level: info }
""" % (topic, group, bootstrap, topic, decode, k, batch, outdir, roll,
       "    state: { dir: \"%s\", checkpoint_interval_s: 1 }\n" % state if state else "", e)


def start(cfg, name, poll_decode="1", spans="1"):
    err = os.path.join(T, name + ".err")
    env = dict(os.environ, PIPEREC_POLL_DECODE=poll_decode, PIPEREC_RING_SPANS=spans)
    r = subprocess.Popen([PIPEREC, "run", "--config", cfg], stderr=open(err, "w"), env=env)
    procs.append(r)
    return r, err


def port(err):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = re.search(r"http on port (\d+)", open(err).read())
        if m:
            return int(m.group(1))
        time.sleep(0.1)
    fail("%s: no http port" % err)


def produce(bootstrap, topic, path, per="1", rate=None):
    cmd = [PIPEREC, "produce", "--bootstrap", bootstrap, "--topic", topic, "--input", path,
           "--lines-per-message", per, "-X", "sticky.partitioning.linger.ms=0"]
    if rate:
        cmd += ["--rate", str(rate)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def committed_end(bootstrap, group, topic):
    return [int(x) for x in subprocess.run(
        ["/usr/bin/python3", os.path.join(SRC, "tests", "fault", "kafka_offsets.py"), bootstrap,
         group, topic], check=True, capture_output=True, text=True).stdout.split()]


def await_committed(bootstrap, group, topic, seconds=120):
    """Waits until the group's committed offsets reach the topic's end (or
    the time is up); the caller checks the final state."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        c, e = committed_end(bootstrap, group, topic)
        if c == e:
            return
        time.sleep(0.5)


def make_input():
    data = os.path.join(T, "gen.tsv")
    subprocess.run([PIPEREC, "gen", "--rows", str(N), "--seed", "7", "--output", data],
                   check=True, stderr=subprocess.DEVNULL)
    lines = open(data).readlines()
    out, rejects = [], []
    for i, line in enumerate(lines):
        if i in (11, N // 2 - 1, N // 2 + 200, N - 500, N - 2):
            for b in ["garbage line %d\n" % i, "1" + "\t1" * 13 + "\tzz%06d" % i + "\t0" * 25 + "\n"]:
                out.append(b)
                rejects.append(b.rstrip("\n"))
        out.append(line)
    path = os.path.join(T, "all.tsv")
    open(path, "w").writelines(out)
    off = os.path.join(T, "off")
    subprocess.run([PIPEREC, "process", "--input", path, "--output", off, "--no-progress"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return path, out, rejects, arrays([off])


def split(lines, n):
    paths = []
    step = (len(lines) + n - 1) // n
    for k in range(n):
        paths.append(os.path.join(T, "part%d-%d.tsv" % (n, k)))
        open(paths[-1], "w").writelines(lines[k * step:(k + 1) * step])
    return paths


def outputs_equal(bootstrap, lines, rejects, want):
    good = len(lines) - len(rejects)
    half = len(lines) // 2
    parts = [lines[:half], lines[half:half + half // 2], lines[half + half // 2:]]
    ppaths = []
    for k, p in enumerate(parts):
        ppaths.append(os.path.join(T, "det%d.tsv" % k))
        open(ppaths[-1], "w").writelines(p)
    topics = ["d%d%d%sx%ds%s" % c for c in RUNS]
    poll_decode = {t: c[2] for t, c in zip(topics, RUNS)}
    spans = {t: c[4] for t, c in zip(topics, RUNS)}
    for p in [produce(bootstrap, t, ppaths[0]) for t in topics]:
        if p.wait() != 0:
            fail("produce failed")
    runs = []
    for (k, e, pd, dec, sp), topic in zip(RUNS, topics):
        outdir = os.path.join(T, "out-" + topic)
        cfg = os.path.join(T, topic + ".yaml")
        open(cfg, "w").write(config(topic, "g-" + topic, k, e, outdir, bootstrap, decode=dec))
        r, err = start(cfg, topic, pd, sp)
        runs.append((k, e, topic, outdir, err, r))
    hps = {topic: port(err) for k, e, topic, outdir, err, r in runs}
    for p in [produce(bootstrap, t, ppaths[1], "1", 5000) for t in topics]:
        p.wait()
    for p in [produce(bootstrap, t, ppaths[2], "20", 250) for t in topics]:
        if p.wait() != 0:
            fail("produce failed")
    deadline = time.monotonic() + 120
    for k, e, topic, outdir, err, r in runs:
        while metric(hps[topic], "piperec_records_out_total") < good and \
                time.monotonic() < deadline:
            time.sleep(0.2)
    time.sleep(0.3)
    counts = []
    for k, e, topic, outdir, err, r in runs:
        counts.append((metric(hps[topic], "piperec_records_out_total"),
                       metric(hps[topic], "piperec_rejected_records_total")))
        r.terminate()
    for (k, e, topic, outdir, err, r), (out, rej) in zip(runs, counts):
        if r.wait(60) != 0:
            fail("consumers %d engine %d: run exited %d" % (k, e, r.returncode))
        log = open(err).read()
        if k > 1 and ("consumer: %d instances, each polled by its own thread" % k) not in log:
            fail("consumers %d: no polling threads" % k)
        runs_on = "each polling thread decodes its own messages" in log
        if k > 1 and runs_on != (poll_decode[topic] == "1"):
            fail("%s: polling threads decoding %s, PIPEREC_POLL_DECODE says otherwise" %
                 (topic, runs_on))
        if k > 1 and runs_on and run_decoded(err) == 0:
            fail("%s: no message went through a polling thread's runs" % topic)
        in_spans = ring_spans(err)
        if k > 1 and (in_spans > 0) != (spans[topic] == "1"):
            fail("%s: %d messages taken from the rings in spans, PIPEREC_RING_SPANS=%s" %
                 (topic, in_spans, spans[topic]))
        if out != good or rej != len(rejects):
            fail("consumers %d engine %d: %d rows out (want %d), %d rejects (want %d)" %
                 (k, e, out, good, rej, len(rejects)))
        got = arrays(rolls(outdir))
        for n in NAMES:
            a, b = got[n], want[n]
            if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
                fail("consumers %d engine %d: %s differs from the offline output (%s vs %s)" %
                     (k, e, n, a.shape, b.shape))
        dlq = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic + "-dlq", "-o",
                              "beginning", "-e", "-q", "-f", "%s\n"], capture_output=True,
                             text=True, errors="replace", timeout=60).stdout.splitlines()
        if dlq != rejects:
            fail("consumers %d engine %d: dead letters %r, expected %r" %
                 (k, e, dlq[:12], rejects))
    print("outputs: %d runs (consumers x engine threads x polling threads decoding %s) equal "
          "the offline output (%d rows, %d rejects in order)" % (len(runs), RUNS, good,
                                                                  len(rejects)))


def row_keys(a):
    """label + dense bytes per row: which input row it is."""
    lab = a["labels.npy"].reshape(len(a["labels.npy"]), -1)
    return [lab[i].tobytes() + a["dense.npy"][i].tobytes() for i in range(len(lab))]


def all_rows_out(dirs, want, what):
    keys = set()
    for d in dirs:
        for r in rolls(d):
            keys.update(row_keys(arrays([r])))
    missing = len(set(row_keys(want)) - keys)
    if missing:
        fail("%s: %d input rows never came out" % (what, missing))


def indices_stable(dirs, want, what):
    """Per column, process's index -> stream index is one-to-one over all rows out."""
    ref = {}
    for key, sp in zip(row_keys(want), want["sparse.npy"]):
        ref.setdefault(key, sp)
    fwd, back = {}, {}
    for d in dirs:
        for r in rolls(d):
            a = arrays([r])
            for key, sp in zip(row_keys(a), a["sparse.npy"]):
                if key not in ref:
                    fail("%s: a row out is not in the input" % what)
                for j, (x, y) in enumerate(zip(ref[key], sp)):
                    if fwd.setdefault((j, int(x)), int(y)) != int(y) or \
                            back.setdefault((j, int(y)), int(x)) != int(x):
                        fail("%s: column %d: an index changed (offline %d, stream %d vs %s)" %
                             (what, j, x, y, fwd[(j, int(x))]))


def run_decoded(err):
    """Messages the polling threads of a stopped run decoded into their runs."""
    log = open(err).read()
    return sum(int(n) for n in re.findall(r"a polling thread decoded (\d+) message", log))


def ring_spans(err):
    """Messages a stopped run took from its polling threads' rings in spans."""
    m = re.search(r"consumer: (\d+) message\(s\) taken from the polling threads' rings",
                  open(err).read())
    return int(m.group(1)) if m else 0


def wait_rows(hps, want_rows, what, limit=120):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if sum(max(metric(h, "piperec_records_out_total"), 0) for h in hps) >= want_rows:
            return
        time.sleep(0.2)
    fail("%s: fewer than %d rows out in %d s" % (what, want_rows, limit))


def instances_leave(bootstrap, lines, want, good):
    parts = split(lines, 2)
    for p in [produce(bootstrap, "rb", parts[0])]:
        p.wait()
    outs, runs = [], []
    for i in range(2):
        outs.append(os.path.join(T, "out-rb%d" % i))
        cfg = os.path.join(T, "rb%d.yaml" % i)
        open(cfg, "w").write(config("rb", "g-rb", 2, 2, outs[-1], bootstrap))
        runs.append(start(cfg, "rb%d" % i))
    hps = [port(err) for r, err in runs]
    deadline = time.monotonic() + 60
    while metric(hps[0], "piperec_records_out_total") < 500 and time.monotonic() < deadline:
        time.sleep(0.1)
    feed = produce(bootstrap, "rb", parts[1], "1", 4000)
    time.sleep(0.3)
    runs[0][0].terminate()
    if runs[0][0].wait(60) != 0:
        fail("leave: the first process exited %d after SIGTERM" % runs[0][0].returncode)
    feed.wait()
    await_committed(bootstrap, "g-rb", "rb")
    runs[1][0].terminate()
    if runs[1][0].wait(60) != 0:
        fail("leave: the second process exited %d" % runs[1][0].returncode)
    # The second process's join revoked partitions from the first while its
    # polling threads were decoding into runs (rows coming at 4000/s).
    for r, err in runs:
        if run_decoded(err) == 0:
            fail("leave: %s: no message went through a polling thread's runs" % err)
    c, e = committed_end(bootstrap, "g-rb", "rb")
    if c != e or e != len(lines):
        fail("leave: committed offsets %d, topic end %d, produced %d" % (c, e, len(lines)))
    all_rows_out(outs, want, "leave")
    print("leave: instances of a stopped process left; every row out, every offset committed")


def kill_restart(bootstrap, lines, want, good):
    parts = split(lines, 3)
    produce(bootstrap, "kr", parts[0]).wait()
    out, state = os.path.join(T, "out-kr"), os.path.join(T, "state-kr")
    cfg = os.path.join(T, "kr.yaml")
    open(cfg, "w").write(config("kr", "g-kr", 2, 2, out, bootstrap, state, batch=256, roll=2))
    r, err = start(cfg, "kr1")
    hp = port(err)
    feed = produce(bootstrap, "kr", parts[1], "1", 3000)
    deadline = time.monotonic() + 60
    # The kill lands after the first run closed a roll (the check below wants
    # output of both runs) and while rows still come.
    while (metric(hp, "piperec_records_out_total") < good // 2 or not rolls(out)) and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    r.send_signal(signal.SIGKILL)
    r.wait()
    feed.wait()
    produce(bootstrap, "kr", parts[2]).wait()
    r, err = start(cfg, "kr2")
    hp = port(err)
    await_committed(bootstrap, "g-kr", "kr")
    r.terminate()
    if r.wait(60) != 0:
        fail("kill: the restart exited %d" % r.returncode)
    c, e = committed_end(bootstrap, "g-kr", "kr")
    if c != e or e != len(lines):
        fail("kill: committed offsets %d, topic end %d, produced %d" % (c, e, len(lines)))
    if len({os.path.basename(r).split("-")[1] for r in rolls(out)}) < 2:
        fail("kill: no output of both runs (rolls %s)" % os.listdir(out))
    all_rows_out([out], want, "kill")
    indices_stable([out], want, "kill")
    print("kill: kill -9 and restart with consumers 2: every row out, no index changed")


def stop_during_rebalance(bootstrap, path):
    feed = produce(bootstrap, "sc", path, "1", 3000)
    worst, fallbacks = 0.0, 0
    for i, delay in enumerate((0.0, 0.3, 0.8, 1.5, 2.5)):
        runs = []
        for j, k in enumerate((3, 2)):
            cfg = os.path.join(T, "sc%d-%d.yaml" % (i, j))
            open(cfg, "w").write(config("sc", "g-sc", k, 1, os.path.join(T, "out-sc%d-%d" % (i, j)),
                                        bootstrap))
            runs.append(start(cfg, "sc%d-%d" % (i, j)))
            port(runs[-1][1])  # up: its SIGTERM handler is in place
            deadline = time.monotonic() + 60
            while "consumer: assigned" not in open(runs[-1][1]).read() and \
                    time.monotonic() < deadline and j == 0:
                time.sleep(0.05)
        time.sleep(delay)
        t0 = time.monotonic()
        runs[0][0].terminate()
        time.sleep(delay / 2)
        runs[1][0].terminate()
        for (r, err), who in zip(runs, ("first", "second")):
            try:
                rc = r.wait(50)
            except subprocess.TimeoutExpired:
                fail("stop during a rebalance (delay %.1f s): the %s process did not exit in 50 s"
                     % (delay, who))
            if rc != 0:
                fail("stop during a rebalance (delay %.1f s): the %s process exited %d"
                     % (delay, who, rc))
            fallbacks += open(err).read().count("did not finish closing")
        worst = max(worst, time.monotonic() - t0)
    feed.wait()
    print("stop: 5 stops during rebalances exited 0, slowest %.1f s (closes left to process "
          "exit: %d)" % (worst, fallbacks))


try:
    path, lines, rejects, want = make_input()
    good = len(lines) - len(rejects)
    which = sys.argv[1:] or ["outputs", "leave", "kill", "stop"]
    if "outputs" in which:
        topics = []
        for c in RUNS:
            topics += ["d%d%d%sx%ds%s" % c, "d%d%d%sx%ds%s-dlq" % c]
        outputs_equal(broker(1, topics), lines, rejects, want)
    goodlines = [l for l in lines if l.rstrip("\n") not in rejects]
    if "leave" in which or "kill" in which:
        b8 = broker(8, ["rb", "rb-dlq"])
        b4 = broker(4, ["kr", "kr-dlq"])
        if "leave" in which:
            instances_leave(b8, goodlines, want, good)
        if "kill" in which:
            kill_restart(b4, goodlines, want, good)
    if "stop" in which:
        stop_during_rebalance(broker(4, ["sc", "sc-dlq"]), path)
    print("test_poll_threads: ok")
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
