#!/bin/sh
# libfabric is loaded with dlopen only when a fabric is asked for
# (src/fabric/fi_api.h):
#  1. no binary or library lists libfabric as NEEDED;
#  2. with libfabric made unloadable (an empty file bind-mounted over it in
#     a private mount namespace), `tensorwired --fabric tcp` still starts,
#     logs why it has no fabric, and serves inline; the CLI with
#     --fabric tcp still moves bytes (inline fallback).
# Needs TW_BUILD_DIR and TW_SOURCE_DIR (set by CTest). Exit 77 = skip.
. "${TW_SOURCE_DIR:?}/tests/lib-test.sh"

echo "case no NEEDED libfabric"
command -v readelf >/dev/null || { echo "SKIP: readelf missing"; exit 77; }
for f in "$B/tensorwired" "$B/tensorwire" "$B/libtensorwire.so"; do
    [ -e "$f" ] || { fail "$f not built"; continue; }
    if readelf -d "$f" | grep NEEDED | grep -q libfabric; then
        fail "$f links libfabric: $(readelf -d "$f" | grep NEEDED | tr '\n' ' ')"
    fi
done

if [ "${1:-}" != "--inside" ]; then
    # Re-run the second half in a private mount namespace.
    LIB=$(ldconfig -p 2>/dev/null | sed -n 's/.*libfabric\.so\.1 (libc6,x86-64) => //p' | head -n 1)
    if [ -z "$LIB" ] || ! command -v unshare >/dev/null || [ "$(id -u)" -ne 0 ]; then
        echo "SKIP: needs root, unshare and an installed libfabric.so.1 (have '$LIB')"
        [ $FAILS -eq 0 ] && exit 77
        exit 1
    fi
    TW_LIBFABRIC_PATH=$LIB unshare --mount --propagation private sh "$0" --inside
    rc=$?
    [ $rc -eq 77 ] && [ $FAILS -eq 0 ] && exit 77
    [ $rc -ne 0 ] && fail "namespace part exited $rc"
    [ $FAILS -eq 0 ] && echo "PASS" && exit 0
    exit 1
fi

tw_test_workdir loader-test
: >"$W/empty.so"
if ! mount --bind "$W/empty.so" "$(readlink -f "$TW_LIBFABRIC_PATH")" 2>"$W/mount.err"; then
    echo "SKIP: cannot bind-mount over libfabric: $(cat "$W/mount.err")"
    exit 77
fi

echo "case server without libfabric"
tw_server_start "$B" "$W" --fabric tcp || exit 1
grep -q "no libfabric" "$W/server.log" || fail "server log does not say libfabric is missing: $(cat "$W/server.log")"
kill -0 "$TW_SERVER_PID" 2>/dev/null || fail "server died"

echo "case client without libfabric falls back to inline"
head -c 3000000 /dev/urandom >"$W/in.bin"
"$B/tensorwire" -s "$TW_SERVER_ADDR" --fabric tcp put t "$W/in.bin" --dtype u8 --shape 3000000 \
    >"$W/out" 2>&1 || fail "put: $(cat "$W/out")"
"$B/tensorwire" -s "$TW_SERVER_ADDR" --fabric tcp get --raw t "$W/back.bin" >"$W/out" 2>&1 ||
    fail "get: $(cat "$W/out")"
cmp -s "$W/in.bin" "$W/back.bin" || fail "bytes differ after the round trip"
"$B/tensorwire" -s "$TW_SERVER_ADDR" --fabric tcp -v get --raw t "$W/back.bin" >"$W/out" 2>&1
grep -q "libfabric" "$W/out" || echo "note: get -v does not name libfabric: $(cat "$W/out")"

tw_test_end PASS 200
