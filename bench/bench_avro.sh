#!/bin/sh
# bench/bench_avro.sh — Avro decode + extract per core (issue 23's goal: >= 10x
# a Python consumer doing the same with python3-avro), side by side in one run
# on the same events: the clickstream of `piperec gen --format json` encoded
# under examples/clickstream.avsc.
#
#   bench/bench_avro.sh [BUILD_DIR]        (default: build)
#
#   1. bench_avro: piperec's reader alone, the reader through the declared
#      schema's decoder (operators up to vocab included), avro-c's generic
#      values, and the JSON decoder on the same events (thread CPU time);
#   2. `piperec gen --format avro --schema-id plain` writes the same events
#      (same seed) to a file, and bench/baseline_avro.py decodes them with
#      python3-avro's DatumReader and extracts the same paths (process CPU
#      time; fewer events, it is slow);
#   3. the ratio, piperec reader alone / Python, per core (a text line, then
#      the same as one JSON line, avro_vs_python, for bench/run.sh).
# Env: BENCH_AVRO_EVENTS (default 200000), BENCH_AVRO_PY_EVENTS (default 20000).
set -eu
B=${1:-build}
SRC=$(cd "$(dirname "$0")/.." && pwd)
N=${BENCH_AVRO_EVENTS:-200000}
NPY=${BENCH_AVRO_PY_EVENTS:-20000}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$B/bench/bench_avro" --events "$N" --seed 7 | tee "$T/c.txt"
"$B/piperec" gen --format avro --avro-schema "$SRC/examples/clickstream.avsc" --schema-id plain \
    --rows "$NPY" --seed 7 --output "$T/events.avrof"
/usr/bin/python3 "$SRC/bench/baseline_avro.py" "$T/events.avrof" "$SRC/examples/clickstream.avsc" \
    | tee "$T/py.txt"
c=$(sed -n 's/^avro plan reader alone.* \([0-9.]*\) MB\/s.*/\1/p' "$T/c.txt" | tail -1)
d=$(sed -n 's/^avro plan (decode.* \([0-9.]*\) MB\/s.*/\1/p' "$T/c.txt" | tail -1)
p=$(sed -n 's/.* \([0-9.]*\) MB\/s.*/\1/p' "$T/py.txt")
echo "piperec / python3-avro per core: reader alone $(echo "scale=1; $c / $p" | bc)x," \
     "with the schema's operators $(echo "scale=1; $d / $p" | bc)x"
# one JSON line for bench/run.sh (`make bench` collects the lines starting with '{')
rr=$(echo "scale=1; $c / $p" | bc)
rd=$(echo "scale=1; $d / $p" | bc)
met=$(echo "$c / $p >= 10" | bc)
full=$(echo "$d / $p >= 10" | bc)
tf() { [ "$1" = 1 ] && echo true || echo false; }
echo "{\"bench\": \"avro_vs_python\", \"c_reader_mb_per_s\": $c, \"c_decode_mb_per_s\": $d," \
     "\"python_mb_per_s\": $p, \"ratio_reader\": $rr, \"ratio_decode\": $rd, \"goal_ratio\": 10," \
     "\"goal_met\": $(tf "$met"), \"full_decoder_over_10x\": $(tf "$full")}"
