#!/bin/sh
# bench/run.sh — `make bench`: every benchmark, one results file, ratios.
#
#   bench/run.sh [BUILD_DIR]      (default: build; the Makefile builds first)
#
# Steps (each prints JSON lines, collected into BUILD_DIR/bench-results.jsonl):
#   1. piperec gen: BENCH_ROWS rows (default 10M) of synthetic Criteo TSV
#   2. build/bench/bench_engine  (engine only, in memory; when built): P-I..P-III
#      at 1 and 2 threads (BENCH_ENGINE_THREADS, e.g. 1-16 on a bigger
#      machine), hex-slot and uint64 layouts, with the memory-bandwidth bound
#      measured in the same process and the fraction of it reached
#   3. build/bench/bench_offline --input DATA  (decode only; TSV->npy in-process)
#   3b. build/bench/bench_json: JSON decode + extract of a clickstream event,
#      MB/s per core, beside the TSV decoder in the same process (and the
#      DOM libraries, for the record); on the example clickstream also the
#      full pr_json_decoder (extract + operators up to vocab)
#   3c. bench/bench_protobuf.sh: the example clickstream as shop.Click (the
#      user's own Protobuf messages, issue 23): decode + extract per core
#      beside Python's protobuf (message_factory) doing the same (>= 10x)
#   3d. bench/bench_avro.sh: the example clickstream as Avro records
#      (examples/clickstream.avsc): decode + extract per core beside
#      python3-avro's DatumReader doing the same (>= 10x), avro_vs_python
#   4. piperec process DATA: the CLI end to end (TSV -> .npy), default
#      threads (one worker per CPU) and --threads 1, with its per-stage
#      thread-seconds (decode, engine, write, wait)
#   4b. piperec process --config examples/clickstream.yaml: a declared schema
#      (JSON lines of `piperec gen --format json`, BENCH_JSON_ROWS, default
#      1M) end to end, default threads and 1, with the per-stage and in-order
#      (serial) thread-seconds; then process_json_scaling: default/1 rows/s,
#      the serial fraction f at default threads and the Amdahl projection to
#      16 threads 1 / (f + (1 - f) / 16), bounded by the column chains
#      (projection16; projections, not measurements); bench_process_json.sh
#      runs this step alone
#   4e. bench/bench_vectors.sh: dense vectors (dim 64, BENCH_VEC_ROWS, default
#      200K events) at 1 thread against the same events with the vector
#      written as 64 named fields (identical dense.npy checked) and against a
#      Python json.loads + numpy loop; ratios
#   4f. bench/bench_weights.sh: weighted lists (an id-score list over a list
#      of objects and a history with dwell times, BENCH_W_ROWS, default 200K
#      events) at 1 thread against the same config without weights (the
#      same ids checked) and against a Python converter to the same arrays
#      (checked); ratios
#   4g. bench/bench_maps.sh: maps read as lists (a user's interest scores
#      {"c123": 0.42, ...}, BENCH_M_ROWS, default 200K events) at 1 thread
#      against the same ids and scores as a list of objects (identical
#      outputs checked) and against a Python converter (checked); ratios
#   4h. bench/bench_tables.sh: shared vocabularies (a click history in the
#      candidate item's table, `table: item`, BENCH_T_ROWS, default 200K
#      events) at 1 thread against separate vocabularies and against a
#      Python converter (checked); ratios, embedding rows of both layouts
#   4i. bench/bench_vocab_import.sh: a vocab log seeded by `vocab import` from
#      an offline run (BENCH_VI_ROWS, default 100K events) against the same
#      vocabulary built by streaming the events through a replica (the same
#      values checked); seconds, ratios, the rebuild from the log
#   4j. bench/bench_serve.sh: the serving transform (BENCH_SV_ROWS, default
#      200K events, clickstream and Criteo) against `piperec process` at one
#      thread, and `piperec serve` over HTTP at 1, 16 and 256 events a
#      request (requests/s, events/s, p50/p99); ratios
#   5. the pandas/numpy baseline (bench/baseline_pandas.py, one core) on the
#      first BENCH_BASELINE_ROWS rows (default 300K; it is ~100x slower),
#      checked against piperec's output for the same rows
#   6b. bench/bench_stream.sh: streaming, one Criteo line per message over
#      128 partitions, `piperec run` (default and tuned consumer properties)
#      beside bench/baseline_stream.py (confluent-kafka + pandas) on the same
#      records; rows/s, the ratio, peak RSS
#   6c. bench/bench_json_stream.sh: JSON streaming, the clickstream of
#      `piperec gen --format json` one event per message over 128 partitions,
#      `piperec run` with examples/clickstream.yaml's schema beside
#      bench/baseline_json.py (confluent-kafka + json + numpy) on the same
#      records; rows/s and the ratio (issue 20: >= 10x)
#   7. bench/bench_trainer_py.py: Python trainer side into a do-nothing loop
#      (numpy client, piperec.torch.StreamDataset, DataLoader workers; GPU
#      copies only when torch.cuda.is_available()), when torch is installed
#   8. examples/train_dlrm.py --spawn: DLRM on CPU from a live stream
#      (training rows/s, held-out AUC); 8b. the example old style (a table
#      per feature, TrainingBatch) vs fused at BENCH_DLRM_CMP_ROWS (default
#      100K) rows: dlrm_fused_vs_old_style (the GPU goal is 4x)
#   9. bench/bench_replicas.sh: 1 replica without vocab_log beside 1, 2, 3
#      replicas sharing one (BENCH_REPLICAS), new-value wait p50/p99, and the
#      kill -9 takeover time with default settings
#  10. bench/bench_hot.sh: hot-set coverage vs K on a Zipf stream, rows/s
#      with batch.split popular vs none
#  11. bench/bench_evict.sh: rows/s with eviction lru/lfu/ttl vs none and
#      memory per column at capacity (a markdown table on stderr)
# then prints piperec rows/s divided by pandas rows/s. Data goes to a temp
# dir under BENCH_TMP (default /tmp), removed at exit. Builds nothing.
set -eu
BUILD=${1:-build}
ROWS=${BENCH_ROWS:-10000000}
BASE_ROWS=${BENCH_BASELINE_ROWS:-300000}
THREADS=${BENCH_THREADS:-2}
PY=/usr/bin/python3
HERE=$(cd "$(dirname "$0")" && pwd)
PIPEREC=$BUILD/piperec
RESULTS=$BUILD/bench-results.jsonl

[ -x "$PIPEREC" ] || { echo "bench/run.sh: $PIPEREC not built (run make bench)" >&2; exit 1; }
TMP=$(mktemp -d "${BENCH_TMP:-/tmp}/piperec-bench.XXXXXX")
trap 'rm -rf "$TMP"' EXIT INT TERM
: > "$RESULTS"

now() { date +%s.%N; }
# json NAME ROWS BYTES SECONDS THREADS [EXTRA]
json() {
    awk -v n="$1" -v r="$2" -v b="$3" -v s="$4" -v t="$5" -v x="${6:-}" 'BEGIN {
        printf "{\"bench\": \"%s\", \"threads\": %d, \"rows\": %d, \"seconds\": %.4f, \"rows_per_s\": %.0f, \"mb_per_s\": %.1f%s}\n",
               n, t, r, s, r / s, b / s / 1e6, x }'
}
collect() { grep '^{' | tee -a "$RESULTS"; }

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" >&2
echo "== 1. piperec gen: $ROWS rows" >&2
t0=$(now)
"$PIPEREC" gen --rows "$ROWS" --seed 1 --threads "$THREADS" --output "$TMP/data.tsv"
t1=$(now)
json gen_tsv "$ROWS" "$(stat -c %s "$TMP/data.tsv")" "$(echo "$t1 - $t0" | bc -l)" "$THREADS" \
    ', "pipeline": "piperec gen -> file"' | collect

if [ -x "$BUILD/bench/bench_engine" ]; then
    echo "== 2. bench_engine" >&2
    "$BUILD/bench/bench_engine" --rows "${BENCH_ENGINE_ROWS:-10000000}" \
        --threads "${BENCH_ENGINE_THREADS:-1,2}" | collect
    # The HLS kernel in C simulation beside cpu (much slower: a correctness
    # model, not a fast path), then the device cycle model next to Piper's
    # published Table 4 figures.
    echo "== 2b. bench_engine --backend hls-sim" >&2
    "$BUILD/bench/bench_engine" --rows "${BENCH_HLS_ROWS:-300000}" --backend hls-sim --threads 1 \
        --slots hex | collect
fi
if [ -x "$BUILD/bench/bench_hls_model" ]; then
    echo "== 2c. bench_hls_model: device cycle model at 200 MHz vs Piper Table 4" >&2
    "$BUILD/bench/bench_hls_model" | collect
else
    echo "== 2. bench_engine: not built, skipped" >&2
fi

if [ -x "$BUILD/bench/bench_offline" ]; then
    echo "== 3. bench_offline (decode; TSV->npy in-process)" >&2
    "$BUILD/bench/bench_offline" --input "$TMP/data.tsv" --tmp "$TMP" --threads "$THREADS" | collect
fi

if [ -x "$BUILD/bench/bench_json" ]; then
    echo "== 3b. bench_json (JSON decode + extract vs TSV decode, 1 core)" >&2
    "$BUILD/bench/bench_json" | collect
fi
if [ -x "$BUILD/bench/bench_protobuf" ]; then
    echo "== 3c. bench_protobuf.sh (the user's Protobuf messages: decode + extract vs Python protobuf, 1 core)" >&2
    sh "$HERE/bench_protobuf.sh" "$BUILD" | collect
fi
if [ -x "$BUILD/bench/bench_avro" ]; then
    echo "== 3d. bench_avro.sh (Avro: decode + extract vs python3-avro, 1 core)" >&2
    sh "$HERE/bench_avro.sh" "$BUILD" | collect
fi

# Default threads (one worker per CPU), then 1. The per-stage thread-seconds
# come from the CLI's second summary line.
NCPU=$(nproc)
for thr in default 1; do
    echo "== 4. piperec process: $ROWS rows, threads $thr" >&2
    if [ $thr = default ]; then opt=""; n=$NCPU; else opt="--threads $thr"; n=$thr; fi
    t0=$(now)
    # shellcheck disable=SC2086
    "$PIPEREC" process --input "$TMP/data.tsv" --output "$TMP/out" $opt --no-progress 2> "$TMP/process.err"
    t1=$(now)
    cat "$TMP/process.err" >&2
    stages=$(sed -n 's/.*decode \([0-9.]*\), engine \([0-9.]*\), write \([0-9.]*\), idle \([0-9.]*\), vocab export \([0-9.]*\).*/, "decode_s": \1, "engine_s": \2, "write_s": \3, "idle_s": \4, "vocab_export_s": \5/p' "$TMP/process.err")
    json piperec_process "$ROWS" "$(stat -c %s "$TMP/data.tsv")" "$(echo "$t1 - $t0" | bc -l)" "$n" \
        ", \"pipeline\": \"tsv->npy dlrm mod 524288\", \"threads_option\": \"$thr\"$stages" | collect
    rm -rf "$TMP/out"
done

BENCH_TMP=${BENCH_TMP:-/tmp} sh "$HERE/bench_process_json.sh" "$BUILD" | collect
BENCH_TMP=${BENCH_TMP:-/tmp} sh "$HERE/bench_vectors.sh" "$BUILD" | collect
BENCH_TMP=${BENCH_TMP:-/tmp} sh "$HERE/bench_weights.sh" "$BUILD" | collect
BENCH_TMP=${BENCH_TMP:-/tmp} sh "$HERE/bench_maps.sh" "$BUILD" | collect
BENCH_TMP=${BENCH_TMP:-/tmp} sh "$HERE/bench_tables.sh" "$BUILD" | collect
BENCH_TMP=${BENCH_TMP:-/tmp} sh "$HERE/bench_vocab_import.sh" "$BUILD" | collect
BENCH_TMP=${BENCH_TMP:-/tmp} sh "$HERE/bench_serve.sh" "$BUILD" | collect

echo "== 5. pandas baseline: $BASE_ROWS rows, 1 core" >&2
head -n "$BASE_ROWS" "$TMP/data.tsv" > "$TMP/slice.tsv"
"$PIPEREC" process --input "$TMP/slice.tsv" --output "$TMP/slice-out" --no-progress 2>/dev/null
$PY "$HERE/baseline_pandas.py" --input "$TMP/slice.tsv" --out "$TMP/slice-pandas" \
    --compare "$TMP/slice-out" | collect

[ -x "$BUILD/bench/bench_ingest" ] && { echo "== 5b. bench_ingest: Kafka consume + decode through the embedded broker (ingest only)" >&2; "$BUILD/bench/bench_ingest" | collect; }
[ -x "$BUILD/bench/bench_e2e" ] && { echo "== 6. bench_e2e: streaming end to end (embedded broker -> service -> trainer)" >&2; timeout 900 "$BUILD/bench/bench_e2e" | collect; }
if $PY -c "import confluent_kafka" 2>/dev/null; then
    echo "== 6b. bench_stream.sh: 1 line/message, 128 partitions, piperec run vs Python (confluent-kafka + pandas)" >&2
    BENCH_TMP=${BENCH_TMP:-/tmp} timeout 900 sh "$HERE/bench_stream.sh" "$BUILD" | collect
else
    echo "== 6b. bench_stream.sh: no confluent_kafka for $PY, skipped" >&2
fi
if $PY -c "import confluent_kafka, xxhash" 2>/dev/null; then
    echo "== 6c. bench_json_stream.sh: JSON, 1 event/message, 128 partitions, piperec run vs Python (confluent-kafka + json + numpy)" >&2
    BENCH_TMP=${BENCH_TMP:-/tmp} timeout 900 sh "$HERE/bench_json_stream.sh" "$BUILD" | collect
else
    echo "== 6c. bench_json_stream.sh: no confluent_kafka/xxhash for $PY, skipped" >&2
fi
if $PY -c "import torch" 2>/dev/null; then
    # 7. Python trainer side: batches/s and rows/s into a do-nothing loop, numpy
    # client beside piperec.torch.StreamDataset (GPU figures only with CUDA).
    echo "== 7. trainer side in Python: numpy client vs StreamDataset (replay server)" >&2
    $PY "$HERE/bench_trainer_py.py" --batches "${BENCH_TRAINER_BATCHES:-2000}" | collect
    # 8. examples/train_dlrm.py on a live stream (broker + gen --signal 1 |
    # produce + piperec run): training rows/s and held-out AUC.
    # dlrm NAME OUT ARGS...: one run, its JSON line
    dlrm() {
        name=$1 out=$2
        shift 2
        t0=$(now)
        $PY "$HERE/../examples/train_dlrm.py" --spawn --piperec "$PIPEREC" "$@" \
            > "$out" 2> "$out.err" || { tail -20 "$out.err" >&2; }
        t1=$(now)
        $PY - "$out" "$(echo "$t1 - $t0" | bc -l)" "$name" "$*" <<'PYEOF' | collect
import json, re, sys
text = open(sys.argv[1]).read()
kv = dict(re.findall(r"(\w+)=([0-9.]+)", text))
if "heldout_auc" not in kv:
    sys.exit("train_dlrm.py printed no result: %r" % text[-500:])
print(json.dumps({"bench": sys.argv[3], "threads": 1, "rows": int(kv["train_rows"]),
                  "seconds": float(kv["train_seconds"]), "rows_per_s": float(kv["rows_per_s"]),
                  "heldout_auc": float(kv["heldout_auc"]), "heldout_rows": int(kv["heldout_rows"]),
                  "wall_seconds": round(float(sys.argv[2]), 1), "args": sys.argv[4],
                  "pipeline": "broker + gen --signal 1 | produce + piperec run -> StreamDataset -> DLRM (CPU)"}))
PYEOF
    }
    echo "== 8. DLRM on a live stream (examples/train_dlrm.py, CPU)" >&2
    dlrm dlrm_stream_train "$TMP/dlrm.out" --train-rows "${BENCH_DLRM_ROWS:-1000000}" \
        --heldout-rows 100000 --max-seconds 110
    # 8b. the example before issue 22 (a table and a lookup per feature, a
    # loss read every step, TrainingBatch layout) vs the fused table over the
    # raw layout, same rows, same seed: rows/s ratio and both AUCs.
    echo "== 8b. DLRM old style vs fused, same rows (CPU)" >&2
    cmp_rows=${BENCH_DLRM_CMP_ROWS:-100000}
    dlrm dlrm_old_style "$TMP/dlrm_old.out" --train-rows "$cmp_rows" --heldout-rows 30000 \
        --max-seconds 600 --embedding per-feature --layout protobuf
    dlrm dlrm_fused "$TMP/dlrm_fused.out" --train-rows "$cmp_rows" --heldout-rows 30000 --max-seconds 600
    tail -2 "$RESULTS" | $PY -c '
import json, sys
old, new = [json.loads(l) for l in sys.stdin]
if old["bench"] == "dlrm_old_style" and new["bench"] == "dlrm_fused":
    print(json.dumps({"bench": "dlrm_fused_vs_old_style", "rows": new["rows"],
                      "ratio_rows_per_s": round(new["rows_per_s"] / old["rows_per_s"], 3),
                      "heldout_auc_fused": new["heldout_auc"], "heldout_auc_old_style": old["heldout_auc"],
                      "goal": "4x on a GPU (CPU figure for the record)"}))' | collect || true
else
    echo "== 7-8. trainer side in Python: no torch for $PY (apt-get install python3-torch), skipped" >&2
fi
if $PY -c "import confluent_kafka" 2>/dev/null; then
    echo "== 9. scale-out: replicas sharing one vocabulary (bench_replicas.sh)" >&2
    timeout 1500 sh "$HERE/bench_replicas.sh" "$BUILD" "${BENCH_REPLICAS:-1 2 3}" | collect
fi
echo "== 10. hot sets and popular batches (bench_hot.sh)" >&2
timeout 900 sh "$HERE/bench_hot.sh" "$BUILD" | collect
echo "== 11. bounded vocabularies: eviction vs none (bench_evict.sh)" >&2
timeout 900 sh "$HERE/bench_evict.sh" "$PIPEREC" "${BENCH_EVICT_ROWS:-2000000}" 100002 >&2
echo "== results ($RESULTS)" >&2
$PY - "$RESULTS" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
base = [r for r in rows if r.get("bench") == "baseline_pandas"]
if not base:
    sys.exit("no baseline result")
b = base[0]["rows_per_s"]
print("%-44s %14s %10s" % ("benchmark", "rows/s", "x pandas"))
for r in rows:
    name = r.get("bench", "?")
    if name == "engine":
        name = "engine %s %s %s" % (r.get("pipeline", ""), r.get("backend", ""), r.get("slots", ""))
    if name == "stream_piperec":
        name = "stream_piperec %s" % r.get("variant", "")
    if name == "replicas":
        name = "replicas %s" % r.get("name", "")
    if name == "json_stream_ratio":
        print("%-44s %14s %10s   piperec/python %.1fx (goal 10x), per CPU second %.1fx"
              % ("json stream vs python", "", "", r["ratio_piperec_over_python"],
                 r["ratio_per_cpu_second"]))
    if name == "dlrm_fused_vs_old_style":
        print("%-44s %14s %10s   fused/old %.2fx, AUC %.3f vs %.3f"
              % ("dlrm fused vs old style", "", "", r["ratio_rows_per_s"], r["heldout_auc_fused"],
                 r["heldout_auc_old_style"]))
    if name == "process_json_scaling":
        print("%-44s %14s %10s   %d thr / 1 thr %.2fx, serial fraction %.3f, Amdahl 16 thr "
              "%.1fx, with the chains %.1fx (projections)"
              % ("process json scaling", "", "", r["threads"], r["ratio_threads_over_1"],
                 r["serial_fraction"], r["amdahl16_projection"],
                 r.get("projection16", r["amdahl16_projection"])))
    if name == "stream_ratio":
        print("%-44s %14s %10s   piperec/python %.1fx (goal 10x), peak RSS %.0f MB"
              % ("stream %s vs python" % r.get("variant", ""), "", "",
                 r["ratio_piperec_over_python"], r["peak_rss_mb"]))
    if r.get("rows_per_s") is None:
        continue
    name += " (%s thr)" % r.get("threads", "?")
    vs = "".join("   %s %.2f" % (k, r[k]) for k in ("vs_numpy_client", "vs_one_process") if k in r)
    print("%-44s %14.0f %10.1f%s" % (name, r["rows_per_s"], r["rows_per_s"] / b, vs))
if not base[0].get("matches_piperec", False):
    sys.exit("baseline output does NOT match piperec: %s" % base[0].get("mismatch"))
print("baseline output matches piperec's on the same %d rows" % base[0]["rows"])
EOF
