/*
 * Staging pipeline bandwidth against plain pinned cuMemcpy, in one run on
 * one GPU (not a test: docs/performance.md records its output).
 *
 *   bench_staging [SIZE_MiB [DEVICE]]      default 1024 MiB on device 0
 *
 * Baseline: one synchronous cuMemcpyDtoH / cuMemcpyHtoD of the whole
 * buffer into / from pinned host memory. Pipeline: the same bytes through
 * a staging pipe whose consumer / producer does nothing with the chunk
 * (the network's place), for a sweep of chunk sizes and depths, then the
 * default geometry with the running CRC32C. Each figure is the median of
 * 7 runs after one warm-up.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu/cuda.h"
#include "mem/staging.h"

#define RUNS 7

static const struct tw_cuda_api *cu;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[n / 2];
}

static int pipe_once(struct tw_staging_pool *pool, enum tw_staging_dir dir, CUdeviceptr dev,
                     size_t len, unsigned depth, unsigned flags)
{
    struct tw_mem_attr attr;
    struct tw_staging_pipe *p;
    char err[256];
    int rc = tw__memkind_cuda.query((uintptr_t)dev, len, &attr, err, sizeof(err));
    if (rc == 0)
        rc = tw__staging_begin(pool, dir, &tw__memkind_cuda, &attr, (uintptr_t)dev, len, depth,
                               flags, &p, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "staging: %s\n", err);
        return rc;
    }
    for (;;) {
        struct tw_staging_chunk c;
        rc = tw__staging_acquire(p, &c);
        if (rc == 1) {
            rc = tw__staging_release(p, &c);
            if (rc < 0)
                break;
            continue;
        }
        if (rc < 0 || (rc = tw__staging_complete(p)) != 0)
            break;
        if ((rc = tw__staging_wait(p, 1000)) < 0)
            break;
    }
    if (rc < 0)
        fprintf(stderr, "staging: %s\n", tw__staging_error(p));
    tw__staging_end(p);
    return rc < 0 ? rc : 0;
}

static double gbps(size_t len, double s)
{
    return (double)len / s / 1e9;
}

static double bench_pipe(int device, CUdeviceptr dev, size_t len, size_t chunk, unsigned depth,
                         enum tw_staging_dir dir, unsigned flags)
{
    struct tw_staging_pool *pool;
    char err[256];
    unsigned slots = depth < TW_STAGING_DEFAULT_SLOTS ? TW_STAGING_DEFAULT_SLOTS : depth;
    if (tw__staging_pool_create(&tw__memkind_cuda_async, device, chunk, slots, &pool, err,
                                sizeof(err)) < 0) {
        fprintf(stderr, "pool: %s\n", err);
        exit(1);
    }
    double t[RUNS];
    pipe_once(pool, dir, dev, len, depth, flags);
    for (int i = 0; i < RUNS; i++) {
        double t0 = now();
        if (pipe_once(pool, dir, dev, len, depth, flags) < 0)
            exit(1);
        t[i] = now() - t0;
    }
    tw__staging_pool_destroy(pool);
    return gbps(len, median(t, RUNS));
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 1024;
    int device = argc > 2 ? atoi(argv[2]) : 0;
    size_t len = mib << 20;
    char err[256];
    if (tw__cuda_get(&cu, err, sizeof(err)) != 0 || tw__cuda_device_count() <= device) {
        fprintf(stderr, "no GPU: %s\n", err);
        return 77;
    }
    if (tw__cuda_use_device(device, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    CUdeviceptr dev;
    void *pinned;
    if (cu->cuMemAlloc(&dev, len) != CUDA_SUCCESS ||
        cu->cuMemHostAlloc(&pinned, len, CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS) {
        fprintf(stderr, "cannot allocate %zu MiB\n", mib);
        return 1;
    }
    memset(pinned, 0x5a, len);
    cu->cuMemcpyHtoD(dev, pinned, len);
    double td[RUNS], th[RUNS];
    cu->cuMemcpyDtoH(pinned, dev, len);
    for (int i = 0; i < RUNS; i++) {
        double t0 = now();
        cu->cuMemcpyDtoH(pinned, dev, len);
        td[i] = now() - t0;
        t0 = now();
        cu->cuMemcpyHtoD(dev, pinned, len);
        th[i] = now() - t0;
    }
    double base_d2h = gbps(len, median(td, RUNS)), base_h2d = gbps(len, median(th, RUNS));
    printf("cuda:%d, %zu MiB, median of %d\n", device, mib, RUNS);
    printf("plain pinned cuMemcpy: D2H %.1f GB/s, H2D %.1f GB/s\n", base_d2h, base_h2d);
    printf("%-10s %-6s %-14s %-14s\n", "chunk", "depth", "D2H GB/s (x)", "H2D GB/s (x)");
    const size_t chunks[] = {(size_t)1 << 20, (size_t)2 << 20, (size_t)4 << 20, (size_t)8 << 20,
                             (size_t)16 << 20};
    const unsigned depths[] = {2, 3, 4, 8};
    for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
        for (size_t j = 0; j < sizeof(depths) / sizeof(depths[0]); j++) {
            double d = bench_pipe(device, dev, len, chunks[i], depths[j], TW_STAGING_TO_HOST, 0);
            double h = bench_pipe(device, dev, len, chunks[i], depths[j], TW_STAGING_TO_DEVICE, 0);
            printf("%4zu MiB   %-6u %5.1f (%.2fx)   %5.1f (%.2fx)\n", chunks[i] >> 20, depths[j], d,
                   d / base_d2h, h, h / base_h2d);
        }
    }
    double d = bench_pipe(device, dev, len, TW_STAGING_DEFAULT_CHUNK, TW_STAGING_DEFAULT_DEPTH,
                          TW_STAGING_TO_HOST, 0);
    double h = bench_pipe(device, dev, len, TW_STAGING_DEFAULT_CHUNK, TW_STAGING_DEFAULT_DEPTH,
                          TW_STAGING_TO_DEVICE, 0);
    printf("default (%zu MiB x %u): D2H %.1f GB/s (%.2fx), H2D %.1f GB/s (%.2fx)\n",
           TW_STAGING_DEFAULT_CHUNK >> 20, TW_STAGING_DEFAULT_DEPTH, d, d / base_d2h, h,
           h / base_h2d);
    d = bench_pipe(device, dev, len, TW_STAGING_DEFAULT_CHUNK, TW_STAGING_DEFAULT_DEPTH,
                   TW_STAGING_TO_HOST, TW_STAGING_CRC);
    h = bench_pipe(device, dev, len, TW_STAGING_DEFAULT_CHUNK, TW_STAGING_DEFAULT_DEPTH,
                   TW_STAGING_TO_DEVICE, TW_STAGING_CRC);
    printf("default with CRC32C: D2H %.1f GB/s (%.2fx), H2D %.1f GB/s (%.2fx)\n", d, d / base_d2h,
           h, h / base_h2d);
    cu->cuMemFreeHost(pinned);
    cu->cuMemFree(dev);
    return 0;
}
