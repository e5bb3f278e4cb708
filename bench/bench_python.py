#!/usr/bin/env python3
"""The Python binding against the C library, in the same run, same server.

Three comparisons (issue #14 targets in brackets), each over ROUNDS rounds
that alternate C and Python so drift on a shared machine hits both; the
median round of each side is reported:

  1. get(name, out=t) of 256 MiB into a preallocated array vs
     `tensorwire bench --op get --size 256Mi --inflight 1`     [>= 0.95x]
     and vs a C loop of tw_get (bench_get_loop), the very call the binding
     makes (tensorwire bench goes through tw_batch_get)
  2. get_many of 40,960 x 32 KiB blocks, 64 in flight on both sides
     [>= 0.9x], two rows:
     a. the headline: the stacked get_many(names, out=T), 40,960 distinct
        tensors into the rows of ONE 1.25 GiB array T (the KV-cache case,
        one export of T per call), vs build/bench/bench_batch_get: one
        tw_batch_get of the same 40,960 distinct tensors into the rows of
        one 1.25 GiB buffer (same memory pattern on both sides);
     b. the list form get_many(names64, out=[64 recycled row views]) vs
        `tensorwire bench --op get --size 32Ki --count 40960 --inflight 64`,
        whose items cycle over 64 tensors and 64 buffers (cache-warm on both
        ends); the list form into T's 40,960 distinct rows is printed too,
        against the same C batch as (a).
     No export is cached across calls: every Python call exports its
     destinations (and builds its item array) again.
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
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import tensorwire


def die_with_parent():
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def start_server(build):
    log = tempfile.NamedTemporaryFile(prefix="tw-pybench.", delete=False)
    # Its own session: a `timeout` that signals our process group must not
    # stop the server while we report the rounds done; it still dies with us
    # (PR_SET_PDEATHSIG).
    p = subprocess.Popen([os.path.join(build, "tensorwired"), "--listen", "127.0.0.1:0",
                          "--fabric", "none"], stdout=log, stderr=subprocess.STDOUT,
                         start_new_session=True, preexec_fn=die_with_parent)
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


class Stop(Exception):
    """SIGTERM (e.g. from `timeout`) during the rounds: report those done."""


stopping = False


def on_term(signum, frame):
    global stopping
    stopping = True
    raise Stop()


def c_arena(build, addr, prefix, count, size):
    """(wall, CPU) seconds of one tw_batch_get of count distinct tensors into the rows of
    one buffer (bench_batch_get: fresh process, buffer written and one
    untimed batch first)."""
    out = subprocess.run([os.path.join(build, "bench", "bench_batch_get"), addr, prefix, str(count),
                          str(size), "1"], capture_output=True, text=True, check=True,
                         timeout=600).stdout
    r = json.loads(out)
    return r["seconds"][0], r["cpu_seconds"][0]


def cpu_s():
    """This process's user + system CPU seconds so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--server")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--big-count", type=int, default=4, help="256 MiB gets per round")
    ap.add_argument("--blocks", type=int, default=40960)
    ap.add_argument("--small-count", type=int, default=5000, help="4 KiB gets per block")
    ap.add_argument("--small-rounds", type=int, default=15)
    ap.add_argument("--time-budget", type=float, default=0,
                    help="seconds for the whole run, setup included (0: no limit): the 4 KiB "
                         "blocks run first, then rounds of 1. and 2. until --rounds or until the "
                         "next would pass the budget, but never fewer than 5")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    t_prog = time.monotonic()
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
        # Row i's first 8 bytes hold i, so a row in the wrong place shows.
        arena = np.zeros((a.blocks, 32 << 10), np.uint8)
        arena.view(np.int64)[:, 0] = np.arange(a.blocks)
        tw.put_many(names, arena)  # the stacked put: one export of arena
        del arena
        kv = np.empty((a.blocks, 32 << 10), np.uint8)  # the stacked destination T
        outs = list(kv)  # the list form into the same distinct rows
        # The C bench's pattern: items i -> tensor i % 64, buffer i % 64.
        bufs64 = list(np.empty((64, 32 << 10), np.uint8))
        names64 = [names[i % 64] for i in range(a.blocks)]
        outs64 = [bufs64[i % 64] for i in range(a.blocks)]
        small = np.arange(1024, dtype=np.float32)
        tw.put("pybench/small", small)
        out_small = np.empty_like(small)
        # Warm up every path once (page faults of the destinations included).
        tw.get("pybench/big", out=out_big)
        tw.get_many(names, out=kv)
        tw.get_many(names, out=outs)
        tw.get_many(names64, out=outs64)
        for _ in range(1000):
            tw.get("pybench/small", out=out_small)

        res = {"big_c": [], "big_cloop": [], "big_py": [], "many_c": [], "many_py": [],
               "arena_c": [], "arena_py": [], "arena_list_py": [], "arena_c_cpu_ms": [],
               "arena_py_cpu_ms": [],
               "call_c_us": [], "call_py_us": []}
        t_start = time.monotonic()
        for _ in range(a.small_rounds):
            res["call_c_us"].append(c_loop(a.build, addr, "pybench/small", a.small_count))
            t0 = time.perf_counter()
            for _ in range(a.small_count):
                tw.get("pybench/small", out=out_small)
            res["call_py_us"].append((time.perf_counter() - t0) * 1e6 / a.small_count)
        rounds, t_rounds, interrupted = 0, time.monotonic(), False
        signal.signal(signal.SIGTERM, on_term)
        try:
            while rounds < a.rounds:
                now = time.monotonic()
                # Stop when one more round (at the mean so far) would pass the budget.
                if a.time_budget and rounds >= 5 and \
                        now - t_prog + (now - t_rounds) / rounds > a.time_budget:
                    break
                rounds += 1
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
                res["many_py"].append(kv.nbytes / (time.perf_counter() - t0))

                wall, cpu = c_arena(a.build, addr, "pybench/kv/", a.blocks, 32 << 10)
                res["arena_c"].append(kv.nbytes / wall)
                res["arena_c_cpu_ms"].append(cpu * 1e3)
                c0, t0 = cpu_s(), time.perf_counter()
                tw.get_many(names, out=kv)
                res["arena_py"].append(kv.nbytes / (time.perf_counter() - t0))
                res["arena_py_cpu_ms"].append((cpu_s() - c0) * 1e3)
                t0 = time.perf_counter()
                tw.get_many(names, out=outs)
                res["arena_list_py"].append(kv.nbytes / (time.perf_counter() - t0))
        except (Stop, subprocess.CalledProcessError):
            # A C side killed by the same signal may fail before ours runs.
            if not stopping:
                raise
            interrupted = True
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        # A round cut short leaves some lists one longer: keep whole rounds.
        for k in ("big_c", "big_cloop", "big_py", "many_c", "many_py", "arena_c", "arena_py",
                  "arena_list_py", "arena_c_cpu_ms", "arena_py_cpu_ms"):
            del res[k][min(len(res[x]) for x in ("big_c", "arena_list_py")):]
        if not res["arena_list_py"]:
            raise SystemExit("bench_python: no round finished")
        assert np.array_equal(out_big, big)
        # Untimed: every row of T really came from its own tensor.
        kv[:, :8] = 0xff
        tw.get_many(names, out=kv)
        assert np.array_equal(kv.view(np.int64)[:, 0], np.arange(a.blocks))
        med = {k: statistics.median(v) for k, v in res.items()}
        summary = {
            "rounds": len(res["arena_list_py"]),
            "interrupted": interrupted,
            "seconds": time.monotonic() - t_start,
            "get_256MiB_c_GBps": med["big_c"] / 1e9,
            "get_256MiB_py_GBps": med["big_py"] / 1e9,
            "get_256MiB_ratio": med["big_py"] / med["big_c"],
            "get_256MiB_c_tw_get_GBps": med["big_cloop"] / 1e9,
            "get_256MiB_ratio_vs_tw_get": med["big_py"] / med["big_cloop"],
            "get_many_stacked_c_GBps": med["arena_c"] / 1e9,
            "get_many_stacked_py_GBps": med["arena_py"] / 1e9,
            "get_many_stacked_ratio": med["arena_py"] / med["arena_c"],
            "get_many_stacked_c_cpu_ms": med["arena_c_cpu_ms"],
            "get_many_stacked_py_cpu_ms": med["arena_py_cpu_ms"],
            "get_many_list_distinct_py_GBps": med["arena_list_py"] / 1e9,
            "get_many_list_distinct_ratio": med["arena_list_py"] / med["arena_c"],
            "get_many_32KiB_c_GBps": med["many_c"] / 1e9,
            "get_many_32KiB_py_GBps": med["many_py"] / 1e9,
            "get_many_ratio": med["many_py"] / med["many_c"],
            "get_4KiB_c_us": med["call_c_us"],
            "get_4KiB_py_us": med["call_py_us"],
            "get_4KiB_overhead_us": med["call_py_us"] - med["call_c_us"],
            "get_4KiB_c_min_us": min(res["call_c_us"]),
            "get_4KiB_py_min_us": min(res["call_py_us"]),
            "get_4KiB_overhead_min_us": min(res["call_py_us"]) - min(res["call_c_us"]),
            "raw": res,
        }
        if not proc:  # our own server goes away with its tensors
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
    print("get_many 40960x32K, stacked out=T (distinct tensors, rows of one 1.25 GiB array):")
    print("  C %.2f GB/s, Python %.2f GB/s, ratio %.3f (target >= 0.9)" % (
        summary["get_many_stacked_c_GBps"], summary["get_many_stacked_py_GBps"],
        summary["get_many_stacked_ratio"]))
    print("  C: bench/bench_batch_get ADDR pybench/kv/ %d 32768 1 (one tw_batch_get)" % a.blocks)
    print("  client CPU time per batch (user + system): C %.0f ms, Python %.0f ms" % (
        summary["get_many_stacked_c_cpu_ms"], summary["get_many_stacked_py_cpu_ms"]))
    print("  list form out=[T[0], T[1], ...] into the same rows: %.2f GB/s, ratio %.3f" % (
        summary["get_many_list_distinct_py_GBps"], summary["get_many_list_distinct_ratio"]))
    print("get_many 40960x32K, list form over 64 tensors/buffers: C %.2f GB/s, Python %.2f GB/s,"
          " ratio %.3f" % (summary["get_many_32KiB_c_GBps"], summary["get_many_32KiB_py_GBps"],
                           summary["get_many_ratio"]))
    print("  C: tensorwire bench --op get --size 32Ki --count %d --inflight 64 --warmup 64" % a.blocks)
    print("get(out=) 4 KiB   : C %.2f us, Python %.2f us per call, +%.2f us (target <= 2)" % (
        summary["get_4KiB_c_us"], summary["get_4KiB_py_us"], summary["get_4KiB_overhead_us"]))
    print("                    fastest blocks: C %.2f us, Python %.2f us, +%.2f us" % (
        summary["get_4KiB_c_min_us"], summary["get_4KiB_py_min_us"], summary["get_4KiB_overhead_min_us"]))
    print("medians of %d (4 KiB: %d) alternating rounds, %.0f s%s" % (
        summary["rounds"], a.small_rounds, summary["seconds"],
        " (cut short by SIGTERM)" if summary["interrupted"] else ""))


if __name__ == "__main__":
    sys.exit(main())
