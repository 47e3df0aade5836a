#!/bin/sh
# bench/bench_vocab_import.sh — `make bench` step 4i: a shared vocabulary
# log seeded from an offline run (`piperec vocab import` with vocab_log)
# against building the same vocabulary by streaming the events through a
# replica, the way a deployment without the import gets it.
#
# The generated clickstream (`piperec gen --format json`, BENCH_VI_ROWS
# events, default 100,000; seed 3) through examples/clickstream.yaml's
# schema, on the test broker (events over 16 partitions, two empty
# single-partition log topics):
#
#   stream   one `piperec run` replica with vocab_log (log A), files sink,
#            from its start until every event went through its engine and
#            its log lag is 0: its vocabulary is then the log's
#   seed     `piperec process` over the same events (one thread), then
#            `piperec vocab import` of its vocab/ into log B
#   read     `piperec vocab export --from-log` of log B: what a new replica
#            with an empty state dir reads at startup
#
# Indices differ between the two logs (streaming interleaves the partitions;
# the offline run reads the file in order): the values are checked to be
# the same set per column. Prints JSON lines piperec_vocab_stream,
# piperec_vocab_seed, piperec_vocab_read, then vocab_import_ratios.
#
#   bench/bench_vocab_import.sh [BUILD_DIR]     (default: build)
set -eu
BUILD=${1:-build}
PIPEREC=$BUILD/piperec
HERE=$(cd "$(dirname "$0")" && pwd)
ROWS=${BENCH_VI_ROWS:-100000}
TMP=$(mktemp -d "${BENCH_TMP:-/tmp}/piperec-bench-vi.XXXXXX")
pids=""
cleanup() {
    for p in $pids; do kill -9 "$p" 2> /dev/null || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

now() { date +%s.%N; }
secs() { echo "$2 - $1" | bc -l; }

echo "== 4i. vocab log seeded by vocab import vs built by streaming: $ROWS events" >&2
"$PIPEREC" gen --format json --rows "$ROWS" --seed 3 --output "$TMP/ev.jsonl" 2> /dev/null
mkfifo "$TMP/broker.fifo"
"$PIPEREC" broker --partitions 16 --topics events,logA:1,logB:1,none:1 > "$TMP/broker.fifo" \
    2> "$TMP/broker.err" &
pids="$pids $!"
exec 3< "$TMP/broker.fifo"
read -r first <&3
B=${first#bootstrap=}
"$PIPEREC" produce --bootstrap "$B" --topic events --format json --input "$TMP/ev.jsonl" \
    > /dev/null 2> "$TMP/produce.err"

sed -n '/^    schema:/,/^    transform:/p' "$HERE/../examples/clickstream.yaml" | sed '$d' \
    > "$TMP/schema.yaml"
cfg() { # NAME TOPIC LOG
    cat > "$TMP/$1.yaml" <<Y
pipelines:
  - name: p
    source:
      kafka:
        topics: [$2]
        group.id: bench-$1
        properties: { bootstrap.servers: "$B", auto.offset.reset: earliest }
      format: json
$(cat "$TMP/schema.yaml")
    transform:
      vocab: { profile: default }
    batch: { size: 4096, max_delay_ms: 100 }
    sinks:
      files: { dir: "$TMP/out-$1" }
    state: { dir: "$TMP/state-$1" }
    vocab_log: { topic: $3 }
http: { listen: "127.0.0.1:0" }
log: { level: info }
Y
}
cfg stream events logA
cfg seed none logB

# stream: a replica from its start to every row through and the log caught up
t0=$(now)
"$PIPEREC" run --config "$TMP/stream.yaml" 2> "$TMP/stream.err" &
R=$!
pids="$pids $R"
port=""
scrape() { curl -sf "http://127.0.0.1:$port/metrics"; }
done_streaming() {
    [ -n "$port" ] || port=$(sed -n 's/.*http on port \([0-9]*\).*/\1/p' "$TMP/stream.err" | head -1)
    [ -n "$port" ] || return 1
    m=$(scrape) || return 1
    echo "$m" | grep -q "^piperec_engine_rows_total{pipeline=\"p\"} $ROWS\$" &&
        echo "$m" | grep -q '^piperec_vocab_log_lag_records{pipeline="p"} 0$'
}
n=0
until done_streaming; do
    n=$((n + 1))
    if [ $n -ge 6000 ]; then
        echo "bench_vocab_import: streaming did not finish:" >&2
        scrape | grep -E '^piperec_(engine_rows_total|vocab_log_lag_records|rejected_records_total)' >&2 || true
        tail -5 "$TMP/stream.err" >&2
        exit 1
    fi
    sleep 0.05
done
t1=$(now)
kill -TERM "$R"
wait "$R" || true
stream_s=$(secs "$t0" "$t1")

# seed: offline, then the import
t0=$(now)
"$PIPEREC" process --config "$TMP/seed.yaml" --input "$TMP/ev.jsonl" --output "$TMP/off" \
    --threads 1 --no-progress > /dev/null 2>&1
t1=$(now)
"$PIPEREC" vocab import --config "$TMP/seed.yaml" --input "$TMP/off/vocab" 2> "$TMP/import.err"
t2=$(now)
process_s=$(secs "$t0" "$t1")
import_s=$(secs "$t1" "$t2")
# the import's own split: opening the (empty) log, which writes its Settings
# record, and proposing the values and checking them
open_s=$(sed -n 's/.*opening the log \([0-9.]*\) s.*/\1/p' "$TMP/import.err")
propose_s=$(sed -n 's/.*proposing and checking \([0-9.]*\) s.*/\1/p' "$TMP/import.err")

# read: a new replica's rebuild, as the export from the log does it
t0=$(now)
"$PIPEREC" vocab export --config "$TMP/seed.yaml" --from-log --output "$TMP/fromlog" \
    2> /dev/null
t1=$(now)
read_s=$(secs "$t0" "$t1")
"$PIPEREC" vocab export --config "$TMP/stream.yaml" --from-log --output "$TMP/streamlog" \
    2> /dev/null

# the same values per column, both ways
for f in "$TMP"/fromlog/*.tsv; do
    name=$(basename "$f")
    a=$(awk -F '\t' '!/^#/ && $1 >= 0 { print $2 }' "$f" | sort | md5sum)
    b=$(awk -F '\t' '!/^#/ && $1 >= 0 { print $2 }' "$TMP/streamlog/$name" | sort | md5sum)
    [ "$a" = "$b" ] || { echo "bench_vocab_import: $name: other values" >&2; exit 1; }
done
values=$(cat "$TMP"/fromlog/*.tsv | awk -F '\t' '!/^#/ && $1 >= 0' | wc -l)

echo "{\"bench\": \"piperec_vocab_stream\", \"rows\": $ROWS, \"values\": $values, \"seconds\": $stream_s}"
echo "{\"bench\": \"piperec_vocab_seed\", \"rows\": $ROWS, \"values\": $values, \"process_seconds\": $process_s, \"import_seconds\": $import_s, \"import_open_log_seconds\": $open_s, \"import_propose_check_seconds\": $propose_s, \"propose_check_values_per_s\": $(echo "$values / $propose_s" | bc -l | cut -c1-12)}"
echo "{\"bench\": \"piperec_vocab_read\", \"values\": $values, \"seconds\": $read_s}"
echo "{\"bench\": \"vocab_import_ratios\", \"stream_over_seed\": $(echo "$stream_s / ($process_s + $import_s)" | bc -l | cut -c1-6), \"stream_over_import\": $(echo "$stream_s / $import_s" | bc -l | cut -c1-6)}"
