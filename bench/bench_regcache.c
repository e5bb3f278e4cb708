/*
 * Registration cache benchmark.
 *
 *   bench_regcache            hit latency with 10,000 cached regions, then
 *                             64 MiB host buffer: register per transfer vs
 *                             cached, with libfabric's tcp provider
 *   bench_regcache --gpu      adds 64 MiB cuMemAlloc'd buffer: dma-buf export
 *                             per transfer vs cached (needs a CUDA driver)
 *   bench_regcache --regions N --batches B --pollute BYTES
 *
 * Hit latency is measured twice: warm (back-to-back lookups of random
 * regions, the cache's data stays in the CPU caches as far as it fits) and
 * L2-cold (BYTES of other memory, default 2 MiB, at least a big core's L2,
 * written between lookups, as other work on the core would; the same
 * 2 x BYTES are rewritten, so they stay in the last-level cache and the
 * cache's own data falls back to it, not to DRAM). Each L2-cold lookup is
 * timed alone; the timer's own cost, measured in the same run, is
 * subtracted.
 *
 * All figures are medians over timed batches, each ratio against a baseline
 * measured in the same run. The last line is always
 *   regcache hit_median_ns=N regions=M
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fabric/fi_api.h"

#include "common/clock.h"
#include "fabric/fabric.h"
#include "fabric/mrcache.h"
#include "gpu/cuda.h"
#include "mem/hostmem.h"
#include "mem/reg_dmabuf.h"
#include "mem/regcache.h"
#include "regcache/fake_registrar.h"
#include "tensorwire/mem.h"

#define ACC (TW_ACCESS_LOCAL_READ | TW_ACCESS_REMOTE_READ)
#define BIG ((size_t)64 << 20)

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_u64);
    return v[n / 2];
}

static void die(const char *what, int rc, const char *err)
{
    fprintf(stderr, "bench_regcache: %s: %s: %s\n", what, tw_strerror_name(rc), err ? err : "");
    exit(1);
}

/* ---- hit latency ---- */

/* One lookup at a time, after writing `pollute` bytes elsewhere. */
static void bench_polluted_hits(struct tw_regcache *c, char *buf, size_t page, size_t regions,
                                size_t pollute)
{
    const size_t samples = 4001, span = 2 * pollute;
    char *junk = malloc(span);
    uint64_t *ns = malloc(samples * sizeof(*ns));
    uint64_t *timer = malloc(samples * sizeof(*timer));
    if (!junk || !ns || !timer)
        die("pollute buffer", -ENOMEM, NULL);
    memset(junk, 1, span);
    unsigned seed = 54321;
    size_t off = 0;
    for (size_t i = 0; i < samples; i++) {
        size_t k = (size_t)rand_r(&seed) % regions;
        for (size_t j = 0; j < pollute; j += 64) {
            junk[off]++;
            off = off + 64 < span ? off + 64 : 0;
        }
        struct tw_regcache_region *r;
        uint64_t t0 = tw__now_ns();
        tw__regcache_lookup(c, buf + k * page + 64, 256, ACC, TW_MEMKIND_HOST, &r, NULL, 0);
        uint64_t t1 = tw__now_ns();
        tw__regcache_release(c, r);
        ns[i] = t1 - t0;
        t0 = tw__now_ns();
        timer[i] = tw__now_ns() - t0;
    }
    uint64_t raw = median(ns, samples), cost = median(timer, samples);
    printf("hits, L2-cold (%zu bytes written between lookups): regions=%zu lookups=%zu: lookup "
           "median %llu "
           "ns (%llu ns measured, timer %llu ns)\n",
           pollute, regions, samples, (unsigned long long)(raw > cost ? raw - cost : 0),
           (unsigned long long)raw, (unsigned long long)cost);
    free(junk);
    free(ns);
    free(timer);
}

static uint64_t bench_hits(size_t regions, size_t batches, size_t pollute)
{
    const size_t batch = 1000;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char err[256] = "";
    /* Address space only: the fake registrar never touches the pages. */
    char *buf = aligned_alloc(page, regions * page);
    if (!buf || tw_mem_register(buf, regions * page, 0))
        die("buffer", -ENOMEM, NULL);
    struct fake_registrar fr;
    fake_init(&fr);
    struct tw_regcache *c = NULL;
    struct tw_regcache_config cfg = {.max_entries = regions * 2,
                                     .max_host_bytes = regions * page * 2};
    int rc = tw__regcache_create(&cfg, &fake_registrar_ops, &fr, &c);
    if (rc)
        die("create", rc, NULL);
    struct tw_regcache_region *r;
    for (size_t i = 0; i < regions; i++) {
        rc = tw__regcache_lookup(c, buf + i * page, page, ACC, TW_MEMKIND_HOST, &r, err,
                                 sizeof(err));
        if (rc)
            die("fill", rc, err);
        tw__regcache_release(c, r);
    }
    /* Random region order, so the search is not always the same path. */
    size_t *order = malloc(batch * batches * sizeof(*order));
    struct tw_regcache_region **held = malloc(batch * sizeof(*held));
    uint64_t *lookup_ns = malloc(batches * sizeof(*lookup_ns));
    uint64_t *pair_ns = malloc(batches * sizeof(*pair_ns));
    unsigned seed = 12345;
    for (size_t i = 0; i < batch * batches; i++)
        order[i] = (size_t)rand_r(&seed) % regions;
    uint64_t pair_total = 0; /* every batch, so amortized work counts too */

    for (size_t b = 0; b < batches; b++) {
        const size_t *o = &order[b * batch];
        uint64_t t0 = tw__now_ns();
        for (size_t i = 0; i < batch; i++)
            tw__regcache_lookup(c, buf + o[i] * page + 64, 256, ACC, TW_MEMKIND_HOST, &held[i],
                                NULL, 0);
        uint64_t t1 = tw__now_ns();
        for (size_t i = 0; i < batch; i++)
            tw__regcache_release(c, held[i]);
        lookup_ns[b] = (t1 - t0) / batch;
        /* lookup + release, as a transfer does it */
        t0 = tw__now_ns();
        for (size_t i = 0; i < batch; i++) {
            tw__regcache_lookup(c, buf + o[i] * page + 64, 256, ACC, TW_MEMKIND_HOST, &r, NULL, 0);
            tw__regcache_release(c, r);
        }
        uint64_t dt = tw__now_ns() - t0;
        pair_total += dt;
        pair_ns[b] = dt / batch;
    }
    struct tw_regcache_stats s;
    tw__regcache_stats(c, &s);
    if (s.misses != regions || s.entries != regions)
        die("hit bench: unexpected misses or evictions", TW_EINTERNAL, NULL);
    uint64_t hit = median(lookup_ns, batches);
    printf("hits: regions=%zu batches=%zu x %zu lookups: lookup median %llu ns, "
           "lookup+release median %llu ns, mean %llu ns (hits=%llu misses=%llu)\n",
           regions, batches, batch, (unsigned long long)hit,
           (unsigned long long)median(pair_ns, batches),
           (unsigned long long)(pair_total / (batches * batch)), (unsigned long long)s.hits,
           (unsigned long long)s.misses);
    if (pollute)
        bench_polluted_hits(c, buf, page, regions, pollute);
    tw__regcache_destroy(c);
    tw_mem_unregister(buf);
    free(buf);
    free(order);
    free(held);
    free(lookup_ns);
    free(pair_ns);
    return hit;
}

/* ---- per-transfer registration vs cached, generic over a registrar ---- */

struct cmp_result {
    uint64_t per_transfer_ns, cached_ns;
};

static struct cmp_result compare(const char *label, const struct tw_registrar_ops *ops, void *ctx,
                                 void *addr, enum tw_memkind kind, int transfers)
{
    char err[256] = "";
    struct tw_mem_attr attr;
    const struct tw_memkind_ops *k = NULL;
    int rc = tw__memkind_classify(NULL, (uintptr_t)addr, BIG, kind, &k, &attr, err, sizeof(err));
    if (rc)
        die("classify", rc, err);
    uintptr_t s, e;
    k->round(&attr, (uintptr_t)addr, BIG, &s, &e);
    struct tw_reg_request req = {.addr = s, .len = e - s, .access = ACC, .kind = k, .attr = attr};
    uint64_t *per = malloc((size_t)transfers * sizeof(*per));
    uint64_t *cached = malloc((size_t)transfers * sizeof(*cached));

    /* Baseline: register and deregister around every transfer. */
    for (int i = 0; i < transfers; i++) {
        void *h = NULL;
        uint64_t t0 = tw__now_ns();
        rc = ops->reg(ctx, &req, &h, err, sizeof(err));
        if (rc)
            die("register", rc, err);
        ops->dereg(ctx, h);
        per[i] = tw__now_ns() - t0;
    }
    /* Cached: the first transfer registers, the rest hit. */
    struct tw_regcache *c = NULL;
    rc = tw__regcache_create(NULL, ops, ctx, &c);
    if (rc)
        die("create", rc, NULL);
    for (int i = 0; i < transfers; i++) {
        struct tw_regcache_region *r;
        uint64_t t0 = tw__now_ns();
        rc = tw__regcache_lookup(c, addr, BIG, ACC, kind, &r, err, sizeof(err));
        if (rc)
            die("lookup", rc, err);
        tw__regcache_release(c, r);
        cached[i] = tw__now_ns() - t0;
    }
    struct tw_regcache_stats st;
    tw__regcache_stats(c, &st);
    tw__regcache_destroy(c);
    struct cmp_result res = {median(per, (size_t)transfers), median(cached, (size_t)transfers)};
    printf("%s: 64 MiB x %d transfers: register per transfer median %llu ns, cached median "
           "%llu ns, ratio %.1fx (cache: %llu miss, %llu hits, %llu ns registering)\n",
           label, transfers, (unsigned long long)res.per_transfer_ns,
           (unsigned long long)res.cached_ns,
           res.cached_ns ? (double)res.per_transfer_ns / (double)res.cached_ns : 0.0,
           (unsigned long long)st.misses, (unsigned long long)st.hits,
           (unsigned long long)st.reg_ns);
    free(per);
    free(cached);
    return res;
}

static const char *rail0_provider(struct tw_fabric *fab)
{
    const struct tw_fabric_addr *a;
    tw__fabric_local_addrs(fab, &a);
    return a[0].provider;
}

/* The data plane's registrations (src/fabric/mrcache.h) on a tcp rail:
 * tw__fabric_mr_register_rail + deregister per transfer vs the per-rail
 * cache. Registration cost only; bench_mrcache adds the transfers. */
static void bench_fabric(int transfers)
{
    struct tw_fabric_config cfg = {.provider = "tcp", .node = "127.0.0.1"};
    struct tw_fabric *fab = NULL;
    char err[512] = "";
    int rc = tw__fabric_open(&cfg, &fab, err, sizeof(err));
    if (rc) {
        printf("fabric: skipped: tcp provider unavailable: %s\n", err);
        return;
    }
    void *buf = NULL;
    if (tw__hostmem_alloc(BIG, &buf))
        die("tw__hostmem_alloc", -ENOMEM, NULL);
    memset(buf, 1, BIG); /* fault the pages in: pinning real memory */
    const unsigned acc = TW_FABRIC_LOCAL_READ | TW_FABRIC_REMOTE_READ;
    uint64_t *per = malloc((size_t)transfers * sizeof(*per));
    uint64_t *cached = malloc((size_t)transfers * sizeof(*cached));
    for (int i = 0; i < transfers; i++) {
        struct tw_fabric_mr *m = NULL;
        uint64_t t0 = tw__now_ns();
        rc = tw__fabric_mr_register_rail(fab, 0, buf, BIG, acc, TW_FABRIC_HOST, 0, &m);
        if (rc)
            die("register", rc, tw__fabric_errmsg(fab));
        tw__fabric_mr_deregister(m);
        per[i] = tw__now_ns() - t0;
    }
    struct tw_fabric_mrcache *mc = NULL;
    if ((rc = tw__fabric_mrcache_create(fab, NULL, &mc)))
        die("mrcache create", rc, NULL);
    for (int i = 0; i < transfers; i++) {
        struct tw_fabric_mrc *h = NULL;
        uint64_t t0 = tw__now_ns();
        rc =
            tw__fabric_mrcache_acquire(mc, 0, buf, BIG, acc, TW_MEMKIND_HOST, &h, err, sizeof(err));
        if (rc)
            die("acquire", rc, err);
        tw__fabric_mrcache_release(mc, h);
        cached[i] = tw__now_ns() - t0;
    }
    struct tw_fabric_mrcache_stats st;
    tw__fabric_mrcache_stats(mc, &st);
    uint64_t p = median(per, (size_t)transfers), c = median(cached, (size_t)transfers);
    printf("fabric (%s, tw__fabric_mr_register_rail): 64 MiB x %d transfers: register per "
           "transfer median %llu ns, cached median %llu ns, ratio %.1fx (cache: %llu miss, %llu "
           "hits, %llu ns registering)\n",
           rail0_provider(fab), transfers, (unsigned long long)p, (unsigned long long)c,
           c ? (double)p / (double)c : 0.0, (unsigned long long)st.total.misses,
           (unsigned long long)st.total.hits, (unsigned long long)st.total.reg_ns);
    tw__fabric_mrcache_destroy(mc);
    tw__hostmem_free(buf);
    tw__fabric_close(fab);
    free(per);
    free(cached);
}

static void bench_gpu(int transfers)
{
    const struct tw_cuda_api *cu;
    char err[256];
    if (tw__cuda_get(&cu, err, sizeof(err)) || tw__cuda_use_device(0, err, sizeof(err))) {
        printf("gpu: skipped: %s\n", err);
        return;
    }
    CUdeviceptr p = 0;
    CUresult r = cu->cuMemAlloc(&p, BIG);
    if (r != CUDA_SUCCESS) {
        printf("gpu: skipped: cuMemAlloc(64 MiB): %s\n", tw__cuda_strerror(r, err, sizeof(err)));
        return;
    }
    struct tw_dmabuf_registrar dr = {0};
    compare("gpu (dma-buf export, cuMemGetHandleForAddressRange)", &tw__dmabuf_registrar_ops, &dr,
            (void *)(uintptr_t)p, TW_MEMKIND_CUDA, transfers);
    cu->cuMemFree(p);
}

int main(int argc, char **argv)
{
    size_t regions = 10000, batches = 301, pollute = (size_t)2 << 20;
    int gpu = 0, transfers = 101;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--gpu"))
            gpu = 1;
        else if (!strcmp(argv[i], "--regions") && i + 1 < argc)
            regions = strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--batches") && i + 1 < argc)
            batches = strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--pollute") && i + 1 < argc)
            pollute = strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--transfers") && i + 1 < argc)
            transfers = atoi(argv[++i]);
        else {
            fprintf(stderr,
                    "usage: %s [--gpu] [--regions N] [--batches B] [--pollute BYTES] "
                    "[--transfers T]\n",
                    argv[0]);
            return 2;
        }
    }
    if (regions == 0 || batches == 0 || transfers <= 0 || pollute > ((size_t)1 << 30))
        return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    bench_fabric(transfers);
    if (gpu)
        bench_gpu(transfers);
    uint64_t hit = bench_hits(regions, batches, pollute);
    printf("regcache hit_median_ns=%llu regions=%zu\n", (unsigned long long)hit, regions);
    return 0;
}
