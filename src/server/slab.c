/*
 * Arena storage for small tensors (see slab.h for the policy and why).
 */
#include "server/slab.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels answer EINVAL */
#endif

#define HUGE_STEP (2u << 20)            /* alignment and fault-ahead step */
#define COLD_BIT ((uintptr_t)1)         /* a free block given back with MADV_DONTNEED */
#define AGED_BIT ((uintptr_t)2)         /* free and faulted in at the last trim */
#define FLAG_BITS (COLD_BIT | AGED_BIT) /* blocks are page aligned */

struct tw_slab_arena {
    struct tw_slab_arena *next;
    uint8_t *base;
    size_t bump;    /* bytes handed out from base */
    size_t faulted; /* bytes from base already faulted in */
};

int tw__slab_init(struct tw_slab *sl, uint64_t keep_max)
{
    return tw__slab_init_sized(sl, keep_max, TW_SLAB_MAX);
}

int tw__slab_init_sized(struct tw_slab *sl, uint64_t keep_max, size_t max_block)
{
    memset(sl, 0, sizeof(*sl));
    sl->page = (size_t)sysconf(_SC_PAGESIZE);
    if (max_block < sl->page || max_block % sl->page || max_block > TW_SLAB_ARENA / 8)
        return -EINVAL;
    sl->max_block = max_block;
    sl->nclasses = max_block / sl->page;
    sl->keep_max = keep_max;
    sl->classes = calloc(sl->nclasses, sizeof(*sl->classes));
    return sl->classes ? 0 : -ENOMEM;
}

/* Faults [a->faulted, upto) in. Advisory: on failure the pages fault on
 * first use instead. */
static void populate(struct tw_slab *sl, struct tw_slab_arena *a, size_t upto)
{
    if (upto <= a->faulted)
        return;
    uint8_t *p = a->base + a->faulted;
    size_t n = upto - a->faulted;
    if (madvise(p, n, MADV_POPULATE_WRITE) != 0) {
        for (size_t off = 0; off < n; off += sl->page)
            ((volatile uint8_t *)p)[off] = 0; /* fresh anonymous memory is zero */
    }
    a->faulted = upto;
}

void tw__slab_set_pinned(struct tw_slab *sl, int (*pin)(void *ctx, void *p, size_t len),
                         void (*unpin)(void *ctx, void *p), void *ctx, uint64_t max_arena_bytes)
{
    sl->pin = pin;
    sl->unpin = unpin;
    sl->pin_ctx = ctx;
    sl->max_arena_bytes = max_arena_bytes;
}

static struct tw_slab_arena *arena_new(struct tw_slab *sl)
{
    if (sl->pin && sl->arena_bytes + TW_SLAB_ARENA > sl->max_arena_bytes)
        return NULL;
    struct tw_slab_arena *a = calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    size_t map = TW_SLAB_ARENA + HUGE_STEP;
    uint8_t *m = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        free(a);
        return NULL;
    }
    /* Keep the 2 MiB-aligned TW_SLAB_ARENA bytes, unmap the slack around. */
    uint8_t *base = (uint8_t *)(((uintptr_t)m + HUGE_STEP - 1) & ~(uintptr_t)(HUGE_STEP - 1));
    if (base > m)
        munmap(m, (size_t)(base - m));
    if (base + TW_SLAB_ARENA < m + map)
        munmap(base + TW_SLAB_ARENA, (size_t)(m + map - (base + TW_SLAB_ARENA)));
    (void)madvise(base, TW_SLAB_ARENA, MADV_HUGEPAGE); /* advisory */
    if (sl->pin && sl->pin(sl->pin_ctx, base, TW_SLAB_ARENA) != 0) {
        /* Pinning is refused (locked-memory limit, no driver): no further
         * attempt, so a refused pin costs once, not per allocation. */
        sl->max_arena_bytes = sl->arena_bytes;
        munmap(base, TW_SLAB_ARENA);
        free(a);
        return NULL;
    }
    a->base = base;
    a->next = sl->arenas;
    sl->arenas = a;
    sl->arena_bytes += TW_SLAB_ARENA;
    return a;
}

static void arenas_release(struct tw_slab *sl)
{
    struct tw_slab_arena *a = sl->arenas;
    while (a) {
        struct tw_slab_arena *next = a->next;
        if (sl->pin)
            sl->unpin(sl->pin_ctx, a->base);
        munmap(a->base, TW_SLAB_ARENA);
        free(a);
        a = next;
    }
    sl->arenas = NULL;
    sl->arena_bytes = 0;
}

/* The arena holding block p and its place in sl->arenas (*index), or NULL. */
static struct tw_slab_arena *arena_of(struct tw_slab *sl, uintptr_t p, size_t *index)
{
    size_t j = 0;
    for (struct tw_slab_arena *a = sl->arenas; a; a = a->next, j++)
        if (p >= (uintptr_t)a->base && p < (uintptr_t)a->base + TW_SLAB_ARENA) {
            *index = j;
            return a;
        }
    return NULL;
}

/* Page-locked mode at its cap: finds an arena all of whose handed-out
 * blocks are free again, drops them from the free lists and makes it the
 * one bump allocation carves from, from its start (still pinned). Without
 * it, free blocks kept per size would hold the whole cap after batches of
 * a few sizes, and every later size would fall back to pageable memory.
 * Returns the arena, or NULL when every arena has a block in use. */
static struct tw_slab_arena *reclaim_arena(struct tw_slab *sl)
{
    size_t n = 0;
    for (struct tw_slab_arena *a = sl->arenas; a; a = a->next)
        n++;
    size_t *free_bytes = calloc(n ? n : 1, sizeof(*free_bytes));
    if (!free_bytes)
        return NULL;
    for (size_t i = 0; i < sl->nclasses; i++) {
        const struct tw_slab_class *c = &sl->classes[i];
        for (size_t k = c->head; k < c->nfree; k++) {
            size_t j;
            if (arena_of(sl, (uintptr_t)c->free[k] & ~FLAG_BITS, &j))
                free_bytes[j] += (i + 1) * sl->page;
        }
    }
    struct tw_slab_arena *a = sl->arenas, *prev = NULL;
    for (size_t j = 0; a && !(a->bump > 0 && free_bytes[j] == a->bump); j++)
        prev = a, a = a->next;
    free(free_bytes);
    if (!a)
        return NULL;
    for (size_t i = 0; i < sl->nclasses; i++) {
        struct tw_slab_class *c = &sl->classes[i];
        size_t kept = 0;
        for (size_t k = c->head; k < c->nfree; k++) {
            uintptr_t v = (uintptr_t)c->free[k];
            size_t j;
            if (arena_of(sl, v & ~FLAG_BITS, &j) != a)
                c->free[kept++] = c->free[k];
            else if (!(v & COLD_BIT))
                sl->kept_bytes -= (i + 1) * sl->page;
        }
        c->head = 0;
        c->nfree = kept;
    }
    a->bump = 0;
    if (prev) { /* to the front: bump allocation carves from the first */
        prev->next = a->next;
        a->next = sl->arenas;
        sl->arenas = a;
    }
    return a;
}

void *tw__slab_alloc(struct tw_slab *sl, size_t len)
{
    if (len == 0 || len >= sl->max_block || len % sl->page != 0 || sl->dead)
        return NULL;
    struct tw_slab_class *c = &sl->classes[len / sl->page - 1];
    if (c->nfree > c->head) {
        uintptr_t v = (uintptr_t)c->free[c->head++];
        if (c->head == c->nfree)
            c->head = c->nfree = 0;
        if (!(v & COLD_BIT))
            sl->kept_bytes -= len;
        sl->live_bytes += len;
        return (void *)(v & ~FLAG_BITS);
    }
    struct tw_slab_arena *a = sl->arenas;
    if (!a || TW_SLAB_ARENA - a->bump < len) {
        /* The old arena's tail (under max_block) stays unused. */
        if (!(a = arena_new(sl))) {
            if (!sl->pin || sl->freed_since_look < TW_SLAB_ARENA / 16)
                return NULL;
            sl->freed_since_look = 0;
            if (!(a = reclaim_arena(sl)))
                return NULL;
        }
    }
    uint8_t *p = a->base + a->bump;
    a->bump += len;
    /* Fault in through the end of this block's huge page, plus the next one,
     * so the following puts find their pages present. */
    size_t ahead = ((a->bump + HUGE_STEP - 1) & ~(size_t)(HUGE_STEP - 1)) + HUGE_STEP;
    populate(sl, a, ahead < TW_SLAB_ARENA ? ahead : TW_SLAB_ARENA);
    sl->live_bytes += len;
    return p;
}

void tw__slab_free(struct tw_slab *sl, void *p, size_t len)
{
    if (!p)
        return;
    sl->live_bytes -= len;
    if (sl->dead) {
        if (sl->live_bytes == 0) {
            arenas_release(sl);
            sl->dead = 0;
        }
        return;
    }
    struct tw_slab_class *c = &sl->classes[len / sl->page - 1];
    sl->freed_since_look += len;
    if (c->nfree == c->cap && c->head >= c->cap / 2 && c->head > 0) {
        /* Half the queue was taken from its front: move the rest down
         * rather than grow (each entry moves at most once per doubling). */
        memmove(c->free, c->free + c->head, (c->nfree - c->head) * sizeof(*c->free));
        c->nfree -= c->head;
        c->head = 0;
    }
    if (c->nfree == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        void **f = realloc(c->free, cap * sizeof(*f));
        if (!f) {
            /* Out of memory for the list: the block stays unused until the
             * arenas go; give its pages back now (pinned: keep them). */
            if (!sl->pin)
                (void)madvise(p, len, MADV_DONTNEED);
            return;
        }
        c->free = f;
        c->cap = cap;
    }
    uintptr_t v = (uintptr_t)p;
    if (sl->pin || sl->kept_bytes + len <= sl->keep_max) {
        sl->kept_bytes += len;
    } else {
        (void)madvise(p, len, MADV_DONTNEED);
        v |= COLD_BIT;
    }
    c->free[c->nfree++] = (void *)v;
}

uint64_t tw__slab_trim(struct tw_slab *sl)
{
    uint64_t freed = 0;
    for (size_t i = 0; !sl->dead && !sl->pin && i < sl->nclasses; i++) {
        struct tw_slab_class *c = &sl->classes[i];
        size_t len = (i + 1) * sl->page;
        for (size_t k = c->head; k < c->nfree; k++) {
            uintptr_t v = (uintptr_t)c->free[k];
            if (v & COLD_BIT)
                continue;
            if (v & AGED_BIT) {
                (void)madvise((void *)(v & ~FLAG_BITS), len, MADV_DONTNEED);
                v = (v & ~FLAG_BITS) | COLD_BIT;
                sl->kept_bytes -= len;
                freed += len;
            } else {
                v |= AGED_BIT;
            }
            c->free[k] = (void *)v;
        }
    }
    return freed;
}

void tw__slab_destroy(struct tw_slab *sl)
{
    for (size_t i = 0; sl->classes && i < sl->nclasses; i++)
        free(sl->classes[i].free);
    free(sl->classes);
    sl->classes = NULL;
    sl->nclasses = 0;
    sl->kept_bytes = 0;
    if (sl->live_bytes == 0)
        arenas_release(sl);
    else
        sl->dead = 1;
}
