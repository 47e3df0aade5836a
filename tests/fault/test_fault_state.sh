#!/bin/sh
# test_fault_state.sh — issue 11, fault injection: the state dir fails.
#
# `piperec run` runs under fault_fs.so (LD_PRELOAD; $FAULT_FS from CMake):
# while $T/fault exists, write/fsync/rename/ftruncate/create under the state
# dir fail with the errno it names. Two rounds, ENOSPC (disk full) then EIO
# (failing disk), each while rows with new vocabulary values arrive:
#   * the pipeline stops before any batch whose indices are not durable
#     leaves, saying why: "vocab journal: ... append failed (<errno text>)",
#     exit 1 (the drain commits only what the trainer acknowledged);
#   * a restart while the fault lasts refuses to start (exit 1, the state
#     dir and the errno named): it cannot stamp a new epoch;
#   * once the fault clears, a restart delivers every row (0 lost), every
#     value keeps its index across all of it, (epoch, seq) only grows.
. "$(dirname "$0")/fault_lib.sh"
[ -f "${FAULT_FS:-}" ] || fail "FAULT_FS (the fault_fs.so shim) not set"

STEP=8000
NROWS=$(( 3 * STEP ))
start_broker 4
TPORT=$(free_port)
STATE="$T/state"
write_config "$T/run.yaml"
for s in 0 1 2; do rows $(( s * STEP )) $STEP "$T/in$s.tsv"; done
start_trainer
SHIM="LD_PRELOAD=$FAULT_FS PR_FAULT_DIR=$STATE PR_FAULT_TRIGGER=$T/fault"
lag_zero() { [ "$(metric piperec_consumer_lag_records)" = 0 ]; }
distinct_at_least() { [ "$(trainer_field 1)" -ge "$1" ]; }
produce() { "$PIPEREC" produce --bootstrap "$B" --topic events --input "$T/in$1.tsv" \
                > "$T/p$1.out" 2> "$T/p$1.err" || fail "produce $1"; }

# fault_round N ERRNO TEXT: rows of step N arrive while the state dir fails.
fault_round() {
    echo "$2" > "$T/fault"
    produce "$1"
    rc=0; wait "$RUN" || rc=$?
    [ "$rc" = 1 ] || fail "run under $2: exit $rc, expected 1"
    grep -q "fault_fs: failing" "$T/$_name.err" || fail "the shim injected nothing"
    grep -q "vocab journal: .*append failed ($3)" "$T/$_name.err" ||
        fail "no 'vocab journal: ... append failed ($3)' line"
    grep -q "stopped after a failure" "$T/$_name.err" || fail "no final failure line"
    echo "$2: $(grep -m1 'pipeline p: engine: vocab journal' "$T/$_name.err")"
    # Commits stopped at what the trainer acknowledged: the rows of step N
    # (each its own message) are not committed.
    set -- "$@" $($PY "$FAULT_DIR/kafka_offsets.py" "$B" fault events) || fail "kafka_offsets"
    [ "$4" -le $(( $1 * STEP )) ] && [ "$5" = $(( ($1 + 1) * STEP )) ] ||
        fail "$2: committed $4 of $5 offsets, expected at most $(( $1 * STEP ))"
    echo "$2: committed offsets $4 of $5"
    # Still failing: a restart is refused, naming the state dir and errno.
    rc=0; env $SHIM "$PIPEREC" run --config "$T/run.yaml" 2> "$T/refused-$2.err" || rc=$?
    [ "$rc" = 1 ] || fail "restart under $2: exit $rc, expected 1"
    grep -q "$STATE.*$3" "$T/refused-$2.err" || fail "restart under $2 does not say why"
    echo "$2, restart refused: $(grep -m1 "piperec run:" "$T/refused-$2.err")"
    rm -f "$T/fault"
}

# shellcheck disable=SC2086
start_run run1 $SHIM
produce 0
wait_until 60 "step 0 at the trainer" distinct_at_least $STEP
wait_until 30 "step 0 committed" lag_zero
fault_round 1 ENOSPC "No space left on device"

# shellcheck disable=SC2086
start_run run2 $SHIM
wait_until 60 "step 1 at the trainer" distinct_at_least $(( 2 * STEP ))
wait_until 30 "step 1 committed" lag_zero
fault_round 2 EIO "Input/output error"

start_run run3
wait_until 60 "every row at the trainer" trainer_has_all
wait_until 30 "everything committed" lag_zero
kill -TERM "$RUN"
wait "$RUN" || fail "last run exited $?"
stop_trainer
out=$(check --input "$T/in0.tsv" --input "$T/in1.tsv" --input "$T/in2.tsv" --epochs-min 3) ||
    fail "check"
echo "state dir ENOSPC + EIO: $out"
echo "test_fault_state: ok"
