/*
 * Small helpers shared by the benchmark programs under bench/: a monotonic
 * clock in seconds, the median of a sample, connecting and a u8
 * descriptor; test bytes are tests/tw_fill.h's tw_test_fill. Header-only:
 * benches that link only the public library cannot use src/common.
 */
#ifndef TW_BENCH_UTIL_H
#define TW_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensorwire/client.h"
#include "tw_fill.h"

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

/* Connects with opts or prints why and exits 1: a bench has nothing to
 * measure without its server. */
static inline tw_client *tw_bench_connect(const char *addr, const struct tw_client_options *opts)
{
    tw_client *c;
    char err[512];
    if (tw_client_connect_error(addr, opts, &c, err, sizeof(err)) != 0) {
        fprintf(stderr, "connect %s: %s\n", addr, err);
        exit(1);
    }
    return c;
}

/* A one-dimensional u8 tensor of n bytes. */
static inline void tw_bench_u8_desc(struct tw_tensor_desc *d, size_t n)
{
    memset(d, 0, sizeof(*d));
    d->dtype = TW_U8;
    d->ndim = 1;
    d->shape[0] = n;
}

#endif
