#!/bin/sh
# bench/bench_weights.sh — `make bench` step 4f: weighted lists (`weights:`).
# Events with a user id, a label, `cats` (a list of 0..8 objects
# {"id": "c123", "score": 0.42}, a few without a score) and a 10-long history
# of ids with a parallel list of dwell times (BENCH_W_ROWS, default 200,000;
# seeded):
#
#   weighted    `piperec process --threads 1`, cats weighted by score
#               (default 1), hist by dwell
#   unweighted  the same config without `weights:` (the same ids): what
#               the weights cost
#   python      /usr/bin/python3: json.loads per line, a dict vocabulary per
#               feature, ids, lengths and weights into preallocated arrays
#               (the KeyedJaggedTensor parts), one core: the converter a team
#               would write
#   weighted at default threads (one worker per CPU)
#
# The weighted and unweighted runs must write the same values and lengths
# (checked: "identical": true), and the Python converter the same weights
# ("python_identical"). Prints JSON lines piperec_process_weights (per run),
# baseline_python_weights, then weights_ratios: weighted / unweighted,
# weighted / python rows per second (1 core), default threads / 1.
#
#   bench/bench_weights.sh [BUILD_DIR]     (default: build)
set -eu
BUILD=${1:-build}
PIPEREC=$BUILD/piperec
PY=/usr/bin/python3
ROWS=${BENCH_W_ROWS:-200000}
TMP=$(mktemp -d "${BENCH_TMP:-/tmp}/piperec-bench-w.XXXXXX")
trap 'rm -rf "$TMP"' EXIT INT TERM

now() { date +%s.%N; }

echo "== 4f. weighted lists: $ROWS events, weighted vs unweighted vs Python" >&2
$PY - "$ROWS" "$TMP" <<'EOF'
import json, random, sys
rows, d = int(sys.argv[1]), sys.argv[2]
r = random.Random(3)
with open(d + "/ev.jsonl", "w") as f:
    for i in range(rows):
        cats = []
        for _ in range(r.randrange(9)):
            o = {"id": "c%d" % r.randrange(5000)}
            if r.random() < 0.95:
                o["score"] = round(r.random(), 3)
            cats.append(o)
        f.write(json.dumps({"y": int(r.random() < 0.2), "u": "u%d" % r.randrange(100000),
                            "cats": cats,
                            "hist": ["i%d" % r.randrange(200000) for _ in range(10)],
                            "dwell": [round(r.uniform(0, 60), 1) for _ in range(10)]}) + "\n")
EOF

cat > "$TMP/w.yaml" <<'EOF'
pipelines:
  - name: w
    source: { kafka: { topics: [w] }, format: json }
    schema:
      labels: [ { name: y, path: y } ]
      sparse:
        - { name: u, path: u, ops: [vocab] }
        - { name: cats, path: cats.id, list: { max_len: 8 },
            weights: { path: cats.score, default: 1 }, ops: [vocab] }
        - { name: hist, path: hist, list: { max_len: 10, keep: last },
            weights: { path: dwell }, ops: [vocab] }
    transform: { vocab: { profile: default } }
EOF
grep -v "weights:" "$TMP/w.yaml" | sed 's/list: { max_len: 8 },$/list: { max_len: 8 }, ops: [vocab] }/; s/keep: last },$/keep: last }, ops: [vocab] }/' > "$TMP/u.yaml"

run() { # name config threads_option
    t0=$(now)
    # shellcheck disable=SC2086
    "$PIPEREC" process --config "$TMP/$2.yaml" --input "$TMP/ev.jsonl" --output "$TMP/out-$1" \
        $3 --no-progress 2> "$TMP/$1.err" || { cat "$TMP/$1.err" >&2; exit 1; }
    t1=$(now)
    awk -v name="$1" -v thr="${3:-default}" -v r="$ROWS" \
        -v b="$(stat -c %s "$TMP/ev.jsonl")" -v s="$(echo "$t1 - $t0" | bc -l)" 'BEGIN {
        printf "{\"bench\": \"piperec_process_weights\", \"run\": \"%s\", \"threads_option\": \"%s\", \"rows\": %d, \"seconds\": %.3f, \"rows_per_s\": %.0f, \"mb_per_s\": %.1f}\n",
            name, thr, r, s, r / s, b / s / 1e6 }'
}

run weighted w "--threads 1" | tee "$TMP/weighted.json"
run unweighted u "--threads 1" | tee "$TMP/unweighted.json"
run weighted_mt w "" | tee "$TMP/weighted_mt.json"
identical=true
for f in cats.values cats.lengths hist.values hist.lengths u.values; do
    cmp -s "$TMP/out-weighted/sparse/$f.npy" "$TMP/out-unweighted/sparse/$f.npy" || identical=false
done

$PY - "$TMP/ev.jsonl" "$ROWS" "$TMP/out-weighted" <<'EOF' | tee "$TMP/python.json"
import json, sys, time
import numpy as np
path, rows, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
t0 = time.perf_counter()
voc = {"u": {}, "cats": {}, "hist": {}}
lab = np.empty(rows, np.float32)
uv = np.empty(rows, np.int64)
cv, cw, hv, hw = (np.empty(rows * n, t) for n, t in
                  ((8, np.int64), (8, np.float32), (10, np.int64), (10, np.float32)))
cl = np.empty(rows, np.int32)
hl = np.empty(rows, np.int32)
nc = nh = 0
with open(path) as f:
    for i, line in enumerate(f):
        ev = json.loads(line)
        lab[i] = ev.get("y", 0)
        d = voc["u"]
        uv[i] = d.setdefault(ev["u"], len(d) + 2)
        d = voc["cats"]
        cats = [o for o in ev.get("cats") or () if o and o.get("id") is not None][:8]
        for o in cats:
            cv[nc] = d.setdefault(o["id"], len(d) + 2)
            s = o.get("score")
            cw[nc] = 1.0 if s is None else s
            nc += 1
        cl[i] = len(cats)
        d = voc["hist"]
        pairs = list(zip(ev.get("hist") or (), ev.get("dwell") or ()))[-10:]
        for h, w in pairs:
            hv[nh] = d.setdefault(h, len(d) + 2)
            hw[nh] = w
            nh += 1
        hl[i] = len(pairs)
s = time.perf_counter() - t0
same = (np.load(out + "/sparse/cats.weights.npy").tobytes() == cw[:nc].tobytes() and
        np.load(out + "/sparse/hist.weights.npy").tobytes() == hw[:nh].tobytes() and
        np.load(out + "/sparse/cats.values.npy").tobytes() == cv[:nc].tobytes())
print(json.dumps({"bench": "baseline_python_weights", "rows": rows, "seconds": round(s, 3),
                  "rows_per_s": round(rows / s), "identical": same}))
EOF

rate() { sed -n 's/.*"rows_per_s": \([0-9.]*\).*/\1/p' "$1"; }
pyid=$(sed -n 's/.*"identical": \([a-z]*\).*/\1/p' "$TMP/python.json")
awk -v w="$(rate "$TMP/weighted.json")" -v u="$(rate "$TMP/unweighted.json")" \
    -v p="$(rate "$TMP/python.json")" -v m="$(rate "$TMP/weighted_mt.json")" -v id="$identical" \
    -v pid="$pyid" 'BEGIN {
    printf "{\"bench\": \"weights_ratios\", \"weighted_over_unweighted\": %.2f, \"weighted_over_python\": %.2f, \"default_threads_over_1\": %.2f, \"identical\": %s, \"python_identical\": %s}\n",
        w / u, w / p, m / w, id, pid }'
[ "$identical" = true ] && [ "$pyid" = true ] || {
    echo "bench_weights: the runs disagree (ids: $identical, python: $pyid)" >&2; exit 1; }
