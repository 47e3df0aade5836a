#!/usr/bin/python3
"""test_decode_threads.py — outputs independent of source.decode_threads and
engine.threads (issue 21): the polling thread hands messages to decode
threads and merges them back in poll order, so every count must give the
same rows, in the same order, with the same values, and the same rejects.

For Criteo TSV and for JSON through a declared schema (the example's, plus a
feature sharing the history's vocabulary: `table:`), one
partition, nine `piperec run`s side by side, decode threads 1, 2, 4 x engine
threads 1, 2, 4, each on its own topic holding the same records: half of
them there before the run starts (polls of thousands of messages: the
parallel decode with full blocks and a backlog), the rest produced while it
reads, TSV as 1- then 20-line messages (many small blocks), with bad records
among them. Each run's files-sink output, in batch order, must equal
`piperec process` on the same input row for row and byte for byte; its
dead-letter topic must hold the bad records in input order; its rejects
count must be the offline one.
Env (pr_script_test): PIPEREC, PR_SOURCE_DIR, PR_TMP.
"""
import glob
import os
import re
import subprocess
import sys
import time

import numpy as np
from svc_run import fail, metric, rolls

PIPEREC = os.environ["PIPEREC"]
SRC = os.environ["PR_SOURCE_DIR"]
T = os.environ["PR_TMP"]
N = 8000                     # generated rows per format (under the broker's ~5 MB a partition)
COMBOS = [(d, e) for d in (1, 2, 4) for e in (1, 2, 4)]
procs = []


def arrays(dirs, names):
    """{relative .npy name: the arrays of every dir concatenated}."""
    return {n: np.concatenate([np.load(os.path.join(d, n)) for d in dirs]) for n in names}


def npy_names(d):
    return sorted(os.path.relpath(p, d) for p in glob.glob(os.path.join(d, "**", "*.npy"),
                                                          recursive=True))


def bad_tsv(i):
    return ["garbage line %d\n" % i,                                   # field count
            "1" + "\t1" * 13 + "\tzz%06d" % i + "\t0" * 25 + "\n"]     # non-hex


def bad_json(i):
    return ['{"label": {"click": "yes%d"}}\n' % i, '{"user": {"id": "u%d"' % i + "\n"]


def make_input(fmt):
    data = os.path.join(T, "gen.%s" % fmt)
    cmd = [PIPEREC, "gen", "--rows", str(N), "--seed", "5", "--output", data]
    if fmt == "json":
        cmd[2:2] = ["--format", "json"]
    subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
    lines = open(data).readlines()
    bad = bad_json if fmt == "json" else bad_tsv
    out, rejects = [], []
    for i, line in enumerate(lines):
        if i in (7, N // 2 - 1, N // 2 + 300, N - 700, N - 3):
            for b in bad(i):
                out.append(b)
                rejects.append(b.rstrip("\n"))
        out.append(line)
    path = os.path.join(T, "all.%s" % fmt)
    open(path, "w").writelines(out)
    return path, out, rejects


def config(fmt, topic, d, e, outdir, bootstrap):
    schema = ""
    if fmt == "json":
        text = open(os.path.join(SRC, "examples", "clickstream.yaml")).read()
        m = re.search(r"^    schema:.*?(?=^    transform:)", text, re.M | re.S)
        if not m:
            fail("no schema in examples/clickstream.yaml")
        hist = "        - { name: history, path: history, list: { max_len: 10, keep: last }, " \
               "ops: [vocab] }\n"
        if hist not in m.group(0):
            fail("no history feature in examples/clickstream.yaml")
        # a shared vocabulary: two features' keys interleaved in one column
        schema = m.group(0).replace(hist, hist + "        - { name: recent, path: history, "
                                    "list: { max_len: 3, keep: last }, ops: [vocab], "
                                    "table: history }\n")
        schema += "    transform:\n      vocab: { profile: default }\n"
    return """pipelines:
  - name: p
    source:
      kafka:
        topics: [%s]
        group.id: g-%s
        properties: { bootstrap.servers: "%s", auto.offset.reset: earliest,
                      fetch.wait.max.ms: 10 }
      format: %s
      dead_letter_topic: %s-dlq
      decode_threads: %d
%s    batch: { size: 64, max_delay_ms: 5 }
    sinks:
      files: { dir: "%s", roll_batches: 40 }
engine: { threads: %d, overlap: true }
http: { listen: "127.0.0.1:0" }
log: { level: info }
""" % (topic, topic, bootstrap, "json" if fmt == "json" else "criteo_tsv", topic, d, schema,
       outdir, e)


def produce(bootstrap, topic, fmt, path, per="1", rate=None):
    cmd = [PIPEREC, "produce", "--bootstrap", bootstrap, "--topic", topic, "--input", path]
    if fmt == "json":
        cmd += ["--format", "json"]
    else:
        cmd += ["--lines-per-message", per]
    if rate:
        cmd += ["--rate", str(rate)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_format(fmt, bootstrap):
    path, lines, rejects = make_input(fmt)
    good = len(lines) - len(rejects)
    off = os.path.join(T, "off-%s" % fmt)
    cfg0 = os.path.join(T, "cfg-%s.yaml" % fmt)
    open(cfg0, "w").write(config(fmt, "x", 1, 1, "/nonexistent", bootstrap))
    cmd = [PIPEREC, "process", "--input", path, "--output", off, "--no-progress"]
    if fmt == "json":
        cmd += ["--config", cfg0]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    names = [n for n in npy_names(off) if not n.startswith("vocab")]
    want = arrays([off], names)
    nrows = len(want["labels.npy"])
    if nrows != good:
        fail("%s: offline kept %d rows, expected %d" % (fmt, nrows, good))

    # Parts: preloaded, then while the runs read.
    half = len(lines) // 2
    parts = [lines[:half], lines[half:half + half // 2], lines[half + half // 2:]]
    ppaths = []
    for k, p in enumerate(parts):
        ppaths.append(os.path.join(T, "part%d.%s" % (k, fmt)))
        open(ppaths[-1], "w").writelines(p)
    topics = ["%s%d%d" % (fmt, d, e) for d, e in COMBOS]
    for p in [produce(bootstrap, t, fmt, ppaths[0]) for t in topics]:
        if p.wait() != 0:
            fail("%s: produce failed" % fmt)
    runs = []
    for (d, e), topic in zip(COMBOS, topics):
        outdir = os.path.join(T, "out-" + topic)
        cfg = os.path.join(T, topic + ".yaml")
        open(cfg, "w").write(config(fmt, topic, d, e, outdir, bootstrap))
        err = os.path.join(T, topic + ".err")
        r = subprocess.Popen([PIPEREC, "run", "--config", cfg], stderr=open(err, "w"))
        procs.append(r)
        runs.append((d, e, topic, outdir, err, r))
    hps = {}
    deadline = time.monotonic() + 60
    while len(hps) < len(runs) and time.monotonic() < deadline:
        for d, e, topic, outdir, err, r in runs:
            m = re.search(r"http on port (\d+)", open(err).read())
            if m:
                hps[topic] = int(m.group(1))
        time.sleep(0.1)
    if len(hps) < len(runs):
        fail("%s: a run printed no http port" % fmt)
    second = [produce(bootstrap, t, fmt, ppaths[1], "1", 5000) for t in topics]
    for p in second:
        p.wait()
    per = "1" if fmt == "json" else "20"
    third = [produce(bootstrap, t, fmt, ppaths[2], per, 5000 if fmt == "json" else 250)
             for t in topics]
    for p in third:
        if p.wait() != 0:
            fail("%s: produce failed" % fmt)
    deadline = time.monotonic() + 120
    for d, e, topic, outdir, err, r in runs:
        while metric(hps[topic], "piperec_records_out_total") < good and \
                time.monotonic() < deadline:
            time.sleep(0.2)
    time.sleep(0.3)
    results = []
    for d, e, topic, outdir, err, r in runs:
        hp = hps[topic]
        results.append((metric(hp, "piperec_records_out_total"),
                        metric(hp, "piperec_rejected_records_total")))
        r.terminate()
    for (d, e, topic, outdir, err, r), (out, rej) in zip(runs, results):
        if r.wait(60) != 0:
            fail("%s decode %d engine %d: run exited %d" % (fmt, d, e, r.returncode))
        log = open(err).read()
        if d > 1 and ("consumer: %d decode threads" % d) not in log:
            fail("%s decode %d: the parallel decode did not start" % (fmt, d))
        if out != good or rej != len(rejects):
            fail("%s decode %d engine %d: %d rows out (want %d), %d rejects (want %d)" %
                 (fmt, d, e, out, good, rej, len(rejects)))
        got = arrays(rolls(outdir), names)
        for n in names:
            a, b = got[n], want[n]
            if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
                fail("%s decode %d engine %d: %s differs from the offline output (%s vs %s)" %
                     (fmt, d, e, n, a.shape, b.shape))
        dlq = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic + "-dlq", "-o",
                              "beginning", "-e", "-q", "-f", "%s\n"], capture_output=True,
                             text=True, errors="replace", timeout=60).stdout.splitlines()
        if dlq != rejects:
            fail("%s decode %d engine %d: dead letters %r, expected %r" %
                 (fmt, d, e, dlq[:12], rejects))
    print("%s: %d runs (decode x engine threads %s) equal the offline output (%d rows, "
          "%d rejects in order)" % (fmt, len(runs), COMBOS, good, len(rejects)))


try:
    berr = open(os.path.join(T, "broker.err"), "w")
    topics = []
    for fmt in ("tsv", "json"):
        for d, e in COMBOS:
            topics += ["%s%d%d" % (fmt, d, e), "%s%d%d-dlq" % (fmt, d, e)]
    broker = subprocess.Popen([PIPEREC, "broker", "--partitions", "1", "--topics",
                               ",".join(topics)], stdout=subprocess.PIPE, stderr=berr, text=True)
    procs.append(broker)
    first = broker.stdout.readline()
    if not first.startswith("bootstrap="):
        fail("broker printed %r" % first)
    bootstrap = first.strip().split("=", 1)[1]
    for fmt in sys.argv[1:] or ("tsv", "json"):
        run_format(fmt, bootstrap)
    print("test_decode_threads: ok")
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
