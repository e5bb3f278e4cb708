"""The GIL is released during transfers; threads with a client each are
inside the library at the same time.

No timing assumption: the server is paused (SIGSTOP), so every call blocks
until the test resumes it. While the workers are provably inside their calls
(started, not returned), the main thread runs Python code; it could not if a
worker held the GIL. A worker holding the GIL would block the main thread
until its call failed with Timeout (20 s), and the test would then fail, not
hang.
"""
import threading
import time

import numpy as np
import pytest

import tensorwire

N_THREADS = 4


def _spin_python(n=200000):
    """Pure Python work that needs the GIL."""
    x = 0
    for i in range(n):
        x += i
    return x


@pytest.mark.parametrize("op", ["get", "get_out", "get_many", "put", "put_many", "stat", "ping"])
def test_threads_run_in_parallel_while_blocked(own_server, op):
    s = own_server()
    payload = np.arange(1 << 18, dtype=np.float32)
    clients = [tensorwire.connect(s.addr, timeout=20) for _ in range(N_THREADS)]
    for i, c in enumerate(clients):
        c.put("t/%d" % i, payload)
    inside = [threading.Event() for _ in clients]
    done = [threading.Event() for _ in clients]
    errors = []

    def call(i, c):
        name = "t/%d" % i
        if op == "get":
            return c.get(name)
        if op == "get_out":
            return c.get(name, out=np.empty_like(payload))
        if op == "get_many":
            return c.get_many([name], out=[np.empty_like(payload)])[0]
        if op == "put":
            return c.put(name, payload)
        if op == "put_many":
            return c.put_many({name: payload})
        if op == "stat":
            return c.stat(name)
        return c.ping()

    results = [None] * len(clients)

    def worker(i, c):
        inside[i].set()
        try:
            results[i] = call(i, c)
        except BaseException as e:  # noqa: B902 - reported below
            errors.append(e)
        done[i].set()

    s.pause()
    threads = [threading.Thread(target=worker, args=(i, c)) for i, c in enumerate(clients)]
    try:
        for t in threads:
            t.start()
        for ev in inside:
            assert ev.wait(60)
        time.sleep(0.2)  # let every worker reach the blocking library call
        spun = _spin_python()  # needs the GIL the workers must not hold
        assert spun == sum(range(200000))
        # Every worker is still blocked in its call, all at the same time.
        assert not any(d.is_set() for d in done), "a call returned on a paused server: %r" % errors
    finally:
        s.resume()
        for t in threads:
            t.join(60)
    assert not errors, errors
    assert all(d.is_set() for d in done)
    if op in ("get", "get_out", "get_many"):
        assert all(np.array_equal(r, payload) for r in results)
    for c in clients:
        c.close()


def test_shared_client_is_serialised(server):
    """Threads sharing one Client take turns (no corruption, no crash)."""
    c = tensorwire.connect(server.addr, timeout=60)
    data = {i: np.full(4096, i, np.int32) for i in range(8)}
    for i, a in data.items():
        c.put("shared/%d" % i, a)
    errors = []

    def worker(i):
        try:
            out = np.empty(4096, np.int32)
            for _ in range(100):
                c.get("shared/%d" % i, out=out)
                assert (out == i).all()
        except BaseException as e:  # noqa: B902 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in data]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    c.close()
