#include "net/sock.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include "common/file.h"

int tw__net_set_nonblocking(int fd, int on)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -errno;
    fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
    if (fcntl(fd, F_SETFL, fl) < 0)
        return -errno;
    return 0;
}

int tw__net_set_nodelay(int fd)
{
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
        return -errno;
    return 0;
}

static int rmem_max = -1, wmem_max = -1;
static pthread_once_t limits_once = PTHREAD_ONCE_INIT;

static int read_proc_int(const char *path)
{
    char buf[32];
    if (tw__read_small_file(path, buf, sizeof(buf)) <= 0)
        return -1;
    int v = 0;
    for (char *p = buf; *p >= '0' && *p <= '9'; p++) {
        if (v > (INT_MAX - 9) / 10)
            return INT_MAX;
        v = v * 10 + (*p - '0');
    }
    return v;
}

static void read_limits(void)
{
    rmem_max = read_proc_int("/proc/sys/net/core/rmem_max");
    wmem_max = read_proc_int("/proc/sys/net/core/wmem_max");
}

void tw__net_set_bufsizes(int fd, int bytes)
{
    /* An explicit size switches the kernel's buffer autotuning off and is
     * clamped to net.core.[rw]mem_max (often 208 KiB), which would leave the
     * socket smaller than autotuning makes it. Ask only where the kernel
     * grants the full size. */
    pthread_once(&limits_once, read_limits);
    if (wmem_max >= bytes)
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
    if (rmem_max >= bytes)
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

int tw__net_listen(const struct sockaddr *sa, socklen_t len, int backlog, int *out_fd)
{
    int one = 1, rc;
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
        goto out_close_fd;
    if (sa->sa_family == AF_INET6)
        (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    /* Accepted sockets inherit the listener's buffer sizes; setting them
     * before listen() lets the window scale be negotiated for them. */
    tw__net_set_bufsizes(fd, TW_NET_SOCKBUF_BYTES);
    if (bind(fd, sa, len) < 0)
        goto out_close_fd;
    if (listen(fd, backlog) < 0)
        goto out_close_fd;
    *out_fd = fd;
    return 0;

out_close_fd:
    rc = -errno;
    close(fd);
    return rc;
}

int tw__net_accept(int lfd, int *out_fd, struct sockaddr_storage *peer, socklen_t *peer_len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int fd;
    do {
        fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    (void)tw__net_set_nodelay(fd);
    tw__net_set_bufsizes(fd, TW_NET_SOCKBUF_BYTES);
    if (peer)
        *peer = ss;
    if (peer_len)
        *peer_len = sl;
    *out_fd = fd;
    return 0;
}

int tw__net_connect(const struct sockaddr *sa, socklen_t len, int *out_fd)
{
    int rc;
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    tw__net_set_bufsizes(fd, TW_NET_SOCKBUF_BYTES);
    /* No retry on EINTR: the connect then continues in the background and a
     * second call would fail with EALREADY. Callers see -EINTR. */
    rc = connect(fd, sa, len);
    if (rc < 0)
        goto out_close_fd;
    (void)tw__net_set_nodelay(fd);
    *out_fd = fd;
    return 0;

out_close_fd:
    rc = -errno;
    close(fd);
    return rc;
}

int tw__net_local_addr(int fd, struct sockaddr_storage *out, socklen_t *out_len)
{
    socklen_t sl = sizeof(*out);
    if (getsockname(fd, (struct sockaddr *)out, &sl) < 0)
        return -errno;
    *out_len = sl;
    return 0;
}
