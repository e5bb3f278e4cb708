/* The store's small-tensor slab: distinct aligned blocks, reuse by size,
 * bounded kept memory, arenas outliving a destroy while blocks are in use. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "server/slab.h"
#include "server/store.h"
#include "tw_test.h"

struct span {
    uintptr_t p;
    size_t len;
};

static int span_cmp(const void *a, const void *b)
{
    uintptr_t x = ((const struct span *)a)->p, y = ((const struct span *)b)->p;
    return x < y ? -1 : x > y;
}

static void test_blocks_distinct_and_reused(void)
{
    struct tw_slab sl;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    enum { N = 1000 };
    static void *blk[N];
    static size_t len[N];
    TW_ASSERT_OK(tw__slab_init(&sl, 1u << 30));
    /* Sizes of 1..64 pages, 128 MiB in all (more than one arena), plus one
     * of the largest size: every block page aligned, writable at both ends,
     * and no two overlap. */
    for (int i = 0; i < N; i++) {
        len[i] = i == 0 ? TW_SLAB_MAX - page : page * (size_t)(1 + (i * 37) % 64);
        blk[i] = tw__slab_alloc(&sl, len[i]);
        TW_ASSERT(blk[i] != NULL);
        TW_ASSERT_EQ((uintptr_t)blk[i] % page, 0);
        memset(blk[i], i & 0xff, page);
        memset((uint8_t *)blk[i] + len[i] - page, i & 0xff, page);
    }
    TW_ASSERT(sl.arena_bytes > TW_SLAB_ARENA);
    for (int i = 0; i < N; i++) { /* nothing overwrote another block */
        TW_ASSERT_EQ(((uint8_t *)blk[i])[0], i & 0xff);
        TW_ASSERT_EQ(((uint8_t *)blk[i])[len[i] - 1], i & 0xff);
    }
    static struct span sorted[N];
    for (int i = 0; i < N; i++)
        sorted[i] = (struct span){(uintptr_t)blk[i], len[i]};
    qsort(sorted, N, sizeof(sorted[0]), span_cmp);
    for (int i = 1; i < N; i++)
        TW_ASSERT(sorted[i].p >= sorted[i - 1].p + sorted[i - 1].len);
    uint64_t live = 0;
    for (int i = 0; i < N; i++)
        live += len[i];
    TW_ASSERT_EQ_U64(sl.live_bytes, live);

    /* A freed block comes back for the next allocation of its size only. */
    tw__slab_free(&sl, blk[5], len[5]);
    void *other = tw__slab_alloc(&sl, len[5] + page);
    TW_ASSERT(other != blk[5]);
    void *again = tw__slab_alloc(&sl, len[5]);
    TW_ASSERT(again == blk[5]);
    tw__slab_free(&sl, other, len[5] + page);
    for (int i = 0; i < N; i++)
        tw__slab_free(&sl, blk[i], len[i]);
    TW_ASSERT_EQ_U64(sl.live_bytes, 0);
    /* Wrong sizes are refused. */
    TW_ASSERT(tw__slab_alloc(&sl, 0) == NULL);
    TW_ASSERT(tw__slab_alloc(&sl, page + 1) == NULL);
    TW_ASSERT(tw__slab_alloc(&sl, TW_SLAB_MAX) == NULL);
    tw__slab_destroy(&sl);
    TW_ASSERT_EQ_U64(sl.arena_bytes, 0);
}

/* Blocks freed in address order (a batch's previous versions, committed
 * in order) come back in that order, so the next versions continue each
 * other in memory as the old did (a stack gave them out backwards); the
 * queue keeps every block through its front being taken while it grows
 * (a full queue with a taken front moves down instead of growing). */
static void test_reuse_in_order(void)
{
    struct tw_slab sl;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    enum { N = 300 };
    static uint8_t *b[N], *again[N];
    size_t len = 8 * page;
    TW_ASSERT_OK(tw__slab_init(&sl, 1u << 30));
    for (int i = 0; i < N; i++) {
        b[i] = tw__slab_alloc(&sl, len);
        TW_ASSERT(b[i] != NULL);
        if (i > 0)
            TW_ASSERT(b[i] == b[i - 1] + len); /* bump: in order */
    }
    /* Freed in order in groups of 32, the next batch taking each group
     * as it is freed (a window of puts behind their commits). */
    int got = 0;
    for (int i = 0; i < N; i += 32) {
        for (int k = i; k < i + 32 && k < N; k++)
            tw__slab_free(&sl, b[k], len);
        for (int k = i; k < i + 32 && k < N; k++)
            again[got++] = tw__slab_alloc(&sl, len);
    }
    for (int i = 0; i < N; i++)
        TW_ASSERT(again[i] == b[i]);
    /* Free all, take a few from the front, free more than the queue's
     * room: every block comes back exactly once. */
    for (int i = 0; i < N; i++)
        tw__slab_free(&sl, again[i], len);
    for (int i = 0; i < 280; i++) /* the queue holds 512: 280 taken from its front */
        again[i] = tw__slab_alloc(&sl, len);
    for (int i = 0; i < 280; i++) /* the 213th finds it full: moved down */
        tw__slab_free(&sl, again[i], len);
    for (int i = 0; i < N; i++)
        again[i] = tw__slab_alloc(&sl, len);
    static struct span sorted[N];
    for (int i = 0; i < N; i++)
        sorted[i] = (struct span){(uintptr_t)again[i], len};
    qsort(sorted, N, sizeof(sorted[0]), span_cmp);
    for (int i = 0; i < N; i++)
        TW_ASSERT(sorted[i].p == (uintptr_t)b[i]);
    TW_ASSERT_EQ_U64(sl.live_bytes, (uint64_t)N * len);
    uint8_t *next = tw__slab_alloc(&sl, len);
    TW_ASSERT(next == b[N - 1] + len); /* the queue is empty: from the arena */
    tw__slab_free(&sl, next, len);
    for (int i = 0; i < N; i++)
        tw__slab_free(&sl, again[i], len);
    TW_ASSERT_EQ_U64(sl.live_bytes, 0);
    tw__slab_destroy(&sl);
}

/* A slab sized for larger blocks (the store's page-locked one: 8 MiB):
 * blocks up to max_block - page, eight of the largest per arena, reuse by
 * size; sizes beyond an eighth of an arena are refused at init. */
static void test_sized(void)
{
    struct tw_slab sl;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t max = (size_t)8 << 20;
    TW_ASSERT_ERR(tw__slab_init_sized(&sl, 0, (size_t)TW_SLAB_ARENA / 4), -EINVAL);
    TW_ASSERT_ERR(tw__slab_init_sized(&sl, 0, max + 1), -EINVAL);
    TW_ASSERT_OK(tw__slab_init_sized(&sl, 1u << 30, max));
    TW_ASSERT(tw__slab_alloc(&sl, max) == NULL);
    void *b[9];
    for (int i = 0; i < 9; i++) {
        b[i] = tw__slab_alloc(&sl, max - page);
        TW_ASSERT(b[i] != NULL);
        TW_ASSERT_EQ((uintptr_t)b[i] % page, 0);
        memset(b[i], i, max - page); /* faulted and writable */
    }
    TW_ASSERT_EQ_U64(sl.arena_bytes, 2 * (uint64_t)TW_SLAB_ARENA);
    void *mid = tw__slab_alloc(&sl, (size_t)2 << 20);
    TW_ASSERT(mid != NULL);
    tw__slab_free(&sl, b[3], max - page);
    TW_ASSERT(tw__slab_alloc(&sl, max - page) == b[3]);
    tw__slab_free(&sl, mid, (size_t)2 << 20);
    for (int i = 0; i < 9; i++)
        tw__slab_free(&sl, b[i], max - page);
    TW_ASSERT_EQ_U64(sl.live_bytes, 0);
    tw__slab_destroy(&sl);
    TW_ASSERT_EQ_U64(sl.arena_bytes, 0);
}

static void test_keep_bound(void)
{
    struct tw_slab sl;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *b[4];
    TW_ASSERT_OK(tw__slab_init(&sl, 2 * 8 * page));
    for (int i = 0; i < 4; i++) {
        b[i] = tw__slab_alloc(&sl, 8 * page);
        memset(b[i], 0x77, 8 * page);
    }
    for (int i = 0; i < 4; i++)
        tw__slab_free(&sl, b[i], 8 * page);
    /* Two blocks stay faulted in; the other two went back to the kernel
     * (their bytes read as zero when reused) and are still reusable. */
    TW_ASSERT_EQ_U64(sl.kept_bytes, 2 * 8 * page);
    int zero = 0, kept = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t *p = tw__slab_alloc(&sl, 8 * page);
        TW_ASSERT(p == b[0] || p == b[1] || p == b[2] || p == b[3]);
        zero += p[0] == 0;
        kept += p[0] == 0x77;
    }
    TW_ASSERT_EQ(zero, 2);
    TW_ASSERT_EQ(kept, 2);
    TW_ASSERT_EQ_U64(sl.kept_bytes, 0);
    for (int i = 0; i < 4; i++)
        tw__slab_free(&sl, b[i], 8 * page);
    tw__slab_destroy(&sl);
}

/* The idle trim: a free block survives one period, is given back (its
 * bytes read as zero) in the next, and a block reused in between starts
 * over. */
static void test_trim(void)
{
    struct tw_slab sl;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    TW_ASSERT_OK(tw__slab_init(&sl, 1u << 30));
    uint8_t *a = tw__slab_alloc(&sl, 2 * page), *b = tw__slab_alloc(&sl, 3 * page);
    memset(a, 0x11, 2 * page);
    memset(b, 0x22, 3 * page);
    tw__slab_free(&sl, a, 2 * page);
    tw__slab_free(&sl, b, 3 * page);
    TW_ASSERT_EQ_U64(tw__slab_trim(&sl), 0);       /* first period: marked */
    TW_ASSERT(tw__slab_alloc(&sl, 3 * page) == b); /* b is used again */
    TW_ASSERT_EQ(b[0], 0x22);
    tw__slab_free(&sl, b, 3 * page);
    TW_ASSERT_EQ_U64(tw__slab_trim(&sl), 2 * page); /* only a */
    TW_ASSERT_EQ_U64(sl.kept_bytes, 3 * page);
    TW_ASSERT(tw__slab_alloc(&sl, 2 * page) == a);
    TW_ASSERT_EQ(a[0], 0);
    TW_ASSERT_EQ(a[2 * page - 1], 0);
    TW_ASSERT_EQ_U64(tw__slab_trim(&sl), 3 * page); /* b, unused a whole period */
    TW_ASSERT_EQ_U64(tw__slab_trim(&sl), 0);
    TW_ASSERT_EQ_U64(sl.kept_bytes, 0);
    tw__slab_free(&sl, a, 2 * page);
    tw__slab_destroy(&sl);
}

/* Through the store: a small version's storage is a slab block, its tail
 * past byte_length is cleared on reuse, and a reader outliving the store's
 * destroy keeps its bytes until it lets go. */
static void test_store_small_versions(void)
{
    struct tw_store s;
    struct tw_descriptor d = {0};
    struct tw_tensor *a, *b;
    d.dtype = TW_DTYPE_U8;
    d.ndim = 1;
    d.name.ptr = (const uint8_t *)"kv";
    d.name.len = 2;
    d.device_tag.ptr = (const uint8_t *)"cpu";
    d.device_tag.len = 3;
    d.shape[0] = d.byte_length = 32768;
    TW_ASSERT_OK(tw__store_init(&s, 0));
    TW_ASSERT_OK(tw__store_alloc(&s, &d, &a));
    TW_ASSERT(a->in_slab);
    memset(a->data, 0xee, a->alloc_len);
    uint8_t *mem = a->data;
    tw__tensor_unref(a); /* abandoned put */
    d.shape[0] = d.byte_length = 32768 - 100;
    TW_ASSERT_OK(tw__store_alloc(&s, &d, &b));
    TW_ASSERT(b->data == mem);
    for (size_t i = d.byte_length; i < b->alloc_len; i++)
        TW_ASSERT_EQ(b->data[i], 0);
    memset(b->data, 0x42, b->byte_length);
    tw__store_commit(&s, b);
    tw__store_destroy(&s); /* b is still referenced by us */
    TW_ASSERT(s.slab.dead);
    TW_ASSERT_EQ(b->data[0], 0x42);
    tw__tensor_unref(b); /* the last block: the arenas go now */
    TW_ASSERT_EQ_U64(s.slab.arena_bytes, 0);
    TW_ASSERT(!s.slab.dead);
}

/* Page-locked mode: every arena pinned once and unpinned before it goes,
 * free blocks keep their pages (a pinned page given back with
 * MADV_DONTNEED would no longer be the one the device writes), and no
 * arena beyond the cap. */
static int pins, unpins, fail_pin;

static int count_pin(void *ctx, void *p, size_t len)
{
    TW_ASSERT(ctx == &pins && len == TW_SLAB_ARENA && ((uintptr_t)p & ((2u << 20) - 1)) == 0);
    if (fail_pin)
        return -ENOMEM;
    pins++;
    return 0;
}

static void count_unpin(void *ctx, void *p)
{
    (void)p;
    TW_ASSERT(ctx == &pins);
    unpins++;
}

static void test_pinned_mode(void)
{
    struct tw_slab sl;
    const size_t blk = 1u << 19; /* 512 KiB: 128 per arena */
    TW_ASSERT_OK(tw__slab_init(&sl, 0));
    tw__slab_set_pinned(&sl, count_pin, count_unpin, &pins, 2 * (uint64_t)TW_SLAB_ARENA);
    uint8_t *first = tw__slab_alloc(&sl, blk);
    TW_ASSERT(first != NULL);
    TW_ASSERT_EQ(pins, 1);
    memset(first, 0x77, blk);
    /* keep_max is 0, yet the freed block keeps its bytes through trims. */
    tw__slab_free(&sl, first, blk);
    TW_ASSERT_EQ_U64(tw__slab_trim(&sl), 0);
    TW_ASSERT_EQ_U64(tw__slab_trim(&sl), 0);
    TW_ASSERT_EQ(first[0], 0x77);
    TW_ASSERT_EQ(first[blk - 1], 0x77);
    TW_ASSERT(tw__slab_alloc(&sl, blk) == first);
    /* Two arenas' worth, then nothing more (the caller falls back). */
    size_t n = 1;
    while (tw__slab_alloc(&sl, blk) != NULL)
        n++;
    TW_ASSERT_EQ(n, 2 * (TW_SLAB_ARENA / blk));
    TW_ASSERT_EQ(pins, 2);
    TW_ASSERT_EQ_U64(sl.arena_bytes, 2 * (uint64_t)TW_SLAB_ARENA);
    TW_ASSERT_EQ(unpins, 0);
    sl.live_bytes = 0; /* the test drops its blocks without freeing each */
    tw__slab_destroy(&sl);
    TW_ASSERT_EQ(unpins, 2);

    /* A pin that fails: no arena, no block. */
    pins = unpins = 0;
    fail_pin = 1;
    TW_ASSERT_OK(tw__slab_init(&sl, 0));
    tw__slab_set_pinned(&sl, count_pin, count_unpin, &pins, 4 * (uint64_t)TW_SLAB_ARENA);
    TW_ASSERT(tw__slab_alloc(&sl, blk) == NULL);
    TW_ASSERT_EQ_U64(sl.arena_bytes, 0);
    fail_pin = 0; /* and no second attempt */
    TW_ASSERT(tw__slab_alloc(&sl, blk) == NULL);
    TW_ASSERT_EQ(pins, 0);
    tw__slab_destroy(&sl);
    TW_ASSERT_EQ(unpins, 0);
}

/* Page-locked mode at its cap after batches of other sizes: an arena whose
 * blocks are all free again is carved afresh for the new size (still
 * pinned once); one with a block in use is not; blocks stay distinct. */
static void test_pinned_reclaim(void)
{
    struct tw_slab sl;
    const size_t max_block = (size_t)8 << 20, a_len = (size_t)3 << 20, b_len = (size_t)5 << 20;
    enum { PER_ARENA_A = TW_SLAB_ARENA / (3 << 20), PER_ARENA_B = TW_SLAB_ARENA / (5 << 20) };
    static void *a_blk[2 * PER_ARENA_A], *b_blk[2 * PER_ARENA_B];
    pins = unpins = 0;
    TW_ASSERT_OK(tw__slab_init_sized(&sl, 0, max_block));
    tw__slab_set_pinned(&sl, count_pin, count_unpin, &pins, 2 * (uint64_t)TW_SLAB_ARENA);
    size_t na = 0;
    while (na < 2 * PER_ARENA_A && (a_blk[na] = tw__slab_alloc(&sl, a_len)) != NULL)
        na++;
    TW_ASSERT_EQ(na, 2 * PER_ARENA_A);
    TW_ASSERT(tw__slab_alloc(&sl, b_len) == NULL); /* full, nothing free */
    /* Free every 3 MiB block but one in the first arena carved. */
    for (size_t i = 1; i < na; i++)
        tw__slab_free(&sl, a_blk[i], a_len);
    size_t nb = 0;
    while (nb < 2 * PER_ARENA_B && (b_blk[nb] = tw__slab_alloc(&sl, b_len)) != NULL)
        nb++;
    TW_ASSERT_EQ(nb, PER_ARENA_B); /* the second arena only: the first holds a_blk[0] */
    for (size_t i = 0; i < nb; i++) {
        uintptr_t p = (uintptr_t)b_blk[i];
        TW_ASSERT(p + b_len <= (uintptr_t)a_blk[0] || p >= (uintptr_t)a_blk[0] + a_len);
        memset(b_blk[i], (int)i, b_len);
    }
    /* The free 3 MiB blocks of the first arena still serve their size, and
     * the second arena's tail after the 5 MiB blocks one more; none of the
     * second arena's old 3 MiB blocks is handed out again. */
    size_t again = 0;
    void *p;
    while ((p = tw__slab_alloc(&sl, a_len)) != NULL) {
        for (size_t i = 0; i < nb; i++)
            TW_ASSERT((uintptr_t)p + a_len <= (uintptr_t)b_blk[i] ||
                      (uintptr_t)p >= (uintptr_t)b_blk[i] + b_len);
        again++;
    }
    TW_ASSERT_EQ(again, PER_ARENA_A - 1 + (TW_SLAB_ARENA - PER_ARENA_B * b_len) / a_len);
    for (size_t i = 0; i < nb; i++)
        TW_ASSERT_EQ(((uint8_t *)b_blk[i])[b_len - 1], (uint8_t)i);
    TW_ASSERT_EQ(pins, 2);
    TW_ASSERT_EQ(unpins, 0);
    sl.live_bytes = 0; /* the test drops its blocks without freeing each */
    tw__slab_destroy(&sl);
    TW_ASSERT_EQ(unpins, 2);
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Whether this kernel has MADV_POPULATE_WRITE (Linux 5.14): without it the
 * faulter stands down and the loop faults for itself, so the two faulter
 * cases below have nothing to check. */
static int populate_write_works(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *p = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int ok = p != MAP_FAILED && madvise(p, page, MADV_POPULATE_WRITE) == 0;
    if (p != MAP_FAILED)
        munmap(p, page);
    if (!ok)
        fprintf(stderr, "  no MADV_POPULATE_WRITE on this kernel: faulter not checked\n");
    return ok;
}

static int resident(const uint8_t *p)
{
    unsigned char v = 0;
    return mincore((void *)p, 1, &v) == 0 && (v & 1);
}

/* Faulting ahead on the helper thread: after 8 MiB of blocks the pages up
 * to 8 MiB past the bump pointer come in without another allocation (the
 * loop alone faults one 2 MiB step past the last block's huge page), and
 * none further (the lead is what the slab holds). Destroy joins the
 * thread. */
static void test_faulted_ahead(void)
{
    struct tw_slab sl;
    const size_t len = 256u << 10, mib = 1u << 20;
    enum { N = 32 }; /* 8 MiB */
    uint8_t *b[N];
    if (!populate_write_works())
        return;
    TW_ASSERT_OK(tw__slab_init(&sl, 0));
    for (int i = 0; i < N; i++) {
        b[i] = tw__slab_alloc(&sl, len);
        TW_ASSERT(b[i] != NULL);
        TW_ASSERT(i == 0 || b[i] == b[i - 1] + len);
        memset(b[i], i + 1, len);
    }
    TW_ASSERT(sl.faulter != NULL);
    const uint8_t *base = b[0]; /* the first arena's start */
    struct timespec nap = {0, 10 * 1000 * 1000};
    int waited = 0;
    /* A busy machine may leave the thread waiting for a CPU: 30 s at most. */
    while (!resident(base + 15 * mib) && waited++ < 3000)
        nanosleep(&nap, NULL);
    TW_ASSERT(resident(base + 12 * mib));
    TW_ASSERT(resident(base + 15 * mib));
    TW_ASSERT(!resident(base + 24 * mib));
    TW_ASSERT(!resident(base + 40 * mib));
    for (int i = 0; i < N; i++) {
        TW_ASSERT(b[i][0] == (uint8_t)(i + 1) && b[i][len - 1] == (uint8_t)(i + 1));
        tw__slab_free(&sl, b[i], len);
    }
    /* Allocations racing the thread, then a destroy while it may still
     * be faulting (ThreadSanitizer runs this test). */
    for (int i = 0; i < N; i++)
        b[i] = tw__slab_alloc(&sl, 2 * len);
    for (int i = 0; i < N; i++)
        tw__slab_free(&sl, b[i], 2 * len);
    tw__slab_destroy(&sl);
    TW_ASSERT(sl.faulter == NULL);
    TW_ASSERT_EQ_U64(sl.arena_bytes, 0);
}

static size_t resident_pages(const uint8_t *p, size_t len)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = len / page, got = 0;
    unsigned char *v = calloc(n, 1);
    TW_ASSERT(v != NULL);
    TW_ASSERT(mincore((void *)p, len, v) == 0);
    for (size_t i = 0; i < n; i++)
        got += v[i] & 1;
    free(v);
    return got;
}

/* Ranges outside the slab (a large tensor's fresh mapping): faulted in
 * from the start on the helper thread, the bytes already written there
 * kept; tw__slab_fault_forget takes a range off (waiting for a step under
 * way), after which not one more page of it comes in, so the caller may
 * unmap it. */
static void test_fault_range(void)
{
    struct tw_slab sl;
    const size_t mib = 1u << 20, len = 64 * mib, big = 1024 * mib;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (!populate_write_works())
        return;
    TW_ASSERT_OK(tw__slab_init(&sl, 0));
    uint8_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    TW_ASSERT(m != MAP_FAILED);
    memset(m, 0x3c, page); /* the receive got there first */
    tw__slab_fault_range(&sl, m, len);
    TW_ASSERT(sl.faulter != NULL); /* started by the range: no arena yet */
    struct timespec nap = {0, 10 * 1000 * 1000};
    for (int waited = 0; !resident(m + len - page) && waited < 3000; waited++)
        nanosleep(&nap, NULL);
    TW_ASSERT_EQ_U64(resident_pages(m, len), len / page);
    TW_ASSERT(m[0] == 0x3c && m[page - 1] == 0x3c && m[page] == 0);
    tw__slab_fault_forget(&sl, m); /* done already: nothing to do */
    TW_ASSERT_OK(munmap(m, len));

    /* A range taken off while the thread works on it. */
    uint8_t *g = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    TW_ASSERT(g != MAP_FAILED);
    tw__slab_fault_range(&sl, g, big);
    for (int waited = 0; !resident(g) && waited < 3000; waited++)
        nanosleep(&nap, NULL);
    tw__slab_fault_forget(&sl, g);
    size_t before = resident_pages(g, big);
    nap.tv_nsec = 50 * 1000 * 1000;
    nanosleep(&nap, NULL);
    TW_ASSERT_EQ_U64(resident_pages(g, big), before);
    TW_ASSERT_OK(munmap(g, big));
    tw__slab_destroy(&sl);
    TW_ASSERT(sl.faulter == NULL);
    tw__slab_fault_range(&sl, (void *)&sl, page); /* after destroy: ignored */
    TW_ASSERT(sl.faulter == NULL);
}

int main(void)
{
    TW_RUN(test_blocks_distinct_and_reused);
    TW_RUN(test_reuse_in_order);
    TW_RUN(test_sized);
    TW_RUN(test_keep_bound);
    TW_RUN(test_trim);
    TW_RUN(test_store_small_versions);
    TW_RUN(test_pinned_mode);
    TW_RUN(test_pinned_reclaim);
    TW_RUN(test_faulted_ahead);
    TW_RUN(test_fault_range);
    TW_DONE();
}
