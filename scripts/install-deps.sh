#!/bin/sh
# Installs the Debian 12 packages tensorwire needs, when any is missing.
#   scripts/install-deps.sh          build + test dependencies
#   scripts/install-deps.sh --dev    also clang and its sanitizer/fuzzer runtimes
# As root it runs apt-get; as another user it prints the command to run.
set -eu
# python3-dev .. python3-pytest: the Python package (python/) and its tests.
# libmicrohttpd-dev: tensorwired --metrics (its header to build; the library
# is dlopened at run time only with --metrics). curl and prometheus (for its
# promtool only, about 100 MB installed) scrape and check /metrics in the
# tests; iproute2 builds the network namespaces of the fault tests.
pkgs="build-essential cmake pkg-config libfabric-dev libfabric-bin libssl-dev python3 procps"
pkgs="$pkgs python3-dev python3-setuptools python3-numpy python3-pytest python3-torch"
pkgs="$pkgs libmicrohttpd-dev curl prometheus iproute2"
if [ "${1:-}" = "--dev" ]; then
    pkgs="$pkgs clang clang-format libclang-rt-14-dev valgrind"
fi
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "tensorwire needs:$missing" >&2
    echo "run: sudo apt-get install -y$missing" >&2
    exit 1
fi
echo "installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
