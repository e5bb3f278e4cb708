/*
 * Staging planes (client side): the caller's buffer is GPU memory that the
 * inline plane cannot read() into and the RDMA plane may not register
 * (tw__path_decide said TW_PATH_STAGING_HOST), so the bytes cross between
 * the device and host memory the library owns, with the memory kind's
 * copies, while the inner plane (inline or RDMA) moves them on the wire:
 *
 *   RDMA pull get of more than one pool chunk (the pipeline,
 *        mem/staging.h): the client reads the server's region chunk by
 *        chunk into slots of a pinned pool kept on the handle (registered
 *        once on the plane); each chunk read is queued host->device on a
 *        CUDA stream and the next chunk's read starts at once, so the copy
 *        of chunk k overlaps the read of chunk k+1. The CRC32C is computed
 *        on each chunk as it passes. The inner RDMA plane keeps its
 *        per-request state but this plane answers the server's
 *        RDMA_REGISTER itself (RDMA_READY, reads, RDMA_DONE);
 *   inline get: get_start points the inner plane at a host buffer of
 *        byte_length bytes; each DATA frame's bytes are copied on to the
 *        device as soon as they are in (the next frames wait in the socket
 *        meanwhile), the rest in release;
 *   other RDMA gets (one chunk or less, push, a kind without asynchronous
 *        copies, no pool): the whole host buffer is copied in release,
 *        after the transfer (queued on the fence stream for a buffer of a
 *        size class);
 *   put: put_prepare copies device -> host before TENSOR_PUT is built (the
 *        descriptor's CRC is computed on the host copy, so every byte must
 *        be on the host before the first goes out), the inner plane sends
 *        from the host copy.
 *
 * r->buf is the host buffer while the inner plane runs (the device pointer
 * throughout a pipelined pull) and the caller's device pointer again after
 * release. Whole-buffer copies are synchronous on the device's primary
 * context (cuMemcpyDtoH / cuMemcpyHtoD on the legacy default stream); the
 * pipeline waits for its stream before the request is reported done. Either
 * way, when a call returns the bytes are in place and visible to any work
 * later submitted on that device.
 *
 * Host buffers are kept on the handle between requests, so repeated
 * transfers do not fault in, pin or register fresh pages (a buffer's
 * registration for reads is made on its first pull get and kept with it:
 * tw__client_stage_lend_mr): up to 8 MiB in size
 * classes (powers of two from 32 KiB), page-locked, those up to 256 KiB
 * carved from 2 MiB slabs (struct tw__stage_slab: adjacent blocks' copies
 * join), at most 32 MiB of them idle when a call ends and 64 MiB of larger
 * ones idle at any time; above that the largest one used so far,
 * page-locked from 1 MiB up. The pool likewise (made on the first
 * pipelined get, freed with the handle).
 *
 * State: struct stage in r->stage (the inner plane keeps r->dp_state).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/client_internal.h"
#include "gpu/cuda.h"
#include "mem/hostmem.h"
#include "mem/staging.h"

struct staged_plane {
    struct tw__client_dp_ops ops; /* first: r->dp points here */
    const struct tw__client_dp_ops *inner;
};

struct tw__stage_slab;

/* A library host buffer; pinned through `pin_dev`'s context when >= 0. */
struct tw__stage_buf {
    struct tw__stage_buf *next; /* kept, not a slab's: the next of its class (c->stage_kept) */
    void *p;
    size_t cap;
    int pin_dev;                            /* the device it was pinned for, or -1 */
    const struct tw_memkind_async_ops *pin; /* whose pin (unpins it) */
    /* The slab it was carved from (a small class's), or NULL: its own
     * memory, allocated and pinned alone. */
    struct tw__stage_slab *slab;
    /* Its registration for pull gets on the plane of generation mr_gen
     * (c->rdma_gen), made on its first pull get and kept while the buffer
     * is (tw__client_stage_lend_mr); NULL when none. The plane's close
     * frees it: a registration of another generation is forgotten. */
    struct tw_fabric_mr *mr;
    unsigned mr_gen;
};

/* Buffers of a small class (up to STAGE_SMALL_MAX) are carved from slabs
 * of STAGE_SLAB_BYTES, allocated and pinned as one, freed only whole
 * (tw__client_stage_trim). They are handed out next-fit: the first idle
 * one at or after the class's cursor (c->stage_cur), in address order, so
 * the blocks of a batch taken one after another read into adjacent
 * buffers and their copies to adjacent device blocks join into one
 * (stage_submit), whatever order the buffers came back in. Owned by the
 * handle (c->stage_slabs). */
struct tw__stage_slab {
    struct tw__stage_slab *next; /* c->stage_slabs */
    void *p;                     /* n buffers of cap bytes */
    size_t cap;
    unsigned n;    /* at most 64 */
    uint64_t idle; /* bit i: b[i] is idle */
    int pin_dev;
    const struct tw_memkind_async_ops *pin;
    struct tw__stage_buf b[];
};

struct stage {
    uint8_t *dev;              /* the caller's device buffer */
    struct tw__stage_buf *buf; /* NULL for a pipelined pull */
    size_t len;
    size_t copied; /* get: bytes already copied to the device */
    int failed;    /* get: a copy to the device failed (text in c->errmsg) */
    int piped;     /* RDMA pull get through the pool (no host buffer) */
    /* The pipelined pull once the server registered its source: the pipe,
     * the region, bytes read, and bytes the server announced (bit 5: its
     * RDMA_AVAILABLE; the whole length without MORE). */
    struct tw_staging_pipe *pipe;
    struct tw_fabric_rkey remote;
    uint64_t moved, avail;
    /* Its reads in flight, oldest first, each into the slot of its chunk
     * (held until the read is over); the next chunk starts after the
     * last of them (piped_issued). Only inside piped_pump: it returns
     * with none in flight. */
    struct piped_read {
        struct tw_fabric_xfer *x;
        struct tw_staging_chunk ch;
    } rd[2];
    unsigned nrd;
    void *stream; /* inline get: the stream its copies are queued on, or NULL */
};

/* The pool of pipelined pulls: chunk size and slots. A pull keeps two
 * chunk reads in flight (struct stage's rd), so the provider has the next
 * chunk's operations before the current one's last completes; the chunk is
 * larger than the pipeline's 4 MiB default (which is tuned for copies
 * alone) to keep the per-read work small against the read itself; a pull
 * holds at most STAGE_PIPE_DEPTH slots (two being read, two being copied
 * to the GPU). TW_STAGING_CHUNK (bytes, a multiple of 4 KiB) overrides the
 * chunk for measurements (docs/performance.md). */
#define STAGE_POOL_CHUNK ((size_t)8 << 20)
#define STAGE_POOL_SLOTS 8u
#define STAGE_PIPE_DEPTH 4u

/* Size classes of host buffers (see buf_get): class k holds up to
 * STAGE_CLASS_MIN << k bytes, the last up to STAGE_CLASS_MAX; larger
 * requests use the one spare buffer. Idle buffers are kept while their
 * bytes stay under STAGE_SMALL_IDLE for the classes up to STAGE_SMALL_MAX
 * (a KV cache's blocks: 1024 of 32 KiB, so a batch window of several
 * hundred finds a buffer for every block in flight and every copy
 * pending; with 128 buffers of 256 KiB a window of 256 pinned and
 * unpinned one per request and halved the batch: docs/performance.md),
 * under STAGE_MID_IDLE for the larger ones. */
#define STAGE_CLASS_MIN ((size_t)32 << 10)
#define STAGE_CLASS_MAX (STAGE_CLASS_MIN << (TW__STAGE_CLASSES - 1))
#define STAGE_SMALL_MAX ((size_t)256 << 10)
#define STAGE_SMALL_IDLE ((size_t)32 << 20)
#define STAGE_MID_IDLE ((size_t)64 << 20)

/* Buffers at least this large are page-locked (copies at full speed; the
 * pinning is paid once while the buffer is kept between requests). */
#define STAGE_PIN_MIN ((size_t)1 << 20)

/* A slab of a small class: 64 buffers of 32 KiB, 8 of 256 KiB. */
#define STAGE_SLAB_BYTES ((size_t)2 << 20)

/* Drops b's registration, if it has one of the open plane. */
static void buf_unregister(struct tw_client *c, struct tw__stage_buf *b)
{
    if (b->mr && b->mr_gen == c->rdma_gen && c->fab)
        tw__fabric_mr_deregister(b->mr);
    b->mr = NULL;
}

/* Frees a buffer of its own memory (not a slab's). */
static void buf_free(struct tw_client *c, struct tw__stage_buf *b)
{
    if (!b)
        return;
    buf_unregister(c, b);
    if (b->pin_dev >= 0)
        b->pin->unpin(b->pin_dev, b->p);
    tw__hostmem_free(b->p);
    free(b);
}

static void slab_free(struct tw_client *c, struct tw__stage_slab *s)
{
    for (unsigned i = 0; i < s->n; i++)
        buf_unregister(c, &s->b[i]);
    if (s->pin_dev >= 0)
        s->pin->unpin(s->pin_dev, s->p);
    tw__hostmem_free(s->p);
    free(s);
}

static uint64_t slab_full(const struct tw__stage_slab *s)
{
    return s->n == 64 ? ~(uint64_t)0 : ((uint64_t)1 << s->n) - 1;
}

/* Keeps b idle: a slab's buffer back in its slab, another on its class's
 * list. nstage_kept[k] counts both. */
static void kept_push(struct tw_client *c, int k, struct tw__stage_buf *b)
{
    c->nstage_kept[k]++;
    if (b->slab) {
        b->slab->idle |= (uint64_t)1 << (b - b->slab->b);
        return;
    }
    b->next = c->stage_kept[k];
    c->stage_kept[k] = b;
}

/* The first idle buffer of slab s of class k at index `from` or after,
 * taken (the cursor moves past it), or NULL. */
static struct tw__stage_buf *slab_take(struct tw_client *c, int k, struct tw__stage_slab *s,
                                       unsigned from)
{
    uint64_t m = from >= 64 ? 0 : s->idle & ~(((uint64_t)1 << from) - 1);
    if (!m)
        return NULL;
    unsigned i = (unsigned)__builtin_ctzll(m);
    s->idle &= ~((uint64_t)1 << i);
    c->stage_cur[k] = s;
    c->stage_cur_i[k] = i + 1;
    c->nstage_kept[k]--;
    return &s->b[i];
}

/* An idle buffer of class k: next-fit through the slabs from the cursor
 * (its own list first), or NULL. */
static struct tw__stage_buf *kept_pop(struct tw_client *c, int k)
{
    if (!c->nstage_kept[k])
        return NULL;
    struct tw__stage_buf *b = c->stage_kept[k];
    if (b) {
        c->stage_kept[k] = b->next;
        b->next = NULL;
        c->nstage_kept[k]--;
        return b;
    }
    size_t cap = STAGE_CLASS_MIN << k;
    struct tw__stage_slab *cur = c->stage_cur[k];
    if (cur && (b = slab_take(c, k, cur, c->stage_cur_i[k])) != NULL)
        return b;
    /* The slabs after the cursor's, then from the first (the cursor's
     * own last: its buffers before the cursor). */
    for (int pass = 0; pass < 2; pass++)
        for (struct tw__stage_slab *s = pass ? c->stage_slabs : (cur ? cur->next : c->stage_slabs);
             s && (pass == 0 || s != cur); s = s->next)
            if (s->cap == cap && (b = slab_take(c, k, s, 0)) != NULL)
                return b;
    return cur ? slab_take(c, k, cur, 0) : NULL;
}

/* The failure of a copy of received bytes to the GPU (c->errmsg). */
#define TO_GPU_FAILED "'%s': copying the received bytes to the GPU failed: %s"

static void buf_put(struct tw_client *c, struct tw__stage_buf *b);
static size_t kept_bytes(const struct tw_client *c, int small);

/* A small get's queued copy failed: its request fails with it. */
static void fail_pending(struct tw_client *c, const struct tw__stage_pending *p, int rc,
                         const char *err)
{
    if (!c->run || p->index >= c->run_n)
        return;
    struct tw__creq *r = &c->run[p->index];
    if (r->status == 0) {
        r->status = rc;
        if (r->index < c->err_index) {
            c->err_index = r->index;
            snprintf(c->errmsg, sizeof(c->errmsg), TO_GPU_FAILED, r->name, err);
        }
    }
}

/* Copies of small gets handed to the stream together (one batched driver
 * call: ~1.5 us per 32 KiB copy in groups of 16-64 on the H200, against
 * ~3.5 queued one by one); the first of a group waits at most this many
 * other arrivals, or this many bytes of them, so copies still overlap the
 * next blocks' receive. */
#define STAGE_SUBMIT_AT 16
#define STAGE_SUBMIT_BYTES ((size_t)2 << 20)

/* The size class of a buffer of cap bytes (a class's capacity), or -1. */
static int class_of_cap(size_t cap)
{
    for (int k = 0; k < TW__STAGE_CLASSES; k++)
        if (cap == STAGE_CLASS_MIN << k)
            return k;
    return -1;
}

/* The size class serving len bytes, or -1 (above STAGE_CLASS_MAX). */
static int class_of_len(size_t len)
{
    for (int k = 0; k < TW__STAGE_CLASSES; k++)
        if (len <= STAGE_CLASS_MIN << k)
            return k;
    return -1;
}

/* Records an event behind the copies just handed to device dev's fence
 * stream: the number of their group, or 0 when none could be (no free
 * slot, no events in the table, a refusal): those are then given back by
 * the whole fence only. */
static uint64_t group_record(struct tw_client *c, int dev, void *stream)
{
    const struct tw_memkind_async_ops *as = c->stage_fence_as;
    if (!as->event_create || !as->event_record || !as->event_query || !as->event_wait ||
        c->nstage_grp == TW__STAGE_GROUPS)
        return 0;
    struct tw__stage_group *g =
        &c->stage_grp[(c->stage_grp_head + c->nstage_grp) % TW__STAGE_GROUPS];
    if (g->event && g->ev_dev != dev) {
        as->event_destroy(g->ev_dev, g->event);
        g->event = NULL;
    }
    if (!g->event && as->event_create(dev, &g->event, NULL, 0) != 0) {
        g->event = NULL;
        return 0;
    }
    g->ev_dev = dev;
    if (as->event_record(dev, g->event, stream, NULL, 0) != 0)
        return 0;
    g->seq = ++c->stage_grp_seq;
    c->nstage_grp++;
    return g->seq;
}

/* Hands copies j = 0..n-1 to device dev's fence stream (one batched
 * driver call where the kind has one). Copy j moves the bytes of the
 * pending gets idx[first[j]] .. idx[first[j] + cnt[j] - 1], adjacent on
 * both sides (cnt NULL: one get each, first[j] = j). A refused copy of one
 * get fails that get; a refused copy of several is tried again one get at
 * a time (a refusal does not say which piece it was); the copies after it
 * still go. */
static void hand_copies(struct tw_client *c, int dev, void *stream, void *const *dst,
                        const void *const *src, const size_t *len, size_t n, const unsigned *first,
                        const unsigned *cnt, const unsigned *idx)
{
    const struct tw_memkind_async_ops *as = c->stage_fence_as;
    for (size_t at = 0; at < n;) {
        char err[200] = "";
        size_t done = 0;
        int rc = 0;
        if (!stream) {
            rc = TW_EINTERNAL;
        } else if (as->copy_batch_from_host_async) {
            rc = as->copy_batch_from_host_async(dev, stream, dst + at, src + at, len + at, n - at,
                                                &done, err, sizeof(err));
        } else {
            struct tw_mem_attr attr = {.kind = TW_MEMKIND_CUDA, .device = dev};
            while (at + done < n &&
                   (rc = as->copy_from_host_async(stream, (uintptr_t)dst[at + done], src[at + done],
                                                  len[at + done], &attr, err, sizeof(err))) == 0)
                done++;
        }
        if (!rc)
            break;
        size_t j = at + done;
        const unsigned *pieces = idx + (cnt ? first[j] : j);
        unsigned npieces = cnt ? cnt[j] : 1;
        if (npieces > 1 && stream) {
            void *pd[TW__STAGE_PEND];
            const void *ps[TW__STAGE_PEND];
            size_t pl[TW__STAGE_PEND];
            for (unsigned i = 0; i < npieces; i++) {
                const struct tw__stage_pending *p = &c->stage_pend[pieces[i]];
                pd[i] = (void *)p->dst;
                ps[i] = p->buf->p;
                pl[i] = p->len;
            }
            hand_copies(c, dev, stream, pd, ps, pl, npieces, NULL, NULL, pieces);
        } else {
            for (unsigned i = 0; i < npieces; i++)
                fail_pending(c, &c->stage_pend[pieces[i]], rc, err[0] ? err : tw_strerror(rc));
        }
        at = j + 1;
    }
}

/* Hands device dev's waiting copies to its fence stream. In the order of
 * their device addresses, a get whose bytes continue the previous one's on
 * both sides (adjacent buffers of one slab into adjacent device memory: a
 * batch of a KV cache's blocks) joins its copy: one copy of 512 KiB costs
 * the driver about what one of 32 KiB does (the batched driver call was
 * 13% of the engine thread in a batch of 32 KiB gets on the H200, 3% with
 * joined copies: docs/performance.md). A refused copy fails its requests
 * (hand_copies; the fence still gives their buffers back). */
static void stage_submit(struct tw_client *c, int dev)
{
    void *stream = c->stage_fence_stream ? c->stage_fence_stream[dev] : NULL;
    void *dst[TW__STAGE_PEND];
    const void *src[TW__STAGE_PEND];
    size_t len[TW__STAGE_PEND], m = 0;
    unsigned idx[TW__STAGE_PEND], first[TW__STAGE_PEND], cnt[TW__STAGE_PEND], n = 0;
    for (unsigned i = 0; i < c->nstage_pend; i++) {
        struct tw__stage_pending *p = &c->stage_pend[i];
        if (p->queued || p->device != dev)
            continue;
        /* Insertion by device address: a group is tens of gets, nearly in
         * order already. */
        unsigned at = n++;
        while (at > 0 && c->stage_pend[idx[at - 1]].dst > p->dst) {
            idx[at] = idx[at - 1];
            at--;
        }
        idx[at] = i;
        p->queued = 1;
        c->stage_unqueued_bytes -= p->len;
    }
    if (!n)
        return;
    c->nstage_unqueued -= n;
    for (unsigned i = 0; i < n; i++) {
        const struct tw__stage_pending *p = &c->stage_pend[idx[i]];
        if (m && p->buf->slab && p->buf->slab == c->stage_pend[idx[i - 1]].buf->slab &&
            (uintptr_t)dst[m - 1] + len[m - 1] == p->dst &&
            (const uint8_t *)src[m - 1] + len[m - 1] == (const uint8_t *)p->buf->p) {
            len[m - 1] += p->len;
            cnt[m - 1]++;
            continue;
        }
        dst[m] = (void *)p->dst;
        src[m] = p->buf->p;
        len[m] = p->len;
        first[m] = i;
        cnt[m++] = 1;
    }
    c->stage_joined_gets += n - m;
    hand_copies(c, dev, stream, dst, src, len, m, first, cnt, idx);
    uint64_t group = stream ? group_record(c, dev, stream) : 0;
    for (unsigned i = 0; i < n; i++)
        c->stage_pend[idx[i]].group = group;
}

/* Gives back the buffers of the groups whose copies are done, oldest
 * first, without waiting for the copies queued after them; with block,
 * when none is, waits for the oldest group only (the copies behind it keep
 * running while the caller goes on). Where no group can say (copies
 * without an event, or not handed to the stream yet) or an event reports a
 * failure, the whole fence does it (failures land on their requests). */
static void stage_reclaim(struct tw_client *c, int block)
{
    const struct tw_memkind_async_ops *as = c->stage_fence_as;
    int got = 0;
    while (c->nstage_grp) {
        struct tw__stage_group *g = &c->stage_grp[c->stage_grp_head];
        int r = as->event_query(g->ev_dev, g->event, NULL, 0);
        if (r == 0 && block && !got)
            r = as->event_wait(g->ev_dev, g->event, NULL, 0) == 0 ? 1 : -1;
        if (r < 0) {
            (void)tw__client_stage_fence(c);
            return;
        }
        if (r == 0)
            break;
        for (unsigned i = 0; i < c->nstage_pend;) {
            struct tw__stage_pending *q = &c->stage_pend[i];
            if (q->group != g->seq) {
                i++;
                continue;
            }
            buf_put(c, q->buf);
            *q = c->stage_pend[--c->nstage_pend];
        }
        c->stage_grp_head = (c->stage_grp_head + 1) % TW__STAGE_GROUPS;
        c->nstage_grp--;
        got = 1;
    }
    if (block && !got)
        (void)tw__client_stage_fence(c);
}

/* Queues the copy of get r's bytes (all in st's pinned buffer of a size
 * class) for the device's fence stream and keeps the buffer until the
 * fence: the copies of a batch's blocks then run back to back on the GPU
 * while the next blocks arrive, and the caller waits once per fence
 * instead of once per block (a synchronous 32 KiB copy costs ~9.7 us on
 * the H200, a queued one ~3.4, one of a batched group ~1.5:
 * docs/performance.md). 0 when queued; 1 when it cannot be (the caller
 * copies synchronously); a negative code when the copy was refused (text
 * in c->errmsg). */
static int stage_queue(struct tw_client *c, struct tw__creq *r, struct stage *st)
{
    const struct tw_memkind_async_ops *as = r->mem_ops->async;
    int dev = r->mem.device;
    char err[200] = "";
    if (!as || !c->run || st->stream || st->copied || !r->expect || !st->buf ||
        class_of_cap(st->buf->cap) < 0 || st->buf->pin_dev < 0 || dev < 0 ||
        dev >= TW_CUDA_MAX_DEVICES)
        return 1;
    /* Full: wait for the oldest pending copies (their failures land on
     * their own requests) rather than copy this one synchronously. */
    if (c->nstage_pend >= TW__STAGE_PEND)
        stage_reclaim(c, 1);
    if (c->nstage_pend >= TW__STAGE_PEND)
        return 1;
    if (c->stage_fence_as && c->stage_fence_as != as)
        return 1; /* streams of another kind's table are pending */
    if (!c->stage_fence_stream &&
        !(c->stage_fence_stream = calloc(TW_CUDA_MAX_DEVICES, sizeof(*c->stage_fence_stream))))
        return 1;
    c->stage_fence_as = as;
    if (!c->stage_fence_stream[dev] &&
        as->stream_create(dev, &c->stage_fence_stream[dev], err, sizeof(err)) != 0) {
        c->stage_fence_stream[dev] = NULL;
        return 1;
    }
    c->stage_pend[c->nstage_pend++] = (struct tw__stage_pending){
        .buf = st->buf,
        .index = r->index,
        .device = dev,
        .dst = (uintptr_t)st->dev,
        .len = (size_t)r->expect,
    };
    st->buf = NULL; /* the fence gives it back */
    c->stage_unqueued_bytes += (size_t)r->expect;
    if (++c->nstage_unqueued >= STAGE_SUBMIT_AT || c->stage_unqueued_bytes >= STAGE_SUBMIT_BYTES)
        stage_submit(c, dev);
    return 0;
}

int tw__client_stage_fence(struct tw_client *c)
{
    int first = 0;
    for (int dev = 0; c->nstage_pend && dev < TW_CUDA_MAX_DEVICES; dev++) {
        void *stream = c->stage_fence_stream ? c->stage_fence_stream[dev] : NULL;
        if (!stream)
            continue;
        stage_submit(c, dev);
        char err[200] = "";
        int rc = c->stage_fence_as->stream_wait(dev, stream, err, sizeof(err));
        for (unsigned i = 0; i < c->nstage_pend;) {
            struct tw__stage_pending *p = &c->stage_pend[i];
            if (p->device != dev) {
                i++;
                continue;
            }
            /* A copy that failed while it ran: every get queued on this
             * stream since the last fence shares the failure. */
            if (rc)
                fail_pending(c, p, rc, err);
            buf_put(c, p->buf);
            *p = c->stage_pend[--c->nstage_pend];
        }
        if (rc) {
            /* Errors stick to a stream: the next copies get a new one. */
            c->stage_fence_as->stream_destroy(dev, stream);
            c->stage_fence_stream[dev] = NULL;
            if (!first)
                first = rc;
        }
    }
    if (!c->nstage_pend) { /* every group's copies are done */
        c->stage_grp_head = 0;
        c->nstage_grp = 0;
    }
    return first;
}

void tw__client_stage_free(struct tw_client *c)
{
    (void)tw__client_stage_fence(c);
    tw__client_stage_ahead_drop(c);
    if (c->stage_ahead_stream)
        c->stage_ahead_as->stream_destroy(c->stage_ahead_dev, c->stage_ahead_stream);
    c->stage_ahead_stream = NULL;
    if (c->stage_fence_stream) {
        for (int dev = 0; dev < TW_CUDA_MAX_DEVICES; dev++)
            if (c->stage_fence_stream[dev])
                c->stage_fence_as->stream_destroy(dev, c->stage_fence_stream[dev]);
        free(c->stage_fence_stream);
        c->stage_fence_stream = NULL;
    }
    for (unsigned i = 0; i < TW__STAGE_GROUPS; i++)
        if (c->stage_grp[i].event)
            c->stage_fence_as->event_destroy(c->stage_grp[i].ev_dev, c->stage_grp[i].event);
    memset(c->stage_grp, 0, sizeof(c->stage_grp));
    c->stage_grp_head = 0;
    c->nstage_grp = 0;
    buf_free(c, c->stage_spare);
    c->stage_spare = NULL;
    for (int k = 0; k < TW__STAGE_CLASSES; k++) {
        struct tw__stage_buf *b;
        while ((b = c->stage_kept[k]) != NULL) {
            c->stage_kept[k] = b->next;
            buf_free(c, b);
        }
        c->nstage_kept[k] = 0;
        c->stage_cur[k] = NULL;
    }
    /* Every slab's buffers are back by now (no run, nothing pending). */
    while (c->stage_slabs) {
        struct tw__stage_slab *s = c->stage_slabs;
        c->stage_slabs = s->next;
        slab_free(c, s);
    }
    /* The plane (and the pool's registration with it) is closed first
     * (tw_close). */
    if (c->stage_pool_mr)
        tw__fabric_mr_deregister(c->stage_pool_mr);
    c->stage_pool_mr = NULL;
    tw__staging_pool_destroy(c->stage_pool);
    c->stage_pool = NULL;
}

void tw__client_stage_trim(struct tw_client *c)
{
    size_t bound = c->stage_small_idle ? c->stage_small_idle : STAGE_SMALL_IDLE;
    struct tw__stage_slab **pp = &c->stage_slabs;
    while (*pp && kept_bytes(c, 1) > bound) {
        struct tw__stage_slab *s = *pp;
        if (s->idle != slab_full(s)) {
            pp = &s->next;
            continue;
        }
        int k = class_of_cap(s->cap);
        c->nstage_kept[k] -= s->n;
        if (c->stage_cur[k] == s)
            c->stage_cur[k] = NULL;
        *pp = s->next;
        slab_free(c, s);
    }
}

/* The pool's chunk, read from the environment once per handle: it is
 * asked per staged get, and getenv scans the whole environment (libc time
 * inside staged_get_start, this and its calloc, was 4% of the engine
 * thread in a batch of small gets on the H200). */
static size_t pool_chunk(struct tw_client *c)
{
    if (c->stage_pool_chunk)
        return c->stage_pool_chunk;
    c->stage_pool_chunk = STAGE_POOL_CHUNK;
    const char *v = getenv("TW_STAGING_CHUNK");
    if (v && *v) {
        char *end = NULL;
        unsigned long long n = strtoull(v, &end, 10);
        if (end && *end == '\0' && n >= 4096 && n % 4096 == 0 && n <= ((size_t)1 << 30))
            c->stage_pool_chunk = (size_t)n;
    }
    return c->stage_pool_chunk;
}

/* The pool and its registration on the accepted endpoint, made on first
 * use. 1 when both exist, 0 when not (the caller stages the old way). */
static int pool_ready(struct tw_client *c, const struct tw__creq *r)
{
    if (!c->fpeer)
        return 0;
    if (!c->stage_pool) {
        char err[200];
        if (tw__staging_pool_create(r->mem_ops->async, r->mem.device, pool_chunk(c),
                                    STAGE_POOL_SLOTS, &c->stage_pool, err, sizeof(err)) != 0) {
            c->stage_pool = NULL;
            return 0;
        }
    }
    if (!c->stage_pool_mr) {
        void *base;
        size_t len;
        tw__staging_pool_memory(c->stage_pool, &base, &len);
        if (tw__fabric_mr_register(c->fpeer, base, len, TW_FABRIC_LOCAL_READ, TW_FABRIC_HOST, 0,
                                   &c->stage_pool_mr) != 0) {
            c->stage_pool_mr = NULL;
            return 0;
        }
    }
    return 1;
}

/* A new slab of small class k (its buffers pinned together when the kind
 * can pin), placed last in c->stage_slabs: its first buffer for the
 * caller, the others idle. NULL when out of memory. */
static struct tw__stage_buf *slab_new(struct tw_client *c, const struct tw__creq *r, int k)
{
    size_t cap = STAGE_CLASS_MIN << k;
    unsigned n = (unsigned)(STAGE_SLAB_BYTES / cap);
    struct tw__stage_slab *s = calloc(1, sizeof(*s) + n * sizeof(s->b[0]));
    if (!s)
        return NULL;
    if (tw__hostmem_alloc(STAGE_SLAB_BYTES, &s->p) != 0) {
        free(s);
        return NULL;
    }
    s->cap = cap;
    s->n = n;
    s->pin_dev = -1;
    const struct tw_memkind_async_ops *as = r->mem_ops->async;
    if (as && as->pin(r->mem.device, s->p, STAGE_SLAB_BYTES, NULL, 0) == 0) {
        s->pin_dev = r->mem.device;
        s->pin = as;
    }
    for (unsigned i = 0; i < n; i++) {
        struct tw__stage_buf *b = &s->b[i];
        b->p = (uint8_t *)s->p + (size_t)i * cap;
        b->cap = cap;
        b->pin_dev = s->pin_dev;
        b->pin = s->pin;
        b->slab = s;
    }
    /* Newest last: next-fit goes on into it from the cursor's slab. */
    struct tw__stage_slab **pp = &c->stage_slabs;
    while (*pp)
        pp = &(*pp)->next;
    *pp = s;
    s->idle = slab_full(s);
    c->nstage_kept[k] += n;
    return slab_take(c, k, s, 0);
}

/* A host buffer of at least len bytes: a kept one when one is large
 * enough, else a new one. Requests up to STAGE_CLASS_MAX (batches of KV
 * blocks or of layers, many in flight) take a buffer of their size class,
 * kept between requests and pinned once: no mmap, munmap, page faults or
 * pinning per request (a fresh 512 KiB buffer per request, unpinned, and
 * a fresh pinned one from 1 MiB, halved a batch's speed: docs/
 * performance.md). Larger ones take the spare. */
static struct tw__stage_buf *buf_get(struct tw_client *c, const struct tw__creq *r, size_t len)
{
    struct tw__stage_buf *b;
    int k = class_of_len(len);
    /* None kept: take the buffers of the pending gets whose copies are
     * done back. When none is, a small class takes a new buffer (waiting
     * for copies here, the whole stream's as it was, took 1/7 of a batch
     * of 32 KiB gets' time on the H200; at most the batch window plus
     * TW__STAGE_PEND of them are in use, those kept idle bounded by
     * STAGE_SMALL_IDLE); a larger one waits for the oldest group of
     * copies, so pinned memory does not grow by megabytes per pending
     * copy. */
    if (k >= 0 && !c->nstage_kept[k] && c->nstage_pend)
        stage_reclaim(c, (STAGE_CLASS_MIN << k) > STAGE_SMALL_MAX); /* failures: their requests */
    if (k >= 0 && (b = kept_pop(c, k)) != NULL)
        return b;
    b = c->stage_spare;
    if (k < 0 && b && b->cap >= len) {
        c->stage_spare = NULL;
        return b;
    }
    if (k >= 0 && (STAGE_CLASS_MIN << k) <= STAGE_SMALL_MAX)
        return slab_new(c, r, k);
    b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->cap = k >= 0 ? STAGE_CLASS_MIN << k : len;
    b->pin_dev = -1;
    if (tw__hostmem_alloc(b->cap, &b->p) != 0) {
        free(b);
        return NULL;
    }
    const struct tw_memkind_async_ops *as = r->mem_ops->async;
    if (as && (k >= 0 || b->cap >= STAGE_PIN_MIN) &&
        as->pin(r->mem.device, b->p, b->cap, NULL, 0) == 0) {
        b->pin_dev = r->mem.device;
        b->pin = as;
    }
    return b;
}

/* Bytes of the kept buffers of the small classes (small: up to
 * STAGE_SMALL_MAX) or of the larger ones. */
static size_t kept_bytes(const struct tw_client *c, int small)
{
    size_t n = 0;
    for (int k = 0; k < TW__STAGE_CLASSES; k++)
        if (((STAGE_CLASS_MIN << k) <= STAGE_SMALL_MAX) == !!small)
            n += (size_t)c->nstage_kept[k] * (STAGE_CLASS_MIN << k);
    return n;
}

/* Keeps b (a size class's while the idle bytes of its group of classes
 * stay within STAGE_SMALL_IDLE or STAGE_MID_IDLE; else the larger of b
 * and the spare), frees what is not kept. */
static void buf_put(struct tw_client *c, struct tw__stage_buf *b)
{
    int k = class_of_cap(b->cap);
    if (k >= 0) {
        /* A slab's buffer always (the slab goes whole, when the run
         * ends: tw__client_stage_trim). */
        if (b->slab || kept_bytes(c, 0) + b->cap <= STAGE_MID_IDLE)
            kept_push(c, k, b);
        else
            buf_free(c, b);
        return;
    }
    if (c->stage_spare && c->stage_spare->cap >= b->cap) {
        buf_free(c, b);
        return;
    }
    buf_free(c, c->stage_spare);
    c->stage_spare = b;
}

static const struct tw__client_dp_ops *inner_of(const struct tw__creq *r)
{
    return ((const struct staged_plane *)r->dp)->inner;
}

/* Swaps r->buf for a host buffer of len bytes (piped: keeps the device
 * pointer, the pool stands in for the buffer). */
static int stage_begin(struct tw_client *c, struct tw__creq *r, size_t len, int piped,
                       struct tw__stage_buf *given)
{
    struct stage *st = calloc(1, sizeof(*st));
    if (!st) {
        if (given)
            buf_put(c, given);
        return -ENOMEM;
    }
    st->dev = r->buf;
    st->len = len;
    if (piped) {
        st->piped = 1;
        r->stage = st;
        return 0;
    }
    st->buf = given ? given : buf_get(c, r, len);
    if (!st->buf) {
        free(st);
        tw__client_seterr(c, "'%s': cannot allocate %zu bytes of host memory to stage GPU memory",
                          r->name, len);
        return -ENOMEM;
    }
    r->stage = st;
    r->buf = st->buf->p;
    return 0;
}

/* The host buffer of r's own (a size class's or the spare), or NULL
 * (not staged, or a pipelined pull through the pool). */
static struct tw__stage_buf *own_buf(const struct tw__creq *r)
{
    const struct stage *st = r->stage;
    return st ? st->buf : NULL;
}

struct tw_fabric_mr *tw__client_stage_lend_mr(struct tw_client *c, struct tw__creq *r)
{
    struct tw__stage_buf *b = own_buf(r);
    if (!b || r->buf != b->p || !c->fab || !c->fpeer)
        return NULL;
    if (b->mr && b->mr_gen != c->rdma_gen)
        b->mr = NULL; /* freed with the plane it was made on */
    if (!b->mr) {
        if (tw__fabric_mr_register(c->fpeer, b->p, b->cap, TW_FABRIC_LOCAL_READ, TW_FABRIC_HOST, 0,
                                   &b->mr) != 0) {
            b->mr = NULL;
            return NULL;
        }
        b->mr_gen = c->rdma_gen;
    }
    return b->mr;
}

struct tw_fabric_mr *tw__client_stage_take_mr(struct tw_client *c, struct tw__creq *r)
{
    struct tw__stage_buf *b = own_buf(r);
    if (!b || !b->mr || b->mr_gen != c->rdma_gen)
        return NULL;
    struct tw_fabric_mr *mr = b->mr;
    b->mr = NULL;
    return mr;
}

/* Copies the received bytes [st->copied, upto) to the device. With more
 * frames to come (queue), a pinned host buffer and asynchronous copies the
 * copy is queued on the request's own stream (the next frames arrive
 * meanwhile; release waits for the stream); else it is synchronous (one
 * frame: no stream to make). */
static int stage_to_device(struct tw_client *c, struct tw__creq *r, struct stage *st, size_t upto,
                           int queue)
{
    char err[200] = "";
    if (upto <= st->copied)
        return 0;
    const struct tw_memkind_async_ops *as = r->mem_ops->async;
    uintptr_t dst = (uintptr_t)(st->dev + st->copied);
    const uint8_t *src = (const uint8_t *)st->buf->p + st->copied;
    size_t n = upto - st->copied;
    int rc;
    if (as && st->buf->pin_dev >= 0 && (queue || st->stream) &&
        (st->stream || as->stream_create(r->mem.device, &st->stream, NULL, 0) == 0))
        rc = as->copy_from_host_async(st->stream, dst, src, n, &r->mem, err, sizeof(err));
    else
        rc = r->mem_ops->copy_from_host(dst, src, n, &r->mem, err, sizeof(err));
    if (rc) {
        tw__client_seterr(c, TO_GPU_FAILED, r->name, err);
        return rc;
    }
    st->copied = upto;
    return 0;
}

/* Waits for the copies queued on the request's stream and destroys it:
 * 0 or the failure of one of them (text in c->errmsg). */
static int stage_drain(struct tw_client *c, struct tw__creq *r, struct stage *st)
{
    char err[200] = "";
    if (!st->stream)
        return 0;
    const struct tw_memkind_async_ops *as = r->mem_ops->async;
    int rc = as->stream_wait(r->mem.device, st->stream, err, sizeof(err));
    as->stream_destroy(r->mem.device, st->stream);
    st->stream = NULL;
    if (rc)
        tw__client_seterr(c, TO_GPU_FAILED, r->name, err);
    return rc;
}

static int staged_get_start(struct tw_client *c, struct tw__creq *r)
{
    /* The pipeline needs a pull (we read, so we know when a chunk is in),
     * asynchronous copies and the pool, and pays off from two chunks: a
     * get of one chunk or less overlaps nothing within itself and would
     * hold a whole slot (8 of them: a batch of small blocks went a few at
     * a time), so it reads into a buffer of its size class instead, many
     * in flight, its copy queued like an inline get's. */
    int piped = inner_of(r) == &tw__client_dp_rdma && r->path.mode == TW_PATH_PULL &&
                r->mem_ops->async && r->expect > pool_chunk(c) && pool_ready(c, r);
    int rc = stage_begin(c, r, (size_t)r->expect, piped, NULL);
    if (rc)
        return rc;
    return inner_of(r)->get_start(c, r);
}

/* Inline: each frame's bytes go on to the device as soon as they are in,
 * while the next ones wait in the socket; the last ones in release. */
static int staged_get_data(struct tw_client *c, struct tw__creq *r, uint64_t offset, uint32_t n,
                           int more)
{
    const struct tw__client_dp_ops *in = inner_of(r);
    if (!in->get_data)
        return TW_EBAD_FIELD;
    int rc = in->get_data(c, r, offset, n, more);
    struct stage *st = r->stage; /* NULL once the request finished */
    if (rc || !st || !more || st->failed)
        return rc;
    /* A failed copy fails the request when it ends (release): the rest of
     * its bytes still arrive and the connection stays in step. */
    st->failed = stage_to_device(c, r, st, (size_t)r->received, 1);
    return 0;
}

/* A put with a checksum: the copy to the host buffer runs chunk by chunk
 * on a stream (mem/staging.h, staging in the buffer itself) and the CRC
 * the descriptor needs is folded in per chunk as each one lands, while the
 * next ones copy: no second pass over the tensor (r->crc_done). */
static int put_copy_crc(struct tw_client *c, struct tw__creq *r, struct stage *st, char *err,
                        size_t errlen)
{
    struct tw_staging_pipe *p = NULL;
    int rc = tw__staging_begin_host(st->buf->p, STAGE_POOL_CHUNK, TW_STAGING_TO_HOST, r->mem_ops,
                                    &r->mem, (uintptr_t)st->dev, r->len, STAGE_PIPE_DEPTH,
                                    TW_STAGING_CRC, &p, err, errlen);
    if (rc)
        return rc;
    (void)c;
    for (;;) {
        struct tw_staging_chunk ch;
        rc = tw__staging_acquire(p, &ch);
        if (rc == 1) {
            /* The bytes stay where they landed: hand the chunk back. */
            rc = tw__staging_release(p, &ch);
            if (rc < 0)
                break;
            continue;
        }
        if (rc < 0 || (rc = tw__staging_complete(p)) != 0)
            break; /* failed, or complete (1) */
        rc = tw__staging_wait(p, 1000);
        if (rc < 0)
            break;
    }
    if (rc < 0)
        snprintf(err, errlen, "%s", tw__staging_error(p));
    else {
        r->crc = tw__staging_crc(p);
        r->crc_done = 1;
        rc = 0;
    }
    tw__staging_end(p);
    return rc;
}

/* The buffer copied ahead for request `index` of the run, taken, or NULL. */
static struct tw__stage_buf *ahead_take(struct tw_client *c, size_t index)
{
    for (unsigned i = 0; i < c->nstage_ahead; i++)
        if (c->stage_ahead[i].index == index) {
            struct tw__stage_buf *b = c->stage_ahead[i].buf;
            c->stage_ahead[i] = c->stage_ahead[--c->nstage_ahead];
            return b;
        }
    return NULL;
}

const uint8_t *tw__client_stage_span_end(const struct tw_client *c, const struct tw__creq *r,
                                         size_t max, unsigned items)
{
    const struct stage *st = r->stage;
    const uint8_t *end = r->buf + r->len;
    if (!st || !st->buf || !st->buf->slab || !c->run || r->buf != st->buf->p)
        return end;
    const struct tw__stage_slab *slab = st->buf->slab;
    unsigned n = 1;
    for (size_t i = r->index + 1; i < c->run_n && n < items; i++, n++) {
        const struct tw__creq *q = &c->run[i];
        const struct tw__stage_buf *b = NULL;
        if (q->finished || q->op != TW__OP_PUT || !q->len || (size_t)(end + q->len - r->buf) > max)
            break;
        if (q->dp == tw__client_dp_rdma_staged && q->stage) /* prepared: took its buffer */
            b = ((const struct stage *)q->stage)->buf;
        else
            for (unsigned k = 0; k < c->nstage_ahead && !b; k++)
                if (c->stage_ahead[k].index == i)
                    b = c->stage_ahead[k].buf;
        if (!b || b->slab != slab || (const uint8_t *)b->p != end)
            break;
        end += q->len;
    }
    return end;
}

void tw__client_stage_ahead_drop(struct tw_client *c)
{
    while (c->nstage_ahead)
        buf_put(c, c->stage_ahead[--c->nstage_ahead].buf);
}

/* Whether request q of the run is a small put from GPU memory of r's
 * device and kind, which put_ahead may copy ahead. */
static int ahead_candidate(struct tw_client *c, const struct tw__creq *r, const struct tw__creq *q)
{
    if (q->finished || q->op != TW__OP_PUT || !q->buf || !q->len || q->len > STAGE_CLASS_MAX ||
        !q->desc)
        return 0;
    if (q == r)
        return 1;
    const struct tw_memkind_ops *ops;
    struct tw_mem_attr a;
    return tw__client_classify(c, (uintptr_t)q->buf, q->len, &ops, &a, NULL, 0) == 0 &&
           ops == r->mem_ops && a.kind == r->mem.kind && a.device == r->mem.device;
}

/* A group of puts copied ahead holds at most this many bytes. */
#define STAGE_AHEAD_BYTES ((size_t)16 << 20)

/* Small and medium puts from GPU memory (a KV cache's blocks, up to
 * STAGE_CLASS_MAX): the copies of r and of the next such puts of the run
 * from the same device go to host buffers in one batched driver call, with
 * one wait, instead of a synchronous ~8.6 us copy each (H200,
 * docs/performance.md). Leaves the buffers in c->stage_ahead; nothing when
 * it cannot (the caller copies r alone). The caller guarantees the run's
 * buffers stay unchanged while the call runs (client.h), so copying early
 * is copying the same bytes. */
static void put_ahead(struct tw_client *c, struct tw__creq *r)
{
    const struct tw_memkind_async_ops *as = r->mem_ops->async;
    int dev = r->mem.device;
    /* Requests open in order: buffers of earlier ones that did not take
     * theirs (finished early, or moved without staging) never will. */
    for (unsigned i = 0; i < c->nstage_ahead;) {
        if (c->stage_ahead[i].index < r->index) {
            buf_put(c, c->stage_ahead[i].buf);
            c->stage_ahead[i] = c->stage_ahead[--c->nstage_ahead];
        } else {
            i++;
        }
    }
    if (!as || !as->copy_batch_to_host_async || !c->run || dev < 0 || c->nstage_ahead)
        return;
    if (c->stage_ahead_stream && (c->stage_ahead_as != as || c->stage_ahead_dev != dev)) {
        c->stage_ahead_as->stream_destroy(c->stage_ahead_dev, c->stage_ahead_stream);
        c->stage_ahead_stream = NULL;
    }
    if (!c->stage_ahead_stream) {
        if (as->stream_create(dev, &c->stage_ahead_stream, NULL, 0) != 0) {
            c->stage_ahead_stream = NULL;
            return;
        }
        c->stage_ahead_as = as;
        c->stage_ahead_dev = dev;
    }
    void *dst[TW__STAGE_AHEAD];
    const void *src[TW__STAGE_AHEAD];
    size_t len[TW__STAGE_AHEAD], n = 0, bytes = 0;
    for (size_t i = r->index; i < c->run_n && n < TW__STAGE_AHEAD; i++) {
        const struct tw__creq *q = &c->run[i];
        if (!ahead_candidate(c, r, q) || (n && bytes + q->len > STAGE_AHEAD_BYTES))
            break;
        bytes += q->len;
        struct tw__stage_buf *b = buf_get(c, r, q->len);
        if (!b)
            break;
        if (b->pin_dev < 0) { /* not page-locked: no asynchronous copy */
            buf_put(c, b);
            break;
        }
        c->stage_ahead[n] = (struct tw__stage_ahead){.index = i, .buf = b};
        dst[n] = b->p;
        src[n] = q->buf;
        len[n++] = q->len;
    }
    /* Blocks adjacent in device memory into adjacent buffers of one slab
     * (next-fit hands them out so) share a copy: first[j] is the first
     * put of copy j. */
    size_t first[TW__STAGE_AHEAD + 1], m = 0;
    for (size_t i = 0; i < n; i++) {
        const struct tw__stage_buf *b = c->stage_ahead[i].buf;
        if (m && b->slab && b->slab == c->stage_ahead[i - 1].buf->slab &&
            (uint8_t *)dst[m - 1] + len[m - 1] == (uint8_t *)b->p &&
            (const uint8_t *)src[m - 1] + len[m - 1] == (const uint8_t *)src[i]) {
            len[m - 1] += len[i];
            continue;
        }
        dst[m] = dst[i];
        src[m] = src[i];
        len[m] = len[i];
        first[m++] = i;
    }
    first[m] = n;
    /* One alone: the caller's synchronous copy is as good. Copies that
     * were not queued, or a wait that failed: those requests copy alone
     * (and report the failure if it is theirs). */
    size_t keep = 0;
    if (n > 1) {
        size_t done = 0;
        char err[200] = "";
        int rc = as->copy_batch_to_host_async(dev, c->stage_ahead_stream, dst, src, len, m, &done,
                                              err, sizeof(err));
        c->stage_joined_puts += n - m;
        size_t queued = first[rc == 0 ? m : done];
        if (queued && as->stream_wait(dev, c->stage_ahead_stream, err, sizeof(err)) == 0)
            keep = queued;
        else if (queued) { /* errors stick to a stream: the next group gets a new one */
            as->stream_destroy(dev, c->stage_ahead_stream);
            c->stage_ahead_stream = NULL;
        }
    }
    for (size_t k = keep; k < n; k++)
        buf_put(c, c->stage_ahead[k].buf);
    c->nstage_ahead = (unsigned)keep;
}

static int staged_put_prepare(struct tw_client *c, struct tw__creq *r)
{
    char err[200];
    struct tw__stage_buf *ahead = NULL;
    if (r->len && r->len <= STAGE_CLASS_MAX && c->run) {
        if (!(ahead = ahead_take(c, r->index))) {
            put_ahead(c, r);
            ahead = ahead_take(c, r->index);
        }
    }
    int rc = stage_begin(c, r, r->len, 0, ahead);
    if (rc || !r->len || ahead) /* copied ahead: the engine sums the host bytes */
        return rc;
    struct stage *st = r->stage;
    if (c->checksum && r->mem_ops->async && st->buf->pin_dev >= 0)
        rc = put_copy_crc(c, r, st, err, sizeof(err));
    else
        rc = r->mem_ops->copy_to_host(st->buf->p, (uintptr_t)st->dev, r->len, &r->mem, err,
                                      sizeof(err));
    if (rc)
        tw__client_seterr(c, "'%s': staging the GPU buffer to host memory failed: %s", r->name,
                          err);
    return rc;
}

static int staged_put_start(struct tw_client *c, struct tw__creq *r)
{
    return inner_of(r)->put_start(c, r);
}

static void finish_fmt(struct tw_client *c, struct tw__creq *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Ends r with status and a message made from fmt. */
static void finish_fmt(struct tw_client *c, struct tw__creq *r, int status, const char *fmt, ...)
{
    char msg[TW_FABRIC_ERRMSG_LEN + 400];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    tw__client_engine_finish(c, r, status, msg,
                             (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
}

static void pool_idle(void *arg)
{
    __atomic_store_n((int *)arg, 1, __ATOMIC_RELEASE);
}

/* A read ended (cancelled, timed out) while the provider still held some
 * of its operations, which may yet write into the pool: the pool's
 * registration is given up (the next pull registers it again) once they
 * drained. If they do not drain within 2 s the connection is failed, so
 * no later pull uses the pool; tw_close closes the plane (which drops
 * them) before the pool is freed. 0 or the connection's failure. */
static int pool_busy(struct tw_client *c, struct tw__creq *r)
{
    struct tw_fabric_mr *mr = c->stage_pool_mr;
    c->stage_pool_mr = NULL;
    __atomic_store_n(&c->stage_pool_idle, 0, __ATOMIC_RELEASE);
    tw__fabric_mr_release(mr, pool_idle, &c->stage_pool_idle);
    for (int i = 0; i < 2000 && !__atomic_load_n(&c->stage_pool_idle, __ATOMIC_ACQUIRE); i++)
        usleep(1000);
    if (__atomic_load_n(&c->stage_pool_idle, __ATOMIC_ACQUIRE))
        return 0;
    tw__client_seterr(c,
                      "'%s': rdma reads into the staging pool did not drain after a failed "
                      "transfer; the connection is closed",
                      r->name);
    return tw__client_conn_fail(c, TW_EINTERNAL, 0);
}

static int queue_tag(struct tw_client *c, struct tw__creq *r, uint32_t tag, uint32_t status,
                     uint64_t bytes)
{
    struct tw_msg m = {.hdr = {.version = TW_PROTO_VERSION, .tag = tag, .request_id = r->id}};
    if (tag == TW_TAG_RDMA_DONE) {
        m.u.rdma_done.status = status;
        m.u.rdma_done.bytes = bytes;
    }
    return tw__client_conn_queue(c, &m);
}

static uint64_t pipe_stall_ns(const struct tw_client *c)
{
    return c->request_timeout_ms > 0 ? (uint64_t)c->request_timeout_ms * 1000000ull : 0;
}

/*
 * The pipelined pull of a get into GPU memory, on the server's
 * RDMA_REGISTER: RDMA_READY, then per chunk: a pool slot (acquire), the
 * read of the chunk into it, its host->device copy queued (release, which
 * also folds the chunk into the CRC); RDMA_DONE once the reads are over
 * (the server may drop its region while the last copies finish); then the
 * copies are waited for and the CRC checked. A failed read or copy stops
 * the reads: RDMA_DONE carries the failure and the bytes read, the request
 * fails with the first error, the pipe gives its slots back (it waits for
 * its queued copies first) and the connection stays in step.
 *
 * A progressive source (bit 5: RDMA_REGISTER with MORE) is read only as
 * far as its RDMA_AVAILABLE frames announced: piped_pump reads up to
 * st->avail and returns; the next RDMA_AVAILABLE pumps again, so the
 * server's copies to its host memory overlap our reads and our copies.
 */
static int piped_finish(struct tw_client *c, struct tw__creq *r, int status, int net_failed,
                        const char *why, int buffer_busy)
{
    struct stage *st = r->stage;
    struct tw_staging_pipe *p = st->pipe;
    char text[TW_FABRIC_ERRMSG_LEN + 64];
    int rc;
    snprintf(text, sizeof(text), "%s", why);
    st->pipe = NULL;
    if (buffer_busy) {
        rc = pool_busy(c, r);
        if (rc) {
            tw__staging_end(p);
            return rc;
        }
    }
    rc = queue_tag(c, r, TW_TAG_RDMA_DONE,
                   status == 0  ? 0
                   : net_failed ? tw__fabric_status_to_wire(status)
                                : TW_WIRE_INTERNAL,
                   st->moved);
    if (rc) { /* the connection is gone */
        tw__staging_end(p);
        return rc;
    }
    while (status == 0 && p && (rc = tw__staging_complete(p)) == 0)
        rc = tw__staging_wait(p, 1000);
    if (status == 0 && rc < 0) {
        status = rc;
        snprintf(text, sizeof(text), "%s", tw__staging_error(p));
    }
    if (status == 0)
        r->crc = tw__staging_crc(p);
    tw__staging_end(p);
    st->copied = status == 0 ? (size_t)r->expect : 0;
    if (status) {
        finish_fmt(c, r, status, "'%s': %s", r->name, text);
        return 0;
    }
    r->received = r->expect;
    if (r->check_crc && r->crc != r->crc_expected)
        finish_fmt(c, r, TW_ECHECKSUM,
                   "'%s': CRC32C of the received bytes is %08x, the server announced %08x", r->name,
                   r->crc, r->crc_expected);
    else
        tw__client_engine_finish(c, r, 0, NULL, 0);
    return 0;
}

/* After a failure: stops the reads still in flight and waits for them
 * (their chunks stay held; the pipe's end gives them back). 1 when one
 * of them ended with the provider still holding operations that may yet
 * write into the pool. */
static int piped_stop(struct tw_client *c, struct stage *st)
{
    int busy = 0;
    for (unsigned i = 0; i < st->nrd; i++)
        tw__fabric_xfer_cancel(st->rd[i].x, TW_ECANCELLED);
    for (unsigned i = 0; i < st->nrd; i++) {
        struct tw_fabric_completion fc;
        (void)tw__fabric_xfer_wait(c->fab, st->rd[i].x, &fc);
        busy |= fc.buffer_busy;
    }
    st->nrd = 0;
    return busy;
}

/* Bytes read or being read: where the pull's next chunk starts. */
static uint64_t piped_issued(const struct stage *st)
{
    return st->nrd ? st->rd[st->nrd - 1].ch.offset + st->rd[st->nrd - 1].ch.len : st->moved;
}

/* Starts the read of chunk ch (a pool slot) from the server's region; on
 * success it is the pull's newest read in flight, else fc says why. */
static int piped_read_start(struct tw_client *c, struct tw__creq *r,
                            const struct tw_staging_chunk *ch, struct tw_fabric_completion *fc)
{
    struct stage *st = r->stage;
    struct tw_fabric_xfer_desc d;
    memset(&d, 0, sizeof(d));
    d.op = TW_FABRIC_PULL;
    d.peer = c->fpeer;
    d.local = c->stage_pool_mr;
    d.local_offset = ch->pool_offset;
    d.remote = st->remote;
    d.remote.remote_addr += ch->offset;
    d.remote.length -= ch->offset;
    d.length = ch->len;
    d.stall_ns = pipe_stall_ns(c);
    d.attach_only = r->attach; /* the pool is host memory */
    struct tw_fabric_xfer *x;
    int rc = tw__fabric_xfer_start(c->fab, &d, &x, fc);
    if (rc)
        return rc;
    st->rd[st->nrd].x = x;
    st->rd[st->nrd].ch = *ch;
    if (++st->nrd == 2)
        c->stage_pull_overlaps++;
    return 0;
}

/* Reads chunk after chunk while they lie within what the server announced,
 * two at a time (the next one's read is with the provider while this one
 * completes); ends the pull once every byte is read (or a read or copy
 * failed). Returns with no read in flight: when the rest is not announced
 * yet, after the reads of what was. */
static int piped_pump(struct tw_client *c, struct tw__creq *r)
{
    struct stage *st = r->stage;
    struct tw_staging_pipe *p = st->pipe;
    char why[TW_FABRIC_ERRMSG_LEN + 64] = "";
    struct tw_fabric_completion fc;
    memset(&fc, 0, sizeof(fc));
    size_t chunk = tw__staging_pool_chunk(c->stage_pool);
    int status = 0, net_failed = 0;
    for (;;) {
        /* Start reads while fewer than two run and the next chunk (chunks
         * go in order) is announced in full. */
        uint64_t next;
        while (st->nrd < 2 && (next = piped_issued(st)) < r->expect) {
            uint64_t want = r->expect - next < chunk ? r->expect - next : chunk;
            if (st->avail - next < want)
                break;
            struct tw_staging_chunk ch;
            int got = tw__staging_acquire(p, &ch);
            if (got == 0 && st->nrd == 0) /* the slot's previous copy still runs */
                got = tw__staging_wait(p, 1000);
            if (got < 0) {
                status = got;
                goto stage_failed;
            }
            if (got == 0) {
                if (st->nrd)
                    break; /* a read in flight gives its slot back first */
                continue;
            }
            int rc = piped_read_start(c, r, &ch, &fc);
            if (rc) {
                status = rc;
                goto read_failed;
            }
        }
        if (st->nrd == 0)
            break;
        /* The oldest read; once it is over, its chunk's copy to the GPU. */
        struct piped_read done = st->rd[0];
        st->rd[0] = st->rd[1];
        st->nrd--;
        int rc = tw__fabric_xfer_wait(c->fab, done.x, &fc);
        if (rc < 0 || fc.status) {
            status = fc.status ? fc.status : rc;
            goto read_failed;
        }
        st->moved += done.ch.len;
        rc = tw__staging_release(p, &done.ch);
        if (rc < 0) {
            status = rc;
            goto stage_failed;
        }
    }
    if (st->moved < r->expect)
        return 0; /* the next RDMA_AVAILABLE pumps again */
    return piped_finish(c, r, 0, 0, "", 0);
stage_failed: /* a pool slot or a copy to the GPU */
    snprintf(why, sizeof(why), "%s", tw__staging_error(p));
    goto failed;
read_failed:
    net_failed = 1;
    snprintf(why, sizeof(why), "rdma read from the server failed: %s",
             fc.msg[0] ? fc.msg : tw_strerror(status));
failed:;
    int busy = (net_failed && fc.buffer_busy) | piped_stop(c, st);
    return piped_finish(c, r, status, net_failed, why, busy);
}

static int piped_pull(struct tw_client *c, struct tw__creq *r, const struct tw_msg *m)
{
    struct stage *st = r->stage;
    char why[TW_FABRIC_ERRMSG_LEN + 64] = "";
    if (m->u.rdma_register.length != r->expect) {
        tw__client_seterr(c, "RDMA_REGISTER for '%s' has %llu bytes, TENSOR_INFO said %llu",
                          r->name, (unsigned long long)m->u.rdma_register.length,
                          (unsigned long long)r->expect);
        return TW_EBAD_LENGTH;
    }
    int rc = queue_tag(c, r, TW_TAG_RDMA_READY, 0, 0);
    if (rc)
        return rc;
    st->remote.key = m->u.rdma_register.rkey;
    st->remote.remote_addr = m->u.rdma_register.remote_addr;
    st->remote.length = m->u.rdma_register.length;
    st->moved = 0;
    st->nrd = 0;
    st->avail = (m->hdr.flags & TW_FRAME_MORE) ? 0 : r->expect;
    rc = tw__staging_begin(c->stage_pool, TW_STAGING_TO_DEVICE, r->mem_ops, &r->mem,
                           (uintptr_t)st->dev, r->expect, STAGE_PIPE_DEPTH,
                           r->check_crc ? TW_STAGING_CRC : 0, &st->pipe, why, sizeof(why));
    if (rc) {
        st->pipe = NULL;
        return piped_finish(c, r, rc, 0, why, 0);
    }
    return piped_pump(c, r);
}

/* Bit 5: more of the server's source is in place. */
static int piped_available(struct tw_client *c, struct tw__creq *r, const struct tw_msg *m)
{
    struct stage *st = r->stage;
    st->avail = m->u.rdma_available.ready; /* increasing, <= length: the state machine checked */
    if (!st->pipe)
        return 0; /* the pull already ended (a failure) */
    return piped_pump(c, r);
}

static int staged_on_message(struct tw_client *c, struct tw__creq *r, const struct tw_msg *msg)
{
    struct stage *st = r->stage;
    if (st && st->piped && r->op == TW__OP_GET && msg->hdr.tag == TW_TAG_RDMA_REGISTER)
        return piped_pull(c, r, msg);
    if (st && st->piped && r->op == TW__OP_GET && msg->hdr.tag == TW_TAG_RDMA_AVAILABLE)
        return piped_available(c, r, msg);
    const struct tw__client_dp_ops *in = inner_of(r);
    if (!in->on_message)
        return TW_EBAD_FIELD;
    return in->on_message(c, r, msg);
}

/* The inner plane let go of the host buffer: a successful get's last bytes
 * go to the device now (a failed copy fails the request: r->status), and
 * the caller's pointer comes back. */
static void staged_release(struct tw_client *c, struct tw__creq *r)
{
    const struct tw__client_dp_ops *in = inner_of(r);
    if (in->release)
        in->release(c, r);
    struct stage *st = r->stage;
    if (!st)
        return;
    r->stage = NULL;
    if (r->op == TW__OP_GET && r->finished && r->status == 0 && !st->piped) {
        int rc = st->failed;
        if (!rc && (rc = stage_queue(c, r, st)) > 0)
            rc = stage_to_device(c, r, st, (size_t)r->expect, 0);
        if (rc)
            r->status = rc;
    }
    /* A pipelined pull that ended before its last read (an ERROR, a closed
     * connection): its slots go back once its queued copies are done. */
    if (st->pipe) {
        tw__staging_end(st->pipe);
        st->pipe = NULL;
    }
    /* Always, before the host buffer can go to another request. */
    int drc = stage_drain(c, r, st);
    if (drc && r->op == TW__OP_GET && r->finished && r->status == 0)
        r->status = drc;
    r->buf = st->dev;
    if (st->buf)
        buf_put(c, st->buf);
    free(st);
}

static const struct staged_plane inline_staged = {
    .ops =
        {
            .name = "inline tcp + staging",
            .wire_plane = TW_DP_INLINE,
            .xfer_flags = 0,
            .get_start = staged_get_start,
            .get_data = staged_get_data,
            .put_prepare = staged_put_prepare,
            .put_start = staged_put_start,
            .on_message = NULL,
            .release = staged_release,
        },
    .inner = &tw__client_dp_inline,
};

static const struct staged_plane rdma_staged = {
    .ops =
        {
            .name = "rdma + staging",
            .wire_plane = TW_DP_RDMA,
            .xfer_flags = TW_XFER_WANT_RDMA,
            .get_start = staged_get_start,
            .get_data = staged_get_data,
            .put_prepare = staged_put_prepare,
            .put_start = staged_put_start,
            .on_message = staged_on_message,
            .release = staged_release,
        },
    .inner = &tw__client_dp_rdma,
};

const struct tw__client_dp_ops *const tw__client_dp_inline_staged = &inline_staged.ops;
const struct tw__client_dp_ops *const tw__client_dp_rdma_staged = &rdma_staged.ops;
