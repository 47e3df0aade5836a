"""svc_run.py — helpers shared by the service script tests that run `piperec
run` over the test broker and compare what the files sink wrote
(test_decode_threads.py, test_poll_threads.py, test_poll_formats.py,
test_many_partitions.py): the failure report with the newest logs, a
/metrics counter, the batch rolls in order, the test broker and a run
started with their logs under PR_TMP, the group's committed offsets, a free
TCP port.
Imported from the scripts' own directory (sys.path[0])."""

import glob
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request


def fail(msg):
    """Print why, the last lines of the newest piperec logs under PR_TMP, exit 1."""
    print("FAIL:", msg)
    for p in sorted(glob.glob(os.path.join(os.environ["PR_TMP"], "*.err")))[-4:]:
        print("---", os.path.basename(p))
        print("".join(open(p, errors="replace").readlines()[-15:]))
    sys.exit(1)


def metric(hp, name):
    """The sum of counter `name` of pipeline "p" on /metrics at port hp; -1
    while the endpoint does not answer."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % hp, timeout=10) as r:
            page = r.read().decode()
    except OSError:
        return -1
    return sum(float(v) for v in re.findall(r'^%s\{pipeline="p"[^}]*\} (\S+)$' % name, page, re.M))


def rolls(d):
    """The files sink's batch rolls under d, in (epoch, first sequence) order."""
    out = []
    for r in glob.glob(os.path.join(d, "batches-*")):
        epoch, first = (int(x) for x in os.path.basename(r).split("-")[1:3])
        out.append(((epoch, first), r))
    return [r for _, r in sorted(out)]


def broker(piperec, partitions, topics, procs):
    """`piperec broker` (appended to procs), its log in PR_TMP/broker.err;
    returns its bootstrap address."""
    err = open(os.path.join(os.environ["PR_TMP"], "broker.err"), "w")
    b = subprocess.Popen([piperec, "broker", "--partitions", str(partitions), "--topics", topics],
                         stdout=subprocess.PIPE, stderr=err, text=True)
    procs.append(b)
    first = b.stdout.readline()
    if not first.startswith("bootstrap="):
        fail("broker printed %r" % first)
    return first.strip().split("=", 1)[1]


def start(piperec, cfg, name, procs, env=None):
    """`piperec run --config cfg` (appended to procs), its log in
    PR_TMP/<name>.err; returns (process, http port) once it serves."""
    err = os.path.join(os.environ["PR_TMP"], name + ".err")
    r = subprocess.Popen([piperec, "run", "--config", cfg], stderr=open(err, "w"), env=env)
    procs.append(r)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = re.search(r"http on port (\d+)", open(err).read())
        if m:
            return r, int(m.group(1))
        time.sleep(0.05)
    fail("%s: no http port" % name)


def committed(bootstrap, group, topic):
    """(sum of the group's committed offsets, sum of the partitions' ends)
    of topic (tests/fault/kafka_offsets.py)."""
    tool = os.path.join(os.environ["PR_SOURCE_DIR"], "tests", "fault", "kafka_offsets.py")
    out = subprocess.run(["/usr/bin/python3", tool, bootstrap, group, topic], check=True,
                         capture_output=True, text=True).stdout.split()
    return int(out[0]), int(out[1])


def free_port():
    """A TCP port free on 127.0.0.1 right now."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def produce_json(piperec, bootstrap, topic, path, rate=None):
    """`piperec produce --format json` of the JSON lines at path into topic
    (--rate events/s when given); fails the test when it fails."""
    cmd = [piperec, "produce", "--bootstrap", bootstrap, "--topic", topic, "--input", path,
           "--format", "json"]
    if rate:
        cmd += ["--rate", str(rate)]
    if subprocess.run(cmd, capture_output=True).returncode != 0:
        fail("produce %s" % path)


def trainer_port(name, pipeline="p", timeout=20):
    """The trainer sink's port that `start(..., name, ...)`'s run logged for
    pipeline (waits up to timeout seconds)."""
    err = os.path.join(os.environ["PR_TMP"], name + ".err")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(r"trainer sink: pipeline %s listening on \S+ \(port (\d+)" % pipeline,
                      open(err).read())
        if m:
            return int(m.group(1))
        time.sleep(0.05)
    fail("%s: no trainer port in the log" % name)


def dead_letters(bootstrap, topic):
    """Every message of topic, in order, as text lines (kcat)."""
    return subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e",
                           "-q", "-f", "%s\n"], capture_output=True, text=True,
                          timeout=60).stdout.splitlines()


def json_run_config(schema, topic, outdir, bootstrap, threads):
    """A one-pipeline config (pipeline p): JSON events from topic (dead
    letters to topic-dlq) through the declared `schema` lines, batches of
    64 to the files sink at outdir (rolls of 20) and a trainer port."""
    return """pipelines:
  - name: p
    source:
      kafka:
        topics: [%s]
        group.id: g-%s
        properties: { bootstrap.servers: "%s", auto.offset.reset: earliest,
                      fetch.wait.max.ms: 10 }
      format: json
      dead_letter_topic: %s-dlq
%s    batch: { size: 64, max_delay_ms: 5 }
    sinks:
      files: { dir: "%s", roll_batches: 20 }
      trainer: { listen: "127.0.0.1:0" }
engine: { threads: %d }
http: { listen: "127.0.0.1:0" }
""" % (topic, topic, bootstrap, topic, schema, outdir, threads)
