/*
 * The server-wide RDMA lifecycle (docs/protocol.md §7): opening the plane
 * from --fabric with its registration cache, the capability bits it lets
 * the server announce, the RDMA_ENDPOINT exchange of each connection, the
 * loop's watch of the plane's completion eventfd (completions go to the
 * per-transfer plane, xfer_rdma.c) and of retired rails, and the teardown.
 * Which transfer uses RDMA is not decided here: see proto/path.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "gdr/policy.h"
#include "gpu/cuda.h"
#include "server/log.h"
#include "server/server.h"

/* A registration cache that could not be freed at shutdown (see
 * tw__srv_fabric_destroy). */
static struct tw_fabric_mrcache *kept_mrc;

static void on_idle_io(struct tw_loop *loop, struct tw_io *io, uint32_t events)
{
    struct tw_srv *srv = io->data;
    uint64_t v;
    (void)loop;
    (void)events;
    if (read(srv->idle_efd, &v, sizeof(v)) < 0) {
        /* EAGAIN: nothing new */
    }
    tw__srv_rdma_drain_idle(srv);
}

static void on_fab_io(struct tw_loop *loop, struct tw_io *io, uint32_t events)
{
    struct tw_srv *srv = io->data;
    struct tw_fabric_completion fc;
    (void)loop;
    (void)events;
    /* The event fd is not read here: the pop that empties the queue resets
     * it (tw__fabric_done_pop_many), and the plane signals it again only
     * after that. With more than 256 completions queued it stays readable,
     * so the loop comes back for the rest after serving the sockets;
     * draining it first lost them (a batch of more than 256 pull puts in
     * flight stalled until the client gave up, and the rail with it). */
    srv->completing = 1; /* small staged puts queue their GPU copies */
    for (int i = 0; i < 256 && tw__fabric_done_pop(srv->fab, &fc) == 1; i++)
        tw__srv_rdma_on_completion(srv, &fc);
    srv->completing = 0;
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

/* store.on_recycle: the version's pages go back to the spare pool (loop
 * thread, no lock held). */
static void recycle_invalidate(void *ctx, void *p, size_t len)
{
    struct tw_srv *srv = ctx;
    if (srv->mrc)
        tw__fabric_mrcache_invalidate(srv->mrc, p, len);
}

/* The host part of --listen, to bind tcp rails to the same interface; NULL
 * for wildcard addresses. */
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
    /* Puts over shm from a client whose memory this process may read are
     * copied by the mover with process_vm_readv (proto/path.c,
     * PULL_SHM_CMA; fabric.h). */
    fc.cma_reads = 1;
    /* Served GPUs: ask for FI_HMEM so their memory can be registered
     * (GPUDirect, gdr_srv.c). A provider without it (tcp) still opens, as a
     * rail for host memory only: the describe line logged below names it,
     * and admission (gdr/) keeps GPU tensors off it. */
    fc.hmem = srv->store.ngpus > 0 && srv->cfg.gpudirect != TW_GDR_MODE_OFF;
    /* ... and keep it only on rails that register the first served GPU's
     * memory (fabric.h: FI_HMEM costs shm its cross-memory attach). */
    int probe_dev = fc.hmem ? srv->store.gpu[0].ordinal : -1;
    if (fc.hmem &&
        tw__cuda_scratch_alloc(probe_dev, TW__HMEM_PROBE_BYTES, &fc.hmem_probe, NULL, 0) == 0) {
        fc.hmem_probe_len = TW__HMEM_PROBE_BYTES;
        fc.hmem_probe_device = probe_dev;
    }
    char err[1024];
    rc = tw__fabric_open(&fc, &srv->fab, err, sizeof(err));
    tw__cuda_scratch_free(probe_dev, fc.hmem_probe);
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
                tw__srv_rdma_on_completion(srv, &fc);
            tw__fabric_stats(srv->fab, &st);
            if (st.xfers_active == 0)
                break;
            usleep(1000);
        }
        while (tw__fabric_done_pop(srv->fab, &fc) == 1)
            tw__srv_rdma_on_completion(srv, &fc);
        /* Transfers that never completed still hold cache handles: drop
         * them (the plane keeps its own reference on their MRs until it
         * closes) so the cache can go before the plane. */
        tw__srv_rdma_drop_handles(srv);
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
    /* What is left are buffers the plane never handed back (a shm peer that
     * died inside an operation, see tw__fabric_mr_release). The plane is
     * closed and the process is about to exit: release them now so the
     * store can be torn down. */
    tw__srv_rdma_free_all(srv);
    pthread_mutex_destroy(&srv->idle_lock);
}

uint64_t tw__srv_fabric_caps(const struct tw_srv *srv)
{
    if (!srv->fab)
        return 0;
    uint64_t caps = TW_CAP_RDMA_DATA_PLANE;
    /* Bit 3 (docs/protocol.md §5): as a source this server writes into
     * any destination that asks (the destination owner decides, §9.5); as
     * a destination it asks for a push only into host memory by --push's
     * rules and into GPU memory admitted for GPUDirect (gdr_srv.c). */
    if (srv->cfg.push != TW_SRV_PUSH_NEVER)
        caps |= TW_CAP_RDMA_GPUDIRECT;
    /* Bit 5 (§4.22): a staged GPU source of a get registers before its
     * copy to the host is done (xfer_staged.c). */
    caps |= TW_CAP_RDMA_PROGRESSIVE;
    /* Bit 6 (§4.9): a put's RDMA_REGISTER may come before our PUT_ACCEPT;
     * we answer every TENSOR_PUT as we read it, so it meets PUT_ACCEPT(2)
     * (handled as usual) or PUT_ACCEPT(1) (void: xfer_inline.c). */
    caps |= TW_CAP_EAGER_RDMA_PUT;
    /* Bit 7 (§4.5): a get asked with ATTACH_READ over shm sends a host
     * source without registering it (xfer_rdma.c). */
    caps |= TW_CAP_RDMA_ATTACH_READS;
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
