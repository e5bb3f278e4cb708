/*
 * Concurrent lookup / release / invalidate / unregister stress, bounded to
 * about two seconds, labelled `tsan` (make tsan runs it under
 * ThreadSanitizer). Checks on every release that the handle is still
 * registered (an in-use region must never be deregistered), and at the end
 * that the cache left no registration behind.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "mem/regcache.h"
#include "regcache/fake_registrar.h"
#include "tensorwire/mem.h"
#include "tw_test.h"

#define THREADS 4
#define SECONDS 2
#define PAGES 64
#define GPU_BASE ((uintptr_t)0x7e0000000000ull)

static struct fake_registrar fr;
static struct tw_regcache *cache;
static char *buf;
static size_t page;
static _Atomic int stop;
static _Atomic long ops, dead_in_use;
static _Atomic uint64_t gpu_generation = 1;

static void *worker(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u;
    struct tw_regcache_region *held[4] = {0};
    while (!atomic_load(&stop)) {
        unsigned x = (unsigned)rand_r(&seed);
        int slot = (int)(x % 4);
        if (held[slot]) {
            if (!fake_release_held(cache, &held[slot]))
                atomic_fetch_add(&dead_in_use, 1);
            continue;
        }
        switch ((x >> 4) % 16) {
        case 0: /* invalidate a few pages */
            tw__regcache_invalidate(cache, (uintptr_t)(buf + ((x >> 8) % PAGES) * page),
                                    ((x >> 16) % 4 + 1) * page);
            break;
        case 1: { /* the GPU buffer is freed and reallocated at its address */
            uint64_t id = atomic_fetch_add(&gpu_generation, 1) + 1;
            fake_cuda_set(0, GPU_BASE, 4 << 20, id, 0);
            break;
        }
        case 2:
        case 3: { /* GPU lookup */
            struct tw_regcache_region *r = NULL;
            size_t off = ((x >> 8) % 60) * 65536 + ((x >> 20) % 100);
            if (tw__regcache_lookup(cache, (void *)(GPU_BASE + off), 1000, TW_ACCESS_REMOTE_READ,
                                    TW_MEMKIND_CUDA, &r, NULL, 0) == 0)
                held[slot] = r;
            break;
        }
        default: { /* host lookup, random range and access */
            size_t p0 = (x >> 8) % (PAGES - 4);
            size_t len = ((x >> 14) % (3 * page)) + 1;
            uint32_t access = ((x >> 24) % 3) + 1;
            struct tw_regcache_region *r = NULL;
            int rc = tw__regcache_lookup(cache, buf + p0 * page + (x % 64), len, access,
                                         TW_MEMKIND_HOST, &r, NULL, 0);
            if (rc == 0)
                held[slot] = r;
            else if (rc != -ENOSPC)
                TW_FAIL("lookup: %s", tw_strerror_name(rc));
            break;
        }
        }
        atomic_fetch_add(&ops, 1);
    }
    for (int i = 0; i < 4; i++)
        if (held[i])
            tw__regcache_release(cache, held[i]);
    return NULL;
}

/* Declares and withdraws a second buffer, exercising the hostmem hook. */
static void *unregisterer(void *arg)
{
    char *b2 = buf + PAGES * page;
    while (!atomic_load(&stop)) {
        if (tw_mem_register(b2, 8 * page, 0) == 0) {
            struct tw_regcache_region *r = NULL;
            if (tw__regcache_lookup(cache, b2 + 10, page, TW_ACCESS_LOCAL_READ, TW_MEMKIND_HOST, &r,
                                    NULL, 0) == 0)
                tw__regcache_release(cache, r);
            TW_ASSERT_OK(tw_mem_unregister(b2));
        }
        usleep(100);
    }
    return NULL;
}

static void stress_lookup_release_invalidate(void)
{
    page = (size_t)sysconf(_SC_PAGESIZE);
    buf = aligned_alloc(page, (PAGES + 8) * page);
    TW_ASSERT(buf != NULL);
    TW_ASSERT_OK(tw_mem_register(buf, PAGES * page, 0));
    fake_init(&fr);
    fr.capacity = 20; /* forces evict-and-retry under load */
    fake_cuda_set(0, GPU_BASE, 4 << 20, 1, 0);
    struct tw_regcache_config cfg = {
        .max_entries = 24, .max_host_bytes = 16 * page, .max_gpu_bytes = 8 << 20};
    cfg.memkinds[TW_MEMKIND_CUDA] = fake_cuda_ops();
    TW_ASSERT_OK(tw__regcache_create(&cfg, &fake_registrar_ops, &fr, &cache));

    pthread_t u;
    TW_ASSERT_EQ(pthread_create(&u, NULL, unregisterer, NULL), 0);
    fake_run_workers(worker, THREADS, SECONDS, &stop);
    pthread_join(u, NULL);

    struct tw_regcache_stats s;
    tw__regcache_stats(cache, &s);
    fprintf(stderr,
            "ops=%ld hits=%llu misses=%llu waits=%llu evictions=%llu invalidations=%llu "
            "stale=%llu merges=%llu retries=%llu reg_failures=%llu entries=%llu live=%ld\n",
            atomic_load(&ops), (unsigned long long)s.hits, (unsigned long long)s.misses,
            (unsigned long long)s.waits, (unsigned long long)s.evictions,
            (unsigned long long)s.invalidations, (unsigned long long)s.stale,
            (unsigned long long)s.merges, (unsigned long long)s.retries,
            (unsigned long long)s.reg_failures, (unsigned long long)s.entries, fr.live);
    TW_ASSERT_EQ(atomic_load(&dead_in_use), 0);
    TW_ASSERT_EQ(s.in_use, 0);
    TW_ASSERT_EQ(s.entries, fr.live);
    TW_ASSERT(s.entries <= 24);
    TW_ASSERT(s.hits > 0 && s.evictions > 0 && s.invalidations > 0 && s.stale > 0);
    TW_ASSERT(s.retries > 0);
    TW_ASSERT_OK(tw__regcache_destroy(cache));
    TW_ASSERT_EQ(fr.live, 0);
    TW_ASSERT_EQ(fr.regs, fr.deregs);
    TW_ASSERT_OK(tw_mem_unregister(buf));
    free(buf);
    fprintf(stderr, "no leaked registrations (%ld registered, %ld deregistered)\n", fr.regs,
            fr.deregs);
}

int main(void)
{
    TW_RUN(stress_lookup_release_invalidate);
    TW_DONE();
}
