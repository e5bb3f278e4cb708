/*
 * The raw libfabric baseline on CUDA memory shared by bench_gdr and
 * bench_gdr_client: a raw RDM endpoint pair (tools/raw_fabric.h, FI_HMEM
 * with FI_HMEM_CUDA) between a host buffer and a cuMemAlloc'd buffer of n
 * bytes on GPU `ordinal`; the GPU buffer is the target (remote) side, or,
 * with local_cuda, the initiator's (local) side.
 */
#ifndef TW_BENCH_RAW_CUDA_H
#define TW_BENCH_RAW_CUDA_H

#include <stdint.h>
#include <stdio.h>

#include "gpu/cuda.h"
#include "tools/raw_fabric.h"

/* Opens the pair on provider prov with host buffer src (n bytes). Returns
 * 0 with *r, *dbuf and *cu set (release with tw_bench_raw_cuda_close), or
 * -1 after printing why (nothing to release). */
static inline int tw_bench_raw_cuda_open(const char *prov, void *src, size_t n, int ordinal,
                                         int local_cuda, const struct tw_cuda_api **cu,
                                         CUdeviceptr *dbuf, struct tw_raw_fabric **r)
{
    char err[512] = "";
    *dbuf = 0;
    if (ordinal < 0 || tw__cuda_get(cu, err, sizeof(err)) < 0 ||
        tw__cuda_use_device(ordinal, err, sizeof(err)) < 0 || (*cu)->cuMemAlloc(dbuf, n) != 0) {
        printf("raw loop: no CUDA buffer (%s)\n", ordinal < 0 ? "not a cuda device" : err);
        return -1;
    }
    void *d = (void *)(uintptr_t)*dbuf;
    int rc = local_cuda
                 ? tw_raw_fabric_open_cuda(prov, d, ordinal, n, src, -1, r, err, sizeof(err))
                 : tw_raw_fabric_open_cuda(prov, src, -1, n, d, ordinal, r, err, sizeof(err));
    if (rc != 0) {
        printf("raw loop on CUDA memory: %s\n", err);
        (*cu)->cuMemFree(*dbuf);
        return -1;
    }
    return 0;
}

static inline void tw_bench_raw_cuda_close(const struct tw_cuda_api *cu, CUdeviceptr dbuf,
                                           struct tw_raw_fabric *r)
{
    tw_raw_fabric_close(r);
    cu->cuMemFree(dbuf);
}

#endif
