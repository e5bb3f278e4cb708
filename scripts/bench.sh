#!/bin/sh
# Client benchmark (make bench): starts tensorwired on loopback and runs
#   tensorwire bench --op {get,put} --size {256Mi,4Ki} --inflight 16 --json
# REPS times each (default 5), then prints the medians of throughput, ops/s,
# p50/p99 latency and the ratio against the raw socket loop measured in the
# same run. Then, for each libfabric provider that works here (tcp, shm), the
# RDMA set against a server started with --push always:
#   tensorwire -s ADDR --push {never,always} bench --fabric PROV --op {get,put}
#       --size {256Mi,1Mi,4Ki} --inflight 16 --json
# (--push never: pull, always: push), whose ratio is against the raw
# libfabric loop of the same run (raw socket figures are printed too).
# The RDMA set measures the RDMA plane itself at every size, so server and
# client run with --rdma-min-bytes 0 (by default tensors below 1 MiB move
# inline; bench/rdma_threshold.sh measures that choice).
# Raw JSON lines go to BUILD_DIR/bench-client.jsonl.
#   scripts/bench.sh BUILD_DIR [REPS]
# TW_BENCH_FABRIC="tcp shm" (default) picks the providers, "" skips RDMA.
set -eu
B=${1:?usage: scripts/bench.sh BUILD_DIR [REPS]}
REPS=${2:-5}
B=$(cd "$B" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib-server.sh"
W=$(mktemp -d "${TMPDIR:-/tmp}/tensorwire-bench.XXXXXX")
cleanup() { tw_server_stop || :; rm -rf "$W"; }
trap cleanup EXIT INT TERM
OUT="$B/bench-client.jsonl"
: >"$OUT"

tw_server_start "$B" "$W"
echo "tensorwired at $TW_SERVER_ADDR; $REPS repetitions each; $(nproc) CPUs"
for op in get put; do
    for size in 256Mi 4Ki; do
        if [ "$size" = 256Mi ]; then count=8; else count=50000; fi
        cmd="tensorwire -s $TW_SERVER_ADDR bench --op $op --size $size --count $count --inflight 16 --json"
        echo "  $cmd  (x$REPS)"
        i=0
        while [ $i -lt "$REPS" ]; do
            "$B/tensorwire" -s "$TW_SERVER_ADDR" bench --op "$op" --size "$size" --count "$count" \
                --inflight 16 --json >>"$OUT"
            i=$((i + 1))
        done
    done
done
tw_server_stop

# RDMA set: a provider is used when a one-request probe reports an rdma plane.
tw_server_start "$B" "$W" --push always --rdma-min-bytes 0
for prov in ${TW_BENCH_FABRIC-tcp shm}; do
    probe=$("$B/tensorwire" -s "$TW_SERVER_ADDR" --rdma-min-bytes 0 bench --fabric "$prov" --size 4Ki --count 16 \
        --rounds 1 --json 2>/dev/null || :)
    case "$probe" in
    *'"data_plane":"rdma '*) ;;
    *)
        echo "  provider $prov: no RDMA data plane here, skipped"
        continue
        ;;
    esac
    for push in never always; do
        for op in get put; do
            for size in 256Mi 1Mi 4Ki; do
                case $size in 256Mi) count=8 ;; 1Mi) count=1000 ;; *) count=50000 ;; esac
                echo "  tensorwire -s $TW_SERVER_ADDR --push $push --rdma-min-bytes 0 bench --fabric $prov --op $op --size $size --count $count --inflight 16 --json  (x$REPS)"
                i=0
                while [ $i -lt "$REPS" ]; do
                    "$B/tensorwire" -s "$TW_SERVER_ADDR" --push "$push" --rdma-min-bytes 0 bench --fabric "$prov" \
                        --op "$op" --size "$size" --count "$count" --inflight 16 --json >>"$OUT"
                    i=$((i + 1))
                done
            done
        done
    done
done
tw_server_stop

python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
groups = {}
for r in rows:
    groups.setdefault((r.get("data_plane", "inline tcp"), r["op"], r["size"]), []).append(r)
med = lambda g, k: statistics.median(x.get(k, 0) for x in g)
print()
print("ratio: against the raw socket loop (inline) or the raw libfabric loop (rdma);")
print("sock: tensorwire against the raw socket loop of the same run")
print("%-24s %-4s %10s %4s %10s %10s %6s %10s %6s %9s %9s" % (
    "data plane", "op", "size", "reps", "MiB/s", "base MiB/s", "ratio", "sock MiB/s", "sock",
    "p50 us", "p99 us"))
for (dp, op, size), g in groups.items():
    print("%-24s %-4s %10d %4d %10.1f %10.1f %6.3f %10.1f %6.3f %9.1f %9.1f" % (
        dp, op, size, len(g), med(g, "bytes_per_s") / 2**20, med(g, "baseline_bytes_per_s") / 2**20,
        med(g, "ratio"), med(g, "raw_socket_bytes_per_s") / 2**20, med(g, "raw_socket_ratio"),
        med(g, "p50_us"), med(g, "p99_us")))
print()
print("targets: 256 MiB get/put ratio >= 0.9 (inline and rdma); 4 KiB get ops/s >= raw ops/s")
PY
