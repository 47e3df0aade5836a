#!/bin/sh
# bench/bench_tables.sh — `make bench` step 4h: shared vocabularies
# (`table:`). The generated clickstream (`piperec gen --format json`,
# BENCH_T_ROWS events, default 200,000; seed 3): a candidate item id and a
# click history of item ids (its last 10), with a user id, read twice:
#
#   separate   item and history each with its own vocabulary (the shape
#              piperec had before `table:`): an item gets one index as a
#              candidate and another in a history
#   shared     history with `table: item`: one vocabulary, one index per item
#   python     /usr/bin/python3: json.loads per line, one dict vocabulary for
#              both (items in the record's order, as piperec gives them),
#              ids and lengths into preallocated arrays, one core: the
#              converter a team would write (checked identical to shared)
#
# All at `--threads 1`. Also the embedding rows each layout needs: the
# separate tables' sizes summed against the shared table's (meta.json
# vocab_sizes), and the share of history ids that are the candidate's index
# for the same item (shared: all, by construction; separate: by chance).
# Prints JSON lines piperec_process_tables (per run), baseline_python_tables,
# then tables_ratios.
#
#   bench/bench_tables.sh [BUILD_DIR]     (default: build)
set -eu
BUILD=${1:-build}
PIPEREC=$BUILD/piperec
PY=/usr/bin/python3
ROWS=${BENCH_T_ROWS:-200000}
TMP=$(mktemp -d "${BENCH_TMP:-/tmp}/piperec-bench-t.XXXXXX")
trap 'rm -rf "$TMP"' EXIT INT TERM

now() { date +%s.%N; }

echo "== 4h. shared vocabularies: $ROWS events, history in the item's table vs its own vs Python" >&2
"$PIPEREC" gen --format json --rows "$ROWS" --seed 3 --output "$TMP/ev.jsonl" 2>/dev/null

cfg() { # name, history's extra keys
    cat > "$TMP/$1.yaml" <<Y
pipelines:
  - name: t
    source: { kafka: { topics: [t] }, format: json }
    schema:
      labels: [ { name: click, path: label.click } ]
      sparse:
        - { name: user, path: user.id, ops: [vocab] }
        - { name: item, path: item.id, ops: [vocab] }
        - { name: history, path: history, list: { max_len: 10, keep: last }, ops: [vocab]$2 }
    transform: { vocab: { profile: default } }
Y
}
cfg separate ""
cfg shared ", table: item"

run() { # name
    t0=$(now)
    "$PIPEREC" process --config "$TMP/$1.yaml" --input "$TMP/ev.jsonl" --output "$TMP/out-$1" \
        --threads 1 --no-progress 2> "$TMP/$1.err" || { cat "$TMP/$1.err" >&2; exit 1; }
    t1=$(now)
    rows=$($PY -c "import json,sys; m=json.load(open(sys.argv[1])); print(sum(v for k, v in zip(m['feature_keys'], m['vocab_sizes']) if k in ('item', 'history') and (k == 'item' or m.get('feature_tables', m['feature_keys'])[m['feature_keys'].index(k)] == k)))" "$TMP/out-$1/meta.json")
    awk -v name="$1" -v r="$ROWS" -v b="$(stat -c %s "$TMP/ev.jsonl")" -v e="$rows" \
        -v s="$(echo "$t1 - $t0" | bc -l)" 'BEGIN {
        printf "{\"bench\": \"piperec_process_tables\", \"run\": \"%s\", \"rows\": %d, \"seconds\": %.3f, \"rows_per_s\": %.0f, \"mb_per_s\": %.1f, \"embedding_rows\": %d}\n",
            name, r, s, r / s, b / s / 1e6, e }'
}

run separate | tee "$TMP/separate.json"
run shared | tee "$TMP/shared.json"

$PY - "$TMP/ev.jsonl" "$ROWS" "$TMP/out-shared" "$TMP/out-separate" <<'PY' | tee "$TMP/python.json"
import json, sys, time
import numpy as np
path, rows, out, sep = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
t0 = time.perf_counter()
users, items = {}, {}
uv = np.empty(rows, np.int64)
iv = np.empty(rows, np.int64)
hv = np.empty(rows * 10, np.int64)
hl = np.empty(rows, np.int32)
n = 0
with open(path) as f:
    for i, line in enumerate(f):
        ev = json.loads(line)
        uv[i] = users.setdefault(ev["user"]["id"], len(users) + 2)
        iv[i] = items.setdefault(ev["item"]["id"], len(items) + 2)
        h = (ev.get("history") or [])[-10:]
        for x in h:
            hv[n] = items.setdefault(x, len(items) + 2)
            n += 1
        hl[i] = len(h)
s = time.perf_counter() - t0
load = lambda d, k, w: np.load("%s/sparse/%s.%s.npy" % (d, k, w))
same = (load(out, "item", "values").tobytes() == iv.tobytes() and
        load(out, "history", "values").tobytes() == hv[:n].tobytes() and
        load(out, "history", "lengths").tobytes() == hl.tobytes() and
        load(out, "user", "values").tobytes() == uv.tobytes())
# history ids that are the candidate index of the same item: an item's two
# indices agree only when they share a table
inv = {v: k for k, v in items.items()}
def agree(d):
    cand = {}
    for v, x in zip(load(d, "item", "values"), iv):
        cand[inv[int(x)]] = int(v)
    hs = load(d, "history", "values")
    hit = sum(1 for v, x in zip(hs, hv[:n]) if cand.get(inv[int(x)]) == int(v))
    known = sum(1 for x in hv[:n] if inv[int(x)] in cand)
    return hit / max(known, 1)
print(json.dumps({"bench": "baseline_python_tables", "rows": rows, "seconds": round(s, 3),
                  "rows_per_s": round(rows / s), "identical": same,
                  "same_index_shared": round(agree(out), 4),
                  "same_index_separate": round(agree(sep), 4)}))
PY

rate() { sed -n 's/.*"rows_per_s": \([0-9.]*\).*/\1/p' "$1"; }
erows() { sed -n 's/.*"embedding_rows": \([0-9]*\).*/\1/p' "$1"; }
pyid=$(sed -n 's/.*"identical": \([a-z]*\).*/\1/p' "$TMP/python.json")
awk -v sh="$(rate "$TMP/shared.json")" -v se="$(rate "$TMP/separate.json")" \
    -v p="$(rate "$TMP/python.json")" -v es="$(erows "$TMP/shared.json")" \
    -v ep="$(erows "$TMP/separate.json")" -v pid="$pyid" 'BEGIN {
    printf "{\"bench\": \"tables_ratios\", \"shared_over_separate\": %.2f, \"shared_over_python\": %.2f, \"embedding_rows_shared_over_separate\": %.3f, \"python_identical\": %s}\n",
        sh / se, sh / p, es / ep, pid }'
[ "$pyid" = true ] || { echo "bench_tables: the Python converter disagrees" >&2; exit 1; }
