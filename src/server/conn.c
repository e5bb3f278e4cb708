/*
 * Connection I/O: the nonblocking read state machine (frame headers into a
 * small buffer, DATA bytes straight into tensor storage), the output queue
 * (control frames copied, DATA frames pointing into tensors, written with
 * sendmsg scatter lists), timers, and the close sequence.
 *
 * Close sequence: queue the last frames (ERROR / GOODBYE), stop reading,
 * flush, shutdown(SHUT_WR), then read and discard until the peer's EOF. Closing
 * with unread input would make the kernel send RST, which can destroy the
 * very ERROR frame the peer needs to see.
 *
 * Teardown is deferred (server.h): tw__conn_close / tw__conn_destroy only
 * mark the connection and put it on srv->settle; tw__srv_settle, run by the
 * server between loop iterations, is the only code that drops transfers,
 * removes the fabric peer, closes the socket and unlinks the connection.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "net/sock.h"
#include "server/log.h"
#include "server/server.h"

#define MAX_IOV 128
#define LINGER_MS 2000

static void conn_on_io(struct tw_loop *loop, struct tw_io *io, uint32_t events);
static void conn_flush(struct tw_srv_conn *c);
static void conn_update_events(struct tw_srv_conn *c);

/* ---- timers ---- */

static void on_handshake_timeout(struct tw_loop *loop, struct tw_timer *t)
{
    struct tw_srv_conn *c = t->data;
    if (c->state != TW_CONN_OPEN || c->sm.phase >= TW_PHASE_READY)
        return;
    tw__conn_fail(c, TW_WIRE_TIMEOUT, "handshake not completed within %.1f s",
                  (double)c->srv->cfg.handshake_timeout_ms / 1000.0);
}

static void on_idle_timeout(struct tw_loop *loop, struct tw_timer *t)
{
    struct tw_srv_conn *c = t->data;
    uint64_t idle = c->srv->cfg.idle_timeout_ms;
    uint64_t now = tw__loop_now(loop);
    if (c->state != TW_CONN_OPEN)
        return;
    if (now - c->last_io_ms < idle) {
        tw__loop_timer_start(loop, t, idle - (now - c->last_io_ms));
        return;
    }
    char why[96];
    snprintf(why, sizeof(why), "no traffic for %.1f s", (double)idle / 1000.0);
    if (c->sm.phase < TW_PHASE_READY) {
        tw__conn_fail(c, TW_WIRE_TIMEOUT, "%s", why);
        return;
    }
    tw__conn_fail_transfers(c, TW_WIRE_TIMEOUT, why);
    tw__conn_goodbye(c, TW_WIRE_TIMEOUT, why);
}

static void on_close_timeout(struct tw_loop *loop, struct tw_timer *t)
{
    struct tw_srv_conn *c = t->data;
    if (c->state == TW_CONN_OPEN) {
        /* The GOODBYE reply window is over. */
        char why[sizeof(c->close_reason)];
        snprintf(why, sizeof(why), "%s", c->close_reason);
        tw__conn_close(c, why);
        return;
    }
    tw__conn_destroy(c, c->state == TW_CONN_FLUSHING ? "peer did not read the final frames"
                                                     : c->close_reason);
}

void tw__conn_goodbye(struct tw_srv_conn *c, uint32_t code, const char *reason)
{
    struct tw_msg m;
    if (c->state != TW_CONN_OPEN || c->sm.goodbye_sent)
        return;
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_GOODBYE;
    m.u.goodbye.code = code;
    if (tw__conn_send(c, &m) < 0)
        return;
    snprintf(c->close_reason, sizeof(c->close_reason), "%s", reason);
    tw__loop_timer_stop(&c->srv->loop, &c->idle_timer);
    tw__loop_timer_start(&c->srv->loop, &c->close_timer, TW_SRV_GOODBYE_WINDOW_MS);
}

/* ---- creation and teardown ---- */

static void handshake_list_add(struct tw_srv_conn *c)
{
    struct tw_srv *srv = c->srv;
    c->handshaking = 1;
    c->hs_next = NULL;
    c->hs_prev = srv->hs_tail;
    if (srv->hs_tail)
        srv->hs_tail->hs_next = c;
    else
        srv->hs_head = c;
    srv->hs_tail = c;
    srv->nhandshaking++;
}

static void handshake_list_remove(struct tw_srv_conn *c)
{
    struct tw_srv *srv = c->srv;
    if (!c->handshaking)
        return;
    if (c->hs_prev)
        c->hs_prev->hs_next = c->hs_next;
    else
        srv->hs_head = c->hs_next;
    if (c->hs_next)
        c->hs_next->hs_prev = c->hs_prev;
    else
        srv->hs_tail = c->hs_prev;
    c->hs_next = c->hs_prev = NULL;
    c->handshaking = 0;
    srv->nhandshaking--;
}

void tw__conn_handshake_done(struct tw_srv_conn *c)
{
    handshake_list_remove(c);
    tw__loop_timer_stop(&c->srv->loop, &c->handshake_timer);
}

uint32_t tw__srv_handshakes_from(const struct tw_srv *srv, const struct sockaddr *peer)
{
    uint32_t n = 0;
    for (const struct tw_srv_conn *c = srv->hs_head; c; c = c->hs_next)
        n += tw__net_same_host((const struct sockaddr *)&c->peer_addr, peer);
    return n;
}

/* Admission counts: a connection still in its handshake leaves both
 * budgets as soon as it is closing; others keep their served (or refusing)
 * slot until destroyed. */
static void release_slot(struct tw_srv_conn *c)
{
    handshake_list_remove(c);
    if (!c->slot_held)
        return;
    c->slot_held = 0;
    if (c->rejecting)
        c->srv->nrejecting--;
    else
        c->srv->nconns--;
}

int tw__conn_new(struct tw_srv *srv, int fd, const struct sockaddr *peer, int rejecting,
                 const char *why, uint64_t handshake_ms)
{
    int rc;
    struct tw_srv_conn *c = calloc(1, sizeof(*c));
    if (!c) {
        rc = -ENOMEM;
        goto out_close_fd;
    }
    c->srv = srv;
    c->fd = fd;
    c->id = ++srv->next_conn_id;
    c->rejecting = rejecting;
    tw__net_addr_format(peer, c->peer, sizeof(c->peer));
    memcpy(&c->peer_addr, peer,
           peer->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
    c->in = malloc(TW_SRV_INBUF);
    if (!c->in) {
        rc = -ENOMEM;
        goto out_free_conn;
    }
    rc = tw__sm_init(&c->sm, TW_ROLE_SERVER, srv->cfg.max_inflight);
    if (rc < 0)
        goto out_free_in;
    /* The id table: enough buckets for a full in-flight window, capped so
     * that a thousand connections stay cheap. */
    size_t nb = 16;
    while (nb < srv->cfg.max_inflight && nb < 1024)
        nb *= 2;
    c->xtab = calloc(nb, sizeof(*c->xtab));
    if (!c->xtab) {
        rc = -ENOMEM;
        goto out_destroy_sm;
    }
    c->xtab_mask = nb - 1;
    c->max_frame = TW_PREAUTH_MAX_FRAME;
    tw__io_init(&c->io, fd, conn_on_io, c);
    rc = tw__loop_io_set(&srv->loop, &c->io, EPOLLIN);
    if (rc < 0)
        goto out_free_xtab;
    tw__timer_init(&c->handshake_timer, on_handshake_timeout, c);
    tw__timer_init(&c->idle_timer, on_idle_timeout, c);
    tw__timer_init(&c->close_timer, on_close_timeout, c);
    c->accepted_ms = c->last_io_ms = tw__loop_now(&srv->loop);

    c->next = srv->conns;
    if (srv->conns)
        srv->conns->prev = c;
    srv->conns = c;
    c->slot_held = 1;
    if (rejecting) {
        srv->nrejecting++;
        srv->stats.connections_rejected++;
        /* A crowd is refused thousands of times: only the server's own
         * limit is worth a warning (connections_rejected counts them all). */
        TW_LOG(srv->nconns >= srv->cfg.max_connections ? TW_LOG_WARN : TW_LOG_DEBUG,
               "conn %llu %s: refused: %s (%u connections, %u in their handshake)",
               (unsigned long long)c->id, c->peer, why, srv->nconns, srv->nhandshaking);
        tw__conn_fail(c, TW_WIRE_BUSY, "server busy, try again later: %s", why);
        return 0;
    }
    srv->nconns++;
    srv->stats.connections_total++;
    handshake_list_add(c);
    TW_LOGD("conn %llu %s: accepted (%u connections)", (unsigned long long)c->id, c->peer,
            srv->nconns);
    if (handshake_ms)
        tw__loop_timer_start(&srv->loop, &c->handshake_timer, handshake_ms);
    if (srv->cfg.idle_timeout_ms)
        tw__loop_timer_start(&srv->loop, &c->idle_timer, srv->cfg.idle_timeout_ms);
    return 0;

out_free_xtab:
    free(c->xtab);
out_destroy_sm:
    tw__sm_destroy(&c->sm);
out_free_in:
    free(c->in);
out_free_conn:
    free(c);
out_close_fd:
    close(fd);
    return rc;
}

static void free_chunk(struct tw_out_chunk *ch)
{
    if (ch->ref)
        tw__tensor_unref(ch->ref);
    free(ch);
}

static void drop_all_xfers(struct tw_srv_conn *c)
{
    for (size_t i = 0; i <= c->xtab_mask; i++)
        while (c->xtab[i])
            tw__xfer_destroy(c->xtab[i]);
}

static void mark_teardown(struct tw_srv_conn *c, enum tw_conn_teardown kind)
{
    if (c->teardown == TW_TEARDOWN_NONE) {
        c->settle_next = c->srv->settle;
        c->srv->settle = c;
    }
    if (kind > c->teardown)
        c->teardown = kind;
}

void tw__conn_destroy(struct tw_srv_conn *c, const char *reason)
{
    if (c->state == TW_CONN_DEAD || c->teardown == TW_TEARDOWN_DESTROY)
        return;
    if (reason && reason != c->close_reason)
        snprintf(c->close_reason, sizeof(c->close_reason), "%s", reason);
    /* Nothing more is read or queued from here on. */
    if (c->state == TW_CONN_OPEN)
        c->state = TW_CONN_FLUSHING;
    c->body.active = 0;
    release_slot(c);
    mark_teardown(c, TW_TEARDOWN_DESTROY);
}

static void conn_teardown_destroy(struct tw_srv_conn *c)
{
    struct tw_srv *srv = c->srv;
    if (c->dev_fence) {
        /* No queued copy may still write the host copies freed below. */
        char err[64];
        (void)tw__srv_stage_fence(c, err, sizeof(err));
    }
    drop_all_xfers(c);
    tw__srv_fabric_conn_gone(c);
    c->state = TW_CONN_DEAD;
    tw__loop_io_del(&srv->loop, &c->io);
    close(c->fd);
    c->fd = -1;
    tw__loop_timer_stop(&srv->loop, &c->handshake_timer);
    tw__loop_timer_stop(&srv->loop, &c->idle_timer);
    tw__loop_timer_stop(&srv->loop, &c->close_timer);
    while (c->out_head) {
        struct tw_out_chunk *ch = c->out_head;
        c->out_head = ch->next;
        free_chunk(ch);
    }
    c->out_tail = NULL;
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    release_slot(c); /* already, unless destroyed without being marked */
    if (c->rejecting) {
        TW_LOGD("conn %llu %s: refused connection closed", (unsigned long long)c->id, c->peer);
    } else {
        TW_LOGI("conn %llu %s: closed: %s (%llu requests, %llu bytes in, %llu bytes out, %.1f s)",
                (unsigned long long)c->id, c->peer, c->close_reason,
                (unsigned long long)c->requests, (unsigned long long)c->bytes_in,
                (unsigned long long)c->bytes_out,
                (double)(tw__loop_now(&srv->loop) - c->accepted_ms) / 1000.0);
    }
    /* Freed by the server after this loop iteration. */
    c->next = srv->dead;
    srv->dead = c;
}

void tw__conn_free(struct tw_srv_conn *c)
{
    tw__sm_destroy(&c->sm);
    free(c->xtab);
    free(c->in);
    free(c);
}

void tw__conn_close(struct tw_srv_conn *c, const char *reason)
{
    if (c->state != TW_CONN_OPEN)
        return;
    snprintf(c->close_reason, sizeof(c->close_reason), "%s", reason);
    c->state = TW_CONN_FLUSHING;
    c->body.active = 0;
    /* One that never got through its handshake was never established: its
     * slot is free at once (a crowd of them, refused or evicted, must not
     * fill --max-connections while their close lingers). */
    if (c->handshaking)
        release_slot(c);
    mark_teardown(c, TW_TEARDOWN_CLOSE);
}

static void conn_teardown_close(struct tw_srv_conn *c)
{
    drop_all_xfers(c);
    tw__loop_timer_stop(&c->srv->loop, &c->handshake_timer);
    tw__loop_timer_stop(&c->srv->loop, &c->idle_timer);
    tw__loop_timer_start(&c->srv->loop, &c->close_timer,
                         c->srv->cfg.shutdown_grace_ms ? c->srv->cfg.shutdown_grace_ms : 5000);
    conn_flush(c);
}

void tw__srv_settle(struct tw_srv *srv)
{
    /* A teardown may mark another (a flush that fails turns a close into
     * a destroy): loop until nothing is left. */
    while (srv->settle) {
        struct tw_srv_conn *c = srv->settle;
        srv->settle = c->settle_next;
        c->settle_next = NULL;
        enum tw_conn_teardown kind = c->teardown;
        c->teardown = TW_TEARDOWN_NONE;
        if (kind == TW_TEARDOWN_DESTROY)
            conn_teardown_destroy(c);
        else if (kind == TW_TEARDOWN_CLOSE)
            conn_teardown_close(c);
    }
}

void tw__conn_fail_transfers(struct tw_srv_conn *c, uint32_t code, const char *why)
{
    for (size_t i = 0; i <= c->xtab_mask; i++) {
        while (c->xtab[i]) {
            struct tw_xfer *x = c->xtab[i];
            uint64_t id = x->id;
            char name[80];
            snprintf(name, sizeof(name), "%.64s", x->t->name);
            int put = x->dir == TW_XFER_PUT;
            tw__xfer_destroy(x);
            tw__conn_send_error(c, id, code, "%s of '%s' abandoned: %s", put ? "put" : "get", name,
                                why);
        }
    }
}

/* ---- transfer table ---- */

struct tw_xfer *tw__conn_find_xfer(struct tw_srv_conn *c, uint64_t id)
{
    for (struct tw_xfer *x = c->xtab[id & c->xtab_mask]; x; x = x->hnext)
        if (x->id == id)
            return x;
    return NULL;
}

void tw__conn_add_xfer(struct tw_srv_conn *c, struct tw_xfer *x)
{
    struct tw_xfer **b = &c->xtab[x->id & c->xtab_mask];
    x->hnext = *b;
    *b = x;
    c->nxfers++;
    c->srv->xfers_live++;
}

void tw__conn_remove_xfer(struct tw_srv_conn *c, struct tw_xfer *x)
{
    for (struct tw_xfer **pp = &c->xtab[x->id & c->xtab_mask]; *pp; pp = &(*pp)->hnext) {
        if (*pp == x) {
            *pp = x->hnext;
            c->nxfers--;
            c->srv->xfers_live--;
            break;
        }
    }
    if (x->in_send_list) {
        if (x->snext == x) {
            c->pump_head = NULL;
        } else {
            x->sprev->snext = x->snext;
            x->snext->sprev = x->sprev;
            if (c->pump_head == x)
                c->pump_head = x->snext;
        }
        x->in_send_list = 0;
    }
    if (c->body.active && c->body.x == x)
        c->body.x = NULL; /* the rest of this frame is read and dropped */
}

void tw__conn_maybe_finish(struct tw_srv_conn *c)
{
    if (c->state == TW_CONN_OPEN && c->peer_goodbye && c->nxfers == 0)
        tw__conn_close(c, "client said goodbye");
}

/* ---- output ---- */

static void enqueue(struct tw_srv_conn *c, struct tw_out_chunk *ch)
{
    ch->next = NULL;
    if (c->out_tail)
        c->out_tail->next = ch;
    else
        c->out_head = ch;
    c->out_tail = ch;
    if (ch->ref) {
        c->out_data_frames++;
        c->out_data_bytes += ch->body_len;
    } else
        c->out_ctl_bytes += ch->hdr_len;
    /* Output queued from a timer or another connection's callback: let
     * epoll report writability so the flush happens on the next turn.
     * Inside this connection's own callback the flush follows anyway. */
    if (!c->in_io && !(c->io.events & EPOLLOUT) && c->state != TW_CONN_DEAD)
        (void)tw__loop_io_set(&c->srv->loop, &c->io, c->io.events | EPOLLOUT);
}

static int queue_frame(struct tw_srv_conn *c, const struct tw_msg *m)
{
    ssize_t len = tw__msg_encoded_len(m);
    if (len < 0)
        return (int)len;
    struct tw_out_chunk *ch = malloc(sizeof(*ch) + (size_t)len);
    if (!ch)
        return -ENOMEM;
    ssize_t n = tw__msg_encode(m, ch->hdr, (size_t)len);
    if (n < 0) {
        free(ch);
        return (int)n;
    }
    ch->ref = NULL;
    ch->dev_gpu = -1;
    ch->dev_ticket = 0;
    ch->body = NULL;
    ch->body_len = 0;
    ch->hdr_len = (size_t)n;
    ch->sent = 0;
    enqueue(c, ch);
    return 0;
}

int tw__conn_send(struct tw_srv_conn *c, struct tw_msg *m)
{
    int rc;
    if (c->state != TW_CONN_OPEN)
        return TW_ESHUTDOWN;
    m->hdr.version = TW_PROTO_VERSION;
    rc = tw__sm_on_send(&c->sm, m);
    if (rc < 0) {
        /* A connection-level ERROR must go out even when the state machine
         * has already given up on the connection. */
        if (!(m->hdr.tag == TW_TAG_ERROR && m->hdr.request_id == 0)) {
            TW_LOGE("conn %llu %s: internal: %s (id %llu) refused by the state machine: %s",
                    (unsigned long long)c->id, c->peer, tw__tag_name(m->hdr.tag),
                    (unsigned long long)m->hdr.request_id, tw_strerror_name(rc));
            tw__conn_fail(c, TW_WIRE_INTERNAL,
                          "internal error: the server broke the protocol sequence (%s for "
                          "request %llu: %s)",
                          tw__tag_name(m->hdr.tag), (unsigned long long)m->hdr.request_id,
                          tw_strerror_name(rc));
            return rc;
        }
    }
    rc = queue_frame(c, m);
    if (rc < 0) {
        TW_LOGE("conn %llu %s: cannot queue %s: %s", (unsigned long long)c->id, c->peer,
                tw__tag_name(m->hdr.tag), tw_strerror(rc));
        tw__conn_destroy(c, "out of memory queueing a reply");
    }
    return rc;
}

int tw__conn_send_data(struct tw_srv_conn *c, uint64_t id, struct tw_tensor *t, uint64_t offset,
                       size_t len, int more)
{
    struct tw_msg m;
    int rc;
    if (c->state != TW_CONN_OPEN)
        return TW_ESHUTDOWN;
    memset(&m, 0, sizeof(m));
    m.hdr.version = TW_PROTO_VERSION;
    m.hdr.tag = TW_TAG_DATA;
    m.hdr.flags = more ? TW_FRAME_MORE : 0;
    m.hdr.request_id = id;
    m.u.data.offset = offset;
    m.u.data.bytes.ptr = NULL; /* header + offset only; the bytes follow by pointer */
    m.u.data.bytes.len = (uint32_t)len;
    rc = tw__sm_on_send(&c->sm, &m);
    if (rc < 0) {
        TW_LOGE("conn %llu %s: internal: DATA for %llu refused by the state machine: %s",
                (unsigned long long)c->id, c->peer, (unsigned long long)id, tw_strerror_name(rc));
        tw__conn_fail(c, TW_WIRE_INTERNAL,
                      "internal error: the server broke the protocol sequence (DATA for "
                      "request %llu: %s)",
                      (unsigned long long)id, tw_strerror_name(rc));
        return rc;
    }
    struct tw_out_chunk *ch = malloc(sizeof(*ch) + TW_FRAME_HEADER_LEN + TW_DATA_PREFIX_LEN);
    if (!ch) {
        tw__conn_destroy(c, "out of memory queueing DATA");
        return -ENOMEM;
    }
    ssize_t n = tw__msg_encode(&m, ch->hdr, TW_FRAME_HEADER_LEN + TW_DATA_PREFIX_LEN);
    if (n < 0) {
        free(ch);
        TW_LOGE("conn %llu %s: internal: cannot encode DATA: %s", (unsigned long long)c->id,
                c->peer, tw_strerror_name((int)n));
        tw__conn_fail(c, TW_WIRE_INTERNAL, "internal error encoding DATA: %s",
                      tw_strerror_name((int)n));
        return (int)n;
    }
    ch->hdr_len = (size_t)n;
    ch->body = len ? t->data + offset : NULL;
    ch->body_len = len;
    ch->sent = 0;
    ch->ref = t;
    ch->dev_gpu = -1;
    ch->dev_ticket = 0;
    tw__tensor_ref(t);
    enqueue(c, ch);
    return 0;
}

/* ERROR messages must be valid UTF-8 (the encoder refuses anything else),
 * but they quote peer-chosen names that may have been cut mid-character to
 * keep them short: every byte that does not start a valid sequence becomes
 * '?', and so does every control character (the text is also logged). */
static void utf8_sanitize(char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        unsigned char ch = (unsigned char)s[i];
        size_t len = ch < 0x80             ? 1
                     : (ch & 0xE0) == 0xC0 ? 2
                     : (ch & 0xF0) == 0xE0 ? 3
                     : (ch & 0xF8) == 0xF0 ? 4
                                           : 0;
        if (ch < 0x20 || ch == 0x7f) {
            s[i++] = '?'; /* no newlines or escapes from names into logs */
            continue;
        }
        if (len && i + len <= n && tw__utf8_valid((const uint8_t *)s + i, len)) {
            i += len;
            continue;
        }
        s[i++] = '?';
    }
}

static int vsend_error(struct tw_srv_conn *c, uint64_t id, uint32_t code, const char *fmt,
                       va_list ap)
{
    char text[TW_MAX_ERROR_MSG_LEN + 1];
    struct tw_msg m;
    vsnprintf(text, sizeof(text), fmt, ap);
    utf8_sanitize(text);
    tw__msg_error_init(&m, id, code, text);
    if (id != 0) {
        c->srv->stats.requests_failed++;
        TW_LOG(tw__log_level_of_request_error(code), "conn %llu %s: request %llu failed: %s: %s",
               (unsigned long long)c->id, c->peer, (unsigned long long)id,
               tw_strerror_name(TW_ERR_FROM_WIRE(code)), text);
    } else {
        /* BUSY is admission at work: under a crowd of idle sockets one line
         * each would flood the log (STATS counts them). */
        TW_LOG(code == TW_WIRE_BUSY ? TW_LOG_DEBUG : TW_LOG_INFO,
               "conn %llu %s: connection error %s: %s", (unsigned long long)c->id, c->peer,
               tw_strerror_name(TW_ERR_FROM_WIRE(code)), text);
    }
    return tw__conn_send(c, &m);
}

int tw__conn_send_error(struct tw_srv_conn *c, uint64_t id, uint32_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vsend_error(c, id, code, fmt, ap);
    va_end(ap);
    return rc;
}

void tw__conn_fail(struct tw_srv_conn *c, uint32_t code, const char *fmt, ...)
{
    char reason[256];
    va_list ap;
    if (c->state != TW_CONN_OPEN)
        return;
    /* Puts complete before the failure are stored and answered first. */
    tw__xfer_commits_flush(c);
    if (c->state != TW_CONN_OPEN)
        return;
    va_start(ap, fmt);
    (void)vsend_error(c, 0, code, fmt, ap); /* a failure marked the connection: close is a no-op */
    va_end(ap);
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    char full[300];
    snprintf(full, sizeof(full), "%s: %s", tw_strerror_name(TW_ERR_FROM_WIRE(code)), reason);
    tw__conn_close(c, full);
}

/* Lets sources produce DATA frames while few are queued, round robin. */
static void pump_sources(struct tw_srv_conn *c)
{
    while (c->state == TW_CONN_OPEN && c->pump_head &&
           c->out_data_frames < TW_SRV_DATA_FRAMES_QUEUED &&
           c->out_data_bytes < TW_SRV_DATA_BYTES_QUEUED) {
        struct tw_xfer *x = c->pump_head;
        c->pump_head = x->snext;
        int rc = x->ops->pump(x); /* x stays valid: teardown is deferred */
        if (rc == 0) {
            tw__xfer_destroy(x);
            tw__conn_maybe_finish(c);
        } else if (rc < 0) {
            uint64_t id = x->id;
            char why[sizeof(x->why)];
            snprintf(why, sizeof(why), "%s", x->why[0] ? x->why : tw_strerror(rc));
            tw__xfer_destroy(x);
            tw__conn_send_error(c, id, TW_WIRE_INTERNAL, "sending failed: %s", why);
        }
    }
}

static void conn_flush(struct tw_srv_conn *c)
{
    size_t budget = TW_SRV_IO_BUDGET;
    for (;;) {
        if (c->state == TW_CONN_DEAD || c->teardown == TW_TEARDOWN_DESTROY)
            return;
        pump_sources(c);
        if (!c->out_head || budget == 0)
            break;
        /* The frames from the head whose bytes are in place: a frame whose
         * copy from a GPU still runs ends the write (its copy and those
         * after it overlap this send). When it is the first, nothing is
         * sent and the loop goes on with other work (the frames stay
         * queued, so EPOLLOUT brings it back here): a blocking wait for
         * the copy kept the loop from reading the next requests, whose
         * copies would queue behind it (1/6 of a batch of 32 KiB staged
         * gets' time on the H200, docs/performance.md). */
        struct iovec iov[MAX_IOV];
        int n_iov = 0;
        size_t asked = 0; /* at most TW_NET_IO_MAX per call (sock.h) */
        for (struct tw_out_chunk *ch = c->out_head;
             ch && n_iov < MAX_IOV - 1 && asked < TW_NET_IO_MAX; ch = ch->next) {
            if (ch->dev_gpu >= 0) {
                char err[256];
                int r = tw__srv_stage_ready(c, ch, err, sizeof(err));
                if (r < 0) {
                    c->srv->stats.staged_failed++;
                    char why[320];
                    snprintf(why, sizeof(why), "a copy from the GPU for a queued frame failed: %s",
                             err);
                    TW_LOGW("conn %llu %s: %s", (unsigned long long)c->id, c->peer, why);
                    tw__conn_destroy(c, why);
                    return;
                }
                if (r == 0)
                    break;
            }
            size_t s = ch->sent;
            if (s < ch->hdr_len) {
                iov[n_iov].iov_base = ch->hdr + s;
                iov[n_iov++].iov_len = ch->hdr_len - s;
                asked += ch->hdr_len - s;
                s = 0;
            } else {
                s -= ch->hdr_len;
            }
            if (ch->body_len > s && asked < TW_NET_IO_MAX) {
                size_t len = ch->body_len - s;
                if (len > TW_NET_IO_MAX - asked)
                    len = TW_NET_IO_MAX - asked;
                iov[n_iov].iov_base = (void *)(ch->body + s);
                iov[n_iov++].iov_len = len;
                asked += len;
            }
        }
        if (n_iov == 0)
            break; /* the head's copy still runs */
        struct msghdr mh;
        memset(&mh, 0, sizeof(mh));
        mh.msg_iov = iov;
        mh.msg_iovlen = (size_t)n_iov;
        ssize_t n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            char why[128];
            snprintf(why, sizeof(why), "send failed: %s", strerror(errno));
            tw__conn_destroy(c, why);
            return;
        }
        size_t left = (size_t)n;
        c->bytes_out += left;
        c->srv->stats.bytes_out += left;
        c->last_io_ms = tw__loop_now(&c->srv->loop);
        budget = left >= budget ? 0 : budget - left;
        while (left > 0 ||
               (c->out_head && c->out_head->sent == c->out_head->hdr_len + c->out_head->body_len)) {
            struct tw_out_chunk *ch = c->out_head;
            size_t total = ch->hdr_len + ch->body_len;
            size_t take = total - ch->sent < left ? total - ch->sent : left;
            ch->sent += take;
            left -= take;
            if (ch->sent < total)
                break;
            c->out_head = ch->next;
            if (!c->out_head)
                c->out_tail = NULL;
            if (ch->ref) {
                c->out_data_frames--;
                c->out_data_bytes -= ch->body_len;
            } else
                c->out_ctl_bytes -= ch->hdr_len;
            free_chunk(ch);
        }
    }
    /* A close not yet settled still has to drop its transfers first. */
    if (c->state == TW_CONN_FLUSHING && !c->out_head && c->teardown == TW_TEARDOWN_NONE) {
        /* Everything said: half-close and wait for the peer's EOF. */
        shutdown(c->fd, SHUT_WR);
        c->state = TW_CONN_DRAINING;
        tw__loop_timer_start(&c->srv->loop, &c->close_timer, LINGER_MS);
    }
    conn_update_events(c);
}

static void conn_update_events(struct tw_srv_conn *c)
{
    uint32_t ev = 0;
    if (c->state == TW_CONN_DEAD || c->teardown == TW_TEARDOWN_DESTROY)
        return;
    /* Hysteresis: pause at the high mark, resume below half of it. */
    int paused =
        c->state == TW_CONN_OPEN &&
        c->out_ctl_bytes >= (c->input_paused ? TW_SRV_OUT_CTL_HIGH / 2 : TW_SRV_OUT_CTL_HIGH);
    if (paused != c->input_paused) {
        c->input_paused = paused;
        if (paused)
            c->srv->stats.input_pauses++;
        TW_LOGD("conn %llu %s: %s input (%zu bytes of replies unread)", (unsigned long long)c->id,
                c->peer, paused ? "pausing" : "resuming", c->out_ctl_bytes);
    }
    if ((c->state == TW_CONN_OPEN && !paused) || c->state == TW_CONN_DRAINING)
        ev |= EPOLLIN;
    if (c->out_head || (c->state == TW_CONN_OPEN && c->pump_head))
        ev |= EPOLLOUT;
    int rc = tw__loop_io_set(&c->srv->loop, &c->io, ev);
    if (rc < 0)
        tw__conn_destroy(c, "epoll_ctl failed");
}

/* ---- input ---- */

static const char *phase_limit_note(const struct tw_srv_conn *c)
{
    return c->sm.phase < TW_PHASE_READY ? " (before the handshake completes)" : "";
}

/* A verdict about a frame: fatal -> PROTOCOL_ERROR + close; otherwise the
 * request id is consumed and answered with ERROR(code, id). Returns 0 if the
 * connection lives on. */
static int handle_verdict(struct tw_srv_conn *c, int v, const struct tw_frame_header *hdr,
                          const uint8_t *frame, size_t flen)
{
    /* An unauthenticated peer that skips AUTH is told so in those words
     * (framing violations stay PROTOCOL_ERROR). */
    int framing = v == TW_EBAD_MAGIC || v == TW_EBAD_VERSION || v == TW_EUNKNOWN_TAG ||
                  v == TW_EFRAME_TOO_LARGE || v == TW_EBAD_FLAGS;
    if (c->sm.phase == TW_PHASE_AUTH && hdr->tag != TW_TAG_AUTH && !framing) {
        tw__conn_fail(c, TW_WIRE_UNAUTHORIZED,
                      "authentication required: send AUTH after HELLO_ACK (got %s)",
                      tw__tag_name(hdr->tag));
        return -1;
    }
    if (tw__sm_verdict_is_fatal(v, hdr->tag)) {
        if (v == TW_EFRAME_TOO_LARGE)
            tw__conn_fail(c, TW_WIRE_PROTOCOL_ERROR,
                          "%s frame: payload of %u bytes exceeds the limit of %u bytes%s",
                          tw__tag_name(hdr->tag), hdr->payload_len,
                          c->sm.phase < TW_PHASE_READY ? TW_PREAUTH_MAX_FRAME : c->max_frame,
                          phase_limit_note(c));
        else
            tw__conn_fail(c, tw__sm_fatal_wire_code(v), "%s frame (request %llu): %s (%s)",
                          tw__tag_name(hdr->tag), (unsigned long long)hdr->request_id,
                          tw_strerror(v), tw_strerror_name(v));
        return -1;
    }
    if (hdr->request_id > c->sm.highest_request_id || hdr->request_id == 0) {
        int rc = tw__sm_reject_request(&c->sm, hdr);
        if (rc < 0) {
            tw__conn_fail(c, TW_WIRE_PROTOCOL_ERROR, "%s frame (request %llu): %s (%s)",
                          tw__tag_name(hdr->tag), (unsigned long long)hdr->request_id,
                          tw_strerror(rc), tw_strerror_name(rc));
            return -1;
        }
    }
    if (hdr->tag == TW_TAG_RDMA_REGISTER || hdr->tag == TW_TAG_RDMA_READY ||
        hdr->tag == TW_TAG_RDMA_DONE) {
        /* A request-level verdict about an RDMA frame (e.g. a length that
         * is not byte_length) ended that request in the state machine. */
        struct tw_xfer *x = tw__conn_find_xfer(c, hdr->request_id);
        if (x)
            tw__xfer_destroy(x);
    } else {
        c->requests++;
        c->srv->stats.requests++;
    }
    uint32_t code = tw__sm_verdict_wire_code(v);
    if (v == TW_ESHUTDOWN)
        tw__conn_send_error(c, hdr->request_id, code,
                            "%s not started: the server is shutting down (it sent GOODBYE)",
                            tw__tag_name(hdr->tag));
    else if (v == TW_ETOO_MANY_INFLIGHT)
        tw__conn_send_error(c, hdr->request_id, code,
                            "too many requests in flight on this connection (limit %u)",
                            c->sm.max_inflight);
    else {
        /* Which rule, and the value that broke it (protocol section 8). */
        char why[200];
        tw__explain_request_verdict(frame, frame ? flen : 0, v, why, sizeof(why));
        tw__conn_send_error(c, hdr->request_id, code, "%s request rejected: %s: %s",
                            tw__tag_name(hdr->tag), tw_strerror_name(v), why);
    }
    return c->state == TW_CONN_OPEN ? 0 : -1;
}

static void body_done(struct tw_srv_conn *c)
{
    struct tw_xfer *x = c->body.x;
    c->body.active = 0;
    c->body.x = NULL;
    if (!x)
        return;
    int rc = x->ops->data_end(x, &c->body.msg);
    if (rc == 1)
        tw__xfer_put_complete(x);
    else if (rc < 0)
        tw__conn_fail(c, TW_WIRE_PROTOCOL_ERROR, "DATA for request %llu: %s",
                      (unsigned long long)x->id, tw_strerror(rc));
}

/* n more bytes of the payload being received are in place at body.dst
 * (or were dropped, body.x NULL): counts them and ends the frame when it
 * is complete. */
static void body_took(struct tw_srv_conn *c, size_t n)
{
    if (c->body.x && n) /* a 0-byte tensor has no memory: dst is NULL */
        c->body.dst += n;
    c->body.left -= n;
    if (c->body.left == 0)
        body_done(c);
}

/* A DATA frame header + offset are in the buffer: route its bytes. */
static int begin_data(struct tw_srv_conn *c, const struct tw_frame_header *hdr)
{
    struct tw_msg *m = &c->body.msg;
    const uint8_t *p = c->in + c->in_start;
    int v = tw__msg_decode_data_prefix(hdr, p + TW_FRAME_HEADER_LEN, m);
    if (v < 0)
        return handle_verdict(c, v, hdr, NULL, 0);
    c->in_start += TW_FRAME_HEADER_LEN + TW_DATA_PREFIX_LEN;
    c->body.active = 1;
    c->body.x = NULL;
    c->body.dst = NULL;
    c->body.left = m->u.data.bytes.len;
    v = tw__sm_on_recv(&c->sm, m);
    if (v == TW_SM_STALE) {
        TW_LOGD("conn %llu %s: dropping DATA for ended request %llu", (unsigned long long)c->id,
                c->peer, (unsigned long long)hdr->request_id);
    } else if (v < 0) {
        c->body.active = 0;
        return handle_verdict(c, v, hdr, NULL, 0);
    } else {
        struct tw_xfer *x = tw__conn_find_xfer(c, hdr->request_id);
        if (!x || !x->ops->data_begin) {
            c->body.active = 0;
            tw__conn_fail(c, TW_WIRE_PROTOCOL_ERROR, "DATA for request %llu, which is not a put",
                          (unsigned long long)hdr->request_id);
            return -1;
        }
        v = x->ops->data_begin(x, m, &c->body.dst);
        if (v < 0) {
            c->body.active = 0;
            tw__conn_fail(c, TW_WIRE_PROTOCOL_ERROR,
                          "DATA for request %llu: offset %llu, %u bytes: %s (tensor '%s' has "
                          "%llu bytes, %llu received)",
                          (unsigned long long)hdr->request_id, (unsigned long long)m->u.data.offset,
                          m->u.data.bytes.len, tw_strerror(v), x->t->name,
                          (unsigned long long)x->t->byte_length, (unsigned long long)x->done);
            return -1;
        }
        c->body.x = x;
    }
    /* Bytes already buffered go in place now; the rest is read directly. */
    size_t have = c->in_end - c->in_start;
    size_t take = have < c->body.left ? have : (size_t)c->body.left;
    if (take && c->body.x)
        memcpy(c->body.dst, c->in + c->in_start, take);
    c->in_start += take;
    body_took(c, take);
    return c->state == TW_CONN_OPEN ? 0 : -1;
}

/* Handles at most one buffered frame. Returns 1 after progress, 0 when more
 * bytes are needed, -1 when the connection stopped reading. */
static int process_buffered(struct tw_srv_conn *c)
{
    struct tw_frame_header hdr;
    size_t avail = c->in_end - c->in_start;
    const uint8_t *p = c->in + c->in_start;
    uint32_t limit = c->sm.phase < TW_PHASE_READY ? TW_PREAUTH_MAX_FRAME : c->max_frame;

    int v = tw__frame_decode_header(p, avail, limit, &hdr);
    if (v == TW_EAGAIN_FRAME)
        return 0;
    if (v < 0) {
        /* Header verdicts need the raw fields for a useful message. */
        hdr.tag = avail >= 12 ? (uint32_t)p[8] | (uint32_t)p[9] << 8 | (uint32_t)p[10] << 16 |
                                    (uint32_t)p[11] << 24
                              : 0;
        hdr.payload_len =
            (uint32_t)p[12] | (uint32_t)p[13] << 8 | (uint32_t)p[14] << 16 | (uint32_t)p[15] << 24;
        hdr.request_id = 0;
        if (v == TW_EUNKNOWN_TAG)
            tw__conn_fail(c, TW_WIRE_PROTOCOL_ERROR, "unknown message tag 0x%x", hdr.tag);
        else if (v == TW_EBAD_MAGIC)
            tw__conn_fail(c, TW_WIRE_PROTOCOL_ERROR,
                          "bad frame magic %02x %02x %02x %02x (expected 'TWIR'): not a "
                          "tensorwire v1 peer?",
                          p[0], p[1], p[2], p[3]);
        else if (v == TW_EBAD_VERSION)
            tw__conn_fail(c, TW_WIRE_UNSUPPORTED_VERSION,
                          "protocol version %u not supported (this server speaks %u)", p[4],
                          TW_PROTO_VERSION);
        else
            handle_verdict(c, v, &hdr, NULL, 0);
        return -1;
    }
    if (hdr.tag == TW_TAG_DATA && c->sm.phase >= TW_PHASE_READY &&
        hdr.payload_len >= TW_DATA_PREFIX_LEN) {
        if (avail < TW_FRAME_HEADER_LEN + TW_DATA_PREFIX_LEN)
            return 0;
        return begin_data(c, &hdr) < 0 ? -1 : 1;
    }
    if (hdr.payload_len > TW_SRV_MAX_CTL_PAYLOAD) {
        tw__conn_fail(c, TW_WIRE_PROTOCOL_ERROR,
                      "%s frame: payload of %u bytes is longer than any valid %s",
                      tw__tag_name(hdr.tag), hdr.payload_len, tw__tag_name(hdr.tag));
        return -1;
    }
    size_t flen = TW_FRAME_HEADER_LEN + hdr.payload_len;
    if (avail < flen)
        return 0;
    struct tw_msg m;
    ssize_t n = tw__msg_decode(p, flen, limit, &m);
    if (n < 0) {
        int rc = handle_verdict(c, (int)n, &hdr, p, flen);
        c->in_start += flen;
        return rc < 0 ? -1 : 1;
    }
    /* Tell an unauthenticated peer why, rather than "out of order". */
    if (c->sm.phase == TW_PHASE_AUTH && hdr.tag != TW_TAG_AUTH) {
        handle_verdict(c, TW_EOUT_OF_ORDER, &hdr, NULL, 0);
        return -1;
    }
    v = tw__sm_on_recv(&c->sm, &m);
    if (v == TW_SM_STALE) {
        TW_LOGD("conn %llu %s: dropping %s for ended request %llu", (unsigned long long)c->id,
                c->peer, tw__tag_name(hdr.tag), (unsigned long long)hdr.request_id);
    } else if (v < 0) {
        if (handle_verdict(c, v, &hdr, p, flen) < 0)
            return -1;
    } else {
        /* Nothing but another put may run before the queued commits are
         * published: a request after them sees them stored. */
        if (c->commit_head && hdr.tag != TW_TAG_TENSOR_PUT)
            tw__xfer_commits_flush(c);
        tw__handle_msg(c, &m);
    }
    c->in_start += flen;
    return c->state == TW_CONN_OPEN ? 1 : -1;
}

/* The peer stopped sending. After a clean EOF (a half-close) replies already
 * queued are still delivered: the close goes through the flush sequence.
 * Transfers in flight cannot complete and are abandoned either way. */
static void conn_eof(struct tw_srv_conn *c, const char *why, int clean)
{
    char reason[200];
    /* A peer that half-closed after its last puts still gets their OKs. */
    if (c->state == TW_CONN_OPEN)
        tw__xfer_commits_flush(c);
    snprintf(reason, sizeof(reason), "%s", why);
    if (c->state == TW_CONN_OPEN && c->nxfers > 0)
        snprintf(reason, sizeof(reason), "%s with %zu transfer%s in flight (abandoned)", why,
                 c->nxfers, c->nxfers == 1 ? "" : "s");
    if (clean && c->state == TW_CONN_OPEN && c->out_head)
        tw__conn_close(c, reason);
    else
        tw__conn_destroy(c, reason);
}

/* Read-ahead (server.h): the inline puts whose DATA frames should follow
 * the payload being read when it is the last frame of its put, in request
 * order (a client that queues its TENSOR_PUTs ahead of their payloads, as
 * libtensorwire does, sends them so): each announced, no byte of it
 * received yet, one whole frame of at least one byte. Fills c->ahead with
 * where each goes and the header it should have; returns how many, 0 when
 * the next request is anything else. want: the bytes of the current
 * payload this read asks for. */
static size_t ahead_plan(struct tw_srv_conn *c, size_t want)
{
    const size_t hl = TW_FRAME_HEADER_LEN + TW_DATA_PREFIX_LEN;
    size_t n = 0, bytes = want;
    uint64_t id = c->body.x->id;
    if (c->body.msg.hdr.flags & TW_FRAME_MORE)
        return 0; /* the next frame is this put's own */
    if (c->ahead_missed >= TW_SRV_AHEAD_MISSES_MAX && c->ahead_missed * 8 > c->ahead_taken)
        return 0; /* server.h: this peer sends otherwise */
    while (n < TW_SRV_AHEAD_FRAMES) {
        struct tw_xfer *y = tw__conn_find_xfer(c, ++id);
        if (!y || y->dir != TW_XFER_PUT || y->ops != &tw__dp_inline_ops || y->done != 0 ||
            !y->t->data)
            break;
        uint64_t len = y->t->byte_length;
        if (len == 0 || len > c->max_frame - TW_DATA_PREFIX_LEN || bytes + hl >= TW_NET_IO_MAX ||
            len > TW_NET_IO_MAX - bytes - hl)
            break;
        struct tw_srv_ahead *a = &c->ahead[n];
        struct tw_msg m = {
            .hdr = {.version = TW_PROTO_VERSION, .tag = TW_TAG_DATA, .request_id = y->id},
            .u.data = {.offset = 0, .bytes = {.ptr = NULL, .len = (uint32_t)len}}};
        if (tw__msg_encode(&m, a->want, sizeof(a->want)) != (ssize_t)hl)
            break;
        a->dst = y->t->data;
        a->len = (size_t)len;
        bytes += hl + (size_t)len;
        n++;
    }
    return n;
}

/* After a read-ahead of nah frames: rem bytes came behind the current
 * payload. Each frame whose header is the one predicted goes through
 * begin_data like any DATA frame (every check, the state machine), its
 * bytes already in place. From the first that is not (another frame, or
 * the read ended inside its header) the bytes are the stream's again:
 * they are gathered into the input buffer in order, for the parser. A
 * destination that received them meanwhile belongs to a put whose DATA
 * has not come yet: it is written again when it does. */
static void ahead_settle(struct tw_srv_conn *c, size_t nah, size_t rem)
{
    const size_t hl = TW_FRAME_HEADER_LEN + TW_DATA_PREFIX_LEN;
    size_t j = 0;
    for (; j < nah && rem > 0; j++) {
        struct tw_srv_ahead *a = &c->ahead[j];
        if (c->state != TW_CONN_OPEN)
            return;
        if (rem < hl)
            break;
        if (memcmp(a->got, a->want, hl) != 0) {
            c->srv->stats.put_read_ahead_missed++;
            c->ahead_missed++;
            break;
        }
        c->srv->stats.put_read_ahead++;
        c->ahead_taken++;
        size_t got = rem - hl < a->len ? rem - hl : a->len;
        rem -= hl + got;
        memcpy(c->in, a->got, hl);
        c->in_start = 0;
        c->in_end = hl;
        /* begin_data routes it to a->dst (its put's tensor, offset 0),
         * or drops it (a put that ended meanwhile). */
        if (process_buffered(c) < 0 || !c->body.active)
            return;
        c->in_start = c->in_end = 0;
        body_took(c, got);
    }
    if (c->state != TW_CONN_OPEN)
        return;
    if (j == nah || rem == 0) { /* every prediction held: what is left is the tail */
        c->in_start = rem ? TW_SRV_AHEAD_TAIL_AT : 0;
        c->in_end = c->in_start + rem;
        return;
    }
    /* Frames j.. were not the ones predicted: back into the buffer, in
     * order (the tail, read behind them, moves behind them first). */
    size_t span = 0;
    for (size_t k = j; k < nah; k++)
        span += hl + c->ahead[k].len;
    size_t tail = rem > span ? rem - span : 0;
    memmove(c->in + (rem - tail), c->in + TW_SRV_AHEAD_TAIL_AT, tail);
    size_t off = 0, left = rem - tail;
    for (size_t k = j; k < nah && left > 0; k++) {
        size_t h = left < hl ? left : hl;
        memcpy(c->in + off, c->ahead[k].got, h);
        off += h;
        left -= h;
        size_t b = left < c->ahead[k].len ? left : c->ahead[k].len;
        memcpy(c->in + off, c->ahead[k].dst, b);
        off += b;
        left -= b;
    }
    c->in_start = 0;
    c->in_end = rem;
}

static void conn_read(struct tw_srv_conn *c)
{
    size_t budget = TW_SRV_IO_BUDGET;
    struct tw_srv *srv = c->srv;

    if (c->state == TW_CONN_DRAINING) {
        for (int i = 0; i < 16; i++) {
            ssize_t n = read(c->fd, srv->scratch, srv->scratch_len);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                tw__conn_destroy(c, c->close_reason);
                return;
            }
            if (n < 0)
                return;
        }
        return;
    }
    /* A read that returned less than it asked for emptied the socket: the
     * next one would only say EAGAIN (one system call per wake-up for
     * nothing). The loop stops there instead; epoll is level-triggered,
     * so bytes that arrive later wake it again. */
    int drained = 0;
    while (c->state == TW_CONN_OPEN && budget > 0) {
        if (c->out_ctl_bytes >= TW_SRV_OUT_CTL_HIGH ||
            (c->input_paused && c->out_ctl_bytes >= TW_SRV_OUT_CTL_HIGH / 2))
            break; /* the peer is not reading its replies: stop taking requests */
        ssize_t n;
        size_t asked;
        if (c->body.active) {
            if (drained)
                break;
            size_t want = c->body.left > budget ? budget : (size_t)c->body.left;
            if (want > TW_NET_IO_MAX)
                want = TW_NET_IO_MAX; /* sock.h */
            uint8_t *dst = c->body.x ? c->body.dst : srv->scratch;
            if (!c->body.x && want > srv->scratch_len)
                want = srv->scratch_len;
            asked = want;
            size_t nah = 0;
            if (c->body.x && want == c->body.left && c->in_start == c->in_end) {
                /* The rest of this payload goes to its destination and what
                 * follows it into the buffer (empty: begin_data took every
                 * buffered byte before the body went on), in one call: a
                 * small tail, so that the next payload, too, is mostly read
                 * in place rather than buffered and copied. Between the
                 * two, the DATA frames of the next puts when they are known
                 * (ahead_plan): one call for several small payloads. */
                struct iovec iov[2 + 2 * TW_SRV_AHEAD_FRAMES];
                int k = 0;
                iov[k++] = (struct iovec){dst, want};
                nah = ahead_plan(c, want);
                for (size_t j = 0; j < nah; j++) {
                    iov[k++] = (struct iovec){c->ahead[j].got, sizeof(c->ahead[j].got)};
                    iov[k++] = (struct iovec){c->ahead[j].dst, c->ahead[j].len};
                    asked += sizeof(c->ahead[j].got) + c->ahead[j].len;
                }
                iov[k++] =
                    (struct iovec){c->in + (nah ? TW_SRV_AHEAD_TAIL_AT : 0), TW_SRV_SCATTER_TAIL};
                c->in_start = c->in_end = 0;
                asked += TW_SRV_SCATTER_TAIL;
                n = readv(c->fd, iov, k);
            } else {
                n = read(c->fd, dst, want);
            }
            if (n > 0) {
                size_t body_n = (size_t)n < want ? (size_t)n : want;
                if (!nah)
                    c->in_end += (size_t)n - body_n;
                body_took(c, body_n);
                if (nah)
                    ahead_settle(c, nah, (size_t)n - body_n);
            }
        } else {
            int r = process_buffered(c);
            if (r < 0)
                return;
            if (r > 0)
                continue;
            if (drained)
                break;
            if (c->in_start > 0) {
                memmove(c->in, c->in + c->in_start, c->in_end - c->in_start);
                c->in_end -= c->in_start;
                c->in_start = 0;
            }
            asked = TW_SRV_READ_BUF > c->in_end ? TW_SRV_READ_BUF - c->in_end
                                                : TW_SRV_INBUF - c->in_end;
            n = read(c->fd, c->in + c->in_end, asked);
            if (n > 0)
                c->in_end += (size_t)n;
        }
        if (n == 0) {
            conn_eof(c,
                     c->in_end > c->in_start || c->body.active
                         ? "peer closed the connection mid-frame"
                         : "peer closed the connection",
                     1);
            return;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            char why[128];
            snprintf(why, sizeof(why), "receive failed: %s", strerror(errno));
            conn_eof(c, why, 0);
            return;
        }
        drained = (size_t)n < asked;
        budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
        c->bytes_in += (uint64_t)n;
        srv->stats.bytes_in += (uint64_t)n;
        c->last_io_ms = tw__loop_now(&srv->loop);
    }
}

static void conn_on_io(struct tw_loop *loop, struct tw_io *io, uint32_t events)
{
    struct tw_srv_conn *c = io->data;
    c->in_io = 1;
    if (events & EPOLLIN) {
        /* Small staged puts completed by this read queue their copies into
         * the GPU and are published together at its end (xfer.h). */
        c->defer_commits = 1;
        c->keys_defer = 1;
        conn_read(c);
        c->defer_commits = 0;
        c->keys_defer = 0;
        /* The gets of this read whose key waited: one key for those that
         * continue each other (xfer_rdma.c). */
        if (c->keys_head)
            tw__srv_rdma_key_pending(c);
        (void)tw__xfer_commits_advance(c);
    }
    if ((events & (EPOLLERR | EPOLLHUP)) && !(events & EPOLLIN))
        conn_eof(c, (events & EPOLLERR) ? "connection reset by peer" : "peer hung up", 0);
    else
        conn_flush(c);
    c->in_io = 0;
}
