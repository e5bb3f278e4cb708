#!/bin/sh
# Faults between hosts: tensorwired and the tensorwire CLI in two network
# namespaces joined by a veth pair (tests/faults/netns.sh). The link is
# cut mid-put and mid-get (inline and RDMA over tcp), throttled with tbf
# (this kernel has tbf, not netem), and blackholed, then brought back.
# Each time: the request fails with TIMEOUT or a connection error within
# its deadline (client --timeout 3 s without progress, server
# --transfer-timeout 6 s), nothing partial becomes visible, nothing leaks
# (STATS: connections, reserved_bytes, rdma transfers and peers settle),
# the server keeps serving, and the next transfer after the link returns
# works byte for byte.
# Needs root and iproute2 (exit 77 = skip where namespaces cannot be made).
. "${TW_SOURCE_DIR:?}/tests/lib-test.sh"
. "$S/tests/faults/netns.sh"
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root"; exit 77; }
command -v ip >/dev/null && command -v tc >/dev/null || { echo "SKIP: needs iproute2"; exit 77; }
tw_test_workdir faults
SP=""
cleanup() {
    [ -n "$SP" ] && kill "$SP" 2>/dev/null
    ns_teardown
    rm -rf "$W"
}
trap cleanup EXIT INT TERM
ns_setup || { echo "SKIP: cannot create network namespaces here"; exit 77; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# The wrapper writes the server's own pid (ip netns exec forks).
ns_s sh -c 'echo $$ >"$0"; exec "$@"' "$W/server.pid" "$B/tensorwired" --listen "$ADDR_S:0" \
    --fabric tcp --transfer-timeout 6 --idle-timeout 60 >"$W/server.log" 2>&1 &
A=$(tw_server_wait_listening "$W/server.log") ||
    { echo "server did not start: $(cat "$W/server.log")"; exit 1; }
SP=$(cat "$W/server.pid")
RDMA=0
grep -q "rails: .*tcp" "$W/server.log" && RDMA=1

cli() { ns_c "$B/tensorwire" -s "$A" "$@"; }
stat_of() { cli --timeout 2000 stats 2>/dev/null | awk -v k="$1" '$1 == k { print $2 }'; }
# wait_for KEY MIN SECONDS: until STATS KEY >= MIN (the transfer is under way).
wait_for() {
    _end=$(($(now_ms) + $3 * 1000))
    while [ "$(now_ms)" -lt $_end ]; do
        _v=$(stat_of "$1")
        [ -n "$_v" ] && [ "$_v" -ge "$2" ] && return 0
        sleep 0.05
    done
    return 1
}
# What an earlier case left with the tcp provider and accepted (settle_rdma):
# bytes reserved beyond what is stored, and peers.
LEFT_R=0
LEFT_P=0
# settle SECONDS NAME [quiet]: the server is back to idle (only the STATS
# connection, nothing reserved beyond what is stored, no rdma transfer or
# peer; beyond LEFT_R / LEFT_P). quiet: return 1 without failing.
settle() {
    _end=$(($(now_ms) + $1 * 1000))
    while :; do
        cli --timeout 2000 stats >"$W/stats" 2>/dev/null
        _c=$(awk '$1 == "connections" { print $2 }' "$W/stats")
        _r=$(awk '$1 == "reserved_bytes" { print $2 }' "$W/stats")
        _s=$(awk '$1 == "stored_bytes" { print $2 }' "$W/stats")
        _x=$(awk '$1 == "rdma_xfers_active" { print $2 }' "$W/stats")
        _p=$(awk '$1 == "rdma_peers" { print $2 }' "$W/stats")
        [ "$_c" = 1 ] && [ -n "$_r" ] && [ $((_r - _s)) -eq $LEFT_R ] && [ "$_x" = 0 ] &&
            [ "$_p" = $LEFT_P ] && return 0
        # What an earlier case left held (settle_rdma) may be let go later,
        # when the provider finally fails those reads: idle with nothing
        # held is idle too, and nothing is carried on from then.
        if [ "$_c" = 1 ] && [ -n "$_r" ] && [ "$_r" = "$_s" ] && [ "$_x" = 0 ] &&
            [ "$_p" = 0 ] && [ $((LEFT_R + LEFT_P)) -gt 0 ]; then
            echo "  $2: what the tcp provider held from an earlier case was let go"
            LEFT_R=0
            LEFT_P=0
            return 0
        fi
        if [ "$(now_ms)" -ge $_end ]; then
            [ "${3:-}" = quiet ] && return 1
            fail "$2: server did not settle within $1 s: $(tr '\n' ' ' <"$W/stats")"
            return 1
        fi
        sleep 0.2
    done
}
# settle_rdma SECONDS NAME BYTES: settle after a cut RDMA-tcp put of BYTES
# that the server was reading. Known, not fixed (docs/testing.md, "Known
# failure"): now and then libfabric 1.17's tcp provider keeps the reads of
# the cut connection for good, and the server keeps their buffer (at most
# BYTES) and the peer rather than free memory a late completion could
# write. That state is accepted (returns 2), said, and carried into the
# later cases' checks; anything else that stays is a failure.
settle_rdma() {
    settle "$1" "$2" quiet && return 0
    _k=$(awk '$1 == "rdma_stuck_ops" { print $2 }' "$W/stats")
    _d=$((_r - _s - LEFT_R))
    if [ "$_c" = 1 ] && [ "$_x" = 0 ] && [ "${_k:-0}" -gt 0 ] && [ "$_p" = $((LEFT_P + 1)) ] &&
        [ $_d -gt 0 ] && [ $_d -le "$3" ]; then
        echo "  $2: known: the tcp provider kept $_k reads of the cut connection;" \
            "$_d bytes and 1 peer stay held (docs/testing.md)"
        LEFT_R=$((LEFT_R + _d))
        LEFT_P=$((LEFT_P + 1))
        return 2
    fi
    fail "$2: server did not settle within $1 s: $(tr '\n' ' ' <"$W/stats")"
    return 1
}
# expect_failed CASE RC START_MS LIMIT_S: the request failed (exit 1, not a
# crash) with TIMEOUT or a connection error, at most LIMIT_S after START_MS.
expect_failed() {
    _el=$(($(now_ms) - $3))
    [ "$2" -eq 1 ] || fail "$1: client exited $2, want 1: $(cat "$W/err")"
    [ $_el -le $(($4 * 1000)) ] || fail "$1: failed after $_el ms, limit $4 s"
    grep -Eq "TIMEOUT|ECONN|EPIPE|ENETUNREACH|EHOSTUNREACH|connection|Connection" "$W/err" ||
        fail "$1: not a timeout or connection error: $(cat "$W/err")"
    echo "  $1: failed in $_el ms: $(head -c 200 "$W/err")"
}
# in_ls NAME: 0 when ls lists NAME.
in_ls() { cli ls >"$W/ls" 2>&1 && awk '{ print $1 }' "$W/ls" | grep -qx "$1"; }
roundtrip() {
    cli "$@" put rt "$W/small.bin" --dtype u8 --shape 1000000 >"$W/err" 2>&1 || {
        fail "round trip put ($*): $(cat "$W/err")"
        return
    }
    cli "$@" get --raw rt "$W/rt.bin" >"$W/err" 2>&1 || fail "round trip get ($*): $(cat "$W/err")"
    cmp -s "$W/small.bin" "$W/rt.bin" || fail "round trip ($*): bytes differ"
}

head -c 1000000 /dev/urandom >"$W/small.bin"
head -c 16000000 /dev/urandom >"$W/big.bin"
echo "case baseline"
cli put big "$W/big.bin" --dtype u8 --shape 16000000 >"$W/err" 2>&1 || fail "put big: $(cat "$W/err")"
roundtrip
[ $RDMA -eq 1 ] && roundtrip --fabric tcp --rdma-min-bytes 0
settle 20 baseline

# cut_case NAME DIR FABRIC TRIGGER_KEY SETTLE_S: a 16 MB transfer at
# 16 Mbit/s (8 s) whose link is cut once the server sees it under way; the
# server must be back to idle within SETTLE_S after the link returns.
cut_case() {
    _name=$1 _dir=$2 _fab=$3 _key=$4 _settle=$5
    _before=$(stat_of "$_key")
    ns_throttle 16mbit
    if [ "$_dir" = put ]; then
        cli --timeout 3000 --fabric "$_fab" --rdma-min-bytes 0 put "$_name" "$W/big.bin" --dtype u8 \
            --shape 16000000 >"$W/out" 2>"$W/err" &
    else
        cli --timeout 3000 --fabric "$_fab" get --raw big "$W/got.bin" >"$W/out" 2>"$W/err" &
    fi
    _cp=$!
    if ! wait_for "$_key" $((${_before:-0} + 1)) 10; then
        fail "$_name: transfer not seen under way ($_key)"
    fi
    ns_cut
    _t0=$(now_ms)
    wait $_cp
    expect_failed "$_name" $? "$_t0" 10
    ns_restore
    ns_unthrottle
    _t0=$(now_ms)
    if [ "$_fab" = tcp ] && [ "$_dir" = put ]; then
        settle_rdma "$_settle" "$_name" 16000000 &&
            echo "  $_name: settled $(($(now_ms) - _t0)) ms after the link returned"
    else
        settle "$_settle" "$_name" &&
            echo "  $_name: settled $(($(now_ms) - _t0)) ms after the link returned"
    fi
    if [ "$_dir" = put ]; then
        in_ls "$_name" && fail "$_name: a partial put became visible"
    fi
    cli get --raw big "$W/got.bin" >"$W/err" 2>&1 || fail "$_name: get after: $(cat "$W/err")"
    cmp -s "$W/big.bin" "$W/got.bin" || fail "$_name: stored tensor changed"
    roundtrip --fabric "$_fab" --rdma-min-bytes 0
}

echo "case link cut mid-put, inline"
cut_case cut_put_inline put none reserved_bytes 40
echo "case link cut mid-get, inline"
cut_case cut_get_inline get none gets 40
if [ $RDMA -eq 1 ]; then
    echo "case link cut mid-put, rdma tcp"
    # The server's reads that the dead client never answered stay with the
    # tcp provider (rdma_stuck_ops, the 16 MB version reserved) until its
    # probe of the removed peer draws a TCP reset (src/fabric/xfer.c,
    # probe_zombies()): within seconds of the link returning.
    cut_case cut_put_rdma put tcp rdma_xfers_active 60
    # The client's reads that the cut link never answers stay with the tcp
    # provider; closing its data plane keeps that rail open instead of
    # crashing in fi_close(endpoint) (libfabric 1.17 tcp;ofi_rxm, fabric.h
    # "Closing with operations outstanding").
    echo "case link cut mid-get, rdma tcp"
    cut_case cut_get_rdma get tcp gets 120

    # A pull put (the server reads the client's memory) slower than the
    # client's --timeout but moving: 8 MB at 16 Mbit/s takes about 4 s,
    # --timeout is 1.5 s without progress. No frame comes until the
    # server's RDMA_DONE; the server's reads of the client's memory are the
    # progress (src/client/conn.c wait_fd), so the put succeeds.
    echo "case rdma tcp pull put slower than the client's timeout"
    head -c 8000000 "$W/big.bin" >"$W/mid.bin"
    ns_throttle 16mbit
    t0=$(now_ms)
    cli --timeout 1500 --fabric tcp --rdma-min-bytes 0 put -v slowpull "$W/mid.bin" --dtype u8 \
        --shape 8000000 >"$W/out" 2>"$W/err" || fail "slow pull put: $(cat "$W/err")"
    el=$(($(now_ms) - t0))
    ns_unthrottle
    echo "  slow pull put: $el ms: $(cat "$W/out" "$W/err" | tr '\n' ' ' | head -c 200)"
    [ $el -gt 2500 ] || fail "slow pull put: $el ms, not slower than the 1.5 s timeout"
    grep -q "rdma pull" "$W/out" "$W/err" || fail "slow pull put: not an rdma pull put"
    cli get --raw slowpull "$W/got.bin" >"$W/err" 2>&1 || fail "slow pull put: get: $(cat "$W/err")"
    cmp -s "$W/mid.bin" "$W/got.bin" || fail "slow pull put: bytes differ"
    # The same put with the link cut once it is under way: no read moves,
    # so the client gives up with TIMEOUT about 1.5 s later.
    echo "case rdma tcp pull put, link cut: TIMEOUT within about the timeout"
    before=$(stat_of rdma_xfers_active)
    ns_throttle 16mbit
    cli --timeout 1500 --fabric tcp --rdma-min-bytes 0 put cutpull "$W/mid.bin" --dtype u8 \
        --shape 8000000 >"$W/out" 2>"$W/err" &
    cp=$!
    wait_for rdma_xfers_active $((${before:-0} + 1)) 10 || fail "cut pull put: not seen under way"
    ns_cut
    t0=$(now_ms)
    wait $cp
    expect_failed cut_pull_put $? "$t0" 6
    grep -q TIMEOUT "$W/err" || fail "cut pull put: want TIMEOUT: $(cat "$W/err")"
    ns_restore
    ns_unthrottle
    settle_rdma 60 cut_pull_put 8000000
    in_ls cutpull && fail "cut pull put: a partial put became visible"
else
    echo "note: no rdma tcp plane in the namespace; rdma cases not run"
fi

echo "case throttled with tbf"
ns_throttle 16mbit
t0=$(now_ms)
roundtrip
echo "  1 MB round trip at 16 Mbit/s: $(($(now_ms) - t0)) ms"
# 16 MB at 16 Mbit/s needs 8 s: the server's 6 s transfer deadline ends it.
t0=$(now_ms)
cli --timeout 30000 put slow "$W/big.bin" --dtype u8 --shape 16000000 >"$W/out" 2>"$W/err"
rc=$?
expect_failed throttled_put $rc "$t0" 14
grep -q TIMEOUT "$W/err" || fail "throttled put: want the server's TIMEOUT: $(cat "$W/err")"
ns_unthrottle
settle 20 throttled
in_ls slow && fail "throttled put: partial tensor visible"

echo "case blackholed route mid-get"
ns_throttle 16mbit
before=$(stat_of gets)
cli --timeout 3000 get --raw big "$W/got.bin" >"$W/out" 2>"$W/err" &
cp=$!
wait_for gets $((${before:-0} + 1)) 10 || fail "blackhole: get not seen under way"
ns_blackhole
t0=$(now_ms)
wait $cp
expect_failed blackhole_get $? "$t0" 10
ns_unblackhole
ns_unthrottle
settle 40 blackhole
cli get --raw big "$W/got.bin" >"$W/err" 2>&1 || fail "blackhole: get after: $(cat "$W/err")"
cmp -s "$W/big.bin" "$W/got.bin" || fail "blackhole: bytes differ after the route returned"

echo "case serving after all of it"
roundtrip
[ $RDMA -eq 1 ] && roundtrip --fabric tcp --rdma-min-bytes 0
kill -0 "$SP" 2>/dev/null || fail "server died"

tw_test_end PASS 40
