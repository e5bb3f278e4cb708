#!/usr/bin/env python3
"""The progress line of tensorwire get, read through a pseudo-terminal.

A get of 64 MiB is held up for 2.5 s (the server is stopped with SIGSTOP
once the CLI has created its temporary file, i.e. is inside the get), then
let go in four 3 ms bursts 350 ms apart, so the transfer runs over a second
however fast the machine is and some bytes move while the line is shown:
  * stderr a terminal: a line "get: X / 64.0 MiB  R MB/s  T s  ETA E"
    redrawn with "\\r", "ETA stalled" while stopped, bytes counted
    (the socket buffers' worth before the stop, then the bursts), erased at the end ("\\r\\033[K");
  * stderr a terminal with -q: no progress line;
  * stderr a file: no progress line;
  * -v: a summary line on stdout "get t64: 64.0 MiB (67108864 bytes) in
    S s, G GB/s".
Needs TW_BUILD_DIR. Exit 77 = skip.
"""
import glob
import os
import pty
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

B = os.environ.get("TW_BUILD_DIR")
if not B or not os.access(os.path.join(B, "tensorwired"), os.X_OK):
    print("SKIP: tensorwired not built")
    sys.exit(77)
TW = os.path.join(B, "tensorwire")
W = tempfile.mkdtemp(prefix="tw-cli-progress.")
failures = []


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    failures.append(msg)


srv_log = open(os.path.join(W, "server.log"), "w+")
srv = subprocess.Popen(
    [os.path.join(B, "tensorwired"), "--listen", "127.0.0.1:0", "--fabric", "none"],
    stdout=srv_log, stderr=subprocess.STDOUT)
addr = None
for _ in range(100):
    srv_log.seek(0)
    m = re.search(r"listening on (\S+)", srv_log.read())
    if m:
        addr = m.group(1)
        break
    time.sleep(0.1)
if not addr:
    srv.kill()
    print("server did not start", file=sys.stderr)
    sys.exit(1)


def cli(*args, **kw):
    return subprocess.run([TW, "-s", addr] + list(args), **kw)


def held_get(extra, stderr_tty):
    """Runs get t64 with the server stopped for 2.5 s mid-get. Returns
    (exit status, stdout, what stderr received)."""
    dst = os.path.join(W, "out.npy")
    master = None
    if stderr_tty:
        master, slave = pty.openpty()
        err_target = slave
    else:
        err_target = open(os.path.join(W, "err.txt"), "w")
    got = bytearray()

    def drain():
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                return
            if not chunk:
                return
            got.extend(chunk)

    p = subprocess.Popen([TW, "-s", addr] + extra + ["get", "t64", dst],
                         stdout=subprocess.PIPE, stderr=err_target)
    reader = None
    if stderr_tty:
        os.close(slave)
        reader = threading.Thread(target=drain)
        reader.start()
    else:
        err_target.close()
    stopped = False
    for _ in range(1000):
        if glob.glob(os.path.join(W, ".out.npy.tw-*")) or p.poll() is not None:
            break
        time.sleep(0.005)
    if p.poll() is None:
        srv.send_signal(signal.SIGSTOP)
        stopped = True
        time.sleep(2.5)
        # A few short bursts: some bytes move, far from all 64 MiB.
        for _ in range(4):
            srv.send_signal(signal.SIGCONT)
            time.sleep(0.003)
            srv.send_signal(signal.SIGSTOP)
            time.sleep(0.35)
        srv.send_signal(signal.SIGCONT)
    out, _ = p.communicate(timeout=60)
    if reader:
        reader.join(timeout=10)
        os.close(master)
    else:
        got = open(os.path.join(W, "err.txt"), "rb").read()
    if not stopped:
        fail("the get ended before the server could be stopped")
    return p.returncode, out.decode(), bytes(got).decode(errors="replace")


try:
    with open(os.path.join(W, "z64"), "wb") as f:
        f.write(bytes(64 << 20))
    r = cli("put", "t64", os.path.join(W, "z64"), "--dtype", "u8", "--shape", str(64 << 20))
    if r.returncode != 0:
        fail("put t64 exited %d" % r.returncode)

    print("case progress on a terminal, summary with -v")
    rc, out, err = held_get([], True)
    if rc != 0:
        fail("get on a terminal exited %d: %r" % (rc, err))
    line = re.search(r"\rget: [0-9.]+ (B|KiB|MiB) / 64\.0 MiB  [0-9.]+ MB/s  [0-9.]+ s  ETA (stalled|\?|[0-9]+ s)",
                     err)
    if not line:
        fail("no progress line on the terminal: %r" % err[:400])
    else:
        print("   " + line.group(0).strip())
    moved = re.search(r"\rget: [0-9.]+ (KiB|MiB) / 64\.0 MiB  [0-9.]+ MB/s  [0-9.]+ s  ETA [0-9]+ s",
                      err)
    if not moved:
        fail("no progress line counted the bytes of the bursts: %r" % err[-600:])
    else:
        print("   " + moved.group(0).strip())
    if "ETA stalled" not in err:
        fail("the stopped server did not show as stalled: %r" % err[:400])
    if not err.endswith("\r\033[K"):
        fail("the progress line was not erased at the end: %r" % err[-40:])

    rc2 = subprocess.run([TW, "-s", addr, "get", "t64", os.path.join(W, "v.npy"), "-v"],
                         capture_output=True, text=True)
    if not re.search(r"^get t64: 64\.0 MiB \(67108864 bytes\) in [0-9.]+ s, [0-9.]+ GB/s$",
                     rc2.stdout, re.M):
        fail("no -v summary: %r" % rc2.stdout)
    else:
        print("   " + rc2.stdout.splitlines()[-1])

    print("case -q on a terminal: silent")
    rc, out, err = held_get(["-q"], True)
    if rc != 0 or "MB/s" in err or err:
        fail("-q printed on stderr (exit %d): %r" % (rc, err[:200]))

    print("case stderr not a terminal: silent")
    rc, out, err = held_get([], False)
    if rc != 0 or err:
        fail("stderr to a file got %r (exit %d)" % (err[:200], rc))
finally:
    srv.send_signal(signal.SIGCONT)
    srv.terminate()
    try:
        srv.wait(timeout=10)
    except subprocess.TimeoutExpired:
        srv.kill()
    subprocess.run(["rm", "-rf", W])

if failures:
    print("%d failure(s)" % len(failures), file=sys.stderr)
    sys.exit(1)
print("all progress cases passed")
