#!/usr/bin/python3
"""test_serve.py — `piperec serve` answers HTTP with `piperec transform`'s rows
(docs/serving.md), and picks up a vocabulary that grew, without a restart.

  - examples/clickstream.yaml, the vocabulary of the first half of a
    `piperec gen` stream (`piperec process`); `serve --vocab DIR
    --listen 127.0.0.1:0 --reload-s 1`;
  - POST /v1/transform of the second half: the same lines as `piperec
    transform` of it, byte for byte (its new ids OOV);
  - the same body in two requests: the same rows (nothing was added);
  - a body of lines with a bad event: its error line in its place;
  - GET /metrics passes `promtool check metrics` and counts the events,
    rows, rejects and unseen ids; GET /v1/status says where the vocabulary
    comes from and how often it loaded;
  - refusals: GET /v1/transform 405, ?framing=bogus 400, a delimited body
    whose record runs past its end 400, ?layout=bogus 400, an unknown path 404;
  - the vocabulary dir replaced by one of both halves: within a few seconds
    the second half's ids are known (the rows equal `piperec transform`
    with the new vocabulary), /v1/status counts two loads;
  - a broken replacement (a missing column file): the reload fails, is
    counted, /v1/status says why (the file), and the old vocabulary keeps
    answering;
  - SIGTERM: exit 0 with the totals.
usage: test_serve.py   ($PIPEREC, $PR_TMP, $PR_SOURCE_DIR)
"""
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request

from servetest import EXAMPLE, PIPEREC, TMP, fail, process, run


def http(port, path, body=None, method=None):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=body,
                                 method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode(), r.headers.get("Content-Type")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), None



def transform(vocab, lines):
    return run(["transform", "--config", EXAMPLE, "--vocab", vocab], "\n".join(lines) + "\n").stdout


def status(port):
    code, text, _ = http(port, "/v1/status")
    if code != 200:
        fail("/v1/status: %d %s" % (code, text))
    return json.loads(text)


def wait_loads(port, loads, proc, what):
    deadline = time.time() + 20
    while time.time() < deadline:
        st = status(port)
        if st["vocab"]["loads"] + st["vocab"]["load_failures"] >= loads:
            return st
        time.sleep(0.2)
    fail("%s: no reload within 20 s: %r" % (what, status(port)), proc)


def start(live):
    proc = subprocess.Popen([PIPEREC, "serve", "--config", EXAMPLE, "--vocab", live, "--listen",
                             "127.0.0.1:0", "--reload-s", "1"], stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    if "listening on http://127.0.0.1:" not in line:
        fail("serve did not start: %r %s" % (line, proc.stderr.read() if proc.poll() else ""),
             proc)
    port = int(line.split("listening on http://127.0.0.1:")[1].split()[0])
    return proc, port


def check_metrics(port, proc, want):
    code, text, ctype = http(port, "/metrics")
    if code != 200 or not ctype.startswith("text/plain"):
        fail("/metrics: %d %s" % (code, ctype), proc)
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                       text=True)
    if p.returncode != 0:
        fail("promtool check metrics: %s %s" % (p.stdout, p.stderr), proc)
    samples = {}
    for l in text.splitlines():
        if l and not l.startswith("#"):
            name, val = l.rsplit(" ", 1)
            samples[name] = float(val)
    for name, val in want.items():
        if samples.get(name) != val:
            fail("/metrics %s = %r, want %r" % (name, samples.get(name), val), proc)


def main():
    ev = os.path.join(TMP, "ev.jsonl")
    run(["gen", "--format", "json", "--rows", "1200", "--seed", "21", "--output", ev])
    lines = [l for l in open(ev).read().splitlines() if l]
    first, second = lines[:600], lines[600:]
    half, whole = os.path.join(TMP, "half"), os.path.join(TMP, "whole")
    process(first, half)
    process(lines, whole)
    live = os.path.join(TMP, "live")
    shutil.copytree(half, live)

    proc, port = start(live)
    body = ("\n".join(second) + "\n").encode()
    code, text, ctype = http(port, "/v1/transform", body)
    if code != 200 or ctype != "application/x-ndjson":
        fail("POST: %d %s %s" % (code, ctype, text[:200]), proc)
    want = transform(half, second)
    if text != want:
        fail("POST rows differ from piperec transform's", proc)
    rows = [json.loads(l) for l in text.splitlines()]
    if not any(r["sparse"]["user"] == 1 for r in rows):
        fail("no unseen user in the second half: the test proves nothing", proc)
    # two requests of halves: the same rows, nothing added
    a = http(port, "/v1/transform", ("\n".join(second[:300]) + "\n").encode())[1]
    b = http(port, "/v1/transform", ("\n".join(second[300:]) + "\n").encode())[1]
    if a + b != text:
        fail("the same events in two requests gave other rows", proc)
    # a bad event keeps its place
    code, text2, _ = http(port, "/v1/transform",
                          (second[0] + "\n{\"user\": \n" + second[1] + "\n").encode())
    got = [json.loads(l) for l in text2.splitlines()]
    if code != 200 or len(got) != 3 or got[1].get("error") != "truncated" or got[0] != rows[0] \
            or got[2] != rows[1]:
        fail("bad event: %d %r" % (code, got), proc)

    st = status(port)
    if st["vocab"]["loads"] != 1 or st["vocab"]["source"] != "vocab " + live or \
            st["events"] != 1203 or st["rejected"] != 1:
        fail("/v1/status: %r" % st, proc)
    check_metrics(port, proc, {
        'piperec_serve_events_total': 1203, 'piperec_serve_rows_total': 1202,
        'piperec_serve_rejected_total{reason="truncated"}': 1,
        'piperec_serve_requests_total{code="2xx"}': 4,
        'piperec_serve_unseen_ids_total': float(st["unseen_ids"]),
        'piperec_serve_vocab_loads_total': 1})

    # refusals
    for path, rbody, method, code in (("/v1/transform", None, "GET", 405),
                                     ("/v1/transform?framing=bogus", b"{}", None, 400),
                                     ("/v1/transform?framing=delimited", b"\x7fab", None, 400),
                                     ("/v1/transform?layout=bogus", b"{}", None, 400),
                                     ("/nope", None, "GET", 404)):
        got = http(port, path, rbody, method)[0]
        if got != code:
            fail("%s %s: %d, want %d" % (method or "POST", path, got, code), proc)
    # the refused requests counted as requests, none of their events
    check_metrics(port, proc, {'piperec_serve_requests_total{code="4xx"}': 3,
                               'piperec_serve_events_total': 1203})

    # the vocabulary grows: replaced by the whole stream's
    old = live + ".old"
    shutil.copytree(whole, live + ".new")
    os.rename(live, old)
    os.rename(live + ".new", live)
    wait_loads(port, 2, proc, "grown vocabulary")
    text = http(port, "/v1/transform", body)[1]
    if text != transform(whole, second):
        fail("after the reload: rows differ from transform with the new vocabulary: %r" % status(port), proc)
    if any(json.loads(l)["sparse"]["user"] == 1 for l in text.splitlines()):
        fail("after the reload: still OOV users", proc)
    # a broken replacement: the reload fails, the loaded vocabulary answers
    os.remove(os.path.join(live, "vocab", "user.tsv"))
    st = wait_loads(port, 3, proc, "broken vocabulary")
    if st["vocab"]["load_failures"] != 1 or st["vocab"]["loads"] != 2 or \
            "user.tsv: No such file or directory" not in st["vocab"]["last_error"]:
        fail("broken reload: %r" % st, proc)
    if http(port, "/v1/transform", body)[1] != text:
        fail("after a failed reload: rows changed", proc)

    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=20)
    tail = proc.stderr.read()
    if rc != 0 or "stopped after" not in tail:
        fail("SIGTERM: exit %d %s" % (rc, tail))
    print("ok")


if __name__ == "__main__":
    main()
