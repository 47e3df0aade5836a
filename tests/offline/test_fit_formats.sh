#!/bin/sh
# test_fit_formats.sh — `piperec process --fit` reads the events as
# `piperec process` does for every format a declared schema takes: the same
# clickstream (`piperec gen`, one seed) as JSON lines, as varint-delimited
# Avro records (examples/clickstream.avsc, plain) and as varint-delimited
# Protobuf messages (tests/data/pbuser_clickstream.proto's shop.Click) fits
# byte-identical output (two dense features; the run, with its --set lines,
# standardizes them),
# with a rejected record in each file (a malformed record in the binary
# ones, and a zero-length one: `empty`) counted and skipped; the summary
# says "records" for delimited input; an Avro object container file, a
# truncated record and a format --fit does not read are refused (exit 2)
# with the messages `piperec process` gives; a file whose every record is
# rejected fits nothing (exit 2) and names the format it expected.
# Env (from pr_script_test): PIPEREC, PR_SOURCE_DIR, PR_TMP.
set -eu
T="$PR_TMP"
N=1500
PY=/usr/bin/python3
AVSC="$PR_SOURCE_DIR/examples/clickstream.avsc"
fail() { echo "FAIL: $*" >&2; exit 1; }

protoc --descriptor_set_out="$T/click.desc" --include_imports -I "$PR_SOURCE_DIR/tests/data" \
    pbuser_clickstream.proto || fail "protoc"
"$PIPEREC" gen --format json --rows $N --seed 5 --output "$T/ev.jsonl"
"$PIPEREC" gen --format avro --avro-schema "$AVSC" --schema-id plain --rows $N --seed 5 \
    --output "$T/ev.avrof"
"$PIPEREC" gen --format protobuf --descriptor-set "$T/click.desc" --message shop.Click \
    --rows $N --seed 5 --output "$T/ev.pbd"
# one rejected record in each: a label that is not a number (JSON), a
# malformed record first and a zero-length one last (Avro, Protobuf)
printf '{"label": {"click": "x"}, "item": {"price": 1}}\n' >> "$T/ev.jsonl"
printf '\003\377\377\377' | cat - "$T/ev.avrof" > "$T/in.avrof"
printf '\000' >> "$T/in.avrof"
printf '\002\377\377' | cat - "$T/ev.pbd" > "$T/in.pbd"
printf '\000' >> "$T/in.pbd"

# the clickstream schema, with standardize steps on two dense features (the
# clickstream has no numeric list beside its ids for a weighted list's
# weights: test_fit.sh fits weights.ops; the decoder hands them over alike)
sed -n '/^    schema:/,/^    transform:/p' "$PR_SOURCE_DIR/examples/clickstream.yaml" | sed '$d' |
    sed 's/{ name: age_days, path: user.age_days, ops: \[ neg2zero, log1p \] }/{ name: age_days, path: user.age_days, ops: [ neg2zero, log1p, { standardize: { mean: 0, std: 1 } } ] }/' \
        > "$T/schema.yaml"
grep -q "age_days.*standardize" "$T/schema.yaml" || fail "schema: $(cat "$T/schema.yaml")"
config() { # name, format lines
    { printf 'pipelines:\n  - name: p\n    source:\n%s\n' "$2"; cat "$T/schema.yaml"; } > "$T/$1.yaml"
}
config json "      format: json"
config avro "      format: avro
      avro: { schema_file: \"$AVSC\" }"
config pb "      format: protobuf
      protobuf: { descriptor_set: \"$T/click.desc\", message: shop.Click }"

"$PIPEREC" process --config "$T/json.yaml" --input "$T/ev.jsonl" --fit > "$T/out.json" \
    2> "$T/err.json" || fail "fit json: $(cat "$T/err.json")"
"$PIPEREC" process --config "$T/avro.yaml" --input "$T/in.avrof" --fit > "$T/out.avro" \
    2> "$T/err.avro" || fail "fit avro: $(cat "$T/err.avro")"
"$PIPEREC" process --config "$T/pb.yaml" --input "$T/in.pbd" --fit --output "$T/out.pb" \
    2> "$T/err.pb" || fail "fit protobuf: $(cat "$T/err.pb")"
[ "$(grep -c '^[a-z_]*: { standardize: ' "$T/out.json")" -eq 2 ] ||
    fail "not 2 features fitted: $(cat "$T/out.json")"
cmp "$T/out.json" "$T/out.avro" || fail "--fit: Avro records != JSON lines"
cmp "$T/out.json" "$T/out.pb" || fail "--fit: Protobuf messages != JSON lines"
grep -q "^piperec process --fit: $((N + 1)) lines, 1 rejected (skipped)" "$T/err.json" ||
    fail "json summary: $(cat "$T/err.json")"
for f in avro pb; do
    grep -q "^piperec process --fit: $((N + 2)) records, 2 rejected (skipped), 0 filtered" \
        "$T/err.$f" || fail "$f summary: $(cat "$T/err.$f")"
done
# the run rejects the same records (the fit skips what the run skips)
"$PIPEREC" process --config "$T/avro.yaml" --input "$T/in.avrof" --output "$T/run_avro" \
    --no-progress 2> "$T/run_avro.err" > /dev/null || fail "process avro: $(cat "$T/run_avro.err")"
grep -q "$N rows, 2 rejected" "$T/run_avro.err" || fail "process avro: $(cat "$T/run_avro.err")"

# the --set lines of an Avro fit put the numbers in: the run's standardized
# columns are mean 0, std 1
$PY - "$PIPEREC" "$T" <<'P' || fail "the --set lines of an Avro --fit"
import json, re, subprocess, sys
import numpy as np
piperec, t = sys.argv[1], sys.argv[2]
sets = re.findall(r"^#   --set '(.*)'$", open(t + "/out.avro").read(), re.M)
assert len(sets) == 2, sets
args = [piperec, "process", "--config", t + "/avro.yaml", "--input", t + "/in.avrof",
        "--output", t + "/fitted", "--no-progress"]
for s in sets:
    args += ["--set", s]
subprocess.run(args, check=True, capture_output=True)
names = json.load(open(t + "/fitted/meta.json"))["dense_names"]
x = np.load(t + "/fitted/dense.npy").astype(np.float64)
assert len(x) == 1500, x.shape
v = x[:, names.index("price_z")]
assert abs(v.mean()) < 1e-5 and abs(v.std() - 1) < 1e-5, ("price_z", v.mean(), v.std())
P

# an Avro object container file: refused as `piperec process` refuses it
$PY - "$AVSC" "$T/ev.avrof" "$T/events.avro" <<'P' || fail "writing the container file"
import io, sys, avro.datafile, avro.io, avro.schema
schema = avro.schema.parse(open(sys.argv[1]).read())
buf, pos = open(sys.argv[2], "rb").read(), 0
with open(sys.argv[3], "wb") as f:
    w = avro.datafile.DataFileWriter(f, avro.io.DatumWriter(), schema)
    for _ in range(20):
        n = shift = 0
        while True:
            b = buf[pos]; pos += 1; n |= (b & 0x7F) << shift; shift += 7
            if not b & 0x80:
                break
        w.append(avro.io.DatumReader(schema).read(avro.io.BinaryDecoder(io.BytesIO(buf[pos:pos + n]))))
        pos += n
    w.close()
P
rc=0; "$PIPEREC" process --config "$T/avro.yaml" --input "$T/events.avro" --fit > "$T/out.cont" \
    2> "$T/err.cont" || rc=$?
[ "$rc" -eq 2 ] && grep -q "events.avro: an Avro object container file; piperec process reads" \
    "$T/err.cont" || fail "container file: exit $rc: $(cat "$T/err.cont")"

# a truncated record: the error `piperec process` gives, with its number
head -c 1000 "$T/ev.avrof" > "$T/trunc.avrof"
rc=0; "$PIPEREC" process --config "$T/avro.yaml" --input "$T/trunc.avrof" --fit > /dev/null \
    2> "$T/err.trunc" || rc=$?
"$PIPEREC" process --config "$T/avro.yaml" --input "$T/trunc.avrof" --output "$T/run_trunc" \
    --no-progress > /dev/null 2> "$T/run_trunc.err" || true
msg=$(grep -o 'trunc.avrof: record [0-9]*: truncated' "$T/run_trunc.err") ||
    fail "process on a truncated file: $(cat "$T/run_trunc.err")"
[ "$rc" -eq 2 ] && grep -q "$msg" "$T/err.trunc" || fail "truncated: exit $rc: $(cat "$T/err.trunc")"

# every record rejected: nothing fitted, exit 2, the format named
printf '\003\377\377\377\000' > "$T/bad.pbd"
rc=0; "$PIPEREC" process --config "$T/pb.yaml" --input "$T/bad.pbd" --fit > /dev/null \
    2> "$T/err.bad" || rc=$?
[ "$rc" -eq 2 ] && grep -q "all 2 records were rejected (2) .*as varint-delimited Protobuf messages" \
    "$T/err.bad" || fail "all rejected: exit $rc: $(cat "$T/err.bad")"

# a format --fit does not read
printf 'pipelines:\n  - name: p\n    source: { format: protobuf_event_batch }\n' > "$T/eb.yaml"
cat "$T/schema.yaml" >> "$T/eb.yaml"
rc=0; "$PIPEREC" process --config "$T/eb.yaml" --input "$T/ev.pbd" --fit > /dev/null \
    2> "$T/err.eb" || rc=$?
[ "$rc" -eq 2 ] && grep -q "source.format is protobuf_event_batch" "$T/err.eb" ||
    fail "protobuf_event_batch: exit $rc: $(cat "$T/err.eb")"
echo OK
