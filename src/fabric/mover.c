/*
 * The data-mover thread of a threaded plane, and the completion queue the
 * owner's event loop drains.
 *
 * Loop: while there is work (a transfer, a parked op, or a remotely
 * accessible registration whose peer needs our target-side progress) poll
 * every rail's CQ; once spin_ns passed without a completion or a wake-up
 * (TW_FABRIC_DEFAULT_SPIN_NS, TW_FABRIC_SPIN_US) sleep in ppoll() on wake_fd
 * and the rails' CQ wait fds (once fi_trywait() said that is safe), then
 * poll again. Without work the thread sleeps on wake_fd only.
 *
 * Polling policy (must_spin_locked): on a rail without a CQ wait fd (shm)
 * the mover polls, yielding between rounds, while registrations are
 * exposed or transfers run, i.e. while an RDMA request is in flight; that
 * costs one busy core per plane during requests and buys microsecond
 * reaction to a peer's reads. Rails with a wait fd (tcp) sleep on it
 * between bursts instead: many spinning planes on few cores starved each
 * other (docs/performance.md, the RDMA-tcp put tail). Afterwards
 * (TW_FABRIC_LINGER, or only abandoned operations left) it sleeps on the
 * CQ wait fds, 20 ms at most, or naps NAP_NS where a rail has no wait fd
 * (shm), and once nothing is left it sleeps on wake_fd only.
 *
 * Lock: fab->lock is held while looking at the plane's state and dropped
 * around every libfabric call (xfer.c) and around ppoll(); submitters take
 * it briefly, so they never wait for a sleep or a call that hangs. This
 * thread takes it back with tw__fabric_relock(), which lets a thread
 * waiting in tw__fabric_lock() have it first (fabric_int.h).
 *
 * Generations: when the watchdog (wedge.c) finds this thread stuck inside
 * a libfabric call, it detaches the thread, bumps fab->gen and starts a
 * new mover; the old one, should its call ever return, sees the new
 * generation and exits without touching the plane.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "fabric/fabric_int.h"

#define NAP_NS 50000L            /* a rail without wait fd */
#define ACTIVE_SLEEP_NS 1000000L /* abandoned ops left: drain granularity */
#define IDLE_SLEEP_NS 20000000L  /* lingering: a safety net, the fd wakes us */

static void drain_fd(int fd)
{
    uint64_t v;
    while (read(fd, &v, sizeof(v)) < 0 && errno == EINTR) {
    }
}

static void signal_fd(int fd)
{
    uint64_t one = 1;
    while (write(fd, &one, sizeof(one)) < 0 && errno == EINTR) {
    }
}

void tw__fabric_mover_wake(struct tw_fabric *fab)
{
    if (fab->threaded)
        signal_fd(fab->wake_fd);
}

void tw__fabric_done_push_locked(struct tw_fabric *fab, struct tw_fabric_xfer *x)
{
    link_add_tail(&fab->done, &x->node);
    if (!fab->event_signaled) {
        __atomic_store_n(&fab->event_signaled, 1, __ATOMIC_RELEASE);
        signal_fd(fab->event_fd);
    }
}

void tw__fabric_done_reset_locked(struct tw_fabric *fab)
{
    if (fab->event_signaled) {
        __atomic_store_n(&fab->event_signaled, 0, __ATOMIC_RELEASE);
        drain_fd(fab->event_fd);
    }
}

/* Adds the CQ wait fds to pfd and sets *sleep_ns. Returns 0 if
 * fi_trywait() reports pending events on some rail (do not sleep), else 1.
 * A rail without a wait fd bounds the sleep to NAP_NS. */
static int try_wait_locked(struct tw_fabric *fab, struct pollfd *pfd, nfds_t *n, long *sleep_ns)
{
    *sleep_ns =
        link_empty(&fab->active) && link_empty(&fab->zombies) ? IDLE_SLEEP_NS : ACTIVE_SLEEP_NS;
    for (unsigned i = 0; i < fab->nrails && *n < 1 + TW_FABRIC_MAX_RAILS; i++) {
        struct tw_fabric_rail *r = &fab->rails[i];
        if (!r->info || tw__fabric_rail_wedged(r))
            continue;
        if (r->wait_fd < 0) {
            *sleep_ns = NAP_NS;
            continue;
        }
        struct fid *f = &r->cq->fid;
        if (tw__fabric_io_lock(r))
            continue;
        int busy = fi_trywait(r->fabric, &f, 1) != 0;
        tw__fabric_io_unlock(r);
        if (busy)
            return 0;
        pfd[*n].fd = r->wait_fd;
        pfd[*n].events = POLLIN;
        (*n)++;
    }
    return 1;
}

/* Target-side work (serving a peer's read or write into our memory)
 * produces no completion we could see, and waking up costs: sleeping on the
 * CQ wait fd between polls made the first 4 KiB read after a quiet period
 * take ~1.9 ms on tcp;ofi_rxm (bench_fabric, "after 50 ms idle"), 65 us
 * when polling; on shm (no wait fd at all) 50 us naps made every 4 KiB read
 * ~200 us instead of ~4 us. So while remotely accessible registrations or
 * our own transfers exist the mover keeps polling, yielding the CPU between
 * rounds. */
/*
 * Only for rails without a CQ wait fd (shm), though. Spinning movers on an
 * oversubscribed host starve each other and the threads they serve: 32
 * RDMA clients (32 planes, 32 spinning movers) on 2 cores gave RDMA-tcp
 * puts a p99 of 2.1 s and 275 ops/s in bench/soak.sh; with tcp movers
 * sleeping on the CQ wait fd (which the provider's sockets wake) after
 * 2000 empty polls, p99 281 ms and 1572 ops/s (docs/performance.md).
 * A rail with a wait fd therefore sleeps on it, at most ACTIVE_SLEEP_NS.
 *
 * How long to keep polling before that sleep is a time, not a count of
 * polls (2000 empty polls were 1-4 ms, depending on the host), and it
 * restarts after every completion and after every wake-up by an fd: a
 * target, which sees no completions of its own, used to sleep again right
 * after each wake-up, so every small read of a peer paid a thread wake-up
 * (16 -> 46 us per 4 KiB read on the VM); now the next request of a busy
 * peer finds it still polling, while an idle plane sleeps after spin_ns.
 */
static int must_spin_locked(const struct tw_fabric *fab)
{
    if (fab->remote_mrs == 0 && link_empty(&fab->active))
        return 0;
    for (unsigned i = 0; i < fab->nrails; i++) {
        const struct tw_fabric_rail *r = &fab->rails[i];
        if (r->info && r->wait_fd < 0 && !tw__fabric_rail_wedged(r))
            return 1;
    }
    return 0;
}

/* Polling after activity only pays while this thread has a CPU to itself.
 * On an oversubscribed host (more runnable threads than cores: the 2-core
 * VM under other jobs) a spinning mover is preempted, and while it spins
 * the threads that would hand it work wait for the CPU: 4 KiB reads took
 * 300-490 us there with a 100 us window against ~30-60 us without
 * (bench_fabric, docs/performance.md). So each stretch between a wake-up
 * and the next sleep counts the kernel's involuntary context switches of
 * this thread; if there were any, the mover sleeps as soon as it is idle
 * (no window) for SPIN_BACKOFF_NS, then tries the window again. */
#define SPIN_BACKOFF_NS 100000000ull
#define TARGET_LOOK_EVERY_NS 1000000ull

static long involuntary_switches(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) != 0)
        return -1;
    return ru.ru_nivcsw;
}

int tw__fabric_target_observable(const struct tw_fabric_peer *peer)
{
    struct tw_fabric *fab = peer->rail->fab;
    tw__fabric_lock(fab);
    int ok = fab->threaded && peer->rail->wait_fd >= 0;
    pthread_mutex_unlock(&fab->lock);
    return ok;
}

void tw__fabric_target_watch(struct tw_fabric *fab, int delta)
{
    tw__fabric_lock(fab);
    if (delta > 0)
        fab->target_watch++;
    else if (fab->target_watch > 0)
        fab->target_watch--;
    pthread_mutex_unlock(&fab->lock);
    if (delta > 0)
        tw__fabric_mover_wake(fab);
}

uint64_t tw__fabric_target_events(struct tw_fabric *fab)
{
    tw__fabric_lock(fab);
    uint64_t n = fab->target_events;
    pthread_mutex_unlock(&fab->lock);
    return n;
}

/* While watched: whether a usable rail's CQ wait fd is readable now (the
 * peer sent something our progress has not consumed yet). Drops the lock
 * around poll(). */
static void look_target_locked(struct tw_fabric *fab)
{
    struct pollfd pfd[TW_FABRIC_MAX_RAILS];
    nfds_t n = 0;
    for (unsigned i = 0; i < fab->nrails && n < TW_FABRIC_MAX_RAILS; i++) {
        struct tw_fabric_rail *r = &fab->rails[i];
        if (r->info && r->wait_fd >= 0 && !tw__fabric_rail_wedged(r)) {
            pfd[n].fd = r->wait_fd;
            pfd[n].events = POLLIN;
            n++;
        }
    }
    if (n == 0)
        return;
    pthread_mutex_unlock(&fab->lock);
    int ready = poll(pfd, n, 0);
    tw__fabric_relock(fab);
    if (ready > 0)
        fab->target_events++;
}

static void *mover_main(void *arg)
{
    struct tw_fabric *fab = arg;
    /* Poll without sleeping until then: spin_ns after the last sign of
     * work (a completion, or a wake-up by an fd), unless spinning is off
     * (preempted while awake) until spin_off_until. */
    uint64_t spin_until = 0, spin_off_until = 0;
    long ivcsw = involuntary_switches(); /* at the last wake-up */
    uint64_t last_look_ns = 0;           /* target-side activity (look_target_locked) */
    pthread_mutex_lock(&fab->lock);
    const unsigned gen = fab->gen;
    while (!fab->stop && gen == fab->gen) {
        struct pollfd pfd[1 + TW_FABRIC_MAX_RAILS];
        nfds_t n = 1;
        pfd[0].fd = fab->wake_fd;
        pfd[0].events = POLLIN;

        if (fab->paused || !tw__fabric_busy_locked(fab)) {
            fab->mover_asleep = 1;
            pthread_mutex_unlock(&fab->lock);
            poll(pfd, 1, -1);
            drain_fd(fab->wake_fd);
            tw__fabric_relock(fab);
            fab->mover_asleep = 0;
            ivcsw = involuntary_switches();
            uint64_t t = tw__now_ns();
            spin_until = t < spin_off_until ? 0 : t + fab->spin_ns;
            continue;
        }
        /* The watcher (conn.c wait_fd) asks every 100 ms whether the count
         * moved: one look a millisecond is plenty, and a poll() on every
         * round cost a system call per round while a batch of pull puts
         * ran. */
        if (fab->target_watch) {
            uint64_t t = tw__now_ns();
            if (t - last_look_ns >= TARGET_LOOK_EVERY_NS) {
                last_look_ns = t;
                look_target_locked(fab);
            }
        }
        int got = tw__fabric_progress_locked(fab);
        if (got < 0)
            return NULL; /* abandoned by the watchdog; lock not held */
        uint64_t now = tw__now_ns();
        if (got > 0) {
            spin_until = now < spin_off_until ? 0 : now + fab->spin_ns;
        } else if (now >= spin_until && must_spin_locked(fab)) {
            /* Live work: stay runnable, but let other threads run first. */
            pthread_mutex_unlock(&fab->lock);
            sched_yield();
            tw__fabric_relock(fab);
            continue;
        } else if (now >= spin_until) {
            /* fi_trywait() must say "nothing pending" before we may sleep on
             * the fds; if it does not, poll again right away. */
            long sleep_ns;
            if (try_wait_locked(fab, pfd, &n, &sleep_ns)) {
                struct timespec nap = {0, sleep_ns};
                long sw = involuntary_switches();
                if (sw != ivcsw)
                    spin_off_until = now + SPIN_BACKOFF_NS;
                fab->mover_asleep = 1;
                pthread_mutex_unlock(&fab->lock);
                int woke = ppoll(pfd, n, &nap, NULL);
                if (pfd[0].revents & POLLIN)
                    drain_fd(fab->wake_fd);
                int rail_ready = 0;
                for (nfds_t i = 1; i < n; i++)
                    rail_ready |= (pfd[i].revents & POLLIN) != 0;
                tw__fabric_relock(fab);
                fab->mover_asleep = 0;
                ivcsw = involuntary_switches();
                if (rail_ready && fab->target_watch)
                    fab->target_events++;
                /* Woken by traffic or a submit: a peer working with us
                 * sends its next request soon, so poll for a while
                 * instead of paying a wake-up for each one. */
                uint64_t t = tw__now_ns();
                if (woke > 0 && t >= spin_off_until)
                    spin_until = t + fab->spin_ns;
            }
            continue;
        }
        /* Let submitters in between polls (tw__fabric_relock hands the
         * lock to a waiting one). */
        pthread_mutex_unlock(&fab->lock);
        tw__fabric_relock(fab);
    }
    if (gen == fab->gen) {
        fab->mover_running = 0;
        pthread_cond_broadcast(&fab->done_cond);
    }
    pthread_mutex_unlock(&fab->lock);
    return NULL;
}

int tw__fabric_mover_start(struct tw_fabric *fab)
{
    fab->threaded = 1;
    fab->mover_running = 1;
    int ret = pthread_create(&fab->mover, NULL, mover_main, fab);
    if (ret) {
        fab->mover_running = 0;
        return -ret;
    }
    fab->mover_joinable = 1;
    return 0;
}

void tw__fabric_mover_stop(struct tw_fabric *fab)
{
    if (!fab->threaded)
        return;
    tw__fabric_lock(fab);
    fab->stop = 1;
    pthread_mutex_unlock(&fab->lock);
    signal_fd(fab->wake_fd);
    /* The watchdog still runs: a mover stuck in a call is abandoned and
     * replaced by one that sees stop and leaves, so this wait ends. */
    tw__fabric_lock(fab);
    while (fab->mover_running)
        pthread_cond_wait(&fab->done_cond, &fab->lock);
    pthread_t t = fab->mover;
    int joinable = fab->mover_joinable;
    pthread_mutex_unlock(&fab->lock);
    if (joinable)
        pthread_join(t, NULL);
    fab->threaded = 0;
}
