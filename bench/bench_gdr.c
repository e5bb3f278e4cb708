/*
 * GPUDirect put and get of a server tensor on a GPU, against a raw
 * libfabric RMA loop on CUDA memory with the same provider and size, in one
 * run (docs/performance.md, "GPUDirect").
 *
 *   bench_gdr HOST:PORT PROVIDER DEVICE SIZE_BYTES REPS
 *
 * The server (tensorwired --fabric PROVIDER --devices cpu,DEVICE) stores
 * the tensor on DEVICE ("cuda:0"). A put from host memory is written by the
 * client into the server's GPU memory (gdr push when admitted); a get is
 * read by the client from it (gdr pull); each get is checked byte for byte.
 * The server's STATS say which path every transfer took (path_* counters,
 * before and after). The raw loop: fi_write and fi_read of SIZE between a
 * host buffer and a cuMemAlloc'd buffer on the same GPU, one operation at a
 * time, same provider, in this process (tools/raw_fabric.c).
 *
 * Prints medians (ms and GB/s) and the ratio tensorwire / raw. Exit 0 when
 * every transfer succeeded and every get was byte-exact.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensorwire/client.h"
#include "bench_raw_cuda.h"
#include "bench_util.h"

static const char *const path_keys[] = {"path_inline",    "path_inline_staged", "path_rdma_pull",
                                        "path_rdma_push", "path_rdma_staged",   "path_gdr_pull",
                                        "path_gdr_push",  "gpudirect_admitted"};
#define NKEYS (sizeof(path_keys) / sizeof(path_keys[0]))

static void path_stats(tw_client *c, uint64_t out[NKEYS])
{
    struct tw_stat_entry *st;
    size_t n;
    memset(out, 0, NKEYS * sizeof(out[0]));
    if (tw_stats(c, &st, &n) != 0)
        return;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < NKEYS; k++)
            if (strcmp(st[i].key, path_keys[k]) == 0)
                out[k] = st[i].value;
    tw_stats_free(st);
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: %s HOST:PORT PROVIDER DEVICE SIZE_BYTES REPS\n", argv[0]);
        return 2;
    }
    const char *addr = argv[1], *prov = argv[2], *dev = argv[3];
    size_t n = (size_t)strtoull(argv[4], NULL, 10);
    int reps = atoi(argv[5]);
    if (n == 0 || reps < 1 || reps > 100)
        return 2;
    uint8_t *src = malloc(n), *dst = malloc(n);
    double *tp = calloc((size_t)reps, sizeof(double)), *tg = calloc((size_t)reps, sizeof(double));
    if (!src || !dst || !tp || !tg)
        return 1;
    tw_test_fill(src, n, 7);

    struct tw_client_options o;
    tw_client_options_init(&o);
    o.fabric = prov;
    o.rdma_min_bytes = 0;
    tw_client *c = tw_bench_connect(addr, &o);
    struct tw_tensor_desc d;
    tw_bench_u8_desc(&d, n);
    snprintf(d.device_tag, sizeof(d.device_tag), "%s", dev);
    uint64_t before[NKEYS], after[NKEYS];
    path_stats(c, before);
    char put_plane[128] = "", get_plane[128] = "";
    int bad = 0;
    for (int i = 0; i < reps; i++) {
        double t0 = tw_bench_now_s();
        if (tw_put(c, "bench/gdr", &d, src, n) != 0) {
            fprintf(stderr, "put to %s: %s\n", dev, tw_client_last_error_message(c));
            return 1;
        }
        tp[i] = tw_bench_now_s() - t0;
        snprintf(put_plane, sizeof(put_plane), "%s", tw_client_data_plane(c));
        memset(dst, 0, n);
        struct tw_tensor_desc gd;
        t0 = tw_bench_now_s();
        if (tw_get(c, "bench/gdr", dst, n, &gd) != 0) {
            fprintf(stderr, "get: %s\n", tw_client_last_error_message(c));
            return 1;
        }
        tg[i] = tw_bench_now_s() - t0;
        snprintf(get_plane, sizeof(get_plane), "%s", tw_client_data_plane(c));
        if (memcmp(dst, src, n) != 0) {
            fprintf(stderr, "get %d: bytes differ from the put\n", i);
            bad = 1;
        }
        if (strcmp(gd.device_tag, dev) != 0) {
            fprintf(stderr, "get %d: device %s, want %s\n", i, gd.device_tag, dev);
            bad = 1;
        }
    }
    path_stats(c, after);
    tw_close(c);
    double mp = tw_bench_median(tp, reps), mg = tw_bench_median(tg, reps);
    double gb = (double)n / 1e9;
    printf("size %zu B (%s on %s), %d reps, byte-exact: %s\n", n, dev, prov, reps,
           bad ? "NO" : "yes");
    printf("tensorwire put: %8.2f ms  %6.2f GB/s  client path: %s\n", mp * 1e3, gb / mp, put_plane);
    printf("tensorwire get: %8.2f ms  %6.2f GB/s  client path: %s\n", mg * 1e3, gb / mg, get_plane);
    printf("server paths this run:");
    for (size_t k = 0; k + 1 < NKEYS; k++)
        if (after[k] != before[k])
            printf(" %s=%llu", path_keys[k], (unsigned long long)(after[k] - before[k]));
    printf("; gpudirect_admitted=%llu\n", (unsigned long long)after[NKEYS - 1]);

    /* The raw loop: host <-> cuMemAlloc'd buffer on the same GPU. */
    int ord = strncmp(dev, "cuda:", 5) == 0 ? atoi(dev + 5) : -1;
    const struct tw_cuda_api *cu = NULL;
    CUdeviceptr dbuf = 0;
    struct tw_raw_fabric *r;
    if (tw_bench_raw_cuda_open(prov, src, n, ord, 0, &cu, &dbuf, &r) != 0)
        return bad;
    double rw[100], rr[100];
    for (int i = 0; i < reps; i++) {
        uint64_t ns;
        if (tw_raw_fabric_loop(r, 1, n, 1, 1, NULL, &ns) != 0) {
            printf("raw write: %s\n", tw_raw_fabric_errmsg(r));
            break;
        }
        rw[i] = (double)ns / 1e9;
        if (tw_raw_fabric_loop(r, 0, n, 1, 1, NULL, &ns) != 0) {
            printf("raw read: %s\n", tw_raw_fabric_errmsg(r));
            break;
        }
        rr[i] = (double)ns / 1e9;
    }
    double mrw = tw_bench_median(rw, reps), mrr = tw_bench_median(rr, reps);
    printf("raw fi_write host->%s: %8.2f ms  %6.2f GB/s  (%s)\n", dev, mrw * 1e3, gb / mrw,
           tw_raw_fabric_provider(r));
    printf("raw fi_read  %s->host: %8.2f ms  %6.2f GB/s\n", dev, mrr * 1e3, gb / mrr);
    printf("ratio put/raw write %.2f, get/raw read %.2f (throughput, >= 0.9 wanted)\n", mrw / mp,
           mrr / mg);
    tw_bench_raw_cuda_close(cu, dbuf, r);
    free(src);
    free(dst);
    free(tp);
    free(tg);
    return bad;
}
