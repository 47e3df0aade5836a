#!/bin/sh
# build-image.sh — build the piperec OCI image with buildah, FROM scratch.
#
#   tools/build-image.sh [--binary PATH] [--tag NAME]... [--archive FILE]
#
# The image holds exactly what the binary needs to run and nothing else:
#   /usr/local/bin/piperec          the binary (debug info stripped)
#   every shared library `ldd` lists, at the path ldd resolved it to, and the
#   dynamic loader                  (no shell, no package manager, no libc tools)
#   /etc/ssl/certs/ca-certificates.crt (+ OpenSSL's default paths linking to it)
#                                   so librdkafka can verify a TLS broker
#   /etc/passwd, /etc/group         root and the non-root user piperec (65532)
#   /etc/nsswitch.conf              files, then DNS, for broker host names
#   /tmp (1777), /etc/piperec, /var/lib/piperec (owned by 65532: state.dir)
# Config: user 65532:65532, entrypoint ["piperec"] (found on PATH), default
# command ["run", "--config", "/etc/piperec/config.yaml"], ports 7070 and 9464.
#
# Defaults: --binary build/piperec; --tag localhost/piperec:<version> and
# localhost/piperec:latest. --archive FILE also writes an oci-archive.
# Storage: buildah's own (root: /var/lib/containers); the tests point it at a
# scratch directory with BUILDAH_ROOT (and BUILDAH_RUNROOT). The vfs driver is
# used unless BUILDAH_STORAGE_DRIVER says otherwise: it needs no kernel overlay
# support (containers, CI).
# Pushing: see docs/operations.md ("Container image").
set -eu

die() { echo "build-image: $*" >&2; exit 1; }

src=$(cd "$(dirname "$0")/.." && pwd)
bin="$src/build/piperec"
tags=""
archive=""
while [ $# -gt 0 ]; do
    case "$1" in
    --binary) bin=$2; shift 2 ;;
    --tag) tags="$tags $2"; shift 2 ;;
    --archive) archive=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -eu$/{/^set -eu$/d;s/^# \{0,1\}//;p;}' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
    esac
done

command -v buildah >/dev/null || die "buildah missing (tools/install-deps.sh installs it)"
[ -x "$bin" ] || die "no binary at $bin (build first: make build)"
[ -f /etc/ssl/certs/ca-certificates.crt ] || die "no /etc/ssl/certs/ca-certificates.crt (apt-get install ca-certificates)"

# buildah mount needs root or a user namespace: re-run inside `buildah unshare`.
if [ "$(id -u)" != 0 ] && [ -z "${_PR_IMAGE_UNSHARED:-}" ]; then
    _PR_IMAGE_UNSHARED=1 exec buildah unshare sh "$0" --binary "$bin" ${archive:+--archive "$archive"} \
        $(for t in $tags; do printf ' --tag %s' "$t"; done)
fi

set -- --storage-driver "${BUILDAH_STORAGE_DRIVER:-vfs}"
[ -n "${BUILDAH_ROOT:-}" ] && set -- "$@" --root "$BUILDAH_ROOT"
[ -n "${BUILDAH_RUNROOT:-}" ] && set -- "$@" --runroot "$BUILDAH_RUNROOT"
B="$*" # global buildah options, word-split on purpose below

version=$("$bin" version | awk '{print $2}')
[ -n "$version" ] || die "$bin version printed nothing"
[ -n "$tags" ] || tags="localhost/piperec:$version localhost/piperec:latest"

stage=$(mktemp -d "${TMPDIR:-/tmp}/piperec-image.XXXXXX")
ctr=""
cleanup() {
    [ -n "$ctr" ] && buildah $B rm "$ctr" >/dev/null 2>&1 || true
    rm -rf "$stage"
}
trap cleanup EXIT INT TERM

# ---- the root filesystem, staged in a plain directory ----
root="$stage/rootfs"
mkdir -p "$root/usr/local/bin" "$root/etc/ssl/certs" "$root/usr/lib/ssl" "$root/etc/piperec" \
    "$root/var/lib/piperec" "$root/tmp"
cp "$bin" "$root/usr/local/bin/piperec"
strip --strip-debug "$root/usr/local/bin/piperec" 2>/dev/null || true
chmod 0755 "$root/usr/local/bin/piperec"

# Every library the loader resolves, at the path it resolved ("=> /path"), and
# the loader itself (the line without "=>"). realpath -s only normalises the
# "../.." ldd sometimes prints; cp -L copies the file a soname link points to.
libs=$(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u)
[ -n "$libs" ] || die "ldd $bin listed no libraries (static binary?)"
n_libs=0
for l in $libs; do
    p=$(realpath -s "$l")
    mkdir -p "$root$(dirname "$p")"
    cp -L "$l" "$root$p"
    n_libs=$((n_libs + 1))
done
if ldd "$bin" | grep -q "not found"; then
    die "ldd: unresolved libraries: $(ldd "$bin" | grep 'not found' | tr -s ' \t' ' ')"
fi

cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
chmod 0644 "$root/etc/ssl/certs/ca-certificates.crt"
ln -s /etc/ssl/certs/ca-certificates.crt "$root/usr/lib/ssl/cert.pem"
ln -s /etc/ssl/certs "$root/usr/lib/ssl/certs"

cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
piperec:x:65532:65532:piperec:/var/lib/piperec:/sbin/nologin
EOF
cat >"$root/etc/group" <<'EOF'
root:x:0:
piperec:x:65532:
EOF
cat >"$root/etc/nsswitch.conf" <<'EOF'
passwd: files
group:  files
hosts:  files dns
EOF
chmod 1777 "$root/tmp"
chown 65532:65532 "$root/var/lib/piperec"

# ---- the image ----
ctr=$(buildah $B from scratch)
mnt=$(buildah $B mount "$ctr")
cp -a "$root/." "$mnt/"
buildah $B umount "$ctr" >/dev/null

buildah $B config \
    --user 65532:65532 \
    --workingdir /var/lib/piperec \
    --env PATH=/usr/local/bin:/usr/bin:/bin \
    --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    --entrypoint '["piperec"]' \
    --cmd '["run", "--config", "/etc/piperec/config.yaml"]' \
    --port 7070 --port 9464 \
    --label org.opencontainers.image.title=piperec \
    --label org.opencontainers.image.description="Streaming ETL for online recommender training" \
    --label org.opencontainers.image.version="$version" \
    "$ctr"

first=""
for t in $tags; do
    if [ -z "$first" ]; then
        buildah $B commit --quiet --format oci --rm "$ctr" "$t" >/dev/null
        ctr=""
        first=$t
    else
        buildah $B tag "$first" "$t"
    fi
done
if [ -n "$archive" ]; then
    rm -f "$archive"
    buildah $B push --quiet "$first" "oci-archive:$archive"
fi
size=$(du -sh "$root" | cut -f1)
echo "build-image: $tags ($n_libs libraries, rootfs $size)"
