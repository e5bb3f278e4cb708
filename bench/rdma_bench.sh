#!/bin/bash
# Runs the RDMA bench set of docs/performance.md ("On the quiet 16-core host")
# with tensorwired and tensorwire from the folder of this script:
#   cp build/tensorwired build/tensorwire DIR/ && cp bench/rdma_bench.sh DIR/ && DIR/rdma_bench.sh
# RDMA at every size (--rdma-min-bytes 0 on both sides): this set compares
# the planes themselves; bench/rdma_threshold.sh measures the default.
cd "$(dirname "$0")"
./tensorwired --listen 127.0.0.1:0 --push always --rdma-min-bytes 0 > srv.out 2> srv.err &
srv=$!
for i in $(seq 50); do grep -q listening srv.out && break; sleep 0.1; done
addr=$(sed -n 's/^listening on //p' srv.out)
for p in tcp shm; do
  for push in never always; do
    for op in get put; do
      echo "== $p push=$push $op 256Mi"
      timeout 120 ./tensorwire -s $addr --push $push --rdma-min-bytes 0 bench --fabric $p --op $op --size 256Mi --count 4 --inflight 16 --rounds 5 --json
    done
  done
done
for sz in 4Ki:5000 1Mi:500 256Mi:4; do
  s=${sz%%:*}; n=${sz##*:}
  for p in none tcp shm; do
    echo "== get $s fabric=$p"
    timeout 120 ./tensorwire -s $addr --push never --rdma-min-bytes 0 bench --fabric $p --op get --size $s --count $n --inflight 16 --rounds 5 --json
  done
done
kill $srv; wait $srv
