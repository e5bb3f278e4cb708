/*
 * A single-threaded epoll event loop with timers and signals.
 *
 * - I/O: struct tw_io watches one fd (level-triggered). The loop keeps a
 *   pointer to the caller's struct tw_io until tw__loop_io_del(); the caller
 *   owns it and must not free it before. Because epoll may already have
 *   returned an event for an io that a callback earlier in the same batch
 *   removed, the loop skips every io deleted during the current batch: it is
 *   safe to free an io right after tw__loop_io_del() only once
 *   tw__loop_run_once() has returned (callers defer frees to that point).
 * - Timers: struct tw_timer, a one-shot deadline in the loop's monotonic
 *   millisecond clock, kept in a binary min-heap; the earliest deadline bounds
 *   the epoll_wait timeout. Caller-owned, like tw_io; stopping an inactive
 *   timer is a no-op.
 * - Signals: tw__loop_signals() blocks the given signals for the calling
 *   thread and delivers them through a signalfd as callbacks.
 *
 * Not thread-safe: one loop, one thread.
 */
#ifndef TW_NET_LOOP_H
#define TW_NET_LOOP_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

struct tw_loop;
struct tw_io;
struct tw_timer;

typedef void (*tw_io_cb)(struct tw_loop *loop, struct tw_io *io, uint32_t events);
typedef void (*tw_timer_cb)(struct tw_loop *loop, struct tw_timer *timer);
typedef void (*tw_signal_cb)(struct tw_loop *loop, int signo, void *data);

struct tw_io {
    int fd;
    uint32_t events; /* EPOLLIN / EPOLLOUT currently watched */
    tw_io_cb cb;
    void *data;
    uint64_t del_gen; /* internal: batch in which it was deleted */
    int registered;   /* internal */
};

struct tw_timer {
    uint64_t deadline_ms;
    tw_timer_cb cb;
    void *data;
    size_t heap_index; /* internal: SIZE_MAX when not armed */
};

struct tw_loop {
    int epfd;
    int sigfd;
    struct tw_io sig_io;
    tw_signal_cb sig_cb;
    void *sig_data;
    struct tw_timer **heap;
    size_t heap_len, heap_cap;
    uint64_t now_ms;
    uint64_t batch_gen;
    int stop;
};

/* Returns 0 or a negated errno. */
int tw__loop_init(struct tw_loop *loop);
/* Closes the epoll and signal fds and frees the heap. Watched fds are not
 * closed (they belong to their owners). */
void tw__loop_destroy(struct tw_loop *loop);

/* Milliseconds since an arbitrary start (CLOCK_MONOTONIC), refreshed once
 * per loop iteration and by tw__loop_update_time(). */
uint64_t tw__loop_now(const struct tw_loop *loop);
void tw__loop_update_time(struct tw_loop *loop);

void tw__io_init(struct tw_io *io, int fd, tw_io_cb cb, void *data);
/* Starts watching io->fd for events (EPOLLIN | EPOLLOUT subset), or changes
 * the watched set; events == 0 keeps the fd registered but quiet. */
int tw__loop_io_set(struct tw_loop *loop, struct tw_io *io, uint32_t events);
void tw__loop_io_del(struct tw_loop *loop, struct tw_io *io);

void tw__timer_init(struct tw_timer *t, tw_timer_cb cb, void *data);
/* Arms t to fire after_ms from now (re-arms if already armed). */
int tw__loop_timer_start(struct tw_loop *loop, struct tw_timer *t, uint64_t after_ms);
void tw__loop_timer_stop(struct tw_loop *loop, struct tw_timer *t);
int tw__timer_active(const struct tw_timer *t);

/* Routes the signals in *mask to cb (one signal handler per loop). */
int tw__loop_signals(struct tw_loop *loop, const sigset_t *mask, tw_signal_cb cb, void *data);

/*
 * Waits up to max_wait_ms (-1: until the next timer or event) and runs the
 * callbacks of ready fds, then expired timers. Returns the number of
 * callbacks run, or a negated errno from epoll_wait (never -EINTR).
 */
int tw__loop_run_once(struct tw_loop *loop, int max_wait_ms);

#endif
