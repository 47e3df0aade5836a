#!/bin/sh
# test_vocab_log_errors.sh — issue 9, what goes wrong around a vocab_log and
# how it shows (docs/vocab-log.md, Errors):
#   * the log topic is missing, or has more than one partition: the replica
#     exits at startup naming the topic and the fix (the test broker creates
#     a missing topic on the first metadata request, with --partitions
#     partitions, so here "missing" shows as the partition error; a real
#     broker answers UNKNOWN_TOPIC_OR_PART and the message says "does not
#     exist");
#   * a corrupt record in the log (here written first, by kcat): skipped by
#     every replica alike and counted in piperec_vocab_log_errors_total;
#   * the broker goes down mid-stream: piperec_vocab_log_up drops to 0, no
#     batch leaves with an invented index, and everything resumes after;
#   * a snapshot that is ahead of the log (the topic was recreated: here a
#     fresh broker): the replica refuses to start and says so;
#   * a log whose first records were deleted (retention; the test broker
#     keeps ~5 MB per partition): a replica with an empty state dir refuses
#     to rebuild from it and says so.
# Then fault_check.py proves every row arrived with one index per value.
. "$(dirname "$0")/fault_lib.sh"

NROWS=12000
start_broker 4 events,vocab:1,vocab3:3
TPORT=$(free_port)
STATE="$T/state"
vl_config() { # FILE TOPIC
    write_config "$1"
    printf '    vocab_log: { topic: %s, startup_timeout_ms: 5000 }\n' "$2" > "$T/vl.part"
    # the section belongs to the pipeline: insert it after its `state:` line
    sed -i "/^    state:/r $T/vl.part" "$1"
}

# Missing topic, too many partitions: exit 2 at startup with the reason.
vl_config "$T/missing.yaml" nosuch
"$PIPEREC" run --config "$T/missing.yaml" 2> "$T/missing.err" && fail "ran without its log topic"
grep -Eq "vocab_log.topic 'nosuch' (does not exist|has 4 partitions)" "$T/missing.err" ||
    fail "missing topic not named: $(tail -2 "$T/missing.err")"
vl_config "$T/parts.yaml" vocab3
"$PIPEREC" run --config "$T/parts.yaml" 2> "$T/parts.err" && fail "ran on a 3-partition log"
grep -q "has 3 partitions; a vocabulary log needs exactly 1" "$T/parts.err" ||
    fail "partition count not named: $(tail -2 "$T/parts.err")"

# A corrupt record first: skipped and counted; the log still gets settings.
echo "this is not a vocabulary record" | kcat -b "$B" -P -t vocab
vl_config "$T/run.yaml" vocab
start_trainer
rows 0 6000 "$T/in0.tsv"
"$PIPEREC" produce --bootstrap "$B" --topic events --input "$T/in0.tsv" --rate 8000 \
    > /dev/null 2> "$T/produce0.err" || fail "producer 0"
start_run run1
wait_until 60 "first half at the trainer" trainer_batches_over 5
[ "$(metric piperec_vocab_log_errors_total)" -ge 1 ] || fail "corrupt record not counted"
curl -sf "http://127.0.0.1:$HP/metrics" | grep -q 'piperec_vocab_log_errors_total{pipeline="p",kind="corrupt"} 1' ||
    fail "corrupt record not counted under kind=corrupt"

# Broker down: the log is unreachable, batches wait, nothing is invented.
rows 6000 6000 "$T/in1.tsv"
"$PIPEREC" produce --bootstrap "$B" --topic events --input "$T/in1.tsv" --rate 8000 \
    > /dev/null 2> "$T/produce1.err" || fail "producer 1"
kill -USR1 "$BROKER"
log_down() { [ "$(metric piperec_vocab_log_up)" = 0 ]; }
wait_until 30 "piperec_vocab_log_up 0 while the broker is down" log_down
sleep 2
kill -USR2 "$BROKER"
log_up() { [ "$(metric piperec_vocab_log_up)" = 1 ]; }
wait_until 60 "piperec_vocab_log_up back to 1" log_up
wait_until 120 "every row at the trainer" trainer_has_all
# And an outage while idle: no block waits, nothing is fetched, yet the
# gauge must fall and come back (the liveness probe, not traffic, says so).
kill -USR1 "$BROKER"
wait_until 30 "piperec_vocab_log_up 0 while idle and the broker is down" log_down
kill -USR2 "$BROKER"
wait_until 30 "piperec_vocab_log_up back to 1 while idle" log_up
kill -TERM "$RUN"
wait "$RUN" || fail "run exited $?"
stop_trainer
out=$(check --input "$T/in0.tsv" --input "$T/in1.tsv") || fail "check"
echo "corrupt record skipped, outage survived: $out"

# A fresh broker: the log is empty, the snapshot says it read further.
kill -TERM "$BROKER"
wait "$BROKER" 2>/dev/null || true
exec 3<&-
rm -f "$T/broker.fifo"
start_broker 4 events,vocab:1
vl_config "$T/run.yaml" vocab
"$PIPEREC" run --config "$T/run.yaml" 2> "$T/recreated.err" && fail "ran on a recreated log"
grep -q "the topic was recreated or is another one" "$T/recreated.err" ||
    fail "recreated log not named: $(tail -2 "$T/recreated.err")"

# Retention: the test broker keeps only the last ~5 MB of a partition, so
# 8 MB of records push the log's first offset past 0. A replica with an
# empty state dir cannot rebuild from such a log and says why.
$PY -c 'import sys; sys.stdout.write(("x" * 999 + "\n") * 8192)' > "$T/junk.txt"
kcat -b "$B" -P -t vocab -l "$T/junk.txt"
rm -rf "$STATE"
"$PIPEREC" run --config "$T/run.yaml" 2> "$T/truncated.err" && fail "rebuilt from a truncated log"
grep -q "earlier records were deleted, retention" "$T/truncated.err" ||
    fail "truncated log not named: $(tail -2 "$T/truncated.err")"
echo "OK"
