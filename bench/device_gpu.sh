#!/bin/sh
# bench/device_gpu.sh — everything issue 22 (the GPU feed) wants measured on
# a GPU host, in one command of at most ~9 minutes (about 5-6 typical), for a lent machine that has
# a GPU, torch 2.x and numpy 2.x but no compiler for this project, no network
# and no apt: only the prebuilt binaries (carried) and its own python3.
#
# Here, after building (once):
#   bench/device_gpu.sh --pack [BUILD]        (default build)
#     copies the shared libraries build/piperec and build/tests/batcher/bt_serve
#     need, except glibc's own, into BUILD/devlibs/ and prints what to carry
#     (the binaries and BUILD/devlibs; the whole build/ is over what a device
#     call carries).
# There, from the repo root:
#   OUT=/some/dir bench/device_gpu.sh
#     runs the cases below in order, each under `timeout`, each failing soft
#     (a failed or timed-out case is recorded and the next one runs), and
#     writes to $OUT (default ./out):
#       versions.json   python, torch (and its CUDA), numpy, pytest, the GPU;
#       machine.txt     CPUs, memory, kernel, nvidia-smi, the commit;
#       cases.jsonl     one line per case: case, status (ok, failed, timeout,
#                       skipped), rc, seconds, why (skipped);
#       pytest.log, pytest.xml  1. tests/python on this torch/numpy (the two
#                       example tests are case 4); pytest is needed;
#       bench.jsonl     2. bench_trainer_py.py on the replay server: numpy
#                       client, StreamDataset raw/compact into pinned memory,
#                       StreamDataLoader, and the *_gpu cases (-> GPU memory);
#       live.jsonl      3. `piperec run` (engine.threads 8) -> numpy client,
#                       StreamDataset into pinned memory, and -> the GPU;
#       example_*.txt, example.jsonl  4. examples/train_dlrm.py --device cuda,
#                       old style (per-feature tables, TrainingBatch layout,
#                       loss read every step) and fused (one table, raw
#                       compact layout, side-stream copies): rows/s,
#                       gpu_busy, held-out AUC;
#       summary.md      the figures above in one table.
#     Without CUDA (here, to check that it starts) the device cases print
#     "skipped: no CUDA device" and the rest runs, smaller with
#     DEVICE_GPU_QUICK=1.
# Env: DEVICE_GPU_BUILD (default build), DEVICE_GPU_PYTHON (default python3:
# the interpreter with torch), DEVICE_GPU_CASES (default "pytest bench live
# example", run in that order), DEVICE_GPU_QUICK=1 (small sizes),
# DEVICE_GPU_COMMIT, DEVICE_GPU_PYTEST_WORKERS (pytest-xdist processes,
# default 8; 1 = none), DEVICE_GPU_LIVE_CONSUMERS (default 4), the cases'
# time limits in seconds DEVICE_GPU_PYTEST_S (180), DEVICE_GPU_BENCH_S (100),
# DEVICE_GPU_LIVE_S (90), DEVICE_GPU_EXAMPLE_S (85, each style).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BUILD=${DEVICE_GPU_BUILD:-build}
BINS="piperec tests/batcher/bt_serve"

if [ "${1:-}" = "--pack" ]; then
    # shellcheck disable=SC2086
    exec "$HERE/device_pack.sh" "${2:-$BUILD}" $BINS
fi

OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PY=${DEVICE_GPU_PYTHON:-python3}
CASES=${DEVICE_GPU_CASES:-pytest bench live example}
QUICK=${DEVICE_GPU_QUICK:-0}
: > "$OUT/cases.jsonl"

# Wrappers with the carried libraries on the binaries' library path only
# (python keeps its own); `exec` keeps the PID. bt_serve starts the test's
# python client: it gets them through the dynamic loader's --library-path,
# which its children do not inherit (LD_LIBRARY_PATH would hand Debian's
# libstdc++/libssl to the host's torch and ssl).
ABS=$(cd "$BUILD" 2>/dev/null && pwd) || ABS=$ROOT/$BUILD
LIBS=""
[ -d "$ABS/devlibs" ] && LIBS=$ABS/devlibs
WRAP=$(mktemp -d "${TMPDIR:-/tmp}/piperec-gpu.XXXXXX")
trap 'rm -rf "$WRAP"' EXIT
BINS_OK=1
for b in $BINS; do
    w=$WRAP/$(basename "$b")
    LDSO=$(ls /lib64/ld-linux-x86-64.so.2 /lib/ld-linux-aarch64.so.1 2>/dev/null | head -1)
    {
        echo '#!/bin/sh'
        if [ -n "$LIBS" ] && [ "$b" = tests/batcher/bt_serve ] && [ -n "$LDSO" ]; then
            echo "exec \"$LDSO\" --library-path \"$LIBS\" \"$ABS/$b\" \"\$@\""
        else
            [ -n "$LIBS" ] &&
                echo "LD_LIBRARY_PATH=\"$LIBS\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\"; export LD_LIBRARY_PATH"
            echo "exec \"$ABS/$b\" \"\$@\""
        fi
    } > "$w"
    chmod +x "$w"
    if [ ! -x "$ABS/$b" ]; then
        echo "device_gpu.sh: $BUILD/$b missing (build here, --pack, carry it): cases needing it skip" >&2
        BINS_OK=0
    elif LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$ABS/$b" | grep -q "not found"; then
        echo "device_gpu.sh: $b cannot load (run bench/device_gpu.sh --pack here and carry $BUILD/devlibs)" >&2
        BINS_OK=0
    fi
done

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "cpus: $(nproc)"
    grep -m1 "model name" /proc/cpuinfo || true
    grep -E "^(MemTotal|MemAvailable)" /proc/meminfo || true
    echo "kernel: $(uname -r)"
    echo "commit: ${DEVICE_GPU_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}"
    echo "python: $(command -v "$PY")"
    nvidia-smi -L 2>/dev/null || echo "nvidia-smi: none"
} > "$OUT/machine.txt"
cat "$OUT/machine.txt"

"$PY" - "$OUT/versions.json" <<'EOF'
import json, platform, sys
v = {"python": platform.python_version()}
for mod in ("numpy", "torch", "pytest", "torchrec"):
    try:
        v[mod] = __import__(mod).__version__
    except Exception as e:  # noqa: BLE001 — recorded, not fatal
        v[mod] = None
        v[mod + "_error"] = "%s: %s" % (type(e).__name__, e)
try:
    import torch
    v["cuda_available"] = torch.cuda.is_available()
    v["torch_cuda"] = torch.version.cuda
    if v["cuda_available"]:
        v["device"] = torch.cuda.get_device_name()
        v["device_count"] = torch.cuda.device_count()
except Exception:  # noqa: BLE001
    v["cuda_available"] = False
json.dump(v, open(sys.argv[1], "w"), indent=1)
print("versions: " + json.dumps(v))
EOF
CUDA=$("$PY" -c 'import json,sys; print(1 if json.load(open(sys.argv[1])).get("cuda_available") else 0)' "$OUT/versions.json" 2>/dev/null || echo 0)
[ "$CUDA" = 1 ] || echo "device_gpu.sh: no CUDA device (torch.cuda.is_available() false): device cases skip"

# record NAME STATUS RC SECONDS [WHY]
record() {
    printf '{"case": "%s", "status": "%s", "rc": %s, "seconds": %s, "why": "%s"}\n' \
        "$1" "$2" "$3" "$4" "${5:-}" >> "$OUT/cases.jsonl"
    echo "== $1: $2${5:+ ($5)} in ${4}s"
}
# run_case NAME TIMEOUT_S LOG CMD...: fail soft, record the outcome
run_case() {
    name=$1; limit=$2; log=$3; shift 3
    echo "== $name (at most ${limit}s): $*"
    t0=$(date +%s)
    timeout -k 10 "$limit" "$@" > "$log" 2>&1
    rc=$?
    dt=$(($(date +%s) - t0))
    tail -5 "$log"
    if [ $rc -eq 0 ]; then record "$name" ok 0 "$dt"
    elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then record "$name" timeout "$rc" "$dt"
    else record "$name" failed "$rc" "$dt"
    fi
}

export PYTHONDONTWRITEBYTECODE=1
export PIPEREC="$WRAP/piperec" BT_SERVE="$WRAP/bt_serve" PR_SOURCE_DIR="$ROOT"
export PYTHONPATH="$ROOT/clients/python"
if [ "$QUICK" = 1 ]; then
    BATCH=4096; BENCH_BATCHES=200; LIVE_ROWS=200000; EX_TRAIN=100000; EX_HOLD=20000
else
    BATCH=8192; BENCH_BATCHES=600; LIVE_ROWS=2000000; EX_TRAIN=1000000; EX_HOLD=100000
fi

# Each case is a function; they run in the order $CASES names them (a lease
# script puts the GPU figures first and the tests last).
# 1. the Python package's tests on this torch / numpy (examples: case 4), in
# DEVICE_GPU_PYTEST_WORKERS processes (default 8) where pytest-xdist is there
case_pytest() {
    if ! "$PY" -c 'import pytest' 2>/dev/null; then
        record pytest skipped 0 0 "no pytest for $PY"
    elif [ $BINS_OK = 0 ]; then
        record pytest skipped 0 0 "piperec or bt_serve missing"
    else
        mkdir -p "$WRAP/pytest"
        xd=""
        if [ "${DEVICE_GPU_PYTEST_WORKERS:-8}" -gt 1 ] && "$PY" -c 'import xdist' 2>/dev/null; then
            xd="-n ${DEVICE_GPU_PYTEST_WORKERS:-8}"
        fi
        # shellcheck disable=SC2086 # $xd is two words or none
        PR_TMP=$WRAP/pytest run_case pytest "${DEVICE_GPU_PYTEST_S:-180}" "$OUT/pytest.log" \
            "$PY" -m pytest -q -p no:cacheprovider -rfEs $xd --junitxml="$OUT/pytest.xml" \
            --ignore="$ROOT/tests/python/test_example.py" \
            --ignore="$ROOT/tests/python/test_example_jagged.py" "$ROOT/tests/python"
        "$PY" "$ROOT/tests/python/check_compat_names.py" >> "$OUT/pytest.log" 2>&1 ||
            echo "device_gpu.sh: check_compat_names.py found names NumPy 2 / torch 2 removed (pytest.log)"
    fi
}

# 2. replay server -> numpy client / StreamDataset -> pinned memory -> GPU
case_bench() {
    run_case bench "${DEVICE_GPU_BENCH_S:-100}" "$OUT/bench.log" sh -c "\"$PY\" \"$HERE/bench_trainer_py.py\" --rows $BATCH \
        --batches $BENCH_BATCHES > \"$OUT/bench.jsonl\""
    [ "$CUDA" = 1 ] || echo "bench: skipped: no CUDA device (the *_gpu cases)"
    # where the default raw host path's time goes (widen, receive, views, ack:
    # it ran at 0.45 of the numpy client on the H200 host, compact at 1.14)
    run_case bench_steps "${DEVICE_GPU_STEPS_S:-30}" "$OUT/bench_steps.log" sh -c "\"$PY\" \"$HERE/bench_trainer_py.py\" --rows $BATCH \
        --batches $BENCH_BATCHES --steps >> \"$OUT/bench.jsonl\""
}

# 3. live: piperec run (engine.threads 8, DEVICE_GPU_LIVE_CONSUMERS consumer
# instances, default 4) -> StreamDataset -> GPU
case_live() {
    if [ $BINS_OK = 0 ]; then
        record live skipped 0 0 "piperec missing"
    else
        run_case live "${DEVICE_GPU_LIVE_S:-90}" "$OUT/live.log" sh -c "\"$PY\" \"$HERE/bench_trainer_py.py\" --live \
            \"$WRAP/piperec\" --rows $BATCH --live-rows $LIVE_ROWS --live-threads 8 \
            --live-consumers ${DEVICE_GPU_LIVE_CONSUMERS:-4} > \"$OUT/live.jsonl\""
        [ "$CUDA" = 1 ] || echo "live: skipped: no CUDA device (trainer_py_live_stream_dataset_raw_compact_gpu)"
    fi
}

# 4. examples/train_dlrm.py --device cuda: old style vs fused
case_example() {
    if [ "$CUDA" != 1 ]; then
        record example_old skipped 0 0 "no CUDA device"
        record example_fused skipped 0 0 "no CUDA device"
    elif [ $BINS_OK = 0 ]; then
        record example_old skipped 0 0 "piperec missing"
    else
        for style in fused old; do
            if [ $style = old ]; then extra="--embedding per-feature --layout protobuf"
            else extra="--embedding fused --layout raw --compact"; fi
            # shellcheck disable=SC2086 # $extra is several words
            run_case "example_$style" "${DEVICE_GPU_EXAMPLE_S:-85}" "$OUT/example_$style.txt" "$PY" "$ROOT/examples/train_dlrm.py" \
                --spawn --piperec "$WRAP/piperec" --device cuda --checkout --batch $BATCH \
                --train-rows $EX_TRAIN --heldout-rows $EX_HOLD --rate 5000000 --partitions 16 \
                --threads 4 --max-seconds 45 $extra
        done
    fi
}

for c in $CASES; do
    case $c in
        pytest | bench | live | example) "case_$c" ;;
        *) echo "device_gpu.sh: unknown case $c (pytest, bench, live, example)" >&2 ;;
    esac
done

# machine-readable example figures, and the summary
"$PY" - "$OUT" <<'EOF' || echo "device_gpu.sh: summary failed"
import json, os, re, sys
out = sys.argv[1]
def lines(name):
    p = os.path.join(out, name)
    if not os.path.exists(p):
        return []
    res = []
    for l in open(p):
        try:
            res.append(json.loads(l))
        except ValueError:
            pass
    return res
ex = []
for style in ("old", "fused"):
    p = os.path.join(out, "example_%s.txt" % style)
    if os.path.exists(p):
        text = open(p).read()
        m = re.search(r"^heldout_auc=.*$", text, re.M)
        if m:
            kv = dict(re.findall(r"(\w+)=([0-9.]+)", m.group(0)))
            ex.append(dict({k: float(v) for k, v in kv.items()}, bench="example_" + style))
with open(os.path.join(out, "example.jsonl"), "w") as f:
    for r in ex:
        f.write(json.dumps(r) + "\n")
v = json.load(open(os.path.join(out, "versions.json"))) if os.path.exists(os.path.join(out, "versions.json")) else {}
md = ["# device_gpu.sh summary", "",
      "python %s, torch %s (CUDA %s), numpy %s, device %s" % (v.get("python"), v.get("torch"),
      v.get("torch_cuda"), v.get("numpy"), v.get("device", "none")), "",
      "| case | status | seconds | why |", "|---|---|---|---|"]
md += ["| %s | %s | %s | %s |" % (c["case"], c["status"], c["seconds"], c.get("why", ""))
       for c in lines("cases.jsonl")]
md += ["", "| measurement | rows/s | vs numpy client | notes |", "|---|---|---|---|"]
for r in lines("bench.jsonl") + lines("live.jsonl"):
    md.append("| %s | %.2fM | %s | %s |" % (r["bench"], r["rows_per_s"] / 1e6, r.get("vs_numpy_client", ""),
                                           r.get("device", r.get("transport", ""))))
for r in ex:
    md.append("| %s | %.0f | | AUC %.4f, gpu_busy %s, steady %.0f rows/s after %.1f s warm-up |"
              % (r["bench"], r.get("rows_per_s", 0), r.get("heldout_auc", 0), r.get("gpu_busy", ""),
                 r.get("steady_rows_per_s", 0), r.get("warmup_seconds", 0)))
log = os.path.join(out, "pytest.log")
tail = open(log).read().strip().splitlines() if os.path.exists(log) else []
passed = [l for l in tail if re.search(r"\d+ (passed|failed)", l)]
md += ["", "pytest: " + (passed[-1] if passed else "not run")]
open(os.path.join(out, "summary.md"), "w").write("\n".join(md) + "\n")
print("\n".join(md))
EOF
# exit 0 unless every case that ran failed: the results say what failed
grep -q '"status": "ok"' "$OUT/cases.jsonl" || ! grep -q '"status": "\(failed\|timeout\)"' "$OUT/cases.jsonl"
