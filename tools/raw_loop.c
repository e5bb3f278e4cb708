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
 * allocated and touched before the clock starts, in memory advised for
 * transparent huge pages as tensorwired keeps its tensors (store.c): with
 * 4 KiB pages the same loop ran at 0.74-0.89 GB/s on the 2-core VM where
 * iperf3 -l 1M moved 4.2 GB/s and huge pages 3.1-3.7 GB/s, a baseline
 * that tensorwire beat by 3.6x.
 *
 * tw_raw_stream is the one-way streaming variant (iperf3's measurement): one
 * request, then all the bytes in one direction, then one answer, in system
 * calls of the size the caller picks (bench sweeps it: on the 2-core VM 256
 * KiB calls streamed 15% faster than calls of a whole 256 MiB tensor).
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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
    uint64_t stream_count; /* 0: request/response; else tensors streamed at once */
    size_t block;          /* stream: bytes per system call (0: a whole buffer) */
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

/* Sends (or receives when recv) total bytes in pieces of at most chunk,
 * cycling through buf. */
/* Moves total bytes through buf (chunk bytes, cycled through from its
 * start) in system calls of at most block bytes (0: chunk). */
static int move_bytes(int fd, uint8_t *buf, size_t chunk, size_t block, uint64_t total, int in)
{
    int rc = 0;
    size_t off = 0;
    if (block == 0 || block > chunk)
        block = chunk;
    while (total > 0 && !rc) {
        size_t n = chunk - off < block ? chunk - off : block;
        if (n > total)
            n = (size_t)total;
        rc = in ? recv_all(fd, buf + off, n) : send_all(fd, buf + off, n);
        total -= n;
        off += n;
        if (off == chunk)
            off = 0;
    }
    return rc;
}

/* len bytes (at least one) for a loop buffer, or NULL. */
static uint8_t *buf_alloc(size_t len)
{
    if (len == 0)
        len = 1;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    (void)madvise(p, len, MADV_HUGEPAGE); /* advisory: a kernel without THP ignores it */
    return p;
}

static void buf_free(uint8_t *p, size_t len)
{
    if (p)
        munmap(p, len ? len : 1);
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
    if (s->stream_count) {
        /* One request, then all the bytes one way, then one answer. */
        if (recv_all(fd, req, sizeof(req)) == 0 &&
            move_bytes(fd, buf, chunk, s->block, s->size * s->stream_count, s->op_put) == 0 &&
            s->op_put)
            (void)send_all(fd, req, sizeof(req));
        goto out_close;
    }
    for (;;) {
        int rc = recv_all(fd, req, sizeof(req));
        if (rc)
            break; /* the client closed: done */
        if ((rc = move_bytes(fd, buf, chunk, 0, s->size, s->op_put)) != 0 ||
            (s->op_put && (rc = send_all(fd, req, sizeof(req))) != 0))
            goto out_close;
    }
out_close:
    close(fd);
    return NULL;
}

/* A connected client socket with its server thread and both buffers. */
struct raw_pair {
    struct raw_server srv;
    pthread_t th;
    int fd, started;
    uint8_t *buf;
    size_t chunk;
};

static void pair_close(struct raw_pair *p)
{
    if (p->started) {
        if (p->fd >= 0)
            close(p->fd);
        else
            shutdown(p->srv.listen_fd, SHUT_RDWR); /* unblock accept */
        pthread_join(p->th, NULL);
    } else if (p->fd >= 0) {
        close(p->fd);
    }
    buf_free(p->buf, p->chunk);
    buf_free(p->srv.buf, p->chunk);
    if (p->srv.listen_fd >= 0)
        close(p->srv.listen_fd);
}

/* Starts the thread and connects to it. On failure everything is undone. */
static int pair_open(struct raw_pair *p, int op_put, uint64_t size, uint64_t stream_count,
                     size_t block, int sockbuf)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    int rc;
    memset(p, 0, sizeof(*p));
    p->fd = -1;
    p->srv = (struct raw_server){.op_put = op_put,
                                 .size = size,
                                 .stream_count = stream_count,
                                 .block = block,
                                 .sockbuf = sockbuf};
    p->chunk = size < RAW_CHUNK ? (size_t)size : RAW_CHUNK;
    p->srv.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (p->srv.listen_fd < 0)
        return -errno;
    if (bind(p->srv.listen_fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        listen(p->srv.listen_fd, 1) < 0 ||
        getsockname(p->srv.listen_fd, (struct sockaddr *)&a, &alen) < 0) {
        rc = -errno;
        goto out_close;
    }
    p->buf = buf_alloc(p->chunk);
    p->srv.buf = buf_alloc(p->chunk);
    if (!p->buf || !p->srv.buf) {
        rc = -ENOMEM;
        goto out_close;
    }
    memset(p->buf, 0xa5, p->chunk);
    memset(p->srv.buf, 0x5a, p->chunk);
    if ((rc = pthread_create(&p->th, NULL, raw_server_main, &p->srv)) != 0) {
        rc = -rc;
        goto out_close;
    }
    p->started = 1;
    p->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (p->fd < 0 || (tune(p->fd, sockbuf), connect(p->fd, (struct sockaddr *)&a, sizeof(a))) < 0) {
        rc = -errno;
        goto out_close;
    }
    return 0;

out_close:
    pair_close(p);
    return rc;
}

int tw_raw_loop(int op_put, uint64_t size, uint64_t count, uint32_t inflight, int sockbuf,
                uint64_t *lat_ns, uint64_t *elapsed_ns)
{
    struct raw_pair p;
    uint64_t *t_send = calloc(count ? count : 1, sizeof(*t_send)), sent = 0, done = 0, t0;
    uint8_t req[RAW_REQ_LEN] = {0};
    int rc;
    if (!t_send)
        return -ENOMEM;
    if ((rc = pair_open(&p, op_put, size, 0, 0, sockbuf)) != 0)
        goto out_free;
    int fd = p.fd;
    uint8_t *buf = p.buf;
    size_t chunk = p.chunk;

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
                    goto out_close;
                left = 0;
            } else if ((rc = send_all(fd, req, sizeof(req))) != 0) {
                goto out_close;
            }
            if ((rc = move_bytes(fd, buf, chunk, 0, left, 0)) != 0)
                goto out_close;
            sent++;
        }
        rc = op_put ? recv_all(fd, req, sizeof(req)) : move_bytes(fd, buf, chunk, 0, size, 1);
        if (rc)
            goto out_close;
        lat_ns[done] = tw_cli_now_ns() - t_send[done];
        done++;
    }
    *elapsed_ns = tw_cli_now_ns() - t0;
    rc = 0;

out_close:
    pair_close(&p);
out_free:
    free(t_send);
    return rc;
}

int tw_raw_stream(int op_put, uint64_t size, uint64_t count, size_t block, int sockbuf,
                  uint64_t *elapsed_ns)
{
    struct raw_pair p;
    uint8_t req[RAW_REQ_LEN] = {0};
    uint64_t t0;
    int rc;
    if (size == 0 || count == 0)
        return -EINVAL;
    if ((rc = pair_open(&p, op_put, size, count, block, sockbuf)) != 0)
        return rc;
    t0 = tw_cli_now_ns();
    if ((rc = send_all(p.fd, req, sizeof(req))) != 0 ||
        (rc = move_bytes(p.fd, p.buf, p.chunk, block, size * count, !op_put)) != 0 ||
        (op_put && (rc = recv_all(p.fd, req, sizeof(req))) != 0))
        goto out_close;
    *elapsed_ns = tw_cli_now_ns() - t0;

out_close:
    pair_close(&p);
    return rc;
}
