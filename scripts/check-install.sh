#!/bin/sh
# Installs a built tree into a temporary DESTDIR and uses it the way a user
# would: builds tests/install/consumer.c with pkg-config and with CMake's
# find_package(tensorwire), runs both, and runs the installed tensorwire and
# tensorwired. Usage: scripts/check-install.sh BUILD_DIR SOURCE_DIR
# (the CTest test test_install).
set -eu
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
prefix=/opt/tensorwire
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
root="$tmp/root"

DESTDIR="$root" cmake --install "$build" --prefix "$prefix" >"$tmp/install.log"
inst="$root$prefix"
for f in bin/tensorwire bin/tensorwired include/tensorwire/tensorwire.h; do
    [ -e "$inst/$f" ] || { echo "FAIL: $f not installed" >&2; exit 1; }
done
pc=$(find "$inst" -name tensorwire.pc)
cfg=$(find "$inst" -name tensorwireConfig.cmake)
[ -n "$pc" ] && [ -n "$cfg" ] || { echo "FAIL: no tensorwire.pc or tensorwireConfig.cmake" >&2; exit 1; }
libdir=$(dirname "$(find "$inst" -name 'libtensorwire.so' | head -n1)")

# pkg-config: the .pc finds its prefix from its own place (${pcfiledir}).
flags=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs tensorwire)
echo "pkg-config: $flags"
# shellcheck disable=SC2086
cc -std=c11 -D_GNU_SOURCE -Wall -Werror -o "$tmp/consumer_pc" "$src/tests/install/consumer.c" $flags
LD_LIBRARY_PATH="$libdir" "$tmp/consumer_pc"

# find_package: the package config is relocatable, so the DESTDIR copy works.
cmake -S "$src/tests/install" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$inst" \
      -DCMAKE_C_COMPILER=cc >"$tmp/cmake.log" || { cat "$tmp/cmake.log" >&2; exit 1; }
cmake --build "$tmp/cmake" >"$tmp/build.log" || { cat "$tmp/build.log" >&2; exit 1; }
"$tmp/cmake/consumer"

# The installed programs find the installed library by their RUNPATH.
# (127 would mean the loader did not find libtensorwire.so.)
for exe in tensorwire tensorwired; do
    rc=0
    "$inst/bin/$exe" --help >/dev/null 2>&1 || rc=$?
    case $rc in
    0 | 2) ;;
    *) echo "FAIL: installed $exe --help exited $rc" >&2; exit 1 ;;
    esac
done
echo "install check: ok"
