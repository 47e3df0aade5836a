#!/bin/sh
# bench/bench_json_stream.sh — JSON streaming throughput (issue 20's goal:
# decode + extract + operators on 2 cores >= 10x a Python consumer doing the
# same), piperec beside a Python consumer, side by side in one run on the
# same topic: the clickstream of `piperec gen --format json`, one JSON object
# per Kafka message, through the features of examples/clickstream.yaml.
#
#   bench/bench_json_stream.sh [BUILD_DIR]        (default: build)
#
# Steps (the structure of bench/bench_stream.sh):
#   1. `piperec broker --partitions P` (default 128): the test broker, on
#      loopback, in its own process;
#   2. `piperec gen --format json` N events (BENCH_JSON_STREAM_ROWS, default
#      500K, ~280 bytes each: ~1.1 MB per partition at 128 partitions, under
#      the ~5 MB the mock broker keeps) and `piperec produce --format json`
#      them, round-robin over the partitions, before anything consumes (so both
#      consumers read the same records, all retained);
#   3. `piperec run` on a config whose schema is examples/clickstream.yaml's
#      (copied from the file: labels, 3 dense, 9 sparse features incl. lists,
#      hash, cross, bucketize, times, vocabularies under profile default),
#      batch 4096, max_delay_ms 100, trainer sink, engine.threads 2, with
#      `piperec consume` acking every batch (and counting that every row
#      arrived); rows/s from /metrics polled every 20 ms, first rows out to
#      all rows out (the ~3 s group join before is not counted), with the
#      process CPU time over the same window (and per thread name, from
#      /proc/PID/task/*/schedstat: seconds on a CPU, where the time goes, and
#      seconds runnable but waiting for a CPU, what a shared machine costs)
#      and peak RSS (VmHWM);
#   4. bench/baseline_json.py: confluent-kafka + json + numpy + xxhash doing
#      the same features (first checked against `piperec process --config`
#      output on a slice of the same events), timed the same way;
#   5. one JSON line each, then the ratio piperec / python (rows/s, the goal;
#      and CPU microseconds per row, per core).
# Env: BENCH_JSON_STREAM_ROWS, BENCH_JSON_STREAM_PARTITIONS,
# BENCH_JSON_STREAM_THREADS (engine.threads), BENCH_JSON_STREAM_DECODE (the
# source.decode_threads values to run piperec with, one run each on the same
# topic, e.g. "1 2": the serial decode beside the parallel one; default "0",
# auto), BENCH_JSON_STREAM_NO_PYTHON=1, BENCH_TMP. JSON lines go to stdout;
# progress to stderr.
set -eu
BUILD=${1:-build}
ROWS=${BENCH_JSON_STREAM_ROWS:-500000}
PARTS=${BENCH_JSON_STREAM_PARTITIONS:-128}
THREADS=${BENCH_JSON_STREAM_THREADS:-2}
DECODE_LIST=${BENCH_JSON_STREAM_DECODE:-0}
PY=/usr/bin/python3
HERE=$(cd "$(dirname "$0")" && pwd)
EXAMPLE=$HERE/../examples/clickstream.yaml
PIPEREC=$BUILD/piperec
[ -x "$PIPEREC" ] || { echo "bench_json_stream.sh: $PIPEREC not built" >&2; exit 1; }
$PY -c "import confluent_kafka, numpy, xxhash" 2>/dev/null ||
    { echo "bench_json_stream.sh: $PY lacks confluent_kafka/numpy/xxhash (apt-get install python3-confluent-kafka python3-numpy python3-xxhash)" >&2; exit 1; }
TMP=$(mktemp -d "${BENCH_TMP:-/tmp}/piperec-jstream.XXXXXX")
BPID=""; RPID=""
# Stop `piperec run` before the broker (it commits while draining); give it
# 10 s, then SIGKILL, so a failed run never leaves the script waiting.
stop_pid() {
    kill -TERM "$1" 2>/dev/null || return 0
    i=0
    while kill -0 "$1" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.2; i=$((i + 1)); done
    kill -KILL "$1" 2>/dev/null || true
}
cleanup() {
    [ -n "$RPID" ] && stop_pid "$RPID"
    [ -n "$BPID" ] && stop_pid "$BPID"
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "== json stream: broker with $PARTS partitions" >&2
mkfifo "$TMP/broker.fifo"
"$PIPEREC" broker --partitions "$PARTS" --topics "clicks:$PARTS" > "$TMP/broker.fifo" 2> "$TMP/broker.err" &
BPID=$!
exec 3< "$TMP/broker.fifo"
read -r first <&3 || { cat "$TMP/broker.err" >&2; exit 1; }
B=${first#bootstrap=}

echo "== json stream: gen --format json + produce $ROWS events, one per message" >&2
"$PIPEREC" gen --format json --rows "$ROWS" --seed 1 --threads 2 --output "$TMP/data.jsonl"
# produce --format json without --key-path: round-robin over the partitions.
"$PIPEREC" produce --bootstrap "$B" --topic clicks --format json --input "$TMP/data.jsonl" >&2

# The schema of examples/clickstream.yaml, as it is in the file (so the
# bench follows the example; baseline_json.py's check catches a drift).
sed -n '/^    schema:/,/^    transform:/p' "$EXAMPLE" | sed '$d' > "$TMP/schema.yaml"
grep -q 'cat_x_device' "$TMP/schema.yaml" ||
    { echo "bench_json_stream.sh: no schema found in $EXAMPLE" >&2; exit 1; }

# One `piperec run` with source.decode_threads $1 (0: auto) on the topic.
run_piperec() {
DECODE=$1
RUN_NO=$((RUN_NO + 1)) # a fresh group per run: a repeated value reads from the start too
TPORT=$(free_port); HPORT=$(free_port)
{
cat <<EOF
pipelines:
  - name: bench
    source:
      kafka:
        topics: [clicks]
        group.id: bench-piperec-json-d$DECODE-$RUN_NO
        properties: { bootstrap.servers: "$B", auto.offset.reset: earliest }
      format: json
      decode_threads: $DECODE
EOF
cat "$TMP/schema.yaml"
cat <<EOF
    transform:
      vocab: { profile: default }
    batch: { size: 4096, max_delay_ms: 100, ordering: partition }
    sinks:
      trainer: { listen: "127.0.0.1:$TPORT", max_unacked_batches: 64 }
http: { listen: "127.0.0.1:$HPORT" }
engine: { backend: cpu, threads: $THREADS }
limits: { max_inflight_bytes: 256MiB }
log: { level: warn }
EOF
} > "$TMP/run.yaml"

echo "== json stream: piperec run + piperec consume" >&2
"$PIPEREC" run --config "$TMP/run.yaml" 2> "$TMP/run.err" &
RPID=$!
# The rate: /metrics polled every 20 ms, rows out of the engine into batches
# (piperec_records_out_total) from the first poll that sees rows to the one
# that sees all of them, with the process CPU time over the same window.
$PY - "127.0.0.1:$HPORT" "$ROWS" "$RPID" "$BPID" > "$TMP/poll.json" 2> "$TMP/poll.err" <<'PYEOF' &
import json, os, re, sys, time, urllib.request
url, want, pid, bpid = "http://%s/metrics" % sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def cpu(pid=pid):
    f = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / 100.0  # utime + stime, clock ticks
def threads(pid=pid):
    """Per thread name (comm) of the process, from /proc/PID/task: seconds on
    a CPU, and seconds runnable but waiting for one (schedstat: what the
    other users of a shared machine cost us)."""
    out = {}
    for t in os.listdir("/proc/%s/task" % pid):
        try:
            raw = open("/proc/%s/task/%s/stat" % (pid, t)).read()
            run, wait = open("/proc/%s/task/%s/schedstat" % (pid, t)).read().split()[:2]
        except (OSError, ValueError):
            continue
        name = raw[raw.index("(") + 1:raw.rindex(")")]
        o = out.setdefault(name, [0.0, 0.0])
        o[0] += int(run) / 1e9
        o[1] += int(wait) / 1e9
    return out
def delta(a, b, i):
    return {k: round(v[i] - b.get(k, (0, 0))[i], 2) for k, v in sorted(a.items())
            if v[i] - b.get(k, (0, 0))[i] >= 0.01}
def scrape():
    try:
        return urllib.request.urlopen(url, timeout=1).read().decode()
    except Exception:
        return ""
t_first = t_last = None
deadline = time.time() + 600
while time.time() < deadline:
    text = scrape()
    m = re.search(r'^piperec_records_out_total\{[^}]*\} (\d+)', text, re.M)
    n = int(m.group(1)) if m else 0
    now = time.perf_counter()
    if n > 0 and t_first is None:
        t_first, n_first, c_first, b_first, th_first = now, n, cpu(), cpu(bpid), threads()
    if n >= want:
        t_last, c_last, b_last, th_last = now, cpu(), cpu(bpid), threads()
        break
    time.sleep(0.02)
if t_last is None:
    sys.exit("poll: records_out_total never reached %d" % want)
rej = sum(int(v) for v in re.findall(r'^piperec_rejected_records_total\{[^}]*\} (\d+)', text, re.M))
print(json.dumps({"rows": want - n_first, "seconds": t_last - t_first,
                  "cpu_seconds": c_last - c_first, "broker_cpu_seconds": b_last - b_first,
                  "rejected": rej,
                  "thread_cpu_seconds": delta(th_last, th_first, 0),
                  "thread_runqueue_wait_seconds": delta(th_last, th_first, 1)}))
PYEOF
PPID_POLL=$!
"$PIPEREC" consume --connect "127.0.0.1:$TPORT" --pipeline bench --credits 64 --quiet \
    --idle-timeout-ms 10000 --connect-timeout-ms 30000 > "$TMP/consume.out" 2> "$TMP/consume.err" ||
    { tail -5 "$TMP/run.err" "$TMP/consume.err" >&2; exit 1; }
wait "$PPID_POLL" || { cat "$TMP/poll.err" >&2; tail -5 "$TMP/run.err" >&2; exit 1; }
RSS_KB=$(awk '/^VmHWM/ {print $2}' "/proc/$RPID/status" 2>/dev/null || echo 0)
stop_pid "$RPID"; RPID=""
cat "$TMP/consume.out" >&2
$PY - "$TMP/consume.out" "$TMP/poll.json" "$ROWS" "$PARTS" "$RSS_KB" "$THREADS" \
    "$(stat -c %s "$TMP/data.jsonl")" "$DECODE" > "$TMP/piperec-$RUN_NO.json" <<'PYEOF'
import json, re, sys
text = open(sys.argv[1]).read()
poll = json.load(open(sys.argv[2]))
rows = int(re.search(r"(\d+) rows,", text).group(1))
if rows < int(sys.argv[3]):
    sys.exit("bench_json_stream: piperec delivered %d of %s rows (%s)" % (rows, sys.argv[3], text.strip()))
s = poll["seconds"]
avg = int(sys.argv[7]) / int(sys.argv[3])  # bytes per event, newline included
print(json.dumps({"bench": "json_stream_piperec", "threads": int(sys.argv[6]),
                  "decode_threads": int(sys.argv[8]), "rows": rows,
                  "seconds": round(s, 3), "rows_per_s": round(poll["rows"] / s),
                  "mb_per_s": round(poll["rows"] * (avg - 1) / s / 1e6, 1),
                  "avg_event_bytes": round(avg - 1, 1),
                  "partitions": int(sys.argv[4]),
                  "peak_rss_mb": round(int(sys.argv[5]) / 1024, 1),
                  "cpu_seconds": round(poll["cpu_seconds"], 2),
                  "cpu_busy_share": round(poll["cpu_seconds"] / s, 2),
                  "broker_cpu_seconds": round(poll["broker_cpu_seconds"], 2),
                  "cpu_us_per_row": round(poll["cpu_seconds"] / poll["rows"] * 1e6, 2),
                  "thread_cpu_seconds": poll["thread_cpu_seconds"],
                  "thread_runqueue_wait_seconds": poll["thread_runqueue_wait_seconds"],
                  "rejected": poll["rejected"], "delivered_to_trainer": rows,
                  "pipeline": "broker -> piperec run (json, clickstream.yaml schema) -> trainer sink -> piperec consume"}))
PYEOF
cat "$TMP/piperec-$RUN_NO.json"

}
RUN_NO=0
for D in $DECODE_LIST; do run_piperec "$D"; done

# --- the Python baseline, checked first against piperec process on a slice
[ -n "${BENCH_JSON_STREAM_NO_PYTHON:-}" ] && exit 0
echo "== json stream: Python baseline (confluent-kafka + json + numpy)" >&2
head -n 20000 "$TMP/data.jsonl" > "$TMP/slice.jsonl"
"$PIPEREC" process --config "$TMP/run.yaml" --input "$TMP/slice.jsonl" --output "$TMP/slice-out" \
    --no-progress 2> "$TMP/process.err" || { cat "$TMP/process.err" >&2; exit 1; }
$PY "$HERE/baseline_json.py" --bootstrap "$B" --topic clicks --rows "$ROWS" --batch 4096 \
    --check "$TMP/slice.jsonl" "$TMP/slice-out" > "$TMP/python.json" ||
    { cat "$TMP/python.json" >&2; exit 1; }
cat "$TMP/python.json"
for R in $(seq 1 "$RUN_NO"); do
$PY - "$TMP/piperec-$R.json" "$TMP/python.json" <<'PYEOF'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
r = a["rows_per_s"] / b["rows_per_s"]
print(json.dumps({"bench": "json_stream_ratio", "threads": a["threads"],
                  "decode_threads": a["decode_threads"], "rows": a["rows"],
                  "piperec_rows_per_s": a["rows_per_s"], "python_rows_per_s": b["rows_per_s"],
                  "ratio_piperec_over_python": round(r, 2),
                  "piperec_cpu_us_per_row": a["cpu_us_per_row"],
                  "python_cpu_us_per_row": b["cpu_us_per_row"],
                  "ratio_per_cpu_second": round(b["cpu_us_per_row"] / a["cpu_us_per_row"], 2),
                  "python_matches_piperec": b.get("matches_piperec", False),
                  "peak_rss_mb": a["peak_rss_mb"], "goal_ratio": 10, "goal_met": r >= 10}))
PYEOF
done

stop_pid "$BPID"; BPID=""
exec 3<&-
