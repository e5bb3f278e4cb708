/*
 * The per-transfer RDMA data plane of the server (docs/protocol.md §9.3-9.7,
 * §10): the RDMA_REGISTER / RDMA_READY / RDMA_DONE sequence of one get or
 * put, with the bytes moved by src/fabric. The plane itself (one threaded
 * plane per server), the endpoint exchange and the completion eventfd are
 * the server-wide lifecycle in fabric_srv.c, which hands each completion to
 * tw__srv_rdma_on_completion.
 *
 * Roles. GET: the server is the source. It registers the tensor version
 * (REMOTE_READ, plus LOCAL_WRITE when push was negotiated) and sends
 * RDMA_REGISTER; the client either reads and sends RDMA_DONE (pull) or sends
 * its own RDMA_REGISTER + RDMA_READY and the server writes (push) and sends
 * RDMA_DONE. PUT: the server is the destination. After the client's
 * RDMA_REGISTER it either sends RDMA_READY and reads (pull, the default) or
 * registers the new storage REMOTE_WRITE, sends RDMA_REGISTER + RDMA_READY
 * and waits for the client's RDMA_DONE (push: x->path.mode, decided with the
 * plane by tw__path_decide); it revokes that key before checking the CRC and
 * committing.
 *
 * Memory lifetime. A transfer's state (struct tw_rdma_st) outlives the
 * transfer when the plane may still touch the memory: when the request ends
 * while a fabric transfer is in flight, the state keeps its own reference to
 * the tensor version, cancels the fabric transfer and finishes when its
 * completion is popped; a registration whose completion said buffer_busy is
 * released with tw__fabric_mrcache_release_busy() and the reference is
 * dropped only in the loop after on_idle. So neither DELETE, an overwrite nor
 * a dead client frees memory under a live key or a late operation.
 *
 * Registrations go through the plane's cache (srv->mrc, fabric/mrcache.h).
 * A get's REMOTE_READ registration and a pull put's local one stay cached
 * after the request when the version lives in tw__hostmem memory (large
 * tensors): repeated gets of one tensor register once. The cached key is
 * revoked when the version's memory goes back to the store's spare pool
 * (store.on_recycle -> tw__fabric_mrcache_invalidate) or is freed
 * (tw__hostmem_free), i.e. after the last reader (§10). Push destinations
 * (REMOTE_WRITE) are never cached: their key is revoked by the release.
 *
 * Shared source keys (docs/protocol.md §10, "Shared keys"). A get of a
 * small host tensor (one of the store's slab) that arrives while its
 * connection reads waits for the end of that read for its key
 * (c->keys_head): tw__srv_rdma_key_pending() then registers each run of
 * such gets whose tensors continue each other in the slab (a batch of a
 * KV cache's blocks, put in order) once, over exactly their bytes, and
 * sends each get that key with its own remote_addr, so that the client
 * can read neighbours with one RMA operation (fabric/xfer.c, joined
 * operations; over tcp a 32 KiB read costs what a 1 MiB one does). The
 * span holds a reference to each version it covers and is revoked when
 * the last get that was sent its key ended: no version under the key is
 * freed or recycled while the key lives. A staged get of a small GPU
 * tensor joins such a run by its host copy in the pinned slab; its
 * RDMA_REGISTER still leaves only once its own queued copy from the GPU
 * is done (send_register_copied).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/log.h"
#include "server/server.h"

struct tw_rdma_st {
    struct tw_srv *srv;
    struct tw_xfer *x;         /* NULL once the request ended (orphan) */
    struct tw_tensor *hold;    /* own reference while orphaned or deferred */
    struct tw_fabric_mrc *mr;  /* cache handle, NULL when none held */
    struct tw_fabric_xfer *fx; /* fabric transfer in flight, else NULL */
    struct tw_fabric_rkey remote;
    int got_dst; /* GET: the client registered its destination */
    /* TW_TEST_PROGRESSIVE_CHUNKS: parts announced so far, of test_parts,
     * one per tick of test_timer (armed while x lives). */
    unsigned test_parts, test_next;
    struct tw_timer test_timer;
    int busy; /* the last completion had buffer_busy */
    /* A get keyed by a span shared with others (span, span_off: where its
     * bytes start in it), st->mr NULL; a get waiting for its key on
     * conn->keys_head (pending, knext/kprev); span_dead: the span this
     * state revoked last, freed with the state (after on_idle). */
    struct tw_get_span *span;
    uint64_t span_off;
    int pending;
    struct tw_rdma_st *knext, *kprev;
    struct tw_get_span *span_dead;
    struct tw_rdma_st *idle_next;
    struct tw_rdma_st *lnext, *lprev; /* srv->rdma_live (loop thread only) */
};

/* One source registration over the bytes of several adjacent slab
 * tensors, shared by the gets that were sent its key. */
struct tw_get_span {
    struct tw_fabric_mrc *mr; /* NULL once the plane dropped it */
    unsigned refs;            /* states using it */
    int busy;                 /* a user's last completion had buffer_busy */
    unsigned nheld;
    struct tw_tensor *held[]; /* a reference to each version it covers */
};

/* A run keyed together: at most this many bytes and gets (the client's
 * put spans' bounds, dp_rdma.c). */
#define TW_GET_SPAN_MAX (8u << 20)
#define TW_GET_SPAN_ITEMS 256u

static void span_free(struct tw_get_span *sp)
{
    for (unsigned i = 0; i < sp->nheld; i++)
        tw__tensor_unref(sp->held[i]);
    free(sp);
}

/* ---- deferred release ---- */

static void st_on_idle(void *arg)
{
    /* Plane lock held, any thread: only queue it. */
    struct tw_rdma_st *st = arg;
    struct tw_srv *srv = st->srv;
    uint64_t one = 1;
    pthread_mutex_lock(&srv->idle_lock);
    st->idle_next = srv->idle_list;
    srv->idle_list = st;
    pthread_mutex_unlock(&srv->idle_lock);
    if (write(srv->idle_efd, &one, sizeof(one)) < 0) {
        /* eventfd counter saturated: it is readable anyway */
    }
}

static void st_free(struct tw_rdma_st *st)
{
    struct tw_srv *srv = st->srv;
    if (st->lprev)
        st->lprev->lnext = st->lnext;
    else
        srv->rdma_live = st->lnext;
    if (st->lnext)
        st->lnext->lprev = st->lprev;
    if (st->span_dead)
        span_free(st->span_dead);
    if (st->span && --st->span->refs == 0) {
        /* The plane is gone (tw__srv_rdma_free_all): its handles were
         * dropped, so only the references are left. */
        tw__fabric_mrcache_release(srv->mrc, st->span->mr);
        span_free(st->span);
    }
    if (st->hold)
        tw__tensor_unref(st->hold);
    free(st);
}

void tw__srv_rdma_drain_idle(struct tw_srv *srv)
{
    pthread_mutex_lock(&srv->idle_lock);
    struct tw_rdma_st *l = srv->idle_list;
    srv->idle_list = NULL;
    pthread_mutex_unlock(&srv->idle_lock);
    while (l) {
        struct tw_rdma_st *n = l->idle_next;
        st_free(l);
        l = n;
    }
}

/* Releases the registration of a state with no transfer in flight, then the
 * state itself (now, or after on_idle when operations may still touch the
 * memory). The caller has made st->hold the reference to keep, if any. */
static void st_finish(struct tw_rdma_st *st)
{
    struct tw_get_span *sp = st->span;
    if (sp) {
        /* The span's key goes with its last user (then it is revoked, and
         * after an abandoned operation drained, the versions go). */
        st->span = NULL;
        sp->busy |= st->busy;
        if (--sp->refs > 0) {
            st_free(st);
            return;
        }
        if (sp->mr && sp->busy) {
            struct tw_fabric_mrc *mr = sp->mr;
            sp->mr = NULL;
            st->span_dead = sp;
            tw__fabric_mrcache_release_busy(st->srv->mrc, mr, st_on_idle, st);
            return;
        }
        tw__fabric_mrcache_release(st->srv->mrc, sp->mr);
        span_free(sp);
        st_free(st);
        return;
    }
    if (st->mr && st->busy) {
        struct tw_fabric_mrc *mr = st->mr;
        st->mr = NULL;
        tw__fabric_mrcache_release_busy(st->srv->mrc, mr, st_on_idle, st);
        return;
    }
    tw__fabric_mrcache_release(st->srv->mrc, st->mr);
    st->mr = NULL;
    st_free(st);
}

/* ---- helpers ---- */

static void fail_xfer(struct tw_xfer *x, uint32_t code, const char *what, const char *detail);

/* A GPU tensor reaches this plane only when admitted for GPUDirect
 * (tw__path_decide: otherwise it stages): its registration is CUDA memory
 * (FI_HMEM_CUDA, 64 KiB-rounded by the cache). */
static enum tw_memkind mem_kind(const struct tw_xfer *x)
{
    return x->t->gpu >= 0 ? TW_MEMKIND_CUDA : TW_MEMKIND_HOST;
}

/* The bytes of a completed put are in place: make NIC writes into GPU
 * memory visible to later GPU work (docs/protocol.md §10), then compute the
 * CRC the descriptor asked for. Returns 0, or fails the request. */
static int put_bytes_settled(struct tw_xfer *x)
{
    struct tw_srv *srv = x->conn->srv;
    char err[160];
    int rc = tw__srv_gdr_flush(x->conn, x->t, err, sizeof(err));
    if (rc == 0 && x->t->has_crc) {
        if (x->t->gpu >= 0)
            rc = tw__srv_gdr_crc(srv, x->t, &x->crc, err, sizeof(err));
        else
            x->crc = tw__crc32c(0, x->t->data, (size_t)x->t->byte_length);
    }
    if (rc < 0)
        fail_xfer(x, TW_WIRE_INTERNAL, "GPU memory after the transfer", err);
    return rc;
}

/* Sends the source's RDMA_REGISTER: mr's key (or the key of x's span, at
 * x's bytes), or with mr NULL (a get asked with ATTACH_READ, nothing
 * registered) rkey 0 and the bytes' virtual address in this process
 * (§4.5). */
static int send_register(struct tw_xfer *x, const struct tw_fabric_mrc *mr)
{
    struct tw_rdma_st *st = x->dp;
    struct tw_fabric_rkey k = {.key = 0, .remote_addr = (uint64_t)(uintptr_t)x->t->data};
    if (st && st->span) {
        k = tw__fabric_mrc_rkey(st->span->mr);
        k.remote_addr += st->span_off; /* this get's bytes inside the span */
    } else if (mr) {
        k = tw__fabric_mrc_rkey(mr);
    }
    struct tw_msg m;
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_RDMA_REGISTER;
    m.hdr.request_id = x->id;
    /* Only the source's registration: a push put's destination never. */
    if (x->progressive && x->dir == TW_XFER_GET)
        m.hdr.flags = TW_FRAME_MORE;
    m.u.rdma_register.rkey = k.key;
    m.u.rdma_register.remote_addr = k.remote_addr;
    m.u.rdma_register.length = x->t->byte_length;
    return tw__conn_send(x->conn, &m);
}

int tw__srv_rdma_announce(struct tw_xfer *x, uint64_t ready, int gpu, uint64_t ticket)
{
    struct tw_srv_conn *c = x->conn;
    struct tw_msg m;
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_RDMA_AVAILABLE;
    m.hdr.request_id = x->id;
    m.u.rdma_available.ready = ready;
    int rc = tw__conn_send(c, &m);
    if (rc < 0)
        return rc;
    /* conn_flush sends it once that copy is done (the frames before it
     * meanwhile), as it does for a DATA frame whose bytes a copy fills. */
    if (gpu >= 0 && c->out_tail) {
        c->out_tail->dev_gpu = gpu;
        c->out_tail->dev_ticket = ticket;
    }
    return 0;
}

/* TW_TEST_PROGRESSIVE_CHUNKS=N (tests only): a get of a host version is
 * announced progressively too, in N parts 2 ms apart, so the destination's
 * handling of bit 5 runs without a GPU (CI): a client that read past an
 * announcement would send RDMA_DONE before the last one, which the state
 * machine refuses (the connection fails, and so does the test). */
static unsigned test_progressive_chunks(void)
{
    static int read_env = 0;
    static unsigned chunks;
    if (!read_env) {
        const char *v = getenv("TW_TEST_PROGRESSIVE_CHUNKS");
        long n = v && *v ? strtol(v, NULL, 10) : 0;
        chunks = n > 0 && n <= 64 ? (unsigned)n : 0;
        read_env = 1;
    }
    return chunks;
}

static void test_announce_next(struct tw_loop *loop, struct tw_timer *t)
{
    struct tw_rdma_st *st = t->data;
    struct tw_xfer *x = st->x;
    if (!x)
        return;
    uint64_t len = x->t->byte_length;
    while (st->test_next < st->test_parts) {
        st->test_next++;
        uint64_t ready = len * st->test_next / st->test_parts;
        if (ready > len * (st->test_next - 1) / st->test_parts) {
            if (tw__srv_rdma_announce(x, ready, -1, 0) < 0)
                return;
            break;
        }
    }
    if (st->test_next < st->test_parts)
        tw__loop_timer_start(loop, t, 2);
}

static int send_simple(struct tw_xfer *x, uint32_t tag)
{
    struct tw_msg m;
    memset(&m, 0, sizeof(m));
    m.hdr.tag = tag;
    m.hdr.request_id = x->id;
    return tw__conn_send(x->conn, &m);
}

static int send_done(struct tw_xfer *x, uint32_t status, uint64_t bytes)
{
    struct tw_msg m;
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_RDMA_DONE;
    m.hdr.request_id = x->id;
    m.u.rdma_done.status = status;
    m.u.rdma_done.bytes = bytes;
    return tw__conn_send(x->conn, &m);
}

static void log_xfer(struct tw_xfer *x)
{
    struct tw_srv_conn *c = x->conn;
    char how[160];
    TW_LOGD("conn %llu %s: %s %s %llu B: %s, %llu ms", (unsigned long long)c->id, c->peer,
            x->dir == TW_XFER_GET ? "get" : "put", x->t->name,
            (unsigned long long)x->t->byte_length,
            tw__path_format(&x->path, c->fpeer ? tw__fabric_peer_provider(c->fpeer) : NULL, how,
                            sizeof(how)),
            (unsigned long long)(tw__loop_now(&c->srv->loop) - x->started_ms));
}

/* Ends request x with ERROR(code) (the transfer is destroyed first, which
 * releases or defers its registration). */
static void fail_xfer(struct tw_xfer *x, uint32_t code, const char *what, const char *detail)
{
    struct tw_srv_conn *c = x->conn;
    uint64_t id = x->id;
    char name[80];
    snprintf(name, sizeof(name), "%.64s", x->t->name);
    int put = x->dir == TW_XFER_PUT;
    x->failed = 1;
    tw__xfer_destroy(x);
    tw__conn_send_error(c, id, code, "rdma %s of '%s': %s%s%s", put ? "put" : "get", name, what,
                        detail && *detail ? ": " : "", detail ? detail : "");
    tw__conn_maybe_finish(c);
}

static int submit(struct tw_xfer *x, enum tw_fabric_op op)
{
    struct tw_rdma_st *st = x->dp;
    struct tw_srv_conn *c = x->conn;
    struct tw_fabric_xfer_desc d;
    memset(&d, 0, sizeof(d));
    d.op = op;
    d.peer = c->fpeer;
    if (st->span) {
        d.local = tw__fabric_mrc_mr(st->span->mr);
        d.local_offset = tw__fabric_mrc_offset(st->span->mr) + st->span_off;
    } else {
        d.local = tw__fabric_mrc_mr(st->mr);
        d.local_offset = tw__fabric_mrc_offset(st->mr);
    }
    d.remote = st->remote;
    d.length = x->t->byte_length;
    if (c->srv->cfg.transfer_timeout_ms) {
        uint64_t left_ms = c->srv->cfg.transfer_timeout_ms;
        uint64_t used = tw__loop_now(&c->srv->loop) - x->started_ms;
        left_ms = used < left_ms ? left_ms - used : 1;
        d.deadline_ns = tw__now_ns() + left_ms * 1000000ull;
    }
    d.cookie = (uint64_t)(uintptr_t)st;
    int rc = tw__fabric_xfer_submit(c->srv->fab, &d, &st->fx);
    if (rc < 0) {
        st->fx = NULL;
        return rc;
    }
    return 0;
}

/* ---- completions ---- */

void tw__srv_rdma_on_completion(struct tw_srv *srv, const struct tw_fabric_completion *fc)
{
    if (fc->cookie & 1) { /* a pipelined staged put's read (xfer_staged.c) */
        tw__srv_staged_on_completion(srv, fc);
        return;
    }
    struct tw_rdma_st *st = (struct tw_rdma_st *)(uintptr_t)fc->cookie;
    st->fx = NULL;
    st->busy = fc->buffer_busy;
    struct tw_xfer *x = st->x;
    if (!x) { /* the request ended meanwhile: finish the cleanup it left */
        st_finish(st);
        return;
    }
    struct tw_srv_conn *c = x->conn;
    if (x->dir == TW_XFER_GET) {
        /* Push get: our writes are done (delivery complete). */
        x->done = fc->bytes;
        x->failed = fc->status != 0;
        uint32_t ws = tw__fabric_status_to_wire(fc->status);
        if (fc->status == 0)
            log_xfer(x);
        else
            TW_LOGW("conn %llu %s: rdma push get of '%s' failed: %s (%s)",
                    (unsigned long long)c->id, c->peer, x->t->name, tw_strerror(fc->status),
                    fc->msg);
        (void)send_done(x, ws, fc->bytes); /* x stays valid: teardown is deferred */
        tw__xfer_destroy(x);
        tw__conn_maybe_finish(c);
        return;
    }
    /* Pull put: our reads are done. */
    if (fc->status != 0 || fc->bytes != x->t->byte_length) {
        char why[TW_FABRIC_ERRMSG_LEN + 64];
        snprintf(why, sizeof(why), "%s (%llu of %llu bytes read)",
                 fc->msg[0] ? fc->msg : tw_strerror(fc->status), (unsigned long long)fc->bytes,
                 (unsigned long long)x->t->byte_length);
        TW_LOGW("conn %llu %s: rdma pull put of '%s' failed: %s", (unsigned long long)c->id,
                c->peer, x->t->name, why);
        /* That range is looked at again before the next read of it. */
        if (c->fpeer)
            tw__fabric_peer_cma_forget(c->fpeer, st->remote.remote_addr);
        fail_xfer(x, fc->status ? tw__fabric_status_to_wire(fc->status) : TW_WIRE_INTERNAL,
                  "reading the client's memory failed", why);
        return;
    }
    x->done = fc->bytes;
    if (send_done(x, 0, fc->bytes) < 0)
        return;
    if (put_bytes_settled(x) < 0)
        return;
    log_xfer(x);
    tw__xfer_put_complete(x);
}

/* ---- the ops table ---- */

/* TW_GET_SPANS=0 (for measuring): every get keyed alone, as before. */
static int get_spans_enabled(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("TW_GET_SPANS");
        v = !(e && strcmp(e, "0") == 0);
    }
    return v;
}

/* Whether get x may wait for the end of its connection's read to share a
 * key: a host version of the slab (memory of the store's own, exactly its
 * bytes adjacent to the next block's) with a key to send, and no parts to
 * announce. A staged get's host copy in the pinned slab qualifies too (its
 * copy from the GPU may still run: send_register_copied). */
static int span_candidate(const struct tw_xfer *x)
{
    return x->conn->keys_defer && x->dir == TW_XFER_GET && (!x->dev_t || x->t->pinned) &&
           !x->attach && !x->progressive && x->t->in_slab && x->t->gpu < 0 &&
           x->t->byte_length > 0 && !test_progressive_chunks() && get_spans_enabled();
}

int tw__srv_rdma_key_waits(const struct tw_xfer *x)
{
    const struct tw_rdma_st *st = x->dp;
    return st && st->pending;
}

static void keys_unlink(struct tw_srv_conn *c, struct tw_rdma_st *st)
{
    if (st->kprev)
        st->kprev->knext = st->knext;
    else
        c->keys_head = st->knext;
    if (st->knext)
        st->knext->kprev = st->kprev;
    else
        c->keys_tail = st->kprev;
    st->knext = st->kprev = NULL;
    st->pending = 0;
}

static unsigned source_access(const struct tw_srv_conn *c)
{
    unsigned access = TW_FABRIC_REMOTE_READ | TW_FABRIC_ONCE;
    if (c->caps & TW_CAP_RDMA_GPUDIRECT)
        access |= TW_FABRIC_LOCAL_WRITE; /* the client may ask us to push */
    return access;
}

/* send_register for a get that waited for its key. A staged get's host
 * copy may still be filling (its copy queued in xfer_staged.c's
 * staged_start, x->prog_gpu / prog_ticket): conn_flush sends the frame once
 * that copy is done, as staged_start arranges for a get keyed at once. */
static int send_register_copied(struct tw_xfer *x, const struct tw_fabric_mrc *mr)
{
    struct tw_srv_conn *c = x->conn;
    struct tw_out_chunk *tail = c->out_tail;
    int rc = send_register(x, mr);
    if (rc == 0 && x->dev_t && x->prog_gpu >= 0 && c->out_tail && c->out_tail != tail) {
        c->out_tail->dev_gpu = x->prog_gpu;
        c->out_tail->dev_ticket = x->prog_ticket;
    }
    return rc;
}

/* Keys one waiting get alone (what rdma_start does for any other). */
static void key_alone(struct tw_xfer *x)
{
    struct tw_rdma_st *st = x->dp;
    struct tw_srv_conn *c = x->conn;
    char err[TW_FABRIC_ERRMSG_LEN];
    int rc = tw__fabric_mrcache_acquire_peer(c->srv->mrc, c->fpeer, x->t->data,
                                             (size_t)x->t->byte_length, source_access(c),
                                             TW_MEMKIND_HOST, &st->mr, err, sizeof(err));
    if (rc < 0) {
        st->mr = NULL;
        fail_xfer(x, TW_WIRE_INTERNAL, "cannot register it", err);
        return;
    }
    (void)send_register_copied(x, st->mr);
}

/* Keys the first n waiting gets of c (each tensor continuing the previous
 * one's bytes, len bytes in all) with one registration, which holds a
 * reference to each of their versions; alone where that fails. */
static void key_run(struct tw_srv_conn *c, unsigned n, uint64_t len)
{
    struct tw_srv *srv = c->srv;
    struct tw_get_span *sp = NULL;
    uint8_t *base = c->keys_head->x->t->data;
    if (n > 1)
        sp = calloc(1, sizeof(*sp) + n * sizeof(sp->held[0]));
    if (sp) {
        struct tw_rdma_st *st = c->keys_head;
        for (unsigned i = 0; i < n; i++, st = st->knext) {
            tw__tensor_ref(st->x->t);
            sp->held[sp->nheld++] = st->x->t;
        }
        char err[TW_FABRIC_ERRMSG_LEN];
        if (tw__fabric_mrcache_acquire_peer(srv->mrc, c->fpeer, base, (size_t)len, source_access(c),
                                            TW_MEMKIND_HOST, &sp->mr, err, sizeof(err)) < 0) {
            TW_LOGD("conn %llu %s: cannot register %u adjacent gets (%llu B) together: %s",
                    (unsigned long long)c->id, c->peer, n, (unsigned long long)len, err);
            span_free(sp);
            sp = NULL;
        } else {
            srv->stats.rdma_get_spans++;
        }
    }
    for (unsigned i = 0; i < n && c->keys_head; i++) {
        struct tw_rdma_st *st = c->keys_head;
        struct tw_xfer *x = st->x;
        keys_unlink(c, st);
        if (!sp || x->t != sp->held[i]) {
            key_alone(x);
            continue;
        }
        sp->refs++;
        st->span = sp;
        st->span_off = (uint64_t)((uintptr_t)x->t->data - (uintptr_t)base);
        srv->stats.rdma_get_span_gets++;
        (void)send_register_copied(x, NULL);
    }
    if (sp && sp->refs == 0) { /* none of its gets was left to take it */
        tw__fabric_mrcache_release(srv->mrc, sp->mr);
        span_free(sp);
    }
}

void tw__srv_rdma_key_pending(struct tw_srv_conn *c)
{
    /* A connection on its way out: its transfers go with the teardown,
     * which takes them off the list (rdma_release). */
    while (c->keys_head && c->state == TW_CONN_OPEN) {
        struct tw_rdma_st *last = c->keys_head;
        uint64_t len = last->x->t->byte_length;
        unsigned n = 1;
        while (last->knext && n < TW_GET_SPAN_ITEMS) {
            const struct tw_tensor *a = last->x->t, *b = last->knext->x->t;
            if ((uintptr_t)b->data != (uintptr_t)a->data + a->byte_length ||
                len + b->byte_length > TW_GET_SPAN_MAX)
                break;
            len += b->byte_length;
            last = last->knext;
            n++;
        }
        key_run(c, n, len);
    }
}

static int rdma_start(struct tw_xfer *x)
{
    struct tw_srv_conn *c = x->conn;
    struct tw_rdma_st *st = calloc(1, sizeof(*st));
    if (!st)
        return -ENOMEM;
    st->srv = c->srv;
    st->x = x;
    x->dp = st;
    st->lnext = c->srv->rdma_live;
    if (st->lnext)
        st->lnext->lprev = st;
    c->srv->rdma_live = st;
    if (x->dir == TW_XFER_PUT)
        return 0; /* wait for the client's RDMA_REGISTER */
    unsigned access = TW_FABRIC_REMOTE_READ;
    if (c->caps & TW_CAP_RDMA_GPUDIRECT)
        access |= TW_FABRIC_LOCAL_WRITE; /* the client may ask us to push */
    /* A staged get's host copy is this request's own and is freed (its
     * key revoked) at its end: registered directly, not through the
     * cache (a batch of small device blocks registers one per block). So
     * is a small tensor of the store's slab: memory the cache cannot
     * track, which it would register for this use only anyway, after a
     * lookup that misses and a query of the memory (four of its lock
     * round trips per get, ~25% of the loop's work for a 32 KiB get). */
    if (x->dev_t || x->t->in_slab)
        access |= TW_FABRIC_ONCE;
    if (span_candidate(x)) {
        /* Keyed at the end of this read, with its neighbours. */
        st->pending = 1;
        st->kprev = c->keys_tail;
        if (c->keys_tail)
            c->keys_tail->knext = st;
        else
            c->keys_head = st;
        c->keys_tail = st;
        return 0;
    }
    char err[TW_FABRIC_ERRMSG_LEN];
    int rc = 0;
    /* Bit 7: the client reads host memory of ours by cross-memory attach
     * and never pushes (the state machine refuses its RDMA_REGISTER), so
     * nothing is registered: no key for the mover to serve, no
     * registration and revocation per request. GPU memory (admitted for
     * GPUDirect) the CPU cannot copy from: registered as usual. */
    if (x->attach && x->t->gpu < 0)
        c->srv->stats.rdma_attach_gets++;
    else
        rc = tw__fabric_mrcache_acquire_peer(c->srv->mrc, c->fpeer, x->t->data,
                                             (size_t)x->t->byte_length, access, mem_kind(x),
                                             &st->mr, err, sizeof(err));
    if (rc < 0) {
        st->mr = NULL;
        TW_LOGW("conn %llu %s: cannot register '%s' (%llu B) for rdma: %s",
                (unsigned long long)c->id, c->peer, x->t->name,
                (unsigned long long)x->t->byte_length, err);
        return rc;
    }
    unsigned test_parts = x->progressive ? 0 : test_progressive_chunks();
    if (test_parts && (c->caps & TW_CAP_RDMA_PROGRESSIVE) && x->t->byte_length)
        x->progressive = 1;
    else
        test_parts = 0;
    if (send_register(x, st->mr) < 0)
        return TW_ESHUTDOWN;
    if (test_parts) {
        st->test_parts = test_parts;
        tw__timer_init(&st->test_timer, test_announce_next, st);
        tw__loop_timer_start(&c->srv->loop, &st->test_timer, 2);
    }
    return 0;
}

static int get_on_msg(struct tw_xfer *x, const struct tw_msg *m)
{
    struct tw_rdma_st *st = x->dp;
    struct tw_srv_conn *c = x->conn;
    switch (m->hdr.tag) {
    case TW_TAG_RDMA_REGISTER: /* push: the client's destination */
        st->remote.key = m->u.rdma_register.rkey;
        st->remote.remote_addr = m->u.rdma_register.remote_addr;
        st->remote.length = m->u.rdma_register.length;
        st->got_dst = 1;
        return 0;
    case TW_TAG_RDMA_READY:
        if (!st->got_dst)
            return 0; /* pull: the client reads, then sends RDMA_DONE */
        /* Push: the client, the destination, chose it. A progressive
         * source writes once all of its bytes are in place. */
        x->path.mode = TW_PATH_PUSH;
        {
            char err[256];
            if (tw__srv_stage_prog_wait(x, err, sizeof(err)) < 0) {
                fail_xfer(x, TW_WIRE_INTERNAL, "copying it from the GPU failed", err);
                return 0;
            }
            int rc = submit(x, TW_FABRIC_PUSH);
            if (rc < 0)
                fail_xfer(x, TW_WIRE_INTERNAL, "cannot start writing",
                          tw__fabric_errmsg(c->srv->fab));
        }
        return 0;
    case TW_TAG_RDMA_DONE: /* pull: the client's reads are over; request ends */
        x->done = m->u.rdma_done.bytes;
        x->failed = m->u.rdma_done.status != 0;
        if (m->u.rdma_done.status == 0)
            log_xfer(x);
        else
            TW_LOGI("conn %llu %s: rdma pull get of '%s' failed at the client: %s (%llu bytes)",
                    (unsigned long long)c->id, c->peer, x->t->name,
                    tw_strerror_name(tw__err_from_peer(m->u.rdma_done.status)),
                    (unsigned long long)m->u.rdma_done.bytes);
        tw__xfer_destroy(x);
        tw__conn_maybe_finish(c);
        return 0;
    default:
        return TW_EOUT_OF_ORDER;
    }
}

static int put_on_msg(struct tw_xfer *x, const struct tw_msg *m)
{
    struct tw_rdma_st *st = x->dp;
    struct tw_srv_conn *c = x->conn;
    struct tw_srv *srv = c->srv;
    /* Who moves the bytes was decided with the plane (tw__path_decide: the
     * server is the destination of a put). */
    int push = x->path.mode == TW_PATH_PUSH;
    int rc;
    switch (m->hdr.tag) {
    case TW_TAG_RDMA_REGISTER: /* the client's source */
        st->remote.key = m->u.rdma_register.rkey;
        st->remote.remote_addr = m->u.rdma_register.remote_addr;
        st->remote.length = m->u.rdma_register.length;
        /* A put over shm pushed under --push auto is decided again now that
         * the client's range is known (proto/path.c): a range this server
         * can read from the client's process by cross-memory attach is host
         * memory. Into host memory (or a staged GPU tensor's host copy)
         * the server then reads it itself instead of letting the client
         * write (PULL_SHM_CMA: libfabric's reads would lock the client's
         * region). Into admitted GPU memory, which shm would otherwise
         * write from that host memory through its bounce buffers (~2.4
         * GB/s on the H200, against CUDA IPC for a GPU source), it stages
         * (STAGED_SHM_HOST_SOURCE): the staged plane takes the transfer
         * over, this message included. A range found readable once is not
         * looked at again (a system call per put, ~6% of the loop's time on
         * the 2-core VM) until a read there fails. */
        if (push && x->path_in.provider == TW_PATH_PROV_SHM &&
            x->path_in.push == TW_PATH_PUSH_AUTO &&
            tw__fabric_peer_cma_readable(c->fpeer, st->remote.remote_addr, st->remote.length)) {
            struct tw_path_in in = x->path_in;
            in.mem_peer = TW_PATH_MEM_HOST;
            in.peer_cma = 1;
            struct tw_path p = tw__path_decide(&in);
            if (p.plane == x->path.plane && p.staging == x->path.staging && p.gdr == x->path.gdr) {
                x->path_in = in;
                x->path = p;
                push = p.mode == TW_PATH_PUSH;
            } else if (p.plane == x->path.plane && x->path.gdr &&
                       p.staging == TW_PATH_STAGING_HOST) {
                x->path_in = in;
                return tw__xfer_replan(x, &p, m);
            }
        }
        if (!push && x->t->gpu < 0 && srv->xfers_live <= TW_FABRIC_READ_NOW_MAX_INFLIGHT) {
            /* A small read of a process on this host while the loop has
             * little else to do: copied here and now (no registration, no
             * mover round trip); under load the mover copies in parallel. */
            struct tw_fabric_completion fc;
            if (tw__fabric_peer_read_now(c->fpeer, x->t->data, x->t->byte_length, &st->remote,
                                         (uint64_t)(uintptr_t)st, &fc)) {
                if (send_simple(x, TW_TAG_RDMA_READY) < 0)
                    return 0;
                tw__srv_rdma_on_completion(srv, &fc); /* RDMA_DONE, then OK or ERROR */
                return 0;
            }
        }
        {
            char err[TW_FABRIC_ERRMSG_LEN];
            /* A read by cross-memory attach needs no registration of ours
             * (the mover keeps one for a fallback to libfabric, xfer.c):
             * registered for this request alone, not cached (a put's
             * destination is new memory; caching it cost a miss, an
             * insertion and an invalidation at its recycling). Likewise
             * a destination in the store's slab, which the cache would
             * register for this use only (see rdma_start). */
            unsigned access = push ? TW_FABRIC_REMOTE_WRITE : TW_FABRIC_LOCAL_READ;
            if (!push && (x->path_in.peer_cma || x->t->in_slab))
                access |= TW_FABRIC_ONCE;
            rc = tw__fabric_mrcache_acquire_peer(srv->mrc, c->fpeer, x->t->data,
                                                 (size_t)x->t->byte_length, access, mem_kind(x),
                                                 &st->mr, err, sizeof(err));
            if (rc < 0) {
                st->mr = NULL;
                fail_xfer(x, TW_WIRE_INTERNAL, "cannot register the destination", err);
                return 0;
            }
        }
        if (push && send_register(x, st->mr) < 0)
            return 0;
        if (send_simple(x, TW_TAG_RDMA_READY) < 0)
            return 0;
        if (!push) {
            rc = submit(x, TW_FABRIC_PULL);
            if (rc < 0)
                fail_xfer(x, TW_WIRE_INTERNAL, "cannot start reading", tw__fabric_errmsg(srv->fab));
        }
        return 0;
    case TW_TAG_RDMA_DONE: { /* push: the client's writes are over */
        /* Revoke the write key before looking at the bytes (§10): a
         * REMOTE_WRITE handle is never cached, so the release closes it. */
        tw__fabric_mrcache_release(srv->mrc, st->mr);
        st->mr = NULL;
        if (m->u.rdma_done.status != 0) {
            char why[96];
            snprintf(why, sizeof(why), "%s after %llu bytes",
                     tw_strerror_name(tw__err_from_peer(m->u.rdma_done.status)),
                     (unsigned long long)m->u.rdma_done.bytes);
            fail_xfer(x, m->u.rdma_done.status < 100 ? m->u.rdma_done.status : TW_WIRE_INTERNAL,
                      "the client's writes failed", why);
            return 0;
        }
        if (m->u.rdma_done.bytes != x->t->byte_length) {
            char why[96];
            snprintf(why, sizeof(why), "RDMA_DONE says %llu of %llu bytes",
                     (unsigned long long)m->u.rdma_done.bytes,
                     (unsigned long long)x->t->byte_length);
            fail_xfer(x, TW_WIRE_INVALID_ARGUMENT, "incomplete push", why);
            return 0;
        }
        x->done = m->u.rdma_done.bytes;
        if (put_bytes_settled(x) < 0)
            return 0;
        log_xfer(x);
        tw__xfer_put_complete(x);
        return 0;
    }
    default:
        return TW_EOUT_OF_ORDER;
    }
}

static int rdma_on_msg(struct tw_xfer *x, const struct tw_msg *m)
{
    return x->dir == TW_XFER_GET ? get_on_msg(x, m) : put_on_msg(x, m);
}

static void rdma_release(struct tw_xfer *x)
{
    struct tw_rdma_st *st = x->dp;
    if (!st)
        return;
    x->dp = NULL;
    st->x = NULL;
    if (st->pending)
        keys_unlink(x->conn, st); /* ended before its key was sent */
    if (st->test_parts)
        tw__loop_timer_stop(&st->srv->loop, &st->test_timer);
    if (st->mr || st->fx) {
        st->hold = x->t; /* the memory stays until the plane lets go */
        tw__tensor_ref(x->t);
    }
    if (st->fx) {
        /* Finished when its completion is popped (on_completion). */
        tw__fabric_xfer_cancel(st->fx, TW_ECANCELLED);
        return;
    }
    st_finish(st);
}

const struct tw_dp_ops tw__dp_rdma_ops = {
    .name = "rdma",
    .wire_plane = TW_DP_RDMA,
    .start = rdma_start,
    .pump = NULL,
    .data_begin = NULL,
    .data_end = NULL,
    .on_msg = rdma_on_msg,
    .release = rdma_release,
};

/* ---- for the fabric lifecycle (fabric_srv.c) ---- */

void tw__srv_rdma_drop_handles(struct tw_srv *srv)
{
    for (struct tw_rdma_st *l = srv->rdma_live; l; l = l->lnext) {
        tw__fabric_mrcache_release(srv->mrc, l->mr);
        l->mr = NULL;
        if (l->span) {
            tw__fabric_mrcache_release(srv->mrc, l->span->mr);
            l->span->mr = NULL;
        }
    }
}

void tw__srv_rdma_free_all(struct tw_srv *srv)
{
    tw__srv_rdma_drain_idle(srv);
    while (srv->rdma_live) {
        if (srv->rdma_live->x)
            srv->rdma_live->x->dp = NULL; /* cannot happen: connections are gone */
        st_free(srv->rdma_live);
    }
}
