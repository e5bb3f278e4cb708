/*
 * Registration (pin-down) cache in front of the data plane.
 *
 * Registrations live in a rail's domain, so there is one struct tw_regcache
 * (src/mem/regcache.h) per rail, created on the rail's first acquire. Its
 * registrar is the fabric layer's own MR code (tw__fabric_mr_register_rail,
 * src/fabric/mr.c): the one way tensorwire registers with libfabric. A
 * handle therefore carries a struct tw_fabric_mr usable as
 * tw_fabric_xfer_desc.local (with tw__fabric_mrc_offset() as local_offset)
 * and whose key goes into RDMA_REGISTER (tw__fabric_mrc_rkey()).
 *
 *   struct tw_fabric_mrc *h;
 *   tw__fabric_mrcache_acquire_peer(mc, peer, buf, len, TW_FABRIC_REMOTE_READ,
 *                                   TW_MEMKIND_HOST, &h, err, sizeof(err));
 *   struct tw_fabric_rkey k = tw__fabric_mrc_rkey(h);   -> RDMA_REGISTER
 *   ... the peer pulls ...
 *   tw__fabric_mrcache_release(mc, h);                  (or _release_busy)
 *
 * Key scoping (what stays registered after release):
 *  - REMOTE_WRITE: never cached. Remote write access ends with the
 *    transfer: such a handle holds its own registration, whose key is
 *    revoked (fi_close) by the release. Zero-length handles are uncached
 *    too (no libfabric call), and so are those asked for with
 *    TW_FABRIC_ONCE (memory registered for one use: a staged host copy,
 *    which a cached region would only cost a lookup, an insertion and an
 *    invalidation, and the plane lock three more times).
 *  - REMOTE_READ and local-only access: cached while the memory's lifetime
 *    is known: library allocations (tw__hostmem_alloc) and tw_mem_register'd
 *    host memory (tw_mem_unregister invalidates them itself), or CUDA
 *    memory re-identified on every hit. Any other host memory gets a
 *    one-shot registration, deregistered (key revoked) by the release.
 *  - A cached key stays valid after release: a peer that kept it can still
 *    read the (page-rounded, possibly merged) region until the memory is
 *    invalidated. Callers that free or reuse such memory call
 *    tw__fabric_mrcache_invalidate() first (tw__hostmem_free and
 *    tw_mem_unregister do it for every cache).
 *  - The access bits are TW_FABRIC_* (fabric.h) and are part of the cache
 *    key: a hit never grants more than was asked for.
 *  - Target-side progress: a threaded plane's mover polls while remotely
 *    accessible registrations exist. A cached REMOTE_READ registration
 *    counts only while a handle holds it (acquire .. release, then the
 *    usual 2 s linger), so an idle cache does not keep a core busy; a peer
 *    that reads with a released key long after may wait for the next
 *    activity on the plane.
 *
 * Abandoned operations (completion with buffer_busy): release the handle
 * with tw__fabric_mrcache_release_busy(). The region is invalidated (no
 * lookup returns it again) and on_idle(arg) runs once its registration is
 * closed AND the fabric layer says no operation can touch the memory
 * (tw__fabric_mr_release() semantics): only then free or reuse the buffer.
 * Plain invalidation of a region that an abandoned operation still uses is
 * safe too: the MR is closed only when that operation drained (the fabric
 * layer holds a reference on it), but only release_busy tells you when.
 *
 * Lifetime: create after tw__fabric_open(), destroy before
 * tw__fabric_close(), with no handle outstanding.
 *
 * Thread safety: every call may come from any thread, except
 * tw__fabric_mrcache_destroy() (no concurrent calls).
 *
 * Lock order, outermost first (a lock is only taken while holding locks
 * above it in this list):
 *
 *   mrcache create lock -> hostmem subscriber lock -> regcache lock
 *       -> hostmem table lock
 *   mrcache create lock -> hostmem subscriber lock -> plane lock
 *       -> mrcache busy lock (leaf)
 *
 * The regcache never calls its registrar with its own lock held, so the
 * plane lock (taken by registration and deregistration) is never taken under
 * a cache lock; the create lock is only held to create a rail's cache. The
 * plane lock is never held while calling into the cache: on_idle callbacks
 * (run under the plane lock) must not call tw__fabric_mrcache_* or
 * tw__fabric_* functions.
 *
 * Errors: 0 or a negative code (include/tensorwire/error.h), the reason in
 * err (may be NULL).
 */
#ifndef TW_FABRIC_MRCACHE_H
#define TW_FABRIC_MRCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "fabric/fabric.h"
#include "mem/regcache.h"

struct tw_fabric_mrcache;
struct tw_fabric_mrc; /* one acquired registration (a handle) */

/* Create the cache of plane `fab` (borrowed: must outlive the cache).
 * cfg (may be NULL: defaults) is copied and applies to each rail's cache;
 * its memkind tables must outlive the cache. Rails' caches are created on
 * first use. Returns 0, -ENOMEM. */
int tw__fabric_mrcache_create(struct tw_fabric *fab, const struct tw_regcache_config *cfg,
                              struct tw_fabric_mrcache **out);

/* Deregister every cached region and free the cache. TW_EBUSY (nothing
 * freed) while a handle is outstanding. NULL is ignored (returns 0). */
int tw__fabric_mrcache_destroy(struct tw_fabric_mrcache *mc);

/*
 * Acquire a registration covering [addr, addr + len) on rail `rail` (or on
 * the rail of `peer`) with `access` (non-empty combination of
 * TW_FABRIC_LOCAL_READ/LOCAL_WRITE/REMOTE_READ/REMOTE_WRITE, plus
 * TW_FABRIC_ONCE for an uncached registration). `hint` is the
 * memory kind when known (TW_MEMKIND_HOST skips the CUDA driver);
 * TW_MEMKIND_AUTO asks the drivers. CUDA memory needs a plane opened with
 * hmem. On success *out holds a reference: the handle, its MR and key stay
 * valid until tw__fabric_mrcache_release*(), whatever invalidations happen
 * meanwhile. Returns 0, TW_EINVAL (bad rail, access, range), -ENOMEM, or
 * the memory kind's / libfabric's code.
 */
int tw__fabric_mrcache_acquire(struct tw_fabric_mrcache *mc, unsigned rail, const void *addr,
                               size_t len, unsigned access, enum tw_memkind hint,
                               struct tw_fabric_mrc **out, char *err, size_t errlen);
int tw__fabric_mrcache_acquire_peer(struct tw_fabric_mrcache *mc, struct tw_fabric_peer *peer,
                                    const void *addr, size_t len, unsigned access,
                                    enum tw_memkind hint, struct tw_fabric_mrc **out, char *err,
                                    size_t errlen);

/* Drop the handle (invalid afterwards). A cached region stays registered;
 * an uncached one (REMOTE_WRITE, untracked memory) is deregistered and its
 * key revoked (the MR closes once no running transfer uses it). NULL is
 * ignored. */
void tw__fabric_mrcache_release(struct tw_fabric_mrcache *mc, struct tw_fabric_mrc *h);

/* For a completion with buffer_busy: drop the handle, invalidate its region
 * and call on_idle(arg) once no operation can touch [addr, addr + len) any
 * more (see the header comment). on_idle runs on any thread, possibly
 * before this returns, under the plane's lock: it must not call
 * tw__fabric_* functions. On tw__fabric_close() with shm operations never
 * answered, it is not called (the memory stays the provider's; the handle
 * and arg stay reachable from the fabric module's kept list, fabric.h). */
void tw__fabric_mrcache_release_busy(struct tw_fabric_mrcache *mc, struct tw_fabric_mrc *h,
                                     void (*on_idle)(void *arg), void *arg);

/* The memory [addr, addr + len) is about to be freed or reused: on every
 * rail, no lookup returns a region overlapping it again; idle ones are
 * deregistered (keys revoked) before this returns, referenced ones when
 * released. Any thread; not from an on_idle callback. */
void tw__fabric_mrcache_invalidate(struct tw_fabric_mrcache *mc, const void *addr, size_t len);

/* The registration to use as tw_fabric_xfer_desc.local. */
struct tw_fabric_mr *tw__fabric_mrc_mr(const struct tw_fabric_mrc *h);
/* Byte offset of the acquired addr inside that registration: the
 * local_offset of a transfer starting at addr. */
uint64_t tw__fabric_mrc_offset(const struct tw_fabric_mrc *h);
/* RDMA_REGISTER payload for exactly the acquired range: the key, the
 * remote address of addr (virtual address or offset, per the rail's MR
 * mode) and len. */
struct tw_fabric_rkey tw__fabric_mrc_rkey(const struct tw_fabric_mrc *h);
/* fi_mr_desc() of the registration (NULL for 0 bytes / when not needed). */
void *tw__fabric_mrc_desc(const struct tw_fabric_mrc *h);
/* 1 when the registration stays cached after release. */
int tw__fabric_mrc_cached(const struct tw_fabric_mrc *h);

struct tw_fabric_mrcache_stats {
    unsigned nrails; /* 1 + the last rail slot with a cache (0: none yet) */
    struct tw_regcache_stats rail[TW_FABRIC_MAX_SLOTS]; /* zero until created */
    struct tw_regcache_stats total;                     /* sum over rails */
    uint64_t direct;        /* uncached registrations: REMOTE_WRITE, 0 bytes */
    uint64_t busy_releases; /* tw__fabric_mrcache_release_busy() calls */
};

/* Drops every idle registration cached for rail slot `rail` and marks the
 * ones in use to go when released: for a retired rail (fabric.h,
 * tw__fabric_retired_rails()), which can close once nothing uses it. */
void tw__fabric_mrcache_drop_rail(struct tw_fabric_mrcache *mc, unsigned rail);

/* Snapshot of every rail's counters (tw__regcache_stats) for STATS. */
void tw__fabric_mrcache_stats(struct tw_fabric_mrcache *mc, struct tw_fabric_mrcache_stats *out);

#endif
