#!/usr/bin/python3
"""test_serve_concurrent.py — `piperec serve --threads 4` answers requests at
once (docs/serving.md, "Threads"), and each answer is what one request alone
gets, with one vocabulary from start to end, also while it is reloaded.

  - examples/clickstream.yaml, the vocabulary of the first half of a
    `piperec gen` stream; `serve --vocab DIR --threads 4 --reload-s 1`;
  - 8 clients, each on its own keep-alive connection, post chunks of the
    second half (1 to 150 events, starting anywhere); every answer is the
    chunk's lines of `piperec transform`, byte for byte;
  - meanwhile the vocabulary dir is replaced by one of the whole stream:
    every answer is then the chunk's lines under the old vocabulary or
    under the new one, never a mix, and the answers to requests sent once
    /v1/status counts the second load are all new ones; both kinds are seen;
  - /metrics and /v1/status count exactly the events posted and the
    requests answered; /v1/status says `threads: 4`.
usage: test_serve_concurrent.py   ($PIPEREC, $PR_TMP, $PR_SOURCE_DIR)
"""
import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time

from servetest import EXAMPLE, PIPEREC, TMP, fail, process, run

CLIENTS = 8
REQUESTS = 60  # per client once the reload was seen (before it: as many as it takes)


def transform_lines(vocab, lines):
    out = run(["transform", "--config", EXAMPLE, "--vocab", vocab], "\n".join(lines) + "\n").stdout
    got = out.splitlines(keepends=True)
    if len(got) != len(lines):
        fail("transform: %d lines for %d events" % (len(got), len(lines)))
    return got


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", path)
    r = c.getresponse()
    body = r.read().decode()
    c.close()
    return r.status, body


def status(port):
    code, text = get(port, "/v1/status")
    if code != 200:
        fail("/v1/status: %d %s" % (code, text))
    return json.loads(text)


class Client(threading.Thread):
    """Posts chunks on one connection; keeps (phase, chunk, answer)."""

    def __init__(self, port, n_events, seed, phase_of):
        super().__init__()
        self.port, self.n, self.rng, self.phase_of = port, n_events, random.Random(seed), phase_of
        self.answers, self.error, self.events = [], None, 0

    def post(self, conn, a, b, events):
        body = ("\n".join(events[a:b]) + "\n").encode()
        conn.request("POST", "/v1/transform", body)
        r = conn.getresponse()
        text = r.read().decode()
        if r.status != 200:
            raise RuntimeError("POST %d: %s" % (r.status, text[:200]))
        self.events += b - a
        return text

    def run_with(self, events, stop):
        """Until the reload was seen (or stop), then REQUESTS more."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        after = 0
        while after < REQUESTS and not stop.is_set():
            a = self.rng.randrange(self.n)
            b = min(self.n, a + self.rng.randint(1, 150))
            phase = self.phase_of()  # read before sending: "new" once the reload was seen
            self.answers.append((phase, a, b, self.post(conn, a, b, events)))
            after += phase == "new"
        conn.close()


def main():
    ev = os.path.join(TMP, "ev.jsonl")
    run(["gen", "--format", "json", "--rows", "3000", "--seed", "33", "--output", ev])
    lines = [l for l in open(ev).read().splitlines() if l]
    first, second = lines[:1500], lines[1500:]
    half, whole = os.path.join(TMP, "half"), os.path.join(TMP, "whole")
    process(first, half)
    process(lines, whole)
    old_rows, new_rows = transform_lines(half, second), transform_lines(whole, second)
    if sum(a != b for a, b in zip(old_rows, new_rows)) < 100:
        fail("the two vocabularies give almost the same rows: the test proves nothing")
    live = os.path.join(TMP, "live")
    shutil.copytree(half, live)

    proc = subprocess.Popen([PIPEREC, "serve", "--config", EXAMPLE, "--vocab", live, "--listen",
                             "127.0.0.1:0", "--reload-s", "1", "--threads", "4"],
                            stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    if "listening on http://127.0.0.1:" not in line or "4 thread(s)" not in line:
        fail("serve did not start with 4 threads: %r" % line, proc)
    port = int(line.split("listening on http://127.0.0.1:")[1].split()[0])
    if status(port).get("threads") != 4:
        fail("/v1/status threads: %r" % status(port), proc)

    reloaded, stop = threading.Event(), threading.Event()
    clients = [Client(port, len(second), 100 + i, lambda: "new" if reloaded.is_set() else "any")
               for i in range(CLIENTS)]

    def body(c):
        try:
            c.run_with(second, stop)
        except Exception as e:  # reported below, with the server stopped
            c.error = repr(e)

    threads = [threading.Thread(target=body, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    # the vocabulary grows while the clients post
    time.sleep(0.5)
    shutil.copytree(whole, live + ".new")
    os.rename(live, live + ".old")
    os.rename(live + ".new", live)
    deadline = time.time() + 30
    while status(port)["vocab"]["loads"] < 2:
        if time.time() > deadline:
            stop.set()
            fail("no reload within 30 s: %r" % status(port), proc)
        time.sleep(0.05)
    reloaded.set()
    for t in threads:
        t.join(timeout=300)
        if t.is_alive():
            fail("a client hung", proc)

    seen = {"old": 0, "new": 0}
    for c in clients:
        if c.error:
            fail("client: " + c.error, proc)
        for phase, a, b, text in c.answers:
            want_old, want_new = "".join(old_rows[a:b]), "".join(new_rows[a:b])
            if text == want_new:
                seen["new"] += 1
            elif text == want_old and phase != "new":
                seen["old"] += want_old != want_new
            else:
                fail("events %d..%d (%s): an answer that is neither vocabulary's rows:\n%s"
                     % (a, b, phase, text[:400]), proc)
    if not seen["old"] or not seen["new"]:
        fail("answers under the old / new vocabulary: %r (the reload did not fall among the "
             "requests)" % seen, proc)

    st = status(port)
    sent = sum(c.events for c in clients)
    n_req = sum(len(c.answers) for c in clients)
    if st["events"] != sent or st["rows"] != sent or st["vocab"]["loads"] != 2:
        fail("/v1/status counts: %r, %d events sent" % (st, sent), proc)
    code, text = get(port, "/metrics")
    want = 'piperec_serve_requests_total{code="2xx"} %d' % n_req
    if code != 200 or want not in text:
        fail("/metrics: no %r" % want, proc)
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=20)
    tail = proc.stderr.read()
    if rc != 0 or "stopped after %d events" % sent not in tail:
        fail("SIGTERM: exit %d %s" % (rc, tail))
    print("ok: %d requests, %d events, answers old %d / new %d" % (n_req, sent, seen["old"],
                                                                  seen["new"]))


if __name__ == "__main__":
    main()
