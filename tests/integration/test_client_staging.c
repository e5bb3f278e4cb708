/*
 * The client's staging planes (src/client/dp_staging.c) without a GPU: a
 * fake CUDA memory kind claims one host arena as "device memory" and is
 * installed in the handle's memory-kind table. The arena is PROT_NONE
 * except inside the fake kind's copies, so a plane that touched device
 * memory directly (recv into it, a CRC over it) would crash the test. Its
 * asynchronous copies are the stream double of tests/mem/fake_memkind.h
 * (queued, run only when an event after them is found complete; injected
 * failures at submission or completion of copy k), so RDMA pull gets go
 * through the chunked pipeline with the pool's chunk set to 64 KiB
 * (TW_STAGING_CHUNK).
 * Against a real tensorwired, inline and over RDMA (cmake/parts/client.cmake):
 * round trips byte-exact with "+ staging" in the plane, one copy per chunk
 * at chunk size -1, +0, +1 and odd sizes (over shm asked with ATTACH_READ
 * once an attach read worked: the server registers nothing), a batch of
 * device slices (its puts copied to host memory ahead in groups, a
 * group's failure leaving its blocks to the next group, its gets' copies
 * to the device given back group by group), a copy
 * failing at chunk k of a get (inline: the k-th frame's copy; RDMA: chunk
 * k's copy refused, or failing when it completes) and at the put's copy
 * (the request fails with the copy's code, the connection stays usable,
 * nothing is stored, no pool slot, stream or event is left behind), and a
 * range that leaves its allocation. Links the internal library (it sets
 * c->memkinds and reads the pool's counters).
 */
#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>

#include "../mem/fake_memkind.h"
#include "client/client_internal.h"
#include "integration/server_fixture.h"
#include "mem/fake_arena.h"
#include "mem/staging.h"
#include "tensorwire/tensorwire.h"
#include "tw_test.h"

static struct tw_test_server srv;

#define ARENA_LEN ((size_t)32 << 20)
static uint8_t *arena;
static unsigned copies_to_host, copies_to_dev;
static int fail_to_dev_at = -1, fail_to_host_at = -1; /* copy index that fails */

static void arena_open(int open)
{
    TW_ASSERT_EQ(mprotect(arena, ARENA_LEN, open ? PROT_READ | PROT_WRITE : PROT_NONE), 0);
}

static unsigned arena_queries;

static int arena_query(uintptr_t addr, size_t len, struct tw_mem_attr *attr, char *err,
                       size_t errlen)
{
    arena_queries++;
    return tw_test_arena_query((uintptr_t)arena, ARENA_LEN, addr, len, attr, err, errlen);
}

static int fake_to_host(void *dst, uintptr_t src, size_t len, const struct tw_mem_attr *attr,
                        char *err, size_t errlen)
{
    if ((int)copies_to_host++ == fail_to_host_at) {
        snprintf(err, errlen, "injected failure of copy %u to host", copies_to_host - 1);
        return TW_EINTERNAL;
    }
    arena_open(1);
    memcpy(dst, (const void *)src, len);
    arena_open(0);
    return 0;
}

static int fake_from_host(uintptr_t dst, const void *src, size_t len,
                          const struct tw_mem_attr *attr, char *err, size_t errlen)
{
    if ((int)copies_to_dev++ == fail_to_dev_at) {
        snprintf(err, errlen, "injected failure of copy %u to the device", copies_to_dev - 1);
        return TW_EINTERNAL;
    }
    arena_open(1);
    memcpy((void *)dst, src, len);
    arena_open(0);
    return 0;
}

/* The stream double runs queued copies inside event queries and waits:
 * the arena is open only then. */
static int arena_event_query(int device, void *event, char *err, size_t errlen)
{
    arena_open(1);
    int rc = fake_event_query(device, event, err, errlen);
    arena_open(0);
    return rc;
}

static int arena_event_wait(int device, void *event, char *err, size_t errlen)
{
    arena_open(1);
    int rc = fake_event_wait(device, event, err, errlen);
    arena_open(0);
    return rc;
}

static int arena_stream_wait(int device, void *stream, char *err, size_t errlen)
{
    arena_open(1);
    int rc = fake_stream_wait(device, stream, err, errlen);
    arena_open(0);
    return rc;
}

/* Batched copies to the host: queued one by one on the stream double. */
static unsigned batch_to_host_calls;
static int arena_batch_to_host(int device, void *stream, void *const *dst, const void *const *src,
                               const size_t *len, size_t n, size_t *done, char *err, size_t errlen)
{
    struct tw_mem_attr a = {.kind = TW_MEMKIND_CUDA, .device = device};
    batch_to_host_calls++;
    *done = 0;
    for (size_t i = 0; i < n; i++) {
        int rc =
            fake_copy_to_host_async(stream, dst[i], (uintptr_t)src[i], len[i], &a, err, errlen);
        if (rc)
            return rc;
        (*done)++;
    }
    return 0;
}

static const struct tw_memkind_async_ops arena_async = {
    .pin = fake_pin,
    .unpin = fake_unpin,
    .stream_create = fake_stream_create,
    .stream_destroy = fake_stream_destroy,
    .stream_wait = arena_stream_wait,
    .event_create = fake_event_create,
    .event_destroy = fake_event_destroy,
    .copy_to_host_async = fake_copy_to_host_async,
    .copy_from_host_async = fake_copy_from_host_async,
    .copy_batch_to_host_async = arena_batch_to_host,
    .event_record = fake_event_record,
    .event_query = arena_event_query,
    .event_wait = arena_event_wait,
};

static const struct tw_memkind_ops fake_cuda = {
    .kind = TW_MEMKIND_CUDA,
    .name = "fake-cuda",
    .check_on_hit = 1,
    .query = arena_query,
    .copy_to_host = fake_to_host,
    .copy_from_host = fake_from_host,
    .async = &arena_async,
};

#define PIPE_CHUNK ((size_t)64 * 1024)

static int on_rdma(tw_client *c)
{
    return strncmp(tw_client_data_plane(c), "rdma", 4) == 0;
}

/* Nothing of a finished pipeline is left: every pool slot free, every
 * stream and event of the double destroyed but the handle's own. */
static void check_pool_idle(tw_client *c)
{
    if (c->stage_pool)
        TW_ASSERT_EQ(tw__staging_pool_free_slots(c->stage_pool),
                     tw__staging_pool_slots(c->stage_pool));
    long held = 0; /* the handle's streams of small gets and puts stay */
    for (int d = 0; c->stage_fence_stream && d < 64; d++)
        held += c->stage_fence_stream[d] != NULL;
    held += c->stage_ahead_stream != NULL;
    TW_ASSERT_EQ(c->nstage_pend, 0);
    TW_ASSERT_EQ(c->nstage_ahead, 0);
    TW_ASSERT_EQ(fake.streams - held, fake.stream_frees);
    /* So do the events of the small gets' copy groups, none in use. */
    long held_ev = 0;
    for (int i = 0; i < TW__STAGE_GROUPS; i++)
        held_ev += c->stage_grp[i].event != NULL;
    TW_ASSERT_EQ(c->nstage_grp, 0);
    TW_ASSERT_EQ(fake.events - held_ev, fake.event_frees);
}

#define fill tw_test_fill

/* A handle with options o whose CUDA kind is the fake one. */
static tw_client *connect_opts(const struct tw_client_options *o)
{
    tw_client *c = NULL;
    TW_ASSERT_OK(tw_client_connect(srv.addr, o, &c));
    c->memkinds[TW_MEMKIND_CUDA] = &fake_cuda;
    return c;
}

static tw_client *connect_fake(uint32_t max_frame)
{
    struct tw_client_options o;
    tw_test_client_options(&o);
    if (max_frame)
        o.max_frame = max_frame;
    return connect_opts(&o);
}

/* dev[0..n) = src, through the fake kind. */
static void dev_write(uint8_t *dev, const uint8_t *src, size_t n)
{
    arena_open(1);
    memcpy(dev, src, n);
    arena_open(0);
}

static void dev_read(uint8_t *dst, const uint8_t *dev, size_t n)
{
    arena_open(1);
    memcpy(dst, dev, n);
    arena_open(0);
}

static void test_round_trips(void)
{
    tw_client *c = connect_fake(0);
    unsigned staged_attach_gets = 0, shm_gets = 0;
    size_t sizes[] = {1,
                      4096,
                      PIPE_CHUNK - 1,
                      PIPE_CHUNK,
                      PIPE_CHUNK + 1,
                      3 * PIPE_CHUNK + 7,
                      (1u << 20) + 3,
                      9u << 20};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t n = sizes[i];
        uint8_t *src = malloc(n), *back = malloc(n);
        fill(src, n, (uint32_t)i + 1);
        dev_write(arena, src, n);
        struct tw_tensor_desc d = {.dtype = TW_U8, .ndim = 1, .shape = {n}}, got;
        unsigned th = copies_to_host, td = copies_to_dev;
        TW_ASSERT_OK(tw_put(c, "st/t", &d, arena, n));
        TW_ASSERT(strstr(tw_client_data_plane(c), "+ staging") != NULL);
        TW_ASSERT_EQ(copies_to_host, th + 1);
        /* Into another part of the arena, which starts zeroed. */
        uint8_t *dst = arena + (ARENA_LEN / 2);
        memset(back, 0, n);
        dev_write(dst, back, n);
        long async_before = fake.copies;
        /* Over shm, once a read by cross-memory attach worked, a staged
         * get asks with ATTACH_READ too (it reads into the library's host
         * memory): the server registers nothing for it. */
        int attach = c->fpeer && tw__fabric_peer_attach_reads(c->fpeer);
        uint64_t att0 = tw_test_stat(c, "rdma_attach_gets", 0);
        uint64_t ov0 = c->stage_pull_overlaps;
        TW_ASSERT_OK(tw_get(c, "st/t", dst, n, &got));
        TW_ASSERT(strstr(tw_client_data_plane(c), "+ staging") != NULL);
        int on_shm = strstr(tw_client_data_plane(c), "rdma pull (shm)") != NULL;
        TW_ASSERT_EQ_U64(tw_test_stat(c, "rdma_attach_gets", 0) - att0,
                         (uint64_t)(attach && on_shm));
        staged_attach_gets += (unsigned)(attach && on_shm);
        shm_gets += (unsigned)on_shm;
        if (on_rdma(c)) {
            /* The pipelined pull: one asynchronous copy per chunk. */
            TW_ASSERT_EQ(fake.copies - async_before, (long)tw__staging_nchunks(n, PIPE_CHUNK));
            TW_ASSERT_EQ(copies_to_dev, td);
            /* The next chunk's read starts before this one's ends (the
             * provider never drains between chunks): from 1 MiB (17
             * chunks; with TW_TEST_PROGRESSIVE_CHUNKS=5 each part holds
             * three or more) at least once. */
            if (n >= (1u << 20))
                TW_ASSERT(c->stage_pull_overlaps > ov0);
        } else if (n <= (8u << 20)) {
            /* A get up to the largest size class (8 MiB): one copy queued
             * on the fence stream, waited for before tw_get returned (the
             * bytes are checked below). */
            TW_ASSERT_EQ(fake.copies - async_before, 1);
            TW_ASSERT_EQ(copies_to_dev, td);
        } else {
            TW_ASSERT(copies_to_dev > td);
        }
        check_pool_idle(c);
        TW_ASSERT_EQ_U64(got.byte_length, n);
        dev_read(back, dst, n);
        TW_ASSERT_MEM_EQ(back, src, n);
        /* The same tensor into host memory: no staging. */
        memset(back, 0, n);
        TW_ASSERT_OK(tw_get(c, "st/t", back, n, NULL));
        TW_ASSERT(strstr(tw_client_data_plane(c), "+ staging") == NULL);
        TW_ASSERT_MEM_EQ(back, src, n);
        free(src);
        free(back);
    }
    /* Over shm every staged get after the first read by attach is one. */
    if (shm_gets > 1)
        TW_ASSERT(staged_attach_gets >= shm_gets - 1);
    TW_ASSERT_OK(tw_delete(c, "st/t"));
    tw_close(c);
}

/* Items PREFIX0.. of n u8 tensors of blk bytes, each a slice of the arena
 * from its start. */
static void slice_items(struct tw_batch_item *items, char (*names)[32], int n, size_t blk,
                        const char *prefix)
{
    for (int i = 0; i < n; i++) {
        snprintf(names[i], sizeof(names[i]), "%s%d", prefix, i);
        items[i] = (struct tw_batch_item){.name = names[i],
                                          .desc = {.dtype = TW_U8, .ndim = 1, .shape = {blk}},
                                          .buf = arena + (size_t)i * blk,
                                          .len = blk};
    }
}

/* Gets the n items into the second half of the arena (slices of blk)
 * and checks them against src; the pool is idle after. */
static void get_slices_and_check(tw_client *c, struct tw_batch_item *items, int n, size_t blk,
                                 const uint8_t *src, uint8_t *back)
{
    for (int i = 0; i < n; i++)
        items[i].buf = arena + ARENA_LEN / 2 + (size_t)i * blk;
    TW_ASSERT_OK(tw_batch_get(c, items, (size_t)n));
    dev_read(back, arena + ARENA_LEN / 2, (size_t)n * blk);
    TW_ASSERT_MEM_EQ(back, src, (size_t)n * blk);
    check_pool_idle(c);
}

static uint64_t regs_made(tw_client *c);

static void test_batch_of_slices(void)
{
    tw_client *c = connect_fake(0);
    enum { N = 64, BLK = 32 * 1024 };
    static struct tw_batch_item items[N];
    static char names[N][32];
    uint8_t *src = malloc((size_t)N * BLK), *back = malloc((size_t)N * BLK);
    fill(src, (size_t)N * BLK, 77);
    dev_write(arena, src, (size_t)N * BLK);
    slice_items(items, names, N, BLK, "st/b");
    /* Small puts from the device are copied to host memory ahead, in
     * groups (one batched call and one wait each), none alone. */
    unsigned th = copies_to_host, bt = batch_to_host_calls, q0 = arena_queries;
    long copies0 = fake.copies;
    uint64_t joined0 = c->stage_joined_puts, regs0 = regs_made(c), spans0 = c->put_spans,
             users0 = c->put_span_users;
    TW_ASSERT_OK(tw_batch_put(c, items, N));
    /* Over RDMA a group's buffers, adjacent in a slab, are registered once
     * and share that key (dp_rdma.c, "Shared keys"): at most two spans a
     * group (one where its buffers cross into another slab), one
     * registration each, where each put registered its own before. */
    if (on_rdma(c)) {
        fprintf(stderr, "  small batch put: %llu registrations, %llu spans used by %llu puts\n",
                (unsigned long long)(regs_made(c) - regs0),
                (unsigned long long)(c->put_spans - spans0),
                (unsigned long long)(c->put_span_users - users0));
        TW_ASSERT(c->put_spans - spans0 <= 2 * (N / TW__STAGE_AHEAD));
        TW_ASSERT_EQ_U64(regs_made(c) - regs0, c->put_spans - spans0);
        TW_ASSERT(c->put_span_users - users0 >= N - 2 * (N / TW__STAGE_AHEAD));
        TW_ASSERT_EQ(c->put_spans_live, 0); /* all revoked when the call returned */
    }
    TW_ASSERT_EQ(copies_to_host, th);
    TW_ASSERT_EQ(batch_to_host_calls - bt, (unsigned)(N / TW__STAGE_AHEAD));
    /* Adjacent slices into adjacent buffers of a slab share copies: one a
     * group where its buffers are all in one slab and none was busy. */
    TW_ASSERT(fake.copies - copies0 < N);
    TW_ASSERT_EQ_U64(c->stage_joined_puts - joined0, (uint64_t)(N - (fake.copies - copies0)));
    fprintf(stderr, "  small batch put: %ld copies for %d blocks\n", fake.copies - copies0, N);
    /* Slices of one allocation: the kind is asked for once per run (the
     * path decision may ask again for its own reasons, not per item). */
    TW_ASSERT(arena_queries - q0 < N / 4);
    get_slices_and_check(c, items, N, BLK, src, back);
    /* A group whose 6th copy is refused, or whose copies fail when they
     * run (the slices laid out backwards: no two copies join): the blocks
     * it did not copy go in the next group (the one being opened when a
     * wait failed copies alone), and the batch is stored whole. A joined
     * copy refused: the puts before it keep their copies, the one it
     * starts with copies alone when it is the group's first (else it
     * starts the next group), and the batch is stored whole. */
    for (int mode = 0; mode < 3; mode++) {
        int at_completion = mode == 1, joined = mode == 2;
        fill(src, (size_t)N * BLK, 90 + (uint32_t)mode);
        for (int i = 0; i < N; i++) {
            items[i].buf = arena + (size_t)(joined ? i : N - 1 - i) * BLK;
            dev_write(items[i].buf, src + (size_t)i * BLK, BLK);
        }
        long refusals0 = fake.len_refusals;
        if (at_completion)
            fake.fail_complete_at = fake.copies + 5;
        else if (joined)
            fake.fail_len_over = BLK;
        else
            fake.fail_submit_at = fake.copies + 5;
        th = copies_to_host;
        bt = batch_to_host_calls;
        TW_ASSERT_OK(tw_batch_put(c, items, N));
        fake.fail_submit_at = fake.fail_complete_at = -1;
        fake.fail_len_over = 0;
        if (joined)
            TW_ASSERT(copies_to_host - th <= 1 && fake.len_refusals - refusals0 == 1);
        else
            TW_ASSERT_EQ(copies_to_host - th, (unsigned)at_completion);
        TW_ASSERT_EQ(batch_to_host_calls - bt, 3u); /* 2 without the failure */
        get_slices_and_check(c, items, N, BLK, src, back);
    }
    /* An item of a group that never opens (a bad name fails it before its
     * put starts): its buffer is dropped when the next group forms, which
     * still copies ahead; the other items land. */
    for (int i = 0; i < N; i++)
        items[i].buf = arena + (size_t)i * BLK;
    items[5].name = "st/bad\xff";
    th = copies_to_host;
    bt = batch_to_host_calls;
    int rc = tw_batch_put(c, items, N);
    items[5].name = names[5];
    TW_ASSERT(rc < 0 && items[5].status == rc);
    TW_ASSERT_EQ(copies_to_host, th);
    TW_ASSERT_EQ(batch_to_host_calls - bt, 2u);
    for (int i = 0; i < N; i++)
        if (i != 5)
            TW_ASSERT_EQ(items[i].status, 0);
    get_slices_and_check(c, items, N, BLK, src, back); /* item 5: the same bytes, stored before */
    if (!on_rdma(c)) {
        /* Small gets queue their copies to the device on one stream and
         * wait once per fence; adjacent blocks into adjacent device memory
         * (these slices, in order) share a copy. A copy of one block
         * refused when queued fails its item alone (the blocks laid out
         * backwards: no two copies join); one failing while it runs fails
         * the items queued since the last wait, naming the error; a joined
         * copy refused is made again block by block, and the batch lands
         * whole. Everything else arrives, the connection stays usable,
         * and the next batch is whole. */
        uint8_t *dst = arena + ARENA_LEN / 2;
        uint64_t merged0 = c->stage_joined_gets;
        copies0 = fake.copies;
        TW_ASSERT_OK(tw_batch_get(c, items, N));
        TW_ASSERT(c->stage_joined_gets > merged0);
        TW_ASSERT(fake.copies - copies0 < N);
        fprintf(stderr, "  small batch: %ld copies for %d blocks\n", fake.copies - copies0, N);
        for (int mode = 0; mode < 3; mode++) {
            int backwards = mode == 0, at_completion = mode == 1, joined = mode == 2;
            for (int i = 0; i < N; i++)
                items[i].buf = dst + (size_t)(backwards ? N - 1 - i : i) * BLK;
            memset(back, 0, (size_t)N * BLK);
            dev_write(dst, back, (size_t)N * BLK);
            long refusals0 = fake.len_refusals;
            if (at_completion)
                fake.fail_complete_at = fake.copies + 2;
            else if (joined)
                fake.fail_len_over = BLK;
            else
                fake.fail_submit_at = fake.copies + 10;
            rc = tw_batch_get(c, items, N);
            fake.fail_submit_at = fake.fail_complete_at = -1;
            fake.fail_len_over = 0;
            dev_read(back, dst, (size_t)N * BLK);
            if (joined) {
                TW_ASSERT_OK(rc);
                TW_ASSERT_EQ(fake.len_refusals - refusals0, 1);
                TW_ASSERT_MEM_EQ(back, src, (size_t)N * BLK);
                check_pool_idle(c);
                continue;
            }
            TW_ASSERT_EQ(rc, TW_EINTERNAL);
            TW_ASSERT(strstr(tw_client_last_error_message(c), "injected") != NULL);
            fprintf(stderr, "  small batch, copy %s: %s\n",
                    at_completion ? "failing when it runs" : "refused",
                    tw_client_last_error_message(c));
            int failed = 0;
            for (int i = 0; i < N; i++) {
                size_t at = (size_t)(backwards ? N - 1 - i : i) * BLK;
                if (items[i].status) {
                    TW_ASSERT_EQ(items[i].status, TW_EINTERNAL);
                    failed++;
                } else {
                    TW_ASSERT_MEM_EQ(back + at, src + (size_t)i * BLK, BLK);
                }
            }
            if (at_completion)
                TW_ASSERT(failed >= 1);
            else
                TW_ASSERT_EQ(failed, 1);
            TW_ASSERT(tw_client_is_connected(c));
            check_pool_idle(c);
            for (int i = 0; i < N; i++)
                items[i].buf = dst + (size_t)i * BLK;
            TW_ASSERT_OK(tw_batch_get(c, items, N));
            dev_read(back, dst, (size_t)N * BLK);
            TW_ASSERT_MEM_EQ(back, src, (size_t)N * BLK);
        }
    }
    for (int i = 0; i < N; i++)
        TW_ASSERT_OK(tw_delete(c, names[i]));
    free(src);
    free(back);
    tw_close(c);
}

/* Puts and gets n device slices of blk bytes `rounds` times through c
 * (content seeded by seed and the round), byte-exact each time: inline,
 * no get copies synchronously to the device; one_group: each put copies
 * its blocks to host memory ahead in one batched call. Pins happen in the
 * first round only; everything pinned is unpinned when c closes (closed
 * here). Returns the first round's pins. */
static long get_waits; /* slice_rounds: whole-stream waits in its batch gets */
/* slice_rounds: registrations the plane made in its batch gets (0 when
 * not on RDMA) */
static unsigned long get_regs;
/* slice_rounds: buffers of the size classes idle after the last round
 * (every one it made), and copies to the device joined in its gets */
static long kept_bufs;
static uint64_t get_merged;

static uint64_t regs_made(tw_client *c)
{
    struct tw_fabric_stats st;
    if (!c->fab)
        return 0;
    tw__fabric_stats(c->fab, &st);
    return st.mrs_made;
}

/* Deletes the n tensors, closes c, and checks that everything pinned
 * since pins0 / unpins0 were read is unpinned. */
static void delete_and_close(tw_client *c, char (*names)[32], int n, long pins0, long unpins0)
{
    for (int i = 0; i < n; i++)
        TW_ASSERT_OK(tw_delete(c, names[i]));
    tw_close(c);
    TW_ASSERT_EQ(fake.pins - pins0, fake.unpins - unpins0);
}

static long slice_rounds(tw_client *c, int n, size_t blk, const char *prefix, int rounds,
                         uint32_t seed, int one_group)
{
    get_waits = 0;
    get_regs = 0;
    uint64_t merged0 = c->stage_joined_gets;
    struct tw_batch_item *items = calloc((size_t)n, sizeof(*items));
    char(*names)[32] = calloc((size_t)n, sizeof(*names));
    uint8_t *src = malloc((size_t)n * blk), *back = malloc((size_t)n * blk);
    TW_ASSERT(items && names && src && back);
    long pins0 = fake.pins, unpins0 = fake.unpins, round1_pins = 0;
    for (int round = 0; round < rounds; round++) {
        fill(src, (size_t)n * blk, seed + (uint32_t)round);
        dev_write(arena, src, (size_t)n * blk);
        slice_items(items, names, n, blk, prefix);
        long p0 = fake.pins;
        unsigned th = copies_to_host, td = copies_to_dev, bt = batch_to_host_calls;
        TW_ASSERT_OK(tw_batch_put(c, items, (size_t)n));
        if (one_group) {
            TW_ASSERT_EQ(copies_to_host, th);
            TW_ASSERT_EQ(batch_to_host_calls - bt, 1u);
        }
        long w0 = fake.stream_waits;
        uint64_t m0 = regs_made(c);
        get_slices_and_check(c, items, n, blk, src, back);
        get_waits += fake.stream_waits - w0;
        get_regs += (unsigned long)(regs_made(c) - m0);
        if (!on_rdma(c))
            TW_ASSERT_EQ(copies_to_dev, td);
        if (round == 0)
            round1_pins = fake.pins - p0;
        else
            TW_ASSERT_EQ(fake.pins, p0); /* every buffer kept, pinned once */
    }
    kept_bufs = 0;
    for (int k = 0; k < TW__STAGE_CLASSES; k++)
        kept_bufs += c->nstage_kept[k];
    get_merged = c->stage_joined_gets - merged0;
    delete_and_close(c, names, n, pins0, unpins0);
    free(items);
    free(names);
    free(src);
    free(back);
    return round1_pins;
}

/* A batch of medium blocks (600 KiB + 5: the 1 MiB size class) from and
 * into device slices: the puts are copied to host memory ahead in one
 * group, the gets' copies queued on the fence stream (inline), the
 * buffers pinned in the first round only and unpinned when the handle
 * closes. Before the size classes every such block took a fresh,
 * unpinned buffer and synchronous copies both ways. */
static void test_batch_of_medium_blocks(void)
{
    enum { N = 12, BLK = 600 * 1024 + 5 };
    long round1_pins = slice_rounds(connect_fake(0), N, BLK, "st/m", 2, 300, 1);
    TW_ASSERT(round1_pins >= 1 && round1_pins <= 2 * N);
    fprintf(stderr, "  %d blocks of %d B: %ld buffers pinned in round 1, none in round 2\n", N,
            (int)BLK, round1_pins);
}

/* A KV cache's blocks (32 KiB) with a batch window of 256: every block in
 * flight and every copy waiting for a fence finds a kept buffer, so only
 * the first round pins (slabs of 64 buffers), inline gets never copy
 * synchronously, and the copy stream is waited for whole only at the end
 * of a batch. With 128 buffers kept (of 256 KiB) each request beyond them
 * pinned and unpinned a buffer of its own, which halved such batches on
 * the H200. Blocks that land next to each other in device memory and in
 * the slab share their copy to the device. */
static void test_batch_wide_window(void)
{
    enum { N = 384, BLK = 32 * 1024 };
    struct tw_client_options o;
    tw_test_client_options(&o);
    o.max_inflight = 256;
    long round1_pins = slice_rounds(connect_opts(&o), N, BLK, "st/w", 3, 500, 0);
    TW_ASSERT(round1_pins >= 1);
    /* A get short of a buffer takes back those of the oldest group of
     * copies done (its event), not the whole stream's: the stream is
     * waited for once per batch, when it ends (6-10 times before). */
    TW_ASSERT(get_waits <= 3);
    /* Over RDMA a buffer is registered for reads once, on its first pull
     * get, and keeps its registration: the 3 batch gets register at most
     * as many times as there are buffers (1152 over tcp, 806-850 over shm,
     * where some gets read without one, when each get registered). */
    TW_ASSERT(kept_bufs >= 1 && get_regs <= (unsigned long)kept_bufs);
    TW_ASSERT(round1_pins <= (kept_bufs + 63) / 64);
    TW_ASSERT(get_merged > 0);
    fprintf(stderr,
            "  %d blocks of %d B, window 256: %ld slabs pinned in round 1 (%ld buffers), none "
            "after; %ld waits for the whole copy stream in 3 batch gets; %lu registrations for "
            "their reads; %llu of %d copies to the device joined to others\n",
            N, (int)BLK, round1_pins, kept_bufs, get_waits, get_regs,
            (unsigned long long)get_merged, 3 * N);

    /* When a run ends, whole idle slabs are freed until the idle bytes of
     * the small classes are within their bound (here 3 MiB: one slab of
     * 2 MiB stays); the next batch takes new ones and is whole. */
    tw_client *c = connect_opts(&o);
    c->stage_small_idle = (size_t)3 << 20;
    static struct tw_batch_item items[N];
    static char names[N][32];
    uint8_t *src = malloc((size_t)N * BLK), *back = malloc((size_t)N * BLK);
    TW_ASSERT(src && back);
    long pins0 = fake.pins, unpins0 = fake.unpins;
    long round_pins[2];
    for (int round = 0; round < 2; round++) {
        long p0 = fake.pins;
        fill(src, (size_t)N * BLK, 600 + (uint32_t)round);
        dev_write(arena, src, (size_t)N * BLK);
        slice_items(items, names, N, BLK, "st/t");
        TW_ASSERT_OK(tw_batch_put(c, items, N));
        get_slices_and_check(c, items, N, BLK, src, back);
        TW_ASSERT_EQ(fake.pins - pins0 - (fake.unpins - unpins0), 1); /* one slab left */
        TW_ASSERT((size_t)c->nstage_kept[0] * BLK <= c->stage_small_idle);
        TW_ASSERT(c->nstage_kept[0] >= 1);
        round_pins[round] = fake.pins - p0;
    }
    /* Round 2 had more than one slab's buffers in flight at once (a window
     * of 256): it pinned again what round 1's end had freed. */
    TW_ASSERT(round_pins[0] >= 2 && round_pins[1] >= 1);
    delete_and_close(c, names, N, pins0, unpins0);
    free(src);
    free(back);
}

/* The default window (max_inflight 0, engine.c batch_window) for device
 * blocks: wide (more than 64 in flight) once most of a batch's blocks went
 * by RDMA, staged through host buffers; narrow inline. */
static void test_batch_default_window(void)
{
    enum { N = 384, BLK = 32 * 1024 };
    tw_client *c = connect_fake(0);
    static struct tw_batch_item items[N];
    static char names[N][32];
    uint8_t *src = malloc((size_t)N * BLK), *back = malloc((size_t)N * BLK);
    TW_ASSERT(src && back);
    long pins0 = fake.pins, unpins0 = fake.unpins;
    fill(src, (size_t)N * BLK, 900);
    dev_write(arena, src, (size_t)N * BLK);
    slice_items(items, names, N, BLK, "st/d");
    TW_ASSERT_OK(tw_batch_put(c, items, N));
    size_t put_peak = c->run_peak;
    get_slices_and_check(c, items, N, BLK, src, back);
    size_t get_peak = c->run_peak;
    fprintf(stderr,
            "  %d device blocks (%s), default window: at most %zu puts, %zu gets in flight\n", N,
            tw_client_data_plane(c), put_peak, get_peak);
    if (on_rdma(c)) {
        TW_ASSERT(put_peak > TW__WINDOW_NARROW && put_peak <= TW__WINDOW_WIDE);
        TW_ASSERT(get_peak > TW__WINDOW_NARROW && get_peak <= TW__WINDOW_WIDE);
    } else {
        TW_ASSERT(put_peak <= TW__WINDOW_NARROW);
        TW_ASSERT(get_peak <= TW__WINDOW_NARROW);
    }
    delete_and_close(c, names, N, pins0, unpins0);
    free(src);
    free(back);
}

/* A copy to the device failing at chunk k of a get: inline, the 6th
 * frame's copy (64 KiB frames); RDMA, the pipeline's copy of chunk k (16
 * chunks of 64 KiB), refused when queued or failing when it runs, for k at
 * the first, a middle and the last chunk. The get fails with the copy's
 * code, the connection stays usable, no pool slot, stream or event is left,
 * the next get is byte-exact. Repeated failures must not starve the pool. */
static void test_copy_failures(void)
{
    tw_client *c = connect_fake(64 * 1024);
    const size_t n = 1u << 20;
    uint8_t *src = malloc(n), *back = malloc(n);
    fill(src, n, 9);
    struct tw_tensor_desc d = {.dtype = TW_U8, .ndim = 1, .shape = {n}};
    TW_ASSERT_OK(tw_put(c, "st/f", &d, src, n)); /* from host memory */
    uint8_t *dst = arena + 4096;
    if (!on_rdma(c)) {
        /* 16 frames, each frame's copy queued on the request's stream (the
         * host buffer is pinned): the 6th refused or failing, the last
         * (queued when the request ends) refused. */
        for (int at_completion = 0; at_completion < 3; at_completion++) {
            if (at_completion == 2)
                fake.fail_submit_at = fake.copies + 15;
            else if (at_completion)
                fake.fail_complete_at = fake.copies + 5;
            else
                fake.fail_submit_at = fake.copies + 5;
            TW_ASSERT_ERR(tw_get(c, "st/f", dst, n, NULL), TW_EINTERNAL);
            fprintf(stderr, "  inline get, %s: %s\n",
                    at_completion == 2 ? "last frame"
                    : at_completion    ? "completion"
                                       : "submission",
                    tw_client_last_error_message(c));
            TW_ASSERT(strstr(tw_client_last_error_message(c), "injected") != NULL);
            fake.fail_submit_at = fake.fail_complete_at = -1;
            fail_to_dev_at = -1;
            TW_ASSERT(tw_client_is_connected(c));
            check_pool_idle(c);
        }
    } else {
        const long ks[] = {0, 5, 15};
        for (int round = 0; round < 3; round++) {
            for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++) {
                for (int at_completion = 0; at_completion < 2; at_completion++) {
                    if (at_completion)
                        fake.fail_complete_at = fake.copies + ks[i];
                    else
                        fake.fail_submit_at = fake.copies + ks[i];
                    TW_ASSERT_ERR(tw_get(c, "st/f", dst, n, NULL), TW_EINTERNAL);
                    if (round == 0)
                        fprintf(stderr, "  rdma get, chunk %ld, %s: %s\n", ks[i],
                                at_completion ? "completion" : "submission",
                                tw_client_last_error_message(c));
                    TW_ASSERT(strstr(tw_client_last_error_message(c), "injected") != NULL);
                    TW_ASSERT(strstr(tw_client_last_error_message(c), "staging chunk") != NULL);
                    fake.fail_submit_at = fake.fail_complete_at = -1;
                    TW_ASSERT(tw_client_is_connected(c));
                    check_pool_idle(c);
                }
            }
        }
    }
    TW_ASSERT(tw_client_is_connected(c));
    TW_ASSERT_OK(tw_get(c, "st/f", dst, n, NULL));
    dev_read(back, dst, n);
    TW_ASSERT_MEM_EQ(back, src, n);
    check_pool_idle(c);

    /* The put's copy from the device fails: nothing is sent or stored. */
    dev_write(arena, src, n);
    fail_to_host_at = (int)copies_to_host;
    TW_ASSERT_ERR(tw_put(c, "st/g", &d, arena, n), TW_EINTERNAL);
    fprintf(stderr, "  put: %s\n", tw_client_last_error_message(c));
    fail_to_host_at = -1;
    TW_ASSERT(tw_client_is_connected(c));
    TW_ASSERT_ERR(tw_stat(c, "st/g", NULL), TW_ENOTFOUND);
    TW_ASSERT_OK(tw_put(c, "st/g", &d, arena, n));
    TW_ASSERT_OK(tw_delete(c, "st/f"));
    TW_ASSERT_OK(tw_delete(c, "st/g"));

    /* A range that leaves its allocation is refused before anything goes. */
    struct tw_tensor_desc d2 = {.dtype = TW_U8, .ndim = 1, .shape = {8192}};
    TW_ASSERT_ERR(tw_put(c, "st/span", &d2, arena + ARENA_LEN - 4096, 8192), TW_EINVAL);
    TW_ASSERT(strstr(tw_client_last_error_message(c), "leaves") != NULL);
    TW_ASSERT(tw_client_is_connected(c));
    free(src);
    free(back);
    tw_close(c);
}

/* With checksums on, a put from the GPU copies to the host buffer chunk by
 * chunk (8 MiB) and folds the descriptor's CRC32C in as each chunk lands:
 * one asynchronous copy per chunk, no whole-buffer copy, and the server
 * (which verifies the CRC) stores it. A copy failing at the second chunk
 * fails the put before anything is sent. */
static void test_put_checksum(void)
{
    struct tw_client_options o;
    tw_test_client_options(&o);
    o.checksum = 1;
    tw_client *c = connect_opts(&o);
    const size_t pc = (size_t)8 << 20;
    size_t sizes[] = {1, 200 * 1024, 300 * 1024, pc - 1, pc, pc + 1, (9u << 20) + 5};
    uint8_t *src = malloc(ARENA_LEN / 2), *back = malloc(ARENA_LEN / 2);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t n = sizes[i];
        fill(src, n, (uint32_t)(100 + i));
        dev_write(arena, src, n);
        struct tw_tensor_desc d = {.dtype = TW_U8, .ndim = 1, .shape = {n}};
        unsigned th = copies_to_host;
        long before = fake.copies;
        TW_ASSERT_OK(tw_put(c, "st/crc", &d, arena, n));
        /* Every host buffer is pinned (a size class's up to 8 MiB, the
         * spare above): no synchronous copy at any size. */
        TW_ASSERT_EQ(copies_to_host, th);
        TW_ASSERT_EQ(fake.copies - before, (long)tw__staging_nchunks(n, pc));
        memset(back, 0, n);
        TW_ASSERT_OK(tw_get(c, "st/crc", back, n, NULL)); /* verified against the CRC */
        TW_ASSERT_MEM_EQ(back, src, n);
        check_pool_idle(c);
    }
    TW_ASSERT_OK(tw_delete(c, "st/crc"));
    struct tw_tensor_desc d = {.dtype = TW_U8, .ndim = 1, .shape = {(9u << 20) + 5}};
    fake.fail_complete_at = fake.copies + 1;
    TW_ASSERT_ERR(tw_put(c, "st/crc2", &d, arena, (9u << 20) + 5), TW_EINTERNAL);
    fprintf(stderr, "  put with crc: %s\n", tw_client_last_error_message(c));
    fake.fail_complete_at = -1;
    TW_ASSERT(strstr(tw_client_last_error_message(c), "injected") != NULL);
    TW_ASSERT(tw_client_is_connected(c));
    TW_ASSERT_ERR(tw_stat(c, "st/crc2", NULL), TW_ENOTFOUND);
    check_pool_idle(c);
    free(src);
    free(back);
    tw_close(c);
}

int main(void)
{
    fake_reset();
    setenv("TW_STAGING_CHUNK", "65536", 1); /* read when a handle makes its pool */
    arena = mmap(NULL, ARENA_LEN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    TW_ASSERT(arena != MAP_FAILED);
    tw_test_server_start(&srv, NULL);
    TW_RUN(test_round_trips);
    TW_RUN(test_batch_of_slices);
    TW_RUN(test_batch_of_medium_blocks);
    TW_RUN(test_batch_wide_window);
    TW_RUN(test_batch_default_window);
    TW_RUN(test_copy_failures);
    TW_RUN(test_put_checksum);
    tw_test_server_stop(&srv);
    munmap(arena, ARENA_LEN);
    TW_DONE();
}
