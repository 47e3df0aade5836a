#!/bin/sh
# bench/bench_sweep.sh — the thread sweep of issue 21: for each thread count,
# streaming rows/s of `piperec run` beside the bare-consumer ceiling on the
# same broker, topic and partitions, their ratio, peak RSS, and offline
# `piperec process` rows/s on the same data. Runnable on any machine.
#
#   bench/bench_sweep.sh [THREADS_LIST]       (default "1 2 4 8 16")
#
# Steps, in one run on one broker:
#   1. `piperec broker`: the test broker, on loopback, in its own process,
#      with two topics of P partitions (BENCH_SWEEP_PARTITIONS, default 256:
#      the test broker keeps only ~5 MB per partition, 2M rows are ~1.8 MB
#      per partition): `lines`, one Criteo TSV line per message, and
#      `batched`, L lines per message (BENCH_SWEEP_LINES_PER_MSG, default 16;
#      0 leaves it out);
#   2. `piperec gen` N rows (BENCH_SWEEP_ROWS, default 2M) and `piperec
#      produce` them to both topics, round-robin over the partitions, before
#      anything consumes (every run reads the same records, all retained);
#   3. for each thread count T, for each topic:
#        - the ceiling: bench/bench_ceiling (C), consume-and-discard with
#          rd_kafka_consumer_poll, made by the project's builder (pr_kafka.h)
#          with piperec's consumer role and the same properties, counting
#          rows and stopping at the topic's end; as many consumer instances as
#          `piperec run` has (source.consumers, set to BENCH_SWEEP_CONSUMERS,
#          default 1);
#          with BENCH_SWEEP_CEILING_N=1 (default) also with T instances (what
#          a design with one consumer per thread could reach); with
#          BENCH_SWEEP_CEILING_RESET=1 (default) also with piperec's start
#          path (bench_ceiling --reset-path: each partition restarted at the
#          log start after its auto.offset.reset=error, as ingest/consumer.c
#          does), to tell the start path's cost from the rest;
#        - `piperec run` with engine.threads T (dlrm, modulus 524288, batch
#          BENCH_SWEEP_BATCH default 8192, max_delay_ms 100, trainer sink
#          acked by `piperec consume`): rows/s from /metrics (polled every
#          20 ms until rows flow, then less often until near the end:
#          BENCH_SWEEP_POLL=fixed keeps 20 ms), first rows out to all rows out
#          (the group join before is not counted, as for the ceiling); CPU
#          seconds per kind of thread over that window (where the pipeline
#          thread's time goes); peak RSS (VmHWM); every row checked delivered
#          to the trainer;
#        - CPU accounting of both (ceiling and piperec run), over each one's
#          window: CPU seconds of every process involved (the broker, the
#          ceiling or `piperec run`, the trainer `piperec consume`), of each
#          kind of thread of each, their context switches, the sweep's own
#          helper (harness) and the machine's busy / idle / steal time
#          (/proc/stat; the ceiling's window from its --marks FIFO). Per run:
#          CPU us per row of each process (cpu_us_per_row; "other" = machine
#          busy time no named process took: other users), the machine's busy
#          share, the cores left to the involved processes (A = CPUs - steal
#          - harness - other) and their saturation (CPU they used / A); per
#          piperec run, the ratio CPU alone predicts (bench_sweep.py
#          predicted(): (A_p / c_p) / (A_c / c_c), c = involved CPU per row;
#          c_c / c_p with equal capacity) beside the measured one. A measured
#          ratio below the predicted one = idle CPU the piperec run could
#          have used: a wait, not CPU;
#        - freshness (BENCH_SWEEP_FRESH=1, default): `piperec run` again,
#          on a fresh topic of the same shape, fed by `piperec produce
#          --rate` at 0.8 of the rows/s the
#          run above measured, for BENCH_SWEEP_FRESH_S seconds (default 4),
#          started once the group holds its partitions (reading from the
#          topic's end); when piperec does
#          not keep up (received < 97% of the target rate: the producer, the
#          broker and the trainer share the machine), again at the next of
#          BENCH_SWEEP_FRESH_LOADS ("0.8 0.65 0.5 0.4 0.3", steps of ~20%,
#          so the first load kept up with is about 80% of the live maximum
#          or more, as bench_e2e's live maximum); a stdlib trainer
#          (bench_sweep.py fresh) acks each batch and records emit time -
#          oldest event time (the Kafka timestamp the producer set): p50,
#          p99, max over the batches after the first second, against the
#          goal max_delay_ms + 20 ms; the rate it received; peak RSS; where
#          the time went, from piperec's /metrics at the end (means per
#          batch over the run): emit - oldest event time, the oldest row's
#          wait in the batcher, and their difference, the time before the
#          batcher (producer linger, broker, fetch wait, polling, engine);
#      then `piperec process --threads T` on the same rows (same config), or
#      on BENCH_SWEEP_OFFLINE_ROWS rows of the same generator when set (at 16
#      threads 4M rows take ~0.25 s, so the process's start and exit weigh):
#      wall time and peak RSS, and the pass alone as piperec prints it (its
#      rows/s, without start-up and exit) with the share of thread time spent
#      in input order (serial_pct: what bounds the speed-up);
#   4. one JSON line per measurement (stdout, and BENCH_SWEEP_OUT/sweep.jsonl
#      as it goes when set), then the summary tables (rates; CPU per row) (and
#      BENCH_SWEEP_OUT/summary.md; `bench_sweep.py summary FILE` remakes it).
# Env: BENCH_SWEEP_BUILD (build dir, default build), BENCH_SWEEP_ROWS,
# BENCH_SWEEP_PARTITIONS, BENCH_SWEEP_LINES_PER_MSG, BENCH_SWEEP_BATCH,
# BENCH_SWEEP_CONSUMERS, BENCH_SWEEP_CEILING_N, BENCH_SWEEP_CEILING_RESET,
# BENCH_SWEEP_DECODE (source.decode_threads values: piperec runs once per
# value at each thread count, e.g. "1 0" = decode on the polling thread only,
# then auto; default "0"), BENCH_SWEEP_PIPEREC_CONSUMERS (source.consumers
# values, one piperec run each, e.g. "1 2" beside a ceiling of
# BENCH_SWEEP_CONSUMERS instances; default BENCH_SWEEP_CONSUMERS),
# BENCH_SWEEP_POLL_THREADS (values of PIPEREC_POLL_THREADS, one piperec run
# each: "1 0" = with consumers > 1, one polling thread per instance, then all
# instances polled by the pipeline thread as before; default "1"),
# BENCH_SWEEP_NO_OFFLINE=1, BENCH_SWEEP_OFFLINE_ROWS, BENCH_SWEEP_FRESH (1/0), BENCH_SWEEP_FRESH_LOADS,
# BENCH_SWEEP_FRESH_S, BENCH_SWEEP_FRESH_X (more "-X key=value" for the paced
# producer), BENCH_SWEEP_FRESH_PRODUCERS (paced producer processes, default 1;
# each produces its share of the rows at its share of the rate), BENCH_SWEEP_INFLIGHT (limits.max_inflight_bytes,
# default 256MiB; each run's JSON has it beside the peak RSS),
# BENCH_SWEEP_POLL (adaptive, default, or fixed: /metrics every 20 ms),
# BENCH_SWEEP_STOP (kill, default: measured runs are killed once read; term:
# stopped gracefully, their stop-time log in BENCH_SWEEP_OUT/run_logs.log), BENCH_SWEEP_STATES=1 (sample piperec's thread states every 10 ms during its
# run: "thread_states" in its JSON line, where each kind of thread waits),
# BENCH_SWEEP_PROPS ("key: value; key: value" librdkafka consumer properties
# for both piperec's source and the ceiling), BENCH_SWEEP_OUT, BENCH_TMP.
# Needs python3 (standard library only; /usr/bin/python3 by default,
# BENCH_SWEEP_PYTHON). Progress goes to stderr.
set -eu
THREADS_LIST=${1:-"1 2 4 8 16"}
BUILD=${BENCH_SWEEP_BUILD:-build}
ROWS=${BENCH_SWEEP_ROWS:-2000000}
PARTS=${BENCH_SWEEP_PARTITIONS:-256}
LPM=${BENCH_SWEEP_LINES_PER_MSG:-16}
BATCH=${BENCH_SWEEP_BATCH:-8192}
CONSUMERS=${BENCH_SWEEP_CONSUMERS:-1}
DECODE_LIST=${BENCH_SWEEP_DECODE:-0}
PR_CONSUMERS_LIST=${BENCH_SWEEP_PIPEREC_CONSUMERS:-$CONSUMERS}
POLL_THREADS_LIST=${BENCH_SWEEP_POLL_THREADS:-1}
RUN_NO=0
CEIL_N=${BENCH_SWEEP_CEILING_N:-1}
CEIL_RESET=${BENCH_SWEEP_CEILING_RESET:-1}
PROPS=${BENCH_SWEEP_PROPS:-}
FRESH=${BENCH_SWEEP_FRESH:-1}
FRESH_LOADS=${BENCH_SWEEP_FRESH_LOADS:-"0.8 0.65 0.5 0.4 0.3"}
FRESH_S=${BENCH_SWEEP_FRESH_S:-4}
FRESH_X=${BENCH_SWEEP_FRESH_X:-} # more -X key=value for the paced producer
FRESH_P=${BENCH_SWEEP_FRESH_PRODUCERS:-1}
INFLIGHT=${BENCH_SWEEP_INFLIGHT:-256MiB}
# warn; info with BENCH_SWEEP_STOP=term, whose stop-time lines are info
LOG_LEVEL=warn
[ "${BENCH_SWEEP_STOP:-kill}" = term ] && LOG_LEVEL=info
MAX_DELAY_MS=100
PY=${BENCH_SWEEP_PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3
HERE=$(cd "$(dirname "$0")" && pwd)
HELP="$HERE/bench_sweep.py"
PIPEREC=$BUILD/piperec
CEILING=$BUILD/bench/bench_ceiling
for b in "$PIPEREC" "$CEILING"; do
    [ -x "$b" ] || { echo "bench_sweep.sh: $b not built" >&2; exit 1; }
done
NCPU=$(nproc 2>/dev/null || echo 2)
TMP=$(mktemp -d "${BENCH_TMP:-/tmp}/piperec-sweep.XXXXXX")
# The JSON lines go straight to BENCH_SWEEP_OUT when set, so that a run
# stopped by a time limit still leaves what it measured.
RES=$TMP/sweep.jsonl
if [ -n "${BENCH_SWEEP_OUT:-}" ]; then
    mkdir -p "$BENCH_SWEEP_OUT"
    RES=$BENCH_SWEEP_OUT/sweep.jsonl
fi
: > "$RES"
BPID=""; RPID=""; CPID=""
# stop_pid PID [TRIES]: TERM, then KILL after TRIES x 0.2 s (default 50)
stop_pid() {
    kill -TERM "$1" 2>/dev/null || return 0
    i=0
    while kill -0 "$1" 2>/dev/null && [ $i -lt "${2:-50}" ]; do sleep 0.2; i=$((i + 1)); done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}
# end_run PID: a measured `piperec run`, once its figures are
# read. Killed (BENCH_SWEEP_STOP=kill, default): each run reads a group of its
# own, so nothing depends on its commits, and a graceful stop costs up to
# the drain timeout plus one rebalance per consumer instance (10-25 s)
# that the sweep would spend per run. BENCH_SWEEP_STOP=term stops them
# gracefully, for up to 60 s (what piperec logs at a graceful stop lands
# in BENCH_SWEEP_OUT/run_logs.log: the polling threads' runs and how often
# every run was held, PIPEREC_WORKER_PROF's profile), and the run's JSON
# line gets stop_s: SIGTERM to exit (the drain, the final commit, the
# consumer instances leaving the group).
end_run() {
    STOP_MS=-1
    if [ "${BENCH_SWEEP_STOP:-kill}" = term ]; then
        t_stop=$(date +%s%N)
        stop_pid "$1" 300
        STOP_MS=$(( ($(date +%s%N) - t_stop) / 1000000 ))
    else
        kill -KILL "$1" 2>/dev/null || true
        wait "$1" 2>/dev/null || true
    fi
}
cleanup() {
    [ -n "$CPID" ] && stop_pid "$CPID"
    [ -n "$RPID" ] && stop_pid "$RPID"
    [ -n "$BPID" ] && stop_pid "$BPID"
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
emit() { printf '%s\n' "$1" | tee -a "$RES"; }
# "key: value; key: value" -> -X key=value ...
x_args() { printf '%s' "$PROPS" | tr ';' '\n' | sed -n 's/^ *\([^:]*[^: ]\) *: *\(.*[^ ]\) *$/-X \1=\2/p'; }

TOPICS="lines:$PARTS"
[ "$LPM" -gt 0 ] && TOPICS="$TOPICS,batched:$PARTS"
# Freshness runs read topics of their own, empty until their paced producer
# starts: one per thread count and message shape.
if [ "$FRESH" = 1 ]; then
    for T in $THREADS_LIST; do
        TOPICS="$TOPICS,fresh-$T-1:$PARTS"
        [ "$LPM" -gt 0 ] && TOPICS="$TOPICS,fresh-$T-$LPM:$PARTS"
    done
fi
echo "== sweep: broker with $TOPICS; threads $THREADS_LIST; $ROWS rows; $NCPU CPUs" >&2
mkfifo "$TMP/broker.fifo"
"$PIPEREC" broker --partitions "$PARTS" --topics "$TOPICS" > "$TMP/broker.fifo" 2> "$TMP/broker.err" &
BPID=$!
exec 3< "$TMP/broker.fifo"
read -r first <&3 || { cat "$TMP/broker.err" >&2; exit 1; }
B=${first#bootstrap=}

echo "== sweep: gen + produce $ROWS rows (1 line/msg; $LPM lines/msg unless 0)" >&2
"$PIPEREC" gen --rows "$ROWS" --seed 1 --threads "$NCPU" --output "$TMP/data.tsv"
OFF_ROWS=${BENCH_SWEEP_OFFLINE_ROWS:-$ROWS}
OFF_DATA=$TMP/data.tsv
if [ -z "${BENCH_SWEEP_NO_OFFLINE:-}" ] && [ "$OFF_ROWS" != "$ROWS" ]; then
    OFF_DATA=$TMP/offline.tsv
    "$PIPEREC" gen --rows "$OFF_ROWS" --seed 1 --threads "$NCPU" --output "$OFF_DATA"
fi
# Round-robin per message (sticky.partitioning.linger.ms=0), as
# bench_stream.sh: keyless sticky batches would burst a partition past ~5 MB.
"$PIPEREC" produce --bootstrap "$B" --topic lines --input "$TMP/data.tsv" \
    -X sticky.partitioning.linger.ms=0 >&2
if [ "$LPM" -gt 0 ]; then
    "$PIPEREC" produce --bootstrap "$B" --topic batched --input "$TMP/data.tsv" \
        --lines-per-message "$LPM" -X sticky.partitioning.linger.ms=0 >&2
fi

# write_config TOPIC THREADS GROUP TPORT HPORT [DECODE [CONSUMERS [RESET]]] -> $TMP/run.yaml
write_config() {
cat > "$TMP/run.yaml" <<EOF
pipelines:
  - name: bench
    source:
      kafka:
        topics: [$1]
        group.id: $3
        properties:
          bootstrap.servers: "$B"
          auto.offset.reset: ${8:-earliest}
$(printf '%s' "$PROPS" | tr ';' '\n' | sed -e '/^ *$/d' -e 's/^ */          /')
      format: criteo_tsv
      decode_threads: ${6:-0}
      consumers: ${7:-$CONSUMERS}
    schema: { label: true, dense: 13, sparse: 26 }
    transform:
      dense: [neg2zero, log1p]
      sparse: [hex2int, { modulus: 524288 }, vocab]
      vocab: { profile: dlrm, min_count: 1, capacity: 0, count_mode: streaming }
    batch: { size: $BATCH, max_delay_ms: $MAX_DELAY_MS, ordering: partition }
    sinks:
      trainer: { listen: "127.0.0.1:$4", max_unacked_batches: 64 }
http: { listen: "127.0.0.1:$5" }
engine: { backend: cpu, threads: $2 }
limits: { max_inflight_bytes: $INFLIGHT }
log: { level: $LOG_LEVEL }
EOF
}

# ceiling TOPIC LPM THREADS CONSUMERS BENCH [--reset-path] -> JSON line (also
# in $TMP/ceil_line.json); its rows/s in $CEIL_RATE. A watcher (bench_sweep.py
# watch) reads the CPU time of the broker, the ceiling and the machine at the
# ceiling's --marks (first message, count complete).
ceiling() {
    rm -f "$TMP/marks"
    mkfifo "$TMP/marks"
    # shellcheck disable=SC2046
    "$CEILING" --bootstrap "$B" --topic "$1" --group "ceil-$1-$3-$4-$5" --consumers "$4" ${6:-} \
        --marks "$TMP/marks" -X auto.offset.reset=earliest $(x_args) \
        > "$TMP/ceil.json" 2> "$TMP/ceil.err" &
    CEPID=$!
    $PY "$HELP" watch "$TMP/marks" "$TMP/ceil_acct.json" "ceiling=$CEPID" "broker=$BPID" \
        2> "$TMP/watch.err" &
    WPID=$!
    wait "$CEPID" || { cat "$TMP/ceil.err" >&2; exit 1; }
    wait "$WPID" || { cat "$TMP/watch.err" >&2; exit 1; }
    CEIL_RATE=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["rows_per_s"])' "$TMP/ceil.json")
    ROWS_READ=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["rows"])' "$TMP/ceil.json")
    if [ "$ROWS_READ" -ne "$ROWS" ]; then
        echo "bench_sweep.sh: topic $1 holds $ROWS_READ of $ROWS rows: the test broker keeps ~5 MB" \
            "per partition; use more partitions (BENCH_SWEEP_PARTITIONS) or fewer rows" >&2
        exit 1
    fi
    $PY "$HELP" fields "$TMP/ceil_acct.json" "$ROWS_READ" broker,ceiling > "$TMP/ceil_cpu.json"
    $PY - "$TMP/ceil.json" "$2" "$3" "$5" "$TMP/ceil_cpu.json" > "$TMP/ceil_line.json" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))
c.update({"bench": sys.argv[4], "lines_per_message": int(sys.argv[2]), "threads": int(sys.argv[3]),
          "rows_per_s": round(c["rows_per_s"]), "msgs_per_s": round(c["msgs_per_s"])})
c.update(json.load(open(sys.argv[5])))
print(json.dumps(c))
PYEOF
    emit "$(cat "$TMP/ceil_line.json")"
}

# stream TOPIC LPM THREADS DECODE CONSUMERS POLL_THREADS -> JSON line (uses $CEIL_RATE of the
# same topic)
stream() {
    TPORT=$(free_port); HPORT=$(free_port)
    RUN_NO=$((RUN_NO + 1)) # a fresh group per run, so repeated settings read from the start
    write_config "$1" "$3" "sweep-$1-$3-d$4-k$5-$RUN_NO" "$TPORT" "$HPORT" "$4" "$5"
    PIPEREC_POLL_THREADS=$6 "$PIPEREC" run --config "$TMP/run.yaml" 2> "$TMP/run.err" &
    RPID=$!
    "$PIPEREC" consume --connect "127.0.0.1:$TPORT" --pipeline bench --credits 64 --quiet \
        --connect-timeout-ms 30000 > "$TMP/consume.out" 2> "$TMP/consume.err" &
    CPID=$!
    $PY "$HELP" poll "127.0.0.1:$HPORT" "$ROWS" "$RPID" "$BPID" "$CPID" > "$TMP/poll.json" 2> "$TMP/poll.err" &
    PPOLL=$!
    echo '{}' > "$TMP/states.json"
    SPID=""
    if [ "${BENCH_SWEEP_STATES:-0}" = 1 ]; then
        $PY "$HELP" states "$RPID" "$TMP/states.json" &
        SPID=$!
    fi
    wait "$PPOLL" || { cat "$TMP/poll.err" >&2; tail -5 "$TMP/run.err" >&2; exit 1; }
    if [ -n "$SPID" ]; then kill -TERM "$SPID"; wait "$SPID" || true; fi
    RSS_KB=$(awk '/^VmHWM/ {print $2}' "/proc/$RPID/status" 2>/dev/null || echo 0)
    stop_pid "$CPID"; CPID="" # its summary line (rows received) is printed at exit
    end_run "$RPID"; RPID=""
    # what piperec logged of its consumer and workers (at start, and at a
    # graceful stop: BENCH_SWEEP_STOP=term; PIPEREC_WORKER_PROF=1 adds the
    # worker's phase profile), one block per run
    { echo "== threads=$3 lpm=$2 k=$5 decode=$4 poll_threads=$6"
      grep -E 'consumer:|worker profile|drain|signal' "$TMP/run.err" | grep -v 'no committed offset' || true
    } >> "${BENCH_SWEEP_OUT:-$TMP}/run_logs.log"
    STREAM_RATE=$($PY -c 'import json,sys; p=json.load(open(sys.argv[1])); print(p["rows"] / p["seconds"])' "$TMP/poll.json")
    ROWS_READ=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["rows"])' "$TMP/poll.json")
    $PY "$HELP" fields "$TMP/poll.json" "$ROWS_READ" broker,piperec,trainer "$TMP/ceil_line.json" \
        > "$TMP/run_cpu.json"
    emit "$(HERE=$HERE $PY - "$TMP/consume.out" "$TMP/poll.json" "$ROWS" "$PARTS" "$RSS_KB" "$3" "$2" "$CEIL_RATE" "$BATCH" "$4" "$5" "$INFLIGHT" "$6" "$TMP/run_cpu.json" "$TMP/ceil_line.json" "$TMP/states.json" "$STOP_MS" <<'PYEOF'
import json, os, re, sys
sys.path.insert(0, os.environ["HERE"])
import bench_sweep
text = open(sys.argv[1]).read()
poll = json.load(open(sys.argv[2]))
st = bench_sweep.states_in(sys.argv[16], poll["t_first"], poll["t_last"])
m = re.search(r"(\d+) rows,", text)
rows = int(m.group(1)) if m else 0
if rows < int(sys.argv[3]):
    sys.exit("bench_sweep: piperec delivered %d of %s rows (%s)" % (rows, sys.argv[3], text.strip()))
s = poll["seconds"]
rate = poll["rows"] / s
ceil = float(sys.argv[8])
print(json.dumps({"bench": "sweep_stream", "threads": int(sys.argv[6]),
                  "lines_per_message": int(sys.argv[7]), "decode_threads": int(sys.argv[10]),
                  "consumers": int(sys.argv[11]), "poll_threads": int(sys.argv[13]),
                  "rows": rows,
                  "seconds": round(s, 3), "rows_per_s": round(rate),
                  "ceiling_rows_per_s": round(ceil),
                  "ratio_piperec_over_ceiling": round(rate / ceil, 3) if ceil else None,
                  "peak_rss_mb": round(int(sys.argv[5]) / 1024, 1),
                  "max_inflight_bytes": sys.argv[12],
                  "cpu_seconds": round(poll["cpu_seconds"], 2),
                  "cpu_busy_cores": round(poll["cpu_seconds"] / s, 2),
                  "broker_cpu_seconds": round(poll["broker_cpu_seconds"], 2),
                  "thread_cpu_seconds": poll["thread_cpu_seconds"],
                  "engine_seconds_by_op": poll["engine_op_seconds"],
                  "backpressure_pauses": poll["backpressure_pauses"],
                  "inflight_peak_mb": round(poll["inflight_peak_bytes"] / 2**20, 1),
                  "partitions": int(sys.argv[4]), "batch": int(sys.argv[9]),
                  "delivered_to_trainer": rows,
                  **json.load(open(sys.argv[14])),
                  **({"thread_states": st} if st else {}),
                  **({"stop_s": int(sys.argv[17]) / 1000} if int(sys.argv[17]) >= 0 else {}),
                  **{"ceiling_" + k: c.get(k) for k in ("cpu_us_per_row", "involved_us_per_row",
                                                        "busy_share", "idle_share", "available_cores",
                                                        "saturation", "busiest_thread_cores",
                                                        "busiest_thread_us_per_row")
                     for c in [json.load(open(sys.argv[15]))]}}))
PYEOF
)"
}

# wait_ready HPORT: until /readyz answers 200 (the group holds its partitions)
# wait_assigned HPORT N: until piperec_assigned_partitions reaches N (60 s).
wait_assigned() {
    $PY - "$1" "$2" <<'PYEOF'
import re, sys, time, urllib.request
url = "http://127.0.0.1:%s/metrics" % sys.argv[1]
end = time.time() + 60
while time.time() < end:
    try:
        page = urllib.request.urlopen(url, timeout=1).read().decode()
        n = sum(float(v) for v in re.findall(r"^piperec_assigned_partitions\{[^}]*\} (\S+)$",
                                             page, re.M))
        if n >= int(sys.argv[2]):
            sys.exit(0)
    except Exception:
        pass
    time.sleep(0.1)
sys.exit("bench_sweep: piperec run holds fewer than %s partitions after 60 s" % sys.argv[2])
PYEOF
}

wait_ready() {
    $PY - "$1" <<'PYEOF'
import sys, time, urllib.request
url = "http://127.0.0.1:%s/readyz" % sys.argv[1]
end = time.time() + 60
while time.time() < end:
    try:
        if urllib.request.urlopen(url, timeout=1).status == 200:
            sys.exit(0)
    except Exception:
        pass
    time.sleep(0.1)
sys.exit("bench_sweep: piperec run not ready within 60 s")
PYEOF
}

# fresh LPM THREADS DECODE CONSUMERS -> JSON lines: freshness at each of
# FRESH_LOADS x $STREAM_RATE (the stream run's rows/s at these settings) until
# one is kept up with, on topic fresh-THREADS-LPM, a paced producer for
# FRESH_S seconds each.
fresh() {
    FRESH_NO=0
    for LOAD in $FRESH_LOADS; do
        FRESH_NO=$((FRESH_NO + 1))
        fresh1 "$1" "$2" "$3" "$4" "$LOAD"
        [ "$KEPT_UP" = 1 ] && break
    done
    return 0
}

# fresh1 LPM THREADS DECODE CONSUMERS LOAD -> JSON line; KEPT_UP=1 when the
# trainer received >= 97% of the target rate.
fresh1() {
    TOPIC="fresh-$2-$1"
    RATE=$($PY -c 'import sys; print(int(float(sys.argv[1]) * float(sys.argv[2])))' "$STREAM_RATE" "$5")
    N=$($PY -c 'import sys; print(int(sys.argv[1]) * int(sys.argv[2]))' "$RATE" "$FRESH_S")
    N=$(( N / ($1 * FRESH_P) * ($1 * FRESH_P) ))
    TPORT=$(free_port); HPORT=$(free_port)
    RUN_NO=$((RUN_NO + 1))
    # latest: a topic an earlier load filled is read from its end
    write_config "$TOPIC" "$2" "sweep-$TOPIC-d$3-k$4-$RUN_NO" "$TPORT" "$HPORT" "$3" "$4" latest
    "$PIPEREC" run --config "$TMP/run.yaml" 2> "$TMP/run.err" &
    RPID=$!
    wait_ready "$HPORT" || { tail -5 "$TMP/run.err" >&2; exit 1; }
    # Ready is one partition; with several consumer instances the others
    # join later (a rebalance each), and a partition assigned after the
    # producers started would skip their rows (offset reset latest): wait
    # for all PARTS (half the rows were lost so in two CIs)
    wait_assigned "$HPORT" "$PARTS" || { tail -5 "$TMP/run.err" >&2; exit 1; }
    sleep 1 # the partitions' start path (offset resets) after the assignment
    $PY "$HELP" fresh "127.0.0.1:$TPORT" bench "$N" "$TMP/fresh.json" 2> "$TMP/fresh.err" &
    FPID=$!
    # Records not read yet (high watermark - fetch position, all partitions)
    # and bytes in flight, every 100 ms until piperec stops.
    $PY - "$HPORT" "$TMP/fresh.samples" <<'PYEOF' &
import re, sys, time, urllib.request
url = "http://127.0.0.1:%s/metrics" % sys.argv[1]
out = open(sys.argv[2], "w")
while True:
    try:
        page = urllib.request.urlopen(url, timeout=1).read().decode()
    except Exception:
        break
    lag = sum(float(v) for v in re.findall(
        r"^piperec_consumer_position_lag_records\{[^}]*\} (\S+)$", page, re.M))
    inf = sum(float(v) for v in re.findall(r"^piperec_inflight_bytes\{[^}]*\} (\S+)$", page, re.M))
    out.write("%d %d\n" % (lag, inf))
    out.flush()
    time.sleep(0.1)
PYEOF
    FSPID=$!
    # FRESH_P paced producer processes, each N / FRESH_P rows at RATE /
    # FRESH_P (one process fell short of its rate on the 16-core host)
    PPIDS=""
    for P in $(seq 1 "$FRESH_P"); do
        # shellcheck disable=SC2046
        "$PIPEREC" produce --bootstrap "$B" --topic "$TOPIC" --gen $((N / FRESH_P)) \
            --seed $((FRESH_NO * 100 + P)) --lines-per-message "$1" --rate $((RATE / FRESH_P)) \
            -X sticky.partitioning.linger.ms=0 $FRESH_X > /dev/null 2> "$TMP/produce-$P.err" &
        PPIDS="$PPIDS $!"
    done
    for P in $PPIDS; do
        wait "$P" || { cat "$TMP"/produce-*.err >&2; exit 1; }
    done
    wait "$FPID" || { cat "$TMP/fresh.err" >&2; tail -5 "$TMP/run.err" >&2; exit 1; }
    $PY -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
        "http://127.0.0.1:$HPORT/metrics" > "$TMP/fresh.metrics" 2>/dev/null || : > "$TMP/fresh.metrics"
    RSS_KB=$(awk '/^VmHWM/ {print $2}' "/proc/$RPID/status" 2>/dev/null || echo 0)
    end_run "$RPID"; RPID=""
    wait "$FSPID" 2>/dev/null || :
    KEPT_UP=$($PY -c 'import json,sys; f=json.load(open(sys.argv[1])); print(int((f.get("rows_per_s") or 0) >= 0.97 * int(sys.argv[2])))' "$TMP/fresh.json" "$RATE")
    emit "$($PY - "$TMP/fresh.json" "$2" "$1" "$RATE" "$N" "$STREAM_RATE" "$RSS_KB" "$3" "$4" "$INFLIGHT" "$MAX_DELAY_MS" "$5" "$TMP/fresh.metrics" "$TMP/fresh.samples" "$FRESH_P" <<'PYEOF'
import json, re, sys
f = json.load(open(sys.argv[1]))
goal = int(sys.argv[11]) + 20
p99 = f.get("p99_ms")
# Where the freshness goes, from piperec's own histograms (whole run, means
# per batch): emit - oldest event time, and how long the oldest row waited
# in the batcher; their difference is the time before the batcher (producer
# linger, broker, fetch wait, polling, decode, engine).
page = open(sys.argv[13]).read()
def mean_ms(name):
    s = re.findall(r"^%s_sum\{[^}]*\} (\S+)$" % name, page, re.M)
    c = re.findall(r"^%s_count\{[^}]*\} (\S+)$" % name, page, re.M)
    n = sum(float(x) for x in c)
    return round(1000 * sum(float(x) for x in s) / n, 1) if n else None
e2e = mean_ms("piperec_freshness_event_to_emit_seconds")
waited = mean_ms("piperec_batch_wait_seconds")
samples = [tuple(int(x) for x in l.split()) for l in open(sys.argv[14]) if l.strip()]
lags = sorted(s[0] for s in samples) or [0]
infl = sorted(s[1] for s in samples) or [0]
print(json.dumps({"bench": "sweep_fresh", "threads": int(sys.argv[2]),
                  "lines_per_message": int(sys.argv[3]), "decode_threads": int(sys.argv[8]),
                  "consumers": int(sys.argv[9]), "load": float(sys.argv[12]),
                  "of_rows_per_s": round(float(sys.argv[6])), "target_rows_per_s": int(sys.argv[4]),
                  "producers": int(sys.argv[15]),
                  "produced_rows": int(sys.argv[5]), "received_rows": f["rows"],
                  "received_rows_per_s": f.get("rows_per_s"), "batches": f["batches"],
                  "p50_ms": f.get("p50_ms"), "p99_ms": p99, "max_ms": f.get("max_ms"),
                  "max_delay_ms": int(sys.argv[11]), "goal_p99_ms": goal,
                  "kept_up": (f.get("rows_per_s") or 0) >= 0.97 * int(sys.argv[4]),
                  "goal_met": p99 is not None and p99 <= goal,
                  "mean_event_to_emit_ms": e2e, "mean_batch_wait_ms": waited,
                  "mean_before_batcher_ms": round(e2e - waited, 1)
                  if e2e is not None and waited is not None else None,
                  "unread_records_p50": lags[len(lags) // 2], "unread_records_max": lags[-1],
                  "inflight_bytes_p50": infl[len(infl) // 2], "inflight_bytes_max": infl[-1],
                  "peak_rss_mb": round(int(sys.argv[7]) / 1024, 1),
                  "max_inflight_bytes": sys.argv[10]}))
PYEOF
)"
}

# offline THREADS -> JSON line
offline() {
    rm -rf "$TMP/offline-out"
    $PY "$HELP" timed "$TMP/offline.json" "$PIPEREC" process --config "$TMP/run.yaml" \
        --input "$OFF_DATA" --output "$TMP/offline-out" --threads "$1" --no-progress \
        2> "$TMP/offline.err" || { tail -5 "$TMP/offline.err" >&2; exit 1; }
    rm -rf "$TMP/offline-out"
    emit "$($PY - "$TMP/offline.json" "$1" "$OFF_ROWS" "$TMP/offline.err" <<'PYEOF'
import json, re, sys
t = json.load(open(sys.argv[1]))
rows = int(sys.argv[3])
err = open(sys.argv[4]).read()
m = re.search(r"(\d+) rows, \d+ rejected, ([0-9.]+) s, (\d+) rows/s", err)
ser = re.search(r"serial\): engine ([0-9.]+), write ([0-9.]+) thread-seconds, ([0-9.]+)%", err)
print(json.dumps({"bench": "sweep_offline", "threads": int(sys.argv[2]), "rows": rows,
                  "seconds": round(t["seconds"], 3), "rows_per_s": round(rows / t["seconds"]),
                  "pass_seconds": float(m.group(2)) if m else None,
                  "pass_rows_per_s": int(m.group(3)) if m else None,
                  "serial_engine_s": float(ser.group(1)) if ser else None,
                  "serial_write_s": float(ser.group(2)) if ser else None,
                  "serial_pct": float(ser.group(3)) if ser else None,
                  "peak_rss_mb": t["peak_rss_mb"],
                  "note": "rows_per_s: wall time of the whole process (read TSV, decode, engine, "
                          "write .npy); pass_rows_per_s: piperec's own figure for the pass"}))
PYEOF
)"
}

for T in $THREADS_LIST; do
    for shape in "lines 1" "batched $LPM"; do
        set -- $shape
        [ "$2" -gt 0 ] || continue
        echo "== sweep: threads $T, topic $1 ($2 lines/msg): ceiling, then piperec run" >&2
        if [ "$CEIL_N" = 1 ] && [ "$T" != "$CONSUMERS" ]; then
            ceiling "$1" "$2" "$T" "$T" sweep_ceiling_n
        fi
        if [ "$CEIL_RESET" = 1 ]; then
            ceiling "$1" "$2" "$T" "$CONSUMERS" sweep_ceiling_reset --reset-path
        fi
        ceiling "$1" "$2" "$T" "$CONSUMERS" sweep_ceiling
        for K in $PR_CONSUMERS_LIST; do
            for PT in $POLL_THREADS_LIST; do
                for D in $DECODE_LIST; do
                    stream "$1" "$2" "$T" "$D" "$K" "$PT"
                    if [ "$FRESH" = 1 ]; then fresh "$2" "$T" "$D" "$K"; fi
                done
            done
        done
    done
    if [ -z "${BENCH_SWEEP_NO_OFFLINE:-}" ]; then
        echo "== sweep: threads $T, piperec process" >&2
        offline "$T"
    fi
done

stop_pid "$BPID"; BPID=""
exec 3<&-
echo "== sweep: summary ($ROWS rows, $PARTS partitions, $NCPU CPUs; ceiling with $CONSUMERS consumer instance(s), as piperec run)" >&2
$PY "$HELP" summary "$RES" > "$TMP/summary.md"
[ -n "${BENCH_SWEEP_OUT:-}" ] && cp "$TMP/summary.md" "$BENCH_SWEEP_OUT/"
cat "$TMP/summary.md"
