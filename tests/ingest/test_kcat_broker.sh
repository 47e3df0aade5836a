#!/bin/sh
# test_kcat_broker.sh — real Kafka clients against `piperec broker`: kcat
# produces the Criteo sample (one line per message) and reads it back; a
# confluent-kafka consumer group (/usr/bin/python3) reads it too; `piperec
# produce` writes protobuf batches that kcat counts; SIGTERM stops the broker
# cleanly. Env (from pr_script_test): PIPEREC, PR_TEST_DATA, PR_TMP.
set -eu
T="$PR_TMP"
DATA="$PR_TEST_DATA/criteo_sample_100.tsv"
fail() { echo "FAIL: $*" >&2; exit 1; }

mkfifo "$T/broker.fifo"
"$PIPEREC" broker --partitions 3 --topics events,pb > "$T/broker.fifo" 2> "$T/broker.err" &
BPID=$!
trap 'kill $BPID 2>/dev/null || true' EXIT
exec 3< "$T/broker.fifo"
read -r first <&3 || fail "broker printed nothing"
case "$first" in
  bootstrap=127.0.0.1:*) B="${first#bootstrap=}" ;;
  *) fail "first line is '$first', expected bootstrap=127.0.0.1:PORT" ;;
esac
echo "broker at $B"

# kcat -> broker -> kcat
kcat -b "$B" -P -t events -l "$DATA"
kcat -b "$B" -C -t events -o beginning -e -q -f '%s\n' > "$T/kcat.out"
n=$(wc -l < "$T/kcat.out")
[ "$n" -eq 100 ] || fail "kcat read $n messages, expected 100"
sort "$DATA" > "$T/want"; sort "$T/kcat.out" > "$T/got"
cmp -s "$T/want" "$T/got" || fail "kcat read back different payloads"
parts=$(kcat -b "$B" -L -t events | grep -c "partition [0-9]")
[ "$parts" -eq 3 ] || fail "topic events has $parts partition(s), expected 3 (--partitions)"

# a consumer group from another client library reads the same records
/usr/bin/python3 - "$B" "$DATA" <<'PY'
import sys, time
from confluent_kafka import Consumer
b, data = sys.argv[1], sys.argv[2]
want = sorted(l.rstrip("\n") for l in open(data) if l.strip())
c = Consumer({"bootstrap.servers": b, "group.id": "pytest", "auto.offset.reset": "earliest",
              "session.timeout.ms": 4000, "partition.assignment.strategy": "cooperative-sticky"})
c.subscribe(["events"])
got, end = [], time.time() + 30
while len(got) < len(want) and time.time() < end:
    m = c.poll(0.2)
    if m is None or m.error():
        continue
    got.append(m.value().decode())
c.close()
if sorted(got) != want:
    sys.exit("python consumer got %d records, expected %d" % (len(got), len(want)))
print("python consumer group read", len(got), "records")
PY

# piperec produce -> broker -> kcat
out=$("$PIPEREC" produce --bootstrap "$B" --topic pb --gen 500 --seed 3 \
      --format protobuf_event_batch --events-per-message 100)
echo "$out"
echo "$out" | grep -q "events=500 messages=5 " || fail "unexpected produce summary: $out"
m=$(kcat -b "$B" -C -t pb -o beginning -e -q -f '%S\n' | wc -l)
[ "$m" -eq 5 ] || fail "kcat counted $m protobuf messages, expected 5"

kill -TERM $BPID
wait $BPID || fail "broker exited with status $?"
trap - EXIT
grep -q "stopping" "$T/broker.err" || fail "broker did not log its shutdown"
echo "OK"
