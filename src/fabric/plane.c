/*
 * The data plane object: configuration, open/close order, error buffer and
 * counters. Provider work lives in rail.c, the engine in xfer.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/errbuf.h"
#include "fabric/fabric_int.h"

/* What the fabric module keeps for the rest of the process (fabric.h,
 * "Kept for the life of the process"): planes closed while a thread was
 * still inside a wedged call or a kept rail's provider held operations
 * (tw__fabric_close()), and registrations whose memory an unanswered
 * operation may still touch (tw__fabric_mr_keep()). Never freed. */
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tw_fabric *kept_planes;
static unsigned kept_nplanes;
static struct tw_fabric_link kept_mrs = {&kept_mrs, &kept_mrs};
static unsigned kept_nmrs;
static uint64_t kept_bytes;

void tw__fabric_mr_keep(struct tw_fabric_mr *m)
{
    /* The rail (and perhaps the plane) it pointed into may be freed: only
     * the memory and the owner's on_idle argument matter from now on. */
    m->rail = NULL;
    m->mr = NULL;
    m->desc = NULL;
    pthread_mutex_lock(&kept_lock);
    link_add_tail(&kept_mrs, &m->node);
    kept_nmrs++;
    kept_bytes += m->len;
    pthread_mutex_unlock(&kept_lock);
}

void tw__fabric_kept(struct tw_fabric_kept *out)
{
    pthread_mutex_lock(&kept_lock);
    out->planes = kept_nplanes;
    out->mrs = kept_nmrs;
    out->bytes = kept_bytes;
    pthread_mutex_unlock(&kept_lock);
}

int tw__fabric_fail(struct tw_fabric *fab, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tw__errbuf_vset(fab->errmsg, sizeof(fab->errmsg), fmt, ap);
    va_end(ap);
    return code;
}

/* TW_FABRIC_DEFAULT_SPIN_NS, or TW_FABRIC_SPIN_US (0..100000) when set: a
 * host with spare cores may buy lower small-operation latency with more
 * polling, a crowded one the other way round. Anything else is ignored. */
static uint64_t spin_default(void)
{
    const char *v = getenv("TW_FABRIC_SPIN_US");
    if (v && *v) {
        char *end;
        unsigned long long us = strtoull(v, &end, 10);
        if (*end == '\0' && us <= 100000)
            return us ? us * 1000ull : 1; /* 0: sleep at once (1 ns) */
    }
    return TW_FABRIC_DEFAULT_SPIN_NS;
}

/* TW_FABRIC_SHM_DEVICE_CHUNK, or TW_FABRIC_SHM_DEVICE_CHUNK_MIB (1..4096)
 * when set, for measurements (docs/performance.md, #12). Anything else is
 * ignored. */
static size_t device_chunk_default(void)
{
    const char *v = getenv("TW_FABRIC_SHM_DEVICE_CHUNK_MIB");
    if (v && *v) {
        char *end;
        unsigned long long mib = strtoull(v, &end, 10);
        if (*end == '\0' && mib >= 1 && mib <= 4096)
            return (size_t)mib << 20;
    }
    return TW_FABRIC_SHM_DEVICE_CHUNK;
}

int tw__fabric_open(const struct tw_fabric_config *cfg, struct tw_fabric **out, char *err,
                    size_t errlen)
{
    char scratch[8];
    struct tw_fabric_config defaults = {0};
    int ret;
    if (!err) {
        err = scratch;
        errlen = sizeof(scratch);
    }
    if (errlen)
        err[0] = '\0';
    if (!cfg)
        cfg = &defaults;
    if (cfg->depth > TW_FABRIC_MAX_DEPTH) {
        snprintf(err, errlen, "depth %u above the maximum %u", cfg->depth, TW_FABRIC_MAX_DEPTH);
        return TW_EINVAL;
    }

    struct tw_fabric *fab = calloc(1, sizeof(*fab));
    if (!fab) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    fab->chunk = cfg->chunk_size ? cfg->chunk_size : TW_FABRIC_DEFAULT_CHUNK;
    fab->chunk_configured = cfg->chunk_size != 0;
    fab->device_chunk = device_chunk_default();
    fab->depth = cfg->depth ? cfg->depth : TW_FABRIC_DEFAULT_DEPTH;
    fab->drain_ns = cfg->drain_ns ? cfg->drain_ns : TW_FABRIC_DEFAULT_DRAIN_NS;
    fab->wedge_ns = cfg->wedge_ns ? cfg->wedge_ns : TW_FABRIC_DEFAULT_WEDGE_NS;
    fab->wedge_net_ns = cfg->wedge_ns ? cfg->wedge_ns : TW_FABRIC_DEFAULT_NET_WEDGE_NS;
    fab->hmem = cfg->hmem;
    fab->hmem_device = cfg->hmem_probe_device;
    fab->spin_ns = cfg->spin_ns ? cfg->spin_ns : spin_default();
    fab->cma_reads = cfg->cma_reads;
    {
        /* Joined operations (xfer.c) are on unless TW_FABRIC_JOIN=0 (for
         * measuring them against their absence in one build). */
        const char *v = getenv("TW_FABRIC_JOIN");
        fab->join_ops = !(v && strcmp(v, "0") == 0);
    }
    fab->wake_fd = fab->event_fd = -1;
    link_init(&fab->peers);
    link_init(&fab->mrs);
    link_init(&fab->active);
    link_init(&fab->ready);
    link_init(&fab->walk);
    link_init(&fab->skip);
    link_init(&fab->done);
    link_init(&fab->zombies);
    link_init(&fab->idle_mrs);
    for (unsigned i = 0; i < TW_FABRIC_MAX_SLOTS; i++)
        fab->rails[i].wait_fd = -1;

    ret = tw__fabric_host_id(fab->host_id);
    if (ret) {
        /* Without a host id shm is never chosen for a remote peer; nothing
         * else depends on it. */
        memset(fab->host_id, 0, sizeof(fab->host_id));
    }

    ret = pthread_mutex_init(&fab->lock, NULL);
    if (ret) {
        ret = -ret;
        snprintf(err, errlen, "pthread_mutex_init: %s", strerror(-ret));
        goto out_free_fab;
    }
    ret = pthread_cond_init(&fab->done_cond, NULL);
    if (ret) {
        ret = -ret;
        snprintf(err, errlen, "pthread_cond_init: %s", strerror(-ret));
        goto out_destroy_lock;
    }
    fab->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fab->event_fd < 0) {
        ret = -errno;
        snprintf(err, errlen, "eventfd: %s", strerror(-ret));
        goto out_destroy_cond;
    }
    fab->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fab->wake_fd < 0) {
        ret = -errno;
        snprintf(err, errlen, "eventfd: %s", strerror(-ret));
        goto out_close_event_fd;
    }

    ret = tw__fabric_rails_open(fab, cfg, err, errlen);
    if (ret)
        goto out_close_wake_fd;

    if (cfg->threaded) {
        ret = tw__fabric_watchdog_start(fab);
        if (ret) {
            snprintf(err, errlen, "watchdog thread: %s", strerror(-ret));
            goto out_close_rails;
        }
        ret = tw__fabric_mover_start(fab);
        if (ret) {
            fab->threaded = 0;
            snprintf(err, errlen, "data mover thread: %s", strerror(-ret));
            goto out_stop_watchdog;
        }
    }
    *out = fab;
    return 0;

out_stop_watchdog:
    tw__fabric_watchdog_stop(fab);
out_close_rails:
    for (unsigned i = 0; i < fab->nrails; i++)
        tw__fabric_rail_close(&fab->rails[i]);
out_close_wake_fd:
    close(fab->wake_fd);
out_close_event_fd:
    close(fab->event_fd);
out_destroy_cond:
    pthread_cond_destroy(&fab->done_cond);
out_destroy_lock:
    pthread_mutex_destroy(&fab->lock);
out_free_fab:
    free(fab);
    return ret;
}

void tw__fabric_close(struct tw_fabric *fab)
{
    if (!fab)
        return;
    /* The mover first, while the watchdog can still free it from a wedged
     * call; then the watchdog. */
    tw__fabric_mover_stop(fab);
    tw__fabric_watchdog_stop(fab);
    tw__fabric_lock(fab);
    fab->closing = 1;
    if (!fab->abandoned) {
        /* Every thread that was inside a wedged call came back: those
         * rails close like the others (registrations, addresses, rail). */
        for (unsigned i = 0; i < fab->nrails; i++)
            __atomic_store_n(&fab->rails[i].wedged, 0, __ATOMIC_RELEASE);
    }
    /* Transfers first (they reference peers and registrations), then
     * registrations (keys revoked), then peers; rails last. */
    tw__fabric_xfers_abort_locked(fab);
    tw__fabric_xfers_mark_unsafe_locked(fab);
    unsigned kept = tw__fabric_xfers_keep_rails_locked(fab);
    tw__fabric_mrs_close_locked(fab);
    tw__fabric_peers_close_locked(fab);
    pthread_mutex_unlock(&fab->lock);
    for (unsigned i = 0; i < fab->nrails; i++)
        tw__fabric_rail_close(&fab->rails[i]);
    /* Rails closed: providers hold no more op contexts and touch no more
     * memory; hand released buffers back and free what is left. */
    tw__fabric_mrs_idle_run(fab);
    /* A kept rail's provider still holds op contexts inside these
     * transfers: they stay, with the plane (below). */
    while (!kept && !link_empty(&fab->zombies)) {
        struct tw_fabric_xfer *x = TW_CONTAINER_OF(fab->zombies.next, struct tw_fabric_xfer, node);
        link_del(&x->node);
        free(x);
    }
    while (!kept && !link_empty(&fab->done)) {
        struct tw_fabric_xfer *x = TW_CONTAINER_OF(fab->done.next, struct tw_fabric_xfer, node);
        link_del(&x->node);
        free(x);
    }
    close(fab->wake_fd);
    close(fab->event_fd);
    tw__fabric_lock(fab);
    unsigned abandoned = fab->abandoned;
    pthread_mutex_unlock(&fab->lock);
    if (abandoned || kept) {
        /* A thread is still inside a libfabric call on a wedged rail and
         * would retake fab->lock if that call ever returned, or a kept
         * rail's provider still holds op contexts pointing into the
         * transfers on fab->zombies: the plane object (a few KiB), those
         * transfers and the rail stay allocated for it,
         * on a list that keeps them reachable (they are kept on purpose,
         * not lost: leak checkers stay quiet). */
        pthread_mutex_lock(&kept_lock);
        fab->kept_next = kept_planes;
        kept_planes = fab;
        kept_nplanes++;
        pthread_mutex_unlock(&kept_lock);
        return;
    }
    pthread_cond_destroy(&fab->done_cond);
    pthread_mutex_destroy(&fab->lock);
    free(fab);
}

unsigned tw__fabric_rail_slots(struct tw_fabric *fab)
{
    /* Without the lock (asked per registration): slots only grow, and a
     * slot is filled before the count that covers it is stored. */
    return __atomic_load_n(&fab->nrails, __ATOMIC_ACQUIRE);
}

void tw__fabric_rail_status(struct tw_fabric *fab, unsigned rail, char *buf, size_t len)
{
    tw__fabric_lock(fab);
    const struct tw_fabric_rail *r = rail < fab->nrails ? &fab->rails[rail] : NULL;
    if (!r || !r->info)
        snprintf(buf, len, "slot %u: closed", rail);
    else if (r->retired)
        snprintf(buf, len, "%s: %s: %s", r->addr.provider,
                 tw__fabric_rail_wedged(r) ? "wedged" : "retired", r->retire_why);
    else
        snprintf(buf, len, "%s: in use", r->addr.provider);
    pthread_mutex_unlock(&fab->lock);
}

uint32_t tw__fabric_retired_rails(struct tw_fabric *fab)
{
    uint32_t mask = 0;
    tw__fabric_lock(fab);
    for (unsigned i = 0; i < fab->nrails; i++)
        if (fab->rails[i].info && fab->rails[i].retired)
            mask |= 1u << i;
    pthread_mutex_unlock(&fab->lock);
    return mask;
}

const char *tw__fabric_errmsg(const struct tw_fabric *fab)
{
    return fab->errmsg;
}

const char *tw__fabric_describe(const struct tw_fabric *fab)
{
    return fab->describe;
}

int tw__fabric_event_fd(const struct tw_fabric *fab)
{
    return fab->event_fd;
}

void tw__fabric_stats(struct tw_fabric *fab, struct tw_fabric_stats *st)
{
    tw__fabric_lock(fab);
    *st = fab->st;
    uint64_t now_reads = __atomic_load_n(&fab->now_reads, __ATOMIC_RELAXED);
    st->xfers_done += now_reads;
    st->cma_reads += now_reads;
    st->reads_now = now_reads;
    st->bytes += __atomic_load_n(&fab->now_bytes, __ATOMIC_RELAXED);
    st->xfers_active = 0;
    for (struct tw_fabric_link *l = fab->active.next; l != &fab->active; l = l->next)
        st->xfers_active++;
    st->mrs_open = 0;
    for (struct tw_fabric_link *l = fab->mrs.next; l != &fab->mrs; l = l->next)
        st->mrs_open++;
    st->stuck_ops = 0;
    for (unsigned i = 0; i < fab->nrails; i++)
        st->stuck_ops += fab->rails[i].stuck_ops;
    st->peers = 0;
    for (struct tw_fabric_link *l = fab->peers.next; l != &fab->peers; l = l->next)
        st->peers++;
    pthread_mutex_unlock(&fab->lock);
}

void tw__fabric_pause(struct tw_fabric *fab, int paused)
{
    tw__fabric_lock(fab);
    fab->paused = paused;
    pthread_mutex_unlock(&fab->lock);
    tw__fabric_mover_wake(fab);
    if (!paused)
        return;
    /* Return only once no progress round is under way: a round drops the
     * lock inside libfabric calls, so one that began before the flag was
     * set could still serve a peer's read posted after this returned (seen
     * under load: a pull the paused peer should not have answered
     * completed). Asleep, the mover looks at the flag before its next
     * round. Bounded: 2 s. */
    uint64_t until = tw__now_ns() + 2000000000ull;
    tw__fabric_lock(fab);
    while (fab->mover_running && !fab->mover_asleep && tw__now_ns() < until) {
        pthread_mutex_unlock(&fab->lock);
        usleep(200);
        tw__fabric_lock(fab);
    }
    pthread_mutex_unlock(&fab->lock);
}
