#!/bin/sh
# consume_raw.sh — `piperec consume --layout raw` (issue 22): the C client
# reads the raw tensor layout, checks it and writes the same .npy output,
# byte for byte, as over the TrainingBatch layout; for Criteo batches (int32
# columns: raw int64 values narrowed back) and jagged ones (BT_JAGGED=1),
# over TCP and over the Unix domain socket (BT_UNIX: sinks.trainer.unix_path,
# --connect unix:PATH). bt_serve fails unless every batch was acked once.
set -eu
T="$PR_TMP/consume_raw"
rm -rf "$T"
mkdir -p "$T"
N=25
serve() { # serve OUTDIR LAYOUT [unix]: bt_serve runs one consume (its stderr in OUTDIR.log)
    if [ "${3:-}" = unix ]; then
        BT_UNIX="$T/trainer.sock" "$BT_SERVE" trainer $N sh -c \
            "exec \"\$0\" consume --connect unix:$T/trainer.sock --pipeline bt --layout $2 \
             --count $N --output $1 2>$1.log" "$PIPEREC"
    else
        "$BT_SERVE" trainer $N sh -c \
            "exec \"\$0\" consume --connect 127.0.0.1:\$BT_PORT --pipeline bt --layout $2 \
             --count $N --output $1 2>$1.log" "$PIPEREC"
    fi
    if [ "$2" = raw ]; then grep -q "raw tensor layout" "$1.log"; fi
}
same() { # same DIR_A DIR_B: every output file byte-equal
    (cd "$1" && find . -type f | sort) > "$T/files.a"
    (cd "$2" && find . -type f | sort) > "$T/files.b"
    cmp "$T/files.a" "$T/files.b"
    test -s "$T/files.a"
    while read -r f; do
        cmp "$1/$f" "$2/$f" || { echo "consume_raw: $f differs" >&2; exit 1; }
    done < "$T/files.a"
}
serve "$T/pb" protobuf
serve "$T/raw" raw
same "$T/pb" "$T/raw"
serve "$T/raw_unix" raw unix
same "$T/pb" "$T/raw_unix"
test ! -e "$T/trainer.sock" # removed when the sink is freed
BT_JAGGED=1 serve "$T/jpb" protobuf
BT_JAGGED=1 serve "$T/jraw" raw
same "$T/jpb" "$T/jraw"
ls "$T/jraw" | grep -q sparse
# usage errors
if "$PIPEREC" consume --connect 127.0.0.1:1 --pipeline bt --layout bogus 2>"$T/err"; then
    exit 1
fi
grep -q "not protobuf or raw" "$T/err"
if "$PIPEREC" consume --connect unix:$T/x.sock --pipeline bt --tls --connect-timeout-ms 0 \
    2>"$T/err"; then
    exit 1
fi
grep -q "TLS does not apply" "$T/err"
echo "consume_raw: protobuf and raw outputs equal (Criteo, jagged, TCP, unix)"
