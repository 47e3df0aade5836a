#!/bin/sh
# bench/bench_vectors.sh — `make bench` step 4e: dense vectors (`dim:`).
# Events with a user id, a label, a price and a 64-number embedding
# (BENCH_VEC_ROWS, default 200,000; BENCH_VEC_DIM, default 64; seeded):
#
#   vector  `piperec process --threads 1` with `{ name: emb, path: e, dim: 64 }`
#   flat    the same events with the embedding written as 64 named fields
#           e0..e63 and 64 scalar dense features: what a team had to do before
#           (a converter upstream), same arrays
#   python  /usr/bin/python3: json.loads per line and the embedding into a
#           preallocated float32 matrix (the dense part only: no vocabulary),
#           one core, the loop a trainer-side converter would run
#   vector at default threads (one worker per CPU)
#
# The vector and flat runs must write byte-identical dense.npy (checked:
# "identical": true). Prints JSON lines piperec_process_vector (per run),
# baseline_python_vector, then vector_ratios: vector / flat and vector /
# python rows per second (both 1 core), default threads / 1.
#
#   bench/bench_vectors.sh [BUILD_DIR]     (default: build)
set -eu
BUILD=${1:-build}
PIPEREC=$BUILD/piperec
PY=/usr/bin/python3
ROWS=${BENCH_VEC_ROWS:-200000}
DIM=${BENCH_VEC_DIM:-64}
TMP=$(mktemp -d "${BENCH_TMP:-/tmp}/piperec-bench-vec.XXXXXX")
trap 'rm -rf "$TMP"' EXIT INT TERM

now() { date +%s.%N; }

echo "== 4e. dense vectors: $ROWS events, dim $DIM, vector vs flat fields vs Python" >&2
$PY - "$ROWS" "$DIM" "$TMP" <<'EOF'
import json, random, sys
rows, dim, d = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
r = random.Random(1)
with open(d + "/vec.jsonl", "w") as v, open(d + "/flat.jsonl", "w") as f:
    for i in range(rows):
        e = [round(r.gauss(0, 0.3), 4) for _ in range(dim)]
        base = {"y": int(r.random() < 0.2), "u": "u%d" % r.randrange(100000),
                "p": round(r.uniform(0, 500), 2)}
        v.write(json.dumps(dict(base, e=e)) + "\n")
        flat = dict(base)
        flat.update(("e%d" % k, x) for k, x in enumerate(e))
        f.write(json.dumps(flat) + "\n")
EOF

head="pipelines:
  - name: v
    source: { kafka: { topics: [v] }, format: json }
    schema:
      labels: [ { name: y, path: y } ]
      sparse: [ { name: u, path: u, ops: [vocab] } ]
      dense:
        - { name: p, path: p, default: 0, ops: [log1p] }"
printf '%s\n        - { name: e, path: e, dim: %s, default: 0 }\n' "$head" "$DIM" > "$TMP/vec.yaml"
{
    echo "$head"
    k=0
    while [ $k -lt "$DIM" ]; do
        echo "        - { name: e$k, path: e$k, default: 0 }"
        k=$((k + 1))
    done
} > "$TMP/flat.yaml"

run() { # name config input threads_option
    t0=$(now)
    # shellcheck disable=SC2086
    "$PIPEREC" process --config "$TMP/$2.yaml" --input "$TMP/$3.jsonl" --output "$TMP/out-$1" \
        $4 --no-progress 2> "$TMP/$1.err"
    t1=$(now)
    awk -v name="$1" -v thr="${4:-default}" -v r="$ROWS" -v dim="$DIM" \
        -v b="$(stat -c %s "$TMP/$3.jsonl")" -v s="$(echo "$t1 - $t0" | bc -l)" 'BEGIN {
        printf "{\"bench\": \"piperec_process_vector\", \"run\": \"%s\", \"threads_option\": \"%s\", \"rows\": %d, \"dim\": %d, \"seconds\": %.3f, \"rows_per_s\": %.0f, \"mb_per_s\": %.1f}\n",
            name, thr, r, dim, s, r / s, b / s / 1e6 }'
}

run vector vec vec "--threads 1" | tee "$TMP/vector.json"
run flat flat flat "--threads 1" | tee "$TMP/flat.json"
run vector_mt vec vec "" | tee "$TMP/vector_mt.json"
identical=false
cmp -s "$TMP/out-vector/dense.npy" "$TMP/out-flat/dense.npy" && identical=true

$PY - "$TMP/vec.jsonl" "$ROWS" "$DIM" <<'EOF' | tee "$TMP/python.json"
import json, sys, time
import numpy as np
path, rows, dim = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t0 = time.perf_counter()
dense = np.empty((rows, 1 + dim), np.float32)
labels = np.empty(rows, np.float32)
with open(path) as f:
    for i, line in enumerate(f):
        ev = json.loads(line)
        labels[i] = ev.get("y", 0)
        dense[i, 0] = np.log1p(ev.get("p", 0))
        e = ev.get("e")
        dense[i, 1:] = e if e and len(e) == dim else 0
s = time.perf_counter() - t0
print(json.dumps({"bench": "baseline_python_vector", "rows": rows, "dim": dim,
                  "seconds": round(s, 3), "rows_per_s": round(rows / s)}))
EOF

rate() { sed -n 's/.*"rows_per_s": \([0-9.]*\).*/\1/p' "$1"; }
awk -v v="$(rate "$TMP/vector.json")" -v f="$(rate "$TMP/flat.json")" \
    -v p="$(rate "$TMP/python.json")" -v m="$(rate "$TMP/vector_mt.json")" -v id="$identical" \
    -v dim="$DIM" 'BEGIN {
    printf "{\"bench\": \"vector_ratios\", \"dim\": %d, \"vector_over_flat\": %.2f, \"vector_over_python\": %.2f, \"default_threads_over_1\": %.2f, \"identical\": %s}\n",
        dim, v / f, v / p, m / v, id }'
[ "$identical" = true ] || { echo "bench_vectors: the vector and flat runs wrote different dense.npy" >&2; exit 1; }
