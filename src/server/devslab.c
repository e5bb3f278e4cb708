/*
 * Small device blocks carved from chunks (server/devslab.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server/devslab.h"
#include "tensorwire/error.h"

struct tw_devslab_entry {
    uint32_t idx; /* block index in the chunk */
    uint64_t ticket;
};

struct tw_devslab_chunk {
    uintptr_t base;
    size_t bsize;
    uint32_t nblk, nfree;
    unsigned cls;
    int used; /* a block was taken or given back since the last trim */
    int partial;
    struct tw_devslab_chunk *pnext, *pprev;
    struct tw_devslab_entry stack[]; /* nfree free blocks, the top last */
};

static size_t chunk_len(const struct tw_devslab_chunk *c)
{
    return (size_t)c->nblk * c->bsize;
}

size_t tw__devslab_block_size(size_t len, unsigned *cls)
{
    size_t b;
    unsigned k = 0, i;
    if (len <= 8 * TW_DEVSLAB_ALIGN) {
        b = (len + TW_DEVSLAB_ALIGN - 1) / TW_DEVSLAB_ALIGN * TW_DEVSLAB_ALIGN;
        if (b == 0)
            b = TW_DEVSLAB_ALIGN;
        i = (unsigned)(b / TW_DEVSLAB_ALIGN) - 1;
    } else {
        /* 2^k < len <= 2^(k+1): steps of 2^(k-3), k >= 11. */
        while (((size_t)2 << k) < len)
            k++;
        size_t step = (size_t)1 << (k - 3);
        b = (len + step - 1) / step * step;
        i = 8 + (k - 11) * 8 + (unsigned)((b - ((size_t)1 << k)) / step) - 1;
    }
    if (cls)
        *cls = i;
    return b;
}

void tw__devslab_init(struct tw_devslab *s, const struct tw_devslab_ops *ops, void *ctx,
                      uint64_t keep_max)
{
    memset(s, 0, sizeof(*s));
    s->ops = ops;
    s->ctx = ctx;
    s->keep_max = keep_max;
}

static void partial_remove(struct tw_devslab *s, struct tw_devslab_chunk *c)
{
    if (!c->partial)
        return;
    if (c->pprev)
        c->pprev->pnext = c->pnext;
    else
        s->partial[c->cls] = c->pnext;
    if (c->pnext)
        c->pnext->pprev = c->pprev;
    c->pnext = c->pprev = NULL;
    c->partial = 0;
}

static void partial_push(struct tw_devslab *s, struct tw_devslab_chunk *c)
{
    c->pprev = NULL;
    c->pnext = s->partial[c->cls];
    if (c->pnext)
        c->pnext->pprev = c;
    s->partial[c->cls] = c;
    c->partial = 1;
}

/* Index of the last chunk starting at or below a (nchunks when none). */
static size_t find_at_or_below(const struct tw_devslab *s, uintptr_t a)
{
    size_t lo = 0, hi = s->nchunks;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->chunks[mid]->base <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo ? lo - 1 : s->nchunks;
}

/* Gives chunk i back to the driver (the caller quiesced) and drops it. */
static void release_at(struct tw_devslab *s, size_t i)
{
    struct tw_devslab_chunk *c = s->chunks[i];
    size_t len = chunk_len(c);
    partial_remove(s, c);
    memmove(&s->chunks[i], &s->chunks[i + 1], (s->nchunks - i - 1) * sizeof(*s->chunks));
    s->nchunks--;
    s->chunk_bytes -= len;
    s->nclass[c->cls]--;
    s->free_bytes -= (uint64_t)c->nfree * c->bsize;
    if (c->nfree == c->nblk)
        s->idle_bytes -= len;
    s->ops->free(s->ctx, (void *)c->base);
    free(c);
}

static int new_chunk(struct tw_devslab *s, unsigned cls, size_t bsize,
                     struct tw_devslab_chunk **out, char *err, size_t errlen)
{
    /* The class's chunks so far: 2 MiB, 2 MiB, 4, 4, 8, 8, ... (header). */
    size_t target = TW_DEVSLAB_CHUNK;
    for (uint32_t k = s->nclass[cls] / 2; k > 0 && target < TW_DEVSLAB_CHUNK_MAX; k--)
        target *= 2;
    uint32_t nblk = bsize >= target ? 1 : (uint32_t)(target / bsize);
    size_t len = (size_t)nblk * bsize;
    void *p = NULL;
    if (s->nchunks == s->capchunks) {
        size_t cap = s->capchunks ? 2 * s->capchunks : 16;
        struct tw_devslab_chunk **a = realloc(s->chunks, cap * sizeof(*a));
        if (!a)
            return -ENOMEM;
        s->chunks = a;
        s->capchunks = cap;
    }
    int rc = s->ops->alloc(s->ctx, len, &p, err, errlen);
    if (rc == -ENOMEM && s->idle_bytes) {
        tw__devslab_trim(s, 1);
        rc = s->ops->alloc(s->ctx, len, &p, err, errlen);
    }
    if (rc == -ENOMEM && target > TW_DEVSLAB_CHUNK && bsize < target) {
        nblk = bsize >= TW_DEVSLAB_CHUNK ? 1 : (uint32_t)(TW_DEVSLAB_CHUNK / bsize);
        len = (size_t)nblk * bsize;
        rc = s->ops->alloc(s->ctx, len, &p, err, errlen);
    }
    if (rc)
        return rc;
    struct tw_devslab_chunk *c = malloc(sizeof(*c) + nblk * sizeof(c->stack[0]));
    if (!c) {
        s->ops->free(s->ctx, p);
        return -ENOMEM;
    }
    memset(c, 0, sizeof(*c));
    c->base = (uintptr_t)p;
    c->bsize = bsize;
    c->nblk = c->nfree = nblk;
    c->cls = cls;
    for (uint32_t i = 0; i < nblk; i++) /* block 0 on top */
        c->stack[i] = (struct tw_devslab_entry){.idx = nblk - 1 - i, .ticket = 0};
    size_t at = find_at_or_below(s, c->base);
    at = at == s->nchunks ? 0 : at + 1;
    memmove(&s->chunks[at + 1], &s->chunks[at], (s->nchunks - at) * sizeof(*s->chunks));
    s->chunks[at] = c;
    s->nchunks++;
    s->chunk_bytes += len;
    s->nclass[cls]++;
    s->free_bytes += len;
    s->idle_bytes += len;
    s->chunk_allocs++;
    partial_push(s, c);
    *out = c;
    return 0;
}

int tw__devslab_get(struct tw_devslab *s, size_t len, void **p, uint64_t *ticket, char *err,
                    size_t errlen)
{
    if (len == 0 || len >= TW_DEVSLAB_MAX)
        return TW_EINVAL;
    unsigned cls;
    size_t bsize = tw__devslab_block_size(len, &cls);
    struct tw_devslab_chunk *c = s->partial[cls];
    if (!c) {
        int rc = new_chunk(s, cls, bsize, &c, err, errlen);
        if (rc)
            return rc;
    }
    if (c->nfree == c->nblk)
        s->idle_bytes -= chunk_len(c);
    struct tw_devslab_entry e = c->stack[--c->nfree];
    if (c->nfree == 0)
        partial_remove(s, c);
    c->used = 1;
    s->free_bytes -= bsize;
    *p = (void *)(c->base + (uintptr_t)e.idx * bsize);
    *ticket = e.ticket;
    return 0;
}

int tw__devslab_put(struct tw_devslab *s, void *p, size_t len, uint64_t ticket)
{
    if (len == 0 || len >= TW_DEVSLAB_MAX)
        return TW_EINVAL;
    unsigned cls;
    size_t bsize = tw__devslab_block_size(len, &cls);
    uintptr_t a = (uintptr_t)p;
    size_t i = find_at_or_below(s, a);
    if (i == s->nchunks)
        return TW_EINVAL;
    struct tw_devslab_chunk *c = s->chunks[i];
    if (c->cls != cls || a - c->base >= chunk_len(c) || (a - c->base) % bsize != 0 ||
        c->nfree == c->nblk)
        return TW_EINVAL;
    c->stack[c->nfree++] =
        (struct tw_devslab_entry){.idx = (uint32_t)((a - c->base) / bsize), .ticket = ticket};
    c->used = 1;
    s->free_bytes += bsize;
    /* Blocks come from the chunk given back to last: move it to the front. */
    partial_remove(s, c);
    partial_push(s, c);
    if (c->nfree == c->nblk) {
        s->idle_bytes += chunk_len(c);
        if (s->idle_bytes > s->keep_max) {
            s->ops->quiesce(s->ctx);
            release_at(s, i);
        }
    }
    return 0;
}

uint64_t tw__devslab_trim(struct tw_devslab *s, int all)
{
    uint64_t freed = 0;
    int quiesced = 0;
    for (size_t i = 0; i < s->nchunks;) {
        struct tw_devslab_chunk *c = s->chunks[i];
        if (c->nfree != c->nblk || (!all && c->used)) {
            c->used = 0;
            i++;
            continue;
        }
        if (!quiesced) {
            s->ops->quiesce(s->ctx);
            quiesced = 1;
        }
        freed += chunk_len(c);
        release_at(s, i);
    }
    return freed;
}

void tw__devslab_destroy(struct tw_devslab *s)
{
    if (s->nchunks)
        s->ops->quiesce(s->ctx);
    while (s->nchunks)
        release_at(s, s->nchunks - 1);
    free(s->chunks);
    tw__devslab_init(s, s->ops, s->ctx, s->keep_max);
}
