#!/bin/sh
# install-deps.sh — install every Debian package piperec needs to build, test and
# benchmark. Idempotent: when everything is present it does nothing and exits 0.
# `make run`, `make test` and `make bench` call it through `tools/install-deps.sh --check`
# first, so a fresh Debian 12 machine needs no other step.
set -eu

PKGS="build-essential cmake pkg-config \
librdkafka-dev libprotobuf-c-dev protobuf-c-compiler libmicrohttpd-dev \
libcmocka-dev libxrt-dev libyaml-dev \
kcat prometheus curl bc \
python3-numpy python3-pandas python3-protobuf python3-confluent-kafka python3-yaml"

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

if [ "${1:-}" = "--check" ]; then
    [ -z "$missing" ] && exit 0
    echo "missing packages:$missing" >&2
    exit 1
fi

if [ -z "$missing" ]; then
    exit 0
fi

if [ "$(id -u)" != 0 ]; then
    echo "install-deps: need root to install:$missing (run as root or: sudo $0)" >&2
    exit 1
fi

echo "install-deps: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
