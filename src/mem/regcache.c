/*
 * Registration cache (see regcache.h for the policy and the lock order).
 *
 * Index: one sorted array of disjoint ranges per key (memory kind x access
 * rights), searched by binary search. A hit is one mutex round trip plus a
 * ~14-step search over 10,000 regions in contiguous memory; an insert is a
 * memmove, which is noise next to the registration it follows. Ranges in a
 * key never overlap: a miss that overlaps cached regions merges them into
 * the new one and unlinks them.
 *
 * Region states:
 *   PENDING  being registered by the thread that inserted it (which holds a
 *            reference); others wait on `cond` and retry.
 *   READY    registered. Idle (refcnt 0) and linked regions sit on the LRU.
 * A region leaves the index (linked = 0) on eviction, invalidation, merge
 * or staleness; if referenced it lives on, unlinked, until the last
 * release deregisters it. Every deregistration is collected on a local
 * list under the lock and performed after unlocking.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu/nvml.h"
#include "mem/hostmem.h"
#include "mem/regcache.h"
#include "tensorwire/error.h"

enum region_state { REGION_PENDING, REGION_READY };

struct tw_regcache_region {
    uintptr_t start, end;
    uint32_t access;
    const struct tw_memkind_ops *kind;
    struct tw_mem_attr attr;
    void *handle;
    unsigned refcnt;
    enum region_state state;
    int linked; /* findable in the index */
    int cached; /* 0: one-shot registration (untracked host memory) */
    int pool;   /* byte-limit pool: 0 host, 1 + device for GPUs */
    struct tw_regcache_region *lru_prev, *lru_next;
    struct tw_regcache_region *dead_next; /* on a local deregistration list */
};

struct slot {
    uintptr_t start, end;
    struct tw_regcache_region *r;
};

struct part {
    struct slot *v;
    size_t n, cap;
};

#define NPOOLS (1 + TW_REGCACHE_MAX_GPUS)
#define NACCESS ((int)TW_ACCESS_ALL + 1)

struct tw_regcache {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* broadcast when a PENDING region settles */
    const struct tw_registrar_ops *reg;
    void *reg_ctx;
    const struct tw_memkind_ops *kinds[TW_MEMKIND_MAX];
    size_t max_entries;
    size_t max_host_bytes;
    size_t max_gpu_bytes; /* configured; 0: from BAR1 */
    unsigned bar1_percent;
    size_t pool_limit[NPOOLS]; /* 0: not known yet (GPU pools) */
    uint64_t pool_bytes[NPOOLS];
    struct part parts[TW_MEMKIND_MAX][NACCESS];
    struct tw_regcache_region lru; /* sentinel: next = most recent */
    struct tw_regcache_stats st;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void seterr(char *err, size_t errlen, const char *fmt, const char *a)
{
    if (err && errlen)
        snprintf(err, errlen, fmt, a);
}

/* ---- LRU (lock held) ---- */

static void lru_remove(struct tw_regcache_region *r)
{
    r->lru_prev->lru_next = r->lru_next;
    r->lru_next->lru_prev = r->lru_prev;
    r->lru_prev = r->lru_next = NULL;
}

static void lru_push_front(struct tw_regcache *c, struct tw_regcache_region *r)
{
    r->lru_next = c->lru.lru_next;
    r->lru_prev = &c->lru;
    c->lru.lru_next->lru_prev = r;
    c->lru.lru_next = r;
}

/* ---- index (lock held) ---- */

static struct part *part_of(struct tw_regcache *c, enum tw_memkind kind, uint32_t access)
{
    return &c->parts[kind][access];
}

/* Number of slots with start <= addr. */
static size_t count_le(const struct part *p, uintptr_t addr)
{
    size_t lo = 0, hi = p->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->v[mid].start <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int part_insert(struct part *p, struct tw_regcache_region *r)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        struct slot *v = realloc(p->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        p->v = v;
        p->cap = cap;
    }
    size_t i = count_le(p, r->start);
    memmove(&p->v[i + 1], &p->v[i], (p->n - i) * sizeof(*p->v));
    p->v[i] = (struct slot){.start = r->start, .end = r->end, .r = r};
    p->n++;
    return 0;
}

static void part_remove(struct part *p, const struct tw_regcache_region *r)
{
    /* Starts are unique within a part (ranges are disjoint). */
    size_t i = count_le(p, r->start);
    if (i == 0 || p->v[i - 1].r != r)
        abort(); /* index corrupted: continuing would deregister live memory */
    memmove(&p->v[i - 1], &p->v[i], (p->n - i) * sizeof(*p->v));
    p->n--;
}

/* ---- accounting and unlinking (lock held) ---- */

static void account_add(struct tw_regcache *c, const struct tw_regcache_region *r)
{
    c->st.entries++;
    c->st.bytes += r->end - r->start;
    c->pool_bytes[r->pool] += r->end - r->start;
}

/* The region's registration is going away (or never happened). */
static void account_sub(struct tw_regcache *c, const struct tw_regcache_region *r)
{
    c->st.entries--;
    c->st.bytes -= r->end - r->start;
    c->pool_bytes[r->pool] -= r->end - r->start;
}

static void schedule_dereg(struct tw_regcache *c, struct tw_regcache_region *r,
                           struct tw_regcache_region **dead)
{
    account_sub(c, r);
    c->st.deregistrations++;
    r->dead_next = *dead;
    *dead = r;
}

/*
 * Remove r from the index. An idle READY region is scheduled for
 * deregistration now; a referenced or PENDING one lives on unlinked and is
 * deregistered by its last release (deferred, never while in use).
 */
static void unlink_region(struct tw_regcache *c, struct tw_regcache_region *r,
                          struct tw_regcache_region **dead)
{
    part_remove(part_of(c, r->attr.kind, r->access), r);
    r->linked = 0;
    if (r->state == REGION_READY && r->refcnt == 0) {
        lru_remove(r);
        schedule_dereg(c, r, dead);
    }
}

static void run_deregs(struct tw_regcache *c, struct tw_regcache_region *dead)
{
    while (dead) {
        struct tw_regcache_region *next = dead->dead_next;
        c->reg->dereg(c->reg_ctx, dead->handle);
        free(dead);
        dead = next;
    }
}

/* ---- eviction (lock held) ---- */

static size_t pool_limit(const struct tw_regcache *c, int pool)
{
    size_t lim = c->pool_limit[pool];
    return lim ? lim : SIZE_MAX;
}

/* Least recently used idle region, of `pool` unless pool < 0. */
static struct tw_regcache_region *lru_victim(struct tw_regcache *c, int pool)
{
    for (struct tw_regcache_region *r = c->lru.lru_prev; r != &c->lru; r = r->lru_prev)
        if (pool < 0 || r->pool == pool)
            return r;
    return NULL;
}

static void evict_over_limits(struct tw_regcache *c, int pool, struct tw_regcache_region **dead)
{
    for (;;) {
        struct tw_regcache_region *v = NULL;
        if (c->st.entries > c->max_entries)
            v = lru_victim(c, -1);
        else if (c->pool_bytes[pool] > pool_limit(c, pool))
            v = lru_victim(c, pool);
        if (!v)
            return; /* under the limits, or everything left is in use */
        c->st.evictions++;
        unlink_region(c, v, dead);
    }
}

/* Registration ran out of resources: free at least `want` bytes of idle
 * regions, preferring the same pool. Returns the number evicted. */
static unsigned evict_for_pressure(struct tw_regcache *c, int pool, size_t want,
                                   struct tw_regcache_region **dead)
{
    unsigned n = 0;
    size_t freed = 0;
    while (freed < want) {
        struct tw_regcache_region *v = lru_victim(c, pool);
        if (!v && n == 0)
            v = lru_victim(c, -1);
        if (!v)
            break;
        freed += v->end - v->start;
        c->st.evictions++;
        unlink_region(c, v, dead);
        n++;
    }
    return n;
}

/* ---- registration (no lock held on entry or exit of reg calls) ---- */

#define MAX_PRESSURE_RETRIES 32

static int is_pressure(int rc)
{
    return rc == -ENOMEM || rc == -ENOSPC || rc == -EAGAIN;
}

static int do_register(struct tw_regcache *c, struct tw_regcache_region *r, char *err,
                       size_t errlen)
{
    struct tw_reg_request req = {
        .addr = r->start,
        .len = r->end - r->start,
        .access = r->access,
        .kind = r->kind,
        .attr = r->attr,
    };
    for (int round = 0;; round++) {
        uint64_t t0 = now_ns();
        int rc = c->reg->reg(c->reg_ctx, &req, &r->handle, err, errlen);
        uint64_t dt = now_ns() - t0;

        struct tw_regcache_region *dead = NULL;
        unsigned evicted = 0;
        pthread_mutex_lock(&c->lock);
        c->st.reg_ns += dt;
        if (rc == 0)
            c->st.registrations++;
        else if (is_pressure(rc) && round < MAX_PRESSURE_RETRIES)
            evicted = evict_for_pressure(c, r->pool, req.len, &dead);
        if (rc != 0 && evicted == 0)
            c->st.reg_failures++;
        if (evicted)
            c->st.retries++;
        pthread_mutex_unlock(&c->lock);
        run_deregs(c, dead);
        if (rc == 0 || evicted == 0)
            return rc;
        /* Something was released: try again. Bounded, because other
         * threads may keep refilling the cache while we retry. */
    }
}

/* ---- pools and limits ---- */

static int pool_of(const struct tw_mem_attr *a)
{
    if (a->kind == TW_MEMKIND_CUDA && a->device >= 0 && a->device < TW_REGCACHE_MAX_GPUS)
        return 1 + a->device;
    return 0;
}

/* First use of a GPU pool: its byte limit from BAR1 (NVML), outside the
 * lock since NVML may be slow; a racing duplicate query is harmless. */
static void ensure_pool_limit(struct tw_regcache *c, int pool, int device)
{
    pthread_mutex_lock(&c->lock);
    size_t known = c->pool_limit[pool];
    pthread_mutex_unlock(&c->lock);
    if (known)
        return;
    size_t lim = c->max_gpu_bytes;
    if (!lim) {
        uint64_t bar1 = 0;
        if (tw__nvml_bar1_total(device, &bar1, NULL, 0) == 0 && bar1)
            lim = (size_t)(bar1 / 100 * c->bar1_percent);
        else
            lim = (size_t)1 << 30;
    }
    pthread_mutex_lock(&c->lock);
    c->pool_limit[pool] = lim;
    pthread_mutex_unlock(&c->lock);
}

/* ---- public entry points ---- */

static void hostmem_hook(void *ctx, uintptr_t addr, size_t len)
{
    tw__regcache_invalidate(ctx, addr, len);
}

int tw__regcache_create(const struct tw_regcache_config *cfg, const struct tw_registrar_ops *reg,
                        void *ctx, struct tw_regcache **out)
{
    if (!reg || !reg->reg || !reg->dereg)
        return TW_EINVAL;
    struct tw_regcache *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    int rc = -ENOMEM;
    if (pthread_mutex_init(&c->lock, NULL) != 0)
        goto out_free;
    if (pthread_cond_init(&c->cond, NULL) != 0)
        goto out_destroy_lock;

    struct tw_regcache_config d = cfg ? *cfg : (struct tw_regcache_config){0};
    c->reg = reg;
    c->reg_ctx = ctx;
    for (int k = 0; k < TW_MEMKIND_MAX; k++)
        c->kinds[k] = d.memkinds[k] ? d.memkinds[k] : tw__memkind_ops((enum tw_memkind)k);
    c->max_entries = d.max_entries ? d.max_entries : 4096;
    if (!d.max_host_bytes) {
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        d.max_host_bytes = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz / 2 : (size_t)1 << 32;
    }
    c->max_host_bytes = d.max_host_bytes;
    c->pool_limit[0] = d.max_host_bytes;
    c->max_gpu_bytes = d.max_gpu_bytes;
    c->bar1_percent = d.gpu_bar1_percent && d.gpu_bar1_percent <= 100 ? d.gpu_bar1_percent : 50;
    c->lru.lru_next = c->lru.lru_prev = &c->lru;

    rc = tw__hostmem_subscribe(hostmem_hook, c);
    if (rc)
        goto out_destroy_cond;
    *out = c;
    return 0;

out_destroy_cond:
    pthread_cond_destroy(&c->cond);
out_destroy_lock:
    pthread_mutex_destroy(&c->lock);
out_free:
    free(c);
    return rc;
}

int tw__regcache_destroy(struct tw_regcache *c)
{
    if (!c)
        return 0;
    pthread_mutex_lock(&c->lock);
    int busy = c->st.in_use != 0;
    pthread_mutex_unlock(&c->lock);
    if (busy)
        return TW_EBUSY;
    tw__hostmem_unsubscribe(hostmem_hook, c);

    struct tw_regcache_region *dead = NULL;
    pthread_mutex_lock(&c->lock);
    for (int k = 0; k < TW_MEMKIND_MAX; k++) {
        for (int a = 0; a < NACCESS; a++) {
            struct part *p = &c->parts[k][a];
            while (p->n)
                unlink_region(c, p->v[p->n - 1].r, &dead);
            free(p->v);
        }
    }
    pthread_mutex_unlock(&c->lock);
    run_deregs(c, dead);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    free(c);
    return 0;
}

static struct tw_regcache_region *new_region(uintptr_t start, uintptr_t end, uint32_t access,
                                             const struct tw_memkind_ops *kind,
                                             const struct tw_mem_attr *attr, int cached)
{
    struct tw_regcache_region *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->start = start;
    r->end = end;
    r->access = access;
    r->kind = kind;
    r->attr = *attr;
    r->refcnt = 1;
    r->state = REGION_PENDING;
    r->cached = cached;
    r->pool = pool_of(attr);
    return r;
}

/* A region that never registered: uncount and free it (lock held). */
static void drop_failed(struct tw_regcache *c, struct tw_regcache_region *r)
{
    if (r->linked)
        part_remove(part_of(c, r->attr.kind, r->access), r);
    account_sub(c, r);
    c->st.in_use--;
    free(r);
}

int tw__regcache_lookup(struct tw_regcache *c, const void *addr, size_t len, uint32_t access,
                        enum tw_memkind hint, struct tw_regcache_region **out, char *err,
                        size_t errlen)
{
    uintptr_t a = (uintptr_t)addr;
    if (access == 0 || (access & ~TW_ACCESS_ALL) || len == 0 || a + len < a) {
        seterr(err, errlen, "%s", "invalid lookup: empty/wrapping range or bad access flags");
        return TW_EINVAL;
    }
    if ((unsigned)hint >= TW_MEMKIND_MAX) {
        seterr(err, errlen, "%s", "invalid memory kind");
        return TW_EINVAL;
    }

    const struct tw_memkind_ops *kind = NULL;
    struct tw_mem_attr attr;
    int have_attr = 0;
    /* A host hint with no check_on_hit needs no query for a hit: try the
     * index first and describe the memory only on a miss. */
    if (hint != TW_MEMKIND_AUTO && !c->kinds[hint]->check_on_hit) {
        kind = c->kinds[hint];
        attr = (struct tw_mem_attr){.kind = hint, .device = -1};
    } else {
        int rc = tw__memkind_classify(c->kinds, a, len, hint, &kind, &attr, err, errlen);
        if (rc)
            return rc;
        have_attr = 1;
    }

    struct tw_regcache_region *dead = NULL;
    struct tw_regcache_region *r = NULL;
    int rc = 0;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        struct part *p = part_of(c, attr.kind, access);
        size_t i = count_le(p, a);
        if (i > 0 && p->v[i - 1].end >= a + len) {
            struct tw_regcache_region *hit = p->v[i - 1].r;
            if (!kind->check_on_hit || kind->same_backing(&hit->attr, &attr)) {
                if (hit->state == REGION_PENDING) {
                    c->st.waits++;
                    pthread_cond_wait(&c->cond, &c->lock);
                    continue;
                }
                if (hit->refcnt++ == 0) {
                    lru_remove(hit);
                    c->st.in_use++;
                }
                c->st.hits++;
                r = hit;
                goto out_unlock;
            }
            /* Same address, different allocation: the old one was freed. */
            c->st.stale++;
            unlink_region(c, hit, &dead);
        }

        if (!have_attr) {
            pthread_mutex_unlock(&c->lock);
            run_deregs(c, dead);
            dead = NULL;
            rc = kind->query(a, len, &attr, err, errlen);
            if (rc)
                return rc;
            have_attr = 1;
            pthread_mutex_lock(&c->lock);
            continue; /* the index may have changed meanwhile */
        }

        uintptr_t s, e;
        kind->round(&attr, a, len, &s, &e);

        if (!(attr.flags & TW_MEM_ATTR_TRACKED)) {
            /* Unknown lifetime: register for this use only, never index. */
            r = new_region(s, e, access, kind, &attr, 0);
            if (!r) {
                rc = -ENOMEM;
                goto out_unlock;
            }
            c->st.misses++;
            c->st.uncached++;
            c->st.in_use++;
            account_add(c, r);
            break;
        }
        if (attr.kind == TW_MEMKIND_HOST && attr.lifetime_gen != tw__hostmem_generation()) {
            /* A host buffer was unregistered since we looked: ours may be
             * the one, and its invalidation may already have run. Look
             * again (see hostmem.h). */
            have_attr = 0;
            continue;
        }

        /* Fold every overlapping region of this key into the new one, or
         * wait if one of them is still being registered. */
        struct slot *v = p->v;
        size_t lo = count_le(p, s), first = lo;
        while (first > 0 && v[first - 1].end > s)
            first--;
        size_t last = lo;
        while (last < p->n && v[last].start < e)
            last++;
        int pending = 0;
        for (size_t j = first; j < last; j++)
            pending |= v[j].r->state == REGION_PENDING;
        if (pending) {
            c->st.waits++;
            pthread_cond_wait(&c->cond, &c->lock);
            continue;
        }
        while (last > first) {
            struct tw_regcache_region *o = v[--last].r;
            if (kind->same_backing(&o->attr, &attr)) {
                if (o->start < s)
                    s = o->start;
                if (o->end > e)
                    e = o->end;
                c->st.merges++;
            } else {
                c->st.stale++;
            }
            unlink_region(c, o, &dead);
        }

        r = new_region(s, e, access, kind, &attr, 1);
        if (!r) {
            rc = -ENOMEM;
            goto out_unlock;
        }
        if (part_insert(p, r)) {
            free(r);
            r = NULL;
            rc = -ENOMEM;
            goto out_unlock;
        }
        r->linked = 1;
        c->st.misses++;
        c->st.in_use++;
        account_add(c, r);
        break;
    }
    int pool = r->pool;
    int device = r->attr.device;
    evict_over_limits(c, pool, &dead);
    pthread_mutex_unlock(&c->lock);
    run_deregs(c, dead);
    dead = NULL;

    if (pool > 0)
        ensure_pool_limit(c, pool, device);

    rc = do_register(c, r, err, errlen);

    pthread_mutex_lock(&c->lock);
    if (rc == 0) {
        r->state = REGION_READY;
    } else {
        drop_failed(c, r);
        r = NULL;
    }
    pthread_cond_broadcast(&c->cond);
    if (r)
        evict_over_limits(c, pool, &dead);

out_unlock:
    pthread_mutex_unlock(&c->lock);
    run_deregs(c, dead);
    if (r)
        *out = r;
    return r ? 0 : rc;
}

void tw__regcache_release(struct tw_regcache *c, struct tw_regcache_region *r)
{
    struct tw_regcache_region *dead = NULL;
    pthread_mutex_lock(&c->lock);
    if (r->refcnt == 0)
        abort(); /* double release: the caller would use a dead handle */
    if (--r->refcnt == 0) {
        c->st.in_use--;
        if (!r->linked) {
            schedule_dereg(c, r, &dead); /* invalidated, evicted or one-shot */
        } else {
            lru_push_front(c, r);
            evict_over_limits(c, r->pool, &dead);
        }
    }
    pthread_mutex_unlock(&c->lock);
    run_deregs(c, dead);
}

void tw__regcache_invalidate(struct tw_regcache *c, uintptr_t addr, size_t len)
{
    if (len == 0)
        return;
    uintptr_t end = addr + len < addr ? UINTPTR_MAX : addr + len;
    struct tw_regcache_region *dead = NULL;
    pthread_mutex_lock(&c->lock);
    for (int k = 0; k < TW_MEMKIND_MAX; k++) {
        for (int acc = 0; acc < NACCESS; acc++) {
            struct part *p = &c->parts[k][acc];
            size_t last = count_le(p, end - 1);
            while (last > 0 && p->v[last - 1].end > addr) {
                struct tw_regcache_region *o = p->v[--last].r;
                c->st.invalidations++;
                unlink_region(c, o, &dead);
            }
        }
    }
    pthread_mutex_unlock(&c->lock);
    run_deregs(c, dead);
}

void tw__regcache_stats(struct tw_regcache *c, struct tw_regcache_stats *out)
{
    pthread_mutex_lock(&c->lock);
    *out = c->st;
    pthread_mutex_unlock(&c->lock);
}

void *tw__regcache_region_handle(const struct tw_regcache_region *r)
{
    return r->handle;
}

uintptr_t tw__regcache_region_start(const struct tw_regcache_region *r)
{
    return r->start;
}

size_t tw__regcache_region_len(const struct tw_regcache_region *r)
{
    return r->end - r->start;
}

uint32_t tw__regcache_region_access(const struct tw_regcache_region *r)
{
    return r->access;
}

const struct tw_mem_attr *tw__regcache_region_attr(const struct tw_regcache_region *r)
{
    return &r->attr;
}

int tw__regcache_region_cached(const struct tw_regcache_region *r)
{
    return r->cached;
}
