#!/bin/sh
# test_offline_cli.sh — `piperec process` and `piperec gen` from the command
# line: rejects.tsv and the summary for each kind of bad line, stdin input,
# "\r\n" and a missing final newline, thread invariance (byte-identical .npy),
# gen determinism and shape, numpy reading our .npy files (Fortran order
# included), the exit codes (2 bad config, 1 I/O error), meta.json and the
# removal of an earlier run's files from DIR.
# Env: PIPEREC, PR_TEST_DATA, PR_TMP, NPY_FIXTURE.
set -eu
PY=/usr/bin/python3
T=$PR_TMP
SAMPLE=$PR_TEST_DATA/criteo_sample_100.tsv
fail() { echo "FAIL: $*" >&2; exit 1; }

# ---- rejects: one line of each kind between good ones --------------------
GOOD=$(sed -n 1p "$SAMPLE")
{
    echo "$GOOD"                                       # 1 ok
    echo "$GOOD" | cut -f1-39                          # 2 field_count (39)
    echo "$GOOD" | sed 's/^0\t/x\t/'                   # 3 bad_label
    echo "$GOOD" | sed 's/^0\t\t0\t/0\t\tabc\t/'       # 4 bad_dense (I2)
    echo "$GOOD" | sed 's/05db9164/05db9164aaaaaaaaaaa/' # 5 long_hex (C1, 19 digits)
    echo "$GOOD" | sed 's/f0cf0024/f0cfzz24/'          # 6 bad_hex (C2, engine)
    printf '\n'                                        # 7 field_count (empty line)
    sed -n 2,3p "$SAMPLE"                              # 8, 9 ok
} > "$T/bad.tsv"
"$PIPEREC" process --input "$T/bad.tsv" --output "$T/bad" 2> "$T/bad.err" || fail "process bad.tsv"
cat "$T/bad.err"
cut -f1,2 "$T/bad/rejects.tsv" > "$T/bad.got"
printf '2\tfield_count\n3\tbad_label\n4\tbad_dense\n5\tlong_hex\n6\tbad_hex\n7\tfield_count\n' > "$T/bad.want"
diff "$T/bad.want" "$T/bad.got" || fail "rejects.tsv reasons/lines"
# The 4th column is the original line.
sed -n 5p "$T/bad/rejects.tsv" | cut -f4- | grep -q '^0	.*f0cfzz24' || fail "rejects.tsv original line"
grep -q "C2: 'f0cfzz24' is not hex" "$T/bad/rejects.tsv" || fail "engine reject detail"
grep -q '3 rows, 6 rejected (field_count=2 bad_label=1 bad_dense=1 bad_hex=1 long_hex=1)' "$T/bad.err" \
    || fail "summary counts"
$PY - "$T/bad" "$SAMPLE" <<'PYEOF'
import sys, numpy as np
out, sample = sys.argv[1:3]
y = np.load(out + "/labels.npy"); d = np.load(out + "/dense.npy"); s = np.load(out + "/sparse.npy")
assert y.shape == (3,) and d.shape == (3, 13) and s.shape == (3, 26), (y.shape, d.shape, s.shape)
assert list(y) == [0, 1, 0], y
PYEOF

# ---- stdin, CRLF and no final newline give the same output as the file ----
"$PIPEREC" process --input "$SAMPLE" --output "$T/file" 2>/dev/null
"$PIPEREC" process --input - --output "$T/stdin" < "$SAMPLE" 2>/dev/null
sed 's/$/\r/' "$SAMPLE" | head -c -1 > "$T/crlf.tsv"    # CRLF, last line unterminated
"$PIPEREC" process --input "$T/crlf.tsv" --output "$T/crlf" 2>/dev/null
cat "$T/crlf.tsv" | "$PIPEREC" process --input - --output "$T/crlf-stdin" --block-rows 64 2>/dev/null
for d in stdin crlf crlf-stdin; do
    for f in dense sparse labels; do
        cmp "$T/file/$f.npy" "$T/$d/$f.npy" || fail "$d/$f.npy differs from file input"
    done
    [ ! -s "$T/$d/rejects.tsv" ] || fail "$d: unexpected rejects"
done
[ "$($PY -c "import numpy as np; print(np.load('$T/file/labels.npy').shape[0])")" = 100 ] || fail "100 rows"

# ---- gen: deterministic, any thread count, Criteo-shaped ------------------
"$PIPEREC" gen --rows 300000 --seed 42 --output "$T/g1.tsv"
"$PIPEREC" gen --rows 300000 --seed 42 --threads 1 --output - > "$T/g2.tsv"
cmp "$T/g1.tsv" "$T/g2.tsv" || fail "gen not deterministic"
"$PIPEREC" gen --rows 1000 --seed 43 --output "$T/g3.tsv"
! cmp -s "$T/g3.tsv" "$(head -1000 "$T/g1.tsv" > "$T/g1h.tsv"; echo "$T/g1h.tsv")" || fail "seed ignored"
"$PIPEREC" gen --rows 1000 --seed 42 --format binary --output "$T/g.bin"
[ -s "$T/g.bin" ] || fail "binary output empty"
# process reads Criteo TSV for the Criteo layout: a config whose source is
# EventBatch is refused (exit 2), not read as text with every line rejected
printf 'pipelines:\n  - name: criteo\n    source: { format: protobuf_event_batch }\n' > "$T/eb.yaml"
rc=0; "$PIPEREC" process --config "$T/eb.yaml" --input "$T/g.bin" --output "$T/eb" 2> "$T/eb.err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "source.format protobuf_event_batch is not read offline" "$T/eb.err" \
    || fail "EventBatch config offline: exit $rc: $(cat "$T/eb.err")"
$PY - "$T/g1.tsv" <<'PYEOF'
import sys
import pandas as pd
card = [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
        27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572]
df = pd.read_csv(sys.argv[1], sep="\t", header=None, dtype=str, keep_default_na=False)
assert df.shape == (300000, 40), df.shape
for c in range(26):
    col = df[14 + c]
    vals = col[col != ""]
    assert vals.str.fullmatch("[0-9a-f]{8}").all(), c
    assert vals.nunique() <= card[c], (c, vals.nunique())
assert (df[1 + 13 + 21] == "").mean() > 0.5            # C22 mostly missing
assert (df[1] == "").mean() > 0.3                         # I1 often missing
dense = df[list(range(1, 14))].replace("", "0").astype(int)
assert (dense < 0).any().any(), "no negative dense values"
pos = df[0].astype(int).mean()
assert 0.02 < pos < 0.04, pos
print("gen shape ok")
PYEOF

# ---- thread invariance: many chunks and blocks ----------------------------
"$PIPEREC" process --input "$T/g1.tsv" --output "$T/t1" --threads 1 --block-rows 4096 2>/dev/null
"$PIPEREC" process --input "$T/g1.tsv" --output "$T/t2" --threads 2 --block-rows 4096 2>/dev/null
"$PIPEREC" process --input - --output "$T/t3" --threads 2 --block-rows 1024 < "$T/g1.tsv" 2>/dev/null
for f in dense.npy sparse.npy labels.npy vocab/C3.tsv vocab/C26.tsv; do
    cmp "$T/t1/$f" "$T/t2/$f" || fail "threads 1 vs 2: $f differs"
    cmp "$T/t1/$f" "$T/t3/$f" || fail "stdin/threads 2/1024 rows: $f differs"
done

# ---- numpy reads the writer's files, Fortran order included ---------------
mkdir -p "$T/npy"
"$NPY_FIXTURE" "$T/npy"
$PY - "$T/npy" <<'PYEOF'
import sys, numpy as np
d = sys.argv[1]
f = np.load(d + "/fortran_i32.npy")
assert f.dtype == np.int32 and f.shape == (4, 3) and f.flags.f_contiguous, (f.dtype, f.shape)
assert (f == np.array([[10 * r + c for c in range(3)] for r in range(4)])).all(), f
s = np.load(d + "/stream_f32.npy")
assert s.dtype == np.float32 and s.shape == (70000, 2)
assert (s[:, 0] == np.arange(70000, dtype=np.float32) * 0.5).all() and (s[:, 1] == -np.arange(70000)).all()
i = np.load(d + "/stream_i64.npy")
assert i.dtype == np.int64 and i.shape == (5, 2) and i[4, 1] == 9 << 40, i
v = np.load(d + "/vec_i32.npy")
assert v.shape == (3,) and list(v) == [7, -8, 9]
print("numpy reads all fixtures")
PYEOF

# ---- exit codes -----------------------------------------------------------
printf 'pipelines:\n  - name: x\n    schema: { label: true, dense: 13, sparse: 26 }\n    transform:\n      sparse: [hex2int, { modulus: 0 }, vocab]\n' > "$T/bad.yaml"
set +e
"$PIPEREC" process --config "$T/bad.yaml" --input "$SAMPLE" --output "$T/x" 2> "$T/rc.err"; rc=$?
[ $rc = 2 ] || fail "bad config: exit $rc, want 2"
grep -q modulus "$T/rc.err" || fail "bad config message: $(cat "$T/rc.err")"
"$PIPEREC" process --config "$T/no-such.yaml" --input "$SAMPLE" --output "$T/x" 2> "$T/rc.err"; rc=$?
[ $rc = 2 ] || fail "missing config: exit $rc, want 2 (as run and explain)"
grep -q "no-such.yaml" "$T/rc.err" || fail "missing config message: $(cat "$T/rc.err")"
"$PIPEREC" process --input "$T/does-not-exist.tsv" --output "$T/x" 2> "$T/rc.err"; rc=$?
[ $rc = 1 ] || fail "missing input: exit $rc, want 1"
grep -q "does-not-exist.tsv: No such file" "$T/rc.err" || fail "missing input message: $(cat "$T/rc.err")"
"$PIPEREC" process --input "$SAMPLE" --output /proc/piperec-cannot 2> "$T/rc.err"; rc=$?
[ $rc = 1 ] || fail "unwritable output: exit $rc, want 1"
"$PIPEREC" process --input "$SAMPLE" 2>/dev/null; rc=$?
[ $rc = 2 ] || fail "missing --output: exit $rc, want 2"
set -e

# ---- symlinked input (issue 11): read, with a warning naming the target ----
mkdir -p "$T/indir"
ln -sf "$SAMPLE" "$T/indir/linked.tsv"
"$PIPEREC" process --input "$T/indir/linked.tsv" --output "$T/sym" 2> "$T/sym.err" ||
    fail "symlinked input: $(cat "$T/sym.err")"
grep -q "is a symlink to .*, outside .*indir; reading it" "$T/sym.err" ||
    fail "symlinked input: no warning: $(cat "$T/sym.err")"
cp "$SAMPLE" "$T/indir/real.tsv"
ln -sf real.tsv "$T/indir/inside.tsv"
"$PIPEREC" process --input "$T/indir/inside.tsv" --output "$T/sym2" 2> "$T/sym2.err"
! grep -q "symlink" "$T/sym2.err" || fail "link inside the input dir warned: $(cat "$T/sym2.err")"
# ---- meta.json, and nothing stale from an earlier run in the same DIR ------
# A declared schema into DIR, then the same schema with a feature renamed and
# the dense feature dropped, then the Criteo layout: each run's DIR holds its
# own files only, and meta.json names them with the vocabulary sizes.
cat > "$T/ev.jsonl" <<'EOF2'
{"u": "a", "p": 1.5, "c": 1, "tags": ["x", "y"]}
{"u": "b", "p": 2.5, "c": 0, "tags": []}
{"u": "a", "p": 0.5, "c": 1, "tags": ["y"]}
EOF2
schema_cfg() { # $1: the user feature's name, $2: dense line or empty
    printf 'pipelines:\n  - name: m\n    source: { format: json }\n    schema:\n'
    printf '      labels: [ { name: click, path: c } ]\n%s' "$2"
    printf '      sparse:\n        - { name: %s, path: u, ops: [vocab] }\n' "$1"
    printf '        - { name: tags, path: tags, list: { max_len: 4 }, ops: [vocab] }\n'
}
schema_cfg user '      dense: [ { name: price, path: p } ]
' > "$T/m1.yaml"
schema_cfg uid '' > "$T/m2.yaml"
"$PIPEREC" process --config "$T/m1.yaml" --input "$T/ev.jsonl" --output "$T/meta" 2>/dev/null \
    || fail "process m1"
$PY - "$T/meta/meta.json" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
want = {"pipeline": "m", "rows": 3, "rejected": 0, "n_dense": 1, "n_sparse": 2, "jagged": True,
        "n_labels": 1, "feature_keys": ["user", "tags"], "label_names": ["click"],
        "dense_names": ["price"], "vocab_sizes": [2, 2]}  # profile dlrm: the 2 values each
for k, v in want.items():
    assert m.get(k) == v, (k, m.get(k), v)
PYEOF
"$PIPEREC" process --config "$T/m2.yaml" --input "$T/ev.jsonl" --output "$T/meta" 2>/dev/null \
    || fail "process m2"
[ ! -e "$T/meta/sparse/user.values.npy" ] && [ ! -e "$T/meta/vocab/user.tsv" ] \
    && [ ! -e "$T/meta/dense.npy" ] || fail "an earlier run's files are left in DIR: $(ls -R "$T/meta")"
[ -e "$T/meta/sparse/uid.values.npy" ] && [ -e "$T/meta/vocab/uid.tsv" ] || fail "m2's files"
grep -q '"feature_keys": \["uid", "tags"\]' "$T/meta/meta.json" || fail "m2's meta.json"
touch "$T/meta/notes.txt" # not ours: stays
"$PIPEREC" process --input "$SAMPLE" --output "$T/meta" 2>/dev/null || fail "process criteo"
[ -z "$(ls "$T/meta/sparse")" ] && [ ! -e "$T/meta/vocab/uid.tsv" ] && [ -e "$T/meta/notes.txt" ] \
    || fail "criteo run into a schema run's DIR: $(ls -R "$T/meta")"
$PY - "$T/meta" <<'PYEOF'
import json, sys
d = sys.argv[1]
m = json.load(open(d + "/meta.json"))
assert m["rows"] == 100 and m["n_sparse"] == 26 and m["sparse_names"][0] == "C1", m
assert m["dense_names"][12] == "I13" and len(m["vocab_sizes"]) == 26, m
for c, n in zip(m["sparse_names"], m["vocab_sizes"]):
    head = open(f"{d}/vocab/{c}.tsv").readline()
    assert head.rstrip().endswith(f"size {n}"), (c, n, head)
PYEOF

# The input looked at first: compressed, JSON for the Criteo layout, a byte
# order mark: exit 2 naming the cause (every line was rejected, exit 0);
# records all rejected: the outputs are written, exit 1
gzip -c "$SAMPLE" > "$T/sample.tsv.gz"
rc=0; "$PIPEREC" process --input "$T/sample.tsv.gz" --output "$T/gz" 2> "$T/gz.err" || rc=$?
[ $rc -eq 2 ] && grep -q "is gzip-compressed: .*zcat $T/sample.tsv.gz | piperec process --input -" \
    "$T/gz.err" || fail "gzip input: rc $rc, $(cat "$T/gz.err")"
gzip -dc "$T/sample.tsv.gz" | "$PIPEREC" process --input - --output "$T/gz" 2>/dev/null \
    || fail "zcat | process --input -"
# a FIFO (as <(zcat F) gives) is not looked at first: every row arrives
rm -f "$T/fifo" && mkfifo "$T/fifo"
cat "$SAMPLE" > "$T/fifo" &
timeout 60 "$PIPEREC" process --input "$T/fifo" --output "$T/fifo.out" 2> "$T/fifo.err" || fail "FIFO input (hung or failed)"
grep -q "100 rows, 0 rejected" "$T/fifo.err" || fail "FIFO input lost rows: $(cat "$T/fifo.err")"
printf '{"user": {"id": 1}}\n' > "$T/ev.jsonl"
rc=0; "$PIPEREC" process --input "$T/ev.jsonl" --output "$T/js" 2> "$T/js.err" || rc=$?
[ $rc -eq 2 ] && grep -q "looks like JSON lines.*declared schema" "$T/js.err" \
    || fail "JSON lines for the Criteo layout: rc $rc, $(cat "$T/js.err")"
printf '\357\273\277' | cat - "$SAMPLE" > "$T/bom.tsv"
rc=0; "$PIPEREC" process --input "$T/bom.tsv" --output "$T/bom" 2> "$T/bom.err" || rc=$?
[ $rc -eq 2 ] && grep -q "bom.tsv:1: starts with a UTF-8 byte order mark" "$T/bom.err" \
    || fail "BOM: rc $rc, $(cat "$T/bom.err")"
printf 'a\tb\nc\n' > "$T/junk.tsv"
rc=0; "$PIPEREC" process --input "$T/junk.tsv" --output "$T/junk" 2> "$T/junk.err" || rc=$?
[ $rc -eq 1 ] && grep -q "every record was rejected (2): nothing to train on" "$T/junk.err" \
    && [ "$(wc -l < "$T/junk/rejects.tsv")" -eq 2 ] || fail "all rejected: rc $rc, $(cat "$T/junk.err")"

echo "test_offline_cli: ok"
