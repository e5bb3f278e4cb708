/*
 * GPUDirect into and out of the CLIENT's GPU memory (issue 12), against the
 * staging path and a raw libfabric RMA loop on CUDA memory, in one run
 * (docs/performance.md, "GPUDirect into the client's GPU").
 *
 *   bench_gdr_client HOST:PORT PROVIDER SERVER_DEVICE CLIENT_DEVICE SIZE_BYTES REPS
 *
 * The server (tensorwired --fabric PROVIDER --devices cpu,...) stores the
 * tensor on SERVER_DEVICE ("cpu" or "cuda:0"); the client's buffer is a
 * tw_device_alloc'd CLIENT_DEVICE ("cuda:0") buffer. Four connections:
 *   gdr      --gpudirect auto --push always: a get into the client's GPU buffer is
 *            `gdr push` when admitted (the server writes into it);
 *   gdr-pull --gpudirect auto --push never: `gdr pull` (the client reads
 *            into its GPU buffer);
 *   auto     the defaults (--gpudirect auto --push auto): whatever
 *            tw__path_decide picks (over shm a host tensor stages, a GPU
 *            tensor is pushed);
 *   staging  --gpudirect off: the same get stages through host memory.
 * Each get is timed, then copied back and checked byte for byte (outside
 * the timing). A put FROM the client's GPU buffer is timed on every
 * connection too and checked by a get into host memory. The raw loops:
 * fi_write of SIZE from a host buffer into a cuMemAlloc'd buffer on
 * CLIENT_DEVICE (what a gdr push get of a host tensor does on the wire;
 * for a tensor on the server's GPU see below), and fi_read of SIZE
 * from a host buffer into a local one (what a gdr pull get does), one
 * operation at a time, same provider, in this process (tools/raw_fabric.c).
 *
 * Prints medians (ms, GB/s), the paths, and the ratios gdr get / raw loop
 * and gdr get / staging get. Exit 0 when every transfer succeeded and was
 * byte-exact.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorwire/client.h"
#include "tensorwire/mem.h"
#include "bench_raw_cuda.h"
#include "bench_util.h"

struct figures {
    double get_s, put_s;
    char get_plane[384], put_plane[384];
    int bad;
};

/* reps gets into dev and puts from dev on c; src is what the server holds
 * after the first put from host memory. */
static int run(tw_client *c, const char *label, const char *sdev, uint8_t *src, uint8_t *back,
               void *dev, size_t n, int reps, struct figures *f)
{
    double tg[100], tp[100];
    struct tw_tensor_desc d;
    tw_bench_u8_desc(&d, n);
    snprintf(d.device_tag, sizeof(d.device_tag), "%s", sdev);
    memset(f, 0, sizeof(*f));
    if (tw_put(c, "bench/gdrc", &d, src, n) != 0) {
        fprintf(stderr, "%s: put from host to %s: %s\n", label, sdev,
                tw_client_last_error_message(c));
        return 1;
    }
    for (int i = 0; i < reps; i++) {
        if (tw_mem_copy(dev, back, n) != 0) /* back is zeroed: clear the GPU buffer */
            return 1;
        double t0 = tw_bench_now_s();
        if (tw_get(c, "bench/gdrc", dev, n, NULL) != 0) {
            fprintf(stderr, "%s: get into the client GPU: %s\n", label,
                    tw_client_last_error_message(c));
            return 1;
        }
        tg[i] = tw_bench_now_s() - t0;
        snprintf(f->get_plane, sizeof(f->get_plane), "%s", tw_client_data_plane(c));
        if (tw_mem_copy(back, dev, n) != 0 || memcmp(back, src, n) != 0) {
            fprintf(stderr, "%s: get %d: bytes in the client GPU differ\n", label, i);
            f->bad = 1;
        }
        memset(back, 0, n);
    }
    /* Put from the client GPU: the buffer holds src now. */
    for (int i = 0; i < reps; i++) {
        double t0 = tw_bench_now_s();
        if (tw_put(c, "bench/gdrc2", &d, dev, n) != 0) {
            fprintf(stderr, "%s: put from the client GPU to %s: %s\n", label, sdev,
                    tw_client_last_error_message(c));
            return 1;
        }
        tp[i] = tw_bench_now_s() - t0;
        snprintf(f->put_plane, sizeof(f->put_plane), "%s", tw_client_data_plane(c));
    }
    if (tw_get(c, "bench/gdrc2", back, n, NULL) != 0 || memcmp(back, src, n) != 0) {
        fprintf(stderr, "%s: the tensor put from the client GPU differs\n", label);
        f->bad = 1;
    }
    memset(back, 0, n);
    f->get_s = tw_bench_median(tg, reps);
    f->put_s = tw_bench_median(tp, reps);
    double gb = (double)n / 1e9;
    printf("%-8s get into client %s: %8.2f ms %6.2f GB/s  path: %s\n", label, "GPU", f->get_s * 1e3,
           gb / f->get_s, f->get_plane);
    printf("%-8s put from client %s: %8.2f ms %6.2f GB/s  path: %s\n", label, "GPU", f->put_s * 1e3,
           gb / f->put_s, f->put_plane);
    (void)tw_delete(c, "bench/gdrc");
    (void)tw_delete(c, "bench/gdrc2");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr,
                "usage: %s HOST:PORT PROVIDER SERVER_DEVICE CLIENT_DEVICE SIZE_BYTES REPS\n",
                argv[0]);
        return 2;
    }
    const char *addr = argv[1], *prov = argv[2], *sdev = argv[3], *cdev = argv[4];
    size_t n = (size_t)strtoull(argv[5], NULL, 10);
    int reps = atoi(argv[6]);
    if (n == 0 || reps < 1 || reps > 100 || strncmp(cdev, "cuda:", 5) != 0)
        return 2;
    int ord = atoi(cdev + 5);
    uint8_t *src = malloc(n), *back = calloc(1, n);
    void *dev = NULL;
    if (!src || !back)
        return 1;
    tw_test_fill(src, n, 7);
    if (tw_device_alloc(cdev, n, &dev) != 0) {
        fprintf(stderr, "cannot allocate %zu bytes on %s\n", n, cdev);
        return 1;
    }

    struct tw_client_options o;
    tw_client_options_init(&o);
    o.fabric = prov;
    o.rdma_min_bytes = 0;
    o.push = TW_PUSH_ALWAYS; /* auto stages host tensors over shm (STAGED_SHM_HOST_SOURCE) */
    tw_client *g = tw_bench_connect(addr, &o); /* gdr; a get is pushed by the server */
    o.push = TW_PUSH_NEVER;
    tw_client *p = tw_bench_connect(addr, &o); /* gdr; a get is read by the client */
    o.push = TW_PUSH_AUTO;
    tw_client *a = tw_bench_connect(addr, &o); /* the defaults: what tw__path_decide picks */
    o.gpudirect = TW_GPUDIRECT_OFF;
    tw_client *s = tw_bench_connect(addr, &o); /* staging */
    printf("size %zu B, server tensor on %s, client buffer on %s, provider %s, %d reps\n", n, sdev,
           cdev, prov, reps);
    struct figures fg, fp, fa, fs;
    int rc = run(g, "gdr", sdev, src, back, dev, n, reps, &fg);
    if (!rc)
        rc = run(p, "gdr-pull", sdev, src, back, dev, n, reps, &fp);
    if (!rc)
        rc = run(a, "auto", sdev, src, back, dev, n, reps, &fa);
    if (!rc)
        rc = run(s, "staging", sdev, src, back, dev, n, reps, &fs);
    tw_close(g);
    tw_close(p);
    tw_close(a);
    tw_close(s);
    if (rc)
        return 1;
    int bad = fg.bad || fp.bad || fa.bad || fs.bad;
    printf("byte-exact: %s\n", bad ? "NO" : "yes");

    /* The raw loops, host buffer <-> cuMemAlloc'd buffer on the client's
     * GPU: fi_write into remote GPU memory (what the server does in a gdr
     * push get), and fi_read into local GPU memory (what the client does in
     * a gdr pull get). */
    double gb = (double)n / 1e9, raw[2] = {0, 0};
    for (int local_cuda = 0; local_cuda < 2; local_cuda++) {
        const struct tw_cuda_api *cu = NULL;
        CUdeviceptr dbuf = 0;
        struct tw_raw_fabric *r;
        if (tw_bench_raw_cuda_open(prov, src, n, ord, local_cuda, &cu, &dbuf, &r) != 0)
            continue;
        double t[100];
        int done = 0;
        for (int i = 0; i < reps; i++, done++) {
            uint64_t ns;
            if (tw_raw_fabric_loop(r, !local_cuda, n, 1, 1, NULL, &ns) != 0) {
                printf("raw %s: %s\n", local_cuda ? "read" : "write", tw_raw_fabric_errmsg(r));
                break;
            }
            t[i] = (double)ns / 1e9;
        }
        if (done == reps) {
            raw[local_cuda] = tw_bench_median(t, reps);
            printf("raw %s: %8.2f ms %6.2f GB/s (%s)\n",
                   local_cuda ? "fi_read  host->local GPU " : "fi_write host->remote GPU",
                   raw[local_cuda] * 1e3, gb / raw[local_cuda], tw_raw_fabric_provider(r));
        }
        tw_bench_raw_cuda_close(cu, dbuf, r);
    }
    /* A tensor on the server's GPU: the gdr push get writes GPU memory
     * into GPU memory, whose raw loop cannot run in this process (shm moves
     * GPU memory by CUDA IPC, and a process cannot open an IPC handle of
     * its own memory: the completion fails with EINVAL). Its baseline is
     * fabtests' fi_rma_bw -p shm -D cuda between two processes
     * (docs/performance.md); the ratio printed below is against host
     * memory then. */
    if (raw[0] > 0)
        printf("ratio gdr push get / raw write %.2f (%s)\n", raw[0] / fg.get_s,
               strncmp(sdev, "cuda:", 5) == 0 ? "not comparable: a host-memory source"
                                              : ">= 0.9 wanted");
    if (raw[1] > 0)
        printf("ratio gdr pull get / raw read %.2f\n", raw[1] / fp.get_s);
    printf("ratio gdr push get / staging get %.2f, gdr pull get / staging get %.2f (> 1 wanted); "
           "gdr put / staging put %.2f\n",
           fs.get_s / fg.get_s, fs.get_s / fp.get_s, fs.put_s / fg.put_s);
    printf("ratio auto get / staging get %.2f, auto put / staging put %.2f (>= 1 wanted: the "
           "defaults take the faster path)\n",
           fs.get_s / fa.get_s, fs.put_s / fa.put_s);
    tw_device_free(dev);
    free(src);
    free(back);
    return bad;
}
