#!/bin/bash
# Issue 10's figures in one run: tensorwire bench against the raw transport's
# best (libfabric size x window sweep, streaming and request/response socket
# loops) for 256 MiB and small tensors, 4 KiB ops on 16 connections x 16 in
# flight beside Redis 7 (redis-benchmark -t get,set -d 4096 -c 16 -P 16), and
# iperf3 -l 1M as the cross-check of the streaming loop.
#   bench/transport_best.sh BUILD_DIR
# redis-server, redis-benchmark and iperf3 are taken from PATH when present
# (Debian: redis-server, redis-tools, iperf3; bench only, not dependencies).
# SRVCPU / CLICPU (taskset lists, default none) pin the server and clients
# to separate cores, as in docs/performance.md. Both ends of the raw socket
# and libfabric loops run inside the tensorwire process, so CLICPU confines
# them to the client's cores: on the 2-core VM leave both unset.
set -u
B=${1:-build}
out=$(mktemp -d)
srv=
pin() { local cpus=$1; shift; if [ -n "$cpus" ]; then taskset -c "$cpus" "$@"; else "$@"; fi; }
# For a process started with &: exec, so that $! is the process itself and
# stop() ends it (a function run with & is a subshell that forks it, and
# killing the subshell left the server running beside the next one).
pin_exec() { local cpus=$1; shift; if [ -n "$cpus" ]; then exec taskset -c "$cpus" "$@"; else exec "$@"; fi; }
# Each tensorwire command's limit (seconds): its raw libfabric sweep alone
# took more than 120 s for 256 MiB over tcp on a slow hour of the 2-core VM.
TMO=${TMO:-600}
stop() { [ -z "$srv" ] || { kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null; }; srv=; }
trap 'stop; rm -rf "$out"' EXIT
start() {
  stop
  (pin_exec "${SRVCPU:-}" "$B/tensorwired" --listen 127.0.0.1:0 --fabric tcp,shm --log-level warn \
    "$@" > "$out/srv.out" 2> "$out/srv.err") &
  srv=$!
  for _ in $(seq 100); do grep -q listening "$out/srv.out" && break; sleep 0.1; done
  addr=$(sed -n 's/^listening on //p' "$out/srv.out")
  [ -n "$addr" ] || { cat "$out/srv.err"; exit 1; }
}
tw() { echo "== tensorwire $*"; pin "${CLICPU:-}" timeout "$TMO" "$B/tensorwire" -s "$addr" "$@"; }
start
for op in get put; do tw bench --op $op --size 256Mi --count 4 --rounds 3; done
for op in get put; do
  tw bench --op $op --size 4Ki --count 20000 --inflight 16 --connections 16 --rounds 3
done
start --rdma-min-bytes 0
for p in tcp shm; do
  for op in get put; do
    tw --rdma-min-bytes 0 bench --fabric $p --op $op --size 256Mi --count 4 --rounds 3
    tw --rdma-min-bytes 0 bench --fabric $p --op $op --size 32Ki --count 20000 --inflight 64 \
      --rounds 3
  done
done
stop
if command -v redis-server > /dev/null && command -v redis-benchmark > /dev/null; then
  echo "== redis-benchmark -t get,set -d 4096 -c 16 -P 16"
  (pin_exec "${SRVCPU:-}" redis-server --port 6390 --save "" --appendonly no > "$out/redis.log" 2>&1) &
  r=$!
  sleep 0.5
  pin "${CLICPU:-}" timeout 60 redis-benchmark -p 6390 -t get,set -d 4096 -c 16 -P 16 \
    -n 320000 -q | tr '\r' '\n' | grep "requests per second"
  kill $r; wait $r 2>/dev/null
fi
if command -v iperf3 > /dev/null; then
  echo "== iperf3 -l 1M"
  (pin_exec "${SRVCPU:-}" iperf3 -s -1 -p 5299 > "$out/iperf.log" 2>&1) &
  i=$!
  sleep 0.3
  pin "${CLICPU:-}" timeout 30 iperf3 -c 127.0.0.1 -p 5299 -l 1M -t 4 | grep -E "sender|receiver"
  kill $i 2>/dev/null; wait $i 2>/dev/null
fi
