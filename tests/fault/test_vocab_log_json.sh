#!/bin/sh
# test_vocab_log_json.sh — a shared vocabulary log (docs/vocab-log.md) with a
# declared schema: JSON events, jagged list features (examples/clickstream.yaml's
# schema, its `history` list made a member of item's table, `table: item`,
# and a list `last3` with a table of its own). Two `piperec run` replicas in one group
# with vocab_log on read `events` (4 partitions) from `piperec produce
# --format json --gen`, each into its own files sink and state dir. After a
# clean stop (each once its log lag is 0), every vocabulary exported from the
# two state dirs is the same file, byte for byte (each value the same index
# in both replicas), within each no index is used for two values, every
# row both wrote reads back through them as the input's values
# (check_table_rows.py), and a third replica with an empty state dir rebuilds
# the same vocabularies from the log alone.
. "$(dirname "$0")/fault_lib.sh"

N=4000
start_broker 4 events,vocab:1

sed -n '/^    schema:/,/^    transform:/p' "$PR_SOURCE_DIR/examples/clickstream.yaml" \
    | sed '$d' > "$T/schema.yaml"
grep -q "history" "$T/schema.yaml" || fail "could not take the schema from the example"
# A shared vocabulary (table: item) through the log: history holds item ids,
# so it takes item's operators up to vocab and its keys go into item's
# column; last3 (the last 3 of the same list) keeps a table of its own.
sed -i 's/^\( *- { name: history, path: history, list: { max_len: 10, keep: last }, ops: \)\[vocab\] }$/\1[ { modulus: 1000000 }, vocab ], table: item }\n        - { name: last3, path: history, list: { max_len: 3, keep: last }, ops: [vocab] }/' \
    "$T/schema.yaml"
grep -q "table: item" "$T/schema.yaml" && grep -q "name: last3" "$T/schema.yaml" ||
    fail "could not make history a member of item's table: $(grep history "$T/schema.yaml")"

# replica_config I: $T/rI.yaml, files sink $T/batchesI, state dir $T/stateI.
replica_config() {
    cat > "$T/r$1.yaml" <<Y
pipelines:
  - name: p
    source:
      kafka:
        topics: [events]
        group.id: shared
        properties:
          bootstrap.servers: "$B"
          auto.offset.reset: earliest
          session.timeout.ms: "3000"
          heartbeat.interval.ms: "500"
          fetch.wait.max.ms: "10"
      format: json
$(cat "$T/schema.yaml")
    transform:
      vocab: { profile: default }
    batch: { size: 256, max_delay_ms: 50 }
    sinks:
      files: { dir: "$T/batches$1" }
    state: { dir: "$T/state$1", checkpoint_interval_s: 2 }
    vocab_log: { topic: vocab }
http: { listen: "127.0.0.1:0" }
log: { level: info }
Y
}
metric_of() { # I NAME: the replica's sample of NAME for pipeline p (0 if none)
    scrape "$1" | awk -v m="$2{pipeline=\"p\"}" '$1 == m { print $2; f = 1 } END { if (!f) print 0 }'
}
rows_in() { echo $(( $(metric_of 1 piperec_engine_rows_total) + $(metric_of 2 piperec_engine_rows_total) )); }
all_rows() { [ "$(rows_in)" -eq "$N" ]; }
some_rows() { [ "$(rows_in)" -gt 0 ]; }

for i in 1 2; do replica_config $i; done
"$PIPEREC" run --config "$T/r1.yaml" --check | grep -q ok || fail "--check refused: $(cat "$T/r1.yaml")"
for i in 1 2; do start_replica $i; done
for i in 1 2; do wait_until 60 "replica $i's http port" has_port $i; done

# Two steps, so that both replicas are in the group when most rows come.
"$PIPEREC" produce --bootstrap "$B" --topic events --format json --gen $((N / 2)) --seed 5 \
    > "$T/produce1.out" 2> "$T/produce1.err" || fail "producer 1"
wait_until 60 "first rows through an engine" some_rows
"$PIPEREC" produce --bootstrap "$B" --topic events --format json --gen $((N / 2)) --seed 6 \
    > "$T/produce2.out" 2> "$T/produce2.err" || fail "producer 2"
wait_until 120 "all $N rows through the engines" all_rows
r1=$(metric_of 1 piperec_engine_rows_total); r2=$(metric_of 2 piperec_engine_rows_total)
# Jagged blocks propose no look-ahead (docs/vocab-log.md): none counted.
for i in 1 2; do
    [ "$(metric_of $i piperec_vocab_log_ahead_proposals_total)" = 0 ] ||
        fail "replica $i proposed values ahead from a jagged block"
done

for i in 1 2; do wait_until 30 "replica $i caught up with the log" lag_zero $i; done
for i in 1 2; do kill -TERM "$(eval echo "\$RUN_$i")"; done
for i in 1 2; do wait "$(eval echo "\$RUN_$i")" || fail "replica $i exited $?"; done
for i in 1 2; do
    "$PIPEREC" vocab export --config "$T/r$i.yaml" --pipeline p --output "$T/export$i" \
        2> "$T/export$i.err" || fail "export $i"
done
[ "$(ls "$T/export1" | wc -l)" -gt 0 ] || fail "no vocabulary exported"
diff -r "$T/export1" "$T/export2" > "$T/diff.out" ||
    fail "replicas 1 and 2 hold different vocabularies: $(head -5 "$T/diff.out")"
# The table is item's: no file of history's own; last3 has its own.
ls "$T/export1" | grep -q '^item\.' && ls "$T/export1" | grep -q '^last3\.' &&
    ! ls "$T/export1" | grep -q '^history' ||
    fail "exported vocabularies are not item's table and last3's: $(ls "$T/export1")"
# One value per index and one index per value in every vocabulary (rows
# "index<TAB>value_hex<TAB>count...").
/usr/bin/python3 - "$T/export1" <<'PY' || fail "an index names two values, or a value has two"
import os, sys
d = sys.argv[1]
for name in os.listdir(d):
    by_index, by_value = {}, {}
    for line in open(os.path.join(d, name)):
        if line.startswith("#") or not line.strip():
            continue
        idx, val = line.rstrip("\n").split("\t")[:2]
        assert idx not in by_index, (name, idx, by_index[idx], val)
        assert val not in by_value, (name, val, by_value[val], idx)
        by_index[idx], by_value[val] = val, idx
PY
n=$(cat "$T"/export1/*.tsv | grep -vc '^#')
# Every row both replicas wrote, read back through the exported tables, is
# the input's (the same events `produce --gen` sent, from `gen`).
for s in 5 6; do
    "$PIPEREC" gen --format json --rows $((N / 2)) --seed $s --output "$T/in$s.jsonl" 2> /dev/null ||
        fail "gen seed $s"
done
/usr/bin/python3 "$FAULT_DIR/check_table_rows.py" "$T/export1" "$T/in5.jsonl" "$T/in6.jsonl" -- \
    "$T/batches1" "$T/batches2" > "$T/rows.out" 2>&1 || fail "$(cat "$T/rows.out")"
# A replica with an empty state dir rebuilds the tables from the log alone:
# the same vocabularies, byte for byte.
replica_config 4
start_replica 4
wait_until 60 "replica 4's http port" has_port 4
wait_until 30 "replica 4 caught up with the log" lag_zero 4
kill -TERM "$RUN_4"
wait "$RUN_4" || fail "replica 4 exited $?"
"$PIPEREC" vocab export --config "$T/r4.yaml" --pipeline p --output "$T/export4" \
    2> "$T/export4.err" || fail "export 4"
diff -r "$T/export1" "$T/export4" > "$T/diff4.out" ||
    fail "a replica rebuilt from the log holds other vocabularies: $(head -5 "$T/diff4.out")"
# A replica whose feature gives values other keys (item: modulus 1000 for the
# log's 1000000) exits naming it: the log records each declared feature's
# input fingerprint (its item 1000 got the log's index of item 0 before).
sed -i 's/{ modulus: 1000000 }, vocab/{ modulus: 1000 }, vocab/' "$T/schema.yaml"
grep -q "modulus: 1000 }" "$T/schema.yaml" || fail "could not change item's modulus"
replica_config 3
if POD_NAME=r3 timeout 60 "$PIPEREC" run --config "$T/r3.yaml" 2> "$T/r3.err"; then
    fail "a replica whose item feature has another modulus started"
fi
grep -q "feature item gives its values other keys here than in the log" "$T/r3.err" ||
    fail "the feature's conflict was not named: $(tail -3 "$T/r3.err")"
echo "2 replicas ($r1 + $r2 rows), JSON with a list feature in item's table: $(ls "$T/export1" | wc -l) vocabularies equal ($n entries), one value per index, equal after a rebuild from the log; $(cat "$T/rows.out"); a changed feature chain refused"
echo "OK"
