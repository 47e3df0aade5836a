#!/bin/sh
# test_vocab_seed_run.sh — transform.vocab.seed in the streaming service:
# `piperec process` over the first 50 rows seeds `piperec run` (one partition,
# so stream order = file order), which then reads all 100 rows; exported from
# its state dir, the vocabulary must equal one offline run over all 100 rows
# (seeded values kept their indices, new ones continued). A restart on the
# same state dir ignores the seed (the state dir already holds a vocabulary).
# Env (from pr_script_test): PIPEREC, PR_TEST_DATA, PR_TMP.
set -eu
T="$PR_TMP"
DATA="$PR_TEST_DATA/criteo_sample_100.tsv"
fail() { echo "FAIL: $*" >&2; for f in "$T"/*.err; do echo "--- $f"; tail -20 "$f"; done >&2; exit 1; }
pids=""
cleanup() { for p in $pids; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
wait_until() { # seconds, description, command...
    n=$(( $1 * 20 )); what=$2; shift 2
    while ! "$@" >/dev/null 2>&1; do
        n=$((n - 1)); [ $n -gt 0 ] || fail "timed out waiting for $what"
        sleep 0.05
    done
}
command -v kcat >/dev/null || { echo "kcat not installed: skipped"; exit 0; }

head -50 "$DATA" > "$T/a.tsv"
"$PIPEREC" process --input "$T/a.tsv" --output "$T/a" 2>/dev/null || fail "process a"
"$PIPEREC" process --input "$DATA" --output "$T/all" 2>/dev/null || fail "process all"

mkfifo "$T/broker.fifo"
"$PIPEREC" broker --partitions 1 --topics events > "$T/broker.fifo" 2> "$T/broker.err" &
pids="$pids $!"
exec 3< "$T/broker.fifo"
read -r first <&3 || fail "broker printed nothing"
B="${first#bootstrap=}"
kcat -P -b "$B" -t events -l "$DATA" 2>/dev/null || fail "kcat produce"
cat > "$T/r.yaml" <<Y
pipelines:
  - name: p
    source:
      kafka:
        topics: [events]
        group.id: seed-g
        properties: { bootstrap.servers: "$B", auto.offset.reset: earliest }
    transform:
      vocab: { seed: "$T/a/vocab" }
    batch: { size: 8, max_delay_ms: 50 }
    sinks:
      files: { dir: "$T/out" }
    state: { dir: "$T/state" }
http: { listen: "127.0.0.1:0" }
log: { level: info }
Y
all_in() { # log -> succeeds once /v1/status shows 100 records out
    hp=$(sed -n 's/.*http on port \([0-9]*\).*/\1/p' "$1" | head -1)
    [ -n "$hp" ] && curl -sf "http://127.0.0.1:$hp/v1/status" | grep -q '"records_out":100,'
}
"$PIPEREC" run --config "$T/r.yaml" 2> "$T/r1.err" &
R=$!; pids="$pids $R"
wait_until 60 "100 records out" all_in "$T/r1.err"
kill -TERM $R; wait $R || fail "run: exit $?"
grep -q "vocabulary seeded from $T/a/vocab" "$T/r1.err" || fail "seed not logged"
"$PIPEREC" vocab export --config "$T/r.yaml" --pipeline p --output "$T/ex" 2>/dev/null \
    || fail "vocab export"
for f in "$T"/all/vocab/*.tsv; do
    grep -v '^#' "$f" > "$T/want"
    grep -v '^#' "$T/ex/$(basename "$f")" > "$T/got"
    cmp -s "$T/want" "$T/got" || fail "streamed vocabulary differs: $(basename "$f")"
done

"$PIPEREC" run --config "$T/r.yaml" 2> "$T/r2.err" &
R=$!; pids="$pids $R"
wait_until 30 "restart" grep -q "vocab.seed .* not used" "$T/r2.err"
kill -TERM $R; wait $R || fail "restart: exit $?"
echo "test_vocab_seed_run: ok"
