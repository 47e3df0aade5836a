#!/usr/bin/python3
"""test_feature_health.py — feature health (docs/operations.md, "Feature
health"): per feature the rows whose event lacked it, per vocabulary column
the values looked up and those answered OOV, in `piperec serve` and
`piperec run` alike.

Events of examples/clickstream.yaml's shape made here, each leaf absent,
null, or (lists) empty at random, plus records that are rejected (never
counted though they carry fields). Expected counts are made here from the
events themselves (missing: absent, null or [] at the feature's path, a
cross at any of its paths, before any default) and from the rows `piperec
transform` writes (a value looked up: index != 0 under profile default, OOV:
index 1):

  - `serve --vocab` of the first half's `process` output, the second half
    posted: /metrics (promtool-clean) and /v1/status `feature_health` equal
    the expectation; the vocabulary replaced by the whole one (a reload),
    the second half posted again: the counts add up over the two engines;
  - `piperec run` with 4 decode threads and 2 consumer instances (rows
    merged back from the decode threads, their absent bits with them) on 4
    partitions, user under min_count 2: /v1/status and /metrics per feature
    equal the expectation over all events; lookups equal the non-zero
    indices `piperec process` wrote, user's OOV its distinct ids.
Env (pr_script_test): PIPEREC, PR_SOURCE_DIR, PR_TMP.
"""
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
import urllib.request

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from servetest import EXAMPLE, PIPEREC, TMP, fail, process, run  # noqa: E402
from svc_run import broker, json_run_config, produce_json, start  # noqa: E402

N = 2400
procs = []

# feature name -> its paths (a cross: several), as examples/clickstream.yaml
# declares them; the event_time feature is named by the config.
PATHS = {
    "click": ["label.click"], "purchase": ["label.purchase"], "dwell": ["label.dwell_s"],
    "price": ["item.price"], "age_days": ["user.age_days"], "price_z": ["item.price"],
    "user": ["user.id"], "item": ["item.id"], "category": ["item.category"],
    "tags": ["item.tags"], "history": ["history"], "age_bucket": ["user.age_days"],
    "hour": ["ts"], "weekday": ["ts"], "cat_x_device": ["item.category", "context.device"],
}
VOCAB = ["user", "item", "category", "history", "hour"]


def event(rng, i):
    ev = {"ts": 1732615200000 + i * 997,
          "user": {"id": "u%d" % rng.randrange(300), "age_days": rng.randrange(2000)},
          "item": {"id": rng.randrange(500), "price": round(rng.uniform(1, 90), 2),
                   "category": rng.choice(["shoes", "bags", "hats", "toys"]),
                   "tags": rng.sample(["red", "sale", "new", "eco"], rng.randrange(1, 4))},
          "context": {"device": rng.choice(["ios", "android", "web"])},
          "history": [rng.randrange(500) for _ in range(rng.randrange(1, 6))],
          "label": {"click": rng.randrange(2), "purchase": rng.randrange(2),
                    "dwell_s": round(rng.uniform(0, 60), 1)}}
    for top, sub in [("ts", None), ("user", "id"), ("user", "age_days"), ("item", "id"),
                     ("item", "price"), ("item", "category"), ("item", "tags"),
                     ("context", "device"), ("history", None), ("label", "purchase"),
                     ("label", "dwell_s"), ("label", "click")]:
        x = rng.random()
        holder, key = (ev, top) if sub is None else (ev[top], sub)
        if x < 0.12:
            del holder[key]
        elif x < 0.17:
            holder[key] = None
        elif x < 0.22 and isinstance(holder[key], list):
            holder[key] = []
    return ev


def lacks(ev, path):
    v = ev
    for k in path.split("."):
        if not isinstance(v, dict) or k not in v:
            return True
        v = v[k]
    return v is None or v == []


def expected_missing(events):
    return {f: sum(any(lacks(e, p) for p in ps) for e in events) for f, ps in PATHS.items()}


def expected_vocab(rows):
    """{column: (lookups, oov)} from `piperec transform` rows (profile default)."""
    out = {}
    for f in VOCAB:
        vals = []
        for r in rows:
            v = r["sparse"][f]
            vals += v if isinstance(v, list) else [v]
        out[f] = (sum(x != 0 for x in vals), sum(x == 1 for x in vals))
    return out


def http(port, path, body=None):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=body)
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read().decode()


def health_of(status_obj):
    h = status_obj["feature_health"]
    return ({f["name"]: f["missing"] for f in h["features"]},
            {c["name"]: (c["lookups"], c["oov"]) for c in h["columns"]}, h["rows"])


def check(what, got_missing, got_vocab, want_missing, want_vocab, proc=None):
    for f, n in want_missing.items():
        if got_missing.get(f) != n:
            fail("%s: feature %s missing %r, want %d (all: %r)" % (what, f, got_missing.get(f), n,
                                                                  got_missing), proc)
    for c, lo in want_vocab.items():
        if got_vocab.get(c) != lo:
            fail("%s: column %s (lookups, oov) %r, want %r" % (what, c, got_vocab.get(c), lo),
                 proc)


def scrape(port, proc):
    text = http(port, "/metrics")
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                       text=True)
    if p.returncode != 0:
        fail("promtool check metrics: %s %s" % (p.stdout, p.stderr), proc)
    miss, look, oov = {}, {}, {}
    for name, lab, val in re.findall(r'^(piperec_\w+)\{pipeline="clicks",\w+="([^"]+)"\} (\S+)$',
                                     text, re.M):
        d = {"piperec_feature_missing_total": miss, "piperec_vocab_lookups_total": look,
             "piperec_vocab_oov_total": oov}.get(name)
        if d is not None:
            d[lab] = int(float(val))
    return miss, {c: (look[c], oov.get(c)) for c in look}


def add(a, b):
    return {k: tuple(x + y for x, y in zip(a[k], b[k])) if isinstance(a[k], tuple) else a[k] + b[k]
            for k in a}


def serve_part(events, lines):
    first, second = lines[:N // 2], lines[N // 2:]
    half, whole = os.path.join(TMP, "half"), os.path.join(TMP, "whole")
    process(first, half)
    process(lines, whole)
    live = os.path.join(TMP, "live")
    shutil.copytree(half, live)
    proc = subprocess.Popen([PIPEREC, "serve", "--config", EXAMPLE, "--vocab", live, "--listen",
                             "127.0.0.1:0", "--reload-s", "1"], stderr=subprocess.PIPE, text=True)
    procs.append(proc)
    line = proc.stderr.readline()
    if "listening on http://127.0.0.1:" not in line:
        fail("serve did not start: %r" % line, proc)
    port = int(line.split("listening on http://127.0.0.1:")[1].split()[0])
    bad = ['{"user": ', '{"ts": 1732615200000, "user": {"id": "u1"}, "label": {"click": "yes"}}']
    body = "\n".join(second[:500] + bad + second[500:]) + "\n"
    out = http(port, "/v1/transform", body.encode()).splitlines()
    rows = [json.loads(l) for l in out]
    if sum("error" in r for r in rows) != 2:
        fail("serve: the bad records were not rejected: %r" % [r for r in rows if "error" in r],
             proc)
    rows = [r for r in rows if "error" not in r]
    t_half = [json.loads(l) for l in
              run(["transform", "--config", EXAMPLE, "--vocab", half],
                  "\n".join(second) + "\n").stdout.splitlines()]
    if rows != t_half:
        fail("serve rows differ from transform's", proc)
    want_m, want_v = expected_missing(events[N // 2:]), expected_vocab(t_half)
    if not all(want_v[c][1] > 0 for c in ("user", "history")) or min(want_m.values()) == 0:
        fail("the events have no OOV or no missing feature: the test proves nothing %r %r"
             % (want_m, want_v), proc)
    m, v = scrape(port, proc)
    check("serve /metrics", m, v, want_m, want_v, proc)
    sm, sv, srows = health_of(json.loads(http(port, "/v1/status")))
    check("serve /v1/status", sm, sv, want_m, want_v, proc)
    if srows != len(second):
        fail("serve /v1/status rows %d, want %d" % (srows, len(second)), proc)
    # a reload: the whole vocabulary; the counts carry over and add up
    shutil.rmtree(live)
    shutil.copytree(whole, live)
    deadline = time.time() + 20
    while json.loads(http(port, "/v1/status"))["vocab"]["loads"] < 2:
        if time.time() > deadline:
            fail("serve: no reload", proc)
        time.sleep(0.2)
    http(port, "/v1/transform", ("\n".join(second) + "\n").encode())
    t_whole = [json.loads(l) for l in
               run(["transform", "--config", EXAMPLE, "--vocab", whole],
                   "\n".join(second) + "\n").stdout.splitlines()]
    want_v2 = add(want_v, expected_vocab(t_whole))
    m, v = scrape(port, proc)
    check("serve after a reload", m, v, add(want_m, want_m), want_v2, proc)
    proc.terminate()
    proc.wait(timeout=30)


def run_part(events, lines):
    bs = broker(PIPEREC, 4, "clicks", procs)
    path = os.path.join(TMP, "all.jsonl")
    open(path, "w").write("\n".join(lines + ['{"user": ']) + "\n")
    produce_json(PIPEREC, bs, "clicks", path)
    schema = re.search(r"    schema:\n(.*?)    batch:", open(EXAMPLE).read(), re.S).group(1)
    cfg = json_run_config("    schema:\n" + schema, "clicks", os.path.join(TMP, "rolls"), bs, 2)
    cfg = cfg.replace("      format: json\n", "      format: json\n      decode_threads: 4\n"
                      "      consumers: 2\n").replace("name: p\n", "name: clicks\n")
    # user below min_count 2 is OOV: each user id's first sighting, whatever the order
    cfg = cfg.replace("vocab: { profile: default }",
                      "vocab: { profile: default }\n      columns: { user: { min_count: 2 } }")
    if "min_count: 2" not in cfg:
        fail("the run config has no transform.vocab to extend")
    cpath = os.path.join(TMP, "run.yaml")
    open(cpath, "w").write(cfg)
    proc, hp = start(PIPEREC, cpath, "run", procs)
    want_m = expected_missing(events)
    off = os.path.join(TMP, "off")
    process(lines, off)
    want_v = {}
    for c in VOCAB:
        vals = np.load(os.path.join(off, "sparse", c + ".values.npy"))
        want_v[c] = (int((vals != 0).sum()), 0)
    users = set(e["user"]["id"] for e in events if not lacks(e, "user.id"))
    want_v["user"] = (want_v["user"][0], len(users))
    deadline = time.time() + 60
    while True:
        st = json.loads(http(hp, "/v1/status"))["pipelines"][0]
        m, v, rows = health_of(st)
        if rows == N or time.time() > deadline:
            break
        time.sleep(0.3)
    check("run /v1/status", m, v, want_m, want_v, proc)
    mm, mv = scrape(hp, proc)
    check("run /metrics", mm, mv, want_m, want_v, proc)
    proc.terminate()
    proc.wait(timeout=60)


def main():
    rng = random.Random(7)
    events = [event(rng, i) for i in range(N)]
    lines = [json.dumps(e) for e in events]
    try:
        serve_part(events, lines)
        run_part(events, lines)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    print("test_feature_health: ok")


if __name__ == "__main__":
    main()
