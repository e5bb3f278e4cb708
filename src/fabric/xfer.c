/*
 * The RMA engine: a transfer is cut into chunks of at most `chunk` bytes,
 * with up to `depth` fi_read/fi_write operations in flight; each completion
 * posts the next chunk. Completions and error completions are matched to
 * their operation through the fi_context2 at the start of each op slot.
 *
 * Stopping (deadline passed, error completion, cancel, peer removed): no
 * more posts; every outstanding op is fi_cancel()ed, and the transfer
 * completes as soon as all its ops have come back. Providers that cannot
 * cancel RMA (tcp;ofi_rxm ignores fi_cancel for it) keep ops of a peer that
 * stopped answering, so after drain_ns the transfer completes anyway with
 * buffer_busy set; its op slots and its reference on the local registration
 * are parked on fab->zombies until the ops drain (the late answer of a peer
 * that resumed does land in the buffer: tested) or the plane closes.
 *
 * Locking: a transfer's state changes under fab->lock; every data call
 * runs between call_begin() and call_end() with fab->lock dropped and the
 * rail's io mutex held, stamped for the watchdog (wedge.c). Only the
 * progressing thread posts, reads completions and cancels, so an op slot
 * reserved before a post cannot complete or be reused while the lock is
 * dropped; other threads only set flags (stop) or append to fab->active
 * while it is. If the watchdog gave
 * up on this thread meanwhile (generation changed), call_end() says so and
 * the thread leaves without touching anything.
 *
 * Reads by cross-memory attach (plane option cma_reads): on
 * an shm rail a read of host memory is not handed to libfabric but copied
 * by this thread with process_vm_readv() from the peer's process, inside
 * the same call window, and completes at once (cma_read() below).
 *
 * We tried removing and re-inserting the peer's address to flush such ops:
 * on tcp;ofi_rxm (1.17) it flushed nothing and made the next ~100 ms of
 * transfers to that peer fail with ENOTCONN, so the engine does not do it.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "fabric/fabric_int.h"

uint32_t tw__fabric_status_to_wire(int status)
{
    switch (status) {
    case 0:
        return 0;
    case TW_ETIMEDOUT:
        return TW_WIRE_TIMEOUT;
    case TW_ECANCELLED:
        return TW_WIRE_CANCELLED;
    case TW_ESHUTDOWN:
        return TW_WIRE_SHUTTING_DOWN;
    default:
        return TW_WIRE_INTERNAL;
    }
}

/*
 * What the progressing thread looks at. Each round used to walk every
 * active transfer, and a server's active transfers are every connection's
 * requests in flight, almost all of them waiting for an operation already
 * posted (2048 puts of 32 KiB over RDMA `tcp` in flight: the walk was 15-18%
 * of the server mover's samples, docs/performance.md). Now a round looks at
 * fab->ready only: transfers just submitted, those an operation of came
 * back, those stopped, and those that must look again next round (a post
 * refused, a stopped shm peer, a stopping one draining). Deadlines and
 * stalls need no event: every active transfer is looked at once per
 * TW_FABRIC_SWEEP_NS as well. Only the progressing thread takes transfers
 * off the list (as it alone unlinks them from fab->active).
 */

/* A node off every list links to itself (link_init, link_del). */
static int is_ready(const struct tw_fabric_xfer *x)
{
    return x->ready_node.next != &x->ready_node;
}

static void mark_ready(struct tw_fabric_xfer *x)
{
    if (!is_ready(x) && !x->finished)
        link_add_tail(&x->fab->ready, &x->ready_node);
}

static void unready(struct tw_fabric_xfer *x)
{
    link_del(&x->ready_node); /* a no-op on a node off every list */
}

static void stop(struct tw_fabric_xfer *x, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void stop(struct tw_fabric_xfer *x, int status, const char *fmt, ...)
{
    mark_ready(x);
    if (!x->stopping) {
        x->stopping = 1;
        x->stop_ns = tw__now_ns();
    }
    if (x->status == 0 && status != 0) {
        x->status = status;
        va_list ap;
        va_start(ap, fmt);
        tw__errbuf_vset(x->msg, sizeof(x->msg), fmt, ap);
        va_end(ap);
    }
}

/* Opens a window for data calls on rail r: stamps it for the watchdog
 * (call_seq odd), drops fab->lock and takes the rail's io mutex. Returns
 * the generation for call_end(). */
static unsigned call_begin(struct tw_fabric *fab, struct tw_fabric_rail *r)
{
    unsigned gen = fab->gen;
    unsigned rail = (unsigned)(r - fab->rails);
    void (*hook)(void *, unsigned) = fab->call_hook;
    void *arg = fab->call_hook_arg;
    __atomic_store_n(&fab->call_rail, rail, __ATOMIC_RELAXED);
    __atomic_store_n(&fab->call_gen, gen, __ATOMIC_RELAXED);
    __atomic_add_fetch(&fab->call_seq, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&fab->lock);
    tw__fabric_spin_lock(&r->io);
    if (hook)
        hook(arg, rail);
    return gen;
}

/* Closes it: releases io, retakes fab->lock, clears the stamp. Returns 0,
 * or -1 when this thread was abandoned meanwhile; then fab->lock is
 * released again and the caller must return at once. */
static int call_end(struct tw_fabric *fab, struct tw_fabric_rail *r, unsigned gen)
{
    pthread_mutex_unlock(&r->io);
    tw__fabric_relock(fab);
    if (gen != fab->gen) {
        /* The call came back after all; the plane may be freed once no
         * abandoned thread can return into it any more. */
        fab->abandoned--;
        pthread_mutex_unlock(&fab->lock);
        return -1;
    }
    __atomic_add_fetch(&fab->call_seq, 1, __ATOMIC_RELEASE);
    return 0;
}

static void append_msg(struct tw_fabric_xfer *x, const char *s)
{
    size_t used = strlen(x->msg);
    snprintf(x->msg + used, sizeof(x->msg) - used, "%s", s);
}

/* libfabric-specific codes (>= 256) are not errno values: keep the useful
 * one, fold the rest into EIO (the message keeps fi_strerror()). */
static int map_err(int fi_err)
{
    if (fi_err == FI_ENOKEY)
        return -EKEYREJECTED;
    if (fi_err == FI_ECANCELED)
        return -ECANCELED;
    if (fi_err <= 0 || fi_err >= FI_ERRNO_OFFSET)
        return -EIO;
    return -fi_err;
}

/* Drops the transfer's references once it finished and nothing is in
 * flight; frees it if its completion was consumed already. */
static void settle(struct tw_fabric_xfer *x)
{
    if (!x->finished || x->inflight)
        return;
    if (x->d.local) {
        tw__fabric_mr_put_locked(x->d.local);
        x->d.local = NULL;
    }
    if (x->d.peer) {
        tw__fabric_peer_put_locked(x->d.peer);
        x->d.peer = NULL;
    }
    if (x->popped) {
        link_del(&x->node); /* fab->zombies */
        free(x);
    }
}

static void finish(struct tw_fabric_xfer *x)
{
    struct tw_fabric *fab = x->fab;
    unready(x);
    link_del(&x->node); /* fab->active */
    x->finished = 1;
    if (x->status == 0) {
        fab->st.xfers_done++;
        fab->st.bytes += x->bytes_done;
    } else {
        fab->st.xfers_failed++;
    }
    if (x->sync)
        pthread_cond_broadcast(&fab->done_cond);
    else
        tw__fabric_done_push_locked(fab, x);
    settle(x);
}

static void op_done(struct tw_fabric_rma *op, int err, const char *msg)
{
    struct tw_fabric_xfer *x = op->xfer;
    op->busy = 0;
    x->inflight--;
    if (x->orphan_rail) {
        /* Answered after all (its stuck_ops count went with the orphan). */
        if (!x->inflight) {
            link_del(&x->node);
            free(x);
        }
        return;
    }
    if (x->finished)
        x->d.peer->rail->stuck_ops--; /* an abandoned op drained after all */
    if (err == 0) {
        x->bytes_done += op->len;
        x->progress_ns = tw__now_ns();
    } else {
        x->fab->st.ops_failed++;
        if (!(err == -ECANCELED && x->stopping))
            stop(x, err, "%s of %llu bytes at offset %llu failed: %s",
                 x->d.op == TW_FABRIC_PULL ? "read" : "write", (unsigned long long)op->len,
                 (unsigned long long)op->off, msg);
    }
    if (x->finished)
        settle(x);
    else
        mark_ready(x);
}

static int cancel_ops(struct tw_fabric_xfer *x)
{
    struct tw_fabric *fab = x->fab;
    struct tw_fabric_rail *r = x->d.peer->rail;
    x->cancel_sent = 1;
    /* Only this thread changes op slots: the busy flags stay put while the
     * lock is dropped. */
    unsigned gen = call_begin(fab, r);
    for (unsigned i = 0; i < x->depth; i++)
        if (x->ops[i].busy && !x->ops[i].joined) /* joined: others' bytes ride in it */
            fi_cancel(&r->ep->fid, &x->ops[i].ctx);
    return call_end(fab, r, gen);
}

/* After drain_ns a stopped transfer gives up on operations the provider
 * still holds. On shm that blocks the whole endpoint (responses are
 * consumed in order), so the rail is retired and replaced. */
static void abandon_ops(struct tw_fabric_xfer *x)
{
    struct tw_fabric_rail *r = x->d.peer->rail;
    char note[96];
    snprintf(note, sizeof(note), "; %u operations not cancellable, left to drain", x->inflight);
    append_msg(x, note);
    r->stuck_ops += x->inflight;
    if (r->is_shm)
        tw__fabric_rail_retire_locked(x->fab, r,
                                      "%u operations to peer %s%d were never answered; shm "
                                      "consumes answers in order, so every later one would wait",
                                      x->inflight, x->d.peer->pid ? "process " : "",
                                      x->d.peer->pid);
    finish(x);
}

/* shm 1.17 keeps per-slot connection state in its address vector: a peer
 * given the slot of one that went away before answering our connection
 * request is never connected, and every post to it returns EAGAIN (addr.c
 * keeps dead peers' slots for that reason; this catches the rest). Posts
 * refused for TW_FABRIC_SHM_REFUSED_NS with nothing of ours in flight to
 * that peer (no operation of any transfer) end the transfer and retire the
 * rail. Returns 1 if it did. Called with fab->lock held. */
static int refused_too_long(struct tw_fabric_xfer *x, uint64_t now)
{
    /* Another transfer's operations to the same peer fill the queue we
     * post into: that is back-pressure, not stale state (48 transfers to
     * one client on a busy machine were failed as stale before). */
    for (struct tw_fabric_link *l = x->fab->active.next; l != &x->fab->active; l = l->next) {
        const struct tw_fabric_xfer *o = TW_CONTAINER_OF(l, struct tw_fabric_xfer, node);
        if (o != x && o->d.peer == x->d.peer && o->inflight) {
            x->refused_since_ns = 0;
            return 0;
        }
    }
    if (!x->refused_since_ns) {
        x->refused_since_ns = now;
        return 0;
    }
    if (now - x->refused_since_ns < TW_FABRIC_SHM_REFUSED_NS)
        return 0;
    struct tw_fabric_rail *r = x->d.peer->rail;
    stop(x, -ECONNREFUSED,
         "shm posts to this peer refused for %llu ms with nothing in flight (stale "
         "connection state in the provider)",
         (unsigned long long)((now - x->refused_since_ns) / 1000000));
    tw__fabric_rail_retire_locked(x->fab, r, "posts to a peer were refused for good");
    return 1;
}

/* Checks deadline, stall and stop, then reserves every free slot with its
 * chunk (op->fresh; offsets ascend with the slot index). Returns 1 when
 * slots were reserved (post them with post_batch()), 0 when there is
 * nothing to post, or -1 when this thread was abandoned (lock not held). */
/* A round's answer to "has this shm peer's process gone?" (a kill() and,
 * once a millisecond, a /proc read): asked once per peer and round, not
 * once per transfer, when many small transfers go to one peer. Valid only
 * while no call window opened since (the lock was not dropped: peers
 * cannot have come or gone). */
struct peer_memo {
    const struct tw_fabric_peer *peer;
    uint64_t seq; /* fab->call_seq when asked */
    int gone;
};

static int peer_gone_memo(struct tw_fabric_peer *p, uint64_t now, struct peer_memo *memo)
{
    uint64_t seq = __atomic_load_n(&p->rail->fab->call_seq, __ATOMIC_RELAXED);
    if (memo->peer != p || memo->seq != seq) {
        memo->peer = p;
        memo->seq = seq;
        memo->gone = tw__fabric_peer_gone(p, now);
    }
    return memo->gone;
}

static int advance_reserve(struct tw_fabric_xfer *x, uint64_t now, struct peer_memo *memo)
{
    struct tw_fabric *fab = x->fab;
    if (!x->stopping && x->d.deadline_ns && now >= x->d.deadline_ns) {
        stop(x, TW_ETIMEDOUT,
             "deadline passed: %llu of %llu bytes moved, %u operations outstanding",
             (unsigned long long)x->bytes_done, (unsigned long long)x->d.length, x->inflight);
        if (x->d.peer->rail->is_shm && x->d.peer->rail->stuck_ops)
            append_msg(x, "; an earlier unanswered shm operation blocks this endpoint");
    }
    if (!x->progress_ns)
        x->progress_ns = now; /* first seen (tw__fabric_xfer_submit_locked) */
    if (!x->stopping && x->d.stall_ns && now > x->progress_ns &&
        now - x->progress_ns >= x->d.stall_ns)
        stop(x, TW_ETIMEDOUT,
             "no progress for %llu ms: %llu of %llu bytes moved, %u operations outstanding",
             (unsigned long long)((now - x->progress_ns) / 1000000),
             (unsigned long long)x->bytes_done, (unsigned long long)x->d.length, x->inflight);
    if (x->stopping) {
        mark_ready(x); /* until it finished: drain_ns runs */
        if (x->inflight == 0)
            finish(x);
        else if (!x->cancel_sent)
            return cancel_ops(x);
        else if (now - x->stop_ns >= fab->drain_ns)
            abandon_ops(x);
        return 0;
    }

    struct tw_fabric_peer *p = x->d.peer;
    if (x->next_off < x->d.length && x->inflight < x->depth) {
        if (peer_gone_memo(p, now, memo)) {
            stop(x, -ECONNRESET, "shm peer process %d has exited: %llu of %llu bytes moved", p->pid,
                 (unsigned long long)x->bytes_done, (unsigned long long)x->d.length);
            return 0;
        }
        if (p->stopped) {
            mark_ready(x); /* re-checked within a millisecond; the deadline runs on */
            return 0;
        }
    }
    unsigned nres = 0;
    for (unsigned i = 0; i < x->depth && x->next_off < x->d.length; i++) {
        struct tw_fabric_rma *op = &x->ops[i];
        if (op->busy)
            continue;
        uint64_t len = x->d.length - x->next_off;
        op->busy = 1;
        op->fresh = 1;
        op->off = x->next_off;
        op->len = len > x->chunk ? x->chunk : len;
        x->inflight++;
        x->next_off += op->len;
        nres++;
    }
    if (nres)
        return 1;
    if (x->next_off == x->d.length && x->inflight == 0)
        finish(x); /* 0 bytes, or the last operation already came back */
    return 0;
}

/* After post_batch(): counts what was posted, gives back the slots that
 * were not (the first of them is where the next round starts) and stops
 * the transfer on a post error other than a full queue. */
static void advance_settle(struct tw_fabric_xfer *x, uint64_t now)
{
    struct tw_fabric *fab = x->fab;
    unsigned posted = 0, left = 0;
    uint64_t off = UINT64_MAX;
    for (unsigned i = 0; i < x->depth; i++) {
        struct tw_fabric_rma *op = &x->ops[i];
        if (!op->busy || !op->fresh)
            continue;
        if (op->off < off)
            off = op->off;
        op->busy = 0;
        op->fresh = 0;
        x->inflight--;
        left++;
    }
    /* Posted ones had fresh cleared by post_batch(). */
    posted = x->post_posted;
    fab->st.ops_posted += posted;
    if (posted)
        x->refused_since_ns = 0;
    if (left) {
        mark_ready(x); /* its first unposted slot goes next round */
        x->next_off = off;
        if (x->post_ret == -FI_EAGAIN || x->post_ret == 0) {
            /* Provider queue full (here or for an earlier transfer of this
             * round): progress first. */
            if (x->inflight == 0 && x->d.peer->rail->is_shm)
                (void)refused_too_long(x, now);
        } else {
            stop(x, map_err((int)-x->post_ret), "%s at offset %llu: %s",
                 x->d.op == TW_FABRIC_PULL ? "fi_read" : "fi_write", (unsigned long long)off,
                 fi_strerror((int)-x->post_ret));
        }
        return;
    }
    if (x->next_off == x->d.length && x->inflight == 0 && !x->stopping)
        finish(x);
}

/*
 * Reads on shm by cross-memory attach, outside libfabric.
 *
 * libfabric's shm (1.17) serves a read through its bounce buffers (SAR),
 * one read per peer at a time: its protocol choice for reads tests the
 * constant FI_HMEM_SYSTEM (0) instead of the buffer's interface, so it
 * never picks cross-memory attach, and a second read to the same peer is
 * refused (FI_EAGAIN) until the first ends. On the H200 host 32 KiB gets,
 * 64 in flight, ran at 39-44k ops/s, and the mover spent its rounds in
 * refused posts (3 per posted read). Its own fast path (a read posted
 * without FI_DELIVERY_COMPLETE: the reader copies with process_vm_readv)
 * does the copy while holding the spin lock of the TARGET's shared region:
 * a reader killed during a copy leaves that lock held for good, and every
 * client's post into the server's region, and the server's own progress,
 * spin forever (test_client_killed wedged the server in its first get
 * round that way). A push get instead makes the server the writer into a
 * client's region, the direction in which dead clients wedged the server
 * before (docs/testing.md).
 *
 * So the reader copies by itself: process_vm_readv() from the peer's
 * process at the region's virtual address (FI_MR_VIRT_ADDR), taking no
 * lock anywhere; a reader that dies mid-copy leaves nothing behind (H200:
 * 32 KiB gets 132-151k ops/s, docs/performance.md). The key is not checked
 * by anyone: a process allowed to attach to the peer (same user, ptrace
 * rules) could read that memory without libfabric anyway, and the
 * protocol's keys stay live for our reads until our RDMA_DONE
 * (docs/protocol.md §10). Used only where the plane asked for it
 * (cma_reads), on shm rails, for host memory on our side, for a peer whose
 * process id was verified: the pid in the peer's shm name (addr.c) must be
 * the process that maps that name's region (its /proc/PID/maps names
 * /dev/shm/NAME), so a peer in another pid namespace, or a stale name,
 * reads through libfabric instead. EPERM (attach not allowed) does the
 * same from then on. A range the peer's process cannot give that way
 * (EFAULT: GPU memory a GPUDirect source registered, whose virtual
 * addresses the CPU cannot touch, or an address outside any mapping) goes
 * to libfabric for the rest of that transfer, as every read did before;
 * other errors (the process is gone) fail the operation.
 *
 * Writes stay with libfabric (with FI_DELIVERY_COMPLETE the target's
 * progress copies them, also by cross-memory attach, without a lock held
 * by us meanwhile): copying them here too put all of a put's copying on
 * this one thread, and 32 KiB puts over shm on the H200 fell from 66k to
 * 52-54k ops/s (docs/performance.md).
 */
static int cma_peer_ok(struct tw_fabric_peer *p)
{
    int known = __atomic_load_n(&p->cma, __ATOMIC_ACQUIRE);
    if (known)
        return known > 0;
    int ok = 0;
    static const char prefix[] = "fi_shm://";
    size_t np = sizeof(prefix) - 1;
    FILE *f = NULL;
    if (p->pid > 0 && p->addr_len > np && memcmp(p->addr, prefix, np) == 0) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/maps", p->pid);
        f = fopen(path, "re");
    }
    if (f) {
        char want[TW_MAX_FABRIC_ADDR_LEN + 16];
        size_t nlen = strnlen((const char *)p->addr + np, p->addr_len - np);
        int wlen =
            snprintf(want, sizeof(want), "/dev/shm/%.*s", (int)nlen, (const char *)p->addr + np);
        char *line = NULL;
        size_t cap = 0;
        ssize_t len;
        while (!ok && (len = getline(&line, &cap, f)) > 0) {
            if (line[len - 1] == '\n')
                line[--len] = '\0';
            ok = len >= wlen && strcmp(line + len - wlen, want) == 0;
        }
        free(line);
        fclose(f);
    }
    __atomic_store_n(&p->cma, ok ? 1 : -1, __ATOMIC_RELEASE);
    return ok;
}

/* One range of len bytes at raddr in peer p's process into buf, by one
 * process_vm_readv() (see above). Returns 0 when copied, CMA_NO_PEER when
 * the peer's process may not be read that way (EPERM, ENOSYS), CMA_NO_RANGE
 * when this range cannot be (EFAULT, or short: GPU memory, not mapped), or
 * a negative errno for the operation (the process is gone). */
enum { CMA_NO_PEER = 1, CMA_NO_RANGE = 2 };
static void cma_proved(struct tw_fabric_peer *p)
{
    if (!__atomic_load_n(&p->cma_proven, __ATOMIC_RELAXED))
        __atomic_store_n(&p->cma_proven, 1, __ATOMIC_RELEASE);
}

static int cma_copy(struct tw_fabric_peer *p, void *buf, uint64_t raddr, uint64_t len)
{
    struct iovec local = {.iov_base = buf, .iov_len = len};
    struct iovec remote = {.iov_base = (void *)(uintptr_t)raddr, .iov_len = len};
    ssize_t got = process_vm_readv(p->pid, &local, 1, &remote, 1, 0);
    if (got == (ssize_t)len) {
        cma_proved(p);
        return 0;
    }
    if (got < 0 && (errno == EPERM || errno == ENOSYS))
        return CMA_NO_PEER;
    if (got >= 0 || errno == EFAULT)
        return CMA_NO_RANGE;
    return -errno;
}

/* Copies op's chunk of transfer x from the peer's process. Returns 0, a
 * negative errno for the operation, or 1 when it cannot be read that way
 * (post it to libfabric; the peer, or the rest of this transfer, is then
 * read through libfabric from now on). */
static int cma_read(struct tw_fabric_xfer *x, const struct tw_fabric_rma *op, void *buf,
                    uint64_t raddr)
{
    struct tw_fabric_peer *p = x->d.peer;
    int rc = cma_copy(p, buf, raddr, op->len);
    if (rc == CMA_NO_PEER)
        __atomic_store_n(&p->cma, -1, __ATOMIC_RELEASE);
    else if (rc == CMA_NO_RANGE)
        x->no_cma = 1;
    return rc > 0 ? 1 : rc;
}

/* Whether plane fab copies reads on rail r by cross-memory attach at all:
 * it was opened with cma_reads, r is shm with virtual addresses. */
static int cma_rail(const struct tw_fabric *fab, const struct tw_fabric_rail *r)
{
    return fab->cma_reads && r->is_shm && (r->mr_mode & FI_MR_VIRT_ADDR);
}

/* Whether this plane copies reads from peer p by cross-memory attach (the
 * plane's cma_reads, an shm rail with virtual addresses, the peer's process
 * verified), for callers outside the mover. The peer's verdict is read
 * without fab->lock once known (the caller's loop must not wait behind a
 * mover round for it); the first check takes the lock like the mover's. */
static int cma_peer_usable(struct tw_fabric_peer *p)
{
    struct tw_fabric_rail *r = p->rail;
    struct tw_fabric *fab = r->fab;
    if (!cma_rail(fab, r))
        return 0;
    int known = __atomic_load_n(&p->cma, __ATOMIC_ACQUIRE);
    if (!known) {
        tw__fabric_lock(fab);
        known = cma_peer_ok(p) ? 1 : -1;
        pthread_mutex_unlock(&fab->lock);
    }
    return known > 0;
}

/* A set of cma_ranges or cma_extents: a page or chunk number, mixed (a
 * multiplicative hash alone put a client's buffers, 72 pages apart, into
 * two sets). */
static unsigned cma_set_of(uint64_t x)
{
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    x *= UINT64_C(0xc4ceb9fe1a85ec53);
    x ^= x >> 33;
    return (unsigned)(x >> (64 - TW_FABRIC_CMA_RANGE_BITS));
}

static struct tw_fabric_cma_set *cma_range_set(struct tw_fabric_peer *p, uint64_t addr)
{
    return &p->cma_ranges[cma_set_of(addr >> 12)];
}

static struct tw_fabric_cma_set *cma_extent_set(struct tw_fabric_peer *p, uint64_t addr)
{
    return &p->cma_extents[cma_set_of(addr >> TW_FABRIC_CMA_CHUNK_SHIFT)];
}

/* Whether [addr, end) lies in one chunk (an extent may hold it). */
static int cma_one_chunk(uint64_t addr, uint64_t end)
{
    return addr >> TW_FABRIC_CMA_CHUNK_SHIFT == (end - 1) >> TW_FABRIC_CMA_CHUNK_SHIFT;
}

static int cma_remembered(struct tw_fabric_peer *p, uint64_t addr, uint64_t end)
{
    if (!p->cma_ranges)
        return 0;
    const struct tw_fabric_cma_set *set = cma_range_set(p, addr);
    for (unsigned w = 0; w < TW_FABRIC_CMA_WAYS; w++)
        if (set->lo[w] == addr && end <= set->hi[w])
            return 1;
    if (!cma_one_chunk(addr, end))
        return 0;
    set = cma_extent_set(p, addr);
    for (unsigned w = 0; w < TW_FABRIC_CMA_WAYS; w++)
        if (set->lo[w] <= addr && end <= set->hi[w])
            return 1; /* an empty way (lo == hi) holds no non-empty range */
    return 0;
}

/* Puts [lo, hi) in set's oldest way. */
static void cma_set_replace(struct tw_fabric_cma_set *set, uint64_t lo, uint64_t hi)
{
    unsigned w = set->next;
    set->lo[w] = lo;
    set->hi[w] = hi;
    set->next = (uint8_t)((w + 1) % TW_FABRIC_CMA_WAYS);
}

/* Remembers [addr, end), found readable: as a range, and in its chunk's
 * extent that it touches or overlaps (grown to the union), else as a new
 * extent. */
static void cma_remember(struct tw_fabric_peer *p, uint64_t addr, uint64_t end)
{
    if (!p->cma_ranges) {
        p->cma_ranges = calloc(2u << TW_FABRIC_CMA_RANGE_BITS, sizeof(*p->cma_ranges));
        if (!p->cma_ranges)
            return; /* not remembered */
        p->cma_extents = p->cma_ranges + (1u << TW_FABRIC_CMA_RANGE_BITS);
    }
    cma_set_replace(cma_range_set(p, addr), addr, end);
    if (!cma_one_chunk(addr, end))
        return;
    const uint64_t chunk = addr >> TW_FABRIC_CMA_CHUNK_SHIFT;
    struct tw_fabric_cma_set *set = cma_extent_set(p, addr);
    for (unsigned w = 0; w < TW_FABRIC_CMA_WAYS; w++) {
        if (set->lo[w] == set->hi[w] || set->lo[w] >> TW_FABRIC_CMA_CHUNK_SHIFT != chunk ||
            set->lo[w] > end || addr > set->hi[w])
            continue;
        if (addr < set->lo[w])
            set->lo[w] = addr;
        if (end > set->hi[w])
            set->hi[w] = end;
        return;
    }
    cma_set_replace(set, addr, end);
}

int tw__fabric_peer_cma_readable(struct tw_fabric_peer *p, uint64_t addr, uint64_t len)
{
    if (addr + len < addr || !cma_peer_usable(p))
        return 0;
    if (!len)
        return 1; /* nothing to read */
    if (cma_remembered(p, addr, addr + len))
        return 1; /* read there before: no system call */
    uint8_t b[2];
    struct iovec local[2] = {{.iov_base = &b[0], .iov_len = 1}, {.iov_base = &b[1], .iov_len = 1}};
    struct iovec remote[2] = {{.iov_base = (void *)(uintptr_t)addr, .iov_len = 1},
                              {.iov_base = (void *)(uintptr_t)(addr + len - 1), .iov_len = 1}};
    if (process_vm_readv(p->pid, local, 2, remote, 2, 0) != 2)
        return 0;
    cma_remember(p, addr, addr + len);
    return 1;
}

void tw__fabric_peer_cma_forget(struct tw_fabric_peer *p, uint64_t addr)
{
    if (!p->cma_ranges)
        return;
    struct tw_fabric_cma_set *set = cma_range_set(p, addr);
    for (unsigned w = 0; w < TW_FABRIC_CMA_WAYS; w++)
        if (set->lo[w] == addr)
            set->lo[w] = set->hi[w] = 0;
    set = cma_extent_set(p, addr);
    for (unsigned w = 0; w < TW_FABRIC_CMA_WAYS; w++)
        if (set->lo[w] <= addr && addr < set->hi[w])
            set->lo[w] = set->hi[w] = 0;
}

int tw__fabric_peer_read_now(struct tw_fabric_peer *p, void *buf, uint64_t len,
                             const struct tw_fabric_rkey *remote, uint64_t cookie,
                             struct tw_fabric_completion *c)
{
    struct tw_fabric *fab = p->rail->fab;
    /* The mover's conditions (cma_eligible) on what the caller owns: the
     * peer and its rail do not change while the caller holds the peer. */
    if (len > TW_FABRIC_READ_NOW_MAX || len > remote->length || !cma_peer_usable(p))
        return 0;
    memset(c, 0, sizeof(*c));
    c->cookie = cookie;
    int rc = len ? cma_copy(p, buf, remote->remote_addr, len) : 0;
    if (rc > 0)
        return 0; /* the mover's cma_read hands it to libfabric */
    if (rc < 0) {
        c->status = rc;
        snprintf(c->msg, sizeof(c->msg), "process_vm_readv from process %d: %s", p->pid,
                 strerror(-rc));
        return 1;
    }
    c->bytes = len;
    __atomic_fetch_add(&fab->now_reads, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&fab->now_bytes, len, __ATOMIC_RELAXED);
    return 1;
}

int tw__fabric_peer_attach_reads(struct tw_fabric_peer *p)
{
    return cma_peer_usable(p) && __atomic_load_n(&p->cma_proven, __ATOMIC_ACQUIRE);
}

static int cma_eligible(struct tw_fabric_xfer *x, const struct tw_fabric_rail *r)
{
    if (x->d.attach_only && !x->no_cma)
        return 1; /* copied that way, or failed if the peer refuses (cma_single) */
    return cma_rail(x->fab, r) && !x->no_cma && x->d.op == TW_FABRIC_PULL &&
           x->d.local->cuda_device < 0 && cma_peer_ok(x->d.peer);
}

/* Reads by cross-memory attach waiting for one process_vm_readv() call:
 * consecutive eligible operations to one peer, in the order post_batch()
 * met them (per transfer, ascending offsets). One call for many small
 * reads instead of one each: on the 2-core VM 64 reads of 32 KiB cost
 * 2.5-3.7 us each in one call against 5.9-6.4 us one call each (the
 * syscall, the peer's mm lookup and access check are per call). */
#define CMA_VEC 64 /* iovecs per call (IOV_MAX is 1024) */
struct cma_batch {
    struct tw_fabric_peer *peer;
    unsigned n;
    struct tw_fabric_rma *op[CMA_VEC];
    struct iovec local[CMA_VEC], remote[CMA_VEC];
};

struct cma_done {
    struct tw_fabric_rma *op;
    int err;
};

static void post_one_done(struct tw_fabric_rma *op)
{
    op->fresh = 0;
    op->xfer->post_posted++;
}

/* fi_read (pull) or fi_write (push) of len bytes at offset off of
 * transfer x, under context ctx. Returns 0 or the provider's error. */
static ssize_t post_rma(struct tw_fabric_rail *r, struct tw_fabric_xfer *x, uint64_t off,
                        uint64_t len, void *ctx)
{
    struct tw_fabric_mr *m = x->d.local;
    struct tw_fabric_peer *p = x->d.peer;
    void *buf = m->base + x->d.local_offset + off;
    uint64_t raddr = x->d.remote.remote_addr + off;
    if (x->d.op == TW_FABRIC_PULL)
        return fi_read(r->ep, buf, len, m->desc, p->fi_addr, raddr, x->d.remote.key, ctx);
    return fi_write(r->ep, buf, len, m->desc, p->fi_addr, raddr, x->d.remote.key, ctx);
}

/* Posts op through libfabric. Returns 0 or the provider's error (also
 * left in the transfer's post_ret; the transfer posts nothing more this
 * round). */
static ssize_t post_fi(struct tw_fabric_rail *r, struct tw_fabric_rma *op)
{
    struct tw_fabric_xfer *x = op->xfer;
    ssize_t ret = post_rma(r, x, op->off, op->len, &op->ctx);
    if (ret)
        x->post_ret = ret;
    else
        post_one_done(op);
    return ret;
}

/*
 * Joined operations. Transfers that leave together are often neighbours
 * on both sides: the blocks of a batch put, read from consecutive
 * addresses of the client's arena under one key (the client registers a
 * run of adjacent sources once, docs/protocol.md §10 "Shared keys") into
 * consecutive slots of the store's slab. A provider that moves each
 * operation at a fixed cost runs small ones far below its bandwidth
 * (tcp;ofi_rxm on the H200: 32 KiB reads at ~50k ops/s, 1.6 GB/s, against
 * 5 GB/s for 1 MiB ones; docs/performance.md). So post_batch() posts an
 * operation that continues the previous one on both sides -- same peer,
 * same direction, same remote key, the remote address where the previous
 * one ends, host memory of ours where the previous one ends under the
 * same descriptor (or none needed) -- as part of it: one libfabric
 * operation of up to the first transfer's chunk size, whose completion
 * completes each of them (join_next). Every byte still goes to the
 * transfer it belongs to; only the number of provider operations
 * changes. A joined operation that fails fails each transfer it carried
 * (as one that failed alone fails its own); a transfer stopped while
 * one of its operations rides in a joined one does not cancel it (that
 * would cancel the others' bytes) and waits for its completion like
 * any other (abandon_ops after drain_ns).
 */
struct fi_join {
    struct tw_fabric_rma *head, *tail;
    unsigned n;
    uint64_t len, max;
    const uint8_t *lend; /* our byte after the last one */
    uint64_t rend;       /* the remote address after the last one */
};

static const uint8_t *op_local(const struct tw_fabric_rma *op)
{
    const struct tw_fabric_xfer *x = op->xfer;
    return x->d.local->base + x->d.local_offset + op->off;
}

static int join_fits(const struct fi_join *j, const struct tw_fabric_rma *op)
{
    const struct tw_fabric_xfer *h = j->head->xfer, *x = op->xfer;
    const struct tw_fabric_mr *hm = h->d.local, *m = x->d.local;
    return x != h && x->d.op == h->d.op && x->d.peer == h->d.peer &&
           x->d.remote.key == h->d.remote.key && m->cuda_device < 0 && hm->cuda_device < 0 &&
           (m == hm || (m->desc == NULL && hm->desc == NULL)) && j->len + op->len <= j->max &&
           x->d.remote.remote_addr + op->off == j->rend && op_local(op) == j->lend;
}

/* Posts the gathered operation: one op as itself (post_fi), more as one
 * libfabric operation under the first one's context. Returns 0 or the
 * provider's error (left in each carried transfer's post_ret). */
static ssize_t join_flush(struct tw_fabric_rail *r, struct fi_join *j)
{
    struct tw_fabric_rma *head = j->head;
    j->head = NULL;
    if (!head)
        return 0;
    if (j->n == 1)
        return post_fi(r, head);
    struct tw_fabric_xfer *x = head->xfer;
    ssize_t ret = post_rma(r, x, head->off, j->len, &head->ctx);
    for (struct tw_fabric_rma *op = head, *next; op; op = next) {
        next = op->join_next;
        if (ret) {
            op->join_next = NULL;
            op->xfer->post_ret = ret;
        } else {
            op->joined = 1;
            post_one_done(op);
        }
    }
    if (!ret) {
        x->fab->st.joins++;
        x->fab->st.ops_joined += j->n - 1;
    }
    return ret;
}

/* Gathers op into j, posting what j held first when op does not continue
 * it. Returns 0 or the error of that post (-FI_EAGAIN: the queue is full;
 * op stays fresh, unposted). */
static ssize_t join_add(struct tw_fabric_rail *r, struct fi_join *j, struct tw_fabric_rma *op)
{
    struct tw_fabric_xfer *x = op->xfer;
    if (j->head && x->fab->join_ops && join_fits(j, op)) {
        j->tail->join_next = op;
        op->join_next = NULL;
        j->tail = op;
        j->n++;
        j->len += op->len;
        j->lend += op->len;
        j->rend += op->len;
        return 0;
    }
    ssize_t ret = join_flush(r, j);
    if (ret == -FI_EAGAIN)
        return ret;
    if (x->post_ret)
        return x->post_ret; /* an earlier operation of x failed in that post */
    op->join_next = NULL;
    j->head = j->tail = op;
    j->n = 1;
    j->len = op->len;
    j->max = x->chunk < r->max_msg || !r->max_msg ? x->chunk : r->max_msg;
    j->lend = op_local(op) + op->len;
    j->rend = x->d.remote.remote_addr + op->off + op->len;
    return 0;
}

/* Completes op and every operation joined behind it. */
static void op_done_chain(struct tw_fabric_rma *op, int err, const char *msg)
{
    char joined[448];
    if (err && op && op->join_next) {
        unsigned n = 0;
        for (const struct tw_fabric_rma *o = op; o; o = o->join_next)
            n++;
        snprintf(joined, sizeof(joined), "%s (one of %u reads or writes joined into one operation)",
                 msg ? msg : "", n);
        msg = joined;
    }
    while (op) {
        struct tw_fabric_rma *next = op->join_next;
        op->join_next = NULL;
        op->joined = 0;
        op_done(op, err, msg); /* may free op's transfer */
        op = next;
    }
}

/* An operation of a batch on its own (after the call stopped at it or at
 * an earlier one of its transfer): cma_read copies it, fails it, or hands
 * it to libfabric, which takes the rest of its transfer too. */
static void cma_single(struct tw_fabric_rail *r, struct cma_batch *b, unsigned i,
                       struct cma_done *done, unsigned *ndone, int *full, unsigned *calls)
{
    struct tw_fabric_rma *op = b->op[i];
    struct tw_fabric_xfer *x = op->xfer;
    if (x->post_ret)
        return; /* an earlier one of its operations was refused */
    int err = 1;
    if (!x->no_cma && __atomic_load_n(&b->peer->cma, __ATOMIC_ACQUIRE) > 0) {
        (*calls)++;
        err = cma_read(x, op, b->local[i].iov_base, (uintptr_t)b->remote[i].iov_base);
    }
    if (err > 0 && x->d.attach_only && !x->no_cma) {
        /* The peer's process refuses to be read (EPERM): its key may be
         * void, so no libfabric read. A range it cannot give (EFAULT, so
         * no_cma) is GPU memory, which the peer registered with a key. */
        err = -EPERM;
    }
    if (err <= 0) {
        post_one_done(op);
        done[*ndone].op = op;
        done[(*ndone)++].err = err;
    } else if (*full) {
        x->post_ret = -FI_EAGAIN; /* the queue is full: next round */
    } else if (post_fi(r, op) == -FI_EAGAIN) {
        *full = 1;
    }
}

/* Copies the batch b with as few process_vm_readv() calls as it can. A
 * call stops at the first range the peer cannot give (GPU memory, a range
 * not mapped: EFAULT) or fails as a whole (EPERM, the process gone): the
 * operations it copied whole are done, the one it stopped at and the rest
 * of that transfer go one by one (cma_single: as when every read was its
 * own call), and the next transfer's starts the next call. So what a
 * transfer leaves unposted stays a suffix of its reserved operations.
 * Sets *full when libfabric's queue refused one; counts calls in *calls. */
static void cma_flush(struct tw_fabric_rail *r, struct cma_batch *b, struct cma_done *done,
                      unsigned *ndone, int *full, unsigned *calls)
{
    unsigned i = 0;
    while (i < b->n) {
        if (__atomic_load_n(&b->peer->cma, __ATOMIC_ACQUIRE) > 0) {
            ssize_t got =
                process_vm_readv(b->peer->pid, b->local + i, b->n - i, b->remote + i, b->n - i, 0);
            (*calls)++;
            uint64_t left = got > 0 ? (uint64_t)got : 0;
            if (got > 0)
                cma_proved(b->peer);
            for (; i < b->n && left >= b->op[i]->len; i++) {
                left -= b->op[i]->len;
                post_one_done(b->op[i]);
                done[*ndone].op = b->op[i];
                done[(*ndone)++].err = 0;
            }
            if (i == b->n)
                break;
        }
        const struct tw_fabric_xfer *x = b->op[i]->xfer;
        for (; i < b->n && b->op[i]->xfer == x; i++)
            cma_single(r, b, i, done, ndone, full, calls);
    }
    b->n = 0;
}

/* Posts the reserved operations of n transfers on rail r in one call
 * window (one lock drop, one io lock, one watchdog stamp for all of them):
 * the operations of many small transfers that became ready together leave
 * together. Reads by cross-memory attach go in batches (cma_flush), and
 * once a group of TW_FABRIC_CMA_GROUP or more (whole transfers) is copied
 * the window closes, the group completes (fab->lock is back, so the
 * owner's loop can take the completions while the next group is copied)
 * and a new window opens for the rest: copied whole before anything
 * completed, the 64 reads of 64 puts in flight came back together, and
 * the requests' next steps (the server's replies, the client's next
 * puts) waited for all of them and then left together, so the copying
 * never overlapped them (docs/performance.md). The first refused post
 * (queue full) ends the window: later operations wait for the next round.
 * Returns 0, or -1 when this thread was abandoned (lock not held). */
#define POST_BATCH 64
#define CMA_BATCH 256 /* reads done by cross-memory attach in one window, at most */
/* Reads done by cross-memory attach complete now, as if their completions
 * had been read (fab->lock held). */
static void cma_publish(struct tw_fabric *fab, const struct cma_done *cma, unsigned ncma,
                        unsigned calls)
{
    fab->st.cma_calls += calls;
    for (unsigned i = 0; i < ncma; i++) {
        char msg[160];
        const struct tw_fabric_xfer *x = cma[i].op->xfer;
        if (cma[i].err)
            snprintf(msg, sizeof(msg), "process_vm_readv from process %d: %s%s", x->d.peer->pid,
                     strerror(-cma[i].err),
                     x->d.attach_only ? " (an attach read: its key may be void, so no "
                                        "libfabric read follows)"
                                      : "");
        fab->st.cma_reads++;
        op_done(cma[i].op, cma[i].err, cma[i].err ? msg : "");
    }
}

static int post_batch(struct tw_fabric *fab, struct tw_fabric_rail *r,
                      struct tw_fabric_xfer *const *xs, unsigned n, uint64_t now)
{
    int full = 0;
    struct cma_done cma[CMA_BATCH];
    struct cma_batch b;
    struct fi_join join;
    unsigned ncma = 0, calls = 0, settled = 0;
    b.n = 0;
    b.peer = NULL;
    join.head = NULL;
    unsigned gen = call_begin(fab, r);
    for (unsigned k = 0; k < n; k++) {
        struct tw_fabric_xfer *x = xs[k];
        struct tw_fabric_peer *p = x->d.peer;
        struct tw_fabric_mr *m = x->d.local;
        x->post_ret = 0;
        x->post_posted = 0;
        if (full)
            continue; /* settled below with nothing posted */
        if (m->cuda_device >= 0)
            tw__fabric_cuda_current(m->cuda_device, -1);
        int by_cma = cma_eligible(x, r);
        if (by_cma && b.n && b.peer != p)
            cma_flush(r, &b, cma, &ncma, &full, &calls);
        for (unsigned i = 0; i < x->depth && !full && !x->post_ret; i++) {
            struct tw_fabric_rma *op = &x->ops[i];
            if (!op->fresh)
                continue;
            if (by_cma && !x->no_cma) {
                if (ncma + b.n == CMA_BATCH) {
                    full = 1; /* the rest next round */
                    break;
                }
                b.peer = p;
                b.op[b.n] = op;
                b.local[b.n].iov_base = m->base + x->d.local_offset + op->off;
                b.local[b.n].iov_len = op->len;
                b.remote[b.n].iov_base = (void *)(uintptr_t)(x->d.remote.remote_addr + op->off);
                b.remote[b.n++].iov_len = op->len;
                if (b.n == CMA_VEC)
                    cma_flush(r, &b, cma, &ncma, &full, &calls);
                continue;
            }
            if (join_add(r, &join, op) == -FI_EAGAIN)
                full = 1;
        }
        /* Enough copied for a group: complete it before copying more. */
        if (ncma + b.n >= TW_FABRIC_CMA_GROUP && k + 1 < n) {
            cma_flush(r, &b, cma, &ncma, &full, &calls);
            if (join_flush(r, &join) == -FI_EAGAIN)
                full = 1;
            if (call_end(fab, r, gen))
                return -1;
            cma_publish(fab, cma, ncma, calls);
            ncma = calls = 0;
            for (; settled <= k; settled++)
                advance_settle(xs[settled], now);
            gen = call_begin(fab, r);
        }
    }
    cma_flush(r, &b, cma, &ncma, &full, &calls);
    (void)join_flush(r, &join); /* a refusal leaves its operations to the next round */
    if (call_end(fab, r, gen))
        return -1;
    cma_publish(fab, cma, ncma, calls);
    for (; settled < n; settled++)
        advance_settle(xs[settled], now);
    return 0;
}

/* Reads rail r's completions (up to CQ_ROUNDS batches of CQ_BATCH, and at
 * most one error entry) in one call window, then hands them to their
 * operations. Returns 0, or -1 when this thread was abandoned. */
#define CQ_BATCH 32
#define CQ_ROUNDS 8
static int read_cq(struct tw_fabric *fab, struct tw_fabric_rail *r, int *n)
{
    struct fi_cq_entry ent[CQ_BATCH * CQ_ROUNDS];
    struct fi_cq_err_entry e;
    char msg[384] = "";
    int have_err = 0;
    size_t got = 0;
    unsigned gen = call_begin(fab, r);
    for (int rounds = 0; rounds < CQ_ROUNDS; rounds++) {
        ssize_t ret = fi_cq_read(r->cq, ent + got, CQ_BATCH);
        if (ret > 0) {
            got += (size_t)ret;
            if (ret < CQ_BATCH)
                break;
            continue;
        }
        if (ret == -FI_EAVAIL) {
            memset(&e, 0, sizeof(e));
            if (fi_cq_readerr(r->cq, &e, 0) >= 1) {
                char detail[256];
                const char *prov =
                    fi_cq_strerror(r->cq, e.prov_errno, e.err_data, detail, sizeof(detail));
                snprintf(msg, sizeof(msg), "%s (%s: %s)", fi_strerror(e.err), r->addr.provider,
                         prov ? prov : "no provider detail");
                have_err = 1;
            }
        }
        break; /* -FI_EAGAIN: empty; or one error entry taken */
    }
    if (call_end(fab, r, gen))
        return -1;
    for (size_t i = 0; i < got; i++)
        if (ent[i].op_context)
            op_done_chain(ent[i].op_context, 0, NULL);
    *n += (int)got;
    if (have_err) {
        (*n)++;
        if (e.op_context)
            op_done_chain(e.op_context, map_err(e.err), msg);
    }
    return 0;
}

/* Abandoned operations to a peer whose control connection closed (the
 * peer was removed) on a tcp rail: if the link was cut, the peer's answers
 * were lost and its process may be gone, yet our side of the provider's
 * TCP connection has nothing left to send and never learns that the
 * connection is dead; the operations, their buffer and the peer would be
 * held for good (seen in the netns fault test: a put cut mid-transfer kept
 * 8 reads and 16 MB reserved for over 120 s after the link returned). So
 * every PROBE_EVERY_NS such a transfer re-posts its first byte (same
 * region, key and buffer byte: an answer writes what the first read wrote
 * or would write) on the same connection. A peer host whose process closed
 * the connection answers it with a TCP reset, which fails every operation
 * of that connection, and the transfer drains; a live peer answers it (or
 * rejects a revoked key). One probe per transfer at a time. Returns 0, or
 * -1 when this thread was abandoned (lock not held). */
#define PROBE_EVERY_NS (1000ull * 1000 * 1000)
static int probe_zombies(struct tw_fabric *fab, uint64_t now)
{
    for (struct tw_fabric_link *l = fab->zombies.next; l != &fab->zombies; l = l->next) {
        struct tw_fabric_xfer *x = TW_CONTAINER_OF(l, struct tw_fabric_xfer, node);
        struct tw_fabric_peer *p = x->d.peer;
        struct tw_fabric_mr *m = x->d.local;
        if (!x->inflight || x->orphan_rail || !p || !m || !p->removed || x->probe.busy ||
            !x->d.length || p->fi_addr == FI_ADDR_NOTAVAIL || p->rail->is_shm || p->rail->kept ||
            tw__fabric_rail_wedged(p->rail) || now - x->probe_ns < PROBE_EVERY_NS)
            continue;
        struct tw_fabric_rail *r = p->rail;
        /* Counted like the abandoned operations: op_done() settles it. */
        x->probe.busy = 1;
        x->probe.off = 0;
        x->probe.len = 1;
        x->inflight++;
        r->stuck_ops++;
        x->probe_ns = now;
        unsigned gen = call_begin(fab, r);
        ssize_t ret = post_rma(r, x, 0, 1, &x->probe.ctx);
        if (call_end(fab, r, gen))
            return -1;
        if (ret) {
            x->probe.busy = 0;
            x->inflight--;
            r->stuck_ops--;
        } else {
            fab->st.ops_posted++;
        }
        return 0; /* one per round: the list may have changed meanwhile */
    }
    return 0;
}

int tw__fabric_progress_locked(struct tw_fabric *fab)
{
    int n = 0;
    /* A peer's operations on our GPU memory are served in this call. */
    if (fab->hmem)
        tw__fabric_cuda_current(-1, fab->hmem_device);
    /* Parked operations of dead shm peers: looked at every 10 ms, not on
     * every poll (each look costs a kill() per parked transfer). */
    if (!link_empty(&fab->zombies)) {
        uint64_t t = tw__now_ns();
        if (t - fab->zombies_checked_ns >= 10000000ull) {
            fab->zombies_checked_ns = t;
            tw__fabric_zombies_reap_locked(fab, t);
            if (probe_zombies(fab, t))
                return -1;
        }
    }
    if (fab->reap_pending)
        tw__fabric_rails_reap_locked(fab);
    /* nrails may grow while the lock is dropped (a replacement rail):
     * re-read it every round. A closed slot has no info. */
    for (unsigned i = 0; i < fab->nrails; i++)
        if (fab->rails[i].info && !tw__fabric_rail_wedged(&fab->rails[i]) &&
            read_cq(fab, &fab->rails[i], &n))
            return -1;
    uint64_t now = tw__now_ns();
    fab->st.rounds++;
    if (now - fab->swept_ns >= TW_FABRIC_SWEEP_NS) {
        fab->swept_ns = now;
        for (struct tw_fabric_link *l = fab->active.next; l != &fab->active; l = l->next)
            mark_ready(TW_CONTAINER_OF(l, struct tw_fabric_xfer, node));
    }
    /* Rail by rail, the ready transfers whose operations can go are
     * reserved, then posted together (post_batch), in the order they
     * became ready. The round takes the list over (fab->walk; ones of
     * other rails wait on fab->skip): what becomes ready meanwhile (a
     * transfer submitted or stopped while the lock is dropped, a post
     * refused) waits on fab->ready for the next round. Nodes are taken
     * from the head only: finish() unlinks a node wherever it is. Both
     * lists live in fab, so a round abandoned mid-way (lock not held)
     * leaves them consistent for the next one. A reserved transfer stays
     * active until it is settled: nothing finishes it in between. */
    link_splice_tail(&fab->walk, &fab->skip);
    link_splice_tail(&fab->walk, &fab->ready);
    for (unsigned ri = 0; ri < fab->nrails && !link_empty(&fab->walk); ri++) {
        struct tw_fabric_rail *r = &fab->rails[ri];
        struct tw_fabric_xfer *xs[POST_BATCH];
        unsigned nx = 0;
        struct peer_memo memo = {NULL, 0, 0};
        while (!link_empty(&fab->walk)) {
            struct tw_fabric_xfer *x =
                TW_CONTAINER_OF(fab->walk.next, struct tw_fabric_xfer, ready_node);
            link_del(&x->ready_node);
            if (x->d.peer->rail != r) {
                link_add_tail(&fab->skip, &x->ready_node); /* still ready */
                continue;
            }
            fab->st.looks++;
            int k = advance_reserve(x, now, &memo);
            if (k < 0)
                return -1;
            if (k > 0) {
                xs[nx++] = x;
                if (nx == POST_BATCH) {
                    if (post_batch(fab, r, xs, nx, now))
                        return -1;
                    nx = 0;
                }
            }
        }
        if (nx && post_batch(fab, r, xs, nx, now))
            return -1;
        link_splice_tail(&fab->walk, &fab->skip);
    }
    /* Of no rail looked at (none: every peer has a rail slot): still ready. */
    link_splice_tail(&fab->ready, &fab->walk);
    return n;
}

int tw__fabric_progress(struct tw_fabric *fab)
{
    int n = 0;
    tw__fabric_lock(fab);
    /* Threaded planes: the mover progresses. Otherwise one caller at a
     * time (another one is progressing for us). */
    if (!fab->threaded && !fab->progressing) {
        fab->progressing = 1;
        n = tw__fabric_progress_locked(fab);
        fab->progressing = 0;
    }
    pthread_mutex_unlock(&fab->lock);
    return n;
}

size_t tw__fabric_xfer_chunk(size_t chunk, int configured, size_t device_chunk, int is_shm,
                             int local_device, size_t max_msg)
{
    if (!configured && is_shm && local_device && chunk < device_chunk)
        chunk = device_chunk;
    return chunk < max_msg ? chunk : max_msg;
}

int tw__fabric_xfer_submit_locked(struct tw_fabric *fab, const struct tw_fabric_xfer_desc *d,
                                  int sync, struct tw_fabric_xfer **out)
{
    if (d->op != TW_FABRIC_PULL && d->op != TW_FABRIC_PUSH)
        return tw__fabric_fail(fab, TW_EINVAL, "transfer op %d unknown", (int)d->op);
    if (!d->peer || !d->local)
        return tw__fabric_fail(fab, TW_EINVAL, "transfer without peer or local registration");
    if (d->peer->removed || d->peer->fi_addr == FI_ADDR_NOTAVAIL)
        return tw__fabric_fail(fab, -ECONNABORTED, "peer was removed");
    if (d->peer->rail->retired)
        return tw__fabric_fail(fab, -ECONNABORTED, "%s rail %s: %s", d->peer->rail->addr.provider,
                               tw__fabric_rail_wedged(d->peer->rail) ? "wedged" : "retired",
                               d->peer->rail->retire_why);
    if (d->local->rail != d->peer->rail)
        return tw__fabric_fail(fab, TW_EINVAL, "local registration on rail %s, peer on %s",
                               d->local->rail->addr.provider, d->peer->rail->addr.provider);
    unsigned need = d->op == TW_FABRIC_PULL ? TW_FABRIC_LOCAL_READ : TW_FABRIC_LOCAL_WRITE;
    if (d->length && !(d->local->access & need))
        return tw__fabric_fail(fab, TW_EINVAL, "local registration lacks %s access",
                               need == TW_FABRIC_LOCAL_READ ? "LOCAL_READ" : "LOCAL_WRITE");
    if (d->local_offset > d->local->len || d->length > d->local->len - d->local_offset)
        return tw__fabric_fail(fab, TW_EINVAL,
                               "%llu bytes at offset %llu exceed the %llu-byte registration",
                               (unsigned long long)d->length, (unsigned long long)d->local_offset,
                               (unsigned long long)d->local->len);
    if (d->length > d->remote.length)
        return tw__fabric_fail(fab, TW_EINVAL, "%llu bytes exceed the remote region of %llu",
                               (unsigned long long)d->length, (unsigned long long)d->remote.length);
    if (d->attach_only) {
        if (d->op != TW_FABRIC_PULL || d->local->cuda_device >= 0 || !cma_rail(fab, d->peer->rail))
            return tw__fabric_fail(fab, TW_EINVAL,
                                   "an attach read needs a pull into host memory over shm, on a "
                                   "plane with cma_reads");
        if (!cma_peer_ok(d->peer))
            return tw__fabric_fail(fab, -EPERM,
                                   "process %d cannot be read by cross-memory attach (an attach "
                                   "read: its key may be void, so no libfabric read follows)",
                                   d->peer->pid);
    }

    unsigned depth = fab->depth ? fab->depth : TW_FABRIC_DEFAULT_DEPTH;
    struct tw_fabric_xfer *x = calloc(1, sizeof(*x) + depth * sizeof(struct tw_fabric_rma));
    if (!x)
        return tw__fabric_fail(fab, -ENOMEM, "out of memory");
    x->fab = fab;
    x->d = *d;
    x->depth = depth;
    x->chunk = tw__fabric_xfer_chunk(fab->chunk, fab->chunk_configured, fab->device_chunk,
                                     d->peer->rail->is_shm, d->local->cuda_device >= 0,
                                     d->peer->rail->max_msg);
    x->sync = sync;
    /* progress_ns stays 0 until the progressing thread first looks at it
     * (advance_reserve, with its round's clock): a clock read per submit
     * was 5% of a client's engine thread in a batch of small gets. */
    for (unsigned i = 0; i < x->depth; i++)
        x->ops[i].xfer = x;
    x->probe.xfer = x;
    d->peer->refs++;
    d->local->refs++;
    /* The progressing thread posts (never the submitter: a post may not
     * return, see fabric.h). */
    link_add_tail(&fab->active, &x->node);
    link_init(&x->ready_node);
    mark_ready(x);
    if (out)
        *out = x;
    return 0;
}

int tw__fabric_xfer_submit(struct tw_fabric *fab, const struct tw_fabric_xfer_desc *d,
                           struct tw_fabric_xfer **xfer)
{
    tw__fabric_lock(fab);
    struct tw_fabric_xfer *x = NULL;
    int ret = tw__fabric_xfer_submit_locked(fab, d, 0, &x);
    /* A running mover finds the new transfer on its next round by itself;
     * only a sleeping one needs the eventfd (one write per burst). */
    int wake = ret == 0 && fab->mover_asleep;
    pthread_mutex_unlock(&fab->lock);
    if (ret == 0 && xfer)
        *xfer = x;
    if (wake)
        tw__fabric_mover_wake(fab);
    return ret;
}

static void fill_completion(const struct tw_fabric_xfer *x, struct tw_fabric_completion *c)
{
    c->cookie = x->d.cookie;
    c->status = x->status;
    c->bytes = x->bytes_done;
    c->buffer_busy = x->inflight > 0;
    if (x->msg[0])
        snprintf(c->msg, sizeof(c->msg), "%s", x->msg);
    else
        c->msg[0] = '\0';
}

/* Hands a finished transfer's memory over: freed now, or parked until its
 * operations drain. */
static void consume(struct tw_fabric *fab, struct tw_fabric_xfer *x)
{
    x->popped = 1;
    if (x->inflight == 0 && !x->d.peer) {
        free(x);
        return;
    }
    link_add_tail(&fab->zombies, &x->node);
    settle(x);
}

int tw__fabric_xfer_start(struct tw_fabric *fab, const struct tw_fabric_xfer_desc *d,
                          struct tw_fabric_xfer **xfer, struct tw_fabric_completion *c)
{
    struct tw_fabric_xfer *x = NULL;
    *xfer = NULL;
    tw__fabric_lock(fab);
    int ret = tw__fabric_xfer_submit_locked(fab, d, 1, &x);
    if (ret) {
        if (c) {
            memset(c, 0, sizeof(*c));
            c->cookie = d->cookie;
            c->status = ret;
            c->buffer_busy = 0;
            snprintf(c->msg, sizeof(c->msg), "%s", fab->errmsg);
        }
        pthread_mutex_unlock(&fab->lock);
        return ret;
    }
    pthread_mutex_unlock(&fab->lock);
    if (fab->threaded)
        tw__fabric_mover_wake(fab);
    *xfer = x;
    return 0;
}

int tw__fabric_xfer_wait(struct tw_fabric *fab, struct tw_fabric_xfer *x,
                         struct tw_fabric_completion *c)
{
    tw__fabric_lock(fab);
    if (fab->threaded) {
        while (!x->finished)
            pthread_cond_wait(&fab->done_cond, &fab->lock);
    } else {
        /* Busy-poll like any RDMA client: a sched_yield() here measurably
         * cost hundreds of microseconds per operation on a loaded host. The
         * lock is dropped between polls so other threads get in; one of
         * them progresses at a time. */
        while (!x->finished) {
            if (!fab->progressing) {
                fab->progressing = 1;
                int got = tw__fabric_progress_locked(fab);
                fab->progressing = 0;
                if (got > 0)
                    continue;
            }
            pthread_mutex_unlock(&fab->lock);
            tw__fabric_lock(fab);
        }
    }
    int ret = x->status;
    if (c)
        fill_completion(x, c);
    consume(fab, x);
    pthread_mutex_unlock(&fab->lock);
    return ret;
}

int tw__fabric_xfer_run(struct tw_fabric *fab, const struct tw_fabric_xfer_desc *d,
                        struct tw_fabric_completion *c)
{
    struct tw_fabric_xfer *x;
    int ret = tw__fabric_xfer_start(fab, d, &x, c);
    return ret ? ret : tw__fabric_xfer_wait(fab, x, c);
}

size_t tw__fabric_done_pop_many(struct tw_fabric *fab, struct tw_fabric_completion *c, size_t max)
{
    size_t n = 0;
    /* Nothing queued: no lock for an empty look (the owner's loop looks
     * once per frame it handles, and the lock is the mover's most of the
     * time). The flag is set with the first completion queued and cleared
     * once the list is found empty, both under the lock; one queued just
     * now has signalled the event fd, which the owner waits on. */
    if (!__atomic_load_n(&fab->event_signaled, __ATOMIC_ACQUIRE))
        return 0;
    tw__fabric_lock(fab);
    while (n < max && !link_empty(&fab->done)) {
        struct tw_fabric_xfer *x = TW_CONTAINER_OF(fab->done.next, struct tw_fabric_xfer, node);
        link_del(&x->node);
        fill_completion(x, &c[n++]);
        consume(fab, x);
    }
    /* Reset the eventfd so a level-triggered epoll does not spin (only
     * when a count was written: no system call for an empty look). */
    if (link_empty(&fab->done))
        tw__fabric_done_reset_locked(fab);
    pthread_mutex_unlock(&fab->lock);
    return n;
}

int tw__fabric_done_pop(struct tw_fabric *fab, struct tw_fabric_completion *c)
{
    return tw__fabric_done_pop_many(fab, c, 1) ? 1 : 0;
}

void tw__fabric_xfer_cancel(struct tw_fabric_xfer *x, int status)
{
    struct tw_fabric *fab = x->fab;
    tw__fabric_lock(fab);
    if (!x->finished)
        stop(x, status ? status : TW_ECANCELLED, "cancelled: %s", tw_strerror(status));
    pthread_mutex_unlock(&fab->lock);
    tw__fabric_mover_wake(fab);
}

void tw__fabric_xfer_fail_peer_locked(struct tw_fabric *fab, struct tw_fabric_peer *peer,
                                      int status, const char *why)
{
    for (struct tw_fabric_link *l = fab->active.next; l != &fab->active; l = l->next) {
        struct tw_fabric_xfer *x = TW_CONTAINER_OF(l, struct tw_fabric_xfer, node);
        if (x->d.peer == peer)
            stop(x, status, "%s", why);
    }
}

void tw__fabric_xfers_fail_rail_locked(struct tw_fabric *fab, struct tw_fabric_rail *r, int status,
                                       const char *why)
{
    struct tw_fabric_link *l = fab->active.next;
    while (l != &fab->active) {
        struct tw_fabric_link *next = l->next;
        struct tw_fabric_xfer *x = TW_CONTAINER_OF(l, struct tw_fabric_xfer, node);
        if (x->d.peer->rail == r) {
            stop(x, status, "%s", why);
            if (x->inflight) {
                char note[96];
                snprintf(note, sizeof(note), "; %u operations left in the provider", x->inflight);
                append_msg(x, note);
                r->stuck_ops += x->inflight;
            }
            finish(x);
        }
        l = next;
    }
}

void tw__fabric_xfers_abort_locked(struct tw_fabric *fab)
{
    for (struct tw_fabric_link *l = fab->active.next; l != &fab->active; l = l->next)
        stop(TW_CONTAINER_OF(l, struct tw_fabric_xfer, node), TW_ESHUTDOWN, "data plane closing");
    /* Bounded drain: cancelling and abandoning happen inside progress. */
    uint64_t until = tw__now_ns() + 2 * fab->drain_ns;
    while (!link_empty(&fab->active) && tw__now_ns() < until)
        if (tw__fabric_progress_locked(fab) < 0) {
            pthread_mutex_lock(&fab->lock); /* cannot happen: no watchdog runs now */
            break;
        }
    while (!link_empty(&fab->active)) {
        struct tw_fabric_xfer *x = TW_CONTAINER_OF(fab->active.next, struct tw_fabric_xfer, node);
        finish(x);
    }
    /* Nobody pops any more: completions still queued are freed by close. */
}

/* At close: a shm peer serves our reads by writing into our memory itself
 * (process_vm_writev), whether or not our endpoint still exists. Buffers of
 * operations it never answered must therefore never be handed back. tcp
 * closes its sockets with the rail, after which nothing can arrive. */
static void mark_list(struct tw_fabric_link *head)
{
    for (struct tw_fabric_link *l = head->next; l != head; l = l->next) {
        struct tw_fabric_xfer *x = TW_CONTAINER_OF(l, struct tw_fabric_xfer, node);
        if (x->inflight && x->d.local && x->d.peer && x->d.peer->rail->is_shm)
            x->d.local->keep_on_close = 1;
    }
}

void tw__fabric_xfers_mark_unsafe_locked(struct tw_fabric *fab)
{
    mark_list(&fab->zombies);
    mark_list(&fab->done);
}

static void keep_list(struct tw_fabric_link *head, unsigned *kept)
{
    for (struct tw_fabric_link *l = head->next; l != head; l = l->next) {
        struct tw_fabric_xfer *x = TW_CONTAINER_OF(l, struct tw_fabric_xfer, node);
        struct tw_fabric_rail *r = x->orphan_rail ? x->orphan_rail
                                   : x->d.peer    ? x->d.peer->rail
                                                  : NULL;
        if (!x->inflight || !r || r->is_shm)
            continue;
        if (!r->kept) {
            r->kept = 1;
            (*kept)++;
        }
        if (x->d.local)
            x->d.local->keep_on_close = 1;
    }
}

unsigned tw__fabric_xfers_keep_rails_locked(struct tw_fabric *fab)
{
    unsigned kept = 0;
    keep_list(&fab->zombies, &kept);
    keep_list(&fab->done, &kept);
    return kept;
}

/* Operations parked on a rail that nobody polls any more, or whose peer
 * died (orphans), never drain: they do not keep the mover awake. */
static int zombies_pending(const struct tw_fabric *fab)
{
    for (const struct tw_fabric_link *l = fab->zombies.next; l != &fab->zombies; l = l->next) {
        const struct tw_fabric_xfer *x = TW_CONTAINER_OF(l, struct tw_fabric_xfer, node);
        if (!x->orphan_rail && (!x->d.peer || !tw__fabric_rail_wedged(x->d.peer->rail)))
            return 1;
    }
    return 0;
}

void tw__fabric_zombies_reap_locked(struct tw_fabric *fab, uint64_t now)
{
    for (struct tw_fabric_link *l = fab->zombies.next; l != &fab->zombies; l = l->next) {
        struct tw_fabric_xfer *x = TW_CONTAINER_OF(l, struct tw_fabric_xfer, node);
        struct tw_fabric_peer *p = x->d.peer;
        if (x->orphan_rail || !x->inflight || !p || !p->rail->is_shm || !p->pid ||
            tw__fabric_rail_wedged(p->rail) || !tw__fabric_peer_gone(p, now))
            continue;
        /* The peer moved the bytes with its own process_vm_writev; with
         * the process gone nothing can touch the buffer any more. Its
         * address slot stays (addr.c), so no region is unmapped under a
         * pending answer. */
        p->rail->stuck_ops -= x->inflight;
        x->orphan_rail = p->rail;
        tw__fabric_mr_put_locked(x->d.local); /* hands the buffer back (on_idle) */
        x->d.local = NULL;
        tw__fabric_peer_put_locked(p);
        x->d.peer = NULL;
    }
}

void tw__fabric_orphans_free_locked(struct tw_fabric *fab, const struct tw_fabric_rail *r)
{
    struct tw_fabric_link *l = fab->zombies.next;
    while (l != &fab->zombies) {
        struct tw_fabric_link *next = l->next;
        struct tw_fabric_xfer *x = TW_CONTAINER_OF(l, struct tw_fabric_xfer, node);
        if (x->orphan_rail == r) {
            link_del(&x->node);
            free(x);
        }
        l = next;
    }
}

int tw__fabric_busy_locked(const struct tw_fabric *fab)
{
    return !link_empty(&fab->active) || fab->remote_mrs > 0 || fab->reap_pending ||
           tw__now_ns() < fab->linger_until_ns || zombies_pending(fab);
}
