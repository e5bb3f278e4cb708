/*
 * Registration (pin-down) cache.
 *
 * Registering memory for RDMA pins it and programs the NIC (or, for GPU
 * memory, maps it through the GPU BAR): microseconds to milliseconds. The
 * cache keeps regions registered after a transfer releases them (lazy
 * unpinning) so the next transfer on the same memory skips that cost.
 *
 *   lookup(addr, len, access) -> region (referenced)   ... transfer ...
 *   release(region)
 *
 * Policy:
 *  - Regions are rounded out to the memory kind's granularity (host: page;
 *    CUDA: 64 KiB GPU page, clamped to the allocation). A lookup hits a
 *    cached region that covers the requested range with exactly the
 *    requested access rights (the key includes them, so a key handed to a
 *    peer never grants more than the transfer needs). Overlapping regions
 *    of the same key are merged into one on the next miss.
 *  - Released regions stay registered, in LRU order. When live
 *    registrations pass max_entries, or a pool's bytes (host; each GPU) pass
 *    its limit, the least recently used idle regions are deregistered.
 *    A registration that fails for lack of resources (-ENOMEM, -ENOSPC,
 *    -EAGAIN from the registrar) evicts idle regions and retries.
 *  - A region in use (referenced) is never deregistered: eviction skips it,
 *    and invalidation only unlinks it so no new lookup finds it; it is
 *    deregistered when its last reference is released.
 *  - GPU memory is re-identified on every lookup (buffer id, device): a
 *    cached region whose address now belongs to another allocation is
 *    dropped and the lookup misses. Host memory is cached only when its
 *    lifetime is tracked (hostmem.h, tensorwire/mem.h); other host memory
 *    gets a one-shot registration, deregistered on release.
 *  - Concurrent lookups of the same range register it once: the first
 *    inserts an in-progress region, the others wait for it on a condition
 *    variable and then hit.
 *
 * GPU ranges. Registration and deregistration calls for GPU memory of one
 * device run one at a time, whichever threads look up, release or
 * invalidate (seed 003: mapping and unmapping a range of the GPU's BAR
 * must not race, nor two mappings of one range): a per-device serial lock
 * is held around each such reg and dereg call. Registrations are cached,
 * so serializing them costs nothing per transfer.
 * tests/regcache/test_regcache_gpu_serial.c checks it under load.
 *
 * Locking. One mutex per cache protects the index, the LRU order, the
 * reference counts and the counters. The registrar is NEVER called with it
 * held (reg and dereg may block, take the registrar's own locks, or call
 * tw__regcache_invalidate). Lock order, outermost first:
 *
 *   hostmem subscriber lock -> cache lock -> hostmem table lock
 *   GPU serial lock (one device; recursive) -> registrar's locks
 *   GPU serial lock -> cache lock (a registrar calling invalidate)
 *
 * The GPU serial lock is never taken with the cache lock held. A registrar
 * must not invalidate another GPU's memory from inside reg or dereg (two
 * serial locks are never held at once).
 *
 * (the hostmem table lock is a leaf; the registrar's own locks are only
 * ever taken with no cache lock held, so they are unordered with it.)
 * tw__regcache_invalidate() takes only the cache lock, briefly, and never
 * waits for an in-progress registration, so it cannot deadlock against a
 * lookup, even when called from inside a registrar callback.
 */
#ifndef TW_MEM_REGCACHE_H
#define TW_MEM_REGCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "mem/memkind.h"

/* Access rights of a registration: part of the cache key. */
#define TW_ACCESS_LOCAL_READ 0x1u   /* source of a local send / RMA write */
#define TW_ACCESS_LOCAL_WRITE 0x2u  /* target of a local receive / RMA read */
#define TW_ACCESS_REMOTE_READ 0x4u  /* a peer may RMA-read it */
#define TW_ACCESS_REMOTE_WRITE 0x8u /* a peer may RMA-write it */
#define TW_ACCESS_ALL 0xfu

/* What the registrar is asked to register. Valid during the call only. */
struct tw_reg_request {
    uintptr_t addr; /* rounded start (memkind round()) */
    size_t len;     /* rounded length */
    uint32_t access;
    const struct tw_memkind_ops *kind; /* how to reach the memory */
    struct tw_mem_attr attr;           /* kind, device, buffer id, allocation */
};

/*
 * The backend that really registers memory (libfabric fi_mr_regattr, a
 * dma-buf export, a fake in tests). Both calls run with no cache lock held,
 * possibly on several threads at once. They may call
 * tw__regcache_invalidate(), but not tw_mem_register/tw_mem_unregister
 * (dereg can run inside an unregistration's invalidation hook).
 */
struct tw_registrar_ops {
    const char *name;
    /*
     * Register req; on success return 0 and an opaque handle (owned by the
     * registrar, given back to dereg). On failure return a negative code
     * and write the reason into err (may be NULL). -ENOMEM, -ENOSPC and
     * -EAGAIN mean "out of registration resources": the cache evicts idle
     * regions and calls reg again.
     */
    int (*reg)(void *ctx, const struct tw_reg_request *req, void **handle, char *err,
               size_t errlen);
    /* Release a handle from reg. Cannot fail from the cache's view. */
    void (*dereg)(void *ctx, void *handle);
};

#define TW_REGCACHE_MAX_GPUS 64

struct tw_regcache_config {
    size_t max_entries;        /* live registrations; 0: 4096 */
    size_t max_host_bytes;     /* host pool; 0: half the physical memory */
    size_t max_gpu_bytes;      /* per GPU; 0: gpu_bar1_percent of BAR1 */
    unsigned gpu_bar1_percent; /* 0: 50 (fallback 1 GiB without NVML) */
    /* Memory kind tables by enum tw_memkind; NULL: the built-in ones.
     * Tests inject fakes here; the tables must outlive the cache. */
    const struct tw_memkind_ops *memkinds[TW_MEMKIND_MAX];
};

/* Counters, a consistent snapshot taken under the cache lock. */
struct tw_regcache_stats {
    uint64_t hits;
    uint64_t misses;        /* lookups that registered (incl. uncached) */
    uint64_t uncached;      /* of which: host memory of unknown lifetime */
    uint64_t waits;         /* lookups that waited for an in-progress one */
    uint64_t evictions;     /* idle regions deregistered for limits/pressure */
    uint64_t invalidations; /* regions unlinked by tw__regcache_invalidate */
    uint64_t stale;         /* GPU regions dropped: address reused */
    uint64_t merges;        /* overlapping regions folded into a new one */
    uint64_t retries;       /* registrations retried after eviction */
    uint64_t reg_failures;
    uint64_t registrations;   /* successful reg calls */
    uint64_t deregistrations; /* dereg calls (done or scheduled) */
    uint64_t reg_ns;          /* wall time spent in reg calls */
    uint64_t entries;         /* live registrations now (incl. in use) */
    uint64_t bytes;           /* their rounded bytes */
    uint64_t in_use;          /* of which referenced */
};

struct tw_regcache;
struct tw_regcache_region;

/*
 * Create a cache in front of `registrar` (ctx passed to its calls). The
 * registrar table, ctx and config memkinds must outlive the cache. The
 * cache subscribes to host-memory unregistrations (tw_mem_unregister).
 * Returns 0 or -ENOMEM / TW_EINVAL.
 */
int tw__regcache_create(const struct tw_regcache_config *cfg, const struct tw_registrar_ops *reg,
                        void *ctx, struct tw_regcache **out);

/*
 * Deregister every cached region and free the cache. Fails with TW_EBUSY
 * (cache untouched) while any region is referenced or in progress. Must
 * not run concurrently with other calls on the cache.
 */
int tw__regcache_destroy(struct tw_regcache *c);

/*
 * Find or register a region covering [addr, addr+len) with exactly
 * `access` (a non-empty subset of TW_ACCESS_ALL). `hint` names the memory
 * kind when the caller knows it (TW_MEMKIND_HOST skips any driver call);
 * TW_MEMKIND_AUTO asks the drivers. On success *out holds one reference:
 * the region and its handle stay valid until tw__regcache_release(*out),
 * whatever invalidations happen meanwhile. On failure returns the memkind's
 * or registrar's code with the reason in err (may be NULL).
 * Thread-safe; may block while another thread registers the same range.
 */
int tw__regcache_lookup(struct tw_regcache *c, const void *addr, size_t len, uint32_t access,
                        enum tw_memkind hint, struct tw_regcache_region **out, char *err,
                        size_t errlen);

/* Takes (lock != 0) or drops the lock that serializes this cache's
 * registrar calls for GPU memory of `device` (recursive; nothing for a
 * device out of range), for a caller that registers GPU memory beside the
 * cache (uncached remote-write registrations, fabric/mrcache.c) so those
 * calls take their turn with the cache's own. Never with the cache lock
 * held (it is not: the cache lock is internal). */
void tw__regcache_gpu_serial_lock(struct tw_regcache *c, int device, int lock);

/* Drop the reference from lookup. Thread-safe. */
void tw__regcache_release(struct tw_regcache *c, struct tw_regcache_region *r);

/*
 * The memory [addr, addr+len) is gone or its mapping was revoked: unlink
 * every region overlapping it so no lookup returns them again. Idle ones
 * are deregistered before this returns; referenced or in-progress ones
 * when released. Safe from any thread, including from registrar callbacks.
 */
void tw__regcache_invalidate(struct tw_regcache *c, uintptr_t addr, size_t len);

void tw__regcache_stats(struct tw_regcache *c, struct tw_regcache_stats *out);

/* Accessors for a referenced region (valid until release). */
void *tw__regcache_region_handle(const struct tw_regcache_region *r);
uintptr_t tw__regcache_region_start(const struct tw_regcache_region *r);
size_t tw__regcache_region_len(const struct tw_regcache_region *r);
uint32_t tw__regcache_region_access(const struct tw_regcache_region *r);
const struct tw_mem_attr *tw__regcache_region_attr(const struct tw_regcache_region *r);
/* 1 when the region is kept after release, 0 for a one-shot registration. */
int tw__regcache_region_cached(const struct tw_regcache_region *r);

#endif
