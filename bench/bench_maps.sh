#!/bin/sh
# bench/bench_maps.sh — `make bench` step 4g: maps read as lists
# (`list: { from: keys }`, `weights: { from: values }`).
# Events with a user id, a label and a user's interest scores, 0..8 of
# 5,000 categories (BENCH_M_ROWS, default 200,000; seeded), written twice
# with the same content:
#
#   map         {"aff": {"c123": 0.42, ...}}: a map read by its keys,
#               weighted by its values
#   objects     {"aff": [{"id": "c123", "score": 0.42}, ...]}: the same ids
#               and scores as a list of objects (`weights: { path }`), the
#               shape piperec read before maps
#   python      /usr/bin/python3 on the map events: json.loads per line, a
#               dict vocabulary, ids, lengths and weights into preallocated
#               arrays, one core: the converter a team would write
#
# All at `--threads 1`. The map and objects runs must write the same
# values, lengths and weights (checked: "identical"), and the Python
# converter the same ("python_identical"). Prints JSON lines
# piperec_process_maps (per run), baseline_python_maps, then maps_ratios:
# map / objects and map / python rows per second.
#
#   bench/bench_maps.sh [BUILD_DIR]     (default: build)
set -eu
BUILD=${1:-build}
PIPEREC=$BUILD/piperec
PY=/usr/bin/python3
ROWS=${BENCH_M_ROWS:-200000}
TMP=$(mktemp -d "${BENCH_TMP:-/tmp}/piperec-bench-m.XXXXXX")
trap 'rm -rf "$TMP"' EXIT INT TERM

now() { date +%s.%N; }

echo "== 4g. maps as lists: $ROWS events, a map vs a list of objects vs Python" >&2
$PY - "$ROWS" "$TMP" <<'EOF'
import json, random, sys
rows, d = int(sys.argv[1]), sys.argv[2]
r = random.Random(5)
with open(d + "/map.jsonl", "w") as fm, open(d + "/obj.jsonl", "w") as fo:
    for i in range(rows):
        cats = r.sample(range(5000), r.randrange(9))
        aff = [("c%d" % c, round(r.random(), 3)) for c in cats]
        head = {"y": int(r.random() < 0.2), "u": "u%d" % r.randrange(100000)}
        fm.write(json.dumps(dict(head, aff=dict(aff))) + "\n")
        fo.write(json.dumps(dict(head, aff=[{"id": k, "score": v} for k, v in aff])) + "\n")
EOF

head='pipelines:
  - name: m
    source: { kafka: { topics: [m] }, format: json }
    schema:
      labels: [ { name: y, path: y } ]
      sparse:
        - { name: u, path: u, ops: [vocab] }'
printf '%s\n%s\n%s\n' "$head" \
    '        - { name: aff, path: aff, list: { max_len: 8, from: keys }, weights: { from: values }, ops: [vocab] }' \
    '    transform: { vocab: { profile: default } }' > "$TMP/map.yaml"
printf '%s\n%s\n%s\n' "$head" \
    '        - { name: aff, path: aff.id, list: { max_len: 8 }, weights: { path: aff.score }, ops: [vocab] }' \
    '    transform: { vocab: { profile: default } }' > "$TMP/obj.yaml"

run() { # name (config and events)
    t0=$(now)
    "$PIPEREC" process --config "$TMP/$1.yaml" --input "$TMP/$1.jsonl" --output "$TMP/out-$1" \
        --threads 1 --no-progress 2> "$TMP/$1.err" || { cat "$TMP/$1.err" >&2; exit 1; }
    t1=$(now)
    awk -v name="$1" -v r="$ROWS" -v b="$(stat -c %s "$TMP/$1.jsonl")" \
        -v s="$(echo "$t1 - $t0" | bc -l)" 'BEGIN {
        printf "{\"bench\": \"piperec_process_maps\", \"run\": \"%s\", \"rows\": %d, \"seconds\": %.3f, \"rows_per_s\": %.0f, \"mb_per_s\": %.1f}\n",
            name, r, s, r / s, b / s / 1e6 }'
}

run map | tee "$TMP/map.json"
run obj | tee "$TMP/obj.json"
identical=true
for f in aff.values aff.lengths aff.weights u.values; do
    cmp -s "$TMP/out-map/sparse/$f.npy" "$TMP/out-obj/sparse/$f.npy" || identical=false
done

$PY - "$TMP/map.jsonl" "$ROWS" "$TMP/out-map" <<'EOF' | tee "$TMP/python.json"
import json, sys, time
import numpy as np
path, rows, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
t0 = time.perf_counter()
voc = {"u": {}, "aff": {}}
lab = np.empty(rows, np.float32)
uv = np.empty(rows, np.int64)
av = np.empty(rows * 8, np.int64)
aw = np.empty(rows * 8, np.float32)
al = np.empty(rows, np.int32)
n = 0
with open(path) as f:
    for i, line in enumerate(f):
        ev = json.loads(line)
        lab[i] = ev.get("y", 0)
        d = voc["u"]
        uv[i] = d.setdefault(ev["u"], len(d) + 2)
        d = voc["aff"]
        items = list((ev.get("aff") or {}).items())[:8]
        for k, w in items:
            av[n] = d.setdefault(k, len(d) + 2)
            aw[n] = w
            n += 1
        al[i] = len(items)
s = time.perf_counter() - t0
same = (np.load(out + "/sparse/aff.values.npy").tobytes() == av[:n].tobytes() and
        np.load(out + "/sparse/aff.weights.npy").tobytes() == aw[:n].tobytes() and
        np.load(out + "/sparse/aff.lengths.npy").tobytes() == al.tobytes())
print(json.dumps({"bench": "baseline_python_maps", "rows": rows, "seconds": round(s, 3),
                  "rows_per_s": round(rows / s), "identical": same}))
EOF

rate() { sed -n 's/.*"rows_per_s": \([0-9.]*\).*/\1/p' "$1"; }
pyid=$(sed -n 's/.*"identical": \([a-z]*\).*/\1/p' "$TMP/python.json")
awk -v m="$(rate "$TMP/map.json")" -v o="$(rate "$TMP/obj.json")" \
    -v p="$(rate "$TMP/python.json")" -v id="$identical" -v pid="$pyid" 'BEGIN {
    printf "{\"bench\": \"maps_ratios\", \"map_over_objects\": %.2f, \"map_over_python\": %.2f, \"identical\": %s, \"python_identical\": %s}\n",
        m / o, m / p, id, pid }'
[ "$identical" = true ] && [ "$pyid" = true ] || {
    echo "bench_maps: the runs disagree (ids: $identical, python: $pyid)" >&2; exit 1; }
