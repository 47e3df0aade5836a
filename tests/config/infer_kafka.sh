#!/bin/sh
# infer_kafka.sh — `piperec infer --bootstrap --topic` (cli/infer_kafka.c): the
# sample read straight from a topic of the test broker gives the config the
# same events give from a file (the schema part line for line; 1 partition
# keeps the order), naming that topic and bootstrap; --rows N reads N; a
# topic of 4 partitions is read to the end and its config runs over the file
# with no reject; registry-framed JSON is unwrapped and tombstones skipped;
# Protobuf messages read as the file path reads them; registry-framed Avro
# is read behind the header; an unknown topic and an unreachable broker are exit 2
# naming them (the broker within --timeout), and so are the options misused.
# Environment (pr_script_test): PIPEREC, PR_SOURCE_DIR, PR_TMP.
set -eu
. "$PR_SOURCE_DIR/tests/config/infer_lib.sh"
T=$PR_TMP
N=2000

"$PIPEREC" gen --format json --rows $N --seed 4 --output "$T/ev.jsonl" 2>/dev/null
"$PIPEREC" infer --input "$T/ev.jsonl" --output "$T/file.yaml" 2> "$T/err" ||
    fail "infer --input: $(cat "$T/err")"
schema "$T/file.yaml" > "$T/file.schema"
[ -s "$T/file.schema" ] || fail "no schema part in $(cat "$T/file.yaml")"

mkfifo "$T/broker.fifo"
"$PIPEREC" broker --partitions 1 --topics clicks,clicks4:4,mixed,pb,av,avold \
    > "$T/broker.fifo" 2> "$T/broker.err" &
BPID=$!
trap 'kill $BPID 2>/dev/null || true' EXIT
exec 3< "$T/broker.fifo"
read -r first <&3 || fail "broker printed nothing"
B=${first#bootstrap=}
produce() { # topic format-args...
    t=$1
    shift
    "$PIPEREC" produce --bootstrap "$B" --topic "$t" "$@" > "$T/perr" 2>&1 ||
        fail "produce $t: $(cat "$T/perr")"
}
produce clicks --format json --input "$T/ev.jsonl"
produce clicks4 --format json --input "$T/ev.jsonl"

# 1 partition: the same events in the same order, the same schema part; the
# config names the topic and the bootstrap read.
"$PIPEREC" infer --bootstrap "$B" --topic clicks --rows $N --output "$T/k.yaml" 2> "$T/err" ||
    fail "infer from clicks: $(cat "$T/err")"
grep -q "^piperec infer: read $N messages of topic clicks at $B (1 partition, " "$T/err" ||
    fail "clicks: $(cat "$T/err")"
grep -q "^piperec infer: $N events (0 skipped): event time, " "$T/err" || fail "clicks: $(cat "$T/err")"
grep -qF "# Inferred by \`piperec infer\` from $N events of topic clicks at $B." "$T/k.yaml" ||
    fail "origin: $(head -3 "$T/k.yaml")"
grep -q '^        topics: \[clicks\]$' "$T/k.yaml" || fail "topic: $(head -12 "$T/k.yaml")"
grep -qF "bootstrap.servers: \"$B\"" "$T/k.yaml" || fail "bootstrap: $(head -12 "$T/k.yaml")"
schema "$T/k.yaml" | cmp -s - "$T/file.schema" ||
    fail "schema from the topic differs: $(schema "$T/k.yaml" | diff "$T/file.schema" - || true)"

# --rows 500: the first 500.
"$PIPEREC" infer --bootstrap "$B" --topic clicks --rows 500 > /dev/null 2> "$T/err" ||
    fail "--rows 500: $(cat "$T/err")"
grep -q "^piperec infer: read 500 messages of topic clicks .*; --rows reached)" "$T/err" ||
    fail "--rows 500: $(cat "$T/err")"
grep -q "^piperec infer: 500 events (0 skipped)" "$T/err" || fail "--rows 500: $(cat "$T/err")"

# 4 partitions (default --rows): read to the end of each, every event once;
# the config runs over the file with no reject.
"$PIPEREC" infer --bootstrap "$B" --topic clicks4 --output "$T/k4.yaml" 2> "$T/err" ||
    fail "infer from clicks4: $(cat "$T/err")"
grep -q "^piperec infer: read $N messages of topic clicks4 at $B (4 partitions, 4 read to the end; every partition at its end)" \
    "$T/err" || fail "clicks4: $(cat "$T/err")"
grep -q "^piperec infer: $N events (0 skipped)" "$T/err" || fail "clicks4: $(cat "$T/err")"
"$PIPEREC" process --config "$T/k4.yaml" --input "$T/ev.jsonl" --output "$T/o4" 2> "$T/perr" ||
    fail "process: $(cat "$T/perr")"
grep -q "^piperec process: $N rows, 0 rejected" "$T/perr" || fail "process: $(cat "$T/perr")"

# Registry-framed JSON (0, a 4-byte id, the JSON) is read as the service
# reads it; tombstones (NULL values, kcat -Z) are skipped: the file's config.
head -300 "$T/ev.jsonl" > "$T/h300.jsonl"
"$PIPEREC" infer --input "$T/h300.jsonl" --output "$T/h300.yaml" 2> "$T/err" ||
    fail "infer h300: $(cat "$T/err")"
n=0
while IFS= read -r l; do
    n=$((n + 1))
    if [ $((n % 2)) -eq 0 ]; then printf 'k|\000\000\000\000\007%s\n' "$l"; else printf 'k|%s\n' "$l"; fi
    [ $((n % 100)) -ne 0 ] || printf 'k|\n'
done < "$T/h300.jsonl" > "$T/mixed.in"
kcat -b "$B" -P -Z -K '|' -t mixed < "$T/mixed.in" || fail "kcat"
"$PIPEREC" infer --bootstrap "$B" --topic mixed --output "$T/mixed.yaml" 2> "$T/err" ||
    fail "infer mixed: $(cat "$T/err")"
grep -q "^piperec infer: read 300 messages of topic mixed .*; 3 tombstones skipped$" "$T/err" ||
    fail "mixed: $(cat "$T/err")"
grep -q "^piperec infer: 300 events (0 skipped)" "$T/err" || fail "mixed: $(cat "$T/err")"
schema "$T/h300.yaml" > "$T/h300.schema"
schema "$T/mixed.yaml" | cmp -s - "$T/h300.schema" ||
    fail "framed JSON: $(schema "$T/mixed.yaml" | diff "$T/h300.schema" - || true)"

# Protobuf: the messages of `produce --format protobuf` read as the file of
# `gen --format protobuf` is (the same events, the same bytes).
desc=$T/click.desc
protoc --descriptor_set_out="$desc" --include_imports -I "$PR_SOURCE_DIR/tests/data" \
    pbuser_clickstream.proto || fail "protoc"
"$PIPEREC" gen --format protobuf --descriptor-set "$desc" --message shop.Click --rows $N \
    --seed 4 --output "$T/ev.pb" 2>/dev/null
"$PIPEREC" infer --input "$T/ev.pb" --descriptor-set "$desc" --message shop.Click \
    --output "$T/pbfile.yaml" 2> "$T/err" || fail "infer pb file: $(cat "$T/err")"
produce pb --format protobuf --descriptor-set "$desc" --message shop.Click --input "$T/ev.jsonl"
"$PIPEREC" infer --bootstrap "$B" --topic pb --descriptor-set "$desc" --message shop.Click \
    --output "$T/pb.yaml" 2> "$T/err" || fail "infer pb topic: $(cat "$T/err")"
grep -q "^piperec infer: $N events (0 skipped)" "$T/err" || fail "pb: $(cat "$T/err")"
grep -q '^      format: protobuf$' "$T/pb.yaml" || fail "no format protobuf: $(cat "$T/pb.yaml")"
schema "$T/pbfile.yaml" > "$T/pbfile.schema"
schema "$T/pb.yaml" | cmp -s - "$T/pbfile.schema" ||
    fail "pb schema differs: $(schema "$T/pb.yaml" | diff "$T/pbfile.schema" - || true)"

# Registry-framed Avro (produce's default, as Confluent's serializer writes
# it) is read behind the header: the topic's schema equals the file's, and
# the config reads framing: registry.
produce av --format avro --avro-schema "$PR_SOURCE_DIR/examples/clickstream.avsc" \
    --input "$T/h300.jsonl"
"$PIPEREC" infer --bootstrap "$B" --topic av --rows 300 \
    --avro-schema "$PR_SOURCE_DIR/examples/clickstream.avsc" > "$T/av.yaml" 2> "$T/err" ||
    fail "framed Avro: $(cat "$T/err")"
grep -q "^piperec infer: 300 events (0 skipped)" "$T/err" || fail "framed Avro: $(cat "$T/err")"
grep -q "framing: registry }" "$T/av.yaml" || fail "no framing: registry: $(cat "$T/av.yaml")"

# The oldest messages in another format (5 JSON lines) do not stop the
# reading, and --rows counts the events that decoded: 100 of them, then 6.
head -n 5 "$T/ev.jsonl" > "$T/h5.jsonl"
produce avold --format json --input "$T/h5.jsonl"
produce avold --format avro --avro-schema "$PR_SOURCE_DIR/examples/clickstream.avsc" \
    --input "$T/h300.jsonl"
for n in 100 6; do
    "$PIPEREC" infer --bootstrap "$B" --topic avold --rows $n \
        --avro-schema "$PR_SOURCE_DIR/examples/clickstream.avsc" > /dev/null 2> "$T/err" ||
        fail "older messages first, --rows $n: $(cat "$T/err")"
    grep -q "^piperec infer: $n events (5 skipped)" "$T/err" ||
        fail "older messages first, --rows $n: $(cat "$T/err")"
done

# --kafka-properties reach the client that reads the topic: a valid one
# reads as before, one librdkafka does not know is refused naming it.
printf 'client.id=piperec-infer-test\nsocket.keepalive.enable=true\n' > "$T/ok.properties"
"$PIPEREC" infer --bootstrap "$B" --topic clicks --rows 100 --kafka-properties "$T/ok.properties" \
    > "$T/kp.yaml" 2> "$T/err" || fail "--kafka-properties: $(cat "$T/err")"
grep -q '^piperec infer: 100 events' "$T/err" || fail "--kafka-properties: $(cat "$T/err")"
grep -q 'client.id: "piperec-infer-test"' "$T/kp.yaml" || fail "client.id not in the config"
printf 'no.such.property=1\n' > "$T/bad.properties"
refuse "no.such.property" --bootstrap "$B" --topic clicks --kafka-properties "$T/bad.properties"

# Refusals, exit 2 with the reason.
# An unknown topic, twice: asking did not create it.
refuse "topic nope does not exist at --bootstrap $B" --bootstrap "$B" --topic nope
refuse "topic nope does not exist at --bootstrap $B" --bootstrap "$B" --topic nope
t0=$(date +%s)
refuse "cannot read the metadata of topic clicks from --bootstrap 127.0.0.1:1 in 3 s" \
    --bootstrap 127.0.0.1:1 --topic clicks --timeout 3
[ $(($(date +%s) - t0)) -le 8 ] || fail "unreachable broker: not within --timeout 3"
refuse "--input is required (FILE or -), or --bootstrap ADDR and --topic T" --topic clicks
refuse "--input is required (FILE or -), or --bootstrap ADDR and --topic T" --bootstrap "$B"
refuse "--timeout goes with reading a topic" --input "$T/ev.jsonl" --timeout 3
refuse "--timeout: want whole seconds" --bootstrap "$B" --topic clicks --timeout 0
echo "infer_kafka: ok"
