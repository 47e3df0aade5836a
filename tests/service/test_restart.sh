#!/bin/sh
# test_restart.sh — issue 11, points 5 and 8, on `piperec broker` (mock cluster):
#   restart: `piperec run` is killed with SIGKILL and started again with
#     DEFAULT group settings; its first batch must come within 10 s of the
#     restart (it used to wait out the dead member's 45 s session, then ~11 s
#     on this broker). The restarted run finds its predecessor's member id in
#     the state dir and sends the LeaveGroup the killed process could not, so
#     the group rebalances at once; the figure is printed ("restart: first
#     batch after N ms", ~5 s: the mock's rebalance delay). Without that the
#     mock cluster of librdkafka 2.0.2 (it ignores group.instance.id) held the
#     rebalance twice for the dead member, about 2 x session.timeout.ms - 1 s.
#   the same with source.consumers: 2: the member file keeps both instances'
#     ids and the restart drops both (bound 10 s too).
#   SIGTERM during a rebalance: while one member runs, a second one joins and
#     gets SIGTERM at several points of its join; each must drain and exit 0
#     (librdkafka 2.0.2 used to abort in rd_kafka_sticky_assignor_state_destroy).
# Env (from pr_script_test): PIPEREC, PR_TEST_DATA, PR_TMP.
set -eu
T="$PR_TMP"
DATA="$PR_TEST_DATA/criteo_sample_100.tsv"
fail() { echo "FAIL: $*" >&2; for f in "$T"/*.err; do echo "--- $f"; tail -20 "$f"; done >&2; exit 1; }
pids=""
cleanup() { for p in $pids; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
ms() { echo $(( $(date +%s%N) / 1000000 )); }
wait_until() { # seconds, description, command...
    n=$(( $1 * 20 )); what=$2; shift 2
    while ! "$@" >/dev/null 2>&1; do
        n=$((n - 1)); [ $n -gt 0 ] || fail "timed out waiting for $what"
        sleep 0.05
    done
}

mkfifo "$T/broker.fifo"
"$PIPEREC" broker --partitions 2 --topics events,other > "$T/broker.fifo" 2> "$T/broker.err" &
pids="$pids $!"
exec 3< "$T/broker.fifo"
read -r first <&3 || fail "broker printed nothing"
B="${first#bootstrap=}"
kcat -P -b "$B" -t events -l "$DATA" 2>/dev/null || fail "kcat produce"

# Default group settings on purpose: no session.timeout.ms, no instance id.
config() { # name group dir
    cat > "$T/$1.yaml" <<Y
pipelines:
  - name: p
    source:
      kafka:
        topics: [events]
        group.id: $2
        properties: { bootstrap.servers: "$B", auto.offset.reset: earliest }
    batch: { size: 8, max_delay_ms: 50 }
    sinks:
      files: { dir: "$T/$3" }
    state: { dir: "$T/state-$3" }
http: { listen: "127.0.0.1:0" }
log: { level: info }
Y
}
emitted() { # log -> succeeds once the run's /v1/status shows a batch
    hp=$(sed -n 's/.*http on port \([0-9]*\).*/\1/p' "$1" | head -1)
    [ -n "$hp" ] && curl -sf "http://127.0.0.1:$hp/v1/status" | grep -q '"batches_emitted":[1-9]'
}
unset PIPEREC_INSTANCE_ID POD_NAME || true

# ---- point 5: restart after SIGKILL --------------------------------------
# kill9_restart NAME GROUP CONSUMERS: a run with CONSUMERS instances gets its
# first batch and every instance's member id is in the member file; kill -9;
# new rows; the restart's first batch within 10 s, every predecessor member
# dropped on its behalf (the log, piperec_stale_members_total), epoch 2.
# With 2 instances: the file used to keep the first one's id only, and the
# restart then waited out the other's session.
kill9_restart() {
    config "$1" "$2" "out$1"
    [ "$3" -eq 1 ] || sed -i "s/^    source:\$/    source:\n      consumers: $3/" "$T/$1.yaml"
    "$PIPEREC" run --config "$T/$1.yaml" 2> "$T/$1-a.err" &
    RA=$!; pids="$pids $RA"
    wait_until 30 "$1: first run's first batch" emitted "$T/$1-a.err"
    ids() { [ "$(grep -c '^piperec-member 1' "$T/state-out$1/p.member")" -eq "$2" ]; }
    wait_until 30 "$1: every instance's member id in the member file" ids "$1" "$3"
    kill -9 $RA; wait $RA 2>/dev/null || true
    kcat -P -b "$B" -t events -l "$DATA" 2>/dev/null || fail "kcat produce"
    t0=$(ms)
    "$PIPEREC" run --config "$T/$1.yaml" 2> "$T/$1-b.err" &
    RB=$!; pids="$pids $RB"
    wait_until 30 "$1: restarted run's first batch" emitted "$T/$1-b.err"
    dt=$(( $(ms) - t0 ))
    echo "restart with $3 consumer instance(s): first batch after $dt ms"
    [ "$dt" -lt 10000 ] || fail "$1: restart took $dt ms (bound 10000)"
    grep -q "epoch 2 " "$T/$1-b.err" || fail "$1: restarted run is not epoch 2"
    [ "$(grep -c "its member .* was dropped on its behalf" "$T/$1-b.err")" -eq "$3" ] ||
        fail "$1: not every predecessor member ($3) was dropped"
    hp=$(sed -n 's/.*http on port \([0-9]*\).*/\1/p' "$T/$1-b.err" | head -1)
    curl -sf "http://127.0.0.1:$hp/metrics" |
        grep -q "^piperec_stale_members_total{pipeline=\"p\",result=\"dropped\"} $3\$" ||
        fail "$1: piperec_stale_members_total{result=dropped} is not $3"
    kill -TERM $RB; wait $RB || fail "$1: restarted run: exit $?"
}
kill9_restart r restart-g 1
kill9_restart k restart-k 2

# ---- point 8: SIGTERM while a second member joins ------------------------
config a sigterm-g outa
"$PIPEREC" run --config "$T/a.yaml" 2> "$T/a.err" &
A=$!; pids="$pids $A"
wait_until 30 "member A's first batch" emitted "$T/a.err"
i=0
for delay in 0.2 1 2.5 4.5 5.2; do
    i=$((i + 1))
    config b$i sigterm-g outb$i
    "$PIPEREC" run --config "$T/b$i.yaml" 2> "$T/b$i.err" &
    BP=$!
    sleep "$delay"
    kill -TERM $BP
    rc=0; wait $BP || rc=$?
    if [ "$rc" -ne 0 ] || grep -q "Assertion" "$T/b$i.err"; then
        fail "member B (SIGTERM after ${delay}s of its join) exited $rc"
    fi
    echo "sigterm during join after ${delay}s: exit 0"
done
kill -0 $A || fail "member A died"
kill -TERM $A; wait $A || fail "member A: exit $?"
echo "test_restart: ok"
