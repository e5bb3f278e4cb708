#!/usr/bin/env python3
"""Summarises bench/rdma_threshold.sh output: per op, size and plane the
median MB/s over the reps, and the median of the per-rep ratios to the
inline run ("none") of the same rep and size. Markdown table on stdout.

    python3 bench/rdma_threshold_summary.py sweep.txt
"""
import statistics
import sys
from collections import defaultdict


def main(path):
    rate = defaultdict(dict)  # (op, size, plane) -> {rep: MB/s}
    moved = defaultdict(set)  # (op, size, plane) -> data planes seen
    order = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 7:
                continue
            rep, op, size, plane, dp, mbs, _p50 = parts
            key = (op, size, plane)
            if key not in rate:
                order.append(key)
            rate[key][rep] = float(mbs)
            moved[key].add(dp.replace("_", " "))
    print("| op | size | --fabric | moved by | MB/s (median) | x inline (median of per-rep ratios) |")
    print("|---|---|---|---|---|---|")
    for op, size, plane in order:
        runs = rate[(op, size, plane)]
        base = rate.get((op, size, "none"), {})
        ratios = [runs[r] / base[r] for r in runs if base.get(r)]
        ratio = "%.2f" % statistics.median(ratios) if ratios else "-"
        print("| %s | %s | %s | %s | %.0f | %s |" % (
            op, size, plane, ", ".join(sorted(moved[(op, size, plane)])),
            statistics.median(runs.values()), ratio))


if __name__ == "__main__":
    main(sys.argv[1])
