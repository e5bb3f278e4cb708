/*
 * The client's side of one TCP connection: connect with a deadline, a send
 * queue flushed with sendmsg (frames gathered, tensor bytes sent from the
 * caller's memory), and a receive buffer that hands out whole control frames
 * and gives DATA frames to the engine after their 8-byte prefix so the bytes
 * can land straight in the destination.
 *
 * Every message goes through the codec (tw__msg_encode / decode) and the
 * connection state machine (tw__sm_on_send / on_recv); a receive verdict that
 * tw__sm_verdict_is_fatal() classifies as fatal kills the connection, the
 * others cannot happen on the client (the server never opens requests).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "client/client_internal.h"
#include "common/errbuf.h"
#include "net/addr.h"
#include "net/sock.h"

void tw__client_seterr(struct tw_client *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tw__errbuf_vset(c->errmsg, sizeof(c->errmsg), fmt, ap);
    va_end(ap);
}

/* How often a wait for a frame looks at the server's reads of our memory
 * (below). */
#define TARGET_LOOK_MS 100

/* Waits for events on the socket. Returns 0, TW_ETIMEDOUT or -errno.
 * timeout_ms is the longest time without progress. While the server pulls
 * a put of ours (c->target_watch) no frame comes until its RDMA_DONE, so
 * its reads of our memory count as progress too where the data plane can
 * see them (fabric.h, "Target-side activity"): the wait then looks every
 * TARGET_LOOK_MS and restarts its timeout whenever they moved. */
static int wait_fd(struct tw_client *c, short events, int timeout_ms)
{
    struct pollfd p = {.fd = c->fd, .events = events};
    uint64_t last_ns = tw__now_ns(), seen = 0;
    int watch = timeout_ms > 0 && (events & POLLIN) && c->target_watch > 0 && c->fab;
    if (watch)
        seen = tw__fabric_target_events(c->fab);
    for (;;) {
        int slice = timeout_ms > 0 ? timeout_ms : -1;
        if (watch) {
            uint64_t idle_ms = (tw__now_ns() - last_ns) / 1000000ull;
            uint64_t left = idle_ms < (uint64_t)timeout_ms ? (uint64_t)timeout_ms - idle_ms : 0;
            slice = left < TARGET_LOOK_MS ? (int)left : TARGET_LOOK_MS;
        }
        int n = poll(&p, 1, slice);
        if (n > 0)
            return 0;
        if (n == 0) {
            if (watch) {
                uint64_t ev = tw__fabric_target_events(c->fab);
                if (ev != seen) {
                    seen = ev;
                    last_ns = tw__now_ns();
                    continue;
                }
                if (tw__now_ns() - last_ns < (uint64_t)timeout_ms * 1000000ull)
                    continue;
                tw__client_seterr(c,
                                  "no progress from the server within %d ms (no frame, and no "
                                  "rdma read of our memory)",
                                  timeout_ms);
                return TW_ETIMEDOUT;
            }
            tw__client_seterr(c, "no progress from the server within %d ms", timeout_ms);
            return TW_ETIMEDOUT;
        }
        if (errno != EINTR)
            return -errno;
    }
}

int tw__client_conn_open(struct tw_client *c, const char *addr, int timeout_ms, int sockbuf)
{
    char why[sizeof(c->errmsg) - 32];
    int fd, rc = tw__net_connect_hostport(addr, timeout_ms, sockbuf, &fd, why, sizeof(why));
    if (rc == TW_EINVAL)
        tw__client_seterr(c, "bad server address: %s", why);
    else if (rc)
        tw__client_seterr(c, "%s", why);
    if (rc)
        return rc;
    /* From here the socket is blocking, and every call that must not block
     * says MSG_DONTWAIT. Only the receive of a large DATA payload blocks in
     * the kernel (MSG_WAITALL), bounded by SO_RCVTIMEO: one system call per
     * frame instead of a poll + recv pair per socket-buffer's worth. */
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    if (c->request_timeout_ms > 0) {
        struct timeval tv = {.tv_sec = c->request_timeout_ms / 1000,
                             .tv_usec = (c->request_timeout_ms % 1000) * 1000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    }
    c->fd = fd;
    return 0;
}

/* --- sending ------------------------------------------------------------ */

static int tx_reserve(struct tw__txq *q, size_t bytes)
{
    if (q->len + bytes > q->cap) {
        size_t cap = q->cap ? q->cap : 4096;
        while (cap < q->len + bytes)
            cap *= 2;
        uint8_t *p = realloc(q->buf, cap);
        if (!p)
            return -ENOMEM;
        q->buf = p;
        q->cap = cap;
    }
    if (q->nsegs + 2 > q->segcap) {
        size_t cap = q->segcap ? q->segcap * 2 : 64;
        struct tw__txseg *s = realloc(q->segs, cap * sizeof(*s));
        if (!s)
            return -ENOMEM;
        q->segs = s;
        q->segcap = cap;
    }
    return 0;
}

static void tx_add_seg(struct tw__txq *q, const uint8_t *ptr, size_t off, size_t len)
{
    /* Adjacent pieces of the send buffer merge into one iovec. */
    if (!ptr && q->nsegs > 0) {
        struct tw__txseg *last = &q->segs[q->nsegs - 1];
        if (!last->ptr && last->off + last->len == off) {
            last->len += len;
            return;
        }
    }
    q->segs[q->nsegs++] = (struct tw__txseg){.ptr = ptr, .off = off, .len = len};
}

int tw__client_conn_queue(struct tw_client *c, const struct tw_msg *msg)
{
    struct tw_msg m = *msg;
    const uint8_t *zc = NULL;
    size_t zc_len = 0;
    ssize_t n;
    int rc;

    if (c->broken)
        return -ENOTCONN;
    if (m.hdr.tag == TW_TAG_DATA && m.u.data.bytes.ptr) {
        /* Zero copy: encode header + offset only, send the bytes in place. */
        zc = m.u.data.bytes.ptr;
        zc_len = m.u.data.bytes.len;
        m.u.data.bytes.ptr = NULL;
    }
    n = tw__msg_encoded_len(&m);
    if (n < 0) {
        tw__client_seterr(c, "refusing to send an invalid %s: %s", tw__tag_name(m.hdr.tag),
                          tw_strerror((int)n));
        return (int)n;
    }
    rc = tw__sm_on_send(&c->sm, &m);
    if (rc < 0) {
        tw__client_seterr(c, "%s not allowed now: %s", tw__tag_name(m.hdr.tag), tw_strerror(rc));
        return rc;
    }
    /* client_internal.h: DATA after the other frames of the flush; GOODBYE,
     * which ends everything, after the DATA too. */
    struct tw__txq *q =
        &c->tx[m.hdr.tag == TW_TAG_DATA || m.hdr.tag == TW_TAG_GOODBYE ? TW__TXQ_DATA
                                                                       : TW__TXQ_CTL];
    rc = tx_reserve(q, (size_t)n);
    if (rc)
        return rc;
    n = tw__msg_encode(&m, q->buf + q->len, q->cap - q->len);
    if (n < 0)
        return (int)n;
    tx_add_seg(q, NULL, q->len, (size_t)n);
    q->len += (size_t)n;
    if (zc_len)
        tx_add_seg(q, zc, 0, zc_len);
    return 0;
}

void tw__client_conn_discard(struct tw_client *c)
{
    for (int i = 0; i < 2; i++)
        c->tx[i].nsegs = c->tx[i].len = 0;
}

/* The bytes of piece s of the flush (the control queue's pieces, then the
 * DATA queue's) and its length. */
static const uint8_t *tx_piece(const struct tw_client *c, size_t s, size_t *len)
{
    const struct tw__txq *q = &c->tx[TW__TXQ_CTL];
    if (s >= q->nsegs) {
        s -= q->nsegs;
        q = &c->tx[TW__TXQ_DATA];
    }
    const struct tw__txseg *t = &q->segs[s];
    *len = t->len;
    return t->ptr ? t->ptr : q->buf + t->off;
}

int tw__client_conn_flush(struct tw_client *c, int timeout_ms)
{
    struct iovec iov[64];
    size_t seg = 0, seg_off = 0, total = c->tx[TW__TXQ_CTL].nsegs + c->tx[TW__TXQ_DATA].nsegs;
    int rc = 0;

    while (seg < total) {
        int niov = 0;
        size_t asked = 0;
        for (size_t s = seg; s < total && niov < 64 && asked < TW_NET_IO_MAX; s++, niov++) {
            size_t len;
            const uint8_t *base = tx_piece(c, s, &len);
            size_t skip = s == seg ? seg_off : 0;
            len -= skip;
            if (len > TW_NET_IO_MAX - asked)
                len = TW_NET_IO_MAX - asked; /* sock.h: the rest in the next call */
            iov[niov].iov_base = (void *)(base + skip);
            iov[niov].iov_len = len;
            asked += len;
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
        ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                rc = wait_fd(c, POLLOUT, timeout_ms);
                if (rc)
                    goto out_fail;
                continue;
            }
            rc = -errno;
            tw__client_seterr(c, "send failed: %s", strerror(errno));
            goto out_fail;
        }
        /* Advance over what was written (partial writes are normal). */
        size_t left = (size_t)w;
        while (left > 0) {
            size_t avail;
            (void)tx_piece(c, seg, &avail);
            avail -= seg_off;
            if (left < avail) {
                seg_off += left;
                left = 0;
            } else {
                left -= avail;
                seg++;
                seg_off = 0;
            }
        }
    }
    tw__client_conn_discard(c);
    return 0;

out_fail:
    tw__client_conn_discard(c);
    c->broken = 1;
    return rc;
}

/* --- receiving ---------------------------------------------------------- */

/* One recv into the free tail of the receive buffer. Returns bytes read,
 * or a negative code (EOF is -ECONNRESET). */
static int rx_fill_once(struct tw_client *c, int timeout_ms)
{
    for (;;) {
        ssize_t r = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, MSG_DONTWAIT);
        if (r > 0) {
            c->rlen += (size_t)r;
            return (int)r;
        }
        if (r == 0) {
            tw__client_seterr(c, "the server closed the connection");
            return -ECONNRESET;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            int e = -errno;
            tw__client_seterr(c, "receive failed: %s", strerror(errno));
            return e;
        }
        int rc = wait_fd(c, POLLIN, timeout_ms);
        if (rc)
            return rc;
    }
}

/* Makes at least need bytes available at rbuf + rpos. */
static int rx_need(struct tw_client *c, size_t need, int timeout_ms)
{
    if (c->rlen - c->rpos >= need)
        return 0;
    if (c->rpos > 0) {
        memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
        c->rlen -= c->rpos;
        c->rpos = 0;
    }
    if (need > c->rcap) {
        size_t cap = c->rcap;
        while (cap < need)
            cap *= 2;
        uint8_t *p = realloc(c->rbuf, cap);
        if (!p)
            return -ENOMEM;
        c->rbuf = p;
        c->rcap = cap;
    }
    while (c->rlen < need) {
        int rc = rx_fill_once(c, timeout_ms);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int tw__client_conn_recv_payload(struct tw_client *c, uint8_t *dst, size_t n, int timeout_ms)
{
    /* First whatever is buffered already. */
    size_t have = c->rlen - c->rpos;
    size_t take = have < n ? have : n;
    if (take) {
        if (dst)
            memcpy(dst, c->rbuf + c->rpos, take);
        c->rpos += take;
        n -= take;
        if (dst)
            dst += take;
    }
    if (n == 0)
        return 0;
    if (!dst || n < TW__CLIENT_DIRECT_RECV_MIN) {
        /* Small remainder or discard: go through the buffer. */
        while (n > 0) {
            c->rpos = c->rlen = 0;
            int rc = rx_fill_once(c, timeout_ms);
            if (rc < 0)
                return rc;
            size_t got = c->rlen < n ? c->rlen : n;
            if (dst) {
                memcpy(dst, c->rbuf, got);
                dst += got;
            }
            c->rpos = got;
            n -= got;
        }
        return 0;
    }
    /* Large remainder: straight into the destination, no copy, waiting in
     * the kernel for each piece of TW_NET_IO_MAX (SO_RCVTIMEO bounds each
     * wait). */
    while (n > 0) {
        ssize_t r = recv(c->fd, dst, n < TW_NET_IO_MAX ? n : TW_NET_IO_MAX, MSG_WAITALL);
        if (r > 0) {
            dst += r;
            n -= (size_t)r;
            continue;
        }
        if (r == 0) {
            tw__client_seterr(c, "the server closed the connection in the middle of DATA");
            return -ECONNRESET;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            int e = -errno;
            tw__client_seterr(c, "receive failed: %s", strerror(errno));
            return e;
        }
        /* EAGAIN from a blocking socket: SO_RCVTIMEO passed without a byte. */
        tw__client_seterr(c, "no progress from the server within %d ms", timeout_ms);
        return TW_ETIMEDOUT;
    }
    return 0;
}

int tw__client_conn_fail(struct tw_client *c, int err, int send_error)
{
    if (c->broken)
        return err;
    if (send_error && c->fd >= 0) {
        /* Best effort, straight to the socket: the queue may hold a partial
         * frame of a failed flush. */
        static const char text[] = "client: malformed or out-of-order message";
        struct tw_msg m = {.hdr = {.version = TW_PROTO_VERSION, .tag = TW_TAG_ERROR}};
        uint8_t buf[TW_FRAME_HEADER_LEN + 8 + sizeof(text)];
        m.u.error.code = TW_WIRE_PROTOCOL_ERROR;
        m.u.error.message.ptr = (const uint8_t *)text;
        m.u.error.message.len = sizeof(text) - 1;
        ssize_t n = tw__msg_encode(&m, buf, sizeof(buf));
        if (n > 0) {
            ssize_t w = send(c->fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
            (void)w;
        }
    }
    c->broken = 1;
    if (c->fd >= 0)
        shutdown(c->fd, SHUT_RDWR);
    return err;
}

int tw__client_conn_last_words(struct tw_client *c)
{
    int said = 0;
    if (c->fd < 0 || !c->rbuf)
        return 0;
    size_t pos = c->rpos + c->rconsume;
    if (pos > c->rlen)
        return 0; /* inside a DATA payload: no frame boundary to read from */
    memmove(c->rbuf, c->rbuf + pos, c->rlen - pos);
    c->rlen -= pos;
    c->rpos = c->rconsume = 0;
    /* What the kernel already holds; the server wrote it before closing. */
    for (;;) {
        if (c->rlen == c->rcap)
            break;
        ssize_t r = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, MSG_DONTWAIT);
        if (r > 0)
            c->rlen += (size_t)r;
        else if (r < 0 && errno == EINTR)
            continue;
        else
            break;
    }
    size_t off = 0;
    while (c->rlen - off >= TW_FRAME_HEADER_LEN) {
        struct tw_frame_header hdr;
        struct tw_msg m;
        if (tw__frame_decode_header(c->rbuf + off, c->rlen - off, c->sm.max_frame, &hdr) < 0)
            break;
        size_t flen = TW_FRAME_HEADER_LEN + (size_t)hdr.payload_len;
        if (c->rlen - off < flen)
            break;
        if ((hdr.tag == TW_TAG_ERROR || hdr.tag == TW_TAG_GOODBYE) &&
            tw__msg_decode(c->rbuf + off, flen, c->sm.max_frame, &m) >= 0) {
            if (hdr.tag == TW_TAG_GOODBYE) {
                c->closing = 1;
                if (!said) {
                    said = TW_ESHUTDOWN;
                    tw__client_seterr(c, "the server is shutting down (it said GOODBYE)");
                }
            } else if (m.hdr.request_id == 0 || m.u.error.code == TW_WIRE_SHUTTING_DOWN) {
                /* A fatal ERROR explains more than a GOODBYE: it wins. */
                if (m.hdr.request_id == 0 || !said) {
                    uint32_t code = m.u.error.code;
                    said = m.hdr.request_id != 0     ? TW_ESHUTDOWN
                           : code >= 1 && code < 100 ? TW_ERR_FROM_WIRE(code)
                                                     : TW_EINTERNAL;
                    tw__client_seterr(c, "%.*s", (int)m.u.error.message.len,
                                      (const char *)m.u.error.message.ptr);
                }
                if (m.u.error.code == TW_WIRE_SHUTTING_DOWN)
                    c->closing = 1;
            }
        }
        off += flen;
    }
    c->rlen = 0;
    return said;
}

/* The server broke the protocol: say what, tell it (ERROR(PROTOCOL_ERROR,
 * 0)) and close. tag 0 means the header itself was bad. */
static int fatal_recv(struct tw_client *c, int verdict, uint32_t tag)
{
    tw__client_seterr(c, "server sent an invalid %s frame: %s (%s)", tag ? tw__tag_name(tag) : "",
                      tw_strerror(verdict), tw_strerror_name(verdict));
    return tw__client_conn_fail(c, verdict, 1);
}

int tw__client_conn_next(struct tw_client *c, struct tw_msg *msg, int timeout_ms)
{
    struct tw_frame_header hdr;
    int rc;

    if (c->broken)
        return -ENOTCONN;
    c->rpos += c->rconsume;
    c->rconsume = 0;

    rc = rx_need(c, TW_FRAME_HEADER_LEN, timeout_ms);
    if (rc)
        return tw__client_conn_fail(c, rc, 0);
    rc = tw__frame_decode_header(c->rbuf + c->rpos, c->rlen - c->rpos, c->sm.max_frame, &hdr);
    if (rc)
        return fatal_recv(c, rc, 0);

    if (hdr.tag == TW_TAG_DATA) {
        rc = rx_need(c, TW_FRAME_HEADER_LEN + TW_DATA_PREFIX_LEN, timeout_ms);
        if (rc)
            return tw__client_conn_fail(c, rc, 0);
        rc = tw__msg_decode_data_prefix(&hdr, c->rbuf + c->rpos + TW_FRAME_HEADER_LEN, msg);
        if (rc)
            return fatal_recv(c, rc, hdr.tag);
        msg->hdr = hdr;
        c->rpos += TW_FRAME_HEADER_LEN + TW_DATA_PREFIX_LEN;
        rc = tw__sm_on_recv(&c->sm, msg);
        if (rc < 0)
            return fatal_recv(c, rc, hdr.tag);
        if (rc == TW_SM_STALE)
            rc = tw__client_conn_recv_payload(c, NULL, msg->u.data.bytes.len, timeout_ms);
        else
            rc = tw__client_engine_on_data(c, msg);
        if (rc < 0)
            return c->broken ? rc : tw__client_conn_fail(c, rc, rc <= -1100);
        return 0;
    }

    /* Refuse from the header alone a control frame larger than its message
     * can be, before buffering it. */
    if (hdr.payload_len > tw__max_payload_len(hdr.tag))
        return fatal_recv(c, TW_EFRAME_TOO_LARGE, hdr.tag);
    rc = rx_need(c, TW_FRAME_HEADER_LEN + (size_t)hdr.payload_len, timeout_ms);
    if (rc)
        return tw__client_conn_fail(c, rc, 0);
    ssize_t n = tw__msg_decode(c->rbuf + c->rpos, TW_FRAME_HEADER_LEN + (size_t)hdr.payload_len,
                               c->sm.max_frame, msg);
    if (n < 0)
        return fatal_recv(c, (int)n, hdr.tag);
    c->rconsume = (size_t)n;
    rc = tw__sm_on_recv(&c->sm, msg);
    if (rc < 0)
        return fatal_recv(c, rc, hdr.tag);
    if (rc == TW_SM_STALE)
        return 0;
    return 1;
}
