"""No leak over 10,000 calls: reference counts of the objects passed in stay
put, the number of live Python objects does not grow, and neither does the
resident set (which would show receive buffers or exceptions never freed:
4 KiB x 10,000 is 40 MiB)."""
import gc
import os
import sys

import numpy as np

import tensorwire

CALLS = 10000


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_no_leak_over_10000_calls(client):
    a = np.arange(1024, dtype=np.float32)  # 4 KiB
    out = np.empty_like(a)
    names = ["leak/%d" % i for i in range(4)]
    client.put_many({n: a for n in names})
    outs = [np.empty_like(a) for _ in names]
    stack = np.stack([a] * 4)  # the stacked form: one (4, 1024) array
    name = "leak/0"

    def one_round(i):
        k = i % 10
        if k == 0:
            client.put(name, a)
        elif k == 1:
            client.get(name, out=out)
        elif k == 2:
            assert client.get(name).shape == (1024,)
        elif k == 3:
            client.stat(name)
        elif k == 4:
            try:
                client.get("leak/missing")
            except tensorwire.NotFound:
                pass
        elif k == 5:
            client.get_many(names, out=outs)
        elif k == 6:
            assert len(client.get_many(names)) == 4
        elif k == 8:
            client.put_many(names, stack)
            client.get_many(names, out=stack)
        elif k == 9:
            try:  # a row shape that does not fit, found per item in C
                client.get_many(names, out=np.empty((4, 512), np.float32))
            except tensorwire.InvalidArgument:
                pass
        else:
            try:
                client.get(name, out=np.empty(3, np.float32))
            except tensorwire.InvalidArgument:
                pass

    for i in range(1000):  # warm up: allocator pools, caches, lazy imports
        one_round(i)
    gc.collect()
    refs = (sys.getrefcount(a), sys.getrefcount(out), sys.getrefcount(name), sys.getrefcount(stack),
            [sys.getrefcount(o) for o in outs], sys.getrefcount(tensorwire.NotFound))
    objects = len(gc.get_objects())
    rss = rss_bytes()
    for i in range(CALLS):
        one_round(i)
    gc.collect()
    after = (sys.getrefcount(a), sys.getrefcount(out), sys.getrefcount(name), sys.getrefcount(stack),
             [sys.getrefcount(o) for o in outs], sys.getrefcount(tensorwire.NotFound))
    assert after == refs
    grown_objects = len(gc.get_objects()) - objects
    assert grown_objects < 100, "%d more live objects after %d calls" % (grown_objects, CALLS)
    grown = rss_bytes() - rss
    assert grown < 8 << 20, "RSS grew by %d bytes over %d calls" % (grown, CALLS)
    print("rss growth over %d calls: %d KiB, live objects %+d" % (CALLS, grown >> 10, grown_objects))
