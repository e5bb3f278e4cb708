/*
 * RDMA data plane of the client (docs/protocol.md §7, §9.3-9.7, §10).
 *
 * Setup: after the handshake, when both sides announced RDMA_DATA_PLANE, the
 * client opens one threaded plane (its mover thread gives the target-side
 * progress the server's reads of our memory need while we block on the
 * socket), offers its rails and waits for ACCEPT / DECLINE. Anything that
 * fails leaves the connection inline-only with the reason kept for -v.
 *
 * Get (the client is the destination): on the server's RDMA_REGISTER either
 * pull (register the buffer LOCAL_READ, RDMA_READY, fi_read it all,
 * asynchronously: see below, RDMA_DONE) or push when bit 3 was negotiated and the
 * push policy is "always" (register REMOTE_WRITE, RDMA_REGISTER +
 * RDMA_READY, and on the server's RDMA_DONE revoke the key first, then
 * check). Put (the client is the source): register REMOTE_READ (+
 * LOCAL_WRITE), RDMA_REGISTER; then the server's RDMA_READY (pull: wait for
 * its RDMA_DONE and OK) or its RDMA_REGISTER + RDMA_READY (push: fi_write,
 * RDMA_DONE, wait for OK).
 *
 * GPU memory (r->path.gdr: admitted for GPUDirect, gdr_client.c) is
 * registered the same way but through the plane's registration cache with
 * the CUDA interface (fabric/mrcache.h), so the NIC (or shm's CUDA IPC)
 * moves it with no host copy: a get into it is `gdr push` (our RDMA_REGISTER
 * is the second one, the server writes) or `gdr pull` (we read); a put from
 * it is read by the server or pushed by us, as the server chooses. Such a
 * registration is dropped and its region invalidated when the transfer
 * ends: the library cannot know when the caller frees or reuses its GPU
 * memory, so no key to it outlives the request (docs/protocol.md §10). A
 * get into GPU memory is flushed (cuFlushGPUDirectRDMAWrites where the GPU
 * needs it) and, with a checksum, read back for the CRC before it is
 * reported complete.
 *
 * Transfers are asynchronous: the request's own fi_read (pull get) or
 * fi_write (push put) is submitted to the plane and the engine goes on
 * with the other requests of the run; tw__client_rdma_reap() pops the
 * finished transfers (many per look, one eventfd count per burst) and ends
 * their requests (RDMA_DONE, CRC check), and the engine waits on the
 * socket and the plane's event fd together (engine.c). So a batch of small
 * tensors keeps the window's worth of RDMA operations in flight, the mover
 * posts those that arrived since its last round together, and the
 * RDMA_DONE frames of one pass leave in one write. A request that ends
 * while its transfer runs (the server's ERROR, a connection failure)
 * cancels it and waits for its completion in release, so the caller's
 * buffer is never handed back under a live operation.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "client/client_internal.h"
#include "fabric/mrcache.h"
#include "gpu/cuda.h"

/* Per-request state (r->dp_state), made by get_start / put_start and freed
 * by rdma_release when the request ends. */
struct tw__rdma_req {
    struct tw__creq *r;
    struct tw_fabric_mr *mr;   /* our registration of host r->buf, or NULL */
    int mr_lent;               /* mr is the staging buffer's (not ours to drop) */
    struct tw__put_span *span; /* put: registered by this span instead (a reference held) */
    uint64_t mr_off;           /* r->buf's offset in the span's registration */
    struct tw_fabric_mrc *mrc; /* gdr: our registration of GPU r->buf, or NULL */
    const void *gbuf;          /* gdr: the registered GPU range */
    size_t glen;
    struct tw_fabric_rkey remote; /* the server's region */
    int got_remote;               /* put: the server registered its destination (push) */
    /* Our transfer (pull get, push put) while the plane holds it; NULL
     * before the submit and once its completion was popped. */
    struct tw_fabric_xfer *fx;
    /* Popped and not yet handled: the completion, queued on c->rdma_ready. */
    int ready;
    struct tw__rdma_req *ready_next;
    struct tw_fabric_completion fc;
    int watching; /* pull put: counted in c->target_watch */
    /* Pull get of a progressive source (bit 5, RDMA_REGISTER with MORE):
     * bytes announced so far (RDMA_AVAILABLE), and bytes of the reads
     * submitted / completed. Reads go one range at a time: what was
     * announced when the previous one ended. Without MORE avail = expect
     * and there is one read. */
    uint64_t avail, submitted, moved;
};

/* Pull put: until RDMA_DONE the server's reads of our memory are the
 * request's progress (conn.c wait_fd). Only where they can be seen. */
static void watch_target(struct tw_client *c, struct tw__rdma_req *q, int on)
{
    if (on && !q->watching && tw__fabric_target_observable(c->fpeer)) {
        q->watching = 1;
        c->target_watch++;
        tw__fabric_target_watch(c->fab, +1);
    } else if (!on && q->watching) {
        q->watching = 0;
        if (c->target_watch > 0)
            c->target_watch--;
        if (c->fab)
            tw__fabric_target_watch(c->fab, -1);
    }
}

static struct tw__rdma_req *req_state(struct tw__creq *r)
{
    return r->dp_state;
}

/* Makes r's state (fresh for this transfer). */
static int req_state_new(struct tw_client *c, struct tw__creq *r)
{
    struct tw__rdma_req *q = calloc(1, sizeof(*q));
    if (!q) {
        tw__client_seterr(c, "'%s': out of memory for the rdma transfer state", r->name);
        return -ENOMEM;
    }
    q->r = r;
    r->dp_state = q;
    return 0;
}

/* request_timeout_ms is the longest wait without progress (client.h), not
 * a deadline for the whole transfer: the engine's stall timeout. */
static uint64_t stall_ns(const struct tw_client *c)
{
    if (c->request_timeout_ms <= 0)
        return 0;
    return (uint64_t)c->request_timeout_ms * 1000000ull;
}

/* The local address of the control connection: the interface that reaches
 * the server, where tcp rails are bound. */
static const char *local_node(const struct tw_client *c, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(c->fd, (struct sockaddr *)&ss, &sl) < 0)
        return NULL;
    if (ss.ss_family == AF_INET)
        return inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, buf, (socklen_t)len);
    if (ss.ss_family == AF_INET6)
        return inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, buf, (socklen_t)len);
    return NULL;
}

int tw__client_rdma_setup(struct tw_client *c, const char *provider, int timeout_ms)
{
    char node[64], err[1024];
    struct tw_fabric_config fc;
    const struct tw_fabric_addr *addrs;
    struct tw_msg m = {.hdr = {.version = TW_PROTO_VERSION, .tag = TW_TAG_RDMA_ENDPOINT}};
    struct tw_msg in;
    int rc;

    memset(&fc, 0, sizeof(fc));
    fc.provider = provider;
    fc.node = local_node(c, node, sizeof(node));
    fc.threaded = 1;
    /* Our reads are of the server's tensors, under keys the server keeps
     * live until our RDMA_DONE: over shm we copy them ourselves (fabric.h). */
    fc.cma_reads = 1;
    /* With a GPU here, ask for FI_HMEM so GPU memory can take part
     * (GPUDirect); a provider without it, or one that refuses to register
     * the probe buffer, opens as a host-memory rail (fabric.h). */
    fc.hmem = c->gdr_mode != TW_GPUDIRECT_OFF && tw__cuda_device_count() > 0;
    if (fc.hmem && tw__cuda_scratch_alloc(0, TW__HMEM_PROBE_BYTES, &fc.hmem_probe, NULL, 0) == 0)
        fc.hmem_probe_len = TW__HMEM_PROBE_BYTES;
    rc = tw__fabric_open(&fc, &c->fab, err, sizeof(err));
    tw__cuda_scratch_free(0, fc.hmem_probe);
    /* The plane asked for FI_HMEM; whether the accepted rail has it is
     * proven by the admission probe on that rail (gdr_client.c). */
    c->fab_hmem = rc == 0 && fc.hmem;
    if (rc < 0) {
        c->fab = NULL;
        c->fabric = TW__FABRIC_OPEN_FAILED;
        snprintf(c->fabric_detail, sizeof(c->fabric_detail), "%.300s", err);
        return 0;
    }
    unsigned n = tw__fabric_local_addrs(c->fab, &addrs);
    if (n > TW_MAX_FABRIC_ENTRIES)
        n = TW_MAX_FABRIC_ENTRIES;
    m.u.rdma_endpoint.status = TW_EP_OFFER;
    tw__fabric_plane_host_id(c->fab, m.u.rdma_endpoint.host_id);
    m.u.rdma_endpoint.count = (uint8_t)n;
    for (unsigned i = 0; i < n; i++)
        tw__fabric_addr_view(&addrs[i], &m.u.rdma_endpoint.entries[i]);
    rc = tw__client_conn_queue(c, &m);
    if (!rc)
        rc = tw__client_conn_flush(c, timeout_ms);
    if (rc)
        goto out_close;
    /* The answer is the next frame: no request is in flight yet. */
    rc = tw__client_conn_next(c, &in, timeout_ms);
    if (rc < 0)
        goto out_close;
    if (rc == 0 || in.hdr.tag != TW_TAG_RDMA_ENDPOINT || in.hdr.request_id != 0) {
        tw__client_seterr(c, "expected RDMA_ENDPOINT, got %s", tw__tag_name(in.hdr.tag));
        rc = tw__client_conn_fail(c, TW_EOUT_OF_ORDER, 1);
        goto out_close;
    }
    if (in.u.rdma_endpoint.status == TW_EP_DECLINE) {
        c->fabric = TW__FABRIC_DECLINED;
        snprintf(c->fabric_detail, sizeof(c->fabric_detail), "%.*s",
                 (int)in.u.rdma_endpoint.reason.len, (const char *)in.u.rdma_endpoint.reason.ptr);
        tw__fabric_close(c->fab);
        c->fab = NULL;
        return 0;
    }
    rc = tw__fabric_peer_insert_entry(c->fab, &in.u.rdma_endpoint.entries[0], &c->fpeer);
    if (rc < 0) {
        /* The server holds our address, but we never ask for WANT_RDMA. */
        c->fabric = TW__FABRIC_INSERT_FAILED;
        snprintf(c->fabric_detail, sizeof(c->fabric_detail), "%.200s", tw__fabric_errmsg(c->fab));
        c->fpeer = NULL;
        tw__fabric_close(c->fab);
        c->fab = NULL;
        return 0;
    }
    c->fabric = TW__FABRIC_ACCEPTED;
    return 0;

out_close:
    tw__fabric_close(c->fab);
    c->fab = NULL;
    return rc;
}

void tw__client_rdma_close(struct tw_client *c)
{
    tw__client_put_span_close(c);
    c->stage_pool_mr = NULL; /* closing the plane frees it (dp_staging.c) */
    c->rdma_gen++;           /* and the staging buffers' (tw__client_stage_lend_mr) */
    /* With a handle still out (a plane closed under an undrained transfer)
     * the cache cannot go: it is left behind, like the plane's registrations
     * that tw__fabric_close frees. */
    if (c->mrc && tw__fabric_mrcache_destroy(c->mrc) != 0)
        c->mrc = NULL;
    c->mrc = NULL;
    if (c->fpeer)
        tw__fabric_peer_remove(c->fpeer);
    c->fpeer = NULL;
    tw__fabric_close(c->fab);
    c->fab = NULL;
    c->target_watch = 0;
}

/*
 * Shared keys for runs of adjacent put sources (docs/protocol.md §10,
 * "Shared keys"). The puts of a batch are often the consecutive blocks of
 * one arena (a KV cache's layers). Registered one by one, each has its own
 * key and the server reads each with its own provider operation; a
 * provider with a fixed cost per operation (tcp;ofi_rxm: ~50k 32 KiB reads
 * a second on the H200, 1.6 GB/s, against 5 GB/s for 1 MiB ones) then
 * moves small blocks at a third of its bandwidth, whatever the engine
 * does. So the first put of such a run registers the whole run -- the
 * puts after it in the call whose sources continue it, up to
 * PUT_SPAN_MAX bytes and PUT_SPAN_ITEMS puts -- and every put of the run
 * sends that key with its own address and length. The server's data
 * mover then reads neighbours with one operation (fabric/xfer.c,
 * "Joined operations"), and the client registers once per run instead of
 * once per put. The span exposes, for remote read under that key, only
 * bytes this call is putting to this server; it is revoked when the last
 * put that used it ends (the open span also when the next one opens and
 * at the end of the call), and the library never writes them (the caller
 * may not touch a put's source before the call returns). Staged puts from
 * GPU memory do the same over their staging buffers: the buffers a
 * put-ahead group's copies filled, adjacent in one slab
 * (tw__client_stage_span_end); there a buffer whose put ended may take
 * another transfer's bytes of this connection while the key lives, and
 * the span is closed before the slabs can be freed (engine.c, at the end
 * of the call). A later put of the run that goes another way (another
 * plane, its memory not host) does not use it; a span whose registration
 * fails is not retried: the put registers its own source as before.
 */
#define PUT_SPAN_MAX (8u << 20)
#define PUT_SPAN_ITEMS 256u

struct tw__put_span {
    struct tw_fabric_mr *mr;
    const uint8_t *base;
    size_t len;
    unsigned refs;
};

static void span_put(struct tw_client *c, struct tw__put_span *s)
{
    if (--s->refs)
        return;
    tw__fabric_mr_deregister(s->mr); /* NULL once taken (settle_busy) or forgotten */
    if (c->put_span == s)
        c->put_span = NULL;
    c->put_spans_live--;
    free(s);
}

/* Ends the run's open span (its puts keep theirs until they end). */
void tw__client_put_span_close(struct tw_client *c)
{
    struct tw__put_span *s = c->put_span;
    c->put_span = NULL;
    if (s)
        span_put(c, s);
}

/* How far the run of puts starting at r reaches: the end of the last one
 * whose source continues the one before it (c->run order). r itself when
 * none does. */
static const uint8_t *span_end(const struct tw_client *c, const struct tw__creq *r)
{
    const uint8_t *end = r->buf + r->len;
    unsigned n = 1;
    if (!c->run || r->len >= PUT_SPAN_MAX)
        return end;
    if (r->dp == tw__client_dp_rdma_staged)
        return tw__client_stage_span_end(c, r, PUT_SPAN_MAX, PUT_SPAN_ITEMS);
    for (size_t i = r->index + 1; i < c->run_n && n < PUT_SPAN_ITEMS; i++, n++) {
        const struct tw__creq *o = &c->run[i];
        if (o->op != TW__OP_PUT || o->finished || o->buf != end || !o->len ||
            (size_t)(end + o->len - r->buf) > PUT_SPAN_MAX)
            break;
        end += o->len;
    }
    return end;
}

/* A put of host memory (REMOTE_READ): the open span's key where r->buf
 * lies in it, else a new span over r's run when it has more than r. 1
 * when q uses a span (q->span), 0 when r registers alone. */
static int span_get(struct tw_client *c, struct tw__creq *r, struct tw__rdma_req *q,
                    unsigned access)
{
    struct tw__put_span *s = c->put_span;
    uintptr_t at = (uintptr_t)r->buf, base = s ? (uintptr_t)s->base : 0;
    if (!(s && s->mr && at >= base && at - base + r->len <= s->len &&
          tw__fabric_mr_access(s->mr) == access)) {
        const uint8_t *end = span_end(c, r);
        if (end == r->buf + r->len)
            return 0;
        s = calloc(1, sizeof(*s));
        if (!s)
            return 0;
        if (tw__fabric_mr_register(c->fpeer, r->buf, (size_t)(end - r->buf), access, TW_FABRIC_HOST,
                                   0, &s->mr) < 0) {
            free(s);
            return 0;
        }
        s->base = r->buf;
        s->len = (size_t)(end - r->buf);
        tw__client_put_span_close(c); /* the open one: its puts keep it */
        s->refs = 1;                  /* open: held until the next span or the end of the run */
        c->put_span = s;
        c->put_spans++;
        c->put_spans_live++;
    }
    s->refs++;
    q->span = s;
    q->mr_off = (uint64_t)(r->buf - s->base);
    c->put_span_users++;
    return 1;
}

/* The registration r->buf is in: its own, or its span's (NULL once
 * another put of the span took it, settle_busy). */
static struct tw_fabric_mr *req_mr(const struct tw__rdma_req *q)
{
    return q->span ? q->span->mr : q->mr;
}

/* Drops our registration of r->buf (revokes its key), keeping the state.
 * A GPU registration's cached region goes too (see the top). */
static void drop_mr(struct tw_client *c, struct tw__rdma_req *q)
{
    if (!q->mr_lent)
        tw__fabric_mr_deregister(q->mr);
    if (q->span)
        span_put(c, q->span);
    q->span = NULL;
    q->mr_off = 0;
    q->mr = NULL;
    q->mr_lent = 0;
    if (q->mrc) {
        tw__fabric_mrcache_release(c->mrc, q->mrc);
        tw__fabric_mrcache_invalidate(c->mrc, q->gbuf, q->glen);
        q->mrc = NULL;
    }
}

/* Registers r->buf (len bytes) with access: host memory directly (a
 * staged pull get borrows its library buffer's kept registration), GPU
 * memory (r->path.gdr) through the plane's cache. 0, or a negative code
 * with the reason in why. */
static int reg_buf(struct tw_client *c, struct tw__creq *r, size_t len, unsigned access, char *why,
                   size_t whylen)
{
    struct tw__rdma_req *q = req_state(r);
    if (!r->path.gdr && access == TW_FABRIC_LOCAL_READ && r->dp == tw__client_dp_rdma_staged &&
        (q->mr = tw__client_stage_lend_mr(c, r)) != NULL) {
        q->mr_lent = 1;
        return 0;
    }
    if (!r->path.gdr && r->op == TW__OP_PUT && r->buf && r->len &&
        (r->dp == &tw__client_dp_rdma || r->dp == tw__client_dp_rdma_staged) &&
        (access & TW_FABRIC_REMOTE_READ) && len == r->len && span_get(c, r, q, access))
        return 0;
    if (!r->path.gdr) {
        int rc = tw__fabric_mr_register(c->fpeer, r->buf, len, access, TW_FABRIC_HOST, 0, &q->mr);
        if (rc < 0)
            snprintf(why, whylen, "%s", tw__fabric_errmsg(c->fab));
        return rc;
    }
    int rc = tw__client_gdr_cache(c);
    if (rc < 0) {
        snprintf(why, whylen, "no registration cache: %s", tw_strerror(rc));
        return rc;
    }
    rc = tw__fabric_mrcache_acquire_peer(c->mrc, c->fpeer, r->buf, len, access,
                                         tw__client_gdr_hint(c), &q->mrc, why, whylen);
    if (rc < 0) {
        q->mrc = NULL;
        return rc;
    }
    q->gbuf = r->buf;
    q->glen = len;
    return 0;
}

/* ---- completions ---- */

/* Takes a popped completion to its request's state and queues it for
 * handling (c->rdma_ready, in completion order). */
static void record(struct tw_client *c, const struct tw_fabric_completion *fc)
{
    struct tw__rdma_req *q = (struct tw__rdma_req *)(uintptr_t)fc->cookie;
    q->fx = NULL;
    c->rdma_inflight--;
    q->fc = *fc;
    q->ready = 1;
    q->ready_next = NULL;
    struct tw__rdma_req **tail = &c->rdma_ready;
    while (*tail)
        tail = &(*tail)->ready_next;
    *tail = q;
}

/* Pops every finished transfer of the plane (many per lock). */
static void pop_all(struct tw_client *c)
{
    struct tw_fabric_completion fc[16];
    size_t n;
    while (c->fab && c->rdma_inflight &&
           (n = tw__fabric_done_pop_many(c->fab, fc, sizeof(fc) / sizeof(fc[0]))) > 0)
        for (size_t i = 0; i < n; i++)
            record(c, &fc[i]);
}

static void unready(struct tw_client *c, struct tw__rdma_req *q)
{
    if (!q->ready)
        return;
    for (struct tw__rdma_req **l = &c->rdma_ready; *l; l = &(*l)->ready_next)
        if (*l == q) {
            *l = q->ready_next;
            break;
        }
    q->ready = 0;
}

/* Forgets every request's plane objects after the plane was closed (it
 * freed their registrations and transfers). */
static void forget_plane(struct tw_client *c)
{
    for (size_t i = 0; c->run && i < c->run_n; i++) {
        struct tw__creq *o = &c->run[i];
        if ((o->dp == &tw__client_dp_rdma || o->dp == tw__client_dp_rdma_staged) && o->dp_state) {
            struct tw__rdma_req *q = req_state(o);
            q->mr = NULL;
            q->mr_lent = 0;
            if (q->span)
                q->span->mr = NULL; /* closing the plane frees it */
            q->mrc = NULL;
            q->fx = NULL;
            q->ready = 0;
            q->watching = 0;
        }
    }
    c->rdma_ready = NULL;
    c->rdma_inflight = 0;
}

/* A request that ends while its transfer runs: stop the transfer and wait
 * for its completion (bounded by the plane's drain time), handing other
 * requests' completions popped meanwhile to c->rdma_ready. */
static void wait_own(struct tw_client *c, struct tw__rdma_req *q)
{
    tw__fabric_xfer_cancel(q->fx, TW_ECANCELLED);
    while (q->fx && c->fab) {
        pop_all(c);
        if (!q->fx)
            break;
        struct pollfd p = {.fd = tw__fabric_event_fd(c->fab), .events = POLLIN};
        (void)poll(&p, 1, 100);
    }
}

static int settle_busy(struct tw_client *c, struct tw__creq *r,
                       const struct tw_fabric_completion *fc);

static void rdma_release(struct tw_client *c, struct tw__creq *r)
{
    struct tw__rdma_req *q = req_state(r);
    if (!q)
        return;
    if (q->fx)
        wait_own(c, q);
    unready(c, q);
    watch_target(c, q, 0);
    if ((q->mr || q->span || q->mrc) && q->fc.buffer_busy)
        (void)settle_busy(c, r, &q->fc); /* may close the plane */
    q = req_state(r);
    if (q)
        drop_mr(c, q);
    free(q);
    r->dp_state = NULL;
}

/* ---- helpers ---- */

static int queue_simple(struct tw_client *c, struct tw__creq *r, uint32_t tag)
{
    struct tw_msg m = {.hdr = {.version = TW_PROTO_VERSION, .tag = tag, .request_id = r->id}};
    return tw__client_conn_queue(c, &m);
}

static int queue_register(struct tw_client *c, struct tw__creq *r, uint64_t length)
{
    struct tw__rdma_req *q = req_state(r);
    struct tw_fabric_rkey k = q->mrc ? tw__fabric_mrc_rkey(q->mrc) : tw__fabric_mr_rkey(req_mr(q));
    struct tw_msg m = {
        .hdr = {.version = TW_PROTO_VERSION, .tag = TW_TAG_RDMA_REGISTER, .request_id = r->id}};
    m.u.rdma_register.rkey = k.key;
    m.u.rdma_register.remote_addr = k.remote_addr + q->mr_off;
    m.u.rdma_register.length = length;
    return tw__client_conn_queue(c, &m);
}

static int queue_done(struct tw_client *c, struct tw__creq *r, uint32_t status, uint64_t bytes)
{
    struct tw_msg m = {
        .hdr = {.version = TW_PROTO_VERSION, .tag = TW_TAG_RDMA_DONE, .request_id = r->id}};
    m.u.rdma_done.status = status;
    m.u.rdma_done.bytes = bytes;
    return tw__client_conn_queue(c, &m);
}

static void finish_msg(struct tw_client *c, struct tw__creq *r, int status, const char *fmt,
                       const char *detail)
{
    char why[700];
    int n = snprintf(why, sizeof(why), fmt, r->name, detail);
    tw__client_engine_finish(c, r, status, why,
                             (size_t)n < sizeof(why) ? (size_t)n : sizeof(why) - 1);
}

/* A registration our own transfer used and abandoned with operations still
 * in the provider (buffer_busy): the caller's buffer must not be handed
 * back while they can still write it. Wait for them (bounded); if they do
 * not drain, the connection is marked broken so nothing else runs on it. */
static void idle_flag(void *arg)
{
    __atomic_store_n((int *)arg, 1, __ATOMIC_RELEASE);
}

static int settle_busy(struct tw_client *c, struct tw__creq *r,
                       const struct tw_fabric_completion *fc)
{
    int idle = 0;
    struct tw__rdma_req *q = req_state(r);
    /* A lent registration: the buffer gives it up to us (it cannot be
     * reused before the reads drain; the buffer registers anew). */
    struct tw_fabric_mr *mr;
    if (q->span) {
        /* A span's registration: taken from the span (its other puts'
         * key is revoked with it; their reads fail) and waited for. */
        mr = q->span->mr;
        q->span->mr = NULL;
        span_put(c, q->span);
        q->span = NULL;
    } else {
        mr = q->mr_lent ? tw__client_stage_take_mr(c, r) : q->mr;
    }
    struct tw_fabric_mrc *mrc = q->mrc;
    q->mr = NULL;
    q->mr_lent = 0;
    q->mrc = NULL;
    if (!mr && !mrc)
        return 0; /* a span another put took and waited for: every operation on it drained */
    if (mrc)
        tw__fabric_mrcache_release_busy(c->mrc, mrc, idle_flag, &idle);
    else
        tw__fabric_mr_release(mr, idle_flag, &idle);
    for (int i = 0; i < 2000 && !__atomic_load_n(&idle, __ATOMIC_ACQUIRE); i++)
        usleep(1000);
    if (__atomic_load_n(&idle, __ATOMIC_ACQUIRE))
        return 0;
    /* &idle is on our stack: close the plane so the callback runs (or is
     * dropped) before we return. Closing frees every registration and
     * transfer of the plane: forget the other requests' handles first
     * (their transfers fail with the connection, below). */
    forget_plane(c);
    tw__client_rdma_close(c);
    /* The transfer's own failure (TIMEOUT on a cut link) is what the
     * caller needs to hear; the closed plane is the consequence. */
    tw__client_seterr(c,
                      "'%s': rdma %s failed: %s; its operations did not drain, so the data "
                      "plane was closed",
                      r->name, r->op == TW__OP_GET ? "read from the server" : "write to the server",
                      fc->msg);
    return tw__client_conn_fail(c, fc->status < 0 ? fc->status : TW_EINTERNAL, 0);
}

/* Submits r's transfer of len bytes at offset off of both regions; its
 * completion comes back through tw__client_rdma_reap(). A submit the plane
 * refuses completes at once (queued on c->rdma_ready with that status),
 * like a transfer that failed. */
static void start_xfer(struct tw_client *c, struct tw__creq *r, enum tw_fabric_op op, uint64_t off,
                       uint64_t len)
{
    struct tw__rdma_req *q = req_state(r);
    struct tw_fabric_xfer_desc d;
    memset(&d, 0, sizeof(d));
    d.op = op;
    d.peer = c->fpeer;
    if (q->mrc) {
        d.local = tw__fabric_mrc_mr(q->mrc);
        d.local_offset = tw__fabric_mrc_offset(q->mrc);
    } else {
        d.local = req_mr(q);
        d.local_offset = q->mr_off;
    }
    d.local_offset += off;
    d.remote = q->remote;
    d.remote.remote_addr += off;
    d.remote.length -= off;
    d.length = len;
    d.stall_ns = stall_ns(c);
    d.cookie = (uint64_t)(uintptr_t)q;
    d.attach_only = r->attach && op == TW_FABRIC_PULL;
    c->rdma_inflight++;
    /* A span whose registration another put took (settle_busy) leaves
     * this one none: fail it saying why rather than submit without. */
    int span_gone = !q->mrc && q->span && !d.local;
    int rc = span_gone ? -ECONNABORTED : tw__fabric_xfer_submit(c->fab, &d, &q->fx);
    if (rc == 0)
        return;
    struct tw_fabric_completion fc;
    memset(&fc, 0, sizeof(fc));
    fc.cookie = d.cookie;
    fc.status = rc;
    if (span_gone)
        snprintf(fc.msg, sizeof(fc.msg),
                 "the registration it shared with other puts was revoked "
                 "when one of them could not drain");
    else
        snprintf(fc.msg, sizeof(fc.msg), "%s", tw__fabric_errmsg(c->fab));
    if (!fc.msg[0])
        snprintf(fc.msg, sizeof(fc.msg), "%s", tw_strerror(rc));
    record(c, &fc);
}

/* The bytes of a get are in r->buf (our registration already dropped):
 * make GPU memory that the plane wrote visible (§10), check the CRC, end
 * the request. */
static int check_get(struct tw_client *c, struct tw__creq *r)
{
    char err[200] = "";
    r->received = r->expect;
    if (r->path.gdr) {
        int rc = tw__client_gdr_flush(c, r, err, sizeof(err));
        if (rc < 0) {
            finish_msg(c, r, rc, "'%s': making the GPU memory written by rdma visible failed: %s",
                       err);
            return 0;
        }
    }
    if (r->check_crc) {
        if (r->path.gdr) {
            int rc = tw__memkind_crc32c(r->mem_ops, &r->mem, (uintptr_t)r->buf, (size_t)r->expect,
                                        &r->crc, err, sizeof(err));
            if (rc < 0) {
                finish_msg(c, r, rc, "'%s': reading the GPU memory back for its CRC32C failed: %s",
                           err);
                return 0;
            }
        } else {
            r->crc = tw__crc32c(0, r->buf, (size_t)r->expect);
        }
        if (r->crc != r->crc_expected) {
            char d[80];
            snprintf(d, sizeof(d), "%08x, the server announced %08x", r->crc, r->crc_expected);
            finish_msg(c, r, TW_ECHECKSUM, "'%s': CRC32C of the received bytes is %s", d);
            return 0;
        }
    }
    tw__client_engine_finish(c, r, 0, NULL, 0);
    return 0;
}

/* ---- get: the client is the destination ---- */

int tw__client_rdma_attach_read(struct tw_client *c, const struct tw__creq *r)
{
    /* A pull into host memory only: a push get sends our own RDMA_REGISTER
     * for the server to write with, and GPU memory (GPUDirect) is no
     * process memory the kernel could copy to. A staged get into GPU
     * memory reads into the library's host memory (a buffer of its size
     * class or the pipeline's pool: dp_staging.c), so it qualifies too.
     * The server may then send no key: our reads of that get never go to
     * libfabric (attach_only). */
    int host_dst = (r->dp == &tw__client_dp_rdma && r->mem.kind == TW_MEMKIND_HOST) ||
                   r->dp == tw__client_dp_rdma_staged;
    return r->op == TW__OP_GET && host_dst && r->path.mode == TW_PATH_PULL && !r->path.gdr &&
           (c->sm.caps & TW_CAP_RDMA_ATTACH_READS) && c->fpeer &&
           tw__fabric_peer_attach_reads(c->fpeer);
}

static int get_pulled(struct tw_client *c, struct tw__creq *r,
                      const struct tw_fabric_completion *fc);

/* Submits the read of what is announced and not yet read, unless a read
 * runs (it ends in get_pulled, which comes back here). */
static void pull_more(struct tw_client *c, struct tw__creq *r)
{
    struct tw__rdma_req *q = req_state(r);
    if (q->fx || q->ready || q->submitted >= q->avail || (!q->mr && !q->mrc))
        return;
    uint64_t off = q->submitted;
    q->submitted = q->avail;
    start_xfer(c, r, TW_FABRIC_PULL, off, q->avail - off);
}

static int rdma_get_start(struct tw_client *c, struct tw__creq *r)
{
    r->received = 0;
    return req_state_new(c, r);
}

static int get_on_register(struct tw_client *c, struct tw__creq *r, const struct tw_msg *m)
{
    int rc;
    if (m->u.rdma_register.length != r->expect) {
        tw__client_seterr(c, "RDMA_REGISTER for '%s' has %llu bytes, TENSOR_INFO said %llu",
                          r->name, (unsigned long long)m->u.rdma_register.length,
                          (unsigned long long)r->expect);
        return TW_EBAD_LENGTH;
    }
    struct tw__rdma_req *q = req_state(r);
    q->remote.key = m->u.rdma_register.rkey;
    q->remote.remote_addr = m->u.rdma_register.remote_addr;
    q->remote.length = m->u.rdma_register.length;
    /* We are the destination: push or pull was decided with the plane
     * (tw__path_decide, r->path.mode). */
    int push = r->path.mode == TW_PATH_PUSH;
    if (!push && !r->path.gdr && !(m->hdr.flags & TW_FRAME_MORE) &&
        (c->run_active <= TW_FABRIC_READ_NOW_MAX_INFLIGHT ||
         (c->rdma_inflight >= TW_FABRIC_READ_NOW_BACKLOG && c->cpus > 1))) {
        /* Host memory here, the whole region readable, few requests in
         * flight: a small read of a process on this host is copied now (no
         * registration, no mover round trip); with more, the mover copies
         * while we handle the others' frames, unless it has a backlog of
         * reads and we have a CPU of our own: then this thread copies
         * beside it. */
        struct tw_fabric_completion fc;
        if (tw__fabric_peer_read_now(c->fpeer, r->buf, r->expect, &q->remote,
                                     (uint64_t)(uintptr_t)q, &fc)) {
            rc = queue_simple(c, r, TW_TAG_RDMA_READY);
            if (rc)
                return rc;
            q->avail = q->submitted = r->expect;
            return get_pulled(c, r, &fc); /* RDMA_DONE, the CRC, the end */
        }
    }
    char why[TW_FABRIC_ERRMSG_LEN] = "";
    rc = reg_buf(c, r, (size_t)r->expect, push ? TW_FABRIC_REMOTE_WRITE : TW_FABRIC_LOCAL_READ, why,
                 sizeof(why));
    if (rc < 0) {
        /* Tell the server we will not read; the request ends with it. */
        int qrc = queue_simple(c, r, TW_TAG_RDMA_READY);
        if (!qrc)
            qrc = queue_done(c, r, TW_WIRE_INTERNAL, 0);
        if (qrc)
            return qrc;
        finish_msg(c, r, TW_EINTERNAL, "'%s': cannot register the buffer for rdma: %s", why);
        return 0;
    }
    if (push) {
        rc = queue_register(c, r, r->expect);
        if (!rc)
            rc = queue_simple(c, r, TW_TAG_RDMA_READY);
        return rc; /* the server writes, then sends RDMA_DONE */
    }
    rc = queue_simple(c, r, TW_TAG_RDMA_READY);
    if (rc)
        return rc;
    /* Bit 5: only what RDMA_AVAILABLE announces may be read. */
    q->avail = (m->hdr.flags & TW_FRAME_MORE) ? 0 : r->expect;
    if (r->expect == 0)
        start_xfer(c, r, TW_FABRIC_PULL, 0, 0); /* nothing to read: completes at once */
    else
        pull_more(c, r);
    return 0;
}

/* The server announced more of a progressive source: read it (a push get
 * lets the server write; it needs nothing from these). */
static int get_on_available(struct tw_client *c, struct tw__creq *r, const struct tw_msg *m)
{
    struct tw__rdma_req *q = req_state(r);
    if (r->path.mode == TW_PATH_PUSH)
        return 0;
    q->avail = m->u.rdma_available.ready; /* increasing, <= length: the state machine checked */
    pull_more(c, r);
    return 0;
}

/* Our transfer is over: its registration goes now, or after the drain
 * when operations were left in the provider (settle_busy). */
static int xfer_over(struct tw_client *c, struct tw__creq *r, const struct tw_fabric_completion *fc)
{
    if (fc->buffer_busy)
        return settle_busy(c, r, fc);
    drop_mr(c, req_state(r));
    return 0;
}

/* A read of a pull get is over: the next announced range, or the end. */
static int get_pulled(struct tw_client *c, struct tw__creq *r,
                      const struct tw_fabric_completion *fc)
{
    struct tw__rdma_req *q = req_state(r);
    q->moved += fc->bytes;
    if (fc->status == 0 && !fc->buffer_busy && q->moved < r->expect) {
        pull_more(c, r); /* or wait for the next RDMA_AVAILABLE */
        return 0;
    }
    int rc = xfer_over(c, r, fc);
    if (rc)
        return rc;
    rc = queue_done(c, r, tw__fabric_status_to_wire(fc->status), q->moved);
    if (rc)
        return rc;
    if (fc->status != 0) {
        finish_msg(c, r, fc->status, "'%s': rdma read from the server failed: %s", fc->msg);
        return 0;
    }
    return check_get(c, r);
}

static int get_on_done(struct tw_client *c, struct tw__creq *r, const struct tw_msg *m)
{
    /* Push: revoke the write key before looking at the bytes (§10). */
    drop_mr(c, req_state(r));
    if (m->u.rdma_done.status != 0) {
        uint32_t code = m->u.rdma_done.status;
        finish_msg(c, r, code < 100 ? TW_ERR_FROM_WIRE(code) : TW_EINTERNAL,
                   "'%s': the server's rdma writes failed (%s)",
                   tw_strerror_name(code < 100 ? TW_ERR_FROM_WIRE(code) : TW_EINTERNAL));
        return 0;
    }
    if (m->u.rdma_done.bytes != r->expect) {
        tw__client_seterr(c, "RDMA_DONE for '%s' says %llu of %llu bytes", r->name,
                          (unsigned long long)m->u.rdma_done.bytes, (unsigned long long)r->expect);
        return TW_EBAD_LENGTH;
    }
    return check_get(c, r);
}

/* ---- put: the client is the source ---- */

static int rdma_put_start(struct tw_client *c, struct tw__creq *r)
{
    unsigned access = TW_FABRIC_REMOTE_READ;
    if (c->sm.caps & TW_CAP_RDMA_GPUDIRECT)
        access |= TW_FABRIC_LOCAL_WRITE; /* the server may ask us to push */
    int rc = req_state_new(c, r);
    if (rc)
        return rc;
    char why[TW_FABRIC_ERRMSG_LEN] = "";
    rc = reg_buf(c, r, r->len, access, why, sizeof(why));
    if (rc < 0) {
        tw__client_seterr(c, "put '%s': cannot register the buffer for rdma: %s", r->name, why);
        return rc;
    }
    return queue_register(c, r, r->len);
}

static int put_on_ready(struct tw_client *c, struct tw__creq *r)
{
    if (!req_state(r)->got_remote) {
        watch_target(c, req_state(r), 1);
        return 0; /* pull: the server reads, then sends RDMA_DONE */
    }
    /* Push: the server, the destination, chose it. */
    r->path.mode = TW_PATH_PUSH;
    start_xfer(c, r, TW_FABRIC_PUSH, 0, r->len); /* ends in put_pushed */
    return 0;
}

/* Our writes of a push put are over. */
static int put_pushed(struct tw_client *c, struct tw__creq *r,
                      const struct tw_fabric_completion *fc)
{
    int rc = xfer_over(c, r, fc);
    if (rc)
        return rc;
    if (fc->status == 0)
        r->received = r->len;
    /* The server answers OK, or ERROR after a failed RDMA_DONE. */
    return queue_done(c, r, tw__fabric_status_to_wire(fc->status), fc->bytes);
}

int tw__client_rdma_reap(struct tw_client *c)
{
    pop_all(c);
    while (c->rdma_ready) {
        struct tw__rdma_req *q = c->rdma_ready;
        c->rdma_ready = q->ready_next;
        q->ready = 0;
        struct tw__creq *r = q->r;
        int rc = r->op == TW__OP_GET ? get_pulled(c, r, &q->fc) : put_pushed(c, r, &q->fc);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int rdma_on_message(struct tw_client *c, struct tw__creq *r, const struct tw_msg *m)
{
    if (r->op == TW__OP_GET) {
        if (m->hdr.tag == TW_TAG_RDMA_REGISTER)
            return get_on_register(c, r, m);
        if (m->hdr.tag == TW_TAG_RDMA_DONE && r->path.mode == TW_PATH_PUSH)
            return get_on_done(c, r, m);
        if (m->hdr.tag == TW_TAG_RDMA_AVAILABLE)
            return get_on_available(c, r, m);
        return TW_EOUT_OF_ORDER;
    }
    switch (m->hdr.tag) {
    case TW_TAG_RDMA_REGISTER:
        if (m->u.rdma_register.length != r->len)
            return TW_EBAD_LENGTH;
        req_state(r)->remote.key = m->u.rdma_register.rkey;
        req_state(r)->remote.remote_addr = m->u.rdma_register.remote_addr;
        req_state(r)->remote.length = m->u.rdma_register.length;
        req_state(r)->got_remote = 1;
        return 0;
    case TW_TAG_RDMA_READY:
        return put_on_ready(c, r);
    case TW_TAG_RDMA_DONE:
        /* Pull: the server's reads are over; our registration can go. OK or
         * ERROR follows. */
        watch_target(c, req_state(r), 0);
        drop_mr(c, req_state(r));
        if (m->u.rdma_done.status == 0)
            r->received = r->len;
        return 0;
    default:
        return TW_EOUT_OF_ORDER;
    }
}

const struct tw__client_dp_ops tw__client_dp_rdma = {
    .name = "rdma",
    .wire_plane = TW_DP_RDMA,
    .xfer_flags = TW_XFER_WANT_RDMA,
    .get_start = rdma_get_start,
    .get_data = NULL,
    .put_start = rdma_put_start,
    .on_message = rdma_on_message,
    .release = rdma_release,
};
