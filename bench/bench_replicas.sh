#!/bin/sh
# bench/bench_replicas.sh — scale-out with a shared vocabulary (issue 9).
#
#   bench/bench_replicas.sh [BUILD_DIR] [REPLICA_COUNTS]     (default: build "1 2 3")
#
# One test broker (`piperec broker`): `events` with BENCH_REPL_PARTS
# partitions (default 32), one Criteo line per message, BENCH_REPL_ROWS rows
# (default 400K, under the broker's ~5 MB per partition) loaded up front.
# Runs, side by side in this one script:
#   * 1 replica WITHOUT vocab_log (the baseline: a process owns its vocabulary);
#   * N replicas WITH vocab_log, for every N in REPLICA_COUNTS (each run its
#     own consumer group and its own fresh log topic).
# Each replica writes batches with the files sink to a tmpfs dir (cheap, so the
# pipeline is measured, not a trainer). rows/s = rows between 10% and 90% of
# the total out, divided by the time between (group joins and the tail are
# left out). From each vocab_log run: the new-value wait p50/p99 (from
# piperec_vocab_log_wait_seconds), blocks that waited, values proposed.
# Then HA: 3 replicas with the DEFAULT consumer settings, rows produced at a
# steady rate, one replica killed with -9: seconds until the survivors have
# its partitions (their next "partition(s) assigned"). And HA by restart, as
# a supervisor does it: 3 replicas with state dirs and dynamic membership,
# one killed with -9 and started again at once on its state dir, three
# times: seconds from the kill until the restarted replica holds partitions
# again and until its first rows are out (it drops its predecessor's group
# member, so the group need not wait out the session); the figure is the
# slowest round's first rows out.
#
# Prints one JSON line per figure (collected by bench/run.sh) and ratios
# against the no-log baseline. On a 16-core machine pass "1 2 4 8".
set -eu
BUILD=${1:-build}
COUNTS=${2:-1 2 3}
ROWS=${BENCH_REPL_ROWS:-400000}
PARTS=${BENCH_REPL_PARTS:-32}
PY=/usr/bin/python3
PIPEREC=$BUILD/piperec
[ -x "$PIPEREC" ] || { echo "bench_replicas: $PIPEREC not built" >&2; exit 1; }
SHM=/dev/shm
[ -d "$SHM" ] && [ -w "$SHM" ] || SHM=${TMPDIR:-/tmp}
T=$(mktemp -d "$SHM/piperec-repl.XXXXXX")
pids=""
cleanup() { for p in $pids; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$T"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
ms() { echo $(( $(date +%s%N) / 1000000 )); }
unset PIPEREC_INSTANCE_ID POD_NAME || true

# Every vocab_log run gets a fresh single-partition log topic, created up
# front (the test broker would auto-create a missing one with $PARTS).
topics="events,vocab-ha:1,vocab-har:1"
for n in $COUNTS; do topics="$topics,vocab-$n:1"; done
mkfifo "$T/broker.fifo"
"$PIPEREC" broker --partitions "$PARTS" --topics "$topics" > "$T/broker.fifo" 2> "$T/broker.err" &
pids="$pids $!"
exec 3< "$T/broker.fifo"
read -r first <&3
B=${first#bootstrap=}
"$PIPEREC" gen --rows "$ROWS" --seed 5 --output "$T/data.tsv"
# Rate-limited: the test broker drops part of a burst this large. Random
# partitions per message: with librdkafka's sticky partitioning one partition
# takes whole batches, passes the broker's ~5 MB and loses its oldest records.
"$PIPEREC" produce --bootstrap "$B" --topic events --input "$T/data.tsv" --rate 250000 \
    -X sticky.partitioning.linger.ms=0 > "$T/produce.out" 2>&1
# What the topic really holds (high - low watermark: trimmed records are gone)
# is the target.
ROWS=$($PY - "$B" "$PARTS" <<'PY'
import sys
from confluent_kafka import Consumer, TopicPartition
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "bench-watermarks"})
w = [c.get_watermark_offsets(TopicPartition("events", p), timeout=10)
     for p in range(int(sys.argv[2]))]
print(sum(hi - lo for lo, hi in w))
c.close()
PY
)
echo "bench_replicas: $ROWS rows in $PARTS partitions" >&2

# config NAME GROUP VOCAB_TOPIC|- I [SETTINGS]: $T/NAME.yaml
config() {
    vl=""
    [ "$3" != "-" ] && vl="    vocab_log: { topic: $3 }"
    cat > "$T/$1.yaml" <<Y
pipelines:
  - name: p
    source:
      kafka:
        topics: [events]
        group.id: $2
        properties:
          bootstrap.servers: "$B"
          auto.offset.reset: earliest
${5:-}
      format: criteo_tsv
    schema: { label: true, dense: 13, sparse: 26 }
    batch: { size: 4096, max_delay_ms: 100 }
    sinks:
      files: { dir: "$T/out-$1" }
$vl
http: { listen: "127.0.0.1:0" }
log: { level: info }
Y
}
port() { sed -n 's/.*http on port \([0-9]*\).*/\1/p' "$T/$1.err" | tail -1; }
scrape() { curl -sf "http://127.0.0.1:$(port "$1")/metrics" 2>/dev/null || true; }
out_rows() { scrape "$1" | awk '$1 == "piperec_records_out_total{pipeline=\"p\"}" { print $2 }'; }

# run_set TAG N VOCAB_TOPIC|-: N replicas on a fresh group; prints a JSON line.
run_set() {
    tag=$1; n=$2; vt=$3
    names=""
    i=1
    while [ $i -le "$n" ]; do
        config "$tag-$i" "g-$tag" "$vt" $i
        POD_NAME="$tag-$i" "$PIPEREC" run --config "$T/$tag-$i.yaml" 2> "$T/$tag-$i.err" &
        pids="$pids $!"; eval "PID_$i=$!"
        names="$names $tag-$i"
        i=$((i + 1))
    done
    t10=""; t90=""; r10=0; r90=0
    deadline=$(( $(ms) + 600000 ))
    while :; do
        tot=0
        for nm in $names; do v=$(out_rows "$nm"); tot=$(( tot + ${v:-0} )); done
        now=$(ms)
        if [ -z "$t10" ] && [ "$tot" -ge $(( ROWS / 10 )) ]; then t10=$now; r10=$tot; fi
        if [ -z "$t90" ] && [ "$tot" -ge $(( ROWS * 9 / 10 )) ]; then t90=$now; r90=$tot; break; fi
        [ "$now" -lt "$deadline" ] || { echo "bench_replicas: $tag stalled at $tot rows" >&2; exit 1; }
        sleep 0.1
    done
    # The vocab-log figures, summed over the replicas' scrapes.
    for nm in $names; do scrape "$nm"; done > "$T/$tag.metrics"
    i=1
    while [ $i -le "$n" ]; do kill -TERM "$(eval echo "\$PID_$i")"; i=$((i + 1)); done
    i=1
    while [ $i -le "$n" ]; do wait "$(eval echo "\$PID_$i")" || true; i=$((i + 1)); done
    $PY - "$T/$tag.metrics" "$tag" "$n" "$r10" "$r90" "$t10" "$t90" "$vt" <<'PY'
import json, re, sys
path, tag, n, r10, r90, t10, t90, vt = sys.argv[1:]
# Both marks in one 0.1 s sample (a small BENCH_REPL_ROWS): no rate to give.
rate = None if int(r90) == int(r10) else \
    (int(r90) - int(r10)) / max(1e-3, (int(t90) - int(t10)) / 1000)
buckets, tot = {}, {}
for line in open(path):
    m = re.match(r'(\w+)\{([^}]*)\} (\S+)', line)
    if not m:
        continue
    name, labels, v = m.group(1), m.group(2), float(m.group(3))
    if name == "piperec_vocab_log_wait_seconds_bucket":
        le = re.search(r'le="([^"]+)"', labels).group(1)
        buckets[le] = buckets.get(le, 0) + v
    elif name in ("piperec_vocab_log_blocks_waited_total", "piperec_vocab_log_proposals_total",
                  "piperec_vocab_log_ahead_proposals_total",
                  "piperec_vocab_log_indices_assigned_total"):
        tot[name] = tot.get(name, 0) + v

def quantile(q):
    items = sorted(((float("inf") if k == "+Inf" else float(k)), c) for k, c in buckets.items())
    if not items or items[-1][1] == 0:
        return None
    want, prev_b, prev_c = q * items[-1][1], 0.0, 0.0
    for b, c in items:
        if c >= want:
            if b == float("inf"):
                return prev_b
            return prev_b + (b - prev_b) * (want - prev_c) / max(1e-12, c - prev_c)
        prev_b, prev_c = b, c
    return prev_b

out = {"bench": "replicas", "name": tag, "replicas": int(n), "vocab_log": vt != "-",
       "rows_per_s": None if rate is None else round(rate)}
if vt != "-":
    p50, p99 = quantile(0.5), quantile(0.99)
    out.update({"wait_p50_ms": None if p50 is None else round(p50 * 1000, 2),
                "wait_p99_ms": None if p99 is None else round(p99 * 1000, 2),
                "blocks_waited": int(tot.get("piperec_vocab_log_blocks_waited_total", 0)),
                "values_proposed_ahead":
                    int(tot.get("piperec_vocab_log_ahead_proposals_total", 0)),
                "values_proposed": int(tot.get("piperec_vocab_log_proposals_total", 0))})
print(json.dumps(out))
PY
}

base=$(run_set nolog 1 -)
echo "$base"
base_rate=$(echo "$base" | $PY -c 'import json,sys; print(json.load(sys.stdin)["rows_per_s"])')
for n in $COUNTS; do
    line=$(run_set "log$n" "$n" "vocab-$n")
    echo "$line"
    echo "$line" | $PY -c '
import json, sys
d = json.load(sys.stdin)
base = float(sys.argv[1]) if sys.argv[1] not in ("None", "") else 0.0
r = d["rows_per_s"]
print(json.dumps({"bench": "replicas_ratio", "name": d["name"], "replicas": d["replicas"],
                  "rows_per_s_vs_1_replica_without_log":
                      round(r / base, 3) if r is not None and base else None}))' "$base_rate"
done

# ha_start TAG GROUP VOCAB [SOURCE_LINE [STATE]]: 3 replicas TAG-1..3 (pids in
# TAG_1..3, with "-" in TAG read as "_") and a steady producer ($PROD); returns
# once all three hold partitions and the group has settled.
ha_start() {
    _v=$(echo "$1" | tr - _)
    for i in 1 2 3; do
        config "$1-$i" "$2" "$3" $i "${4:-}"
        [ -n "${5:-}" ] &&
            sed -i "s|^\(    sinks:\)|    state: { dir: \"$T/state-$1-$i\" }\n\1|" "$T/$1-$i.yaml"
        POD_NAME="$1-$i" "$PIPEREC" run --config "$T/$1-$i.yaml" 2> "$T/$1-$i.err" &
        pids="$pids $!"; eval "${_v}_$i=$!"
    done
    "$PIPEREC" produce --bootstrap "$B" --topic events --gen 2000000 --seed 9 --rate 20000 \
        > /dev/null 2>&1 &
    PROD=$!; pids="$pids $PROD"
    _deadline=$(( $(ms) + 120000 ))
    while :; do
        _ok=1
        for i in 1 2 3; do grep -q "partition(s) assigned" "$T/$1-$i.err" || _ok=0; done
        [ $_ok = 1 ] && break
        [ "$(ms)" -lt "$_deadline" ] || { echo "bench_replicas: HA group $1 never formed" >&2; exit 1; }
        sleep 0.2
    done
    sleep 8
}
# ha_stop TAG I...: stop the producer and the named replicas.
ha_stop() {
    _v=$(echo "$1" | tr - _); shift
    kill "$PROD" 2>/dev/null || true
    for i in "$@"; do kill -TERM "$(eval echo "\$${_v}_$i")"; done
    for i in "$@"; do wait "$(eval echo "\$${_v}_$i")" || true; done
}
ha_json() { # NAME MS
    echo "{\"bench\": \"replicas_ha\", \"name\": \"$1\", \"replicas\": 3, \"default_settings\": true, \"seconds\": $(awk -v t="$2" 'BEGIN { printf "%.2f", t / 1000 }')}"
}

# The HA groups measure takeover, not throughput, and the test broker trims
# the oldest records of a partition past ~5 MB while the steady producer
# runs: a group still reading old records would hit "offset out of range"
# (on_offset_reset fail by default). They jump to the end instead.
HA_SRC='        on_offset_reset: latest'
NL='
'

# HA: default consumer settings, steady input, kill -9 one of three.
ha_start ha g-ha vocab-ha "$HA_SRC"
a2=$(grep -c "partition(s) assigned" "$T/ha-2.err")
a3=$(grep -c "partition(s) assigned" "$T/ha-3.err")
t_kill=$(ms)
kill -9 "$ha_1"
while :; do
    n2=$(grep -c "partition(s) assigned" "$T/ha-2.err"); n3=$(grep -c "partition(s) assigned" "$T/ha-3.err")
    [ "$n2" -gt "$a2" ] || [ "$n3" -gt "$a3" ] && break
    [ $(( $(ms) - t_kill )) -lt 120000 ] || break
    sleep 0.05
done
t_take=$(( $(ms) - t_kill ))
ha_stop ha 2 3
ha_json kill9_takeover "$t_take"

# HA by restart: dynamic membership (group_instance_id ""), state dirs. The
# same replica is killed and restarted BENCH_REPL_HA_ROUNDS times (default
# 3), 8 s apart; each round prints when it held partitions again and when
# its first rows were out (served), and the last line the worst round. Keep
# the rounds few: the steady producer keeps adding values, and past ~5 MB
# the test broker trims the log's head, after which a replica without a
# snapshot (checkpoint_interval_s is 60 s) rightly refuses to start.
ha_start har g-har vocab-har "        group_instance_id: \"\"$NL$HA_SRC" state
worst=0
round=1
while [ $round -le "${BENCH_REPL_HA_ROUNDS:-3}" ]; do
    t_kill=$(ms)
    kill -9 "$har_1"
    wait "$har_1" 2>/dev/null || true
    POD_NAME="har-1" "$PIPEREC" run --config "$T/har-1.yaml" 2> "$T/har-1r$round.err" &
    har_1=$!; pids="$pids $har_1"
    while ! grep -q "partition(s) assigned" "$T/har-1r$round.err" 2>/dev/null; do
        [ $(( $(ms) - t_kill )) -lt 120000 ] || break
        sleep 0.05
    done
    t_back=$(( $(ms) - t_kill ))
    while :; do
        r=$(out_rows "har-1r$round")
        [ "${r:-0}" -gt 0 ] && break
        [ $(( $(ms) - t_kill )) -lt 120000 ] || break
        sleep 0.05
    done
    t_rows=$(( $(ms) - t_kill ))
    grep -q "was dropped on its behalf" "$T/har-1r$round.err" ||
        echo "bench_replicas: restart $round did not drop its predecessor's member" >&2
    echo "{\"bench\": \"replicas_ha_round\", \"name\": \"kill9_restart\", \"round\": $round, \"assigned_s\": $(awk -v t="$t_back" 'BEGIN { printf "%.2f", t / 1000 }'), \"first_rows_out_s\": $(awk -v t="$t_rows" 'BEGIN { printf "%.2f", t / 1000 }')}"
    [ "$t_rows" -gt "$worst" ] && worst=$t_rows
    round=$((round + 1))
    sleep 8
done
ha_stop har 1 2 3
# The figure: the slowest round, kill to first rows out of the restarted replica.
ha_json kill9_restart "$worst"
