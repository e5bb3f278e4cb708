/*
 * epoll loop. Level-triggered: a callback that stops early (to share the
 * thread fairly between connections) is simply called again on the next
 * iteration. Timers live in a binary min-heap indexed from the timers
 * themselves, so stop and re-arm are O(log n) without searching.
 */
#include "net/loop.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"

#define MAX_EVENTS 128

int tw__loop_init(struct tw_loop *loop)
{
    memset(loop, 0, sizeof(*loop));
    loop->sigfd = -1;
    loop->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (loop->epfd < 0)
        return -errno;
    loop->now_ms = tw__now_ms();
    loop->batch_gen = 1;
    return 0;
}

void tw__loop_destroy(struct tw_loop *loop)
{
    if (loop->sigfd >= 0) {
        tw__loop_io_del(loop, &loop->sig_io);
        close(loop->sigfd);
        loop->sigfd = -1;
    }
    if (loop->epfd >= 0)
        close(loop->epfd);
    loop->epfd = -1;
    for (size_t i = 0; i < loop->heap_len; i++)
        loop->heap[i]->heap_index = SIZE_MAX;
    free(loop->heap);
    loop->heap = NULL;
    loop->heap_len = loop->heap_cap = 0;
}

uint64_t tw__loop_now(const struct tw_loop *loop)
{
    return loop->now_ms;
}

void tw__loop_update_time(struct tw_loop *loop)
{
    loop->now_ms = tw__now_ms();
}

void tw__io_init(struct tw_io *io, int fd, tw_io_cb cb, void *data)
{
    memset(io, 0, sizeof(*io));
    io->fd = fd;
    io->cb = cb;
    io->data = data;
}

int tw__loop_io_set(struct tw_loop *loop, struct tw_io *io, uint32_t events)
{
    struct epoll_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.events = events;
    ev.data.ptr = io;
    if (io->registered && io->events == events)
        return 0;
    if (epoll_ctl(loop->epfd, io->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, io->fd, &ev) < 0)
        return -errno;
    io->registered = 1;
    io->events = events;
    io->del_gen = 0;
    return 0;
}

void tw__loop_io_del(struct tw_loop *loop, struct tw_io *io)
{
    if (!io->registered)
        return;
    (void)epoll_ctl(loop->epfd, EPOLL_CTL_DEL, io->fd, NULL);
    io->registered = 0;
    io->events = 0;
    io->del_gen = loop->batch_gen;
}

/* ---- timer heap ---- */

static void heap_swap(struct tw_loop *loop, size_t a, size_t b)
{
    struct tw_timer *t = loop->heap[a];
    loop->heap[a] = loop->heap[b];
    loop->heap[b] = t;
    loop->heap[a]->heap_index = a;
    loop->heap[b]->heap_index = b;
}

static void heap_up(struct tw_loop *loop, size_t i)
{
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (loop->heap[parent]->deadline_ms <= loop->heap[i]->deadline_ms)
            break;
        heap_swap(loop, i, parent);
        i = parent;
    }
}

static void heap_down(struct tw_loop *loop, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < loop->heap_len && loop->heap[l]->deadline_ms < loop->heap[m]->deadline_ms)
            m = l;
        if (r < loop->heap_len && loop->heap[r]->deadline_ms < loop->heap[m]->deadline_ms)
            m = r;
        if (m == i)
            return;
        heap_swap(loop, i, m);
        i = m;
    }
}

void tw__timer_init(struct tw_timer *t, tw_timer_cb cb, void *data)
{
    memset(t, 0, sizeof(*t));
    t->cb = cb;
    t->data = data;
    t->heap_index = SIZE_MAX;
}

int tw__timer_active(const struct tw_timer *t)
{
    return t->heap_index != SIZE_MAX;
}

void tw__loop_timer_stop(struct tw_loop *loop, struct tw_timer *t)
{
    size_t i = t->heap_index;
    if (i == SIZE_MAX)
        return;
    t->heap_index = SIZE_MAX;
    loop->heap_len--;
    if (i == loop->heap_len)
        return;
    loop->heap[i] = loop->heap[loop->heap_len];
    loop->heap[i]->heap_index = i;
    heap_up(loop, i);
    heap_down(loop, loop->heap[i]->heap_index);
}

int tw__loop_timer_start(struct tw_loop *loop, struct tw_timer *t, uint64_t after_ms)
{
    tw__loop_timer_stop(loop, t);
    if (loop->heap_len == loop->heap_cap) {
        size_t cap = loop->heap_cap ? loop->heap_cap * 2 : 64;
        struct tw_timer **h = realloc(loop->heap, cap * sizeof(*h));
        if (!h)
            return -ENOMEM;
        loop->heap = h;
        loop->heap_cap = cap;
    }
    /* At least 1 ms, so a callback re-arming its own timer with 0 cannot spin
     * inside one run of the expiry loop. */
    t->deadline_ms = loop->now_ms + (after_ms ? after_ms : 1);
    t->heap_index = loop->heap_len;
    loop->heap[loop->heap_len++] = t;
    heap_up(loop, t->heap_index);
    return 0;
}

/* ---- signals ---- */

static void on_signalfd(struct tw_loop *loop, struct tw_io *io, uint32_t events)
{
    struct signalfd_siginfo si;
    for (;;) {
        ssize_t n = read(io->fd, &si, sizeof(si));
        if (n != (ssize_t)sizeof(si))
            return; /* EAGAIN: drained */
        if (loop->sig_cb)
            loop->sig_cb(loop, (int)si.ssi_signo, loop->sig_data);
    }
}

int tw__loop_signals(struct tw_loop *loop, const sigset_t *mask, tw_signal_cb cb, void *data)
{
    int rc;
    if (sigprocmask(SIG_BLOCK, mask, NULL) < 0)
        return -errno;
    int fd = signalfd(loop->sigfd, mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (loop->sigfd < 0) {
        loop->sigfd = fd;
        tw__io_init(&loop->sig_io, fd, on_signalfd, NULL);
        rc = tw__loop_io_set(loop, &loop->sig_io, EPOLLIN);
        if (rc < 0) {
            close(fd);
            loop->sigfd = -1;
            return rc;
        }
    }
    loop->sig_cb = cb;
    loop->sig_data = data;
    return 0;
}

/* ---- run ---- */

static int next_timeout(const struct tw_loop *loop, int max_wait_ms)
{
    if (loop->heap_len == 0)
        return max_wait_ms;
    uint64_t d = loop->heap[0]->deadline_ms;
    uint64_t wait = d > loop->now_ms ? d - loop->now_ms : 0;
    if (wait > 60000)
        wait = 60000;
    if (max_wait_ms >= 0 && (uint64_t)max_wait_ms < wait)
        return max_wait_ms;
    return (int)wait;
}

int tw__loop_run_once(struct tw_loop *loop, int max_wait_ms)
{
    struct epoll_event evs[MAX_EVENTS];
    int ran = 0;
    int n = epoll_wait(loop->epfd, evs, MAX_EVENTS, next_timeout(loop, max_wait_ms));
    if (n < 0 && errno != EINTR)
        return -errno;
    loop->now_ms = tw__now_ms();
    loop->batch_gen++;
    uint64_t gen = loop->batch_gen;
    for (int i = 0; i < n; i++) {
        struct tw_io *io = evs[i].data.ptr;
        /* Removed by an earlier callback of this batch: its memory may be on
         * its owner's free list, but it is still valid until we return. */
        if (io->del_gen == gen || !io->registered)
            continue;
        io->cb(loop, io, evs[i].events);
        ran++;
    }
    /* Timers: pop everything due. A callback may re-arm its own timer for a
     * later time; one armed "now" again runs on the next iteration. */
    loop->now_ms = tw__now_ms();
    uint64_t now = loop->now_ms;
    while (loop->heap_len > 0 && loop->heap[0]->deadline_ms <= now) {
        struct tw_timer *t = loop->heap[0];
        tw__loop_timer_stop(loop, t);
        t->cb(loop, t);
        ran++;
    }
    return ran;
}
