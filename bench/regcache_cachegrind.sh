#!/bin/sh
# Instructions, cache misses and mispredicted branches per registration
# cache hit and per release, from cachegrind's simulation (so the figures
# do not depend on this machine's caches). Runs the bench twice, with 51
# and 151 batches: setup, fill and the fabric part cancel in the
# difference, which is divided by the 200,000 extra lookups (and releases).
# The mutex counts are split evenly between the two sides.
#
#   bench/regcache_cachegrind.sh [BENCH [LL_BYTES]]
#     BENCH     default ./build/bench/bench_regcache
#     LL_BYTES  simulated last-level cache, default 1048576 (D1: 32 KiB)
set -e
bin=${1:-./build/bench/bench_regcache}
ll=${2:-1048576}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for b in 51 151; do
    valgrind --tool=cachegrind --cache-sim=yes --branch-sim=yes --D1=32768,8,64 \
        --LL="$ll",16,64 --cachegrind-out-file="$tmp/$b.out" \
        "$bin" --batches "$b" --transfers 3 >/dev/null 2>"$tmp/$b.err"
done
awk -v ll="$ll" '
FNR == 1 { file++ }
/^events:/ { for (i = 2; i <= NF; i++) ev[i - 1] = $i; nev = NF - 1 }
/^fn=/ {
    fn = substr($0, 4)
    if (fn ~ /mutex/) side = "lock"
    else if (fn ~ /regcache_lookup|count_le|lookup_slow/) side = "lookup"
    else if (fn ~ /regcache_release|evict_over_limits|log_compact|lru_release|memmove|memcpy/) side = "release"
    else side = "other"
}
/^[0-9]/ { for (i = 2; i <= NF; i++) tot[side, i - 1] += (file == 1 ? -$i : $i) }
END {
    ops = 100 * 2000
    printf "cachegrind: D1 32 KiB, LL %d bytes; per operation\n", ll
    split("lookup release", sides, " ")
    for (s = 1; s <= 2; s++) {
        line = sprintf("%-8s", sides[s])
        for (i = 1; i <= nev; i++) {
            e = ev[i]
            if (e ~ /^(I1mr|ILmr|Bc|Bi|Bim)$/) continue
            v = (tot[sides[s], i] + tot["lock", i] / 2) / ops
            line = line sprintf(" %s=%.2f", e, v)
        }
        print line
    }
}' "$tmp/51.out" "$tmp/151.out"
