#!/bin/sh
# explain.sh — `piperec explain`: the features and operator chains a config
# declares, the backend that runs each operator, and the refusal (exit 2,
# naming file:line, feature, operator and backend) when a backend is asked for
# an operator it cannot run and schema.cpu_ops does not allow the cpu.
# Environment (pr_script_test): PIPEREC, PR_SOURCE_DIR, PR_TMP.
set -eu
fail() { echo "FAIL: $*" >&2; exit 1; }
ex="$PR_SOURCE_DIR/examples/clickstream.yaml"

# The default config is the Criteo preset: 40 features, all on the chosen backend.
"$PIPEREC" explain > "$PR_TMP/default.txt"
grep -q "^pipeline criteo: Criteo preset, 40 features, engine.backend cpu" "$PR_TMP/default.txt" ||
    fail "default header: $(head -1 "$PR_TMP/default.txt")"
[ "$(grep -c ' on cpu$' "$PR_TMP/default.txt")" -eq 104 ] || fail "default: not 104 ops on cpu"
"$PIPEREC" explain --backend hls-sim > "$PR_TMP/hls.txt"
[ "$(grep -c ' on hls-sim$' "$PR_TMP/hls.txt")" -eq 104 ] || fail "preset: not wholly on hls-sim"
grep -A3 '^  sparse     C3 ' "$PR_TMP/hls.txt" | grep -q 'modulus 524288 *on hls-sim' ||
    fail "C3 modulus"

# The example: every kind, placed per operator.
"$PIPEREC" explain --config "$ex" > "$PR_TMP/ex.txt"
grep -q '^pipeline clicks: declared schema, 16 features' "$PR_TMP/ex.txt" || fail "example header"
grep -q '^  list       history  *history  max_len 10 keep last' "$PR_TMP/ex.txt" || fail "list"
grep -q 'cross(item.category, context.device)' "$PR_TMP/ex.txt" || fail "cross"
"$PIPEREC" explain --config "$ex" --backend xrt > "$PR_TMP/ex_xrt.txt"
grep -A2 '^  sparse     item ' "$PR_TMP/ex_xrt.txt" | grep -q 'vocab  *on xrt' || fail "item vocab on xrt"
grep -A1 '^  list       tags ' "$PR_TMP/ex_xrt.txt" | grep -q 'hash 4096  *on cpu' || fail "tags hash on cpu"
grep -A2 '^  dense      price ' "$PR_TMP/ex_xrt.txt" | grep -q 'log1p  *on cpu' ||
    fail "log1p after a cpu op stays on the cpu"

# A map read as a list says how: its keys, its entries or its values.
cat > "$PR_TMP/maps.yaml" <<'YAML'
pipelines:
  - name: p
    schema:
      sparse:
        - { name: tags, path: tags, list: { max_len: 4, from: keys }, ops: [vocab] }
        - { name: attrs, path: attrs, list: { max_len: 4, from: entries }, ops: [vocab] }
        - { name: shown, path: slots, list: { max_len: 4, from: values }, ops: [vocab] }
YAML
"$PIPEREC" explain --config "$PR_TMP/maps.yaml" > "$PR_TMP/maps.txt"
grep -q '^  list       tags  *tags  max_len 4 keep first (the map.s keys)$' "$PR_TMP/maps.txt" ||
    fail "keys: $(cat "$PR_TMP/maps.txt")"
grep -q '^  list       attrs  *attrs  max_len 4 keep first (the map.s entries: ' "$PR_TMP/maps.txt" ||
    fail "entries"
grep -q '^  list       shown  *slots  max_len 4 keep first (the map.s values)$' "$PR_TMP/maps.txt" ||
    fail "values: $(cat "$PR_TMP/maps.txt")"

# No silent fallback: clip on hls-sim without cpu_ops is refused.
cat > "$PR_TMP/refused.yaml" <<'YAML'
pipelines:
  - name: p
    schema:
      dense:
        - { name: price, path: item.price, ops: [ { clip: [0, 100] }, log1p ] }
engine: { backend: hls-sim }
YAML
if "$PIPEREC" explain --config "$PR_TMP/refused.yaml" > /dev/null 2> "$PR_TMP/err.txt"; then
    fail "clip on hls-sim was accepted"
else
    rc=$?
fi
[ "$rc" -eq 2 ] || fail "exit $rc, want 2"
grep -q "refused.yaml:2: pipelines\[0\].schema: feature 'price': operator 'clip' cannot run on backend hls-sim" \
    "$PR_TMP/err.txt" || fail "message: $(cat "$PR_TMP/err.txt")"
# ...and the same config with the cpu allowed, or on the cpu backend, is fine.
"$PIPEREC" explain --config "$PR_TMP/refused.yaml" --backend cpu > /dev/null || fail "cpu backend"
sed 's/^engine:.*/engine: { backend: hls-sim }/' "$PR_TMP/refused.yaml" |
    sed 's/^    schema:$/    schema:\n      cpu_ops: [clip, log1p]/' > "$PR_TMP/allowed.yaml"
"$PIPEREC" explain --config "$PR_TMP/allowed.yaml" > "$PR_TMP/allowed.txt" || fail "cpu_ops allowed"
grep -q 'clip \[0, 100\]  *on cpu' "$PR_TMP/allowed.txt" || fail "clip on cpu"

# The Criteo preset loads as before (the engine checks it at start), and explain
# reports what the kernel cannot run.
cat > "$PR_TMP/preset.yaml" <<'YAML'
pipelines:
  - name: p
    transform: { sparse: [hex2int, vocab] }
engine: { backend: hls-sim }
YAML
if "$PIPEREC" explain --config "$PR_TMP/preset.yaml" > /dev/null 2> "$PR_TMP/err3.txt"; then
    fail "preset vocab without modulus placed on hls-sim"
fi
grep -q "pipeline p: feature 'C1': operator 'vocab' cannot run on backend hls-sim" "$PR_TMP/err3.txt" ||
    fail "preset message: $(cat "$PR_TMP/err3.txt")"
"$PIPEREC" explain --config "$PR_TMP/preset.yaml" --backend cpu > /dev/null || fail "preset on cpu"

# A chain that makes no sense is a config error naming the key.
cat > "$PR_TMP/bad.yaml" <<'YAML'
pipelines:
  - name: p
    schema:
      sparse:
        - { name: user, path: user.id, ops: [log1p] }
YAML
if "$PIPEREC" explain --config "$PR_TMP/bad.yaml" > /dev/null 2> "$PR_TMP/err2.txt"; then
    fail "log1p on a string accepted"
fi
grep -q "bad.yaml:5: pipelines\[0\].schema.sparse\[0\].ops\[0\]: 'log1p' needs a number" "$PR_TMP/err2.txt" ||
    fail "message: $(cat "$PR_TMP/err2.txt")"
# Labels and flags by value show their values as written (strings are kept
# as hashes for matching; explain showed "2 string(s)"); a long list is cut.
cat > "$PR_TMP/in.yaml" <<'YAML'
pipelines:
  - name: p
    source: { format: json }
    schema:
      labels:
        - { name: buy, path: type, in: [add_to_cart, purchase, 7, true] }
      dense:
        - { name: many, path: x, in: [aaaaaaaaaaaaaaaaaaaa, bbbbbbbbbbbbbbbbbbbb, cccccccccccccccccccc,
            dddddddddddddddddddd, eeeeeeeeeeeeeeeeeeee, ffffffffffffffffffff, gggggggggggggggggggg] }
        - { name: edge, path: y, in: [xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx,
            yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy, zzzzzzzzzzzzzzzzzzzzzzz, w, v] }
YAML
"$PIPEREC" explain --config "$PR_TMP/in.yaml" > "$PR_TMP/in.txt" || fail "in: explain"
grep -q '1 when in \["add_to_cart", "purchase", 7, 1\] else 0' "$PR_TMP/in.txt" ||
    fail "in: $(grep buy "$PR_TMP/in.txt")"
grep -q '1 when in \["aaaaaaaaaaaaaaaaaaaa", .*, \.\.\.\] else 0' "$PR_TMP/in.txt" ||
    fail "in, cut: $(grep many "$PR_TMP/in.txt")"
grep edge "$PR_TMP/in.txt" | grep -q '", \.\.\.\] else 0$' ||
    fail "in, cut at the edge: $(grep edge "$PR_TMP/in.txt")"
echo "explain: ok"
