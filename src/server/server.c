/*
 * The server: listener, connection admission, the run loop, signals and
 * shutdown. Shutdown order: stop accepting; fail every transfer with
 * SHUTTING_DOWN; send GOODBYE(SHUTTING_DOWN); let each connection flush and
 * close; after cfg.shutdown_grace_ms close whatever is left. The loop ends
 * when no connection remains.
 */
#include "server/server.h"

#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "gpu/cuda.h"
#include "net/sock.h"
#include "server/admission.h"
#include "server/log.h"

#define SCRATCH_LEN (256u << 10)

static void on_accept(struct tw_loop *loop, struct tw_io *io, uint32_t events);

/* Refusing through a connection object (ERROR(BUSY, 0), flush, half-close,
 * wait for the peer's EOF) is the polite way, but it holds a descriptor per
 * refused peer, so beyond TW_SRV_MAX_REJECTING of them the refusal is
 * written here at once: the frame is small enough for any fresh socket's
 * send buffer. Input already received is read first and the write side
 * shut before close, so the peer finds ERROR then EOF rather than a reset
 * (a peer that keeps sending after this may still see one). */
static void refuse_now(struct tw_srv *srv, int fd, const char *why)
{
    char text[256];
    uint8_t buf[TW_FRAME_HEADER_LEN + 6 + sizeof(text)];
    struct tw_msg m;
    snprintf(text, sizeof(text), "server busy, try again later: %s", why);
    tw__msg_error_init(&m, 0, TW_WIRE_BUSY, text);
    ssize_t n = tw__msg_encode(&m, buf, sizeof(buf));
    if (n > 0) {
        ssize_t w = send(fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w; /* best effort: the peer may already be gone */
    }
    while (read(fd, srv->scratch, srv->scratch_len) > 0)
        ;
    shutdown(fd, SHUT_WR);
    close(fd);
    srv->stats.connections_rejected++;
}

/* Admits or refuses one accepted socket (takes ownership of fd). */
static void admit(struct tw_srv *srv, int fd, const struct sockaddr *peer)
{
    struct tw_admit_input in = {
        .served = srv->nconns,
        .max_served = srv->cfg.max_connections,
        .handshaking = srv->nhandshaking,
        .max_handshaking = srv->cfg.max_handshakes,
        .from_address = tw__srv_handshakes_from(srv, peer),
        .max_per_address = srv->cfg.max_handshakes_per_address,
    };
    struct tw_admit_decision d = tw__admit_decide(&in);
    const char *why = tw__admit_reason_text(d.reason);
    if (d.verdict == TW_ADMIT_REFUSE) {
        if (srv->nrejecting >= TW_SRV_MAX_REJECTING) {
            refuse_now(srv, fd, why);
            return;
        }
        int rc = tw__conn_new(srv, fd, peer, 1, why, 0);
        if (rc < 0)
            TW_LOGW("accept: cannot set up the connection: %s", tw_strerror(rc));
        return;
    }
    if (d.verdict == TW_ADMIT_EVICT_OLDEST) {
        struct tw_srv_conn *old = srv->hs_head;
        srv->stats.connections_evicted++;
        TW_LOGD("conn %llu %s: handshake ended to admit a new connection: %s",
                (unsigned long long)old->id, old->peer, why);
        tw__conn_fail(old, TW_WIRE_BUSY,
                      "server busy: handshake not completed after %.1f s while a new connection "
                      "was waiting (%s)",
                      (double)(tw__loop_now(&srv->loop) - old->accepted_ms) / 1000.0, why);
    }
    uint64_t hs_ms = srv->cfg.handshake_timeout_ms;
    if (d.short_deadline && srv->cfg.handshake_timeout_busy_ms &&
        (hs_ms == 0 || srv->cfg.handshake_timeout_busy_ms < hs_ms))
        hs_ms = srv->cfg.handshake_timeout_busy_ms;
    int rc = tw__conn_new(srv, fd, peer, 0, why, hs_ms);
    if (rc < 0)
        TW_LOGW("accept: cannot set up the connection: %s", tw_strerror(rc));
}

/* Idle memory (docs/performance.md, "Process start and idle memory"):
 * spare buffers and small-tensor slab blocks nobody used for a period, then
 * free heap pages (connection buffers) that glibc would otherwise keep. */
static void on_trim(struct tw_loop *loop, struct tw_timer *t)
{
    struct tw_srv *srv = t->data;
    uint64_t freed = tw__store_trim_spares(&srv->store);
    if (freed)
        TW_LOGD("freed %llu bytes of unused spare buffers", (unsigned long long)freed);
    malloc_trim(0);
    tw__loop_timer_start(loop, t, TW_SRV_TRIM_MS);
}

static void on_accept_retry(struct tw_loop *loop, struct tw_timer *t)
{
    struct tw_srv *srv = t->data;
    if (srv->lfd >= 0 && !srv->shutting_down)
        tw__loop_io_set(loop, &srv->listen_io, EPOLLIN);
}

static void on_accept(struct tw_loop *loop, struct tw_io *io, uint32_t events)
{
    struct tw_srv *srv = io->data;
    /* A bounded batch per wakeup keeps accept storms from starving
     * established connections. */
    for (int i = 0; i < 64; i++) {
        struct sockaddr_storage peer;
        int fd, rc = tw__net_accept(srv->lfd, &fd, &peer, NULL);
        if (rc == -EAGAIN)
            return;
        if (rc == -EMFILE || rc == -ENFILE || rc == -ENOBUFS || rc == -ENOMEM) {
            /* Out of descriptors: the pending connection stays in the
             * backlog; pause accepting briefly instead of spinning. */
            TW_LOGW("accept: %s; pausing accepts for 100 ms", tw_strerror(rc));
            tw__loop_io_set(loop, &srv->listen_io, 0);
            tw__loop_timer_start(loop, &srv->accept_retry, 100);
            return;
        }
        if (rc < 0) {
            TW_LOGD("accept: %s", tw_strerror(rc));
            continue; /* ECONNABORTED and friends: that peer is gone */
        }
        admit(srv, fd, (struct sockaddr *)&peer);
    }
}

static void on_signal(struct tw_loop *loop, int signo, void *data)
{
    struct tw_srv *srv = data;
    if (srv->shutting_down) {
        TW_LOGW("%s again: closing all connections now", strsignal(signo));
        for (struct tw_srv_conn *c = srv->conns; c; c = c->next)
            tw__conn_destroy(c, "server stopped");
        return;
    }
    char why[64];
    snprintf(why, sizeof(why), "%s", strsignal(signo));
    tw__srv_shutdown(srv, why);
}

static void on_grace_timeout(struct tw_loop *loop, struct tw_timer *t)
{
    struct tw_srv *srv = t->data;
    if (srv->conns)
        TW_LOGW("shutdown grace period over: closing %u remaining connection(s)",
                srv->nconns + srv->nrejecting);
    for (struct tw_srv_conn *c = srv->conns; c; c = c->next)
        tw__conn_destroy(c, "shutdown grace period over");
}

static int served(const struct tw_srv_config *c, int ordinal)
{
    if (c->ndevices == 0)
        return 1;
    for (unsigned i = 0; i < c->ndevices; i++)
        if (c->devices[i].type == TW_DEVICE_CUDA && c->devices[i].ordinal == ordinal)
            return 1;
    return 0;
}

/* Resolves --devices/--capacity against the GPUs of this host (none without
 * a CUDA driver) and declares the GPUs to the store. Free memory is asked
 * only of GPUs that will be served (asking creates their CUDA context). */
static int setup_devices(struct tw_srv *srv, char *errbuf, size_t errlen)
{
    const struct tw_srv_config *c = &srv->cfg;
    static uint64_t gpu_free[TW_DEVICE_MAX_CUDA_ORDINAL + 1];
    char why[256];
    srv->gpu_count = tw__cuda_device_count();
    if (srv->gpu_count > TW_DEVICE_MAX_CUDA_ORDINAL + 1)
        srv->gpu_count = TW_DEVICE_MAX_CUDA_ORDINAL + 1;
    for (int i = 0; i < srv->gpu_count; i++) {
        uint64_t total = 0;
        gpu_free[i] = 0;
        if (served(c, i) && tw__cuda_mem_info(i, &gpu_free[i], &total, why, sizeof(why)) < 0)
            TW_LOGW("cuda:%d: cannot read its free memory: %s", i, why);
    }
    int rc = tw__srv_devices_resolve(c, srv->gpu_count, gpu_free, &srv->devices, errbuf, errlen);
    if (rc < 0)
        return rc;
    for (unsigned i = 0; i < srv->devices.n; i++) {
        const struct tw_srv_device *d = &srv->devices.d[i];
        char tag[TW_DEVICE_TAG_BUFLEN];
        tw__device_format(&d->dev, tag, sizeof(tag));
        if (d->dev.type != TW_DEVICE_CUDA)
            continue;
        if (tw__store_add_gpu(&srv->store, d->dev.ordinal, d->capacity) < 0) {
            snprintf(errbuf, errlen, "--devices: too many GPUs (at most %d)", TW_STORE_MAX_GPUS);
            return TW_EINVAL;
        }
        char cap[32] = "unlimited";
        if (d->capacity)
            snprintf(cap, sizeof(cap), "%.2f GiB", (double)d->capacity / (double)(1ull << 30));
        TW_LOGI("device %s: capacity %s (%.2f GiB free at startup)", tag, cap,
                (double)gpu_free[d->dev.ordinal] / (double)(1ull << 30));
    }
    return 0;
}

int tw__srv_init(struct tw_srv *srv, const struct tw_srv_config *cfg, char *errbuf, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    int rc;

    memset(srv, 0, sizeof(*srv));
    srv->cfg = *cfg;
    srv->lfd = -1;
    if (cfg->token_file[0]) {
        rc = tw__token_load_file(&srv->token, cfg->token_file,
                                 cfg->allow_insecure_token_file ? TW__TOKEN_ALLOW_INSECURE : 0,
                                 errbuf, errlen);
        if (rc < 0)
            return rc;
    }
    rc = tw__net_parse_hostport(cfg->listen, &ss, &sl, errbuf, errlen);
    if (rc < 0)
        goto out_clear_token;
    rc = tw__loop_init(&srv->loop);
    if (rc < 0) {
        snprintf(errbuf, errlen, "epoll: %s", tw_strerror(rc));
        goto out_clear_token;
    }
    /* The signal mask before any thread exists: every thread inherits it
     * (the data-mover's, and the CUDA driver's, which setup_devices starts),
     * so SIGTERM reaches the signalfd instead of a thread that does not
     * block it, whose default action ends the process. Masked after the
     * devices, tensorwired on the H200 host ended with status 1 or 143 on
     * SIGTERM, without its shutdown (docs/testing.md). */
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    rc = tw__loop_signals(&srv->loop, &mask, on_signal, srv);
    if (rc < 0) {
        snprintf(errbuf, errlen, "signalfd: %s", tw_strerror(rc));
        goto out_destroy_loop;
    }
    rc = tw__store_init(&srv->store, cfg->capacity);
    if (rc < 0) {
        snprintf(errbuf, errlen, "out of memory");
        goto out_destroy_loop;
    }
    rc = setup_devices(srv, errbuf, errlen);
    if (rc < 0)
        goto out_destroy_store;
    srv->scratch_len = SCRATCH_LEN;
    srv->scratch = malloc(srv->scratch_len);
    if (!srv->scratch) {
        rc = -ENOMEM;
        snprintf(errbuf, errlen, "out of memory");
        goto out_destroy_store;
    }
    rc = tw__net_listen((struct sockaddr *)&ss, sl, 1024, &srv->lfd);
    if (rc < 0) {
        char a[TW_NET_ADDRSTRLEN];
        snprintf(errbuf, errlen, "cannot listen on %s: %s",
                 tw__net_addr_format((struct sockaddr *)&ss, a, sizeof(a)), tw_strerror(rc));
        goto out_free_scratch;
    }
    rc = tw__net_local_addr(srv->lfd, &ss, &sl);
    if (rc < 0) {
        snprintf(errbuf, errlen, "getsockname: %s", tw_strerror(rc));
        goto out_close_listener;
    }
    tw__net_addr_format((struct sockaddr *)&ss, srv->bound, sizeof(srv->bound));
    tw__io_init(&srv->listen_io, srv->lfd, on_accept, srv);
    rc = tw__loop_io_set(&srv->loop, &srv->listen_io, EPOLLIN);
    if (rc < 0) {
        snprintf(errbuf, errlen, "epoll_ctl: %s", tw_strerror(rc));
        goto out_close_listener;
    }
    tw__timer_init(&srv->accept_retry, on_accept_retry, srv);
    tw__timer_init(&srv->grace_timer, on_grace_timeout, srv);
    tw__timer_init(&srv->trim_timer, on_trim, srv);
    tw__loop_timer_start(&srv->loop, &srv->trim_timer, TW_SRV_TRIM_MS);

    rc = tw__srv_fabric_init(srv);
    if (rc < 0) {
        snprintf(errbuf, errlen, "rdma data plane: %s", tw_strerror(rc));
        goto out_close_listener;
    }
    rc = tw__srv_gdr_init(srv, errbuf, errlen);
    if (rc < 0)
        goto out_destroy_fabric;
    return 0;

out_destroy_fabric:
    tw__srv_gdr_destroy(srv);
    tw__srv_fabric_destroy(srv);
out_close_listener:
    close(srv->lfd);
    srv->lfd = -1;
out_free_scratch:
    free(srv->scratch);
    srv->scratch = NULL;
out_destroy_store:
    tw__store_destroy(&srv->store);
out_destroy_loop:
    tw__loop_destroy(&srv->loop);
out_clear_token:
    tw__token_clear(&srv->token);
    return rc;
}

static void free_dead(struct tw_srv *srv)
{
    while (srv->dead) {
        struct tw_srv_conn *c = srv->dead;
        srv->dead = c->next;
        tw__conn_free(c);
    }
}

/* Puts read while their copies into the GPU still ran: publish those whose
 * copies are done; when the loop found nothing else to do (idle), wait for
 * the rest. Their OKs go out with the connection's next flush (enqueue
 * asks for EPOLLOUT). */
static void commits_progress(struct tw_srv *srv, int idle)
{
    int left = 0;
    srv->commits_pending = 0;
    struct tw_srv_conn *next;
    for (struct tw_srv_conn *c = srv->conns; c; c = next) {
        next = c->next; /* publishing may close c (it then joins srv->dead) */
        if (!c->commit_head || c->state != TW_CONN_OPEN)
            continue;
        if (idle)
            tw__xfer_commits_flush(c);
        else
            left |= tw__xfer_commits_advance(c);
    }
    srv->commits_pending = left;
}

int tw__srv_poll(struct tw_srv *srv, int max_wait_ms)
{
    /* Commits pending: look at the sockets without sleeping. */
    int rc = tw__loop_run_once(&srv->loop, srv->commits_pending ? 0 : max_wait_ms);
    if (srv->commits_pending && rc >= 0)
        commits_progress(srv, rc == 0);
    tw__srv_settle(srv);
    free_dead(srv);
    return rc;
}

int tw__srv_run(struct tw_srv *srv)
{
    while (!(srv->shutting_down && !srv->conns)) {
        int rc = tw__srv_poll(srv, -1);
        if (rc < 0) {
            TW_LOGE("event loop: %s", tw_strerror(rc));
            return rc;
        }
    }
    return 0;
}

void tw__srv_shutdown(struct tw_srv *srv, const char *why)
{
    if (srv->shutting_down)
        return;
    srv->shutting_down = 1;
    TW_LOGI("shutting down (%s): %u connection(s) open", why, srv->nconns);
    if (srv->lfd >= 0) {
        tw__loop_io_del(&srv->loop, &srv->listen_io);
        tw__loop_timer_stop(&srv->loop, &srv->accept_retry);
        close(srv->lfd);
        srv->lfd = -1;
    }
    struct tw_srv_conn *c = srv->conns, *next;
    for (; c; c = next) {
        next = c->next;
        if (c->state != TW_CONN_OPEN)
            continue;
        if (c->sm.phase < TW_PHASE_READY) {
            tw__conn_fail(c, TW_WIRE_SHUTTING_DOWN, "server is shutting down");
            continue;
        }
        /* Puts whose bytes are all in (their copies into the GPU may
         * still run: tw__xfer_commits_advance) are stored and answered,
         * as they were when every read published its puts before the loop
         * went on; the transfers still moving bytes are abandoned. */
        tw__xfer_commits_flush(c);
        if (c->state != TW_CONN_OPEN)
            continue;
        tw__conn_fail_transfers(c, TW_WIRE_SHUTTING_DOWN, "server is shutting down");
        tw__conn_goodbye(c, TW_WIRE_SHUTTING_DOWN, "server shutting down");
    }
    tw__loop_timer_start(&srv->loop, &srv->grace_timer,
                         srv->cfg.shutdown_grace_ms ? srv->cfg.shutdown_grace_ms : 1);
}

void tw__srv_destroy(struct tw_srv *srv)
{
    for (struct tw_srv_conn *c = srv->conns; c; c = c->next)
        tw__conn_destroy(c, "server stopped");
    tw__srv_settle(srv);
    free_dead(srv);
    if (srv->lfd >= 0) {
        tw__loop_io_del(&srv->loop, &srv->listen_io);
        close(srv->lfd);
        srv->lfd = -1;
    }
    tw__loop_timer_stop(&srv->loop, &srv->grace_timer);
    tw__loop_timer_stop(&srv->loop, &srv->accept_retry);
    tw__loop_timer_stop(&srv->loop, &srv->trim_timer);
    /* After the connections (their peers are removed), before the store
     * (deferred registrations still hold tensor versions). */
    tw__srv_fabric_destroy(srv);
    tw__srv_gdr_destroy(srv);
    tw__srv_stage_destroy(srv);
    tw__store_destroy(&srv->store);
    free(srv->scratch);
    srv->scratch = NULL;
    tw__loop_destroy(&srv->loop);
    tw__token_clear(&srv->token);
}
