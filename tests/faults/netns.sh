# Network-namespace helpers for the fault tests (POSIX sh; source it).
# Two namespaces joined by one veth pair, nothing else:
#   server side  $NS_S  dev $DEV_S  10.77.0.1/24
#   client side  $NS_C  dev $DEV_C  10.77.0.2/24
# Names carry the shell's pid so parallel runs never share a namespace; the
# addresses exist only inside these namespaces.
#   ns_setup          creates them (returns 1 when this host cannot)
#   ns_teardown       deletes them (idempotent)
#   ns_s CMD... / ns_c CMD...   run CMD in the server / client namespace
#                     (`ip netns exec` forks: $! is not CMD's pid)
#   ns_cut / ns_restore         link down / up (both ends, routes back)
#   ns_throttle RATE  tbf on both ends (e.g. 16mbit); ns_unthrottle
#   ns_blackhole / ns_unblackhole   blackhole route to the server (client side)
NS_S="twfs$$"
NS_C="twfc$$"
DEV_S="tws$$"
DEV_C="twc$$"
ADDR_S=10.77.0.1
ADDR_C=10.77.0.2

ns_s() { ip netns exec "$NS_S" "$@"; }
ns_c() { ip netns exec "$NS_C" "$@"; }

ns_setup() {
    ip netns add "$NS_S" 2>/dev/null || return 1
    ip netns add "$NS_C" 2>/dev/null || { ip netns del "$NS_S"; return 1; }
    ip link add "$DEV_S" netns "$NS_S" type veth peer name "$DEV_C" netns "$NS_C" 2>/dev/null ||
        { ns_teardown; return 1; }
    ip -n "$NS_S" addr add "$ADDR_S/24" dev "$DEV_S" &&
        ip -n "$NS_C" addr add "$ADDR_C/24" dev "$DEV_C" &&
        ip -n "$NS_S" link set lo up && ip -n "$NS_C" link set lo up &&
        ip -n "$NS_S" link set "$DEV_S" up && ip -n "$NS_C" link set "$DEV_C" up ||
        { ns_teardown; return 1; }
    return 0
}

ns_teardown() {
    # `ip netns exec` forks, so a killed wrapper can leave its command
    # running; end whatever is still inside our own namespaces.
    for _ns in "$NS_S" "$NS_C"; do
        for _p in $(ip netns pids "$_ns" 2>/dev/null); do
            kill -KILL "$_p" 2>/dev/null
        done
    done
    ip netns del "$NS_S" 2>/dev/null
    ip netns del "$NS_C" 2>/dev/null
    return 0
}

ns_cut() { ip -n "$NS_C" link set "$DEV_C" down; }
ns_restore() {
    ip -n "$NS_C" link set "$DEV_C" up
    ip -n "$NS_S" link set "$DEV_S" up
}

ns_throttle() {
    ip netns exec "$NS_C" tc qdisc replace dev "$DEV_C" root tbf rate "$1" burst 32kbit latency 400ms &&
        ip netns exec "$NS_S" tc qdisc replace dev "$DEV_S" root tbf rate "$1" burst 32kbit latency 400ms
}
ns_unthrottle() {
    ip netns exec "$NS_C" tc qdisc del dev "$DEV_C" root 2>/dev/null
    ip netns exec "$NS_S" tc qdisc del dev "$DEV_S" root 2>/dev/null
    return 0
}

ns_blackhole() { ip -n "$NS_C" route add blackhole "$ADDR_S/32"; }
ns_unblackhole() { ip -n "$NS_C" route del blackhole "$ADDR_S/32"; }
