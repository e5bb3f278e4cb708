# Shell helpers to run a throwaway tensorwired on loopback. Source it, then:
#   tw_server_start BUILD_DIR WORKDIR [tensorwired options...]
#       starts the server on 127.0.0.1 with a free port (--listen 127.0.0.1:0),
#       waits (at most 10 s) for its "listening on HOST:PORT" line and sets
#       TW_SERVER_ADDR and TW_SERVER_PID; the log is WORKDIR/server.log.
#   tw_server_stop
#       SIGTERM, then SIGKILL after 5 s; returns the server's exit status.
#   tw_server_wait_listening LOG [PID]
#       for a server started some other way (in a network namespace): waits
#       (at most 10 s) for LOG's "listening on HOST:PORT" line and prints
#       HOST:PORT; returns 1 when none came, 2 when PID (if given) exited.
# POSIX sh.

tw_server_start() {
    _b=$1
    _w=$2
    shift 2
    if [ ! -x "$_b/tensorwired" ]; then
        echo "tw_server_start: $_b/tensorwired not built" >&2
        return 1
    fi
    # Truncate here: the redirection below happens in the child, and reading
    # a previous server's log would give a dead address.
    : >"$_w/server.log"
    "$_b/tensorwired" --listen 127.0.0.1:0 "$@" >"$_w/server.log" 2>&1 &
    TW_SERVER_PID=$!
    TW_SERVER_ADDR=$(tw_server_wait_listening "$_w/server.log" "$TW_SERVER_PID")
    case $? in
    0)
        export TW_SERVER_ADDR TW_SERVER_PID
        return 0
        ;;
    2)
        echo "tw_server_start: tensorwired exited:" >&2
        ;;
    *)
        echo "tw_server_start: no 'listening on' line within 10 s:" >&2
        kill "$TW_SERVER_PID" 2>/dev/null || :
        ;;
    esac
    cat "$_w/server.log" >&2
    return 1
}

tw_server_wait_listening() {
    _i=0
    while [ $_i -lt 100 ]; do
        _a=$(sed -n 's/.*listening on \([0-9.]*:[0-9]*\).*/\1/p' "$1" | head -n 1)
        if [ -n "$_a" ]; then
            echo "$_a"
            return 0
        fi
        if [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null; then
            return 2
        fi
        sleep 0.1
        _i=$((_i + 1))
    done
    return 1
}

tw_server_stop() {
    [ -n "${TW_SERVER_PID:-}" ] || return 0
    kill -TERM "$TW_SERVER_PID" 2>/dev/null || :
    _i=0
    while [ $_i -lt 50 ] && kill -0 "$TW_SERVER_PID" 2>/dev/null; do
        sleep 0.1
        _i=$((_i + 1))
    done
    kill -KILL "$TW_SERVER_PID" 2>/dev/null || :
    _rc=0
    wait "$TW_SERVER_PID" 2>/dev/null || _rc=$?
    TW_SERVER_PID=
    return $_rc
}
