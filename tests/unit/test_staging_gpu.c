/*
 * Staging pipeline on real GPUs (exit 77 without a CUDA driver or device):
 * device->host and host->device through the pinned pool, byte-exact with
 * the CRC32C, at 1 B, 4 KiB, chunk-1, chunk+1, an odd size and 1 GiB (when
 * the device has room), on every visible GPU; and a real CUDA error injected
 * mid-pipeline (a copy given an invalid device address at chunk k): the
 * transfer fails with the driver's reason, every pinned slot goes back to
 * the pool, and the next transfer on the same pool succeeds. And
 * tw__cuda_copy_batch's copies both ways, byte-exact.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cuda.h"
#include "mem/staging.h"
#include "proto/proto.h"
#include "tw_test.h"
#include "tw_test_gpu.h"

static const struct tw_cuda_api *cu;

/* Copy k (counted per pipe through this wrapper) gets device address 0. */
static long inject_at = -1, copies_seen;

static int bad_copy_to_host(void *stream, void *dst, uintptr_t src, size_t len,
                            const struct tw_mem_attr *attr, char *err, size_t errlen)
{
    if (copies_seen++ == inject_at)
        src = 0;
    return tw__memkind_cuda_async.copy_to_host_async(stream, dst, src, len, attr, err, errlen);
}

static int bad_copy_from_host(void *stream, uintptr_t dst, const void *src, size_t len,
                              const struct tw_mem_attr *attr, char *err, size_t errlen)
{
    if (copies_seen++ == inject_at)
        dst = 0;
    return tw__memkind_cuda_async.copy_from_host_async(stream, dst, src, len, attr, err, errlen);
}

static struct tw_memkind_async_ops failing_async;
static struct tw_memkind_ops failing_kind;

static int run_pipe(struct tw_staging_pool *pool, const struct tw_memkind_ops *kind,
                    enum tw_staging_dir dir, CUdeviceptr dev, uint8_t *host, size_t len,
                    uint32_t *crc, char *why, size_t whylen)
{
    struct tw_mem_attr attr;
    char err[256];
    int rc = kind->query((uintptr_t)dev, len, &attr, err, sizeof(err));
    TW_ASSERT_OK(rc);
    struct tw_staging_pipe *p;
    rc = tw__staging_begin(pool, dir, kind, &attr, (uintptr_t)dev, len, TW_STAGING_DEFAULT_DEPTH,
                           TW_STAGING_CRC, &p, err, sizeof(err));
    TW_ASSERT_OK(rc);
    for (;;) {
        struct tw_staging_chunk c;
        rc = tw__staging_acquire(p, &c);
        if (rc < 0)
            break;
        if (rc == 1) {
            if (dir == TW_STAGING_TO_HOST)
                memcpy(host + c.offset, c.ptr, c.len);
            else
                memcpy(c.ptr, host + c.offset, c.len);
            rc = tw__staging_release(p, &c);
            if (rc < 0)
                break;
            continue;
        }
        rc = tw__staging_complete(p);
        if (rc != 0)
            break;
        rc = tw__staging_wait(p, 1000);
        if (rc < 0)
            break;
    }
    snprintf(why, whylen, "%s", tw__staging_error(p));
    *crc = tw__staging_crc(p);
    tw__staging_end(p);
    return rc < 0 ? rc : 0;
}

static void test_device(const struct tw_cuda_api *cu_api, int ordinal)
{
    cu = cu_api;
    char err[256];
    TW_ASSERT_OK(tw__cuda_use_device(ordinal, err, sizeof(err)));
    uint64_t free_b = 0, total_b = 0;
    TW_ASSERT_OK(tw__cuda_mem_info(ordinal, &free_b, &total_b, err, sizeof(err)));
    fprintf(stderr, "cuda:%d: %llu of %llu bytes free\n", ordinal, (unsigned long long)free_b,
            (unsigned long long)total_b);
    const size_t chunk = TW_STAGING_DEFAULT_CHUNK;
    size_t big = (size_t)1 << 30;
    if (free_b < 3 * (uint64_t)big) {
        fprintf(stderr, "cuda:%d: too little free memory for the 1 GiB case; 64 MiB instead\n",
                ordinal);
        big = (size_t)64 << 20;
    }
    const size_t sizes[] = {1, 4096, chunk - 1, chunk + 1, 3 * chunk + 12345, big};
    struct tw_staging_pool *pool;
    TW_ASSERT_OK(tw__staging_pool_create(&tw__memkind_cuda_async, ordinal, chunk,
                                         TW_STAGING_DEFAULT_SLOTS, &pool, err, sizeof(err)));
    uint8_t *src = malloc(big), *back = malloc(big);
    TW_ASSERT(src && back);
    CUdeviceptr d1, d2;
    TW_ASSERT_EQ(cu->cuMemAlloc(&d1, big), CUDA_SUCCESS);
    TW_ASSERT_EQ(cu->cuMemAlloc(&d2, big), CUDA_SUCCESS);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t n = sizes[i];
        uint32_t crc;
        char why[256];
        tw_test_fill(src, n, (uint32_t)n);
        uint32_t want = tw__crc32c(0, src, n);
        /* host -> device through the pipe, then device -> host through it. */
        TW_ASSERT_OK(run_pipe(pool, &tw__memkind_cuda, TW_STAGING_TO_DEVICE, d1, src, n, &crc, why,
                              sizeof(why)));
        TW_ASSERT_EQ(crc, want);
        memset(back, 0, n);
        TW_ASSERT_EQ(cu->cuMemcpyDtoH(back, d1, n), CUDA_SUCCESS);
        TW_ASSERT_MEM_EQ(back, src, n);
        TW_ASSERT_EQ(cu->cuMemcpyHtoD(d2, src, n), CUDA_SUCCESS);
        memset(back, 0, n);
        TW_ASSERT_OK(run_pipe(pool, &tw__memkind_cuda, TW_STAGING_TO_HOST, d2, back, n, &crc, why,
                              sizeof(why)));
        TW_ASSERT_EQ(crc, want);
        TW_ASSERT_MEM_EQ(back, src, n);
        TW_ASSERT_EQ(tw__staging_pool_free_slots(pool), TW_STAGING_DEFAULT_SLOTS);
        fprintf(stderr, "cuda:%d: %zu bytes both ways, crc %08x\n", ordinal, n, crc);
    }

    /* A real driver error at chunk 5 of 12, each direction. */
    failing_async = tw__memkind_cuda_async;
    failing_async.copy_to_host_async = bad_copy_to_host;
    failing_async.copy_from_host_async = bad_copy_from_host;
    failing_kind = tw__memkind_cuda;
    failing_kind.async = &failing_async;
    size_t n = 12 * chunk;
    tw_test_fill(src, n, 99);
    TW_ASSERT_EQ(cu->cuMemcpyHtoD(d2, src, n), CUDA_SUCCESS);
    for (int dir = TW_STAGING_TO_HOST; dir <= TW_STAGING_TO_DEVICE; dir++) {
        uint32_t crc;
        char why[256];
        copies_seen = 0;
        inject_at = 5;
        int rc = run_pipe(pool, &failing_kind, (enum tw_staging_dir)dir, d1, back, n, &crc, why,
                          sizeof(why));
        inject_at = -1;
        fprintf(stderr, "cuda:%d: injected failure (%s): %s -> %s\n", ordinal,
                dir == TW_STAGING_TO_HOST ? "to host" : "to device", tw_strerror_name(rc), why);
        TW_ASSERT(rc < 0);
        TW_ASSERT(strstr(why, "chunk 5") != NULL);
        TW_ASSERT_EQ(tw__staging_pool_free_slots(pool), TW_STAGING_DEFAULT_SLOTS);
        /* The context and the pool still work. */
        memset(back, 0, n);
        TW_ASSERT_OK(run_pipe(pool, &tw__memkind_cuda, TW_STAGING_TO_HOST, d2, back, n, &crc, why,
                              sizeof(why)));
        TW_ASSERT_MEM_EQ(back, src, n);
    }
    cu->cuMemFree(d1);
    cu->cuMemFree(d2);
    free(src);
    free(back);
    tw__staging_pool_destroy(pool);
}

/* tw__cuda_copy_batch (the queued small copies of the server and the
 * client): 200 blocks of odd sizes to the GPU and back in batches of 0, 1,
 * 7 and 64+ (more than one driver call), byte-exact. */
static void test_copy_batch(const struct tw_cuda_api *cu_api, int ordinal)
{
    enum { N = 200, BLK = 32768 + 13 };
    cu = cu_api;
    TW_ASSERT_OK(tw__cuda_use_device(ordinal, NULL, 0));
    CUdeviceptr d = 0;
    TW_ASSERT_EQ(cu->cuMemAlloc(&d, (size_t)N * BLK), CUDA_SUCCESS);
    uint8_t *pin = NULL, *back = NULL;
    TW_ASSERT_EQ(cu->cuMemHostAlloc((void **)&pin, (size_t)N * BLK, 0), CUDA_SUCCESS);
    TW_ASSERT_EQ(cu->cuMemHostAlloc((void **)&back, (size_t)N * BLK, 0), CUDA_SUCCESS);
    for (size_t i = 0; i < (size_t)N * BLK; i++)
        pin[i] = (uint8_t)(i * 31 + 7);
    CUstream s = NULL;
    TW_ASSERT_EQ(cu->cuStreamCreate(&s, CU_STREAM_DEFAULT), CUDA_SUCCESS);
    void *dst[N];
    const void *src[N];
    size_t len[N], done = 99;
    /* Block i is BLK - i bytes long at offset i * BLK. */
    for (int dir = 0; dir < 2; dir++) {
        for (int i = 0; i < N; i++) {
            void *dev = (void *)(uintptr_t)(d + (size_t)i * BLK);
            void *host = (dir ? back : pin) + (size_t)i * BLK;
            dst[i] = dir ? host : dev;
            src[i] = dir ? dev : host;
            len[i] = BLK - (size_t)i;
        }
        TW_ASSERT_OK(tw__cuda_copy_batch(ordinal, s, dst, src, len, 0, dir, &done, NULL, 0));
        TW_ASSERT_EQ_U64(done, 0);
        size_t at = 0, parts[] = {1, 7, 128, N - 136};
        for (int k = 0; k < 4; k++) {
            TW_ASSERT_OK(tw__cuda_copy_batch(ordinal, s, dst + at, src + at, len + at, parts[k],
                                             dir, &done, NULL, 0));
            TW_ASSERT_EQ_U64(done, parts[k]);
            at += parts[k];
        }
        TW_ASSERT_EQ(cu->cuStreamSynchronize(s), CUDA_SUCCESS);
    }
    for (int i = 0; i < N; i++)
        TW_ASSERT_MEM_EQ(back + (size_t)i * BLK, pin + (size_t)i * BLK, BLK - (size_t)i);
    fprintf(stderr, "  cuda:%d: %d batched copies each way byte-exact (%s)\n", ordinal, N,
            cu->cuMemcpyBatchAsync ? "cuMemcpyBatchAsync" : "one call per copy: driver < 12.8");
    cu->cuStreamDestroy(s);
    cu->cuMemFreeHost(pin);
    cu->cuMemFreeHost(back);
    cu->cuMemFree(d);
}

int main(void)
{
    tw_test_each_gpu("test_device", test_device);
    tw_test_each_gpu("test_copy_batch", test_copy_batch);
    TW_DONE();
}
