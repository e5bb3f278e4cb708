/*
 * Staging pipeline without a GPU: chunk arithmetic, both directions through
 * the fake memory kind (tests/mem/fake_memkind.h: copies run late, like
 * DMA, so reading or reusing a slot too early shows as wrong bytes), the
 * running CRC32C, pool sharing, and injected failures at every chunk with
 * the check that no pinned slot, stream or event leaks.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../mem/fake_memkind.h"
#include "mem/hostmem.h"
#include "mem/regcache.h"
#include "mem/staging.h"
#include "proto/proto.h"
#include "tw_test.h"
#include "tw_test_gpu.h"

#define CHUNK ((size_t)8192)

static void test_chunk_math(void)
{
    uint64_t off;
    size_t len;
    TW_ASSERT_EQ_U64(tw__staging_nchunks(0, CHUNK), 0);
    TW_ASSERT_EQ_U64(tw__staging_nchunks(1, CHUNK), 1);
    TW_ASSERT_EQ_U64(tw__staging_nchunks(CHUNK - 1, CHUNK), 1);
    TW_ASSERT_EQ_U64(tw__staging_nchunks(CHUNK, CHUNK), 1);
    TW_ASSERT_EQ_U64(tw__staging_nchunks(CHUNK + 1, CHUNK), 2);
    TW_ASSERT_EQ_U64(tw__staging_nchunks(3 * CHUNK + 7, CHUNK), 4);
    TW_ASSERT_EQ_U64(tw__staging_nchunks(UINT64_MAX, 4096), UINT64_MAX / 4096 + 1);
    TW_ASSERT_EQ_U64(tw__staging_nchunks(100, 0), 0);

    TW_ASSERT_ERR(tw__staging_chunk_span(0, CHUNK, 0, &off, &len), TW_EINVAL);
    TW_ASSERT_OK(tw__staging_chunk_span(1, CHUNK, 0, &off, &len));
    TW_ASSERT_EQ_U64(off, 0);
    TW_ASSERT_EQ_U64(len, 1);
    TW_ASSERT_ERR(tw__staging_chunk_span(1, CHUNK, 1, &off, &len), TW_EINVAL);
    TW_ASSERT_OK(tw__staging_chunk_span(CHUNK - 1, CHUNK, 0, &off, &len));
    TW_ASSERT_EQ_U64(len, CHUNK - 1);
    TW_ASSERT_OK(tw__staging_chunk_span(CHUNK, CHUNK, 0, &off, &len));
    TW_ASSERT_EQ_U64(len, CHUNK);
    TW_ASSERT_ERR(tw__staging_chunk_span(CHUNK, CHUNK, 1, &off, &len), TW_EINVAL);
    TW_ASSERT_OK(tw__staging_chunk_span(CHUNK + 1, CHUNK, 1, &off, &len));
    TW_ASSERT_EQ_U64(off, CHUNK);
    TW_ASSERT_EQ_U64(len, 1);
    TW_ASSERT_OK(tw__staging_chunk_span(3 * CHUNK + 7, CHUNK, 3, &off, &len));
    TW_ASSERT_EQ_U64(off, 3 * CHUNK);
    TW_ASSERT_EQ_U64(len, 7);
    TW_ASSERT_OK(tw__staging_chunk_span(3 * CHUNK + 7, CHUNK, 2, &off, &len));
    TW_ASSERT_EQ_U64(len, CHUNK);
    /* The last chunk of the largest transfer: no overflow. */
    TW_ASSERT_OK(tw__staging_chunk_span(UINT64_MAX, 4096, UINT64_MAX / 4096, &off, &len));
    TW_ASSERT_EQ_U64(off, UINT64_MAX / 4096 * 4096);
    TW_ASSERT_EQ_U64(len, UINT64_MAX % 4096);
    TW_ASSERT_ERR(tw__staging_chunk_span(100, 0, 0, &off, &len), TW_EINVAL);
    /* Every byte covered once, in order. */
    const uint64_t sizes[] = {1, CHUNK - 1, CHUNK, CHUNK + 1, 5 * CHUNK + 4093};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        uint64_t next = 0, n = tw__staging_nchunks(sizes[i], CHUNK);
        for (uint64_t k = 0; k < n; k++) {
            TW_ASSERT_OK(tw__staging_chunk_span(sizes[i], CHUNK, k, &off, &len));
            TW_ASSERT_EQ_U64(off, next);
            TW_ASSERT(len > 0 && len <= CHUNK);
            next += len;
        }
        TW_ASSERT_EQ_U64(next, sizes[i]);
    }
}

/* Drives one pipe to the end like a consumer (TO_HOST: copies each chunk
 * out to `host`) or a producer (TO_DEVICE: fills each chunk from `host`).
 * blocking: tw__staging_wait between steps, else poll like an event loop.
 * hold: chunks the consumer keeps before releasing the oldest (TO_HOST
 * releases them newest first, to exercise out-of-order release).
 * Returns 0 or the pipe's error; *crc gets the pipe's CRC. */
static int drive(struct tw_staging_pool *pool, enum tw_staging_dir dir, uint8_t *dev, uint8_t *host,
                 size_t len, unsigned depth, int blocking, unsigned hold, uint32_t *crc)
{
    struct tw_staging_pipe *p;
    struct tw_mem_attr attr;
    char err[256];
    fake_query((uintptr_t)dev, len, &attr, NULL, 0);
    int rc = tw__staging_begin(pool, dir, &fake_kind, &attr, (uintptr_t)dev, len, depth,
                               TW_STAGING_CRC, &p, err, sizeof(err));
    if (rc < 0)
        return rc;
    struct tw_staging_chunk held[TW_STAGING_MAX_DEPTH];
    unsigned nheld = 0;
    for (long spins = 0;; spins++) {
        TW_ASSERT(spins < 10000000);
        struct tw_staging_chunk c;
        rc = tw__staging_acquire(p, &c);
        if (rc < 0)
            break;
        if (rc == 1) {
            TW_ASSERT(c.len > 0 && c.offset + c.len <= len);
            if (dir == TW_STAGING_TO_HOST)
                memcpy(host + c.offset, c.ptr, c.len);
            else
                memcpy(c.ptr, host + c.offset, c.len);
            held[nheld++] = c;
            if (nheld <= hold)
                continue;
        }
        /* Release what we hold: newest first for TO_HOST, in order for
         * TO_DEVICE (as the contract requires). */
        while (nheld) {
            struct tw_staging_chunk r;
            if (dir == TW_STAGING_TO_HOST) {
                r = held[--nheld];
            } else {
                r = held[0];
                memmove(held, held + 1, --nheld * sizeof(held[0]));
            }
            rc = tw__staging_release(p, &r);
            if (rc < 0)
                goto out_end;
        }
        if (rc == 1)
            continue;
        rc = tw__staging_complete(p);
        if (rc < 0 || rc == 1)
            break;
        rc = blocking ? tw__staging_wait(p, 100) : tw__staging_poll(p);
        if (rc < 0)
            break;
    }
out_end:
    if (rc >= 0)
        rc = 0;
    if (rc < 0)
        TW_ASSERT(tw__staging_error(p)[0] != '\0');
    *crc = tw__staging_crc(p);
    tw__staging_end(p);
    return rc;
}

static void check_no_leaks(struct tw_staging_pool *pool)
{
    TW_ASSERT_EQ(tw__staging_pool_free_slots(pool), tw__staging_pool_slots(pool));
    TW_ASSERT_EQ(fake.streams, fake.stream_frees);
    TW_ASSERT_EQ(fake.events, fake.event_frees);
}

static void test_round_trips(void)
{
    const size_t sizes[] = {0, 1, 4096, CHUNK - 1, CHUNK, CHUNK + 1, 7 * CHUNK + 4093, 40 * CHUNK};
    const size_t max = 40 * CHUNK;
    uint8_t *src = malloc(max), *dev = malloc(max), *host = malloc(max), *back = malloc(max);
    TW_ASSERT(src && dev && host && back);
    fake_reset();
    struct tw_staging_pool *pool;
    char err[256];
    TW_ASSERT_OK(tw__staging_pool_create(&fake_async, 0, CHUNK, 6, &pool, err, sizeof(err)));
    for (int pending = 0; pending <= 3; pending += 3) {
        fake.pending_polls = pending;
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            size_t n = sizes[i];
            for (unsigned depth = 2; depth <= 5; depth += 3) {
                for (int blocking = 0; blocking < 2; blocking++) {
                    unsigned hold = blocking ? depth - 1 : 0;
                    tw_test_fill(src, n, (uint32_t)(n + depth + pending));
                    memcpy(dev, src, n);
                    memset(host, 0, max);
                    long before = fake.copies;
                    uint32_t crc = 1;
                    TW_ASSERT_OK(
                        drive(pool, TW_STAGING_TO_HOST, dev, host, n, depth, blocking, hold, &crc));
                    TW_ASSERT_MEM_EQ(host, src, n);
                    TW_ASSERT_EQ(crc, tw__crc32c(0, src, n));
                    TW_ASSERT_EQ(fake.copies - before, (long)tw__staging_nchunks(n, CHUNK));
                    check_no_leaks(pool);

                    memset(dev, 0, max);
                    crc = 1;
                    TW_ASSERT_OK(drive(pool, TW_STAGING_TO_DEVICE, dev, host, n, depth, blocking,
                                       hold, &crc));
                    TW_ASSERT_MEM_EQ(dev, src, n);
                    TW_ASSERT_EQ(crc, tw__crc32c(0, src, n));
                    check_no_leaks(pool);
                }
            }
        }
    }
    tw__staging_pool_destroy(pool);
    TW_ASSERT_EQ(fake.pins, 1);
    TW_ASSERT_EQ(fake.unpins, 1);
    free(src);
    free(dev);
    free(host);
    free(back);
}

/* Every chunk position, both failure kinds, both directions: the error
 * comes back, the pool gets every slot back, and the pool still works. */
static void test_injected_failures(void)
{
    const size_t n = 6 * CHUNK + 100; /* 7 chunks */
    uint8_t *src = malloc(n), *dev = malloc(n), *host = malloc(n);
    TW_ASSERT(src && dev && host);
    tw_test_fill(src, n, 7);
    fake_reset();
    struct tw_staging_pool *pool;
    char err[256];
    TW_ASSERT_OK(tw__staging_pool_create(&fake_async, 0, CHUNK, 4, &pool, err, sizeof(err)));
    for (int dir = TW_STAGING_TO_HOST; dir <= TW_STAGING_TO_DEVICE; dir++) {
        for (int late = 0; late < 2; late++) {
            for (long k = 0; k < 7; k++) {
                for (int blocking = 0; blocking < 2; blocking++) {
                    fake.pending_polls = blocking ? 0 : 2;
                    long base = fake.copies;
                    if (late)
                        fake.fail_complete_at = base + k;
                    else
                        fake.fail_submit_at = base + k;
                    memcpy(dev, src, n);
                    uint32_t crc;
                    int rc =
                        drive(pool, (enum tw_staging_dir)dir, dev, host, n, 3, blocking, 0, &crc);
                    TW_ASSERT_ERR(rc, TW_EINTERNAL);
                    check_no_leaks(pool);
                    fake.fail_submit_at = fake.fail_complete_at = -1;
                    /* The pool serves the next transfer normally. */
                    memset(host, 0, n);
                    TW_ASSERT_OK(
                        drive(pool, TW_STAGING_TO_HOST, dev, host, n, 3, blocking, 0, &crc));
                    TW_ASSERT_MEM_EQ(host, src, n);
                    check_no_leaks(pool);
                }
            }
        }
    }
    tw__staging_pool_destroy(pool);
    TW_ASSERT_EQ(fake.pins, fake.unpins);
    free(src);
    free(dev);
    free(host);
}

/* Two pipes share a pool smaller than their combined depth: both finish,
 * a pipe that finds the pool empty says "not yet", and gets a slot as soon
 * as the other gives one back. */
static void test_shared_pool(void)
{
    const size_t n = 9 * CHUNK + 1;
    uint8_t *a = malloc(n), *b = malloc(n), *ha = calloc(1, n), *hb = calloc(1, n);
    TW_ASSERT(a && b && ha && hb);
    tw_test_fill(a, n, 1);
    tw_test_fill(b, n, 2);
    fake_reset();
    struct tw_staging_pool *pool;
    char err[256];
    TW_ASSERT_OK(tw__staging_pool_create(&fake_async, 0, CHUNK, 3, &pool, err, sizeof(err)));
    struct tw_mem_attr attr;
    fake_query(0, 0, &attr, NULL, 0);
    struct tw_staging_pipe *pa, *pb;
    TW_ASSERT_OK(tw__staging_begin(pool, TW_STAGING_TO_HOST, &fake_kind, &attr, (uintptr_t)a, n, 4,
                                   0, &pa, err, sizeof(err)));
    TW_ASSERT_OK(tw__staging_begin(pool, TW_STAGING_TO_HOST, &fake_kind, &attr, (uintptr_t)b, n, 4,
                                   0, &pb, err, sizeof(err)));
    /* pa takes all three slots; pb has none. */
    TW_ASSERT_OK(tw__staging_poll(pa));
    TW_ASSERT_EQ(tw__staging_pool_free_slots(pool), 0);
    struct tw_staging_chunk c;
    TW_ASSERT_EQ(tw__staging_acquire(pb, &c), 0);
    TW_ASSERT_OK(tw__staging_wait(pb, 10)); /* times out: nothing freed */
    TW_ASSERT_EQ(tw__staging_acquire(pb, &c), 0);
    int done_a = 0, done_b = 0;
    for (long spins = 0; !(done_a && done_b); spins++) {
        TW_ASSERT(spins < 1000000);
        struct tw_staging_pipe *p = spins % 2 ? pb : pa;
        uint8_t *h = p == pa ? ha : hb;
        int r = tw__staging_acquire(p, &c);
        TW_ASSERT(r >= 0);
        if (r == 1) {
            memcpy(h + c.offset, c.ptr, c.len);
            TW_ASSERT_OK(tw__staging_release(p, &c));
        }
        if (tw__staging_complete(p) == 1)
            *(p == pa ? &done_a : &done_b) = 1;
    }
    TW_ASSERT_MEM_EQ(ha, a, n);
    TW_ASSERT_MEM_EQ(hb, b, n);
    tw__staging_end(pa);
    tw__staging_end(pb);
    check_no_leaks(pool);
    tw__staging_pool_destroy(pool);
    free(a);
    free(b);
    free(ha);
    free(hb);
}

static void test_misuse_and_setup_errors(void)
{
    fake_reset();
    struct tw_staging_pool *pool;
    char err[256];
    TW_ASSERT_ERR(tw__staging_pool_create(&fake_async, 0, 0, 4, &pool, err, sizeof(err)),
                  TW_EINVAL);
    TW_ASSERT_ERR(tw__staging_pool_create(&fake_async, 0, 1000, 4, &pool, err, sizeof(err)),
                  TW_EINVAL);
    TW_ASSERT_ERR(tw__staging_pool_create(&fake_async, 0, CHUNK, 0, &pool, err, sizeof(err)),
                  TW_EINVAL);
    fake.fail_pin = 1;
    TW_ASSERT_ERR(tw__staging_pool_create(&fake_async, 0, CHUNK, 4, &pool, err, sizeof(err)),
                  -ENOMEM);
    TW_ASSERT_EQ(fake.pins, 0);
    fake.fail_pin = 0;
    TW_ASSERT_OK(tw__staging_pool_create(&fake_async, 0, CHUNK, 4, &pool, err, sizeof(err)));
    void *base;
    size_t blen;
    tw__staging_pool_memory(pool, &base, &blen);
    TW_ASSERT(base != NULL);
    TW_ASSERT_EQ_U64(blen, 4 * CHUNK);
    TW_ASSERT_EQ_U64(tw__staging_pool_chunk(pool), CHUNK);

    /* Host memory has no asynchronous copies: not a staging kind. */
    struct tw_staging_pipe *p;
    struct tw_mem_attr attr;
    uint8_t buf[3 * CHUNK];
    fake_query((uintptr_t)buf, sizeof(buf), &attr, NULL, 0);
    TW_ASSERT_ERR(tw__staging_begin(pool, TW_STAGING_TO_HOST, &tw__memkind_host, &attr,
                                    (uintptr_t)buf, sizeof(buf), 2, 0, &p, err, sizeof(err)),
                  TW_EINVAL);

    /* Releasing what was not handed out, twice, or out of order. */
    TW_ASSERT_OK(tw__staging_begin(pool, TW_STAGING_TO_DEVICE, &fake_kind, &attr, (uintptr_t)buf,
                                   sizeof(buf), 3, 0, &p, err, sizeof(err)));
    struct tw_staging_chunk c0, c1, bogus = {.index = 2};
    TW_ASSERT_EQ(tw__staging_acquire(p, &c0), 1);
    TW_ASSERT_EQ(tw__staging_acquire(p, &c1), 1);
    TW_ASSERT_EQ(c0.index, 0);
    TW_ASSERT_EQ(c1.index, 1);
    TW_ASSERT_EQ_U64(c1.offset, CHUNK);
    TW_ASSERT(c0.pool_offset != c1.pool_offset);
    TW_ASSERT(c1.ptr == (uint8_t *)base + c1.pool_offset);
    TW_ASSERT_ERR(tw__staging_release(p, &bogus), TW_EINVAL);
    TW_ASSERT_ERR(tw__staging_release(p, &c1), TW_EINVAL); /* TO_DEVICE: in order */
    TW_ASSERT_OK(tw__staging_release(p, &c0));
    TW_ASSERT_ERR(tw__staging_release(p, &c0), TW_EINVAL);
    TW_ASSERT_OK(tw__staging_release(p, &c1));
    TW_ASSERT_EQ(tw__staging_complete(p), 0); /* chunk 2 never filled */
    tw__staging_end(p);                       /* abandoned mid-way */
    check_no_leaks(pool);

    /* A zero-byte transfer is complete at once and creates nothing. */
    long streams = fake.streams;
    TW_ASSERT_OK(tw__staging_begin(pool, TW_STAGING_TO_HOST, &fake_kind, &attr, (uintptr_t)buf, 0,
                                   2, 0, &p, err, sizeof(err)));
    TW_ASSERT_EQ(tw__staging_complete(p), 1);
    TW_ASSERT_EQ(tw__staging_acquire(p, &c0), 0);
    tw__staging_end(p);
    TW_ASSERT_EQ(fake.streams, streams);
    check_no_leaks(pool);
    tw__staging_pool_destroy(pool);
    TW_ASSERT_EQ(fake.pins, fake.unpins);
}

/* A registrar that only counts. */
static long regs, deregs;

static int count_reg(void *ctx, const struct tw_reg_request *req, void **handle, char *err,
                     size_t errlen)
{
    regs++;
    *handle = (void *)req->addr;
    return 0;
}

static void count_dereg(void *ctx, void *handle)
{
    deregs++;
}

static const struct tw_registrar_ops counting_registrar = {
    .name = "counting", .reg = count_reg, .dereg = count_dereg};

/* The pool is one tracked region: a registration cache registers it once,
 * every chunk of every transfer hits, and destroying the pool invalidates
 * the registration. */
static void test_pool_registered_once(void)
{
    fake_reset();
    struct tw_staging_pool *pool;
    struct tw_regcache *rc;
    struct tw_regcache_config cfg = {0};
    char err[256];
    TW_ASSERT_OK(tw__staging_pool_create(&fake_async, 0, CHUNK, 4, &pool, err, sizeof(err)));
    void *base;
    size_t len;
    tw__staging_pool_memory(pool, &base, &len);
    uintptr_t tb;
    size_t tl;
    uint64_t gen;
    TW_ASSERT(tw__hostmem_find((uintptr_t)base, len, &tb, &tl, &gen) == 1);
    TW_ASSERT_EQ_U64(tb, (uintptr_t)base);
    TW_ASSERT_EQ_U64(tl, len);
    TW_ASSERT_OK(tw__regcache_create(&cfg, &counting_registrar, NULL, &rc));
    struct tw_regcache_region *whole, *r;
    TW_ASSERT_OK(tw__regcache_lookup(rc, base, len, TW_ACCESS_REMOTE_READ, TW_MEMKIND_HOST, &whole,
                                     err, sizeof(err)));
    TW_ASSERT(tw__regcache_region_cached(whole));
    tw__regcache_release(rc, whole);
    /* Chunks of a transfer: each is a hit on the pool's one registration. */
    uint8_t dev[3 * CHUNK];
    struct tw_mem_attr attr;
    fake_query((uintptr_t)dev, sizeof(dev), &attr, NULL, 0);
    struct tw_staging_pipe *p;
    TW_ASSERT_OK(tw__staging_begin(pool, TW_STAGING_TO_HOST, &fake_kind, &attr, (uintptr_t)dev,
                                   sizeof(dev), 2, 0, &p, err, sizeof(err)));
    int got = 0;
    for (long spins = 0; got < 3; spins++) {
        TW_ASSERT(spins < 100000);
        struct tw_staging_chunk c;
        int a = tw__staging_acquire(p, &c);
        TW_ASSERT(a >= 0);
        if (a == 0) {
            TW_ASSERT_OK(tw__staging_wait(p, 100));
            continue;
        }
        TW_ASSERT(c.ptr == (uint8_t *)base + c.pool_offset);
        TW_ASSERT_OK(tw__regcache_lookup(rc, c.ptr, c.len, TW_ACCESS_REMOTE_READ, TW_MEMKIND_HOST,
                                         &r, err, sizeof(err)));
        tw__regcache_release(rc, r);
        TW_ASSERT_OK(tw__staging_release(p, &c));
        got++;
    }
    TW_ASSERT_EQ(tw__staging_complete(p), 1);
    tw__staging_end(p);
    struct tw_regcache_stats st;
    tw__regcache_stats(rc, &st);
    TW_ASSERT_EQ_U64(st.registrations, 1);
    TW_ASSERT_EQ_U64(st.hits, 3);
    TW_ASSERT_EQ(regs, 1);
    /* Destroying the pool takes the registration with it. */
    tw__staging_pool_destroy(pool);
    TW_ASSERT_EQ(deregs, 1);
    TW_ASSERT(tw__hostmem_find((uintptr_t)base, len, &tb, &tl, &gen) == 0);
    TW_ASSERT_OK(tw__regcache_destroy(rc));
    TW_ASSERT_EQ(fake.pins, fake.unpins);
}

int main(void)
{
    TW_RUN(test_chunk_math);
    TW_RUN(test_round_trips);
    TW_RUN(test_injected_failures);
    TW_RUN(test_shared_pool);
    TW_RUN(test_misuse_and_setup_errors);
    TW_RUN(test_pool_registered_once);
    TW_DONE();
}
