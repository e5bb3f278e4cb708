#!/bin/bash
# Issue 10's figures in one run: tensorwire bench against the raw transport's
# best (libfabric size x window sweep, streaming and request/response socket
# loops) for 256 MiB and small tensors, 4 KiB ops on 16 connections x 16 in
# flight beside Redis 7 (redis-benchmark -t get,set -d 4096 -c 16 -P 16), and
# iperf3 -l 1M as the cross-check of the streaming loop.
#   bench/transport_best.sh BUILD_DIR
# The 4 KiB rows and Redis alternate, REDIS_REPS times (default 3), so that
# each ratio compares runs of the same minutes (on a shared host a Redis
# run minutes after tensorwire's measured another machine); each rep prints
# its ratios and the last line their medians. Each rep also runs Redis
# with -r 256, the bench's working set (redis-benchmark's command above
# reads one key), and prints those ratios beside.
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
start --rdma-min-bytes 0
for p in tcp shm; do
  for op in get put; do
    tw --rdma-min-bytes 0 bench --fabric $p --op $op --size 256Mi --count 4 --rounds 3
    tw --rdma-min-bytes 0 bench --fabric $p --op $op --size 32Ki --count 20000 --inflight 64 \
      --rounds 3
  done
done
stop
# 4 KiB ops on 16 connections x 16 in flight, beside Redis when present.
small() {
  echo "== tensorwire bench --op $1 --size 4Ki --count 20000 --inflight 16 --connections 16" >&2
  pin "${CLICPU:-}" timeout "$TMO" "$B/tensorwire" -s "$addr" bench --op "$1" --size 4Ki \
    --count 20000 --inflight 16 --connections 16 --rounds 3 --json |
    sed -n 's/.*"ops_per_s":\([0-9.]*\).*/\1/p'
}
start
if command -v redis-server > /dev/null && command -v redis-benchmark > /dev/null; then
  (pin_exec "${SRVCPU:-}" redis-server --port 6390 --save "" --appendonly no > "$out/redis.log" 2>&1) &
  r=$!
  sleep 0.5
  for rep in $(seq "${REDIS_REPS:-3}"); do
    g=$(small get); p=$(small put)
    echo "== redis-benchmark -t get,set -d 4096 -c 16 -P 16 -n 320000"
    pin "${CLICPU:-}" timeout 60 redis-benchmark -p 6390 -t get,set -d 4096 -c 16 -P 16 \
      -n 320000 -q | tr '\r' '\n' | grep "requests per second" > "$out/rb"
    cat "$out/rb"
    rg=$(sed -n 's/^GET: \([0-9.]*\) requests.*/\1/p' "$out/rb")
    rs=$(sed -n 's/^SET: \([0-9.]*\) requests.*/\1/p' "$out/rb")
    # One line per rep: get ratio, put ratio (the medians below read them).
    awk -v g="$g" -v p="$p" -v rg="$rg" -v rs="$rs" 'BEGIN {
      printf "%.3f %.3f\n", (rg > 0 ? g / rg : 0), (rs > 0 ? p / rs : 0) }' >> "$out/ratios"
    read -r gr pr < <(tail -n 1 "$out/ratios")
    printf "4 KiB rep %d: get %.0f ops/s, Redis GET %.0f: %s; put %.0f, Redis SET %.0f: %s\n" \
      "$rep" "${g:-0}" "${rg:-0}" "$gr" "${p:-0}" "${rs:-0}" "$pr"
    # The command above reads and writes one key (redis-benchmark without
    # -r), which stays in the server's L1; tensorwire bench moves 16
    # tensors per connection, 256 in all. The same working set for Redis:
    # -r 256 (printed beside, not in the medians above).
    pin "${CLICPU:-}" timeout 60 redis-benchmark -p 6390 -t get,set -d 4096 -c 16 -P 16 \
      -n 320000 -r 256 -q | tr '\r' '\n' | grep "requests per second" > "$out/rb"
    rg=$(sed -n 's/^GET: \([0-9.]*\) requests.*/\1/p' "$out/rb")
    rs=$(sed -n 's/^SET: \([0-9.]*\) requests.*/\1/p' "$out/rb")
    awk -v g="$g" -v p="$p" -v rg="$rg" -v rs="$rs" -v rep="$rep" 'BEGIN {
      printf "4 KiB rep %d, Redis with -r 256 (256 keys, as the bench): GET %.0f: %.3f; SET %.0f: %.3f\n",
        rep, rg, (rg > 0 ? g / rg : 0), rs, (rs > 0 ? p / rs : 0) }'
  done
  kill $r; wait $r 2>/dev/null
  awk '{ gr[NR] = $1; pr[NR] = $2 }
    function med(a, n,   i, j, t) {
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    END { printf "4 KiB medians of %d reps: get / Redis GET %.3f, put / Redis SET %.3f\n",
      NR, med(gr, NR), med(pr, NR) }' "$out/ratios"
else
  echo "4 KiB get $(small get) ops/s, put $(small put) ops/s (no redis-server / redis-benchmark)"
fi
stop
if command -v iperf3 > /dev/null; then
  echo "== iperf3 -l 1M"
  (pin_exec "${SRVCPU:-}" iperf3 -s -1 -p 5299 > "$out/iperf.log" 2>&1) &
  i=$!
  sleep 0.3
  pin "${CLICPU:-}" timeout 30 iperf3 -c 127.0.0.1 -p 5299 -l 1M -t 4 | grep -E "sender|receiver"
  kill $i 2>/dev/null; wait $i 2>/dev/null
fi
