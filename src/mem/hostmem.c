/*
 * Tracked host buffers: a sorted array of disjoint ranges under one mutex.
 * Declarations are rare and few (tensors, staging pools), so a sorted array
 * with binary search beats a tree on both code and speed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mem/hostmem.h"
#include "tensorwire/error.h"
#include "tensorwire/mem.h"

struct tracked {
    uintptr_t base;
    size_t len;
    int lib_owned; /* tw__hostmem_alloc: munmap on free */
};

struct hook {
    tw_hostmem_hook fn;
    void *ctx;
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tracked *table;
static size_t table_n, table_cap;
static _Atomic uint64_t generation;

static pthread_mutex_t hook_lock = PTHREAD_MUTEX_INITIALIZER;
static struct hook *hooks;
static size_t hooks_n, hooks_cap;

/* Index of the first entry with base > addr (table_lock held). */
static size_t upper_bound(uintptr_t addr)
{
    size_t lo = 0, hi = table_n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (table[mid].base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int track(uintptr_t base, size_t len, int lib_owned)
{
    int rc = 0;
    pthread_mutex_lock(&table_lock);
    size_t i = upper_bound(base);
    if (i > 0 && table[i - 1].base == base) {
        rc = -EEXIST;
        goto out_unlock;
    }
    if ((i > 0 && table[i - 1].base + table[i - 1].len > base) ||
        (i < table_n && table[i].base < base + len)) {
        rc = TW_EINVAL;
        goto out_unlock;
    }
    if (table_n == table_cap) {
        size_t cap = table_cap ? table_cap * 2 : 16;
        struct tracked *t = realloc(table, cap * sizeof(*t));
        if (!t) {
            rc = -ENOMEM;
            goto out_unlock;
        }
        table = t;
        table_cap = cap;
    }
    memmove(&table[i + 1], &table[i], (table_n - i) * sizeof(*table));
    table[i] = (struct tracked){.base = base, .len = len, .lib_owned = lib_owned};
    table_n++;
out_unlock:
    pthread_mutex_unlock(&table_lock);
    return rc;
}

/* Removes the entry starting at base; returns its length or 0 if absent. */
static size_t untrack(uintptr_t base)
{
    size_t len = 0;
    pthread_mutex_lock(&table_lock);
    size_t i = upper_bound(base);
    if (i > 0 && table[i - 1].base == base) {
        len = table[i - 1].len;
        memmove(&table[i - 1], &table[i], (table_n - i) * sizeof(*table));
        table_n--;
        /* Bumped inside the lock so a finder that saw the range tracked
         * also sees the old generation (see hostmem.h). */
        atomic_fetch_add(&generation, 1);
    }
    if (table_n == 0) {
        free(table);
        table = NULL;
        table_cap = 0;
    }
    pthread_mutex_unlock(&table_lock);
    return len;
}

static void notify(uintptr_t base, size_t len)
{
    pthread_mutex_lock(&hook_lock);
    for (size_t i = 0; i < hooks_n; i++)
        hooks[i].fn(hooks[i].ctx, base, len);
    pthread_mutex_unlock(&hook_lock);
}

int tw__hostmem_find(uintptr_t addr, size_t len, uintptr_t *base, size_t *blen, uint64_t *gen)
{
    int found = 0;
    pthread_mutex_lock(&table_lock);
    *gen = atomic_load(&generation);
    size_t i = upper_bound(addr);
    if (i > 0) {
        const struct tracked *t = &table[i - 1];
        if (addr - t->base <= t->len && len <= t->len - (addr - t->base)) {
            *base = t->base;
            *blen = t->len;
            found = 1;
        }
    }
    pthread_mutex_unlock(&table_lock);
    return found;
}

uint64_t tw__hostmem_generation(void)
{
    return atomic_load(&generation);
}

int tw__hostmem_subscribe(tw_hostmem_hook fn, void *ctx)
{
    int rc = 0;
    pthread_mutex_lock(&hook_lock);
    if (hooks_n == hooks_cap) {
        size_t cap = hooks_cap ? hooks_cap * 2 : 4;
        struct hook *h = realloc(hooks, cap * sizeof(*h));
        if (!h) {
            rc = -ENOMEM;
            goto out_unlock;
        }
        hooks = h;
        hooks_cap = cap;
    }
    hooks[hooks_n++] = (struct hook){.fn = fn, .ctx = ctx};
out_unlock:
    pthread_mutex_unlock(&hook_lock);
    return rc;
}

void tw__hostmem_unsubscribe(tw_hostmem_hook fn, void *ctx)
{
    pthread_mutex_lock(&hook_lock);
    for (size_t i = 0; i < hooks_n; i++) {
        if (hooks[i].fn == fn && hooks[i].ctx == ctx) {
            memmove(&hooks[i], &hooks[i + 1], (hooks_n - i - 1) * sizeof(*hooks));
            hooks_n--;
            break;
        }
    }
    if (hooks_n == 0) {
        free(hooks);
        hooks = NULL;
        hooks_cap = 0;
    }
    pthread_mutex_unlock(&hook_lock);
}

int tw_mem_register(void *ptr, size_t len, unsigned int flags)
{
    if (!ptr || len == 0 || flags != 0 || (uintptr_t)ptr + len < (uintptr_t)ptr)
        return TW_EINVAL;
    return track((uintptr_t)ptr, len, 0);
}

int tw_mem_unregister(void *ptr)
{
    size_t len = untrack((uintptr_t)ptr);
    if (len == 0)
        return -ENOENT;
    notify((uintptr_t)ptr, len);
    return 0;
}

int tw__hostmem_alloc(size_t len, void **out)
{
    if (len == 0)
        return TW_EINVAL;
    /* mmap: page aligned (no neighbour shares a registered page) and zeroed. */
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return -errno;
    int rc = track((uintptr_t)p, len, 1);
    if (rc) {
        munmap(p, len);
        return rc;
    }
    *out = p;
    return 0;
}

void tw__hostmem_free(void *p)
{
    if (!p)
        return;
    size_t len = untrack((uintptr_t)p);
    if (len == 0)
        return;
    notify((uintptr_t)p, len);
    munmap(p, len);
}
