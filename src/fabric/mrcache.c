/*
 * Registration cache in front of the data plane (see mrcache.h for the
 * policy and the lock order).
 *
 * Each rail's struct tw_regcache gets the registrar below, whose handles
 * are struct mrc_reg: the fabric layer's struct tw_fabric_mr plus the
 * handles released with release_busy, whose on_idle callbacks run when the
 * fabric layer says the MR is idle. Handles of uncached (direct)
 * registrations hold their tw_fabric_mr themselves.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "fabric/fabric_int.h"
#include "fabric/mrcache.h"

#define ACCESS_KNOWN                                                                               \
    (TW_FABRIC_LOCAL_READ | TW_FABRIC_LOCAL_WRITE | TW_FABRIC_REMOTE_READ |                        \
     TW_FABRIC_REMOTE_WRITE | TW_FABRIC_ONCE)

struct mrc_rail {
    struct tw_fabric_mrcache *mc;
    unsigned index;
    /* Set once under mc->create_lock, read without it (atomic), freed
     * only by destroy. */
    _Atomic(struct tw_regcache *) rc;
};

struct mrc_reg {
    struct tw_fabric_mr *mr;
    struct tw_fabric_mrc *busy; /* release_busy handles waiting for idle; mc->busy_lock */
};

struct tw_fabric_mrc {
    struct tw_fabric_mrcache *mc;
    struct mrc_rail *rail;
    struct tw_regcache_region *region; /* NULL: direct (uncached) registration */
    struct mrc_reg *reg;               /* region's registrar handle */
    struct tw_fabric_mr *mr;
    uint64_t offset;
    struct tw_fabric_rkey rkey;
    void (*on_idle)(void *arg);
    void *on_idle_arg;
    struct tw_fabric_mrc *next_busy;
    /* Direct GPU registration: the cache whose per-device lock serializes
     * its registration and deregistration (NULL: none), and the device. */
    struct tw_regcache *serial_rc;
    int serial_dev;
};

struct tw_fabric_mrcache {
    struct tw_fabric *fab;
    struct tw_regcache_config cfg;
    unsigned nrails;
    pthread_mutex_t create_lock; /* creating a rail's cache */
    pthread_mutex_t busy_lock;   /* leaf: mrc_reg.busy lists */
    struct mrc_rail rails[TW_FABRIC_MAX_SLOTS];
    _Atomic uint64_t direct, busy_releases;
};

/* ---- registrar over the rail's domain -------------------------------- */

static int rail_reg(void *ctx, const struct tw_reg_request *req, void **handle, char *err,
                    size_t errlen)
{
    struct mrc_rail *rl = ctx;
    struct tw_fabric *fab = rl->mc->fab;
    struct mrc_reg *reg = calloc(1, sizeof(*reg));
    if (!reg) {
        tw__errbuf_set(err, errlen, "%s", "out of memory");
        return -ENOMEM;
    }
    enum tw_fabric_iface iface =
        req->attr.kind == TW_MEMKIND_CUDA ? TW_FABRIC_CUDA : TW_FABRIC_HOST;
    int ret = tw__fabric_mr_register_rail(fab, rl->index, (void *)req->addr, req->len, req->access,
                                          iface, req->attr.device, &reg->mr);
    if (ret) {
        tw__errbuf_set(err, errlen, "%s", tw__fabric_errmsg(fab));
        free(reg);
        return ret;
    }
    /* Cached remote registrations keep the mover polling only while a
     * handle exposes them (acquire .. release), not while idle in the
     * cache. */
    tw__fabric_mr_quiet(reg->mr);
    *handle = reg;
    return 0;
}

/* on_idle of a registration that had release_busy handles: no operation
 * touches the memory any more. Runs under the plane lock. */
static void reg_idle(void *arg)
{
    struct mrc_reg *reg = arg;
    struct tw_fabric_mrc *h = reg->busy;
    while (h) {
        struct tw_fabric_mrc *next = h->next_busy;
        h->on_idle(h->on_idle_arg);
        free(h);
        h = next;
    }
    free(reg);
}

static void rail_dereg(void *ctx, void *handle)
{
    struct mrc_rail *rl = ctx;
    struct mrc_reg *reg = handle;
    /* Called once, after the last reference was released: no one appends
     * any more; the lock orders us after the last append. */
    pthread_mutex_lock(&rl->mc->busy_lock);
    int busy = reg->busy != NULL;
    pthread_mutex_unlock(&rl->mc->busy_lock);
    if (busy) {
        tw__fabric_mr_release(reg->mr, reg_idle, reg);
        return;
    }
    /* Closes now, or when the transfers still using it drained. */
    tw__fabric_mr_deregister(reg->mr);
    free(reg);
}

static const struct tw_registrar_ops rail_registrar = {
    .name = "fabric",
    .reg = rail_reg,
    .dereg = rail_dereg,
};

/* ---- cache ------------------------------------------------------------ */

int tw__fabric_mrcache_create(struct tw_fabric *fab, const struct tw_regcache_config *cfg,
                              struct tw_fabric_mrcache **out)
{
    struct tw_fabric_mrcache *mc = calloc(1, sizeof(*mc));
    if (!mc)
        return -ENOMEM;
    mc->fab = fab;
    if (cfg)
        mc->cfg = *cfg;
    /* Every slot: a replacement rail (fabric.h, "Wedged and retired rails")
     * gets its cache when first used. */
    mc->nrails = TW_FABRIC_MAX_SLOTS;
    pthread_mutex_init(&mc->create_lock, NULL);
    pthread_mutex_init(&mc->busy_lock, NULL);
    for (unsigned i = 0; i < TW_FABRIC_MAX_SLOTS; i++) {
        mc->rails[i].mc = mc;
        mc->rails[i].index = i;
        atomic_init(&mc->rails[i].rc, NULL);
    }
    atomic_init(&mc->direct, 0);
    atomic_init(&mc->busy_releases, 0);
    *out = mc;
    return 0;
}

int tw__fabric_mrcache_destroy(struct tw_fabric_mrcache *mc)
{
    if (!mc)
        return 0;
    /* Check every rail first so that TW_EBUSY leaves everything intact. */
    for (unsigned i = 0; i < mc->nrails; i++) {
        struct tw_regcache *rc = atomic_load(&mc->rails[i].rc);
        if (!rc)
            continue;
        struct tw_regcache_stats st;
        tw__regcache_stats(rc, &st);
        if (st.in_use)
            return TW_EBUSY;
    }
    for (unsigned i = 0; i < mc->nrails; i++) {
        struct tw_regcache *rc = atomic_load(&mc->rails[i].rc);
        if (rc) {
            int ret = tw__regcache_destroy(rc);
            if (ret)
                return ret; /* in progress: a caller broke the contract */
            atomic_store(&mc->rails[i].rc, NULL);
        }
    }
    pthread_mutex_destroy(&mc->create_lock);
    pthread_mutex_destroy(&mc->busy_lock);
    free(mc);
    return 0;
}

static int rail_cache(struct tw_fabric_mrcache *mc, unsigned rail, struct tw_regcache **out,
                      char *err, size_t errlen)
{
    struct mrc_rail *rl = &mc->rails[rail];
    struct tw_regcache *rc = atomic_load_explicit(&rl->rc, memory_order_acquire);
    if (rc) {
        *out = rc;
        return 0;
    }
    int ret = 0;
    pthread_mutex_lock(&mc->create_lock);
    rc = atomic_load_explicit(&rl->rc, memory_order_relaxed);
    if (!rc) {
        ret = tw__regcache_create(&mc->cfg, &rail_registrar, rl, &rc);
        if (ret)
            tw__errbuf_set(err, errlen, "registration cache of rail %u: %s", rail,
                           tw_strerror(ret));
        else
            atomic_store_explicit(&rl->rc, rc, memory_order_release);
    }
    pthread_mutex_unlock(&mc->create_lock);
    if (ret == 0)
        *out = rc;
    return ret;
}

/* REMOTE_WRITE, ONCE and 0-byte registrations: the handle owns its MR. GPU
 * memory is registered under the rail cache's per-device lock, so it takes
 * its turn with the cache's own registrations and deregistrations of that
 * GPU (regcache.h, seed 003). It is NOT rounded out to 64 KiB like cached
 * regions: a remote-write key covers exactly the destination, since the
 * rest of its GPU pages may hold other data of the same allocation (a
 * caching allocator's other tensors) that the peer must not be able to
 * write. */
static int acquire_direct(struct tw_fabric_mrcache *mc, struct tw_fabric_mrc *h, const void *addr,
                          size_t len, unsigned access, enum tw_memkind hint, char *err,
                          size_t errlen)
{
    enum tw_fabric_iface iface = TW_FABRIC_HOST;
    int device = 0;
    if (len && hint != TW_MEMKIND_HOST) {
        const struct tw_memkind_ops *k = NULL;
        struct tw_mem_attr attr;
        int ret = tw__memkind_classify(mc->cfg.memkinds, (uintptr_t)addr, len, hint, &k, &attr, err,
                                       errlen);
        if (ret)
            return ret;
        if (attr.kind == TW_MEMKIND_CUDA) {
            iface = TW_FABRIC_CUDA;
            device = attr.device;
            ret = rail_cache(mc, h->rail->index, &h->serial_rc, err, errlen);
            if (ret)
                return ret;
            h->serial_dev = device;
        }
    }
    if (h->serial_rc)
        tw__regcache_gpu_serial_lock(h->serial_rc, h->serial_dev, 1);
    int ret = tw__fabric_mr_register_rail(mc->fab, h->rail->index, (void *)addr, len, access, iface,
                                          device, &h->mr);
    if (h->serial_rc)
        tw__regcache_gpu_serial_lock(h->serial_rc, h->serial_dev, 0);
    if (ret) {
        tw__errbuf_set(err, errlen, "%s", tw__fabric_errmsg(mc->fab));
        return ret;
    }
    h->rkey = tw__fabric_mr_rkey(h->mr);
    h->offset = 0;
    atomic_fetch_add(&mc->direct, 1);
    return 0;
}

/* Deregisters a direct handle's MR (under its GPU's lock, if any). */
static void direct_dereg(struct tw_fabric_mrc *h, void (*on_idle)(void *arg), void *arg)
{
    if (h->serial_rc)
        tw__regcache_gpu_serial_lock(h->serial_rc, h->serial_dev, 1);
    if (on_idle)
        tw__fabric_mr_release(h->mr, on_idle, arg);
    else
        tw__fabric_mr_deregister(h->mr);
    if (h->serial_rc)
        tw__regcache_gpu_serial_lock(h->serial_rc, h->serial_dev, 0);
}

int tw__fabric_mrcache_acquire(struct tw_fabric_mrcache *mc, unsigned rail, const void *addr,
                               size_t len, unsigned access, enum tw_memkind hint,
                               struct tw_fabric_mrc **out, char *err, size_t errlen)
{
    unsigned slots = tw__fabric_rail_slots(mc->fab);
    if (rail >= slots) {
        tw__errbuf_set(err, errlen, "rail %u out of range (%u rails)", rail, slots);
        return TW_EINVAL;
    }
    if ((access & ~TW_FABRIC_ONCE) == 0 || (access & ~ACCESS_KNOWN)) {
        tw__errbuf_set(err, errlen, "registration access 0x%x invalid", access);
        return TW_EINVAL;
    }
    if ((uintptr_t)addr + len < (uintptr_t)addr || (len && !addr)) {
        tw__errbuf_set(err, errlen, "invalid range %p + %zu", addr, len);
        return TW_EINVAL;
    }
    struct tw_fabric_mrc *h = calloc(1, sizeof(*h));
    if (!h) {
        tw__errbuf_set(err, errlen, "%s", "out of memory");
        return -ENOMEM;
    }
    h->mc = mc;
    h->rail = &mc->rails[rail];
    int ret;
    if (len == 0 || (access & (TW_FABRIC_REMOTE_WRITE | TW_FABRIC_ONCE))) {
        ret = acquire_direct(mc, h, addr, len, access & ~TW_FABRIC_ONCE, hint, err, errlen);
        if (ret)
            goto out_free_handle;
        *out = h;
        return 0;
    }
    struct tw_regcache *rc;
    ret = rail_cache(mc, rail, &rc, err, errlen);
    if (ret)
        goto out_free_handle;
    ret = tw__regcache_lookup(rc, addr, len, access, hint, &h->region, err, errlen);
    if (ret)
        goto out_free_handle;
    h->reg = tw__regcache_region_handle(h->region);
    h->mr = h->reg->mr;
    h->offset = (uint64_t)((uintptr_t)addr - tw__regcache_region_start(h->region));
    struct tw_fabric_rkey whole = tw__fabric_mr_rkey(h->mr);
    h->rkey.key = whole.key;
    h->rkey.remote_addr = whole.remote_addr + h->offset;
    h->rkey.length = len;
    tw__fabric_mr_expose(h->mr, +1);
    *out = h;
    return 0;

out_free_handle:
    free(h);
    return ret;
}

int tw__fabric_mrcache_acquire_peer(struct tw_fabric_mrcache *mc, struct tw_fabric_peer *peer,
                                    const void *addr, size_t len, unsigned access,
                                    enum tw_memkind hint, struct tw_fabric_mrc **out, char *err,
                                    size_t errlen)
{
    return tw__fabric_mrcache_acquire(mc, tw__fabric_peer_rail(peer), addr, len, access, hint, out,
                                      err, errlen);
}

void tw__fabric_mrcache_release(struct tw_fabric_mrcache *mc, struct tw_fabric_mrc *h)
{
    if (!h)
        return;
    if (h->region) {
        tw__fabric_mr_expose(h->mr, -1);
        tw__regcache_release(atomic_load(&h->rail->rc), h->region);
    } else {
        direct_dereg(h, NULL, NULL);
    }
    free(h);
}

void tw__fabric_mrcache_release_busy(struct tw_fabric_mrcache *mc, struct tw_fabric_mrc *h,
                                     void (*on_idle)(void *arg), void *arg)
{
    if (!h)
        return;
    atomic_fetch_add(&mc->busy_releases, 1);
    if (!h->region) {
        direct_dereg(h, on_idle, arg);
        free(h);
        return;
    }
    tw__fabric_mr_expose(h->mr, -1);
    struct tw_regcache *rc = atomic_load(&h->rail->rc);
    uintptr_t start = tw__regcache_region_start(h->region);
    size_t rlen = tw__regcache_region_len(h->region);
    h->on_idle = on_idle;
    h->on_idle_arg = arg;
    pthread_mutex_lock(&mc->busy_lock);
    h->next_busy = h->reg->busy;
    h->reg->busy = h;
    pthread_mutex_unlock(&mc->busy_lock);
    /* No lookup on any rail may hand the memory out again: the caller
     * frees it in on_idle, where it cannot invalidate (plane lock held). */
    tw__fabric_mrcache_invalidate(mc, (const void *)start, rlen);
    /* The region is deregistered (rail_dereg -> tw__fabric_mr_release ->
     * reg_idle, which frees h) once its last handle is released. */
    tw__regcache_release(rc, h->region);
}

void tw__fabric_mrcache_invalidate(struct tw_fabric_mrcache *mc, const void *addr, size_t len)
{
    for (unsigned i = 0; i < mc->nrails; i++) {
        struct tw_regcache *rc = atomic_load_explicit(&mc->rails[i].rc, memory_order_acquire);
        if (rc)
            tw__regcache_invalidate(rc, (uintptr_t)addr, len);
    }
}

struct tw_fabric_mr *tw__fabric_mrc_mr(const struct tw_fabric_mrc *h)
{
    return h->mr;
}

uint64_t tw__fabric_mrc_offset(const struct tw_fabric_mrc *h)
{
    return h->offset;
}

struct tw_fabric_rkey tw__fabric_mrc_rkey(const struct tw_fabric_mrc *h)
{
    return h->rkey;
}

void *tw__fabric_mrc_desc(const struct tw_fabric_mrc *h)
{
    return tw__fabric_mr_desc(h->mr);
}

int tw__fabric_mrc_cached(const struct tw_fabric_mrc *h)
{
    return h->region ? tw__regcache_region_cached(h->region) : 0;
}

static void add_stats(struct tw_regcache_stats *t, const struct tw_regcache_stats *s)
{
    t->hits += s->hits;
    t->misses += s->misses;
    t->uncached += s->uncached;
    t->waits += s->waits;
    t->evictions += s->evictions;
    t->invalidations += s->invalidations;
    t->stale += s->stale;
    t->merges += s->merges;
    t->retries += s->retries;
    t->reg_failures += s->reg_failures;
    t->registrations += s->registrations;
    t->deregistrations += s->deregistrations;
    t->reg_ns += s->reg_ns;
    t->entries += s->entries;
    t->bytes += s->bytes;
    t->in_use += s->in_use;
}

void tw__fabric_mrcache_drop_rail(struct tw_fabric_mrcache *mc, unsigned rail)
{
    if (rail >= TW_FABRIC_MAX_SLOTS)
        return;
    struct tw_regcache *rc = atomic_load_explicit(&mc->rails[rail].rc, memory_order_acquire);
    if (rc)
        tw__regcache_invalidate(rc, 0, SIZE_MAX);
}

void tw__fabric_mrcache_stats(struct tw_fabric_mrcache *mc, struct tw_fabric_mrcache_stats *out)
{
    memset(out, 0, sizeof(*out));
    for (unsigned i = 0; i < mc->nrails; i++) {
        struct tw_regcache *rc = atomic_load_explicit(&mc->rails[i].rc, memory_order_acquire);
        if (rc) {
            out->nrails = i + 1;
            tw__regcache_stats(rc, &out->rail[i]);
            add_stats(&out->total, &out->rail[i]);
        }
    }
    out->direct = atomic_load(&mc->direct);
    out->busy_releases = atomic_load(&mc->busy_releases);
}
