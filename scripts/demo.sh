#!/bin/sh
# Loopback demo: start tensorwired, put a 64 MiB f32 tensor from a .npy file,
# get it back, check the bytes are identical, show ls/stat/rm, stop the server.
#   scripts/demo.sh BUILD_DIR        (make demo)
# Exits non-zero on any failure.
set -eu
B=${1:?usage: scripts/demo.sh BUILD_DIR}
B=$(cd "$B" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib-server.sh"
TW="$B/tensorwire"
W=$(mktemp -d "${TMPDIR:-/tmp}/tensorwire-demo.XXXXXX")
cleanup() { tw_server_stop || true; rm -rf "$W"; }
trap cleanup EXIT INT TERM

now_ns() { date +%s%N; }
mibs() { # bytes ns -> MiB/s
    awk -v b="$1" -v ns="$2" 'BEGIN { printf "%.0f MiB/s", (ns > 0) ? b / 1048576 / (ns / 1e9) : 0 }'
}

echo "== starting tensorwired on loopback"
tw_server_start "$B" "$W"
echo "   server at $TW_SERVER_ADDR (pid $TW_SERVER_PID)"

echo "== writing a 4096x4096 f32 tensor (64 MiB) as $W/w0.npy"
python3 - "$W/w0.npy" <<'PY'
import struct, sys
rows, cols = 4096, 4096
d = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, cols)
pad = 64 - (10 + len(d) + 1) % 64
hdr = (d + " " * (pad % 64) + "\n").encode("latin1")
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr)
    row = struct.pack("<%df" % cols, *[float(i) * 0.5 for i in range(cols)])
    for r in range(rows):
        f.write(row[r % 64 * 4:] + row[:r % 64 * 4])
PY
BYTES=$((4096 * 4096 * 4))

echo "== tensorwire put demo/w0 w0.npy"
t0=$(now_ns)
"$TW" -s "$TW_SERVER_ADDR" put demo/w0 "$W/w0.npy"
t1=$(now_ns)
echo "   put: $(mibs $BYTES $((t1 - t0))) (whole CLI run: exec, connect, mmap, transfer)"

echo "== tensorwire get demo/w0 back.npy"
t0=$(now_ns)
"$TW" -s "$TW_SERVER_ADDR" get demo/w0 "$W/back.npy"
t1=$(now_ns)
echo "   get: $(mibs $BYTES $((t1 - t0))) (whole CLI run)"

echo "== cmp w0.npy back.npy"
cmp "$W/w0.npy" "$W/back.npy"
echo "   identical ($(wc -c <"$W/back.npy") bytes)"

echo "== tensorwire ls demo/"
"$TW" -s "$TW_SERVER_ADDR" ls demo/
echo "== tensorwire stat demo/w0"
"$TW" -s "$TW_SERVER_ADDR" stat demo/w0
echo "== tensorwire bench --op get --size 64Mi --count 16 (library throughput, vs a raw socket loop)"
"$TW" -s "$TW_SERVER_ADDR" bench --op get --size 64Mi --count 16 --inflight 4
echo "== tensorwire rm demo/w0"
"$TW" -s "$TW_SERVER_ADDR" rm demo/w0
if "$TW" -s "$TW_SERVER_ADDR" stat demo/w0 2>"$W/err"; then
    echo "demo: demo/w0 still exists after rm" >&2
    exit 1
fi
echo "   after rm: $(cat "$W/err")"

echo "== stopping the server"
tw_server_stop
echo "demo: OK"
