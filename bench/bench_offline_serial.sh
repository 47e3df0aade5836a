#!/bin/sh
# bench/bench_offline_serial.sh — `piperec process` before/after in one
# script: the serial fraction (issue 21, offline) and what it allows at more
# threads than this machine has.
#
#   bench/bench_offline_serial.sh BASE_PIPEREC NEW_PIPEREC [ROWS] [ROUNDS] [THREADS]
#
# Generates ROWS (default 1000000) synthetic Criteo rows (NEW's `piperec
# gen`, seed 7), then for ROUNDS rounds (default 3) runs BASE and NEW
# alternately at each thread count of THREADS (default "1 2"), each writing
# its own output, and checks NEW's outputs are byte-identical to BASE's at 1
# thread. Each run prints `piperec process`'s thread-seconds per stage; NEW
# also prints the time it held the input order (engine: whole jobs plus the
# longest column chain; write). For BASE the in-order stages are the whole
# engine and write stages (one worker each at a time).
#
# Per run, one line: binary, threads, wall s, rows/s, decode/engine/write
# thread-s, serial s (engine, write), serial fraction f = (serial engine +
# serial write) / (decode + engine + write), and two projections to 16
# threads from the 1-thread work W = decode + engine + write:
#   amdahl16 = 1 / (f + (1 - f) / 16)           (serial sections add up)
#   pipe16   = W / max(W / 16, serial engine, serial write)
#              (the two in-order stages overlap each other and the rest, as
#              they do in the driver: the bound is the longer one)
# Medians per binary and thread count at the end. Wall times on a shared
# 2-core machine move by +-30%; the thread-seconds and the fraction are
# steadier.
#
# BENCH_OFFLINE_SCHEMA=CONFIG: a declared schema instead (e.g.
# examples/clickstream.yaml): ROWS JSON events of `piperec gen --format
# json`, `process --config CONFIG`, every output file compared. There the
# serial parts do not overlap the rest, but the column chains of first
# appearances (chains: per round the longest, as the driver prints it) run
# beside decoding since rounds overlap, so pipe16 is
#   W / (serial + max(chains, decode / 16) + (engine + write - serial) / 16)
# (decoding at 16 threads hides the chains up to their length; chains = 0
# for a driver that does not print them, where they are inside serial).
#
# After the pass (issue 21): closing the outputs (serial) and the vocabulary
# export (on every worker; its longest task, a column or a piece of one, is
# what more threads cannot shorten). Columns export (wall s), xthr (its
# thread-s), longest, close, and the figures with them counted:
#   fx      = (serial + close + longest) / (W + xthr)
#   amd16x  = 1 / (fx + (1 - fx) / 16)
#   pipe16x = (W + xthr) / (W / pipe16 + close + max(longest, xthr / 16))
# A driver that prints no after-pass line (before the export job) has its
# whole export wall time counted as serial (xthr = longest = export).
set -eu
BASE=${1:?usage: bench_offline_serial.sh BASE_PIPEREC NEW_PIPEREC [ROWS] [ROUNDS] [THREADS]}
NEW=${2:?usage: bench_offline_serial.sh BASE_PIPEREC NEW_PIPEREC [ROWS] [ROUNDS] [THREADS]}
ROWS=${3:-1000000}
ROUNDS=${4:-3}
THREADS=${5:-1 2}
SCHEMA=${BENCH_OFFLINE_SCHEMA:-}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/offline-serial.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

if [ -n "$SCHEMA" ]; then
    IN=$TMP/in.jsonl
    "$NEW" gen --format json --rows "$ROWS" --output "$IN" --seed 7 >/dev/null 2>&1
    set -- --config "$SCHEMA"
else
    IN=$TMP/in.tsv
    "$NEW" gen --rows "$ROWS" --output "$IN" --seed 7 >/dev/null 2>&1
    set --
fi
RES="$TMP/res.txt"
: > "$RES"

# one NAME BIN THREADS [PROCESS ARGS] -> a result line in $RES
one() {
    out="$TMP/out-$1-$3"
    rm -rf "$out"
    nm=$1 bin=$2 t=$3
    shift 3
    "$bin" process "$@" --input "$IN" --output "$out" --threads "$t" --no-progress \
        2> "$TMP/err" || { cat "$TMP/err" >&2; exit 1; }
    set -- "$nm" "$bin" "$t" 
    awk -v name="$1" -v t="$3" -v schema="$SCHEMA" '
        / rows, .* rejected, / { for (i = 1; i <= NF; i++) if ($i == "s,") wall = $(i - 1);
                                 for (i = 1; i <= NF; i++) if ($i ~ /^rows\/s,?$/) rps = $(i - 1) }
        /thread-seconds per stage/ { gsub(",", ""); for (i = 1; i <= NF; i++) {
                                       if ($i == "decode") d = $(i + 1);
                                       if ($i == "engine") e = $(i + 1);
                                       if ($i == "write") w = $(i + 1);
                                       if ($i == "export") vx = $(i + 1) } }
        /after the pass \(wall\)/ { gsub("[,()]", ""); for (i = 1; i <= NF; i++) {
                                       if ($i == "close") cl = $(i + 1);
                                       if ($i == "thread-s") vt = $(i - 1);
                                       if ($i == "task") vl = $(i + 1) } }
        /in input order/ { gsub(",", ""); for (i = 1; i <= NF; i++) {
                             if ($i == "engine" && se == "") se = $(i + 1);
                             if ($i == "write" && sw == "") sw = $(i + 1);
                             if ($i ~ /%$/) pct = substr($i, 1, length($i) - 1) } ; have = 1 }
        /longest column chain per round/ { chain = $(NF - 3) }
        END { if (!have) { se = e; sw = w }
              work = d + e + w; f = work > 0 ? (se + sw) / work : 0;
              if (pct != "") f = pct / 100; # as the driver printed it, from unrounded seconds
              a16 = 1 / (f + (1 - f) / 16);
              m = work / 16; if (se > m) m = se; if (sw > m) m = sw;
              if (schema != "") { dc = d / 16; if (chain > dc) dc = chain;
                                  m = se + sw + dc + (e + w - se - sw) / 16 }
              p16 = m > 0 ? work / m : 0;
              if (vt == "") { vt = vx; vl = vx; cl = 0 }
              fx = (work + vt) > 0 ? (f * work + cl + vl) / (work + vt) : 0;
              a16x = 1 / (fx + (1 - fx) / 16);
              xm = vt / 16; if (vl > xm) xm = vl;
              mx = m + cl + xm; p16x = mx > 0 ? (work + vt) / mx : 0;
              printf "%s %d %.2f %d %.2f %.2f %.2f %.2f %.2f %.4f %.1f %.1f %.2f %.3f %.3f %.3f %.3f %.4f %.1f %.1f\n",
                     name, t, wall, rps, d, e, w, se, sw, f, a16, p16, chain,
                     vx, vt, vl, cl, fx, a16x, p16x }' "$TMP/err" >> "$RES"
}

r=1
while [ "$r" -le "$ROUNDS" ]; do
    for T in $THREADS; do
        one base "$BASE" "$T" "$@"
        one new "$NEW" "$T" "$@"
    done
    r=$((r + 1))
done

for T in $THREADS; do
    if [ -n "$SCHEMA" ]; then
        diff -r "$TMP/out-base-1" "$TMP/out-new-$T" >/dev/null ||
            { echo "bench_offline_serial: outputs differ (new, $T threads)" >&2; exit 1; }
        continue
    fi
    for f in dense.npy sparse.npy labels.npy rejects.tsv; do
        cmp -s "$TMP/out-base-1/$f" "$TMP/out-new-$T/$f" ||
            { echo "bench_offline_serial: $f differs (new, $T threads)" >&2; exit 1; }
    done
    diff -r "$TMP/out-base-1/vocab" "$TMP/out-new-$T/vocab" >/dev/null ||
        { echo "bench_offline_serial: vocab differs (new, $T threads)" >&2; exit 1; }
done

echo "| binary | threads | wall s | rows/s | decode | engine | write | serial engine | serial write | f | amdahl16 | pipe16 | chains | export | xthr | longest | close | fx | amd16x | pipe16x |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
awk '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
       $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20 }' "$RES"
echo
echo "medians (rounds: $ROUNDS, rows: $ROWS; outputs of new identical to base at 1 thread):"
for name in base new; do
    for T in $THREADS; do
        awk -v n="$name" -v t="$T" '$1 == n && $2 == t' "$RES" | sort -k4,4n |
            awk '{ a[NR] = $0 } END { print a[int((NR + 1) / 2)] }'
    done
done
