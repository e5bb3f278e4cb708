/*
 * Small helpers shared by the benchmark programs under bench/: a monotonic
 * clock in seconds and the median of a sample. Header-only: benches that
 * link only the public library cannot use src/common.
 */
#ifndef TW_BENCH_UTIL_H
#define TW_BENCH_UTIL_H

#include <stdlib.h>
#include <time.h>

static inline double tw_bench_now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static inline int tw_bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Sorts v[0..n) in place and returns its median (n >= 1). */
static inline double tw_bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), tw_bench_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#endif
