/*
 * The client's GPUDirect rows (issue 12) without a GPU: a fake CUDA memory
 * kind claims one host arena as "device memory" of cuda:0, and a stand-in
 * for the admission table (c->gdr_fake) admits it and counts the flushes.
 * The plane then registers the arena directly (as host memory: the stand-in
 * says register_as_host, since libfabric here has no CUDA), exactly where
 * real GPU memory would be registered with FI_HMEM_CUDA. Against a real
 * tensorwired over RDMA (tcp, shm; cmake/parts/client.cmake):
 *
 *  - a get into the arena is `gdr push` over tcp: the client sends the
 *    second RDMA_REGISTER and the server writes (its STATS count an rdma
 *    push); over shm, where TENSOR_INFO says the tensor is in the server's
 *    host memory, it stages instead (STAGED_SHM_HOST_SOURCE);
 *    with --push always `gdr push`, with never `gdr pull` over tcp and
 *    `rdma pull + staging` over shm (STAGED_SHM_PULL: shm's read into GPU
 *    memory completes before the peer's CUDA copy lands); no staging copy
 *    runs on the gdr rows, the flush runs once before the get returns,
 *    byte-exact; with a checksum the CRC is read back through the kind;
 *  - a put from the arena has no staging copy and is byte-exact: `gdr pull`
 *    (the server reads: over shm by cross-memory attach, since the arena is
 *    host memory of this process; real GPU memory is pushed there);
 *  - a refused verdict stages and tw_client_data_plane says why;
 *  - a failing flush fails the get with its code, the connection lives on;
 *  - a small get the server answers inline stages instead of receiving
 *    DATA into "GPU memory" (tw__path_follow_inline), and so does a small
 *    put: staged to the host before its DATA.
 * Exits 77 without TW_TEST_FABRIC (no RDMA plane, nothing to test).
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
static unsigned copies_to_host, copies_to_dev, flushes;
static int flush_rc;

static int fake_query(uintptr_t addr, size_t len, struct tw_mem_attr *attr, char *err,
                      size_t errlen)
{
    return tw_test_arena_query((uintptr_t)arena, ARENA_LEN, addr, len, attr, err, errlen);
}

static int fake_to_host(void *dst, uintptr_t src, size_t len, const struct tw_mem_attr *attr,
                        char *err, size_t errlen)
{
    copies_to_host++;
    memcpy(dst, (const void *)src, len);
    return 0;
}

static int fake_from_host(uintptr_t dst, const void *src, size_t len,
                          const struct tw_mem_attr *attr, char *err, size_t errlen)
{
    copies_to_dev++;
    memcpy((void *)dst, src, len);
    return 0;
}

static const struct tw_memkind_ops fake_cuda = {
    .kind = TW_MEMKIND_CUDA,
    .name = "fake-cuda",
    .check_on_hit = 1,
    .query = fake_query,
    .copy_to_host = fake_to_host,
    .copy_from_host = fake_from_host,
    .async = NULL,
};

static int fake_flush(void *arg, int device)
{
    TW_ASSERT_EQ(device, 0);
    flushes++;
    return flush_rc;
}

static struct tw__client_gdr_fake admit = {
    .admitted = 1, .flush_needed = 1, .flush = fake_flush, .register_as_host = 1};
static struct tw__client_gdr_fake refuse = {.admitted = 0, .register_as_host = 1};

static tw_client *connect_push(const struct tw__client_gdr_fake *fake, int checksum, int push)
{
    struct tw_client_options o;
    tw_client *c = NULL;
    tw_test_client_options(&o);
    o.push = push;
    o.checksum = checksum;
    TW_ASSERT_OK(tw_client_connect(srv.addr, &o, &c));
    TW_ASSERT(strncmp(tw_client_fabric_status(c), "rdma ", 5) == 0);
    c->memkinds[TW_MEMKIND_CUDA] = &fake_cuda;
    c->gdr_fake = fake;
    return c;
}

static tw_client *connect_gdr(const struct tw__client_gdr_fake *fake, int checksum)
{
    return connect_push(fake, checksum, TW_PUSH_AUTO);
}

static uint64_t stat_of(tw_client *c, const char *key)
{
    return tw_test_stat(c, key, 0);
}

static int over_shm(void)
{
    const char *f = getenv("TW_TEST_FABRIC");
    return f && strcmp(f, "shm") == 0;
}

static void test_get_put(int checksum)
{
    tw_client *c = connect_gdr(&admit, checksum);
    size_t sizes[] = {4096, (1u << 20) + 3, 9u << 20};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t n = sizes[i];
        uint8_t *src = malloc(n), *back = malloc(n);
        tw_test_fill(src, n, (uint32_t)i + 11);
        struct tw_tensor_desc d = {.dtype = TW_U8, .ndim = 1, .shape = {n}}, got;
        TW_ASSERT_OK(tw_put(c, "gdr/t", &d, src, n)); /* from host memory */

        /* Get into "GPU memory": the server pushes, nothing stages. */
        uint8_t *dst = arena + ARENA_LEN / 2 + 12345;
        memset(dst, 0, n);
        unsigned th = copies_to_host, td = copies_to_dev, fl = flushes;
        uint64_t pushes = stat_of(c, "path_rdma_push");
        TW_ASSERT_OK(tw_get(c, "gdr/t", dst, n, &got));
        fprintf(stderr, "  get %zu B: %s\n", n, tw_client_data_plane(c));
        unsigned pieces = checksum ? (unsigned)((n + (4u << 20) - 1) / (4u << 20)) : 0;
        if (over_shm()) {
            /* TENSOR_INFO says the tensor is in the server's host memory:
             * over shm that stages (STAGED_SHM_HOST_SOURCE: shm would write
             * host memory into GPU memory through its bounce buffers). */
            TW_ASSERT(strncmp(tw_client_data_plane(c),
                              "rdma pull (shm) + staging (not GPUDirect: GPU destination over shm, "
                              "source in host memory",
                              88) == 0);
            TW_ASSERT(copies_to_dev > td);
            TW_ASSERT_EQ(flushes, fl);
            TW_ASSERT_EQ_U64(stat_of(c, "path_rdma_push"), pushes);
        } else {
            /* The server writes (tw__path_decide: PUSH_GPUDIRECT). */
            TW_ASSERT(strncmp(tw_client_data_plane(c), "gdr push (", 10) == 0);
            TW_ASSERT_EQ(copies_to_dev, td);
            /* The CRC, when asked for, is read back through the kind in 4
             * MiB pieces. */
            TW_ASSERT_EQ(copies_to_host, th + pieces);
            TW_ASSERT_EQ(flushes, fl + 1);
            /* The server wrote: it saw our RDMA_REGISTER before RDMA_READY. */
            TW_ASSERT_EQ_U64(stat_of(c, "path_rdma_push"), pushes + 1);
        }
        TW_ASSERT_EQ_U64(got.byte_length, n);
        TW_ASSERT_MEM_EQ(dst, src, n);

        /* Put from "GPU memory": registered directly, nothing stages. */
        uint8_t *gsrc = arena + 4096 + 7;
        tw_test_fill(gsrc, n, (uint32_t)i + 99);
        th = copies_to_host;
        td = copies_to_dev;
        TW_ASSERT_OK(tw_put(c, "gdr/u", &d, gsrc, n));
        fprintf(stderr, "  put %zu B: %s\n", n, tw_client_data_plane(c));
        /* The server reads: over tcp as always, and over shm because this
         * "GPU memory" is host memory it can copy out of our process by
         * cross-memory attach (PULL_SHM_CMA). Real GPU memory is not
         * readable that way and is pushed (test_gpu_staging_shm_auto). */
        TW_ASSERT(strncmp(tw_client_data_plane(c), "gdr pull (", 10) == 0);
        TW_ASSERT_EQ(copies_to_dev, td);
        TW_ASSERT_EQ(copies_to_host, th + pieces);
        memset(back, 0, n);
        TW_ASSERT_OK(tw_get(c, "gdr/u", back, n, NULL)); /* into host memory */
        TW_ASSERT(strncmp(tw_client_data_plane(c), "rdma ", 5) == 0);
        TW_ASSERT_MEM_EQ(back, gsrc, n);
        free(src);
        free(back);
    }
    TW_ASSERT_OK(tw_delete(c, "gdr/t"));
    TW_ASSERT_OK(tw_delete(c, "gdr/u"));
    tw_close(c);
}

static void test_get_put_plain(void)
{
    test_get_put(0);
}

static void test_get_put_checksum(void)
{
    test_get_put(1);
}

/* --push always and never: the server writes into "GPU memory"; or, with
 * never, the client reads into it (tcp) or stages (shm: no pull into GPU
 * memory there, STAGED_SHM_PULL). */
static void test_push_always_never(void)
{
    const size_t n = (2u << 20) + 5;
    uint8_t *src = malloc(n);
    tw_test_fill(src, n, 21);
    struct tw_tensor_desc d = {.dtype = TW_U8, .ndim = 1, .shape = {n}};
    for (int always = 1; always >= 0; always--) {
        tw_client *c = connect_push(&admit, 0, always ? TW_PUSH_ALWAYS : TW_PUSH_NEVER);
        TW_ASSERT_OK(tw_put(c, "gdr/a", &d, src, n));
        memset(arena, 0, n);
        unsigned td = copies_to_dev, fl = flushes;
        uint64_t pushes = stat_of(c, "path_rdma_push");
        TW_ASSERT_OK(tw_get(c, "gdr/a", arena, n, NULL));
        fprintf(stderr, "  push %s: %s\n", always ? "always" : "never", tw_client_data_plane(c));
        int staged = !always && over_shm();
        if (staged) {
            TW_ASSERT(strncmp(tw_client_data_plane(c),
                              "rdma pull (shm) + staging (not GPUDirect: ", 42) == 0);
            TW_ASSERT(copies_to_dev > td);
            TW_ASSERT_EQ(flushes, fl);
        } else {
            TW_ASSERT(strncmp(tw_client_data_plane(c), always ? "gdr push (" : "gdr pull (", 10) ==
                      0);
            TW_ASSERT_EQ(copies_to_dev, td);
            TW_ASSERT_EQ(flushes, fl + 1);
        }
        TW_ASSERT_EQ_U64(stat_of(c, "path_rdma_push"), pushes + (always ? 1 : 0));
        TW_ASSERT_MEM_EQ(arena, src, n);
        TW_ASSERT_OK(tw_delete(c, "gdr/a"));
        tw_close(c);
    }
    free(src);
}

/* Refused: the same buffer stages, and the plane says why. */
static void test_refused_stages(void)
{
    tw_client *c = connect_gdr(&refuse, 0);
    const size_t n = 1u << 20;
    uint8_t *src = malloc(n);
    tw_test_fill(src, n, 5);
    struct tw_tensor_desc d = {.dtype = TW_U8, .ndim = 1, .shape = {n}};
    TW_ASSERT_OK(tw_put(c, "gdr/r", &d, src, n));
    unsigned td = copies_to_dev, fl = flushes;
    TW_ASSERT_OK(tw_get(c, "gdr/r", arena, n, NULL));
    fprintf(stderr, "  refused: %s\n", tw_client_data_plane(c));
    TW_ASSERT(strstr(tw_client_data_plane(c), "+ staging (not GPUDirect: refused by") != NULL);
    TW_ASSERT(copies_to_dev > td);
    TW_ASSERT_EQ(flushes, fl);
    TW_ASSERT_MEM_EQ(arena, src, n);
    TW_ASSERT_OK(tw_delete(c, "gdr/r"));
    free(src);
    tw_close(c);
}

/* A flush that fails fails the get (docs/protocol.md §10); the connection
 * and the next get are fine. Push always: over shm a get of a host tensor
 * would stage under auto (no flush then). */
static void test_flush_failure(void)
{
    tw_client *c = connect_push(&admit, 0, TW_PUSH_ALWAYS);
    const size_t n = 256u << 10;
    uint8_t *src = malloc(n);
    tw_test_fill(src, n, 6);
    struct tw_tensor_desc d = {.dtype = TW_U8, .ndim = 1, .shape = {n}};
    TW_ASSERT_OK(tw_put(c, "gdr/f", &d, src, n));
    flush_rc = TW_EDEVICE;
    TW_ASSERT_ERR(tw_get(c, "gdr/f", arena, n, NULL), TW_EDEVICE);
    fprintf(stderr, "  flush failure: %s\n", tw_client_last_error_message(c));
    TW_ASSERT(strstr(tw_client_last_error_message(c), "visible") != NULL);
    flush_rc = 0;
    TW_ASSERT(tw_client_is_connected(c));
    memset(arena, 0, n);
    TW_ASSERT_OK(tw_get(c, "gdr/f", arena, n, NULL));
    TW_ASSERT_MEM_EQ(arena, src, n);
    TW_ASSERT_OK(tw_delete(c, "gdr/f"));
    free(src);
    tw_close(c);
}

/* The server answers a small get inline (its --rdma-min-bytes): "GPU
 * memory" cannot take DATA frames, so the client stages. */
static void test_inline_answer_stages(void)
{
    tw_client *c = connect_gdr(&admit, 0);
    const size_t n = 4000;
    uint8_t src[4000];
    tw_test_fill(src, n, 8);
    struct tw_tensor_desc d = {.dtype = TW_U8, .ndim = 1, .shape = {n}};
    TW_ASSERT_OK(tw_put(c, "gdr/s", &d, src, n));
    unsigned td = copies_to_dev;
    memset(arena, 0, n);
    TW_ASSERT_OK(tw_get(c, "gdr/s", arena, n, NULL));
    fprintf(stderr, "  small get: %s\n", tw_client_data_plane(c));
    TW_ASSERT(strncmp(tw_client_data_plane(c), "inline tcp", 10) == 0);
    TW_ASSERT(strstr(tw_client_data_plane(c), "+ staging") != NULL);
    TW_ASSERT(copies_to_dev > td);
    TW_ASSERT_MEM_EQ(arena, src, n);
    TW_ASSERT_OK(tw_delete(c, "gdr/s"));
    tw_close(c);
}

/* A small put from "GPU memory" that the server answers inline (its
 * --rdma-min-bytes), after the client registered the buffer behind its
 * TENSOR_PUT (bit 6): the registration is dropped and the bytes are staged
 * to the host before they go as DATA, not read from the device pointer. */
static void test_inline_put_answer_stages(void)
{
    tw_client *c = connect_gdr(&admit, 1);
    TW_ASSERT(c->sm.caps & TW_CAP_EAGER_RDMA_PUT);
    const size_t n = 4000;
    uint8_t back[4000];
    tw_test_fill(arena, n, 9);
    unsigned th = copies_to_host;
    struct tw_tensor_desc d = {.dtype = TW_U8, .ndim = 1, .shape = {n}};
    TW_ASSERT_OK(tw_put(c, "gdr/p", &d, arena, n));
    fprintf(stderr, "  small put: %s\n", tw_client_data_plane(c));
    TW_ASSERT(strncmp(tw_client_data_plane(c), "inline tcp", 10) == 0);
    TW_ASSERT(strstr(tw_client_data_plane(c), "+ staging") != NULL);
    TW_ASSERT(copies_to_host > th);
    TW_ASSERT_OK(tw_get(c, "gdr/p", back, n, NULL));
    TW_ASSERT_MEM_EQ(back, arena, n);
    TW_ASSERT_OK(tw_delete(c, "gdr/p"));
    tw_close(c);
}

int main(void)
{
    const char *f = getenv("TW_TEST_FABRIC");
    if (!f || !*f) {
        fprintf(stderr, "SKIP: needs TW_TEST_FABRIC (an rdma plane)\n");
        return 77;
    }
    arena = mmap(NULL, ARENA_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    TW_ASSERT(arena != MAP_FAILED);
    static const char *const big[] = {NULL};
    tw_test_server_start(&srv, big);
    TW_RUN(test_get_put_plain);
    TW_RUN(test_get_put_checksum);
    TW_RUN(test_push_always_never);
    TW_RUN(test_refused_stages);
    TW_RUN(test_flush_failure);
    tw_test_server_stop(&srv);
    /* Again with a server that answers gets below 64 KiB inline. */
    static const char *const small_inline[] = {"--rdma-min-bytes", "65536", NULL};
    tw_test_server_start(&srv, small_inline);
    TW_RUN(test_inline_answer_stages);
    TW_RUN(test_inline_put_answer_stages);
    tw_test_server_stop(&srv);
    munmap(arena, ARENA_LEN);
    TW_DONE();
}
