#!/bin/sh
# test_image.sh — build the OCI image with tools/build-image.sh (buildah, FROM
# scratch) and run it with `buildah run --isolation chroot`:
#   - the image config: entrypoint ["piperec"], non-root user 65532;
#   - its files: the binary, exactly the libraries ldd lists (+ the loader),
#     the CA bundle, /etc/passwd with the non-root user, and no shell;
#   - `piperec version` and `piperec process` on the sample data inside the
#     image print/write exactly what the host binary does (.npy and vocab
#     files compared byte for byte).
# Uses its own buildah storage under PR_TMP (vfs driver), removed at the end.
# Needs root (CI runs as root) or a user namespace for `buildah unshare`.
set -eu

fail() { echo "FAIL: $*"; exit 1; }
command -v buildah >/dev/null || fail "buildah missing: run tools/install-deps.sh"
[ -f "$PR_TEST_DATA/criteo_sample_100.tsv" ] || fail "no $PR_TEST_DATA/criteo_sample_100.tsv"

export BUILDAH_ROOT="$PR_TMP/storage" BUILDAH_RUNROOT="$PR_TMP/runroot"
B="--storage-driver vfs --root $BUILDAH_ROOT --runroot $BUILDAH_RUNROOT"
tag=localhost/piperec:test
ctr=""
cleanup() {
    # shellcheck disable=SC2086
    { [ -n "$ctr" ] && buildah $B rm "$ctr"; buildah $B rmi -a -f; } >/dev/null 2>&1 || true
    rm -rf "$BUILDAH_ROOT" "$BUILDAH_RUNROOT"
}
trap cleanup EXIT INT TERM

"$PR_SOURCE_DIR/tools/build-image.sh" --binary "$PIPEREC" --tag "$tag" ||
    fail "tools/build-image.sh failed (see above)"

# shellcheck disable=SC2086
cfg=$(buildah $B inspect --type image --format '{{.OCIv1.Config.Entrypoint}} {{.OCIv1.Config.User}}' "$tag") ||
    fail "buildah inspect $tag failed"
[ "$cfg" = '[piperec] 65532:65532' ] || fail "image config: entrypoint/user are '$cfg'"

# shellcheck disable=SC2086
ctr=$(buildah $B from "$tag") || fail "buildah from $tag failed"
# shellcheck disable=SC2086
mnt=$(buildah $B mount "$ctr") || fail "buildah mount failed (needs root or buildah unshare)"
[ -x "$mnt/usr/local/bin/piperec" ] || fail "no /usr/local/bin/piperec in the image"
grep -q '^piperec:x:65532:65532:' "$mnt/etc/passwd" || fail "/etc/passwd lacks the non-root user"
[ -s "$mnt/etc/ssl/certs/ca-certificates.crt" ] || fail "no CA bundle in the image"
[ ! -e "$mnt/bin/sh" ] && [ ! -e "$mnt/usr/bin/sh" ] || fail "the image has a shell; it should not"
want=$(ldd "$PIPEREC" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' |
    xargs -n1 realpath -s | xargs -n1 basename | sort -u)
have=$(find "$mnt" -name '*.so*' -type f | xargs -n1 basename | sort -u)
[ "$want" = "$have" ] || fail "libraries in the image differ from ldd:
$(printf '%s\n' "$want" >"$PR_TMP/want"; printf '%s\n' "$have" >"$PR_TMP/have"; diff "$PR_TMP/want" "$PR_TMP/have")"
# shellcheck disable=SC2086
buildah $B umount "$ctr" >/dev/null
echo "image: $(printf '%s\n' "$have" | wc -l) libraries, entrypoint piperec, user 65532"

run() {
    # shellcheck disable=SC2086
    buildah $B run --isolation chroot -v "$PR_TMP/io:/io" "$ctr" -- "$@"
}
mkdir -p "$PR_TMP/io/out" "$PR_TMP/host"
chmod 0777 "$PR_TMP/io/out" # written by uid 65532 inside
cp "$PR_TEST_DATA/criteo_sample_100.tsv" "$PR_TMP/io/in.tsv"
chmod 0644 "$PR_TMP/io/in.tsv"

v_img=$(run piperec version 2>"$PR_TMP/run.err") || fail "buildah run --isolation chroot could not run piperec version:
$(cat "$PR_TMP/run.err")
(buildah run needs root, or user namespaces with /etc/subuid for a non-root user)"
v_host=$("$PIPEREC" version)
[ "$v_img" = "$v_host" ] || fail "version in image '$v_img' != host '$v_host'"
echo "version: $v_img (same as host)"

run piperec process --input /io/in.tsv --output /io/out --threads 1 --no-progress ||
    fail "piperec process failed inside the image"
"$PIPEREC" process --input "$PR_TMP/io/in.tsv" --output "$PR_TMP/host" --threads 1 --no-progress
n=0
for f in dense.npy sparse.npy labels.npy rejects.tsv $(cd "$PR_TMP/host" && ls vocab/* | head -n 3); do
    cmp "$PR_TMP/io/out/$f" "$PR_TMP/host/$f" || fail "$f differs between image and host"
    n=$((n + 1))
done
echo "image: ok ($n output files identical to the host binary's)"
