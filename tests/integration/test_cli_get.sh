#!/bin/sh
# tensorwire get replaces its destination only when the whole tensor arrived:
# a server killed mid-get, a missing tensor, and a SIGTERM to the CLI each
# leave the old file byte for byte and no temporary file behind; the bytes
# are received into a mapped file, not a buffer (a get of 256 MiB succeeds
# with the data segment limited to 48 MiB, where a malloc'd buffer cannot);
# a directory as destination is refused before any byte moves.
# Needs TW_BUILD_DIR and TW_SOURCE_DIR (set by CTest). Exit 77 = skip.
. "${TW_SOURCE_DIR:?}/tests/lib-test.sh"
tw_test_need tensorwired
tw_test_workdir cli-get
CLI_PID=
cleanup() {
    [ -n "$CLI_PID" ] && kill -CONT "$CLI_PID" 2>/dev/null
    tw_test_cleanup
}
trap cleanup EXIT INT TERM
# old_intact: dst still holds the old bytes, and nothing else is in $W/d.
old_intact() {
    cmp -s "$W/d/dst.npy" "$W/old" || fail "$1: the old file changed"
    left=$(ls -A "$W/d" | grep -v '^dst.npy$')
    [ -z "$left" ] || fail "$1: left behind: $left"
}
# wait_temp: until get's temporary file exists (it is created after STAT).
wait_temp() {
    i=0
    while [ $i -lt 300 ]; do
        ls -A "$W/d" | grep -q '^\.dst\.npy\.tw-' && return 0
        sleep 0.005
        i=$((i + 1))
    done
    return 1
}

start_server() {
    tw_server_start "$B" "$W" --fabric none || exit 1
    A="-s $TW_SERVER_ADDR"
    "$TW" $A put t64 "$W/z64" --dtype u8 --shape 67108864 || fail "put t64"
}
# interrupted_get HOW: runs "get t64 dst.npy" in the background and, once it
# is inside the get (its temporary file exists), calls HOW. A get that
# completed before HOW could act proves nothing: the old file is put back
# and it runs again, up to 5 times. Sets rc (the get's exit status) and try.
interrupted_get() {
    try=0
    while :; do
        try=$((try + 1))
        "$TW" $A get t64 "$W/d/dst.npy" 2>"$W/err" &
        CLI_PID=$!
        wait_temp && "$1"
        wait "$CLI_PID"
        rc=$?
        CLI_PID=
        if [ -n "$TW_SERVER_PID" ]; then
            kill -CONT "$TW_SERVER_PID"
        else
            start_server
        fi
        [ "$rc" -eq 0 ] && [ $try -lt 5 ] || return 0
        cp "$W/old" "$W/d/dst.npy"
    done
}
# Freeze the CLI inside its get, kill the server under it, let the CLI go.
kill_server() {
    kill -STOP "$CLI_PID"
    kill -KILL "$TW_SERVER_PID"
    wait "$TW_SERVER_PID" 2>/dev/null
    TW_SERVER_PID=
    kill -CONT "$CLI_PID"
}
# Stop the server (the get now waits for bytes), then SIGTERM the CLI.
term_cli() {
    kill -STOP "$TW_SERVER_PID"
    kill -TERM "$CLI_PID"
}

mkdir "$W/d"
printf 'the old contents\n' >"$W/old"
cp "$W/old" "$W/d/dst.npy"
# 64 MiB: far more than socket buffers hold, so a get cannot have finished
# while the CLI is stopped below.
head -c 67108864 /dev/zero >"$W/z64"

start_server

echo "case missing tensor"
"$TW" $A get nosuch "$W/d/dst.npy" 2>"$W/err" && fail "get nosuch succeeded"
grep -q NOT_FOUND "$W/err" || fail "no NOT_FOUND: $(cat "$W/err")"
old_intact "missing tensor"

echo "case directory as destination"
"$TW" $A get t64 "$W/d" 2>"$W/err" && fail "get into a directory succeeded"
grep -q "is a directory" "$W/err" || fail "no 'is a directory': $(cat "$W/err")"
old_intact "directory"

echo "case server killed mid-get"
interrupted_get kill_server
[ "$rc" -eq 1 ] || fail "get with a killed server exited $rc, want 1 (try $try); $(cat "$W/err")"
echo "   $(cat "$W/err") (try $try)"
old_intact "killed server"

echo "case SIGTERM to the CLI mid-get"
interrupted_get term_cli
[ "$rc" -eq 143 ] || fail "get killed by SIGTERM exited $rc, want 143 (try $try)"
old_intact "SIGTERM"

echo "case success replaces the file, keeping its mode"
chmod 640 "$W/d/dst.npy"
"$TW" $A get t64 "$W/d/dst.npy" --raw || fail "get t64"
cmp -s "$W/d/dst.npy" "$W/z64" || fail "get wrote other bytes"
mode=$(stat -c %a "$W/d/dst.npy")
[ "$mode" = 640 ] || fail "mode $mode after get, want 640"
[ "$(ls -A "$W/d" | wc -l)" -eq 1 ] || fail "left behind: $(ls -A "$W/d")"

echo "case bounded memory: 256 MiB into a 48 MiB data segment"
# RLIMIT_DATA counts private anonymous memory (malloc, mmap), not shared
# file mappings: a whole-tensor buffer cannot get past it, the mapped
# temporary file does.
head -c 268435456 /dev/zero >"$W/z256"
"$TW" $A put t256 "$W/z256" --dtype u8 --shape 268435456 || fail "put t256"
rm -f "$W/z256"
if grep -q AddressSanitizer "$TW" 2>/dev/null; then
    # ASan's shadow memory is private anonymous memory: no data limit fits.
    echo "   (skipped: sanitizer build)"
elif (ulimit -d 49152 && exec "$TW" $A get t256 "$W/d/big.npy" 2>"$W/err"); then
    size=$(stat -c %s "$W/d/big.npy")
    [ "$size" -eq 268435584 ] || fail "big.npy has $size bytes, want 268435584"
else
    fail "get of 256 MiB under a 48 MiB data limit failed: $(cat "$W/err")"
fi
rm -f "$W/d/big.npy"
tw_server_stop

tw_test_end "all get cases passed"
