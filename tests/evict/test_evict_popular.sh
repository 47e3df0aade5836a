#!/bin/sh
# test_evict_popular.sh — issue 19 items 1, 2 and 6 end to end: a Zipf
# stream through `piperec run` with bounded vocabularies (eviction lru) and
# `batch.split: popular` (hot sets on, popular_min_rows), consumed by one
# trainer (tests/fault/fault_trainer.py) that records every row and notice.
# check_notices.py --once replays them as a trainer applying each notice at
# its `row` in the batch that carries it and requires every number exactly
# once (the split sent each notice twice, the second copy at a wrong row)
# and no index holding two values between its notices (row 0 of the next
# batch let rows of the old value follow the notice). Both failed before.
. "$(dirname "$0")/../fault/fault_lib.sh"
FAULT_DIR=$(cd "$(dirname "$0")/../fault" && pwd)

NROWS=20000
CAP=202
MODULUS=100000
start_broker 2
TPORT=$(free_port)
"$PIPEREC" gen --rows "$NROWS" --seed 3 --zipf 1.3 --output - 2>/dev/null |
    awk 'BEGIN { FS = OFS = "\t" } { $2 = NR - 1; print }' > "$T/in.tsv"
{
    pipeline_head "evictpop" "earliest" "$MODULUS"
    cat <<Y
      vocab: { profile: default, capacity: $CAP, eviction: lru }
    batch: { size: 256, max_delay_ms: 30, split: popular, popular_min_rows: 8 }
    sinks:
      trainer: { listen: "127.0.0.1:$TPORT" }
hot: { top_k: 64 }
http: { listen: "127.0.0.1:0" }
log: { level: info }
Y
} > "$T/run.yaml"
start_trainer --notices "$T/notices.jsonl"
start_run run
"$PIPEREC" produce --bootstrap "$B" --topic events --input "$T/in.tsv" --rate 20000 \
    > "$T/produce.out" 2> "$T/produce.err" || fail "produce"
wait_until 120 "every row at the trainer" trainer_has_all
popular=$(metric piperec_popular_records_total)
recycled=$(metric piperec_vocab_recycled_total)
kill -TERM "$RUN"
wait "$RUN" || fail "run exited $?"
stop_trainer
[ "${popular:-0}" -gt 0 ] || fail "no popular row: the split was not exercised"
out=$($PY "$(dirname "$0")/check_notices.py" --once --log "$T/trainer.log" \
      --notices "$T/notices.jsonl" --input "$T/in.tsv" --rows "$NROWS" \
      --modulus "$MODULUS" --capacity "$CAP") || fail "check_notices"
# Batch.hot_version (item 6): TrainingBatch field 21, 0 when absent.
PYTHONPATH="$PR_SOURCE_DIR/clients/python" $PY - <<'PY' || fail "Batch.hot_version"
import piperec_client as pc
b = pc.decode_batch(bytes([0x10, 0x05, 0xA8, 0x01, 0xAC, 0x02]))  # sequence 5, field 21 = 300
assert (b.sequence, b.hot_version) == (5, 300), (b.sequence, b.hot_version)
assert pc.decode_batch(bytes([0x10, 0x05])).hot_version == 0
PY
echo "split popular + eviction lru: $out; $popular popular rows, $recycled notices sent"
echo "OK"
