/*
 * Address exchange (RDMA_ENDPOINT): host id, our addresses in preference
 * order, choosing a peer's offered entry, and peers in the address vectors.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/file.h"
#include "fabric/fabric_int.h"

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int tw__fabric_host_id_from(const char *path, uint8_t out[TW_HOST_ID_LEN])
{
    char buf[64];
    ssize_t n = tw__read_small_file(path, buf, sizeof(buf));
    if (n < 0)
        return (int)n;
    size_t got = (size_t)n;
    /* 8-4-4-4-12 hex digits; dashes only at those places. */
    unsigned nib = 0;
    for (size_t i = 0; i < got && nib < 2 * TW_HOST_ID_LEN; i++) {
        if (buf[i] == '-' && (nib == 8 || nib == 12 || nib == 16 || nib == 20))
            continue;
        int v = hexval(buf[i]);
        if (v < 0)
            return TW_EBAD_FIELD;
        if (nib % 2 == 0)
            out[nib / 2] = (uint8_t)(v << 4);
        else
            out[nib / 2] |= (uint8_t)v;
        nib++;
    }
    return nib == 2 * TW_HOST_ID_LEN ? 0 : TW_EBAD_FIELD;
}

int tw__fabric_host_id(uint8_t out[TW_HOST_ID_LEN])
{
    return tw__fabric_host_id_from("/proc/sys/kernel/random/boot_id", out);
}

unsigned tw__fabric_local_addrs(const struct tw_fabric *fab, const struct tw_fabric_addr **addrs)
{
    /* fab->addrs: the usable rails in preference order, rebuilt when a
     * rail is replaced (wedge.c). */
    *addrs = fab->addrs;
    return fab->naddrs;
}

void tw__fabric_addr_view(const struct tw_fabric_addr *a, struct tw_fabric_entry *v)
{
    v->provider.ptr = (const uint8_t *)a->provider;
    v->provider.len = (uint32_t)strlen(a->provider);
    v->addr_format = a->addr_format;
    v->addr.ptr = a->addr;
    v->addr.len = a->addr_len;
}

/* "fi_shm://tw_<pid>_<n>" (our own naming, rail.c) -> pid, else 0. */
static int shm_peer_pid(const uint8_t *addr, size_t len)
{
    static const char prefix[] = "fi_shm://tw_";
    size_t n = sizeof(prefix) - 1;
    if (len <= n || memcmp(addr, prefix, n) != 0)
        return 0;
    long pid = 0;
    for (size_t i = n; i < len && addr[i] >= '0' && addr[i] <= '9'; i++) {
        pid = pid * 10 + (addr[i] - '0');
        if (pid > 1 << 22)
            return 0;
    }
    return (int)pid;
}

/*
 * Whether a shm peer's process has exited. Why we look: shm 1.17 enqueues a
 * command into the peer's own shared region under a spin lock that lives
 * there; a peer killed while holding it makes every later fi_read/fi_write
 * to it spin forever inside libfabric (seen in test_fabric_fork_shm). We
 * cannot interrupt that, so we stop posting to a peer once its process is
 * gone (checked before every post) or a zombie (checked at most once a
 * millisecond), and hold posts while it is stopped (SIGSTOP: it may be
 * frozen holding that lock). A death or stop racing with a post can still
 * hang that post: see docs/testing.md.
 */
int tw__fabric_peer_gone(struct tw_fabric_peer *p, uint64_t now)
{
    if (p->pid <= 0)
        return 0;
    /* Every post: a vanished process (ESRCH) costs one cheap syscall. */
    if (kill(p->pid, 0) < 0 && errno == ESRCH)
        return 1;
    /* A zombie (exited, not yet reaped by its parent) still exists for
     * kill(): look at its state, at most once a millisecond (now == 0:
     * look now). */
    if (now && now - p->alive_checked_ns < 1000000ull)
        return 0;
    p->alive_checked_ns = now;
    p->stopped = 0;
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", p->pid);
    ssize_t n = tw__read_small_file(path, buf, sizeof(buf));
    if (n == -ENOENT)
        return 1;
    if (n <= 0)
        return 0;
    /* "pid (comm) S ppid pgrp session tty_nr tpgid flags ...": the state
     * follows the last ')'. */
    const char *rp = strrchr(buf, ')');
    if (!rp || rp[1] != ' ')
        return 0;
    if (rp[2] == 'Z' || rp[2] == 'X')
        return 1;
    /* Killed but still tearing down its memory (state R or D for a few
     * milliseconds): PF_EXITING (0x4) in flags. Posting now could catch it
     * holding its region lock for good. */
    const char *f = rp + 2;
    for (int field = 0; field < 6 && f; field++) {
        f = strchr(f, ' ');
        if (f)
            f++;
    }
    if (f && (strtoul(f, NULL, 10) & 0x4u))
        return 1;
    /* Stopped (SIGSTOP, debugger): it may hold its region lock; do not
     * post now and re-check next time (the deadline still runs). */
    p->stopped = rp[2] == 'T' || rp[2] == 't';
    return 0;
}

static int insert_locked(struct tw_fabric_rail *r, uint32_t addr_format, const void *addr,
                         size_t addr_len, struct tw_fabric_peer **out)
{
    struct tw_fabric *fab = r->fab;
    if (addr_format != r->addr.addr_format)
        return tw__fabric_fail(fab, TW_ENOFABRIC, "%s: address format %u, expected %u",
                               r->addr.provider, addr_format, r->addr.addr_format);
    if (addr_len == 0 || addr_len > TW_MAX_FABRIC_ADDR_LEN)
        return tw__fabric_fail(fab, TW_ENOFABRIC, "%s: address length %zu", r->addr.provider,
                               addr_len);
    struct tw_fabric_peer *p = calloc(1, sizeof(*p));
    if (!p)
        return tw__fabric_fail(fab, -ENOMEM, "out of memory");
    memcpy(p->addr, addr, addr_len);
    p->addr_len = addr_len;
    p->addr_format = addr_format;
    p->rail = r;
    p->refs = 1;
    p->pid = r->is_shm ? shm_peer_pid(p->addr, p->addr_len) : 0;
    int ret = tw__fabric_io_lock(r);
    if (ret == 0) {
        ret = fi_av_insert(r->av, p->addr, 1, &p->fi_addr, 0, NULL);
        tw__fabric_io_unlock(r);
    }
    if (ret != 1) {
        free(p);
        ret = ret < 0 ? ret : -EADDRNOTAVAIL;
        return tw__fabric_fail(fab, ret, "%s: fi_av_insert: %s", r->addr.provider,
                               fi_strerror(-ret));
    }
    link_add_tail(&fab->peers, &p->node);
    *out = p;
    return 0;
}

int tw__fabric_peer_insert(struct tw_fabric *fab, const char *provider, uint32_t addr_format,
                           const void *addr, size_t addr_len, struct tw_fabric_peer **peer)
{
    tw__fabric_lock(fab);
    struct tw_fabric_rail *r =
        tw__fabric_rail_by_name(fab, (const uint8_t *)provider, strlen(provider));
    int ret = r ? insert_locked(r, addr_format, addr, addr_len, peer)
                : tw__fabric_fail(fab, TW_ENOFABRIC, "no rail for provider \"%s\" (%s)", provider,
                                  fab->describe);
    pthread_mutex_unlock(&fab->lock);
    return ret;
}

int tw__fabric_peer_insert_entry(struct tw_fabric *fab, const struct tw_fabric_entry *e,
                                 struct tw_fabric_peer **peer)
{
    tw__fabric_lock(fab);
    struct tw_fabric_rail *r = tw__fabric_rail_by_name(fab, e->provider.ptr, e->provider.len);
    int ret = r ? insert_locked(r, e->addr_format, e->addr.ptr, e->addr.len, peer)
                : tw__fabric_fail(fab, TW_ENOFABRIC, "no rail for provider \"%.*s\" (%s)",
                                  (int)(e->provider.len > 64 ? 64 : e->provider.len),
                                  (const char *)e->provider.ptr, fab->describe);
    pthread_mutex_unlock(&fab->lock);
    return ret;
}

void tw__fabric_plane_host_id(const struct tw_fabric *fab, uint8_t out[TW_HOST_ID_LEN])
{
    memcpy(out, fab->host_id, TW_HOST_ID_LEN);
}

/* How long an offer waits for the replacement of a rail that the watchdog
 * is declaring wedged. The watchdog opens the replacement right after it
 * retires the rail (wedge.c), so this is normally a few milliseconds; the
 * bound keeps a failed reopen from stalling the caller. */
#define REPLACEMENT_WAIT_NS (250ull * 1000 * 1000)

/* Rail r refused a control call because it is being declared wedged (its
 * io mutex gives up with -ECONNABORTED before the watchdog retires it).
 * Waits, without fab->lock, for a usable rail of the same provider to
 * take its place and returns it (lock held again), or NULL. */
static struct tw_fabric_rail *replacement_locked(struct tw_fabric *fab, struct tw_fabric_rail *r,
                                                 const struct tw_fabric_entry *e)
{
    if (!tw__fabric_rail_wedged(r) || !fab->threaded)
        return NULL;
    uint64_t start = tw__now_ns();
    while (tw__now_ns() - start < REPLACEMENT_WAIT_NS) {
        pthread_mutex_unlock(&fab->lock);
        usleep(2000);
        tw__fabric_lock(fab);
        struct tw_fabric_rail *n = tw__fabric_rail_by_name(fab, e->provider.ptr, e->provider.len);
        if (n && n != r && !tw__fabric_rail_wedged(n))
            return n;
    }
    return NULL;
}

int tw__fabric_accept_offer(struct tw_fabric *fab, const uint8_t peer_host_id[TW_HOST_ID_LEN],
                            const struct tw_fabric_entry *entries, unsigned count,
                            struct tw_fabric_peer **peer, const struct tw_fabric_addr **ours,
                            char *reason, size_t reasonlen)
{
    char why[TW_MAX_REASON_LEN + 1] = "";
    size_t used = 0;
    int ret = TW_ENOFABRIC;
    tw__fabric_lock(fab);
    for (unsigned i = 0; i < count && i < TW_FABRIC_MAX_RAILS; i++) {
        const struct tw_fabric_entry *e = &entries[i];
        struct tw_fabric_rail *r = tw__fabric_rail_by_name(fab, e->provider.ptr, e->provider.len);
        const char *skip = NULL;
        if (!r)
            skip = "not offered here (or retired without replacement)";
        else if (r->is_shm && memcmp(peer_host_id, fab->host_id, TW_HOST_ID_LEN) != 0)
            skip = "other host";
        else if (e->addr_format != r->addr.addr_format)
            skip = "address format";
        else {
            ret = insert_locked(r, e->addr_format, e->addr.ptr, e->addr.len, peer);
            /* A rail being declared wedged refuses; its replacement may
             * take the peer a moment later. */
            if (ret == -ECONNABORTED && (r = replacement_locked(fab, r, e)) != NULL)
                ret = insert_locked(r, e->addr_format, e->addr.ptr, e->addr.len, peer);
            if (ret)
                skip = fab->errmsg; /* "PROV: fi_av_insert: <libfabric's reason>" */
        }
        if (!skip) {
            *ours = &r->addr;
            pthread_mutex_unlock(&fab->lock);
            if (reason && reasonlen)
                reason[0] = '\0';
            return 0;
        }
        int n = snprintf(why + used, sizeof(why) - used, "%s%.*s: %s", used ? "; " : "",
                         (int)(e->provider.len > 32 ? 32 : e->provider.len),
                         (const char *)e->provider.ptr, skip);
        if (n > 0 && (size_t)n < sizeof(why) - used)
            used += (size_t)n;
        ret = TW_ENOFABRIC;
    }
    if (count == 0)
        snprintf(why, sizeof(why), "no entries offered");
    pthread_mutex_unlock(&fab->lock);
    if (reason && reasonlen)
        snprintf(reason, reasonlen < sizeof(why) ? reasonlen : sizeof(why), "%s", why);
    tw__fabric_fail(fab, ret, "no offered data plane usable: %s", why);
    return ret;
}

int tw__fabric_peer_usable(struct tw_fabric_peer *peer, char *why, size_t whylen)
{
    /* Asked for every request by both ends (the path decision): usable
     * is answered without the plane's lock; only the reason takes it. */
    if (!__atomic_load_n(&peer->rail->retired, __ATOMIC_ACQUIRE) &&
        !__atomic_load_n(&peer->removed, __ATOMIC_ACQUIRE))
        return 1;
    struct tw_fabric *fab = peer->rail->fab;
    tw__fabric_lock(fab);
    int usable = !peer->rail->retired && !peer->removed;
    if (!usable && why && whylen)
        snprintf(why, whylen, "%s rail %s: %s", peer->rail->addr.provider,
                 tw__fabric_rail_wedged(peer->rail) ? "wedged" : "retired",
                 peer->removed ? "peer removed" : peer->rail->retire_why);
    pthread_mutex_unlock(&fab->lock);
    return usable;
}

const char *tw__fabric_peer_provider(const struct tw_fabric_peer *peer)
{
    return peer->rail->addr.provider;
}

unsigned tw__fabric_peer_rail(const struct tw_fabric_peer *peer)
{
    return (unsigned)(peer->rail - peer->rail->fab->rails);
}

void tw__fabric_peer_put_locked(struct tw_fabric_peer *p)
{
    if (--p->refs)
        return;
    struct tw_fabric_rail *r = p->rail;
    if (r->is_shm && tw__fabric_peer_gone(p, 0)) {
        /* A dead shm peer keeps its address slot. libfabric 1.17 shm does
         * not reset its per-slot connection state on removal: a peer that
         * died before answering our connection request leaves "name sent"
         * set, and the next peer given that slot is never connected (every
         * post: EAGAIN). Bounded: after TW_FABRIC_SHM_DEAD_SLOTS such slots
         * the rail is retired and replaced. */
        if (++r->dead_slots == TW_FABRIC_SHM_DEAD_SLOTS)
            tw__fabric_rail_retire_locked(r->fab, r, "%u address slots held by dead peers",
                                          r->dead_slots);
    } else if (tw__fabric_io_lock(r) == 0) {
        /* Not on a wedged rail (io_lock refuses): shm's removal unmaps the
         * peer's region, in which the stuck thread may be spinning. */
        fi_av_remove(r->av, &p->fi_addr, 1, 0);
        tw__fabric_io_unlock(r);
    }
    link_del(&p->node);
    free(p->cma_ranges); /* cma_extents lies in the same allocation */
    free(p);
    tw__fabric_rail_released_locked(r);
}

void tw__fabric_peer_remove(struct tw_fabric_peer *peer)
{
    if (!peer)
        return;
    struct tw_fabric *fab = peer->rail->fab;
    tw__fabric_lock(fab);
    __atomic_store_n(&peer->removed, 1, __ATOMIC_RELEASE);
    tw__fabric_xfer_fail_peer_locked(fab, peer, -ECONNABORTED, "peer removed");
    tw__fabric_peer_put_locked(peer);
    pthread_mutex_unlock(&fab->lock);
    tw__fabric_mover_wake(fab);
}

void tw__fabric_peers_close_locked(struct tw_fabric *fab)
{
    while (!link_empty(&fab->peers)) {
        struct tw_fabric_peer *p = TW_CONTAINER_OF(fab->peers.next, struct tw_fabric_peer, node);
        p->refs = 1;
        tw__fabric_peer_put_locked(p);
    }
}
