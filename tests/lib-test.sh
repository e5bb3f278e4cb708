# The common start and end of the shell tests (POSIX sh). Source it first:
#     . "${TW_SOURCE_DIR:?}/tests/lib-test.sh"
# It sets -u; B and S (TW_BUILD_DIR and TW_SOURCE_DIR, which CTest sets);
# TW ($B/tensorwire); sources scripts/lib-server.sh (tw_server_start and
# tw_server_stop); sets FAILS=0; and defines:
#   fail MSG...            prints "FAIL: MSG" on stderr and counts it (the
#                          test goes on; a test may define its own fail)
#   tw_test_need FILE...   exit 77 (CTest's SKIP) unless $B/FILE is executable
#   tw_test_need_cmd CMD...  exit 77 unless CMD is on PATH
#   tw_test_workdir NAME   W = a new directory under $TMPDIR; installs
#                          tw_test_cleanup (stops the server, removes $W) as
#                          the EXIT/INT/TERM trap. A test that needs more
#                          sets its own trap and calls tw_test_cleanup from it.
#   tw_test_end TEXT [N]   exit 0 printing TEXT when FAILS is 0; else the
#                          count, the last N lines of $W/server.log (when N
#                          is given), and exit 1.
set -u
B=${TW_BUILD_DIR:?}
S=${TW_SOURCE_DIR:?}
TW="$B/tensorwire"
. "$S/scripts/lib-server.sh"
FAILS=0

fail() {
    echo "FAIL: $*" >&2
    FAILS=$((FAILS + 1))
}

tw_test_need() {
    for _f in "$@"; do
        [ -x "$B/$_f" ] || { echo "SKIP: $_f not built"; exit 77; }
    done
}

tw_test_need_cmd() {
    for _c in "$@"; do
        command -v "$_c" >/dev/null || { echo "SKIP: $_c missing"; exit 77; }
    done
}

tw_test_workdir() {
    W=$(mktemp -d "${TMPDIR:-/tmp}/tw-$1.XXXXXX")
    trap tw_test_cleanup EXIT INT TERM
}

tw_test_cleanup() {
    tw_server_stop >/dev/null 2>&1
    rm -rf "$W"
}

tw_test_end() {
    if [ "$FAILS" -eq 0 ]; then
        echo "$1"
        exit 0
    fi
    echo "$FAILS failure(s)" >&2
    if [ -n "${2:-}" ]; then
        echo "--- server log (last $2 lines):" >&2
        tail -n "$2" "$W/server.log" >&2
    fi
    exit 1
}
