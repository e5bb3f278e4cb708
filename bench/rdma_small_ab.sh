#!/bin/bash
# Small RDMA transfers, before/after (docs/performance.md, "Batched RDMA"):
# two builds' binaries side by side on one host, alternated run by run.
#   bench/rdma_small_ab.sh BEFORE_DIR AFTER_DIR
# Each folder holds tensorwired, tensorwire, libtensorwire.so*, bench_kv,
# bench_soak and bench_fabric (a Release build). Steps (STEPS, default
# 1234): 1 = 32 KiB x 64 in flight, get and put on tcp and shm, against the
# raw libfabric loop of the same size and window (REPS, default 1; COUNT32
# requests, default 5000); 2 = the KV batch (bench_kv, KV_SCALE, default
# 0.25) with RDMA at every size, batch / one tensor; 3 = one 4 KiB read at
# a time and after 50 ms idle (bench_fabric), also with TW_FABRIC_SPIN_US
# 0 and 1000 on the after build; 4 = the loaded put tail (bench_soak, 32
# clients, RDMA tcp, SOAK_S seconds, default 5). No run goes past BUDGET
# seconds (default 68; raise it on a slow host). Outputs are packed into
# $OUT/batch.tgz. Server and clients are pinned to cores 2-7 and 8-13 on
# hosts with 14 or more.
set -u
BEFORE=$(cd "${1:?usage: bench/rdma_small_ab.sh BEFORE_DIR AFTER_DIR}" && pwd)
AFTER=$(cd "${2:?usage: bench/rdma_small_ab.sh BEFORE_DIR AFTER_DIR}" && pwd)
EXTRA_LIBS=${EXTRA_LIBS:-}
dir_of() { if [ "$1" = before ]; then echo "$BEFORE"; else echo "$AFTER"; fi; }
# Everything goes to a work folder, packed into ONE file at the end
# ($OUT/batch.tgz); the key lines are printed as they come.
FINAL_OUT=${OUT:-.}
mkdir -p "$FINAL_OUT"
OUT=$(mktemp -d "${TMPDIR:-/tmp}/batch.XXXXXX")
T0=$(date +%s)
left() { echo $((${BUDGET:-68} - ($(date +%s) - T0))); }
# A run's time limit: n seconds, but never past the budget.
tmo() { local l; l=$(left); [ "$l" -lt "$1" ] && echo $((l > 1 ? l : 1)) || echo "$1"; }
NCPU=$(nproc)
STEPS=${STEPS:-1234}
REPS=${REPS:-1}
SRV_CPUS=""
CLI_CPUS=""
if [ "$NCPU" -ge 14 ]; then SRV_CPUS="taskset -c 2-7"; CLI_CPUS="taskset -c 8-13"; fi
echo "host: $(hostname) $NCPU cpus, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%H:%M:%S)"

srv=""
stop_srv() { [ -z "$srv" ] || { kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null; }; srv=""; }
pack() { tar czf "$FINAL_OUT/batch.tgz" -C "$OUT" . 2>/dev/null; }
trap 'stop_srv; pack' EXIT
# start_srv VARIANT [server options]: sets $addr
start_srv() {
    local v=$1; shift
    stop_srv
    LD_LIBRARY_PATH=$(dir_of $v)${EXTRA_LIBS:+:$EXTRA_LIBS} TW_FABRIC_SPIN_US=${SPIN:-} $SRV_CPUS "$(dir_of $v)/tensorwired" \
        --listen 127.0.0.1:0 --log-level warn "$@" >"$OUT/srv.out" 2>"$OUT/srv.err" &
    srv=$!
    addr=""
    for _ in $(seq 100); do
        addr=$(sed -n 's/^listening on //p' "$OUT/srv.out")
        [ -n "$addr" ] && break
        sleep 0.05
    done
    [ -n "$addr" ] || { echo "server $v did not start:"; cat "$OUT/srv.err"; }
}
cli() { local v=$1; shift; LD_LIBRARY_PATH=$(dir_of $v)${EXTRA_LIBS:+:$EXTRA_LIBS} TW_FABRIC_SPIN_US=${SPIN:-} $CLI_CPUS "$@"; }
jget() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p" | tr -d '"'; }

# 1. 32 KiB x 64 in flight vs the raw libfabric loop (same size/window),
#    tcp and shm, get and put; before/after alternated, 2 reps each.
case $STEPS in *1*) ;; *) REPS="" ;; esac
echo "== 32 KiB x 64 in flight, ratio to raw fi_read/fi_write loop (same run)"
printf "%-9s %-4s %-7s %10s %10s %7s\n" case rep variant ops/s raw_ops/s ratio
for fab in tcp shm; do
    for op in get put; do
        for rep in $REPS; do
            for v in before after; do
                [ "$(left)" -gt 42 ] || break 4
                start_srv $v --fabric tcp,shm --rdma-min-bytes 0
                f="$OUT/b32_${fab}_${op}_${v}_$rep.json"
                cli $v timeout "$(tmo 10)" "$(dir_of $v)/tensorwire" --server "$addr" --fabric $fab \
                    --rdma-min-bytes 0 bench --op $op --size 32Ki --count ${COUNT32:-5000} --inflight 64 \
                    --rounds 3 --no-sweep --json >"$f" 2>"$f.err"
                printf "%-9s %-4s %-7s %10s %10s %7s\n" "$fab/$op" $rep $v "$(jget ops_per_s <"$f")" \
                    "$(jget same_setting_bytes_per_s <"$f" | awk '{printf "%.0f", $1/32768}')" \
                    "$(jget same_setting_ratio <"$f")"
            done
        done
    done
done

# 2. KV batch (bench_kv --workload kv) with RDMA at every size, batch vs one
#    tensor of the same bytes on the same path.
KVS=${KV_SCALE:-0.25}
echo "== KV batch x$KVS (40,960 x 32 KiB at 1), --rdma-min-bytes 0, ratio batch/single"
printf "%-4s %-7s %9s %9s %9s %9s %9s\n" fab variant put_new put_ovw get single_put single_get
for fab in tcp shm; do
    case $STEPS in *2*) ;; *) break ;; esac
    for v in before after; do
        [ "$(left)" -gt 22 ] || break 2
        start_srv $v --fabric tcp,shm --rdma-min-bytes 0
        f="$OUT/kv_${fab}_${v}.json"
        cli $v timeout "$(tmo 12)" "$(dir_of $v)/bench_kv" "$addr" --workload kv --scale "$KVS" --rounds 3 \
            --fabric $fab --rdma-min-bytes 0 --json >"$f" 2>"$f.err"
        printf "%-4s %-7s %9s %9s %9s %9s %9s\n" $fab $v "$(jget ratio_put_new <"$f")" \
            "$(jget ratio_put_overwrite <"$f")" "$(jget ratio_get <"$f")" \
            "$(jget single_put_gbps <"$f")" "$(jget single_get_gbps <"$f")"
    done
done
stop_srv

# 3. Idle small-op latency (engine, sync, one op at a time) and the mover's
#    spin window (TW_FABRIC_SPIN_US) on the after build.
echo "== bench_fabric -p tcp -r 5 -s 4096 (us per 4 KiB read; 'idle' = after 50 ms idle)"
for v in before after after:0 after:1000; do
    case $STEPS in *3*) ;; *) break ;; esac
    [ "$(left)" -gt 14 ] || break
    b=${v%%:*}
    spin=""
    [ "$v" != "$b" ] && spin=${v#*:}
    f="$OUT/fab4k_${b}_${spin:-def}.txt"
    SPIN=$spin cli $b timeout "$(tmo 6)" "$(dir_of $b)/bench_fabric" -p tcp -r 5 -s 4096 >"$f" 2>&1
    printf "%-10s engine %s us/op, raw %s us/op, idle %s\n" "$v" \
        "$(awk '/^4 KiB  /{print $5}' "$f")" "$(awk '/^4 KiB  /{print $3}' "$f")" \
        "$(sed -n 's/.*idle.*: \([0-9.]*\) us median/\1/p' "$f")"
done

# 4. The loaded put tail: 32 RDMA tcp clients, 10 s (bench_soak).
echo "== soak: 32 clients, RDMA tcp, ${SOAK_S:-5} s (after:N = TW_FABRIC_SPIN_US=N on both sides)"
for v in before after after:0 after:1000; do
    case $STEPS in *4*) ;; *) break ;; esac
    [ "$(left)" -gt $((${SOAK_S:-5} + 3)) ] || break
    b=${v%%:*}
    SPIN=""
    [ "$v" != "$b" ] && SPIN=${v#*:}
    start_srv $b --fabric tcp --max-connections 64
    f="$OUT/soak_${b}_${SPIN:-def}.txt"
    cli $b timeout "$(tmo $((${SOAK_S:-5} + 4)))" "$(dir_of $b)/bench_soak" -s "$addr" -n 32 -t "${SOAK_S:-5}" --fabric tcp >"$f" 2>&1
    SPIN=""
    echo "-- $v: $(grep -E '^put ' "$f" | awk '{print "put p50 " $3 " ms, p99 " $4 " ms, max " $5 " ms"}'); $(grep '^ops/s' "$f")"
done
stop_srv
echo "done in $(($(date +%s) - T0)) s"
