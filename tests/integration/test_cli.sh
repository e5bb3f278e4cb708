#!/bin/sh
# The tensorwire CLI against a real tensorwired: .npy and raw put/get round
# trips, bf16 as '|V2', ls/stat/rm output, exit statuses (0 ok, 1 failed with
# "tensorwire: CMD NAME: CODE: message", 2 usage), npy rejections, auth with a
# token file, capacity, and bench --json fields.
# Needs TW_BUILD_DIR and TW_SOURCE_DIR (set by CTest). Exit 77 = skip.
set -u
B=${TW_BUILD_DIR:?}
S=${TW_SOURCE_DIR:?}
. "$S/scripts/lib-server.sh"
TW="$B/tensorwire"
[ -x "$B/tensorwired" ] || { echo "SKIP: tensorwired not built"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 missing"; exit 77; }
W=$(mktemp -d "${TMPDIR:-/tmp}/tw-cli-test.XXXXXX")
cleanup() { tw_server_stop >/dev/null 2>&1; rm -rf "$W"; }
trap cleanup EXIT INT TERM
FAILS=0
fail() {
    echo "FAIL: $*" >&2
    FAILS=$((FAILS + 1))
    echo "--- server log ($W/server.log):" >&2
    tail -n 20 "$W/server.log" >&2
    echo "---" >&2
}
# expect STATUS CMD...: runs CMD, stdout/stderr to $W/out, $W/err
expect() {
    want=$1
    shift
    "$@" >"$W/out" 2>"$W/err"
    got=$?
    if [ "$got" -ne "$want" ]; then
        fail "'$*' exited $got, want $want; stderr: $(cat "$W/err")"
        return 1
    fi
    return 0
}
grep_err() { grep -q -- "$1" "$W/err" || fail "stderr lacks '$1': $(cat "$W/err")"; }
grep_out() { grep -q -- "$1" "$W/out" || fail "stdout lacks '$1': $(cat "$W/out")"; }

# mknpy FILE DESCR SHAPE_TUPLE NBYTES [fortran]: a .npy written the way NumPy does.
mknpy() {
    python3 - "$@" <<'PY'
import struct, sys
path, descr, shape, nbytes = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
fortran = "True" if len(sys.argv) > 5 else "False"
d = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape)
pad = (64 - (10 + len(d) + 1) % 64) % 64
h = (d + " " * pad + "\n").encode("latin1")
with open(path, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h)
    f.write(bytes((i * 7 + 3) % 256 for i in range(nbytes)))
PY
}

tw_server_start "$B" "$W" || exit 1
A="-s $TW_SERVER_ADDR"

echo "case help and usage"
expect 0 "$TW" --help && grep_out "Commands:"
expect 0 "$TW" put --help && grep_out "usage: tensorwire put"
expect 0 "$TW" bench --help && grep_out "raw TCP loopback"
expect 2 "$TW"
expect 2 "$TW" frobnicate
expect 2 "$TW" $A get onlyname
expect 2 "$TW" $A bench --size 12Q
expect 2 "$TW" --bogus ls

echo "case npy round trip, every numpy dtype"
for dt in '<f8:8' '<f4:4' '<f2:2' '|i1:1' '<i2:2' '<i4:4' '<i8:8' '|u1:1' '<u2:2' '<u4:4' '<u8:8' '|b1:1'; do
    descr=${dt%:*}
    size=${dt#*:}
    mknpy "$W/a.npy" "$descr" "(3, 4)" $((12 * size))
    expect 0 "$TW" $A put "cli/$descr" "$W/a.npy" || continue
    expect 0 "$TW" $A get "cli/$descr" "$W/b.npy" || continue
    cmp -s "$W/a.npy" "$W/b.npy" || fail "$descr: get wrote different bytes"
done
mknpy "$W/s.npy" '<f8' "()" 8
expect 0 "$TW" $A put cli/scalar "$W/s.npy"
expect 0 "$TW" $A get cli/scalar "$W/s2.npy" && { cmp -s "$W/s.npy" "$W/s2.npy" || fail "scalar differs"; }
mknpy "$W/e.npy" '<f4' "(0,)" 0
expect 0 "$TW" $A put cli/empty "$W/e.npy"
expect 0 "$TW" $A get cli/empty "$W/e2.npy" && { cmp -s "$W/e.npy" "$W/e2.npy" || fail "empty differs"; }

echo "case raw put, bf16 written as |V2 and put back"
python3 -c "import sys; sys.stdout.buffer.write(bytes(range(48)))" >"$W/raw.bin"
expect 0 "$TW" $A put cli/bf "$W/raw.bin" --dtype bf16 --shape 2,3,4
expect 0 "$TW" $A get cli/bf "$W/bf.npy" && grep_err "no NumPy dtype"
grep -q "'descr': '|V2'" "$W/bf.npy" || fail "bf16 .npy lacks |V2 descr"
expect 1 "$TW" $A put cli/bf2 "$W/bf.npy" && grep_err "pass --dtype bf16"
expect 0 "$TW" $A put cli/bf2 "$W/bf.npy" --dtype bf16
expect 0 "$TW" $A get cli/bf2 "$W/bf2.raw" --raw && { cmp -s "$W/raw.bin" "$W/bf2.raw" || fail "bf16 raw differs"; }
expect 0 "$TW" $A stat cli/bf2 && grep_out "dtype:  bf16" && grep_out "(2,3,4)"
expect 1 "$TW" $A put cli/bad "$W/raw.bin" --dtype f32 --shape 5 && grep_err "needs 20"
expect 2 "$TW" $A put cli/bad "$W/raw.bin"
expect 2 "$TW" $A put cli/bad "$W/raw.bin" --dtype f99 --shape 2

echo "case npy rejections"
mknpy "$W/f.npy" '<f4' "(2, 2)" 16 fortran
expect 1 "$TW" $A put cli/f "$W/f.npy" && grep_err "Fortran"
mknpy "$W/c.npy" '<c8' "(2,)" 16
expect 1 "$TW" $A put cli/c "$W/c.npy" && grep_err "unsupported dtype '<c8'"
mknpy "$W/be.npy" '>i4' "(2,)" 8
expect 1 "$TW" $A put cli/be "$W/be.npy" && grep_err "big-endian"
mknpy "$W/short.npy" '<f4' "(100,)" 10
expect 1 "$TW" $A put cli/short "$W/short.npy" && grep_err "header says 400"

echo "case ls, stat, rm, errors"
expect 0 "$TW" $A ls cli/ && grep_out "cli/scalar" && grep_out "cli/<f4 *f32 *(3,4)"
n=$(wc -l <"$W/out")
[ "$n" -eq 16 ] || fail "ls cli/ printed $n lines, want 16"
expect 0 "$TW" $A stat cli/scalar && grep_out "shape:  ()"
expect 0 "$TW" $A rm cli/scalar
expect 1 "$TW" $A get cli/scalar "$W/x.npy" && grep_err "^tensorwire: get cli/scalar: NOT_FOUND: ."
echo "   $(cat "$W/err")"
expect 1 "$TW" $A stat cli/scalar && grep_err "NOT_FOUND"
expect 1 "$TW" $A rm cli/scalar && grep_err "^tensorwire: rm cli/scalar: NOT_FOUND"
expect 0 "$TW" $A ping
expect 0 "$TW" $A stats
TENSORWIRE_SERVER=$TW_SERVER_ADDR expect 0 "$TW" ls cli/
expect 1 "$TW" -s 127.0.0.1:1 ls && grep_err "connect 127.0.0.1:1: ECONNREFUSED"

echo "case rdma data plane, get/put -v"
# 1.2 MB: above the default rdma threshold (1 MiB) of both sides.
mknpy "$W/r.npy" '<f4' "(300000,)" 1200000
mknpy "$W/small.npy" '<f4' "(1000,)" 4000
if grep -q "rails: .*tcp;ofi_rxm" "$W/server.log"; then
    expect 0 "$TW" $A --fabric tcp put cli/r "$W/r.npy" -v &&
        grep_out "data plane: rdma pull (provider tcp;ofi_rxm)"
    expect 0 "$TW" $A --fabric tcp --push always get cli/r "$W/r2.npy" -v &&
        grep_out "data plane: rdma push (provider tcp;ofi_rxm)"
    cmp -s "$W/r.npy" "$W/r2.npy" || fail "rdma put/get round trip differs"
    echo "case rdma threshold: small tensors inline, with the reason"
    expect 0 "$TW" $A --fabric tcp put cli/small "$W/small.npy" -v &&
        grep_out "data plane: inline tcp (below the rdma threshold)"
    expect 0 "$TW" $A --fabric tcp get cli/small "$W/small2.npy" -v &&
        grep_out "data plane: inline tcp (the server chose inline)"
    cmp -s "$W/small.npy" "$W/small2.npy" || fail "inline put/get round trip differs"
    expect 0 "$TW" $A --fabric tcp --rdma-min-bytes 0 put cli/small "$W/small.npy" -v &&
        grep_out "data plane: inline tcp (the server chose inline)"
    expect 0 "$TW" $A --fabric tcp --rdma-min-bytes=1Ki put cli/r "$W/r.npy" -v &&
        grep_out "data plane: rdma pull (provider tcp;ofi_rxm)"
    expect 2 "$TW" $A --rdma-min-bytes lots ls
    expect 2 "$TW" $A --rdma-min-bytes
else
    echo "   (no tcp rail in this server: rdma part skipped)"
    expect 0 "$TW" $A put cli/r "$W/r.npy"
fi
expect 0 "$TW" $A get cli/r "$W/r3.npy" -v && grep_out "data plane: inline tcp (rdma not requested"
cmp -s "$W/r.npy" "$W/r3.npy" || fail "inline get after rdma put differs"
expect 2 "$TW" $A --push sometimes ls

echo "case bench --json"
expect 0 "$TW" $A bench --op get --size 4Ki --count 2000 --inflight 16 --json &&
    python3 -c "
import json, sys
o = json.load(open(sys.argv[1]))
for k in ('op', 'size', 'count', 'inflight', 'bytes_per_s', 'baseline_bytes_per_s', 'ratio', 'p50_us', 'p99_us', 'data_plane'):
    assert k in o, k
assert o['op'] == 'get' and o['size'] == 4096 and o['count'] == 2000 and o['inflight'] == 16
assert o['bytes_per_s'] > 0 and o['baseline_bytes_per_s'] > 0 and o['data_plane'] == 'inline tcp'
" "$W/out" || fail "bench --json output: $(cat "$W/out")"
expect 0 "$TW" $A bench --op put --size 1Mi --count 20 --inflight 4 && grep_out "raw socket"
if grep -q "rails: .*tcp;ofi_rxm" "$W/server.log"; then
    echo "case bench --fabric tcp (raw libfabric baseline)"
    for push in never always; do
        case $push in never) dp="rdma pull" fi=fi_read ;; *) dp="rdma push" fi=fi_write ;; esac
        expect 0 "$TW" $A --push $push bench --fabric tcp --op get --size 1Mi --count 16 \
            --inflight 4 --rounds 1 --json &&
            python3 -c "
import json, sys
o = json.load(open(sys.argv[1]))
assert o['data_plane'] == sys.argv[2] + ' (tcp;ofi_rxm)', o['data_plane']
assert o['provider'] == 'tcp;ofi_rxm' and o['baseline'] == 'raw libfabric %s (tcp;ofi_rxm)' % sys.argv[3]
assert o['bytes_per_s'] > 0 and o['baseline_bytes_per_s'] > 0 and o['raw_socket_bytes_per_s'] > 0
assert o['baseline_bytes_per_s'] != o['raw_socket_bytes_per_s']
assert o['rdma_min_bytes'] == 1048576 and o['server_rdma_min_bytes'] == 1048576, o
" "$W/out" "$dp" "$fi" || fail "bench --fabric tcp --json output: $(cat "$W/out")"
    done
    expect 0 "$TW" $A bench --fabric tcp --op put --size 1Mi --count 16 --inflight 4 --rounds 1 &&
        grep_out "data plane: rdma pull (tcp;ofi_rxm)" && grep_out "raw libfabric" &&
        grep_out "raw socket" && grep_out "rdma threshold: puts from 1048576 B (client)"
    # Below the threshold the bench's transfers are inline and say so.
    expect 0 "$TW" $A --rdma-min-bytes 0 bench --fabric tcp --op put --size 64Ki --count 20 \
        --inflight 4 --rounds 1 --json &&
        python3 -c "
import json, sys
o = json.load(open(sys.argv[1]))
assert o['data_plane'] == 'inline tcp (the server chose inline)', o['data_plane']
assert o['rdma_min_bytes'] == 0 and o['baseline'] == 'raw socket', o
" "$W/out" || fail "bench below the threshold --json output: $(cat "$W/out")"
    expect 0 "$TW" $A bench --fabric tcp --rdma-min-bytes 32Ki --op put --size 16Ki --count 20 \
        --inflight 4 --rounds 1 && grep_out "data plane: inline tcp (below the rdma threshold)"
    expect 2 "$TW" $A bench --rdma-min-bytes 12Q
fi
expect 0 "$TW" $A bench --fabric none --op get --size 4Ki --count 20 --rounds 1 &&
    grep_out "data plane: inline tcp" && grep_out "fabric: inline: rdma not requested"
expect 0 "$TW" $A ls bench/ && [ ! -s "$W/out" ] || fail "bench left tensors behind"
tw_server_stop

echo "case auth with a token file"
printf 'cli-secret\n' >"$W/token"
printf 'wrong' >"$W/wrong"
tw_server_start "$B" "$W" --token-file "$W/token" || exit 1
A="-s $TW_SERVER_ADDR"
expect 1 "$TW" $A ls && grep_err "UNAUTHORIZED"
expect 1 "$TW" $A --token-file "$W/wrong" ls && grep_err "UNAUTHORIZED"
expect 0 "$TW" $A --token-file "$W/token" put cli/a "$W/a.npy"
expect 0 "$TW" $A --token-file "$W/token" ls && grep_out "cli/a"
tw_server_stop

echo "case capacity"
tw_server_start "$B" "$W" --capacity 64Ki || exit 1
A="-s $TW_SERVER_ADDR"
mknpy "$W/big.npy" '|u1' "(100000,)" 100000
expect 1 "$TW" $A put cli/big "$W/big.npy" && grep_err "CAPACITY_EXCEEDED"
tw_server_stop

echo "case --gpudirect (issue 12)"
expect 2 "$B/tensorwired" --gpudirect sometimes
expect 2 "$B/tensorwired" --gpudirect-max-distance FAR
expect 1 "$B/tensorwired" --listen 127.0.0.1:0 --devices cpu --gpudirect require &&
    grep_err "gpudirect require: no GPU is served"
tw_server_start "$B" "$W" || exit 1
A="-s $TW_SERVER_ADDR"
expect 2 "$TW" $A --gpudirect sometimes ls
expect 2 "$TW" $A --gpudirect-max-distance FAR ls
expect 0 "$TW" $A --fabric tcp --gpudirect off --gpudirect-max-distance sys ls
# No GPU here, or none admitted on tcp (a socket provider): refused at
# connect, naming why.
expect 1 "$TW" $A --fabric tcp --gpudirect require ls && grep_err "gpudirect require: "
tw_server_stop

if [ "$FAILS" -ne 0 ]; then
    echo "$FAILS failure(s)" >&2
    exit 1
fi
echo "all CLI cases passed"
