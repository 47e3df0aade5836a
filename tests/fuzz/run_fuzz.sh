#!/bin/sh
# run_fuzz.sh BINARY CORPUS SECONDS WORKDIR [libFuzzer flags...]
# Fuzz one target for SECONDS on a copy of its checked-in corpus (WORKDIR/corpus,
# so new inputs never land in the source tree); crash/leak/timeout inputs go
# to WORKDIR/ as crash-*, leak-*, timeout-*. Prints one summary line:
#   fuzz_<target>: <execs> execs in <s> s (<execs/s>/s), corpus <n> -> <m> files
# and exits non-zero when libFuzzer found anything.
set -eu
bin=$1 corpus=$2 secs=$3 work=$4
shift 4
name=$(basename "$bin")
rm -rf "$work"
mkdir -p "$work/corpus"
cp "$corpus"/* "$work/corpus/"
n0=$(ls "$work/corpus" | wc -l)
log="$work/fuzz.log"
rc=0
# -timeout: one input running longer than this is a hang (reported as a bug).
# -rss_limit_mb: libFuzzer's default 2048 plus room for ASan's shadow.
"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$work/" "$@" "$work/corpus" >"$log" 2>&1 || rc=$?
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
n1=$(ls "$work/corpus" | wc -l)
if [ "$rc" != 0 ] || [ -z "$execs" ]; then
    tail -n 60 "$log" >&2
    echo "$name: FAILED (exit $rc); log and artifacts in $work" >&2
    exit 1
fi
echo "$name: $execs execs in $secs s ($((execs / secs))/s), corpus $n0 -> $n1 files"
