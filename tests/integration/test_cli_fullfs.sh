#!/bin/sh
# tensorwire get onto a full filesystem: a 4 MiB tensor into a 1 MiB tmpfs
# that already holds the destination. The get fails before any byte moves
# (the temporary file is sized first), says ENOSPC-style why, and leaves the
# old file byte for byte and no temporary behind. The tmpfs lives in a
# private mount namespace (unshare -m), so nothing stays mounted if the test
# dies. Needs root (CI runs as root); exit 77 when it cannot mount.
. "${TW_SOURCE_DIR:?}/tests/lib-test.sh"
tw_test_need tensorwired
tw_test_need_cmd unshare
tw_test_workdir cli-fullfs
mkdir "$W/small"
if ! unshare -m sh -c "mount -t tmpfs -o size=1m tw-test '$W/small'" 2>"$W/err"; then
    echo "SKIP: cannot mount a tmpfs in a private namespace: $(cat "$W/err")"
    exit 77
fi
export TW B S W TW_BUILD_DIR TW_SOURCE_DIR
exec unshare -m sh -c '
. "$S/tests/lib-test.sh"
mount --make-rprivate / 2>/dev/null
mount -t tmpfs -o size=1m tw-test "$W/small" || exit 1
trap "tw_server_stop >/dev/null 2>&1; umount \"$W/small\"; rm -rf \"$W\"" EXIT
head -c 4194304 /dev/zero >"$W/z4"
printf "the old contents\n" >"$W/old"
cp "$W/old" "$W/small/dst.npy"
tw_server_start "$B" "$W" --fabric none || exit 1
A="-s $TW_SERVER_ADDR"
"$TW" $A put t4 "$W/z4" --dtype u8 --shape 4194304 || fail "put t4"
echo "case get onto a full filesystem"
"$TW" $A get t4 "$W/small/dst.npy" 2>"$W/err"
rc=$?
[ "$rc" -eq 1 ] || fail "get onto a full filesystem exited $rc, want 1"
echo "   $(cat "$W/err")"
grep -q "No space left on device" "$W/err" || fail "message lacks the reason: $(cat "$W/err")"
cmp -s "$W/small/dst.npy" "$W/old" || fail "the old file changed"
left=$(ls -A "$W/small" | grep -v "^dst.npy$")
[ -z "$left" ] || fail "left behind: $left"
echo "case a tensor that fits still replaces the file there"
head -c 65536 /dev/zero >"$W/z64k"
"$TW" $A put t64k "$W/z64k" --dtype u8 --shape 65536 || fail "put t64k"
"$TW" $A get t64k "$W/small/dst.npy" --raw || fail "get t64k"
cmp -s "$W/small/dst.npy" "$W/z64k" || fail "the small get wrote other bytes"
tw_test_end "all full-filesystem cases passed"
'
