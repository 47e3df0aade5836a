#!/bin/sh
# bench_protobuf.sh — issue 23's goal for the user's own Protobuf messages:
# decode + extract >= 10x a Python consumer doing the same (python3-protobuf,
# the message class from the same descriptor set), per-core MB/s, side by
# side on the same messages in one run.
#
#   bench/bench_protobuf.sh BUILD_DIR [EVENTS] [ROUNDS]
#
# The events are the example clickstream (`piperec gen --format json`, seed
# 1) as shop.Click (tests/data/pbuser_clickstream.proto). Prints the JSON
# lines of bench_protobuf (pbuser_extract, pbuser_decode, json_decode) and of
# baseline_protobuf.py, then protobuf_vs_python with the ratios (the goal is
# judged like for like: the extract figure; the full decoder's also shown).
set -eu
B=${1:?usage: bench_protobuf.sh BUILD_DIR [EVENTS] [ROUNDS]}
N=${2:-200000}
R=${3:-3}
SRC=$(cd "$(dirname "$0")/.." && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
protoc --descriptor_set_out="$T/click.desc" --include_imports -I "$SRC/tests/data" \
    pbuser_clickstream.proto
"$B/bench/bench_protobuf" --desc "$T/click.desc" --events "$N" --write "$T/events.pbd"
"$B/bench/bench_protobuf" --desc "$T/click.desc" --events "$N" --rounds "$R" | tee "$T/c.jsonl"
/usr/bin/python3 "$SRC/bench/baseline_protobuf.py" "$T/click.desc" "$T/events.pbd" "$R" \
    | tee "$T/py.jsonl"
/usr/bin/python3 - "$T/c.jsonl" "$T/py.jsonl" <<'PY'
import json, sys
c = {j["bench"]: j for j in map(json.loads, open(sys.argv[1]))}
py = json.loads(open(sys.argv[2]).read())
ex, de = c["pbuser_extract"]["mb_per_s"], c["pbuser_decode"]["mb_per_s"]
print(json.dumps({"bench": "protobuf_vs_python", "c_extract_mb_per_s": ex,
                  "c_decode_mb_per_s": de, "python_mb_per_s": py["mb_per_s"],
                  "ratio_extract": round(ex / py["mb_per_s"], 1),
                  "ratio_decode": round(de / py["mb_per_s"], 1),
                  "goal_ratio": 10,
                  # like for like: Python parses and reads the fields, as pr_pbuser_read
                  # does; the full decoder also runs the schema's operators
                  "goal_met": ex / py["mb_per_s"] >= 10,
                  "full_decoder_over_10x": de / py["mb_per_s"] >= 10}))
PY
