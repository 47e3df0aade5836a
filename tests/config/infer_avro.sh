#!/bin/sh
# infer_avro.sh — `piperec infer --avro-schema` (config/config_infer_avro.c):
# the generated clickstream as Avro records gives the features the same events
# give as JSON lines, in a config that reads format avro with the schema file;
# `process` runs that config over the Avro file with no reject into the arrays
# the JSON config makes of the JSON file; a record that does not decode is
# skipped (the next one read when its length was readable), corrupt bytes
# inside records are skipped without a crash, nesting is counted as the reader
# counts it (a union no level), a schema that does not load is refused, and
# registry-framed records are read behind the header (framing: registry);
# a wide record stays a record and a map a map, as the writer schema says;
# labels by value (--labels context.device=ios|android) as from JSON.
# Environment (pr_script_test): PIPEREC, PR_SOURCE_DIR, PR_TMP.
set -eu
. "$PR_SOURCE_DIR/tests/config/infer_lib.sh"
T=$PR_TMP
avsc=$PR_SOURCE_DIR/examples/clickstream.avsc

"$PIPEREC" gen --format json --rows 3000 --seed 4 --output "$T/ev.jsonl" 2>/dev/null
"$PIPEREC" gen --format avro --avro-schema "$avsc" --schema-id plain --rows 3000 --seed 4 \
    --output "$T/ev.avro" 2>/dev/null
"$PIPEREC" infer --input "$T/ev.jsonl" --output "$T/json.yaml" 2> "$T/err" ||
    fail "infer json: $(cat "$T/err")"
"$PIPEREC" infer --input "$T/ev.avro" --avro-schema "$avsc" --output "$T/avro.yaml" 2> "$T/err" ||
    fail "infer avro: $(cat "$T/err")"
grep -q "3000 events (0 skipped): event time, 3 labels, 2 dense, 7 sparse (2 lists), 1 fields not used" \
    "$T/err" || fail "avro summary: $(cat "$T/err")"
grep -q '^      format: avro$' "$T/avro.yaml" || fail "no format avro: $(cat "$T/avro.yaml")"
grep -qF "avro: { schema_file: \"$avsc\" }" "$T/avro.yaml" || fail "no schema_file: $(cat "$T/avro.yaml")"
grep -q 'format: json' "$T/avro.yaml" && fail "format json in the avro config"

# The schema part (schema: up to transform:), feature by feature. The lines
# are the same, comments (what was seen) included: an Avro union's null branch
# is an absent value, as a JSON field left out. Only the order may differ:
# features are listed in the order their paths were first met, and the Avro
# record always carries user.age_days (null when unknown) where the first JSON
# event leaves it out, so age_days can come before price.
schema "$T/json.yaml" > "$T/json.schema"
schema "$T/avro.yaml" > "$T/avro.schema"
[ -s "$T/avro.schema" ] || fail "no schema part in $(cat "$T/avro.yaml")"
for line in \
    'event_time: { path: ts, unit: ms }   # ms, in 100% of events, e.g. 1732600000035' \
    '- { name: click, path: label.click }   # 0/1, mean 0.3653, in 100% of events' \
    '- { name: purchase, path: label.purchase, default: 0 }   # 0/1, mean 0.0576, in 71% of events' \
    '- { name: price, path: item.price, ops: [log1p] }' \
    '- { name: age_days, path: user.age_days, ops: [log1p] }   # integers 1..3645, mean 1879.43, std 1071.57, in 90% of events' \
    '- { name: user_id, path: user.id, ops: [vocab] }   # strings, in 100% of events, 2750 distinct' \
    '- { name: item_id, path: item.id, ops: [vocab] }   # integers, in 100% of events, 2640 distinct' \
    '- { name: tags, path: item.tags, list: { max_len: 3 }, ops: [vocab] }' \
    '- { name: device, path: context.device, ops: [vocab] }   # strings, in 95% of events' \
    '- { name: history, path: history, list: { max_len: 20, keep: last }, ops: [vocab] }   # lists of integers, in 92% of events, length p99 20 max 20, over 16384 distinct' \
    '#   event_id: 3000 distinct in 3000 values: an event id, not a feature'; do
    grep -qF -- "$line" "$T/json.schema" || fail "json config lacks '$line': $(cat "$T/json.schema")"
    grep -qF -- "$line" "$T/avro.schema" || fail "avro config lacks '$line': $(cat "$T/avro.schema")"
done
sort "$T/json.schema" > "$T/json.sorted"
sort "$T/avro.schema" > "$T/avro.sorted"
cmp -s "$T/json.sorted" "$T/avro.sorted" ||
    fail "schema lines differ: $(diff "$T/json.schema" "$T/avro.schema" || true)"

# It runs: the Avro config over the Avro file, every record a row, none
# rejected, the same labels, ids and lists as the JSON config over the JSON
# file (vocabularies built from the same values in the same order).
"$PIPEREC" process --config "$T/json.yaml" --input "$T/ev.jsonl" --output "$T/oj" 2> "$T/perr" ||
    fail "process json: $(cat "$T/perr")"
grep -q "^piperec process: 3000 rows, 0 rejected" "$T/perr" || fail "process json: $(cat "$T/perr")"
"$PIPEREC" process --config "$T/avro.yaml" --input "$T/ev.avro" --output "$T/oa" 2> "$T/perr" ||
    fail "process avro: $(cat "$T/perr")"
grep -q "^piperec process: 3000 rows, 0 rejected" "$T/perr" || fail "process avro: $(cat "$T/perr")"
n=0
for f in labels.npy $(cd "$T/oj" && ls sparse/*.npy vocab/*.tsv); do
    [ -s "$T/oj/$f" ] || fail "no $f"
    cmp "$T/oj/$f" "$T/oa/$f" || fail "$f: the Avro run differs from the JSON run"
    n=$((n + 1))
done
[ "$n" -ge 15 ] || fail "only $n files compared"
# dense.npy holds the dense features in the schema's order: with the Avro
# config's source and the JSON config's schema (the same lines, in the JSON
# order) the Avro file gives the JSON run's dense.npy byte for byte.
{
    sed -n '1,/^    schema:/p' "$T/avro.yaml" | sed '$d'
    sed -n '/^    schema:/,$p' "$T/json.yaml"
} > "$T/avro_json_order.yaml"
"$PIPEREC" process --config "$T/avro_json_order.yaml" --input "$T/ev.avro" --output "$T/oa2" \
    2> "$T/perr" || fail "process avro (json order): $(cat "$T/perr")"
grep -q "^piperec process: 3000 rows, 0 rejected" "$T/perr" || fail "json order: $(cat "$T/perr")"
cmp "$T/oj/dense.npy" "$T/oa2/dense.npy" || fail "dense.npy: the Avro run differs"
if cmp -s "$T/json.schema" "$T/avro.schema"; then
    cmp "$T/oj/dense.npy" "$T/oa/dense.npy" || fail "dense.npy differs under identical schemas"
fi

# --rows with Avro: the first N records.
"$PIPEREC" infer --input - --avro-schema "$avsc" --rows 1000 < "$T/ev.avro" > /dev/null 2> "$T/err" ||
    fail "--rows: $(cat "$T/err")"
grep -q "^piperec infer: 1000 events (0 skipped)" "$T/err" || fail "--rows: $(cat "$T/err")"

# A corrupt record first (length 4, then a string length that never ends) is
# skipped and the next read; a length beyond the end of the file is counted
# and ends the input. Exit 0, the same config.
{
    printf '\004\377\377\377\377'
    cat "$T/ev.avro"
    printf '\177abc'
} > "$T/bad.avro"
"$PIPEREC" infer --input "$T/bad.avro" --avro-schema "$avsc" --output "$T/bad.yaml" 2> "$T/err" ||
    fail "corrupt records: exit $?: $(cat "$T/err")"
grep -q "^piperec infer: 3000 events (2 skipped)" "$T/err" || fail "corrupt records: $(cat "$T/err")"
schema "$T/bad.yaml" | cmp -s - "$T/avro.schema" ||
    fail "the corrupt records changed the schema"

# Corrupt bytes inside records (config_infer_avro.c checks every length and
# count against the bytes left): 20 copies of a file, each with six records
# changed at offsets derived from k (a byte overwritten, bytes inserted, a
# negative block count and size, a bit flipped; the framing kept), and one
# whose first string claims 2^60 bytes. Never a crash or an allocation of
# what a corrupt varint claims (an ASan build runs these clean); exit 0 with
# some records skipped, or 2 only when nothing decodes.
"$PIPEREC" gen --format avro --avro-schema "$avsc" --schema-id plain --rows 200 --seed 4 \
    --output "$T/ev200.avro" 2>/dev/null
/usr/bin/python3 - "$T/ev200.avro" "$T/cor" <<'PY'
import os, sys
sys.path.insert(0, os.path.join(os.environ["PR_SOURCE_DIR"], "tests", "config"))
from records import uvarint
data = open(sys.argv[1], "rb").read()
recs, at = [], 0
while at < len(data):
    n = shift = 0
    while True:
        b = data[at]
        at += 1
        n |= (b & 0x7f) << shift
        shift += 7
        if not b & 0x80:
            break
    recs.append(bytearray(data[at:at + n]))
    at += n
def write(path, bodies):
    with open(path, "wb") as f:
        for r in bodies:
            f.write(uvarint(len(r)) + bytes(r))
for k in range(20):
    out = [bytearray(r) for r in recs]
    for i in range(6):
        r = out[(k * 37 + i * 61) % len(out)]
        off = (k * 13 + i * 29) % len(r)
        mode = (k + i) % 4
        if mode == 0:
            r[off] = 0xff - r[off] if r[off] != 0x7f else 0x81
        elif mode == 1:
            r[off:off] = b"\xff\xff\xff\xff\x0f\x81"
        elif mode == 2:
            r[off:off + 4] = b"\x81\x80\x80\x04"
        else:
            r[off] ^= 1 << (k % 8)
    write("%s.%d" % (sys.argv[2], k), out)
# event_id's length (one byte) replaced by the zigzag varint of 2^60
write("%s.huge" % sys.argv[2], [uvarint(2 ** 61) + recs[0][1:]] + recs[1:])
PY
for f in "$T"/cor.*; do
    if "$PIPEREC" infer --input "$f" --avro-schema "$avsc" --output /dev/null 2> "$T/err"; then
        grep -Eq "^piperec infer: [0-9]+ events \([1-9][0-9]* skipped\)" "$T/err" ||
            fail "$f: no record skipped: $(cat "$T/err")"
    else
        rc=$?
        [ "$rc" -eq 2 ] && grep -qF "no record of $f decodes" "$T/err" ||
            fail "$f: exit $rc: $(cat "$T/err")"
    fi
done
"$PIPEREC" infer --input "$T/cor.huge" --avro-schema "$avsc" --output /dev/null 2> "$T/err" ||
    fail "2^60-byte string: exit $?: $(cat "$T/err")"
grep -q "^piperec infer: 199 events (1 skipped)" "$T/err" || fail "2^60-byte string: $(cat "$T/err")"

# Nesting is counted as the reader counts it (pr__read: a record's fields one
# level deeper, a union none): 40 optional records one inside the next (41
# levels to the innermost long, 81 by a count that takes each union as a
# level) are events, and process reads them with the config.
/usr/bin/python3 - "$T/deep" <<'PY'
import json, sys
def rec(i):
    t = "long" if i == 40 else ["null", rec(i + 1)]
    return {"type": "record", "name": "R%d" % i, "fields": [{"name": "a", "type": t}]}
top = rec(0)
top["fields"].append({"name": "id", "type": "string"})
json.dump(top, open(sys.argv[1] + ".avsc", "w"))
with open(sys.argv[1] + ".avro", "wb") as f:
    for k in range(50):  # a = branch 1 forty times, then the long k; id "u" + digit
        body = b"\x02" * 40 + bytes([2 * k]) + b"\x04u" + bytes([48 + k % 10])
        f.write(bytes([len(body)]) + body)
PY
"$PIPEREC" infer --input "$T/deep.avro" --avro-schema "$T/deep.avsc" --output "$T/deep.yaml" \
    2> "$T/err" || fail "40 nested records: $(cat "$T/err")"
grep -q "^piperec infer: 50 events (0 skipped)" "$T/err" || fail "40 nested records: $(cat "$T/err")"
grep -q "path: a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a\.a," \
    "$T/deep.yaml" || fail "no feature at the innermost long: $(cat "$T/deep.yaml")"
"$PIPEREC" process --config "$T/deep.yaml" --input "$T/deep.avro" --output "$T/odeep" 2> "$T/perr" ||
    fail "process 40 nested records: $(cat "$T/perr")"
grep -q "^piperec process: 50 rows, 0 rejected" "$T/perr" || fail "process deep: $(cat "$T/perr")"
# The service's reader counts a skipped field's depth the same way: with only
# `id` read, the 40 nested records are skipped, not rejected as too_deep (they
# were, when a union counted as a level in pr__skip).
sed '/path: a\.a/d' "$T/deep.yaml" > "$T/deep_id.yaml"
grep -q "path: id" "$T/deep_id.yaml" || fail "no id feature: $(cat "$T/deep_id.yaml")"
"$PIPEREC" process --config "$T/deep_id.yaml" --input "$T/deep.avro" --output "$T/odeep_id" \
    2> "$T/perr" || fail "process deep, id only: $(cat "$T/perr")"
grep -q "^piperec process: 50 rows, 0 rejected" "$T/perr" || fail "process deep, id only: $(cat "$T/perr")"

# A NaN or an infinity (a double) and a string that is not UTF-8: the decoder
# rejects such a value at a feature's path only, so those fields are left out
# with the reason, every record is learnt, and process rejects none.
/usr/bin/python3 - "$T/odd" <<'PY'
import json, struct, sys
def uv(v):  # the file's length prefix: a plain varint
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    return bytes(out + bytes([v]))
def zz(v):  # Avro's zigzag long
    v = (v << 1) ^ (v >> 63)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    return bytes(out + bytes([v]))
json.dump({"type": "record", "name": "Odd", "fields": [
    {"name": "id", "type": "long"}, {"name": "score", "type": "double"},
    {"name": "s", "type": "string"}, {"name": "x", "type": "double"},
    {"name": "click", "type": "int"}]}, open(sys.argv[1] + ".avsc", "w"))
with open(sys.argv[1] + ".avro", "wb") as f:
    for i in range(200):
        score = float("nan") if i % 50 == 0 else (float("inf") if i == 7 else i * 0.5)
        sv = (b"\xff%d" % (i % 10)) if i % 10 == 0 else b"s%d" % (i % 13)
        body = (zz(i % 17) + struct.pack("<d", score) + zz(len(sv)) + sv +
                struct.pack("<d", (i % 9) - 4.0) + zz(i % 2))
        f.write(uv(len(body)) + body)
PY
"$PIPEREC" infer --input "$T/odd.avro" --avro-schema "$T/odd.avsc" --output "$T/odd.yaml" \
    2> "$T/err" || fail "odd values: $(cat "$T/err")"
grep -q "^piperec infer: 200 events (0 skipped)" "$T/err" || fail "odd values: $(cat "$T/err")"
grep -q "#   score: NaN or infinity in 5 values" "$T/odd.yaml" || fail "NaN: $(cat "$T/odd.yaml")"
grep -q "#   s: strings that are not UTF-8 in 20 values" "$T/odd.yaml" ||
    fail "not UTF-8: $(cat "$T/odd.yaml")"
"$PIPEREC" process --config "$T/odd.yaml" --input "$T/odd.avro" --output "$T/oodd" 2> "$T/perr" ||
    fail "process odd values: $(cat "$T/perr")"
grep -q "^piperec process: 200 rows, 0 rejected" "$T/perr" || fail "process odd: $(cat "$T/perr")"

# Labels by value on Avro strings (a nullable string under a nullable
# record, a nullable array): the same label lines as from the JSON events,
# the fields no input, and the same labels from process as the JSON run.
lv='context.device=ios|android,item.tags=sale|refurb,label.click=1'
"$PIPEREC" infer --input "$T/ev.jsonl" --labels "$lv" --output "$T/jlv.yaml" 2> "$T/err" ||
    fail "infer json by value: $(cat "$T/err")"
"$PIPEREC" infer --input "$T/ev.avro" --avro-schema "$avsc" --labels "$lv" --output "$T/alv.yaml" \
    2> "$T/err" || fail "infer avro by value: $(cat "$T/err")"
grep 'in: \[' "$T/alv.yaml" > "$T/alv.in"
grep 'in: \[' "$T/jlv.yaml" > "$T/jlv.in"
grep -q '^        - { name: ios, path: context.device, in: \[ios, android\], default: 0 }   # 1 when context.device is ios or android' \
    "$T/alv.in" || fail "avro by value: $(cat "$T/alv.yaml")"
grep -q '^        - { name: "1", path: label.click, in: \[1\] }' "$T/alv.in" ||
    fail "avro by value, an integer: $(cat "$T/alv.yaml")"
grep -q '#   context.device: the field of --labels context.device=ios|android: no input' \
    "$T/alv.yaml" || fail "avro by value: device is an input: $(cat "$T/alv.yaml")"
[ "$(wc -l < "$T/alv.in")" -eq 3 ] || fail "avro by value: not 3 labels: $(cat "$T/alv.in")"
cmp -s "$T/alv.in" "$T/jlv.in" || fail "by value lines differ: $(diff "$T/jlv.in" "$T/alv.in")"
"$PIPEREC" process --config "$T/jlv.yaml" --input "$T/ev.jsonl" --output "$T/ojlv" 2> "$T/perr" ||
    fail "process json by value: $(cat "$T/perr")"
"$PIPEREC" process --config "$T/alv.yaml" --input "$T/ev.avro" --output "$T/oalv" 2> "$T/perr" ||
    fail "process avro by value: $(cat "$T/perr")"
grep -q "^piperec process: 3000 rows, 0 rejected" "$T/perr" || fail "avro by value: $(cat "$T/perr")"
cmp "$T/ojlv/labels.npy" "$T/oalv/labels.npy" || fail "labels by value: Avro differs from JSON"

# Refusals, exit 2 with the reason: a schema that does not load, and
# registry-framed records (gen's default framing) under --avro-schema.
refuse "cannot read the writer schema $T/none.avsc" --input "$T/ev.avro" --avro-schema "$T/none.avsc"
echo '{"type": "recrod", "name": "X", "fields": []}' > "$T/bad.avsc"
refuse "$T/bad.avsc is not a usable Avro schema" --input "$T/ev.avro" --avro-schema "$T/bad.avsc"
echo '"long"' > "$T/long.avsc"
refuse "the top level of a writer schema must be a record" --input "$T/ev.avro" \
    --avro-schema "$T/long.avsc"
/usr/bin/python3 -c 'import sys; sys.stdout.buffer.write(bytes([5, 255, 255, 255, 255, 255]) * 20)' \
    > "$T/junk.avro"
refuse "no record of $T/junk.avro decodes under $avsc, plain or behind a schema-registry header" \
    --input "$T/junk.avro" --avro-schema "$avsc"

# Registry-framed records (gen's default framing, as Confluent's serializer
# writes them): read behind the header, the config says framing: registry,
# and process reads the same records into the same arrays as the plain ones.
"$PIPEREC" gen --format avro --avro-schema "$avsc" --rows 3000 --seed 4 --output "$T/framed.avro" \
    2>/dev/null
"$PIPEREC" infer --input "$T/framed.avro" --avro-schema "$avsc" --output "$T/framed.yaml" \
    2> "$T/err" || fail "framed: $(cat "$T/err")"
grep -q "^piperec infer: 3000 events (0 skipped)" "$T/err" || fail "framed: $(cat "$T/err")"
grep -q "framing: registry }" "$T/framed.yaml" || fail "no framing: registry: $(cat "$T/framed.yaml")"
"$PIPEREC" process --config "$T/framed.yaml" --input "$T/framed.avro" --output "$T/oframed" \
    2> "$T/perr" || fail "process framed: $(cat "$T/perr")"
grep -q "^piperec process: 3000 rows, 0 rejected" "$T/perr" || fail "process framed: $(cat "$T/perr")"
# A record of 70 fields stays a record (its fields are dense features), and a
# map beside it of 2..8 keys of 120 is a map (list: { from: keys }, weighted):
# the writer schema says which is which, whatever the counts of keys.
cat > "$T/wide.avsc" <<'J'
{"type": "record", "name": "W", "fields": [
 {"name": "click", "type": "long"},
 {"name": "f", "type": {"type": "record", "name": "F", "fields": [
J
i=0; while [ $i -lt 70 ]; do
    sep=","; [ $i -eq 69 ] && sep=""
    echo "  {\"name\": \"x$i\", \"type\": \"double\"}$sep" >> "$T/wide.avsc"; i=$((i + 1))
done
cat >> "$T/wide.avsc" <<'J'
 ]}},
 {"name": "m", "type": {"type": "map", "values": "double"}}]}
J
/usr/bin/python3 - "$T/wide.avsc" "$T/wide.avro" <<'PY' || fail "python avro writer"
import io, os, random, sys
import avro.io, avro.schema
sys.path.insert(0, os.path.join(os.environ["PR_SOURCE_DIR"], "tests", "config"))
from records import write_delimited
sch = avro.schema.parse(open(sys.argv[1]).read())
w, r, bodies = avro.io.DatumWriter(sch), random.Random(3), []
for i in range(400):
    rec = {"click": i % 2, "f": {"x%d" % k: r.random() for k in range(70)},
           "m": {"c%d" % r.randrange(120): r.random() for _ in range(r.randint(2, 8))}}
    b = io.BytesIO()
    w.write(rec, avro.io.BinaryEncoder(b))
    bodies.append(b.getvalue())
write_delimited(sys.argv[2], bodies)
PY
"$PIPEREC" infer --input "$T/wide.avro" --avro-schema "$T/wide.avsc" --time none \
    --output "$T/wide.yaml" 2> "$T/err" || fail "infer wide: $(cat "$T/err")"
grep -q "400 events (0 skipped): no event time, 1 labels, 70 dense, 1 sparse (1 lists)" "$T/err" ||
    fail "wide summary: $(cat "$T/err")"
grep -q 'path: m, list: { max_len: [0-9]*, from: keys }' "$T/wide.yaml" ||
    fail "the map is not read by its keys: $(cat "$T/wide.yaml")"
"$PIPEREC" process --config "$T/wide.yaml" --input "$T/wide.avro" --output "$T/owide" \
    2> "$T/perr" || fail "process wide: $(cat "$T/perr")"
grep -q "^piperec process: 400 rows, 0 rejected" "$T/perr" || fail "wide: $(cat "$T/perr")"
echo "infer_avro: ok"
