#!/bin/sh
# bench/bench_hot.sh — issue 14: hot sets and popular batches on a Zipf stream.
#
#   bench/bench_hot.sh [BUILD_DIR]     (default: build; builds nothing)
#
# 1. `piperec gen --zipf S` (BENCH_HOT_ZIPF, default 1.05) of BENCH_HOT_ROWS
#    rows (default 200000); each run gets its own topic, produced before the
#    run starts in chunks of 12000 rows per partition (the mock broker keeps
#    only ~5 MB per partition, and a keyless producer spreads unevenly);
# 2. hot-set coverage vs K: the exact share of lookups the K most frequent
#    values cover (from the TSV), against the sketch's estimate (GET /v1/hot,
#    hot.top_k 1024, no decay), K = 10, 100, 1000, mean over the 26 columns and
#    the three largest ones;
# 3. `piperec run` rows/s with batch.split none vs popular, hot sets on in
#    both (so the difference is the split), alternating BENCH_HOT_ROUNDS
#    (default 2) rounds, medians; `piperec consume` acks the trainer stream.
#    Rate = rows out / time from the first batch out to the last (polling
#    /v1/status every 20 ms: the group join is not counted).
# Prints JSON lines ({"bench": "hot_coverage" ...}, {"bench": "hot_split" ...});
# bench/run.sh collects lines starting with '{'.
set -eu
BUILD=${1:-build}
PIPEREC=$BUILD/piperec
[ -x "$PIPEREC" ] || { echo "bench_hot.sh: $PIPEREC not built" >&2; exit 1; }
TMP=$(mktemp -d "${BENCH_TMP:-/tmp}/piperec-bench-hot.XXXXXX")
trap 'rm -rf "$TMP"' EXIT INT TERM
export PIPEREC TMP
export ROWS=${BENCH_HOT_ROWS:-200000} ZIPF=${BENCH_HOT_ZIPF:-1.05} ROUNDS=${BENCH_HOT_ROUNDS:-2}
exec /usr/bin/python3 - <<'PY'
import collections, json, os, re, statistics, subprocess, sys, time, urllib.request

P, T = os.environ["PIPEREC"], os.environ["TMP"]
ROWS, S, ROUNDS = int(os.environ["ROWS"]), float(os.environ["ZIPF"]), int(os.environ["ROUNDS"])
KS = (10, 100, 1000)
procs = []


def http(port, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
        return r.read().decode()


def run_once(bootstrap, split, group, topic, chunks):
    for i, chunk in enumerate(chunks):
        subprocess.run([P, "produce", "--bootstrap", bootstrap, "--topic", topic, "--input", chunk,
                        "--lines-per-message", "50", "--partition", str(i)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cfg = os.path.join(T, "run-%s.yaml" % group)
    with open(cfg, "w") as f:
        f.write("""pipelines:
  - name: p
    source:
      kafka:
        topics: [%s]
        group.id: %s
        properties: { bootstrap.servers: "%s", auto.offset.reset: earliest }
    batch: { size: 4096, max_delay_ms: 100, split: %s }
    sinks: { trainer: { listen: "127.0.0.1:0" } }
hot: { top_k: 1024, half_life_records: 1000000000 }
http: { listen: "127.0.0.1:0" }
""" % (topic, group, bootstrap, split))
    err = os.path.join(T, "run-%s.err" % group)
    run = subprocess.Popen([P, "run", "--config", cfg], stderr=open(err, "w"))
    procs.append(run)
    hp = tp = None
    deadline = time.monotonic() + 60
    assigned = False
    while not (tp and assigned) and time.monotonic() < deadline:
        m = re.search(r"http on port (\d+)", open(err).read())
        if m:
            hp = int(m.group(1))
            st = json.loads(http(hp, "/v1/status"))["pipelines"][0]
            tp, assigned = st["trainer_port"], len(st["assignment"]) > 0
        time.sleep(0.02)
    cons = subprocess.Popen([P, "consume", "--connect", "127.0.0.1:%d" % tp, "--pipeline", "p",
                             "--quiet", "--credits", "16"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    procs.append(cons)
    t_first = t_last = None
    out = last = max_lag = 0
    while out < ROWS and time.monotonic() < deadline + 300:
        st = json.loads(http(hp, "/v1/status"))["pipelines"][0]
        out = st["records_out"]
        now = time.monotonic()
        max_lag = max(max_lag, st["lag"])
        if out and t_first is None:
            t_first, out_first = now, out
        if out != last:
            t_last, last = now, out
        elif t_last and now - t_last > 3:
            break  # the mock broker dropped some (its window): rate over what came
        time.sleep(0.02)
    cov = {}
    if split == "popular":
        names = list(st["vocab_sizes"].keys())
        for name in names:
            cov[name] = {k: json.loads(http(hp, "/v1/hot?pipeline=p&column=%s&k=%d" % (name, k)))
                         ["coverage"] for k in KS}
    metrics = http(hp, "/metrics")
    m = re.search(r'^piperec_popular_share_ratio\{pipeline="p"\} (\S+)$', metrics, re.M)
    share = float(m.group(1)) if m else 0.0
    run.terminate()
    run.wait(30)
    cons.kill()
    cons.wait()
    rate = (out - out_first) / (t_last - t_first) if t_first and t_last > t_first else 0.0
    if out != ROWS:
        print("bench_hot.sh: %s: %d of %d rows came through" % (group, out, ROWS), file=sys.stderr)
    return rate, share, cov, max_lag


try:
    data = os.path.join(T, "zipf.tsv")
    subprocess.run([P, "gen", "--zipf", str(S), "--rows", str(ROWS), "--output", data], check=True)
    # Exact coverage of the K most frequent values per column (missing included:
    # it is a lookup of index 0 too).
    counts = [collections.Counter() for _ in range(26)]
    with open(data) as f:
        for line in f:
            for c, v in enumerate(line.rstrip("\n").split("\t")[14:]):
                counts[c][v] += 1
    exact = []
    for c in range(26):
        top = sorted(counts[c].values(), reverse=True)
        exact.append({k: sum(top[:k]) / ROWS for k in KS})

    chunks = []
    with open(data) as f:
        lines = f.readlines()
    for i in range(0, ROWS, 12000):
        chunks.append(os.path.join(T, "chunk%d.tsv" % len(chunks)))
        with open(chunks[-1], "w") as f:
            f.writelines(lines[i:i + 12000])
    del lines
    topics = ["t%d" % i for i in range(2 * ROUNDS)]
    b = subprocess.Popen([P, "broker", "--partitions", str(len(chunks)), "--topics",
                          ",".join(topics)],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    procs.append(b)
    bootstrap = b.stdout.readline().strip().split("=", 1)[1]
    rates = {"none": [], "popular": []}
    share, cov, lags = 0.0, {}, []
    for r in range(ROUNDS):
        for split in ("none", "popular") if r % 2 == 0 else ("popular", "none"):
            rate, sh, cv, lag = run_once(bootstrap, split, "g-%s-%d" % (split, r), topics.pop(),
                                         chunks)
            rates[split].append(rate)
            lags.append(lag)
            if split == "popular":
                share, cov = sh, cv
    names = list(cov.keys())
    big = sorted(range(26), key=lambda c: -len(counts[c]))[:3]
    for k in KS:
        est = [cov[names[c]][k] for c in range(26)]
        ex = [exact[c][k] for c in range(26)]
        print(json.dumps({"bench": "hot_coverage", "zipf": S, "rows": ROWS, "k": k,
                          "exact_mean": round(statistics.mean(ex), 4),
                          "sketch_mean": round(statistics.mean(est), 4),
                          "max_abs_error": round(max(abs(a - e) for a, e in zip(est, ex)), 5),
                          "largest_columns": {names[c]: {"exact": round(exact[c][k], 4),
                                                         "sketch": round(cov[names[c]][k], 4)}
                                              for c in big}}))
    off, on = statistics.median(rates["none"]), statistics.median(rates["popular"])
    print(json.dumps({"bench": "hot_split", "zipf": S, "rows": ROWS, "rounds": ROUNDS,
                      "rows_per_s_split_none": round(off), "rows_per_s_split_popular": round(on),
                      "popular_over_none": round(on / off, 3) if off else None,
                      "popular_share": round(share, 4), "max_lag_records": max(lags)}))
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
PY
