/*
 * GPU tensors end to end (issue 11) against a real tensorwired serving
 * cpu and cuda:0: put and get between host and device memory in all four
 * directions (client host/GPU x server cpu/cuda:0), byte-exact, at sizes
 * 1 B, 4 KiB, 4 MiB +-1, 8 MiB +-1, odd sizes and 256 MiB (1 GiB and 4 GiB with
 * TW_TEST_BIG=1); a batch of device blocks (40,960 x 32 KiB with
 * TW_TEST_BIG=1, 4,096 otherwise); a device buffer freed and allocated
 * again (same address when the driver gives it) between two gets; a range
 * that leaves its GPU allocation (refused, the connection stays usable).
 * Runs over inline and, through TW_TEST_FABRIC, RDMA tcp / shm. Public API
 * only. Exits 77 (SKIPPED) without a CUDA driver or device; the
 * *_fakecuda CTest runs give it tests/fakecuda's driver double instead.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorwire/tensorwire.h"
#include "integration/server_fixture.h"
#include "tw_test.h"

static struct tw_test_server srv;
static int big;

static tw_client *connect_default(void)
{
    return tw_test_connect(&srv);
}

/* A device buffer holding n bytes of src (n >= 1). */
static void *dev_from(const uint8_t *src, size_t n)
{
    void *d = NULL;
    TW_ASSERT_OK(tw_device_alloc("cuda:0", n, &d));
    TW_ASSERT_OK(tw_mem_copy(d, src, n));
    return d;
}

/* One server counter (STATS), UINT64_MAX when absent. */
static uint64_t stat_of(tw_client *c, const char *key)
{
    return tw_test_stat(c, key, UINT64_MAX);
}

/* The plane text must say staging exactly when GPU memory is on this side,
 * unless that memory is admitted for GPUDirect on the provider (issue 12:
 * "gdr push (shm)" with a libfabric that registers CUDA memory; never on
 * tcp, a socket provider). */
static void check_plane(tw_client *c, int client_gpu)
{
    const char *p = tw_client_data_plane(c);
    const char *fabric = getenv("TW_TEST_FABRIC");
    if (client_gpu && strncmp(p, "gdr ", 4) == 0) {
        TW_ASSERT(fabric && strcmp(fabric, "tcp") != 0);
        TW_ASSERT(strstr(p, "+ staging") == NULL);
        /* Over shm GPU memory is only ever written (proto/path.c): a get
         * into it is pushed, and a put from it too, since the server
         * cannot copy GPU memory out of our process by cross-memory
         * attach (PULL_SHM_CMA is for host memory: its probe fails). */
        if (strcmp(fabric, "shm") == 0 && strncmp(p, "gdr push (", 10) != 0)
            TW_FAIL("data plane '%s', expected gdr push over shm", p);
        return;
    }
    /* --rdma-min-bytes 0 on both sides: RDMA at every size when asked. */
    const char *want = fabric && *fabric ? "rdma" : "inline";
    if (strncmp(p, want, strlen(want)) != 0)
        TW_FAIL("data plane '%s', expected %s (fabric: %s)", p, want, tw_client_fabric_status(c));
    TW_ASSERT((strstr(p, "+ staging") != NULL) == client_gpu);
}

/* Put from {host, GPU} to server device tag, get back into {host, GPU}. */
static void round_trip(tw_client *c, size_t n, const char *srv_dev, int put_gpu, int get_gpu)
{
    char name[96];
    uint8_t *src = malloc(n), *back = malloc(n + 1);
    TW_ASSERT(src && back);
    tw_test_fill(src, n, (uint32_t)(n * 7 + put_gpu * 3 + get_gpu));
    snprintf(name, sizeof(name), "gpu/%zu/%s/%d%d", n, srv_dev, put_gpu, get_gpu);
    struct tw_tensor_desc d = {.dtype = TW_U8, .ndim = 1, .shape = {n}}, got;
    snprintf(d.device_tag, sizeof(d.device_tag), "%s", srv_dev);
    void *dsrc = put_gpu ? dev_from(src, n) : NULL;
    int rc = tw_put(c, name, &d, put_gpu ? dsrc : src, n);
    if (rc)
        TW_FAIL("put %s: %s: %s", name, tw_strerror_name(rc), tw_client_last_error_message(c));
    check_plane(c, put_gpu);
    tw_device_free(dsrc);
    memset(back, 0, n + 1);
    if (get_gpu) {
        void *ddst = NULL;
        TW_ASSERT_OK(tw_device_alloc("cuda:0", n, &ddst));
        TW_ASSERT_OK(tw_mem_copy(ddst, back, n)); /* zeros */
        rc = tw_get(c, name, ddst, n, &got);
        if (rc)
            TW_FAIL("get %s: %s: %s", name, tw_strerror_name(rc), tw_client_last_error_message(c));
        check_plane(c, 1);
        TW_ASSERT_OK(tw_mem_copy(back, ddst, n));
        tw_device_free(ddst);
    } else {
        rc = tw_get(c, name, back, n + 1, &got);
        if (rc)
            TW_FAIL("get %s: %s: %s", name, tw_strerror_name(rc), tw_client_last_error_message(c));
        check_plane(c, 0);
    }
    TW_ASSERT_EQ_U64(got.byte_length, n);
    TW_ASSERT_STR_EQ(got.device_tag, srv_dev);
    TW_ASSERT_MEM_EQ(back, src, n);
    TW_ASSERT_OK(tw_delete(c, name));
    free(src);
    free(back);
}

static void test_four_directions(void)
{
    tw_client *c = connect_default();
    /* The staging pipe's default chunk, and the client pool's (the
     * pipelined RDMA pull into GPU memory, src/client/dp_staging.c). */
    const size_t chunk = (size_t)4 << 20, pool_chunk = (size_t)8 << 20;
    size_t sizes[] = {1,          4096,           12345,           chunk - 1,
                      chunk,      chunk + 1,      3 * chunk + 777, pool_chunk - 1,
                      pool_chunk, pool_chunk + 1, 256u << 20};
    const char *devs[] = {"cpu", "cuda:0"};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        for (int s = 0; s < 2; s++)
            for (int pg = 0; pg < 2; pg++)
                for (int gg = 0; gg < 2; gg++)
                    round_trip(c, sizes[i], devs[s], pg, gg);
    if (big) {
        round_trip(c, (size_t)1 << 30, "cuda:0", 1, 1);
        round_trip(c, (size_t)1 << 30, "cpu", 1, 0);
        round_trip(c, (size_t)1 << 30, "cuda:0", 0, 1);
        round_trip(c, ((size_t)4 << 30) + 5, "cuda:0", 1, 1);
    }
    tw_close(c);
}

/* Many small device blocks in one batch, as a KV cache moves them: every
 * item is a slice of one device allocation. */
static void test_device_batch(void)
{
    tw_client *c = connect_default();
    const size_t blk = 32u << 10, n = big ? 40960 : 4096;
    uint8_t *host = malloc(blk * n), *back = malloc(blk * n);
    struct tw_batch_item *items = calloc(n, sizeof(*items));
    char(*names)[48] = calloc(n, sizeof(*names));
    TW_ASSERT(host && back && items && names);
    tw_test_fill(host, blk * n, 99);
    uint8_t *dsrc = dev_from(host, blk * n), *ddst = NULL;
    for (size_t i = 0; i < n; i++) {
        snprintf(names[i], sizeof(names[i]), "kv/%zu", i);
        items[i].name = names[i];
        items[i].desc = (struct tw_tensor_desc){.dtype = TW_U8, .ndim = 1, .shape = {blk}};
        snprintf(items[i].desc.device_tag, sizeof(items[i].desc.device_tag), "cuda:0");
        items[i].buf = dsrc + i * blk;
        items[i].len = blk;
    }
    uint64_t q0 = stat_of(c, "staged_async_commits");
    uint64_t t0 = tw_test_now_ns();
    int rc = tw_batch_put(c, items, n);
    if (rc)
        TW_FAIL("batch put: %s: %s", tw_strerror_name(rc), tw_client_last_error_message(c));
    uint64_t t1 = tw_test_now_ns();
    /* The server copies each block into the GPU from a host copy; pulled
     * by RDMA (its reads' completions) or read inline, those copies are
     * queued together, not one synchronous copy per put (a pushed put
     * completes when the client says so, one at a time). */
    char put_plane[128];
    snprintf(put_plane, sizeof(put_plane), "%s", tw_client_data_plane(c));
    uint64_t queued = stat_of(c, "staged_async_commits") - q0;
    fprintf(stderr, "  batch put of %zu device blocks (%s): %llu copies queued\n", n, put_plane,
            (unsigned long long)queued);
    if (!strstr(put_plane, "push"))
        TW_ASSERT(queued >= n / 2);
    TW_ASSERT_OK(tw_device_alloc("cuda:0", blk * n, (void **)&ddst));
    for (size_t i = 0; i < n; i++) {
        items[i].buf = ddst + i * blk;
        items[i].status = 1;
    }
    uint64_t w0 = stat_of(c, "staged_copy_waits");
    uint64_t sp0 = stat_of(c, "rdma_get_spans"), su0 = stat_of(c, "rdma_get_span_gets");
    uint64_t mrs0 = stat_of(c, "rdma_mrs_open");
    rc = tw_batch_get(c, items, n);
    if (rc)
        TW_FAIL("batch get: %s: %s", tw_strerror_name(rc), tw_client_last_error_message(c));
    uint64_t t2 = tw_test_now_ns();
    /* The server never blocks on a block's copy out of the GPU: a frame
     * whose copy still runs waits in its queue while the loop goes on
     * (it blocked for ~4% of them before, 1/6 of its time). */
    uint64_t waits = stat_of(c, "staged_copy_waits") - w0;
    uint64_t spans = stat_of(c, "rdma_get_spans") - sp0;
    uint64_t span_gets = stat_of(c, "rdma_get_span_gets") - su0;
    fprintf(stderr,
            "  batch get: the server blocked on %llu copies; %llu keys shared by %llu gets\n",
            (unsigned long long)waits, (unsigned long long)spans, (unsigned long long)span_gets);
    TW_ASSERT_EQ_U64(waits, 0);
    /* Over tcp the host copies of the blocks lie side by side in the
     * server's pinned slab, and the gets of each run share one key (their
     * RDMA_REGISTERs each wait for their own copy); every key is revoked
     * once its last get ended (STATS answers after the batch's
     * RDMA_DONEs). Over shm the client reads host copies by cross-memory
     * attach: no keys. */
    const char *fabric = getenv("TW_TEST_FABRIC");
    if (fabric && strcmp(fabric, "tcp") == 0) {
        TW_ASSERT(spans >= 1);
        TW_ASSERT(span_gets >= n / 2);
        TW_ASSERT(span_gets >= 2 * spans);
    }
    if (fabric && *fabric)
        TW_ASSERT_EQ_U64(stat_of(c, "rdma_mrs_open"), mrs0);
    for (size_t i = 0; i < n; i++)
        TW_ASSERT_EQ(items[i].status, 0);
    TW_ASSERT_OK(tw_mem_copy(back, ddst, blk * n));
    TW_ASSERT_MEM_EQ(back, host, blk * n);
    fprintf(stderr, "  batch of %zu x %zu B device blocks (%s): put %.3f s, get %.3f s\n", n, blk,
            tw_client_data_plane(c), (double)(t1 - t0) / 1e9, (double)(t2 - t1) / 1e9);
    for (size_t i = 0; i < n; i++)
        TW_ASSERT_OK(tw_delete(c, names[i]));
    tw_device_free(dsrc);
    tw_device_free(ddst);
    free(host);
    free(back);
    free(items);
    free(names);
    tw_close(c);
}

/* A device buffer freed and allocated again between two gets: the second
 * get must land in the new allocation (no stale registration or mapping). */
static void test_realloc_same_address(void)
{
    tw_client *c = connect_default();
    const size_t n = 8u << 20;
    uint8_t *a = malloc(n), *b = malloc(n), *back = malloc(n);
    struct tw_tensor_desc d = {.dtype = TW_U8, .ndim = 1, .shape = {n}};
    tw_test_fill(a, n, 1);
    tw_test_fill(b, n, 2);
    TW_ASSERT_OK(tw_put(c, "re/a", &d, a, n));
    TW_ASSERT_OK(tw_put(c, "re/b", &d, b, n));
    void *d1 = NULL, *d2 = NULL;
    TW_ASSERT_OK(tw_device_alloc("cuda:0", n, &d1));
    TW_ASSERT_OK(tw_get(c, "re/a", d1, n, NULL));
    TW_ASSERT_OK(tw_mem_copy(back, d1, n));
    TW_ASSERT_MEM_EQ(back, a, n);
    tw_device_free(d1);
    TW_ASSERT_OK(tw_device_alloc("cuda:0", n, &d2));
    fprintf(stderr, "  reallocation %s the address\n", d1 == d2 ? "reused" : "did not reuse");
    TW_ASSERT_OK(tw_get(c, "re/b", d2, n, NULL));
    TW_ASSERT_OK(tw_mem_copy(back, d2, n));
    TW_ASSERT_MEM_EQ(back, b, n);
    tw_device_free(d2);
    TW_ASSERT_OK(tw_delete(c, "re/a"));
    TW_ASSERT_OK(tw_delete(c, "re/b"));
    free(a);
    free(b);
    free(back);
    tw_close(c);
}

/* A range that leaves its GPU allocation is refused before anything is
 * sent; the connection stays usable. */
static void test_range_leaves_allocation(void)
{
    tw_client *c = connect_default();
    const size_t n = 1u << 20;
    uint8_t *h = malloc(2 * n);
    tw_test_fill(h, 2 * n, 5);
    void *dv = dev_from(h, n);
    struct tw_tensor_desc d = {.dtype = TW_U8, .ndim = 1, .shape = {2 * n}};
    TW_ASSERT_ERR(tw_put(c, "bad/span", &d, dv, 2 * n), TW_EINVAL);
    fprintf(stderr, "  span: %s\n", tw_client_last_error_message(c));
    TW_ASSERT(tw_client_is_connected(c));
    TW_ASSERT_ERR(tw_stat(c, "bad/span", NULL), TW_ENOTFOUND);
    d.shape[0] = n;
    TW_ASSERT_OK(tw_put(c, "ok/after", &d, dv, n));
    TW_ASSERT_OK(tw_delete(c, "ok/after"));
    tw_device_free(dv);
    free(h);
    tw_close(c);
}

/* Over shm with tensorwired's default thresholds (no --rdma-min-bytes) and
 * the client's (TW_RDMA_MIN_BYTES_AUTO): a GPU tensor that stages follows
 * the host thresholds (it had its own, 512 KiB, before 1430e32 for gets and
 * its successor for puts): gotten by staged RDMA from 32 KiB, put alone by
 * RDMA from 64 KiB (the client's threshold for a put alone), inline below;
 * the server's STATS count the staged RDMA transfers. shm runs only. */
static void test_shm_default_thresholds(void)
{
    const char *fabric = getenv("TW_TEST_FABRIC");
    if (!fabric || strcmp(fabric, "shm") != 0) {
        fprintf(stderr, "  shm runs only\n");
        return;
    }
    char saved[16];
    snprintf(saved, sizeof(saved), "%s", fabric);
    unsetenv("TW_TEST_FABRIC"); /* the fixture would add --rdma-min-bytes 0 */
    struct tw_test_server s2;
    const char *args[] = {"--devices", "cpu,cuda:0", "--fabric", "shm", NULL};
    tw_test_server_start(&s2, args);
    setenv("TW_TEST_FABRIC", saved, 1);
    struct tw_client_options o;
    tw_client_options_init(&o);
    o.fabric = "shm";
    tw_client *c = NULL;
    char err[256];
    int rc = tw_client_connect_error(s2.addr, &o, &c, err, sizeof(err));
    if (rc)
        TW_FAIL("connect %s: %s: %s", s2.addr, tw_strerror_name(rc), err);
    static const struct {
        size_t n;
        const char *put_plane, *get_plane;
    } rows[] = {{(32u << 10) - 1, "inline", "inline"},
                {32u << 10, "inline", "rdma pull (shm)"},
                {(64u << 10) - 1, "inline", "rdma pull (shm)"},
                {64u << 10, "rdma pull (shm)", "rdma pull (shm)"},
                {(512u << 10) - 1, "rdma pull (shm)", "rdma pull (shm)"}};
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        size_t n = rows[i].n;
        uint8_t *src = malloc(n), *back = calloc(1, n);
        TW_ASSERT(src && back);
        tw_test_fill(src, n, (uint32_t)(n + 5));
        struct tw_tensor_desc d = {.dtype = TW_U8, .ndim = 1, .shape = {n}}, got;
        snprintf(d.device_tag, sizeof(d.device_tag), "cuda:0");
        uint64_t puts0 = stat_of(c, "path_rdma_staged");
        TW_ASSERT_OK(tw_put(c, "thr/dev", &d, src, n));
        char put_plane[128];
        snprintf(put_plane, sizeof(put_plane), "%s", tw_client_data_plane(c));
        uint64_t staged0 = stat_of(c, "path_rdma_staged");
        TW_ASSERT_OK(tw_get(c, "thr/dev", back, n, &got));
        const char *get_plane = tw_client_data_plane(c);
        uint64_t staged1 = stat_of(c, "path_rdma_staged");
        fprintf(stderr,
                "  %zu B into cuda:0: put %s, get %s (server path_rdma_staged put +%llu, get "
                "+%llu)\n",
                n, put_plane, get_plane, (unsigned long long)(staged0 - puts0),
                (unsigned long long)(staged1 - staged0));
        TW_ASSERT_MEM_EQ(back, src, n);
        TW_ASSERT(strncmp(put_plane, rows[i].put_plane, strlen(rows[i].put_plane)) == 0);
        TW_ASSERT(strncmp(get_plane, rows[i].get_plane, strlen(rows[i].get_plane)) == 0);
        TW_ASSERT_EQ_U64(staged0 - puts0, strncmp(rows[i].put_plane, "rdma", 4) == 0 ? 1 : 0);
        TW_ASSERT_EQ_U64(staged1 - staged0, strncmp(rows[i].get_plane, "rdma", 4) == 0 ? 1 : 0);
        free(src);
        free(back);
    }
    /* The client's side: a put alone of 64 KiB from its GPU memory stages
     * and goes by RDMA too (it went inline below 512 KiB before). */
    const size_t n = 64u << 10;
    uint8_t *src = malloc(n), *back = calloc(1, n);
    TW_ASSERT(src && back);
    tw_test_fill(src, n, 77);
    void *dsrc = dev_from(src, n);
    struct tw_tensor_desc d = {.dtype = TW_U8, .ndim = 1, .shape = {n}}, got;
    TW_ASSERT_OK(tw_put(c, "thr/fromdev", &d, dsrc, n));
    fprintf(stderr, "  %zu B from cuda:0 into cpu: put %s\n", n, tw_client_data_plane(c));
    TW_ASSERT(strncmp(tw_client_data_plane(c), "rdma pull (shm) + staging", 25) == 0);
    TW_ASSERT_OK(tw_get(c, "thr/fromdev", back, n, &got));
    TW_ASSERT_MEM_EQ(back, src, n);
    tw_device_free(dsrc);
    free(src);
    free(back);
    tw_close(c);
    tw_test_server_stop(&s2);
}

/* A batch put of n device blocks of blk bytes (slices of one allocation)
 * into the server's host memory: how many the server moved by RDMA
 * (rdma_xfers_done), with the client's plane text in plane. Byte-exact. */
static uint64_t batch_put_blocks(tw_client *c, const char *prefix, size_t n, size_t blk, int gpu,
                                 char *plane, size_t plane_len)
{
    uint8_t *host = malloc(blk * n), *back = malloc(blk * n);
    struct tw_batch_item *items = calloc(n, sizeof(*items));
    char(*names)[48] = calloc(n, sizeof(*names));
    TW_ASSERT(host && back && items && names);
    tw_test_fill(host, blk * n, (uint32_t)(n + gpu));
    uint8_t *src = gpu ? dev_from(host, blk * n) : host;
    for (size_t i = 0; i < n; i++) {
        snprintf(names[i], sizeof(names[i]), "%s/%zu", prefix, i);
        items[i].name = names[i];
        items[i].desc = (struct tw_tensor_desc){.dtype = TW_U8, .ndim = 1, .shape = {blk}};
        items[i].buf = src + i * blk;
        items[i].len = blk;
    }
    uint64_t done0 = stat_of(c, "rdma_xfers_done");
    int rc = tw_batch_put(c, items, n);
    if (rc)
        TW_FAIL("batch put: %s: %s", tw_strerror_name(rc), tw_client_last_error_message(c));
    uint64_t moved = stat_of(c, "rdma_xfers_done") - done0;
    snprintf(plane, plane_len, "%s", tw_client_data_plane(c));
    for (size_t i = 0; i < n; i++)
        items[i].buf = back + i * blk;
    TW_ASSERT_OK(tw_batch_get(c, items, n));
    TW_ASSERT_MEM_EQ(back, host, blk * n);
    for (size_t i = 0; i < n; i++)
        TW_ASSERT_OK(tw_delete(c, names[i]));
    if (gpu)
        tw_device_free(src);
    free(host);
    free(back);
    free(items);
    free(names);
    return moved;
}

/* Over tcp with both sides' default thresholds: host memory moves by RDMA
 * from 1 MiB, but GPU memory put in a call that keeps 32 or more in
 * flight (TW_DEEP_PUTS, src/proto/proto.h) goes by staged RDMA from 32
 * KiB (TW_DEFAULT_RDMA_MIN_BYTES_GPU_DEEP: device blocks put 1.25-1.43x
 * faster than inline on an H100 host); tensorwired takes RDMA for puts
 * from 32 KiB unless --rdma-min-bytes says otherwise. A put alone, a batch
 * of 31 and a batch of host blocks stay inline. tcp runs only. */
static void test_tcp_default_thresholds(void)
{
    const char *fabric = getenv("TW_TEST_FABRIC");
    if (!fabric || strcmp(fabric, "tcp") != 0) {
        fprintf(stderr, "  tcp runs only\n");
        return;
    }
    enum { DEEP = 32, BLK = 32 << 10 };
    unsetenv("TW_TEST_FABRIC"); /* the fixture would add --rdma-min-bytes 0 */
    struct tw_test_server s2;
    const char *args[] = {"--devices", "cpu,cuda:0", "--fabric", "tcp", NULL};
    tw_test_server_start(&s2, args);
    setenv("TW_TEST_FABRIC", "tcp", 1);
    struct tw_client_options o;
    tw_client_options_init(&o);
    o.fabric = "tcp";
    tw_client *c = NULL;
    char err[256], plane[128];
    int rc = tw_client_connect_error(s2.addr, &o, &c, err, sizeof(err));
    if (rc)
        TW_FAIL("connect %s: %s: %s", s2.addr, tw_strerror_name(rc), err);
    TW_ASSERT_EQ_U64(tw_client_rdma_min_bytes(c), 1u << 20);
    TW_ASSERT_EQ_U64(stat_of(c, "rdma_min_bytes_put"), BLK);
    uint64_t moved = batch_put_blocks(c, "deep", DEEP, BLK, 1, plane, sizeof(plane));
    fprintf(stderr, "  %d device blocks of 32 KiB: %llu by rdma (%s)\n", DEEP,
            (unsigned long long)moved, plane);
    TW_ASSERT_EQ_U64(moved, DEEP);
    TW_ASSERT(strncmp(plane, "rdma pull (tcp", 14) == 0 && strstr(plane, "+ staging") != NULL);
    moved = batch_put_blocks(c, "shallow", DEEP - 1, BLK, 1, plane, sizeof(plane));
    fprintf(stderr, "  %d device blocks: %llu by rdma (%s)\n", DEEP - 1, (unsigned long long)moved,
            plane);
    TW_ASSERT_EQ_U64(moved, 0);
    TW_ASSERT(strncmp(plane, "inline tcp", 10) == 0 && strstr(plane, "+ staging") != NULL);
    moved = batch_put_blocks(c, "host", DEEP, BLK, 0, plane, sizeof(plane));
    fprintf(stderr, "  %d host blocks: %llu by rdma (%s)\n", DEEP, (unsigned long long)moved,
            plane);
    TW_ASSERT_EQ_U64(moved, 0);
    moved = batch_put_blocks(c, "alone", 1, BLK, 1, plane, sizeof(plane));
    fprintf(stderr, "  one device block: %llu by rdma (%s)\n", (unsigned long long)moved, plane);
    TW_ASSERT_EQ_U64(moved, 0);
    tw_close(c);
    tw_test_server_stop(&s2);
}

int main(void)
{
    void *probe = NULL;
    int rc = tw_device_alloc("cuda:0", 1, &probe);
    if (rc)
        TW_SKIP("no CUDA device here: %s", tw_strerror_name(rc));
    tw_device_free(probe);
    const char *b = getenv("TW_TEST_BIG");
    big = b && *b == '1';
    const char *args[] = {"--devices", "cpu,cuda:0", NULL};
    tw_test_server_start(&srv, args);
    fprintf(stderr, "server at %s (%s)\n", srv.addr,
            getenv("TW_TEST_FABRIC") ? getenv("TW_TEST_FABRIC") : "inline");
    TW_RUN(test_four_directions);
    TW_RUN(test_device_batch);
    TW_RUN(test_realloc_same_address);
    TW_RUN(test_range_leaves_allocation);
    TW_RUN(test_shm_default_thresholds);
    TW_RUN(test_tcp_default_thresholds);
    tw_test_server_stop(&srv);
    TW_DONE();
}
