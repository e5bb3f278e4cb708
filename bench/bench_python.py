#!/usr/bin/env python3
"""The Python binding against the C library, in the same run, same server.

Three comparisons (issue #14 targets in brackets), each over ROUNDS rounds
that alternate C and Python so drift on a shared machine hits both; the
median round of each side is reported:

  1. get(name, out=t) of 256 MiB into a preallocated array vs
     `tensorwire bench --op get --size 256Mi --inflight 1`     [>= 0.95x]
     and vs a C loop of tw_get (bench_get_loop), the very call the binding
     makes (tensorwire bench goes through tw_batch_get)
  2. get_many of 40,960 x 32 KiB vs
     `tensorwire bench --op get --size 32Ki --count 40960 --inflight 64`
     (tw_batch_get, 64 in flight on both sides)                 [>= 0.9x]
     The C bench cycles its 40,960 items over 64 tensors and 64 buffers
     (cache-warm on both ends); the ratio is taken against the same pattern
     in Python. Distinct tensors into 40,960 distinct buffers (1.25 GiB, the
     realistic KV-cache case) are reported too, in absolute terms.
  3. per-call time of a 4 KiB get(out=) vs a C loop of tw_get, the call the
     binding makes (build/bench/bench_get_loop)                  [<= 2 us more]
     This one alternates SMALL_ROUNDS blocks of SMALL_COUNT calls and also
     reports the fastest block of each side: on a loaded machine the
     minimum is the closest to the calls' own cost.

Usage: PYTHONPATH=build/python python3 bench/bench_python.py --build build
       [--server HOST:PORT] [--rounds 5] [--json]
Without --server it starts its own tensorwired (--fabric none, loopback).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import tensorwire


def start_server(build):
    log = tempfile.NamedTemporaryFile(prefix="tw-pybench.", delete=False)
    p = subprocess.Popen([os.path.join(build, "tensorwired"), "--listen", "127.0.0.1:0",
                          "--fabric", "none"], stdout=log, stderr=subprocess.STDOUT)
    for _ in range(400):
        with open(log.name) as f:
            m = re.search(r"listening on (\S+:\d+)", f.read())
        if m:
            return p, m.group(1)
        time.sleep(0.05)
    p.kill()
    raise SystemExit("tensorwired did not start")


def c_bench(build, addr, *args):
    out = subprocess.run([os.path.join(build, "tensorwire"), "-s", addr, "bench", "--op", "get",
                          "--rounds", "1", "--json", *args], capture_output=True, text=True,
                         check=True, timeout=600).stdout
    return json.loads(out)


def c_loop(build, addr, name, count):
    out = subprocess.run([os.path.join(build, "bench", "bench_get_loop"), addr, name, str(count),
                          "1"], capture_output=True, text=True, check=True, timeout=600).stdout
    return json.loads(out)["per_call_us"][0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--server")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--big-count", type=int, default=4, help="256 MiB gets per round")
    ap.add_argument("--blocks", type=int, default=40960)
    ap.add_argument("--small-count", type=int, default=5000, help="4 KiB gets per block")
    ap.add_argument("--small-rounds", type=int, default=15)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    proc = None
    addr = a.server
    if not addr:
        proc, addr = start_server(a.build)
    try:
        tw = tensorwire.connect(addr, timeout=120)
        big = np.random.default_rng(1).integers(0, 255, 256 << 20, dtype=np.uint8)
        tw.put("pybench/big", big)
        out_big = np.empty_like(big)
        names = ["pybench/kv/%d" % i for i in range(a.blocks)]
        arena = np.zeros((a.blocks, 32 << 10), np.uint8)
        tw.put_many(zip(names, arena))  # rows of one array: zero copy too
        outs = list(np.empty_like(arena))
        # The C bench's pattern: items i -> tensor i % 64, buffer i % 64.
        bufs64 = list(np.empty((64, 32 << 10), np.uint8))
        names64 = [names[i % 64] for i in range(a.blocks)]
        outs64 = [bufs64[i % 64] for i in range(a.blocks)]
        small = np.arange(1024, dtype=np.float32)
        tw.put("pybench/small", small)
        out_small = np.empty_like(small)
        # Warm up every path once (page faults of the destinations included).
        tw.get("pybench/big", out=out_big)
        tw.get_many(names, out=outs)
        tw.get_many(names64, out=outs64)
        for _ in range(1000):
            tw.get("pybench/small", out=out_small)

        res = {"big_c": [], "big_cloop": [], "big_py": [], "many_c": [], "many_py": [], "many_distinct_py": [],
               "call_c_us": [], "call_py_us": []}
        for _ in range(a.rounds):
            r = c_bench(a.build, addr, "--size", "256Mi", "--count", str(a.big_count),
                        "--inflight", "1", "--warmup", "1")
            res["big_c"].append(r["bytes_per_s"])
            res["big_cloop"].append(big.nbytes / (c_loop(a.build, addr, "pybench/big", a.big_count) / 1e6))
            t0 = time.perf_counter()
            for _ in range(a.big_count):
                tw.get("pybench/big", out=out_big)
            res["big_py"].append(a.big_count * big.nbytes / (time.perf_counter() - t0))

            r = c_bench(a.build, addr, "--size", "32Ki", "--count", str(a.blocks),
                        "--inflight", "64", "--warmup", "64")
            res["many_c"].append(r["bytes_per_s"])
            t0 = time.perf_counter()
            tw.get_many(names64, out=outs64)
            res["many_py"].append(arena.nbytes / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            tw.get_many(names, out=outs)
            res["many_distinct_py"].append(arena.nbytes / (time.perf_counter() - t0))
        for _ in range(a.small_rounds):
            res["call_c_us"].append(c_loop(a.build, addr, "pybench/small", a.small_count))
            t0 = time.perf_counter()
            for _ in range(a.small_count):
                tw.get("pybench/small", out=out_small)
            res["call_py_us"].append((time.perf_counter() - t0) * 1e6 / a.small_count)
        assert np.array_equal(out_big, big)
        med = {k: statistics.median(v) for k, v in res.items()}
        summary = {
            "rounds": a.rounds,
            "get_256MiB_c_GBps": med["big_c"] / 1e9,
            "get_256MiB_py_GBps": med["big_py"] / 1e9,
            "get_256MiB_ratio": med["big_py"] / med["big_c"],
            "get_256MiB_c_tw_get_GBps": med["big_cloop"] / 1e9,
            "get_256MiB_ratio_vs_tw_get": med["big_py"] / med["big_cloop"],
            "get_many_32KiB_c_GBps": med["many_c"] / 1e9,
            "get_many_32KiB_py_GBps": med["many_py"] / 1e9,
            "get_many_ratio": med["many_py"] / med["many_c"],
            "get_many_distinct_py_GBps": med["many_distinct_py"] / 1e9,
            "get_4KiB_c_us": med["call_c_us"],
            "get_4KiB_py_us": med["call_py_us"],
            "get_4KiB_overhead_us": med["call_py_us"] - med["call_c_us"],
            "get_4KiB_c_min_us": min(res["call_c_us"]),
            "get_4KiB_py_min_us": min(res["call_py_us"]),
            "get_4KiB_overhead_min_us": min(res["call_py_us"]) - min(res["call_c_us"]),
            "raw": res,
        }
        tw.rm("pybench/big", "pybench/small")
        tw.rm(*names)
        tw.close()
    finally:
        if proc:
            proc.terminate()
            proc.wait(30)
    if a.json:
        print(json.dumps(summary))
        return
    print("get(out=) 256 MiB : C %.2f GB/s, Python %.2f GB/s, ratio %.3f (target >= 0.95)" % (
        summary["get_256MiB_c_GBps"], summary["get_256MiB_py_GBps"], summary["get_256MiB_ratio"]))
    print("                    vs a C tw_get loop %.2f GB/s: ratio %.3f" % (
        summary["get_256MiB_c_tw_get_GBps"], summary["get_256MiB_ratio_vs_tw_get"]))
    print("get_many 40960x32K: C %.2f GB/s, Python %.2f GB/s, ratio %.3f (target >= 0.9)" % (
        summary["get_many_32KiB_c_GBps"], summary["get_many_32KiB_py_GBps"], summary["get_many_ratio"]))
    print("  (40960 distinct tensors into distinct buffers: Python %.2f GB/s)" % (
        summary["get_many_distinct_py_GBps"]))
    print("get(out=) 4 KiB   : C %.2f us, Python %.2f us per call, +%.2f us (target <= 2)" % (
        summary["get_4KiB_c_us"], summary["get_4KiB_py_us"], summary["get_4KiB_overhead_us"]))
    print("                    fastest blocks: C %.2f us, Python %.2f us, +%.2f us" % (
        summary["get_4KiB_c_min_us"], summary["get_4KiB_py_min_us"], summary["get_4KiB_overhead_min_us"]))
    print("medians of %d (4 KiB: %d) alternating rounds" % (a.rounds, a.small_rounds))


if __name__ == "__main__":
    sys.exit(main())
