#!/bin/sh
# test_promtool.sh — `promtool check metrics` accepts what our exposition
# writer produces (synthetic fixture; test_service_script.sh checks a live
# /metrics of `piperec run`). promtool exits non-zero on format errors and
# on lint problems (missing HELP, counters without _total, non-base units).
set -eu
command -v promtool >/dev/null || { echo "promtool missing (tools/install-deps.sh)"; exit 1; }
out="$PR_TMP/metrics.txt"
"$METRICS_FIXTURE" > "$out"
grep -q 'le="+Inf"' "$out"
promtool check metrics < "$out"
echo "promtool: ok ($(wc -l < "$out") lines)"
