#!/usr/bin/python3
"""test_trainer_flood.py — issue 11 (Hardening): the whole service under a
trainer-port connection flood with a low open-file limit.

`piperec demo` (mock broker, pipeline, HTTP, built-in trainer) runs with
RLIMIT_NOFILE 256; this script opens 300 idle TCP connections to its trainer
port and 20 connections that send half of a 512 KiB frame. Before the fix the
sink accepted until EMFILE, then its loop spun on the readable listening
socket and /healthz stopped answering (libmicrohttpd had no descriptor left).
Checks, all through /metrics and /healthz (no CPU timing):
  - /healthz answers 200 and /metrics answers throughout;
  - piperec_trainer_connections stays <= max_connections (64) and the rest is
    counted as refused{reason="max_connections"};
  - the I/O loop's wakeup counter grows by less than 100 over a one-second
    idle stretch (a spinning loop makes it grow by tens of thousands);
  - the receive buffers stay within 64 x 4 KiB + the 16 MiB pool, and the
    service counts them as in-flight bytes (piperec_inflight_peak_bytes);
  - the demo still delivers batches to its trainer (acked count grows).
"""
import os
import re
import resource
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request

PIPEREC = os.environ["PIPEREC"]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def lower_nofile():
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


demo = subprocess.Popen([PIPEREC, "demo", "--duration", "60", "--rate", "5000"],
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                        preexec_fn=lower_nofile)
try:
    http_port = trainer_port = None
    deadline = time.monotonic() + 60
    lines = []
    while time.monotonic() < deadline and trainer_port is None:
        line = demo.stdout.readline()
        if not line:
            fail("demo exited early:\n" + "".join(lines))
        lines.append(line)
        m = re.search(r"metrics http://127\.0\.0\.1:(\d+)/metrics.*trainer port (\d+)", line)
        if m:
            http_port, trainer_port = int(m.group(1)), int(m.group(2))
    if trainer_port is None:
        fail("no port line from the demo")
    # Drain the demo's output in the background so it never blocks on a full pipe.
    import threading
    threading.Thread(target=lambda: [None for _ in demo.stdout], daemon=True).start()

    def get(path):
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (http_port, path), timeout=5) as r:
            return r.status, r.read().decode()

    def metrics():
        _, text = get("/metrics")
        out = {}
        for l in text.splitlines():
            if l.startswith(("piperec_trainer_", "piperec_sink_batches_acked_total",
                             "piperec_inflight_peak_bytes")):
                name, _, v = l.rpartition(" ")
                out[name] = float(v)
        return out

    def metric(m, name):
        return sum(v for k, v in m.items() if k.startswith(name))

    socks = []
    # Half frames first: a 512 KiB frame announced, 256 KiB sent; 20 of them
    # fit in the 16 MiB pool and are held (and counted as in-flight bytes).
    for i in range(20):
        s = socket.create_connection(("127.0.0.1", trainer_port), timeout=5)
        s.sendall(struct.pack("<I", 512 * 1024) + b"\0" * (256 * 1024))
        socks.append(s)
    for i in range(300):
        s = socket.create_connection(("127.0.0.1", trainer_port), timeout=5)
        socks.append(s)
    m = {}
    for _ in range(250):
        m = metrics()
        refused = metric(m, 'piperec_trainer_connections_refused_total{pipeline="criteo",reason="max_connections"}')
        if refused >= 320 - 64:
            break
        time.sleep(0.02)
    else:
        fail("refusals not counted: %s" % m)
    status, body = get("/healthz")
    if status != 200:
        fail("/healthz: %d %s" % (status, body))
    conns = metric(m, "piperec_trainer_connections{")
    if conns > 64:
        fail("%d connections held, max_connections is 64" % conns)
    rx = metric(m, "piperec_trainer_receive_buffer_bytes{")
    if rx > 64 * 4096 + 16 * 1024 * 1024 or rx < 20 * (512 * 1024 + 4):
        fail("receive buffers %d bytes: expected the 20 half frames, within the bound" % rx)
    # The service counts them against limits.max_inflight_bytes: the peak of
    # what the backpressure check saw includes them.
    peak = 0
    for _ in range(250):
        peak = metric(metrics(), "piperec_inflight_peak_bytes{")
        if peak >= 20 * (512 * 1024 + 4):
            break
        time.sleep(0.02)
    else:
        fail("receive buffers not counted in the in-flight bytes (peak %d)" % peak)
    acked0 = metric(m, "piperec_sink_batches_acked_total{")
    w0 = metric(m, "piperec_trainer_io_wakeups_total{")
    time.sleep(1.0)  # an idle stretch for the counter, not a wait for a result
    m2 = metrics()
    wakeups = metric(m2, "piperec_trainer_io_wakeups_total{") - w0
    status, _ = get("/healthz")
    if status != 200:
        fail("/healthz after the flood: %d" % status)
    if wakeups >= 100:
        fail("trainer I/O loop woke %d times in 1 s: spinning" % wakeups)
    for _ in range(250):
        if metric(metrics(), "piperec_sink_batches_acked_total{") > acked0:
            break
        time.sleep(0.02)
    else:
        fail("the demo's trainer stopped getting batches during the flood")
    print("flood: %d held, %d refused (max_connections), %d receive-buffer bytes, "
          "%d wakeups in 1 s, /healthz 200" % (conns, refused, rx, wakeups))
    for s in socks:
        s.close()
finally:
    demo.send_signal(signal.SIGINT)
    try:
        demo.wait(30)
    except subprocess.TimeoutExpired:
        demo.kill()
        fail("demo did not stop on SIGINT")
print("trainer flood OK")
