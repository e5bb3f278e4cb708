/*
 * Registration cache (see regcache.h for the policy and the lock order).
 *
 * Index: one sorted array of disjoint ranges per key (memory kind x access
 * rights). Ranges in a key never overlap: a miss that overlaps cached
 * regions merges them into the new one and unlinks them. The hit path is
 * laid out for hosts where every cache miss and mispredicted branch costs
 * (the previous layout measured 138-170 ns a hit with 10,000 regions on a
 * multi-socket H200 host, against a 100 ns budget):
 *  - The array holds {start, region} (16 bytes, 4 to a 64-byte line), with
 *    a static B+-tree of keys above it (struct part): a search reads one
 *    line per level (5 for 10,000 regions, the upper ones hot) and counts
 *    keys <= addr in each without a data-dependent branch, instead of ~14
 *    dependent, half-mispredicted binary-search probes.
 *  - The region keeps everything a hit or a release touches in its first
 *    cache line (it is 64-byte aligned); `end` is checked there.
 *  - The hit fast path is out of line from the miss path (no big frame),
 *    and its counters share the lock's line.
 * An insert is a memmove plus a rewrite of the keys after it, noise next
 * to the registration it follows.
 *
 * LRU. A hit does no list surgery (unlinking touched two random neighbours
 * per lookup). Instead a release that makes a linked region idle counts it
 * (`releases`, in the region's first line) and appends {id, releases} to
 * an append-only log of 8-byte entries. The log is in release order, so
 * its oldest entry whose count still matches an idle region is exactly the
 * least recently released idle region; other entries are stale (the region
 * was released again, unlinked, or is in use) and are dropped when met.
 * The count is 32 bits: a stale entry lives until the next compaction, at
 * most log_cap (< 2^31) appends, so its region's count cannot have come
 * round to the entry's value again. Regions are
 * named by `id`, an index into `ids` held while the region is linked, so
 * a stale entry never points at freed memory; an unlinked region's id is
 * quarantined until the next compaction, so an id in the log names its
 * current region or none. The log is compacted when full, in one
 * sequential pass that reads no region (log_compact); its capacity is
 * reserved when a region is linked (at least twice the linked regions,
 * grown to four times), so a release never allocates and compaction frees
 * at least half the log, normally three quarters.
 *
 * Region states:
 *   PENDING  being registered by the thread that inserted it (which holds a
 *            reference); others wait on `cond` and retry.
 *   READY    registered. Idle (refcnt 0) linked regions are LRU candidates.
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

#include "common/clock.h"
#include "common/errbuf.h"
#include "gpu/nvml.h"
#include "mem/hostmem.h"
#include "mem/regcache.h"
#include "tensorwire/error.h"

enum region_state { REGION_PENDING, REGION_READY };

#define CACHE_LINE 64

struct tw_regcache_region {
    /* First cache line: all that a hit or a release reads or writes. */
    _Alignas(CACHE_LINE) uintptr_t start;
    uintptr_t end;
    unsigned refcnt;
    uint32_t id;       /* index in c->ids while linked */
    uint32_t releases; /* releases to idle while linked (mod 2^32): LRU */
    enum region_state state;
    int linked; /* findable in the index */
    int cached; /* 0: one-shot registration (untracked host memory) */
    int pool;   /* byte-limit pool: 0 host, 1 + device for GPUs */
    void *handle;
    uint32_t access;
    /* Cold: misses, GPU hits (same_backing), deregistration. */
    const struct tw_memkind_ops *kind;
    struct tw_mem_attr attr;
    struct tw_regcache_region *dead_next; /* on a local deregistration list */
};

struct slot {
    uintptr_t start;
    struct tw_regcache_region *r;
};

#define SLOTS_PER_LINE (CACHE_LINE / sizeof(struct slot))
#define FANOUT (CACHE_LINE / sizeof(uintptr_t))
#define MAX_LEVELS 16

/*
 * A static B+-tree over a sorted array. Level 0 of `key` holds the first
 * start of each line of slots, level k+1 the first key of each line of
 * level k; every level is padded with UINTPTR_MAX to whole lines. With
 * 10,000 slots: 2500, 313, 40 and 5 keys, so a search reads 5 lines, the
 * upper ones hot in L1.
 */
struct part {
    struct slot *v; /* n slots sorted by start, then {UINTPTR_MAX, NULL} up to cap */
    uintptr_t *key[MAX_LEVELS];
    size_t key_len[MAX_LEVELS]; /* allocated entries, a multiple of FANOUT */
    size_t n, cap;              /* cap: a multiple of SLOTS_PER_LINE */
    int levels;                 /* allocated (for cap) */
    int depth;                  /* searched (for n) */
    /* A copy of the top level (key[depth - 1], at most FANOUT keys), so
     * the first step of a search needs no load that depends on another. */
    _Alignas(CACHE_LINE) uintptr_t top[FANOUT];
};

/* One release in the LRU log (see the top of this file). */
struct lru_ent {
    uint32_t id;
    uint32_t release; /* the region's `releases` when appended */
};

#define ID_NONE UINT32_MAX

#define NPOOLS (1 + TW_REGCACHE_MAX_GPUS)
#define NACCESS ((int)TW_ACCESS_ALL + 1)

struct tw_regcache {
    /* The lock and the counters a hit changes share one line. */
    _Alignas(CACHE_LINE) pthread_mutex_t lock;
    uint64_t hits;   /* st.hits, kept here */
    uint64_t in_use; /* st.in_use, kept here */
    /* kinds[k] is set and has no check_on_hit: lookups with hint k take
     * the fast path (a copy, so the hit reads no ops table). */
    unsigned char fast_hint[TW_MEMKIND_MAX];
    pthread_cond_t cond; /* broadcast when a PENDING region settles */
    /* GPU registrations and deregistrations of one device run one at a
     * time (regcache.h, "GPU ranges"); recursive, because a registrar may
     * call tw__regcache_invalidate, which may deregister. */
    pthread_mutex_t gpu_serial[TW_REGCACHE_MAX_GPUS];
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
    /* Linked regions by id (NULL: free or quarantined). Ids of unlinked
     * regions are quarantined until the next log compaction. */
    struct tw_regcache_region **ids;
    uint32_t *free_ids, *quar_ids;
    uint64_t *seen, *quarantined; /* bitmaps over ids, for log_compact */
    size_t nids, nfree, nquar, ids_cap, nlinked;
    /* LRU log: entries [log_head, log_tail) of log_cap, oldest first. */
    struct lru_ent *log;
    size_t log_head, log_tail, log_cap;
    struct tw_regcache_stats st; /* hits and in_use live above */
};

/* ---- index (lock held) ---- */

static struct part *part_of(struct tw_regcache *c, enum tw_memkind kind, uint32_t access)
{
    return &c->parts[kind][access];
}

/* Keys <= addr among the FANOUT keys of one line; the padding (UINTPTR_MAX)
 * never counts. Independent compares: no branch, no dependent load. */
static size_t count_line(const uintptr_t *k, uintptr_t addr)
{
    _Static_assert(FANOUT == 8, "count_line is unrolled for 8 keys a line");
    return (size_t)(k[0] <= addr) + (k[1] <= addr) + (k[2] <= addr) + (k[3] <= addr) +
           (k[4] <= addr) + (k[5] <= addr) + (k[6] <= addr) + (k[7] <= addr);
}

/*
 * Number of slots with start <= addr (addr < UINTPTR_MAX, which lookups
 * and invalidations guarantee). From the top level down, each step counts
 * the keys <= addr in one line, which names the line to read one level
 * below: `depth` + 1 lines, no data-dependent branch.
 */
static size_t count_le(const struct part *p, uintptr_t addr)
{
    if (p->n == 0)
        return 0;
    int k = p->depth - 1;
    size_t idx = count_line(p->top, addr);
    if (idx == 0)
        return 0; /* below the first start */
    /* key[k][idx - 1] <= addr < key[k][idx]: descend into that line. */
    while (k-- > 0) {
        size_t base = (idx - 1) * FANOUT;
        idx = base + count_line(p->key[k] + base, addr);
    }
    _Static_assert(SLOTS_PER_LINE == 4, "count_le is unrolled for 4 slots a line");
    size_t base = (idx - 1) * SLOTS_PER_LINE;
    const struct slot *s = p->v + base;
    return base + (size_t)(s[0].start <= addr) + (s[1].start <= addr) + (s[2].start <= addr) +
           (s[3].start <= addr);
}

/* Entries of each key level for n slots, and the levels a search needs. */
static size_t level_entries(size_t below, int k)
{
    size_t stride = k == 0 ? SLOTS_PER_LINE : FANOUT;
    return (below + stride - 1) / stride;
}

static int depth_for(size_t n)
{
    int d = 1;
    for (size_t m = level_entries(n, 0); m > FANOUT; m = level_entries(m, 1))
        d++;
    return d;
}

/* Rewrite the keys derived from slots >= from (after an insert or a
 * removal there; n changed by at most one). */
static void part_rekey(struct part *p, size_t from)
{
    size_t below = p->n;
    for (int k = 0; k < p->levels; k++) {
        size_t stride = k == 0 ? SLOTS_PER_LINE : FANOUT;
        size_t m = level_entries(below, k);
        from /= stride;
        for (size_t b = from; b < m; b++)
            p->key[k][b] = k == 0 ? p->v[b * SLOTS_PER_LINE].start : p->key[k - 1][b * FANOUT];
        if (m < p->key_len[k])
            p->key[k][m] = UINTPTR_MAX; /* the entry a removal vacated */
        below = m;
    }
    p->depth = depth_for(p->n);
    memcpy(p->top, p->key[p->depth - 1], sizeof(p->top));
}

static void part_free_keys(struct part *p)
{
    for (int k = 0; k < p->levels; k++)
        free(p->key[k]);
    p->levels = 0;
}

static int part_grow(struct part *p)
{
    size_t cap = p->cap ? p->cap * 2 : 64;
    struct part np = {.n = p->n, .cap = cap};
    np.v = aligned_alloc(CACHE_LINE, cap * sizeof(*np.v));
    if (!np.v)
        return -ENOMEM;
    /* Levels sized for cap: each a whole number of lines of padding. */
    size_t below = cap;
    do {
        if (np.levels == MAX_LEVELS)
            goto out_free;
        size_t m = level_entries(below, np.levels);
        size_t len = (m + FANOUT - 1) / FANOUT * FANOUT;
        uintptr_t *key = aligned_alloc(CACHE_LINE, len * sizeof(*key));
        if (!key)
            goto out_free;
        for (size_t i = 0; i < len; i++)
            key[i] = UINTPTR_MAX;
        np.key[np.levels] = key;
        np.key_len[np.levels++] = len;
        below = m;
    } while (below > FANOUT);
    if (p->n)
        memcpy(np.v, p->v, p->n * sizeof(*np.v));
    for (size_t i = p->n; i < cap; i++)
        np.v[i] = (struct slot){.start = UINTPTR_MAX, .r = NULL};
    part_rekey(&np, 0);
    free(p->v);
    part_free_keys(p);
    *p = np;
    return 0;

out_free:
    part_free_keys(&np);
    free(np.v);
    return -ENOMEM;
}

static int part_insert(struct part *p, struct tw_regcache_region *r)
{
    if (p->n == p->cap && part_grow(p))
        return -ENOMEM;
    size_t i = count_le(p, r->start);
    /* v[n] is padding: the shift overwrites it, v[n+1..] stay padding. */
    memmove(&p->v[i + 1], &p->v[i], (p->n - i) * sizeof(*p->v));
    p->v[i] = (struct slot){.start = r->start, .r = r};
    p->n++;
    part_rekey(p, i);
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
    p->v[p->n] = (struct slot){.start = UINTPTR_MAX, .r = NULL};
    part_rekey(p, i - 1);
}

/* ---- ids and the LRU log (lock held) ---- */

static void bit_set(uint64_t *map, uint32_t i)
{
    map[i / 64] |= (uint64_t)1 << (i % 64);
}

static void bit_clear(uint64_t *map, uint32_t i)
{
    map[i / 64] &= ~((uint64_t)1 << (i % 64));
}

/*
 * Drop stale log entries, keeping the order, without touching a region:
 * walking backwards, an entry is kept only if it is the last one of its
 * id (`seen`) and its id was not detached since the last compaction
 * (`quarantined`; such ids are not reused before this point, so every id
 * in the log names its current region or none). Keeps at most one entry
 * per linked region, so at most half of log_cap (see reserve_link), then
 * frees the quarantined ids.
 */
static void log_compact(struct tw_regcache *c)
{
    /* One sequential backward pass, free of data-dependent branches
     * (entries already marked ID_NONE are rare: see lru_victim). Kept
     * entries are packed at the back, at w - 1 >= i, so no unread entry is
     * overwritten; then moved to the front. */
    size_t w = c->log_tail;
    for (size_t i = c->log_tail; i-- > c->log_head;) {
        struct lru_ent e = c->log[i];
        if (e.id == ID_NONE)
            continue;
        uint64_t bit = (uint64_t)1 << (e.id % 64);
        uint64_t keep = !((c->quarantined[e.id / 64] | c->seen[e.id / 64]) & bit);
        c->seen[e.id / 64] |= bit;
        c->log[w - 1] = e;
        w -= keep;
    }
    size_t kept = c->log_tail - w;
    memmove(c->log, c->log + w, kept * sizeof(*c->log));
    memset(c->seen, 0, c->ids_cap / 8);
    c->log_head = 0;
    c->log_tail = kept;
    while (c->nquar) {
        uint32_t id = c->quar_ids[--c->nquar];
        bit_clear(c->quarantined, id);
        c->free_ids[c->nfree++] = id;
    }
}

static int grow_array(void **p, size_t n, size_t size)
{
    void *q = realloc(*p, n * size);
    if (!q)
        return -ENOMEM;
    *p = q;
    return 0;
}

/*
 * Make room for one more linked region: an id, and log capacity of at
 * least twice the linked regions (so compaction always frees half the
 * log). The only place the LRU allocates, so a release never has to.
 */
static int reserve_link(struct tw_regcache *c)
{
    if (c->nfree == 0 && c->nids == c->ids_cap && c->nquar)
        log_compact(c); /* frees the quarantined ids */
    if (c->nfree == 0 && c->nids == c->ids_cap) {
        size_t cap = c->ids_cap ? c->ids_cap * 2 : 64; /* a multiple of 64 */
        if (cap >= ID_NONE)
            return -ENOMEM;
        if (grow_array((void **)&c->ids, cap, sizeof(*c->ids)) ||
            grow_array((void **)&c->free_ids, cap, sizeof(*c->free_ids)) ||
            grow_array((void **)&c->quar_ids, cap, sizeof(*c->quar_ids)) ||
            grow_array((void **)&c->seen, cap / 64, sizeof(*c->seen)) ||
            grow_array((void **)&c->quarantined, cap / 64, sizeof(*c->quarantined)))
            return -ENOMEM; /* the arrays that did grow are still valid */
        memset(c->seen + c->ids_cap / 64, 0, (cap - c->ids_cap) / 8);
        memset(c->quarantined + c->ids_cap / 64, 0, (cap - c->ids_cap) / 8);
        c->ids_cap = cap;
    }
    size_t want = 2 * (c->nlinked + 1) + 64;
    if (c->log_cap < want) {
        /* Twice what is needed: compaction then frees at least 3/4 of the
         * log, so a release costs at most 4/3 entry visits, amortized. */
        size_t cap = 2 * want;
        if (cap > (size_t)1 << 31)
            return -ENOMEM; /* keeps `releases` (mod 2^32) unambiguous */
        struct lru_ent *log = malloc(cap * sizeof(*log));
        if (!log)
            return -ENOMEM;
        size_t n = c->log_tail - c->log_head;
        if (n)
            memcpy(log, c->log + c->log_head, n * sizeof(*log));
        free(c->log);
        c->log = log;
        c->log_head = 0;
        c->log_tail = n;
        c->log_cap = cap;
    }
    return 0;
}

/* Give r an id (after reserve_link succeeded). */
static void id_attach(struct tw_regcache *c, struct tw_regcache_region *r)
{
    uint32_t id = c->nfree ? c->free_ids[--c->nfree] : (uint32_t)c->nids++;
    c->ids[id] = r;
    r->id = id;
    r->releases = 0; /* entries of this id's last owner are gone (quarantine) */
    c->nlinked++;
}

/* r leaves the index: its log entries are stale from now on. */
static void id_detach(struct tw_regcache *c, struct tw_regcache_region *r)
{
    c->ids[r->id] = NULL;
    bit_set(c->quarantined, r->id);
    c->quar_ids[c->nquar++] = r->id;
    r->id = ID_NONE;
    c->nlinked--;
}

/* The idle linked region an entry stands for, or NULL if it is stale. */
static struct tw_regcache_region *log_region(const struct tw_regcache *c, struct lru_ent e)
{
    if (e.id == ID_NONE)
        return NULL;
    struct tw_regcache_region *r = c->ids[e.id];
    if (!r || r->releases != e.release || r->refcnt)
        return NULL;
    return r;
}

/* A linked region just became idle: it is now the most recently used. */
static void lru_release(struct tw_regcache *c, struct tw_regcache_region *r)
{
    if (c->log_tail == c->log_cap)
        log_compact(c);
    c->log[c->log_tail++] = (struct lru_ent){.id = r->id, .release = ++r->releases};
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
    id_detach(c, r); /* its LRU log entries are stale from now on */
    r->linked = 0;
    if (r->state == REGION_READY && r->refcnt == 0)
        schedule_dereg(c, r, dead);
}

/* The serialization lock of a GPU region's device, or NULL (host). */
static pthread_mutex_t *gpu_serial_of(struct tw_regcache *c, const struct tw_mem_attr *a)
{
    if (a->kind == TW_MEMKIND_CUDA && a->device >= 0 && a->device < TW_REGCACHE_MAX_GPUS)
        return &c->gpu_serial[a->device];
    return NULL;
}

void tw__regcache_gpu_serial_lock(struct tw_regcache *c, int device, int lock)
{
    struct tw_mem_attr a = {.kind = TW_MEMKIND_CUDA, .device = device};
    pthread_mutex_t *serial = gpu_serial_of(c, &a);
    if (!serial)
        return;
    if (lock)
        pthread_mutex_lock(serial);
    else
        pthread_mutex_unlock(serial);
}

static void run_deregs(struct tw_regcache *c, struct tw_regcache_region *dead)
{
    while (dead) {
        struct tw_regcache_region *next = dead->dead_next;
        pthread_mutex_t *serial = gpu_serial_of(c, &dead->attr);
        if (serial)
            pthread_mutex_lock(serial);
        c->reg->dereg(c->reg_ctx, dead->handle);
        if (serial)
            pthread_mutex_unlock(serial);
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

/*
 * Least recently used idle region, of `pool` unless pool < 0: the oldest
 * live log entry. Stale entries met on the way are dropped (at the head)
 * or marked (behind a live entry of another pool), so each is paid once.
 */
static struct tw_regcache_region *lru_victim(struct tw_regcache *c, int pool)
{
    for (size_t i = c->log_head; i < c->log_tail; i++) {
        struct tw_regcache_region *r = log_region(c, c->log[i]);
        if (!r) {
            if (i == c->log_head)
                c->log_head++;
            else
                c->log[i].id = ID_NONE;
            continue;
        }
        if (pool < 0 || r->pool == pool)
            return r;
    }
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
        pthread_mutex_t *serial = gpu_serial_of(c, &r->attr);
        if (serial)
            pthread_mutex_lock(serial);
        uint64_t t0 = tw__now_ns();
        int rc = c->reg->reg(c->reg_ctx, &req, &r->handle, err, errlen);
        uint64_t dt = tw__now_ns() - t0;
        if (serial)
            pthread_mutex_unlock(serial);

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
    /* sizeof is a multiple of the alignment, as aligned_alloc wants. */
    struct tw_regcache *c = aligned_alloc(_Alignof(struct tw_regcache), sizeof(*c));
    if (!c)
        return -ENOMEM;
    memset(c, 0, sizeof(*c));
    int rc = -ENOMEM;
    if (pthread_mutex_init(&c->lock, NULL) != 0)
        goto out_free;
    if (pthread_cond_init(&c->cond, NULL) != 0)
        goto out_destroy_lock;
    pthread_mutexattr_t ma;
    if (pthread_mutexattr_init(&ma) != 0)
        goto out_destroy_cond;
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    int g = 0;
    for (; g < TW_REGCACHE_MAX_GPUS; g++)
        if (pthread_mutex_init(&c->gpu_serial[g], &ma) != 0)
            break;
    pthread_mutexattr_destroy(&ma);
    if (g < TW_REGCACHE_MAX_GPUS) {
        while (g-- > 0)
            pthread_mutex_destroy(&c->gpu_serial[g]);
        goto out_destroy_cond;
    }

    struct tw_regcache_config d = cfg ? *cfg : (struct tw_regcache_config){0};
    c->reg = reg;
    c->reg_ctx = ctx;
    for (int k = 0; k < TW_MEMKIND_MAX; k++) {
        c->kinds[k] = d.memkinds[k] ? d.memkinds[k] : tw__memkind_ops((enum tw_memkind)k);
        c->fast_hint[k] = k != TW_MEMKIND_AUTO && c->kinds[k] && !c->kinds[k]->check_on_hit;
    }
    c->max_entries = d.max_entries ? d.max_entries : 4096;
    if (!d.max_host_bytes) {
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        d.max_host_bytes = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz / 2 : (size_t)1 << 32;
    }
    c->max_host_bytes = d.max_host_bytes;
    c->pool_limit[0] = d.max_host_bytes;
    c->max_gpu_bytes = d.max_gpu_bytes;
    c->bar1_percent = d.gpu_bar1_percent && d.gpu_bar1_percent <= 100 ? d.gpu_bar1_percent : 50;

    rc = tw__hostmem_subscribe(hostmem_hook, c);
    if (rc)
        goto out_destroy_serial;
    *out = c;
    return 0;

out_destroy_serial:
    for (g = 0; g < TW_REGCACHE_MAX_GPUS; g++)
        pthread_mutex_destroy(&c->gpu_serial[g]);
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
    int busy = c->in_use != 0;
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
            part_free_keys(p);
        }
    }
    pthread_mutex_unlock(&c->lock);
    run_deregs(c, dead);
    free(c->ids);
    free(c->free_ids);
    free(c->quar_ids);
    free(c->seen);
    free(c->quarantined);
    free(c->log);
    for (int g = 0; g < TW_REGCACHE_MAX_GPUS; g++)
        pthread_mutex_destroy(&c->gpu_serial[g]);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    free(c);
    return 0;
}

static struct tw_regcache_region *new_region(uintptr_t start, uintptr_t end, uint32_t access,
                                             const struct tw_memkind_ops *kind,
                                             const struct tw_mem_attr *attr, int cached)
{
    struct tw_regcache_region *r = aligned_alloc(_Alignof(struct tw_regcache_region), sizeof(*r));
    if (!r)
        return NULL;
    memset(r, 0, sizeof(*r));
    r->id = ID_NONE;
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
    if (r->linked) {
        part_remove(part_of(c, r->attr.kind, r->access), r);
        id_detach(c, r);
    }
    account_sub(c, r);
    c->in_use--;
    free(r);
}

/*
 * Everything but the host fast path of tw__regcache_lookup: GPU hits,
 * misses, waits. Entered with the cache lock held iff `locked` (the fast
 * path missed; the hint then has no check_on_hit). Kept out of line so the
 * fast path needs no big stack frame.
 */
__attribute__((noinline)) static int lookup_slow(struct tw_regcache *c, uintptr_t a, size_t len,
                                                 uint32_t access, enum tw_memkind hint, int locked,
                                                 struct tw_regcache_region **out, char *err,
                                                 size_t errlen)
{
    const struct tw_memkind_ops *kind = NULL;
    struct tw_mem_attr attr;
    int have_attr = 0;
    if (locked) {
        /* Described only if it misses for good (query below). */
        kind = c->kinds[hint];
        attr = (struct tw_mem_attr){.kind = hint, .device = -1};
    } else {
        int rc = tw__memkind_classify(c->kinds, a, len, hint, &kind, &attr, err, errlen);
        if (rc)
            return rc;
        have_attr = 1;
        pthread_mutex_lock(&c->lock);
    }

    struct tw_regcache_region *dead = NULL;
    struct tw_regcache_region *r = NULL;
    int rc = 0;
    for (;;) {
        struct part *p = part_of(c, attr.kind, access);
        size_t i = count_le(p, a);
        struct tw_regcache_region *hit = i > 0 ? p->v[i - 1].r : NULL;
        if (hit && hit->end >= a + len) {
            if (!kind->check_on_hit || kind->same_backing(&hit->attr, &attr)) {
                if (hit->state == REGION_PENDING) {
                    c->st.waits++;
                    pthread_cond_wait(&c->cond, &c->lock);
                    continue;
                }
                /* No LRU work: an idle region's log entry goes stale by
                 * itself (refcnt), and release appends a fresh one. */
                if (hit->refcnt++ == 0)
                    c->in_use++;
                c->hits++;
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
            rc = tw__memkind_classify(c->kinds, a, len, hint, &kind, &attr, err, errlen);
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
            c->in_use++;
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
        while (first > 0 && v[first - 1].r->end > s)
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
        if (reserve_link(c)) {
            rc = -ENOMEM;
            goto out_unlock;
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
        id_attach(c, r);
        r->linked = 1;
        c->st.misses++;
        c->in_use++;
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

int tw__regcache_lookup(struct tw_regcache *c, const void *addr, size_t len, uint32_t access,
                        enum tw_memkind hint, struct tw_regcache_region **out, char *err,
                        size_t errlen)
{
    uintptr_t a = (uintptr_t)addr;
    if (access == 0 || (access & ~TW_ACCESS_ALL) || len == 0 || a + len < a) {
        tw__errbuf_set(err, errlen, "%s",
                       "invalid lookup: empty/wrapping range or bad access flags");
        return TW_EINVAL;
    }
    if ((unsigned)hint >= TW_MEMKIND_MAX) {
        tw__errbuf_set(err, errlen, "%s", "invalid memory kind");
        return TW_EINVAL;
    }
    /* The hot path. A hint whose kind has no check_on_hit (host) needs no
     * query for a hit: one lock round trip, the index search, one line of
     * the region, no LRU work (see the top of this file). */
    if (!c->fast_hint[hint])
        return lookup_slow(c, a, len, access, hint, 0, out, err, errlen);
    pthread_mutex_lock(&c->lock);
    const struct part *p = part_of(c, hint, access);
    size_t i = count_le(p, a);
    struct tw_regcache_region *hit = i > 0 ? p->v[i - 1].r : NULL;
    if (hit && hit->end >= a + len && hit->state == REGION_READY) {
        if (hit->refcnt++ == 0)
            c->in_use++;
        c->hits++;
        pthread_mutex_unlock(&c->lock);
        *out = hit;
        return 0;
    }
    return lookup_slow(c, a, len, access, hint, 1, out, err, errlen); /* lock held */
}

void tw__regcache_release(struct tw_regcache *c, struct tw_regcache_region *r)
{
    struct tw_regcache_region *dead = NULL;
    pthread_mutex_lock(&c->lock);
    if (r->refcnt == 0)
        abort(); /* double release: the caller would use a dead handle */
    if (--r->refcnt == 0) {
        c->in_use--;
        if (!r->linked) {
            schedule_dereg(c, r, &dead); /* invalidated, evicted or one-shot */
        } else {
            lru_release(c, r);
            /* Over a limit only if in-use regions pushed it there. */
            if (c->st.entries > c->max_entries || c->pool_bytes[r->pool] > pool_limit(c, r->pool))
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
            while (last > 0 && p->v[last - 1].r->end > addr) {
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
    out->hits = c->hits;
    out->in_use = c->in_use;
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
