#!/bin/sh
# test_fit.sh — `piperec process --fit` (issue 20): standardize statistics from
# JSON lines compared with numpy's mean/std (population) on the same values
# (after fill / clip / log1p before the step, as float32 like the engine;
# rejected lines skipped; a value missing at the step, with no default or fill
# before it, left out, not counted as 0: feature d), identical for --threads 1
# and 4, a weighted list's weights.ops, and the refusals.
# Env: PIPEREC, PR_TMP.
set -eu
PY=/usr/bin/python3
T=$PR_TMP
fail() { echo "FAIL: $*" >&2; exit 1; }
cat > "$T/fit.yaml" <<'Y'
pipelines:
  - name: fit
    source: { format: json }
    schema:
      labels:
        - { name: click, path: click }
      dense:
        - { name: a, path: a, ops: [ { fill: 3 }, { standardize: { mean: 0, std: 1 } } ] }
        - { name: b, path: b, ops: [ { clip: [0, 50] }, log1p, { standardize: { mean: 0, std: 1 } } ] }
        - { name: c, path: c, ops: [ log1p ] }
        - { name: d, path: d, ops: [ { clip: [-1000, 1000] }, { standardize: { mean: 0, std: 1 } } ] }
      cpu_ops: [fill, clip, log1p, standardize]
Y
$PY - "$T/ev.jsonl" <<'P'
import json, random, sys
r = random.Random(7)
with open(sys.argv[1], "w") as f:
    for i in range(500):
        e = {"click": r.randint(0, 1), "c": 1.0}
        if r.random() < 0.8: e["a"] = r.uniform(-1e3, 1e3) + 1e6
        e["b"] = r.uniform(-10, 80)
        if r.random() < 0.6: e["d"] = r.uniform(100, 300)
        f.write(json.dumps(e) + "\n")
        if i % 100 == 0: f.write('{"click": "x", "a": 1}\n')
P
"$PIPEREC" process --config "$T/fit.yaml" --input "$T/ev.jsonl" --fit > "$T/out.yaml" 2> "$T/err" ||
    fail "fit: $(cat "$T/err")"
grep -q "rejected" "$T/err" || fail "no summary: $(cat "$T/err")"
"$PIPEREC" process --config "$T/fit.yaml" --input "$T/ev.jsonl" --fit --threads 4 --output "$T/out4.yaml" 2>/dev/null
cmp "$T/out.yaml" "$T/out4.yaml" || fail "--threads changes --fit"
$PY - "$T/ev.jsonl" "$T/out.yaml" <<'P'
import json, re, sys, math
import numpy as np
a, b, d = [], [], []
for line in open(sys.argv[1]):
    e = json.loads(line)
    if not isinstance(e["click"], int): continue
    a.append(float(np.float32(e.get("a", 3.0))))
    if "b" in e: b.append(float(np.float32(math.log1p(min(max(e["b"], 0.0), 50.0)))))
    if "d" in e: d.append(float(np.float32(e["d"])))  # present values only
got = {}
for line in open(sys.argv[2]):
    m = re.match(r"(\w+): \{ standardize: \{ mean: (\S+), std: (\S+) \} \}", line)
    if m: got[m.group(1)] = (float(m.group(2)), float(m.group(3)))
assert set(got) == {"a", "b", "d"}, got
assert 200 < len(d) < 400, len(d)
for n, v in (("a", a), ("b", b), ("d", d)):
    x = np.array(v)
    for g, w in zip(got[n], (x.mean(), x.std())):
        assert abs(g - w) <= 1e-9 * abs(w), (n, g, w)
n_d = [l for l in open(sys.argv[2]) if l.startswith("d:")][0]
assert n_d.rstrip().endswith("# n=%d" % len(d)), (n_d, len(d))
P
grep -q "5 rejected" "$T/err" || fail "rejected count: $(cat "$T/err")"
# the --set lines put the numbers in: `process --set ...` standardizes a and
# b to mean 0, std 1 (float32), and keeps each feature's other steps
$PY - "$PIPEREC" "$T" <<'P' || fail "the --set lines of --fit"
import json, re, subprocess, sys
import numpy as np
piperec, t = sys.argv[1], sys.argv[2]
sets = re.findall(r"^#   --set '(.*)'$", open(t + "/out.yaml").read(), re.M)
assert len(sets) == 3, sets
assert any(s.startswith("pipelines[fit].schema.dense[b].ops=[{ clip: [0, 50] }, log1p, "
                        "{ standardize: { mean: ") for s in sets), sets
args = [piperec, "process", "--config", t + "/fit.yaml", "--input", t + "/ev.jsonl",
        "--output", t + "/fitted", "--no-progress"]
for s in sets:
    args += ["--set", s]
subprocess.run(args, check=True, capture_output=True)
names = json.load(open(t + "/fitted/meta.json"))["dense_names"]
x = np.load(t + "/fitted/dense.npy").astype(np.float64)
for n in ("a", "b"):
    v = x[:, names.index(n)]
    assert abs(v.mean()) < 1e-5 and abs(v.std() - 1) < 1e-5, (n, v.mean(), v.std())
P
sed 's/{ standardize: { mean: 0, std: 1 } }/neg2zero/' "$T/fit.yaml" > "$T/nostd.yaml"
if "$PIPEREC" process --config "$T/nostd.yaml" --input "$T/ev.jsonl" --fit 2> "$T/err2"; then
    fail "no standardize step accepted"; fi
grep -q "standardize" "$T/err2" || fail "refusal does not say why: $(cat "$T/err2")"
# schema.filter: only the records it keeps are fitted (click 1 here), the
# others counted as filtered, not rejected
sed 's/^    schema:$/    schema:\n      filter: [ { path: click, in: [1] } ]/' "$T/fit.yaml" > "$T/filt.yaml"
"$PIPEREC" process --config "$T/filt.yaml" --input "$T/ev.jsonl" --fit > "$T/outf.yaml" 2> "$T/errf" ||
    fail "fit with a filter: $(cat "$T/errf")"
$PY - "$T/ev.jsonl" "$T/outf.yaml" "$T/errf" <<'P'
import json, re, sys
import numpy as np
kept, dropped = [], 0
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["click"] == 1: kept.append(float(np.float32(e.get("a", 3.0))))
    else: dropped += 1
got = [l for l in open(sys.argv[2]) if l.startswith("a:")][0]
m = re.match(r"a: \{ standardize: \{ mean: (\S+), std: (\S+) \} \}", got)
x = np.array(kept)
assert abs(float(m.group(1)) - x.mean()) <= 1e-9 * abs(x.mean()), (got, x.mean())
err = open(sys.argv[3]).read()
# the filter reads first: a click "x" fails it (a string is not 1) before the
# label could reject it
assert "0 rejected (skipped), %d filtered" % dropped in err, err
P
# weights.ops: a weighted list's standardize step is fitted over every kept
# weight as it reaches the step (ids cut by max_len / keep drop theirs first,
# an absent weights list gives each id the default), keyed NAME.weights;
# its --set line makes the kept weights mean 0, std 1
cat > "$T/wfit.yaml" <<'Y'
pipelines:
  - name: w
    source: { format: json }
    schema:
      sparse:
        - { name: hist, path: hist, list: { max_len: 3, keep: last }, ops: [vocab],
            weights: { path: dwell, default: 2,
                       ops: [ { clip: [0, 100] }, log1p, { standardize: { mean: 0, std: 1 } } ] } }
Y
$PY - "$T/wev.jsonl" <<'P'
import json, random, sys
r = random.Random(11)
with open(sys.argv[1], "w") as f:
    for i in range(400):
        n = r.randint(0, 6)
        e = {"hist": ["i%d" % r.randint(0, 50) for _ in range(n)]}
        if r.random() < 0.8: e["dwell"] = [r.uniform(-20, 300) for _ in range(n)]
        f.write(json.dumps(e) + "\n")
P
"$PIPEREC" process --config "$T/wfit.yaml" --input "$T/wev.jsonl" --fit > "$T/wout.yaml" 2> "$T/werr" ||
    fail "weights fit: $(cat "$T/werr")"
"$PIPEREC" process --config "$T/wfit.yaml" --input "$T/wev.jsonl" --fit --threads 4 \
    --output "$T/wout4.yaml" 2>/dev/null
cmp "$T/wout.yaml" "$T/wout4.yaml" || fail "--threads changes the weights' --fit"
$PY - "$PIPEREC" "$T" <<'P' || fail "weights.ops --fit: $(cat "$T/wout.yaml")"
import json, math, re, subprocess, sys
import numpy as np
piperec, t = sys.argv[1], sys.argv[2]
w = []
for line in open(t + "/wev.jsonl"):
    e = json.loads(line)
    ws = e.get("dwell", [2.0] * len(e["hist"]))[-3:]
    w += [float(np.float32(math.log1p(min(max(x, 0.0), 100.0)))) for x in ws]
out = open(t + "/wout.yaml").read()
m = re.search(r"^hist\.weights: \{ standardize: \{ mean: (\S+), std: (\S+) \} \}  # n=(\d+)$", out, re.M)
assert m, out
x = np.array(w)
assert int(m.group(3)) == len(w), (m.group(3), len(w))
for g, want in zip((float(m.group(1)), float(m.group(2))), (x.mean(), x.std())):
    assert abs(g - want) <= 1e-9 * abs(want), (g, want)
sets = re.findall(r"^#   --set '(.*)'$", out, re.M)
assert len(sets) == 1 and sets[0].startswith(
    "pipelines[w].schema.sparse[hist].weights.ops=[{ clip: [0, 100] }, log1p, { standardize: "
    "{ mean: "), sets
subprocess.run([piperec, "process", "--config", t + "/wfit.yaml", "--input", t + "/wev.jsonl",
                "--output", t + "/wfitted", "--no-progress", "--set", sets[0]],
               check=True, capture_output=True)
v = np.load(t + "/wfitted/sparse/hist.weights.npy").astype(np.float64)
assert len(v) == len(w) and abs(v.mean()) < 1e-5 and abs(v.std() - 1) < 1e-5, (v.mean(), v.std())
P
# a kept weight below -1 makes log1p NaN, and NaN passes every operator, so
# the run rejects its record: the fit skips that record too (all its
# weights), as it skips every rejected line
cat > "$T/wfit2.yaml" <<'Y'
pipelines:
  - name: w
    source: { format: json }
    schema:
      sparse:
        - { name: hist, path: hist, list: { max_len: 3, keep: last }, ops: [vocab],
            weights: { path: dwell, default: 2,
                       ops: [ log1p, { standardize: { mean: 0, std: 1 } } ] } }
Y
"$PIPEREC" process --config "$T/wfit2.yaml" --input "$T/wev.jsonl" --fit > "$T/wout2.yaml" \
    2> "$T/werr2" || fail "weights fit 2: $(cat "$T/werr2")"
"$PIPEREC" process --config "$T/wfit2.yaml" --input "$T/wev.jsonl" --output "$T/wrun2" \
    --no-progress 2> "$T/wrun2.err" || fail "weights run 2: $(cat "$T/wrun2.err")"
$PY - "$T" <<'P' || fail "weights --fit skips the records the run rejects: $(cat "$T/werr2")"
import json, math, re, sys
import numpy as np
t = sys.argv[1]
w, rejected = [], 0
for line in open(t + "/wev.jsonl"):
    e = json.loads(line)
    ws = e.get("dwell", [2.0] * len(e["hist"]))[-3:]
    if any(x < -1 for x in ws):
        rejected += 1
        continue
    w += [float(np.float32(math.log1p(x))) for x in ws]
assert rejected > 10, rejected
err, out = open(t + "/werr2").read(), open(t + "/wout2.yaml").read()
assert "%d rejected (skipped)" % rejected in err, (rejected, err)
assert ("%d rejected" % rejected) in open(t + "/wrun2.err").read()
m = re.search(r"^hist\.weights: \{ standardize: \{ mean: (\S+), std: (\S+) \} \}  # n=(\d+)$", out, re.M)
assert m and int(m.group(3)) == len(w), (out, len(w))
x = np.array(w)
for g, want in zip((float(m.group(1)), float(m.group(2))), (x.mean(), x.std())):
    assert abs(g - want) <= 1e-9 * abs(want), (g, want)
P
# a label's standardize step (labels take numeric operators) is fitted as a
# dense feature's: the value reaching it, a missing one (no default) left
# out, and a --set line for schema.labels (--fit ignored labels, and
# refused a schema whose only standardize step was a label's)
cat > "$T/lfit.yaml" <<'Y'
pipelines:
  - name: p
    source: { format: json }
    schema:
      labels:
        - { name: click, path: c }
        - { name: dwell, path: d, ops: [ log1p, { standardize: { mean: 0, std: 1 } } ] }
      dense:
        - { name: x, path: x }
Y
printf '{"c": 1, "d": 0, "x": 1}\n{"c": 0, "d": 1, "x": 1}\n{"c": 0, "x": 1}\n{"d": 3, "x": 1}\n{"d": 7.5, "x": 1}\n' \
    > "$T/lev.jsonl"
"$PIPEREC" process --config "$T/lfit.yaml" --input "$T/lev.jsonl" --fit > "$T/lout.yaml" \
    2> "$T/lerr" || fail "label --fit: $(cat "$T/lerr")"
$PY - "$T/lout.yaml" <<'P' || fail "label --fit: $(cat "$T/lout.yaml")"
import math, re, struct, sys
out = open(sys.argv[1]).read()
f32 = lambda v: struct.unpack("<f", struct.pack("<f", v))[0]
x = [f32(math.log1p(d)) for d in (0, 1, 3, 7.5)]
mean = sum(x) / len(x)
std = math.sqrt(sum((v - mean) ** 2 for v in x) / len(x))
m = re.search(r"^dwell: \{ standardize: \{ mean: (\S+), std: (\S+) \} \}  # n=4$", out, re.M)
assert m, out
assert abs(float(m.group(1)) - mean) <= 1e-9 * mean and abs(float(m.group(2)) - std) <= 1e-9 * std
assert "--set 'pipelines[p].schema.labels[dwell].ops=[log1p, { standardize: { mean: " in out
P
set_line=$(sed -n "s/^#   --set '\(.*\)'$/\1/p" "$T/lout.yaml")
"$PIPEREC" process --config "$T/lfit.yaml" --set "$set_line" --input "$T/lev.jsonl" \
    --output "$T/lrun" --no-progress > /dev/null 2> "$T/lrun.err" ||
    fail "label --set line: $set_line: $(cat "$T/lrun.err")"

# a file that is not JSON lines fits nothing: exit 2, not "1 fitted"
printf '1\t2\t3\n4\t5\t6\n' > "$T/tsv.txt"
rc=0; "$PIPEREC" process --config "$T/fit.yaml" --input "$T/tsv.txt" --fit > /dev/null 2> "$T/err3" || rc=$?
[ "$rc" -eq 2 ] || fail "--fit on TSV: exit $rc: $(cat "$T/err3")"
grep -q "all 2 lines were rejected" "$T/err3" || fail "--fit on TSV: $(cat "$T/err3")"
echo OK
