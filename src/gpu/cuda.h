/*
 * CUDA driver API through dlopen("libcuda.so.1").
 *
 * No CUDA header is needed (or available) at build time: the few types and
 * enum values tensorwire uses are declared here, with the values of the
 * public cuda.h (checked against CUDA 12/13 headers). Every symbol is listed
 * once in TW_CUDA_SYMBOLS; the loader resolves all of them or none.
 *
 * "No GPU here" is a normal outcome, never an abort: tw__cuda_get() returns
 * TW_EDEVICE and writes why (library missing, symbol missing, cuInit failed)
 * into the caller's buffer. The library is loaded once per process
 * (pthread_once) and never unloaded; the returned table is immutable and may
 * be used from any thread.
 */
#ifndef TW_GPU_CUDA_H
#define TW_GPU_CUDA_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_NOT_READY 600 /* cuEventQuery: work still pending */

/* Device ordinals tensorwire handles (primary contexts, per-device streams):
 * 0 .. TW_CUDA_MAX_DEVICES - 1. */
#define TW_CUDA_MAX_DEVICES 64

#define CU_STREAM_DEFAULT 0x0           /* ordered with the legacy NULL stream */
#define CU_STREAM_NON_BLOCKING 0x1      /* no implicit sync with the NULL stream */
#define CU_EVENT_DISABLE_TIMING 0x2     /* cheaper record/query */
#define CU_MEMHOSTALLOC_PORTABLE 0x1    /* pinned for every context, not only the current */
#define CU_MEMHOSTREGISTER_PORTABLE 0x1 /* the same for cuMemHostRegister */
/* cuda.h's CU_STREAM_LEGACY: the legacy NULL stream. */
#define TW_CU_STREAM_LEGACY ((CUstream)0x1)

/* CUmemcpyAttributes of cuMemcpyBatchAsync (CUDA 12.8): the source is read
 * in stream order (CU_MEMCPY_SRC_ACCESS_ORDER_STREAM); no location hints. */
struct tw_cu_mem_location {
    int type;
    int id;
};
struct tw_cu_memcpy_attributes {
    int src_access_order;
    struct tw_cu_mem_location src_loc_hint, dst_loc_hint;
    unsigned int flags;
};
#define TW_CU_MEMCPY_SRC_ACCESS_ORDER_STREAM 1

/* cuFlushGPUDirectRDMAWrites(target, scope) arguments. */
#define CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX 0
#define CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER 100
#define CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES 200

typedef enum {
    CU_POINTER_ATTRIBUTE_CONTEXT = 1,
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,       /* unsigned int (CUmemorytype) */
    CU_POINTER_ATTRIBUTE_BUFFER_ID = 7,         /* unsigned long long, process-unique */
    CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,        /* unsigned int (bool) */
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,    /* int */
    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11, /* CUdeviceptr */
    CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12,       /* size_t */
} CUpointer_attribute;

typedef enum {
    CU_MEMORYTYPE_HOST = 1,
    CU_MEMORYTYPE_DEVICE = 2,
    CU_MEMORYTYPE_ARRAY = 3,
    CU_MEMORYTYPE_UNIFIED = 4,
} CUmemorytype;

typedef enum {
    CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 1,
} CUmemRangeHandleType;

/* Device attributes GPUDirect admission reads (src/gdr/facts.c). */
typedef enum {
    CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
    CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED = 116,
    CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS = 117,
    CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING = 118,
    CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124,
} CUdevice_attribute_gdr;
/* GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS bit: cuFlushGPUDirectRDMAWrites is
 * available to the host. */
#define CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST 0x1
/* GPU_DIRECT_RDMA_WRITES_ORDERING: NONE means NIC writes may be seen out of
 * order by GPU work until they are flushed; OWNER and ALL_DEVICES mean they
 * need no flush for consumers on this device (or any device). */
#define CU_GPU_DIRECT_RDMA_WRITES_ORDERING_NONE 0

/*
 * X(field, "exported symbol", return type, (parameters)).
 * Versioned names (_v2) are the ones cuda.h maps the plain names to.
 */
#define TW_CUDA_SYMBOLS(X)                                                                         \
    X(cuInit, "cuInit", CUresult, (unsigned int flags))                                            \
    X(cuDriverGetVersion, "cuDriverGetVersion", CUresult, (int *version))                          \
    X(cuGetErrorName, "cuGetErrorName", CUresult, (CUresult err, const char **name))               \
    X(cuGetErrorString, "cuGetErrorString", CUresult, (CUresult err, const char **text))           \
    X(cuDeviceGet, "cuDeviceGet", CUresult, (CUdevice * dev, int ordinal))                         \
    X(cuDeviceGetCount, "cuDeviceGetCount", CUresult, (int *count))                                \
    X(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId", CUresult, (char *bus_id, int len, CUdevice dev)) \
    X(cuDeviceGetName, "cuDeviceGetName", CUresult, (char *name, int len, CUdevice dev))           \
    X(cuDeviceGetAttribute, "cuDeviceGetAttribute", CUresult,                                      \
      (int *value, int attr, CUdevice dev))                                                        \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", CUresult,                              \
      (CUcontext * ctx, CUdevice dev))                                                             \
    X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", CUresult, (CUdevice dev))         \
    X(cuCtxGetCurrent, "cuCtxGetCurrent", CUresult, (CUcontext * ctx))                             \
    X(cuCtxSetCurrent, "cuCtxSetCurrent", CUresult, (CUcontext ctx))                               \
    X(cuCtxPushCurrent, "cuCtxPushCurrent_v2", CUresult, (CUcontext ctx))                          \
    X(cuCtxPopCurrent, "cuCtxPopCurrent_v2", CUresult, (CUcontext * ctx))                          \
    X(cuPointerGetAttribute, "cuPointerGetAttribute", CUresult,                                    \
      (void *data, CUpointer_attribute attr, CUdeviceptr ptr))                                     \
    X(cuPointerGetAttributes, "cuPointerGetAttributes", CUresult,                                  \
      (unsigned int n, CUpointer_attribute *attrs, void **data, CUdeviceptr ptr))                  \
    X(cuMemGetAddressRange, "cuMemGetAddressRange_v2", CUresult,                                   \
      (CUdeviceptr * base, size_t * size, CUdeviceptr ptr))                                        \
    X(cuMemGetHandleForAddressRange, "cuMemGetHandleForAddressRange", CUresult,                    \
      (void *handle, CUdeviceptr ptr, size_t size, CUmemRangeHandleType type,                      \
       unsigned long long flags))                                                                  \
    X(cuMemAlloc, "cuMemAlloc_v2", CUresult, (CUdeviceptr * ptr, size_t size))                     \
    X(cuMemFree, "cuMemFree_v2", CUresult, (CUdeviceptr ptr))                                      \
    X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", CUresult, (CUdeviceptr dst, const void *src, size_t n))     \
    X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", CUresult, (void *dst, CUdeviceptr src, size_t n))           \
    X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", CUresult,                                         \
      (CUdeviceptr dst, const void *src, size_t n, CUstream stream))                               \
    X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", CUresult,                                         \
      (void *dst, CUdeviceptr src, size_t n, CUstream stream))                                     \
    X(cuMemHostAlloc, "cuMemHostAlloc", CUresult, (void **ptr, size_t size, unsigned int flags))   \
    X(cuMemFreeHost, "cuMemFreeHost", CUresult, (void *ptr))                                       \
    X(cuMemHostRegister, "cuMemHostRegister_v2", CUresult,                                         \
      (void *ptr, size_t size, unsigned int flags))                                                \
    X(cuMemHostUnregister, "cuMemHostUnregister", CUresult, (void *ptr))                           \
    X(cuMemGetInfo, "cuMemGetInfo_v2", CUresult, (size_t * free_bytes, size_t * total_bytes))      \
    X(cuStreamCreate, "cuStreamCreate", CUresult, (CUstream * stream, unsigned int flags))         \
    X(cuStreamDestroy, "cuStreamDestroy_v2", CUresult, (CUstream stream))                          \
    X(cuStreamSynchronize, "cuStreamSynchronize", CUresult, (CUstream stream))                     \
    X(cuEventCreate, "cuEventCreate", CUresult, (CUevent * event, unsigned int flags))             \
    X(cuEventDestroy, "cuEventDestroy_v2", CUresult, (CUevent event))                              \
    X(cuEventRecord, "cuEventRecord", CUresult, (CUevent event, CUstream stream))                  \
    X(cuEventQuery, "cuEventQuery", CUresult, (CUevent event))                                     \
    X(cuEventSynchronize, "cuEventSynchronize", CUresult, (CUevent event))

/*
 * Symbols a driver may lack without making the GPU unusable: resolved when
 * present, NULL otherwise (callers check). cuFlushGPUDirectRDMAWrites came
 * with CUDA 11.3.
 */
#define TW_CUDA_OPTIONAL_SYMBOLS(X)                                                                \
    X(cuFlushGPUDirectRDMAWrites, "cuFlushGPUDirectRDMAWrites", CUresult, (int target, int scope)) \
    X(cuMemcpyBatchAsync, "cuMemcpyBatchAsync", CUresult,                                          \
      (CUdeviceptr * dsts, CUdeviceptr * srcs, size_t * sizes, size_t count,                       \
       struct tw_cu_memcpy_attributes * attrs, size_t * attr_idxs, size_t num_attrs,               \
       size_t * fail_idx, CUstream stream))

struct tw_cuda_api {
#define TW_CUDA_FIELD(field, sym, ret, params) ret(*field) params;
    TW_CUDA_SYMBOLS(TW_CUDA_FIELD)
    TW_CUDA_OPTIONAL_SYMBOLS(TW_CUDA_FIELD)
#undef TW_CUDA_FIELD
    int driver_version; /* e.g. 13000 for CUDA 13.0 */
};

/*
 * Loads libcuda.so.1 and calls cuInit(0) on first use. Returns 0 and stores
 * a pointer to the process-wide table in *api (valid until exit, never
 * freed by the caller), or TW_EDEVICE with the reason in err (may be NULL).
 */
int tw__cuda_get(const struct tw_cuda_api **api, char *err, size_t errlen);

/* "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" style text for a CUresult;
 * writes into buf and returns it. */
const char *tw__cuda_strerror(CUresult r, char *buf, size_t len);

/*
 * Maps a CUresult to a tensorwire code: out-of-memory to -ENOMEM, invalid
 * value to TW_EINVAL, no device / not initialized to TW_EDEVICE, anything
 * else to TW_EINTERNAL.
 */
int tw__cuda_to_err(CUresult r);

/*
 * Makes the primary context of device `ordinal` current on the calling
 * thread (retaining it once per process; released at exit by the driver).
 * Returns 0 or a negative code with the reason in err.
 */
int tw__cuda_use_device(int ordinal, char *err, size_t errlen);

/*
 * tw__cuda_get, then tw__cuda_use_device(ordinal): on 0, *api is the table
 * and `ordinal`'s primary context is current on the calling thread. Returns
 * 0 or a negative code with the reason in err (may be NULL).
 */
int tw__cuda_enter(int ordinal, const struct tw_cuda_api **api, char *err, size_t errlen);

/*
 * The failure of a driver call: writes "<fmt ...>: <tw__cuda_strerror(r)>"
 * into err (may be NULL) and returns tw__cuda_to_err(r).
 */
__attribute__((format(printf, 4, 5))) int tw__cuda_fail(CUresult r, char *err, size_t errlen,
                                                        const char *fmt, ...);

/* Number of visible CUDA devices (0 when there is no driver: that is not an
 * error here, so callers can treat "no GPU" and "no driver" alike). */
int tw__cuda_device_count(void);

/*
 * Queues n copies (dst[i] <- src[i], len[i] bytes; device <-> pinned host
 * memory, to_host giving the direction) on stream, a created stream of
 * device `ordinal`'s primary context. One cuMemcpyBatchAsync where the
 * driver has it (CUDA 12.8+: ~0.7 us of CPU and ~1.4 us on the GPU per
 * 32 KiB copy in batches of 64 on the H200, against ~2.5-3.5 us queued one
 * by one), else (or when the driver refuses a batch) one
 * cuMemcpy{DtoH,HtoD}Async each. The bytes are in place once the stream
 * reached them. Returns 0 or a negative code with the reason in err: the
 * copies before the failing one were queued (*done of them, when done is
 * not NULL), it and those after were not.
 */
int tw__cuda_copy_batch(int ordinal, void *stream, void *const *dst, const void *const *src,
                        const size_t *len, size_t n, int to_host, size_t *done, char *err,
                        size_t errlen);

/*
 * Makes writes already completed into device `ordinal`'s memory visible to
 * later work on it (docs/protocol.md §10), through its primary context:
 *  - ipc_copies: first waits for the CUDA copies libfabric's shm provider
 *    ran in THIS process into it. shm moves GPU memory by CUDA IPC, the
 *    target process copies with cudaMemcpy on the legacy default stream,
 *    and a device-to-device cudaMemcpy returns (and shm completes the
 *    operation) before the bytes have landed. cuStreamSynchronize(
 *    CU_STREAM_LEGACY); like any legacy stream wait it also waits for
 *    earlier work on blocking streams there.
 *  - flush: then cuFlushGPUDirectRDMAWrites(CURRENT_CTX, TO_OWNER) for NIC
 *    writes; the caller decides whether the GPU needs it (gdr facts:
 *    flush_needed). A driver without the call (before CUDA 11.3) has
 *    nothing to flush.
 * Returns 0 (also when neither is asked) or a negative code with the
 * reason in err.
 */
int tw__cuda_settle_writes(int ordinal, int ipc_copies, int flush, char *err, size_t errlen);

/*
 * len bytes of device memory on GPU `ordinal` (cuMemAlloc in its primary
 * context) for short-lived internal use such as registration probes; the
 * caller frees it with tw__cuda_scratch_free(). Returns 0 or a negative
 * code with the reason in err.
 */
int tw__cuda_scratch_alloc(int ordinal, size_t len, void **out, char *err, size_t errlen);
void tw__cuda_scratch_free(int ordinal, void *p);

/*
 * Free and total memory of device `ordinal` (through its primary context,
 * which is left current). Returns 0 or a negative code with reason in err.
 */
int tw__cuda_mem_info(int ordinal, uint64_t *free_bytes, uint64_t *total_bytes, char *err,
                      size_t errlen);

/*
 * TEST ONLY: fault injection for the copies of CUDA memory. Every copy
 * between host and device memory that tensorwire submits (the memory
 * kind's synchronous and asynchronous copies, the server store's copies)
 * calls this first with what it is about to do. With the environment
 * variable TW_TEST_CUDA_FAIL_AT_CHUNK=k (read once, on the first copy of
 * the process) copy number k of the process (0-based, counted over all
 * threads) is refused: this returns TW_EINTERNAL with "injected failure of
 * CUDA copy k (TW_TEST_CUDA_FAIL_AT_CHUNK, test only)" in err, as a real
 * driver error would. Every other copy, and every copy without the
 * variable, returns 0 (one relaxed atomic increment). Meant for tests on a
 * real GPU (tests/integration/test_gpu_inject.c); never set it in
 * production.
 */
int tw__cuda_test_copy_hook(const char *what, char *err, size_t errlen);
/* TEST ONLY, for tests that link the library's internals: from now on,
 * refuse the k-th copy counted from this call (0: the next one; -1:
 * none), overriding the environment variable (which is read first). */
void tw__cuda_test_fail_at(long k);

#endif
