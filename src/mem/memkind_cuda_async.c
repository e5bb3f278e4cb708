/*
 * CUDA asynchronous copies, streams, events and host memory pinning for the
 * staging pipeline (memkind.h: struct tw_memkind_async_ops).
 *
 * Streams are created non-blocking (no implicit ordering with the legacy
 * NULL stream other code of the application may use) and events without
 * timing (cheaper record and query). Every op first makes the owning
 * device's primary context current on the calling thread, because streams
 * and events belong to one context and the caller's thread may have served
 * another device just before.
 */

#include "gpu/cuda.h"
#include "mem/memkind.h"
#include "tensorwire/error.h"

static int fail(CUresult r, const char *what, int device, char *err, size_t errlen)
{
    return tw__cuda_fail(r, err, errlen, "%s (cuda:%d)", what, device);
}

static int cuda_pin(int device, void *p, size_t len, char *err, size_t errlen)
{
    const struct tw_cuda_api *cu;
    int rc = tw__cuda_enter(device, &cu, err, errlen);
    if (rc)
        return rc;
    /* PORTABLE: one pool serves transfers of every device. */
    CUresult r = cu->cuMemHostRegister(p, len, CU_MEMHOSTREGISTER_PORTABLE);
    return r == CUDA_SUCCESS ? 0 : fail(r, "cuMemHostRegister", device, err, errlen);
}

static void cuda_unpin(int device, void *p)
{
    const struct tw_cuda_api *cu;
    if (p && tw__cuda_enter(device, &cu, NULL, 0) == 0)
        cu->cuMemHostUnregister(p);
}

static int cuda_stream_create(int device, void **stream, char *err, size_t errlen)
{
    const struct tw_cuda_api *cu;
    int rc = tw__cuda_enter(device, &cu, err, errlen);
    if (rc)
        return rc;
    CUstream s = NULL;
    /* A blocking stream: its copies start only after the work queued
     * before them on the legacy default stream, which is where the caller's
     * synchronous copies (cuMemcpy*, whose DMA may still run when they
     * return) and ours go, and later legacy-stream work waits for them. A
     * non-blocking stream let a get's copy into a buffer land before the
     * caller's earlier cuMemcpyHtoD into the same buffer (seen on the H200:
     * the zeros the test wrote replaced the received byte). */
    CUresult r = cu->cuStreamCreate(&s, CU_STREAM_DEFAULT);
    if (r != CUDA_SUCCESS)
        return fail(r, "cuStreamCreate", device, err, errlen);
    *stream = s;
    return 0;
}

static void cuda_stream_destroy(int device, void *stream)
{
    const struct tw_cuda_api *cu;
    if (stream && tw__cuda_enter(device, &cu, NULL, 0) == 0)
        cu->cuStreamDestroy((CUstream)stream);
}

static int cuda_stream_wait(int device, void *stream, char *err, size_t errlen)
{
    const struct tw_cuda_api *cu;
    int rc = tw__cuda_enter(device, &cu, err, errlen);
    if (rc)
        return rc;
    CUresult r = cu->cuStreamSynchronize((CUstream)stream);
    return r == CUDA_SUCCESS ? 0 : fail(r, "cuStreamSynchronize", device, err, errlen);
}

static int cuda_event_create(int device, void **event, char *err, size_t errlen)
{
    const struct tw_cuda_api *cu;
    int rc = tw__cuda_enter(device, &cu, err, errlen);
    if (rc)
        return rc;
    CUevent e = NULL;
    CUresult r = cu->cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS)
        return fail(r, "cuEventCreate", device, err, errlen);
    *event = e;
    return 0;
}

static void cuda_event_destroy(int device, void *event)
{
    const struct tw_cuda_api *cu;
    if (event && tw__cuda_enter(device, &cu, NULL, 0) == 0)
        cu->cuEventDestroy((CUevent)event);
}

static int cuda_copy_to_host_async(void *stream, void *dst, uintptr_t src, size_t len,
                                   const struct tw_mem_attr *attr, char *err, size_t errlen)
{
    const struct tw_cuda_api *cu;
    int rc = tw__cuda_enter(attr->device, &cu, err, errlen);
    if (rc == 0)
        rc = tw__cuda_test_copy_hook("cuMemcpyDtoHAsync", err, errlen);
    if (rc)
        return rc;
    CUresult r = cu->cuMemcpyDtoHAsync(dst, (CUdeviceptr)src, len, (CUstream)stream);
    return r == CUDA_SUCCESS ? 0 : fail(r, "cuMemcpyDtoHAsync", attr->device, err, errlen);
}

static int cuda_copy_from_host_async(void *stream, uintptr_t dst, const void *src, size_t len,
                                     const struct tw_mem_attr *attr, char *err, size_t errlen)
{
    const struct tw_cuda_api *cu;
    int rc = tw__cuda_enter(attr->device, &cu, err, errlen);
    if (rc == 0)
        rc = tw__cuda_test_copy_hook("cuMemcpyHtoDAsync", err, errlen);
    if (rc)
        return rc;
    CUresult r = cu->cuMemcpyHtoDAsync((CUdeviceptr)dst, src, len, (CUstream)stream);
    return r == CUDA_SUCCESS ? 0 : fail(r, "cuMemcpyHtoDAsync", attr->device, err, errlen);
}

static int copy_batch_async(int device, void *stream, void *const *dst, const void *const *src,
                            const size_t *len, size_t n, int to_host, size_t *done, char *err,
                            size_t errlen)
{
    /* The test hook refuses copy k as queued: the ones before it go. */
    size_t ok = 0;
    int hook = 0;
    while (ok < n && (hook = tw__cuda_test_copy_hook("cuMemcpyBatchAsync", err, errlen)) == 0)
        ok++;
    int rc = tw__cuda_copy_batch(device, stream, dst, src, len, ok, to_host, done, err, errlen);
    return rc ? rc : hook;
}

static int cuda_copy_batch_from_host_async(int device, void *stream, void *const *dst,
                                           const void *const *src, const size_t *len, size_t n,
                                           size_t *done, char *err, size_t errlen)
{
    return copy_batch_async(device, stream, dst, src, len, n, 0, done, err, errlen);
}

static int cuda_copy_batch_to_host_async(int device, void *stream, void *const *dst,
                                         const void *const *src, const size_t *len, size_t n,
                                         size_t *done, char *err, size_t errlen)
{
    return copy_batch_async(device, stream, dst, src, len, n, 1, done, err, errlen);
}

static int cuda_event_record(int device, void *event, void *stream, char *err, size_t errlen)
{
    const struct tw_cuda_api *cu;
    int rc = tw__cuda_enter(device, &cu, err, errlen);
    if (rc)
        return rc;
    CUresult r = cu->cuEventRecord((CUevent)event, (CUstream)stream);
    return r == CUDA_SUCCESS ? 0 : fail(r, "cuEventRecord", device, err, errlen);
}

static int cuda_event_query(int device, void *event, char *err, size_t errlen)
{
    const struct tw_cuda_api *cu;
    int rc = tw__cuda_enter(device, &cu, err, errlen);
    if (rc)
        return rc;
    CUresult r = cu->cuEventQuery((CUevent)event);
    if (r == CUDA_SUCCESS)
        return 1;
    if (r == CUDA_ERROR_NOT_READY)
        return 0;
    return fail(r, "cuEventQuery", device, err, errlen);
}

static int cuda_event_wait(int device, void *event, char *err, size_t errlen)
{
    const struct tw_cuda_api *cu;
    int rc = tw__cuda_enter(device, &cu, err, errlen);
    if (rc)
        return rc;
    CUresult r = cu->cuEventSynchronize((CUevent)event);
    return r == CUDA_SUCCESS ? 0 : fail(r, "cuEventSynchronize", device, err, errlen);
}

const struct tw_memkind_async_ops tw__memkind_cuda_async = {
    .pin = cuda_pin,
    .unpin = cuda_unpin,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_wait = cuda_stream_wait,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .copy_to_host_async = cuda_copy_to_host_async,
    .copy_batch_from_host_async = cuda_copy_batch_from_host_async,
    .copy_batch_to_host_async = cuda_copy_batch_to_host_async,
    .copy_from_host_async = cuda_copy_from_host_async,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_wait = cuda_event_wait,
};
