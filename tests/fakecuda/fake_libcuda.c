/*
 * A test double of the CUDA driver (libcuda.so.1) for machines without a
 * GPU (CI): the subset of the driver API that src/gpu/cuda.h loads, over
 * host memory, so that the GPU tests run end to end, in the client and in
 * tensorwired alike, wherever LD_LIBRARY_PATH puts this library before the
 * real one (cmake/parts/client.cmake: the *_fakecuda tests). Not shipped.
 *
 * What it models, and what it does not:
 *   - TW_FAKE_CUDA_DEVICES devices (default 1), 8 GiB each, that support
 *     neither GPUDirect RDMA nor dma-buf (so admission refuses GPUDirect
 *     and every GPU tensor stages);
 *   - device memory: anonymous mappings the process can touch (a stray
 *     direct access is not caught, unlike the PROT_NONE arena of
 *     tests/integration/test_client_staging.c); cuPointerGetAttributes
 *     answers for them (type, ordinal, range, a buffer id that changes
 *     when an address is reused) and zeroes for any other address;
 *   - streams run their copies lazily: a queued copy happens only when
 *     the stream is synchronized, an event recorded after it completes
 *     (the first TW_FAKE_CUDA_NOT_READY cuEventQuery calls of each record,
 *     default 1, answer NOT_READY), or a
 *     synchronous copy, an allocation or a free runs (which, like the
 *     legacy default stream, waits for every blocking stream). Code that
 *     reads a copy's destination before the driver said it is done sees
 *     the old bytes, and a test comparing them fails;
 *   - contexts: one primary context per device, current per thread.
 * The optional batch copy and GPUDirect flush are absent (the library
 * falls back to single copies).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "gpu/cuda.h"

/* The driver's entry points: no header declares them (the library only
 * dlsym()s them by name). */
#pragma GCC diagnostic ignored "-Wmissing-prototypes"
#define EXPORT __attribute__((visibility("default")))
#define FAKE_DEV_BYTES ((size_t)8 << 30)
#define FAKE_MAX_DEVS 8

struct fake_alloc {
    uintptr_t base;
    size_t len;
    unsigned long long id;
    int ordinal;
};

struct fake_op {
    void *dst;
    const void *src;
    size_t n;
};

struct CUstream_st {
    struct fake_op *ops;
    size_t nops, done, cap;
    struct CUstream_st *next;
};

struct CUevent_st {
    struct CUevent_st *next;
    struct CUstream_st *stream; /* NULL: recorded on the legacy stream, or its stream is gone */
    size_t upto;
    int queried; /* queries after the record that answered NOT_READY */
};

struct CUctx_st {
    int ordinal;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct fake_alloc *allocs;
static size_t nallocs, capallocs;
static unsigned long long next_id = 1;
static struct CUstream_st *streams;
static struct CUevent_st *events;
static struct CUctx_st ctxs[FAKE_MAX_DEVS];
static _Thread_local CUcontext current;
static size_t used[FAKE_MAX_DEVS];

static int ndevs(void)
{
    const char *v = getenv("TW_FAKE_CUDA_DEVICES");
    int n = v && *v ? atoi(v) : 1;
    return n < 0 ? 0 : n > FAKE_MAX_DEVS ? FAKE_MAX_DEVS : n;
}

/* How many queries after a record answer NOT_READY before the copies
 * run: TW_FAKE_CUDA_NOT_READY (default 1), so that code which must not
 * wait for a copy meets one still running more than once. */
static int not_ready_answers(void)
{
    const char *v = getenv("TW_FAKE_CUDA_NOT_READY");
    int n = v && *v ? atoi(v) : 1;
    return n < 0 ? 0 : n;
}

static int cur_ordinal(void)
{
    return current ? current->ordinal : 0;
}

/* Runs stream s's copies up to (not including) index upto. Locked. */
static void run_upto(struct CUstream_st *s, size_t upto)
{
    for (; s->done < upto && s->done < s->nops; s->done++) {
        struct fake_op *op = &s->ops[s->done];
        memcpy(op->dst, op->src, op->n);
    }
}

/* What the legacy default stream waits for: every blocking stream. */
static void run_all(void)
{
    for (struct CUstream_st *s = streams; s; s = s->next)
        run_upto(s, s->nops);
}

static struct fake_alloc *find(uintptr_t p)
{
    for (size_t i = 0; i < nallocs; i++)
        if (p >= allocs[i].base && p < allocs[i].base + allocs[i].len)
            return &allocs[i];
    return NULL;
}

EXPORT CUresult cuInit(unsigned int flags)
{
    (void)flags;
    return ndevs() > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

EXPORT CUresult cuDriverGetVersion(int *v)
{
    *v = 13000;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorName(CUresult e, const char **name)
{
    switch (e) {
    case CUDA_SUCCESS:
        *name = "CUDA_SUCCESS";
        break;
    case CUDA_ERROR_INVALID_VALUE:
        *name = "CUDA_ERROR_INVALID_VALUE";
        break;
    case CUDA_ERROR_OUT_OF_MEMORY:
        *name = "CUDA_ERROR_OUT_OF_MEMORY";
        break;
    case CUDA_ERROR_INVALID_DEVICE:
        *name = "CUDA_ERROR_INVALID_DEVICE";
        break;
    case CUDA_ERROR_NOT_READY:
        *name = "CUDA_ERROR_NOT_READY";
        break;
    default:
        *name = "CUDA_ERROR_FAKE";
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorString(CUresult e, const char **text)
{
    (void)e;
    *text = "fake CUDA driver (tests/fakecuda)";
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *n)
{
    *n = ndevs();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
    if (ordinal < 0 || ordinal >= ndevs())
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetPCIBusId(char *bus, int len, CUdevice d)
{
    if (d < 0 || d >= ndevs() || len < 13)
        return CUDA_ERROR_INVALID_VALUE;
    /* A bus no host has: sysfs knows nothing of it (admission: no facts). */
    snprintf(bus, (size_t)len, "0000:fe:%02x.0", d);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
    if (d < 0 || d >= ndevs() || len < 1)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "Fake GPU %d (tensorwire test double)", d);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d)
{
    if (d < 0 || d >= ndevs())
        return CUDA_ERROR_INVALID_DEVICE;
    *v = attr == CU_DEVICE_ATTRIBUTE_PCI_BUS_ID ? 0xfe : 0; /* no GPUDirect, no dma-buf */
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice d)
{
    if (d < 0 || d >= ndevs())
        return CUDA_ERROR_INVALID_DEVICE;
    ctxs[d].ordinal = d;
    *ctx = &ctxs[d];
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
    return d >= 0 && d < ndevs() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *ctx)
{
    *ctx = current;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    current = ctx;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    current = ctx;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *ctx)
{
    if (ctx)
        *ctx = current;
    current = NULL;
    return CUDA_SUCCESS;
}

static void fill_attr(const struct fake_alloc *a, CUpointer_attribute which, void *data)
{
    switch (which) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = a ? CU_MEMORYTYPE_DEVICE : 0;
        break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *(unsigned long long *)data = a ? a->id : 0;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = a ? a->ordinal : -2;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = a ? a->base : 0;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = a ? a->len : 0;
        break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned int *)data = 0;
        break;
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = a ? &ctxs[a->ordinal] : NULL;
        break;
    }
}

EXPORT CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs, void **data,
                                       CUdeviceptr p)
{
    pthread_mutex_lock(&mu);
    const struct fake_alloc *a = find((uintptr_t)p);
    for (unsigned int i = 0; i < n; i++)
        fill_attr(a, attrs[i], data[i]);
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr p)
{
    pthread_mutex_lock(&mu);
    const struct fake_alloc *a = find((uintptr_t)p);
    if (a)
        fill_attr(a, attr, data);
    pthread_mutex_unlock(&mu);
    return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
    pthread_mutex_lock(&mu);
    const struct fake_alloc *a = find((uintptr_t)p);
    if (a) {
        if (base)
            *base = a->base;
        if (size)
            *size = a->len;
    }
    pthread_mutex_unlock(&mu);
    return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr p, size_t size,
                                              CUmemRangeHandleType type, unsigned long long flags)
{
    (void)handle, (void)p, (void)size, (void)type, (void)flags;
    return 801; /* CUDA_ERROR_NOT_SUPPORTED */
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size)
{
    int ord = cur_ordinal();
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    run_all();
    CUresult r = CUDA_SUCCESS;
    if (used[ord] + size > FAKE_DEV_BYTES) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    if (nallocs == capallocs) {
        size_t cap = capallocs ? capallocs * 2 : 256;
        struct fake_alloc *n = realloc(allocs, cap * sizeof(*n));
        if (!n) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        allocs = n;
        capallocs = cap;
    }
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    memset(m, 0xA5, size < 4096 ? size : 4096); /* not zero: fresh memory holds garbage */
    allocs[nallocs++] = (struct fake_alloc){(uintptr_t)m, size, next_id++, ord};
    used[ord] += size;
    *p = (CUdeviceptr)(uintptr_t)m;
out:
    pthread_mutex_unlock(&mu);
    return r;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
    pthread_mutex_lock(&mu);
    run_all(); /* a free waits for the copies that read or write it */
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < nallocs; i++) {
        if (allocs[i].base == (uintptr_t)p) {
            munmap((void *)allocs[i].base, allocs[i].len);
            used[allocs[i].ordinal] -= allocs[i].len;
            allocs[i] = allocs[--nallocs];
            r = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    return r;
}

/* A synchronous copy: after every blocking stream's queued work. */
static CUresult copy_sync(void *dst, const void *src, size_t n)
{
    pthread_mutex_lock(&mu);
    run_all();
    memcpy(dst, src, n);
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
    return copy_sync((void *)(uintptr_t)dst, src, n);
}

EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
    return copy_sync(dst, (const void *)(uintptr_t)src, n);
}

static int legacy(CUstream s)
{
    return s == NULL || s == TW_CU_STREAM_LEGACY;
}

static CUresult copy_async(void *dst, const void *src, size_t n, CUstream s)
{
    if (legacy(s))
        return copy_sync(dst, src, n);
    pthread_mutex_lock(&mu);
    CUresult r = CUDA_SUCCESS;
    if (s->nops == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        struct fake_op *o = realloc(s->ops, cap * sizeof(*o));
        if (!o) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        s->ops = o;
        s->cap = cap;
    }
    s->ops[s->nops++] = (struct fake_op){dst, src, n};
out:
    pthread_mutex_unlock(&mu);
    return r;
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    return copy_async((void *)(uintptr_t)dst, src, n, s);
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    return copy_async(dst, (const void *)(uintptr_t)src, n, s);
}

EXPORT CUresult cuMemHostAlloc(void **p, size_t size, unsigned int flags)
{
    (void)flags;
    return posix_memalign(p, 4096, size ? size : 1) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

EXPORT CUresult cuMemFreeHost(void *p)
{
    free(p);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned int flags)
{
    (void)p, (void)size, (void)flags;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemHostUnregister(void *p)
{
    (void)p;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    int ord = cur_ordinal();
    pthread_mutex_lock(&mu);
    *total = FAKE_DEV_BYTES;
    *free_bytes = FAKE_DEV_BYTES - used[ord];
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamCreate(CUstream *out, unsigned int flags)
{
    (void)flags;
    struct CUstream_st *s = calloc(1, sizeof(*s));
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&mu);
    s->next = streams;
    streams = s;
    pthread_mutex_unlock(&mu);
    *out = s;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamDestroy_v2(CUstream s)
{
    if (legacy(s))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    run_upto(s, s->nops); /* queued work still completes */
    for (struct CUevent_st *e = events; e; e = e->next)
        if (e->stream == s)
            e->stream = NULL; /* complete */
    for (struct CUstream_st **pp = &streams; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    pthread_mutex_unlock(&mu);
    free(s->ops);
    free(s);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamSynchronize(CUstream s)
{
    pthread_mutex_lock(&mu);
    if (legacy(s))
        run_all();
    else
        run_upto(s, s->nops);
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventCreate(CUevent *ev, unsigned int flags)
{
    (void)flags;
    struct CUevent_st *e = calloc(1, sizeof(*e));
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&mu);
    e->next = events;
    events = e;
    pthread_mutex_unlock(&mu);
    *ev = e;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventDestroy_v2(CUevent ev)
{
    pthread_mutex_lock(&mu);
    for (struct CUevent_st **pp = &events; *pp; pp = &(*pp)->next)
        if (*pp == ev) {
            *pp = ev->next;
            break;
        }
    pthread_mutex_unlock(&mu);
    free(ev);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventRecord(CUevent ev, CUstream s)
{
    pthread_mutex_lock(&mu);
    if (legacy(s)) {
        run_all();
        ev->stream = NULL;
    } else {
        ev->stream = s;
        ev->upto = s->nops;
    }
    ev->queried = 0;
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventQuery(CUevent ev)
{
    pthread_mutex_lock(&mu);
    CUresult r = CUDA_SUCCESS;
    if (ev->stream && ev->stream->done < ev->upto) {
        if (ev->queried < not_ready_answers()) {
            ev->queried++;
            r = CUDA_ERROR_NOT_READY;
        } else {
            run_upto(ev->stream, ev->upto);
        }
    }
    pthread_mutex_unlock(&mu);
    return r;
}

EXPORT CUresult cuEventSynchronize(CUevent ev)
{
    pthread_mutex_lock(&mu);
    if (ev->stream)
        run_upto(ev->stream, ev->upto);
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}
