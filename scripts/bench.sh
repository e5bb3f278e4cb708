#!/bin/sh
# Client benchmark (make bench): starts tensorwired on loopback and runs
#   tensorwire bench --op {get,put} --size {256Mi,4Ki} --inflight 16 --json
# REPS times each (default 5), then prints the medians of throughput, ops/s,
# p50/p99 latency and the ratio against the raw socket loop measured in the
# same run. Raw JSON lines go to BUILD_DIR/bench-client.jsonl.
#   scripts/bench.sh BUILD_DIR [REPS]
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

python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
groups = {}
for r in rows:
    groups.setdefault((r["op"], r["size"]), []).append(r)
med = lambda g, k: statistics.median(x[k] for x in g)
print()
print("%-4s %10s %5s %12s %12s %7s %11s %11s %9s %9s" % (
    "op", "size", "reps", "MiB/s", "raw MiB/s", "ratio", "ops/s", "raw ops/s", "p50 us", "p99 us"))
for (op, size), g in groups.items():
    print("%-4s %10d %5d %12.1f %12.1f %7.3f %11.0f %11.0f %9.1f %9.1f" % (
        op, size, len(g), med(g, "bytes_per_s") / 2**20, med(g, "baseline_bytes_per_s") / 2**20,
        med(g, "ratio"), med(g, "ops_per_s"), med(g, "baseline_ops_per_s"),
        med(g, "p50_us"), med(g, "p99_us")))
print()
print("targets: 256 MiB get/put ratio >= 0.9; 4 KiB get ops/s >= raw ops/s (ratio >= 1.0)")
PY
