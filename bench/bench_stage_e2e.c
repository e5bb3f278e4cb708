/*
 * bench_stage_e2e: GPU tensors through a running tensorwired against host
 * tensors of the same size, on one connection, in one run (issue 11).
 *
 *   bench_stage_e2e HOST:PORT FABRIC SIZE REPS          GPU->GPU vs host->host get
 *   bench_stage_e2e HOST:PORT FABRIC batch BLOCK COUNT  device batch vs one device tensor
 *
 * FABRIC: none (inline), tcp or shm. GPUDirect is off on the client (the
 * server must run with --gpudirect off too), so GPU memory is staged.
 * Get mode: a host tensor (cpu) got into host memory and a cuda:0 tensor
 * got into a cuda:0 buffer, alternating, after one warm-up of each; prints
 * the medians (MiB/s) and their ratio. Batch mode: COUNT tensors of BLOCK
 * bytes on cuda:0 got with one tw_batch_get into slices of one cuda:0
 * allocation, against one cuda:0 tensor of COUNT x BLOCK bytes got into
 * the same allocation, 3 times each alternating after one warm-up of each
 * (TW_BENCH_REPS=N: N times); prints each round and the medians and
 * the ratio. Then the same for puts from that allocation (COUNT new
 * names once, then overwrites, against one tensor): a second line.
 * TW_BENCH_INFLIGHT=N sets the client's max_inflight (the batch window;
 * default: the library's choice), TW_BENCH_RDMA_MIN_BYTES=N its
 * rdma_min_bytes (default: automatic). TW_BENCH_GETS_ONLY=N (batch mode): after
 * the blocks are put, only N batch gets back to back and their median, for
 * a profiler attached meanwhile; TW_BENCH_PUTS_ONLY=N likewise N batch puts
 * of new names, then N overwrites of the first of them, and their medians.
 * Public API only (links libtensorwire).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensorwire/tensorwire.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(v[0]), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void die(tw_client *c, const char *what, int rc)
{
    fprintf(stderr, "bench_stage_e2e: %s: %s: %s\n", what, tw_strerror_name(rc),
            c ? tw_client_last_error_message(c) : "");
    exit(1);
}

/* A tensor `name` of n bytes on device tag dev, put from host memory. */
static void put_tensor(tw_client *c, const char *name, const char *dev, const uint8_t *src,
                       size_t n)
{
    struct tw_tensor_desc d = {.dtype = TW_U8, .ndim = 1, .shape = {n}};
    snprintf(d.device_tag, sizeof(d.device_tag), "%s", dev);
    int rc = tw_put(c, name, &d, src, n);
    if (rc)
        die(c, name, rc);
}

static double timed_get(tw_client *c, const char *name, void *buf, size_t n)
{
    double t0 = now_s();
    int rc = tw_get(c, name, buf, n, NULL);
    if (rc)
        die(c, name, rc);
    return (double)n / (now_s() - t0) / 1048576.0;
}

int main(int argc, char **argv)
{
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: bench_stage_e2e HOST:PORT none|tcp|shm SIZE REPS\n"
                        "       bench_stage_e2e HOST:PORT none|tcp|shm batch BLOCK COUNT\n");
        return 2;
    }
    struct tw_client_options o;
    tw_client_options_init(&o);
    o.fabric = argv[2];
    o.gpudirect = TW_GPUDIRECT_OFF;
    const char *win = getenv("TW_BENCH_INFLIGHT");
    if (win && *win)
        o.max_inflight = (uint32_t)strtoul(win, NULL, 10);
    /* The client's RDMA threshold (puts; the server decides gets). */
    const char *thr = getenv("TW_BENCH_RDMA_MIN_BYTES");
    if (thr && *thr)
        o.rdma_min_bytes = strtoull(thr, NULL, 10);
    tw_client *c = NULL;
    int rc = tw_client_connect(argv[1], &o, &c);
    if (rc)
        die(NULL, "connect", rc);
    int batch = strcmp(argv[3], "batch") == 0;
    size_t block = batch ? (size_t)strtoull(argv[4], NULL, 10) : 0;
    size_t count = batch ? (size_t)strtoull(argv[5], NULL, 10) : 1;
    size_t n = batch ? block * count : (size_t)strtoull(argv[3], NULL, 10);
    const char *reps_env = getenv("TW_BENCH_REPS");
    int reps = batch ? (reps_env && *reps_env ? atoi(reps_env) : 3) : atoi(argv[4]);
    if (!n || reps < 1 || reps > 64)
        return 2;
    void *dev = NULL;
    rc = tw_device_alloc("cuda:0", n, &dev);
    if (rc)
        die(c, "tw_device_alloc", rc);
    uint8_t *host = malloc(n);
    if (!host)
        return 1;
    /* A pattern, fast: the first 4 KiB, then doubling copies. */
    for (size_t i = 0; i < n && i < 4096; i++)
        host[i] = (uint8_t)(i * 131 + 7);
    for (size_t have = n < 4096 ? n : 4096; have < n; have *= 2)
        memcpy(host + have, host, have < n - have ? have : n - have);
    double a[64], b[64];
    if (!batch) {
        put_tensor(c, "bse/h", "cpu", host, n);
        put_tensor(c, "bse/g", "cuda:0", host, n);
        timed_get(c, "bse/h", host, n);
        timed_get(c, "bse/g", dev, n);
        char plane[128];
        snprintf(plane, sizeof(plane), "%s", tw_client_data_plane(c));
        for (int r = 0; r < reps; r++) {
            a[r] = timed_get(c, "bse/h", host, n);
            b[r] = timed_get(c, "bse/g", dev, n);
        }
        double mh = median(a, reps), mg = median(b, reps);
        printf("get %zu B x %d, %s: host->host %.1f MiB/s, GPU->GPU %.1f MiB/s (%s), ratio %.2f\n",
               n, reps, argv[2], mh, mg, plane, mg / mh);
        tw_delete(c, "bse/h");
        tw_delete(c, "bse/g");
    } else {
        struct tw_batch_item *items = calloc(count, sizeof(*items));
        char(*names)[32] = calloc(count, sizeof(*names));
        if (!items || !names)
            return 1;
        for (size_t i = 0; i < count; i++) {
            snprintf(names[i], sizeof(names[i]), "bse/b%zu", i);
            items[i].name = names[i];
            items[i].desc = (struct tw_tensor_desc){.dtype = TW_U8, .ndim = 1, .shape = {block}};
            snprintf(items[i].desc.device_tag, sizeof(items[i].desc.device_tag), "cuda:0");
            items[i].buf = host + i * block;
            items[i].len = block;
        }
        rc = tw_batch_put(c, items, count);
        if (rc)
            die(c, "batch put", rc);
        for (size_t i = 0; i < count; i++)
            items[i].buf = (uint8_t *)dev + i * block;
        const char *only = getenv("TW_BENCH_GETS_ONLY");
        int gets_only = only && *only ? atoi(only) : 0;
        only = getenv("TW_BENCH_PUTS_ONLY");
        int puts_only = only && *only ? atoi(only) : 0;
        if (puts_only > 0) {
            if (puts_only > 16)
                puts_only = 16;
            printf("device batch %zu x %zu B, %s: blocks put, %d batch puts of new names and %d "
                   "overwrites follow\n",
                   count, block, argv[2], puts_only, puts_only);
            fflush(stdout);
            for (int r = 0; r < 2 * puts_only; r++) {
                int fresh = r < puts_only;
                for (size_t i = 0; i < count; i++) {
                    snprintf(names[i], sizeof(names[i]), "bse/n%d_%zu", fresh ? r : 0, i);
                    items[i].name = names[i];
                }
                double t0 = now_s();
                if ((rc = tw_batch_put(c, items, count)) != 0)
                    die(c, "batch put", rc);
                (fresh ? a : b)[fresh ? r : r - puts_only] = (double)n / (now_s() - t0) / 1048576.0;
            }
            printf("device batch put %zu x %zu B, %s: %d rounds, new names median %.1f MiB/s, "
                   "overwrite median %.1f MiB/s\n",
                   count, block, argv[2], puts_only, median(a, puts_only), median(b, puts_only));
            fflush(stdout);
            for (int r = 0; r < puts_only; r++)
                for (size_t i = 0; i < count; i++) {
                    snprintf(names[i], sizeof(names[i]), "bse/n%d_%zu", r, i);
                    tw_delete(c, names[i]);
                }
            for (size_t i = 0; i < count; i++) {
                snprintf(names[i], sizeof(names[i]), "bse/b%zu", i);
                tw_delete(c, names[i]);
            }
            tw_close(c);
            return 0;
        }
        if (gets_only > 0) {
            if (gets_only > 64)
                gets_only = 64;
            printf("device batch %zu x %zu B, %s: blocks put, %d batch gets follow\n", count, block,
                   argv[2], gets_only);
            fflush(stdout);
            for (int r = 0; r < gets_only; r++) {
                double t0 = now_s();
                if ((rc = tw_batch_get(c, items, count)) != 0)
                    die(c, "batch get", rc);
                a[r] = (double)n / (now_s() - t0) / 1048576.0;
            }
            printf("device batch %zu x %zu B, %s: %d batch gets, median %.1f MiB/s\n", count, block,
                   argv[2], gets_only, median(a, gets_only));
            for (size_t i = 0; i < count; i++)
                tw_delete(c, names[i]);
            tw_close(c);
            return 0;
        }
        put_tensor(c, "bse/one", "cuda:0", host, n);
        /* One warm-up of each (the batch's first get pins its buffers). */
        timed_get(c, "bse/one", dev, n);
        if ((rc = tw_batch_get(c, items, count)) != 0)
            die(c, "batch get", rc);
        for (int r = 0; r < reps; r++) {
            double t0 = now_s();
            rc = tw_batch_get(c, items, count);
            if (rc)
                die(c, "batch get", rc);
            a[r] = (double)n / (now_s() - t0) / 1048576.0;
            b[r] = timed_get(c, "bse/one", dev, n);
            printf("  round %d: batch get %.1f MiB/s, one tensor %.1f MiB/s\n", r + 1, a[r], b[r]);
        }
        double mb = median(a, reps), m1 = median(b, reps);
        printf("device batch %zu x %zu B, %s: batch %.1f MiB/s, one tensor %.1f MiB/s, ratio "
               "%.2f\n",
               count, block, argv[2], mb, m1, mb / m1);
        fflush(stdout);
        /* Puts from the device buffer the gets filled: new names once,
         * then overwrites, against one tensor put from the same buffer. */
        for (size_t i = 0; i < count; i++) {
            snprintf(names[i], sizeof(names[i]), "bse/p%zu", i);
            items[i].name = names[i];
        }
        double t0 = now_s();
        rc = tw_batch_put(c, items, count);
        if (rc)
            die(c, "batch put (new names)", rc);
        double mnew = (double)n / (now_s() - t0) / 1048576.0;
        struct tw_tensor_desc d1 = {.dtype = TW_U8, .ndim = 1, .shape = {n}};
        snprintf(d1.device_tag, sizeof(d1.device_tag), "cuda:0");
        if ((rc = tw_put(c, "bse/pone", &d1, dev, n)) != 0) /* warm-up */
            die(c, "put", rc);
        for (int r = 0; r < reps; r++) {
            t0 = now_s();
            rc = tw_batch_put(c, items, count);
            if (rc)
                die(c, "batch put (overwrite)", rc);
            a[r] = (double)n / (now_s() - t0) / 1048576.0;
            t0 = now_s();
            if ((rc = tw_put(c, "bse/pone", &d1, dev, n)) != 0)
                die(c, "put", rc);
            b[r] = (double)n / (now_s() - t0) / 1048576.0;
        }
        mb = median(a, reps), m1 = median(b, reps);
        printf("device batch put %zu x %zu B, %s: new names %.1f MiB/s, overwrite %.1f MiB/s, "
               "one tensor %.1f MiB/s, ratios %.2f / %.2f\n",
               count, block, argv[2], mnew, mb, m1, mnew / m1, mb / m1);
        for (size_t i = 0; i < count; i++) {
            tw_delete(c, names[i]);
            snprintf(names[i], sizeof(names[i]), "bse/b%zu", i);
            tw_delete(c, names[i]);
        }
        tw_delete(c, "bse/one");
        tw_delete(c, "bse/pone");
        free(items);
        free(names);
    }
    tw_device_free(dev);
    free(host);
    tw_close(c);
    return 0;
}
