"""Fixtures: a real tensorwired on loopback, started from $TW_BUILD_DIR.

Like tests/integration, the server listens on 127.0.0.1:0 and the fixture
reads the port from its "listening on HOST:PORT" line (at most 20 s, a loaded
machine). Every server is stopped with SIGTERM, then SIGKILL.
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("TW_BUILD_DIR") or os.path.join(HERE, "..", "..", "build")
TENSORWIRED = os.path.join(BUILD, "tensorwired")


class Server:
    """One tensorwired process; addr is "127.0.0.1:PORT"."""

    def __init__(self, *args):
        if not os.access(TENSORWIRED, os.X_OK):
            pytest.skip("tensorwired not built (%s)" % TENSORWIRED)
        self.log = tempfile.NamedTemporaryFile(prefix="tw-py-server.", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [TENSORWIRED, "--listen", "127.0.0.1:0", "--fabric", "none", *args],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        self.addr = None
        while time.monotonic() < deadline:
            with open(self.log.name) as f:
                m = re.search(r"listening on (\d+\.\d+\.\d+\.\d+:\d+)", f.read())
            if m:
                self.addr = m.group(1)
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        with open(self.log.name) as f:
            raise RuntimeError("tensorwired did not start:\n" + f.read())

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def kill(self):
        # SIGKILL ends a stopped process too; no SIGCONT first, which would
        # let it answer before it dies.
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        if self.proc.returncode not in (0, -signal.SIGKILL, -signal.SIGTERM):
            with open(self.log.name) as f:
                sys.stderr.write("tensorwired exited %s:\n%s" % (self.proc.returncode, f.read()))
        os.unlink(self.log.name)


@pytest.fixture(scope="session")
def server():
    """A server shared by the tests that do not stop or pause it."""
    s = Server()
    yield s
    s.stop()


@pytest.fixture
def own_server():
    """A server of the test's own (paused, killed, or with options): call it
    with tensorwired options; every server made is stopped afterwards."""
    made = []

    def make(*args):
        s = Server(*args)
        made.append(s)
        return s

    yield make
    for s in made:
        s.stop()


@pytest.fixture
def client(server):
    import tensorwire

    with tensorwire.connect(server.addr, timeout=60) as c:
        yield c
