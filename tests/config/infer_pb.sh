#!/bin/sh
# infer_pb.sh — `piperec infer --descriptor-set --message` (config/config_infer_pb.c):
# the generated clickstream as Protobuf messages (tests/data/pbuser_clickstream.proto)
# gives the features the same events give as JSON lines, in a config that reads
# format protobuf with the descriptor set; `process` runs that config over the
# Protobuf file with no reject into the arrays the JSON config makes of the
# JSON file; every field type, maps, oneof, enums and repeated messages
# (tests/data/pbuser_types.proto, written by Python's protobuf) infer a config
# that reads them with no reject; registry-framed messages are read (framing:
# auto); a message that does not decode is skipped, and a descriptor set or
# message that does not load, or the options misused, are refused (exit 2).
# Environment (pr_script_test): PIPEREC, PR_SOURCE_DIR, PR_TMP.
set -eu
. "$PR_SOURCE_DIR/tests/config/infer_lib.sh"
T=$PR_TMP
desc=$T/click.desc
protoc --descriptor_set_out="$desc" --include_imports -I "$PR_SOURCE_DIR/tests/data" \
    pbuser_clickstream.proto || fail "protoc"
pb() { "$PIPEREC" infer --descriptor-set "$desc" --message shop.Click "$@"; }

"$PIPEREC" gen --format json --rows 3000 --seed 4 --output "$T/ev.jsonl" 2>/dev/null
"$PIPEREC" gen --format protobuf --descriptor-set "$desc" --message shop.Click --rows 3000 \
    --seed 4 --output "$T/ev.pb" 2>/dev/null
"$PIPEREC" infer --input "$T/ev.jsonl" --output "$T/json.yaml" 2> "$T/err" ||
    fail "infer json: $(cat "$T/err")"
pb --input "$T/ev.pb" --output "$T/pb.yaml" 2> "$T/err" || fail "infer pb: $(cat "$T/err")"
grep -q "^piperec infer: 3000 events (0 skipped): event time, [1-9] labels, " "$T/err" ||
    fail "pb summary: $(cat "$T/err")"
grep -q '^      format: protobuf$' "$T/pb.yaml" || fail "no format protobuf: $(cat "$T/pb.yaml")"
grep -qF "protobuf: { descriptor_set: \"$desc\", message: \"shop.Click\" }" "$T/pb.yaml" ||
    fail "no protobuf source: $(cat "$T/pb.yaml")"
grep -q 'format: json' "$T/pb.yaml" && fail "format json in the protobuf config"

# The schema part (schema: up to transform:) is the JSON config's, line for
# line and in the same order, comments (what was seen) included, with one
# legitimate difference: Protobuf has no absent list (a repeated field not
# on the wire is empty, as the reader reads it: length 0), so where a JSON
# event leaves history or item.tags out the message has an empty list, and
# those two comments say "in 100% of events" where JSON's say less. proto3
# fields not on the wire (click 0, page 0) are their default, as the reader
# gives them, and `optional` ones (purchase, age_days) absent, as in JSON.
schema "$T/json.yaml" > "$T/json.schema"
schema "$T/pb.yaml" > "$T/pb.schema"
[ -s "$T/pb.schema" ] || fail "no schema part in $(cat "$T/pb.yaml")"
for line in \
    'event_time: { path: ts, unit: ms }   # ms, in 100% of events' \
    '- { name: click, path: label.click }   # 0/1, mean 0.3653, in 100% of events' \
    '- { name: purchase, path: label.purchase, default: 0 }   # 0/1, mean 0.0576, in 71% of events' \
    '- { name: age_days, path: user.age_days, ops: [log1p] }   # integers 1..3645, mean 1879.43, std 1071.57, in 90% of events' \
    '- { name: user_id, path: user.id, ops: [vocab] }   # strings, in 100% of events, 2750 distinct' \
    '- { name: item_id, path: item.id, ops: [vocab] }   # integers, in 100% of events, 2640 distinct' \
    '- { name: device, path: context.device, ops: [vocab] }   # strings, in 95% of events' \
    '- { name: page, path: context.page, ops: [vocab] }   # integers, in 95% of events'; do
    grep -qF -- "$line" "$T/pb.schema" || fail "pb config lacks '$line': $(cat "$T/pb.schema")"
done
for list in 'path: item.tags, list: { max_len: 3' 'path: history, list: { max_len: 20'; do
    grep -F -- "$list" "$T/pb.schema" | grep -qF "# lists of " ||
        fail "pb config lacks '$list': $(cat "$T/pb.schema")"
    grep -F -- "$list" "$T/pb.schema" | grep -qF " in 100% of events, length p99 " ||
        fail "'$list': not in every message: $(cat "$T/pb.schema")"
done
lists() { sed -E '/ path: (item\.tags|history), list:/s/in [0-9]+% of events/in N% of events/' "$1"; }
lists "$T/json.schema" > "$T/json.norm"
lists "$T/pb.schema" > "$T/pb.norm"
cmp -s "$T/json.norm" "$T/pb.norm" ||
    fail "schema lines differ: $(diff "$T/json.schema" "$T/pb.schema" || true)"

# It runs: the Protobuf config over the Protobuf file, every message a row,
# none rejected, the same arrays as the JSON config over the JSON file (the
# same schema lines in the same order: dense.npy too; an absent JSON list and
# an empty one read alike).
"$PIPEREC" process --config "$T/json.yaml" --input "$T/ev.jsonl" --output "$T/oj" 2> "$T/perr" ||
    fail "process json: $(cat "$T/perr")"
grep -q "^piperec process: 3000 rows, 0 rejected" "$T/perr" || fail "process json: $(cat "$T/perr")"
"$PIPEREC" process --config "$T/pb.yaml" --input "$T/ev.pb" --output "$T/op" 2> "$T/perr" ||
    fail "process pb: $(cat "$T/perr")"
grep -q "^piperec process: 3000 rows, 0 rejected" "$T/perr" || fail "process pb: $(cat "$T/perr")"
n=0
for f in labels.npy dense.npy $(cd "$T/oj" && ls sparse/*.npy vocab/*.tsv); do
    [ -s "$T/oj/$f" ] || fail "no $f"
    cmp "$T/oj/$f" "$T/op/$f" || fail "$f: the Protobuf run differs from the JSON run"
    n=$((n + 1))
done
[ "$n" -ge 16 ] || fail "only $n files compared"

# --rows from stdin: the first N messages.
pb --input - --rows 1000 < "$T/ev.pb" > /dev/null 2> "$T/err" || fail "--rows: $(cat "$T/err")"
grep -q "^piperec infer: 1000 events (0 skipped)" "$T/err" || fail "--rows: $(cat "$T/err")"

# Registry-framed messages (gen --schema-id): framing auto reads them, as
# the config's reader does; naming another message of the file, none decodes.
"$PIPEREC" gen --format protobuf --descriptor-set "$desc" --message shop.Click --rows 500 \
    --seed 4 --schema-id 7 --output "$T/framed.pb" 2>/dev/null
pb --input "$T/framed.pb" --output "$T/framed.yaml" 2> "$T/err" || fail "framed: $(cat "$T/err")"
grep -q "^piperec infer: 500 events (0 skipped)" "$T/err" || fail "framed: $(cat "$T/err")"
"$PIPEREC" process --config "$T/framed.yaml" --input "$T/framed.pb" --output "$T/ofr" \
    2> "$T/perr" || fail "process framed: $(cat "$T/perr")"
grep -q "^piperec process: 500 rows, 0 rejected" "$T/perr" || fail "framed: $(cat "$T/perr")"

# A corrupt message first (length 4: event_id, then a string length that
# never ends) is skipped and the next read; a length beyond the end of the
# file is counted and ends the input. Exit 0, the same config.
{
    printf '\004\012\377\377\377'
    cat "$T/ev.pb"
    printf '\177abc'
} > "$T/bad.pb"
pb --input "$T/bad.pb" --output "$T/bad.yaml" 2> "$T/err" ||
    fail "corrupt messages: exit $?: $(cat "$T/err")"
grep -q "^piperec infer: 3000 events (2 skipped)" "$T/err" || fail "corrupt: $(cat "$T/err")"
schema "$T/bad.yaml" | cmp -s - "$T/pb.schema" ||
    fail "the corrupt messages changed the schema"

# Every type the reader reads: scalars of each encoding, enums (an unnamed
# number too), bytes, packed and unpacked lists, repeated messages, maps of
# strings, messages and doubles, a oneof, proto3 optional. Presence is the
# reader's: inner.c (implicit) in every message holding inner, opt and the
# oneof members (explicit) where set, items.c (never set) the enum's 0 value
# in each element; a uint64 above 2^63 - 1 its int64 bits. The config
# inferred reads the same messages with no reject.
protoc --descriptor_set_out="$T/types.desc" --include_imports -I "$PR_SOURCE_DIR/tests/data" \
    pbuser_types.proto || fail "protoc types"
shares=$(/usr/bin/python3 - "$T/types.desc" "$T/all.pb" <<'PY'
import os, random, sys
sys.path.insert(0, os.path.join(os.environ["PR_SOURCE_DIR"], "tests", "config"))
from records import message_class, uvarint as varint
cls = message_class(sys.argv[1], "t3.All")
r = random.Random(1)
seen = {"inner": 0, "opt": 0, "one_n": 0, "one_s": 0}
with open(sys.argv[2], "wb") as out:
    for i in range(600):
        m = cls()
        m.i32, m.i64, m.u32 = r.randint(-999, 999), r.randint(-2**40, 2**40), r.randint(0, 2**32 - 1)
        m.u64 = r.choice([r.randint(0, 999), 2**64 - 1 - r.randint(0, 999)])  # int64 bits
        m.s32, m.s64, m.f32 = r.randint(-50, 50), r.randint(-5000, 5000), r.randint(0, 2**32 - 1)
        m.f64, m.sf32, m.sf64 = r.randint(0, 2**63), r.randint(-99, 99), r.randint(-10**12, 10**12)
        m.fl, m.db, m.b = r.random() * 100, r.gauss(5, 2), r.random() < .3
        m.str, m.by = "s%d" % r.randint(0, 200), bytes(r.randint(0, 255) for _ in range(3))
        m.color = r.choice([0, 1, 2, 7])
        if r.random() < .5:
            m.opt = r.randint(0, 9)
        if r.random() < .8:
            m.inner.n, m.inner.s, m.inner.c = r.randint(0, 3), "in%d" % r.randint(0, 60), r.choice([0, 1, 2])
        m.packed.extend(r.randint(0, 500) for _ in range(r.randint(0, 5)))
        m.unpacked.extend(r.randint(0, 500) for _ in range(r.randint(0, 5)))
        m.names.extend("n%d" % r.randint(0, 90) for _ in range(r.randint(0, 4)))
        for _ in range(r.randint(0, 3)):
            it = m.items.add()
            it.n, it.s = r.randint(0, 300), "it%d" % r.randint(0, 99)
        m.attrs["color"] = r.choice(["red", "blue", "green"])
        m.objs["a"].n, m.objs["a"].s = r.randint(0, 1000), "o%d" % r.randint(0, 80)
        m.scores[-3], m.scores[7] = r.random(), r.random() * 10
        if r.random() < .5:
            m.one_s = "x%d" % r.randint(0, 70)
        else:
            m.one_n = r.randint(0, 400)
        m.colors.extend(r.choice([0, 1, 2]) for _ in range(r.randint(0, 3)))
        for f in seen:
            seen[f] += m.HasField(f)
        b = m.SerializeToString()
        out.write(varint(len(b)) + b)
print(" ".join("%.0f" % (100.0 * n / 600) for n in seen.values()))
PY
) || fail "python encoder"
set -- $shares # the shares of messages holding inner, opt, one_n, one_s
"$PIPEREC" infer --input "$T/all.pb" --descriptor-set "$T/types.desc" --message t3.All \
    --time none --output "$T/all.yaml" 2> "$T/err" || fail "infer types: $(cat "$T/err")"
grep -q "^piperec infer: 600 events (0 skipped)" "$T/err" || fail "types: $(cat "$T/err")"
for line in \
    'path: u64, ops: .*   # integers -[0-9]' \
    'path: color, ops: \[vocab\] }   # strings and integers' \
    "path: inner.c, ops: \\[vocab\\] }   # strings, in $1% of events, 3 distinct" \
    'path: items.n, list: { max_len: 3 }, ops: \[vocab\] }   # lists of integers (a field of a list of objects)' \
    'path: items.c, list: { max_len: 3 }, ops: \[vocab\] }   # lists of strings (a field of a list of objects), .*, e.g. "COLOR_NONE"' \
    'path: packed, list: { max_len: 5 }' \
    'path: unpacked, list: { max_len: 5 }' \
    'path: colors, list: { max_len: 3 }, ops: \[vocab\] }   # lists of strings' \
    'path: attrs.color, ops: \[vocab\] }   # strings, in 100% of events, 3 distinct' \
    'path: objs.a.s, ops: \[vocab\] }   # strings, in 100% of events' \
    'path: scores.-3, ops: ' \
    "path: one_n, ops: .* in $3% of events" \
    "path: one_s, ops: .* in $4% of events" \
    "path: opt, ops: \\[vocab\\] }   # integers, in $2% of events" \
    'path: b, ops: \[vocab\] }   # true/false' \
    '#   items.tags: a list inside a list of objects'; do
    grep -q -- "$line" "$T/all.yaml" || fail "types config lacks '$line': $(cat "$T/all.yaml")"
done
"$PIPEREC" process --config "$T/all.yaml" --input "$T/all.pb" --output "$T/oall" 2> "$T/perr" ||
    fail "process types: $(cat "$T/perr")"
grep -q "^piperec process: 600 rows, 0 rejected" "$T/perr" || fail "types: $(cat "$T/perr")"

# Labels by value on enums (the reader gives their names as strings): an
# enum of a nested message, a repeated enum (any element), a field whose
# unnamed number is an integer beside the names; the labels process gives
# are those Python computes from the messages.
"$PIPEREC" infer --input "$T/all.pb" --descriptor-set "$T/types.desc" --message t3.All \
    --time none --labels 'inner.c=RED|GREEN,colors=RED,color=GREEN' --output "$T/lab.yaml" \
    2> "$T/err" || fail "infer labels by value: $(cat "$T/err")"
for line in \
    '- { name: RED, path: inner.c, in: \[RED, GREEN\], default: 0 }   # 1 when inner.c is RED or GREEN, else 0; inner.c: strings' \
    '- { name: RED_2, path: colors, in: \[RED\] }' \
    '- { name: GREEN, path: color, in: \[GREEN\] }   # 1 when color is GREEN, else 0; color: strings and numbers' \
    '#   inner.c: the field of --labels inner.c=RED|GREEN: no input'; do
    grep -q -- "$line" "$T/lab.yaml" || fail "by value: no line with '$line' in: $(cat "$T/lab.yaml")"
done
"$PIPEREC" process --config "$T/lab.yaml" --input "$T/all.pb" --output "$T/olab" 2> "$T/perr" ||
    fail "process by value: $(cat "$T/perr")"
grep -q "^piperec process: 600 rows, 0 rejected" "$T/perr" || fail "by value: $(cat "$T/perr")"
/usr/bin/python3 - "$T/types.desc" "$T/all.pb" "$T/olab/labels.npy" <<'PY' || fail "labels by value differ"
import ast, os, struct, sys
sys.path.insert(0, os.path.join(os.environ["PR_SOURCE_DIR"], "tests", "config"))
from records import message_class
cls = message_class(sys.argv[1], "t3.All")
data, at, msgs = open(sys.argv[2], "rb").read(), 0, []
while at < len(data):
    n = shift = 0
    while True:
        b = data[at]; at += 1
        n |= (b & 0x7f) << shift; shift += 7
        if not b & 0x80:
            break
    m = cls(); m.ParseFromString(data[at:at + n]); msgs.append(m); at += n
raw = open(sys.argv[3], "rb").read()
hlen = struct.unpack("<H", raw[8:10])[0]
rows, cols = ast.literal_eval(raw[10:10 + hlen].decode())["shape"]
got = struct.unpack("<%df" % (rows * cols), raw[10 + hlen:])
assert (rows, cols) == (len(msgs), 3), (rows, cols)
for r, m in enumerate(msgs):
    want = [m.HasField("inner") and m.inner.c in (1, 2), 1 in m.colors, m.color == 2]
    if list(got[r * 3:r * 3 + 3]) != [float(w) for w in want]:
        sys.exit("message %d: got %s, want %s" % (r, got[r * 3:r * 3 + 3], want))
PY

# A message of 70 optional fields (2 set per event) stays a message (its
# fields are dense features, those set), and a map<string, double> of 2..8
# keys of 120 is a map (list: { from: keys }): the descriptor says which.
{
    echo 'syntax = "proto3"; package wd; message F {'
    i=0; while [ $i -lt 70 ]; do echo "  optional double x$i = $((i + 1));"; i=$((i + 1)); done
    echo '} message W { int64 click = 1; F f = 2; map<string, double> m = 3; }'
} > "$T/wide.proto"
protoc --descriptor_set_out="$T/wide.desc" --include_imports -I "$T" wide.proto ||
    fail "protoc wide"
/usr/bin/python3 - "$T/wide.desc" "$T/wide.pb" <<'PY' || fail "python wide encoder"
import os, random, sys
sys.path.insert(0, os.path.join(os.environ["PR_SOURCE_DIR"], "tests", "config"))
from records import message_class, write_delimited
cls, r, bodies = message_class(sys.argv[1], "wd.W"), random.Random(5), []
for i in range(400):
    m = cls()
    m.click = i % 2
    for k in r.sample(range(70), 2):
        setattr(m.f, "x%d" % k, r.random())
    for _ in range(r.randint(2, 8)):
        m.m["c%d" % r.randrange(120)] = r.random()
    bodies.append(m.SerializeToString())
write_delimited(sys.argv[2], bodies)
PY
"$PIPEREC" infer --input "$T/wide.pb" --descriptor-set "$T/wide.desc" --message wd.W \
    --time none --output "$T/wide.yaml" 2> "$T/err" || fail "infer wide: $(cat "$T/err")"
grep -q "^piperec infer: 400 events (0 skipped)" "$T/err" || fail "wide: $(cat "$T/err")"
grep -q 'path: m, list: { max_len: [0-9]*, from: keys }' "$T/wide.yaml" ||
    fail "the map is not read by its keys: $(cat "$T/wide.yaml")"
grep -q 'path: f\.x[0-9]*' "$T/wide.yaml" || fail "no field of f: $(cat "$T/wide.yaml")"
grep -q 'path: f,' "$T/wide.yaml" && fail "the message read as a map: $(cat "$T/wide.yaml")"
"$PIPEREC" process --config "$T/wide.yaml" --input "$T/wide.pb" --output "$T/owide" \
    2> "$T/perr" || fail "process wide: $(cat "$T/perr")"
grep -q "^piperec process: 400 rows, 0 rejected" "$T/perr" || fail "wide: $(cat "$T/perr")"

# google.protobuf.Timestamp fields are read whole, as the reader reads a
# path naming one: their RFC 3339 text (the nanos kept, to the
# microsecond), so ts is the event time in unit rfc3339 and joined, another
# Timestamp, an age in rfc3339 (no feature of their seconds or nanos); a
# Duration is its seconds, a number; a Timestamp out of range in some
# messages (odd) is left out with bad_time. The config then processes the
# messages, every one a row. A Timestamp no time word names (happened) is a
# time by its type: the event time when no time-named field is.
cat > "$T/tsm.proto" <<'P'
syntax = "proto3"; package tsm;
import "google/protobuf/timestamp.proto"; import "google/protobuf/duration.proto";
message E { google.protobuf.Timestamp ts = 1; string user = 2; google.protobuf.Timestamp joined = 3;
            google.protobuf.Duration dwell = 4; google.protobuf.Timestamp odd = 5; }
message F { google.protobuf.Timestamp happened = 1; string user = 2; }
P
protoc --descriptor_set_out="$T/tsm.desc" --include_imports -I "$T" tsm.proto || fail "protoc tsm"
/usr/bin/python3 - "$T/tsm.desc" "$T/tsm.pb" "$T/tsf.pb" <<'PY' || fail "python timestamp encoder"
import os, random, sys
sys.path.insert(0, os.path.join(os.environ["PR_SOURCE_DIR"], "tests", "config"))
from records import message_class, write_delimited
cls, r, bodies = message_class(sys.argv[1], "tsm.E"), random.Random(6), []
for i in range(300):
    m = cls()
    m.ts.seconds, m.ts.nanos = 1700000000 + 37 * i, r.randrange(10**9)
    m.user = "u%d" % r.randrange(40)
    m.joined.seconds = m.ts.seconds - r.randrange(10**7)
    m.dwell.seconds, m.dwell.nanos = r.randrange(600), r.randrange(10**9)
    m.odd.seconds, m.odd.nanos = m.ts.seconds, -1 if i % 10 == 0 else 0
    bodies.append(m.SerializeToString())
write_delimited(sys.argv[2], bodies)
cls, bodies = message_class(sys.argv[1], "tsm.F"), []
for i in range(200):
    m = cls()
    m.happened.seconds, m.happened.nanos = 1700000000 + 11 * i, r.randrange(10**9)
    m.user = "u%d" % r.randrange(30)
    bodies.append(m.SerializeToString())
write_delimited(sys.argv[3], bodies)
PY
"$PIPEREC" infer --input "$T/tsm.pb" --descriptor-set "$T/tsm.desc" --message tsm.E \
    --output "$T/tsm.yaml" 2> "$T/err" || fail "infer timestamps: $(cat "$T/err")"
grep -q 'event_time: { path: ts, unit: rfc3339 }   # rfc3339, in 100% of events, e.g. "2023-11-14T22:13:20\.[0-9]*Z"' \
    "$T/tsm.yaml" || fail "a Timestamp is not the event time: $(cat "$T/tsm.yaml")"
grep -q '{ name: joined_age, path: joined, ops: \[{ age: rfc3339 }, { clip: \[0, 1e9\] }, log1p\] }' \
    "$T/tsm.yaml" || fail "joined is not an age: $(cat "$T/tsm.yaml")"
grep -q '{ name: dwell, path: dwell, ' "$T/tsm.yaml" || fail "dwell: $(cat "$T/tsm.yaml")"
grep -q '#   odd: a Timestamp or Duration out of its range in 30 values (bad_time)' "$T/tsm.yaml" ||
    fail "odd: $(cat "$T/tsm.yaml")"
grep -v '^ *#' "$T/tsm.yaml" | grep -q 'path: [^ ,]*\.\(seconds\|nanos\)[ ,}]' &&
    fail "a feature of a Timestamp's fields: $(cat "$T/tsm.yaml")"
"$PIPEREC" process --config "$T/tsm.yaml" --input "$T/tsm.pb" --output "$T/otsm" \
    2> "$T/perr" || fail "process timestamps: $(cat "$T/perr")"
grep -q "^piperec process: 300 rows, 0 rejected" "$T/perr" || fail "tsm: $(cat "$T/perr")"
"$PIPEREC" infer --input "$T/tsf.pb" --descriptor-set "$T/tsm.desc" --message tsm.F \
    --output "$T/tsf.yaml" 2> "$T/err" || fail "infer happened: $(cat "$T/err")"
grep -q 'event_time: { path: happened, unit: rfc3339 }' "$T/tsf.yaml" ||
    fail "a Timestamp named happened is not the event time: $(cat "$T/tsf.yaml")"
"$PIPEREC" process --config "$T/tsf.yaml" --input "$T/tsf.pb" --output "$T/otsf" \
    2> "$T/perr" || fail "process happened: $(cat "$T/perr")"
grep -q "^piperec process: 200 rows, 0 rejected" "$T/perr" || fail "tsf: $(cat "$T/perr")"

# Refusals, exit 2 with the reason.
refuse "$T/none.desc: No such file" --input "$T/ev.pb" --descriptor-set "$T/none.desc" \
    --message shop.Click
refuse "$T/ev.jsonl: not a FileDescriptorSet" --input "$T/ev.pb" --descriptor-set "$T/ev.jsonl" \
    --message shop.Click
refuse "message Click is not in $desc (give the full name: shop.Click)" --input "$T/ev.pb" \
    --descriptor-set "$desc" --message Click
refuse "--descriptor-set and --message go together" --input "$T/ev.pb" --descriptor-set "$desc"
refuse "--descriptor-set and --message go together" --input "$T/ev.pb" --message shop.Click
refuse "--avro-schema and --descriptor-set/--message exclude each other" --input "$T/ev.pb" \
    --descriptor-set "$desc" --message shop.Click --avro-schema "$PR_SOURCE_DIR/examples/clickstream.avsc"
refuse "no message of $T/framed.pb decodes as shop.View" --input "$T/framed.pb" \
    --descriptor-set "$desc" --message shop.View
echo "infer_pb: ok"
