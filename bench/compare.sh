#!/bin/sh
# bench/compare.sh — the same benchmarks on two builds, run alternately in one
# script, with new/base ratios: the check that a refactor did not cost speed.
#
#   bench/compare.sh BASE_BUILD NEW_BUILD [ROUNDS]
#
# BASE_BUILD is e.g. a build of an older commit (git worktree add /tmp/base REV;
# cmake -S /tmp/base -B /tmp/base/build; cmake --build /tmp/base/build). Per
# round, for base then new: bench_engine (P-I/P-III, 2 threads), bench_offline
# (decode), `piperec process` end to end, bench_e2e criteo_tsv max rate. Each
# figure's median over the rounds is printed per build with the ratio; on a
# noisy machine compare ratios, not absolutes. Prints JSON lines, then a table.
set -eu
BASE=${1:?usage: bench/compare.sh BASE_BUILD NEW_BUILD [ROUNDS]}
NEW=${2:?usage: bench/compare.sh BASE_BUILD NEW_BUILD [ROUNDS]}
ROUNDS=${3:-3}
ROWS=${BENCH_ROWS:-2000000}
PY=/usr/bin/python3
TMP=$(mktemp -d "${BENCH_TMP:-/tmp}/piperec-cmp.XXXXXX")
trap 'rm -rf "$TMP"' EXIT INT TERM
OUT=$TMP/results.jsonl
: > "$OUT"

"$NEW/piperec" gen --rows "$ROWS" --seed 1 --output "$TMP/data.tsv" >/dev/null 2>&1

# tag BUILD_LABEL: prefix each JSON line with the build it came from
tag() { sed -n "s/^{/{\"build\": \"$1\", /p" | tee -a "$OUT"; }
now() { date +%s.%N; }

run_one() {
    label=$1 b=$2
    "$b/bench/bench_engine" --rows "$ROWS" --threads 2 2>/dev/null | grep '"bench":"engine"' | tag "$label" || true
    "$b/bench/bench_offline" --input "$TMP/data.tsv" --tmp "$TMP" --threads 1 2>/dev/null | tag "$label" || true
    t0=$(now)
    "$b/piperec" process --input "$TMP/data.tsv" --output "$TMP/out-$label" --no-progress >/dev/null 2>&1
    t1=$(now)
    echo "{\"bench\": \"piperec_process\", \"rows\": $ROWS, \"rows_per_s\": $(echo "$ROWS / ($t1 - $t0)" | bc -l)}" | tag "$label"
    rm -rf "$TMP/out-$label"
    timeout 300 "$b/bench/bench_e2e" --format criteo_tsv --events 400000 --seconds 2 2>/dev/null \
        | grep "e2e_max_rate" | tag "$label" || true
}

i=0
while [ $i -lt "$ROUNDS" ]; do
    run_one base "$BASE"
    run_one new "$NEW"
    i=$((i + 1))
done

$PY - "$OUT" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def key(r):
    k = r.get("bench", "?")
    for f in ("pipeline", "format", "mode", "stage"):
        if f in r:
            k += " " + str(r[f])
    return k
fig = {}
for r in rows:
    v = r.get("rows_per_s") or r.get("events_per_s")
    if v:
        fig.setdefault(key(r), {}).setdefault(r["build"], []).append(float(v))
print("%-52s %12s %12s %7s" % ("figure (median rows/s)", "base", "new", "new/base"))
for k in sorted(fig):
    b = statistics.median(fig[k].get("base", [0])) if fig[k].get("base") else 0
    n = statistics.median(fig[k].get("new", [0])) if fig[k].get("new") else 0
    print("%-52s %12.0f %12.0f %7.2f" % (k[:52], b, n, n / b if b else float("nan")))
PYEOF
