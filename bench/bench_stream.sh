#!/bin/sh
# bench/bench_stream.sh — streaming throughput, piperec beside a Python
# consumer, on the same data, one Criteo TSV line per Kafka message.
#
#   bench/bench_stream.sh [BUILD_DIR]        (default: build)
#
# Steps:
#   1. `piperec broker --partitions P` (default 128): the test broker, on
#      loopback, in its own process;
#   2. `piperec gen` N rows (BENCH_STREAM_ROWS, default 1M: ~2 MB per
#      partition at 128 partitions, under the ~5 MB the mock broker keeps)
#      and `piperec produce` them, one line per message, before anything
#      consumes (so both consumers read the same records, all retained);
#   3. twice (default consumer properties, then tuned ones, each with its own
#      consumer group): `piperec run` on a generated config (default pipeline: dlrm, modulus
#      524288, batch 4096, max_delay_ms 100, trainer sink, engine.threads 2)
#      with `piperec consume` acking every batch (and counting that every row
#      arrived); rows/s from /metrics polled every 20 ms, first rows out to
#      all rows out (the ~3 s group join before is not counted), with the
#      process CPU time and the engine's seconds per operator over the same
#      window (where the time goes); peak RSS of `piperec run` is its VmHWM
#      from /proc before it is stopped;
#   4. bench/baseline_stream.py: confluent-kafka + pandas doing the same
#      operators (first checked against `piperec process` output on a slice
#      of the same data), timed the same way (first message to last row);
#   5. one JSON line each, then the ratio piperec / python.
# Env: BENCH_STREAM_ROWS, BENCH_STREAM_PARTITIONS, BENCH_STREAM_THREADS
# (engine.threads), BENCH_STREAM_PROPS ("key: value; key: value" librdkafka
# consumer properties added to the source), BENCH_STREAM_NO_PYTHON=1 (piperec
# only, for trying settings), BENCH_STREAM_CONFIG (your own config file to run
# instead of the generated one, to try other runtime settings: the script
# substitutes the run's broker address, trainer and HTTP listen addresses and
# group id for the tokens @BOOTSTRAP@, @TRAINER@, @HTTP@ and @GROUP@ in it with
# sed; its pipeline must be named bench), BENCH_TMP. JSON lines go to stdout;
# progress to stderr.
set -eu
BUILD=${1:-build}
ROWS=${BENCH_STREAM_ROWS:-1000000}
PARTS=${BENCH_STREAM_PARTITIONS:-128}
THREADS=${BENCH_STREAM_THREADS:-2}
PY=/usr/bin/python3
HERE=$(cd "$(dirname "$0")" && pwd)
PIPEREC=$BUILD/piperec
[ -x "$PIPEREC" ] || { echo "bench_stream.sh: $PIPEREC not built" >&2; exit 1; }
$PY -c "import confluent_kafka, pandas" 2>/dev/null ||
    { echo "bench_stream.sh: $PY lacks confluent_kafka/pandas (apt-get install python3-confluent-kafka python3-pandas)" >&2; exit 1; }
TMP=$(mktemp -d "${BENCH_TMP:-/tmp}/piperec-stream.XXXXXX")
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

echo "== stream: broker with $PARTS partitions" >&2
mkfifo "$TMP/broker.fifo"
"$PIPEREC" broker --partitions "$PARTS" --topics "events:$PARTS" > "$TMP/broker.fifo" 2> "$TMP/broker.err" &
BPID=$!
exec 3< "$TMP/broker.fifo"
read -r first <&3 || { cat "$TMP/broker.err" >&2; exit 1; }
B=${first#bootstrap=}

echo "== stream: gen + produce $ROWS rows, one line per message" >&2
"$PIPEREC" gen --rows "$ROWS" --seed 1 --threads 2 --output "$TMP/data.tsv"
# Keyless messages: without sticky.partitioning.linger.ms=0 librdkafka fills
# one partition per batch, some partitions pass the mock broker's ~5 MB and
# lose their oldest records (measured: 792K of 1M kept); per-message random
# partitions spread them evenly (7.6K-8.1K per partition at 1M rows).
"$PIPEREC" produce --bootstrap "$B" --topic events --input "$TMP/data.tsv" \
    -X sticky.partitioning.linger.ms=0 >&2

# --- piperec run + piperec consume, once per variant:
# run_piperec NAME "PROPS" -> $TMP/piperec-NAME.json
run_piperec() {
VARIANT=$1; PROPS=$2; OVERLAP=${3:-true}
TPORT=$(free_port); HPORT=$(free_port)
if [ -n "${BENCH_STREAM_CONFIG:-}" ]; then
    sed -e "s/@BOOTSTRAP@/$B/" -e "s/@TRAINER@/127.0.0.1:$TPORT/" -e "s/@HTTP@/127.0.0.1:$HPORT/" \
        -e "s/@GROUP@/bench-piperec-$VARIANT/" \
        "$BENCH_STREAM_CONFIG" > "$TMP/run.yaml"
else
    cat > "$TMP/run.yaml" <<EOF
pipelines:
  - name: bench
    source:
      kafka:
        topics: [events]
        group.id: bench-piperec-$VARIANT
        properties:
          bootstrap.servers: "$B"
          auto.offset.reset: earliest
$(printf '%s' "$PROPS" | tr ';' '\n' | sed -e '/^ *$/d' -e 's/^ */          /')
      format: criteo_tsv
    schema: { label: true, dense: 13, sparse: 26 }
    transform:
      dense: [neg2zero, log1p]
      sparse: [hex2int, { modulus: 524288 }, vocab]
      vocab: { profile: dlrm, min_count: 1, capacity: 0, count_mode: streaming }
    batch: { size: 4096, max_delay_ms: 100, ordering: partition }
    sinks:
      trainer: { listen: "127.0.0.1:$TPORT", max_unacked_batches: 64 }
http: { listen: "127.0.0.1:$HPORT" }
engine: { backend: cpu, threads: $THREADS, overlap: $OVERLAP }
limits: { max_inflight_bytes: 256MiB }
log: { level: warn }
EOF
fi
echo "== stream: piperec run ($VARIANT${PROPS:+: $PROPS}) + piperec consume" >&2
"$PIPEREC" run --config "$TMP/run.yaml" 2> "$TMP/run.err" &
RPID=$!
# The rate: /metrics polled every 20 ms, rows out of the engine into batches
# (piperec_records_out_total) from the first poll that sees rows to the one
# that sees all of them; plus the engine's per-operator seconds and the
# process CPU time, to show where the time goes.
$PY - "127.0.0.1:$HPORT" "$ROWS" "$RPID" "$BPID" > "$TMP/poll.json" 2> "$TMP/poll.err" <<'PYEOF' &
import json, re, sys, time, urllib.request
url, want, pid, bpid = "http://%s/metrics" % sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def cpu(pid=pid):
    f = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / 100.0  # utime + stime, clock ticks
def scrape():
    try:
        return urllib.request.urlopen(url, timeout=1).read().decode()
    except Exception:
        return ""
t_first = t_last = c_first = c_last = None
deadline = time.time() + 600
while time.time() < deadline:
    text = scrape()
    m = re.search(r'^piperec_records_out_total\{[^}]*\} (\d+)', text, re.M)
    n = int(m.group(1)) if m else 0
    now = time.perf_counter()
    if n > 0 and t_first is None:
        t_first, n_first, c_first, b_first = now, n, cpu(), cpu(bpid)
    if n >= want:
        t_last, c_last, b_last = now, cpu(), cpu(bpid)
        break
    time.sleep(0.02)
if t_last is None:
    sys.exit("poll: records_out_total never reached %d" % want)
ops = {o: float(v) for o, v in re.findall(
    r'^piperec_engine_operator_seconds_total\{[^}]*operator="(\w+)"[^}]*\} ([0-9.e+-]+)', text, re.M)}
print(json.dumps({"rows": want - n_first, "seconds": t_last - t_first,
                  "cpu_seconds": c_last - c_first, "broker_cpu_seconds": b_last - b_first,
                  "engine_op_seconds": ops}))
PYEOF
PPID_POLL=$!
"$PIPEREC" consume --connect "127.0.0.1:$TPORT" --pipeline bench --credits 64 --quiet \
    --idle-timeout-ms 10000 --connect-timeout-ms 30000 > "$TMP/consume.out" 2> "$TMP/consume.err" ||
    { tail -5 "$TMP/run.err" "$TMP/consume.err" >&2; exit 1; }
wait "$PPID_POLL" || { cat "$TMP/poll.err" >&2; tail -5 "$TMP/run.err" >&2; exit 1; }
RSS_KB=$(awk '/^VmHWM/ {print $2}' "/proc/$RPID/status" 2>/dev/null || echo 0)
stop_pid "$RPID"; RPID=""
cat "$TMP/consume.out" >&2
$PY - "$TMP/consume.out" "$TMP/poll.json" "$ROWS" "$PARTS" "$RSS_KB" "$THREADS" "$VARIANT" "$PROPS" "$OVERLAP" > "$TMP/piperec-$VARIANT.json" <<'PYEOF'
import json, re, sys
text = open(sys.argv[1]).read()
poll = json.load(open(sys.argv[2]))
rows = int(re.search(r"(\d+) rows,", text).group(1))
if rows < int(sys.argv[3]):
    sys.exit("bench_stream: piperec delivered %d of %s rows (%s)" % (rows, sys.argv[3], text.strip()))
s = poll["seconds"]
ops = poll["engine_op_seconds"]
print(json.dumps({"bench": "stream_piperec", "variant": sys.argv[7], "consumer_props": sys.argv[8],
                  "overlap": sys.argv[9] == "true",
                  "threads": int(sys.argv[6]), "rows": rows,
                  "seconds": round(s, 3), "rows_per_s": round(poll["rows"] / s),
                  "partitions": int(sys.argv[4]),
                  "peak_rss_mb": round(int(sys.argv[5]) / 1024, 1),
                  "cpu_seconds": round(poll["cpu_seconds"], 2),
                  "cpu_busy_share": round(poll["cpu_seconds"] / s, 2),
                  "broker_cpu_seconds": round(poll["broker_cpu_seconds"], 2),
                  "cpu_us_per_row": round(poll["cpu_seconds"] / poll["rows"] * 1e6, 2),
                  "engine_seconds_by_op": {k: round(v, 3) for k, v in ops.items()},
                  "delivered_to_trainer": rows,
                  "pipeline": "broker -> piperec run (criteo_tsv, 1 line/msg, dlrm mod 524288) -> trainer sink -> piperec consume"}))
PYEOF
cat "$TMP/piperec-$VARIANT.json"
}

# default: the config as a user would write it (piperec now defaults
# queued.min.messages to 1000000: at librdkafka's 100000 the fetcher idled
# between fetch round trips and piperec ran 20-40% busy); tuned: with
# BENCH_STREAM_PROPS (default fetch.wait.max.ms: 10) to try more settings.
# one-thread: engine.overlap off (one thread polls, decodes, runs the
# engine and batches: the runtime before the worker thread), for the ratio.
run_piperec one-thread "" false
run_piperec default ""
run_piperec tuned "${BENCH_STREAM_PROPS:-fetch.wait.max.ms: 10}"

# --- the Python baseline, checked first against piperec process on a slice
[ -n "${BENCH_STREAM_NO_PYTHON:-}" ] && exit 0
echo "== stream: Python baseline (confluent-kafka + pandas)" >&2
head -n 20000 "$TMP/data.tsv" > "$TMP/slice.tsv"
"$PIPEREC" process --input "$TMP/slice.tsv" --output "$TMP/slice-out" --no-progress 2>/dev/null
$PY "$HERE/baseline_stream.py" --bootstrap "$B" --topic events --rows "$ROWS" \
    --check "$TMP/slice.tsv" "$TMP/slice-out" > "$TMP/python.json"
cat "$TMP/python.json"
for v in default tuned; do
$PY - "$TMP/piperec-$v.json" "$TMP/python.json" <<'PYEOF'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
r = a["rows_per_s"] / b["rows_per_s"]
print(json.dumps({"bench": "stream_ratio", "variant": a["variant"], "threads": a["threads"],
                  "rows": a["rows"], "piperec_rows_per_s": a["rows_per_s"],
                  "python_rows_per_s": b["rows_per_s"], "ratio_piperec_over_python": round(r, 2),
                  "peak_rss_mb": a["peak_rss_mb"], "goal_rows_per_s": 600000, "goal_ratio": 10,
                  "goals_met": a["rows_per_s"] >= 600000 and r >= 10}))
PYEOF
done

stop_pid "$BPID"; BPID=""
exec 3<&-
