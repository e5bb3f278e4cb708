/*
 * Registration cache on real GPU memory (CUDA driver through dlopen).
 *
 * Skips (77) without a CUDA driver or GPU. Otherwise: cuMemAlloc a buffer,
 * look it up through a registrar that exports a dma-buf fd
 * (cuMemGetHandleForAddressRange; fd closed on deregistration), look up
 * again (hit, no new export), cuMemFree, cuMemAlloc until the same address
 * comes back, look up: must miss (new buffer id), close the stale export
 * and make a new one. Checks that no fd leaked (/proc/self/fd).
 *
 * If the driver cannot export dma-bufs here, the same checks run with a
 * registrar that only counts, and the output says so.
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "gpu/cuda.h"
#include "gpu/nvml.h"
#include "mem/reg_dmabuf.h"
#include "mem/regcache.h"
#include "tw_test.h"

#define SIZE ((size_t)4 << 20)
#define ACC (TW_ACCESS_LOCAL_READ | TW_ACCESS_REMOTE_READ)

static const struct tw_cuda_api *cu;
static struct tw_dmabuf_registrar dr;
static int no_dmabuf; /* export unsupported: count only */
static char no_dmabuf_why[256];
static _Atomic long counted_live;

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    TW_ASSERT(d != NULL);
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n - 3; /* ".", "..", and the directory's own fd */
}

static int test_reg(void *ctx, const struct tw_reg_request *req, void **handle, char *err,
                    size_t errlen)
{
    if (!no_dmabuf)
        return tw__dmabuf_registrar_ops.reg(&dr, req, handle, err, errlen);
    atomic_fetch_add(&counted_live, 1);
    atomic_fetch_add(&dr.exports, 1);
    *handle = malloc(1);
    return *handle ? 0 : -ENOMEM;
}

static void test_dereg(void *ctx, void *handle)
{
    if (!no_dmabuf) {
        tw__dmabuf_registrar_ops.dereg(&dr, handle);
        return;
    }
    atomic_fetch_sub(&counted_live, 1);
    free(handle);
}

static const struct tw_registrar_ops test_registrar = {
    .name = "dma-buf (test)", .reg = test_reg, .dereg = test_dereg};

static long live(void)
{
    return no_dmabuf ? atomic_load(&counted_live) : atomic_load(&dr.live);
}

static void show(struct tw_regcache *c, const char *step)
{
    struct tw_regcache_stats s;
    tw__regcache_stats(c, &s);
    printf("  %-34s hits=%llu misses=%llu stale=%llu exports=%ld live_exports=%ld fds=%d\n", step,
           (unsigned long long)s.hits, (unsigned long long)s.misses, (unsigned long long)s.stale,
           atomic_load(&dr.exports), live(), count_fds());
}

static struct tw_regcache_stats stats(struct tw_regcache *c)
{
    struct tw_regcache_stats s;
    tw__regcache_stats(c, &s);
    return s;
}

static uint64_t buffer_id_of(CUdeviceptr p)
{
    unsigned long long id = 0;
    CUresult r = cu->cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p);
    return r == CUDA_SUCCESS ? id : 0;
}

static CUdeviceptr alloc(void)
{
    CUdeviceptr p = 0;
    char buf[128];
    CUresult r = cu->cuMemAlloc(&p, SIZE);
    if (r != CUDA_SUCCESS)
        TW_FAIL("cuMemAlloc(%zu): %s", SIZE, tw__cuda_strerror(r, buf, sizeof(buf)));
    return p;
}

static struct tw_regcache_region *lookup(struct tw_regcache *c, CUdeviceptr p)
{
    struct tw_regcache_region *r = NULL;
    char err[256] = "";
    int rc = tw__regcache_lookup(c, (void *)(uintptr_t)p, SIZE, ACC, TW_MEMKIND_CUDA, &r, err,
                                 sizeof(err));
    if (rc)
        TW_FAIL("lookup(%#llx): %s: %s", p, tw_strerror_name(rc), err);
    return r;
}

static void print_region(const char *what, struct tw_regcache_region *r)
{
    const struct tw_mem_attr *a = tw__regcache_region_attr(r);
    printf("  %s: region %#lx+%zu device %d buffer_id %llu", what,
           (unsigned long)tw__regcache_region_start(r), tw__regcache_region_len(r), a->device,
           (unsigned long long)a->buffer_id);
    if (!no_dmabuf) {
        struct tw_dmabuf_handle *h = tw__regcache_region_handle(r);
        printf(" dma-buf fd %d", h->fd);
    }
    printf("\n");
}

static void gpu_address_reuse(void)
{
    char err[256] = "";
    /* Warm up the driver's own fds (and probe dma-buf support) before the
     * baseline count. */
    CUdeviceptr scratch = alloc();
    int fd = -1;
    uint64_t off;
    struct tw_mem_attr sa;
    TW_ASSERT_OK(tw__memkind_cuda.query((uintptr_t)scratch, SIZE, &sa, err, sizeof(err)));
    if (tw__memkind_cuda.export_dmabuf((uintptr_t)scratch, SIZE, &sa, &fd, &off, err,
                                       sizeof(err)) == 0) {
        close(fd);
    } else {
        no_dmabuf = 1;
        snprintf(no_dmabuf_why, sizeof(no_dmabuf_why), "%s", err);
        printf("NOTE: dma-buf export unsupported here (%s);\n"
               "      checking the buffer-id path with a counting registrar instead\n",
               no_dmabuf_why);
    }
    cu->cuMemFree(scratch);
    int fds_before = count_fds();
    printf("fds before: %d\n", fds_before);

    struct tw_regcache *c = NULL;
    TW_ASSERT_OK(tw__regcache_create(NULL, &test_registrar, NULL, &c));

    CUdeviceptr p = alloc();
    uint64_t id1 = buffer_id_of(p);
    printf("cuMemAlloc(%zu) = %#llx buffer_id %llu\n", SIZE, p, (unsigned long long)id1);
    struct tw_regcache_region *r = lookup(c, p);
    print_region("lookup 1 (miss, export)", r);
    tw__regcache_release(c, r);
    show(c, "after lookup 1");
    TW_ASSERT_EQ(stats(c).misses, 1);
    TW_ASSERT_EQ(atomic_load(&dr.exports), 1);

    r = lookup(c, p);
    tw__regcache_release(c, r);
    show(c, "after lookup 2 (hit)");
    TW_ASSERT_EQ(stats(c).hits, 1);
    TW_ASSERT_EQ(atomic_load(&dr.exports), 1);

    cu->cuMemFree(p);
    printf("cuMemFree(%#llx)\n", p);
    CUdeviceptr others[8];
    int nothers = 0;
    CUdeviceptr q = 0;
    for (int i = 0; i < 8; i++) {
        q = alloc();
        printf("cuMemAlloc(%zu) try %d = %#llx buffer_id %llu%s\n", SIZE, i + 1, q,
               (unsigned long long)buffer_id_of(q), q == p ? " (same address)" : "");
        if (q == p)
            break;
        others[nothers++] = q;
    }
    uint64_t id2 = buffer_id_of(q);
    TW_ASSERT(id2 != id1);
    if (q == p) {
        r = lookup(c, p);
        print_region("lookup 3 (must miss: reused VA)", r);
        tw__regcache_release(c, r);
        show(c, "after lookup 3");
        struct tw_regcache_stats s = stats(c);
        TW_ASSERT_EQ(s.hits, 1);
        TW_ASSERT_EQ(s.misses, 2);
        TW_ASSERT_EQ(s.stale, 1);
        TW_ASSERT_EQ(atomic_load(&dr.exports), 2);
        TW_ASSERT_EQ(live(), 1); /* the stale export was closed */
        TW_ASSERT_EQ(tw__regcache_region_attr(r)->buffer_id, id2);
    } else {
        printf("NOTE: the driver never returned %#llx again in 8 tries; checking the\n"
               "      buffer-id path on the new allocation and the freed address instead\n",
               p);
        struct tw_regcache_region *none = NULL;
        int rc = tw__regcache_lookup(c, (void *)(uintptr_t)p, SIZE, ACC, TW_MEMKIND_CUDA, &none,
                                     err, sizeof(err));
        printf("  lookup of freed %#llx: %s (%s)\n", p, tw_strerror_name(rc),
               rc ? err : "inside a newer allocation");
        long want_exports = 1;
        if (rc == 0) {
            /* p fell inside one of the new allocations: that is a reuse
             * too, and must have missed on the buffer id. */
            print_region("freed address now in another buffer", none);
            TW_ASSERT(tw__regcache_region_attr(none)->buffer_id != id1);
            TW_ASSERT_EQ(stats(c).stale, 1);
            tw__regcache_release(c, none);
            want_exports++;
        }
        r = lookup(c, q);
        print_region("lookup of new allocation (miss)", r);
        TW_ASSERT(tw__regcache_region_attr(r)->buffer_id == id2);
        tw__regcache_release(c, r);
        show(c, "after lookup 3");
        TW_ASSERT_EQ(stats(c).hits, 1);
        TW_ASSERT_EQ(atomic_load(&dr.exports), want_exports + 1);
    }

    TW_ASSERT_OK(tw__regcache_destroy(c));
    TW_ASSERT_EQ(live(), 0);
    cu->cuMemFree(q);
    for (int i = 0; i < nothers; i++)
        cu->cuMemFree(others[i]);
    int fds_after = count_fds();
    printf("fds after: %d (before: %d)\n", fds_after, fds_before);
    TW_ASSERT_EQ(fds_after, fds_before);
    if (no_dmabuf)
        printf("PASS (buffer-id path only; dma-buf export unsupported: %s)\n", no_dmabuf_why);
    else
        printf("PASS (dma-buf export path)\n");
}

int main(void)
{
    char err[256];
    setvbuf(stdout, NULL, _IONBF, 0);
    if (tw__cuda_get(&cu, err, sizeof(err)) != 0)
        TW_SKIP("no CUDA here: %s", err);
    int n = 0;
    if (cu->cuDeviceGetCount(&n) != CUDA_SUCCESS || n == 0)
        TW_SKIP("no CUDA here: the driver reports no GPU");
    if (tw__cuda_use_device(0, err, sizeof(err)) != 0)
        TW_SKIP("no usable CUDA device 0: %s", err);
    uint64_t bar1 = 0;
    if (tw__nvml_bar1_total(0, &bar1, err, sizeof(err)) == 0)
        printf("CUDA driver %d, %d GPU(s); GPU 0 BAR1 %llu MiB (cache GPU limit: half)\n",
               cu->driver_version, n, (unsigned long long)(bar1 >> 20));
    else
        printf("CUDA driver %d, %d GPU(s); BAR1 unknown: %s\n", cu->driver_version, n, err);
    TW_RUN(gpu_address_reuse);
    TW_DONE();
}
