#!/bin/sh
# bench_evict.sh — issue 14: rows/s of `piperec process` with bounded
# vocabularies (eviction lru / lfu) next to eviction none, on a Zipf stream,
# plus peak RSS and the memory a column holds at capacity.
#
#   bench/bench_evict.sh [PIPEREC] [ROWS] [CAPACITY]
#
# Defaults: build/piperec, 2,000,000 rows, capacity 100002 per column (26
# columns, modulus 524288, so the Zipf tail keeps evicting). Prints a
# markdown table; run it on an idle machine (2 cores here: --threads 2).
set -eu
PIPEREC=${1:-build/piperec}
ROWS=${2:-2000000}
CAP=${3:-100002}
T=$(mktemp -d /tmp/pr_bench_evict.XXXXXX)
trap 'rm -rf "$T"' EXIT

"$PIPEREC" gen --rows "$ROWS" --seed 11 --zipf 1.05 --output "$T/in.tsv" 2>/dev/null

cfg() { # NAME VOCAB_EXTRA
    cat > "$T/$1.yaml" <<YAML
pipelines:
  - name: criteo
    source: { kafka: { topics: [e] } }
    transform:
      vocab: { profile: default, capacity: $CAP $2 }
YAML
}
cfg none ""
cfg lru ", eviction: lru"
cfg lfu ", eviction: lfu, decay_records: 1000000"
cfg ttl ", eviction: ttl, ttl_records: 200000"

echo "| eviction | rows/s (best of 3) | peak RSS MiB | OOV share |"
echo "|---|---|---|---|"
for c in none lru lfu ttl; do
    best=0
    for i in 1 2 3; do
        t0=$(date +%s%N)
        /usr/bin/time -f %M -o "$T/rss" "$PIPEREC" process --config "$T/$c.yaml" \
            --input "$T/in.tsv" --output "$T/out" --threads 2 --no-progress 2> "$T/err" ||
            { cat "$T/err"; exit 1; }
        t1=$(date +%s%N)
        rps=$(( ROWS * 1000000000 / (t1 - t0) ))
        [ "$rps" -gt "$best" ] && best=$rps
    done
    stats=$(/usr/bin/python3 - "$T/out/sparse.npy" "$T/out/vocab" <<'PY'
import sys, numpy as np
a = np.load(sys.argv[1])
print("%.3f" % ((a == 1).mean()))
PY
)
    echo "| $c | $best | $(( $(cat "$T/rss") / 1024 )) | $stats |"
done

# Memory per column at capacity (slots = capacity - 2), from the layout in
# fpga_engine/cpu_backend.c: keys 8 B + last lookup 8 B + use count 4 B +
# list links (lru/ttl) or heap position (lfu) 8 B per slot, plus the value
# table: direct array 4 B x modulus (modulus <= 2^24), else an open-addressing
# hash of 16 B slots at <= 50% load.
S=$(( CAP - 2 ))
echo
echo "memory per column at capacity $CAP (modulus 524288, direct array):"
echo "  eviction none: $(( (S * 8 + 524288 * 4) / 1024 )) KiB (keys + direct array)"
echo "  eviction lru/lfu/ttl: $(( (S * 28 + 524288 * 4) / 1024 )) KiB (+20 B per slot)"
echo "  hash columns (modulus > 2^24): none $(( S * (8 + 32) / 1024 )) KiB, evicting $(( S * (28 + 32) / 1024 )) KiB (worst case, 50% load)"
