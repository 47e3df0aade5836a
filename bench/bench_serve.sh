#!/bin/sh
# bench/bench_serve.sh — `make bench` step 4j: the serving transform
# (docs/serving.md) against `piperec process` on the same events.
#
# Events: examples/clickstream.yaml's (`piperec gen --format json`,
# BENCH_SV_ROWS, default 200,000, seeded) and the Criteo layout (`piperec gen`,
# the default config). Per layout, at one thread:
#
#   process     `piperec process --threads 1` (the baseline; its vocab/ is
#               the one the others read)
#   transform   `piperec transform --vocab` of the same events: one JSON line
#               per event, the vocabulary frozen
#
# then `piperec serve` of the clickstream vocabulary, a Python client on one
# keep-alive connection posting requests of 1, 16 and 256 events for
# BENCH_SV_SECONDS (default 3) each: requests/s, events/s and the latency's
# p50 and p99 as the client saw it (the client's own time included; on 2
# cores it shares them with the server).
#
# Then requests at once: `serve --threads T` for each T in BENCH_SV_THREADS
# (default "1 2"), BENCH_SV_CLIENTS client processes (default 2), each on its
# own keep-alive connection posting 256 events a request for BENCH_SV_SECONDS:
# events/s of all clients together and the p99 latency. On 2 cores the
# clients share the cores with the server, so T above the core count shows
# only the cost of the locks; a 16-core host shows the scaling
# (bench/device_lease.sh).
#
# Then, on the same server, `ServeClient.batch()` (the torch batch a model
# server gets) over each wire for BENCH_SV_SECONDS / 2 per request size:
# `json` (rows parsed and stacked in Python) and `raw` (?layout=raw: the
# trainer stream's raw layout, viewed as it is).
#
# Prints JSON lines serve_offline (per layout and run), serve_http (per
# request size), serve_client (per request size and wire), serve_threads
# (per T) and serve_ratios: transform / process rows per second per layout,
# HTTP events/s at 256 a request / transform's, the client's raw / json
# events/s per request size, and events/s at each T / at T = 1
# (threads_N_vs_1).
#
#   bench/bench_serve.sh [BUILD_DIR]     (default: build)
set -eu
BUILD=${1:-build}
PIPEREC=$BUILD/piperec
PY=/usr/bin/python3
HERE=$(cd "$(dirname "$0")" && pwd)
ROWS=${BENCH_SV_ROWS:-200000}
SECS=${BENCH_SV_SECONDS:-3}
THREADS=${BENCH_SV_THREADS:-1 2}
CLIENTS=${BENCH_SV_CLIENTS:-2}
TMP=$(mktemp -d "${BENCH_TMP:-/tmp}/piperec-bench-sv.XXXXXX")
SERVE_PID=
trap '[ -n "$SERVE_PID" ] && kill "$SERVE_PID" 2>/dev/null; rm -rf "$TMP"' EXIT INT TERM
CS="$HERE/../examples/clickstream.yaml"

now() { date +%s.%N; }

echo "== 4j. serving transform: $ROWS events, transform vs process, serve over HTTP" >&2
"$PIPEREC" gen --format json --rows "$ROWS" --seed 7 --output "$TMP/cs.jsonl" 2>/dev/null
"$PIPEREC" gen --rows "$ROWS" --seed 7 --output "$TMP/criteo.tsv" 2>/dev/null

# one layout: process, then transform; JSON lines on stdout
offline() { # name, config args, input
    name=$1 cfg=$2 in=$3
    t0=$(now)
    "$PIPEREC" process $cfg --input "$in" --output "$TMP/$name.out" --threads 1 --no-progress \
        > /dev/null 2>&1
    t1=$(now)
    "$PIPEREC" transform $cfg --vocab "$TMP/$name.out" --input "$in" --output "$TMP/$name.rows" \
        2> "$TMP/$name.err"
    t2=$(now)
    lines=$(wc -l < "$TMP/$name.rows")
    [ "$lines" -eq "$ROWS" ] || { echo "bench_serve: $name: $lines rows for $ROWS" >&2; exit 1; }
    $PY - "$name" "$ROWS" "$t0" "$t1" "$t2" <<'EOF'
import json, sys
name, rows, t0, t1, t2 = sys.argv[1], int(sys.argv[2]), *map(float, sys.argv[3:])
for what, s in (("process", t1 - t0), ("transform", t2 - t1)):
    print(json.dumps({"bench": "serve_offline", "layout": name, "run": what, "rows": rows,
                      "seconds": round(s, 3), "rows_per_s": round(rows / s)}))
EOF
}
offline clickstream "--config $CS" "$TMP/cs.jsonl" > "$TMP/offline.jsonl"
offline criteo "" "$TMP/criteo.tsv" >> "$TMP/offline.jsonl"
cat "$TMP/offline.jsonl"

# serve the clickstream vocabulary with $1 threads: SERVE_PID, port
serve_start() {
    "$PIPEREC" serve --config "$CS" --vocab "$TMP/clickstream.out" --listen 127.0.0.1:0 \
        --reload-s 0 --threads "$1" 2> "$TMP/serve.err" &
    SERVE_PID=$!
    port=
    for _ in $(seq 100); do
        port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$TMP/serve.err")
        [ -n "$port" ] && break
        sleep 0.1
    done
    [ -n "$port" ] || { echo "bench_serve: serve did not start: $(cat "$TMP/serve.err")" >&2; exit 1; }
}
serve_stop() {
    kill "$SERVE_PID"
    wait "$SERVE_PID" 2>/dev/null || true
    SERVE_PID=
}
serve_start 1

$PY - "$port" "$TMP/cs.jsonl" "$SECS" "$TMP/offline.jsonl" <<'EOF'
import http.client, json, sys, time
port, path, secs = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
lines = open(path, "rb").read().splitlines()
offline = [json.loads(l) for l in open(sys.argv[4])]
conn = http.client.HTTPConnection("127.0.0.1", port)
http_eps = {}
for size in (1, 16, 256):
    lat, at, events = [], 0, 0
    t_end = time.perf_counter() + secs
    while time.perf_counter() < t_end:
        body = b"\n".join(lines[at:at + size]) + b"\n"
        at = (at + size) % (len(lines) - size)
        t0 = time.perf_counter()
        conn.request("POST", "/v1/transform", body)
        r = conn.getresponse()
        out = r.read()
        lat.append(time.perf_counter() - t0)
        if r.status != 200 or out.count(b"\n") != size:
            sys.exit("bench_serve: HTTP %d, %d lines for %d" % (r.status, out.count(b"\n"), size))
        events += size
    lat.sort()
    total = sum(lat)
    http_eps[size] = events / total
    print(json.dumps({"bench": "serve_http", "events_per_request": size, "requests": len(lat),
                      "requests_per_s": round(len(lat) / total), "events_per_s": round(events / total),
                      "p50_ms": round(lat[len(lat) // 2] * 1e3, 3),
                      "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3, 3)}))
rate = {(o["layout"], o["run"]): o["rows_per_s"] for o in offline}
print(json.dumps({"bench": "serve_ratios",
                  "transform_vs_process_clickstream":
                      round(rate["clickstream", "transform"] / rate["clickstream", "process"], 3),
                  "transform_vs_process_criteo":
                      round(rate["criteo", "transform"] / rate["criteo", "process"], 3),
                  "http256_vs_transform_clickstream":
                      round(http_eps[256] / rate["clickstream", "transform"], 3)}))
EOF

# ServeClient.batch over each wire: JSON rows vs the raw layout (one connection)
PYTHONPATH="$HERE/../clients/python" $PY - "$port" "$TMP/cs.jsonl" "$SECS" <<'EOF'
import json, sys, time
from piperec.serving import ServeClient
port, path, secs = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
lines = open(path).read().splitlines()
client = ServeClient("http://127.0.0.1:%d" % port)
for wire in ("json", "raw"):  # the connection, /v1/status and torch's first calls
    client.batch(lines[:16], wire=wire)
eps = {}
for size in (1, 16, 256):
    for wire in ("json", "raw"):
        lat, at = [], 0
        t_end = time.perf_counter() + secs / 2
        while time.perf_counter() < t_end:
            evs = lines[at:at + size]
            at = (at + size) % (len(lines) - size)
            t0 = time.perf_counter()
            b = client.batch(evs, wire=wire)
            lat.append(time.perf_counter() - t0)
            if b.rows != size:
                sys.exit("bench_serve: %d rows for %d events" % (b.rows, size))
        lat.sort()
        eps[size, wire] = size * len(lat) / sum(lat)
        print(json.dumps({"bench": "serve_client", "events_per_request": size, "wire": wire,
                          "requests": len(lat), "events_per_s": round(eps[size, wire]),
                          "p50_ms": round(lat[len(lat) // 2] * 1e3, 3),
                          "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3, 3)}))
print(json.dumps({"bench": "serve_ratios", **{"client_raw_vs_json_%d" % s:
                  round(eps[s, "raw"] / eps[s, "json"], 3) for s in (1, 16, 256)}}))
EOF
serve_stop

# requests at once: CLIENTS processes against serve --threads T
for t in $THREADS; do
    serve_start "$t"
    $PY - "$port" "$TMP/cs.jsonl" "$SECS" "$CLIENTS" "$t" <<'EOF' >> "$TMP/threads.jsonl"
import http.client, json, multiprocessing as mp, sys, time
port, path, secs, clients, threads = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), \
    int(sys.argv[4]), int(sys.argv[5])
SIZE = 256

def client(k, start, q):
    lines = open(path, "rb").read().splitlines()
    conn = http.client.HTTPConnection("127.0.0.1", port)
    at, lat, events = (k * 7919) % (len(lines) - SIZE), [], 0
    while time.time() < start:
        time.sleep(0.001)
    t_end = start + secs
    while time.time() < t_end:
        body = b"\n".join(lines[at:at + SIZE]) + b"\n"
        at = (at + SIZE) % (len(lines) - SIZE)
        t0 = time.perf_counter()
        conn.request("POST", "/v1/transform", body)
        r = conn.getresponse()
        out = r.read()
        lat.append(time.perf_counter() - t0)
        if r.status != 200 or out.count(b"\n") != SIZE:
            q.put(("error", "HTTP %d" % r.status))
            return
        events += SIZE
    q.put((events, lat))

q = mp.Queue()
start = time.time() + 1.0  # every client connected and its events read
ps = [mp.Process(target=client, args=(k, start, q)) for k in range(clients)]
for p in ps:
    p.start()
got = [q.get() for _ in ps]
for p in ps:
    p.join()
if any(g[0] == "error" for g in got):
    sys.exit("bench_serve: %r" % [g for g in got if g[0] == "error"])
events = sum(g[0] for g in got)
lat = sorted(x for g in got for x in g[1])
print(json.dumps({"bench": "serve_threads", "threads": threads, "clients": clients,
                  "events_per_request": SIZE, "requests": len(lat),
                  "events_per_s": round(events / secs),
                  "p50_ms": round(lat[len(lat) // 2] * 1e3, 3),
                  "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3, 3)}))
EOF
    serve_stop
done
cat "$TMP/threads.jsonl"
$PY - "$TMP/threads.jsonl" <<'EOF'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
base = next((r["events_per_s"] for r in runs if r["threads"] == 1), None)
if base:
    print(json.dumps({"bench": "serve_ratios", **{
        "threads_%d_vs_1" % r["threads"]: round(r["events_per_s"] / base, 3)
        for r in runs if r["threads"] != 1}}))
EOF
