/*
 * Staging pipeline (staging.h).
 *
 * Chunk k always uses pipe slot k % depth, so a slot's next chunk is
 * k + depth and the slot is reusable exactly when chunk k is done with it.
 * A pipe slot borrows a pool slot for one chunk (when the chunk's copy is
 * queued, or TO_DEVICE when it is handed out) and gives it back when that
 * chunk is done: one uncontended mutex round trip per chunk of megabytes.
 *
 * All copies of one pipe go on its one stream, so they finish in queue
 * order: checking only the oldest unfinished copy's event is enough, and
 * tw__staging_wait() waits on that one event.
 *
 * Lock: only the pool's mutex, held for a few instructions to take or give
 * a slot (and by wait's condition variable); never across a driver call.
 */
#include "mem/staging.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mem/hostmem.h"
#include "proto/proto.h"
#include "tensorwire/error.h"

#define STAGING_ALIGN ((size_t)4096)

uint64_t tw__staging_nchunks(uint64_t len, size_t chunk)
{
    if (chunk == 0)
        return 0;
    return len / chunk + (len % chunk != 0);
}

int tw__staging_chunk_span(uint64_t len, size_t chunk, uint64_t k, uint64_t *off, size_t *clen)
{
    if (chunk == 0 || k >= tw__staging_nchunks(len, chunk))
        return TW_EINVAL;
    uint64_t o = k * (uint64_t)chunk; /* < len, so no overflow */
    uint64_t rest = len - o;
    *off = o;
    *clen = rest < chunk ? (size_t)rest : chunk;
    return 0;
}

/* ---- pool ---- */

struct tw_staging_pool {
    const struct tw_memkind_async_ops *ops;
    int device;
    uint8_t *base;
    size_t chunk;
    unsigned nslots;
    pthread_mutex_t lock;
    pthread_cond_t freed; /* broadcast whenever a slot comes back */
    unsigned nfree;
    unsigned free_stack[]; /* nslots entries, the first nfree are free */
};

int tw__staging_pool_create(const struct tw_memkind_async_ops *ops, int device, size_t chunk,
                            unsigned nslots, struct tw_staging_pool **out, char *err, size_t errlen)
{
    if (!ops || chunk == 0 || chunk % STAGING_ALIGN || nslots == 0 || chunk > SIZE_MAX / nslots) {
        if (err && errlen)
            snprintf(err, errlen, "staging pool: bad geometry (%u slots of %zu bytes)", nslots,
                     chunk);
        return TW_EINVAL;
    }
    struct tw_staging_pool *p = calloc(1, sizeof(*p) + nslots * sizeof(p->free_stack[0]));
    if (!p)
        return -ENOMEM;
    p->ops = ops;
    p->device = device;
    p->chunk = chunk;
    p->nslots = nslots;
    /* Tracked host memory (hostmem.h), pinned by the kind: registration
     * caches know its lifetime, so a data plane registers the pool once and
     * keeps it; freeing it at destroy invalidates those registrations. */
    void *mem = NULL;
    int rc = tw__hostmem_alloc(chunk * nslots, &mem);
    if (rc < 0) {
        if (err && errlen)
            snprintf(err, errlen, "staging pool: cannot map %zu bytes", chunk * nslots);
        goto out_free_pool;
    }
    rc = ops->pin(device, mem, chunk * nslots, err, errlen);
    if (rc < 0)
        goto out_free_memory;
    p->base = mem;
    if (pthread_mutex_init(&p->lock, NULL) != 0) {
        rc = -ENOMEM;
        goto out_unpin;
    }
    if (pthread_cond_init(&p->freed, NULL) != 0) {
        rc = -ENOMEM;
        goto out_destroy_lock;
    }
    /* Hand out low slots first (the stack pops from the end). */
    for (unsigned i = 0; i < nslots; i++)
        p->free_stack[i] = nslots - 1 - i;
    p->nfree = nslots;
    *out = p;
    return 0;

out_destroy_lock:
    pthread_mutex_destroy(&p->lock);
out_unpin:
    ops->unpin(device, mem);
out_free_memory:
    tw__hostmem_free(mem);
out_free_pool:
    free(p);
    return rc;
}

void tw__staging_pool_destroy(struct tw_staging_pool *p)
{
    if (!p)
        return;
    p->ops->unpin(p->device, p->base);
    tw__hostmem_free(p->base);
    pthread_cond_destroy(&p->freed);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

void tw__staging_pool_memory(const struct tw_staging_pool *p, void **base, size_t *len)
{
    *base = p->base;
    *len = p->chunk * p->nslots;
}

size_t tw__staging_pool_chunk(const struct tw_staging_pool *p)
{
    return p->chunk;
}

unsigned tw__staging_pool_slots(const struct tw_staging_pool *p)
{
    return p->nslots;
}

unsigned tw__staging_pool_free_slots(struct tw_staging_pool *p)
{
    pthread_mutex_lock(&p->lock);
    unsigned n = p->nfree;
    pthread_mutex_unlock(&p->lock);
    return n;
}

/* A free slot index, or -1 when all are taken. */
static int pool_take(struct tw_staging_pool *p)
{
    int s = -1;
    pthread_mutex_lock(&p->lock);
    if (p->nfree)
        s = (int)p->free_stack[--p->nfree];
    pthread_mutex_unlock(&p->lock);
    return s;
}

static void pool_give(struct tw_staging_pool *p, int s)
{
    pthread_mutex_lock(&p->lock);
    p->free_stack[p->nfree++] = (unsigned)s;
    pthread_cond_broadcast(&p->freed);
    pthread_mutex_unlock(&p->lock);
}

/* ---- pipe ---- */

enum slot_state {
    SLOT_IDLE = 0, /* no chunk (may still hold a pool slot for the next) */
    SLOT_COPYING,  /* a copy of `chunk` is queued on the stream */
    SLOT_READY,    /* TO_HOST: copied, not yet handed out */
    SLOT_HELD,     /* handed out by acquire, not yet released */
};

struct pipe_slot {
    int pool_slot; /* -1: none borrowed */
    enum slot_state state;
    uint64_t chunk;
    void *event;
};

struct tw_staging_pipe {
    struct tw_staging_pool *pool;
    const struct tw_memkind_async_ops *async;
    enum tw_staging_dir dir;
    struct tw_mem_attr attr;
    uintptr_t dev;
    uint64_t len;
    size_t chunk;
    uint64_t nchunks;
    unsigned depth;
    unsigned flags;
    void *stream;
    uint8_t *host;         /* tw__staging_begin_host: the caller's buffer, else NULL */
    uint64_t next_copy;    /* TO_HOST: next chunk to queue device->host */
    uint64_t next_acquire; /* next chunk to hand out */
    uint64_t next_release; /* TO_DEVICE: next chunk expected back (in order) */
    uint64_t oldest_copy;  /* oldest chunk whose copy may still be queued */
    uint64_t done;         /* chunks finished */
    int wants_slot;        /* the last attempt found the pool empty */
    int failed;            /* 0 or the negative code of the failure */
    uint32_t crc;
    char err[256];
    struct pipe_slot slot[];
};

static int fail(struct tw_staging_pipe *p, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct tw_staging_pipe *p, int rc, const char *fmt, ...)
{
    if (!p->failed) {
        p->failed = rc;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err, sizeof(p->err), fmt, ap);
        va_end(ap);
    }
    return p->failed;
}

static uint8_t *slot_ptr(const struct tw_staging_pipe *p, const struct pipe_slot *s)
{
    if (p->host) /* chunk k lives at its own offset of the caller's buffer */
        return p->host + s->chunk * (uint64_t)p->chunk;
    return p->pool->base + (size_t)s->pool_slot * p->pool->chunk;
}

/* Chunk k is done with its slot: the pool slot goes straight back, so a
 * pipe never sits on pinned memory it is not using (keeping it for the
 * slot's next chunk could starve this very pipe, whose next copy in order
 * may need a slot another of its idle slots holds). */
static void slot_finish(struct tw_staging_pipe *p, struct pipe_slot *s)
{
    s->state = SLOT_IDLE;
    p->done++;
    if (s->pool_slot >= 0) {
        pool_give(p->pool, s->pool_slot);
        s->pool_slot = -1;
    }
}

/* Makes sure s holds a pool slot. 1 when it does, 0 when the pool is empty. */
static int slot_borrow(struct tw_staging_pipe *p, struct pipe_slot *s)
{
    if (p->host)
        return 1; /* no pool: every chunk has its place */
    if (s->pool_slot < 0)
        s->pool_slot = pool_take(p->pool);
    p->wants_slot = s->pool_slot < 0;
    return s->pool_slot >= 0;
}

/* Queues the copy of chunk k through slot s and records its event. */
static int queue_copy(struct tw_staging_pipe *p, struct pipe_slot *s, uint64_t k)
{
    uint64_t off = 0;
    size_t clen = 0;
    char why[200] = "";
    tw__staging_chunk_span(p->len, p->chunk, k, &off, &clen);
    int rc;
    if (p->dir == TW_STAGING_TO_HOST)
        rc = p->async->copy_to_host_async(p->stream, slot_ptr(p, s), p->dev + off, clen, &p->attr,
                                          why, sizeof(why));
    else
        rc = p->async->copy_from_host_async(p->stream, p->dev + off, slot_ptr(p, s), clen, &p->attr,
                                            why, sizeof(why));
    if (rc == 0)
        rc = p->async->event_record(p->attr.device, s->event, p->stream, why, sizeof(why));
    if (rc < 0)
        return fail(p, rc, "staging chunk %llu (%zu bytes at offset %llu): %s",
                    (unsigned long long)k, clen, (unsigned long long)off, why);
    s->state = SLOT_COPYING;
    s->chunk = k;
    return 0;
}

/* The end of the queued copies (exclusive). */
static uint64_t queued_end(const struct tw_staging_pipe *p)
{
    return p->dir == TW_STAGING_TO_HOST ? p->next_copy : p->next_release;
}

/* Notices finished copies, oldest first; stops at the first still running. */
static int reap(struct tw_staging_pipe *p)
{
    while (p->oldest_copy < queued_end(p)) {
        struct pipe_slot *s = &p->slot[p->oldest_copy % p->depth];
        char why[200] = "";
        int q = p->async->event_query(p->attr.device, s->event, why, sizeof(why));
        if (q < 0)
            return fail(p, q, "staging chunk %llu: copy failed: %s", (unsigned long long)s->chunk,
                        why);
        if (q == 0)
            break;
        if (p->dir == TW_STAGING_TO_HOST)
            s->state = SLOT_READY;
        else
            slot_finish(p, s);
        p->oldest_copy++;
    }
    return 0;
}

int tw__staging_poll(struct tw_staging_pipe *p)
{
    if (p->failed)
        return p->failed;
    p->wants_slot = 0; /* set again below if a borrow still finds none */
    int rc = reap(p);
    if (rc < 0)
        return rc;
    /* TO_HOST: keep up to depth device->host copies queued ahead of the
     * consumer; a slot is free once its previous chunk was released. */
    while (p->dir == TW_STAGING_TO_HOST && p->next_copy < p->nchunks) {
        struct pipe_slot *s = &p->slot[p->next_copy % p->depth];
        if (s->state != SLOT_IDLE || !slot_borrow(p, s))
            break;
        s->chunk = p->next_copy; /* where it goes, for slot_ptr */
        rc = queue_copy(p, s, p->next_copy);
        if (rc < 0)
            return rc;
        p->next_copy++;
    }
    return 0;
}

/* A pipe between dev and pool slots (pool) or the caller's host buffer
 * (host, chunks of `chunk` bytes). */
static int begin(struct tw_staging_pool *pool, uint8_t *host, size_t chunk, enum tw_staging_dir dir,
                 const struct tw_memkind_ops *kind, const struct tw_mem_attr *attr, uintptr_t dev,
                 uint64_t len, unsigned depth, unsigned flags, struct tw_staging_pipe **out,
                 char *err, size_t errlen)
{
    if (!(pool || (host && chunk)) || !kind || !kind->async || !attr ||
        (dir != TW_STAGING_TO_HOST && dir != TW_STAGING_TO_DEVICE) || dev + len < dev) {
        if (err && errlen)
            snprintf(err, errlen, "staging: %s",
                     !kind || !kind->async ? "memory kind without asynchronous copies"
                                           : "bad arguments");
        return TW_EINVAL;
    }
    if (pool)
        chunk = pool->chunk;
    uint64_t nchunks = tw__staging_nchunks(len, chunk);
    if (depth < 2)
        depth = 2;
    if (depth > TW_STAGING_MAX_DEPTH)
        depth = TW_STAGING_MAX_DEPTH;
    if (nchunks < depth)
        depth = nchunks ? (unsigned)nchunks : 1;
    struct tw_staging_pipe *p = calloc(1, sizeof(*p) + depth * sizeof(p->slot[0]));
    if (!p)
        return -ENOMEM;
    *p = (struct tw_staging_pipe){
        .pool = pool,
        .host = pool ? NULL : host,
        .async = kind->async,
        .dir = dir,
        .attr = *attr,
        .dev = dev,
        .len = len,
        .chunk = chunk,
        .nchunks = nchunks,
        .depth = depth,
        .flags = flags,
    };
    int rc = 0;
    for (unsigned i = 0; i < depth; i++)
        p->slot[i].pool_slot = -1;
    if (nchunks == 0)
        goto out_ok; /* nothing to copy: no stream, no events */
    rc = p->async->stream_create(attr->device, &p->stream, err, errlen);
    if (rc < 0)
        goto out_free_pipe;
    for (unsigned i = 0; i < depth; i++) {
        rc = p->async->event_create(attr->device, &p->slot[i].event, err, errlen);
        if (rc < 0)
            goto out_destroy_events;
    }
out_ok:
    *out = p;
    return 0;

out_destroy_events:
    for (unsigned i = 0; i < depth; i++)
        if (p->slot[i].event)
            p->async->event_destroy(attr->device, p->slot[i].event);
    p->async->stream_destroy(attr->device, p->stream);
out_free_pipe:
    free(p);
    return rc;
}

int tw__staging_begin(struct tw_staging_pool *pool, enum tw_staging_dir dir,
                      const struct tw_memkind_ops *kind, const struct tw_mem_attr *attr,
                      uintptr_t dev, uint64_t len, unsigned depth, unsigned flags,
                      struct tw_staging_pipe **out, char *err, size_t errlen)
{
    return begin(pool, NULL, 0, dir, kind, attr, dev, len, depth, flags, out, err, errlen);
}

int tw__staging_begin_host(uint8_t *host, size_t chunk, enum tw_staging_dir dir,
                           const struct tw_memkind_ops *kind, const struct tw_mem_attr *attr,
                           uintptr_t dev, uint64_t len, unsigned depth, unsigned flags,
                           struct tw_staging_pipe **out, char *err, size_t errlen)
{
    return begin(NULL, host, chunk, dir, kind, attr, dev, len, depth, flags, out, err, errlen);
}

static void fill_chunk(const struct tw_staging_pipe *p, const struct pipe_slot *s,
                       struct tw_staging_chunk *c)
{
    uint64_t off = 0;
    size_t clen = 0;
    tw__staging_chunk_span(p->len, p->chunk, s->chunk, &off, &clen);
    *c = (struct tw_staging_chunk){
        .index = s->chunk,
        .offset = off,
        .ptr = slot_ptr(p, s),
        .len = clen,
        .pool_offset = p->host ? (size_t)off : (size_t)s->pool_slot * p->pool->chunk,
    };
}

int tw__staging_acquire(struct tw_staging_pipe *p, struct tw_staging_chunk *c)
{
    int rc = tw__staging_poll(p);
    if (rc < 0)
        return rc;
    if (p->next_acquire >= p->nchunks)
        return 0;
    struct pipe_slot *s = &p->slot[p->next_acquire % p->depth];
    if (p->dir == TW_STAGING_TO_HOST) {
        if (s->state != SLOT_READY || s->chunk != p->next_acquire)
            return 0;
    } else {
        if (s->state != SLOT_IDLE || !slot_borrow(p, s))
            return 0;
        s->chunk = p->next_acquire;
    }
    /* (slot_ptr of a caller's buffer follows s->chunk, set above.) */
    s->state = SLOT_HELD;
    fill_chunk(p, s, c);
    /* TO_HOST: the bytes are final now, and chunks are acquired in order. */
    if (p->dir == TW_STAGING_TO_HOST && (p->flags & TW_STAGING_CRC))
        p->crc = tw__crc32c(p->crc, c->ptr, c->len);
    p->next_acquire++;
    return 1;
}

int tw__staging_release(struct tw_staging_pipe *p, const struct tw_staging_chunk *c)
{
    if (p->failed)
        return p->failed;
    if (!c || c->index >= p->next_acquire)
        return TW_EINVAL;
    struct pipe_slot *s = &p->slot[c->index % p->depth];
    if (s->state != SLOT_HELD || s->chunk != c->index)
        return TW_EINVAL;
    if (p->dir == TW_STAGING_TO_HOST) {
        slot_finish(p, s);
        return tw__staging_poll(p);
    }
    if (c->index != p->next_release)
        return TW_EINVAL;
    uint8_t *bytes = slot_ptr(p, s);
    uint64_t off = 0;
    size_t clen = 0;
    tw__staging_chunk_span(p->len, p->chunk, c->index, &off, &clen);
    if (p->flags & TW_STAGING_CRC)
        p->crc = tw__crc32c(p->crc, bytes, clen);
    int rc = queue_copy(p, s, c->index);
    if (rc < 0)
        return rc;
    p->next_release++;
    return reap(p);
}

int tw__staging_wait(struct tw_staging_pipe *p, int timeout_ms)
{
    if (p->failed)
        return p->failed;
    if (p->oldest_copy < queued_end(p)) {
        struct pipe_slot *s = &p->slot[p->oldest_copy % p->depth];
        char why[200] = "";
        int rc = p->async->event_wait(p->attr.device, s->event, why, sizeof(why));
        if (rc < 0)
            return fail(p, rc, "staging chunk %llu: copy failed: %s", (unsigned long long)s->chunk,
                        why);
        return tw__staging_poll(p);
    }
    if (p->wants_slot && p->pool) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&p->pool->lock);
        if (p->pool->nfree == 0)
            pthread_cond_timedwait(&p->pool->freed, &p->pool->lock, &until);
        pthread_mutex_unlock(&p->pool->lock);
        return tw__staging_poll(p);
    }
    return 0;
}

int tw__staging_complete(struct tw_staging_pipe *p)
{
    if (p->failed)
        return p->failed;
    int rc = reap(p);
    if (rc < 0)
        return rc;
    return p->done == p->nchunks;
}

uint32_t tw__staging_crc(const struct tw_staging_pipe *p)
{
    return p->crc;
}

const char *tw__staging_error(const struct tw_staging_pipe *p)
{
    return p->err;
}

void tw__staging_end(struct tw_staging_pipe *p)
{
    if (!p)
        return;
    /* Copies still queued read or write pool memory: wait for all of them
     * before the slots can go to another transfer (their errors are already
     * reported, or irrelevant to a transfer being abandoned). The stream,
     * not the events: a copy whose event failed to record is queued too. */
    if (p->stream)
        p->async->stream_wait(p->attr.device, p->stream, NULL, 0);
    for (unsigned i = 0; i < p->depth; i++) {
        struct pipe_slot *s = &p->slot[i];
        if (s->pool_slot >= 0)
            pool_give(p->pool, s->pool_slot);
        if (s->event)
            p->async->event_destroy(p->attr.device, s->event);
    }
    if (p->stream)
        p->async->stream_destroy(p->attr.device, p->stream);
    free(p);
}
