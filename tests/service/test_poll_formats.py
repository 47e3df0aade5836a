#!/usr/bin/python3
"""test_poll_formats.py — every input format decodes off the pipeline thread
(issue 21: the per-format decode table, ingest/decode_fmt.c) and nothing a
user can see moves.

For JSON, Avro (a fixed writer schema, plain bodies), the user's own
Protobuf (shop.Click of tests/data/pbuser_clickstream.proto) and
protobuf_event_batch (8 events a message), one partition, nine `piperec
run`s side by side: consumers x decode_threads x engine.threads (1,1,1) —
the serial decode, the reference — and (1,2,2), (1,4,1), (2,1,2), (2,2,1),
(2,4,2), (3,2,2), (3,4,1), plus (2,2,2) with PIPEREC_POLL_DECODE=0 (the
pool decodes every message: the old path) and (2,2,2) with
PIPEREC_POLL_RUNS=nap (the polling threads' former runs: handed over by
messages only, a nap when every run is held; the default hands a run over
at 1,024 rows too, which the EventBatch stream reaches, 8 events a message,
and sleeps until the reader's next poll). Batches of 64 rows; half the
records there before the start, the rest produced while the runs read (many
small blocks), garbage messages among them (rejected). Each run's
files-sink output must equal the reference's byte for byte (for JSON the
reference must also equal `piperec process`), its rejects count and its
dead letters (in input order) the reference's. The log must show the
parallel decode started (decode threads), and that the polling threads
decoded messages into their runs where consumers > 1 (and none with
PIPEREC_POLL_DECODE=0).
avroreg: registry-framed Avro (the Confluent framing, writer schemas from
the test registry tests/ingest/avro_registry.py), the same nine runs: parts
0 and 1 under schema id 1, two messages under id 99 (the registry answers
404: rejected unknown_schema_id, dead letters) between them; then the
registry goes down, part 2 comes under id 2 (a schema id first seen
mid-stream: clickstream_v2.avsc, while no run can fetch it: every run
waits), the registry comes back on the same port after 2 s, and part 3
comes under id 1 again, then a rolling schema id: six chunks of it under
ids 3-8, each first seen mid-stream (the v1 and v2 schemas in turn), as
a producer that rolls its writer schema does. A decode thread or polling thread decodes a message
only when its schema id was already fetched on the pipeline thread, so
this checks that the rest stays in order there.
Usage: test_poll_formats.py [json|avro|avroreg|protobuf|batch]... (default: all).
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
N = 3000
FORMATS = ("json", "avro", "avroreg", "protobuf", "batch")
PY = "/usr/bin/python3"
REGISTRY = {"port": 0, "proc": None}
# consumers, decode threads, engine threads, PIPEREC_POLL_DECODE ("nap": 1 with
# PIPEREC_POLL_RUNS=nap); first: the reference
RUNS = [(1, 1, 1, "1"), (1, 2, 2, "1"), (1, 4, 1, "1"), (2, 1, 2, "1"), (2, 2, 1, "1"),
        (2, 4, 2, "1"), (3, 2, 2, "1"), (3, 4, 1, "1"), (2, 2, 2, "0"), (2, 2, 2, "nap")]
ROLL_IDS = range(3, 9)  # avroreg: part 3's rolling writer schema ids (odd: v1, even: v2)
BAD_AT = (0, 1, 2, 3, 4)  # a garbage message before each part, and one at the end
procs = []


def npy_names(d):
    return sorted(os.path.relpath(p, d) for p in glob.glob(os.path.join(d, "**", "*.npy"),
                                                          recursive=True))


def arrays(dirs, names):
    return {n: np.concatenate([np.load(os.path.join(d, n)) for d in dirs]) for n in names}


def schema_yaml():
    text = open(os.path.join(SRC, "examples", "clickstream.yaml")).read()
    m = re.search(r"^    schema:.*?(?=^    transform:)", text, re.M | re.S)
    if not m:
        fail("no schema in examples/clickstream.yaml")
    return m.group(0) + "    transform:\n      vocab: { profile: default }\n"


def source_yaml(fmt):
    if fmt == "avroreg":
        return ("      format: avro\n      schema_registry: { url: \"http://127.0.0.1:%d/\", "
                "timeout_ms: 500 }\n" % REGISTRY["port"])
    if fmt == "json":
        return "      format: json\n"
    if fmt == "avro":
        return ("      format: avro\n      avro: { schema_file: \"%s\", framing: plain }\n" %
                os.path.join(SRC, "examples", "clickstream.avsc"))
    if fmt == "protobuf":
        return ("      format: protobuf\n      protobuf: { descriptor_set: \"%s\", "
                "message: shop.Click }\n" % os.path.join(T, "click.desc"))
    return "      format: protobuf_event_batch\n"


def config(fmt, topic, k, d, e, outdir, bootstrap):
    return """pipelines:
  - name: p
    source:
      kafka:
        topics: [%s]
        group.id: g-%s
        properties: { bootstrap.servers: "%s", auto.offset.reset: earliest,
                      fetch.wait.max.ms: 10, session.timeout.ms: 6000,
                      heartbeat.interval.ms: 500 }
%s      dead_letter_topic: %s-dlq
      decode_threads: %d
      consumers: %d
%s    batch: { size: 64, max_delay_ms: 5 }
    sinks:
      files: { dir: "%s", roll_batches: 40 }
engine: { threads: %d, overlap: true }
http: { listen: "127.0.0.1:0" }
log: { level: info }
""" % (topic, topic, bootstrap, source_yaml(fmt), topic, d, k,
       "" if fmt == "batch" else schema_yaml(), outdir, e)


def make_parts(fmt):
    """The input's four parts (files `piperec produce` reads)."""
    data = os.path.join(T, "gen.%s" % fmt)
    cmd = [PIPEREC, "gen", "--rows", str(N), "--seed", "5", "--output", data]
    if fmt != "batch":
        cmd[2:2] = ["--format", "json"]
    subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
    lines = open(data).readlines()
    q = len(lines) // 4
    paths = []
    for k in range(4):
        paths.append(os.path.join(T, "part%d.%s" % (k, fmt)))
        open(paths[-1], "w").writelines(lines[k * q:(k + 1) * q if k < 3 else len(lines)])
    return data, paths


def avsc_of(sid):
    """Writer schema of id sid (test registry, produce): even ids clickstream_v2."""
    if sid % 2 == 0:
        return os.path.join(SRC, "tests", "ingest", "clickstream_v2.avsc")
    return os.path.join(SRC, "examples", "clickstream.avsc")


def start_registry():
    """The test registry (ids 1, 2) on REGISTRY's port (0 at first: any)."""
    d = os.path.join(T, "reg")
    os.makedirs(d, exist_ok=True)
    for n in (1, 2) + tuple(ROLL_IDS):
        open(os.path.join(d, "%d.avsc" % n), "w").write(open(avsc_of(n)).read())
    pf = os.path.join(T, "reg.port")
    if os.path.exists(pf):
        os.unlink(pf)
    p = subprocess.Popen([PY, os.path.join(SRC, "tests", "ingest", "avro_registry.py"), "--dir", d,
                          "--port", str(REGISTRY["port"]), "--port-file", pf],
                         stderr=open(os.path.join(T, "registry.log"), "a"))
    procs.append(p)
    deadline = time.monotonic() + 20
    while not (os.path.exists(pf) and open(pf).read().strip()):
        if time.monotonic() > deadline:
            fail("the test registry did not start")
        time.sleep(0.1)
    REGISTRY["port"] = int(open(pf).read())
    REGISTRY["proc"] = p


def stop_registry():
    p = REGISTRY["proc"]
    p.terminate()
    p.wait(30)


def produce(bootstrap, topic, fmt, path, rate=None, sid=1):
    cmd = [PIPEREC, "produce", "--bootstrap", bootstrap, "--topic", topic, "--input", path]
    if fmt == "json":
        cmd += ["--format", "json"]
    elif fmt == "avro":
        cmd += ["--format", "avro", "--avro-schema",
                os.path.join(SRC, "examples", "clickstream.avsc"), "--schema-id", "plain"]
    elif fmt == "avroreg":
        cmd += ["--format", "avro", "--avro-schema", avsc_of(sid), "--schema-id", str(sid)]
    elif fmt == "protobuf":
        cmd += ["--format", "protobuf", "--descriptor-set", os.path.join(T, "click.desc"),
                "--message", "shop.Click"]
    else:
        cmd += ["--format", "protobuf_event_batch", "--events-per-message", "8"]
    if rate:
        cmd += ["--rate", str(rate)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def garbage(bootstrap, topics, i):
    """One garbage message (text: the dead letter reads back as a line)."""
    for t in topics:
        subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", t, "-p", "0"],
                       input="garbage %d\xff\n" % i, text=True, check=True, timeout=60)


def produce_all(bootstrap, topics, fmt, path, rate=None, sid=1):
    ps = [produce(bootstrap, t, fmt, path, rate, sid) for t in topics]
    for p in ps:
        if p.wait() != 0:
            fail("%s: produce failed" % fmt)


def run_decoded(log):
    return sum(int(n) for n in re.findall(r"a polling thread decoded (\d+) message", log))


def start_runs(fmt, topics, bootstrap):
    runs = []
    for (k, d, e, pd), topic in zip(RUNS, topics):
        outdir = os.path.join(T, "out-" + topic)
        cfg = os.path.join(T, topic + ".yaml")
        open(cfg, "w").write(config(fmt, topic, k, d, e, outdir, bootstrap))
        err = os.path.join(T, topic + ".err")
        env = dict(os.environ, PIPEREC_POLL_DECODE="0" if pd == "0" else "1")
        if pd == "nap":
            env["PIPEREC_POLL_RUNS"] = "nap"
        r = subprocess.Popen([PIPEREC, "run", "--config", cfg], stderr=open(err, "w"), env=env)
        procs.append(r)
        runs.append((k, d, e, pd, topic, outdir, err, r))
    hps = {}
    deadline = time.monotonic() + 60
    while len(hps) < len(runs) and time.monotonic() < deadline:
        for run in runs:
            m = re.search(r"http on port (\d+)", open(run[6]).read())
            if m:
                hps[run[4]] = int(m.group(1))
        time.sleep(0.1)
    if len(hps) < len(runs):
        fail("%s: a run printed no http port" % fmt)
    return runs, hps


def check_run(fmt, run, names, want, want_rej, want_dlq, bootstrap, got_rej):
    k, d, e, pd, topic, outdir, err, r = run
    what = "%s consumers %d decode %d engine %d poll_decode %s" % (fmt, k, d, e, pd)
    if r.wait(60) != 0:
        fail("%s: run exited %d" % (what, r.returncode))
    log = open(err).read()
    if d > 1 and ("consumer: %d decode threads" % d) not in log:
        fail("%s: the parallel decode did not start" % what)
    dec = run_decoded(log)
    if k > 1 and d > 1 and pd != "0" and dec == 0:
        fail("%s: no message went through the polling threads' runs" % what)
    if pd == "0" and dec:
        fail("%s: PIPEREC_POLL_DECODE=0 and %d messages decoded into runs" % (what, dec))
    if got_rej != want_rej:
        fail("%s: %d rejects, the serial run %d" % (what, got_rej, want_rej))
    got = arrays(rolls(outdir), names)
    for n in names:
        a, b = got[n], want[n]
        if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
            fail("%s: %s differs from the serial run's (%s vs %s)" % (what, n, a.shape, b.shape))
    dlq = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic + "-dlq", "-o", "beginning",
                          "-e", "-q", "-f", "%s\n"], capture_output=True, text=True,
                         errors="replace", timeout=60).stdout.splitlines()
    if dlq != want_dlq:
        fail("%s: dead letters %r, the serial run's %r" % (what, dlq[:8], want_dlq[:8]))


def run_format(fmt, bootstrap):
    t0 = time.monotonic()
    data, parts = make_parts(fmt)
    topics = ["%s%d%d%d%s" % (fmt, k, d, e, pd) for k, d, e, pd in RUNS]
    # Preloaded: garbage, part 0, garbage, part 1; then while the runs read.
    reg = fmt == "avroreg"
    if reg and not REGISTRY["proc"]:
        start_registry()
    garbage(bootstrap, topics, 0)
    produce_all(bootstrap, topics, fmt, parts[0])
    garbage(bootstrap, topics, 1)
    if reg:  # two messages under an id the registry does not know
        unknown = os.path.join(T, "unknown.avroreg")
        open(unknown, "w").writelines(open(parts[0]).readlines()[:2])
        produce_all(bootstrap, topics, fmt, unknown, sid=99)
    produce_all(bootstrap, topics, fmt, parts[1])
    runs, hps = start_runs(fmt, topics, bootstrap)
    garbage(bootstrap, topics, 2)
    if reg:  # id 2 first seen while the registry is down
        for run in runs:
            while metric(hps[run[4]], "piperec_records_out_total") < N // 2 and \
                    time.monotonic() < t0 + 120:
                time.sleep(0.2)
        stop_registry()
    produce_all(bootstrap, topics, fmt, parts[2], 3000, sid=2 if reg else 1)
    if reg:
        time.sleep(2)
        start_registry()
    garbage(bootstrap, topics, 3)
    if reg:  # id 1 again, then a rolling id: each chunk's id is new to every run
        lines = open(parts[3]).readlines()
        q = len(lines) // (len(ROLL_IDS) + 1)
        for i, sid in enumerate((1,) + tuple(ROLL_IDS)):
            chunk = os.path.join(T, "roll%d.avroreg" % sid)
            open(chunk, "w").writelines(lines[i * q:(i + 1) * q if i < len(ROLL_IDS) else None])
            produce_all(bootstrap, topics, fmt, chunk, 3000, sid=sid)
    else:
        produce_all(bootstrap, topics, fmt, parts[3], 3000)
    garbage(bootstrap, topics, 4)
    deadline = time.monotonic() + 120
    for run in runs:
        while metric(hps[run[4]], "piperec_records_out_total") < N and \
                time.monotonic() < deadline:
            time.sleep(0.2)
    time.sleep(0.5)  # the last garbage message's dead letter
    rejs = []
    for run in runs:
        hp = hps[run[4]]
        if metric(hp, "piperec_records_out_total") != N:
            fail("%s %s: %d rows out, want %d" % (fmt, run[:4],
                                                 metric(hp, "piperec_records_out_total"), N))
        rejs.append(metric(hp, "piperec_rejected_records_total"))
        run[7].terminate()
    ref = runs[0]
    if ref[7].wait(60) != 0:
        fail("%s: the serial run exited %d" % (fmt, ref[7].returncode))
    rr = rolls(ref[5])
    if not rr:
        fail("%s: the serial run wrote no batch" % fmt)
    names = npy_names(rr[0])
    want = arrays(rr, names)
    want_dlq = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", ref[4] + "-dlq", "-o",
                               "beginning", "-e", "-q", "-f", "%s\n"], capture_output=True,
                              text=True, errors="replace", timeout=60).stdout.splitlines()
    if len(want_dlq) < len(BAD_AT) or rejs[0] < len(BAD_AT):
        fail("%s: the serial run has %d dead letters, %d rejects (want >= %d)" %
             (fmt, len(want_dlq), rejs[0], len(BAD_AT)))
    if fmt == "json":
        cfg0 = os.path.join(T, "cfg-json.yaml")
        open(cfg0, "w").write(config(fmt, "x", 1, 1, 1, "/nonexistent", bootstrap))
        off = os.path.join(T, "off-json")
        subprocess.run([PIPEREC, "process", "--config", cfg0, "--input", data, "--output", off,
                        "--no-progress"], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        offa = arrays([off], names)
        for n in names:
            if offa[n].tobytes() != want[n].tobytes():
                fail("json: the serial run's %s differs from piperec process" % n)
    for run, rej in zip(runs[1:], rejs[1:]):
        check_run(fmt, run, names, want, rejs[0], want_dlq, bootstrap, rej)
    print("%s: %d runs (consumers, decode, engine, poll_decode %s) equal the serial run "
          "(%d rows, %d rejects, dead letters in order) in %.0f s" %
          (fmt, len(runs), RUNS, N, rejs[0], time.monotonic() - t0))


try:
    fmts = sys.argv[1:] or FORMATS
    subprocess.run(["protoc", "--descriptor_set_out=" + os.path.join(T, "click.desc"),
                    "--include_imports", "-I", os.path.join(SRC, "tests", "data"),
                    "pbuser_clickstream.proto"], check=True)
    berr = open(os.path.join(T, "broker.err"), "w")
    topics = []
    for fmt in fmts:
        for k, d, e, pd in RUNS:
            t = "%s%d%d%d%s" % (fmt, k, d, e, pd)
            topics += [t, t + "-dlq"]
    broker = subprocess.Popen([PIPEREC, "broker", "--partitions", "1", "--topics",
                               ",".join(topics)], stdout=subprocess.PIPE, stderr=berr, text=True)
    procs.append(broker)
    first = broker.stdout.readline()
    if not first.startswith("bootstrap="):
        fail("broker printed %r" % first)
    bootstrap = first.strip().split("=", 1)[1]
    for fmt in fmts:
        run_format(fmt, bootstrap)
    print("test_poll_formats: ok")
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
