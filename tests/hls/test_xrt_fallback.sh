#!/bin/sh
# test_xrt_fallback.sh — `piperec process` on a machine without an Alveo card:
# engine.backend xrt must fail (non-zero exit) with a message naming the
# missing device and the fallback setting; backend auto must fall back to cpu
# and succeed; backend hls-sim (the kernel in C simulation) must give the same
# tensors as cpu (with 4 workers: the kernel backends export the vocabulary
# one column at a time, their reads sharing one transfer buffer).
# Environment (pr_script_test): PIPEREC, PR_TEST_DATA, PR_TMP.
set -eu
data="$PR_TEST_DATA/criteo_sample_100.tsv"

cfg() { # cfg BACKEND FILE: a small offline config
    cat > "$2" <<YAML
pipelines:
  - name: criteo
    schema: { label: true, dense: 13, sparse: 26 }
    transform:
      dense: [neg2zero, log1p]
      sparse: [hex2int, { modulus: 8192 }, vocab]
      vocab: { profile: dlrm }
engine: { backend: $1, xclbin: /nonexistent/pr_kernel.xclbin, device: 0 }
YAML
}

cfg xrt "$PR_TMP/xrt.yaml"
if "$PIPEREC" process --config "$PR_TMP/xrt.yaml" --input "$data" --output "$PR_TMP/out-xrt" \
        >"$PR_TMP/xrt.out" 2>"$PR_TMP/xrt.err"; then
    echo "FAIL: backend xrt succeeded without a device"; cat "$PR_TMP/xrt.err"; exit 1
fi
grep -q "no Alveo device" "$PR_TMP/xrt.err" || { echo "FAIL: no device named:"; cat "$PR_TMP/xrt.err"; exit 1; }
grep -q "engine.backend: cpu or auto" "$PR_TMP/xrt.err" || { echo "FAIL: no fallback named:"; cat "$PR_TMP/xrt.err"; exit 1; }

for b in auto cpu hls-sim; do
    cfg "$b" "$PR_TMP/$b.yaml"
    "$PIPEREC" process --config "$PR_TMP/$b.yaml" --input "$data" --output "$PR_TMP/out-$b" --threads 4 \
        2>"$PR_TMP/$b.err" || { echo "FAIL: backend $b:"; cat "$PR_TMP/$b.err"; exit 1; }
done
grep -q "using cpu" "$PR_TMP/auto.err" || { echo "FAIL: auto did not say it runs cpu:"; cat "$PR_TMP/auto.err"; exit 1; }
for f in dense.npy sparse.npy labels.npy; do
    cmp "$PR_TMP/out-cpu/$f" "$PR_TMP/out-auto/$f"
    cmp "$PR_TMP/out-cpu/$f" "$PR_TMP/out-hls-sim/$f" || { echo "FAIL: hls-sim $f differs from cpu"; exit 1; }
done
diff -r "$PR_TMP/out-cpu/vocab" "$PR_TMP/out-hls-sim/vocab" >/dev/null || { echo "FAIL: hls-sim vocabulary differs from cpu"; exit 1; }
echo "ok: xrt refused without a device; auto ran cpu; hls-sim == cpu"
