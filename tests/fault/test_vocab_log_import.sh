#!/bin/sh
# test_vocab_log_import.sh — `piperec vocab import` into a shared vocabulary
# log (docs/vocab-log.md, "Seeding the log"): an offline run's vocabulary
# becomes the log's, and the replicas keep its indices.
#
# JSON events (the clickstream of `piperec gen`), a declared schema with a
# shared table (history in item's) and a column with min_count 2 (so pending
# values, below it, are carried with their counts). `piperec process` over
# the first half writes vocab/; it is imported into an empty log topic; one
# replica (empty state dir) then streams the second half from one partition,
# so the stream order is the file order. Checks:
#   - the replica's vocabulary (exported) equals `piperec process` over all
#     the events: item's table and category index for index (the offline
#     indices kept, new values continued after them); user (min_count 2):
#     the imported indices kept, the same values admitted and pending (with
#     their counts), min_count counted across the seam;
#   - `vocab export --from-log` exports the same from the log itself, and
#     leaves an empty log empty;
#   - a second replica with an empty state dir rebuilds the same from the log;
#   - an import that stopped half way (the log holds the first indices of
#     every column, as its records left them) is continued by the same
#     import, and the log then holds exactly the files' vocabulary; a log
#     whose values are not this import's start is refused;
#   - the same import again changes nothing; refusals: an import into a log
#     that went on past it, a vocabulary
#     with a gap in its indices, an evicting column, a pending value whose
#     count min_count would not keep pending, --state.
. "$(dirname "$0")/fault_lib.sh"

N=3000
start_broker 1 events,vocab:1,vocab2:1,vocab3:1,vocab4:1
"$PIPEREC" gen --format json --rows $N --seed 21 --output "$T/all.jsonl" 2> /dev/null || fail gen
head -n $((N / 2)) "$T/all.jsonl" > "$T/first.jsonl"
tail -n $((N - N / 2)) "$T/all.jsonl" > "$T/second.jsonl"

# config I [TOPIC [EXTRA]]: replica I's config ($T/rI.yaml), state dir $T/stateI.
config() {
    cat > "$T/r$1.yaml" <<Y
pipelines:
  - name: p
    source:
      kafka:
        topics: [events]
        group.id: seeded
        properties:
          bootstrap.servers: "$B"
          auto.offset.reset: earliest
          session.timeout.ms: "3000"
          heartbeat.interval.ms: "500"
          fetch.wait.max.ms: "10"
      format: json
    schema:
      event_time: { path: ts, unit: ms }
      labels:
        - { name: click, path: label.click }
      sparse:
        - { name: user, path: user.id, ops: [vocab] }
        - { name: item, path: item.id, ops: [vocab] }
        - { name: category, path: item.category, default: unknown, ops: [vocab] }
        - { name: history, path: history, list: { max_len: 10, keep: last }, ops: [vocab],
            table: item }
    transform:
      vocab: { profile: default }
      columns:
        user: { min_count: 2${3:-} }
    batch: { size: 256, max_delay_ms: 50 }
    sinks:
      files: { dir: "$T/batches$1" }
    state: { dir: "$T/state$1", checkpoint_interval_s: 2 }
    vocab_log: { topic: ${2:-vocab} }
http: { listen: "127.0.0.1:0" }
log: { level: info }
Y
}
config 1
config 2
"$PIPEREC" process --config "$T/r1.yaml" --input "$T/first.jsonl" --output "$T/off1" \
    --no-progress > /dev/null 2> "$T/off1.err" || fail "process first half: $(cat "$T/off1.err")"
"$PIPEREC" process --config "$T/r1.yaml" --input "$T/all.jsonl" --output "$T/offall" \
    --no-progress > /dev/null 2> "$T/offall.err" || fail "process all: $(cat "$T/offall.err")"
grep -qv '^#' "$T/off1/vocab/user.tsv" && grep -q -- '^-1' "$T/off1/vocab/user.tsv" ||
    fail "the first half has no pending user values (min_count 2): $(head -5 "$T/off1/vocab/user.tsv")"

"$PIPEREC" vocab import --config "$T/r1.yaml" --input "$T/off1/vocab" 2> "$T/import.err" ||
    fail "import into the log: $(cat "$T/import.err")"
grep -q "are vocab log vocab's" "$T/import.err" || fail "import said: $(cat "$T/import.err")"

# The same import again: the log holds all of it, nothing is proposed.
"$PIPEREC" vocab import --config "$T/r1.yaml" --input "$T/off1/vocab" 2> "$T/again.err" ||
    fail "the same import again: $(cat "$T/again.err")"
grep -q "values of this import already" "$T/again.err" || fail "again: $(cat "$T/again.err")"
# Refusals.
# --state does not apply.
if "$PIPEREC" vocab import --config "$T/r1.yaml" --state "$T/x" --input "$T/off1/vocab" \
    2> "$T/state.err"; then
    fail "an import with --state into a log was taken"
fi
grep -q "goes into the log" "$T/state.err" || fail "--state: $(cat "$T/state.err")"
# A gap in the indices (into a fresh topic: nothing may be written).
mkdir -p "$T/gap"
cp "$T/off1/vocab/"*.tsv "$T/gap/"
awk 'BEGIN { FS = OFS = "\t" } /^#/ || $1 < 0 { print; next } $1 == 5 { next } { print }' \
    "$T/off1/vocab/category.tsv" > "$T/gap/category.tsv"
config 3 vocab2
if "$PIPEREC" vocab import --config "$T/r3.yaml" --input "$T/gap" 2> "$T/gap.err"; then
    fail "a vocabulary with a gap was imported into a log"
fi
grep -q "index 5 is missing" "$T/gap.err" || fail "gap: $(cat "$T/gap.err")"
# An evicting column.
config 4 vocab2 ", capacity: 100000, eviction: lru"
if "$PIPEREC" vocab import --config "$T/r4.yaml" --input "$T/off1/vocab" 2> "$T/evict.err"; then
    fail "an evicting column was imported into a log"
fi
grep -q "column user evicts" "$T/evict.err" || fail "evict: $(cat "$T/evict.err")"
# A value below min_count with a count the log cannot keep pending (2, of
# a file from a config with a higher min_count; 0): refused before anything
# is written (it was proposed, admitted, and the comparison then blamed "a
# replica running" with the log already written).
mkdir -p "$T/pend"
cp "$T/off1/vocab/"*.tsv "$T/pend/"
for cnt in 2 0; do
    awk -v c=$cnt 'BEGIN { FS = OFS = "\t" } !/^#/ && $1 < 0 && !d { $3 = c; d = 1 } { print }' \
        "$T/off1/vocab/user.tsv" > "$T/pend/user.tsv"
    if "$PIPEREC" vocab import --config "$T/r3.yaml" --input "$T/pend" 2> "$T/pend.err"; then
        fail "a pending value with count $cnt (min_count 2) was imported into a log"
    fi
    grep -q "is below min_count (index -1) with count $cnt, but column user's min_count is 2" \
        "$T/pend.err" || fail "pending count $cnt: $(cat "$T/pend.err")"
done

# An import that stopped half way: the log holds the first half of each
# column's indices (what its records had written, column by column, before
# it was killed; no pending value yet). The same import continues it.
half() { # DIR_IN DIR_OUT: the first half of each file's indices
    mkdir -p "$2"
    for f in "$1"/*.tsv; do
        n=$(awk -F '\t' '!/^#/ && $1 >= 0' "$f" | wc -l)
        awk -F '\t' -v k=$((n / 2)) '/^#/ { print; next } $1 >= 0 && ++i <= k' "$f" \
            > "$2/$(basename "$f")"
    done
}
half "$T/off1/vocab" "$T/half"
config 5 vocab3
"$PIPEREC" vocab import --config "$T/r5.yaml" --input "$T/half" 2> "$T/half.err" ||
    fail "import of the first half: $(cat "$T/half.err")"
"$PIPEREC" vocab import --config "$T/r5.yaml" --input "$T/off1/vocab" 2> "$T/resume.err" ||
    fail "the import was not continued: $(cat "$T/resume.err")"
grep -q "holds [0-9]* values of this import already" "$T/resume.err" ||
    fail "resume said: $(cat "$T/resume.err")"
"$PIPEREC" vocab export --config "$T/r5.yaml" --from-log --output "$T/resumed" \
    2> "$T/resumed.err" || fail "export of the continued log: $(cat "$T/resumed.err")"
"$PIPEREC" vocab export --config "$T/r1.yaml" --from-log --output "$T/whole" \
    2> "$T/whole.err" || fail "export of the log imported at once: $(cat "$T/whole.err")"
diff -r "$T/whole" "$T/resumed" > "$T/resumed.diff" ||
    fail "a continued import differs from one at once: $(head -5 "$T/resumed.diff")"
# Not this import's start: category's first two values swapped in the log.
mkdir -p "$T/swap"
cp "$T/half/"*.tsv "$T/swap/"
awk 'BEGIN { FS = OFS = "\t" } !/^#/ && $1 >= 0 && ++i <= 2 { $1 = i == 1 ? $1 + 1 : $1 - 1 }
     { print }' "$T/half/category.tsv" | sort -t "$(printf '\t')" -k1,1n > "$T/swap/category.tsv"
config 6 vocab4
"$PIPEREC" vocab import --config "$T/r6.yaml" --input "$T/swap" 2> "$T/swap.err" ||
    fail "import of the swapped half: $(cat "$T/swap.err")"
if "$PIPEREC" vocab import --config "$T/r6.yaml" --input "$T/off1/vocab" 2> "$T/swap2.err"; then
    fail "a log holding other indices was continued"
fi
grep -q "not the start of this import (column category: the log has value" "$T/swap2.err" ||
    fail "swapped: $(cat "$T/swap2.err")"

# Stream the second half through replica 1 (empty state dir).
"$PIPEREC" produce --bootstrap "$B" --topic events --format json --input "$T/second.jsonl" \
    > /dev/null 2> "$T/produce.err" || fail "produce: $(cat "$T/produce.err")"
start_replica 1
wait_until 60 "replica 1's http port" has_port 1
rows_in() { scrape 1 | awk '$1 == "piperec_engine_rows_total{pipeline=\"p\"}" { print $2 }'; }
all_rows() { [ "$(rows_in)" = "$((N - N / 2))" ]; }
wait_until 120 "the second half through the engine" all_rows
wait_until 30 "replica 1 caught up with the log" lag_zero 1
kill -TERM "$RUN_1"
wait "$RUN_1" || fail "replica 1 exited $?"
"$PIPEREC" vocab export --config "$T/r1.yaml" --output "$T/export1" 2> "$T/export1.err" ||
    fail "export 1: $(cat "$T/export1.err")"
# item's table and category (min_count 1): index and value equal an offline
# run over all events (the count column: a shared vocabulary counts a value
# only until the log gave it its index).
entries() { awk -F '\t' '/^#/ { next } { print $1, $2 }' "$1"; }
for name in item category; do
    entries "$T/offall/vocab/$name.tsv" > "$T/want"
    entries "$T/export1/$name.tsv" > "$T/got"
    cmp -s "$T/want" "$T/got" ||
        fail "$name: the seeded stream's vocabulary is not the offline run's over all events: $(diff "$T/want" "$T/got" | head -5)"
done
# user (min_count 2): the log gives an index at the record that brings a
# value to min_count (docs/vocab-log.md), so past the seam the order may
# differ from one process's. The imported indices are kept as they were,
# the admitted values are the offline run's, and the pending ones (with
# their counts) too.
admitted() { awk -F '\t' '/^#/ || $1 < 0 { next } { print $2 }' "$1" | sort; }
pending() { awk -F '\t' '/^#/ || $1 >= 0 { next } { print $2, $3 }' "$1" | sort; }
entries "$T/off1/vocab/user.tsv" | awk '$1 >= 0' > "$T/want"
entries "$T/export1/user.tsv" | awk '$1 >= 0' | head -n "$(wc -l < "$T/want")" > "$T/got"
cmp -s "$T/want" "$T/got" || fail "user: imported indices not kept: $(diff "$T/want" "$T/got" | head -5)"
[ "$(admitted "$T/offall/vocab/user.tsv")" = "$(admitted "$T/export1/user.tsv")" ] ||
    fail "user: the values with an index differ from the offline run's"
[ "$(pending "$T/offall/vocab/user.tsv")" = "$(pending "$T/export1/user.tsv")" ] ||
    fail "user: the values below min_count (or their counts) differ from the offline run's"

# `vocab export --from-log` reads the same from the log itself, and an
# export from an empty log (vocab2: the refused imports wrote nothing)
# leaves it empty.
"$PIPEREC" vocab export --config "$T/r1.yaml" --from-log --output "$T/fromlog" \
    2> "$T/fromlog.err" || fail "export --from-log: $(cat "$T/fromlog.err")"
diff -r "$T/export1" "$T/fromlog" > "$T/difflog.out" ||
    fail "export --from-log differs from the replica's: $(head -5 "$T/difflog.out")"
"$PIPEREC" vocab export --config "$T/r3.yaml" --from-log --output "$T/fromempty" \
    2> "$T/fromempty.err" || fail "export --from-log of an empty log: $(cat "$T/fromempty.err")"
[ "$(cat "$T"/fromempty/*.tsv | grep -vc '^#')" = 0 ] || fail "an empty log exported values"
if command -v kcat > /dev/null; then
    [ "$(kcat -C -b "$B" -t vocab2 -o beginning -e -q 2> /dev/null | wc -c)" = 0 ] ||
        fail "export --from-log wrote into the empty log"
fi
if "$PIPEREC" vocab export --config "$T/r1.yaml" --from-log --state "$T/state1" \
    --output "$T/x" 2> /dev/null; then
    fail "export --from-log with --state was taken"
fi

# The log has gone on past the import: importing it again is refused.
if "$PIPEREC" vocab import --config "$T/r1.yaml" --input "$T/off1/vocab" 2> "$T/past.err"; then
    fail "an import into a log that went on past it was taken"
fi
grep -q "not the start of this import (column .*past the file's last" "$T/past.err" ||
    fail "past: $(cat "$T/past.err")"

# A second replica with an empty state dir rebuilds the same from the log.
start_replica 2
wait_until 60 "replica 2's http port" has_port 2
wait_until 30 "replica 2 caught up with the log" lag_zero 2
kill -TERM "$RUN_2"
wait "$RUN_2" || fail "replica 2 exited $?"
"$PIPEREC" vocab export --config "$T/r2.yaml" --output "$T/export2" 2> /dev/null || fail "export 2"
diff -r "$T/export1" "$T/export2" > "$T/diff.out" ||
    fail "a replica rebuilt from the log differs: $(head -5 "$T/diff.out")"
n=$(cat "$T"/export1/*.tsv | grep -vc '^#')
echo "imported $(grep -o '[0-9]* values' "$T/import.err") of the first $((N / 2)) events into the log; streamed the rest: $n entries, equal to one offline run over all $N; rebuilt alike; a half-way import continued; 7 refusals"
echo "OK"
