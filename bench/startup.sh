#!/bin/sh
# Start time and idle memory (docs/performance.md, "Process start and idle
# memory"). Not a test.
#   bench/startup.sh BUILD_DIR [RUNS]
# Prints the median and minimum wall time of RUNS (default 21) runs of
# `tensorwire --help` and `tensorwired --fabric none --help`, then the VmRSS
# of an idle `tensorwired --fabric F` for F in none, shm, tcp, auto, 7 s
# after start (set FI_OFI_RXM_BUFFER_SIZE in the environment to compare).
set -u
B=${1:?usage: bench/startup.sh BUILD_DIR [RUNS]}
N=${2:-21}
W=$(mktemp -d "${TMPDIR:-/tmp}/tw-startup.XXXXXX")
trap 'rm -rf "$W"' EXIT

median() {
    sort -n | awk '{ a[NR] = $1 } END { printf "median %.1f ms, min %.1f ms (n=%d)\n",
        a[int((NR + 1) / 2)] / 1000, a[1] / 1000, NR }'
}
start_time() {
    i=0
    while [ $i -lt "$N" ]; do
        s=$(date +%s%N)
        "$@" >/dev/null 2>&1
        e=$(date +%s%N)
        echo $(((e - s) / 1000))
        i=$((i + 1))
    done | median
}
echo "tensorwire --help: $(start_time "$B/tensorwire" --help)"
echo "tensorwired --fabric none --help: $(start_time "$B/tensorwired" --fabric none --help)"

for f in none shm tcp auto; do
    sh -c 'echo $$ >"$0"; exec "$@"' "$W/pid" "$B/tensorwired" --listen 127.0.0.1:0 --fabric $f \
        >"$W/log" 2>&1 &
    sleep 7
    P=$(cat "$W/pid")
    echo "tensorwired --fabric $f idle: VmRSS $(awk '/VmRSS/ { print $2 }' /proc/"$P"/status) kB," \
        "anonymous $(awk '/RssAnon/ { print $2 }' /proc/"$P"/status) kB"
    kill "$P"
    wait 2>/dev/null
done
