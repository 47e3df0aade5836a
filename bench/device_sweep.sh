#!/bin/sh
# bench/device_sweep.sh — the one command that runs the thread sweep
# (bench/bench_sweep.sh: piperec run beside the bare-consumer ceiling, and
# piperec process, at 1, 2, 4, 8, 16 threads) on a lent many-core machine
# that has no compiler for this project, no network and no apt: only the
# prebuilt binaries and python3 (standard library).
#
# Here, after building (once):
#   bench/device_sweep.sh --pack [BUILD]      (default build)
#     copies the shared libraries build/piperec and build/bench/bench_ceiling
#     need, except glibc's own (the machine has a newer glibc), into
#     BUILD/devlibs/ (about 23 MB) and prints what to carry: build/piperec,
#     build/bench/bench_ceiling and build/devlibs (the whole build/ is over
#     the 64 MiB a device call carries).
# There, from the repo root:
#   bench/device_sweep.sh [THREADS_LIST]      (default "1 2 4 8 16")
#     with $OUT set (where results go; default ./out): checks that the
#     binaries load (ldd, with BUILD/devlibs on the library path of the
#     piperec binaries only: python3 keeps its own libraries), then runs the
#     sweep with its default sizes (2M rows, 256 partitions, 1 and 16 lines
#     per message: about 4-6 minutes on 16 cores) under `timeout`
#     (DEVICE_SWEEP_TIMEOUT_S, default 540 s) and prints the summary.
#     $OUT gets machine.txt (CPUs, memory, kernel), sweep.jsonl (one JSON
#     line per measurement, written as it goes, with each streaming run's
#     CPU accounting: CPU us per row of the broker, the ceiling or piperec
#     and the trainer, the busiest thread of each, idle and steal time),
#     summary.md (the rates table and the CPU-per-row table), sweep.log (the
#     sweep's progress) and, on a failure or timeout, the partial summary.
#     The wrappers below exec the binaries, so the PIDs the sweep reads in
#     /proc are the binaries' own.
# Env: DEVICE_SWEEP_BUILD (default build), DEVICE_SWEEP_TIMEOUT_S,
# DEVICE_SWEEP_COMMIT (the commit machine.txt names), and every
# BENCH_SWEEP_* knob of bench_sweep.sh (BENCH_SWEEP_ROWS, ...) passes through.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${DEVICE_SWEEP_BUILD:-build}
BINS="piperec bench/bench_ceiling"

if [ "${1:-}" = "--pack" ]; then
    # shellcheck disable=SC2086
    exec "$HERE/device_pack.sh" "${2:-$BUILD}" $BINS
fi

OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
for b in $BINS; do
    [ -x "$BUILD/$b" ] || { echo "device_sweep.sh: $BUILD/$b missing (build here, then carry it)" >&2; exit 1; }
done
ABS=$(cd "$BUILD" && pwd)
LIBS=""
[ -d "$ABS/devlibs" ] && LIBS=$ABS/devlibs
# Wrappers with the bundled libraries on their library path only; `exec`
# keeps the PID, so the sweep's /proc readings are the binary's own.
WRAP=$(mktemp -d "${TMPDIR:-/tmp}/piperec-dev.XXXXXX")
trap 'rm -rf "$WRAP"' EXIT
mkdir -p "$WRAP/bench"
for b in $BINS; do
    {
        echo '#!/bin/sh'
        [ -n "$LIBS" ] &&
            echo "LD_LIBRARY_PATH=\"$LIBS\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\"; export LD_LIBRARY_PATH"
        echo "exec \"$ABS/$b\" \"\$@\""
    } > "$WRAP/$b"
    chmod +x "$WRAP/$b"
    if LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$ABS/$b" | grep -q "not found"; then
        echo "device_sweep.sh: $b cannot load (run bench/device_sweep.sh --pack here and carry $BUILD/devlibs):" >&2
        LD_LIBRARY_PATH="$LIBS" ldd "$ABS/$b" | grep "not found" >&2
        exit 1
    fi
done
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "cpus: $(nproc)"
    grep -m1 "model name" /proc/cpuinfo || true
    # Physical cores vs hardware threads: 16 vCPUs may be 8 cores x 2 threads,
    # which caps "linear" scaling of CPU-bound stages (offline) near 8-10x.
    if command -v lscpu > /dev/null; then
        lscpu | grep -E "^(Thread\(s\) per core|Core\(s\) per socket|Socket\(s\)|NUMA node\(s\)|L3 cache|Hypervisor vendor)" || true
    fi
    echo "physical cores (core ids x sockets): $(grep -E '^(physical id|core id)' /proc/cpuinfo | paste - - | sort -u | wc -l)"
    echo "kernel: $(uname -r)"
    echo "commit: ${DEVICE_SWEEP_COMMIT:-$(git -C "$HERE/.." rev-parse --short HEAD 2>/dev/null || echo unknown)}"
} > "$OUT/machine.txt"
cat "$OUT/machine.txt"

PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
rc=0
BENCH_SWEEP_BUILD=$WRAP BENCH_SWEEP_OUT=$OUT BENCH_SWEEP_PYTHON=$PY \
    timeout "${DEVICE_SWEEP_TIMEOUT_S:-540}" "$HERE/bench_sweep.sh" "${1:-1 2 4 8 16}" \
    > "$OUT/sweep.out" 2> "$OUT/sweep.log" || rc=$?
if [ $rc -ne 0 ]; then
    echo "device_sweep.sh: the sweep stopped (exit $rc$([ $rc -eq 124 ] && echo ": timed out")); its log ends:" >&2
    tail -15 "$OUT/sweep.log" >&2
    echo "partial summary (what was measured):"
    "$PY" "$HERE/bench_sweep.py" summary "$OUT/sweep.jsonl" | tee "$OUT/summary.md"
    exit $rc
fi
cat "$OUT/summary.md"
