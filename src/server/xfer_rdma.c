/*
 * The RDMA data plane of the server (docs/protocol.md §7, §9.3-9.7, §10):
 * RDMA_ENDPOINT, and per transfer the RDMA_REGISTER / RDMA_READY / RDMA_DONE
 * sequence with the bytes moved by src/fabric (one threaded plane per
 * server; its completion eventfd is watched by the event loop).
 *
 * Roles. GET: the server is the source. It registers the tensor version
 * (REMOTE_READ, plus LOCAL_WRITE when push was negotiated) and sends
 * RDMA_REGISTER; the client either reads and sends RDMA_DONE (pull) or sends
 * its own RDMA_REGISTER + RDMA_READY and the server writes (push) and sends
 * RDMA_DONE. PUT: the server is the destination. After the client's
 * RDMA_REGISTER it either sends RDMA_READY and reads (pull, the default) or
 * registers the new storage REMOTE_WRITE, sends RDMA_REGISTER + RDMA_READY
 * and waits for the client's RDMA_DONE (push, --push always); it revokes that
 * key before checking the CRC and committing.
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
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
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
    int push;
    int got_dst; /* GET: the client registered its destination */
    int busy;    /* the last completion had buffer_busy */
    struct tw_rdma_st *idle_next;
    struct tw_rdma_st *lnext, *lprev; /* srv->rdma_live (loop thread only) */
};

/* A registration cache that could not be freed at shutdown (see
 * tw__srv_fabric_destroy). */
static struct tw_fabric_mrcache *kept_mrc;

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
    if (st->hold)
        tw__tensor_unref(st->hold);
    free(st);
}

static void drain_idle(struct tw_srv *srv)
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

static void on_idle_io(struct tw_loop *loop, struct tw_io *io, uint32_t events)
{
    struct tw_srv *srv = io->data;
    uint64_t v;
    (void)loop;
    (void)events;
    if (read(srv->idle_efd, &v, sizeof(v)) < 0) {
        /* EAGAIN: nothing new */
    }
    drain_idle(srv);
}

/* Releases the registration of a state with no transfer in flight, then the
 * state itself (now, or after on_idle when operations may still touch the
 * memory). The caller has made st->hold the reference to keep, if any. */
static void st_finish(struct tw_rdma_st *st)
{
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

static int send_register(struct tw_xfer *x, const struct tw_fabric_mrc *mr)
{
    struct tw_fabric_rkey k = tw__fabric_mrc_rkey(mr);
    struct tw_msg m;
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_RDMA_REGISTER;
    m.hdr.request_id = x->id;
    m.u.rdma_register.rkey = k.key;
    m.u.rdma_register.remote_addr = k.remote_addr;
    m.u.rdma_register.length = x->t->byte_length;
    return tw__conn_send(x->conn, &m);
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

static void log_xfer(struct tw_xfer *x, const char *how)
{
    struct tw_srv_conn *c = x->conn;
    struct tw_rdma_st *st = x->dp;
    TW_LOGI("conn %llu %s: %s %s %llu B: rdma %s (%s), %llu ms", (unsigned long long)c->id, c->peer,
            x->dir == TW_XFER_GET ? "get" : "put", x->t->name,
            (unsigned long long)x->t->byte_length, st->push ? "push" : "pull",
            c->fpeer ? tw__fabric_peer_provider(c->fpeer) : "?",
            (unsigned long long)(tw__loop_now(&c->srv->loop) - x->started_ms));
    (void)how;
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
    d.local = tw__fabric_mrc_mr(st->mr);
    d.local_offset = tw__fabric_mrc_offset(st->mr);
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

static void on_completion(struct tw_srv *srv, const struct tw_fabric_completion *fc)
{
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
        uint32_t ws = tw__fabric_status_to_wire(fc->status);
        if (fc->status == 0)
            log_xfer(x, "push");
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
        fail_xfer(x, fc->status ? tw__fabric_status_to_wire(fc->status) : TW_WIRE_INTERNAL,
                  "reading the client's memory failed", why);
        return;
    }
    x->done = fc->bytes;
    if (send_done(x, 0, fc->bytes) < 0)
        return;
    if (x->t->has_crc)
        x->crc = tw__crc32c(0, x->t->data, (size_t)x->t->byte_length);
    log_xfer(x, "pull");
    tw__xfer_put_complete(x);
}

static void on_fab_io(struct tw_loop *loop, struct tw_io *io, uint32_t events)
{
    struct tw_srv *srv = io->data;
    uint64_t v;
    struct tw_fabric_completion fc;
    (void)loop;
    (void)events;
    if (read(tw__fabric_event_fd(srv->fab), &v, sizeof(v)) < 0) {
        /* EAGAIN: popping below is what counts */
    }
    for (int i = 0; i < 256 && tw__fabric_done_pop(srv->fab, &fc) == 1; i++)
        on_completion(srv, &fc);
    /* A rail retired meanwhile (a dead shm peer, src/fabric/fabric.h):
     * drop its cached registrations so it can close and free its slot. */
    uint32_t retired = tw__fabric_retired_rails(srv->fab);
    uint32_t fresh = retired & ~srv->rails_dropped;
    srv->rails_dropped = retired;
    for (unsigned k = 0; fresh; k++, fresh >>= 1) {
        if (!(fresh & 1u))
            continue;
        char why[400];
        tw__fabric_rail_status(srv->fab, k, why, sizeof(why));
        TW_LOGW("rdma rail %s; a replacement of the same provider takes new connections", why);
        tw__fabric_mrcache_drop_rail(srv->mrc, k);
    }
}

/* ---- the ops table ---- */

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
    char err[TW_FABRIC_ERRMSG_LEN];
    int rc = tw__fabric_mrcache_acquire_peer(c->srv->mrc, c->fpeer, x->t->data,
                                             (size_t)x->t->byte_length, access, TW_MEMKIND_HOST,
                                             &st->mr, err, sizeof(err));
    if (rc < 0) {
        st->mr = NULL;
        TW_LOGW("conn %llu %s: cannot register '%s' (%llu B) for rdma: %s",
                (unsigned long long)c->id, c->peer, x->t->name,
                (unsigned long long)x->t->byte_length, err);
        return rc;
    }
    return send_register(x, st->mr) < 0 ? TW_ESHUTDOWN : 0;
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
        st->push = 1;
        {
            int rc = submit(x, TW_FABRIC_PUSH);
            if (rc < 0)
                fail_xfer(x, TW_WIRE_INTERNAL, "cannot start writing",
                          tw__fabric_errmsg(c->srv->fab));
        }
        return 0;
    case TW_TAG_RDMA_DONE: /* pull: the client's reads are over; request ends */
        x->done = m->u.rdma_done.bytes;
        if (m->u.rdma_done.status == 0)
            log_xfer(x, "pull");
        else
            TW_LOGI("conn %llu %s: rdma pull get of '%s' failed at the client: %s (%llu bytes)",
                    (unsigned long long)c->id, c->peer, x->t->name,
                    tw_strerror_name(TW_ERR_FROM_WIRE(m->u.rdma_done.status)),
                    (unsigned long long)m->u.rdma_done.bytes);
        tw__xfer_destroy(x);
        tw__conn_maybe_finish(c);
        return 0;
    default:
        return TW_EOUT_OF_ORDER;
    }
}

/* Who moves the bytes of an RDMA put. --push always: the client writes
 * (push) whenever bit 3 was negotiated. auto: the client also writes over
 * shm, so that the server never posts into a client's shared region: shm
 * (libfabric 1.17) posts under a lock in the target's region, and a client
 * killed during a pull put, while its progress held that lock copying a
 * chunk, left the server's post spinning for good (a wedged rail; about
 * half of such kills on a 16-core host, docs/testing.md). With push the
 * copy runs in the server's progress under the server's own lock, and a
 * client holds it only while enqueueing a command. Throughput is the same
 * (docs/performance.md). Otherwise the server reads (pull). */
static int push_put(const struct tw_srv_conn *c)
{
    if (!(c->caps & TW_CAP_RDMA_GPUDIRECT))
        return 0;
    if (c->srv->cfg.push == TW_SRV_PUSH_ALWAYS)
        return 1;
    return c->srv->cfg.push == TW_SRV_PUSH_AUTO && c->fpeer &&
           strcmp(tw__fabric_peer_provider(c->fpeer), "shm") == 0;
}

static int put_on_msg(struct tw_xfer *x, const struct tw_msg *m)
{
    struct tw_rdma_st *st = x->dp;
    struct tw_srv_conn *c = x->conn;
    struct tw_srv *srv = c->srv;
    int rc;
    switch (m->hdr.tag) {
    case TW_TAG_RDMA_REGISTER: /* the client's source */
        st->remote.key = m->u.rdma_register.rkey;
        st->remote.remote_addr = m->u.rdma_register.remote_addr;
        st->remote.length = m->u.rdma_register.length;
        st->push = push_put(c);
        {
            char err[TW_FABRIC_ERRMSG_LEN];
            rc = tw__fabric_mrcache_acquire_peer(
                srv->mrc, c->fpeer, x->t->data, (size_t)x->t->byte_length,
                st->push ? TW_FABRIC_REMOTE_WRITE : TW_FABRIC_LOCAL_READ, TW_MEMKIND_HOST, &st->mr,
                err, sizeof(err));
            if (rc < 0) {
                st->mr = NULL;
                fail_xfer(x, TW_WIRE_INTERNAL, "cannot register the destination", err);
                return 0;
            }
        }
        if (st->push && send_register(x, st->mr) < 0)
            return 0;
        if (send_simple(x, TW_TAG_RDMA_READY) < 0)
            return 0;
        if (!st->push) {
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
                     tw_strerror_name(TW_ERR_FROM_WIRE(m->u.rdma_done.status)),
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
        if (x->t->has_crc)
            x->crc = tw__crc32c(0, x->t->data, (size_t)x->t->byte_length);
        log_xfer(x, "push");
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

/* ---- plane and endpoints ---- */

/* The host part of --listen, to bind tcp rails to the same interface; NULL
 * for wildcard addresses. */
/* store.on_recycle: the version's pages go back to the spare pool (loop
 * thread, no lock held). */
static void recycle_invalidate(void *ctx, void *p, size_t len)
{
    struct tw_srv *srv = ctx;
    if (srv->mrc)
        tw__fabric_mrcache_invalidate(srv->mrc, p, len);
}

static const char *listen_node(const char *listen, char *buf, size_t len)
{
    const char *colon = strrchr(listen, ':');
    size_t n = colon ? (size_t)(colon - listen) : strlen(listen);
    if (n >= 2 && listen[0] == '[' && listen[n - 1] == ']') {
        listen++;
        n -= 2;
    }
    if (n == 0 || n >= len)
        return NULL;
    memcpy(buf, listen, n);
    buf[n] = '\0';
    if (strcmp(buf, "0.0.0.0") == 0 || strcmp(buf, "::") == 0 || strcmp(buf, "*") == 0)
        return NULL;
    return buf;
}

int tw__srv_fabric_init(struct tw_srv *srv)
{
    int rc;
    char node[128];
    srv->idle_efd = -1;
    pthread_mutex_init(&srv->idle_lock, NULL);
    if (strcmp(srv->cfg.fabric, "none") == 0) {
        snprintf(srv->fab_why, sizeof(srv->fab_why), "--fabric none");
        TW_LOGI("rdma data plane off (--fabric none): inline data only");
        return 0;
    }
    struct tw_fabric_config fc;
    memset(&fc, 0, sizeof(fc));
    fc.provider = srv->cfg.fabric;
    fc.node = listen_node(srv->cfg.listen, node, sizeof(node));
    fc.threaded = 1;
    char err[1024];
    rc = tw__fabric_open(&fc, &srv->fab, err, sizeof(err));
    if (rc < 0) {
        srv->fab = NULL;
        snprintf(srv->fab_why, sizeof(srv->fab_why), "%.500s", err);
        TW_LOGW("rdma data plane unavailable (--fabric %s): %s; serving inline data only",
                srv->cfg.fabric, err);
        return 0;
    }
    rc = tw__fabric_mrcache_create(srv->fab, NULL, &srv->mrc);
    if (rc < 0)
        goto out_close_fab;
    srv->store.on_recycle = recycle_invalidate;
    srv->store.recycle_ctx = srv;
    srv->idle_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (srv->idle_efd < 0) {
        rc = -errno;
        goto out_destroy_mrc;
    }
    tw__io_init(&srv->idle_io, srv->idle_efd, on_idle_io, srv);
    rc = tw__loop_io_set(&srv->loop, &srv->idle_io, EPOLLIN);
    if (rc < 0)
        goto out_close_efd;
    tw__io_init(&srv->fab_io, tw__fabric_event_fd(srv->fab), on_fab_io, srv);
    rc = tw__loop_io_set(&srv->loop, &srv->fab_io, EPOLLIN);
    if (rc < 0)
        goto out_del_idle;
    snprintf(srv->fab_why, sizeof(srv->fab_why), "%.500s", tw__fabric_describe(srv->fab));
    TW_LOGI("rdma data plane (--fabric %s, --push %s): %s", srv->cfg.fabric,
            srv->cfg.push == TW_SRV_PUSH_ALWAYS  ? "always"
            : srv->cfg.push == TW_SRV_PUSH_NEVER ? "never"
                                                 : "auto",
            srv->fab_why);
    return 0;

out_del_idle:
    tw__loop_io_del(&srv->loop, &srv->idle_io);
out_close_efd:
    close(srv->idle_efd);
    srv->idle_efd = -1;
out_destroy_mrc:
    srv->store.on_recycle = NULL;
    tw__fabric_mrcache_destroy(srv->mrc);
    srv->mrc = NULL;
out_close_fab:
    tw__fabric_close(srv->fab);
    srv->fab = NULL;
    return rc;
}

void tw__srv_fabric_destroy(struct tw_srv *srv)
{
    if (srv->fab) {
        tw__loop_io_del(&srv->loop, &srv->fab_io);
        /* Completions not popped are discarded by close: their states are
         * orphans (every connection is gone). Cancelled transfers complete
         * within the plane's drain time: wait for them (bounded) and pop. */
        struct tw_fabric_completion fc;
        struct tw_fabric_stats st;
        for (int i = 0; i < 2000; i++) {
            while (tw__fabric_done_pop(srv->fab, &fc) == 1)
                on_completion(srv, &fc);
            tw__fabric_stats(srv->fab, &st);
            if (st.xfers_active == 0)
                break;
            usleep(1000);
        }
        while (tw__fabric_done_pop(srv->fab, &fc) == 1)
            on_completion(srv, &fc);
        /* Transfers that never completed still hold cache handles: drop
         * them (the plane keeps its own reference on their MRs until it
         * closes) so the cache can go before the plane. */
        for (struct tw_rdma_st *l = srv->rdma_live; l; l = l->lnext) {
            tw__fabric_mrcache_release(srv->mrc, l->mr);
            l->mr = NULL;
        }
        srv->store.on_recycle = NULL;
        int drc = tw__fabric_mrcache_destroy(srv->mrc);
        if (drc < 0) {
            /* A transfer of a wedged rail still holds registrations (the
             * plane keeps itself for its stuck thread): keep the cache
             * with it, reachable, instead of losing it. */
            TW_LOGW("registration cache kept at shutdown: %s (a wedged rdma rail holds "
                    "registrations)",
                    tw_strerror(drc));
            kept_mrc = srv->mrc;
        }
        srv->mrc = NULL;
        tw__fabric_close(srv->fab);
        srv->fab = NULL;
    }
    if (srv->idle_efd >= 0) {
        tw__loop_io_del(&srv->loop, &srv->idle_io);
        close(srv->idle_efd);
        srv->idle_efd = -1;
    }
    drain_idle(srv);
    /* What is left are buffers the plane never handed back (a shm peer that
     * died inside an operation, see tw__fabric_mr_release). The plane is
     * closed and the process is about to exit: release them now so the
     * store can be torn down. */
    while (srv->rdma_live) {
        if (srv->rdma_live->x)
            srv->rdma_live->x->dp = NULL; /* cannot happen: connections are gone */
        st_free(srv->rdma_live);
    }
    pthread_mutex_destroy(&srv->idle_lock);
}

uint64_t tw__srv_fabric_caps(const struct tw_srv *srv)
{
    if (!srv->fab)
        return 0;
    uint64_t caps = TW_CAP_RDMA_DATA_PLANE;
    if (srv->cfg.push != TW_SRV_PUSH_NEVER)
        caps |= TW_CAP_RDMA_GPUDIRECT;
    return caps;
}

void tw__srv_fabric_endpoint(struct tw_srv_conn *c, const struct tw_msg *m)
{
    struct tw_srv *srv = c->srv;
    struct tw_msg r;
    char reason[TW_MAX_REASON_LEN + 1] = "";
    struct tw_fabric_entry view;
    memset(&r, 0, sizeof(r));
    r.hdr.tag = TW_TAG_RDMA_ENDPOINT;
    int rc = TW_ENOFABRIC;
    const struct tw_fabric_addr *ours = NULL;
    if (srv->fab && !c->fpeer)
        rc = tw__fabric_accept_offer(srv->fab, m->u.rdma_endpoint.host_id,
                                     m->u.rdma_endpoint.entries, m->u.rdma_endpoint.count,
                                     &c->fpeer, &ours, reason, sizeof(reason));
    else
        snprintf(reason, sizeof(reason), "server has no rdma data plane");
    if (rc == 0) {
        r.u.rdma_endpoint.status = TW_EP_ACCEPT;
        tw__fabric_plane_host_id(srv->fab, r.u.rdma_endpoint.host_id);
        tw__fabric_addr_view(ours, &view);
        r.u.rdma_endpoint.count = 1;
        r.u.rdma_endpoint.entries[0] = view;
        TW_LOGI("conn %llu %s: rdma endpoint accepted: %s", (unsigned long long)c->id, c->peer,
                tw__fabric_peer_provider(c->fpeer));
    } else {
        if (!reason[0])
            snprintf(reason, sizeof(reason), "%s", tw_strerror(rc));
        r.u.rdma_endpoint.status = TW_EP_DECLINE;
        r.u.rdma_endpoint.reason.ptr = (const uint8_t *)reason;
        r.u.rdma_endpoint.reason.len = (uint32_t)strlen(reason);
        c->fpeer = NULL;
        TW_LOGI("conn %llu %s: rdma endpoint declined: %s", (unsigned long long)c->id, c->peer,
                reason);
    }
    tw__conn_send(c, &r);
}

void tw__srv_fabric_conn_gone(struct tw_srv_conn *c)
{
    if (c->fpeer) {
        tw__fabric_peer_remove(c->fpeer);
        c->fpeer = NULL;
    }
}
