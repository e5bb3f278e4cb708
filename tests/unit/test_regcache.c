/*
 * Registration cache policy, through a fake registrar (tests/regcache/
 * fake_registrar.h): ranges, rounding, LRU, limits, evict-and-retry,
 * in-use regions versus eviction and invalidation, GPU address reuse,
 * access separation, in-progress sharing, invalidation racing lookups.
 */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "mem/hostmem.h"
#include "mem/regcache.h"
#include "regcache/fake_registrar.h"
#include "tensorwire/mem.h"
#include "tw_test.h"

#define RW (TW_ACCESS_LOCAL_READ | TW_ACCESS_REMOTE_READ)
#define GPU_BASE ((uintptr_t)0x7f0000000000ull)
#define K64 ((size_t)65536)

static size_t page;
static struct fake_registrar fr;
static char errbuf[256];

static struct tw_regcache *make(struct tw_regcache_config cfg)
{
    struct tw_regcache *c = NULL;
    fake_init(&fr);
    cfg.memkinds[TW_MEMKIND_CUDA] = fake_cuda_ops();
    TW_ASSERT_OK(tw__regcache_create(&cfg, &fake_registrar_ops, &fr, &c));
    return c;
}

static void finish(struct tw_regcache *c)
{
    TW_ASSERT_OK(tw__regcache_destroy(c));
    TW_ASSERT_EQ(fr.live, 0);
    TW_ASSERT_EQ(fr.regs, fr.deregs);
}

/* A page-aligned tracked host buffer of n pages. */
static char *tracked(size_t npages)
{
    char *b = aligned_alloc(page, npages * page);
    TW_ASSERT(b != NULL);
    TW_ASSERT_OK(tw_mem_register(b, npages * page, 0));
    return b;
}

static void untrack(char *b)
{
    TW_ASSERT_OK(tw_mem_unregister(b));
    free(b);
}

static struct tw_regcache_region *get(struct tw_regcache *c, const void *p, size_t len,
                                      uint32_t access, enum tw_memkind kind)
{
    struct tw_regcache_region *r = NULL;
    int rc = tw__regcache_lookup(c, p, len, access, kind, &r, errbuf, sizeof(errbuf));
    if (rc)
        TW_FAIL("lookup(%p, %zu): %s: %s", p, len, tw_strerror_name(rc), errbuf);
    return r;
}

static struct tw_regcache_stats stats(struct tw_regcache *c)
{
    struct tw_regcache_stats s;
    tw__regcache_stats(c, &s);
    return s;
}

static void untracked_host_is_one_shot(void)
{
    struct tw_regcache *c = make((struct tw_regcache_config){0});
    char *b = malloc(10000);
    struct tw_regcache_region *r = get(c, b + 10, 100, RW, TW_MEMKIND_HOST);
    TW_ASSERT_EQ(tw__regcache_region_cached(r), 0);
    TW_ASSERT_EQ(fr.live, 1);
    tw__regcache_release(c, r);
    TW_ASSERT_EQ(fr.live, 0);
    r = get(c, b + 10, 100, RW, TW_MEMKIND_HOST);
    tw__regcache_release(c, r);
    struct tw_regcache_stats s = stats(c);
    TW_ASSERT_EQ(s.uncached, 2);
    TW_ASSERT_EQ(s.hits, 0);
    TW_ASSERT_EQ(fr.regs, 2);
    free(b);
    finish(c);
}

static void covering_range_hits(void)
{
    struct tw_regcache *c = make((struct tw_regcache_config){0});
    char *b = tracked(8);
    struct tw_regcache_region *r = get(c, b + 100, 200, RW, TW_MEMKIND_HOST);
    TW_ASSERT_EQ(tw__regcache_region_cached(r), 1);
    TW_ASSERT_EQ_U64(tw__regcache_region_start(r), (uintptr_t)b);
    TW_ASSERT_EQ(tw__regcache_region_len(r), page);
    tw__regcache_release(c, r);
    /* Inside the same page, and the whole page: both covered. */
    r = get(c, b + 300, 50, RW, TW_MEMKIND_HOST);
    tw__regcache_release(c, r);
    r = get(c, b, page, RW, TW_MEMKIND_HOST);
    tw__regcache_release(c, r);
    /* AUTO classifies (no CUDA here, or host per the driver) and hits too. */
    r = get(c, b + 1, 1, RW, TW_MEMKIND_AUTO);
    tw__regcache_release(c, r);
    struct tw_regcache_stats s = stats(c);
    TW_ASSERT_EQ(s.misses, 1);
    TW_ASSERT_EQ(s.hits, 3);
    TW_ASSERT_EQ(fr.regs, 1);
    TW_ASSERT_EQ(s.entries, 1);
    TW_ASSERT_EQ(s.bytes, page);
    untrack(b);
    TW_ASSERT_EQ(fr.live, 0);
    finish(c);
}

static void adjacent_ranges_stay_separate(void)
{
    struct tw_regcache *c = make((struct tw_regcache_config){0});
    char *b = tracked(8);
    struct tw_regcache_region *r1 = get(c, b, page, RW, TW_MEMKIND_HOST);
    struct tw_regcache_region *r2 = get(c, b + page, page, RW, TW_MEMKIND_HOST);
    TW_ASSERT(r1 != r2);
    tw__regcache_release(c, r1);
    tw__regcache_release(c, r2);
    struct tw_regcache_stats s = stats(c);
    TW_ASSERT_EQ(s.entries, 2);
    TW_ASSERT_EQ(s.merges, 0);
    /* A range straddling both is covered by neither: merged into one. */
    r1 = get(c, b + page - 8, 16, RW, TW_MEMKIND_HOST);
    TW_ASSERT_EQ_U64(tw__regcache_region_start(r1), (uintptr_t)b);
    TW_ASSERT_EQ(tw__regcache_region_len(r1), 2 * page);
    tw__regcache_release(c, r1);
    s = stats(c);
    TW_ASSERT_EQ(s.entries, 1);
    TW_ASSERT_EQ(s.merges, 2);
    TW_ASSERT_EQ(fr.live, 1);
    untrack(b);
    finish(c);
}

static void overlapping_ranges_merge(void)
{
    struct tw_regcache *c = make((struct tw_regcache_config){0});
    char *b = tracked(8);
    struct tw_regcache_region *r = get(c, b, 3 * page, RW, TW_MEMKIND_HOST);
    tw__regcache_release(c, r);
    r = get(c, b + 2 * page, 3 * page, RW, TW_MEMKIND_HOST);
    TW_ASSERT_EQ_U64(tw__regcache_region_start(r), (uintptr_t)b);
    TW_ASSERT_EQ(tw__regcache_region_len(r), 5 * page);
    tw__regcache_release(c, r);
    TW_ASSERT_EQ(fr.live, 1);
    TW_ASSERT_EQ(fr.regs, 2);
    r = get(c, b + page, 3 * page, RW, TW_MEMKIND_HOST);
    tw__regcache_release(c, r);
    struct tw_regcache_stats s = stats(c);
    TW_ASSERT_EQ(s.hits, 1);
    TW_ASSERT_EQ(s.merges, 1);
    untrack(b);
    finish(c);
}

static void gpu_rounds_to_64k_at_both_edges(void)
{
    struct tw_regcache *c = make((struct tw_regcache_config){.max_gpu_bytes = 1 << 30});
    fake_cuda_set(0, GPU_BASE, 4 << 20, 11, 0);
    void *p = (void *)(GPU_BASE + K64 + 0x10);
    struct tw_regcache_region *r = get(c, p, 0x20, RW, TW_MEMKIND_CUDA);
    TW_ASSERT_EQ_U64(tw__regcache_region_start(r), GPU_BASE + K64);
    TW_ASSERT_EQ(tw__regcache_region_len(r), K64);
    TW_ASSERT_EQ_U64(fr.last_reg_addr, GPU_BASE + K64);
    tw__regcache_release(c, r);
    /* Another buffer in the same 64 KiB page shares the mapping. */
    r = get(c, (void *)(GPU_BASE + K64 + 0x9000), 0x100, RW, TW_MEMKIND_CUDA);
    tw__regcache_release(c, r);
    TW_ASSERT_EQ(fr.regs, 1);
    /* Exactly on both boundaries: no growth. */
    r = get(c, (void *)(GPU_BASE + 3 * K64), 2 * K64, RW, TW_MEMKIND_CUDA);
    TW_ASSERT_EQ_U64(tw__regcache_region_start(r), GPU_BASE + 3 * K64);
    TW_ASSERT_EQ(tw__regcache_region_len(r), 2 * K64);
    tw__regcache_release(c, r);
    /* One byte either side of a boundary: both neighbouring pages. */
    r = get(c, (void *)(GPU_BASE + 8 * K64 - 1), 2, RW, TW_MEMKIND_CUDA);
    TW_ASSERT_EQ_U64(tw__regcache_region_start(r), GPU_BASE + 7 * K64);
    TW_ASSERT_EQ(tw__regcache_region_len(r), 2 * K64);
    tw__regcache_release(c, r);
    /* An allocation not 64 KiB aligned: the rounded range is clamped. */
    uintptr_t odd = GPU_BASE + (64 << 20) + 0x8000;
    fake_cuda_set(1, odd, 0x10000, 12, 0);
    r = get(c, (void *)(odd + 0x10), 0x10, RW, TW_MEMKIND_CUDA);
    TW_ASSERT_EQ_U64(tw__regcache_region_start(r), odd);
    TW_ASSERT_EQ(tw__regcache_region_len(r), 0x8000);
    tw__regcache_release(c, r);
    r = get(c, (void *)(odd + 0xfff0), 0x10, RW, TW_MEMKIND_CUDA);
    TW_ASSERT_EQ_U64(tw__regcache_region_start(r), odd + 0x8000);
    TW_ASSERT_EQ(tw__regcache_region_len(r), 0x8000);
    tw__regcache_release(c, r);
    /* AUTO finds the (fake) GPU memory through the CUDA kind. */
    r = get(c, (void *)(GPU_BASE + K64), 1, RW, TW_MEMKIND_AUTO);
    TW_ASSERT_EQ(tw__regcache_region_attr(r)->kind, TW_MEMKIND_CUDA);
    tw__regcache_release(c, r);
    /* A range that starts in it and leaves it is neither kind: refused
     * with the CUDA kind's reason (never registered as host memory), and
     * TW_EINVAL with a CUDA hint too. */
    unsigned regs = fr.regs;
    r = NULL;
    TW_ASSERT_ERR(tw__regcache_lookup(c, (void *)(odd + 0xff00), 0x200, RW, TW_MEMKIND_AUTO, &r,
                                      errbuf, sizeof(errbuf)),
                  TW_EINVAL);
    TW_ASSERT(strstr(errbuf, "leaves fake CUDA allocation 1") != NULL);
    TW_ASSERT_ERR(tw__regcache_lookup(c, (void *)(odd + 0xff00), 0x200, RW, TW_MEMKIND_CUDA, &r,
                                      errbuf, sizeof(errbuf)),
                  TW_EINVAL);
    TW_ASSERT(r == NULL);
    TW_ASSERT_EQ(fr.regs, regs);
    fake_cuda_set(0, 0, 0, 0, 0);
    fake_cuda_set(1, 0, 0, 0, 0);
    finish(c);
}

static void gpu_address_reuse_misses(void)
{
    struct tw_regcache *c = make((struct tw_regcache_config){.max_gpu_bytes = 1 << 30});
    fake_cuda_set(0, GPU_BASE, 1 << 20, 21, 0);
    struct tw_regcache_region *r = get(c, (void *)GPU_BASE, 4096, RW, TW_MEMKIND_CUDA);
    tw__regcache_release(c, r);
    r = get(c, (void *)GPU_BASE, 4096, RW, TW_MEMKIND_CUDA);
    tw__regcache_release(c, r);
    TW_ASSERT_EQ(stats(c).hits, 1);
    /* cuMemFree + cuMemAlloc at the same address: new buffer id. */
    fake_cuda_set(0, GPU_BASE, 1 << 20, 22, 0);
    r = get(c, (void *)GPU_BASE, 4096, RW, TW_MEMKIND_CUDA);
    struct fake_handle *h = tw__regcache_region_handle(r);
    TW_ASSERT_EQ(h->buffer_id, 22);
    struct tw_regcache_stats s = stats(c);
    TW_ASSERT_EQ(s.stale, 1);
    TW_ASSERT_EQ(s.misses, 2);
    TW_ASSERT_EQ(fr.live, 1); /* the stale one was idle: deregistered */
    /* Reuse while the old region is still in use: it survives until
     * released, but is never handed out again. */
    fake_cuda_set(0, GPU_BASE, 1 << 20, 23, 1); /* other device too */
    struct tw_regcache_region *r2 = get(c, (void *)GPU_BASE, 4096, RW, TW_MEMKIND_CUDA);
    TW_ASSERT(r2 != r);
    TW_ASSERT_EQ(fr.live, 2);
    TW_ASSERT_EQ(atomic_load(&h->alive), 1);
    tw__regcache_release(c, r);
    TW_ASSERT_EQ(fr.live, 1);
    tw__regcache_release(c, r2);
    TW_ASSERT_EQ(stats(c).stale, 2);
    /* Freed and not reallocated: the lookup fails with the kind's reason. */
    fake_cuda_set(0, 0, 0, 0, 0);
    struct tw_regcache_region *none = NULL;
    TW_ASSERT_ERR(tw__regcache_lookup(c, (void *)GPU_BASE, 1, RW, TW_MEMKIND_CUDA, &none, errbuf,
                                      sizeof(errbuf)),
                  TW_EINVAL);
    TW_ASSERT_STR_EQ(errbuf, "not fake CUDA memory");
    finish(c);
}

static void lru_order_and_count_limit(void)
{
    struct tw_regcache *c = make((struct tw_regcache_config){.max_entries = 3});
    char *b = tracked(8);
    for (int i = 0; i < 3; i++)
        tw__regcache_release(c, get(c, b + i * page, page, RW, TW_MEMKIND_HOST));
    /* Touch page 0: page 1 becomes the least recently used. */
    tw__regcache_release(c, get(c, b, 1, RW, TW_MEMKIND_HOST));
    tw__regcache_release(c, get(c, b + 3 * page, page, RW, TW_MEMKIND_HOST));
    TW_ASSERT_EQ_U64(fr.last_dereg_addr, (uintptr_t)(b + page));
    TW_ASSERT_EQ(fr.live, 3);
    tw__regcache_release(c, get(c, b + 4 * page, page, RW, TW_MEMKIND_HOST));
    TW_ASSERT_EQ_U64(fr.last_dereg_addr, (uintptr_t)(b + 2 * page));
    struct tw_regcache_stats s = stats(c);
    TW_ASSERT_EQ(s.evictions, 2);
    TW_ASSERT_EQ(s.entries, 3);
    /* Page 0 survived both evictions. */
    tw__regcache_release(c, get(c, b, page, RW, TW_MEMKIND_HOST));
    TW_ASSERT_EQ(stats(c).hits, 2);
    untrack(b);
    finish(c);
}

/*
 * Exact LRU across many releases: the cache's LRU log is compacted many
 * times over (its capacity is a few times max_entries), ids are detached
 * by evictions and invalidations and reused. A model that keeps each
 * page's last release time predicts every victim.
 */
static void lru_order_matches_model(void)
{
    enum { N = 64, M = 40, OPS = 20000, HELD = 3 };
    struct tw_regcache *c = make((struct tw_regcache_config){.max_entries = M});
    char *b = tracked(N);
    uint64_t last[N] = {0}; /* 0: not cached */
    unsigned refs[N] = {0};
    struct tw_regcache_region *held[HELD] = {0};
    int held_page[HELD];
    uint64_t clock = 0, hits = 0, evictions = 0, invalidations = 0;
    unsigned seed = 7;
    for (int op = 0; op < OPS; op++) {
        int p = rand_r(&seed) % N;
        int what = rand_r(&seed) % 16;
        if (what == 0 && last[p] && !refs[p]) {
            tw__regcache_invalidate(c, (uintptr_t)(b + p * page), page);
            last[p] = 0;
            invalidations++;
            TW_ASSERT_EQ_U64(fr.last_dereg_addr, (uintptr_t)(b + p * page));
            continue;
        }
        int cached = last[p] != 0;
        struct tw_regcache_region *r = get(c, b + p * page + 1, page - 1, RW, TW_MEMKIND_HOST);
        TW_ASSERT_EQ_U64(tw__regcache_region_start(r), (uintptr_t)(b + p * page));
        refs[p]++;
        if (cached) {
            hits++;
        } else {
            last[p] = UINT64_MAX; /* cached, in use */
            int n = 0;
            for (int i = 0; i < N; i++)
                n += last[i] != 0;
            if (n > M) {
                int v = -1;
                for (int i = 0; i < N; i++)
                    if (last[i] && !refs[i] && (v < 0 || last[i] < last[v]))
                        v = i;
                TW_ASSERT(v >= 0);
                last[v] = 0;
                evictions++;
                TW_ASSERT_EQ_U64(fr.last_dereg_addr, (uintptr_t)(b + v * page));
            }
        }
        int slot = rand_r(&seed) % (HELD + 1);
        if (slot < HELD) {
            /* Keep it a while: in use, so never a victim. */
            if (held[slot]) {
                tw__regcache_release(c, held[slot]);
                int q = held_page[slot];
                if (--refs[q] == 0)
                    last[q] = ++clock;
            }
            held[slot] = r;
            held_page[slot] = p;
        } else {
            tw__regcache_release(c, r);
            if (--refs[p] == 0)
                last[p] = ++clock;
        }
        struct tw_regcache_stats s = stats(c);
        TW_ASSERT_EQ_U64(s.hits, hits);
        TW_ASSERT_EQ_U64(s.evictions, evictions);
        TW_ASSERT_EQ_U64(s.invalidations, invalidations);
    }
    for (int i = 0; i < HELD; i++)
        if (held[i])
            tw__regcache_release(c, held[i]);
    TW_ASSERT(evictions > 1000); /* the log was compacted many times over */
    untrack(b);
    finish(c);
}

/*
 * The index with thousands of regions (a search tree four levels deep),
 * inserted and removed at random positions: every lookup finds its own
 * region, removals shrink the tree, re-inserted regions are found again.
 */
static void index_many_regions(void)
{
    enum { N = 3000 };
    struct tw_regcache *c = make((struct tw_regcache_config){.max_entries = 2 * N});
    char *b = tracked(N);
    static int perm[N];
    unsigned seed = 11;
    for (int i = 0; i < N; i++)
        perm[i] = i;
    for (int i = N - 1; i > 0; i--) {
        int j = rand_r(&seed) % (i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int i = 0; i < N; i++)
        tw__regcache_release(c, get(c, b + perm[i] * page, page, RW, TW_MEMKIND_HOST));
    TW_ASSERT_EQ_U64(stats(c).misses, N);
    for (int i = 0; i < 3 * N; i++) {
        int k = rand_r(&seed) % N;
        size_t off = (size_t)rand_r(&seed) % page;
        struct tw_regcache_region *r = get(c, b + k * page + off, page - off, RW, TW_MEMKIND_HOST);
        TW_ASSERT_EQ_U64(tw__regcache_region_start(r), (uintptr_t)(b + k * page));
        tw__regcache_release(c, r);
    }
    TW_ASSERT_EQ_U64(stats(c).misses, N);
    /* Remove two thirds, in random order: the tree shrinks. */
    for (int i = 0; i < N; i++)
        if (perm[i] % 3)
            tw__regcache_invalidate(c, (uintptr_t)(b + perm[i] * page), page);
    TW_ASSERT_EQ_U64(stats(c).entries, N / 3);
    /* Downwards: the first lookups fall past the last remaining region. */
    for (int k = N - 1; k >= 0; k--) {
        struct tw_regcache_region *r = get(c, b + k * page + 7, 1, RW, TW_MEMKIND_HOST);
        TW_ASSERT_EQ_U64(tw__regcache_region_start(r), (uintptr_t)(b + k * page));
        tw__regcache_release(c, r);
    }
    struct tw_regcache_stats s = stats(c);
    TW_ASSERT_EQ_U64(s.misses, N + N - N / 3); /* the removed ones missed again */
    TW_ASSERT_EQ_U64(s.entries, N);
    untrack(b);
    finish(c);
}

static void byte_limit_evicts(void)
{
    struct tw_regcache *c = make((struct tw_regcache_config){.max_host_bytes = 4 * page});
    char *b = tracked(16);
    for (int i = 0; i < 4; i++)
        tw__regcache_release(c, get(c, b + 2 * i * page, page, RW, TW_MEMKIND_HOST));
    TW_ASSERT_EQ(stats(c).bytes, 4 * page);
    TW_ASSERT_EQ(stats(c).evictions, 0);
    /* Two more pages: the two oldest one-page regions go. */
    tw__regcache_release(c, get(c, b + 10 * page, 2 * page, RW, TW_MEMKIND_HOST));
    struct tw_regcache_stats s = stats(c);
    TW_ASSERT_EQ(s.evictions, 2);
    TW_ASSERT_EQ(s.bytes, 4 * page);
    TW_ASSERT_EQ(fr.live, 3);
    untrack(b);
    finish(c);
}

static void in_use_regions_exceed_limits_until_released(void)
{
    struct tw_regcache *c = make((struct tw_regcache_config){.max_entries = 1});
    char *b = tracked(8);
    struct tw_regcache_region *a = get(c, b, page, RW, TW_MEMKIND_HOST);
    struct tw_regcache_region *r2 = get(c, b + 2 * page, page, RW, TW_MEMKIND_HOST);
    struct fake_handle *ha = tw__regcache_region_handle(a);
    TW_ASSERT_EQ(fr.live, 2); /* over the limit, but both in use */
    TW_ASSERT_EQ(atomic_load(&ha->alive), 1);
    tw__regcache_release(c, r2);
    /* r2 idle and over the limit: evicted at once; a still in use. */
    TW_ASSERT_EQ(fr.live, 1);
    TW_ASSERT_EQ(atomic_load(&ha->alive), 1);
    tw__regcache_release(c, a);
    TW_ASSERT_EQ(fr.live, 1); /* a is now the one cached region */
    untrack(b);
    finish(c);
}

static void evict_and_retry_on_pressure(void)
{
    struct tw_regcache *c = make((struct tw_regcache_config){0});
    fr.capacity = 3; /* like a full BAR: -ENOSPC beyond 3 live */
    char *b = tracked(8);
    for (int i = 0; i < 3; i++)
        tw__regcache_release(c, get(c, b + i * page, page, RW, TW_MEMKIND_HOST));
    struct tw_regcache_region *r = get(c, b + 4 * page, page, RW, TW_MEMKIND_HOST);
    struct tw_regcache_stats s = stats(c);
    TW_ASSERT_EQ(s.retries, 1);
    TW_ASSERT_EQ(s.evictions, 1);
    TW_ASSERT_EQ_U64(fr.last_dereg_addr, (uintptr_t)b); /* the LRU one */
    /* Everything in use: nothing to evict, the error comes through. */
    struct tw_regcache_region *h1 = get(c, b + page, page, RW, TW_MEMKIND_HOST);
    struct tw_regcache_region *h2 = get(c, b + 2 * page, page, RW, TW_MEMKIND_HOST);
    struct tw_regcache_region *x = NULL;
    TW_ASSERT_ERR(
        tw__regcache_lookup(c, b + 6 * page, page, RW, TW_MEMKIND_HOST, &x, errbuf, sizeof(errbuf)),
        -ENOSPC);
    TW_ASSERT_STR_EQ(errbuf, "fake registrar refused: ENOSPC");
    s = stats(c);
    TW_ASSERT_EQ(s.reg_failures, 1);
    TW_ASSERT_EQ(s.entries, 3);
    tw__regcache_release(c, r);
    tw__regcache_release(c, h1);
    tw__regcache_release(c, h2);
    /* A hard failure (not pressure) is not retried. */
    fr.capacity = 0;
    fr.fail_next = 1;
    fr.fail_code = -EACCES;
    TW_ASSERT_ERR(
        tw__regcache_lookup(c, b + 6 * page, page, RW, TW_MEMKIND_HOST, &x, errbuf, sizeof(errbuf)),
        -EACCES);
    TW_ASSERT_EQ(stats(c).retries, 1);
    TW_ASSERT_EQ(stats(c).entries, 3);
    untrack(b);
    finish(c);
}

static void invalidation_defers_in_use(void)
{
    struct tw_regcache *c = make((struct tw_regcache_config){0});
    char *b = tracked(8);
    tw__regcache_release(c, get(c, b + 4 * page, page, RW, TW_MEMKIND_HOST));
    struct tw_regcache_region *a = get(c, b, 2 * page, RW, TW_MEMKIND_HOST);
    struct fake_handle *ha = tw__regcache_region_handle(a);
    tw__regcache_invalidate(c, (uintptr_t)b, 8 * page);
    /* The idle region went at once; the one in use is still registered. */
    TW_ASSERT_EQ(fr.live, 1);
    TW_ASSERT_EQ(atomic_load(&ha->alive), 1);
    TW_ASSERT_EQ(stats(c).invalidations, 2);
    /* But it is never found again. */
    struct tw_regcache_region *n = get(c, b, 2 * page, RW, TW_MEMKIND_HOST);
    TW_ASSERT(n != a);
    TW_ASSERT_EQ(fr.live, 2);
    tw__regcache_release(c, a);
    TW_ASSERT_EQ(fr.live, 1);
    tw__regcache_release(c, n);
    TW_ASSERT_EQ(fr.live, 1);
    /* Unregistering the buffer invalidates through the hostmem hook; a
     * later lookup is a one-shot registration. */
    untrack(b);
    TW_ASSERT_EQ(fr.live, 0);
    char *raw = malloc(page);
    struct tw_regcache_region *o = get(c, raw, 16, RW, TW_MEMKIND_HOST);
    TW_ASSERT_EQ(tw__regcache_region_cached(o), 0);
    tw__regcache_release(c, o);
    free(raw);
    finish(c);
}

static void access_rights_are_separate_keys(void)
{
    struct tw_regcache *c = make((struct tw_regcache_config){0});
    char *b = tracked(4);
    struct tw_regcache_region *rd = get(c, b, page, TW_ACCESS_REMOTE_READ, TW_MEMKIND_HOST);
    TW_ASSERT_EQ(fr.last_reg_access, TW_ACCESS_REMOTE_READ);
    struct tw_regcache_region *wr = get(c, b, page, TW_ACCESS_REMOTE_WRITE, TW_MEMKIND_HOST);
    TW_ASSERT_EQ(fr.last_reg_access, TW_ACCESS_REMOTE_WRITE);
    TW_ASSERT(rd != wr);
    TW_ASSERT_EQ(tw__regcache_region_access(rd), TW_ACCESS_REMOTE_READ);
    tw__regcache_release(c, rd);
    tw__regcache_release(c, wr);
    /* Read+write is its own key too: never served by a narrower region,
     * and a read-only lookup never gets the read+write one. */
    uint32_t both = TW_ACCESS_REMOTE_READ | TW_ACCESS_REMOTE_WRITE;
    tw__regcache_release(c, get(c, b, page, both, TW_MEMKIND_HOST));
    rd = get(c, b, page, TW_ACCESS_REMOTE_READ, TW_MEMKIND_HOST);
    TW_ASSERT_EQ(((struct fake_handle *)tw__regcache_region_handle(rd))->access,
                 TW_ACCESS_REMOTE_READ);
    tw__regcache_release(c, rd);
    TW_ASSERT_EQ(fr.regs, 3);
    TW_ASSERT_EQ(stats(c).hits, 1);
    struct tw_regcache_region *x = NULL;
    TW_ASSERT_ERR(tw__regcache_lookup(c, b, page, 0, TW_MEMKIND_HOST, &x, NULL, 0), TW_EINVAL);
    TW_ASSERT_ERR(tw__regcache_lookup(c, b, page, 0x10, TW_MEMKIND_HOST, &x, NULL, 0), TW_EINVAL);
    untrack(b);
    finish(c);
}

static void destroy_refuses_while_in_use(void)
{
    struct tw_regcache *c = make((struct tw_regcache_config){0});
    char *b = tracked(2);
    struct tw_regcache_region *r = get(c, b, 1, RW, TW_MEMKIND_HOST);
    TW_ASSERT_ERR(tw__regcache_destroy(c), TW_EBUSY);
    tw__regcache_release(c, r);
    untrack(b);
    finish(c);
}

/* ---- concurrency: in-progress sharing and invalidation during a
 * registration ---- */

struct lookup_job {
    struct tw_regcache *c;
    const void *p;
    size_t len;
    struct tw_regcache_region *r;
    int rc;
};

static void *lookup_thread(void *arg)
{
    struct lookup_job *j = arg;
    j->rc = tw__regcache_lookup(j->c, j->p, j->len, RW, TW_MEMKIND_HOST, &j->r, NULL, 0);
    return NULL;
}

static void wait_blocked(void)
{
    pthread_mutex_lock(&fr.lock);
    while (!fr.blocked)
        pthread_cond_wait(&fr.cond, &fr.lock);
    pthread_mutex_unlock(&fr.lock);
}

static void unblock(void)
{
    pthread_mutex_lock(&fr.lock);
    fr.block = 0;
    pthread_cond_broadcast(&fr.cond);
    pthread_mutex_unlock(&fr.lock);
}

static void wait_for_waiters(struct tw_regcache *c, uint64_t n)
{
    for (int i = 0; i < 5000 && stats(c).waits < n; i++)
        usleep(1000);
    TW_ASSERT(stats(c).waits >= n);
}

static void concurrent_lookups_register_once(void)
{
    struct tw_regcache *c = make((struct tw_regcache_config){0});
    char *b = tracked(4);
    fr.block = 1;
    enum { N = 6 };
    pthread_t t[N];
    struct lookup_job j[N];
    for (int i = 0; i < N; i++) {
        j[i] = (struct lookup_job){.c = c, .p = b + 64 * i, .len = 64};
        TW_ASSERT_EQ(pthread_create(&t[i], NULL, lookup_thread, &j[i]), 0);
        if (i == 0)
            wait_blocked(); /* the first owns the in-progress region */
    }
    wait_for_waiters(c, N - 1);
    unblock();
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        TW_ASSERT_OK(j[i].rc);
        TW_ASSERT(j[i].r == j[0].r);
    }
    TW_ASSERT_EQ(fr.regs, 1);
    struct tw_regcache_stats s = stats(c);
    TW_ASSERT_EQ(s.hits, N - 1);
    TW_ASSERT_EQ(s.misses, 1);
    for (int i = 0; i < N; i++)
        tw__regcache_release(c, j[i].r);
    untrack(b);
    finish(c);
}

static void invalidation_races_in_progress_lookup(void)
{
    struct tw_regcache *c = make((struct tw_regcache_config){0});
    char *b = tracked(4);
    fr.block = 1;
    struct lookup_job j1 = {.c = c, .p = b, .len = page};
    struct lookup_job j2 = {.c = c, .p = b, .len = page};
    pthread_t t1, t2;
    TW_ASSERT_EQ(pthread_create(&t1, NULL, lookup_thread, &j1), 0);
    wait_blocked();
    TW_ASSERT_EQ(pthread_create(&t2, NULL, lookup_thread, &j2), 0);
    wait_for_waiters(c, 1);
    /* The registrar is stuck inside reg for j1: invalidation must still
     * return (it never waits for registrations) ... */
    tw__regcache_invalidate(c, (uintptr_t)b, page);
    TW_ASSERT_EQ(stats(c).invalidations, 1);
    TW_ASSERT_EQ(fr.blocked, 1);
    unblock();
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    TW_ASSERT_OK(j1.rc);
    TW_ASSERT_OK(j2.rc);
    /* ... j1 still gets its registration (unlinked), j2 registered anew. */
    TW_ASSERT(j1.r != j2.r);
    TW_ASSERT_EQ(fr.regs, 2);
    TW_ASSERT_EQ(fr.live, 2);
    tw__regcache_release(c, j1.r);
    TW_ASSERT_EQ(fr.live, 1);
    tw__regcache_release(c, j2.r);
    TW_ASSERT_EQ(fr.live, 1);
    struct tw_regcache_region *r = get(c, b, page, RW, TW_MEMKIND_HOST);
    TW_ASSERT(r == j2.r);
    tw__regcache_release(c, r);
    untrack(b);
    finish(c);
}

int main(void)
{
    page = (size_t)sysconf(_SC_PAGESIZE);
    TW_RUN(untracked_host_is_one_shot);
    TW_RUN(covering_range_hits);
    TW_RUN(adjacent_ranges_stay_separate);
    TW_RUN(overlapping_ranges_merge);
    TW_RUN(gpu_rounds_to_64k_at_both_edges);
    TW_RUN(gpu_address_reuse_misses);
    TW_RUN(lru_order_and_count_limit);
    TW_RUN(lru_order_matches_model);
    TW_RUN(index_many_regions);
    TW_RUN(byte_limit_evicts);
    TW_RUN(in_use_regions_exceed_limits_until_released);
    TW_RUN(evict_and_retry_on_pressure);
    TW_RUN(invalidation_defers_in_use);
    TW_RUN(access_rights_are_separate_keys);
    TW_RUN(destroy_refuses_while_in_use);
    TW_RUN(concurrent_lookups_register_once);
    TW_RUN(invalidation_races_in_progress_lookup);
    TW_DONE();
}
