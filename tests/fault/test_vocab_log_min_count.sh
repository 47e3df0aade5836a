#!/bin/sh
# test_vocab_log_min_count.sh — issue 9: min_count counted across replicas.
#
# Two replicas (profile default, min_count 3) share a vocab_log and split
# the 8 partitions of `events`; each sees only part of every value's
# occurrences. Proves, from the vocabularies they export after a clean stop:
#   * both hold the same vocabulary, and a third replica with an empty state
#     dir rebuilds exactly it from the log (a single replica, same log order);
#   * a value has an index exactly when the whole input holds it at least 3
#     times, whichever replica saw its occurrences (with re-read rows, e.g.
#     after a rebalance, occurrences count again: then only "at least");
#   * indices are contiguous from 2 (0 = missing, 1 = OOV).
. "$(dirname "$0")/fault_lib.sh"

NROWS=16000
MOD=20000
start_broker 8 events,vocab:1

replica_config() { # I GROUP RESET
    {
        pipeline_head "$2" "$3" "$MOD"
        cat <<Y
      vocab: { profile: default, min_count: 3 }
    batch: { size: 512, max_delay_ms: 50 }
    sinks:
      files: { dir: "$T/out$1" }
    state: { dir: "$T/state$1", checkpoint_interval_s: 2 }
    vocab_log: { topic: vocab }
http: { listen: "127.0.0.1:0" }
log: { level: info }
Y
    } > "$T/r$1.yaml"
}
rows_out() { scrape "$1" | awk '$1 == "piperec_records_out_total{pipeline=\"p\"}" { print $2 }'; }
all_out() { _a=$(rows_out 1); _b=$(rows_out 2); [ $(( ${_a:-0} + ${_b:-0} )) -ge "$NROWS" ]; }
split_done() { grep -q "partition(s) assigned" "$T/r2.err" && grep -q "partition(s) revoked" "$T/r1.err"; }

replica_config 1 shared earliest
replica_config 2 shared earliest
start_replica 1
wait_until 60 "replica 1 up" has_port 1
wait_until 30 "replica 1 assigned" grep -q "partition(s) assigned" "$T/r1.err"
start_replica 2
wait_until 60 "replica 2 up" has_port 2
# Produce only once the group is split, so no row is read twice.
wait_until 60 "the partitions split between the replicas" split_done
sleep 1
rows 0 $NROWS "$T/in.tsv"
"$PIPEREC" produce --bootstrap "$B" --topic events --input "$T/in.tsv" --rate 8000 \
    > /dev/null 2> "$T/produce.err" || fail "producer"
wait_until 120 "every row out" all_out
out1=$(rows_out 1); out2=$(rows_out 2)
[ "$out1" -gt 0 ] && [ "$out2" -gt 0 ] || fail "one replica did all the work ($out1 / $out2)"
for i in 1 2; do wait_until 30 "replica $i caught up" lag_zero $i; done
for i in 1 2; do kill -TERM "$(eval echo "\$RUN_$i")"; done
for i in 1 2; do wait "$(eval echo "\$RUN_$i")" || fail "replica $i exited $?"; done

# A third replica, empty state dir, reading nothing: rebuilds from the log.
replica_config 3 rebuild latest
start_replica 3
wait_until 60 "replica 3 up" has_port 3
kill -TERM "$RUN_3"
wait "$RUN_3" || fail "replica 3 exited $?"
for i in 1 2 3; do
    "$PIPEREC" vocab export --config "$T/r$i.yaml" --pipeline p --output "$T/export$i" \
        2> "$T/export$i.err" || fail "export $i"
done
diff -r "$T/export1" "$T/export2" > /dev/null || fail "replicas 1 and 2 differ"
diff -r "$T/export1" "$T/export3" > /dev/null || fail "the rebuilt vocabulary differs"

dups=$(( out1 + out2 - NROWS ))
$PY - "$T/in.tsv" "$T/export1" "$MOD" "$dups" <<'PY' || fail "admission check"
import collections, os, sys
inp, exp, mod, dups = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
counts = [collections.Counter() for _ in range(26)]
for line in open(inp):
    f = line.rstrip("\n").split("\t")
    for c in range(26):
        v = f[14 + c]
        if v:
            counts[c][int(v, 16) % mod] += 1
bad = 0
for c in range(26):
    got, idx = set(), []
    for line in open(os.path.join(exp, "C%d.tsv" % (c + 1))):
        if line.startswith("#"):
            continue
        i, v, _ = line.split("\t")
        if int(i) >= 0:
            got.add(int(v, 16))
            idx.append(int(i))
    want = {v for v, n in counts[c].items() if n >= 3}
    if sorted(idx) != list(range(2, 2 + len(idx))):
        sys.exit("C%d: indices not contiguous from 2" % (c + 1))
    if not want <= got or (dups == 0 and want != got):
        print("C%d: %d admitted, %d with >= 3 occurrences, %d missing, %d extra"
              % (c + 1, len(got), len(want), len(want - got), len(got - want)), file=sys.stderr)
        bad += 1
if bad:
    sys.exit(1)
print("admitted values match occurrence counts over both replicas (%d re-read rows)" % dups)
PY
echo "min_count 3 over 2 replicas: rows out $out1 + $out2; vocabularies equal and rebuilt from the log"
echo "OK"
