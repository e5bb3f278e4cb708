/*
 * Arena storage for small tensors (see slab.h for the policy and why).
 */
#include "server/slab.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
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
    size_t faulted; /* bytes from base already faulted in (atomic: the
                     * loop and the faulter both move it, only forward) */
};

#define FAULT_RANGES 16 /* other ranges queued at most (tw__slab_fault_range) */

/* Memory outside the slab to fault in from its start: done bytes so far. */
struct tw_slab_fault_range {
    uint8_t *p;
    size_t len, done;
};

/* The helper thread that faults arenas in ahead of the bump pointer, and
 * then the ranges the store queues (slab.h). Its requests, under lock:
 * fault arena through upto; fault each range. */
struct tw_slab_faulter {
    pthread_mutex_t lock;
    pthread_cond_t cond;    /* work or stop for the thread */
    pthread_cond_t stepped; /* a range's step ended (tw__slab_fault_forget waits) */
    pthread_t thread;
    struct tw_slab_arena *arena;
    size_t upto;
    struct tw_slab_fault_range ranges[FAULT_RANGES]; /* first come, first faulted */
    unsigned nranges;
    uint8_t *busy; /* the range a step is faulting now, outside the lock */
    int stop;
    int failed; /* MADV_POPULATE_WRITE failed: the loop faults for itself */
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

static size_t faulted_of(struct tw_slab_arena *a)
{
    return __atomic_load_n(&a->faulted, __ATOMIC_ACQUIRE);
}

/* Moves a's faulted mark forward to upto (never back: the other thread may
 * have moved it further meanwhile). */
static void faulted_raise(struct tw_slab_arena *a, size_t upto)
{
    size_t cur = faulted_of(a);
    while (cur < upto && !__atomic_compare_exchange_n(&a->faulted, &cur, upto, 0, __ATOMIC_RELEASE,
                                                      __ATOMIC_ACQUIRE)) {
    }
}

/* The loop's part: faults [a->faulted, upto) in. Advisory: on failure the
 * pages fault on first use instead. Touching pages is safe here, not on
 * the faulter: the range starts at or after the block just handed out,
 * which no put has written yet, and the rest is not handed out. A range
 * the faulter is faulting at the same time is faulted twice, harmlessly. */
static void populate(struct tw_slab *sl, struct tw_slab_arena *a, size_t upto)
{
    size_t from = faulted_of(a);
    if (upto <= from)
        return;
    uint8_t *p = a->base + from;
    size_t n = upto - from;
    if (madvise(p, n, MADV_POPULATE_WRITE) != 0) {
        for (size_t off = 0; off < n; off += sl->page)
            ((volatile uint8_t *)p)[off] = 0; /* fresh anonymous memory is zero */
    }
    faulted_raise(a, upto);
}

/* The faulter: one 2 MiB step per round, so a new request (the next arena)
 * or a stop is seen within a step; the slab's arena first, then the other
 * ranges in the order they came. MADV_POPULATE_WRITE only: it faults
 * pages in without writing them, and by the time a step runs, a block in
 * it may have been handed out and written (a range: received into). */
static int arena_pending(struct tw_slab_faulter *f)
{
    return f->arena && faulted_of(f->arena) < f->upto;
}

static void range_drop(struct tw_slab_faulter *f, unsigned i)
{
    memmove(&f->ranges[i], &f->ranges[i + 1], (f->nranges - i - 1) * sizeof(f->ranges[0]));
    f->nranges--;
}

static void *faulter_main(void *arg)
{
    struct tw_slab_faulter *f = arg;
    pthread_mutex_lock(&f->lock);
    for (;;) {
        while (!f->stop && !arena_pending(f) && f->nranges == 0)
            pthread_cond_wait(&f->cond, &f->lock);
        if (f->stop)
            break;
        if (!arena_pending(f)) {
            /* The first range's next step. It stays queued meanwhile, and
             * busy keeps tw__slab_fault_forget (before an munmap) waiting. */
            struct tw_slab_fault_range *r = &f->ranges[0];
            uint8_t *p = r->p, *at = r->p + r->done;
            size_t n = r->len - r->done > HUGE_STEP ? HUGE_STEP : r->len - r->done;
            f->busy = p;
            pthread_mutex_unlock(&f->lock);
            int failed = madvise(at, n, MADV_POPULATE_WRITE) != 0;
            pthread_mutex_lock(&f->lock);
            f->busy = NULL;
            pthread_cond_broadcast(&f->stepped);
            for (unsigned i = 0; i < f->nranges; i++) {
                if (f->ranges[i].p != p)
                    continue;
                f->ranges[i].done += n;
                if (failed || f->ranges[i].done >= f->ranges[i].len)
                    range_drop(f, i); /* advisory: a failed range faults on use */
                break;
            }
            continue;
        }
        struct tw_slab_arena *a = f->arena;
        size_t upto = f->upto;
        pthread_mutex_unlock(&f->lock);
        size_t from = faulted_of(a); /* the loop may have passed upto meanwhile */
        int failed = 0;
        if (from < upto) {
            size_t to = upto - from > HUGE_STEP ? from + HUGE_STEP : upto;
            failed = madvise(a->base + from, to - from, MADV_POPULATE_WRITE) != 0;
            if (!failed)
                faulted_raise(a, to);
        }
        pthread_mutex_lock(&f->lock);
        if (failed) {
            f->failed = 1;
            break;
        }
    }
    f->nranges = 0;
    pthread_mutex_unlock(&f->lock);
    return NULL;
}

/* Starts sl's faulter with its first arena. On any failure the loop goes
 * on faulting for itself (faulter_off). */
static void faulter_start(struct tw_slab *sl)
{
    struct tw_slab_faulter *f = calloc(1, sizeof(*f));
    if (!f) {
        sl->faulter_off = 1;
        return;
    }
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->cond, NULL);
    pthread_cond_init(&f->stepped, NULL);
    /* No signal for this thread: the daemon takes SIGTERM through a
     * signalfd that every thread must block (server.c). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&f->thread, NULL, faulter_main, f);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_cond_destroy(&f->stepped);
        pthread_cond_destroy(&f->cond);
        pthread_mutex_destroy(&f->lock);
        free(f);
        sl->faulter_off = 1;
        return;
    }
    sl->faulter = f;
}

/* sl's faulter, started on first use where the slab may have one (not
 * page-locked, not destroyed, not given up: faulter_off); else NULL. */
static struct tw_slab_faulter *faulter_of(struct tw_slab *sl)
{
    if (!sl->faulter && !sl->faulter_off && !sl->pin && !sl->dead)
        faulter_start(sl);
    return sl->faulter;
}

static void faulter_stop(struct tw_slab *sl)
{
    struct tw_slab_faulter *f = sl->faulter;
    if (!f)
        return;
    pthread_mutex_lock(&f->lock);
    f->stop = 1;
    pthread_cond_signal(&f->cond);
    pthread_mutex_unlock(&f->lock);
    pthread_join(f->thread, NULL);
    pthread_cond_destroy(&f->stepped);
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->lock);
    free(f);
    sl->faulter = NULL;
    sl->asked_arena = NULL;
    sl->asked_upto = 0;
}

/* Asks the faulter (started on first use) to keep arena a faulted from
 * `from` on, as far ahead as the slab has bytes in use (at most
 * TW_SLAB_FAULT_AHEAD_MAX). Returns 0, or -1 when there is no faulter (any
 * more): the loop faults ahead itself. */
static int faulter_ask(struct tw_slab *sl, struct tw_slab_arena *a, size_t from)
{
    struct tw_slab_faulter *f = faulter_of(sl);
    if (!f)
        return -1;
    size_t lead =
        sl->live_bytes < TW_SLAB_FAULT_AHEAD_MAX ? (size_t)sl->live_bytes : TW_SLAB_FAULT_AHEAD_MAX;
    if (lead < HUGE_STEP)
        lead = HUGE_STEP;
    size_t upto = (from + lead + HUGE_STEP - 1) & ~(size_t)(HUGE_STEP - 1);
    if (upto > TW_SLAB_ARENA)
        upto = TW_SLAB_ARENA;
    if (a == sl->asked_arena && upto <= sl->asked_upto)
        return 0;
    int failed;
    pthread_mutex_lock(&f->lock);
    failed = f->failed;
    if (!failed) {
        f->arena = a;
        f->upto = upto;
        pthread_cond_signal(&f->cond);
    }
    pthread_mutex_unlock(&f->lock);
    if (failed) {
        faulter_stop(sl);
        sl->faulter_off = 1;
        return -1;
    }
    sl->asked_arena = a;
    sl->asked_upto = upto;
    return 0;
}

void tw__slab_fault_range(struct tw_slab *sl, void *p, size_t len)
{
    struct tw_slab_faulter *f = faulter_of(sl);
    if (!f || !p || len == 0)
        return;
    pthread_mutex_lock(&f->lock);
    if (!f->failed && f->nranges < FAULT_RANGES) {
        f->ranges[f->nranges++] = (struct tw_slab_fault_range){.p = p, .len = len, .done = 0};
        pthread_cond_signal(&f->cond);
    }
    pthread_mutex_unlock(&f->lock);
}

void tw__slab_fault_forget(struct tw_slab *sl, void *p)
{
    struct tw_slab_faulter *f = sl->faulter;
    if (!f || !p)
        return;
    pthread_mutex_lock(&f->lock);
    while (f->busy == p)
        pthread_cond_wait(&f->stepped, &f->lock);
    for (unsigned i = 0; i < f->nranges; i++) {
        if (f->ranges[i].p == p) {
            range_drop(f, i);
            break;
        }
    }
    pthread_mutex_unlock(&f->lock);
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
    sl->live_bytes += len;
    /* This block through the end of its huge page must be present (unless
     * the faulter got there first); the faulter takes the pages ahead.
     * Without it, the next huge page too, so the following puts find
     * their pages present. */
    size_t need = (a->bump + HUGE_STEP - 1) & ~(size_t)(HUGE_STEP - 1);
    if (faulter_ask(sl, a, need) != 0)
        need += HUGE_STEP;
    populate(sl, a, need < TW_SLAB_ARENA ? need : TW_SLAB_ARENA);
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
    faulter_stop(sl); /* before any arena can go */
    sl->faulter_off = 1;
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
