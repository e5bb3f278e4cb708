/*
 * Hash map of names (FNV-1a, chained, doubles at load factor 1) to current
 * versions. Storage: tw__hostmem_alloc (mmap, tracked) for large tensors so
 * freeing returns memory to the OS at once and registration caches know its
 * lifetime, the store's slab (server/slab.h) for small ones (the hostmem
 * table is a sorted array: not meant for many thousands of tiny buffers).
 */
#include "server/store.h"

#include "gpu/cuda.h"
#include "mem/hostmem.h"
#include "mem/memkind.h"
#include "server/copy_tickets.h"
#include "server/devslab.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MMAP_THRESHOLD (1u << 20)
#define INITIAL_BUCKETS 64
#define SPARE_MAX (2ull << 30)

static void *take_spare(struct tw_store *s, size_t len)
{
    for (int i = 0; i < TW_STORE_SPARES; i++) {
        if (s->spare[i].p && s->spare[i].len == len) {
            void *p = s->spare[i].p;
            s->spare[i].p = NULL;
            s->spare_bytes -= len;
            return p;
        }
    }
    return NULL;
}

/* Frees spare i (its pages go back to the kernel). */
static void drop_spare(struct tw_store *s, int i)
{
    tw__hostmem_free(s->spare[i].p); /* invalidates every registration cache */
    s->spare_bytes -= s->spare[i].len;
    s->spare[i].p = NULL;
}

/* Keeps a freed mapping for reuse, or frees it. Its old contents never
 * leak: a put overwrites every byte before the version becomes visible. A
 * kept mapping stays tracked by hostmem (no generation bump), so the owner's
 * registration caches are told here, before any put can get the pages.
 *
 * When the pool is full (slots or bytes), the spares given back longest
 * ago make room: the size freed last is the one most likely to come back
 * (a repeated transfer, the host copy of a staged GPU tensor: issue 11
 * measured 256 MiB GPU gets at 0.52-0.68x of host gets while two 1 GiB
 * spares of an earlier workload filled the pool and every 256 MiB copy was
 * mapped, faulted and pinned afresh). */
static void give_spare(struct tw_store *s, void *p, size_t len)
{
    tw__slab_fault_forget(&s->slab, p); /* before it is reused or unmapped */
    if (len > s->spare_max) {
        tw__hostmem_free(p);
        return;
    }
    for (;;) {
        int slot = -1, oldest = -1;
        for (int i = 0; i < TW_STORE_SPARES; i++) {
            if (!s->spare[i].p) {
                if (slot < 0)
                    slot = i;
            } else if (oldest < 0 || s->spare[i].seq < s->spare[oldest].seq) {
                oldest = i;
            }
        }
        if (slot >= 0 && s->spare_bytes + len <= s->spare_max) {
            if (s->on_recycle)
                s->on_recycle(s->recycle_ctx, p, len);
            s->spare[slot].p = p;
            s->spare[slot].len = len;
            s->spare[slot].aged = 0;
            s->spare[slot].seq = ++s->spare_seq;
            s->spare_bytes += len;
            return;
        }
        drop_spare(s, oldest); /* full: oldest >= 0 */
    }
}

uint64_t tw__store_trim_spares(struct tw_store *s)
{
    uint64_t freed = 0;
    for (int i = 0; i < TW_STORE_SPARES; i++) {
        if (!s->spare[i].p)
            continue;
        if (!s->spare[i].aged) {
            s->spare[i].aged = 1;
            continue;
        }
        freed += s->spare[i].len;
        drop_spare(s, i);
    }
    /* Small tensors' free blocks, by the same rule; kept device blocks
     * likewise, by size. */
    const struct tw_store_devmem_ops *m = tw__store_devmem(s);
    for (unsigned i = 0; m->trim && i < s->ngpus; i++)
        freed += m->trim(s->gpu[i].ordinal, 0);
    return freed + tw__slab_trim(&s->slab);
}

static uint64_t hash_name(const uint8_t *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* Queued copies between device memory and pinned host memory, per device
 * (by ordinal; the event loop's only):
 *  - stream: blocking, so its copies start after the synchronous copies
 *    queued before them on the legacy default stream (a put's cuMemcpyHtoD
 *    into the version may still be running when it returns);
 *  - the copies not yet handed to the driver: they go as one
 *    cuMemcpyBatchAsync (tw__cuda_copy_batch) when DEVMEM_BATCH are
 *    waiting, when a caller waits for one of them, and before any other
 *    copy or free on that device (so nothing overtakes them, and their
 *    source cannot be freed first); an event recorded behind each batch
 *    tells when its copies are complete (copy_tickets.h). DEVMEM_BATCH is
 *    a trade: a batch of 64 costs ~1.4 us per 32 KiB copy on the H200, one
 *    of 16 ~1.8 (docs/performance.md), and a frame waits for its batch;
 *  - a batch the driver refused fails the next wait (err, why), since the
 *    requests that queued it were told "queued". */
#define DEVMEM_BATCH 32
/* Idle small-block chunks kept per device beyond a put (server/devslab.h). */
#define DEVSLAB_KEEP ((uint64_t)256 << 20)
struct devmem_queue {
    const struct tw_cuda_api *cu;
    int ordinal;
    CUstream stream;
    struct tw_copy_tickets tickets;
    size_t n;
    int to_host; /* direction of the n copies waiting (one batch, one way) */
    void *dst[DEVMEM_BATCH];
    const void *src[DEVMEM_BATCH];
    size_t len[DEVMEM_BATCH];
    int err;
    char why[160];
    /* Device memory of small versions (under TW_DEVSLAB_MAX): blocks carved
     * from 2 MiB chunks, so a put of a new name costs no cuMemAlloc
     * (3.4 us on the H200, cuMemFree 2.9: docs/performance.md), and a
     * freed block serves the next put of its size class. A freed block may
     * still be read by copies queued before its free: it is handed out
     * again only once they are done (its ticket). Idle chunks beyond
     * DEVSLAB_KEEP go back at once, the others after a trim period unused
     * (tw__store_trim_spares), all before an allocation fails for want of
     * memory. */
    struct tw_devslab slab;
};
static struct devmem_queue *devmem_q[TW_CUDA_MAX_DEVICES];

/* Device ordinal's queue, NULL when it has none (yet). */
static struct devmem_queue *devmem_queue_at(int ordinal)
{
    return ordinal >= 0 && ordinal < TW_CUDA_MAX_DEVICES ? devmem_q[ordinal] : NULL;
}

/* Copy markers: CUDA events on the queue's stream (ctx: the queue; the
 * device's context is current in every caller). */
static int ev_create(void *ctx, void **marker, char *err, size_t errlen)
{
    struct devmem_queue *q = ctx;
    CUevent ev = NULL;
    CUresult r = q->cu->cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS)
        return tw__cuda_fail(r, err, errlen, "cuEventCreate");
    *marker = ev;
    return 0;
}

static void ev_destroy(void *ctx, void *marker)
{
    struct devmem_queue *q = ctx;
    (void)q->cu->cuEventDestroy((CUevent)marker);
}

static int ev_record(void *ctx, void *marker, char *err, size_t errlen)
{
    struct devmem_queue *q = ctx;
    CUresult r = q->cu->cuEventRecord((CUevent)marker, q->stream);
    return r == CUDA_SUCCESS ? 0 : tw__cuda_fail(r, err, errlen, "cuEventRecord");
}

static int ev_query(void *ctx, void *marker, char *err, size_t errlen)
{
    struct devmem_queue *q = ctx;
    CUresult r = q->cu->cuEventQuery((CUevent)marker);
    if (r == CUDA_SUCCESS)
        return 1;
    if (r == CUDA_ERROR_NOT_READY)
        return 0;
    return tw__cuda_fail(r, err, errlen, "copies from the GPU (cuEventQuery)");
}

static int ev_wait(void *ctx, void *marker, char *err, size_t errlen)
{
    struct devmem_queue *q = ctx;
    CUresult r = q->cu->cuEventSynchronize((CUevent)marker);
    return r == CUDA_SUCCESS
               ? 0
               : tw__cuda_fail(r, err, errlen, "copies from the GPU (cuEventSynchronize)");
}

static const struct tw_copy_marker_ops devmem_markers = {
    .create = ev_create,
    .destroy = ev_destroy,
    .record = ev_record,
    .query = ev_query,
    .wait = ev_wait,
};

static void devmem_fail(struct devmem_queue *q, int rc, const char *why)
{
    if (rc && !q->err) {
        q->err = rc;
        snprintf(q->why, sizeof(q->why), "%s", why);
    }
}

static void devmem_submit(int ordinal)
{
    struct devmem_queue *q = devmem_queue_at(ordinal);
    if (!q || !q->n)
        return;
    char why[160];
    int rc = tw__cuda_copy_batch(ordinal, q->stream, q->dst, q->src, q->len, q->n, q->to_host, NULL,
                                 why, sizeof(why));
    q->n = 0;
    devmem_fail(q, rc, why);
    /* Marked even when refused: the tickets must be waitable, and the
     * refusal fails the wait. */
    devmem_fail(q, tw__copy_tickets_mark(&q->tickets, why, sizeof(why)), why);
}

/* The queue's error, reported once (0 when none). */
static int devmem_take_err(struct devmem_queue *q, char *err, size_t errlen)
{
    int rc = q->err;
    if (rc && err && errlen)
        snprintf(err, errlen, "%s", q->why);
    q->err = 0;
    return rc;
}

/* The device memory under a queue's slab: cuMemAlloc / cuMemFree in the
 * device's primary context (current in every caller: they entered it). */
static int slab_alloc(void *ctx, size_t len, void **p, char *err, size_t errlen)
{
    struct devmem_queue *q = ctx;
    CUdeviceptr d = 0;
    CUresult r = q->cu->cuMemAlloc(&d, len);
    if (r != CUDA_SUCCESS)
        return tw__cuda_fail(r, err, errlen, "cuMemAlloc(%zu) on cuda:%d", len, q->ordinal);
    *p = (void *)(uintptr_t)d;
    return 0;
}

static void slab_free(void *ctx, void *p)
{
    struct devmem_queue *q = ctx;
    (void)q->cu->cuMemFree((CUdeviceptr)(uintptr_t)p);
}

/* Every copy queued so far, submitted and finished. Not the fence op: a
 * queue error stays for the copy's own reader to take, and no ticket is
 * marked done here (a refused batch must still fail its wait). */
static void slab_quiesce(void *ctx)
{
    struct devmem_queue *q = ctx;
    devmem_submit(q->ordinal);
    (void)q->cu->cuStreamSynchronize(q->stream);
}

static const struct tw_devslab_ops devmem_slab_ops = {
    .alloc = slab_alloc,
    .free = slab_free,
    .quiesce = slab_quiesce,
};

/* Device ordinal's queue, made on first use (its context is current). */
static int devmem_queue_of(int ordinal, const struct tw_cuda_api *cu, struct devmem_queue **out,
                           char *err, size_t errlen)
{
    struct devmem_queue *q = devmem_q[ordinal];
    if (!q) {
        if (!(q = calloc(1, sizeof(*q))))
            return -ENOMEM;
        q->cu = cu;
        q->ordinal = ordinal;
        CUresult r = cu->cuStreamCreate(&q->stream, CU_STREAM_DEFAULT);
        if (r != CUDA_SUCCESS) {
            free(q);
            return tw__cuda_fail(r, err, errlen, "cuStreamCreate on cuda:%d", ordinal);
        }
        tw__copy_tickets_init(&q->tickets, &devmem_markers, q);
        tw__devslab_init(&q->slab, &devmem_slab_ops, q, DEVSLAB_KEEP);
        devmem_q[ordinal] = q;
    }
    *out = q;
    return 0;
}

/* A small version's block from the slab, once the copies queued before
 * its last free are done. 1: none to be had there (out of memory, or that
 * wait failed: the caller allocates on its own), 0, or a negative code. */
static int devmem_slab_get(int ordinal, struct devmem_queue *q, size_t len, void **p, char *err,
                           size_t errlen)
{
    uint64_t ticket = 0;
    int rc = tw__devslab_get(&q->slab, len, p, &ticket, err, errlen);
    if (rc == -ENOMEM)
        return 1;
    if (rc || ticket <= q->tickets.completed)
        return rc;
    if (ticket > q->tickets.marked)
        devmem_submit(ordinal);
    char why[160];
    if (tw__copy_tickets_done(&q->tickets, ticket, 1, why, sizeof(why)) < 0) {
        /* The copy's failure is its reader's; this put takes other memory. */
        (void)tw__devslab_put(&q->slab, *p, len, ticket);
        return 1;
    }
    return 0;
}

/* GPU-resident versions: device memory on the device's primary context;
 * small ones from the device's slab. */
static int cuda_devmem_alloc(int ordinal, size_t len, void **p, char *err, size_t errlen)
{
    const struct tw_cuda_api *cu;
    struct devmem_queue *q = NULL;
    int rc = tw__cuda_enter(ordinal, &cu, err, errlen);
    if (rc)
        return rc;
    if (ordinal < TW_CUDA_MAX_DEVICES && devmem_queue_of(ordinal, cu, &q, NULL, 0) == 0 &&
        len > 0 && len < TW_DEVSLAB_MAX) {
        rc = devmem_slab_get(ordinal, q, len, p, err, errlen);
        if (rc <= 0)
            return rc;
    }
    CUdeviceptr d = 0;
    CUresult r = cu->cuMemAlloc(&d, len);
    if (r == CUDA_ERROR_OUT_OF_MEMORY && q && q->slab.idle_bytes) {
        tw__devslab_trim(&q->slab, 1); /* idle chunks must not make a put fail */
        r = cu->cuMemAlloc(&d, len);
    }
    if (r != CUDA_SUCCESS)
        return tw__cuda_fail(r, err, errlen, "cuMemAlloc(%zu) on cuda:%d", len, ordinal);
    *p = (void *)(uintptr_t)d;
    return 0;
}

static void cuda_devmem_free(int ordinal, void *p, size_t len)
{
    const struct tw_cuda_api *cu;
    if (!p || tw__cuda_enter(ordinal, &cu, NULL, 0) != 0)
        return;
    devmem_submit(ordinal); /* copies queued from it read it first */
    struct devmem_queue *q = devmem_queue_at(ordinal);
    /* Not a slab block (allocated on its own): back to the driver. */
    if (!q || tw__devslab_put(&q->slab, p, len, q->tickets.issued) != 0)
        cu->cuMemFree((CUdeviceptr)(uintptr_t)p);
}

static uint64_t cuda_devmem_trim(int ordinal, int all)
{
    const struct tw_cuda_api *cu;
    struct devmem_queue *q = devmem_queue_at(ordinal);
    if (!q || tw__cuda_enter(ordinal, &cu, NULL, 0) != 0)
        return 0;
    return tw__devslab_trim(&q->slab, all);
}

static void cuda_devmem_held(int ordinal, uint64_t *bytes, uint64_t *free_bytes)
{
    const struct devmem_queue *q = devmem_queue_at(ordinal);
    *bytes = q ? q->slab.chunk_bytes : 0;
    *free_bytes = q ? q->slab.free_bytes : 0;
}

/* One copy between a version's device memory and host memory: synchronous,
 * or (ticket not NULL) queued for the device's stream, with its ticket in
 * *ticket. */
static int cuda_devmem_copy(int ordinal, void *dst, const void *src, size_t len, int to_host,
                            uint64_t *ticket, char *err, size_t errlen)
{
    const struct tw_cuda_api *cu;
    const char *what = ticket    ? (to_host ? "cuMemcpyDtoHAsync" : "cuMemcpyHtoDAsync")
                       : to_host ? "cuMemcpyDtoH"
                                 : "cuMemcpyHtoD";
    if (ticket && (ordinal < 0 || ordinal >= TW_CUDA_MAX_DEVICES))
        return TW_EDEVICE;
    int rc = tw__cuda_enter(ordinal, &cu, err, errlen);
    if (rc == 0)
        rc = tw__cuda_test_copy_hook(what, err, errlen);
    if (rc)
        return rc;
    CUresult r;
    if (ticket) {
        struct devmem_queue *q = NULL;
        if ((rc = devmem_queue_of(ordinal, cu, &q, err, errlen)) != 0)
            return rc;
        if (q->n && q->to_host != to_host)
            devmem_submit(ordinal); /* a batch goes one way */
        q->to_host = to_host;
        q->dst[q->n] = dst;
        q->src[q->n] = src;
        q->len[q->n] = len;
        *ticket = tw__copy_tickets_issue(&q->tickets);
        if (++q->n == DEVMEM_BATCH)
            devmem_submit(ordinal);
        return 0;
    }
    devmem_submit(ordinal);
    r = to_host ? cu->cuMemcpyDtoH(dst, (CUdeviceptr)(uintptr_t)src, len)
                : cu->cuMemcpyHtoD((CUdeviceptr)(uintptr_t)dst, src, len);
    if (r != CUDA_SUCCESS)
        return tw__cuda_fail(r, err, errlen, "%s(%zu bytes) on cuda:%d", what, len, ordinal);
    return 0;
}

static int cuda_devmem_to_host(int ordinal, void *dst, const void *src, size_t len, char *err,
                               size_t errlen)
{
    return cuda_devmem_copy(ordinal, dst, src, len, 1, NULL, err, errlen);
}

static int cuda_devmem_from_host(int ordinal, void *dst, const void *src, size_t len, char *err,
                                 size_t errlen)
{
    return cuda_devmem_copy(ordinal, dst, src, len, 0, NULL, err, errlen);
}

static int cuda_devmem_copy_async(int ordinal, void *dst, const void *src, size_t len, int to_host,
                                  uint64_t *ticket, char *err, size_t errlen)
{
    return cuda_devmem_copy(ordinal, dst, src, len, to_host, ticket, err, errlen);
}

static int cuda_devmem_copied(int ordinal, uint64_t ticket, int wait, char *err, size_t errlen)
{
    const struct tw_cuda_api *cu;
    struct devmem_queue *q = devmem_queue_at(ordinal);
    if (!q || ticket <= q->tickets.completed)
        return 1;
    int rc = tw__cuda_enter(ordinal, &cu, err, errlen);
    if (rc)
        return rc;
    if (ticket > q->tickets.marked)
        devmem_submit(ordinal);
    if ((rc = devmem_take_err(q, err, errlen)) != 0)
        return rc;
    return tw__copy_tickets_done(&q->tickets, ticket, wait, err, errlen);
}

static int cuda_devmem_fence(int ordinal, char *err, size_t errlen)
{
    const struct tw_cuda_api *cu;
    struct devmem_queue *q = devmem_queue_at(ordinal);
    if (!q)
        return 0;
    int rc = tw__cuda_enter(ordinal, &cu, err, errlen);
    if (rc)
        return rc;
    devmem_submit(ordinal);
    CUresult r = cu->cuStreamSynchronize(q->stream);
    if ((rc = devmem_take_err(q, err, errlen)) != 0)
        return rc;
    if (r != CUDA_SUCCESS)
        return tw__cuda_fail(r, err, errlen, "copies from cuda:%d (cuStreamSynchronize)", ordinal);
    tw__copy_tickets_all_done(&q->tickets);
    return 0;
}

static int cuda_devmem_pin(int ordinal, void *p, size_t len, char *err, size_t errlen)
{
    return tw__memkind_cuda_async.pin(ordinal, p, len, err, errlen);
}

static void cuda_devmem_unpin(int ordinal, void *p)
{
    tw__memkind_cuda_async.unpin(ordinal, p);
}

const struct tw_store_devmem_ops tw__store_devmem_cuda = {
    .alloc = cuda_devmem_alloc,
    .free = cuda_devmem_free,
    .trim = cuda_devmem_trim,
    .to_host = cuda_devmem_to_host,
    .from_host = cuda_devmem_from_host,
    .pin = cuda_devmem_pin,
    .unpin = cuda_devmem_unpin,
    .copy_async = cuda_devmem_copy_async,
    .copied = cuda_devmem_copied,
    .fence = cuda_devmem_fence,
    .held = cuda_devmem_held,
};

const struct tw_store_devmem_ops *tw__store_devmem(const struct tw_store *s)
{
    return s->devmem ? s->devmem : &tw__store_devmem_cuda;
}

static struct tw_store_gpu *find_gpu(const struct tw_store *s, int ordinal, int *index)
{
    for (unsigned i = 0; i < s->ngpus; i++)
        if (s->gpu[i].ordinal == ordinal) {
            if (index)
                *index = (int)i;
            return (struct tw_store_gpu *)&s->gpu[i];
        }
    return NULL;
}

int tw__store_add_gpu(struct tw_store *s, int ordinal, uint64_t capacity)
{
    if (ordinal < 0 || find_gpu(s, ordinal, NULL) || s->ngpus >= TW_STORE_MAX_GPUS)
        return TW_EINVAL;
    s->gpu[s->ngpus++] = (struct tw_store_gpu){.ordinal = ordinal, .capacity = capacity};
    return 0;
}

const struct tw_store_gpu *tw__store_gpu(const struct tw_store *s, int ordinal)
{
    return find_gpu(s, ordinal, NULL);
}

static uint64_t room(uint64_t capacity, uint64_t reserved)
{
    if (capacity == 0)
        return UINT64_MAX;
    return capacity > reserved ? capacity - reserved : 0;
}

uint64_t tw__store_device_free_bytes(const struct tw_store *s, const struct tw_device *d)
{
    if (d->type == TW_DEVICE_CPU)
        return tw__store_free_bytes(s);
    const struct tw_store_gpu *g = find_gpu(s, d->ordinal, NULL);
    return g ? room(g->capacity, g->reserved) : 0;
}

/* The stored_bytes counter t's device adds to. */
static uint64_t *stored_of(struct tw_store *s, const struct tw_tensor *t)
{
    return t->gpu >= 0 ? &s->gpu[t->gpu].stored_bytes : &s->stored_bytes;
}

/* A GPU-resident version: device memory instead of host pages. */
static int alloc_on_gpu(struct tw_store *s, const struct tw_descriptor *d, int ordinal,
                        struct tw_tensor *t)
{
    int gi;
    struct tw_store_gpu *g = find_gpu(s, ordinal, &gi);
    if (!g)
        return TW_EDEVICE;
    if (d->byte_length > room(g->capacity, g->reserved))
        return TW_ECAPACITY;
    if (d->byte_length > 0) {
        const struct tw_store_devmem_ops *m = tw__store_devmem(s);
        void *p = NULL;
        int rc = m->alloc(ordinal, (size_t)d->byte_length, &p, NULL, 0);
        if (rc < 0)
            return -ENOMEM;
        t->data = p;
        t->alloc_len = (size_t)d->byte_length;
    }
    t->gpu = gi;
    g->reserved += d->byte_length;
    return 0;
}

int tw__store_init(struct tw_store *s, uint64_t capacity)
{
    memset(s, 0, sizeof(*s));
    s->capacity = capacity;
    /* Spares are memory outside the stored bytes: keep them well below the
     * capacity the operator asked for. */
    s->spare_max = SPARE_MAX;
    if (capacity && capacity / 4 < s->spare_max)
        s->spare_max = capacity / 4;
    s->nbuckets = INITIAL_BUCKETS;
    s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
    if (!s->buckets)
        return -ENOMEM;
    /* Free small-tensor memory kept faulted in: the same bound as spares. */
    if (tw__slab_init(&s->slab, s->spare_max) < 0) {
        free(s->buckets);
        s->buckets = NULL;
        return -ENOMEM;
    }
    if (tw__slab_init_sized(&s->pinned_slab, 0, TW_STORE_PINNED_BLOCK_MAX) < 0) {
        tw__slab_destroy(&s->slab);
        free(s->buckets);
        s->buckets = NULL;
        return -ENOMEM;
    }
    return 0;
}

void tw__store_destroy(struct tw_store *s)
{
    for (size_t i = 0; i < s->nbuckets; i++) {
        struct tw_tensor *t = s->buckets[i];
        while (t) {
            struct tw_tensor *next = t->hnext;
            t->hnext = NULL;
            *stored_of(s, t) -= t->byte_length;
            tw__tensor_unref(t);
            t = next;
        }
    }
    free(s->buckets);
    s->buckets = NULL;
    s->count = 0;
    for (int i = 0; i < TW_STORE_SPARES; i++) {
        if (s->spare[i].p)
            tw__hostmem_free(s->spare[i].p);
        s->spare[i].p = NULL;
    }
    s->spare_bytes = 0;
    const struct tw_store_devmem_ops *m = tw__store_devmem(s);
    for (unsigned i = 0; m->trim && i < s->ngpus; i++)
        (void)m->trim(s->gpu[i].ordinal, 1);
    tw__slab_destroy(&s->slab);
    tw__slab_destroy(&s->pinned_slab);
}

uint64_t tw__store_free_bytes(const struct tw_store *s)
{
    if (s->capacity == 0)
        return UINT64_MAX;
    return s->capacity > s->reserved ? s->capacity - s->reserved : 0;
}

/* The pinned slab's registrar: page-locks through the devmem ops in the
 * first GPU's context (pins are portable: every GPU copies at the pinned
 * rate). */
static int pinned_slab_pin(void *ctx, void *p, size_t len)
{
    struct tw_store *s = ctx;
    return tw__store_devmem(s)->pin(s->gpu[0].ordinal, p, len, NULL, 0);
}

static void pinned_slab_unpin(void *ctx, void *p)
{
    struct tw_store *s = ctx;
    tw__store_devmem(s)->unpin(s->gpu[0].ordinal, p);
}

static int store_alloc(struct tw_store *s, const struct tw_descriptor *d, struct tw_tensor **out,
                       int want_pinned);

int tw__store_alloc(struct tw_store *s, const struct tw_descriptor *d, struct tw_tensor **out)
{
    return store_alloc(s, d, out, 0);
}

int tw__store_alloc_pinned(struct tw_store *s, const struct tw_descriptor *d,
                           struct tw_tensor **out)
{
    if (s->pinned_state == 0) {
        const struct tw_store_devmem_ops *m = tw__store_devmem(s);
        s->pinned_state = -1;
        if (m->pin && m->unpin && s->ngpus > 0) {
            tw__slab_set_pinned(&s->pinned_slab, pinned_slab_pin, pinned_slab_unpin, s,
                                TW_STORE_PINNED_MAX);
            s->pinned_state = 1;
        }
    }
    return store_alloc(s, d, out, s->pinned_state == 1);
}

static int store_alloc(struct tw_store *s, const struct tw_descriptor *d, struct tw_tensor **out,
                       int want_pinned)
{
    struct tw_device dev = {.type = TW_DEVICE_CPU, .ordinal = -1};
    int rc = tw__device_parse((const char *)d->device_tag.ptr, d->device_tag.len, &dev);
    if (rc < 0)
        return TW_EDEVICE;
    if (dev.type == TW_DEVICE_CPU && d->byte_length > tw__store_free_bytes(s))
        return TW_ECAPACITY;
    if (d->byte_length > SIZE_MAX / 2)
        return -ENOMEM;
    struct tw_tensor *t = calloc(1, sizeof(*t) + d->name.len + 1);
    if (!t)
        return -ENOMEM;
    t->gpu = -1;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t len = (size_t)d->byte_length;
    if (dev.type == TW_DEVICE_CUDA) {
        rc = alloc_on_gpu(s, d, dev.ordinal, t);
        if (rc < 0) {
            free(t);
            return rc;
        }
    } else if (len > 0) {
        size_t alloc = (len + page - 1) & ~(page - 1);
        uint8_t *pinned = want_pinned && alloc < TW_STORE_PINNED_BLOCK_MAX
                              ? tw__slab_alloc(&s->pinned_slab, alloc)
                              : NULL;
        if (pinned) {
            /* A reused block holds an older version's bytes: the put
             * overwrites [0, len), clear the rest of the last page. */
            if (alloc > len)
                memset(pinned + len, 0, alloc - len);
            t->data = pinned;
            t->pinned = 1;
            t->in_slab = 1;
        } else if (alloc >= MMAP_THRESHOLD) {
            void *p = take_spare(s, alloc);
            /* The put writes [0, len); the tail of the last page still holds
             * an older version's bytes, and a cached registration's key
             * covers whole pages: clear it. */
            if (p && alloc > len)
                memset((uint8_t *)p + len, 0, alloc - len);
            if (!p) {
                if (tw__hostmem_alloc(alloc, &p) < 0)
                    goto out_free_tensor;
                /* Huge pages cut the page faults of a 1 GiB receive by
                 * 512x; advisory, so a kernel without THP ignores it. */
                (void)madvise(p, alloc, MADV_HUGEPAGE);
                /* The slab's faulter clears the pages ahead of the receive
                 * (the mover's or the loop's); a staged GPU tensor's host
                 * copy is pinned, which faults it anyway. give_spare takes
                 * it off the faulter's queue before the mapping moves on. */
                if (!want_pinned)
                    tw__slab_fault_range(&s->slab, p, alloc);
            }
            t->data = p;
            t->mmapped = 1;
        } else {
            uint8_t *p = tw__slab_alloc(&s->slab, alloc);
            if (!p)
                goto out_free_tensor;
            /* A reused block holds an older version's bytes: the put
             * overwrites [0, len), clear the rest of the last page. */
            if (alloc > len)
                memset(p + len, 0, alloc - len);
            t->data = p;
            t->in_slab = 1;
        }
        t->alloc_len = alloc;
    }
    t->refs = 1;
    t->store = s;
    t->dtype = d->dtype;
    t->ndim = d->ndim;
    t->byte_length = d->byte_length;
    memcpy(t->shape, d->shape, sizeof(t->shape[0]) * d->ndim);
    t->has_crc = (d->flags & TW_DESC_HAS_CRC32C) != 0;
    t->crc32c = t->has_crc ? d->crc32c : 0;
    memcpy(t->device_tag, d->device_tag.ptr, d->device_tag.len);
    t->device_tag[d->device_tag.len] = '\0';
    t->name_len = (uint16_t)d->name.len;
    memcpy(t->name, d->name.ptr, d->name.len);
    t->name[d->name.len] = '\0';
    if (t->gpu < 0)
        s->reserved += t->byte_length;
    *out = t;
    return 0;

out_free_tensor:
    free(t);
    return -ENOMEM;
}

void tw__tensor_ref(struct tw_tensor *t)
{
    t->refs++;
}

void tw__tensor_unref(struct tw_tensor *t)
{
    if (!t || --t->refs > 0)
        return;
    struct tw_store *s = t->store;
    if (t->gpu >= 0) {
        const struct tw_store_devmem_ops *m = tw__store_devmem(s);
        s->gpu[t->gpu].reserved -= t->byte_length;
        if (t->data)
            m->free(s->gpu[t->gpu].ordinal, t->data, t->alloc_len);
    } else {
        s->reserved -= t->byte_length;
        if (t->mmapped)
            give_spare(s, t->data, t->alloc_len);
        else if (t->in_slab)
            tw__slab_free(t->pinned ? &s->pinned_slab : &s->slab, t->data, t->alloc_len);
    }
    free(t);
}

static struct tw_tensor **find_slot(struct tw_store *s, const uint8_t *name, size_t len)
{
    struct tw_tensor **pp = &s->buckets[hash_name(name, len) & (s->nbuckets - 1)];
    for (; *pp; pp = &(*pp)->hnext)
        if ((*pp)->name_len == len && memcmp((*pp)->name, name, len) == 0)
            return pp;
    return pp;
}

static void maybe_grow(struct tw_store *s)
{
    if (s->count < s->nbuckets)
        return;
    size_t nb = s->nbuckets * 2;
    struct tw_tensor **b = calloc(nb, sizeof(*b));
    if (!b)
        return; /* longer chains, still correct */
    for (size_t i = 0; i < s->nbuckets; i++) {
        struct tw_tensor *t = s->buckets[i];
        while (t) {
            struct tw_tensor *next = t->hnext;
            size_t j = hash_name((const uint8_t *)t->name, t->name_len) & (nb - 1);
            t->hnext = b[j];
            b[j] = t;
            t = next;
        }
    }
    free(s->buckets);
    s->buckets = b;
    s->nbuckets = nb;
}

void tw__store_commit(struct tw_store *s, struct tw_tensor *t)
{
    struct tw_tensor **pp = find_slot(s, (const uint8_t *)t->name, t->name_len);
    tw__tensor_ref(t);
    if (*pp) {
        struct tw_tensor *old = *pp;
        t->hnext = old->hnext;
        *pp = t;
        old->hnext = NULL;
        *stored_of(s, old) -= old->byte_length;
        *stored_of(s, t) += t->byte_length;
        tw__tensor_unref(old);
        return;
    }
    t->hnext = NULL;
    *pp = t;
    s->count++;
    *stored_of(s, t) += t->byte_length;
    maybe_grow(s);
}

struct tw_tensor *tw__store_get(struct tw_store *s, const uint8_t *name, size_t len)
{
    struct tw_tensor *t = *find_slot(s, name, len);
    if (t)
        tw__tensor_ref(t);
    return t;
}

int tw__store_delete(struct tw_store *s, const uint8_t *name, size_t len)
{
    struct tw_tensor **pp = find_slot(s, name, len);
    struct tw_tensor *t = *pp;
    if (!t)
        return TW_ENOTFOUND;
    *pp = t->hnext;
    t->hnext = NULL;
    s->count--;
    *stored_of(s, t) -= t->byte_length;
    tw__tensor_unref(t);
    return 0;
}

static int cmp_name(const void *a, const void *b)
{
    const struct tw_tensor *x = *(const struct tw_tensor *const *)a;
    const struct tw_tensor *y = *(const struct tw_tensor *const *)b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, n);
    if (c)
        return c;
    return (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

int tw__store_list(struct tw_store *s, const uint8_t *prefix, size_t plen, struct tw_tensor ***out,
                   size_t *n)
{
    struct tw_tensor **list = malloc((s->count ? s->count : 1) * sizeof(*list));
    size_t k = 0;
    if (!list)
        return -ENOMEM;
    for (size_t i = 0; i < s->nbuckets; i++)
        for (struct tw_tensor *t = s->buckets[i]; t; t = t->hnext)
            if (t->name_len >= plen && (plen == 0 || memcmp(t->name, prefix, plen) == 0)) {
                tw__tensor_ref(t);
                list[k++] = t;
            }
    qsort(list, k, sizeof(*list), cmp_name);
    *out = list;
    *n = k;
    return 0;
}

void tw__store_list_free(struct tw_tensor **list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        tw__tensor_unref(list[i]);
    free(list);
}

void tw__tensor_describe(const struct tw_tensor *t, int with_crc, struct tw_descriptor *d)
{
    memset(d, 0, sizeof(*d));
    d->dtype = t->dtype;
    d->ndim = t->ndim;
    d->byte_length = t->byte_length;
    memcpy(d->shape, t->shape, sizeof(t->shape[0]) * t->ndim);
    if (with_crc && t->has_crc) {
        d->flags = TW_DESC_HAS_CRC32C;
        d->crc32c = t->crc32c;
    }
    d->name.ptr = (const uint8_t *)t->name;
    d->name.len = t->name_len;
    d->device_tag.ptr = (const uint8_t *)t->device_tag;
    d->device_tag.len = (uint32_t)strlen(t->device_tag);
}
