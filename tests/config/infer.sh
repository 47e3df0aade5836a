#!/bin/sh
# infer.sh — `piperec infer` end to end: the generated clickstream in, a
# config out that `process` runs with no reject and `run --check` accepts,
# with the features a person would have declared; stdin and --rows; the same
# events give the same text; labels by value (--labels type=click|cart) and
# the labels `process` then gives; refusals exit 2 with the option named.
# Environment (pr_script_test): PIPEREC, PR_SOURCE_DIR, PR_TMP.
set -eu
. "$PR_SOURCE_DIR/tests/config/infer_lib.sh"
T=$PR_TMP

"$PIPEREC" gen --format json --rows 5000 --seed 4 --output "$T/ev.jsonl" 2>/dev/null
"$PIPEREC" infer --input "$T/ev.jsonl" --output "$T/cfg.yaml" --name clicks --topic clicks \
    2> "$T/err" || fail "infer: $(cat "$T/err")"
grep -q "5000 events (0 skipped): event time, 3 labels, 2 dense, 7 sparse (2 lists), 1 fields not used" \
    "$T/err" || fail "summary: $(cat "$T/err")"

# The decisions, line by line (what a person would have declared).
want() { grep -q -- "$1" "$T/cfg.yaml" || fail "no line with '$1' in: $(cat "$T/cfg.yaml")"; }
want "event_time: { path: ts, unit: ms }"
want "- { name: click, path: label.click }"
want "- { name: purchase, path: label.purchase, default: 0 }"
want "- { name: price, path: item.price, ops: \[log1p\] }"
want "- { name: user_id, path: user.id, ops: \[vocab\] }"
want "- { name: item_id, path: item.id, ops: \[vocab\] }"
want "- { name: history, path: history, list: { max_len: 20, keep: last }, ops: \[vocab\] }"
want "#   event_id: .* an event id, not a feature"
want "topics: \[clicks\]"

# It runs: every event a row, none rejected, and the service's check passes.
"$PIPEREC" process --config "$T/cfg.yaml" --input "$T/ev.jsonl" --output "$T/out" 2> "$T/perr" ||
    fail "process: $(cat "$T/perr")"
grep -q "5000 rows, 0 rejected" "$T/perr" || fail "process: $(cat "$T/perr")"
for f in labels.npy dense.npy sparse/history.values.npy sparse/history.lengths.npy; do
    [ -s "$T/out/$f" ] || fail "no $f"
done
"$PIPEREC" run --config "$T/cfg.yaml" --check > "$T/check" 2>&1 || fail "run --check: $(cat "$T/check")"

# stdin and --rows: the first N events; the same events, the same text.
head -n 1000 "$T/ev.jsonl" > "$T/ev1k.jsonl"
"$PIPEREC" infer --input - --rows 1000 --name clicks --topic clicks < "$T/ev.jsonl" > "$T/a.yaml" 2> "$T/err"
grep -q "^piperec infer: 1000 events" "$T/err" || fail "--rows: $(cat "$T/err")"
"$PIPEREC" infer --input "$T/ev1k.jsonl" --name clicks --topic clicks > "$T/b.yaml" 2>/dev/null
sed 1d "$T/a.yaml" > "$T/a1"; sed 1d "$T/b.yaml" > "$T/b1"   # the first line names the input
cmp "$T/a1" "$T/b1" || fail "stdin with --rows 1000 differs from the first 1000 lines"

# Options: --time none, --labels, --ignore.
"$PIPEREC" infer --input "$T/ev1k.jsonl" --time none --labels label.click \
    --ignore history,item > "$T/o.yaml" 2>/dev/null
grep -q "no event time found" "$T/o.yaml" || fail "--time none"
grep -q "name: click" "$T/o.yaml" || fail "--labels: click"
grep -q "#   label.purchase: named like an outcome, not among --labels" "$T/o.yaml" ||
    fail "--labels: purchase must be left out, not an input (it would leak the answer)"
grep -q "path: item\.\|path: history" "$T/o.yaml" && fail "--ignore left item.* or history in"
grep -q "#   item.price: left out (--ignore)" "$T/o.yaml" || fail "--ignore not listed"

# --kafka-properties: a secured cluster's properties go into the config, a
# password never (an environment reference the service resolves instead),
# and `run --check` builds the clients from them.
cat > "$T/kp.properties" <<'P'
# the cluster the trainers read
bootstrap.servers = kafka-1:9093
security.protocol=SASL_SSL
sasl.mechanism=PLAIN
sasl.username=trainer
sasl.password=hunter2
client.id=${env:PR_INFER_TEST_HOST}
P
"$PIPEREC" infer --input "$T/ev1k.jsonl" --kafka-properties "$T/kp.properties" > "$T/kp.yaml" \
    2>/dev/null || fail "--kafka-properties"
grep -q 'bootstrap.servers: "kafka-1:9093"' "$T/kp.yaml" || fail "bootstrap from the file"
grep -q 'security.protocol: "SASL_SSL",' "$T/kp.yaml" || fail "security.protocol"
grep -q 'sasl.password: "${env:PIPEREC_KAFKA_SASL_PASSWORD}",' "$T/kp.yaml" || fail "password ref"
grep -q 'client.id: "${env:PR_INFER_TEST_HOST}" }' "$T/kp.yaml" || fail "a reference as given"
grep -q hunter2 "$T/kp.yaml" && fail "the password was copied into the config"
PIPEREC_KAFKA_SASL_PASSWORD=x PR_INFER_TEST_HOST=h "$PIPEREC" run --config "$T/kp.yaml" --check \
    > "$T/check" 2>&1 || fail "run --check with the properties: $(cat "$T/check")"
printf 'security.protocol\n' > "$T/bad.properties"

# Dense vectors: a list of numbers of one length becomes a vector (dim, and
# default: 0 where events lack it), a list whose length varies is left out,
# ids stay lists; process reads every event, a vector into dim columns.
awk 'BEGIN {
    for (i = 0; i < 200; i++) {
        s = ""
        for (k = 0; k <= i % 4; k++)
            s = s (k ? ", " : "") (i * 0.5 + k * 0.25)
        printf "{\"click\": %d, \"item_emb\": [%.3f, %.3f, 0.5, %.4f], ", i % 2, i / 200, -i / 100, (i % 7) / 3
        if (i % 3)
            printf "\"ctx_vec\": [%.2f, %.2f, %.2f], ", i / 10, i / 20, -i / 30
        printf "\"scores\": [%s], \"recent_items\": [%d, %d]}\n", s, i % 17, i % 5
    }
}' > "$T/vec.jsonl"
"$PIPEREC" infer --input "$T/vec.jsonl" --output "$T/vec.yaml" 2> "$T/err" ||
    fail "infer vectors: $(cat "$T/err")"
for line in \
    '- { name: item_emb, path: item_emb, dim: 4 }   # vectors of 4 numbers' \
    '- { name: ctx_vec, path: ctx_vec, dim: 3, default: 0 }   # vectors of 3 numbers .* in 6[67]% of events' \
    '#   scores: a list of numbers whose length varies (1..4)' \
    '- { name: recent_items, path: recent_items, list: { max_len: 2, keep: last }, ops: \[vocab\] }'; do
    grep -q -- "$line" "$T/vec.yaml" || fail "vectors: no line with '$line' in: $(cat "$T/vec.yaml")"
done
"$PIPEREC" process --config "$T/vec.yaml" --input "$T/vec.jsonl" --output "$T/vout" 2> "$T/perr" ||
    fail "process vectors: $(cat "$T/perr")"
grep -q "200 rows, 0 rejected" "$T/perr" || fail "process vectors: $(cat "$T/perr")"
grep -q '"n_dense": 7,' "$T/vout/meta.json" || fail "vectors: not 4 + 3 dense columns"
grep -q '"item_emb\[3\]", "ctx_vec\[0\]"' "$T/vout/meta.json" || fail "vectors: column names"

# Labels by value: --labels type=click,type=cart|purchase turns an event
# type string into 1/0 labels (in: [...], in the order given, after the
# numeric ones; an integer field's values plain, strings quoted where YAML
# needs it); names from the first value, unique against the features (cart
# is a feature: cart_2); the field is no input; process gives the labels a
# Python computation of the same rule gives (absent, null, []: 0; a list: any
# element).
/usr/bin/python3 - "$T/typ.jsonl" <<'PY'
import json, random, sys
random.seed(7)
kinds = ["view", "view", "click", "purchase", "cart", "view", "a:b #c"]
with open(sys.argv[1], "w") as f:
    for i in range(400):
        e = {"ts": 1700000000000 + i * 1000, "user": "u%d" % (i % 37),
             "cart": random.randint(0, 20), "status": [200, 200, 404, 500][i % 4],
             "ctx": {"dev": ["ios", "web"][i % 2]}}
        if i % 9:
            e["type"] = kinds[i % 7] if i % 13 else None
        if i % 5:
            e["tags"] = [["sale", "new"], [], ["new"], ["sale"]][i % 4]
        f.write(json.dumps(e) + "\n")
PY
# Without --labels, the event-type field is an input whose comment asks
# whether it is the outcome.
"$PIPEREC" infer --input "$T/typ.jsonl" --output "$T/typ0.yaml" 2> "$T/err" ||
    fail "infer without labels: $(cat "$T/err")"
grep -q 'path: type, ops: \[vocab\] }   # an event type? if it is the outcome, --labels type=VALUE makes labels of it' \
    "$T/typ0.yaml" || fail "no event-type hint: $(grep type "$T/typ0.yaml")"
"$PIPEREC" infer --input "$T/typ.jsonl" --labels 'type=click,type=cart|purchase,status=404|500,tags=sale' \
    --output "$T/typ.yaml" 2> "$T/err" || fail "infer labels by value: $(cat "$T/err")"
grep -q "400 events (0 skipped): event time, 4 labels, " "$T/err" || fail "by value: $(cat "$T/err")"
grep -q "warning" "$T/err" && fail "by value: a warning: $(cat "$T/err")"
for line in \
    '- { name: click, path: type, in: \[click\], default: 0 }   # 1 when type is click, else 0; type: strings, in 8[0-9]% of events, 5 distinct$' \
    '- { name: cart_2, path: type, in: \[cart, purchase\], default: 0 }   # 1 when type is cart or purchase, else 0' \
    '- { name: "404", path: status, in: \[404, 500\] }   # 1 when status is 404 or 500, else 0; status: integers' \
    '- { name: sale, path: tags, in: \[sale\], default: 0 }' \
    '- { name: cart, path: cart, ' \
    '#   type: the field of --labels type=click: no input (it would leak the answer)' \
    '#   status: the field of --labels status=404|500: no input' \
    '#   tags: the field of --labels tags=sale: no input'; do
    grep -q -- "$line" "$T/typ.yaml" || fail "by value: no line with '$line' in: $(cat "$T/typ.yaml")"
done
grep -n 'in: \[' "$T/typ.yaml" | sed -n 1p | grep -q 'name: click' || fail "by value: order"
grep -E 'path: (type|status|tags)[,}]' "$T/typ.yaml" | grep -v 'in: \[' &&
    fail "by value: the answer's field is an input too"
"$PIPEREC" run --config "$T/typ.yaml" --check > "$T/check" 2>&1 || fail "run --check: $(cat "$T/check")"
"$PIPEREC" process --config "$T/typ.yaml" --input "$T/typ.jsonl" --output "$T/tout" 2> "$T/perr" ||
    fail "process by value: $(cat "$T/perr")"
grep -q "400 rows, 0 rejected" "$T/perr" || fail "process by value: $(cat "$T/perr")"
/usr/bin/python3 - "$T/typ.jsonl" "$T/tout/labels.npy" <<'PY' || fail "labels by value differ"
import ast, json, struct, sys
raw = open(sys.argv[2], "rb").read()
hlen = struct.unpack("<H", raw[8:10])[0]
head = ast.literal_eval(raw[10:10 + hlen].decode())
assert head["descr"] == "<f4" and not head["fortran_order"], head
rows, cols = head["shape"]
got = struct.unpack("<%df" % (rows * cols), raw[10 + hlen:])
labels = [("type", ["click"]), ("type", ["cart", "purchase"]), ("status", [404, 500]),
          ("tags", ["sale"])]
evs = [json.loads(l) for l in open(sys.argv[1])]
assert (rows, cols) == (len(evs), len(labels)), (rows, cols)
for r, e in enumerate(evs):
    for c, (path, vals) in enumerate(labels):
        v = e.get(path)
        want = float(any(x in vals for x in v) if isinstance(v, list) else v in vals)
        if got[r * cols + c] != want:
            sys.exit("event %d label %d: got %s, want %s (%s)" % (r, c, got[r * cols + c], want, e))
PY

# A value with ':' and '#' is quoted; a value no event holds is named in the
# comment and warned about on stderr; the config still loads.
"$PIPEREC" infer --input "$T/typ.jsonl" --labels 'type=click|a:b #c|nope|true' --output "$T/typ2.yaml" \
    2> "$T/err" || fail "infer by value 2: $(cat "$T/err")"
grep -q 'name: click, path: type, in: \[click, "a:b #c", nope, "true"\], default: 0 }.*; never in the sample: nope, true$' \
    "$T/typ2.yaml" || fail "by value quoting: $(cat "$T/typ2.yaml")"
grep -q "warning: --labels values no event of the sample holds .*: type=nope, type=true" "$T/err" ||
    fail "by value: no warning: $(cat "$T/err")"
"$PIPEREC" run --config "$T/typ2.yaml" --check > "$T/check" 2>&1 || fail "run --check 2: $(cat "$T/check")"
v65=$(seq -s '|' 0 64)
refuse "--labels: no event has the field 'typ' (typ=click)" --input "$T/typ.jsonl" --labels typ=click
refuse "--labels: 'type=': an empty value" --input "$T/typ.jsonl" --labels type=
refuse "--labels: 'type=a||b': an empty value" --input "$T/typ.jsonl" --labels 'type=a||b'
refuse "--labels: 'status=$(seq -s '|' 0 40)|...': more than 64 values" --input "$T/typ.jsonl" \
    --labels "status=$v65"
refuse "--labels: 'status' is given as a label and by value ('status=404')" --input "$T/typ.jsonl" \
    --labels status,status=404
refuse "--labels: 'status=1|true': a value listed twice ('true')" --input "$T/typ.jsonl" \
    --labels 'status=1|true'
refuse "--labels: 'ctx=ios' cannot be a label: an object" --input "$T/typ.jsonl" --labels ctx=ios
refuse "--labels: an empty or over-long path" --input "$T/typ.jsonl" --labels =click

# Refusals: exit 2, the option named.
refuse "--input is required"
refuse "cannot open --input" --input "$T/nope.jsonl"
refuse "--rows: want a whole number" --input "$T/ev1k.jsonl" --rows 0
refuse "--kafka-properties $T/bad.properties:1: want KEY=VALUE" --input "$T/ev1k.jsonl" \
    --kafka-properties "$T/bad.properties"
refuse "cannot open --kafka-properties" --input "$T/ev1k.jsonl" --kafka-properties "$T/none"
refuse "--labels: no event has the field 'label.clicks'" --input "$T/ev1k.jsonl" --labels label.clicks
refuse "--time: 'user.id' cannot be the event time: not a time" --input "$T/ev1k.jsonl" --time user.id
refuse "--name: want 1..63 of A-Z a-z 0-9 _ -, got 'a:b'" --input "$T/ev1k.jsonl" --name a:b
refuse "--topic: want 1..249 of" --input "$T/ev1k.jsonl" --topic 'a,b'
refuse "--bootstrap: want HOST:PORT" --input "$T/ev1k.jsonl" --bootstrap 'h"'
refuse "--time: 'event_id' cannot be the event time" --input "$T/ev1k.jsonl" --time event_id
printf 'a,b,c\n1,2,3\n' > "$T/csv"
refuse "no event to learn from (2 records do not read as events)" --input "$T/csv"
echo "infer: ok"
