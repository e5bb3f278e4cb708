#!/bin/bash
# Size sweep of inline TCP against RDMA pull through one tensorwired, for
# choosing and checking --rdma-min-bytes (docs/performance.md, "RDMA size
# threshold"). Usage:
#
#   bench/rdma_threshold.sh BUILD_DIR [REPS] > sweep.txt
#
# Environment: TW_SERVER_ARGS (extra tensorwired options, e.g.
# "--rdma-min-bytes 0" for RDMA at every size), TW_CLIENT_ARGS (extra global
# tensorwire options), TW_SIZES ("4Ki:2000 64Ki:1000 ..." size:count pairs),
# TW_PLANES ("none tcp shm"), TW_INFLIGHT (16), TW_SERVER_CPUS and
# TW_CLIENT_CPUS (taskset CPU lists; on a 2-vCPU VM where the scheduler puts
# client and server decides small-request latency by 2x, see
# docs/performance.md).
# One line per bench: "rep op size plane data_plane MB/s p50_us", where
# plane is the client's --fabric and data_plane what moved the bytes.
# Within one rep the planes run back to back for each size, so the ratio to
# "none" (inline) is taken under the same load.
set -u
build=${1:?usage: rdma_threshold.sh BUILD_DIR [REPS]}
reps=${2:-3}
sizes=${TW_SIZES:-"4Ki:2000 64Ki:1000 256Ki:256 1Mi:64 4Mi:32 16Mi:8"}
planes=${TW_PLANES:-"none tcp shm"}
inflight=${TW_INFLIGHT:-16}
tmp=$(mktemp -d)
# shellcheck disable=SC2086
${TW_SERVER_CPUS:+taskset -c $TW_SERVER_CPUS} "$build/tensorwired" --listen 127.0.0.1:0 --fabric shm,tcp --log-level warn ${TW_SERVER_ARGS:-} \
    > "$tmp/srv.out" 2> "$tmp/srv.err" &
srv=$!
for _ in $(seq 50); do grep -q listening "$tmp/srv.out" && break; sleep 0.1; done
addr=$(sed -n 's/^listening on //p' "$tmp/srv.out")
if [ -z "$addr" ]; then
    cat "$tmp/srv.err" >&2
    kill $srv 2> /dev/null
    exit 1
fi
for rep in $(seq "$reps"); do
    for op in get put; do
        for sz in $sizes; do
            s=${sz%%:*}
            n=${sz##*:}
            for p in $planes; do
                # shellcheck disable=SC2086
                out=$(timeout 120 ${TW_CLIENT_CPUS:+taskset -c $TW_CLIENT_CPUS} "$build/tensorwire" -s "$addr" --push never ${TW_CLIENT_ARGS:-} \
                    bench --fabric "$p" --op "$op" --size "$s" --count "$n" \
                    --inflight "$inflight" --rounds 3 --json) || { echo "bench failed: $op $s $p" >&2; continue; }
                echo "$out" | jq -r --arg rep "$rep" --arg p "$p" --arg s "$s" \
                    '"\($rep) \(.op) \($s) \($p) \(.data_plane|gsub(" ";"_")) \(.bytes_per_s/1e6|floor) \(.p50_us)"'
            done
        done
    done
done
kill $srv
wait $srv 2> /dev/null
rm -rf "$tmp"
