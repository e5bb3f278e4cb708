#!/bin/bash
# KV-cache and weight-sync workloads (bench/bench_kv.c) on every plane, each
# against one tensor of the same bytes on the same path (docs/performance.md,
# "KV-cache batches"). Usage: bench/kv_bench.sh BUILD_DIR [SCALE] [ROUNDS]
#   SCALE 1 is the full workload (1.34 GB KV, 13.5 GB weights): use 0.1 on a
#   small machine. Needs BUILD_DIR/tensorwired and BUILD_DIR/bench/bench_kv.
set -eu
B=${1:-build}
SCALE=${2:-1}
ROUNDS=${3:-3}
out=$(mktemp -d)
trap 'kill $srv 2>/dev/null; wait $srv 2>/dev/null; rm -rf "$out"' EXIT
"$B/tensorwired" --listen 127.0.0.1:0 --log-level warn > "$out/srv.out" 2> "$out/srv.err" &
srv=$!
for _ in $(seq 100); do grep -q listening "$out/srv.out" && break; sleep 0.1; done
addr=$(sed -n 's/^listening on //p' "$out/srv.out")
[ -n "$addr" ] || { cat "$out/srv.err"; exit 1; }
run() { echo "== $*"; "$B/bench/bench_kv" "$addr" --scale "$SCALE" --rounds "$ROUNDS" "$@"; }
for w in kv weights; do
  run --workload $w --fabric none
  run --workload $w --fabric tcp
  run --workload $w --fabric tcp --rdma-min-bytes 0
  run --workload $w --fabric shm --rdma-min-bytes 0
done
