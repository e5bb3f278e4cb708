/*
 * Helpers shared by the GPU building-block tests (issue #11): run a case on
 * every visible GPU or skip with 77, and a descriptor for a store test
 * (deterministic bytes: tw_test_fill in tw_test.h). Header-only, on top of tw_test.h.
 */
#ifndef TW_TEST_GPU_H
#define TW_TEST_GPU_H

#include <stdint.h>
#include <string.h>

#include "gpu/cuda.h"
#include "proto/proto.h"
#include "tw_test.h"

/* Runs fn(cu, ordinal) for every visible CUDA device, each counted as a
 * case; exits 77 (SKIPPED) when there is no driver or no device. */
static inline void tw_test_each_gpu(const char *name,
                                    void (*fn)(const struct tw_cuda_api *cu, int ordinal))
{
    const struct tw_cuda_api *cu;
    char err[256];
    if (tw__cuda_get(&cu, err, sizeof(err)) != 0)
        TW_SKIP("%s", err);
    int n = tw__cuda_device_count();
    if (n == 0)
        TW_SKIP("no CUDA device visible");
    for (int i = 0; i < n; i++) {
        fprintf(stderr, "case %s(cuda:%d)\n", name, i);
        fn(cu, i);
        tw_test_cases_run++;
    }
}

/* A one-dimensional u8 descriptor of `bytes` bytes named name on tag (both
 * strings must outlive d). */
static inline void tw_test_desc_u8(struct tw_descriptor *d, const char *name, const char *tag,
                                   uint64_t bytes)
{
    memset(d, 0, sizeof(*d));
    d->dtype = TW_DTYPE_U8;
    d->ndim = 1;
    d->shape[0] = bytes;
    d->byte_length = bytes;
    d->name.ptr = (const uint8_t *)name;
    d->name.len = (uint32_t)strlen(name);
    d->device_tag.ptr = (const uint8_t *)tag;
    d->device_tag.len = (uint32_t)strlen(tag);
}

#endif
