#!/bin/sh
# Soak run (not a test): a fresh tensorwired, bench_soak against it, the
# server's CPU time and idle RSS TW_SOAK_IDLE_WAIT (25) s later, then its
# transfer-duration histograms from /metrics.
#   bench/soak.sh BUILD_DIR CLIENTS SECONDS FABRIC [bench_soak options...]
# FABRIC: none (inline) or a provider (tcp, shm): the server opens it and
# the clients ask for it. Example (docs/performance.md, "Soak"):
#   bench/soak.sh build 256 30 none
#   bench/soak.sh build 32 30 tcp
set -u
B=${1:?usage: bench/soak.sh BUILD_DIR CLIENTS SECONDS FABRIC [options]}
N=${2:?clients}
T=${3:?seconds}
F=${4:?fabric}
shift 4
. "$(dirname "$0")/../scripts/lib-server.sh"
W=$(mktemp -d "${TMPDIR:-/tmp}/tw-soak.XXXXXX")
cleanup() {
    tw_server_stop >/dev/null 2>&1
    rm -rf "$W"
}
trap cleanup EXIT INT TERM
tw_server_start "$B" "$W" --fabric "$F" --metrics 127.0.0.1:0 --max-connections $((N + 16)) ||
    exit 1
A=$TW_SERVER_ADDR
P=$TW_SERVER_PID
M=$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$W/server.log" | head -n 1)
"$B/bench/bench_soak" -s "$A" -n "$N" -t "$T" --fabric "$F" --server-pid "$P" "$@"
rc=$?
# utime + stime of the server (fields 14, 15 of /proc/PID/stat, in ticks).
ticks=$(getconf CLK_TCK)
awk -v t="$ticks" -v s="$T" '{ c = ($14 + $15) / t; printf "server CPU %.1f s in the run (%.2f cores over %s s)\n", c, c / s, s }' \
    "/proc/$P/stat"
# The server trims idle memory every 10 s (TW_SRV_TRIM_MS): RSS once idle.
idle=${TW_SOAK_IDLE_WAIT:-25}
sleep "$idle"
echo "server RSS ${idle} s after the run: $(awk '/VmRSS/ { print $2 }' "/proc/$P/status") KiB"
if [ -n "$M" ] && command -v curl >/dev/null; then
    echo "server-side transfer durations (/metrics, successful transfers):"
    curl -s "http://$M/metrics" | awk '
        /^tensorwire_transfer_duration_seconds_bucket/ {
            match($0, /plane="[a-z]+",op="[a-z]+"/); k = substr($0, RSTART, RLENGTH)
            match($0, /le="[^"]+"/); le = substr($0, RSTART + 4, RLENGTH - 5)
            n[k] = n[k] " " le ":" $2 }
        /^tensorwire_transfer_duration_seconds_count/ {
            match($0, /plane="[a-z]+",op="[a-z]+"/); k = substr($0, RSTART, RLENGTH)
            if ($2 > 0) print "  " k " count " $2 " cumulative buckets (s:count)" n[k] }'
fi
exit $rc
