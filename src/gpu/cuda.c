/*
 * CUDA driver loader. One pthread_once per process: the table is filled
 * before anyone sees it and never written again, so readers need no lock.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "gpu/cuda.h"
#include "tensorwire/error.h"

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static struct tw_cuda_api api_table;
static int load_status = TW_EDEVICE;
static char load_reason[256] = "CUDA driver not loaded";

/* Primary contexts retained per device; retained once, kept for the process. */
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext primary_ctx[TW_CUDA_MAX_DEVICES];

static void load_driver(void)
{
    /* RTLD_NODELETE would not help: we never dlclose on success, and on
     * failure nothing from the library is referenced any more. */
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        snprintf(load_reason, sizeof(load_reason),
                 "no CUDA driver: dlopen(libcuda.so.1) failed: %s", why ? why : "unknown");
        return;
    }
#define TW_CUDA_RESOLVE(field, sym, ret, params)                                                   \
    *(void **)&api_table.field = dlsym(lib, sym);                                                  \
    if (!api_table.field) {                                                                        \
        snprintf(load_reason, sizeof(load_reason), "CUDA driver too old: libcuda.so.1 lacks %s",   \
                 sym);                                                                             \
        goto out_close_lib;                                                                        \
    }
    TW_CUDA_SYMBOLS(TW_CUDA_RESOLVE)
#undef TW_CUDA_RESOLVE
#define TW_CUDA_RESOLVE_OPTIONAL(field, sym, ret, params)                                          \
    *(void **)&api_table.field = dlsym(lib, sym);
    TW_CUDA_OPTIONAL_SYMBOLS(TW_CUDA_RESOLVE_OPTIONAL)
#undef TW_CUDA_RESOLVE_OPTIONAL

    CUresult r = api_table.cuInit(0);
    if (r != CUDA_SUCCESS) {
        char buf[128];
        snprintf(load_reason, sizeof(load_reason), "cuInit failed: %s",
                 tw__cuda_strerror(r, buf, sizeof(buf)));
        goto out_close_lib;
    }
    if (api_table.cuDriverGetVersion(&api_table.driver_version) != CUDA_SUCCESS)
        api_table.driver_version = 0;
    load_status = 0;
    snprintf(load_reason, sizeof(load_reason), "CUDA driver %d loaded", api_table.driver_version);
    return;

out_close_lib:
    memset(&api_table, 0, sizeof(api_table));
    dlclose(lib);
}

int tw__cuda_get(const struct tw_cuda_api **api, char *err, size_t errlen)
{
    pthread_once(&load_once, load_driver);
    if (load_status != 0) {
        if (err && errlen)
            snprintf(err, errlen, "%s", load_reason);
        *api = NULL;
        return load_status;
    }
    *api = &api_table;
    return 0;
}

const char *tw__cuda_strerror(CUresult r, char *buf, size_t len)
{
    const char *name = NULL, *text = NULL;
    /* Only usable once the symbols resolved; before that print the number. */
    if (api_table.cuGetErrorName)
        api_table.cuGetErrorName(r, &name);
    if (api_table.cuGetErrorString)
        api_table.cuGetErrorString(r, &text);
    snprintf(buf, len, "%s (%d%s%s)", name ? name : "CUresult", r, text ? ": " : "",
             text ? text : "");
    return buf;
}

int tw__cuda_to_err(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS:
        return 0;
    case CUDA_ERROR_OUT_OF_MEMORY:
        return -ENOMEM;
    case CUDA_ERROR_INVALID_VALUE:
        return TW_EINVAL;
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
        return TW_EDEVICE;
    default:
        return TW_EINTERNAL;
    }
}

int tw__cuda_fail(CUresult r, char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        char what[256], buf[128];
        va_list ap;
        va_start(ap, fmt);
        tw__errbuf_vset(what, sizeof(what), fmt, ap);
        va_end(ap);
        tw__errbuf_set(err, errlen, "%s: %s", what, tw__cuda_strerror(r, buf, sizeof(buf)));
    }
    return tw__cuda_to_err(r);
}

int tw__cuda_enter(int ordinal, const struct tw_cuda_api **api, char *err, size_t errlen)
{
    int rc = tw__cuda_get(api, err, errlen);
    if (rc == 0)
        rc = tw__cuda_use_device(ordinal, err, errlen);
    return rc;
}

int tw__cuda_use_device(int ordinal, char *err, size_t errlen)
{
    const struct tw_cuda_api *cu;
    int rc = tw__cuda_get(&cu, err, errlen);
    if (rc)
        return rc;
    if (ordinal < 0 || ordinal >= TW_CUDA_MAX_DEVICES) {
        if (err && errlen)
            snprintf(err, errlen, "CUDA device ordinal %d out of range", ordinal);
        return TW_EINVAL;
    }
    pthread_mutex_lock(&ctx_lock);
    CUcontext ctx = primary_ctx[ordinal];
    if (!ctx) {
        CUdevice dev;
        CUresult r = cu->cuDeviceGet(&dev, ordinal);
        if (r == CUDA_SUCCESS)
            r = cu->cuDevicePrimaryCtxRetain(&ctx, dev);
        if (r != CUDA_SUCCESS) {
            pthread_mutex_unlock(&ctx_lock);
            return tw__cuda_fail(r, err, errlen, "CUDA device %d: primary context", ordinal);
        }
        primary_ctx[ordinal] = ctx;
    }
    pthread_mutex_unlock(&ctx_lock);
    CUresult r = cu->cuCtxSetCurrent(ctx);
    if (r != CUDA_SUCCESS)
        return tw__cuda_fail(r, err, errlen, "cuCtxSetCurrent(device %d)", ordinal);
    return 0;
}

int tw__cuda_device_count(void)
{
    const struct tw_cuda_api *cu;
    int n = 0;
    if (tw__cuda_get(&cu, NULL, 0) != 0)
        return 0;
    if (cu->cuDeviceGetCount(&n) != CUDA_SUCCESS || n < 0)
        return 0;
    return n < TW_CUDA_MAX_DEVICES ? n : TW_CUDA_MAX_DEVICES;
}

int tw__cuda_scratch_alloc(int ordinal, size_t len, void **out, char *err, size_t errlen)
{
    const struct tw_cuda_api *cu;
    *out = NULL;
    int rc = tw__cuda_enter(ordinal, &cu, err, errlen);
    if (rc)
        return rc;
    CUdeviceptr p = 0;
    CUresult r = cu->cuMemAlloc(&p, len);
    if (r != CUDA_SUCCESS)
        return tw__cuda_fail(r, err, errlen, "cuMemAlloc(%zu) on cuda:%d", len, ordinal);
    *out = (void *)(uintptr_t)p;
    return 0;
}

void tw__cuda_scratch_free(int ordinal, void *p)
{
    const struct tw_cuda_api *cu;
    if (p && tw__cuda_enter(ordinal, &cu, NULL, 0) == 0)
        cu->cuMemFree((CUdeviceptr)(uintptr_t)p);
}

int tw__cuda_mem_info(int ordinal, uint64_t *free_bytes, uint64_t *total_bytes, char *err,
                      size_t errlen)
{
    const struct tw_cuda_api *cu;
    int rc = tw__cuda_enter(ordinal, &cu, err, errlen);
    if (rc)
        return rc;
    size_t f = 0, t = 0;
    CUresult r = cu->cuMemGetInfo(&f, &t);
    if (r != CUDA_SUCCESS)
        return tw__cuda_fail(r, err, errlen, "cuMemGetInfo(device %d)", ordinal);
    *free_bytes = f;
    *total_bytes = t;
    return 0;
}

int tw__cuda_settle_writes(int ordinal, int ipc_copies, int flush, char *err, size_t errlen)
{
    const struct tw_cuda_api *cu;
    if (!ipc_copies && !flush)
        return 0;
    int rc = tw__cuda_enter(ordinal, &cu, err, errlen);
    if (rc < 0)
        return rc;
    CUresult r;
    if (ipc_copies && (r = cu->cuStreamSynchronize(TW_CU_STREAM_LEGACY)) != CUDA_SUCCESS)
        return tw__cuda_fail(r, err, errlen, "waiting for shm's CUDA IPC copies on cuda:%d",
                             ordinal);
    if (!flush || !cu->cuFlushGPUDirectRDMAWrites)
        return 0; /* a driver before 11.3 has no reordering to flush */
    r = cu->cuFlushGPUDirectRDMAWrites(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                                       CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER);
    if (r != CUDA_SUCCESS)
        return tw__cuda_fail(r, err, errlen, "cuFlushGPUDirectRDMAWrites on cuda:%d", ordinal);
    return 0;
}

/* One copy queued the classic way (tw__cuda_copy_batch's fallback). */
static int copy_one_async(const struct tw_cuda_api *cu, CUstream s, void *dst, const void *src,
                          size_t len, int to_host, int ordinal, char *err, size_t errlen)
{
    CUresult r = to_host ? cu->cuMemcpyDtoHAsync(dst, (CUdeviceptr)(uintptr_t)src, len, s)
                         : cu->cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dst, src, len, s);
    if (r != CUDA_SUCCESS)
        return tw__cuda_fail(r, err, errlen, "%s(%zu bytes) on cuda:%d",
                             to_host ? "cuMemcpyDtoHAsync" : "cuMemcpyHtoDAsync", len, ordinal);
    return 0;
}

int tw__cuda_copy_batch(int ordinal, void *stream, void *const *dst, const void *const *src,
                        const size_t *len, size_t n, int to_host, size_t *done, char *err,
                        size_t errlen)
{
    enum { CHUNK = 64 };
    const struct tw_cuda_api *cu;
    if (done)
        *done = 0;
    int rc = tw__cuda_enter(ordinal, &cu, err, errlen);
    if (rc)
        return rc;
    CUstream s = (CUstream)stream;
    struct tw_cu_memcpy_attributes attr = {.src_access_order =
                                               TW_CU_MEMCPY_SRC_ACCESS_ORDER_STREAM};
    for (size_t at = 0; at < n; at += CHUNK) {
        size_t k = n - at < CHUNK ? n - at : CHUNK;
        if (cu->cuMemcpyBatchAsync && k > 1) {
            CUdeviceptr d[CHUNK], sr[CHUNK];
            size_t sz[CHUNK], attr_idx = 0, fail_idx = SIZE_MAX;
            for (size_t i = 0; i < k; i++) {
                d[i] = (CUdeviceptr)(uintptr_t)dst[at + i];
                sr[i] = (CUdeviceptr)(uintptr_t)src[at + i];
                sz[i] = len[at + i];
            }
            if (cu->cuMemcpyBatchAsync(d, sr, sz, k, &attr, &attr_idx, 1, &fail_idx, s) ==
                CUDA_SUCCESS) {
                if (done)
                    *done += k;
                continue;
            }
            /* Refused: one by one, so a copy the batch call does not take
             * still moves and a bad one is named by its own error. Copies
             * before fail_idx may have been queued already: queuing them
             * again moves the same bytes to the same place. */
        }
        for (size_t i = at; i < at + k; i++) {
            rc = copy_one_async(cu, s, dst[i], src[i], len[i], to_host, ordinal, err, errlen);
            if (rc)
                return rc;
            if (done)
                (*done)++;
        }
    }
    return 0;
}

/* ---- test-only fault injection (cuda.h) ---- */

static long inject_at = -1; /* copy index to refuse; -1: none */
static long inject_count;
static pthread_once_t inject_once = PTHREAD_ONCE_INIT;

static void inject_read_env(void)
{
    const char *v = getenv("TW_TEST_CUDA_FAIL_AT_CHUNK");
    if (v && *v) {
        char *end = NULL;
        long k = strtol(v, &end, 10);
        if (end && *end == '\0' && k >= 0)
            inject_at = k;
    }
}

int tw__cuda_test_copy_hook(const char *what, char *err, size_t errlen)
{
    pthread_once(&inject_once, inject_read_env);
    if (__atomic_load_n(&inject_at, __ATOMIC_RELAXED) < 0)
        return 0;
    long k = __atomic_fetch_add(&inject_count, 1, __ATOMIC_RELAXED);
    if (k != __atomic_load_n(&inject_at, __ATOMIC_RELAXED))
        return 0;
    if (err && errlen)
        snprintf(err, errlen,
                 "%s: injected failure of CUDA copy %ld (TW_TEST_CUDA_FAIL_AT_CHUNK, test only)",
                 what, k);
    return TW_EINTERNAL;
}

void tw__cuda_test_fail_at(long k)
{
    pthread_once(&inject_once, inject_read_env);
    __atomic_store_n(&inject_count, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&inject_at, k, __ATOMIC_RELAXED);
}
