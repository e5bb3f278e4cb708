/*
 * The data-mover thread of a threaded plane, and the completion queue the
 * owner's event loop drains.
 *
 * Loop: while there is work (a transfer, a parked op, or a remotely
 * accessible registration whose peer needs our target-side progress) poll
 * every rail's CQ; after SPIN_POLLS empty polls block in poll() on the
 * rails' CQ wait fds (after fi_trywait() said that is safe) and on wake_fd,
 * with a short timeout so deadlines are checked. A rail without a wait fd
 * makes the loop sleep BACKOFF_NS instead. Without work the thread sleeps on
 * wake_fd only, costing nothing.
 *
 * Lock: fab->lock is held while calling into libfabric and dropped around
 * poll(); submitters take it briefly, so they never wait for a blocked poll.
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fabric/fabric_int.h"

#define SPIN_POLLS 2000
#define BLOCK_TIMEOUT_MS 1 /* deadline granularity while transfers run */
#define IDLE_TIMEOUT_MS 20 /* target-side only: fd wakes us; this is a safety net */
#define BACKOFF_NS 20000

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
    signal_fd(fab->event_fd);
}

/* Returns 1 if every rail can block on its fd (nothing pending), else 0. */
static int try_wait_locked(struct tw_fabric *fab, struct pollfd *pfd, nfds_t *n)
{
    for (unsigned i = 0; i < fab->nrails; i++) {
        struct tw_fabric_rail *r = &fab->rails[i];
        if (r->wait_fd < 0)
            return 0;
        struct fid *f = &r->cq->fid;
        if (fi_trywait(r->fabric, &f, 1) != 0)
            return 0;
        pfd[*n].fd = r->wait_fd;
        pfd[*n].events = POLLIN;
        (*n)++;
    }
    return 1;
}

static void *mover_main(void *arg)
{
    struct tw_fabric *fab = arg;
    unsigned idle = 0;
    pthread_mutex_lock(&fab->lock);
    while (!fab->stop) {
        struct pollfd pfd[1 + TW_FABRIC_MAX_RAILS];
        nfds_t n = 1;
        pfd[0].fd = fab->wake_fd;
        pfd[0].events = POLLIN;

        if (fab->paused || !tw__fabric_busy_locked(fab)) {
            pthread_mutex_unlock(&fab->lock);
            poll(pfd, 1, -1);
            drain_fd(fab->wake_fd);
            pthread_mutex_lock(&fab->lock);
            idle = 0;
            continue;
        }
        if (tw__fabric_progress_locked(fab) > 0) {
            idle = 0;
        } else if (++idle >= SPIN_POLLS) {
            int can_block = try_wait_locked(fab, pfd, &n);
            int timeout = link_empty(&fab->active) && link_empty(&fab->zombies)
                              ? IDLE_TIMEOUT_MS
                              : BLOCK_TIMEOUT_MS;
            pthread_mutex_unlock(&fab->lock);
            if (can_block) {
                poll(pfd, n, timeout);
            } else {
                struct timespec ts = {0, BACKOFF_NS};
                nanosleep(&ts, NULL);
                /* Keep spinning right after a nap: work may be pending. */
            }
            if (poll(pfd, 1, 0) > 0)
                drain_fd(fab->wake_fd);
            pthread_mutex_lock(&fab->lock);
            idle = can_block ? 0 : SPIN_POLLS - 1;
            continue;
        }
        /* Let submitters in between polls. */
        pthread_mutex_unlock(&fab->lock);
        pthread_mutex_lock(&fab->lock);
    }
    pthread_mutex_unlock(&fab->lock);
    return NULL;
}

int tw__fabric_mover_start(struct tw_fabric *fab)
{
    fab->threaded = 1;
    int ret = pthread_create(&fab->mover, NULL, mover_main, fab);
    if (ret) {
        fab->threaded = 0;
        return -ret;
    }
    return 0;
}

void tw__fabric_mover_stop(struct tw_fabric *fab)
{
    if (!fab->threaded)
        return;
    pthread_mutex_lock(&fab->lock);
    fab->stop = 1;
    pthread_mutex_unlock(&fab->lock);
    signal_fd(fab->wake_fd);
    pthread_join(fab->mover, NULL);
    fab->threaded = 0;
}
