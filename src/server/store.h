/*
 * The tensor store: named tensors in page-aligned host memory.
 *
 * Every stored tensor is a struct tw_tensor, one immutable *version* of a
 * name. Versions are refcounted: the store's name map holds one reference to
 * the current version of each name, and every reader (a GET being sent, a
 * DATA frame in an output queue) holds its own. Overwriting or deleting a
 * name only swaps or drops the map's reference, so readers of the old version
 * finish undisturbed and its memory goes away with the last reference.
 *
 * A PUT allocates a version with tw__store_alloc() (this reserves its bytes
 * against the capacity), fills tensor->data, and publishes it with
 * tw__store_commit(); an abandoned put just drops its reference. Capacity
 * counts every live version's byte_length: committed, being written, and old
 * versions still being read. So replacing a tensor needs room for both
 * copies until the old one's readers are done.
 *
 * Large versions (>= 1 MiB) live in tw__hostmem_alloc() memory, so RDMA
 * registration caches know their lifetime and may keep them registered;
 * smaller ones live in the store's slab (server/slab.h: arenas faulted in
 * ahead, freed blocks reused by size; unknown lifetime to RDMA: registered
 * per use).
 *
 * A version whose device tag is cuda:N lives in that GPU's memory instead
 * (allocated through the store's devmem ops, on that device's primary
 * context, freed with the last reference) and counts against that GPU's
 * capacity; tw__store_add_gpu() declares the GPUs first. The CPU's numbers
 * stay in capacity/reserved/stored_bytes.
 *
 * Single-threaded (the daemon's event loop); no locks.
 */
#ifndef TW_SERVER_STORE_H
#define TW_SERVER_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "proto/device.h"
#include "proto/proto.h"
#include "server/slab.h"

struct tw_store;

struct tw_tensor {
    uint32_t refs;
    struct tw_store *store;
    uint8_t dtype;
    uint8_t ndim;
    uint8_t has_crc;
    uint8_t mmapped; /* storage from tw__hostmem (large) */
    uint8_t in_slab; /* storage from the store's slab (small) */
    uint8_t pinned;  /* in_slab, from the page-locked slab (tw__store_alloc_pinned) */
    uint32_t crc32c;
    uint64_t byte_length;
    uint64_t shape[TW_MAX_NDIM];
    int gpu;          /* index in store->gpu, -1 in host memory */
    uint8_t *data;    /* byte_length bytes, page aligned; NULL when 0 bytes.
                       * On a GPU: a device address (not for the CPU). */
    size_t alloc_len; /* bytes actually mapped / allocated */
    struct tw_tensor *hnext;
    char device_tag[TW_MAX_DEVICE_TAG_LEN + 1];
    uint16_t name_len;
    char name[]; /* name_len bytes + NUL (for logs; names contain no NUL) */
};

/* Freed large buffers kept for reuse: a put of the same (page-rounded) size
 * gets memory that is already faulted in, instead of fresh zeroed pages.
 * At most TW_STORE_SPARES buffers and spare_max bytes; when full, the buffer
 * given back longest ago is freed to make room for the newest. */
#define TW_STORE_SPARES 16

/* Device memory for GPU-resident versions: CUDA (tw__store_devmem_cuda) in
 * the daemon, a host-memory double in tests. */
struct tw_store_devmem_ops {
    int (*alloc)(int ordinal, size_t len, void **p, char *err, size_t errlen);
    /* len: the alloc's. May keep the memory for a later alloc of the same
     * size (the CUDA ops carve small versions from chunks they keep:
     * server/devslab.h). */
    void (*free)(int ordinal, void *p, size_t len);
    /* Optional: gives back memory free kept since the previous call (all:
     * every byte kept); the bytes given back. */
    uint64_t (*trim)(int ordinal, int all);
    /* Synchronous copies between a version's device memory and host memory
     * (the staging planes, xfer_staged.c): 0 or a negative code with the
     * reason in err. NULL: GPU versions cannot be moved (staging refuses). */
    int (*to_host)(int ordinal, void *dst, const void *src, size_t len, char *err, size_t errlen);
    int (*from_host)(int ordinal, void *dst, const void *src, size_t len, char *err, size_t errlen);
    /* Optional (NULL: copies use pageable memory): page-lock host memory
     * for fast copies with any GPU (xfer_staged.c keeps the host copies of
     * staged transfers pinned through a registration cache). */
    int (*pin)(int ordinal, void *p, size_t len, char *err, size_t errlen);
    void (*unpin)(int ordinal, void *p);
    /* Optional, all three or none (NULL: staging copies synchronously):
     * copy_async queues a copy between device memory and pinned host
     * memory (to_host: device -> host, else host -> device) on the
     * device's own stream, in queue order, returns and sets *ticket, the
     * copy's number on that device (increasing). The bytes are in place
     * once copied(ordinal, ticket, ...) answered 1 (which also covers
     * every earlier ticket of the device) or fence(ordinal) returned 0.
     * Both buffers must stay allocated until then. copied: 1 done, 0 not
     * yet (only when !wait; it never blocks then), or a negative code. A
     * copy refused when queued fails here (0 or a negative code, reason in
     * err); one that fails while it runs, or a batch the driver refused
     * later, fails the next copied or fence of that device. */
    int (*copy_async)(int ordinal, void *dst, const void *src, size_t len, int to_host,
                      uint64_t *ticket, char *err, size_t errlen);
    int (*copied)(int ordinal, uint64_t ticket, int wait, char *err, size_t errlen);
    int (*fence)(int ordinal, char *err, size_t errlen);
    /* Optional: device memory the ops hold from the driver for small
     * versions (the CUDA ops' slab chunks) in *bytes, and how much of it
     * no version uses now in *free_bytes (STATS). */
    void (*held)(int ordinal, uint64_t *bytes, uint64_t *free_bytes);
};
extern const struct tw_store_devmem_ops tw__store_devmem_cuda;

#define TW_STORE_MAX_GPUS 64

/* Accounting of one GPU (same meaning as the CPU's fields below). */
struct tw_store_gpu {
    int ordinal;
    uint64_t capacity; /* 0 = unlimited */
    uint64_t reserved;
    uint64_t stored_bytes;
};

struct tw_store {
    uint64_t capacity;     /* 0 = unlimited */
    uint64_t reserved;     /* byte_length of every live version */
    uint64_t stored_bytes; /* byte_length of the current versions */
    size_t count;          /* names stored */
    size_t nbuckets;
    struct tw_tensor **buckets;
    struct {
        void *p;
        size_t len;
        int aged;     /* survived one tw__store_trim_spares() unused */
        uint64_t seq; /* when it was given back (spare_seq then) */
    } spare[TW_STORE_SPARES];
    uint64_t spare_bytes, spare_max;
    uint64_t spare_seq; /* spares given back so far: the oldest goes first */
    /* Called (event loop) with large storage about to go back to the spare
     * pool: a later put of the same size reuses the pages, so cached RDMA
     * registrations of them must be revoked first. Storage that is freed
     * goes through tw__hostmem_free(), which invalidates every cache itself.
     * NULL: nothing to do. */
    void (*on_recycle)(void *ctx, void *p, size_t len);
    void *recycle_ctx;
    struct tw_slab slab;                      /* storage of small host versions */
    struct tw_slab pinned_slab;               /* small page-locked host copies */
    int pinned_state;                         /* 0 not set up, 1 usable, -1 not usable */
    const struct tw_store_devmem_ops *devmem; /* default: CUDA */
    unsigned ngpus;
    struct tw_store_gpu gpu[TW_STORE_MAX_GPUS];
};

int tw__store_init(struct tw_store *s, uint64_t capacity);
/* Drops the map's references. Versions still referenced elsewhere stay valid
 * (their store pointer too: call this only after every reader released). */
void tw__store_destroy(struct tw_store *s);

/*
 * Frees the spare buffers that stayed unused since the previous call (and
 * marks the others), so an idle server gives back the memory of sizes
 * nobody puts any more: called every TW_SRV_TRIM_MS, a spare lives 1 to 2
 * periods unused; the slab's free small-tensor blocks likewise
 * (tw__slab_trim). Returns the bytes freed.
 */
uint64_t tw__store_trim_spares(struct tw_store *s);

/* Declares GPU `ordinal` with its capacity (0 = unlimited). Returns 0,
 * TW_EINVAL when it is already declared or TW_STORE_MAX_GPUS are. */
int tw__store_add_gpu(struct tw_store *s, int ordinal, uint64_t capacity);
/* Bytes device d can still take (UINT64_MAX when unlimited, 0 for a GPU
 * that was not declared). */
uint64_t tw__store_device_free_bytes(const struct tw_store *s, const struct tw_device *d);
/* The accounting of a declared GPU, or NULL. */
const struct tw_store_gpu *tw__store_gpu(const struct tw_store *s, int ordinal);

/*
 * Allocates a new, unpublished version described by d (the descriptor must
 * already have passed tw__descriptor_check). On success *out holds the only
 * reference. Returns 0, TW_ECAPACITY when byte_length does not fit in the
 * remaining capacity of its device (nothing changes), TW_EDEVICE when its
 * tag names no declared device, or -ENOMEM (host or device memory).
 */
int tw__store_alloc(struct tw_store *s, const struct tw_descriptor *d, struct tw_tensor **out);
/*
 * As tw__store_alloc for a host version (d names the CPU), for the host
 * copy of a staged GPU tensor: one under TW_STORE_PINNED_BLOCK_MAX comes
 * from page-locked arenas (pinned through the devmem ops, at most
 * TW_STORE_PINNED_MAX bytes of them, kept for the store's life) and has
 * t->pinned set, so asynchronous copies may target it; otherwise, or when
 * none is left or pinning failed, it is an ordinary host version (from
 * 1 MiB a mapping of its own, which the staging plane pins through its
 * registration cache: per block, and evicting others, when a batch of
 * 1-8 MiB blocks went that way: docs/performance.md).
 */
#define TW_STORE_PINNED_MAX ((uint64_t)256 << 20)
#define TW_STORE_PINNED_BLOCK_MAX ((size_t)8 << 20)
int tw__store_alloc_pinned(struct tw_store *s, const struct tw_descriptor *d,
                           struct tw_tensor **out);
/* Publishes t under its name, replacing any current version atomically. The
 * store takes its own reference; the caller keeps (and later drops) its. */
void tw__store_commit(struct tw_store *s, struct tw_tensor *t);
/* The current version of name with a new reference, or NULL. */
struct tw_tensor *tw__store_get(struct tw_store *s, const uint8_t *name, size_t len);
/* Unpublishes name. Returns 0 or TW_ENOTFOUND. */
int tw__store_delete(struct tw_store *s, const uint8_t *name, size_t len);
/*
 * The current versions whose name starts with prefix, sorted bytewise by
 * name, each with a new reference. *out is a malloc'd array the caller frees
 * after dropping every reference (tw__store_list_free does both).
 */
int tw__store_list(struct tw_store *s, const uint8_t *prefix, size_t plen, struct tw_tensor ***out,
                   size_t *n);
void tw__store_list_free(struct tw_tensor **list, size_t n);

/* The device memory ops of s (its devmem, or CUDA's). */
const struct tw_store_devmem_ops *tw__store_devmem(const struct tw_store *s);

/* Bytes still available (UINT64_MAX when unlimited). */
uint64_t tw__store_free_bytes(const struct tw_store *s);

void tw__tensor_ref(struct tw_tensor *t);
void tw__tensor_unref(struct tw_tensor *t);
/* Fills d with views into t (valid while the caller holds a reference).
 * with_crc: include the checksum when t has one. */
void tw__tensor_describe(const struct tw_tensor *t, int with_crc, struct tw_descriptor *d);

#endif
