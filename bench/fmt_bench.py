#!/usr/bin/python3
"""Issue 21 per-format measure: pipeline-thread CPU per row, rows/s, whole
process CPU per row for JSON / Avro / pbuser / EventBatch / Criteo 16 lines a
message streams, K=2 consumers, 64 partitions, preloaded. Variants alternate.
Per run also the context switches per 1K rows of the pipeline and polling
threads (/proc), and the polling threads' log at stop (runs handed over,
times every run was held).
usage: fmt_bench.py REPS fmt[,fmt] variant=BINARY:DECODE_THREADS:ENV,...
  fmt: json, avro, avroreg (registry-framed Avro: writer schema id 1 from
       the test registry, tests/ingest/avro_registry.py), protobuf, batch
       (EventBatch, 16 events a message), lines16 (criteo_tsv, 16 lines a
       message)
  e.g. fmt_bench.py 4 batch,lines16 old=build/piperec:2:PIPEREC_POLL_RUNS=nap \
           new=build/piperec:2:
  FB_ROWS: rows per topic (200000); FB_DIR: scratch directory (/tmp/fmtb)"""
import glob, os, re, shutil, subprocess, sys, time, urllib.request, json

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEW = SRC + "/build/piperec"
T = os.environ.get("FB_DIR", "/tmp/fmtb")
N = int(os.environ.get("FB_ROWS", "200000"))
PARTS = 64
TCK = os.sysconf("SC_CLK_TCK")
REG_PORT = [0]  # the test registry's port (avroreg)


def schema_yaml():
    text = open(os.path.join(SRC, "examples", "clickstream.yaml")).read()
    m = re.search(r"^    schema:.*?(?=^    transform:)", text, re.M | re.S)
    return m.group(0) + "    transform:\n      vocab: { profile: default }\n"


def source_yaml(fmt):
    if fmt == "avroreg":
        return ("      format: avro\n      schema_registry: { url: \"http://127.0.0.1:%d/\" }\n"
                % REG_PORT[0])
    if fmt == "json":
        return "      format: json\n"
    if fmt == "avro":
        return ("      format: avro\n      avro: { schema_file: \"%s/examples/clickstream.avsc\", "
                "framing: plain }\n" % SRC)
    if fmt == "protobuf":
        return ("      format: protobuf\n      protobuf: { descriptor_set: \"%s/click.desc\", "
                "message: shop.Click }\n" % T)
    if fmt == "lines16":
        return "      format: criteo_tsv\n"
    return "      format: protobuf_event_batch\n"


def config(fmt, group, d, outdir, bootstrap):
    return """pipelines:
  - name: bench
    source:
      kafka:
        topics: [%s]
        group.id: %s
        properties: { bootstrap.servers: "%s", auto.offset.reset: earliest,
                      fetch.wait.max.ms: 10 }
%s      decode_threads: %d
      consumers: 2
%s    batch: { size: 8192, max_delay_ms: 100 }
    sinks:
      files: { dir: "%s", roll_batches: 1000 }
engine: { threads: 2, overlap: true }
http: { listen: "127.0.0.1:0" }
log: { level: info }
""" % (fmt, group, bootstrap, source_yaml(fmt), d, "" if fmt in ("batch", "lines16") else schema_yaml(), outdir)


def rows_out(hp):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % hp, timeout=5) as r:
            page = r.read().decode()
    except OSError:
        return -1
    return sum(int(float(v)) for v in
               re.findall(r'^piperec_records_out_total\{[^}]*\} (\S+)$', page, re.M))


def threads(pid):
    out = {}
    for st in glob.glob("/proc/%d/task/*/stat" % pid):
        try:
            s = open(st).read()
        except OSError:
            continue
        comm = s[s.index("(") + 1:s.rindex(")")]
        f = s[s.rindex(")") + 2:].split()
        tid = st.split("/")[4]
        cs = 0
        try:
            for line in open(st[:-4] + "status"):
                if "ctxt_switches:" in line:
                    cs += int(line.split()[-1])
        except OSError:
            pass
        try:  # on-CPU time in ns (the ticks of stat are 10 ms: too coarse here)
            cpu = int(open(st[:-4] + "schedstat").read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            cpu = (int(f[11]) + int(f[12])) / TCK
        out[tid] = (comm, cpu, cs)
    return out


def proc_cpu(pid):
    s = open("/proc/%d/stat" % pid).read()
    f = s[s.rindex(")") + 2:].split()
    return (int(f[11]) + int(f[12])) / TCK


def kind(comm):
    if comm == "pr:bench":
        return "pipeline"
    if comm.startswith("pr:poll"):
        return "poll"
    if comm.startswith("pr:decode"):
        return "decode"
    if comm.startswith("pr:bench-w") or comm.startswith("pr:bench"):
        return "worker"
    if comm.startswith("rdk:"):
        return "rdkafka"
    return "other"


def one(fmt, name, binary, env, d, bootstrap, seq):
    group = "g%s%s%d" % (fmt, name, seq)
    outdir = os.path.join(T, "out")
    shutil.rmtree(outdir, ignore_errors=True)
    cfg = os.path.join(T, "run.yaml")
    open(cfg, "w").write(config(fmt, group, d, outdir, bootstrap))
    err = os.path.join(T, "run-%s-%s-%d.err" % (fmt, name, seq))
    e = dict(os.environ)
    e.update(env)
    p = subprocess.Popen(["nice", "-n", "5", binary, "run", "--config", cfg],
                         stderr=open(err, "w"), env=e)
    hp = None
    dl = time.monotonic() + 60
    while hp is None and time.monotonic() < dl:
        m = re.search(r"http on port (\d+)", open(err).read())
        if m:
            hp = int(m.group(1))
        time.sleep(0.02)
    # the window: from a quarter of the rows out (the group's join and the
    # rebalance between the two instances are over) to 95% of them
    while rows_out(hp) < N // 4 and time.monotonic() < dl + 240:
        time.sleep(0.05)
    t0 = time.monotonic()
    th0, c0 = threads(p.pid), proc_cpu(p.pid)
    r0 = rows_out(hp)
    dl = time.monotonic() + 300
    while rows_out(hp) < N * 95 // 100 and time.monotonic() < dl:
        time.sleep(0.05)
    t1 = time.monotonic()
    th1, c1 = threads(p.pid), proc_cpu(p.pid)
    r1 = rows_out(hp)
    p.terminate()
    p.wait(60)
    rows = r1 - r0
    k, cs = {}, {}
    for tid, (comm, c, x) in th1.items():
        k.setdefault(kind(comm), 0.0)
        k[kind(comm)] += c - th0.get(tid, (comm, 0.0, 0))[1]
        cs[kind(comm)] = cs.get(kind(comm), 0) + x - th0.get(tid, (comm, 0.0, 0))[2]
    log = open(err).read()
    held = [int(x) for x in re.findall(r"(\d+) time\(s\) every run was held", log)]
    hand = [int(x) for x in re.findall(r"handed over (\d+) run\(s\)", log)]
    res = {"fmt": fmt, "variant": name, "rows": rows, "rows_s": rows / (t1 - t0),
           "proc_us_row": (c1 - c0) * 1e6 / rows,
           **{kk + "_us_row": v * 1e6 / rows for kk, v in k.items()},
           **{kk + "_cs_1k": round(cs[kk] * 1e3 / rows, 2) for kk in ("pipeline", "poll")
              if kk in cs},
           "held": held, "handovers": hand}
    if os.environ.get("FB_COMM"):
        cc = {}
        for tid, (comm, c, _) in th1.items():
            cc[comm] = cc.get(comm, 0.0) + c - th0.get(tid, (comm, 0.0))[1]
        res["comm"] = {kk: round(v * 1e6 / rows, 2) for kk, v in cc.items() if v > 0}
    print(json.dumps(res), flush=True)
    return res


def registry():
    os.makedirs(T + "/reg", exist_ok=True)
    shutil.copy(SRC + "/examples/clickstream.avsc", T + "/reg/1.avsc")
    pf = T + "/reg.port"
    if os.path.exists(pf):
        os.unlink(pf)
    p = subprocess.Popen(["/usr/bin/python3", SRC + "/tests/ingest/avro_registry.py", "--dir",
                          T + "/reg", "--port-file", pf])
    while not (os.path.exists(pf) and open(pf).read().strip()):
        time.sleep(0.05)
    REG_PORT[0] = int(open(pf).read())
    return p


def main():
    os.makedirs(T, exist_ok=True)
    reps = int(sys.argv[1])
    fmts = sys.argv[2].split(",")
    variants = []
    for v in sys.argv[3:]:
        name, rest = v.split("=", 1)
        binary, d, envs = rest.split(":", 2)
        env = dict(x.split("=") for x in envs.split(",") if x)
        variants.append((name, binary, int(d), env))
    subprocess.run(["protoc", "--descriptor_set_out=%s/click.desc" % T, "--include_imports", "-I",
                    SRC + "/tests/data", "pbuser_clickstream.proto"], check=True)
    b = subprocess.Popen([NEW, "broker", "--partitions", str(PARTS), "--topics", ",".join(fmts)],
                         stdout=subprocess.PIPE, stderr=open(T + "/broker.err", "w"), text=True)
    bootstrap = b.stdout.readline().strip().split("=", 1)[1]
    reg = registry() if "avroreg" in fmts else None
    try:
        for fmt in fmts:
            data = os.path.join(T, "gen.%s" % fmt)
            if not os.path.exists(data):
                cmd = [NEW, "gen", "--rows", str(N), "--seed", "5", "--output", data]
                if fmt not in ("batch", "lines16"):
                    cmd[2:2] = ["--format", "json"]
                subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
            cmd = [NEW, "produce", "--bootstrap", bootstrap, "--topic", fmt, "--input", data]
            cmd += {"json": ["--format", "json"],
                    "avro": ["--format", "avro", "--avro-schema", SRC + "/examples/clickstream.avsc",
                             "--schema-id", "plain"],
                    "avroreg": ["--format", "avro", "--avro-schema",
                                SRC + "/examples/clickstream.avsc", "--schema-id", "1"],
                    "protobuf": ["--format", "protobuf", "--descriptor-set", T + "/click.desc",
                                 "--message", "shop.Click"],
                    "batch": ["--format", "protobuf_event_batch", "--events-per-message", "16"],
                    "lines16": ["--format", "criteo_tsv", "--lines-per-message", "16"]}[fmt]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            seq = 0
            for r in range(reps):
                for name, binary, d, env in variants:
                    seq += 1
                    one(fmt, name, binary, env, d, bootstrap, seq)
    finally:
        b.kill()
        if reg:
            reg.kill()


main()
