/*
 * Small device blocks carved from chunks (server/devslab.h) over a host
 * double of the device: "device memory" from aligned_alloc, a capacity
 * beyond which alloc says -ENOMEM, counts of allocs, frees and quiesces.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/devslab.h"
#include "tensorwire/error.h"
#include "tw_test.h"

struct fake_dev {
    uint64_t capacity, used;
    int allocs, frees, quiesces;
    int fail_other; /* alloc answers TW_EINTERNAL */
    struct {
        void *p;
        size_t len;
    } live[4096];
    int nlive;
};

static int d_alloc(void *ctx, size_t len, void **p, char *err, size_t errlen)
{
    struct fake_dev *d = ctx;
    if (d->fail_other) {
        snprintf(err, errlen, "fake device: broken");
        return TW_EINTERNAL;
    }
    if (d->used + len > d->capacity) {
        snprintf(err, errlen, "fake device: out of memory");
        return -ENOMEM;
    }
    void *m = aligned_alloc(TW_DEVSLAB_ALIGN, len);
    if (!m || d->nlive == 4096)
        abort();
    d->live[d->nlive].p = m;
    d->live[d->nlive++].len = len;
    d->used += len;
    d->allocs++;
    *p = m;
    return 0;
}

static void d_free(void *ctx, void *p)
{
    struct fake_dev *d = ctx;
    for (int i = 0; i < d->nlive; i++)
        if (d->live[i].p == p) {
            d->used -= d->live[i].len;
            d->live[i] = d->live[--d->nlive];
            d->frees++;
            free(p);
            return;
        }
    abort(); /* not an allocation of the device */
}

static void d_quiesce(void *ctx)
{
    ((struct fake_dev *)ctx)->quiesces++;
}

static const struct tw_devslab_ops fake_ops = {
    .alloc = d_alloc,
    .free = d_free,
    .quiesce = d_quiesce,
};

/* Every length maps to a 256-aligned block size that wastes less than an
 * eighth (or 256 bytes), classes in order of size, one size per class. */
static void test_block_sizes(void)
{
    size_t of_class[TW_DEVSLAB_CLASSES] = {0};
    unsigned prev = 0;
    for (size_t len = 1; len < TW_DEVSLAB_MAX; len++) {
        unsigned cls = 999;
        size_t b = tw__devslab_block_size(len, &cls);
        TW_ASSERT(cls < TW_DEVSLAB_CLASSES);
        TW_ASSERT(b >= len && b <= TW_DEVSLAB_MAX && b % TW_DEVSLAB_ALIGN == 0);
        TW_ASSERT(b - len < TW_DEVSLAB_ALIGN || (b - len) * 8 < len);
        TW_ASSERT(cls >= prev);
        prev = cls;
        if (!of_class[cls])
            of_class[cls] = b;
        TW_ASSERT_EQ_U64(of_class[cls], b);
    }
    for (unsigned i = 0; i < TW_DEVSLAB_CLASSES; i++)
        TW_ASSERT(of_class[i] != 0); /* every class is used */
    TW_ASSERT_EQ_U64(tw__devslab_block_size(32768, NULL), 32768);
    TW_ASSERT_EQ_U64(tw__devslab_block_size(1, NULL), 256);
    TW_ASSERT_EQ_U64(tw__devslab_block_size(2049, NULL), 2304);
}

/* 64 blocks of 32 KiB from one 2 MiB chunk, the 65th from a second;
 * given back blocks come out again last-in first-out with their tickets;
 * what is not a block of that size is refused. */
static void test_carve_and_reuse(void)
{
    struct fake_dev d = {.capacity = 64 << 20};
    struct tw_devslab s;
    char err[128];
    void *b[65];
    uint64_t t;
    const size_t n = 32768;
    tw__devslab_init(&s, &fake_ops, &d, 64 << 20);
    for (int i = 0; i < 65; i++) {
        TW_ASSERT_OK(tw__devslab_get(&s, n, &b[i], &t, err, sizeof(err)));
        TW_ASSERT_EQ_U64(t, 0);
        memset(b[i], i, n); /* the whole block is ours */
    }
    TW_ASSERT_EQ(d.allocs, 2);
    TW_ASSERT_EQ_U64(s.chunk_bytes, 4u << 20);
    for (int i = 1; i < 64; i++)
        TW_ASSERT((char *)b[i] == (char *)b[i - 1] + n);
    for (int i = 0; i < 65; i++)
        TW_ASSERT(((uint8_t *)b[i])[0] == i && ((uint8_t *)b[i])[n - 1] == i);
    TW_ASSERT_EQ_U64(s.free_bytes, (4u << 20) - 65 * n);
    TW_ASSERT_EQ_U64(s.idle_bytes, 0);

    TW_ASSERT_OK(tw__devslab_put(&s, b[3], n, 11));
    TW_ASSERT_OK(tw__devslab_put(&s, b[7], n, 12));
    void *p;
    TW_ASSERT_OK(tw__devslab_get(&s, n, &p, &t, err, sizeof(err)));
    TW_ASSERT(p == b[7] && t == 12);
    TW_ASSERT_OK(tw__devslab_get(&s, n, &p, &t, err, sizeof(err)));
    TW_ASSERT(p == b[3] && t == 11);
    /* A length of the same class is served from the same chunks. */
    TW_ASSERT_OK(tw__devslab_put(&s, b[3], n, 13));
    TW_ASSERT_OK(tw__devslab_get(&s, n - 1000, &p, &t, err, sizeof(err)));
    TW_ASSERT(p == b[3] && t == 13);
    TW_ASSERT_EQ(d.allocs, 2);

    /* Refused, nothing changed: another class, inside a block, outside
     * every chunk, a length out of range. */
    uint64_t fb = s.free_bytes;
    TW_ASSERT_ERR(tw__devslab_put(&s, b[5], 4096, 1), TW_EINVAL);
    TW_ASSERT_ERR(tw__devslab_put(&s, (char *)b[5] + 256, n, 1), TW_EINVAL);
    TW_ASSERT_ERR(tw__devslab_put(&s, (char *)b[63] + 2 * n, n, 1), TW_EINVAL);
    int local;
    TW_ASSERT_ERR(tw__devslab_put(&s, &local, n, 1), TW_EINVAL);
    TW_ASSERT_ERR(tw__devslab_put(&s, b[5], TW_DEVSLAB_MAX, 1), TW_EINVAL);
    TW_ASSERT_ERR(tw__devslab_get(&s, 0, &p, &t, err, sizeof(err)), TW_EINVAL);
    TW_ASSERT_ERR(tw__devslab_get(&s, TW_DEVSLAB_MAX, &p, &t, err, sizeof(err)), TW_EINVAL);
    TW_ASSERT_EQ_U64(s.free_bytes, fb);

    /* All back: the second chunk (1 block in use) goes idle but is kept
     * (under keep_max); so is the first. A second put of a free block of
     * an idle chunk is refused. */
    for (int i = 0; i < 65; i++)
        TW_ASSERT_OK(tw__devslab_put(&s, b[i], n, 20));
    TW_ASSERT_EQ_U64(s.idle_bytes, 4u << 20);
    TW_ASSERT_EQ_U64(s.free_bytes, 4u << 20);
    TW_ASSERT_ERR(tw__devslab_put(&s, b[64], n, 20), TW_EINVAL);
    TW_ASSERT_EQ(d.frees, 0);
    tw__devslab_destroy(&s);
    TW_ASSERT_EQ(d.frees, 2);
    TW_ASSERT_EQ(d.nlive, 0);
}

/* Idle chunks beyond keep_max go back at once (after a quiesce); the
 * others after a whole trim period unused, or all on request. */
static void test_idle_and_trim(void)
{
    struct fake_dev d = {.capacity = 64 << 20};
    struct tw_devslab s;
    char err[128];
    void *a, *b, *c;
    uint64_t t;
    tw__devslab_init(&s, &fake_ops, &d, 2u << 20); /* one chunk kept */
    TW_ASSERT_OK(tw__devslab_get(&s, 4096, &a, &t, err, sizeof(err)));
    TW_ASSERT_OK(tw__devslab_get(&s, 65536, &b, &t, err, sizeof(err)));
    TW_ASSERT_OK(tw__devslab_get(&s, 300000, &c, &t, err, sizeof(err)));
    TW_ASSERT_EQ(d.allocs, 3);
    TW_ASSERT_OK(tw__devslab_put(&s, a, 4096, 1));
    TW_ASSERT_EQ(d.frees, 0); /* 2 MiB idle: kept */
    TW_ASSERT_OK(tw__devslab_put(&s, b, 65536, 2));
    TW_ASSERT_EQ(d.frees, 1); /* 4 MiB idle: the one that went idle goes */
    TW_ASSERT_EQ(d.quiesces, 1);
    TW_ASSERT_EQ_U64(s.idle_bytes, 2u << 20);
    /* Used since the last trim: kept; then a period unused: given back.
     * The chunk still in use stays whatever the trims. */
    TW_ASSERT_EQ_U64(tw__devslab_trim(&s, 0), 0);
    TW_ASSERT_EQ_U64(tw__devslab_trim(&s, 0), 2u << 20);
    TW_ASSERT_EQ(d.frees, 2);
    TW_ASSERT_EQ(d.quiesces, 2);
    TW_ASSERT_EQ_U64(tw__devslab_trim(&s, 0), 0);
    TW_ASSERT_EQ(d.quiesces, 2); /* nothing to give back: no quiesce */
    TW_ASSERT_EQ_U64(s.chunk_bytes, tw__devslab_block_size(300000, NULL) * 6);
    /* trim(all) takes idle chunks used just now. */
    TW_ASSERT_OK(tw__devslab_put(&s, c, 300000, 3));
    uint64_t held = s.chunk_bytes;
    TW_ASSERT_EQ_U64(tw__devslab_trim(&s, 1), held);
    TW_ASSERT_EQ_U64(s.chunk_bytes, 0);
    TW_ASSERT_EQ(d.nlive, 0);
    tw__devslab_destroy(&s);
}

/* Out of device memory: idle chunks of other sizes go back and the chunk
 * is retried; with none idle the caller hears -ENOMEM, with the reason.
 * Another failure of the driver is passed on as it is. */
static void test_out_of_memory(void)
{
    struct fake_dev d = {.capacity = 4u << 20};
    struct tw_devslab s;
    char err[128] = "";
    void *a, *b, *c;
    uint64_t t;
    tw__devslab_init(&s, &fake_ops, &d, 64u << 20);
    TW_ASSERT_OK(tw__devslab_get(&s, 4096, &a, &t, err, sizeof(err)));
    TW_ASSERT_OK(tw__devslab_get(&s, 8192, &b, &t, err, sizeof(err)));
    TW_ASSERT_OK(tw__devslab_put(&s, a, 4096, 1)); /* idle, kept */
    TW_ASSERT_EQ(d.frees, 0);
    TW_ASSERT_OK(tw__devslab_get(&s, 16384, &c, &t, err, sizeof(err)));
    TW_ASSERT_EQ(d.frees, 1); /* the idle 4 KiB chunk made room */
    TW_ASSERT_EQ(d.quiesces, 1);
    void *e;
    TW_ASSERT_ERR(tw__devslab_get(&s, 32768, &e, &t, err, sizeof(err)), -ENOMEM);
    TW_ASSERT(strstr(err, "out of memory") != NULL);
    d.fail_other = 1;
    TW_ASSERT_ERR(tw__devslab_get(&s, 65536, &e, &t, err, sizeof(err)), TW_EINTERNAL);
    TW_ASSERT(strstr(err, "broken") != NULL);
    d.fail_other = 0;
    /* The blocks in use are untouched by all that. */
    memset(b, 1, 8192);
    memset(c, 2, 16384);
    TW_ASSERT_OK(tw__devslab_put(&s, b, 8192, 2));
    TW_ASSERT_OK(tw__devslab_put(&s, c, 16384, 3));
    tw__devslab_destroy(&s);
    TW_ASSERT_EQ(d.nlive, 0);
}

/* A class's chunks grow (2, 2, 4, 4, 8, 8, 16, 16 MiB, then 32 MiB), so
 * 4000 blocks of 32 KiB take 11 driver allocations instead of 63; a
 * larger chunk the device cannot give is taken at 2 MiB, and only when
 * that fails too is the device out of memory. */
static void test_chunks_grow(void)
{
    static void *b[4000];
    struct fake_dev d = {.capacity = 1u << 30};
    struct tw_devslab s;
    char err[128] = "";
    uint64_t t;
    const size_t n = 32768;
    tw__devslab_init(&s, &fake_ops, &d, 64u << 20);
    for (int i = 0; i < 4000; i++) {
        TW_ASSERT_OK(tw__devslab_get(&s, n, &b[i], &t, err, sizeof(err)));
        memset(b[i], i & 0xff, n);
    }
    TW_ASSERT_EQ(d.allocs, 11);
    size_t want[11] = {2, 2, 4, 4, 8, 8, 16, 16, 32, 32, 32};
    for (int i = 0; i < 11; i++)
        TW_ASSERT_EQ_U64(d.live[i].len, want[i] << 20);
    TW_ASSERT_EQ_U64(s.chunk_bytes, 156u << 20);
    TW_ASSERT_EQ_U64(s.free_bytes, (156u << 20) - 4000 * n);
    for (int i = 0; i < 4000; i++) {
        TW_ASSERT(((uint8_t *)b[i])[0] == (i & 0xff) && ((uint8_t *)b[i])[n - 1] == (i & 0xff));
        TW_ASSERT_OK(tw__devslab_put(&s, b[i], n, 1));
    }
    /* All idle: beyond keep_max (64 MiB) they went back. */
    TW_ASSERT(s.idle_bytes <= 64u << 20 && s.chunk_bytes == s.idle_bytes);
    tw__devslab_destroy(&s);
    TW_ASSERT_EQ(d.nlive, 0);

    struct fake_dev small = {.capacity = 7u << 20};
    tw__devslab_init(&s, &fake_ops, &small, 64u << 20);
    int got = 0;
    int rc;
    while ((rc = tw__devslab_get(&s, n, &b[got], &t, err, sizeof(err))) == 0)
        got++;
    TW_ASSERT_EQ(rc, -ENOMEM);
    TW_ASSERT(strstr(err, "out of memory") != NULL);
    TW_ASSERT_EQ(got, 3 * 64); /* 2 + 2 MiB, then 2 MiB where 4 did not fit */
    TW_ASSERT_EQ_U64(small.used, 6u << 20);
    for (int i = 0; i < got; i++)
        TW_ASSERT_OK(tw__devslab_put(&s, b[i], n, 1));
    tw__devslab_destroy(&s);
    TW_ASSERT_EQ(small.nlive, 0);
}

/* Random gets and puts of mixed sizes against a model: blocks never
 * overlap (each is filled with its owner's byte and checked when given
 * back), the byte counts add up, and every chunk goes back at the end. */
static void test_random(void)
{
    struct fake_dev d = {.capacity = 1ull << 30};
    struct tw_devslab s;
    char err[128];
    enum { N = 3000 };
    static void *p[N];
    static size_t len[N];
    static const size_t sizes[] = {1, 255, 256, 4096, 5000, 32768, 32769, 200000, 1048575};
    uint32_t r = 12345;
    uint64_t live = 0;
    tw__devslab_init(&s, &fake_ops, &d, 8u << 20);
    for (int step = 0; step < 40000; step++) {
        r = r * 1103515245u + 12345u;
        int i = (int)((r >> 8) % N);
        if (!p[i]) {
            uint64_t t;
            len[i] = sizes[(r >> 20) % (sizeof(sizes) / sizeof(sizes[0]))];
            TW_ASSERT_OK(tw__devslab_get(&s, len[i], &p[i], &t, err, sizeof(err)));
            memset(p[i], (uint8_t)i, len[i]);
            live += tw__devslab_block_size(len[i], NULL);
        } else {
            const uint8_t *q = p[i];
            for (size_t k = 0; k < len[i]; k += 97)
                TW_ASSERT(q[k] == (uint8_t)i);
            TW_ASSERT(q[len[i] - 1] == (uint8_t)i);
            TW_ASSERT_OK(tw__devslab_put(&s, p[i], len[i], (uint64_t)step));
            live -= tw__devslab_block_size(len[i], NULL);
            p[i] = NULL;
        }
        TW_ASSERT_EQ_U64(s.chunk_bytes - s.free_bytes, live);
        TW_ASSERT(s.idle_bytes <= s.free_bytes && s.idle_bytes <= 8u << 20);
        if (step % 5000 == 4999)
            (void)tw__devslab_trim(&s, 0);
    }
    for (int i = 0; i < N; i++)
        if (p[i])
            TW_ASSERT_OK(tw__devslab_put(&s, p[i], len[i], 1));
    TW_ASSERT_EQ_U64(s.free_bytes, s.chunk_bytes);
    TW_ASSERT_EQ_U64(s.idle_bytes, s.chunk_bytes);
    (void)tw__devslab_trim(&s, 1);
    TW_ASSERT_EQ_U64(s.chunk_bytes, 0);
    TW_ASSERT_EQ(d.nlive, 0);
    TW_ASSERT_EQ(d.allocs, d.frees);
    TW_ASSERT_EQ_U64((uint64_t)d.allocs, s.chunk_allocs);
    tw__devslab_destroy(&s);
}

int main(void)
{
    TW_RUN(test_block_sizes);
    TW_RUN(test_carve_and_reuse);
    TW_RUN(test_idle_and_trim);
    TW_RUN(test_out_of_memory);
    TW_RUN(test_chunks_grow);
    TW_RUN(test_random);
    TW_DONE();
}
