#!/bin/sh
# tensorwired --metrics: scrape /metrics with curl after known traffic,
# check the values against it, and check the page with `promtool check
# metrics` (Prometheus' own parser and linter). Also: 404 off /metrics,
# 405 for POST, a bad --metrics address is a start-up error (exit 1).
# libmicrohttpd is loaded only for --metrics: tensorwired does not list it
# as NEEDED, and with the library made unloadable (an empty file
# bind-mounted over it in a private mount namespace; root and unshare,
# else that part is noted and skipped) tensorwired starts and serves
# without --metrics, and --metrics fails at start naming the library.
# Needs TW_BUILD_DIR and TW_SOURCE_DIR (set by CTest). Exit 77 = skip.
. "${TW_SOURCE_DIR:?}/tests/lib-test.sh"
if [ "${1:-}" = "--without-mhd" ]; then
    # Inside a private mount namespace (see the end of this file).
    W=$(mktemp -d "${TMPDIR:-/tmp}/tw-metrics-nomhd.XXXXXX")
    trap 'tw_server_stop >/dev/null 2>&1; rm -rf "$W"' EXIT INT TERM
    : >"$W/empty.so"
    mount --bind "$W/empty.so" "$(readlink -f "$TW_MHD_PATH")" 2>"$W/mount.err" || {
        echo "SKIP: cannot bind-mount over libmicrohttpd: $(cat "$W/mount.err")"
        exit 77
    }
    rc=0
    tw_server_start "$B" "$W" --fabric none || exit 1
    head -c 3000 /dev/urandom >"$W/small.bin"
    "$TW" -s "$TW_SERVER_ADDR" put small "$W/small.bin" --dtype u8 --shape 3000 >"$W/out" 2>&1 ||
        { echo "FAIL: put without libmicrohttpd: $(cat "$W/out")" >&2; rc=1; }
    "$TW" -s "$TW_SERVER_ADDR" get --raw small "$W/back.bin" >"$W/out" 2>&1 &&
        cmp -s "$W/small.bin" "$W/back.bin" ||
        { echo "FAIL: get without libmicrohttpd: $(cat "$W/out")" >&2; rc=1; }
    tw_server_stop >/dev/null 2>&1
    "$B/tensorwired" --listen 127.0.0.1:0 --fabric none --metrics 127.0.0.1:0 >"$W/m.log" 2>&1
    mrc=$?
    echo "  --metrics without the library: exit $mrc: $(tail -n 1 "$W/m.log")"
    [ $mrc -eq 1 ] || { echo "FAIL: --metrics without libmicrohttpd exited $mrc" >&2; rc=1; }
    grep -q "libmicrohttpd.so.12" "$W/m.log" ||
        { echo "FAIL: the error does not name libmicrohttpd.so.12" >&2; rc=1; }
    exit $rc
fi
tw_test_need_cmd curl
tw_test_workdir metrics-test
# metric NAME_WITH_LABELS: its value in $W/m.txt ("" when absent).
metric() { awk -v k="$1" '$1 == k { print $2 }' "$W/m.txt"; }
expect_metric() {
    got=$(metric "$1")
    [ "$got" = "$2" ] || fail "$1 = '$got', want '$2'"
}
scrape() {
    curl -sS --max-time 10 -o "$W/m.txt" -w '%{http_code} %{content_type}' \
        "http://$MADDR/metrics" >"$W/code" 2>"$W/curl.err" || fail "curl: $(cat "$W/curl.err")"
}

echo "case libmicrohttpd not linked"
if command -v readelf >/dev/null; then
    readelf -d "$B/tensorwired" | grep NEEDED | grep -q microhttpd &&
        fail "tensorwired links libmicrohttpd: $(readelf -d "$B/tensorwired" | grep NEEDED | tr '\n' ' ')"
else
    echo "note: readelf missing; NEEDED not checked"
fi

echo "case without libmicrohttpd: serves, and --metrics names the library"
MHD=$(ldconfig -p 2>/dev/null | sed -n 's/.*libmicrohttpd\.so\.12 (libc6,x86-64) => //p' | head -n 1)
if [ -n "$MHD" ] && command -v unshare >/dev/null && [ "$(id -u)" -eq 0 ]; then
    TW_MHD_PATH=$MHD unshare --mount --propagation private sh "$0" --without-mhd
    rc=$?
    [ $rc -eq 0 ] || [ $rc -eq 77 ] || fail "without libmicrohttpd: exit $rc"
else
    echo "note: needs root, unshare and an installed libmicrohttpd.so.12; not run"
fi

echo "case bad address is a start-up error"
"$B/tensorwired" --listen 127.0.0.1:0 --fabric none --metrics nohost >"$W/bad.log" 2>&1
rc=$?
[ $rc -eq 1 ] || [ $rc -eq 2 ] || fail "--metrics nohost exited $rc: $(cat "$W/bad.log")"
grep -q "metrics" "$W/bad.log" || fail "--metrics nohost does not name the option: $(cat "$W/bad.log")"

# The cases below serve the page: on a host that never installed
# libmicrohttpd12 they cannot run, which is a skip, not a failure; what
# --metrics says there is checked instead (as the hidden-library case
# above does). ldconfig's cache is the test (any architecture's entry);
# without ldconfig on PATH the cases run.
if command -v ldconfig >/dev/null && ! ldconfig -p 2>/dev/null | grep -q 'libmicrohttpd\.so\.12 '; then
    echo "case --metrics on a host without the library"
    timeout 10 "$B/tensorwired" --listen 127.0.0.1:0 --fabric none --metrics 127.0.0.1:0 \
        >"$W/nomhd.log" 2>&1
    mrc=$?
    [ $mrc -eq 1 ] || fail "--metrics without libmicrohttpd exited $mrc: $(tail -n 2 "$W/nomhd.log")"
    grep -q "libmicrohttpd.so.12" "$W/nomhd.log" ||
        fail "the error does not name libmicrohttpd.so.12: $(tail -n 2 "$W/nomhd.log")"
    echo "SKIP: libmicrohttpd.so.12 is not installed (Debian: libmicrohttpd12); the page not checked"
    [ $FAILS -eq 0 ] && exit 77
    exit 1
fi

echo "case values after known traffic"
tw_server_start "$B" "$W" --fabric tcp --metrics 127.0.0.1:0 || exit 1
MADDR=$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$W/server.log" | head -n 1)
[ -n "$MADDR" ] || { fail "no 'metrics on' line: $(cat "$W/server.log")"; exit 1; }
A="-s $TW_SERVER_ADDR"
head -c 3000 /dev/urandom >"$W/small.bin"
head -c 4000000 /dev/urandom >"$W/big.bin"
$TW $A put small "$W/small.bin" --dtype u8 --shape 3000 >/dev/null 2>&1 || fail "put small"
$TW $A get --raw small "$W/back.bin" >/dev/null 2>&1 || fail "get small"
cmp -s "$W/small.bin" "$W/back.bin" || fail "small round trip differs"
$TW $A get --raw missing "$W/none.bin" >/dev/null 2>&1 && fail "get of a missing name succeeded"
scrape
[ "$(cat "$W/code")" = "200 text/plain; version=0.0.4; charset=utf-8" ] ||
    fail "status/content type: $(cat "$W/code")"
expect_metric tensorwire_puts_total 1
expect_metric tensorwire_gets_total 1
expect_metric tensorwire_requests_failed_total 1
expect_metric tensorwire_tensors 1
expect_metric tensorwire_stored_bytes 3000
expect_metric 'tensorwire_device_stored_bytes{device="cpu"}' 3000
expect_metric 'tensorwire_device_reserved_bytes{device="cpu"}' 3000
expect_metric tensorwire_connections_accepted_total 3
expect_metric 'tensorwire_transfers_total{plane="inline",op="put",result="ok"}' 1
expect_metric 'tensorwire_transfers_total{plane="inline",op="get",result="ok"}' 1
expect_metric 'tensorwire_transfer_bytes_total{plane="inline",op="put"}' 3000
expect_metric 'tensorwire_transfer_duration_seconds_count{plane="inline",op="put"}' 1
expect_metric 'tensorwire_transfer_duration_seconds_bucket{plane="inline",op="put",le="+Inf"}' 1

if [ "$(metric tensorwire_rdma_enabled)" = "1" ]; then
    echo "case rdma series (tcp)"
    $TW $A --fabric tcp --rdma-min-bytes 0 put big "$W/big.bin" --dtype u8 --shape 4000000 \
        >/dev/null 2>&1 || fail "rdma put"
    $TW $A --fabric tcp --rdma-min-bytes 0 put big "$W/big.bin" --dtype u8 --shape 4000000 \
        >/dev/null 2>&1 || fail "rdma put again"
    scrape
    expect_metric 'tensorwire_transfers_total{plane="rdma",op="put",result="ok"}' 2
    expect_metric 'tensorwire_transfer_bytes_total{plane="rdma",op="put"}' 8000000
    m=$(metric tensorwire_regcache_misses_total)
    [ "${m:-0}" -ge 1 ] || fail "regcache_misses_total = '$m' after rdma puts"
else
    echo "note: no rdma data plane here; rdma series not checked"
fi

echo "case other paths and methods"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "http://$MADDR/")
[ "$code" = 404 ] || fail "GET / gave $code, want 404"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X POST "http://$MADDR/metrics")
[ "$code" = 405 ] || fail "POST /metrics gave $code, want 405"
kill -0 "$TW_SERVER_PID" 2>/dev/null || fail "server died"
$TW $A stat small >/dev/null 2>&1 || fail "server stopped serving after scrapes"

echo "case promtool check metrics"
if command -v promtool >/dev/null; then
    promtool check metrics <"$W/m.txt" >"$W/promtool.out" 2>&1 ||
        fail "promtool check metrics: $(cat "$W/promtool.out")"
else
    echo "SKIP: promtool missing (Debian package prometheus)"
    [ $FAILS -eq 0 ] && exit 77
fi

tw_test_end PASS 200
