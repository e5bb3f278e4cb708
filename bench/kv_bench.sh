#!/bin/bash
# KV-cache and weight-sync workloads (bench/bench_kv.c) on every plane, each
# against one tensor of the same bytes on the same path (docs/performance.md,
# "KV-cache batches"). Usage: bench/kv_bench.sh BUILD_DIR [SCALE] [ROUNDS]
#   SCALE 1 is the full workload (1.34 GB KV, 13.5 GB weights): use 0.1 on a
#   small machine. Needs BUILD_DIR/tensorwired and BUILD_DIR/bench/bench_kv.
# "RDMA at every size" needs the server's threshold at 0 too (the server
# decides gets), so those runs use a second server started with
# --rdma-min-bytes 0; the others use the default threshold (1 MiB).
set -eu
B=${1:-build}
SCALE=${2:-1}
ROUNDS=${3:-3}
out=$(mktemp -d)
srv=
stop() { [ -z "$srv" ] || { kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null || true; }; srv=; }
trap 'stop; rm -rf "$out"' EXIT
start() {
  stop
  "$B/tensorwired" --listen 127.0.0.1:0 --fabric tcp,shm --log-level warn "$@" \
    > "$out/srv.out" 2> "$out/srv.err" &
  srv=$!
  for _ in $(seq 100); do grep -q listening "$out/srv.out" && break; sleep 0.1; done
  addr=$(sed -n 's/^listening on //p' "$out/srv.out")
  [ -n "$addr" ] || { cat "$out/srv.err"; exit 1; }
}
run() { echo "== $*"; "$B/bench/bench_kv" "$addr" --scale "$SCALE" --rounds "$ROUNDS" "$@"; }
for w in kv weights; do
  start
  run --workload $w --fabric none
  run --workload $w --fabric tcp
  start --rdma-min-bytes 0
  run --workload $w --fabric tcp --rdma-min-bytes 0
  run --workload $w --fabric shm --rdma-min-bytes 0
done
