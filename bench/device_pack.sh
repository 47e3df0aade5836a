#!/bin/sh
# device_pack.sh BUILD BIN... -- copy the shared libraries the given binaries
# (paths under BUILD) load, except the C library's own, into BUILD/devlibs,
# so the binaries run on a device machine that lacks this machine's packages.
# Used by device_sweep.sh --pack and device_gpu.sh --pack; one call with every
# binary of both packs one directory for a session that runs both.
set -eu
[ $# -ge 2 ] || { echo "usage: device_pack.sh BUILD BIN..." >&2; exit 2; }
BUILD=$1
shift
mkdir -p "$BUILD/devlibs"
CARRY=""
for b in "$@"; do
    [ -x "$BUILD/$b" ] || { echo "device_pack.sh: $BUILD/$b not built" >&2; exit 1; }
    CARRY="$CARRY $BUILD/$b"
done
for b in "$@"; do
    ldd "$BUILD/$b" | awk '/=> \// {print $3}'
done | sort -u | grep -Ev '/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" "$BUILD/devlibs/"; done
echo "device_pack.sh: $(ls "$BUILD/devlibs" | wc -l) libraries, $(du -sh "$BUILD/devlibs" | cut -f1), in $BUILD/devlibs"
echo "carry:$CARRY $BUILD/devlibs"
