/*
 * A CUDA copy failing in the middle of a staged transfer, on a real GPU
 * (issue 11): the test-only hook of src/gpu/cuda.h refuses one copy of
 * CUDA memory, as a driver error would.
 *
 *   client side (this process, tw__cuda_test_fail_at): a get into GPU
 *     memory fails at a middle chunk (RDMA: the pipelined pull's copy of
 *     chunk 4 of 9; inline: the third DATA frame's copy), three times in a
 *     row; a put from GPU memory fails at its copy (with a checksum: at
 *     chunk 3 of 9 of its chunked copy). Then the same transfer
 *     on the same connection is byte-exact, and the pinned pool has every
 *     slot free (nothing leaked by the failed pipelines);
 *   server side (a tensorwired started with TW_TEST_CUDA_FAIL_AT_CHUNK=k):
 *     a get of a cuda:0 tensor fails at its copy (inline: the third
 *     frame's), a put to cuda:0 at its copy into the GPU (RDMA: the
 *     pipelined pull's copy of chunk 3 of 9). Then the same
 *     transfer on the same connection is byte-exact, and STATS says one
 *     staged failure, no staging pin held, no host staging copy left
 *     (cpu reserved_bytes 0).
 *
 * Runs over inline and, through TW_TEST_FABRIC, RDMA tcp / shm, with
 * GPUDirect off on both sides (a shm that registers CUDA memory would
 * move GPU memory without copies to fail). Links the
 * internal library (the hook's setter, the client's pool counters). Exits
 * 77 (SKIPPED) without a CUDA driver or device.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "client/client_internal.h"
#include "gpu/cuda.h"
#include "integration/server_fixture.h"
#include "mem/staging.h"
#include "tensorwire/tensorwire.h"
#include "tw_test.h"

/* 9 chunks of the client pool's 8 MiB, 5 inline frames of 16 MiB. */
#define N (((size_t)64 << 20) + 12345)

static int rdma(void)
{
    const char *f = getenv("TW_TEST_FABRIC");
    return f && *f;
}

#define fill tw_test_fill

static uint64_t stat_value(tw_client *c, const char *key)
{
    struct tw_stat_entry *st = NULL;
    size_t n = 0;
    TW_ASSERT_OK(tw_stats(c, &st, &n));
    uint64_t v = UINT64_MAX;
    for (size_t i = 0; i < n; i++)
        if (strcmp(st[i].key, key) == 0)
            v = st[i].value;
    tw_stats_free(st);
    if (v == UINT64_MAX)
        TW_FAIL("STATS has no %s", key);
    return v;
}

static void check_pool_idle(tw_client *c)
{
    if (!c->stage_pool)
        return;
    TW_ASSERT_EQ(tw__staging_pool_free_slots(c->stage_pool), tw__staging_pool_slots(c->stage_pool));
}

static void dev_zero(void *dev, size_t n)
{
    uint8_t *z = calloc(1, n);
    TW_ASSERT_OK(tw_mem_copy(dev, z, n));
    free(z);
}

static void check_dev(const void *dev, const uint8_t *want, size_t n)
{
    uint8_t *back = malloc(n);
    TW_ASSERT_OK(tw_mem_copy(back, dev, n));
    TW_ASSERT_MEM_EQ(back, want, n);
    free(back);
}

/* A client that stages GPU memory (GPUDirect off): where the provider
 * registers CUDA memory (shm of a libfabric built with CUDA) GPU memory
 * would otherwise move without the copies this test makes fail. */
static tw_client *connect_opts(struct tw_test_server *srv, int checksum, int inline_only)
{
    struct tw_client_options o;
    tw_client *c = NULL;
    tw_test_client_options(&o);
    o.gpudirect = TW_GPUDIRECT_OFF;
    o.checksum = checksum;
    /* Puts pulled by the server, on every provider: its pipelined copies
     * are the ones counted below (a pushed put has one copy at commit). */
    o.push = TW_PUSH_NEVER;
    if (inline_only)
        o.fabric = NULL;
    TW_ASSERT_OK(tw_client_connect(srv->addr, &o, &c));
    return c;
}

static tw_client *connect_staged(struct tw_test_server *srv, int checksum)
{
    return connect_opts(srv, checksum, 0);
}

static void expect_injected(tw_client *c, int rc, const char *what)
{
    if (rc == 0)
        TW_FAIL("%s succeeded despite the injected CUDA failure", what);
    fprintf(stderr, "  %s: %s: %s\n", what, tw_strerror_name(rc), tw_client_last_error_message(c));
    /* The driver's words reach the caller, from either side. */
    TW_ASSERT(strstr(tw_client_last_error_message(c), "injected failure of CUDA copy") != NULL);
    TW_ASSERT(tw_client_is_connected(c));
}

/* ---- client side ---- */

static void test_client_side(void)
{
    struct tw_test_server srv;
    const char *args[] = {"--devices", "cpu,cuda:0", "--gpudirect", "off", NULL};
    tw_test_server_start(&srv, args);
    tw_client *c = connect_staged(&srv, 0);
    uint8_t *src = malloc(N);
    fill(src, N, 11);
    struct tw_tensor_desc d = {.dtype = TW_U8, .ndim = 1, .shape = {N}};
    TW_ASSERT_OK(tw_put(c, "inj/host", &d, src, N)); /* a cpu tensor */
    void *dev = NULL;
    TW_ASSERT_OK(tw_device_alloc("cuda:0", N, &dev));

    /* A get into GPU memory failing at a middle chunk, three times. */
    for (int i = 0; i < 3; i++) {
        dev_zero(dev, N);
        tw__cuda_test_fail_at(rdma() ? 4 : 2);
        int rc = tw_get(c, "inj/host", dev, N, NULL);
        tw__cuda_test_fail_at(-1);
        expect_injected(c, rc, "client get into cuda:0");
        check_pool_idle(c);
    }
    TW_ASSERT_OK(tw_get(c, "inj/host", dev, N, NULL));
    TW_ASSERT(strstr(tw_client_data_plane(c), "+ staging") != NULL);
    fprintf(stderr, "  then: %s, byte-exact\n", tw_client_data_plane(c));
    check_dev(dev, src, N);
    check_pool_idle(c);

    /* A put from GPU memory failing at its copy: nothing is stored. */
    tw__cuda_test_fail_at(0);
    int rc = tw_put(c, "inj/fromdev", &d, dev, N);
    tw__cuda_test_fail_at(-1);
    expect_injected(c, rc, "client put from cuda:0");
    TW_ASSERT_ERR(tw_stat(c, "inj/fromdev", NULL), TW_ENOTFOUND);
    TW_ASSERT_OK(tw_put(c, "inj/fromdev", &d, dev, N));
    uint8_t *back = malloc(N);
    TW_ASSERT_OK(tw_get(c, "inj/fromdev", back, N, NULL));
    TW_ASSERT_MEM_EQ(back, src, N);
    TW_ASSERT_OK(tw_delete(c, "inj/fromdev"));

    /* With checksums the put copies chunk by chunk (the CRC folded in as
     * each lands): fail at chunk 3 of 9, then the put is stored (the
     * server verifies the CRC) and reads back byte-exact. */
    tw_client *cc = connect_staged(&srv, 1);
    tw__cuda_test_fail_at(3);
    rc = tw_put(cc, "inj/crc", &d, dev, N);
    tw__cuda_test_fail_at(-1);
    expect_injected(cc, rc, "client put from cuda:0 with a checksum");
    TW_ASSERT_ERR(tw_stat(cc, "inj/crc", NULL), TW_ENOTFOUND);
    TW_ASSERT_OK(tw_put(cc, "inj/crc", &d, dev, N));
    memset(back, 0, N);
    TW_ASSERT_OK(tw_get(cc, "inj/crc", back, N, NULL));
    TW_ASSERT_MEM_EQ(back, src, N);
    TW_ASSERT_OK(tw_delete(cc, "inj/crc"));
    tw_close(cc);
    TW_ASSERT_OK(tw_delete(c, "inj/host"));
    TW_ASSERT_EQ_U64(stat_value(c, "reserved_bytes"), 0);
    tw_device_free(dev);
    free(src);
    free(back);
    tw_close(c);
    tw_test_server_stop(&srv);
}

/* ---- server side ---- */

/* A tensorwired whose copy number k fails (its count starts with the
 * process: the first put to cuda:0 is copy 0). */
static void start_failing_server(struct tw_test_server *srv, long k)
{
    char v[32];
    snprintf(v, sizeof(v), "%ld", k);
    const char *args[] = {"--devices", "cpu,cuda:0", "--gpudirect", "off", NULL};
    setenv("TW_TEST_CUDA_FAIL_AT_CHUNK", v, 1);
    tw_test_server_start(srv, args);
    unsetenv("TW_TEST_CUDA_FAIL_AT_CHUNK");
}

static void check_server_clean(tw_client *c)
{
    TW_ASSERT_EQ_U64(stat_value(c, "staged_failed"), 1);
    TW_ASSERT_EQ_U64(stat_value(c, "staged_pins_in_use"), 0);
    TW_ASSERT_EQ_U64(stat_value(c, "staged_pool_reserved"), 0); /* every pipe's slots back */
    TW_ASSERT_EQ_U64(stat_value(c, "staged_pipes_abandoned"), 0);
    TW_ASSERT_EQ_U64(stat_value(c, "reserved_bytes"), 0); /* no host copy left */
    fprintf(stderr, "  server: staged_failed 1, staged_pinned_bytes %llu, pins in use 0\n",
            (unsigned long long)stat_value(c, "staged_pinned_bytes"));
}

/* One server-side case: a server whose copy k fails, a cuda:0 tensor
 * `name` (put first when get: that put is copy 0), the failing request,
 * then the same request byte-exact on the same connection. */
static void server_case(int get, long k)
{
    struct tw_test_server srv;
    const char *name = get ? "inj/ondev" : "inj/todev";
    start_failing_server(&srv, k);
    tw_client *c = connect_staged(&srv, 0);
    uint8_t *src = malloc(N), *back = calloc(1, N);
    fill(src, N, get ? 22 : 33);
    struct tw_tensor_desc d = {.dtype = TW_U8, .ndim = 1, .shape = {N}};
    snprintf(d.device_tag, sizeof(d.device_tag), "cuda:0");
    if (get) {
        /* Put inline: one copy into the GPU (copy 0) on every plane. */
        tw_client *ci = connect_opts(&srv, 0, 1);
        TW_ASSERT_OK(tw_put(ci, name, &d, src, N));
        tw_close(ci);
        expect_injected(c, tw_get(c, name, back, N, NULL), "get of a cuda:0 tensor");
    } else {
        expect_injected(c, tw_put(c, name, &d, src, N), "put to cuda:0");
        TW_ASSERT_ERR(tw_stat(c, name, NULL), TW_ENOTFOUND);
        TW_ASSERT_OK(tw_put(c, name, &d, src, N));
    }
    memset(back, 0, N);
    TW_ASSERT_OK(tw_get(c, name, back, N, NULL));
    TW_ASSERT_MEM_EQ(back, src, N);
    check_server_clean(c);
    TW_ASSERT_OK(tw_delete(c, name));
    free(src);
    free(back);
    tw_close(c);
    tw_test_server_stop(&srv);
}

/* The put first, inline: one copy into the GPU (copy 0); then the get's:
 * inline its frames 1.., fail the third; RDMA its one copy before
 * RDMA_REGISTER (copy 1). */
static void test_server_get(void)
{
    server_case(1, rdma() ? 1 : 3);
}

/* The put's copy into the GPU: inline the one copy at commit; RDMA the
 * pipelined pull's copy of chunk 3 of 9. */
static void test_server_put(void)
{
    server_case(0, rdma() ? 3 : 0);
}

int main(void)
{
    /* Read the (unset) variable now, so the servers' copy of it below
     * never applies to this process. */
    unsetenv("TW_TEST_CUDA_FAIL_AT_CHUNK");
    tw__cuda_test_fail_at(-1);
    void *probe = NULL;
    int rc = tw_device_alloc("cuda:0", 1, &probe);
    if (rc)
        TW_SKIP("no CUDA device here: %s", tw_strerror_name(rc));
    tw_device_free(probe);
    fprintf(stderr, "plane: %s\n", rdma() ? getenv("TW_TEST_FABRIC") : "inline");
    TW_RUN(test_client_side);
    TW_RUN(test_server_get);
    TW_RUN(test_server_put);
    TW_DONE();
}
