#!/bin/sh
# test_vocab_cli.sh — vocabulary import/export and seeding from the command
# line: `piperec process` output seeds a second offline run that continues
# the mapping (same indices as one run over all the data); export -> import ->
# export gives the same files; import refuses a state dir that has a
# vocabulary unless --force; malformed seeds fail with file:line.
# Env: PIPEREC, PR_TEST_DATA, PR_TMP.
set -eu
PY=/usr/bin/python3
T=$PR_TMP
SAMPLE=$PR_TEST_DATA/criteo_sample_100.tsv
fail() { echo "FAIL: $*" >&2; exit 1; }

head -50 "$SAMPLE" > "$T/a.tsv"
tail -n +51 "$SAMPLE" > "$T/b.tsv"
"$PIPEREC" process --input "$T/a.tsv" --output "$T/a" 2>/dev/null || fail "process a"
"$PIPEREC" process --input "$SAMPLE" --output "$T/all" 2>/dev/null || fail "process all"

# ---- seed: the second half continues the first half's mapping -------------
cat > "$T/seed.yaml" <<YEOF
pipelines:
  - name: criteo
    transform:
      vocab: { seed: $T/a/vocab }
YEOF
"$PIPEREC" process --config "$T/seed.yaml" --input "$T/b.tsv" --output "$T/b" 2>/dev/null \
    || fail "seeded process"
for f in "$T"/all/vocab/*.tsv; do
    cmp -s "$f" "$T/b/vocab/$(basename "$f")" || fail "seeded vocab differs: $(basename "$f")"
done
$PY - "$T" <<'PYEOF'
import sys, numpy as np
t = sys.argv[1]
b = np.load(t + "/b/sparse.npy"); a = np.load(t + "/all/sparse.npy")
assert (b == a[50:]).all(), "seeded run gives other indices than one run over all rows"
PYEOF

# ---- the seed is the output's own vocab/: read before the run replaces it -
cp -r "$T/a" "$T/same"
sed "s|$T/a/vocab|$T/same/vocab|" "$T/seed.yaml" > "$T/same.yaml"
"$PIPEREC" process --config "$T/same.yaml" --input "$T/b.tsv" --output "$T/same" 2>"$T/same.err" \
    || fail "seeded from its own output's vocab/: $(cat "$T/same.err")"
for f in "$T"/all/vocab/*.tsv; do
    cmp -s "$f" "$T/same/vocab/$(basename "$f")" || fail "same-dir seed: $(basename "$f") differs"
done

# ---- export -> import -> export ------------------------------------------
"$PIPEREC" vocab import --state "$T/st" --pipeline criteo --input "$T/all/vocab" 2>/dev/null \
    || fail "import"
"$PIPEREC" vocab export --state "$T/st" --pipeline criteo --output "$T/ex" 2>/dev/null \
    || fail "export"
diff -r "$T/all/vocab" "$T/ex" || fail "export after import differs"
if "$PIPEREC" vocab import --state "$T/st" --input "$T/a/vocab" 2>"$T/imp.err"; then
    fail "import over an existing vocabulary without --force"
fi
grep -q "already holds a vocabulary" "$T/imp.err" || fail "refusal message"
"$PIPEREC" vocab import --state "$T/st" --input "$T/a/vocab" --force 2>/dev/null || fail "--force"
"$PIPEREC" vocab export --state "$T/st" --output "$T/ex2" 2>/dev/null || fail "export 2"
diff -r "$T/a/vocab" "$T/ex2" || fail "export after --force import differs"

# ---- malformed seeds: file:line ------------------------------------------
bad() { # $1: expected message part; stdin: lines appended to C1.tsv
    rm -rf "$T/bad" && cp -r "$T/a/vocab" "$T/bad"
    cat >> "$T/bad/C1.tsv"
    if "$PIPEREC" vocab import --state "$T/st3" --input "$T/bad" 2>"$T/bad.err"; then
        fail "accepted a bad seed ($1)"
    fi
    grep -q "$1" "$T/bad.err" || { cat "$T/bad.err"; fail "message: $1"; }
}
# a byte order mark (a file an editor saved) is named, not "1 fields"
rm -rf "$T/bom" && cp -r "$T/a/vocab" "$T/bom"
{ printf '\357\273\277'; cat "$T/a/vocab/C1.tsv"; } > "$T/bom/C1.tsv.new" && mv "$T/bom/C1.tsv.new" "$T/bom/C1.tsv"
if "$PIPEREC" vocab import --state "$T/st4" --input "$T/bom" 2>"$T/bom.err"; then
    fail "accepted a seed with a byte order mark"
fi
grep -q "C1.tsv:1: starts with a UTF-8 byte order mark" "$T/bom.err" || { cat "$T/bom.err"; fail "BOM message"; }
N=$(grep -vc '^#' "$T/a/vocab/C1.tsv")
L=$(wc -l < "$T/a/vocab/C1.tsv")
V=$(sed -n 3p "$T/a/vocab/C1.tsv" | cut -f2)
printf '%s\t%s\t0\n' "$N" "$V" | bad "C1.tsv:$((L + 1)): duplicate value $V (also on line 3)"
printf '%s\tabc\t0\n' "$((N + 1))" | bad "C1.tsv:$((L + 1)): index $((N + 1)) leaves a gap"
printf '%s\tabc\t0\n' "$((N - 1))" | bad "C1.tsv:$((L + 1)): duplicate index $((N - 1))"
printf '%s\txyz\n' "$N" | bad "C1.tsv:$((L + 1)): value 'xyz' is not 1 to 16 hex digits"
printf 'junk\n' | bad "C1.tsv:$((L + 1)): 1 fields"
printf '%s\tffffffff\n' "$N" | bad "C1.tsv:$((L + 1)): value ffffffff is not below"
test ! -e "$T/st3/criteo.vocab" || fail "a rejected import wrote a snapshot"
# Profile default reserves 0 and 1: the dlrm files (indices from 0) misuse them.
cat > "$T/seedd.yaml" <<YEOF
pipelines:
  - name: criteo
    transform:
      vocab: { seed: $T/a/vocab, profile: default }
YEOF
if "$PIPEREC" process --config "$T/seedd.yaml" --input "$T/b.tsv" --output "$T/d" 2>"$T/d.err"; then
    fail "default profile accepted reserved indices"
fi
grep -q "C1.tsv:3: index 0 is reserved by profile default" "$T/d.err" || fail "reserved message"
echo "test_vocab_cli: ok"
