# loaded_lib.sh — the loop behind the "loaded" record scripts
# (tests/service/handoff_loaded.sh, tests/ingest/ingest_kafka_loaded.sh):
# COPIES copies of one test at once, RUNS times, each copy in its own
# directory, so that on a small machine the copies overload it. Sourced; the
# caller defines
#   loaded_copy DIR         start one copy in the background writing DIR/out.txt
#   loaded_failed DIR RC    print what a failed copy left (one line's tail)
# and calls `loaded_run NAME RUNS COPIES OUT`, which prints one line per copy
# and the pass count, and returns non-zero when a copy failed.
loaded_run() {
    name=$1 runs=$2 copies=$3 out=$4
    pass=0 total=0 r=1
    while [ "$r" -le "$runs" ]; do
        pids="" c=1
        while [ "$c" -le "$copies" ]; do
            d=$out/run$r-$c
            rm -rf "$d" && mkdir -p "$d"
            loaded_copy "$d"
            pids="$pids $!"
            c=$((c + 1))
        done
        c=1
        for pid in $pids; do
            d=$out/run$r-$c
            total=$((total + 1))
            if wait "$pid"; then
                pass=$((pass + 1))
                echo "run $r copy $c: ok"
            else
                rc=$?
                echo "run $r copy $c: FAIL $(loaded_failed "$d" $rc)"
            fi
            c=$((c + 1))
        done
        r=$((r + 1))
    done
    echo "$name: $pass of $total copies passed"
    [ "$pass" -eq "$total" ]
}
