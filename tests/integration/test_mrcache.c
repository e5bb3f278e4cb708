/*
 * Registration cache in front of the data plane (src/fabric/mrcache.h) over
 * a real provider (TW_TEST_PROVIDER: "tcp" or "shm"): a threaded "server"
 * plane whose memory the unthreaded "client" plane pulls. Skips (77) when
 * the provider cannot be opened here.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fabric/fabric.h"
#include "fabric/fabric_int.h" /* remote_mrs: what keeps the mover polling */
#include "fabric/mrcache.h"
#include "mem/hostmem.h"
#include "tensorwire/mem.h"
#include "tw_fabric_pair.h"
#include "tw_test.h"

#ifndef TW_TEST_PROVIDER
#define TW_TEST_PROVIDER "tcp"
#endif

#define BIG ((size_t)64 << 20)

static struct tw_fabric *srv, *cli;
static struct tw_fabric_peer *srv_peer, *cli_peer;
static struct tw_fabric_mrcache *smc, *cmc;
static char err[512];

static void connect_planes(void)
{
    tw_test_connect_planes(cli, srv, &cli_peer, &srv_peer);
}

static uint64_t deadline_in_ms(unsigned ms)
{
    return tw__now_ns() + (uint64_t)ms * 1000000ull;
}

static struct tw_fabric_mrc *acquire(struct tw_fabric_mrcache *mc, struct tw_fabric_peer *peer,
                                     const void *p, size_t n, unsigned access)
{
    struct tw_fabric_mrc *h = NULL;
    int ret = tw__fabric_mrcache_acquire_peer(mc, peer, p, n, access, TW_MEMKIND_HOST, &h, err,
                                              sizeof(err));
    if (ret)
        TW_FAIL("acquire(%zu bytes, 0x%x): %s: %s", n, access, tw_strerror_name(ret), err);
    return h;
}

/* The client pulls [remote key] into its handle `l` at `loff`. */
static int pull(struct tw_fabric_mrc *l, uint64_t loff, struct tw_fabric_rkey key, uint64_t n,
                unsigned ms, struct tw_fabric_completion *c)
{
    struct tw_fabric_xfer_desc d = {.op = TW_FABRIC_PULL,
                                    .peer = cli_peer,
                                    .local = tw__fabric_mrc_mr(l),
                                    .local_offset = tw__fabric_mrc_offset(l) + loff,
                                    .remote = key,
                                    .length = n,
                                    .deadline_ns = deadline_in_ms(ms)};
    return tw__fabric_xfer_run(cli, &d, c);
}

static unsigned mrs_open(struct tw_fabric *f)
{
    struct tw_fabric_stats st;
    tw__fabric_stats(f, &st);
    return st.mrs_open;
}

static unsigned remote_mrs(struct tw_fabric *f)
{
    pthread_mutex_lock(&f->lock);
    unsigned n = f->remote_mrs;
    pthread_mutex_unlock(&f->lock);
    return n;
}

static struct tw_regcache_stats rail_stats(struct tw_fabric_mrcache *mc)
{
    struct tw_fabric_mrcache_stats st;
    tw__fabric_mrcache_stats(mc, &st);
    TW_ASSERT(st.nrails <= 1); /* one rail: its cache exists once used */
    return st.total;
}

/* Repeated pulls of one 64 MiB library buffer: the server registers it
 * once (REMOTE_READ, cached), every later acquire hits and hands the
 * client the same key, and the bytes arrive each time. */
static void remote_read_reused(void)
{
    uint8_t *src = NULL, *dst = NULL;
    TW_ASSERT_OK(tw__hostmem_alloc(BIG, (void **)&src));
    TW_ASSERT_OK(tw__hostmem_alloc(BIG, (void **)&dst));
    struct tw_regcache_stats s0 = rail_stats(smc), c0 = rail_stats(cmc);
    uint64_t first_key = 0;
    for (unsigned i = 0; i < 5; i++) {
        tw_test_fill(src, 4096, i); /* new content each round, same memory */
        src[BIG - 1] = (uint8_t)(i + 1);
        struct tw_fabric_mrc *r = acquire(smc, srv_peer, src, BIG, TW_FABRIC_REMOTE_READ);
        struct tw_fabric_mrc *l = acquire(cmc, cli_peer, dst, BIG, TW_FABRIC_LOCAL_READ);
        TW_ASSERT_EQ(tw__fabric_mrc_cached(r), 1);
        TW_ASSERT_EQ(remote_mrs(srv), 1); /* exposed: the mover serves reads */
        struct tw_fabric_rkey k = tw__fabric_mrc_rkey(r);
        TW_ASSERT_EQ_U64(k.length, BIG);
        if (i == 0)
            first_key = k.key;
        TW_ASSERT_EQ_U64(k.key, first_key);
        struct tw_fabric_completion c;
        int ret = pull(l, 0, k, BIG, 20000, &c);
        if (ret)
            TW_FAIL("pull %u: %s: %s", i, tw_strerror_name(ret), c.msg);
        TW_ASSERT_MEM_EQ(dst, src, 4096);
        TW_ASSERT_EQ(dst[BIG - 1], i + 1);
        tw__fabric_mrcache_release(cmc, l);
        tw__fabric_mrcache_release(smc, r);
    }
    TW_ASSERT_MEM_EQ(dst, src, BIG);
    /* Cached but idle: it no longer keeps the server's mover polling. */
    TW_ASSERT_EQ(remote_mrs(srv), 0);
    struct tw_regcache_stats s1 = rail_stats(smc), c1 = rail_stats(cmc);
    fprintf(stderr, "  server: %llu registration(s), %llu hits; client: %llu, %llu\n",
            (unsigned long long)(s1.registrations - s0.registrations),
            (unsigned long long)(s1.hits - s0.hits),
            (unsigned long long)(c1.registrations - c0.registrations),
            (unsigned long long)(c1.hits - c0.hits));
    TW_ASSERT_EQ_U64(s1.registrations - s0.registrations, 1);
    TW_ASSERT_EQ_U64(s1.misses - s0.misses, 1);
    TW_ASSERT_EQ_U64(s1.hits - s0.hits, 4);
    TW_ASSERT_EQ_U64(c1.registrations - c0.registrations, 1);
    TW_ASSERT_EQ_U64(c1.hits - c0.hits, 4);
    TW_ASSERT_EQ_U64(s1.in_use, 0);
    /* A sub-range hits the same registration; its key addresses the
     * sub-range (remote_addr and length), so a pull of it lands right. */
    struct tw_fabric_mrc *r = acquire(smc, srv_peer, src + 8192 + 5, 1000, TW_FABRIC_REMOTE_READ);
    struct tw_fabric_mrc *l = acquire(cmc, cli_peer, dst + 3, 1000, TW_FABRIC_LOCAL_READ);
    TW_ASSERT_EQ_U64(tw__fabric_mrc_rkey(r).key, first_key);
    TW_ASSERT_EQ_U64(tw__fabric_mrc_rkey(r).length, 1000);
    tw_test_fill(src + 8192 + 5, 1000, 77);
    struct tw_fabric_completion c;
    TW_ASSERT_OK(pull(l, 0, tw__fabric_mrc_rkey(r), 1000, 10000, &c));
    TW_ASSERT_MEM_EQ(dst + 3, src + 8192 + 5, 1000);
    tw__fabric_mrcache_release(cmc, l);
    tw__fabric_mrcache_release(smc, r);
    TW_ASSERT_EQ_U64(rail_stats(smc).registrations - s0.registrations, 1);
    /* Freeing library memory invalidates its registrations in every cache. */
    unsigned before = mrs_open(srv);
    tw__hostmem_free(src);
    TW_ASSERT_EQ(mrs_open(srv), before - 1);
    TW_ASSERT_EQ_U64(rail_stats(smc).entries, s0.entries);
    tw__hostmem_free(dst);
}

/* REMOTE_WRITE is never kept: each acquire registers, each release closes
 * the registration (fabric's open MR count goes back). */
static void remote_write_never_cached(void)
{
    uint8_t *buf = NULL, *src = NULL;
    TW_ASSERT_OK(tw__hostmem_alloc(1 << 20, (void **)&buf));
    TW_ASSERT_OK(tw__hostmem_alloc(4096, (void **)&src));
    struct tw_fabric_mrcache_stats a, b;
    tw__fabric_mrcache_stats(smc, &a);
    unsigned before = mrs_open(srv);
    for (int i = 0; i < 3; i++) {
        struct tw_fabric_mrc *w =
            acquire(smc, srv_peer, buf, 1 << 20, TW_FABRIC_REMOTE_WRITE | TW_FABRIC_REMOTE_READ);
        TW_ASSERT_EQ(tw__fabric_mrc_cached(w), 0);
        TW_ASSERT_EQ(mrs_open(srv), before + 1);
        /* The client's push through the key lands while it is held. */
        tw_test_fill(src, 4096, 20 + (unsigned)i);
        struct tw_fabric_mrc *l = acquire(cmc, cli_peer, src, 4096, TW_FABRIC_LOCAL_WRITE);
        struct tw_fabric_xfer_desc d = {.op = TW_FABRIC_PUSH,
                                        .peer = cli_peer,
                                        .local = tw__fabric_mrc_mr(l),
                                        .local_offset = tw__fabric_mrc_offset(l),
                                        .remote = tw__fabric_mrc_rkey(w),
                                        .length = 4096,
                                        .deadline_ns = deadline_in_ms(10000)};
        struct tw_fabric_completion c;
        int ret = tw__fabric_xfer_run(cli, &d, &c);
        if (ret)
            TW_FAIL("push: %s: %s", tw_strerror_name(ret), c.msg);
        TW_ASSERT_MEM_EQ(buf, src, 4096);
        tw__fabric_mrcache_release(cmc, l);
        tw__fabric_mrcache_release(smc, w);
        TW_ASSERT_EQ(mrs_open(srv), before);
    }
    tw__fabric_mrcache_stats(smc, &b);
    TW_ASSERT_EQ_U64(b.direct - a.direct, 3);
    TW_ASSERT_EQ_U64(b.total.registrations, a.total.registrations);
    TW_ASSERT_EQ_U64(b.total.entries, a.total.entries);
    tw__hostmem_free(buf);
    tw__hostmem_free(src);
}

/* TW_FABRIC_ONCE: library memory (which the cache would keep) is
 * registered directly, readable through its key while held, and the
 * release revokes it; the cache sees none of it. ONCE alone grants
 * nothing and is refused. */
static void once_never_cached(void)
{
    size_t n = 256 * 1024;
    uint8_t *src = NULL, *dst = NULL;
    TW_ASSERT_OK(tw__hostmem_alloc(n, (void **)&src));
    TW_ASSERT_OK(tw__hostmem_alloc(n, (void **)&dst));
    struct tw_fabric_mrcache_stats a, b;
    tw__fabric_mrcache_stats(smc, &a);
    unsigned before = mrs_open(srv);
    for (unsigned i = 0; i < 3; i++) {
        tw_test_fill(src, n, 40 + i);
        struct tw_fabric_mrc *r =
            acquire(smc, srv_peer, src, n, TW_FABRIC_REMOTE_READ | TW_FABRIC_ONCE);
        TW_ASSERT_EQ(tw__fabric_mrc_cached(r), 0);
        TW_ASSERT_EQ(mrs_open(srv), before + 1);
        TW_ASSERT_EQ(remote_mrs(srv), 1); /* the mover serves reads while it lives */
        struct tw_fabric_mrc *l = acquire(cmc, cli_peer, dst, n, TW_FABRIC_LOCAL_READ);
        struct tw_fabric_completion c;
        TW_ASSERT_OK(pull(l, 0, tw__fabric_mrc_rkey(r), n, 10000, &c));
        TW_ASSERT_MEM_EQ(dst, src, n);
        tw__fabric_mrcache_release(cmc, l);
        tw__fabric_mrcache_release(smc, r);
        TW_ASSERT_EQ(mrs_open(srv), before);
        TW_ASSERT_EQ(remote_mrs(srv), 0);
    }
    tw__fabric_mrcache_stats(smc, &b);
    TW_ASSERT_EQ_U64(b.direct - a.direct, 3);
    TW_ASSERT_EQ_U64(b.total.registrations, a.total.registrations);
    TW_ASSERT_EQ_U64(b.total.entries, a.total.entries);
    struct tw_fabric_mrc *h = NULL;
    TW_ASSERT_EQ(tw__fabric_mrcache_acquire_peer(smc, srv_peer, src, n, TW_FABRIC_ONCE,
                                                 TW_MEMKIND_HOST, &h, err, sizeof(err)),
                 TW_EINVAL);
    tw__hostmem_free(src);
    tw__hostmem_free(dst);
}

/* Host memory whose lifetime tensorwire does not know (malloc) gets a
 * registration per use, dropped on release. */
static void untracked_per_use(void)
{
    size_t n = 1 << 20;
    uint8_t *buf = malloc(n), *dst = NULL;
    TW_ASSERT(buf);
    TW_ASSERT_OK(tw__hostmem_alloc(n, (void **)&dst));
    tw_test_fill(buf, n, 3);
    struct tw_regcache_stats a = rail_stats(smc);
    unsigned before = mrs_open(srv);
    for (int i = 0; i < 3; i++) {
        struct tw_fabric_mrc *r = acquire(smc, srv_peer, buf, n, TW_FABRIC_REMOTE_READ);
        TW_ASSERT_EQ(tw__fabric_mrc_cached(r), 0);
        struct tw_fabric_mrc *l = acquire(cmc, cli_peer, dst, n, TW_FABRIC_LOCAL_READ);
        struct tw_fabric_completion c;
        TW_ASSERT_OK(pull(l, 0, tw__fabric_mrc_rkey(r), n, 10000, &c));
        TW_ASSERT_MEM_EQ(dst, buf, n);
        memset(dst, 0, n);
        tw__fabric_mrcache_release(cmc, l);
        tw__fabric_mrcache_release(smc, r);
        TW_ASSERT_EQ(mrs_open(srv), before);
    }
    struct tw_regcache_stats b = rail_stats(smc);
    TW_ASSERT_EQ_U64(b.registrations - a.registrations, 3);
    TW_ASSERT_EQ_U64(b.uncached - a.uncached, 3);
    TW_ASSERT_EQ_U64(b.hits, a.hits);
    TW_ASSERT_EQ_U64(b.entries, a.entries);
    free(buf);
    tw__hostmem_free(dst);
}

/* Memory the application declared with tw_mem_register is cached like
 * library memory; tw_mem_unregister revokes its keys. */
static void declared_memory(void)
{
    size_t n = 256 * 1024;
    uint8_t *buf = aligned_alloc(4096, n);
    TW_ASSERT(buf);
    TW_ASSERT_OK(tw_mem_register(buf, n, 0));
    struct tw_regcache_stats a = rail_stats(smc);
    unsigned before = mrs_open(srv);
    for (int i = 0; i < 3; i++) {
        struct tw_fabric_mrc *r = acquire(smc, srv_peer, buf + 100, n - 200, TW_FABRIC_REMOTE_READ);
        TW_ASSERT_EQ(tw__fabric_mrc_cached(r), 1);
        tw__fabric_mrcache_release(smc, r);
    }
    struct tw_regcache_stats b = rail_stats(smc);
    TW_ASSERT_EQ_U64(b.registrations - a.registrations, 1);
    TW_ASSERT_EQ_U64(b.hits - a.hits, 2);
    TW_ASSERT_EQ(mrs_open(srv), before + 1);
    TW_ASSERT_OK(tw_mem_unregister(buf));
    TW_ASSERT_EQ(mrs_open(srv), before);
    free(buf);
}

static atomic_int idle_calls;
static void on_idle(void *arg)
{
    (void)arg;
    atomic_fetch_add(&idle_calls, 1); /* the buffer is freed by the test thread */
}

/* release_busy: with nothing in flight the buffer comes back at once; with
 * another handle on the region, when that one is released; and (tcp) after
 * a stalled peer let an abandoned pull drain. The region is invalidated:
 * the next acquire registers anew. */
static void release_busy(void)
{
    size_t n = 8u << 20;
    uint8_t *src = NULL, *dst = NULL;
    TW_ASSERT_OK(tw__hostmem_alloc(n, (void **)&src));
    TW_ASSERT_OK(tw__hostmem_alloc(n, (void **)&dst));
    atomic_store(&idle_calls, 0);
    struct tw_fabric_mrc *a = acquire(cmc, cli_peer, dst, n, TW_FABRIC_LOCAL_READ);
    struct tw_fabric_mrc *b = acquire(cmc, cli_peer, dst, n, TW_FABRIC_LOCAL_READ);
    tw__fabric_mrcache_release_busy(cmc, a, on_idle, NULL);
    TW_ASSERT_EQ(atomic_load(&idle_calls), 0); /* b still holds the region */
    tw__fabric_mrcache_release(cmc, b);
    TW_ASSERT_EQ(atomic_load(&idle_calls), 1);
    struct tw_regcache_stats s0 = rail_stats(cmc);
    a = acquire(cmc, cli_peer, dst, n, TW_FABRIC_LOCAL_READ);
    TW_ASSERT_EQ_U64(rail_stats(cmc).misses - s0.misses, 1); /* invalidated */
    tw__fabric_mrcache_release_busy(cmc, a, on_idle, NULL);
    TW_ASSERT_EQ(atomic_load(&idle_calls), 2);

    if (strncmp(tw__fabric_peer_provider(cli_peer), "tcp", 3) != 0)
        goto out_free; /* shm never answers the abandoned reads: the buffer stays */
    struct tw_fabric_mrc *r = acquire(smc, srv_peer, src, n, TW_FABRIC_REMOTE_READ);
    struct tw_fabric_mrc *l = acquire(cmc, cli_peer, dst, n, TW_FABRIC_LOCAL_READ);
    tw__fabric_pause(srv, 1);
    struct tw_fabric_completion c;
    TW_ASSERT_ERR(pull(l, 0, tw__fabric_mrc_rkey(r), n, 200, &c), TW_ETIMEDOUT);
    fprintf(stderr, "  stalled: buffer_busy %d: %s\n", c.buffer_busy, c.msg);
    tw__fabric_mrcache_release_busy(cmc, l, on_idle, NULL);
    if (c.buffer_busy)
        TW_ASSERT_EQ(atomic_load(&idle_calls), 2); /* the provider still holds reads */
    tw__fabric_pause(srv, 0);
    uint64_t until = deadline_in_ms(5000);
    while (atomic_load(&idle_calls) < 3 && tw__now_ns() < until)
        tw__fabric_progress(cli);
    TW_ASSERT_EQ(atomic_load(&idle_calls), 3);
    tw__fabric_mrcache_release(smc, r);
out_free:
    tw__hostmem_free(dst);
    tw__hostmem_free(src);
}

/* Threads acquire, release and invalidate the same buffers concurrently
 * (run under ThreadSanitizer with the tsan label): every acquire returns a
 * registration covering the range, and nothing stays referenced. */
struct worker {
    uint8_t *buf;
    unsigned seed;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    uint32_t x = w->seed;
    for (int i = 0; i < 300; i++) {
        x = x * 1664525u + 1013904223u;
        size_t off = (x >> 8) % (1u << 20), n = 1 + (x >> 4) % 65536;
        unsigned acc = (x & 1) ? TW_FABRIC_REMOTE_READ : TW_FABRIC_LOCAL_READ;
        if ((x & 30) == 0) {
            tw__fabric_mrcache_invalidate(smc, w->buf + off, n);
            continue;
        }
        struct tw_fabric_mrc *h = NULL;
        char e[256];
        int ret = tw__fabric_mrcache_acquire_peer(smc, srv_peer, w->buf + off, n, acc,
                                                  TW_MEMKIND_HOST, &h, e, sizeof(e));
        if (ret)
            TW_FAIL("acquire: %s: %s", tw_strerror_name(ret), e);
        struct tw_fabric_rkey k = tw__fabric_mrc_rkey(h);
        if (k.length != n)
            TW_FAIL("key length %llu != %zu", (unsigned long long)k.length, n);
        /* The handle's range lies inside its registration, and its key
         * addresses it there. */
        struct tw_fabric_rkey whole = tw__fabric_mr_rkey(tw__fabric_mrc_mr(h));
        uint64_t o = tw__fabric_mrc_offset(h);
        if (o + n > whole.length || whole.remote_addr + o != k.remote_addr)
            TW_FAIL("offset %llu + %zu outside the %llu-byte registration", (unsigned long long)o,
                    n, (unsigned long long)whole.length);
        tw__fabric_mrcache_release(smc, h);
    }
    return NULL;
}

static void threads(void)
{
    uint8_t *buf = NULL;
    TW_ASSERT_OK(tw__hostmem_alloc((2u << 20), (void **)&buf));
    pthread_t t[4];
    struct worker w[4];
    for (unsigned i = 0; i < 4; i++) {
        w[i] = (struct worker){.buf = buf, .seed = i + 1};
        TW_ASSERT_EQ(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
    }
    struct tw_fabric_mrcache_stats st;
    for (int i = 0; i < 50; i++)
        tw__fabric_mrcache_stats(smc, &st);
    for (unsigned i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    tw__fabric_mrcache_stats(smc, &st);
    fprintf(stderr, "  %llu hits, %llu misses, %llu invalidations\n",
            (unsigned long long)st.total.hits, (unsigned long long)st.total.misses,
            (unsigned long long)st.total.invalidations);
    TW_ASSERT_EQ_U64(st.total.in_use, 0);
    tw__hostmem_free(buf);
}

/* Invalidation of memory a handle still holds: the key keeps working until
 * the release, and after it the peer's read with the old key fails (see
 * docs/testing.md "Fabric": tcp drops the connection, an error completion;
 * shm ignores it, the deadline). No bytes move. Last: on tcp the peer's
 * connection is dropped. */
static void old_key_after_invalidate(void)
{
    size_t n = 64 * 1024;
    /* dst is static: on shm the unanswered read stays with the provider
     * for the life of the plane. */
    static uint8_t dst[64 * 1024];
    uint8_t *src = NULL;
    TW_ASSERT_OK(tw__hostmem_alloc(n, (void **)&src));
    tw_test_fill(src, n, 9);
    int is_tcp = strncmp(tw__fabric_peer_provider(cli_peer), "tcp", 3) == 0;
    struct tw_fabric_mrc *r = acquire(smc, srv_peer, src, n, TW_FABRIC_REMOTE_READ);
    struct tw_fabric_mrc *l = acquire(cmc, cli_peer, dst, n, TW_FABRIC_LOCAL_READ);
    TW_ASSERT_EQ(tw__fabric_mrc_cached(r), 1);
    struct tw_fabric_rkey k = tw__fabric_mrc_rkey(r);
    unsigned before = mrs_open(srv);
    tw__fabric_mrcache_invalidate(smc, src, n);
    TW_ASSERT_EQ(mrs_open(srv), before); /* held: still registered */
    struct tw_fabric_completion c;
    TW_ASSERT_OK(pull(l, 0, k, n, 10000, &c));
    TW_ASSERT_MEM_EQ(dst, src, n);
    tw__fabric_mrcache_release(smc, r);
    TW_ASSERT_EQ(mrs_open(srv), before - 1); /* revoked */
    memset(dst, 0xee, n);
    int ret = pull(l, 0, k, n, 500, &c);
    fprintf(stderr, "  read with the invalidated key: %s: %s\n", tw_strerror_name(ret), c.msg);
    TW_ASSERT(ret != 0);
    TW_ASSERT_EQ_U64(c.bytes, 0);
    if (is_tcp)
        TW_ASSERT(ret != TW_ETIMEDOUT);
    else
        TW_ASSERT_ERR(ret, TW_ETIMEDOUT);
    TW_ASSERT_EQ(dst[0], 0xee);
    TW_ASSERT_EQ(dst[n - 1], 0xee);
    /* A new acquire registers again with a new key. */
    r = acquire(smc, srv_peer, src, n, TW_FABRIC_REMOTE_READ);
    TW_ASSERT(tw__fabric_mrc_rkey(r).key != k.key || !is_tcp);
    tw__fabric_mrcache_release(smc, r);
    tw__fabric_mrcache_release(cmc, l);
    tw__hostmem_free(src);
}

static void api_errors(void)
{
    struct tw_fabric_mrc *h = NULL;
    uint8_t b[16] = {0};
    TW_ASSERT_ERR(tw__fabric_mrcache_acquire(smc, 7, b, 16, TW_FABRIC_REMOTE_READ, TW_MEMKIND_HOST,
                                             &h, err, sizeof(err)),
                  TW_EINVAL);
    TW_ASSERT(strstr(err, "rail") != NULL);
    TW_ASSERT_ERR(
        tw__fabric_mrcache_acquire(smc, 0, b, 16, 0, TW_MEMKIND_HOST, &h, err, sizeof(err)),
        TW_EINVAL);
    TW_ASSERT_ERR(
        tw__fabric_mrcache_acquire(smc, 0, b, 16, 0x10, TW_MEMKIND_HOST, &h, err, sizeof(err)),
        TW_EINVAL);
    TW_ASSERT(h == NULL);
    /* 0 bytes: a key-0 registration, no libfabric call. */
    TW_ASSERT_OK(tw__fabric_mrcache_acquire(smc, 0, b, 0, TW_FABRIC_REMOTE_READ, TW_MEMKIND_HOST,
                                            &h, err, sizeof(err)));
    TW_ASSERT_EQ_U64(tw__fabric_mrc_rkey(h).length, 0);
    tw__fabric_mrcache_release(smc, h);
    /* destroy refuses while a cached handle is out, and leaves it intact. */
    uint8_t *p = NULL;
    TW_ASSERT_OK(tw__hostmem_alloc(4096, (void **)&p));
    h = acquire(smc, srv_peer, p, 4096, TW_FABRIC_REMOTE_READ);
    TW_ASSERT_ERR(tw__fabric_mrcache_destroy(smc), TW_EBUSY);
    TW_ASSERT_EQ_U64(tw__fabric_mrc_rkey(h).length, 4096);
    tw__fabric_mrcache_release(smc, h);
    tw__hostmem_free(p);
}

static atomic_int kept_idle_calls;
static void kept_on_idle(void *arg)
{
    atomic_fetch_add(&kept_idle_calls, 1);
    free(arg);
}

/* A plane closed while its provider still holds reads that a stalled peer
 * never answered: the buffer is not handed back (on_idle never runs), and
 * what the fabric layer keeps for it (the registration, the cache's
 * registrar handle and release_busy handle, and the buffer they name) is
 * listed on the process-wide kept list (fabric.h, "Kept for the life of
 * the process"), so LeakSanitizer sees it reachable: `make asan` runs this
 * without suppressions. Own planes: closing a client plane while another
 * plane of this process polls its shm endpoint is unsafe (test_fabric_rma). */
static void kept_at_close(void)
{
    srv = tw_test_open_plane(1, 0);
    cli = tw_test_open_plane(0, 0);
    connect_planes();
    TW_ASSERT_OK(tw__fabric_mrcache_create(srv, NULL, &smc));
    TW_ASSERT_OK(tw__fabric_mrcache_create(cli, NULL, &cmc));
    size_t n = 8u << 20;
    uint8_t *src = calloc(1, n), *dst = malloc(n); /* untracked: one-shot registration */
    TW_ASSERT(src && dst);
    struct tw_fabric_mrc *r = acquire(smc, srv_peer, src, n, TW_FABRIC_REMOTE_READ);
    struct tw_fabric_mrc *l = acquire(cmc, cli_peer, dst, n, TW_FABRIC_LOCAL_READ);
    struct tw_fabric_completion c;
    /* One pull first: the connection is up (tcp) and the peer known (shm). */
    tw_test_fill(src, n, 5);
    int ret = pull(l, 0, tw__fabric_mrc_rkey(r), n, 20000, &c);
    if (ret)
        TW_FAIL("first pull: %s: %s", tw_strerror_name(ret), c.msg);
    TW_ASSERT_MEM_EQ(dst, src, n);
    tw__fabric_pause(srv, 1); /* nobody answers the reads now */
    TW_ASSERT_ERR(pull(l, 0, tw__fabric_mrc_rkey(r), n, 200, &c), TW_ETIMEDOUT);
    fprintf(stderr, "  stalled: buffer_busy %d: %s\n", c.buffer_busy, c.msg);
    TW_ASSERT_EQ(c.buffer_busy, 1);
    atomic_store(&kept_idle_calls, 0);
    tw__fabric_mrcache_release_busy(cmc, l, kept_on_idle, dst);
    TW_ASSERT_EQ(atomic_load(&kept_idle_calls), 0);
    TW_ASSERT_OK(tw__fabric_mrcache_destroy(cmc));
    struct tw_fabric_kept k0, k1;
    tw__fabric_kept(&k0);
    tw__fabric_peer_remove(cli_peer);
    tw__fabric_close(cli);
    tw__fabric_kept(&k1);
    fprintf(stderr, "  kept after close: %u planes, %u registrations, %llu bytes\n", k1.planes,
            k1.mrs, (unsigned long long)k1.bytes);
    TW_ASSERT_EQ(atomic_load(&kept_idle_calls), 0); /* dst never handed back */
    TW_ASSERT_EQ(k1.mrs - k0.mrs, 1);
    TW_ASSERT(k1.bytes - k0.bytes >= n);
    if (strncmp(TW_TEST_PROVIDER, "tcp", 3) == 0)
        TW_ASSERT_EQ(k1.planes - k0.planes, 1); /* the rail holding the reads is kept */
    tw__fabric_mrcache_release(smc, r);
    TW_ASSERT_OK(tw__fabric_mrcache_destroy(smc));
    tw__fabric_peer_remove(srv_peer);
    tw__fabric_close(srv);
    free(src);
    /* dst: the shm peer could still write it; it stays, reachable. */
}

int main(void)
{
    srv = tw_test_open_plane(1, 0);
    cli = tw_test_open_plane(0, 0);
    connect_planes();
    TW_ASSERT_OK(tw__fabric_mrcache_create(srv, NULL, &smc));
    TW_ASSERT_OK(tw__fabric_mrcache_create(cli, NULL, &cmc));
    TW_RUN(api_errors);
    TW_RUN(remote_read_reused);
    TW_RUN(remote_write_never_cached);
    TW_RUN(once_never_cached);
    TW_RUN(untracked_per_use);
    TW_RUN(declared_memory);
    TW_RUN(release_busy);
    TW_RUN(threads);
    TW_RUN(old_key_after_invalidate);
    TW_ASSERT_OK(tw__fabric_mrcache_destroy(cmc));
    TW_ASSERT_OK(tw__fabric_mrcache_destroy(smc));
    tw__fabric_peer_remove(cli_peer);
    tw__fabric_peer_remove(srv_peer);
    tw__fabric_pause(srv, 1);
    tw__fabric_close(cli);
    tw__fabric_close(srv);
    TW_RUN(kept_at_close);
    TW_DONE();
}
