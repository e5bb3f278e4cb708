/*
 * The client's staging planes (src/client/dp_staging.c) without a GPU: a
 * fake CUDA memory kind claims one host arena as "device memory" and is
 * installed in the handle's memory-kind table. The arena is PROT_NONE
 * except inside the fake kind's copies, so a plane that touched device
 * memory directly (recv into it, a CRC over it) would crash the test.
 * Against a real tensorwired, inline and over RDMA (cmake/parts/client.cmake):
 * round trips byte-exact with "+ staging" in the plane, a batch of device
 * slices, a copy failing at chunk k of a get and at the put's copy (the
 * request fails with the copy's code, the connection stays usable, nothing
 * is stored), and a range that leaves its allocation. Links the internal
 * library (it sets c->memkinds).
 */
#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>

#include "client/client_internal.h"
#include "integration/server_fixture.h"
#include "mem/fake_arena.h"
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

static int fake_query(uintptr_t addr, size_t len, struct tw_mem_attr *attr, char *err,
                      size_t errlen)
{
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

static const struct tw_memkind_ops fake_cuda = {
    .kind = TW_MEMKIND_CUDA,
    .name = "fake-cuda",
    .check_on_hit = 1,
    .query = fake_query,
    .copy_to_host = fake_to_host,
    .copy_from_host = fake_from_host,
    .async = NULL, /* nothing to pin */
};

#define fill tw_test_fill

static tw_client *connect_fake(uint32_t max_frame)
{
    struct tw_client_options o;
    tw_client *c = NULL;
    tw_test_client_options(&o);
    if (max_frame)
        o.max_frame = max_frame;
    TW_ASSERT_OK(tw_client_connect(srv.addr, &o, &c));
    c->memkinds[TW_MEMKIND_CUDA] = &fake_cuda;
    return c;
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
    size_t sizes[] = {1, 4096, (1u << 20) + 3, 9u << 20};
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
        TW_ASSERT_OK(tw_get(c, "st/t", dst, n, &got));
        TW_ASSERT(strstr(tw_client_data_plane(c), "+ staging") != NULL);
        TW_ASSERT(copies_to_dev > td);
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
    TW_ASSERT_OK(tw_delete(c, "st/t"));
    tw_close(c);
}

static void test_batch_of_slices(void)
{
    tw_client *c = connect_fake(0);
    enum { N = 64, BLK = 32 * 1024 };
    static struct tw_batch_item items[N];
    static char names[N][32];
    uint8_t *src = malloc((size_t)N * BLK), *back = malloc((size_t)N * BLK);
    fill(src, (size_t)N * BLK, 77);
    dev_write(arena, src, (size_t)N * BLK);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "st/b%d", i);
        items[i] = (struct tw_batch_item){.name = names[i],
                                          .desc = {.dtype = TW_U8, .ndim = 1, .shape = {BLK}},
                                          .buf = arena + (size_t)i * BLK,
                                          .len = BLK};
    }
    TW_ASSERT_OK(tw_batch_put(c, items, N));
    for (int i = 0; i < N; i++)
        items[i].buf = arena + ARENA_LEN / 2 + (size_t)i * BLK;
    TW_ASSERT_OK(tw_batch_get(c, items, N));
    dev_read(back, arena + ARENA_LEN / 2, (size_t)N * BLK);
    TW_ASSERT_MEM_EQ(back, src, (size_t)N * BLK);
    for (int i = 0; i < N; i++)
        TW_ASSERT_OK(tw_delete(c, names[i]));
    free(src);
    free(back);
    tw_close(c);
}

/* A copy to the device failing at chunk k of an inline get (64 KiB frames:
 * 16 chunks of 1 MiB; on RDMA the one copy after the read): the get fails
 * with the copy's code, the connection stays usable, the next get works. */
static void test_copy_failures(void)
{
    tw_client *c = connect_fake(64 * 1024);
    const size_t n = 1u << 20;
    uint8_t *src = malloc(n), *back = malloc(n);
    fill(src, n, 9);
    struct tw_tensor_desc d = {.dtype = TW_U8, .ndim = 1, .shape = {n}};
    TW_ASSERT_OK(tw_put(c, "st/f", &d, src, n)); /* from host memory */
    uint8_t *dst = arena + 4096;
    fail_to_dev_at = (int)copies_to_dev + (strncmp(tw_client_data_plane(c), "inline", 6) ? 0 : 5);
    TW_ASSERT_ERR(tw_get(c, "st/f", dst, n, NULL), TW_EINTERNAL);
    fprintf(stderr, "  get: %s\n", tw_client_last_error_message(c));
    TW_ASSERT(strstr(tw_client_last_error_message(c), "injected failure") != NULL);
    fail_to_dev_at = -1;
    TW_ASSERT(tw_client_is_connected(c));
    TW_ASSERT_OK(tw_get(c, "st/f", dst, n, NULL));
    dev_read(back, dst, n);
    TW_ASSERT_MEM_EQ(back, src, n);

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

int main(void)
{
    arena = mmap(NULL, ARENA_LEN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    TW_ASSERT(arena != MAP_FAILED);
    tw_test_server_start(&srv, NULL);
    TW_RUN(test_round_trips);
    TW_RUN(test_batch_of_slices);
    TW_RUN(test_copy_failures);
    tw_test_server_stop(&srv);
    munmap(arena, ARENA_LEN);
    TW_DONE();
}
