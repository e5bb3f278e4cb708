/*
 * The raw-socket baseline of `tensorwire bench`: the same bytes through a
 * loopback TCP request/response loop with no protocol, on one connection
 * with the same in-flight depth, in the same process and run. A thread plays
 * the server: for a get it answers each 16-byte request with size bytes, for
 * a put it swallows the 16-byte request and its size bytes and answers 16
 * bytes. Both ends use blocking sockets with TCP_NODELAY and read straight
 * into their buffers, the most direct loop the kernel allows.
 *
 * Each side keeps a buffer as large as one tensor (up to 1 GiB, beyond that
 * it cycles through 1 GiB), so the loop reads and writes as much distinct
 * memory per request as a real transfer does; a small reused buffer would
 * stay in cache and measure the cache, not the transfer. Both buffers are
 * allocated and touched before the clock starts.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tools/cli.h"

#define RAW_REQ_LEN 16
#define RAW_CHUNK (1u << 30) /* largest buffer either side keeps */

struct raw_server {
    int listen_fd;
    uint8_t *buf; /* chunk bytes, allocated and touched by the caller */
    int op_put;
    uint64_t size;
    int sockbuf;
    int rc;
};

static int recv_all(int fd, void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = recv(fd, p, n, MSG_WAITALL);
        if (r == 0)
            return -ECONNRESET;
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int send_all(int fd, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int send_req_payload(int fd, const uint8_t *req, const uint8_t *payload, size_t n)
{
    struct iovec iov[2] = {{(void *)req, RAW_REQ_LEN}, {(void *)payload, n}};
    size_t total = RAW_REQ_LEN + n;
    ssize_t w;
    do {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
        w = sendmsg(fd, &mh, MSG_NOSIGNAL);
    } while (w < 0 && errno == EINTR);
    if (w < 0)
        return -errno;
    if ((size_t)w == total)
        return 0;
    /* Partial: finish with plain sends. */
    if ((size_t)w < RAW_REQ_LEN) {
        int rc = send_all(fd, req + w, RAW_REQ_LEN - (size_t)w);
        if (rc)
            return rc;
        return send_all(fd, payload, n);
    }
    return send_all(fd, payload + ((size_t)w - RAW_REQ_LEN), n - ((size_t)w - RAW_REQ_LEN));
}

static void tune(int fd, int sockbuf)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (sockbuf > 0) {
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sockbuf, sizeof(sockbuf));
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sockbuf, sizeof(sockbuf));
    }
}

static void *raw_server_main(void *arg)
{
    struct raw_server *s = arg;
    size_t chunk = s->size < RAW_CHUNK ? (size_t)s->size : RAW_CHUNK;
    uint8_t req[RAW_REQ_LEN];
    uint8_t *buf = s->buf;
    int fd = accept(s->listen_fd, NULL, NULL);
    if (fd < 0) {
        s->rc = -errno;
        return NULL;
    }
    tune(fd, s->sockbuf);
    for (;;) {
        int rc = recv_all(fd, req, sizeof(req));
        if (rc)
            break; /* the client closed: done */
        uint64_t left = s->size;
        if (s->op_put) {
            while (left > 0) {
                size_t n = left < chunk ? (size_t)left : chunk;
                if ((rc = recv_all(fd, buf, n)) != 0)
                    goto out_close;
                left -= n;
            }
            if ((rc = send_all(fd, req, sizeof(req))) != 0)
                goto out_close;
        } else {
            while (left > 0) {
                size_t n = left < chunk ? (size_t)left : chunk;
                if ((rc = send_all(fd, buf, n)) != 0)
                    goto out_close;
                left -= n;
            }
        }
    }
out_close:
    close(fd);
    return NULL;
}

int tw_raw_loop(int op_put, uint64_t size, uint64_t count, uint32_t inflight, int sockbuf,
                uint64_t *lat_ns, uint64_t *elapsed_ns)
{
    struct raw_server srv = {.op_put = op_put, .size = size, .sockbuf = sockbuf};
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    pthread_t th;
    uint64_t *t_send = NULL, sent = 0, done = 0, t0;
    size_t chunk = size < RAW_CHUNK ? (size_t)size : RAW_CHUNK;
    uint8_t *buf = NULL, req[RAW_REQ_LEN] = {0};
    int fd = -1, rc;

    srv.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (srv.listen_fd < 0)
        return -errno;
    if (bind(srv.listen_fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(srv.listen_fd, 1) < 0 ||
        getsockname(srv.listen_fd, (struct sockaddr *)&a, &alen) < 0) {
        rc = -errno;
        goto out_close_listen;
    }
    t_send = calloc(count ? count : 1, sizeof(*t_send));
    buf = malloc(chunk ? chunk : 1);
    srv.buf = malloc(chunk ? chunk : 1);
    if (!t_send || !buf || !srv.buf) {
        rc = -ENOMEM;
        goto out_free;
    }
    memset(buf, 0xa5, chunk);
    memset(srv.buf, 0x5a, chunk);
    if ((rc = pthread_create(&th, NULL, raw_server_main, &srv)) != 0) {
        rc = -rc;
        goto out_free;
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || (tune(fd, sockbuf), connect(fd, (struct sockaddr *)&a, sizeof(a))) < 0) {
        rc = -errno;
        goto out_join;
    }

    t0 = tw_cli_now_ns();
    while (done < count) {
        while (sent < count && sent - done < inflight) {
            memcpy(req, &sent, sizeof(sent));
            t_send[sent] = tw_cli_now_ns();
            uint64_t left = op_put ? size : 0;
            if (left > 0 && left <= chunk) {
                /* Request and payload in one system call, as any sane
                 * sender (and libtensorwire's sendmsg batching) does. */
                if ((rc = send_req_payload(fd, req, buf, (size_t)left)) != 0)
                    goto out_join;
                left = 0;
            } else if ((rc = send_all(fd, req, sizeof(req))) != 0) {
                goto out_join;
            }
            while (left > 0) {
                size_t n = left < chunk ? (size_t)left : chunk;
                if ((rc = send_all(fd, buf, n)) != 0)
                    goto out_join;
                left -= n;
            }
            sent++;
        }
        if (op_put) {
            rc = recv_all(fd, req, sizeof(req));
        } else {
            rc = 0;
            for (uint64_t left = size; left > 0 && !rc;) {
                size_t n = left < chunk ? (size_t)left : chunk;
                rc = recv_all(fd, buf, n);
                left -= n;
            }
        }
        if (rc)
            goto out_join;
        lat_ns[done] = tw_cli_now_ns() - t_send[done];
        done++;
    }
    *elapsed_ns = tw_cli_now_ns() - t0;
    rc = 0;

out_join:
    if (fd >= 0)
        close(fd);
    else
        shutdown(srv.listen_fd, SHUT_RDWR); /* unblock accept */
    pthread_join(th, NULL);
out_free:
    free(buf);
    free(srv.buf);
    free(t_send);
out_close_listen:
    close(srv.listen_fd);
    return rc;
}
