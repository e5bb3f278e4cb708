/*
 * The server: listener, connection admission, the run loop, signals and
 * shutdown. Shutdown order: stop accepting; fail every transfer with
 * SHUTTING_DOWN; send GOODBYE(SHUTTING_DOWN); let each connection flush and
 * close; after cfg.shutdown_grace_ms close whatever is left. The loop ends
 * when no connection remains.
 */
#include "server/server.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "net/sock.h"
#include "server/log.h"

#define SCRATCH_LEN (256u << 10)

static void on_accept(struct tw_loop *loop, struct tw_io *io, uint32_t events);

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
        int rejecting = srv->nconns >= srv->cfg.max_connections;
        if (rejecting && srv->nrejecting >= TW_SRV_MAX_REJECTING) {
            close(fd); /* refusing politely has its limits too */
            srv->stats.connections_rejected++;
            continue;
        }
        rc = tw__conn_new(srv, fd, (struct sockaddr *)&peer, rejecting);
        if (rc < 0)
            TW_LOGW("accept: cannot set up the connection: %s", tw_strerror(rc));
    }
}

static void on_signal(struct tw_loop *loop, int signo, void *data)
{
    struct tw_srv *srv = data;
    if (srv->shutting_down) {
        TW_LOGW("%s again: closing all connections now", strsignal(signo));
        while (srv->conns)
            tw__conn_destroy(srv->conns, "server stopped");
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
    while (srv->conns)
        tw__conn_destroy(srv->conns, "shutdown grace period over");
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
    rc = tw__store_init(&srv->store, cfg->capacity);
    if (rc < 0) {
        snprintf(errbuf, errlen, "out of memory");
        goto out_destroy_loop;
    }
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

    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    rc = tw__loop_signals(&srv->loop, &mask, on_signal, srv);
    if (rc < 0) {
        snprintf(errbuf, errlen, "signalfd: %s", tw_strerror(rc));
        goto out_close_listener;
    }
    /* After the signal mask: the data-mover thread inherits it, so SIGTERM
     * reaches the signalfd instead of killing the process. */
    rc = tw__srv_fabric_init(srv);
    if (rc < 0) {
        snprintf(errbuf, errlen, "rdma data plane: %s", tw_strerror(rc));
        goto out_close_listener;
    }
    return 0;

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

int tw__srv_poll(struct tw_srv *srv, int max_wait_ms)
{
    int rc = tw__loop_run_once(&srv->loop, max_wait_ms);
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
        next = c->next; /* c may be destroyed below, never its successor */
        if (c->state != TW_CONN_OPEN)
            continue;
        if (c->sm.phase < TW_PHASE_READY) {
            tw__conn_fail(c, TW_WIRE_SHUTTING_DOWN, "server is shutting down");
            continue;
        }
        tw__conn_fail_transfers(c, TW_WIRE_SHUTTING_DOWN, "server is shutting down");
        tw__conn_goodbye(c, TW_WIRE_SHUTTING_DOWN, "server shutting down");
    }
    tw__loop_timer_start(&srv->loop, &srv->grace_timer,
                         srv->cfg.shutdown_grace_ms ? srv->cfg.shutdown_grace_ms : 1);
}

void tw__srv_destroy(struct tw_srv *srv)
{
    while (srv->conns)
        tw__conn_destroy(srv->conns, "server stopped");
    free_dead(srv);
    if (srv->lfd >= 0) {
        tw__loop_io_del(&srv->loop, &srv->listen_io);
        close(srv->lfd);
        srv->lfd = -1;
    }
    tw__loop_timer_stop(&srv->loop, &srv->grace_timer);
    tw__loop_timer_stop(&srv->loop, &srv->accept_retry);
    /* After the connections (their peers are removed), before the store
     * (deferred registrations still hold tensor versions). */
    tw__srv_fabric_destroy(srv);
    tw__store_destroy(&srv->store);
    free(srv->scratch);
    srv->scratch = NULL;
    tw__loop_destroy(&srv->loop);
    tw__token_clear(&srv->token);
}
