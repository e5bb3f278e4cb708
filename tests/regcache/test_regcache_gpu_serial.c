/*
 * Registration, deregistration and invalidation of one GPU range from
 * several threads are serialized (issue 12, seed 003: mapping and unmapping
 * a GPU range in the BAR must not race). The registrar wraps the fake one
 * and counts, for the GPU range, how many reg/dereg calls run at once
 * (each call lingers 20 us to widen the window); more than one is a
 * violation. Threads look up the same range with different access modes
 * (different regions, the same GPU pages), release, invalidate it and
 * "free and reallocate" the buffer (new buffer id: the old registration
 * goes stale). Bounded to about two seconds; labelled tsan.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "mem/regcache.h"
#include "regcache/fake_registrar.h"
#include "tw_test.h"

#define THREADS 4
#define SECONDS 2
#define GPU_BASE ((uintptr_t)0x7e0000000000ull)
#define GPU_LEN ((size_t)1 << 20)

static struct fake_registrar fr;
static struct tw_regcache *cache;
static _Atomic int stop;
static _Atomic int in_call;   /* reg/dereg calls on the GPU range running now */
static _Atomic long overlaps; /* times a second one started meanwhile */
static _Atomic long gpu_calls;
static _Atomic uint64_t generation = 1;

static int on_gpu_range(uintptr_t addr, size_t len)
{
    return addr < GPU_BASE + GPU_LEN && GPU_BASE < addr + len;
}

static void enter(void)
{
    if (atomic_fetch_add(&in_call, 1) != 0)
        atomic_fetch_add(&overlaps, 1);
    atomic_fetch_add(&gpu_calls, 1);
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
}

static void leave(void)
{
    atomic_fetch_sub(&in_call, 1);
}

static int serial_reg(void *ctx, const struct tw_reg_request *req, void **handle, char *err,
                      size_t errlen)
{
    int gpu = req->attr.kind == TW_MEMKIND_CUDA && on_gpu_range(req->addr, req->len);
    if (gpu)
        enter();
    int rc = fake_registrar_ops.reg(ctx, req, handle, err, errlen);
    if (gpu)
        leave();
    return rc;
}

static void serial_dereg(void *ctx, void *handle)
{
    struct fake_handle *h = handle;
    int gpu = on_gpu_range(h->addr, h->len) && h->addr >= GPU_BASE;
    if (gpu)
        enter();
    fake_registrar_ops.dereg(ctx, handle);
    if (gpu)
        leave();
}

static const struct tw_registrar_ops serial_ops = {
    .name = "serial-check",
    .reg = serial_reg,
    .dereg = serial_dereg,
};

static void *worker(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u;
    struct tw_regcache_region *held[3] = {0};
    while (!atomic_load(&stop)) {
        unsigned x = (unsigned)rand_r(&seed);
        int slot = (int)(x % 3);
        if (held[slot]) {
            if (!fake_release_held(cache, &held[slot]))
                TW_FAIL("a referenced GPU registration was deregistered");
            continue;
        }
        switch ((x >> 4) % 8) {
        case 0: /* invalidate the range (or part of it) */
            tw__regcache_invalidate(cache, GPU_BASE + ((x >> 8) % 8) * 65536, GPU_LEN / 2);
            break;
        case 1: /* the buffer is freed and reallocated at the same address */
            fake_cuda_set(0, GPU_BASE, GPU_LEN, atomic_fetch_add(&generation, 1) + 1, 0);
            break;
        default: { /* the same range, three access modes */
            static const uint32_t acc[3] = {TW_ACCESS_REMOTE_READ, TW_ACCESS_REMOTE_WRITE,
                                            TW_ACCESS_LOCAL_READ};
            struct tw_regcache_region *r = NULL;
            size_t off = ((x >> 8) % 4) * 4096;
            if (tw__regcache_lookup(cache, (void *)(GPU_BASE + off), GPU_LEN - off - 1,
                                    acc[(x >> 12) % 3], TW_MEMKIND_CUDA, &r, NULL, 0) == 0)
                held[slot] = r;
            break;
        }
        }
    }
    for (int i = 0; i < 3; i++)
        if (held[i])
            tw__regcache_release(cache, held[i]);
    return NULL;
}

static void gpu_range_serialized(void)
{
    fake_init(&fr);
    fake_cuda_set(0, GPU_BASE, GPU_LEN, 1, 0);
    struct tw_regcache_config cfg = {.max_entries = 8, .max_gpu_bytes = 4 * GPU_LEN};
    cfg.memkinds[TW_MEMKIND_CUDA] = fake_cuda_ops();
    TW_ASSERT_OK(tw__regcache_create(&cfg, &serial_ops, &fr, &cache));
    fake_run_workers(worker, THREADS, SECONDS, &stop);
    struct tw_regcache_stats s;
    tw__regcache_stats(cache, &s);
    fprintf(stderr, "gpu reg/dereg calls=%ld overlapping=%ld stale=%llu invalidations=%llu\n",
            atomic_load(&gpu_calls), atomic_load(&overlaps), (unsigned long long)s.stale,
            (unsigned long long)s.invalidations);
    TW_ASSERT(atomic_load(&gpu_calls) > 100); /* the race was really exercised */
    TW_ASSERT(s.stale > 0 && s.invalidations > 0);
    TW_ASSERT_EQ(atomic_load(&overlaps), 0);
    TW_ASSERT_EQ(s.in_use, 0);
    TW_ASSERT_OK(tw__regcache_destroy(cache));
    TW_ASSERT_EQ(fr.live, 0);
    TW_ASSERT_EQ(fr.regs, fr.deregs);
}

int main(void)
{
    TW_RUN(gpu_range_serialized);
    TW_DONE();
}
