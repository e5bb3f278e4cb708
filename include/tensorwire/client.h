/*
 * libtensorwire client API.
 *
 * A tw_client is one TCP connection to a tensorwired server, authenticated
 * (HMAC-SHA256, mutual) when the server asks for it. Every call is blocking
 * and returns 0 (or a non-negative count) on success and a negative code on
 * failure (include/tensorwire/error.h):
 *
 *   -errno                 a system call failed (-ECONNREFUSED, -ENOMEM ...)
 *   TW_ENOTFOUND ...       the server answered ERROR with that code; the
 *                          server's message is in tw_client_last_error_message
 *   -1100..-1199           a local verdict (TW_ERR_IS_VERDICT): the server
 *                          sent something malformed or out of order (the
 *                          connection is then closed, see below)
 *   TW_EINVAL              also for argument errors caught locally
 *
 * Request-level errors (NOT_FOUND, INVALID_ARGUMENT, CAPACITY_EXCEEDED,
 * CHECKSUM_MISMATCH, BUSY, DEVICE_UNAVAILABLE, -ENOBUFS for a too-small
 * buffer) leave the connection usable. Connection-level errors (any protocol
 * violation, UNAUTHORIZED, SHUTTING_DOWN with GOODBYE, a timeout, a socket
 * error) close it: every later call on the handle fails with -ENOTCONN, and
 * the handle must still be released with tw_close(). After a failed call,
 * tw_client_is_connected() says which of the two happened.
 *
 * Thread-safety: a tw_client is NOT thread-safe. Use one handle per thread
 * (connections are cheap; the server serves each independently), or serialise
 * every call on a shared handle with your own mutex. Distinct handles may be
 * used from distinct threads concurrently. The free functions (tw_dtype_*,
 * tw_free, tw_list_free, tw_stats_free) are thread-safe.
 *
 * Buffers: the library never keeps a pointer to caller memory after a call
 * returns. Host tensor bytes are sent straight from the caller's buffer and
 * received straight into it (no intermediate copy for large frames).
 *
 * GPU memory (TW_CLIENT_DEVICE_MEMORY): tw_put, tw_get and both batch calls
 * accept CUDA device pointers exactly like host pointers. The library asks
 * the CUDA driver what every buffer is (cuPointerGetAttributes, through a
 * dlopen'ed libcuda: there is no link-time CUDA dependency; without a driver
 * every buffer is host memory). Device memory moves through a host buffer
 * of the library's (the path says "+ staging", tw_client_data_plane). What
 * is guaranteed:
 *   - before the call, the caller must have finished every write to a
 *     source buffer (synchronize the stream that produced it): the library
 *     reads it with a synchronous cuMemcpyDtoH;
 *   - when tw_get / tw_batch_get returns 0 (for an item: status 0), the
 *     bytes are in the device buffer and visible to any work submitted
 *     later on that device, by any stream: they were written either with a
 *     synchronous cuMemcpyHtoD on the legacy default stream of the device's
 *     primary context, or with cuMemcpyHtoDAsync on a stream of the
 *     library's own in that context (large gets: chunk by chunk while the
 *     rest still arrives; small gets of a call: back to back, one wait for
 *     all), which the library synchronizes before the call returns. The
 *     library's streams are blocking streams: their copies start after the
 *     work queued before them on the legacy default stream (a cuMemcpy the
 *     caller made into the destination, for one). The library makes the
 *     primary context current on the calling thread (it leaves it current);
 *   - memory from another context of the same device, and stream-ordered
 *     memory (cuMemAllocAsync / memory pools), is used through unified
 *     addressing like any other device allocation, provided the allocation
 *     is complete and stays allocated for the duration of the call;
 *   - a range must lie inside one allocation; managed memory and host
 *     memory registered with CUDA are treated as host memory;
 *   - host memory: a handle keeps the page-locked host buffers it staged
 *     through until tw_close, so repeated transfers neither fault in nor
 *     pin pages again: between calls at most 32 MiB idle for transfers up
 *     to 256 KiB (in 2 MiB slabs; during a call as many as it has of them
 *     in flight or waiting for their copies), 64 MiB for those up to
 *     8 MiB, the largest larger one used, and (RDMA pull gets into GPU
 *     memory) a 64 MiB pool.
 */
#ifndef TENSORWIRE_CLIENT_H
#define TENSORWIRE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "tensorwire/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types, the wire dtype codes of protocol v1 (docs/protocol.md). */
enum tw_dtype_code {
    TW_F64 = 1,
    TW_F32 = 2,
    TW_F16 = 3,
    TW_BF16 = 4,
    TW_F8E4M3 = 5,
    TW_F8E5M2 = 6,
    TW_I8 = 7,
    TW_I16 = 8,
    TW_I32 = 9,
    TW_I64 = 10,
    TW_U8 = 11,
    TW_U16 = 12,
    TW_U32 = 13,
    TW_U64 = 14,
    TW_BOOL = 15 /* one byte per element */
};
#define TW_DTYPE_COUNT 15

#define TW_TENSOR_MAX_NDIM 16
#define TW_TENSOR_MAX_NAME 1024     /* bytes of UTF-8, no NUL */
#define TW_TENSOR_MAX_DEVICE_TAG 32 /* bytes, [a-z0-9_:.-] */

/* Bytes per element of a dtype code, 0 when the code is unknown. */
TW_EXTERN size_t tw_dtype_size(int dtype);
/* "f64", "f32", "f16", "bf16", "f8e4m3", "f8e5m2", "i8" ... "u64", "bool";
 * static storage; NULL for an unknown code. */
TW_EXTERN const char *tw_dtype_name(int dtype);
/* Inverse of tw_dtype_name; also accepts "float32", "float64", "float16",
 * "bfloat16", "int8".."int64", "uint8".."uint64". Returns the code (> 0) or
 * TW_EINVAL when the name is unknown. */
TW_EXTERN int tw_dtype_from_string(const char *name);

/* What a tensor is, without its name. */
struct tw_tensor_desc {
    uint8_t dtype;                                 /* enum tw_dtype_code */
    uint8_t ndim;                                  /* 0 = scalar (one element) */
    uint64_t shape[TW_TENSOR_MAX_NDIM];            /* C order; first ndim used */
    char device_tag[TW_TENSOR_MAX_DEVICE_TAG + 1]; /* NUL-terminated; ""
                                                     means "cpu" on put */
    uint64_t byte_length;                          /* filled by the library on every
                                                      output; ignored on input */
};

/* Byte length of desc (product of shape times element size) into *out.
 * Returns 0 or TW_EINVAL (unknown dtype, ndim > 16, or a byte length that
 * does not fit in 64 bits). */
TW_EXTERN int tw_tensor_desc_bytes(const struct tw_tensor_desc *desc, uint64_t *out);

/* tw_client_options.rdma_min_bytes: the threshold follows the connection's
 * provider and the call (over shm 32 KiB for puts in a call that keeps 32
 * or more in flight, else 64 KiB, GPU memory that stages included; 1 MiB
 * otherwise). */
#define TW_RDMA_MIN_BYTES_AUTO UINT64_MAX

/* Connection options. Initialise with tw_client_options_init() and change
 * only the fields you need; every pointer is read during tw_client_connect
 * only (nothing is kept).
 *
 * Growing without breaking binaries: the struct starts with its own size,
 * which tw_client_options_init() sets to sizeof(struct tw_client_options) as
 * seen by the header the caller was compiled with. New fields are only ever
 * added at the end. The library reads only the first `size` bytes: a
 * program built against an older, smaller struct gets the defaults for every
 * field it does not know; a struct from a newer header may be larger, and is
 * accepted when every byte beyond what this library knows is zero (the
 * newer options left at their defaults), else refused with TW_EINVAL (an
 * option this library cannot honour). A size below the first version's
 * struct (e.g. a struct never initialised) is TW_EINVAL. */
struct tw_client_options {
    size_t size;             /* set by tw_client_options_init(); do not change */
    const char *token;       /* shared secret (1..1024 bytes), or NULL */
    const char *token_file;  /* read when token is NULL; the token is the
                                content without trailing space, tab, CR, LF
                                (docs/protocol.md §6.3) */
    int connect_timeout_ms;  /* TCP connect + handshake; default 10000 */
    int request_timeout_ms;  /* longest wait without any progress (no byte
                                sent or received) inside one call; default
                                30000; <= 0 waits forever. In an RDMA pull
                                put the server's reads of our memory count
                                as progress on tcp rails; on shm (with
                                tensorwired --push never) and NIC
                                providers the wait for the server's
                                RDMA_DONE is bounded by this as a whole
                                (docs/protocol.md §10, "Waiting for the
                                reader") */
    uint32_t max_inflight;   /* requests kept in flight by the batch calls,
                                0..65536 (the server may lower it). 0
                                (default): 64, or 256 once most of the
                                batch's finished transfers moved by
                                RDMA (from or into host memory directly,
                                or GPU memory staged through host
                                buffers), over any provider (measured
                                fastest there; docs/performance.md). N:
                                N for every plane. */
    uint32_t max_frame;      /* largest frame payload announced, 64 KiB..1 GiB;
                                default 16 MiB (the server may lower it) */
    int checksum;            /* non-zero: CRC32C of every put is sent and the
                                server verifies it; gets carrying a CRC32C
                                are verified (TW_ECHECKSUM). Default 0. */
    const char *agent;       /* printable ASCII, <= 64 bytes; default
                                "libtensorwire/<version>" */
    int socket_buffer_bytes; /* SO_SNDBUF/SO_RCVBUF; 0 (default) leaves the
                                kernel's autotuning alone */
    /* RDMA data plane through libfabric. NULL or "none" (default): inline
     * only, nothing is opened. "auto": every usable provider (verbs, efa,
     * shm, tcp); or a comma-separated provider list ("tcp", "shm",
     * "tcp;ofi_rxm"). The plane (one data-mover thread) is opened only when
     * the server announced RDMA in its HELLO_ACK; then the client offers its
     * endpoints (RDMA_ENDPOINT) and gets and puts use RDMA. Any failure, or
     * the server's DECLINE, leaves the connection on the inline plane:
     * tw_client_fabric_status() says why. The default is "none" because
     * opening a plane costs a thread and tens of milliseconds per connect. */
    const char *fabric;
    /* enum tw_push_policy: who writes when the client is the destination
     * (get) and bit 3 was negotiated. Default TW_PUSH_AUTO. */
    int push;
    /* With RDMA negotiated, puts of fewer bytes are sent inline (no
     * WANT_RDMA): below about this size the RDMA control round trips cost
     * more than copying through the socket. Default TW_RDMA_MIN_BYTES_AUTO:
     * 1048576 (1 MiB) unless the connection's provider is shm
     * (docs/performance.md "RDMA size threshold"); over shm 32768 (32 KiB)
     * for puts of a call that keeps 32 or more requests in flight (a batch
     * of at least 32 items, with a window of at least 32), 65536 (64 KiB)
     * for fewer ("The shm threshold at 32 KiB"); the same for GPU memory
     * that stages (not admitted for GPUDirect: "Small staged puts"). Over
     * other providers a put from GPU memory in a call that keeps 32 or more
     * in flight goes by RDMA from 32 KiB ("Device blocks over tcp by RDMA
     * at the default thresholds"). tw_client_rdma_min_bytes() says which
     * applies to a put alone. 0 = RDMA at every size (tensorwired, unless
     * its --rdma-min-bytes says otherwise, keeps puts below 32 KiB inline).
     * Gets always ask for RDMA (their size is unknown until the reply): the
     * server applies its own threshold (tensorwired --rdma-min-bytes: 1 MiB,
     * 32 KiB over shm) and may answer inline, which the client follows. */
    uint64_t rdma_min_bytes;
    /* Non-zero: accept a token_file that its group or others may read or
     * write. Default 0: such a file fails the connect with -EACCES and a
     * message giving the 'chmod 600' fix. */
    int allow_insecure_token_file;
    /* enum tw_gpudirect_mode: GPUDirect RDMA into and out of this process's
     * GPU memory (docs/gpudirect.md). Default TW_GPUDIRECT_AUTO: used where
     * admitted (`tensorwire doctor` says why not). TW_GPUDIRECT_REQUIRE:
     * tw_client_connect fails with TW_EDEVICE, naming the failing
     * predicate, unless a GPU here is admitted on the connection's
     * provider (this gathers the GPU facts at connect time). */
    int gpudirect;
    /* The farthest GPU-NIC PCIe path admitted for NIC-backed providers:
     * 1 PIX, 2 PXB, 3 PHB, 4 NODE, 5 SYS; 0 (default) is PXB. */
    int gpudirect_max_distance;
};

enum tw_gpudirect_mode { TW_GPUDIRECT_AUTO = 0, TW_GPUDIRECT_OFF = 1, TW_GPUDIRECT_REQUIRE = 2 };

/* TW_PUSH_AUTO: the server writes only into our GPU buffers admitted for
 * GPUDirect ("gdr push"; host buffers are pulled); TW_PUSH_ALWAYS: let the
 * server write into our buffer whenever bit 3 was negotiated; TW_PUSH_NEVER:
 * do not announce bit 3 (an admitted GPU buffer is then read by us, "gdr
 * pull", except over shm, where a read into GPU memory can complete before
 * its bytes land: there it is staged through host memory,
 * docs/gpudirect.md). */
enum tw_push_policy { TW_PUSH_AUTO = 0, TW_PUSH_ALWAYS = 1, TW_PUSH_NEVER = 2 };

/* Writes the defaults into the first size bytes of opts (nothing beyond)
 * and sets opts->size = size. Use tw_client_options_init(). */
TW_EXTERN void tw_client_options_init_size(struct tw_client_options *opts, size_t size);

/* Fills opts with the defaults, with opts->size from this header. */
static inline void tw_client_options_init(struct tw_client_options *opts)
{
    tw_client_options_init_size(opts, sizeof(*opts));
}

typedef struct tw_client tw_client;

/*
 * Connects to addr ("HOST:PORT", "[v6addr]:PORT"), runs the handshake and,
 * when the server requires it, mutual authentication. opts may be NULL for the
 * defaults. On success *out is a new handle owned by the caller (release with
 * tw_close). On failure *out is set to NULL and nothing needs releasing; when
 * the failure came from the server (e.g. TW_EUNAUTHORIZED) and you want its
 * message, use tw_client_connect_error instead.
 * Errors: TW_EINVAL (bad addr/options, a token or token file content that is
 * empty or longer than 1024 bytes), -errno when the token file cannot be
 * opened or read (e.g. -ENOENT), -ECONNREFUSED and other -errno, TW_ETIMEDOUT, TW_EUNAUTHORIZED
 * (server needs a token and none was given, the server rejected it, the server's proof was wrong,
 * or a token was given but the server does not authenticate), TW_EBUSY (server full), TW_EPROTO and
 * TW_E* verdicts for a misbehaving server.
 */
TW_EXTERN int tw_client_connect(const char *addr, const struct tw_client_options *opts,
                                tw_client **out);
/* Same as tw_client_connect; on failure copies a human-readable reason
 * (NUL-terminated, truncated to cap) into errbuf when errbuf is not NULL. */
TW_EXTERN int tw_client_connect_error(const char *addr, const struct tw_client_options *opts,
                                      tw_client **out, char *errbuf, size_t cap);

/* Sends GOODBYE when the connection is alive, closes it and frees the handle.
 * NULL is accepted. Never fails. */
TW_EXTERN void tw_close(tw_client *c);

/* Detail for the last failed call on c: the server's ERROR message, or a local
 * explanation. Owned by c; valid until the next call on c. "" when none. */
TW_EXTERN const char *tw_client_last_error_message(const tw_client *c);

/* Which data plane moved the bytes of the last successful get or put on c:
 * "rdma pull (tcp;ofi_rxm)", "rdma push (shm)", "gdr push (shm)" (GPU
 * memory here moved by the plane with no host copy), "rdma pull (shm) +
 * staging (not GPUDirect: REASON)" (GPU memory here that was not admitted),
 * "inline tcp", or, on a
 * connection with RDMA, "inline tcp (below the rdma threshold)" (a put
 * smaller than rdma_min_bytes) or "inline tcp (the server chose inline)"
 * (the server answered a request for RDMA with the inline plane, e.g. a
 * tensor below its --rdma-min-bytes); "" before the first. Valid until the
 * next call on c. */
TW_EXTERN const char *tw_client_data_plane(const tw_client *c);
/* The RDMA state of the connection: "rdma PROVIDER" once the endpoint
 * exchange succeeded, else "inline: " and the reason (not requested, the
 * server has no RDMA plane, the server declined and why, the local plane
 * did not open and why). Valid as long as c. */
TW_EXTERN const char *tw_client_fabric_status(const tw_client *c);

/* 1 while c's connection is usable, 0 once a connection-level error closed
 * it (every later call then fails with -ENOTCONN; reconnect with a new
 * handle), once the server said GOODBYE (the next call fails with
 * TW_ESHUTDOWN, every one after it with -ENOTCONN), or for NULL. Exact, unlike guessing from an
 * error code: the same code can be request-level or connection-level depending on how the server
 * sent it. Never fails, does no I/O. */
TW_EXTERN int tw_client_is_connected(const tw_client *c);

/* Negotiated limits, valid after connect. */
TW_EXTERN uint32_t tw_client_max_frame(const tw_client *c);
TW_EXTERN uint32_t tw_client_max_inflight(const tw_client *c);
/* The threshold in effect on this connection for a put alone in flight:
 * the option, or with TW_RDMA_MIN_BYTES_AUTO the provider's default
 * (tw_client_options.rdma_min_bytes: a call with 32 or more in flight uses
 * 32 KiB instead over shm, and for GPU memory over every provider).
 * UINT64_MAX for NULL. */
TW_EXTERN uint64_t tw_client_rdma_min_bytes(const tw_client *c);

/*
 * Stores len bytes at data under name (NUL-terminated UTF-8), replacing any
 * tensor of that name atomically when the server answers OK. desc->byte_length
 * is ignored; len must equal the byte length computed from dtype and shape.
 * Errors: TW_EINVAL (bad name/dtype/shape/len, locally or from the server),
 * TW_ECAPACITY, TW_EDEVICE (unknown device tag), TW_ECHECKSUM, TW_EBUSY,
 * connection-level errors.
 */
TW_EXTERN int tw_put(tw_client *c, const char *name, const struct tw_tensor_desc *desc,
                     const void *data, size_t len);

/*
 * Fetches name into buf (cap bytes). On success and on -ENOBUFS, *out_desc
 * (may be NULL) describes the tensor and out_desc->byte_length says how many
 * bytes it needs. -ENOBUFS: cap was too small; nothing useful is in buf, the
 * transfer was cancelled (ERROR CANCELLED, then a PING whose PONG proves the
 * server stopped: one extra round trip) and the connection stays usable with
 * nothing of that tensor left on it.
 * Errors: TW_ENOTFOUND, TW_EINVAL, TW_ECHECKSUM, -ENOBUFS, connection-level.
 */
TW_EXTERN int tw_get(tw_client *c, const char *name, void *buf, size_t cap,
                     struct tw_tensor_desc *out_desc);

/* Like tw_get into a buffer the library allocates: page-aligned, at least one
 * byte even for an empty tensor, owned by the caller, freed with tw_free().
 * One of 2 MiB or more is 2 MiB-aligned and advised for transparent huge
 * pages (madvise(MADV_HUGEPAGE); with THP in "madvise" mode, memory from
 * malloc is not, and sockets copy 4 KiB pages markedly slower on some
 * hosts: docs/performance.md). On failure *out_buf is NULL. out_len and
 * out_desc may be NULL. */
TW_EXTERN int tw_get_alloc(tw_client *c, const char *name, void **out_buf, size_t *out_len,
                           struct tw_tensor_desc *out_desc);
/* Frees a buffer from tw_get_alloc. NULL is accepted. */
TW_EXTERN void tw_free(void *buf);

/* The device-memory calls below exist (for bindings that test for them). */
#define TW_CLIENT_DEVICE_MEMORY 1

/*
 * Device sibling of tw_get_alloc: fetches name into memory the library
 * allocates on `device` ("cuda:N"; "cpu" behaves as tw_get_alloc), at least
 * one byte, owned by the caller, freed with tw_device_free(). Sizes the
 * allocation with a STAT first, so a tensor replaced by a larger one in
 * between is retried (up to 3 times). On failure *out_buf is NULL.
 * Errors: those of tw_get, TW_EDEVICE (no such GPU or no driver), -ENOMEM.
 */
TW_EXTERN int tw_get_alloc_device(tw_client *c, const char *name, const char *device,
                                  void **out_buf, size_t *out_len, struct tw_tensor_desc *out_desc);
/* len bytes (at least 1) of memory on device ("cpu" or "cuda:N"), freed
 * with tw_device_free(). "cpu" memory is allocated as tw_get_alloc's (huge
 * pages advised from 2 MiB). Returns 0, TW_EINVAL (bad tag), TW_EDEVICE,
 * -ENOMEM. */
TW_EXTERN int tw_device_alloc(const char *device, size_t len, void **out);
/* Frees memory from tw_device_alloc / tw_get_alloc_device. NULL is accepted. */
TW_EXTERN void tw_device_free(void *p);
/* Copies len bytes between any two of host and device memory (classified
 * like transfer buffers), synchronously. Device to device is TW_EINVAL. */
TW_EXTERN int tw_mem_copy(void *dst, const void *src, size_t len);

/* Describes name without fetching it. Errors: TW_ENOTFOUND, TW_EINVAL. */
TW_EXTERN int tw_stat(tw_client *c, const char *name, struct tw_tensor_desc *out_desc);

/* Removes name. Errors: TW_ENOTFOUND, TW_EINVAL. */
TW_EXTERN int tw_delete(tw_client *c, const char *name);

/* One entry of a listing. */
struct tw_tensor_info {
    const char *name; /* NUL-terminated; lives inside the listing's block */
    struct tw_tensor_desc desc;
};

/* Lists the tensors whose name starts with prefix (NULL or "" = all), sorted
 * by name bytewise. On success *out is one allocation holding *count entries
 * and their names (NULL when *count is 0); free it with tw_list_free. */
TW_EXTERN int tw_list(tw_client *c, const char *prefix, struct tw_tensor_info **out, size_t *count);
TW_EXTERN void tw_list_free(struct tw_tensor_info *list);

/* Round trip to the server; *rtt_ns (may be NULL) gets the time measured. */
TW_EXTERN int tw_ping(tw_client *c, uint64_t *rtt_ns);

/* One server counter (keys are [a-z0-9_.], e.g. "tensors", "bytes_stored"). */
struct tw_stat_entry {
    const char *key; /* NUL-terminated; inside the block */
    uint64_t value;
};
/* Fetches the server's counters. *out: one block freed with tw_stats_free. */
TW_EXTERN int tw_stats(tw_client *c, struct tw_stat_entry **out, size_t *count);
TW_EXTERN void tw_stats_free(struct tw_stat_entry *stats);

/*
 * Batches: many transfers kept in flight on one connection (up to the
 * negotiated max_inflight), e.g. the blocks of a KV cache. Each item gets its
 * own status; a failed item does not stop the others unless the connection
 * itself fails (then every unfinished item gets that error).
 *
 * tw_batch_get: for each item, name and buf/len (capacity) are inputs; desc
 *   and status are outputs (status -ENOBUFS with desc.byte_length when len is
 *   too small). tw_batch_put: name, desc, buf, len are inputs, status output.
 * Items and their buffers must stay valid until the call returns, and the
 * bytes of puts unchanged: a put's bytes may be read at any time during the
 * call (small puts from GPU memory are copied to host memory in groups,
 * ahead of their requests). Buffers of gets in one batch must not overlap.
 * A name that appears twice in one tw_batch_put is stored twice, in an
 * unspecified order: the tensor ends as one of the two (each commit is
 * atomic), never a mix.
 * Returns 0 when every item succeeded, otherwise the status of the first
 * failed item (by index). Argument errors (NULL items with n > 0) return
 * TW_EINVAL without touching the connection.
 * Memory: the handle keeps the per-item state of its largest batch so far
 * (about 260 bytes an item, for batches of up to 65,536 items; larger ones
 * allocate it per call) for later calls, until tw_close.
 */
struct tw_batch_item {
    const char *name;
    struct tw_tensor_desc desc;
    void *buf;           /* get: destination; put: source (not written) */
    size_t len;          /* get: capacity in bytes; put: bytes to send */
    int status;          /* out: 0 or a negative code */
    uint64_t latency_ns; /* out: from sending the request to its last reply
                            (0 when it was never sent) */
};
TW_EXTERN int tw_batch_get(tw_client *c, struct tw_batch_item *items, size_t n);
TW_EXTERN int tw_batch_put(tw_client *c, struct tw_batch_item *items, size_t n);

#ifdef __cplusplus
}
#endif
#endif
