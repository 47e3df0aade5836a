#!/usr/bin/python3
"""test_filter.py — schema.filter and schema.downsample end to end: a
record either drops is no row and no reject, the same offline and
streaming, and every other promise holds around it.

Offline (`piperec process`, the generated clickstream, a filter on a
string, a list and an optional field): the output equals `process` without
the filter on the input filtered beforehand by Python (every array, every
vocabulary; meta.json adds `filtered`), at 1 and 3 threads; the summary
line and meta.json count the filtered records. Then with downsample too
(negatives kept at 0.3, by event_id, weight label w): the rows are those
Python keeps with XXH64 (the frozen decision), labels gain w = float32(1 /
0.3) on kept negatives and 1 elsewhere, everything else equal to the input
filtered and sampled beforehand.

Streaming (filter and downsample; `piperec run`, one partition, consumers
2, decode_threads 2, engine.threads 2, files sink, dead-letter topic): half the events preloaded,
the rest produced while it reads, garbage messages among them. The rolls
equal the offline output byte for byte; piperec_filtered_records_total,
piperec_sampled_out_records_total and /v1/status say how many were dropped; only the garbage is rejected and
dead-lettered; the group's committed offsets reach the topic's end (a
message with only a filtered record is consumed like any other).
Env (pr_script_test): PIPEREC, PR_SOURCE_DIR, PR_TMP.
"""
import glob
import json
import os
import re
import subprocess
import time
import urllib.request

import math

import numpy as np
import xxhash
from svc_run import broker, committed, fail, metric, rolls, start

PIPEREC = os.environ["PIPEREC"]
SRC = os.environ["PR_SOURCE_DIR"]
T = os.environ["PR_TMP"]
N = 4000
FILTER = """      filter:
        - { path: context.device, in: [ios, android, web] }
        - { path: item.tags, not_in: [sale] }
        - { path: user.age_days, present: true }
"""
DOWNSAMPLE = """      downsample: { rate: 0.3, where: { path: label.click, in: [0] }, key: event_id,
                    weight: w }
"""
SEED = 0x7069706572656300  # PR_FOP_HASH_SEED
THRESHOLD = int(math.ldexp(0.3, 64))
procs = []


def keep(e):
    """The filter above, in Python."""
    tags = e.get("item", {}).get("tags") or []
    return (e.get("context", {}).get("device") in ("ios", "android", "web")
            and "sale" not in tags and e.get("user", {}).get("age_days") is not None)


def sampled_in(e):
    """schema.downsample above, in Python: (kept, weight)."""
    if e.get("label", {}).get("click") != 0:
        return True, 1.0
    k = xxhash.xxh64_intdigest(e["event_id"].encode(), seed=SEED)
    h = xxhash.xxh64_intdigest(k.to_bytes(8, "little"), seed=SEED)
    return h < THRESHOLD, float(np.float32(1 / 0.3))


def schema(with_filter, with_ds=False):
    text = open(os.path.join(SRC, "examples", "clickstream.yaml")).read()
    m = re.search(r"^    schema:\n(.*?)(?=^    transform:)", text, re.M | re.S)
    if not m:
        fail("no schema in examples/clickstream.yaml")
    return ("    schema:\n" + (FILTER if with_filter else "") + (DOWNSAMPLE if with_ds else "") +
            m.group(1) +
            "    transform:\n      vocab: { profile: default }\n")


def config(with_filter, outdir="/nonexistent", bootstrap="127.0.0.1:1", with_ds=False):
    return """pipelines:
  - name: p
    source:
      kafka:
        topics: [ev]
        group.id: g-ev
        properties: { bootstrap.servers: "%s", auto.offset.reset: earliest,
                      fetch.wait.max.ms: 10, session.timeout.ms: 6000 }
      format: json
      dead_letter_topic: ev-dlq
      decode_threads: 2
      consumers: 2
%s    batch: { size: 64, max_delay_ms: 5 }
    sinks:
      files: { dir: "%s", roll_batches: 40 }
engine: { threads: 2, overlap: true }
http: { listen: "127.0.0.1:0" }
log: { level: info }
""" % (bootstrap, schema(with_filter, with_ds), outdir)


def npy(d):
    return sorted(os.path.relpath(p, d) for p in glob.glob(os.path.join(d, "**", "*.npy"),
                                                          recursive=True))


def process(cfg_text, data, out, threads):
    cfg = out + ".yaml"
    open(cfg, "w").write(cfg_text)
    r = subprocess.run([PIPEREC, "process", "--config", cfg, "--input", data, "--output", out,
                        "--threads", str(threads), "--no-progress"], capture_output=True,
                       text=True)
    if r.returncode != 0:
        fail("process %s: exit %d: %s" % (out, r.returncode, r.stderr))
    return r.stderr


def same_dirs(a, b, what, skip=("meta.json",)):
    fa = sorted(os.path.relpath(p, a) for p in glob.glob(os.path.join(a, "**"), recursive=True)
                if os.path.isfile(p))
    fb = sorted(os.path.relpath(p, b) for p in glob.glob(os.path.join(b, "**"), recursive=True)
                if os.path.isfile(p))
    if fa != fb:
        fail("%s: files %s vs %s" % (what, fa, fb))
    for f in fa:
        if f not in skip and open(os.path.join(a, f), "rb").read() != \
                open(os.path.join(b, f), "rb").read():
            fail("%s: %s differs" % (what, f))


def offline(data):
    events = [json.loads(l) for l in open(data)]
    want_rows = sum(keep(e) for e in events)
    want_filtered = len(events) - want_rows
    if not N // 4 < want_filtered < N - N // 4:
        fail("the filter keeps %d of %d: not a test of it" % (want_rows, len(events)))
    pre = os.path.join(T, "pre.jsonl")
    with open(data) as src, open(pre, "w") as dst:
        dst.writelines(l for l, e in zip(src, events) if keep(e))
    base = os.path.join(T, "off-pre")
    process(config(False), pre, base, 1)
    outs = []
    for threads in (1, 3):
        out = os.path.join(T, "off-filter%d" % threads)
        err = process(config(True), data, out, threads)
        if ("%d rows, 0 rejected, %d filtered" % (want_rows, want_filtered)) not in err:
            fail("process summary: %r" % err.splitlines()[:1])
        meta = json.load(open(os.path.join(out, "meta.json")))
        if meta["filtered"] != want_filtered or meta["rows"] != want_rows:
            fail("meta.json: rows %d filtered %d, want %d %d" % (meta["rows"], meta["filtered"],
                                                                want_rows, want_filtered))
        same_dirs(out, base, "filtered input vs the filter at %d threads" % threads)
        outs.append(out)
    if "filtered" in json.load(open(os.path.join(base, "meta.json"))):
        fail("meta.json of a run without a filter has `filtered`")
    print("offline: %d rows, %d filtered: equal to the input filtered beforehand, threads 1 = 3"
          % (want_rows, want_filtered))
    # downsample too: the rows Python keeps, with the weight label
    kept = [(l, sampled_in(e)[1]) for l, e in zip(open(data), events)
            if keep(e) and sampled_in(e)[0]]
    sampled_out = want_rows - len(kept)
    negatives = sum(1 for e in events if keep(e) and e["label"]["click"] == 0)
    if not negatives * 0.6 < sampled_out < negatives * 0.8:
        fail("downsample dropped %d of %d negatives at rate 0.3" % (sampled_out, negatives))
    pre2 = os.path.join(T, "pre2.jsonl")
    open(pre2, "w").writelines(l for l, _ in kept)
    base2 = os.path.join(T, "off-pre2")
    process(config(False), pre2, base2, 1)
    out = os.path.join(T, "off-ds")
    err = process(config(True, with_ds=True), data, out, 3)
    if ("%d rows, 0 rejected, %d filtered, %d sampled out" %
            (len(kept), want_filtered, sampled_out)) not in err:
        fail("process summary with downsample: %r" % err.splitlines()[:1])
    meta = json.load(open(os.path.join(out, "meta.json")))
    if meta["sampled_out"] != sampled_out or meta["label_names"][-1] != "w":
        fail("meta.json with downsample: %s" % meta)
    same_dirs(out, base2, "filter + downsample vs the input sampled beforehand",
              skip=("meta.json", "labels.npy"))
    got, want = np.load(os.path.join(out, "labels.npy")), np.load(os.path.join(base2,
                                                                               "labels.npy"))
    w = np.array([x for _, x in kept], dtype=np.float32)
    if got.shape != (want.shape[0], want.shape[1] + 1) or \
            got[:, :-1].tobytes() != want.tobytes() or got[:, -1].tobytes() != w.tobytes():
        fail("labels with the weight: %s vs %s" % (got.shape, want.shape))
    print("offline: downsample kept %d, dropped %d negatives (rate 0.3): the rows Python keeps, "
          "weights 1/0.3 on kept negatives" % (len(kept), sampled_out))
    return out, len(kept), want_filtered, sampled_out


def produce(bootstrap, path, rate=None):
    cmd = [PIPEREC, "produce", "--bootstrap", bootstrap, "--topic", "ev", "--input", path,
           "--format", "json"]
    if rate:
        cmd += ["--rate", str(rate)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def garbage(bootstrap, i):
    subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", "ev"], input="not json %d\n" % i,
                   text=True, check=True, timeout=60)


def streaming(data, ref, want_rows, want_filtered, want_sampled_out):
    bootstrap = broker(PIPEREC, 1, "ev,ev-dlq", procs)
    lines = open(data).readlines()
    half = os.path.join(T, "half0.jsonl"), os.path.join(T, "half1.jsonl")
    open(half[0], "w").writelines(lines[:N // 2])
    open(half[1], "w").writelines(lines[N // 2:])
    garbage(bootstrap, 0)
    produce(bootstrap, half[0])
    out = os.path.join(T, "out-run")
    cfg = os.path.join(T, "run.yaml")
    open(cfg, "w").write(config(True, out, bootstrap, with_ds=True))
    r, hp = start(PIPEREC, cfg, "run", procs)
    garbage(bootstrap, 1)
    produce(bootstrap, half[1], 4000)
    garbage(bootstrap, 2)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (
            metric(hp, "piperec_records_out_total") < want_rows or
            metric(hp, "piperec_rejected_records_total") < 3):
        time.sleep(0.2)
    got = {m: metric(hp, m) for m in ("piperec_records_out_total",
                                      "piperec_filtered_records_total",
                                      "piperec_sampled_out_records_total",
                                      "piperec_rejected_records_total")}
    if got != {"piperec_records_out_total": want_rows,
               "piperec_filtered_records_total": want_filtered,
               "piperec_sampled_out_records_total": want_sampled_out,
               "piperec_rejected_records_total": 3}:
        fail("streaming metrics %s: want %d rows out, %d filtered, %d sampled out, 3 rejected" %
             (got, want_rows, want_filtered, want_sampled_out))
    with urllib.request.urlopen("http://127.0.0.1:%d/v1/status" % hp, timeout=10) as s:
        st = json.load(s)["pipelines"][0]
    if st["filtered"] != want_filtered or st["rejected"] != 3 or \
            st["sampled_out"] != want_sampled_out:
        fail("/v1/status: filtered %s sampled_out %s rejected %s" %
             (st["filtered"], st["sampled_out"], st["rejected"]))
    deadline = time.monotonic() + 60
    while committed(bootstrap, "g-ev", "ev")[0] != committed(bootstrap, "g-ev", "ev")[1] and \
            time.monotonic() < deadline:
        time.sleep(0.2)
    c, e = committed(bootstrap, "g-ev", "ev")
    if c != e or e != N + 3:
        fail("committed offsets %d, topic end %d, produced %d" % (c, e, N + 3))
    r.terminate()
    if r.wait(60) != 0:
        fail("run exited %d" % r.returncode)
    dlq = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", "ev-dlq", "-o", "beginning", "-e",
                          "-q", "-f", "%s\n"], capture_output=True, text=True,
                         timeout=60).stdout.splitlines()
    if dlq != ["not json %d" % i for i in range(3)]:
        fail("dead letters %r: want the three garbage messages only" % dlq[:6])
    names = npy(ref)
    rr = rolls(out)
    if not rr or npy(rr[0]) != names:
        fail("rolls %s hold %s, the offline output %s" % (rr[:2], npy(rr[0]) if rr else [],
                                                          names))
    for n in names:
        a = np.concatenate([np.load(os.path.join(x, n)) for x in rr])
        b = np.load(os.path.join(ref, n))
        if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
            fail("streamed %s differs from piperec process (%s vs %s)" % (n, a.shape, b.shape))
    print("streaming: consumers 2 x decode 2 x engine 2: rolls = process, %d filtered, %d "
          "sampled out, 3 rejects dead-lettered, every offset committed" %
          (want_filtered, want_sampled_out))


try:
    data = os.path.join(T, "ev.jsonl")
    subprocess.run([PIPEREC, "gen", "--format", "json", "--rows", str(N), "--seed", "9",
                    "--output", data], check=True, stderr=subprocess.DEVNULL)
    ref, rows, filtered, sampled_out = offline(data)
    streaming(data, ref, rows, filtered, sampled_out)
    print("test_filter: ok")
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
