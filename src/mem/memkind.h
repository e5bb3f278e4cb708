/*
 * Memory kinds: host and CUDA memory behind one ops table.
 *
 * A memory kind answers the questions the registration cache and the data
 * plane ask about a pointer: what is it (query), at which granularity must it
 * be registered (round), is the memory behind a cached address still the
 * memory it was (same_backing), and how to copy to and from it. A later
 * backend (GPUDirect through dma-buf, another accelerator) is one more table:
 * nothing in the cache switches on the kind.
 *
 * Tables are static and immutable; every op may be called from any thread
 * with no lock held by the caller. Ops never keep pointers to their arguments.
 */
#ifndef TW_MEM_MEMKIND_H
#define TW_MEM_MEMKIND_H

#include <stddef.h>
#include <stdint.h>

enum tw_memkind {
    TW_MEMKIND_AUTO = 0, /* lookup hint only: ask the drivers what it is */
    TW_MEMKIND_HOST = 1,
    TW_MEMKIND_CUDA = 2,
    TW_MEMKIND_MAX = 3,
};

/* TW_MEM_ATTR_TRACKED: the lifetime of the memory is known to tensorwire
 * (library allocation, tw_mem_register, or a driver-managed GPU buffer whose
 * identity is checked on every lookup), so a registration may be cached. */
#define TW_MEM_ATTR_TRACKED 0x1u

/* What a kind says about one range. Plain data, copied freely. */
struct tw_mem_attr {
    enum tw_memkind kind;
    uint32_t flags;        /* TW_MEM_ATTR_* */
    int device;            /* CUDA ordinal; -1 for host memory */
    uint64_t buffer_id;    /* CUDA: CU_POINTER_ATTRIBUTE_BUFFER_ID; host: 0 */
    uintptr_t alloc_base;  /* the allocation holding the range (CUDA: driver */
    size_t alloc_len;      /* range; host: the tracked buffer), 0/0 if unknown */
    uint64_t lifetime_gen; /* host: tw__hostmem_generation() when queried */
};

/*
 * Asynchronous copies for the staging pipeline (mem/staging.h), provided by
 * kinds whose memory the CPU cannot touch (CUDA); NULL for host memory.
 * Streams and events are opaque handles owned by whoever created them and
 * bound to `device` (ops that need the device's context make it current on
 * the calling thread). Every op returns 0 or a negative code with the reason
 * in err (may be NULL); none keeps pointers to its arguments.
 */
struct tw_memkind_async_ops {
    /* Page-lock [p, p+len) (page aligned host memory the caller owns) so
     * the devices of this kind can DMA to and from it, through `device`'s
     * context, usable from every device's. Undone with unpin before the
     * memory is freed. */
    int (*pin)(int device, void *p, size_t len, char *err, size_t errlen);
    void (*unpin)(int device, void *p);
    int (*stream_create)(int device, void **stream, char *err, size_t errlen);
    void (*stream_destroy)(int device, void *stream);
    /* Blocks until everything queued on stream finished: 0 or its error. */
    int (*stream_wait)(int device, void *stream, char *err, size_t errlen);
    int (*event_create)(int device, void **event, char *err, size_t errlen);
    void (*event_destroy)(int device, void *event);
    /* Queue a copy on stream and return; the bytes move later. dst/src of
     * the host side must stay valid (and, for pinned staging, untouched)
     * until an event recorded after the copy completed. */
    int (*copy_to_host_async)(void *stream, void *dst, uintptr_t src, size_t len,
                              const struct tw_mem_attr *attr, char *err, size_t errlen);
    int (*copy_from_host_async)(void *stream, uintptr_t dst, const void *src, size_t len,
                                const struct tw_mem_attr *attr, char *err, size_t errlen);
    /* Optional (NULL: copy_from_host_async one by one): queue n copies of
     * pinned host memory src[i] to this kind's memory dst[i] on device
     * `device`, in as few driver calls as it can. 0, or the code of the
     * first copy refused: the *done copies before it were queued, it and
     * those after were not. */
    int (*copy_batch_from_host_async)(int device, void *stream, void *const *dst,
                                      const void *const *src, const size_t *len, size_t n,
                                      size_t *done, char *err, size_t errlen);
    /* Optional: the same the other way, this kind's memory src[i] to
     * pinned host memory dst[i]. */
    int (*copy_batch_to_host_async)(int device, void *stream, void *const *dst,
                                    const void *const *src, const size_t *len, size_t n,
                                    size_t *done, char *err, size_t errlen);
    /* Mark the end of the work queued so far on stream. */
    int (*event_record)(int device, void *event, void *stream, char *err, size_t errlen);
    /* 1 when the work before the record finished, 0 while it runs, or the
     * negative code of a copy that failed. Never blocks. */
    int (*event_query)(int device, void *event, char *err, size_t errlen);
    /* Blocks until the work before the record finished: 0 or its error. */
    int (*event_wait)(int device, void *event, char *err, size_t errlen);
};

struct tw_memkind_ops {
    enum tw_memkind kind;
    const char *name; /* "host", "cuda" */

    /* Non-zero when a cached region may only be reused after query() and
     * same_backing() confirm the memory is still the same (CUDA: addresses
     * are reused by the driver without notice). Zero when invalidation
     * hooks already guarantee it (tracked host memory), which keeps a host
     * cache hit free of any extra lookup. */
    int check_on_hit;

    /*
     * Describe [addr, addr+len). Returns 0 and fills *attr when the whole
     * range is memory of this kind inside one allocation; -ERANGE when it
     * starts in an allocation of this kind and leaves it; TW_EINVAL when it
     * is not memory of this kind (or spans allocations of a kind that does
     * not say which); TW_EDEVICE when the kind is unavailable here (no
     * driver). Reason in err (may be NULL).
     * Cost: host, one lock + binary search; CUDA, one cuPointerGetAttributes.
     */
    int (*query)(uintptr_t addr, size_t len, struct tw_mem_attr *attr, char *err, size_t errlen);

    /* Registration granularity in bytes, a power of two (host: the page
     * size; CUDA: 64 KiB, the GPU BAR page). */
    size_t (*granularity)(void);

    /*
     * The range to register for [addr, addr+len): rounded out to the
     * granularity, and for kinds whose registrations must stay inside one
     * allocation (CUDA, dma-buf export), clamped to attr's allocation.
     * Pure function.
     */
    void (*round)(const struct tw_mem_attr *attr, uintptr_t addr, size_t len, uintptr_t *start,
                  uintptr_t *end);

    /* Non-zero when a registration made for `cached` is still valid for
     * memory now described by `now` (same device and buffer id for CUDA).
     * Pure function. */
    int (*same_backing)(const struct tw_mem_attr *cached, const struct tw_mem_attr *now);

    /* Copy helpers (synchronous). Return 0 or a negative code with reason. */
    int (*copy_to_host)(void *dst, uintptr_t src, size_t len, const struct tw_mem_attr *attr,
                        char *err, size_t errlen);
    int (*copy_from_host)(uintptr_t dst, const void *src, size_t len,
                          const struct tw_mem_attr *attr, char *err, size_t errlen);

    /*
     * Optional (NULL when the kind has none): export [addr, addr+len) as a
     * dma-buf file descriptor for peer-to-peer DMA registration (libfabric
     * FI_MR_DMABUF, ibv_reg_dmabuf_mr). addr and len must come from round().
     * On success *fd is owned by the caller (close it after deregistering)
     * and *offset is addr's offset inside the dma-buf.
     */
    int (*export_dmabuf)(uintptr_t addr, size_t len, const struct tw_mem_attr *attr, int *fd,
                         uint64_t *offset, char *err, size_t errlen);

    /* Optional (NULL for memory the CPU reads directly): asynchronous copies
     * through pinned host memory, for the staging pipeline. */
    const struct tw_memkind_async_ops *async;
};

extern const struct tw_memkind_ops tw__memkind_host;
extern const struct tw_memkind_ops tw__memkind_cuda;
extern const struct tw_memkind_async_ops tw__memkind_cuda_async;

/* The built-in table for a kind, NULL for AUTO or out of range. */
const struct tw_memkind_ops *tw__memkind_ops(enum tw_memkind kind);

/*
 * Classify [addr, addr+len) against `table` (indexed by enum tw_memkind;
 * NULL entries fall back to the built-in ones). With TW_MEMKIND_AUTO, CUDA
 * is asked first when its driver is loaded (one query), and anything it
 * does not claim is host memory, except a range that starts in a CUDA
 * allocation and leaves it: TW_EINVAL, the reason in err (no CPU may
 * touch it). Returns 0 with *ops and *attr set, or the kind's error.
 */
int tw__memkind_classify(const struct tw_memkind_ops *const table[TW_MEMKIND_MAX], uintptr_t addr,
                         size_t len, enum tw_memkind hint, const struct tw_memkind_ops **ops,
                         struct tw_mem_attr *attr, char *err, size_t errlen);

/* Round [addr, addr+len) out to `gran` (a power of two): a pure helper for
 * round() implementations. */
void tw__memkind_round_out(uintptr_t addr, size_t len, size_t gran, uintptr_t *start,
                           uintptr_t *end);

/* CRC32C of [addr, addr+len) of memory of kind k that the CPU may not
 * read directly (GPU memory): read back through k->copy_to_host in 4 MiB
 * pieces, one extra pass (the cost the descriptor's CRC flag asks for).
 * Returns 0 with *crc set, or the copy's code with the reason in err. */
int tw__memkind_crc32c(const struct tw_memkind_ops *k, const struct tw_mem_attr *attr,
                       uintptr_t addr, size_t len, uint32_t *crc, char *err, size_t errlen);

#define TW_CUDA_GPU_PAGE ((size_t)64 * 1024)

#endif
