/*
 * Fake registrar and fake CUDA memory kind for registration-cache tests.
 *
 * The registrar records every registration in a heap handle (checked on
 * deregistration, so a double or foreign dereg aborts the test) and counts
 * live ones; it can fail on demand, refuse beyond a capacity with -ENOSPC
 * (like a full GPU BAR), or block inside reg until released (to race
 * lookups against invalidation).
 *
 * The fake CUDA kind is the real one (64 KiB rounding, clamp, buffer-id
 * check) with query() answered from a table of made-up allocations, so the
 * address-reuse policy is tested without a GPU. Fake addresses are never
 * dereferenced.
 */
#ifndef TW_TEST_FAKE_REGISTRAR_H
#define TW_TEST_FAKE_REGISTRAR_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/clock.h"
#include "mem/memkind.h"
#include "mem/regcache.h"
#include "tensorwire/error.h"

#define FAKE_MAGIC 0x5245474cu

struct fake_handle {
    uint32_t magic;
    _Atomic int alive;
    uintptr_t addr;
    size_t len;
    uint32_t access;
    uint64_t buffer_id;
};

struct fake_registrar {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    long live, regs, deregs;
    long capacity; /* live registrations allowed; 0 = unlimited */
    int fail_next; /* this many reg calls fail with fail_code */
    int fail_code;
    int block;   /* reg waits while set */
    int blocked; /* a reg call is waiting */
    uintptr_t last_reg_addr, last_dereg_addr;
    size_t last_reg_len;
    uint32_t last_reg_access;
};

static inline void fake_init(struct fake_registrar *f)
{
    *f = (struct fake_registrar){0};
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->cond, NULL);
}

static int fake_reg(void *ctx, const struct tw_reg_request *req, void **handle, char *err,
                    size_t errlen)
{
    struct fake_registrar *f = ctx;
    pthread_mutex_lock(&f->lock);
    while (f->block) {
        f->blocked = 1;
        pthread_cond_broadcast(&f->cond);
        pthread_cond_wait(&f->cond, &f->lock);
    }
    f->blocked = 0;
    int rc = 0;
    if (f->fail_next > 0) {
        f->fail_next--;
        rc = f->fail_code;
    } else if (f->capacity && f->live >= f->capacity) {
        rc = -ENOSPC;
    }
    if (rc) {
        pthread_mutex_unlock(&f->lock);
        if (err && errlen)
            snprintf(err, errlen, "fake registrar refused: %s", tw_strerror_name(rc));
        return rc;
    }
    struct fake_handle *h = calloc(1, sizeof(*h));
    if (!h) {
        pthread_mutex_unlock(&f->lock);
        return -ENOMEM;
    }
    h->magic = FAKE_MAGIC;
    atomic_store(&h->alive, 1);
    h->addr = req->addr;
    h->len = req->len;
    h->access = req->access;
    h->buffer_id = req->attr.buffer_id;
    f->live++;
    f->regs++;
    f->last_reg_addr = req->addr;
    f->last_reg_len = req->len;
    f->last_reg_access = req->access;
    pthread_mutex_unlock(&f->lock);
    *handle = h;
    return 0;
}

static void fake_dereg(void *ctx, void *handle)
{
    struct fake_registrar *f = ctx;
    struct fake_handle *h = handle;
    if (h->magic != FAKE_MAGIC || atomic_exchange(&h->alive, 0) != 1) {
        fprintf(stderr, "fake registrar: bad or double deregistration of %p\n", handle);
        abort();
    }
    pthread_mutex_lock(&f->lock);
    f->live--;
    f->deregs++;
    f->last_dereg_addr = h->addr;
    pthread_mutex_unlock(&f->lock);
    h->magic = 0;
    free(h);
}

static inline long fake_live(struct fake_registrar *f)
{
    pthread_mutex_lock(&f->lock);
    long n = f->live;
    pthread_mutex_unlock(&f->lock);
    return n;
}

static inline long fake_regs(struct fake_registrar *f)
{
    pthread_mutex_lock(&f->lock);
    long n = f->regs;
    pthread_mutex_unlock(&f->lock);
    return n;
}

static const struct tw_registrar_ops fake_registrar_ops = {
    .name = "fake",
    .reg = fake_reg,
    .dereg = fake_dereg,
};

/* ---- fake CUDA allocations ---- */

struct fake_alloc {
    uintptr_t base;
    size_t len;
    uint64_t buffer_id;
    int device;
};

#define FAKE_ALLOCS_MAX 8
static pthread_mutex_t fake_alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_alloc fake_allocs[FAKE_ALLOCS_MAX];
static _Atomic long fake_cuda_queries;

static inline void fake_cuda_set(int slot, uintptr_t base, size_t len, uint64_t id, int device)
{
    pthread_mutex_lock(&fake_alloc_lock);
    fake_allocs[slot] = (struct fake_alloc){base, len, id, device};
    pthread_mutex_unlock(&fake_alloc_lock);
}

static int fake_cuda_query(uintptr_t addr, size_t len, struct tw_mem_attr *attr, char *err,
                           size_t errlen)
{
    atomic_fetch_add(&fake_cuda_queries, 1);
    pthread_mutex_lock(&fake_alloc_lock);
    for (int i = 0; i < FAKE_ALLOCS_MAX; i++) {
        struct fake_alloc a = fake_allocs[i];
        if (a.len && addr >= a.base && addr - a.base < a.len && len > a.len - (addr - a.base)) {
            pthread_mutex_unlock(&fake_alloc_lock);
            if (err && errlen)
                snprintf(err, errlen, "range leaves fake CUDA allocation %d", i);
            return -ERANGE; /* memkind.h: starts in the allocation, leaves it */
        }
        if (a.len && addr >= a.base && addr - a.base < a.len && len <= a.len - (addr - a.base)) {
            pthread_mutex_unlock(&fake_alloc_lock);
            *attr = (struct tw_mem_attr){.kind = TW_MEMKIND_CUDA,
                                         .flags = TW_MEM_ATTR_TRACKED,
                                         .device = a.device,
                                         .buffer_id = a.buffer_id,
                                         .alloc_base = a.base,
                                         .alloc_len = a.len};
            return 0;
        }
    }
    pthread_mutex_unlock(&fake_alloc_lock);
    if (err && errlen)
        snprintf(err, errlen, "not fake CUDA memory");
    return TW_EINVAL;
}

static struct tw_memkind_ops fake_cuda_kind;

static inline const struct tw_memkind_ops *fake_cuda_ops(void)
{
    fake_cuda_kind = tw__memkind_cuda;
    fake_cuda_kind.name = "fake-cuda";
    fake_cuda_kind.query = fake_cuda_query;
    fake_cuda_kind.copy_to_host = NULL;
    fake_cuda_kind.copy_from_host = NULL;
    fake_cuda_kind.export_dmabuf = NULL;
    return &fake_cuda_kind;
}

/* For the stress workers: releases the region in *held and clears the
 * slot. Returns 1 when its registration was still alive, 0 when it was
 * deregistered while referenced (what the cache must never do). */
static inline int fake_release_held(struct tw_regcache *cache, struct tw_regcache_region **held)
{
    struct fake_handle *h = tw__regcache_region_handle(*held);
    int alive = atomic_load(&h->alive) == 1;
    tw__regcache_release(cache, *held);
    *held = NULL;
    return alive;
}

/* Runs n threads of fn (argument 1..n) for about `seconds`, then sets *stop
 * and joins them. */
static inline void fake_run_workers(void *(*fn)(void *), int n, unsigned seconds, _Atomic int *stop)
{
    pthread_t t[16];
    if (n > 16)
        n = 16;
    for (int i = 0; i < n; i++)
        if (pthread_create(&t[i], NULL, fn, (void *)(uintptr_t)(i + 1)) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            exit(1);
        }
    uint64_t t0 = tw__now_ms();
    while (tw__now_ms() - t0 < seconds * 1000ull)
        usleep(10000);
    atomic_store(stop, 1);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
}

#endif
