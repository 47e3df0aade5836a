#!/bin/sh
# bench/bench_process_json.sh — `make bench` step 4b on its own: `piperec
# process` with a declared schema (examples/clickstream.yaml) on JSON lines
# of `piperec gen --format json` (BENCH_JSON_ROWS, default 1M, seed 1), at
# default threads (one worker per CPU) and at 1, then process_json_scaling.
#
#   bench/bench_process_json.sh [BUILD_DIR]     (default: build)
#
# Prints JSON lines: piperec_process_json per run (rows/s, per-stage
# thread-seconds, serial_engine_s / serial_write_s: the time holding the
# input order, chain_s: per round the longest column chain of first
# appearances, which runs beside the next round's decoding), then
# process_json_scaling: default / 1 rows/s, the serial fraction f at
# default threads, and projections to 16 threads (not measurements):
#   amdahl16_projection = 1 / (f + (1 - f) / 16)
#   projection16        = W / (S + max(chain_s, decode / 16)
#                              + (engine + write - S) / 16)
#   (W = decode + engine + write, S = the serial thread-seconds: the chains
#   run beside decoding, which at 16 threads hides them up to their length,
#   but not beside the rest).
# The same with the phases after the pass counted (issue 21: closing the
# outputs is serial; the vocabulary export runs on every worker, its longest
# task, one column or one piece of one, being what cannot shrink):
#   serial_fraction_x = (S + close + longest) / (W + export thread-s)
#   amdahl16_x        = 1 / (f_x + (1 - f_x) / 16)
#   projection16_x    = (W + export) / (t16 + close + max(longest, export / 16))
# A driver that does not print the after-pass line (before issue 21's
# export job) has its whole export wall time counted as serial.
# Then piperec_process_json_filtered: the same events with schema.filter and
# schema.downsample, input records/s and its ratio to the unfiltered run;
# then piperec_infer_json: `piperec infer` over the same events, and the
# config it wrote run by `process` (rows, rejects).
# Data under BENCH_TMP (default /tmp), removed at exit.
set -eu
BUILD=${1:-build}
PIPEREC=$BUILD/piperec
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
JROWS=${BENCH_JSON_ROWS:-1000000}
NCPU=$(nproc)
TMP=$(mktemp -d "${BENCH_TMP:-/tmp}/piperec-bench-json.XXXXXX")
trap 'rm -rf "$TMP"' EXIT INT TERM

now() { date +%s.%N; }

echo "== 4b. piperec process, declared schema (clickstream JSON): $JROWS rows" >&2
"$PIPEREC" gen --format json --rows "$JROWS" --seed 1 --output "$TMP/events.jsonl"
for thr in default 1; do
    if [ $thr = default ]; then opt=""; n=$NCPU; else opt="--threads $thr"; n=$thr; fi
    t0=$(now)
    # shellcheck disable=SC2086
    "$PIPEREC" process --config "$HERE/../examples/clickstream.yaml" --input "$TMP/events.jsonl" \
        --output "$TMP/out-json" $opt --no-progress 2> "$TMP/process.err"
    t1=$(now)
    cat "$TMP/process.err" >&2
    stages=$(sed -n 's/.*decode \([0-9.]*\), engine \([0-9.]*\), write \([0-9.]*\), idle \([0-9.]*\), vocab export \([0-9.]*\).*/, "decode_s": \1, "engine_s": \2, "write_s": \3, "idle_s": \4, "vocab_export_s": \5/p' "$TMP/process.err")
    serial=$(sed -n 's/.*(serial): engine \([0-9.]*\), write \([0-9.]*\) thread-seconds, \([0-9.]*\)%.*/, "serial_engine_s": \1, "serial_write_s": \2, "serial_pct": \3/p' "$TMP/process.err")
    chain=$(sed -n 's/.*longest column chain per round.*: \([0-9.]*\) s in all.*/, "chain_s": \1/p' "$TMP/process.err")
    after=$(sed -n 's/.*after the pass (wall): close \([0-9.]*\) s, vocab export \([0-9.]*\) s (\([0-9.]*\) thread-s, longest task \([0-9.]*\) s).*/, "close_s": \1, "vocab_export_thread_s": \3, "vocab_longest_s": \4/p' "$TMP/process.err")
    awk -v n="$n" -v r="$JROWS" -v b="$(stat -c %s "$TMP/events.jsonl")" -v s="$(echo "$t1 - $t0" | bc -l)" \
        -v x=", \"pipeline\": \"clickstream jsonl->jagged npy\", \"threads_option\": \"$thr\"$stages$serial$chain$after" 'BEGIN {
        printf "{\"bench\": \"piperec_process_json\", \"threads\": %d, \"rows\": %d, \"seconds\": %.4f, \"rows_per_s\": %.0f, \"mb_per_s\": %.1f%s}\n",
               n, r, s, r / s, b / s / 1e6, x }' | tee "$TMP/json-$thr.jsonl"
    rm -rf "$TMP/out-json"
done
# 4c. The same events through schema.filter (drops the tv device, about a
# quarter) and schema.downsample (keeps 0.25 of the negatives, weight label):
# input records per second beside the unfiltered run above (default threads).
# Each dropped record is read and tested but skips its features and the
# engine, so the ratio says what a filter costs or saves per input record.
sed 's/^    schema:$/    schema:\n      filter: [ { path: context.device, not_in: [tv] } ]\n      downsample: { rate: 0.25, where: { path: label.click, in: [0] }, key: event_id, weight: w }/' \
    "$HERE/../examples/clickstream.yaml" > "$TMP/filtered.yaml"
t0=$(now)
"$PIPEREC" process --config "$TMP/filtered.yaml" --input "$TMP/events.jsonl" --output "$TMP/out-json" \
    --no-progress 2> "$TMP/filtered.err"
t1=$(now)
head -1 "$TMP/filtered.err" >&2
rows_out=$(sed -n 's/^piperec process: \([0-9]*\) rows, .*/\1/p' "$TMP/filtered.err" | head -1)
awk -v r="$JROWS" -v o="$rows_out" -v s="$(echo "$t1 - $t0" | bc -l)" \
    -v base="$(sed -n 's/.*"rows_per_s": \([0-9]*\).*/\1/p' "$TMP/json-default.jsonl")" 'BEGIN {
    printf "{\"bench\": \"piperec_process_json_filtered\", \"records\": %d, \"rows_out\": %d, \"seconds\": %.4f, \"records_per_s\": %.0f, \"ratio_vs_unfiltered\": %.2f}\n",
           r, o, s, r / s, (r / s) / base }'
rm -rf "$TMP/out-json"
# 4d. `piperec infer` over the same events (one thread: it is a one-off
# tool), events per second and its time as a share of `process --threads 1`
# on them, then `process` with the config it wrote: rows and rejects.
t0=$(now)
"$PIPEREC" infer --input "$TMP/events.jsonl" --rows "$JROWS" --output "$TMP/inferred.yaml" \
    2> "$TMP/infer.err"
t1=$(now)
cat "$TMP/infer.err" >&2
"$PIPEREC" process --config "$TMP/inferred.yaml" --input "$TMP/events.jsonl" --output "$TMP/out-json" \
    --no-progress 2> "$TMP/inferred.err"
head -1 "$TMP/inferred.err" >&2
awk -v r="$JROWS" -v s="$(echo "$t1 - $t0" | bc -l)" \
    -v base="$(sed -n 's/.*"seconds": \([0-9.]*\).*/\1/p' "$TMP/json-1.jsonl")" \
    -v out="$(sed -n 's/^piperec process: \([0-9]*\) rows, \([0-9]*\) rejected.*/\1 \2/p' "$TMP/inferred.err" | head -1)" \
    'BEGIN { split(out, o, " ");
    printf "{\"bench\": \"piperec_infer_json\", \"events\": %d, \"seconds\": %.4f, \"events_per_s\": %.0f, \"ratio_vs_process_1_thread\": %.2f, \"process_rows\": %d, \"process_rejected\": %d}\n",
           r, s, r / s, s / base, o[1], o[2] }'
rm -rf "$TMP/out-json"
$PY - "$TMP/json-default.jsonl" "$TMP/json-1.jsonl" <<'PYEOF'
import json, sys
d, o = (json.loads(open(p).read()) for p in sys.argv[1:3])
work = d["decode_s"] + d["engine_s"] + d["write_s"]
f = (d.get("serial_engine_s", d["engine_s"]) + d.get("serial_write_s", d["write_s"])) / work
if "serial_pct" in d:  # the driver's own, from unrounded seconds
    f = d["serial_pct"] / 100
a16 = 1 / (f + (1 - f) / 16)
s = f * work
chain = d.get("chain_s", 0.0)
t16 = s + max(chain, d["decode_s"] / 16) + max(0.0, d["engine_s"] + d["write_s"] - s) / 16
vx = d.get("vocab_export_thread_s", d["vocab_export_s"])
vl = d.get("vocab_longest_s", d["vocab_export_s"])  # before the job: all serial
close = d.get("close_s", 0.0)
fx = (s + close + vl) / (work + vx)
t16x = t16 + close + max(vl, vx / 16)
print(json.dumps({"bench": "process_json_scaling", "threads": d["threads"],
                  "ratio_threads_over_1": round(d["rows_per_s"] / o["rows_per_s"], 2),
                  "serial_fraction": round(f, 4),
                  "amdahl16_projection": round(a16, 1),
                  "chain_s": chain, "projection16": round(work / t16, 1),
                  "vocab_export_s": d["vocab_export_s"], "vocab_export_thread_s": vx,
                  "vocab_longest_s": vl, "close_s": close,
                  "serial_fraction_x": round(fx, 4),
                  "amdahl16_x": round(1 / (fx + (1 - fx) / 16), 1),
                  "projection16_x": round((work + vx) / t16x, 1)}))
PYEOF
