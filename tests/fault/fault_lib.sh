# fault_lib.sh — shared by the tests/fault/ scripts (sourced, POSIX sh).
#
# Needs PIPEREC, PR_TMP (from pr_script_test) and sets T, FAULT_DIR. Every
# child started through `spawn` is killed (SIGKILL) on exit; waits poll a
# condition against a deadline, never sleep and hope.
set -eu
T="$PR_TMP"
FAULT_DIR=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
pids=""
fail() {
    echo "FAIL: $*" >&2
    for f in "$T"/*.err; do [ -f "$f" ] && { echo "--- $f"; tail -25 "$f"; }; done >&2
    diag_run >&2
    exit 1
}
# diag_run: what the current `piperec run` was doing when a wait failed, for
# a failure that does not reproduce: each thread's name, state and kernel
# wait channel, the trainer's status line, and the consumer and batch
# counters from /metrics (a stuck thread and a group join that never ended
# look the same in the log alone).
diag_run() {
    [ -n "${RUN:-}" ] && kill -0 "$RUN" 2>/dev/null || return 0
    echo "--- piperec run (pid $RUN) threads: name state wait-channel"
    for d in /proc/"$RUN"/task/*; do
        printf '%s %s %s\n' "$(cat "$d/comm" 2>/dev/null)" \
            "$(awk '{ print $3 }' "$d/stat" 2>/dev/null)" "$(cat "$d/wchan" 2>/dev/null)"
    done
    [ -f "$T/trainer.status" ] && echo "--- trainer.status: $(cat "$T/trainer.status")"
    [ -n "${HP:-}" ] || return 0
    echo "--- /metrics (consumer, partitions, rows, batches)"
    curl -sf -m 5 "http://127.0.0.1:$HP/metrics" 2>/dev/null |
        grep -E '^piperec_(assigned_partitions|paused_partitions|consumer_errors|consumer_lag_records|engine_rows|batches_emitted|sink_batches|records)' | head -40
}
cleanup() { for p in $pids; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
trap 'exit 130' INT TERM
ms() { echo $(( $(date +%s%N) / 1000000 )); }
# wait_until SECONDS DESCRIPTION COMMAND...: poll every 50 ms.
wait_until() {
    _secs=$1; _deadline=$(( $(ms) + $1 * 1000 )); _what=$2; shift 2
    while ! "$@" >/dev/null 2>&1; do
        [ "$(ms)" -lt "$_deadline" ] || fail "timed out after ${_secs} s waiting for $_what"
        sleep 0.05
    done
}
free_port() {
    $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
unset PIPEREC_INSTANCE_ID POD_NAME || true

# start_broker PARTITIONS [TOPICS]: sets B (bootstrap) and BROKER (pid).
start_broker() {
    mkfifo "$T/broker.fifo"
    "$PIPEREC" broker --partitions "$1" --topics "${2:-events}" > "$T/broker.fifo" \
        2> "$T/broker.err" &
    BROKER=$!; pids="$pids $BROKER"
    exec 3< "$T/broker.fifo"
    read -r _first <&3 || fail "broker printed nothing"
    B="${_first#bootstrap=}"
}

# rows FIRST COUNT FILE: COUNT generator rows whose first dense value (I1)
# is the row id FIRST.., so every row received can be traced to its input.
rows() {
    "$PIPEREC" gen --rows "$2" --seed 11 --first-row "$1" --output - |
        awk -v r="$1" 'BEGIN { FS = OFS = "\t" } { $2 = r + NR - 1; print }' > "$3"
}

MODULUS=100000
# pipeline_head GROUP [RESET [MODULUS [KAFKA_PROPERTY_LINE]]]: the start of
# the config the fault and eviction tests share, to stdout: pipeline `p`
# reading `events` on $B in group GROUP from RESET (default earliest), with
# short sessions and eager fetches; Criteo TSV, 13 dense + 26 sparse; dense
# columns kept as they are (the row id in column 0 stays exact); sparse
# hex2int -> modulus (default $MODULUS) -> vocab. The caller goes on with the
# `vocab:` line of `transform` and the rest of the pipeline.
pipeline_head() {
    cat <<Y
pipelines:
  - name: p
    source:
      kafka:
        topics: [events]
        group.id: $1
        properties:
          bootstrap.servers: "$B"
          auto.offset.reset: ${2:-earliest}
          session.timeout.ms: "3000"
          heartbeat.interval.ms: "500"
          fetch.wait.max.ms: "10"
          ${4:-}
      format: criteo_tsv
    schema: { label: true, dense: 13, sparse: 26 }
    transform:
      dense: []
      sparse: [hex2int, { modulus: ${3:-$MODULUS} }, vocab]
Y
}

# write_config FILE [EXTRA_LIMITS_YAML]: one pipeline `p` into a trainer sink
# on $TPORT with the state dir $STATE. Short sessions so that a restart on
# the mock broker (no static membership there) costs ~2 x 3 s, not 2 x 6 s.
write_config() {
    {
        pipeline_head "fault" "earliest" "$MODULUS" "${KAFKA_EXTRA:-}"
        cat <<Y
      vocab: { profile: dlrm }
    batch: { size: ${BATCH_SIZE:-512}, max_delay_ms: 50 }
    sinks:
      trainer: { listen: "127.0.0.1:$TPORT" }
    state: { dir: "$STATE", checkpoint_interval_s: 2 }
http: { listen: "127.0.0.1:0" }
log: { level: info }
${2:-}
Y
    } > "$1"
}

# start_run NAME [ENV=VAL...]: `piperec run` on $T/run.yaml, stderr to
# $T/NAME.err; sets RUN (pid) and waits for its HTTP port (HP).
start_run() {
    _name=$1; shift
    env "$@" "$PIPEREC" run --config "$T/run.yaml" 2> "$T/$_name.err" &
    RUN=$!; pids="$pids $RUN"
    HP=""
    _deadline=$(( $(ms) + 30000 ))
    while [ -z "$HP" ]; do
        HP=$(sed -n 's/.*http on port \([0-9]*\).*/\1/p' "$T/$_name.err" | head -1)
        [ -n "$HP" ] && break
        kill -0 "$RUN" 2>/dev/null || return 1
        [ "$(ms)" -lt "$_deadline" ] || fail "$_name: no http port after 30 s"
        sleep 0.05
    done
}
metric() { # NAME: sum of the samples of a metric on the current run
    curl -sf "http://127.0.0.1:$HP/metrics" |
        awk -v m="$1" '$1 == m || index($1, m "{") == 1 { s += $2; n++ } END { if (n) printf "%.0f\n", s; else exit 1 }'
}

# start_trainer [ARGS...]: fault_trainer.py on $TPORT, log $T/trainer.log.
start_trainer() {
    $PY "$FAULT_DIR/fault_trainer.py" --connect "127.0.0.1:$TPORT" --log "$T/trainer.log" \
        --status "$T/trainer.status" --stop-file "$T/trainer.stop" --max-rows "$NROWS" "$@" \
        2> "$T/trainer.err" &
    TRAINER=$!; pids="$pids $TRAINER"
}
trainer_field() { # 1 distinct, 2 total, 3 batches, 4 connects, 5 last epoch
    [ -f "$T/trainer.status" ] && awk -v f="$1" '{ print $f }' "$T/trainer.status"
}
trainer_has_all() { [ "$(trainer_field 1)" = "$NROWS" ]; }
trainer_batches_over() { [ "$(trainer_field 3)" -gt "$1" ]; }
trainer_in_epoch() { [ "$(trainer_field 5)" = "$1" ]; }
stop_trainer() {
    touch "$T/trainer.stop"
    # It notices within ~2 s (its recv and connect time out).
    wait "$TRAINER" || fail "trainer exited $?"
}
check() { # ARGS for fault_check.py
    $PY "$FAULT_DIR/fault_check.py" --log "$T/trainer.log" --rows "$NROWS" --modulus "$MODULUS" "$@"
}

# Replicas (tests with several `piperec run` on $T/rI.yaml, stderr to
# $T/rI.err; POD_NAME=rI names each; RUN_I = pid).
start_replica() {
    POD_NAME="r$1" "$PIPEREC" run --config "$T/r$1.yaml" 2>> "$T/r$1.err" &
    eval "RUN_$1=$!"
    pids="$pids $!"
}
http_port() { sed -n 's/.*http on port \([0-9]*\).*/\1/p' "$T/r$1.err" | tail -1; }
has_port() { [ -n "$(http_port "$1")" ]; }
scrape() { curl -sf "http://127.0.0.1:$(http_port "$1")/metrics"; }
lag_zero() { scrape "$1" | grep -q '^piperec_vocab_log_lag_records{pipeline="p"} 0$'; }
# files_rows DIR: rows in the closed rolls of a files sink (a roll still open
# at shutdown is dropped, unacknowledged, so it does not count).
files_rows() {
    cat "$1"/batches-*/meta.json 2>/dev/null |
        awk '/^  "rows": / { sub(",", "", $2); s += $2 } END { print s + 0 }'
}
