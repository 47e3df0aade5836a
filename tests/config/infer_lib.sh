# infer_lib.sh — sourced by the `piperec infer` script tests (infer*.sh):
# the helpers they share. Needs PIPEREC and T (the test's temp dir).

fail() { echo "FAIL: $*" >&2; exit 1; }

# The schema part of a config (from `schema:` to `transform:`).
schema() { sed -n '/^    schema:/,/^    transform:/p' "$1"; }

# `piperec infer ARGS...` must exit 2 with MSG (a fixed string) in its
# message: refuse MSG ARGS...
refuse() {
    msg=$1
    shift
    if "$PIPEREC" infer "$@" > /dev/null 2> "$T/rerr"; then fail "accepted: $*"; else rc=$?; fi
    [ "$rc" -eq 2 ] || fail "exit $rc for: $*: $(cat "$T/rerr")"
    grep -qF -- "$msg" "$T/rerr" || fail "message for $*: $(cat "$T/rerr")"
}
